//! The store's one connection, on a thread of its own, with group commit.
//!
//! Every operation is a job sent to this thread. The jobs that queue up while a group runs make
//! the next group: one transaction (`BEGIN IMMEDIATE` as soon as one job writes, so a check and
//! its change stay one atomic step even with other processes on the file), each writing job
//! inside a savepoint of its own (a job that fails is undone alone), one `COMMIT`, and only then
//! the answers. The claims, finishes and link seeds of the pages in flight thus share one
//! transaction, and a caller wakes once per group, where before every statement was a task of
//! the blocking pool and a commit of its own. No answer names a change that a failed commit
//! lost: when the group fails, every job in it gets the group's error.

use super::{DbError, DbResult, sql_error};
use rusqlite::{Connection, ErrorCode};
use std::sync::{Arc, mpsc};
use tokio::sync::oneshot;
use trawl_core::store::{StoreError, StoreResult};

/// Most jobs in one transaction: bounds how long a group holds SQLite's write lock.
const MAX_GROUP: usize = 256;

/// The sending end: cloned by every clone of the store; the thread ends with the last one.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub(super) fn start(conn: Connection) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("trawl-sqlite".to_owned())
            .spawn(move || serve(conn, queue))?;
        Ok(Self { jobs })
    }

    /// Runs `work` in the next group; `writes` when it may change the database.
    pub(super) async fn run<T, F>(
        &self,
        operation: &'static str,
        writes: bool,
        work: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending {
            operation,
            writes,
            work: Some(work),
            result: None,
            reply,
        });
        let gone = || StoreError::backend(operation, "the database thread has stopped");
        self.jobs.send(job).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// Why a whole group failed (its transaction could not begin or commit, or SQLite undid it).
struct GroupFailure {
    message: String,
    retryable: bool,
    /// SQLite's error, shared by every job of the group.
    cause: Option<Arc<rusqlite::Error>>,
}

impl GroupFailure {
    fn of(e: rusqlite::Error) -> Self {
        Self {
            message: e.to_string(),
            retryable: matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ),
            cause: Some(Arc::new(e)),
        }
    }

    fn error(&self, operation: &'static str) -> StoreError {
        let message = self.message.clone();
        let error = if self.retryable {
            StoreError::unavailable(operation, message)
        } else {
            StoreError::backend(operation, message)
        };
        match &self.cause {
            Some(cause) => error.caused_by(Arc::clone(cause)),
            None => error,
        }
    }
}

/// One operation, its result held until its group's fate is known.
trait Job: Send {
    fn writes(&self) -> bool;
    /// Runs the work; false when it failed.
    fn run(&mut self, conn: &Connection) -> bool;
    /// Sends the answer: the work's result, or the group's failure.
    fn answer(self: Box<Self>, failure: Option<&GroupFailure>);
}

impl std::fmt::Debug for dyn Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

struct Pending<T, F> {
    operation: &'static str,
    writes: bool,
    work: Option<F>,
    result: Option<DbResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> DbResult<T> + Send,
{
    fn writes(&self) -> bool {
        self.writes
    }

    fn run(&mut self, conn: &Connection) -> bool {
        let result = match self.work.take() {
            Some(work) => work(conn),
            None => return false,
        };
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn answer(self: Box<Self>, failure: Option<&GroupFailure>) {
        let operation = self.operation;
        let answer = match (failure, self.result) {
            (Some(failure), _) => Err(failure.error(operation)),
            (None, Some(Ok(value))) => Ok(value),
            (None, Some(Err(DbError::Sql(e)))) => Err(sql_error(operation, e)),
            (None, Some(Err(DbError::Store(e)))) => Err(e),
            (None, None) => Err(StoreError::backend(operation, "never ran")),
        };
        // The caller may be gone (its future dropped): then nobody is waiting.
        let _ = self.reply.send(answer);
    }
}

/// The thread: a group per wake-up, until every sender is dropped.
fn serve(mut conn: Connection, queue: mpsc::Receiver<Box<dyn Job>>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let failure = run_group(&mut conn, &mut group).err();
        for job in group {
            job.answer(failure.as_ref());
        }
    }
}

/// Runs a group in one transaction and commits it.
fn run_group(conn: &mut Connection, group: &mut [Box<dyn Job>]) -> Result<(), GroupFailure> {
    let writes = group.iter().any(|job| job.writes());
    let begin = if writes { "BEGIN IMMEDIATE" } else { "BEGIN" };
    conn.execute_batch(begin).map_err(GroupFailure::of)?;
    let ran = group
        .iter_mut()
        .try_for_each(|job| run_job(conn, job.as_mut()));
    let ended = ran.and_then(|()| conn.execute_batch("COMMIT").map_err(GroupFailure::of));
    if ended.is_err() && !conn.is_autocommit() {
        // Best effort: SQLite may have undone it already.
        let _ = conn.execute_batch("ROLLBACK");
    }
    ended
}

/// Runs one job; a writer inside a savepoint, undone alone when it fails.
fn run_job(conn: &Connection, job: &mut dyn Job) -> Result<(), GroupFailure> {
    let statement = |sql: &str| -> Result<(), GroupFailure> {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute([]))
            .map(drop)
            .map_err(GroupFailure::of)
    };
    if !job.writes() {
        job.run(conn);
        return Ok(());
    }
    statement("SAVEPOINT job")?;
    if job.run(conn) {
        return statement("RELEASE job");
    }
    if conn.is_autocommit() {
        // Some errors (a full disk, an I/O error) make SQLite undo the whole transaction: the
        // group's earlier jobs are lost with it.
        return Err(GroupFailure {
            message: "the transaction was rolled back after a failed statement".to_owned(),
            retryable: false,
            cause: None,
        });
    }
    statement("ROLLBACK TO job")?;
    statement("RELEASE job")
}
