//! The embedded status store: one SQLite file (WAL) holding crawls and tasks, with the same
//! claim / finish / fencing semantics as the DynamoDB adapter.
//!
//! What a task operation does is decided by `trawl_domain::transition`; this adapter reads the
//! task, checks the transition's condition and writes the new state, all inside one
//! `BEGIN IMMEDIATE` transaction. It holds SQLite's single write lock from its first read, so
//! the check and the change are one atomic step even when several processes share the file, and
//! a refused claim's reason is the one that refused it.
//!
//! rusqlite is blocking: a store's one connection lives on a thread of its own, which runs the
//! operations queued meanwhile as one transaction (`writer`: group commit). Open several stores
//! on one file for parallel readers.

mod writer;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior,
    named_params, params,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use trawl_core::store::budget::{PageBudget, Taken};
use trawl_core::store::{
    ClaimOutcome, CrawlStore, FailOutcome, FinishOutcome, HostPage, HostStore, Seeded,
    StatusCounts, StoreError, StoreResult, TaskPage, TaskQuery, TaskStore, TaskSummary,
};
use trawl_domain::calls::{Call, CallCounts, CallTally};
use trawl_domain::canonical::{CrawlId, TaskId, host_key_of};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{FetchRecord, Lease, Millis, NewTask, Status, Task};
use trawl_domain::transition::{self, Update};

/// `PRAGMA user_version` of the schema below. Version 2 added `crawl_calls`, version 3 the
/// host-level frontier (`hosts`, and each task's host and due time), version 4 the crawls'
/// checkpoints, version 5 their soft-404 reference misses, version 6 the tasks' user data,
/// version 7 their delivery leases, version 8 their completers; an older file gets what it
/// lacks when opened.
const SCHEMA_VERSION: i64 = 8;

/// Prepared statements kept per connection (more than the store has).
const STATEMENT_CACHE: usize = 64;

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

/// A crawl's call counts (`Crawl::calls`), one row per call kind, so an add is one upsert per
/// kind inside one transaction.
const CALLS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS crawl_calls (
    crawl_id TEXT    NOT NULL,
    call     TEXT    NOT NULL,
    count    INTEGER NOT NULL,
    PRIMARY KEY (crawl_id, call)
) WITHOUT ROWID;
";

/// The host-level frontier: host records, and per task its host and due time (`Task::due_at`,
/// NULL once terminal) under a partial index, so a host's turn finds its due work without a scan.
const HOSTS_SCHEMA: &str = "
ALTER TABLE tasks ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN due INTEGER;
CREATE INDEX IF NOT EXISTS tasks_by_host_due ON tasks (crawl_id, host, due, task_id)
    WHERE due IS NOT NULL;
CREATE TABLE IF NOT EXISTS hosts (
    crawl_id TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    record   TEXT    NOT NULL,
    PRIMARY KEY (crawl_id, name)
) WITHOUT ROWID;
";

/// A source's own incremental position per crawl (`Crawl::checkpoint`).
const CHECKPOINT_SCHEMA: &str = "ALTER TABLE crawls ADD COLUMN checkpoint TEXT;";

/// Sweeps that found a soft-404 rule no longer recognising its reference page, per crawl.
const REFERENCE_MISSES_SCHEMA: &str =
    "ALTER TABLE crawls ADD COLUMN reference_misses INTEGER NOT NULL DEFAULT 0;";

/// Who writes a crawl's delivery, until when (`DeliveryLease`).
const DELIVERY_SCHEMA: &str = "
ALTER TABLE crawls ADD COLUMN delivery_holder TEXT;
ALTER TABLE crawls ADD COLUMN delivery_until INTEGER;
";

/// Who completed each crawl's generation (`CrawlStore::complete_crawl`).
const COMPLETER_SCHEMA: &str = "ALTER TABLE crawls ADD COLUMN completed_by TEXT;";

/// Each task's user data (`Task::data`, JSON).
const DATA_SCHEMA: &str = "ALTER TABLE tasks ADD COLUMN data TEXT;";

const TASK_COLUMNS: &str = "crawl_id, task_id, url, status, created, updated, depth, parent, \
     token, lease_until, retries, next_attempt, enqueued, errors, fetch, stale, data";

const CRAWL_COLUMNS: &str = "id, config, state, created, updated, generation, pages_reserved, checkpoint, \
     reference_misses";

/// Marks cursors this store issued (and versions their format).
const CURSOR_TAG: &str = "sqlite1";

/// The SQLite status store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: writer::Writer,
    calls: Arc<CallCounts>,
    /// This process's page-budget slots (`max_pages` without a write per page).
    budget: Arc<PageBudget>,
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

/// Why the schema could not be created or checked.
enum SchemaError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

/// Whose a SQLite file is, from its schema version and tables.
enum Schema {
    /// No table at all and no version: a new database.
    Empty,
    /// trawl's tables, or a version newer than this trawl (checked with the schema).
    Trawl,
    /// Tables, but not trawl's.
    Foreign,
}

/// Reads the schema version and tables (which also finds a damaged first page). trawl has set
/// user_version since its first schema: version 0 with objects in it, or a known version
/// without trawl's tables, is another program's database, not to be written into.
fn schema_of(conn: &Connection) -> rusqlite::Result<Schema> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let (objects, ours): (i64, i64) = conn.query_row(
        "SELECT count(*), count(CASE WHEN type = 'table' AND name IN ('tasks', 'crawls') \
         THEN 1 END) FROM sqlite_master",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(match version {
        0 if objects == 0 => Schema::Empty,
        0 => Schema::Foreign,
        v if (1..=SCHEMA_VERSION).contains(&v) && ours != 2 => Schema::Foreign,
        _ => Schema::Trawl,
    })
}

