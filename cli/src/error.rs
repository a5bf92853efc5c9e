//! Every failure the CLI reports: what went wrong, with which input, and what to do next — on
//! one line.

use thiserror::Error;
use trawl_core::deliver::{DeliverError, PurgeError};
use trawl_core::runner::RunError;
use trawl_core::seed::SeedError;
use trawl_core::store::StoreError;
use trawl_core::sweep::SweepError;

#[derive(Debug, Error)]
pub enum CliError {
    /// Arguments that do not make sense together, or a value that is not valid.
    #[error("{0}")]
    Usage(String),
    #[error(
        "cannot use the data directory {path}: {reason}; check that it is a directory you may \
         write to, or pass another --data-dir"
    )]
    DataDir { path: String, reason: String },
    #[error(
        "the data directory {0} is in use by another trawl process (one crawl process per \
         directory): wait for it to end, or pass another --data-dir"
    )]
    Locked(String),
    /// A command that only reads, pointed at a directory without a crawl database.
    #[error(
        "no crawl in {0}: start one with `trawl crawl URL --data-dir {0}`, or pass the \
         --data-dir of an existing crawl"
    )]
    NoCrawlHere(String),
    /// The data directory's database file is there but is not one (empty, cut short, another
    /// program's): never taken for a new crawl, which would fetch everything again.
    #[error(
        "{path} is {reason}: move it away or restore it from a backup (only a missing trawl.db \
         starts a new crawl)"
    )]
    NotADatabase { path: String, reason: String },
    #[cfg(feature = "aws")]
    #[error(
        "{0}; for --backend aws set TRAWL_TABLE, TRAWL_BUCKET and TRAWL_QUEUE_URL (see `trawl setup`)"
    )]
    Settings(#[from] trawl_aws::settings::SettingsError),
    /// `--backend aws` asked of a build without the AWS backend (the `aws` feature).
    #[cfg(not(feature = "aws"))]
    #[error(
        "this trawl was built without the AWS backend: build it with `--features aws` \
         (cargo install --path cli --features aws, or cargo run -p trawl --features aws)"
    )]
    NoAwsBackend,
    #[error("no crawl {0:?}: see `trawl status` for the crawls there are")]
    NoSuchCrawl(String),
    #[error("{0}; {hint}", hint = store_hint(.0))]
    Store(#[from] StoreError),
    /// Storage that keeps failing (a full disk, a read-only directory, access denied): the run
    /// stopped; tasks in flight were handed back.
    #[error(
        "storage keeps failing: {0}; free space or fix the permissions, then run the same \
         command again: the crawl resumes where it stopped"
    )]
    Storage(String),
    /// A step that failed for a reason outside the command line (network, backend, disk).
    #[error("{0}; run the same command again (RUST_LOG=debug shows each step)")]
    Other(String),
    /// The crawl completed without fetching a single page.
    #[error("crawl {crawl_id} fetched no page: {reason}; {next}")]
    NothingFetched {
        crawl_id: String,
        reason: String,
        next: String,
    },
    /// The results could not be written to stdout (a closed pipe is not this: see `output`).
    #[error("cannot write the results to stdout: {0}; check where the output goes (a full disk?)")]
    Output(String),
    #[error("interrupted: run the same command again to resume")]
    Interrupted,
    /// The `--on-delivered` command failed; the delivery it was run for is in place.
    #[error("delivered to {location}, but the --on-delivered command failed: {reason}")]
    Hook { location: String, reason: String },
}

impl CliError {
    /// The exit codes the README documents: 130 for an interrupted crawl (the shell convention
    /// for Ctrl-C), 2 for bad usage, 3 for a crawl that fetched nothing, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Interrupted => 130,
            CliError::Usage(_) => 2,
            #[cfg(not(feature = "aws"))]
            CliError::NoAwsBackend => 2,
            CliError::NothingFetched { .. } => 3,
            _ => 1,
        }
    }

    pub fn other(e: impl std::fmt::Display) -> Self {
        CliError::Other(e.to_string())
    }
}

fn store_hint(e: &StoreError) -> &'static str {
    if e.is_retryable() {
        return "the backend is busy or unreachable: run the same command again";
    }
    match e {
        StoreError::Corrupt { .. } => {
            "the stored data is damaged: restore it, or remove the crawl with `trawl purge`"
        }
        StoreError::NoSuchCrawl(_) => "see `trawl status` for the crawls there are",
        _ => "run the same command again; RUST_LOG=debug shows each call",
    }
}

impl trawl_core::backoff::Transient for CliError {
    fn is_transient(&self) -> bool {
        matches!(self, CliError::Store(e) if e.is_retryable())
    }
}

impl From<trawl_embedded::sqlite::OpenError> for CliError {
    fn from(e: trawl_embedded::sqlite::OpenError) -> Self {
        match e {
            trawl_embedded::sqlite::OpenError::NotATrawlDatabase { path, reason } => {
                CliError::NotADatabase { path, reason }
            }
            trawl_embedded::sqlite::OpenError::Store(e) => CliError::Store(e),
        }
    }
}

impl From<SeedError> for CliError {
    fn from(e: SeedError) -> Self {
        match e {
            SeedError::InvalidRequest(_) => {
                CliError::Usage(format!("{e}: see `trawl crawl --help` for the options"))
            }
            SeedError::Store(e) => CliError::Store(e),
            other => CliError::other(other),
        }
    }
}

impl From<RunError> for CliError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Store(e) | RunError::Sweep(SweepError::Store(e)) => CliError::Store(e),
            RunError::NoSuchCrawl(id) => CliError::NoSuchCrawl(id.to_string()),
            RunError::Storage(why) => CliError::Storage(why),
            other => CliError::other(other),
        }
    }
}

impl From<DeliverError> for CliError {
    fn from(e: DeliverError) -> Self {
        match e {
            DeliverError::NotCompleted { crawl_id, .. } => CliError::Usage(format!(
                "crawl {crawl_id} is not complete: finish it with `trawl crawl --crawl-id \
                 {crawl_id}`, then deliver"
            )),
            DeliverError::NoSuchCrawl(id) => CliError::NoSuchCrawl(id.to_string()),
            DeliverError::Store(e) => CliError::Store(e),
            other => CliError::other(other),
        }
    }
}

impl From<PurgeError> for CliError {
    fn from(e: PurgeError) -> Self {
        match e {
            PurgeError::Running(id) => CliError::Usage(format!(
                "crawl {id} is running: let it complete, or pass --force to purge it anyway"
            )),
            PurgeError::Store(e) => CliError::Store(e),
            other => CliError::other(other),
        }
    }
}
