//! Section: the chaos run. `trawl --backend aws crawl` of the fixture site (500 pages; 200 with
//! `--quick`) through the fault-injecting proxy (`trawl-faults`) in front of single-threaded moto
//! (conditional writes atomic, as on DynamoDB; the queue on a threaded one, where a long poll
//! holds no other request): 10% of AWS requests answered with retryable errors
//! (throttling, throughput exceeded, 500, 503), 5% applied with their response lost (dropped or
//! truncated), seeded so that a run can be replayed. Prints the wall time, the pages fetched
//! twice, the backend errors the CLI waited out and the faults injected, and checks the
//! invariants straight from moto: every task terminal, one manifest line per task, summary
//! counts = table counts, no dangling pointer, no orphan after the generation's clean-up, every
//! body's md5 its key's and its task's.

use crate::error::{BenchResult, Context, check};
use crate::moto::{Moto, SHARDS, stack};
use crate::report::Figure;
use crate::site::Site;
use std::path::Path;
use std::time::Instant;
use trawl_core::blob::Layout;
use trawl_domain::canonical::CrawlId;
use trawl_faults::audit::audit;
use trawl_faults::{Fault, FaultProxy, Mix};

const SECTION: &str = "chaos (AWS faults)";
/// The faults' seed: the same requests meet the same faults in every run.
const SEED: u64 = 18;
const MIX: Mix = Mix {
    errors: 0.10,
    lost: 0.05,
};

pub async fn run(quick: bool, cli: &Path) -> BenchResult<Vec<Figure>> {
    let pages = if quick { 200 } else { 500 };
    let site = Site::start(pages)?;
    let moto = Moto::start(false)?;
    let queues = Moto::start(true)?;
    let stack = stack(&moto.endpoint, "chaos").await?;
    let queue = crate::moto::stack(&queues.endpoint, "chaos-queue").await?;
    // A lost ReceiveMessage answer hides its turns for the visibility timeout: 10 s, as in the
    // test (a turn seen twice meanwhile is fenced by its lease).
    crate::moto::clients(&queues.endpoint)
        .await
        .sqs
        .set_queue_attributes()
        .queue_url(&queue.queue_url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "10",
        )
        .send()
        .await
        .step("set the queue's visibility timeout")?;
    let proxy = FaultProxy::start_split(&moto.endpoint, Some(&queues.endpoint), SEED, MIX)
        .await
        .step("start the fault proxy")?;
    let crawl_id = "chaos";
    let started = Instant::now();
    let output = tokio::process::Command::new(cli)
        .args(["--backend", "aws", "crawl", &site.page_url(0)])
        .args(["--crawl-id", crawl_id, "--per-host", "4"])
        .args(["--allow-private-networks", "--json"])
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("TRAWL_TABLE", &stack.table)
        .env("TRAWL_BUCKET", &stack.bucket)
        .env("TRAWL_QUEUE_URL", &queue.queue_url)
        .env("TRAWL_SHARDS", SHARDS.to_string())
        .kill_on_drop(true)
        .output()
        .await
        .step("run trawl crawl")?;
    let wall = started.elapsed().as_secs_f64();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("");
        return Err(check("chaos crawl", format!("{}: {last}", output.status)));
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&output.stdout).step("read the crawl summary")?;
    let served = site
        .stats(&reqwest::Client::new())
        .await
        .step("site stats")?;
    let crawl = CrawlId::parse(crawl_id).step("crawl id")?;
    let found = audit(&stack.probe, &stack.blobs, &Layout::default(), &crawl)
        .await
        .map_err(|e| check("audit", e))?;
    let faults = proxy.counts();
    let violations = found.unfinished
        + found.duplicates
        + found.dangling
        + found.orphans
        + found.md5_mismatches
        + found.summary_mismatches
        + found.manifest_lines.abs_diff(found.tasks);
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(SECTION, name, unit, value);
    let mut figures = vec![
        one(
            &format!("{pages}-page crawl through faults, wall time"),
            "s",
            wall,
        ),
        one("tasks succeeded", "tasks", found.succeeded as f64).at_least(pages as f64),
        one(
            "invariant violations (lost, duplicate, dangling, orphan, md5, summary)",
            "count",
            violations as f64,
        )
        .at_most(0.0),
        one(
            "pages fetched twice",
            "pages",
            served.requests.saturating_sub(served.distinct) as f64,
        ),
        one(
            "orphans removed by the generation's clean-up",
            "objects",
            found.orphans_removed as f64,
        ),
        one(
            "unpointed objects younger than the lease (left for the next clean-up)",
            "objects",
            found.recent_unpointed as f64,
        ),
        one(
            "backend errors the CLI waited out",
            "retries",
            summary["backend_retries"].as_f64().unwrap_or(f64::NAN),
        ),
        one(
            "AWS requests through the proxy",
            "requests",
            faults.requests as f64,
        ),
    ];
    for fault in Fault::ALL {
        figures.push(one(
            &format!("faults injected: {}", fault.name()),
            "requests",
            faults.of(fault) as f64,
        ));
    }
    Ok(figures)
}