fn sql_error(operation: &'static str, e: rusqlite::Error) -> StoreError {
    let message = e.to_string();
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable { operation, message }
        }
        _ => StoreError::Backend { operation, message },
    }
}

/// What SQLite's `quick_check` finds wrong with the database, on one line (None: nothing). A
/// page overwritten or cut off is found only when it is read, which may be never (the crawl
/// would look empty, or start over on top of the rest): so the whole file is checked when
/// opened, at the cost of reading it once (`quick_check` skips the slower index checks).
fn quick_check(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let mut problems = Vec::new();
    conn.pragma_query(None, "quick_check", |row| {
        problems.push(row.get::<_, String>(0)?);
        Ok(())
    })?;
    if problems.iter().all(|p| p == "ok") {
        return Ok(None);
    }
    let first = problems
        .iter()
        .flat_map(|p| p.lines())
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with("***"))
        .unwrap_or("damaged");
    Ok(Some(match problems.len() {
        1 => first.to_owned(),
        n => format!("{first}, and {} more", n - 1),
    }))
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// SQLite's file header: a database file is at least this long.
const SQLITE_HEADER_BYTES: usize = 100;

/// Why a store could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    /// The file exists but is not a trawl database (empty, not SQLite, cut short, damaged, or
    /// another program's): it is left untouched, never taken for a new database.
    #[error("{path} is {reason}")]
    NotATrawlDatabase { path: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<OpenError> for StoreError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::NotATrawlDatabase { path, reason } => {
                StoreError::Corrupt { key: path, reason }
            }
            OpenError::Store(e) => e,
        }
    }
}

/// What is at a database path before it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileState {
    Missing,
    /// Starts with a SQLite header (whose content SQLite itself then checks).
    Sqlite,
}

/// Reads the start of the file at `path`. Only a missing file may become a new database: an
/// empty or foreign one (a truncated copy, a file written over) would otherwise be taken for a
/// new crawl and everything fetched again.
fn inspect(path: &Path) -> Result<FileState, OpenError> {
    let shown = || path.display().to_string();
    let refuse = |reason: String| OpenError::NotATrawlDatabase {
        path: shown(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) if file.metadata().is_ok_and(|m| m.is_dir()) => {
            return Err(refuse("a directory, not a trawl database".into()));
        }
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileState::Missing),
        Err(e) => {
            return Err(OpenError::Store(StoreError::Backend {
                operation: "open",
                message: format!("cannot read {}: {e}", shown()),
            }));
        }
    };
    let mut header = Vec::with_capacity(SQLITE_HEADER_BYTES);
    let read = file
        .take(SQLITE_HEADER_BYTES as u64)
        .read_to_end(&mut header);
    match read {
        Ok(_) if header.is_empty() => Err(refuse("empty (0 bytes), not a trawl database".into())),
        Ok(_) if !header.starts_with(SQLITE_MAGIC) => {
            Err(refuse("not a trawl database (no SQLite header)".into()))
        }
        Ok(n) if n < SQLITE_HEADER_BYTES => Err(refuse(format!(
            "not a trawl database (cut short: {n} bytes, less than a SQLite header)"
        ))),
        Ok(_) => Ok(FileState::Sqlite),
        Err(e) => Err(OpenError::Store(StoreError::Backend {
            operation: "open",
            message: format!("cannot read {}: {e}", shown()),
        })),
    }
}

impl SqliteStore {
    /// Opens the database at `path`, creating it if (and only if) the file is missing: WAL
    /// journal, `synchronous=NORMAL`, a busy timeout, and the schema created or checked. A file
    /// that is there but empty or not a trawl database is refused
    /// ([`OpenError::NotATrawlDatabase`]) and left as it is.
    pub fn open(path: impl AsRef<Path>, calls: Arc<CallCounts>) -> Result<Self, OpenError> {
        let path = path.as_ref();
        let state = inspect(path)?;
        let opened = Self::open_with(path, OpenFlags::default(), calls);
        if state == FileState::Missing && opened.is_err() {
            // A creation that failed (a full disk …) must not leave the empty file it began
            // with: the next run would refuse it. A file with any byte in it is not removed.
            if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
        }
        opened
    }

    /// Opens the database at `path` only if it exists (commands that only read must not create
    /// one): a missing file is an error, not an empty store, and so is one that is not a trawl
    /// database.
    pub fn open_existing(
        path: impl AsRef<Path>,
        calls: Arc<CallCounts>,
    ) -> Result<Self, OpenError> {
        let path = path.as_ref();
        inspect(path)?;
        Self::open_with(
            path,
            OpenFlags::default().difference(OpenFlags::SQLITE_OPEN_CREATE),
            calls,
        )
    }

