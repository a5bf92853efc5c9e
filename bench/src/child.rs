//! A section run in a child process (`trawl-bench <subcommand> … --out FILE`) that writes its
//! measures to a file: the Lambda handlers print their CloudWatch metrics on stdout, which is
//! the harness's report, so a run through them cannot share the harness's process. Also the
//! stack such a run crawls on: the table and bucket on a single-threaded moto (its conditional
//! writes atomic, as on DynamoDB), the queues on a threaded one (a long poll holds no other
//! request up).

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::moto::{Moto, clients};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use trawl_aws::clients::Clients;
use trawl_aws::stack::{Stack, create_stack};
use trawl_faults::lambda::split_stack;

/// Runs this binary with `args` and `--out FILE`, and reads back the measures it wrote there;
/// `what` names the run in errors.
pub async fn run<M: DeserializeOwned>(what: &str, args: &[String]) -> BenchResult<M> {
    let dir = TempDir::new("child")?;
    let out = dir.0.join("measured.json");
    let exe = std::env::current_exe().step("locate trawl-bench")?;
    let status = tokio::process::Command::new(exe)
        .args(args)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .status()
        .await
        .step(what)?;
    if !status.success() {
        return Err(check(what, status.to_string()));
    }
    let text = std::fs::read_to_string(&out).step("read the child's measures")?;
    serde_json::from_str(&text).step("decode the child's measures")
}

/// The child's side: logs on stderr when RUST_LOG asks (what a figure does not explain), runs
/// `measure` on a runtime of its own, and writes what it measured to `out`.
pub fn main<M: Serialize>(
    out: &Path,
    measure: impl Future<Output = BenchResult<M>>,
) -> BenchResult<()> {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .step("the child's runtime")?;
    let measured = runtime.block_on(measure)?;
    let json = serde_json::to_string(&measured).step("encode the measures")?;
    std::fs::write(out, json).step("write the measures")
}

/// The two moto servers of a run through the handlers and the stack created on them.
pub struct SplitStack {
    /// The table and the bucket (single-threaded).
    pub moto: Moto,
    /// The queues (threaded).
    pub queues: Moto,
    pub queue_clients: Clients,
    pub stack: Stack,
}

impl SplitStack {
    pub async fn start(crawl_id: &str) -> BenchResult<Self> {
        let moto = Moto::start(false)?;
        let queues = Moto::start(true)?;
        let tables = create_stack(&clients(&moto.endpoint).await, crawl_id)
            .await
            .map_err(|e| check("create the stack", e.to_string()))?;
        let queue_clients = clients(&queues.endpoint).await;
        let queued = create_stack(&queue_clients, crawl_id)
            .await
            .map_err(|e| check("create the queues", e.to_string()))?;
        Ok(Self {
            moto,
            queues,
            queue_clients,
            stack: split_stack(tables, queued),
        })
    }
}
