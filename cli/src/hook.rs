//! `--on-delivered CMD`: a command run when a delivery lands (the local counterpart of the
//! S3 event the deployed stack sends to EventBridge for each delivery's `_SUCCESS` marker).
//! It runs once per delivery written by this process, through `sh -c`, with the delivery in
//! its environment; a delivery that already existed does not run it again. Its output goes to
//! stderr, so that stdout keeps only trawl's results (`--json` stays one object).

use crate::error::CliError;
use std::os::fd::AsFd;
use std::process::Stdio;
use trawl_core::deliver::DeliveryReport;

/// The variables the command sees, each naming one fact of the delivery.
pub fn environment(report: &DeliveryReport) -> [(&'static str, String); 5] {
    [
        ("TRAWL_CRAWL_ID", report.crawl_id.as_str().to_owned()),
        ("TRAWL_GENERATION", report.generation.to_string()),
        ("TRAWL_DELIVERY_ID", report.delivery_id.clone()),
        ("TRAWL_DELIVERY", report.location.clone()),
        ("TRAWL_TASKS", report.summary.tasks.to_string()),
    ]
}

/// Runs `command` for `report`'s delivery, waiting for it; a command that cannot start or
/// exits non-zero is an error that names it (the delivery itself is in place).
pub async fn on_delivered(command: &str, report: &DeliveryReport) -> Result<(), CliError> {
    let failed = |reason: String| CliError::Hook {
        location: report.location.clone(),
        reason,
    };
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| failed(format!("cannot pass it stderr: {e}")))?;
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(environment(report))
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .status()
        .await
        .map_err(|e| failed(format!("cannot run `sh -c`: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(failed(format!("it exited with {code}"))),
        None => Err(failed("it was killed by a signal".to_owned())),
    }
}