    fn open_with(path: &Path, flags: OpenFlags, calls: Arc<CallCounts>) -> Result<Self, OpenError> {
        let shown = path.display().to_string();
        // SQLite finds a damaged file only when it reads it: that is not a trawl database
        // either, and no retry will change it.
        let classify = |operation, e: rusqlite::Error| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                OpenError::NotATrawlDatabase {
                    path: shown.clone(),
                    reason: format!("not a trawl database (damaged: {e})"),
                }
            }
            _ => OpenError::Store(sql_error(operation, e)),
        };
        let open = |e| classify("open", e);
        let conn = Connection::open_with_flags(path, flags).map_err(open)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open)?;
        // Checked before anything is written (the journal mode below is written to the file).
        let not_ours = |why: &str| OpenError::NotATrawlDatabase {
            path: shown.clone(),
            reason: format!("not a trawl database ({why})"),
        };
        match schema_of(&conn) {
            Ok(Schema::Empty) => {}
            Ok(Schema::Trawl) => {
                if let Some(problem) = quick_check(&conn).map_err(open)? {
                    return Err(OpenError::NotATrawlDatabase {
                        path: shown.clone(),
                        reason: format!("damaged (SQLite's quick_check: {problem})"),
                    });
                }
            }
            Ok(Schema::Foreign) => return Err(not_ours("a SQLite database of another program")),
            Err(e) => return Err(open(e)),
        }
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(open)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(OpenError::Store(StoreError::Backend {
                operation: "open",
                message: format!("cannot use WAL journal (got {mode})"),
            }));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        Self::with_schema(conn, calls).map_err(|e| match e {
            SchemaError::Sql(e) => classify("schema", e),
            SchemaError::Store(e) => OpenError::Store(e),
        })
    }

    /// A private database in memory (tests, throwaway runs).
    pub fn in_memory(calls: Arc<CallCounts>) -> StoreResult<Self> {
        let conn = Connection::open_in_memory().map_err(|e| sql_error("open", e))?;
        Self::with_schema(conn, calls).map_err(|e| match e {
            SchemaError::Sql(e) => sql_error("schema", e),
            SchemaError::Store(e) => e,
        })
    }

    fn with_schema(mut conn: Connection, calls: Arc<CallCounts>) -> Result<Self, SchemaError> {
        let schema = SchemaError::Sql;
        // Immediate: two processes opening a fresh file must not both create the schema.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(schema)?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(schema)?;
        match version {
            0..=7 => {
                if version == 0 {
                    tx.execute_batch(SCHEMA).map_err(schema)?;
                }
                if version < 2 {
                    tx.execute_batch(CALLS_SCHEMA).map_err(schema)?;
                }
                if version < 3 {
                    tx.execute_batch(HOSTS_SCHEMA).map_err(schema)?;
                    index_hosts(&tx).map_err(schema)?;
                }
                if version < 4 {
                    tx.execute_batch(CHECKPOINT_SCHEMA).map_err(schema)?;
                }
                if version < 5 {
                    tx.execute_batch(REFERENCE_MISSES_SCHEMA).map_err(schema)?;
                }
                if version < 6 {
                    tx.execute_batch(DATA_SCHEMA).map_err(schema)?;
                }
                if version < 7 {
                    tx.execute_batch(DELIVERY_SCHEMA).map_err(schema)?;
                }
                tx.execute_batch(COMPLETER_SCHEMA).map_err(schema)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(schema)?;
            }
            SCHEMA_VERSION => {}
            other => {
                return Err(SchemaError::Store(StoreError::Backend {
                    operation: "schema",
                    message: format!(
                        "database schema version {other}, this trawl knows {SCHEMA_VERSION}"
                    ),
                }));
            }
        }
        tx.commit().map_err(schema)?;
        // Room for every statement the store prepares, so that none is parsed twice.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let writer = writer::Writer::start(conn).map_err(|e| {
            SchemaError::Store(StoreError::Backend {
                operation: "open",
                message: format!("cannot start the database thread: {e}"),
            })
        })?;
        Ok(Self {
            writer,
            calls,
            budget: Arc::default(),
        })
    }

    /// Runs `work` with the connection in the next group (`writer`), counting one `call`.
    async fn run<T, F>(&self, operation: &'static str, call: Call, work: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        self.calls.record(call);
        self.writer
            .run(operation, call == Call::SqliteWrite, work)
            .await
    }
}

impl SqliteStore {
    /// One transition of one task (`apply_update`): Ok(task before) when applied, else
    /// Err(task as it stands).
    async fn update(
        &self,
        operation: &'static str,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: Update,
    ) -> StoreResult<Result<Task, Option<Task>>> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        self.run(operation, Call::SqliteWrite, move |conn| {
            apply_update(conn, &crawl, &task, &update)
        })
        .await
    }
}

/// Fills the host and due time of tasks written before version 3.
fn index_hosts(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE tasks SET due = CASE status
             WHEN ?1 THEN updated
             WHEN ?2 THEN coalesce(next_attempt, updated)
             ELSE NULL END",
        params![code(Status::Pending), code(Status::Failed)],
    )?;
    let rows: Vec<(String, String, String)> = tx
        .prepare("SELECT crawl_id, task_id, url FROM tasks WHERE host = ''")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut set = tx.prepare("UPDATE tasks SET host = ?3 WHERE crawl_id = ?1 AND task_id = ?2")?;
    for (crawl, task, url) in rows {
        set.execute(params![crawl, task, host_key_of(&url)])?;
    }
    Ok(())
}

fn code(status: Status) -> i64 {
    i64::from(status.code())
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
    stale: String,
    data: Option<String>,
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
            stale: row.get(15)?,
            data: row.get(16)?,
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
            stale: decode(key, "stale", &self.stale)?,
            data: self
                .data
                .as_deref()
                .map(|d| decode(key, "data", d))
                .transpose()?,
        })
    }
}

fn select_task(conn: &Connection, crawl_id: &str, task_id: &str) -> DbResult<Option<Task>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE crawl_id = ?1 AND task_id = ?2"
        ))?
        .query_row(params![crawl_id, task_id], TaskRow::read)
        .optional()?;
    Ok(row.map(TaskRow::into_task).transpose()?)
}

