//! `trawl`: parses the command line, picks the backend, runs the command, and turns any error
//! into one clear line and a non-zero exit code. The logic lives in trawl-core.

// Output goes through `output`, which survives a closed pipe; the print macros panic on one.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod admin;
mod args;
mod backend;
mod crawl;
mod demo;
mod error;
mod given_up;
mod output;
mod progress;

use args::{BackendKind, Cli, Command, TasksCommand};
use backend::LocalAccess;
use clap::Parser;
use error::CliError;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = run(cli).await.and_then(|()| match output::write_failure() {
        Some(e) => Err(CliError::Output(e.to_string())),
        None => Ok(()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::note(format_args!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Logs go to stderr, quiet unless RUST_LOG asks: stdout is for results. The AWS SDK's warnings
/// about where it looked for credentials are left out by default: a failed call is reported
/// once, as the command's error line.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,aws_config=error"));
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
            let local = backend::local(&global.data_dir, local_access(&cli.command))?;
            admin::dispatch(local, cli.command, global.json).await
        }
        BackendKind::Aws => admin::dispatch(backend::aws().await?, cli.command, global.json).await,
    }
}

/// Only crawling creates a data directory; commands that only read never create or lock anything.
fn local_access(command: &Command) -> LocalAccess {
    match command {
        Command::Crawl(_) | Command::Demo => LocalAccess::Create,
        Command::Status(_)
        | Command::Hosts(_)
        | Command::Tasks(TasksCommand::List(_) | TasksCommand::Show(_))
        // `setup` is refused before any local backend is opened.
        | Command::Setup(_) => LocalAccess::Read,
        Command::Retry(_) | Command::Deliver(_) | Command::Purge(_) => LocalAccess::Write,
    }
}
