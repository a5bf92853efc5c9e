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

mod crawls;
mod hosts;
mod tasks;
mod writer;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior,
    params,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{StoreError, StoreResult, TaskSummary};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CrawlId, TaskId, host_key_of};
use trawl_domain::request::{REQUEST_WINDOW_MS, RequestId};
use trawl_domain::task::{Millis, Priority, Status, Task};

/// `PRAGMA user_version` of the schema below. Version 2 added `crawl_calls`, version 3 the
/// host-level frontier (`hosts`, and each task's host and due time), version 4 the crawls'
/// checkpoints, version 5 their soft-404 reference misses, version 6 the tasks' user data,
/// version 7 their delivery leases, version 8 their completers, version 9 the host counts,
/// version 10 the crawls' water levels, version 11 their generations' start times, version 12
/// the tasks' priorities, version 13 their lanes; an older file gets what it lacks when opened.
const SCHEMA_VERSION: i64 = 13;

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

/// When each crawl's current generation began (`Crawl::generation_started_at`).
const GENERATION_SCHEMA: &str = "ALTER TABLE crawls ADD COLUMN generation_started INTEGER;";

/// The change-rate estimator's water level per crawl (`Crawl::level`).
const LEVEL_SCHEMA: &str = "
ALTER TABLE crawls ADD COLUMN level_ms INTEGER;
ALTER TABLE crawls ADD COLUMN level_at INTEGER;
";

/// Each crawl's host counts (`HostStore::host_counts`), kept by `put_host` in the write's own
/// transaction, and the sweeper's scan position (`HostStore::host_scan`); a row is made with the crawl, so a crawl of an older file has none (and is
/// walked).
const HOST_COUNTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS host_counts (
    crawl_id TEXT    PRIMARY KEY NOT NULL,
    hosts    INTEGER NOT NULL,
    open     INTEGER NOT NULL,
    scan     TEXT
) WITHOUT ROWID;
";

/// Each task's user data (`Task::data`, JSON).
const DATA_SCHEMA: &str = "ALTER TABLE tasks ADD COLUMN data TEXT;";

/// Each task's priority (`Task::priority`); a pending task's `due` is moved by it
/// (`Task::due_key`), under the same index. Every task of an older file has the default, whose
/// `due` is its due time: nothing to fill.
const PRIORITY_SCHEMA: &str = "ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;";

/// Each task's lane (`Task::lane`, NULL without one), and a lane's due list (`due_in_lane`):
/// the host's due index with the lane before the due time, partial to the tasks with a lane.
const LANE_SCHEMA: &str = "
ALTER TABLE tasks ADD COLUMN lane TEXT;
CREATE INDEX IF NOT EXISTS tasks_by_lane_due ON tasks (crawl_id, host, lane, due, task_id)
    WHERE due IS NOT NULL AND lane IS NOT NULL;
";

/// The requests this store applied (`trawl_domain::request`), kept for the request window: a
/// table of the store's one connection (`TEMP`), not of the file — a request is tried again
/// only by the process that made it, within seconds, so no other process, and no later run,
/// needs to know it.
const REQUESTS_SCHEMA: &str = "
CREATE TEMP TABLE IF NOT EXISTS requests (
    crawl_id TEXT    NOT NULL,
    id       INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (crawl_id, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS temp.requests_by_at ON requests (at);
";

const TASK_COLUMNS: &str = "crawl_id, task_id, url, status, created, updated, depth, parent, \
     token, lease_until, retries, next_attempt, enqueued, errors, fetch, stale, data, priority, lane";

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
    let error = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::unavailable(operation, message)
        }
        _ => StoreError::backend(operation, message),
    };
    error.caused_by(e)
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
            return Err(OpenError::Store(
                StoreError::backend("open", format!("cannot read {}: {e}", shown())).caused_by(e),
            ));
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
        Err(e) => Err(OpenError::Store(
            StoreError::backend("open", format!("cannot read {}: {e}", shown())).caused_by(e),
        )),
    }
}

