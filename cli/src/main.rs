//! `trawl`: parses the command line, picks the backend, runs the command, and turns any error
//! into one clear line and a non-zero exit code. The logic lives in trawl-core.

// Output goes through `output`, which survives a closed pipe; the print macros panic on one.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod admin;
mod args;
mod backend;
mod crawl;
mod deliveries;
mod demo;
mod dry_run;
mod error;
mod extract;
mod generations;
mod given_up;
mod hook;
mod output;
mod progress;
#[cfg(feature = "aws")]
mod submit;
mod watch;

use args::{
    BackendKind, Cli, Command, ConfigCommand, DeliveriesCommand, HostsArgs, HostsCommand,
    TasksCommand,
};
use backend::LocalAccess;
use clap::{CommandFactory, Parser};
use error::CliError;
use std::process::ExitCode;
use trawl_domain::canonical::redact_userinfo;

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Cli::try_parse() {
        Ok(cli) => {
            init_logging();
            run(cli).await.and_then(|()| match output::write_failure() {
                Some(e) => Err(CliError::Output(e.to_string())),
                None => Ok(()),
            })
        }
        Err(e) => Err(usage_error(e)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::note(format_args!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}

/// A command line clap refused, as one line naming the problem and where to read about it
/// (clap's own message spans several lines with the usage). clap quotes the value it refused:
/// a URL's credentials are redacted from it (`--proxy http://bob:pw@…`). Help and version are
/// printed as clap prints them.
fn usage_error(e: clap::Error) -> CliError {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rendered = e.render().to_string();
    CliError::Usage(one_line(&redact_userinfo(&rendered), &subcommand_of(&args)))
}

/// The (sub)command the arguments name, as typed: `trawl crawl`, `trawl tasks list`.
fn subcommand_of(args: &[String]) -> String {
    let mut command = Cli::command();
    let mut path = vec!["trawl".to_owned()];
    for arg in args {
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_owned());
        command = sub;
    }
    path.join(" ")
}

/// clap's message (`error: …`, tips, possible values, the usage) on one line, ending with the
/// help to read.
fn one_line(rendered: &str, command: &str) -> String {
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|line| {
            !line.is_empty()
                && !line.starts_with("Usage: ")
                && !line.starts_with("For more information")
        })
        .map(|line| line.strip_prefix("error: ").unwrap_or(line))
        .collect();
    format!("{}; see `{command} --help`", parts.join("; "))
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
    if global.backend == BackendKind::Local
        && let Some(usage) = aws_only(&cli.command)
    {
        return Err(CliError::Usage(usage.into()));
    }
    #[cfg(not(feature = "aws"))]
    if global.backend == BackendKind::Aws {
        return Err(CliError::NoAwsBackend);
    }
    #[cfg(feature = "aws")]
    match &cli.command {
        Command::Setup(args) => return admin::setup(args, global.json).await,
        Command::Migrate(selector) => {
            let aws = backend::aws(global.stack.as_deref()).await?;
            return admin::migrate(&aws.store, selector, global.json).await;
        }
        _ => {}
    }
    // The extractors' dry run of a URL needs no backend: it reads a file and fetches a page.
    if let Command::Extract(args) = &cli.command
        && args.task.is_none()
    {
        return extract::run(args, global.json).await;
    }
    // A crawl's seeds and configuration are checked before any backend is opened (or a data
    // directory created).
    let plan = match &cli.command {
        Command::Crawl(args) => Some(crawl::Plan::of(args)?.runs_here()?),
        Command::Submit(args) => Some(crawl::Plan::of(args)?.submitted(args)?),
        _ => None,
    };
    let (command, plan) = match (cli.command, plan) {
        (Command::Crawl(args), Some(plan)) if args.dry_run => {
            return dry_run::dry_run(args, plan, &global).await;
        }
        other => other,
    };
    match global.backend {
        BackendKind::Local => {
            let mut local = backend::local(&global.data_dir, local_access(&command))?;
            local.on_delivered = global.on_delivered;
            admin::dispatch(local, command, plan, global.json).await
        }
        #[cfg(feature = "aws")]
        BackendKind::Aws => {
            let mut aws = backend::aws(global.stack.as_deref()).await?;
            aws.on_delivered = global.on_delivered;
            admin::dispatch(aws, command, plan, global.json).await
        }
        #[cfg(not(feature = "aws"))]
        BackendKind::Aws => Err(CliError::NoAwsBackend),
    }
}

/// Why a command that only the AWS backend runs cannot run on the local one.
fn aws_only(command: &Command) -> Option<&'static str> {
    match command {
        Command::Setup(_) => Some("`trawl setup` creates AWS resources: add --backend aws"),
        Command::Migrate(_) => Some("`trawl migrate` upgrades a DynamoDB table: add --backend aws"),
        Command::Submit(_) => Some(
            "`trawl submit` hands a crawl to the deployed functions: add --backend aws and \
             --stack NAME (`trawl crawl` crawls in this process)",
        ),
        _ => None,
    }
}

/// Only crawling creates a data directory; commands that only read never create or lock anything.
fn local_access(command: &Command) -> LocalAccess {
    match command {
        Command::Crawl(_) | Command::Demo => LocalAccess::Create,
        Command::Status(_)
        | Command::Hosts(HostsArgs {
            show: None | Some(HostsCommand::Show { .. }),
            ..
        })
        | Command::Tasks(TasksCommand::List(_) | TasksCommand::Show(_))
        | Command::Check(_)
        | Command::Extract(_)
        | Command::Config(ConfigCommand::Show(_) | ConfigCommand::Get { .. })
        | Command::Deliveries(DeliveriesCommand::List(_) | DeliveriesCommand::Get(_))
        // `setup`, `migrate` and `submit` are refused (and `extract URL` run) before any backend
        // is opened.
        | Command::Setup(_)
        | Command::Migrate(_)
        | Command::Submit(_) => LocalAccess::Read,
        Command::Retry(_)
        | Command::Deliver(_)
        | Command::Compact(_)
        | Command::Purge(_)
        | Command::Hosts(HostsArgs {
            show: Some(HostsCommand::Drop { .. } | HostsCommand::Move { .. }),
            ..
        }) => LocalAccess::Write,
        // They crawl afterwards, unless detached: the crawl's own access.
        Command::Recrawl(_) | Command::Refetch(_) | Command::Reset(_) | Command::Reextract(_) => {
            LocalAccess::Write
        }
        Command::Config(ConfigCommand::Set { .. }) | Command::Pause(_) | Command::Resume(_) => {
            LocalAccess::Write
        }
    }
}
