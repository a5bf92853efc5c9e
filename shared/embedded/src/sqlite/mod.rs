//! The embedded status store: one SQLite file (WAL) holding crawls and tasks, with the same
//! claim / finish / fencing semantics as the DynamoDB adapter.
//!
//! Every conditional write runs inside `BEGIN IMMEDIATE`, so it holds SQLite's single write lock
//! from its first read: the check and the change are one atomic step even when several processes
//! share the file. A refused claim reads its reason inside the same transaction, so the reason is
//! the one that refused it (DynamoDB gets it from `ReturnValuesOnConditionCheckFailure`).
//!
//! rusqlite is blocking: statements run on tokio's blocking pool, over one connection per store
//! behind a mutex (open several stores on one file for parallel readers).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior,
    named_params, params,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trawl_core::store::{
    ClaimOutcome, ClaimRejection, CrawlStore, FailOutcome, FinishOutcome, Seeded, StatusCounts,
    StoreError, StoreResult, TaskPage, TaskQuery, TaskStore, TaskSummary,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::retry::{Failure, FailureVerdict, RetryPolicy};
use trawl_domain::task::{
    ErrorKind, ErrorRecord, FetchRecord, Lease, Millis, NewTask, Status, Task, push_error,
};

/// `PRAGMA user_version` of the schema below.
const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    crawl_id     TEXT    NOT NULL,
    task_id      TEXT    NOT NULL,
    url          TEXT    NOT NULL,
    status       INTEGER NOT NULL,
    created      INTEGER NOT NULL,
    updated      INTEGER NOT NULL,
    depth        INTEGER NOT NULL,
    parent       TEXT,
    token        INTEGER NOT NULL DEFAULT 0,
    lease_until  INTEGER,
    retries      INTEGER NOT NULL DEFAULT 0,
    next_attempt INTEGER,
    enqueued     INTEGER,
    errors       TEXT    NOT NULL DEFAULT '[]',
    fetch        TEXT,
    next_fetch   INTEGER,
    stale        TEXT    NOT NULL DEFAULT '[]',
    PRIMARY KEY (crawl_id, task_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (crawl_id, status, updated, task_id);
CREATE TABLE IF NOT EXISTS crawls (
    id             TEXT    PRIMARY KEY NOT NULL,
    config         TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    created        INTEGER NOT NULL,
    updated        INTEGER NOT NULL,
    generation     INTEGER NOT NULL,
    pages_reserved INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS crawls_by_state ON crawls (state, id);
";

const TASK_COLUMNS: &str = "crawl_id, task_id, url, status, created, updated, depth, parent, \
     token, lease_until, retries, next_attempt, enqueued, errors, fetch";

const CRAWL_COLUMNS: &str = "id, config, state, created, updated, generation, pages_reserved";

/// Marks cursors this store issued (and versions their format).
const CURSOR_TAG: &str = "sqlite1";

/// The SQLite status store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    calls: Arc<CallCounts>,
}

/// An error inside a blocking closure, before it is tied to its operation.
enum DbError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sql(e)
    }
}

impl From<StoreError> for DbError {
    fn from(e: StoreError) -> Self {
        DbError::Store(e)
    }
}

type DbResult<T> = Result<T, DbError>;