impl SqliteStore {
    /// Opens the database at `path`, creating it if (and only if) the file is missing: WAL
    /// journal, `synchronous=NORMAL`, temporary files in memory, a busy timeout, and the schema created or checked. A file
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
            return Err(OpenError::Store(StoreError::backend(
                "open",
                format!("cannot use WAL journal (got {mode})"),
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open)?;
        // A statement of a group commit that rewrites more than 64 KB of pages the transaction
        // had already changed spills its statement journal to a new file in /var/tmp: 125 files
        // and 14,000 writes in a 5,000-page crawl (strace). Kept in memory, they cost neither.
        conn.pragma_update(None, "temp_store", "MEMORY")
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
            0..=12 => {
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
                if version < 8 {
                    tx.execute_batch(COMPLETER_SCHEMA).map_err(schema)?;
                }
                if version < 10 {
                    tx.execute_batch(HOST_COUNTS_SCHEMA).map_err(schema)?;
                    tx.execute_batch(LEVEL_SCHEMA).map_err(schema)?;
                }
                if version < 11 {
                    tx.execute_batch(GENERATION_SCHEMA).map_err(schema)?;
                }
                if version < 12 {
                    tx.execute_batch(PRIORITY_SCHEMA).map_err(schema)?;
                }
                tx.execute_batch(LANE_SCHEMA).map_err(schema)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                    .map_err(schema)?;
            }
            SCHEMA_VERSION => {}
            other => {
                return Err(SchemaError::Store(StoreError::backend(
                    "schema",
                    format!("database schema version {other}, this trawl knows {SCHEMA_VERSION}"),
                )));
            }
        }
        tx.commit().map_err(schema)?;
        conn.execute_batch(REQUESTS_SCHEMA).map_err(schema)?;
        // Room for every statement the store prepares, so that none is parsed twice.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let writer = writer::Writer::start(conn).map_err(|e| {
            SchemaError::Store(
                StoreError::backend("open", format!("cannot start the database thread: {e}"))
                    .caused_by(e),
            )
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

/// Whether `request` was applied to a record of `crawl` (inside the write's transaction).
fn request_applied(conn: &Connection, crawl: &str, request: RequestId) -> DbResult<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM requests WHERE crawl_id = ?1 AND id = ?2")?
        .query_row(params![crawl, request_key(request)], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Notes `request` applied, in the write's own transaction, and forgets those past the window.
fn record_request(conn: &Connection, crawl: &str, request: RequestId) -> DbResult<()> {
    let now = trawl_domain::task::now_ms();
    conn.prepare_cached("DELETE FROM requests WHERE at < ?1")?
        .execute(params![now.saturating_sub(REQUEST_WINDOW_MS as Millis)])?;
    conn.prepare_cached("INSERT OR IGNORE INTO requests (crawl_id, id, at) VALUES (?1, ?2, ?3)")?
        .execute(params![crawl, request_key(request), now])?;
    Ok(())
}

/// A request id as SQLite's signed integer (the same bits).
fn request_key(request: RequestId) -> i64 {
    i64::from_ne_bytes(request.0.to_ne_bytes())
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
    serde_json::to_string(value)
        .map_err(|e| StoreError::backend(what, format!("cannot encode: {e}")).caused_by(e))
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

fn priority_of(key: &str, raw: i64) -> StoreResult<Priority> {
    Priority::new(raw).map_err(|e| corrupt(key, e.to_string()))
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
    priority: i64,
    lane: Option<String>,
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
            priority: row.get(17)?,
            lane: row.get(18)?,
        })
    }

    fn into_task(self) -> StoreResult<Task> {
        let key = format!("{}/{}", self.crawl_id, self.task_id);
        let key = key.as_str();
        Ok(Task {
            lane: self.lane,
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
            priority: priority_of(key, self.priority)?,
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
                     ?18, ?19, ?20, ?21, ?22)"
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
            task.priority.get(),
            task.lane,
            task.fetch.as_ref().and_then(|f| f.next_fetch_at),
            task.host(),
            task.due_key(),
        ])?;
    Ok(written)
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
        priority: row.get(11)?,
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
    priority: i64,
}

impl SummaryRow {
    fn into_summary(self) -> StoreResult<TaskSummary> {
        let key = format!("{}/{}", self.crawl_id, self.task_id);
        let key = key.as_str();
        let status = status_of(key, self.status)?;
        Ok(TaskSummary {
            crawl_id: crawl_id_of(key, &self.crawl_id)?,
            task_id: task_id_of(key, &self.task_id)?,
            url: self.url,
            status,
            updated_at: self.updated,
            depth: number(key, "depth", self.depth)?,
            retries: number(key, "retries", self.retries)?,
            lease_expires_at: self.lease_until,
            next_attempt_at: self.next_attempt,
            next_fetch_at: self.next_fetch,
            enqueued_at: self.enqueued,
            priority: Priority::placing(status, priority_of(key, self.priority)?),
        })
    }
}

#[cfg(test)]
mod tests {
    //! Only what is SQLite's own: several connections on one file, the file itself, rows that
    //! do not decode, call counting. The store contract is tested in `tests/conformance`.