/// Writes a task row: a new one (`insert`) or the new state of an existing one.
fn write_task(conn: &Connection, task: &Task, insert: bool) -> DbResult<usize> {
    let verb = if insert {
        "INSERT OR IGNORE INTO"
    } else {
        "REPLACE INTO"
    };
    // Cached: a page's claim, finish and link seeds each write tasks.
    let written = conn
        .prepare_cached(&format!(
            "{verb} tasks ({TASK_COLUMNS}, next_fetch, host, due)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18, ?19, ?20)"
        ))?
        .execute(params![
            task.crawl_id.as_str(),
            task.task_id.as_str(),
            task.url,
            code(task.status),
            task.created_at,
            task.updated_at,
            task.depth,
            task.parent.as_ref().map(TaskId::as_str),
            saturating_i64(task.token),
            task.lease_expires_at,
            task.retries,
            task.next_attempt_at,
            task.enqueued_at,
            encode("errors", &task.errors)?,
            task.fetch
                .as_ref()
                .map(|f| encode("fetch", f))
                .transpose()?,
            encode("stale", &task.stale)?,
            task.data.as_ref().map(|d| encode("data", d)).transpose()?,
            task.fetch.as_ref().and_then(|f| f.next_fetch_at),
            task.host(),
            task.due_at(),
        ])?;
    Ok(written)
}

/// Reads the task, and if it meets `update`'s condition, writes its new state, in one
/// transaction. Returns the task before the update when it was applied, and the task as it
/// stands otherwise.
fn apply_update(
    conn: &Connection,
    crawl_id: &str,
    task_id: &str,
    update: &Update,
) -> DbResult<Result<Task, Option<Task>>> {
    let Some(current) = select_task(conn, crawl_id, task_id)? else {
        return Ok(Err(None));
    };
    let Some(next) = update.apply(&current) else {
        return Ok(Err(Some(current)));
    };
    write_task(conn, &next, false)?;
    Ok(Ok(current))
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
    checkpoint: Option<String>,
    reference_misses: i64,
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
            checkpoint: row.get(7)?,
            reference_misses: row.get(8)?,
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
            // In a table of their own: `with_calls` reads them.
            calls: CallTally::new(),
            checkpoint: self.checkpoint,
            reference_misses: number(key, "reference_misses", self.reference_misses)?,
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
    row.map(|row| with_calls(conn, row)).transpose()
}

/// The crawl of `row`, with its call counts.
fn with_calls(conn: &Connection, row: CrawlRow) -> DbResult<Crawl> {
    let mut crawl = row.into_crawl()?;
    crawl.calls = select_calls(conn, crawl.id.as_str())?;
    Ok(crawl)
}

/// A crawl's call counts. Kinds this version does not know (written by a newer one) are
/// skipped rather than failing every read of the crawl.
fn select_calls(conn: &Connection, id: &str) -> DbResult<CallTally> {
    let mut stmt =
        conn.prepare_cached("SELECT call, count FROM crawl_calls WHERE crawl_id = ?1")?;
    let rows = stmt
        .query_map(params![id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let key = format!("crawl {id}");
    let mut calls = CallTally::new();
    for (name, count) in rows {
        if let Some(call) = Call::from_name(&name) {
            calls.insert(call, number(&key, &name, count)?);
        }
    }
    Ok(calls)
}

/// Adds `share` to a crawl's call counts (inside the caller's transaction).
fn add_calls(conn: &Connection, id: &str, share: &CallTally) -> DbResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO crawl_calls (crawl_id, call, count) VALUES (?1, ?2, ?3)
         ON CONFLICT (crawl_id, call) DO UPDATE SET count = count + excluded.count",
    )?;
    for (call, &count) in share {
        stmt.execute(params![id, call.name(), saturating_i64(count)])?;
    }
    Ok(())
}

impl CrawlStore for SqliteStore {
    async fn create_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        let id = crawl.id.as_str().to_owned();
        let config = encode("create_crawl", &crawl.config)?;
        let state = crawl.state.name();
        let (created_at, updated_at) = (crawl.created_at, crawl.updated_at);
        let generation = saturating_i64(crawl.generation);
        let reserved = saturating_i64(crawl.pages_reserved);
        let calls = crawl.calls.clone();
        let checkpoint = crawl.checkpoint.clone();
        let misses = saturating_i64(crawl.reference_misses);
        self.run("create_crawl", Call::SqliteWrite, move |conn| {
            let created = conn.execute(
                &format!("INSERT OR IGNORE INTO crawls ({CRAWL_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                params![id, config, state, created_at, updated_at, generation, reserved, checkpoint, misses],
            )? == 1;
            if created {
                add_calls(conn, &id, &calls)?;
            }
            let stored = select_crawl(conn, &id)?
                .ok_or_else(|| corrupt(&id, "crawl vanished inside its own transaction"))?;
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
            rows.into_iter()
                .map(|row| with_calls(conn, row))
                .collect::<DbResult<Vec<_>>>()
        })
        .await
    }

