//! Every failure the CLI reports: what went wrong, with which input, and what to do.

use thiserror::Error;
use trawl_core::store::StoreError;

#[derive(Debug, Error)]
pub enum CliError {
    /// Arguments that do not make sense together, or a value that is not valid.
    #[error("{0}")]
    Usage(String),
    #[error("cannot use the data directory {path}: {reason}")]
    DataDir { path: String, reason: String },
    #[error(
        "the data directory {0} is in use by another trawl process (one crawl process per directory)"
    )]
    Locked(String),
    #[error(
        "{0}; for --backend aws set TRAWL_TABLE, TRAWL_BUCKET and TRAWL_QUEUE_URL (see `trawl setup`)"
    )]
    Settings(#[from] trawl_aws::settings::SettingsError),
    #[error("no crawl {0:?}: see `trawl status` for the crawls there are")]
    NoSuchCrawl(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Other(String),
    #[error("interrupted: run the same command again to resume")]
    Interrupted,
}

impl CliError {
    /// 130 for an interrupted crawl (the shell convention for Ctrl-C), 2 for bad usage, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Interrupted => 130,
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    pub fn other(e: impl std::fmt::Display) -> Self {
        CliError::Other(e.to_string())
    }
}