fn sql_error(operation: &'static str, e: rusqlite::Error) -> StoreError {
    let message = e.to_string();
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable { operation, message }
        }
        _ => StoreError::Backend { operation, message },
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path`: WAL journal, `synchronous=NORMAL`, a
    /// busy timeout, and the schema created or checked.
    pub fn open(path: impl AsRef<Path>, calls: Arc<CallCounts>) -> StoreResult<Self> {
        Self::open_with(path, OpenFlags::default(), calls)
    }

    /// Opens the database at `path` only if it exists (commands that only read must not create
    /// one): a missing file is an error, not an empty store.
    pub fn open_existing(path: impl AsRef<Path>, calls: Arc<CallCounts>) -> StoreResult<Self> {
        Self::open_with(
            path,
            OpenFlags::default().difference(OpenFlags::SQLITE_OPEN_CREATE),
            calls,
        )
    }

    fn open_with(
        path: impl AsRef<Path>,
        flags: OpenFlags,
        calls: Arc<CallCounts>,
    ) -> StoreResult<Self> {
        let open = |e| sql_error("open", e);
        let conn = Connection::open_with_flags(path, flags).map_err(open)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(open)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Backend {
                operation: "open",
                message: format!("cannot use WAL journal (got {mode})"),
            });
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        Self::with_schema(conn, calls)
    }

    /// A private database in memory (tests, throwaway runs).
    pub fn in_memory(calls: Arc<CallCounts>) -> StoreResult<Self> {
        let conn = Connection::open_in_memory().map_err(|e| sql_error("open", e))?;
        Self::with_schema(conn, calls)
    }

    fn with_schema(mut conn: Connection, calls: Arc<CallCounts>) -> StoreResult<Self> {
        let schema = |e| sql_error("schema", e);
        // Immediate: two processes opening a fresh file must not both create the schema.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(schema)?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(schema)?;
        match version {
            0 => {
                tx.execute_batch(SCHEMA).map_err(schema)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(schema)?;
            }
            SCHEMA_VERSION => {}
            other => {
                return Err(StoreError::Backend {
                    operation: "schema",
                    message: format!(
                        "database schema version {other}, this trawl knows {SCHEMA_VERSION}"
                    ),
                });
            }
        }
        tx.commit().map_err(schema)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            calls,
        })
    }

    /// Runs `work` on the blocking pool with the connection, counting one `call`.
    async fn run<T, F>(&self, operation: &'static str, call: Call, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> DbResult<T> + Send + 'static,
    {
        self.calls.record(call);
        let conn = Arc::clone(&self.conn);
        let joined = tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().map_err(|_| {
                DbError::Store(StoreError::Backend {
                    operation,
                    message: "connection lock poisoned by a panicked statement".to_owned(),
                })
            })?;
            work(&mut guard)
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(DbError::Sql(e))) => Err(sql_error(operation, e)),
            Ok(Err(DbError::Store(e))) => Err(e),
            Err(e) => Err(StoreError::Backend {
                operation,
                message: format!("blocking task failed: {e}"),
            }),
        }
    }
}

fn immediate(conn: &mut Connection) -> rusqlite::Result<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
}

fn code(status: Status) -> i64 {
    i64::from(status.code())
}

/// Tokens are stored as i64; one that does not fit can match no stored row.
fn token_param(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(-1)
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Backend {
        operation: what,
        message: format!("cannot encode: {e}"),
    })
}

fn corrupt(key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn decode<T: DeserializeOwned>(key: &str, field: &str, json: &str) -> StoreResult<T> {
    serde_json::from_str(json).map_err(|e| corrupt(key, format!("{field}: {e}")))
}

fn status_of(key: &str, raw: i64) -> StoreResult<Status> {
    u8::try_from(raw)
        .ok()
        .and_then(Status::from_code)
        .ok_or_else(|| corrupt(key, format!("unknown status code {raw}")))
}

fn number<T: TryFrom<i64>>(key: &str, field: &str, raw: i64) -> StoreResult<T> {
    T::try_from(raw).map_err(|_| corrupt(key, format!("{field} out of range: {raw}")))
}

fn crawl_id_of(key: &str, raw: &str) -> StoreResult<CrawlId> {
    CrawlId::parse(raw).map_err(|e| corrupt(key, e.to_string()))
}

fn task_id_of(key: &str, raw: &str) -> StoreResult<TaskId> {
    TaskId::parse(raw).ok_or_else(|| corrupt(key, format!("bad task id {raw:?}")))
}

/// A `tasks` row as SQLite returns it, before validation.
struct TaskRow {
    crawl_id: String,
    task_id: String,
    url: String,
    status: i64,
    created: i64,
    updated: i64,
    depth: i64,
    parent: Option<String>,
    token: i64,
    lease_until: Option<i64>,
    retries: i64,
    next_attempt: Option<i64>,
    enqueued: Option<i64>,
    errors: String,
    fetch: Option<String>,
}

impl TaskRow {
    /// Reads the columns of `TASK_COLUMNS`, in order.
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            crawl_id: row.get(0)?,
            task_id: row.get(1)?,
            url: row.get(2)?,
            status: row.get(3)?,
            created: row.get(4)?,
            updated: row.get(5)?,
            depth: row.get(6)?,
            parent: row.get(7)?,
            token: row.get(8)?,
            lease_until: row.get(9)?,
            retries: row.get(10)?,
            next_attempt: row.get(11)?,
            enqueued: row.get(12)?,
            errors: row.get(13)?,
            fetch: row.get(14)?,
        })
    }

    fn into_task(self) -> StoreResult<Task> {
        let key = format!("{}/{}", self.crawl_id, self.task_id);
        let key = key.as_str();
        Ok(Task {
            crawl_id: crawl_id_of(key, &self.crawl_id)?,
            task_id: task_id_of(key, &self.task_id)?,
            url: self.url,
            status: status_of(key, self.status)?,
            created_at: self.created,
            updated_at: self.updated,
            depth: number(key, "depth", self.depth)?,
            parent: self
                .parent
                .as_deref()
                .map(|p| task_id_of(key, p))
                .transpose()?,
            token: number(key, "token", self.token)?,
            lease_expires_at: self.lease_until,
            retries: number(key, "retries", self.retries)?,
            next_attempt_at: self.next_attempt,
            enqueued_at: self.enqueued,
            errors: decode(key, "errors", &self.errors)?,
            fetch: self
                .fetch
                .as_deref()
                .map(|f| decode(key, "fetch", f))
                .transpose()?,
        })
    }
}

fn select_task(conn: &Connection, crawl_id: &str, task_id: &str) -> DbResult<Option<Task>> {
    let row = conn
        .query_row(
            &format!("SELECT {TASK_COLUMNS} FROM tasks WHERE crawl_id = ?1 AND task_id = ?2"),
            params![crawl_id, task_id],
            TaskRow::read,
        )
        .optional()?;
    Ok(row.map(TaskRow::into_task).transpose()?)
}

/// Why a claim found nothing to update, read inside the claim's transaction.
fn claim_rejection(
    tx: &Transaction<'_>,
    crawl_id: &str,
    task_id: &str,
) -> DbResult<ClaimRejection> {
    let key = format!("{crawl_id}/{task_id}");
    let row: Option<(i64, Option<i64>, Option<i64>)> = tx
        .query_row(
            "SELECT status, lease_until, next_attempt FROM tasks
             WHERE crawl_id = ?1 AND task_id = ?2",
            params![crawl_id, task_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((status, lease_until, next_attempt)) = row else {
        return Ok(ClaimRejection::Missing);
    };
    let status = status_of(&key, status)?;
    let rejection = match (status, lease_until, next_attempt) {
        (Status::InProgress, Some(until), _) => ClaimRejection::Leased { until },
        (Status::Failed, _, Some(at)) => ClaimRejection::NotDue { at },
        (done, _, _) if done.is_terminal() => ClaimRejection::Done(done),
        (other, _, _) => {
            // Unreachable under the write lock unless a row lost its lease or retry time.
            return Err(corrupt(&key, format!("{other} task refused a claim")).into());
        }
    };
    Ok(rejection)
}

/// A cursor for the page after the task at (`updated`, `task_id`).
fn encode_cursor(updated: Millis, task_id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}:{updated}:{task_id}"))
}

fn decode_cursor(cursor: &str) -> StoreResult<(Millis, String)> {
    let raw = URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| StoreError::InvalidCursor)?;
    let raw = String::from_utf8(raw).map_err(|_| StoreError::InvalidCursor)?;
    let rest = raw
        .strip_prefix(CURSOR_TAG)
        .and_then(|r| r.strip_prefix(':'))
        .ok_or(StoreError::InvalidCursor)?;
    let (updated, task_id) = rest.split_once(':').ok_or(StoreError::InvalidCursor)?;
    let updated = updated.parse().map_err(|_| StoreError::InvalidCursor)?;
    let task_id = TaskId::parse(task_id).ok_or(StoreError::InvalidCursor)?;
    Ok((updated, task_id.as_str().to_owned()))
}

fn summary_of(row: &Row<'_>) -> rusqlite::Result<SummaryRow> {
    Ok(SummaryRow {
        crawl_id: row.get(0)?,
        task_id: row.get(1)?,
        url: row.get(2)?,
        status: row.get(3)?,
        updated: row.get(4)?,
        depth: row.get(5)?,
        retries: row.get(6)?,
        lease_until: row.get(7)?,
        next_attempt: row.get(8)?,
        next_fetch: row.get(9)?,
        enqueued: row.get(10)?,
    })
}

/// The status index's projection of a task, as SQLite returns it.
struct SummaryRow {
    crawl_id: String,
    task_id: String,
    url: String,
    status: i64,
    updated: i64,
    depth: i64,
    retries: i64,
    lease_until: Option<i64>,
    next_attempt: Option<i64>,
    next_fetch: Option<i64>,
    enqueued: Option<i64>,
}

impl SummaryRow {
    fn into_summary(self) -> StoreResult<TaskSummary> {
        let key = format!("{}/{}", self.crawl_id, self.task_id);
        let key = key.as_str();
        Ok(TaskSummary {
            crawl_id: crawl_id_of(key, &self.crawl_id)?,
            task_id: task_id_of(key, &self.task_id)?,
            url: self.url,
            status: status_of(key, self.status)?,
            updated_at: self.updated,
            depth: number(key, "depth", self.depth)?,
            retries: number(key, "retries", self.retries)?,
            lease_expires_at: self.lease_until,
            next_attempt_at: self.next_attempt,
            next_fetch_at: self.next_fetch,
            enqueued_at: self.enqueued,
        })
    }
}

/// A `crawls` row as SQLite returns it.
struct CrawlRow {
    id: String,
    config: String,
    state: String,
    created: i64,
    updated: i64,
    generation: i64,
    pages_reserved: i64,
}

impl CrawlRow {
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            config: row.get(1)?,
            state: row.get(2)?,
            created: row.get(3)?,
            updated: row.get(4)?,
            generation: row.get(5)?,
            pages_reserved: row.get(6)?,
        })
    }

    fn into_crawl(self) -> StoreResult<Crawl> {
        let key = format!("crawl {}", self.id);
        let key = key.as_str();
        let state = match self.state.as_str() {
            "running" => CrawlState::Running,
            "completed" => CrawlState::Completed,
            other => return Err(corrupt(key, format!("unknown crawl state {other:?}"))),
        };
        Ok(Crawl {
            id: crawl_id_of(key, &self.id)?,
            config: decode::<CrawlConfig>(key, "config", &self.config)?,
            state,
            created_at: self.created,
            updated_at: self.updated,
            generation: number(key, "generation", self.generation)?,
            pages_reserved: number(key, "pages_reserved", self.pages_reserved)?,
        })
    }
}

fn select_crawl(conn: &Connection, id: &str) -> DbResult<Option<Crawl>> {
    let row = conn
        .query_row(
            &format!("SELECT {CRAWL_COLUMNS} FROM crawls WHERE id = ?1"),
            params![id],
            CrawlRow::read,
        )
        .optional()?;
    Ok(row.map(CrawlRow::into_crawl).transpose()?)
}

impl CrawlStore for SqliteStore {
    async fn create_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        let id = crawl.id.as_str().to_owned();
        let config = encode("create_crawl", &crawl.config)?;
        let state = crawl.state.name();
        let (created_at, updated_at) = (crawl.created_at, crawl.updated_at);
        let generation = saturating_i64(crawl.generation);
        let reserved = saturating_i64(crawl.pages_reserved);
        self.run("create_crawl", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let created = tx.execute(
                &format!("INSERT OR IGNORE INTO crawls ({CRAWL_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                params![id, config, state, created_at, updated_at, generation, reserved],
            )? == 1;
            let stored = select_crawl(&tx, &id)?
                .ok_or_else(|| corrupt(&id, "crawl vanished inside its own transaction"))?;
            tx.commit()?;
            Ok((stored, created))
        })
        .await
    }

    async fn get_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        let id = id.as_str().to_owned();
        self.run("get_crawl", Call::SqliteRead, move |conn| {
            select_crawl(conn, &id)
        })
        .await
    }

    async fn list_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        self.run("list_crawls", Call::SqliteRead, move |conn| {
            let rows = match state {
                Some(state) => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {CRAWL_COLUMNS} FROM crawls WHERE state = ?1 ORDER BY id"
                    ))?;
                    stmt.query_map(params![state.name()], CrawlRow::read)?
                        .collect::<rusqlite::Result<Vec<_>>>()?
                }
                None => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {CRAWL_COLUMNS} FROM crawls ORDER BY id"
                    ))?;
                    stmt.query_map([], CrawlRow::read)?
                        .collect::<rusqlite::Result<Vec<_>>>()?
                }
            };
            Ok(rows
                .into_iter()
                .map(CrawlRow::into_crawl)
                .collect::<StoreResult<Vec<_>>>()?)
        })
        .await
    }

    async fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        now: Millis,
    ) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let generation = saturating_i64(generation);
        self.run("complete_crawl", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET state = 'completed', updated = ?3
                 WHERE id = ?1 AND state = 'running' AND generation = ?2",
                params![id, generation, now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn reopen_crawl(&self, id: &CrawlId, now: Millis) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        self.run("reopen_crawl", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET state = 'running', generation = generation + 1, updated = ?2
                 WHERE id = ?1 AND state = 'completed'",
                params![id, now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn reserve_pages(&self, id: &CrawlId, wanted: u64, max: u64) -> StoreResult<u64> {
        let crawl_id = id.clone();
        let id = id.as_str().to_owned();
        self.run("reserve_pages", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let reserved: Option<i64> = tx
                .query_row(
                    "SELECT pages_reserved FROM crawls WHERE id = ?1",
                    params![id],
                    |r| r.get(0),
                )
                .optional()?;
            let reserved: u64 = match reserved {
                Some(n) => number(&id, "pages_reserved", n)?,
                None => return Err(StoreError::NoSuchCrawl(crawl_id).into()),
            };
            let granted = wanted.min(max.saturating_sub(reserved));
            if granted > 0 {
                tx.execute(
                    "UPDATE crawls SET pages_reserved = ?2 WHERE id = ?1",
                    params![id, saturating_i64(reserved + granted)],
                )?;
            }
            tx.commit()?;
            Ok(granted)
        })
        .await
    }

    async fn release_pages(&self, id: &CrawlId, n: u64) -> StoreResult<()> {
        let crawl_id = id.clone();
        let id = id.as_str().to_owned();
        let n = saturating_i64(n);
        self.run("release_pages", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET pages_reserved = MAX(pages_reserved - ?2, 0) WHERE id = ?1",
                params![id, n],
            )?;
            if changed == 0 {
                return Err(StoreError::NoSuchCrawl(crawl_id).into());
            }
            Ok(())
        })
        .await
    }

    async fn delete_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        let id = id.as_str().to_owned();
        self.run("delete_crawl", Call::SqliteWrite, move |conn| {
            conn.execute("DELETE FROM crawls WHERE id = ?1", params![id])?;
            Ok(())
        })
        .await
    }
}

impl TaskStore for SqliteStore {
    async fn seed(
        &self,
        crawl_id: &CrawlId,
        tasks: &[NewTask],
        now: Millis,
    ) -> StoreResult<Vec<Seeded>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let crawl = crawl_id.as_str().to_owned();
        let rows: Vec<(String, String, u32, Option<String>)> = tasks
            .iter()
            .map(|t| {
                (
                    t.url.task_id().as_str().to_owned(),
                    t.url.as_str().to_owned(),
                    t.depth,
                    t.parent.as_ref().map(|p| p.as_str().to_owned()),
                )
            })
            .collect();
        self.run("seed", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let mut results = Vec::with_capacity(rows.len());
            {
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO tasks (crawl_id, task_id, url, status, created, updated, depth, parent)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7)",
                )?;
                for (task_id, url, depth, parent) in &rows {
                    let inserted = insert.execute(params![
                        crawl,
                        task_id,
                        url,
                        code(Status::Pending),
                        now,
                        depth,
                        parent
                    ])?;
                    results.push(if inserted == 1 {
                        Seeded::Created
                    } else {
                        Seeded::AlreadyKnown
                    });
                }
            }
            tx.commit()?;
            Ok(results)
        })
        .await
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        self.run("get", Call::SqliteRead, move |conn| {
            select_task(conn, &crawl, &task)
        })
        .await
    }

    async fn claim(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> StoreResult<ClaimOutcome> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        let until = now.saturating_add(saturating_i64(lease_ms));
        self.run("claim", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let claimed = tx
                .query_row(
                    &format!(
                        "UPDATE tasks SET status = :in_progress, token = token + 1,
                             lease_until = :until, updated = :now
                         WHERE crawl_id = :crawl AND task_id = :task AND (
                             status = :pending
                             OR (status = :failed AND next_attempt <= :now)
                             OR (status = :in_progress AND lease_until <= :now))
                         RETURNING {TASK_COLUMNS}"
                    ),
                    named_params! {
                        ":in_progress": code(Status::InProgress),
                        ":pending": code(Status::Pending),
                        ":failed": code(Status::Failed),
                        ":until": until,
                        ":now": now,
                        ":crawl": crawl,
                        ":task": task,
                    },
                    TaskRow::read,
                )
                .optional()?;
            let outcome = match claimed {
                Some(row) => {
                    let task = row.into_task()?;
                    let lease = Lease {
                        crawl_id: task.crawl_id.clone(),
                        task_id: task.task_id.clone(),
                        token: task.token,
                        expires_at: until,
                        retries: task.retries,
                        errors: task.errors.clone(),
                    };
                    ClaimOutcome::Claimed {
                        task: Box::new(task),
                        lease,
                    }
                }
                None => ClaimOutcome::Rejected(claim_rejection(&tx, &crawl, &task)?),
            };
            tx.commit()?;
            Ok(outcome)
        })
        .await
    }

    async fn finish(
        &self,
        lease: &Lease,
        record: &FetchRecord,
        now: Millis,
    ) -> StoreResult<FinishOutcome> {
        let crawl = lease.crawl_id.as_str().to_owned();
        let task = lease.task_id.as_str().to_owned();
        let token = token_param(lease.token);
        let fetch = encode("finish", record)?;
        let next_fetch = record.next_fetch_at;
        self.run("finish", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let held: Option<(Option<String>, String)> = tx
                .query_row(
                    "SELECT fetch, stale FROM tasks
                     WHERE crawl_id = ?1 AND task_id = ?2 AND token = ?3 AND status = ?4",
                    params![crawl, task, token, code(Status::InProgress)],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((previous, stale)) = held else {
                let current = select_task(&tx, &crawl, &task)?;
                return Ok(FinishOutcome::Rejected { current });
            };
            let key = format!("{crawl}/{task}");
            let replaced: Option<FetchRecord> = previous
                .as_deref()
                .map(|p| decode(&key, "fetch", p))
                .transpose()?;
            let stale: Vec<String> = decode(&key, "stale", &stale)?;
            tx.execute(
                "UPDATE tasks SET status = ?4, fetch = ?5, next_fetch = ?6, retries = 0,
                     lease_until = NULL, next_attempt = NULL, stale = '[]', updated = ?7
                 WHERE crawl_id = ?1 AND task_id = ?2 AND token = ?3",
                params![
                    crawl,
                    task,
                    token,
                    code(Status::Succeeded),
                    fetch,
                    next_fetch,
                    now
                ],
            )?;
            tx.commit()?;
            Ok(FinishOutcome::Finished { replaced, stale })
        })
        .await
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        now: Millis,
    ) -> StoreResult<FailOutcome> {
        let crawl = lease.crawl_id.as_str().to_owned();
        let task = lease.task_id.as_str().to_owned();
        let token = token_param(lease.token);
        let mut errors = lease.errors.clone();
        push_error(
            &mut errors,
            ErrorRecord::new(failure.kind, &failure.message, now),
        );
        let errors = encode("fail", &errors)?;
        // `retries` counts transient failures: a permanent one leaves it as it was.
        let retries = if failure.kind.is_transient() {
            lease.retries.saturating_add(1)
        } else {
            lease.retries
        };
        let (status, next_attempt, outcome) = match policy.verdict(failure, lease.retries, now) {
            FailureVerdict::Retry { next_attempt_at } => (
                Status::Failed,
                Some(next_attempt_at),
                FailOutcome::Retrying { next_attempt_at },
            ),
            FailureVerdict::GiveUp => {
                let status = if failure.kind == ErrorKind::NotFound {
                    Status::Gone
                } else {
                    Status::Ignored
                };
                (status, None, FailOutcome::GaveUp { status })
            }
        };
        self.run("fail", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE tasks SET status = ?5, retries = ?6, next_attempt = ?7, errors = ?8,
                     lease_until = NULL, updated = ?9
                 WHERE crawl_id = ?1 AND task_id = ?2 AND token = ?3 AND status = ?4",
                params![
                    crawl,
                    task,
                    token,
                    code(Status::InProgress),
                    code(status),
                    retries,
                    next_attempt,
                    errors,
                    now
                ],
            )?;
            Ok(if changed == 1 {
                outcome
            } else {
                FailOutcome::Rejected
            })
        })
        .await
    }

    async fn release(&self, lease: &Lease, now: Millis) -> StoreResult<bool> {
        let crawl = lease.crawl_id.as_str().to_owned();
        let task = lease.task_id.as_str().to_owned();
        let token = token_param(lease.token);
        self.run("release", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE tasks SET status = ?5, lease_until = NULL, updated = ?6
                 WHERE crawl_id = ?1 AND task_id = ?2 AND token = ?3 AND status = ?4",
                params![
                    crawl,
                    task,
                    token,
                    code(Status::InProgress),
                    code(Status::Pending),
                    now
                ],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> StoreResult<bool> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        let md5 = md5.to_owned();
        self.run("add_stale", Call::SqliteWrite, move |conn| {
            let tx = immediate(conn)?;
            let row: Option<(Option<String>, String)> = tx
                .query_row(
                    "SELECT fetch, stale FROM tasks WHERE crawl_id = ?1 AND task_id = ?2",
                    params![crawl, task],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            // A vanished task has no current pointer: the object is not one to keep.
            let Some((fetch, stale)) = row else {
                return Ok(true);
            };
            let key = format!("{crawl}/{task}");
            let current: Option<FetchRecord> = fetch
                .as_deref()
                .map(|f| decode(&key, "fetch", f))
                .transpose()?;
            if current.and_then(|f| f.md5).as_deref() == Some(md5.as_str()) {
                return Ok(false);
            }
            let mut stale: Vec<String> = decode(&key, "stale", &stale)?;
            if !stale.contains(&md5) {
                stale.push(md5);
                tx.execute(
                    "UPDATE tasks SET stale = ?3 WHERE crawl_id = ?1 AND task_id = ?2",
                    params![crawl, task, encode("add_stale", &stale)?],
                )?;
            }
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> StoreResult<bool> {
        if from.is_empty() {
            return Ok(false);
        }
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        // Status codes come from the enum, never from input: safe to inline.
        let from = from
            .iter()
            .map(|s| s.code().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        self.run("reschedule", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                &format!(
                    "UPDATE tasks SET status = ?3, retries = 0, lease_until = NULL,
                         next_attempt = NULL, updated = ?4
                     WHERE crawl_id = ?1 AND task_id = ?2 AND status IN ({from})"
                ),
                params![crawl, task, code(Status::Pending), now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn mark_enqueued(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        status: Status,
        now: Millis,
    ) -> StoreResult<bool> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        self.run("mark_enqueued", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE tasks SET enqueued = ?4, updated = ?4
                 WHERE crawl_id = ?1 AND task_id = ?2 AND status = ?3",
                params![crawl, task, code(status), now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        let (after_updated, after_task) = match &query.cursor {
            Some(cursor) => decode_cursor(cursor)?,
            None => (Millis::MIN, String::new()),
        };
        let crawl = query.crawl_id.as_str().to_owned();
        let status = code(query.status);
        let before = query.updated_before.unwrap_or(Millis::MAX);
        let limit = query.limit.max(1) as usize;
        self.run("query", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT crawl_id, task_id, url, status, updated, depth, retries, lease_until,
                        next_attempt, next_fetch, enqueued
                 FROM tasks
                 WHERE crawl_id = :crawl AND status = :status AND updated <= :before
                   AND (updated, task_id) > (:after_updated, :after_task)
                 ORDER BY updated, task_id
                 LIMIT :fetch",
            )?;
            // One row more than the page tells whether another page follows.
            let rows = stmt
                .query_map(
                    named_params! {
                        ":crawl": crawl,
                        ":status": status,
                        ":before": before,
                        ":after_updated": after_updated,
                        ":after_task": after_task,
                        ":fetch": saturating_i64(limit as u64 + 1),
                    },
                    summary_of,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let more = rows.len() > limit;
            let tasks = rows
                .into_iter()
                .take(limit)
                .map(SummaryRow::into_summary)
                .collect::<StoreResult<Vec<_>>>()?;
            let cursor = match tasks.last() {
                Some(last) if more => Some(encode_cursor(last.updated_at, last.task_id.as_str())),
                _ => None,
            };
            Ok(TaskPage { tasks, cursor })
        })
        .await
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("counts", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT status, COUNT(*) FROM tasks WHERE crawl_id = ?1 GROUP BY status",
            )?;
            let rows = stmt
                .query_map(params![crawl], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut counts = StatusCounts::new();
            for (status, n) in rows {
                counts.insert(status_of(&crawl, status)?, number(&crawl, "count", n)?);
            }
            Ok(counts)
        })
        .await
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("delete_tasks", Call::SqliteWrite, move |conn| {
            let deleted = conn.execute("DELETE FROM tasks WHERE crawl_id = ?1", params![crawl])?;
            Ok(deleted as u64)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::task::ERROR_HISTORY;

    /// A directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "trawl-sqlite-{name}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn db(&self) -> PathBuf {
            self.0.join("trawl.db")
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const T0: Millis = 1_700_000_000_000;

    fn crawl_id() -> CrawlId {
        CrawlId::parse("c1").unwrap()
    }

    fn new_task(n: usize) -> NewTask {
        NewTask {
            url: CanonicalUrl::parse(&format!("http://example.com/page/{n}")).unwrap(),
            depth: 1,
            parent: None,
        }
    }

    fn store() -> SqliteStore {
        SqliteStore::in_memory(Arc::new(CallCounts::default())).unwrap()
    }

    fn record(md5: &str, at: Millis) -> FetchRecord {
        FetchRecord {
            object_key: Some(format!("crawl=c1/md5={md5}")),
            md5: Some(md5.to_owned()),
            http_status: 200,
            content_type: Some("text/html".to_owned()),
            content_length: 42,
            etag: Some(format!("\"{md5}\"")),
            fetched_at: at,
            next_fetch_at: Some(at + 86_400_000),
            ..FetchRecord::default()
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retry: 3,
            base_delay_ms: 1_000,
            max_delay_ms: 60_000,
        }
    }

    async fn claim(store: &SqliteStore, task: &TaskId, lease_ms: u64, now: Millis) -> Lease {
        match store.claim(&crawl_id(), task, lease_ms, now).await.unwrap() {
            ClaimOutcome::Claimed { lease, .. } => lease,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    async fn seeded_task(store: &SqliteStore, n: usize) -> TaskId {
        let task = new_task(n);
        store
            .seed(&crawl_id(), std::slice::from_ref(&task), T0)
            .await
            .unwrap();
        task.url.task_id()
    }

    #[tokio::test]
    async fn reseeding_never_resets_or_duplicates_a_task() {
        // GIVEN two seeded tasks, one of them finished
        let store = store();
        let (a, b) = (new_task(1), new_task(2));
        let first = store
            .seed(&crawl_id(), &[a.clone(), b.clone()], T0)
            .await
            .unwrap();
        assert_eq!(first, [Seeded::Created, Seeded::Created]);
        let lease = claim(&store, &a.url.task_id(), 60_000, T0 + 1).await;
        store
            .finish(&lease, &record("aa", T0 + 2), T0 + 2)
            .await
            .unwrap();

        // WHEN both are seeded again, with a new one and a duplicate in the same batch
        let (c, c_again) = (new_task(3), new_task(3));
        let again = store
            .seed(&crawl_id(), &[b, a.clone(), c, c_again], T0 + 10)
            .await
            .unwrap();

        // THEN only the new URL is created, and the finished task keeps its result
        assert_eq!(
            again,
            [
                Seeded::AlreadyKnown,
                Seeded::AlreadyKnown,
                Seeded::Created,
                Seeded::AlreadyKnown
            ]
        );
        let kept = store
            .get(&crawl_id(), &a.url.task_id())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kept.status, Status::Succeeded);
        assert_eq!(kept.fetch, Some(record("aa", T0 + 2)));
        assert_eq!(kept.created_at, T0);
        assert_eq!(kept.token, 1);
        let counts = store.counts(&crawl_id()).await.unwrap();
        assert_eq!(counts.get(&Status::Pending), Some(&2));
        assert_eq!(counts.get(&Status::Succeeded), Some(&1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_concurrent_claimers_exactly_one_wins() {
        // GIVEN one pending task in a file database, and 8 workers with their own connections
        let dir = TempDir::new("claim-race");
        let calls = Arc::new(CallCounts::default());
        let seeder = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let task = seeded_task(&seeder, 1).await;

        // WHEN all 8 claim it at once
        let mut workers = Vec::new();
        for _ in 0..8 {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            let task = task.clone();
            workers.push(tokio::spawn(async move {
                store
                    .claim(&crawl_id(), &task, 60_000, T0 + 5)
                    .await
                    .unwrap()
            }));
        }
        let mut outcomes = Vec::new();
        for worker in workers {
            outcomes.push(worker.await.unwrap());
        }

        // THEN exactly one holds the lease, and every other was told who does
        let winners: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                ClaimOutcome::Claimed { lease, .. } => Some(lease.clone()),
                ClaimOutcome::Rejected(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{outcomes:?}");
        assert_eq!(winners[0].token, 1);
        let losers = outcomes
            .iter()
            .filter(|o| {
                **o == ClaimOutcome::Rejected(ClaimRejection::Leased {
                    until: T0 + 5 + 60_000,
                })
            })
            .count();
        assert_eq!(losers, 7);
        assert_eq!(calls.get(Call::SqliteWrite), 1 + 8);
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_and_the_old_holder_cannot_overwrite() {
        // GIVEN a task claimed by worker A with a 1 s lease
        let store = store();
        let task = seeded_task(&store, 1).await;
        let old = claim(&store, &task, 1_000, T0).await;

        // WHEN B tries while the lease lives, then again once it expired, and finishes
        let early = store
            .claim(&crawl_id(), &task, 1_000, T0 + 999)
            .await
            .unwrap();
        let new = claim(&store, &task, 1_000, T0 + 1_000).await;
        let finished = store
            .finish(&new, &record("bb", T0 + 1_100), T0 + 1_100)
            .await
            .unwrap();

        // THEN only the expired lease could be taken, and A's writes are all refused
        assert_eq!(
            early,
            ClaimOutcome::Rejected(ClaimRejection::Leased { until: T0 + 1_000 })
        );
        assert_eq!((old.token, new.token), (1, 2));
        assert_eq!(
            finished,
            FinishOutcome::Finished {
                replaced: None,
                stale: vec![]
            }
        );
        let zombie = store
            .finish(&old, &record("aa", T0 + 1_200), T0 + 1_200)
            .await
            .unwrap();
        let FinishOutcome::Rejected {
            current: Some(current),
        } = zombie
        else {
            panic!("zombie finish accepted: {zombie:?}");
        };
        assert_eq!(current.fetch, Some(record("bb", T0 + 1_100)));
        let failure = Failure::from_http_status(500, None);
        let zombie_fail = store
            .fail(&old, &failure, &policy(), T0 + 1_200)
            .await
            .unwrap();
        assert_eq!(zombie_fail, FailOutcome::Rejected);
        assert!(!store.release(&old, T0 + 1_200).await.unwrap());
        let stored = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(stored.status, Status::Succeeded);
        assert_eq!(stored.fetch, Some(record("bb", T0 + 1_100)));
        assert_eq!(stored.updated_at, T0 + 1_100);
    }

    #[tokio::test]
    async fn stale_objects_are_handed_to_the_next_finish_unless_current() {
        // GIVEN a finished task whose zombie writer left object "aa" behind
        let store = store();
        let task = seeded_task(&store, 1).await;
        let lease = claim(&store, &task, 1_000, T0).await;
        store
            .finish(&lease, &record("bb", T0 + 1), T0 + 1)
            .await
            .unwrap();

        // WHEN the zombie reports "aa" (twice) and the current "bb", then a recrawl finishes
        let added = store.add_stale(&crawl_id(), &task, "aa").await.unwrap();
        let again = store.add_stale(&crawl_id(), &task, "aa").await.unwrap();
        let current = store.add_stale(&crawl_id(), &task, "bb").await.unwrap();
        assert!(
            store
                .reschedule(&crawl_id(), &task, &[Status::Succeeded], T0 + 2)
                .await
                .unwrap()
        );
        let recrawl = claim(&store, &task, 1_000, T0 + 3).await;
        let finished = store
            .finish(&recrawl, &record("cc", T0 + 4), T0 + 4)
            .await
            .unwrap();

        // THEN only "aa" is handed back (once), with the record it replaced, and the list is cleared
        assert!(added && again && !current);
        assert_eq!(
            finished,
            FinishOutcome::Finished {
                replaced: Some(record("bb", T0 + 1)),
                stale: vec!["aa".to_owned()]
            }
        );
        // AND a later finish has nothing left to clean
        store
            .reschedule(&crawl_id(), &task, &[Status::Succeeded], T0 + 5)
            .await
            .unwrap();
        let recrawl2 = claim(&store, &task, 1_000, T0 + 6).await;
        let FinishOutcome::Finished { stale, .. } = store
            .finish(&recrawl2, &record("cc", T0 + 7), T0 + 7)
            .await
            .unwrap()
        else {
            panic!("finish rejected");
        };
        assert!(stale.is_empty());
    }

    #[tokio::test]
    async fn transient_failures_back_off_then_give_up_at_max_retry() {
        // GIVEN a claimed task and a policy of 3 tries with a 1 s base delay
        let store = store();
        let task = seeded_task(&store, 1).await;
        let failure = Failure::from_http_status(503, None);
        let lease = claim(&store, &task, 60_000, T0).await;

        // WHEN it fails transiently
        let FailOutcome::Retrying { next_attempt_at } =
            store.fail(&lease, &failure, &policy(), T0).await.unwrap()
        else {
            panic!("expected a retry");
        };

        // THEN it waits 0.5–1 s, refuses claims before then, and is claimable after
        assert!((T0 + 500..=T0 + 1_000).contains(&next_attempt_at));
        let failed = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(
            (failed.status, failed.retries, failed.lease_expires_at),
            (Status::Failed, 1, None)
        );
        assert_eq!(
            store
                .claim(&crawl_id(), &task, 60_000, next_attempt_at - 1)
                .await
                .unwrap(),
            ClaimOutcome::Rejected(ClaimRejection::NotDue {
                at: next_attempt_at
            })
        );
        let second = claim(&store, &task, 60_000, next_attempt_at).await;
        assert_eq!(second.retries, 1);
        assert_eq!(second.errors.len(), 1);

        // AND after the second retry is used up, the third failure gives up
        let FailOutcome::Retrying {
            next_attempt_at: t2,
        } = store
            .fail(&second, &failure, &policy(), next_attempt_at)
            .await
            .unwrap()
        else {
            panic!("expected a second retry");
        };
        assert!((next_attempt_at + 1_000..=next_attempt_at + 2_000).contains(&t2));
        let third = claim(&store, &task, 60_000, t2).await;
        assert_eq!(
            store.fail(&third, &failure, &policy(), t2).await.unwrap(),
            FailOutcome::GaveUp {
                status: Status::Ignored
            }
        );
        assert_eq!(
            store
                .claim(&crawl_id(), &task, 60_000, t2 + 10_000_000)
                .await
                .unwrap(),
            ClaimOutcome::Rejected(ClaimRejection::Done(Status::Ignored))
        );
        let ignored = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!((ignored.retries, ignored.next_attempt_at), (3, None));
        assert_eq!(ignored.errors.len(), 3);
    }

    #[tokio::test]
    async fn retry_after_is_honoured() {
        // GIVEN a claimed task
        let store = store();
        let task = seeded_task(&store, 1).await;
        let lease = claim(&store, &task, 60_000, T0).await;

        // WHEN the server answers 429 with Retry-After: 30 s
        let outcome = store
            .fail(
                &lease,
                &Failure::from_http_status(429, Some(30_000)),
                &policy(),
                T0,
            )
            .await
            .unwrap();

        // THEN the next attempt is exactly 30 s later
        assert_eq!(
            outcome,
            FailOutcome::Retrying {
                next_attempt_at: T0 + 30_000
            }
        );
        let stored = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(stored.next_attempt_at, Some(T0 + 30_000));
        assert_eq!(stored.errors[0].kind, ErrorKind::Throttled);
    }

    #[tokio::test]
    async fn a_404_makes_the_task_gone_and_keeps_its_previous_fetch() {
        // GIVEN a task fetched once, rescheduled for a recrawl and claimed
        let store = store();
        let task = seeded_task(&store, 1).await;
        let lease = claim(&store, &task, 60_000, T0).await;
        store.finish(&lease, &record("aa", T0), T0).await.unwrap();
        store
            .reschedule(&crawl_id(), &task, &[Status::Succeeded], T0 + 1)
            .await
            .unwrap();
        let recrawl = claim(&store, &task, 60_000, T0 + 2).await;

        // WHEN the page now answers 404
        let outcome = store
            .fail(
                &recrawl,
                &Failure::from_http_status(404, None),
                &policy(),
                T0 + 3,
            )
            .await
            .unwrap();

        // THEN it is gone at once, without a retry, and the last good fetch is still recorded
        assert_eq!(
            outcome,
            FailOutcome::GaveUp {
                status: Status::Gone
            }
        );
        let gone = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(gone.status, Status::Gone);
        assert_eq!(gone.retries, 0);
        assert_eq!(gone.fetch, Some(record("aa", T0)));
        assert_eq!(gone.errors.len(), 1);
        assert_eq!(gone.errors[0].kind, ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn the_error_history_keeps_only_the_latest_errors() {
        // GIVEN a policy that never gives up within the test
        let store = store();
        let task = seeded_task(&store, 1).await;
        let patient = RetryPolicy {
            max_retry: 100,
            base_delay_ms: 1,
            max_delay_ms: 1,
        };

        // WHEN the task fails 5 times, each with its own message
        let mut now = T0;
        for i in 0..5 {
            let lease = claim(&store, &task, 60_000, now).await;
            let failure = Failure::new(
                ErrorKind::Timeout,
                format!("timeout #{i} {}", "x".repeat(400)),
            );
            store.fail(&lease, &failure, &patient, now).await.unwrap();
            now += 10;
        }

        // THEN only the last ERROR_HISTORY remain, oldest first, each message truncated
        let stored = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(stored.retries, 5);
        assert_eq!(stored.errors.len(), ERROR_HISTORY);
        assert!(stored.errors[0].message.starts_with("timeout #2"));
        assert!(
            stored.errors[ERROR_HISTORY - 1]
                .message
                .starts_with("timeout #4")
        );
        assert!(stored.errors.iter().all(|e| e.message.len() <= 256));
    }

    #[tokio::test]
    async fn query_pages_through_every_task_once_in_update_order() {
        // GIVEN 25 pending tasks seeded at 5 different times, some later touched, and 3 claimed
        let store = store();
        for batch in 0..5 {
            let tasks: Vec<_> = (0..5).map(|i| new_task(batch * 5 + i)).collect();
            store
                .seed(&crawl_id(), &tasks, T0 + (batch as Millis) * 100)
                .await
                .unwrap();
        }
        for n in [0, 7, 13] {
            let id = new_task(n).url.task_id();
            assert!(
                store
                    .mark_enqueued(&crawl_id(), &id, Status::Pending, T0 + 50 + n as Millis)
                    .await
                    .unwrap()
            );
        }
        for n in [20, 21, 22] {
            claim(&store, &new_task(n).url.task_id(), 60_000, T0 + 1_000).await;
        }

        // WHEN the pending tasks are read 4 at a time
        let mut seen = Vec::new();
        let mut cursor = None;
        for _ in 0..20 {
            let page = store
                .query(&TaskQuery {
                    crawl_id: crawl_id(),
                    status: Status::Pending,
                    updated_before: None,
                    limit: 4,
                    cursor: cursor.take(),
                })
                .await
                .unwrap();
            assert!(page.tasks.len() <= 4);
            seen.extend(page.tasks);
            cursor = page.cursor;
            if cursor.is_none() {
                break;
            }
        }

        // THEN all 22 pending tasks come once each, ordered by (update time, id)
        assert_eq!(seen.len(), 22);
        let keys: Vec<_> = seen
            .iter()
            .map(|t| (t.updated_at, t.task_id.clone()))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(keys, sorted);
        assert!(seen.iter().all(|t| t.status == Status::Pending));
        let touched = seen
            .iter()
            .find(|t| t.task_id == new_task(7).url.task_id())
            .unwrap();
        assert_eq!(touched.enqueued_at, Some(T0 + 57));

        // AND the due bound and foreign cursors are respected
        let due = store
            .query(&TaskQuery {
                crawl_id: crawl_id(),
                status: Status::Pending,
                updated_before: Some(T0 + 100),
                limit: 100,
                cursor: None,
            })
            .await
            .unwrap();
        // Batches 0 and 1, plus task 13 whose enqueue moved it to T0 + 63.
        assert_eq!(due.tasks.len(), 11);
        assert!(due.tasks.iter().all(|t| t.updated_at <= T0 + 100));
        assert_eq!(due.cursor, None);
        let foreign = store
            .query(&TaskQuery {
                crawl_id: crawl_id(),
                status: Status::Pending,
                updated_before: None,
                limit: 4,
                cursor: Some("eyJwayI6IngifQ".to_owned()),
            })
            .await;
        assert!(matches!(foreign, Err(StoreError::InvalidCursor)));
    }

    #[tokio::test]
    async fn counts_follow_every_transition_and_delete_empties_the_crawl() {
        // GIVEN 4 tasks: one succeeded, one failed, one gone, one pending
        let store = store();
        let ids: Vec<_> = (0..4).map(|n| new_task(n).url.task_id()).collect();
        store
            .seed(&crawl_id(), &(0..4).map(new_task).collect::<Vec<_>>(), T0)
            .await
            .unwrap();
        let l0 = claim(&store, &ids[0], 60_000, T0).await;
        store.finish(&l0, &record("aa", T0), T0).await.unwrap();
        let l1 = claim(&store, &ids[1], 60_000, T0).await;
        store
            .fail(&l1, &Failure::from_http_status(500, None), &policy(), T0)
            .await
            .unwrap();
        let l2 = claim(&store, &ids[2], 60_000, T0).await;
        store
            .fail(&l2, &Failure::from_http_status(410, None), &policy(), T0)
            .await
            .unwrap();

        // WHEN counted, then deleted
        let counts = store.counts(&crawl_id()).await.unwrap();
        let deleted = store.delete_tasks(&crawl_id()).await.unwrap();

        // THEN each status has its task, and the crawl is left empty
        let expected: StatusCounts = [
            (Status::Pending, 1),
            (Status::Failed, 1),
            (Status::Succeeded, 1),
            (Status::Gone, 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(counts, expected);
        assert_eq!(deleted, 4);
        assert!(store.counts(&crawl_id()).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn reschedule_and_mark_enqueued_are_conditional_on_status() {
        // GIVEN a succeeded task
        let store = store();
        let task = seeded_task(&store, 1).await;
        let lease = claim(&store, &task, 60_000, T0).await;
        store.finish(&lease, &record("aa", T0), T0).await.unwrap();

        // WHEN it is marked or rescheduled from statuses it is not in, then from its own
        let wrong_mark = store
            .mark_enqueued(&crawl_id(), &task, Status::Pending, T0 + 1)
            .await
            .unwrap();
        let wrong_move = store
            .reschedule(
                &crawl_id(),
                &task,
                &[Status::Failed, Status::Ignored],
                T0 + 1,
            )
            .await
            .unwrap();
        let moved = store
            .reschedule(
                &crawl_id(),
                &task,
                &[Status::Failed, Status::Succeeded],
                T0 + 2,
            )
            .await
            .unwrap();
        let marked = store
            .mark_enqueued(&crawl_id(), &task, Status::Pending, T0 + 3)
            .await
            .unwrap();

        // THEN only the matching calls changed it
        assert!(!wrong_mark && !wrong_move && moved && marked);
        let stored = store.get(&crawl_id(), &task).await.unwrap().unwrap();
        assert_eq!(stored.status, Status::Pending);
        assert_eq!(
            (stored.enqueued_at, stored.updated_at),
            (Some(T0 + 3), T0 + 3)
        );
        assert_eq!(stored.fetch, Some(record("aa", T0)));
        let missing = new_task(99).url.task_id();
        assert_eq!(
            store.claim(&crawl_id(), &missing, 1, T0).await.unwrap(),
            ClaimOutcome::Rejected(ClaimRejection::Missing)
        );
    }

    #[tokio::test]
    async fn crawls_complete_once_per_generation() {
        // GIVEN a crawl created twice with different configs
        let store = store();
        let crawl = Crawl::new(crawl_id(), CrawlConfig::default(), T0);
        let mut other = crawl.clone();
        other.config.lease_ms = 1;
        let (stored, created) = store.create_crawl(&crawl).await.unwrap();
        let (again, created_again) = store.create_crawl(&other).await.unwrap();
        assert!(created && !created_again);
        assert_eq!((stored, again), (crawl.clone(), crawl.clone()));

        // WHEN completed twice, reopened, and completed with the old then the new generation
        let first = store.complete_crawl(&crawl_id(), 0, T0 + 1).await.unwrap();
        let second = store.complete_crawl(&crawl_id(), 0, T0 + 2).await.unwrap();
        let completed = store
            .list_crawls(Some(CrawlState::Completed))
            .await
            .unwrap();
        let reopened = store.reopen_crawl(&crawl_id(), T0 + 3).await.unwrap();
        let reopened_twice = store.reopen_crawl(&crawl_id(), T0 + 3).await.unwrap();
        let old_generation = store.complete_crawl(&crawl_id(), 0, T0 + 4).await.unwrap();
        let new_generation = store.complete_crawl(&crawl_id(), 1, T0 + 4).await.unwrap();

        // THEN each change happens exactly once
        assert!(first && !second && reopened && !reopened_twice);
        assert!(!old_generation && new_generation);
        assert_eq!(completed.len(), 1);
        let now = store.get_crawl(&crawl_id()).await.unwrap().unwrap();
        assert_eq!(
            (now.state, now.generation, now.updated_at),
            (CrawlState::Completed, 1, T0 + 4)
        );
        assert!(
            store
                .list_crawls(Some(CrawlState::Running))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.list_crawls(None).await.unwrap().len(), 1);
        store.delete_crawl(&crawl_id()).await.unwrap();
        assert_eq!(store.get_crawl(&crawl_id()).await.unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reserved_pages_never_exceed_the_maximum() {
        // GIVEN a crawl capped at 20 pages, and 16 connections
        let dir = TempDir::new("reserve");
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        store
            .create_crawl(&Crawl::new(crawl_id(), CrawlConfig::default(), T0))
            .await
            .unwrap();

        // WHEN 16 seeders each ask for 3 at once
        let mut seeders = Vec::new();
        for _ in 0..16 {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            seeders.push(tokio::spawn(async move {
                store.reserve_pages(&crawl_id(), 3, 20).await.unwrap()
            }));
        }
        let mut granted = 0;
        for seeder in seeders {
            granted += seeder.await.unwrap();
        }

        // THEN exactly 20 are granted, and released slots can be taken again
        assert_eq!(granted, 20);
        assert_eq!(
            store
                .get_crawl(&crawl_id())
                .await
                .unwrap()
                .unwrap()
                .pages_reserved,
            20
        );
        store.release_pages(&crawl_id(), 5).await.unwrap();
        assert_eq!(store.reserve_pages(&crawl_id(), 10, 20).await.unwrap(), 5);
        let missing = CrawlId::parse("nope").unwrap();
        assert!(matches!(
            store.reserve_pages(&missing, 1, 20).await,
            Err(StoreError::NoSuchCrawl(_))
        ));
    }

    #[tokio::test]
    async fn a_reopened_file_keeps_its_tasks_and_a_newer_schema_is_refused() {
        // GIVEN a file database with one task
        let dir = TempDir::new("reopen");
        let calls = Arc::new(CallCounts::default());
        let task = {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            seeded_task(&store, 1).await
        };

        // WHEN it is opened again, and when its schema version is from the future
        let reopened = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let kept = reopened.get(&crawl_id(), &task).await.unwrap();
        let future = dir.0.join("future.db");
        Connection::open(&future)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let refused = SqliteStore::open(&future, calls);

        // THEN the task is there, and the unknown schema is an error, not a guess
        assert_eq!(kept.map(|t| t.status), Some(Status::Pending));
        assert!(matches!(refused, Err(StoreError::Backend { .. })));
    }

    #[tokio::test]
    async fn opening_an_existing_database_never_creates_one() {
        // GIVEN a directory without a database, and one with
        let dir = TempDir::new("existing");
        let calls = Arc::new(CallCounts::default());
        let missing = dir.0.join("missing.db");
        let task = {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            seeded_task(&store, 1).await
        };

        // WHEN each is opened as existing-only
        let refused = SqliteStore::open_existing(&missing, Arc::clone(&calls));
        let opened = SqliteStore::open_existing(dir.db(), calls).unwrap();

        // THEN the missing one is an error and stays missing; the other reads as before
        assert!(refused.is_err());
        assert!(!missing.exists());
        let kept = opened.get(&crawl_id(), &task).await.unwrap();
        assert_eq!(kept.map(|t| t.status), Some(Status::Pending));
    }

    #[tokio::test]
    async fn each_operation_counts_one_call() {
        // GIVEN a fresh store
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::in_memory(Arc::clone(&calls)).unwrap();

        // WHEN a URL is seeded, claimed, finished and read back
        let task = seeded_task(&store, 1).await;
        let lease = claim(&store, &task, 60_000, T0).await;
        store.finish(&lease, &record("aa", T0), T0).await.unwrap();
        store.get(&crawl_id(), &task).await.unwrap();

        // THEN that is 3 writes and 1 read
        assert_eq!(calls.get(Call::SqliteWrite), 3);
        assert_eq!(calls.get(Call::SqliteRead), 1);
    }
}