    async fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        completer: &str,
        now: Millis,
    ) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let generation = saturating_i64(generation);
        let completer = completer.to_owned();
        self.run("complete_crawl", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET state = 'completed', updated = ?3, completed_by = ?4
                 WHERE id = ?1 AND generation = ?2
                   AND (state = 'running' OR (state = 'completed' AND completed_by = ?4))",
                params![id, generation, now, completer],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn update_config(
        &self,
        id: &CrawlId,
        config: &CrawlConfig,
        now: Millis,
    ) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let config = serde_json::to_string(config).map_err(|e| StoreError::Backend {
            operation: "update_config",
            message: e.to_string(),
        })?;
        self.run("update_config", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET config = ?2, updated = ?3 WHERE id = ?1",
                params![id, config, now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn set_checkpoint(&self, id: &CrawlId, checkpoint: Option<&str>) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let checkpoint = checkpoint.map(str::to_owned);
        self.run("set_checkpoint", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET checkpoint = ?2 WHERE id = ?1",
                params![id, checkpoint],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn add_reference_misses(&self, id: &CrawlId, misses: u64) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let misses = saturating_i64(misses);
        self.run("add_reference_misses", Call::SqliteWrite, move |conn| {
            let changed = conn.execute(
                "UPDATE crawls SET reference_misses = reference_misses + ?2 WHERE id = ?1",
                params![id, misses],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn claim_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
        until: Millis,
        now: Millis,
    ) -> StoreResult<bool> {
        let id = id.as_str().to_owned();
        let holder = holder.to_owned();
        self.run("claim_delivery", Call::SqliteWrite, move |conn| {
            // `DeliveryLease::refuses`, as a condition: no lease, its own, or an expired one.
            let changed = conn.execute(
                "UPDATE crawls SET delivery_holder = ?2, delivery_until = ?3
                 WHERE id = ?1 AND (delivery_holder IS NULL OR delivery_holder = ?2
                                    OR delivery_until <= ?4)",
                params![id, holder, until, now],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    async fn release_delivery(&self, id: &CrawlId, holder: &str) -> StoreResult<()> {
        let id = id.as_str().to_owned();
        let holder = holder.to_owned();
        self.run("release_delivery", Call::SqliteWrite, move |conn| {
            conn.execute(
                "UPDATE crawls SET delivery_holder = NULL, delivery_until = NULL
                 WHERE id = ?1 AND delivery_holder = ?2",
                params![id, holder],
            )?;
            Ok(())
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
        self.budget
            .reserve(id, wanted, max, |ask| self.take_pages(id, ask, max))
            .await
    }

    async fn release_pages(&self, id: &CrawlId, n: u64) -> StoreResult<()> {
        if n == 0 || self.budget.release(id, n) {
            return Ok(());
        }
        self.give_back_pages(id, n).await
    }

    async fn add_calls(&self, id: &CrawlId, share: &CallTally) -> StoreResult<CallTally> {
        // This write reports itself: it is in the share it adds.
        self.calls.record_reported(Call::SqliteWrite);
        let mut share = share.clone();
        *share.entry(Call::SqliteWrite).or_default() += 1;
        let crawl_id = id.clone();
        let id = id.as_str().to_owned();
        let added =
            self.writer
                .run("add_calls", true, move |conn| {
                    let exists =
                        conn.query_row("SELECT 1 FROM crawls WHERE id = ?1", params![id], |_| {
                            Ok(())
                        })
                        .optional()?
                        .is_some();
                    if !exists {
                        return Err(StoreError::NoSuchCrawl(crawl_id).into());
                    }
                    add_calls(conn, &id, &share)?;
                    let totals = select_calls(conn, &id)?;
                    Ok(totals)
                })
                .await;
        if let Err(e) = &added
            && !matches!(e, StoreError::NoSuchCrawl(_))
        {
            // Not added: this call goes with the next report.
            self.calls
                .restore_unreported(&CallTally::from([(Call::SqliteWrite, 1)]));
        }
        added
    }

    async fn delete_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        self.budget.forget(id);
        let id = id.as_str().to_owned();
        self.run("delete_crawl", Call::SqliteWrite, move |conn| {
            conn.execute("DELETE FROM crawl_calls WHERE crawl_id = ?1", params![id])?;
            conn.execute("DELETE FROM crawls WHERE id = ?1", params![id])?;
            Ok(())
        })
        .await
    }
}

impl SqliteStore {
    /// Raises the crawl's `pages_reserved` by up to `ask`, never past `max`, within the writer's transaction.
    async fn take_pages(&self, id: &CrawlId, ask: u64, max: u64) -> StoreResult<Taken> {
        let crawl_id = id.clone();
        let id = id.as_str().to_owned();
        self.run("reserve_pages", Call::SqliteWrite, move |conn| {
            let reserved: Option<i64> = conn
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
            let granted = ask.min(max.saturating_sub(reserved));
            if granted > 0 {
                conn.execute(
                    "UPDATE crawls SET pages_reserved = ?2 WHERE id = ?1",
                    params![id, saturating_i64(reserved + granted)],
                )?;
            }
            Ok(Taken {
                granted,
                reserved: reserved + granted,
            })
        })
        .await
    }

    /// Lowers the crawl's `pages_reserved` by `n`, for a process that holds no chunk of it.
    async fn give_back_pages(&self, id: &CrawlId, n: u64) -> StoreResult<()> {
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
        let inserts: Vec<Task> = tasks
            .iter()
            .map(|new| transition::seed(crawl_id, new, now).task)
            .collect();
        self.run("seed", Call::SqliteWrite, move |conn| {
            let mut results = Vec::with_capacity(inserts.len());
            for task in &inserts {
                // INSERT OR IGNORE: the insert's condition, no such task.
                results.push(if write_task(conn, task, true)? == 1 {
                    Seeded::Created
                } else {
                    Seeded::AlreadyKnown
                });
            }
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
        self.run("claim", Call::SqliteWrite, move |conn| {
            let current = select_task(conn, &crawl, &task)?;
            let outcome = match transition::claimed(current.as_ref(), lease_ms, now) {
                Ok(claimed) => {
                    write_task(conn, &claimed, false)?;
                    ClaimOutcome::Claimed {
                        lease: transition::lease_of(&claimed),
                        task: Box::new(claimed),
                    }
                }
                Err(why) => ClaimOutcome::Rejected(why),
            };
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
        let update = transition::finish(lease, record, now);
        self.update("finish", &lease.crawl_id, &lease.task_id, update)
            .await
            .map(|applied| match applied {
                Ok(before) => FinishOutcome::Finished {
                    replaced: before.fetch,
                    stale: before.stale,
                },
                Err(current) => FinishOutcome::Rejected {
                    current: current.map(Box::new),
                },
            })
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        revisit: &Revisit,
        now: Millis,
    ) -> StoreResult<FailOutcome> {
        let (update, failed) = transition::fail(lease, failure, policy, revisit, now);
        let applied = self
            .update("fail", &lease.crawl_id, &lease.task_id, update)
            .await?;
        Ok(match applied {
            Ok(_) => failed.into(),
            Err(_) => FailOutcome::Rejected,
        })
    }

    async fn release(&self, lease: &Lease, now: Millis) -> StoreResult<bool> {
        let Some(update) = transition::release(lease, now) else {
            return Ok(true);
        };
        let applied = self
            .update("release", &lease.crawl_id, &lease.task_id, update)
            .await?;
        Ok(applied.is_ok())
    }

    async fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> StoreResult<bool> {
        let update = transition::add_stale(md5);
        let applied = self.update("add_stale", crawl_id, task_id, update).await?;
        Ok(applied.is_ok())
    }

    async fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> StoreResult<bool> {
        let update = transition::reschedule(from, now);
        let applied = self.update("reschedule", crawl_id, task_id, update).await?;
        Ok(applied.is_ok())
    }

    async fn reset(&self, task: &Task, now: Millis) -> StoreResult<bool> {
        let update = transition::reset(task, now);
        let applied = self
            .update("reset", &task.crawl_id, &task.task_id, update)
            .await?;
        Ok(applied.is_ok())
    }

    async fn refresh(&self, task: &Task, lastmod: Millis, now: Millis) -> StoreResult<bool> {
        let Some(update) = transition::refresh(task, lastmod, now) else {
            return Ok(false);
        };
        let applied = self
            .update("refresh", &task.crawl_id, &task.task_id, update)
            .await?;
        Ok(applied.is_ok())
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

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let crawl = crawl_id.as_str().to_owned();
        let host = host.to_owned();
        self.run("due_tasks", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT crawl_id, task_id, url, status, updated, depth, retries, lease_until,
                        next_attempt, next_fetch, enqueued
                 FROM tasks INDEXED BY tasks_by_host_due
                 WHERE crawl_id = ?1 AND host = ?2 AND due IS NOT NULL
                 ORDER BY due, task_id
                 LIMIT ?3",
            )?;
            let rows = stmt
                .query_map(params![crawl, host, limit.max(1)], summary_of)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows
                .into_iter()
                .map(SummaryRow::into_summary)
                .collect::<StoreResult<Vec<_>>>()?)
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

impl HostStore for SqliteStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        let (crawl, name) = (crawl_id.as_str().to_owned(), name.to_owned());
        self.run("get_host", Call::SqliteRead, move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, record FROM hosts WHERE crawl_id = ?1 AND name = ?2",
                )?
                .query_row(params![crawl, name], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            Ok(row
                .map(|(version, record)| host_of(&crawl, version, &record))
                .transpose()?)
        })
        .await
    }

    async fn put_host(&self, crawl_id: &CrawlId, host: &Host) -> StoreResult<bool> {
        let crawl = crawl_id.as_str().to_owned();
        let record = encode("host", host)?;
        let (name, version) = (host.name.clone(), saturating_i64(host.version));
        self.run("put_host", Call::SqliteWrite, move |conn| {
            // One statement either way: the version check and the write cannot interleave.
            let written = if version == 0 {
                conn.prepare_cached(
                    "INSERT OR IGNORE INTO hosts (crawl_id, name, version, record)
                     VALUES (?1, ?2, 1, ?3)",
                )?
                .execute(params![crawl, name, record])?
            } else {
                conn.prepare_cached(
                    "UPDATE hosts SET version = ?3 + 1, record = ?4
                     WHERE crawl_id = ?1 AND name = ?2 AND version = ?3",
                )?
                .execute(params![crawl, name, version, record])?
            };
            Ok(written == 1)
        })
        .await
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
    ) -> StoreResult<Option<Host>> {
        let (crawl, name) = (crawl_id.as_str().to_owned(), name.to_owned());
        self.run("add_seeded", Call::SqliteWrite, move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "UPDATE hosts
                     SET version = version + 1,
                         record = json_set(record, '$.seeded',
                                           coalesce(json_extract(record, '$.seeded'), 0) + ?3)
                     WHERE crawl_id = ?1 AND name = ?2
                     RETURNING version, record",
                )?
                .query_row(params![crawl, name, saturating_i64(n)], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()?;
            Ok(row
                .map(|(version, record)| host_of(&crawl, version, &record))
                .transpose()?)
        })
        .await
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let crawl = crawl_id.as_str().to_owned();
        let after = cursor.unwrap_or_default();
        let limit = limit.max(1) as usize;
        self.run("list_hosts", Call::SqliteRead, move |conn| {
            let rows: Vec<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, record FROM hosts WHERE crawl_id = ?1 AND name > ?2
                     ORDER BY name LIMIT ?3",
                )?
                .query_map(
                    params![crawl, after, saturating_i64(limit as u64 + 1)],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?
                .collect::<rusqlite::Result<_>>()?;
            let more = rows.len() > limit;
            let hosts = rows
                .into_iter()
                .take(limit)
                .map(|(version, record)| host_of(&crawl, version, &record))
                .collect::<StoreResult<Vec<_>>>()?;
            let cursor = more.then(|| hosts.last().map(|h| h.name.clone())).flatten();
            Ok(HostPage { hosts, cursor })
        })
        .await
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("delete_hosts", Call::SqliteWrite, move |conn| {
            let deleted = conn.execute("DELETE FROM hosts WHERE crawl_id = ?1", params![crawl])?;
            Ok(deleted as u64)
        })
        .await
    }
}

/// A host record as stored: its JSON, at the row's version.
fn host_of(crawl: &str, version: i64, record: &str) -> StoreResult<Host> {
    let key = format!("{crawl}/host");
    let host: Host = decode(&key, "record", record)?;
    Ok(Host {
        version: number(&key, "version", version)?,
        ..host
    })
}

#[cfg(test)]
mod tests {
    //! Only what is SQLite's own: several connections on one file, the file itself, rows that
    //! do not decode, call counting. The store contract is tested in `tests/conformance`.

    use super::*;
    use std::path::PathBuf;
    use trawl_domain::canonical::CanonicalUrl;

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

    async fn seeded_task(store: &SqliteStore) -> TaskId {
        let task = NewTask {
            url: CanonicalUrl::parse("http://example.com/page").unwrap(),
            depth: 1,
            parent: None,
            data: None,
        };
        store
            .seed(&crawl_id(), std::slice::from_ref(&task), T0)
            .await
            .unwrap();
        task.url.task_id()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_concurrent_claimers_on_one_file_exactly_one_wins() {
        // GIVEN one pending task in a file database, and 8 workers with their own connections
        let dir = TempDir::new("claim-race");
        let calls = Arc::new(CallCounts::default());
        let seeder = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let task = seeded_task(&seeder).await;

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
        let mut winners = 0;
        for worker in workers {
            match worker.await.unwrap() {
                ClaimOutcome::Claimed { lease, .. } => {
                    assert_eq!(lease.token, 1);
                    winners += 1;
                }
                ClaimOutcome::Rejected(why) => assert_eq!(
                    why,
                    trawl_core::store::ClaimRejection::Leased {
                        until: T0 + 5 + 60_000
                    }
                ),
            }
        }

        // THEN exactly one holds the lease: the write lock made read-decide-write atomic
        assert_eq!(winners, 1);
    }

    #[tokio::test]
    async fn a_reopened_file_keeps_its_tasks_and_a_foreign_or_newer_file_is_refused() {
        // GIVEN a file database with one task
        let dir = TempDir::new("reopen");
        let calls = Arc::new(CallCounts::default());
        let task = {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            seeded_task(&store).await
        };

        // WHEN it is opened again, and when a file's schema is from the future or it is no database
        let reopened = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let kept = reopened.get(&crawl_id(), &task).await.unwrap();
        let mode: String = Connection::open(dir.db())
            .unwrap()
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        let future = dir.0.join("future.db");
        Connection::open(&future)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let garbage = dir.0.join("garbage.db");
        std::fs::write(&garbage, b"not a database, just some bytes in a file").unwrap();

        // THEN the task is there in a WAL file, and the others are errors, not guesses
        assert_eq!(kept.map(|t| t.status), Some(Status::Pending));
        assert_eq!(mode, "wal");
        assert!(matches!(
            SqliteStore::open(&future, Arc::clone(&calls)),
            Err(OpenError::Store(StoreError::Backend { .. }))
        ));
        assert!(matches!(
            SqliteStore::open(&garbage, calls),
            Err(OpenError::NotATrawlDatabase { .. })
        ));
    }

    #[tokio::test]
    async fn only_a_missing_file_becomes_a_new_database() {
        // GIVEN files that are empty, not SQLite, cut inside or after the SQLite header, and
        // another program's SQLite database
        let dir = TempDir::new("not-trawl");
        let calls = Arc::new(CallCounts::default());
        let whole = {
            SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            std::fs::read(dir.db()).unwrap()
        };
        let foreign = dir.0.join("foreign.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x');")
            .unwrap();
        let mut damaged = whole.clone();
        damaged[SQLITE_HEADER_BYTES..].fill(0xAB);
        let cases: [(&str, Vec<u8>, &str); 6] = [
            ("empty", Vec::new(), "empty (0 bytes)"),
            (
                "text",
                b"http://example.com/\n".to_vec(),
                "no SQLite header",
            ),
            ("cut", whole[..40].to_vec(), "cut short: 40 bytes"),
            ("damaged", damaged, "damaged"),
            (
                "foreign",
                std::fs::read(&foreign).unwrap(),
                "another program",
            ),
            ("missing", Vec::new(), ""),
        ];
        for (name, content, reason) in cases {
            let path = dir.0.join(format!("{name}.db"));
            if name != "missing" {
                std::fs::write(&path, &content).unwrap();
            }

            // WHEN it is opened, to create or as existing
            let created = SqliteStore::open(&path, Arc::clone(&calls));
            let existing = SqliteStore::open_existing(&path, Arc::clone(&calls));

            if name == "missing" {
                // THEN only the missing one became a (new, empty) database
                let store = created.unwrap();
                assert_eq!(store.list_crawls(None).await.unwrap().len(), 0);
                assert!(existing.is_ok());
                continue;
            }
            // THEN the others are refused, naming the file and why, and left as they were
            for result in [created.map(|_| ()), existing.map(|_| ())] {
                match result {
                    Err(OpenError::NotATrawlDatabase {
                        path: shown,
                        reason: why,
                    }) => {
                        assert_eq!(shown, path.display().to_string());
                        assert!(why.contains(reason), "{name}: {why}");
                        assert!(why.contains("not a trawl database"), "{name}: {why}");
                    }
                    other => panic!("{name}: {other:?}"),
                }
            }
            assert!(
                std::fs::read(&path).unwrap() == content,
                "{name}: untouched"
            );
        }
    }

    #[tokio::test]
    async fn a_version_1_file_gains_call_counts_when_opened() {
        // GIVEN a file written by the schema before call counts, holding one crawl
        let dir = TempDir::new("v1");
        {
            let conn = Connection::open(dir.db()).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO crawls (id, config, state, created, updated, generation, \
                 pages_reserved) VALUES ('c', '{}', 'running', 0, 0, 0, 0)",
                [],
            )
            .unwrap();
        }

        // WHEN it is opened and calls are added to the crawl
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let id = CrawlId::parse("c").unwrap();
        let share = CallTally::from([(Call::S3PutObject, 2)]);
        let totals = store.add_calls(&id, &share).await.unwrap();

        // THEN the file is at the current version and the crawl has the calls (the add's own
        // write included)
        let version: i64 = Connection::open(dir.db())
            .unwrap()
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let expected = CallTally::from([(Call::S3PutObject, 2), (Call::SqliteWrite, 1)]);
        assert_eq!(totals, expected);
        let crawl = store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!((crawl.calls, crawl.checkpoint), (expected, None));
        assert!(store.set_checkpoint(&id, Some("since")).await.unwrap());
        let crawl = store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(crawl.checkpoint.as_deref(), Some("since"));
    }

    #[tokio::test]
    async fn a_version_4_file_gains_user_data_when_opened() {
        // GIVEN a file of the schema before user data, holding a task
        let dir = TempDir::new("v4");
        let old = CanonicalUrl::parse("http://example.com/old")
            .unwrap()
            .task_id();
        {
            let conn = Connection::open(dir.db()).unwrap();
            for part in [SCHEMA, CALLS_SCHEMA, HOSTS_SCHEMA, CHECKPOINT_SCHEMA] {
                conn.execute_batch(part).unwrap();
            }
            conn.pragma_update(None, "user_version", 4).unwrap();
            conn.execute(
                "INSERT INTO tasks (crawl_id, task_id, url, status, created, updated, depth) \
                 VALUES ('c', ?1, 'http://example.com/old', ?2, 0, 0, 0)",
                params![old.as_str(), code(Status::Pending)],
            )
            .unwrap();
        }

        // WHEN it is opened, THEN the old task reads without data and a new one keeps its own
        let store = SqliteStore::open(dir.db(), Arc::new(CallCounts::default())).unwrap();
        let id = CrawlId::parse("c").unwrap();
        assert_eq!(store.get(&id, &old).await.unwrap().unwrap().data, None);
        let data = serde_json::json!({"k": [1, "two"]}).as_object().cloned();
        let new = NewTask {
            url: CanonicalUrl::parse("http://example.com/new").unwrap(),
            depth: 0,
            parent: None,
            data: data.clone(),
        };
        store
            .seed(&id, std::slice::from_ref(&new), T0)
            .await
            .unwrap();
        let stored = store.get(&id, &new.url.task_id()).await.unwrap().unwrap();
        assert_eq!(stored.data, data);
    }

    #[tokio::test]
    async fn a_version_7_file_gains_completers_when_opened() {
        // GIVEN a file of the schema before completers, holding a running crawl
        let dir = TempDir::new("v7");
        {
            let conn = Connection::open(dir.db()).unwrap();
            for part in [
                SCHEMA,
                CALLS_SCHEMA,
                HOSTS_SCHEMA,
                CHECKPOINT_SCHEMA,
                REFERENCE_MISSES_SCHEMA,
                DATA_SCHEMA,
                DELIVERY_SCHEMA,
            ] {
                conn.execute_batch(part).unwrap();
            }
            conn.pragma_update(None, "user_version", 7).unwrap();
            conn.execute(
                "INSERT INTO crawls (id, config, state, created, updated, generation, \
                 pages_reserved) VALUES ('c', '{}', 'running', 0, 0, 0, 0)",
                [],
            )
            .unwrap();
        }

        // WHEN it is opened, THEN the crawl completes once, its completer's repeat included
        let store = SqliteStore::open(dir.db(), Arc::new(CallCounts::default())).unwrap();
        let id = CrawlId::parse("c").unwrap();
        assert!(store.complete_crawl(&id, 0, "a", T0).await.unwrap());
        assert!(store.complete_crawl(&id, 0, "a", T0).await.unwrap());
        assert!(!store.complete_crawl(&id, 0, "b", T0).await.unwrap());
    }

    #[tokio::test]
    async fn a_row_that_does_not_decode_is_reported_as_corrupt() {
        // GIVEN a task whose error history was overwritten with something that is not JSON
        let dir = TempDir::new("corrupt");
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
        let task = seeded_task(&store).await;
        Connection::open(dir.db())
            .unwrap()
            .execute("UPDATE tasks SET errors = '{oops'", [])
            .unwrap();

        // WHEN it is read or claimed
        let read = store.get(&crawl_id(), &task).await;
        let claimed = store.claim(&crawl_id(), &task, 1_000, T0).await;

        // THEN both say which row is corrupt, and the claim changed nothing
        for result in [read.map(|_| ()), claimed.map(|_| ())] {
            assert!(
                matches!(&result, Err(StoreError::Corrupt { key, .. }) if key.ends_with(task.as_str())),
                "{result:?}"
            );
        }
        let token: i64 = Connection::open(dir.db())
            .unwrap()
            .query_row("SELECT token FROM tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(token, 0);
    }

    #[tokio::test]
    async fn opening_an_existing_database_never_creates_one() {
        // GIVEN a directory without a database, and one with
        let dir = TempDir::new("existing");
        let calls = Arc::new(CallCounts::default());
        let missing = dir.0.join("missing.db");
        let task = {
            let store = SqliteStore::open(dir.db(), Arc::clone(&calls)).unwrap();
            seeded_task(&store).await
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
        let task = seeded_task(&store).await;
        let ClaimOutcome::Claimed { lease, .. } =
            store.claim(&crawl_id(), &task, 60_000, T0).await.unwrap()
        else {
            panic!("claim refused");
        };
        let record = FetchRecord {
            http_status: 200,
            fetched_at: T0,
            ..FetchRecord::default()
        };
        store.finish(&lease, &record, T0).await.unwrap();
        store.get(&crawl_id(), &task).await.unwrap();

        // THEN that is 3 writes and 1 read
        assert_eq!(calls.get(Call::SqliteWrite), 3);
        assert_eq!(calls.get(Call::SqliteRead), 1);
    }
}
