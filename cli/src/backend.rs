//! The two backends the CLI runs on, built from the command line or the environment.

use crate::error::CliError;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
#[cfg(feature = "aws")]
use trawl_aws::{
    app::{AwsPorts, Wiring},
    clients::Clients,
    settings::{CliSettings, FromEnv},
    sqs::SqsSeedQueue,
    stack::StackError,
};
use trawl_core::app::{App, Ports};
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::memory::MemoryStore;
use trawl_domain::calls::CallCounts;
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

/// How long a received local message stays invisible before it is handed out again (a worker
/// that holds one longer than this has died with the process anyway).
const LOCAL_VISIBILITY: Duration = Duration::from_secs(300);

/// The App of one backend, plus what commands need to describe it. It reads as its App
/// (`backend.store`, …: it derefs to it), which the commands' services share.
pub struct Backend<P: Ports> {
    pub app: Arc<App<P>>,
    /// Prefix of object URIs in deliveries and listings.
    pub uri_base: String,
    /// Whether the queue lives in this process (so it is rebuilt from the table on start).
    pub local: bool,
    /// The deployed seeder's queue (`trawl submit`), when the stack has one.
    #[cfg(feature = "aws")]
    pub seed_queue: Option<SqsSeedQueue>,
    /// `--on-delivered`: run when this process writes a delivery (`hook`).
    pub on_delivered: Option<String>,
    /// `--dry-run`: in memory, reported page by page, never delivered (`dry_run`).
    pub dry_run: bool,
    /// Held for the process's life: one process per local data directory.
    _lock: Option<File>,
}

impl<P: Ports> std::ops::Deref for Backend<P> {
    type Target = App<P>;

    fn deref(&self) -> &App<P> {
        &self.app
    }
}

pub type LocalBackend = Backend<(SqliteStore, FsBlobStore, LocalQueue)>;
pub type MemoryBackend = Backend<(MemoryStore, MemoryBlobStore, LocalQueue)>;
#[cfg(feature = "aws")]
pub type AwsBackend = Backend<AwsPorts>;

/// What a command may do to the local data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalAccess {
    /// Crawling: creates the directory and its database if missing; one process at a time.
    Create,
    /// Changing an existing crawl: the database must exist; one process at a time.
    Write,
    /// Only reading: the database must exist, and nothing is created — not even the lock file,
    /// which readers do not need (SQLite's WAL lets them read beside a running crawl).
    Read,
}

/// SQLite + files under `data_dir`, and an in-process queue.
pub fn local(data_dir: &Path, access: LocalAccess) -> Result<LocalBackend, CliError> {
    let shown = data_dir.display().to_string();
    let dir_err = |e: std::io::Error| CliError::DataDir {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let db = data_dir.join("trawl.db");
    if access == LocalAccess::Create {
        std::fs::create_dir_all(data_dir).map_err(dir_err)?;
    } else if !db.is_file() {
        return Err(CliError::NoCrawlHere(shown));
    }
    let lock = match access {
        LocalAccess::Read => None,
        LocalAccess::Create | LocalAccess::Write => Some(lock_data_dir(data_dir, &shown)?),
    };
    let calls = Arc::new(CallCounts::default());
    let store = match access {
        LocalAccess::Create => SqliteStore::open(db, calls.clone())?,
        LocalAccess::Write | LocalAccess::Read => SqliteStore::open_existing(db, calls.clone())?,
    };
    let root = std::fs::canonicalize(data_dir).map_err(dir_err)?;
    let blobs = FsBlobStore::new(&root, calls.clone());
    let queue = LocalQueue::new(LOCAL_VISIBILITY, calls.clone());
    Ok(Backend {
        app: Arc::new(App::new(store, blobs, queue, calls)),
        uri_base: root.display().to_string(),
        local: true,
        #[cfg(feature = "aws")]
        seed_queue: None,
        on_delivered: None,
        dry_run: false,
        _lock: lock,
    })
}

/// `--dry-run`'s backend: memory only, with the local backend's in-process queue.
pub fn memory() -> MemoryBackend {
    let calls = Arc::new(CallCounts::default());
    let queue = LocalQueue::new(LOCAL_VISIBILITY, calls.clone());
    Backend {
        app: Arc::new(App::new(
            MemoryStore::new(),
            MemoryBlobStore::new(),
            queue,
            calls,
        )),
        uri_base: "memory (a dry run: nothing is stored)".to_owned(),
        local: true,
        #[cfg(feature = "aws")]
        seed_queue: None,
        on_delivered: None,
        dry_run: true,
        _lock: None,
    }
}

/// Takes the data directory's lock: one process per local data directory.
fn lock_data_dir(data_dir: &Path, shown: &str) -> Result<File, CliError> {
    let dir_err = |e: std::io::Error| CliError::DataDir {
        path: shown.to_owned(),
        reason: e.to_string(),
    };
    let lock = File::create(data_dir.join(".lock")).map_err(dir_err)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Locked(shown.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(dir_err(e)),
    }
}

/// DynamoDB + S3 + SQS named by the environment (moto or a real account), or by the outputs of
/// the CloudFormation stack `stack` where the environment names nothing.
#[cfg(feature = "aws")]
pub async fn aws(stack: Option<&str>) -> Result<AwsBackend, CliError> {
    let config = trawl_aws::clients::load_config().await;
    let settings = aws_settings(&config, stack).await?;
    let clients = Clients::new(&config);
    let calls = Arc::new(CallCounts::default());
    Ok(Backend {
        app: Arc::new(settings.app(&clients, calls.clone())),
        seed_queue: settings
            .seed_queue_url
            .map(|url| SqsSeedQueue::new(clients.sqs, url, calls)),
        uri_base: format!("s3://{}", settings.bucket),
        local: false,
        on_delivered: None,
        dry_run: false,
        _lock: None,
    })
}

/// The settings of `--backend aws`: each variable from the environment, else from the stack's
/// outputs.
#[cfg(feature = "aws")]
async fn aws_settings(
    config: &trawl_aws::clients::SdkConfig,
    stack: Option<&str>,
) -> Result<CliSettings, CliError> {
    let Some(name) = stack else {
        return Ok(CliSettings::from_env()?);
    };
    let outputs = trawl_aws::stack::stack_variables(config, name)
        .await
        .map_err(|e| match e {
            StackError::NotFound(_) => CliError::Usage(format!(
                "{e}: check --stack (or TRAWL_STACK), the region (AWS_REGION) and the account"
            )),
            StackError::Unavailable { .. } => CliError::other(e),
        })?;
    Ok(CliSettings::from_lookup(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .or_else(|| outputs.get(name).cloned())
    })?)
}
