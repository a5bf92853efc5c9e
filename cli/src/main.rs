//! `trawl`: parses the command line, picks the backend, runs the command, and turns any error
//! into one clear line and a non-zero exit code. The logic lives in trawl-core.

mod admin;
mod args;
mod backend;
mod crawl;
mod demo;
mod error;
mod output;
mod progress;

use args::{BackendKind, Cli, Command};
use clap::Parser;
use error::CliError;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Logs go to stderr, quiet unless RUST_LOG asks: stdout is for results.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .try_init();
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let global = cli.global;
    if let Command::Setup(args) = &cli.command {
        if global.backend != BackendKind::Aws {
            return Err(CliError::Usage(
                "`trawl setup` creates AWS resources: add --backend aws".into(),
            ));
        }
        return admin::setup(args, global.json).await;
    }
    match global.backend {
        BackendKind::Local => {
            admin::dispatch(backend::local(&global.data_dir)?, cli.command, global.json).await
        }
        BackendKind::Aws => admin::dispatch(backend::aws().await?, cli.command, global.json).await,
    }
}