    use super::*;
    use std::path::PathBuf;
    use trawl_core::store::CrawlStore;
    use trawl_core::store::{ClaimOutcome, TaskRecords, TaskStore};
    use trawl_domain::calls::CallTally;
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::task::{FetchRecord, NewTask};

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
            lane: None,
            priority: Default::default(),
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
    async fn a_failed_statement_keeps_sqlites_error_as_its_source() {
        // GIVEN a store whose tasks table another connection dropped
        let dir = TempDir::new("cause");
        let store = SqliteStore::open(dir.db(), Arc::new(CallCounts::default())).unwrap();
        let task = seeded_task(&store).await;
        Connection::open(dir.db())
            .unwrap()
            .execute_batch("DROP TABLE tasks")
            .unwrap();

        // WHEN a task is read
        let failed = store.get(&crawl_id(), &task).await.unwrap_err();

        // THEN the one-line message stays, and the source is SQLite's own error
        assert!(matches!(failed, StoreError::Backend { .. }), "{failed:?}");
        assert_eq!(failed.to_string(), "get: no such table: tasks");
        let source = std::error::Error::source(&failed).expect("a source");
        assert!(
            source.downcast_ref::<rusqlite::Error>().is_some(),
            "{source:?}"
        );
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
        store.add_calls(&id, &share).await.unwrap();

        // THEN the file is at the current version and the crawl has the calls (the add's own
        // write included)
        let version: i64 = Connection::open(dir.db())
            .unwrap()
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let expected = CallTally::from([(Call::S3PutObject, 2), (Call::SqliteWrite, 1)]);
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
            lane: None,
            priority: Default::default(),
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
    async fn a_version_12_file_gains_lanes_when_opened_and_its_tasks_stay_in_no_lane() {
        // GIVEN a file of the schema before lanes, holding a pending task
        let dir = TempDir::new("v12");
        let old = CanonicalUrl::parse("http://example.com/old")
            .unwrap()
            .task_id();
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
                COMPLETER_SCHEMA,
                HOST_COUNTS_SCHEMA,
                LEVEL_SCHEMA,
                GENERATION_SCHEMA,
                PRIORITY_SCHEMA,
            ] {
                conn.execute_batch(part).unwrap();
            }
            conn.pragma_update(None, "user_version", 12).unwrap();
            conn.execute(
                "INSERT INTO tasks (crawl_id, task_id, url, status, created, updated, depth, \
                 host, due) VALUES ('c', ?1, 'http://example.com/old', ?2, 0, 0, 0, \
                 'example.com', 0)",
                params![old.as_str(), code(Status::Pending)],
            )
            .unwrap();
        }

        // WHEN it is opened and a task is seeded in a lane
        let store = SqliteStore::open(dir.db(), Arc::new(CallCounts::default())).unwrap();
        let id = CrawlId::parse("c").unwrap();
        let new = NewTask {
            lane: Some("details".to_owned()),
            priority: Default::default(),
            url: CanonicalUrl::parse("http://example.com/new").unwrap(),
            depth: 0,
            parent: None,
            data: None,
        };
        store
            .seed(&id, std::slice::from_ref(&new), T0)
            .await
            .unwrap();

        // THEN the old task reads in no lane and stays in its host's due list; the new one is
        // in its lane's
        assert_eq!(store.get(&id, &old).await.unwrap().unwrap().lane, None);
        assert_eq!(
            store.due_tasks(&id, "example.com", 10).await.unwrap().len(),
            2
        );
        let lane = store
            .due_in_lane(&id, "example.com", "details", 10)
            .await
            .unwrap();
        assert_eq!(lane.len(), 1);
        assert_eq!(lane[0].task_id, new.url.task_id());
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
