//! Section: the chaos run. `trawl --backend aws crawl` of the fixture site (1,000 pages; 200
//! with `--quick`) through the fault-injecting proxy (`trawl-faults`) in front of single-threaded
//! moto (conditional writes atomic, as on DynamoDB; the queue on a threaded one, where a long
//! poll holds no other request): 10% of AWS requests answered with retryable errors
//! (throttling, throughput exceeded, 500, 503), 5% applied with their response lost (dropped or
//! truncated), seeded so that a run can be replayed. The CLI is SIGKILLed 3 times, spread over
//! the crawl (at a quarter, half and three quarters of the pages fetched), and each time run
//! again with the same command until a run exits 0. Prints the wall time, the kills and runs,
//! the pages fetched twice, the backend errors the CLI waited out and the faults injected, and
//! checks the invariants straight from moto: every task terminal, one manifest line per task,
//! summary counts = table counts, no dangling pointer, no orphan after the generation's
//! clean-up, every body's md5 its key's and its task's.

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::moto::{Moto, SHARDS, stack};
use crate::report::Figure;
use crate::site::{Repeat, Site, Stats};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use trawl_core::blob::Layout;
use trawl_domain::canonical::CrawlId;
use trawl_faults::audit::{Audit, audit};
use trawl_faults::{Counts, Fault, FaultProxy, Mix};

const SECTION: &str = "chaos (AWS faults)";
/// The faults' seed: the same requests meet the same faults in every run.
const SEED: u64 = 18;
const MIX: Mix = Mix {
    errors: 0.10,
    lost: 0.05,
};
/// The CLI is SIGKILLed once these shares of the pages have been fetched.
const KILL_AT: [f64; 3] = [0.25, 0.5, 0.75];
/// The bound on runs: one per kill, and a few that may end on an error (then run again).
const MAX_RUNS: usize = KILL_AT.len() + 4;
/// The whole run's bound.
const LIMIT: Duration = Duration::from_secs(4 * 3_600);
/// A short lease and fetch timeout (a host's turn lasts at least two): what a killed run held is
/// taken over within seconds.
const CONFIG: &str = r#"{"lease_ms": 10000, "fetch": {"timeout_ms": 3000}}"#;

/// How the runs of the CLI ended.
#[derive(Debug, Default)]
struct Runs {
    started: u64,
    killed: u64,
    /// Exit codes other than 0 (each run again).
    failed: u64,
}

pub async fn run(quick: bool, cli: &Path) -> BenchResult<Vec<Figure>> {
    let pages = if quick { 200 } else { 1_000 };
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
    let dir = TempDir::new("chaos")?;
    let config = dir.0.join("config.json");
    std::fs::write(&config, CONFIG).step("write the crawl config")?;
    let client = trawl_core::fetch::http_client()
        .build()
        .step("http client")?;
    let started = Instant::now();
    let mut runs = Runs::default();
    let mut kills_ms = Vec::new();
    let mut delivered = None;
    for n in 0..MAX_RUNS {
        if started.elapsed() > LIMIT {
            return Err(check(
                "chaos crawl",
                format!("outlasted its bound: {runs:?}"),
            ));
        }
        let (out, err) = (
            dir.0.join(format!("run-{n}.json")),
            dir.0.join(format!("run-{n}.err")),
        );
        let mut child = tokio::process::Command::new(cli)
            .args(["--backend", "aws", "crawl", &site.page_url(0)])
            .args(["--crawl-id", crawl_id, "--per-host", "4", "--config"])
            .arg(&config)
            .args(["--allow-private-networks", "--json"])
            .env("AWS_ENDPOINT_URL", proxy.endpoint())
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("TRAWL_TABLE", &stack.table)
            .env("TRAWL_BUCKET", &stack.bucket)
            .env("TRAWL_QUEUE_URL", &queue.queue_url)
            .env("TRAWL_SHARDS", SHARDS.to_string())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).step("create the run's output")?)
            .stderr(std::fs::File::create(&err).step("create the run's log")?)
            .kill_on_drop(true)
            .spawn()
            .step("run trawl crawl")?;
        runs.started += 1;
        let kill_at = KILL_AT
            .get(runs.killed as usize)
            .map(|share| (share * pages as f64) as u64);
        let status = loop {
            if let Some(status) = child.try_wait().step("wait for trawl crawl")? {
                break Some(status);
            }
            if let Some(at) = kill_at
                && site.stats(&client).await.step("site stats")?.distinct >= at
            {
                child.start_kill().step("SIGKILL trawl crawl")?;
                kills_ms.push(now_unix_ms());
                child.wait().await.step("wait for the killed run")?;
                runs.killed += 1;
                break None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        match status {
            Some(status) if status.success() => {
                delivered = Some(std::fs::read(&out).step("read the crawl summary")?);
                break;
            }
            Some(status) => {
                runs.failed += 1;
                let stderr = std::fs::read_to_string(&err).unwrap_or_default();
                let last = stderr.lines().last().unwrap_or_default();
                eprintln!("  run {n} of the CLI: {status}: {last}");
            }
            None => {}
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let Some(output) = delivered else {
        return Err(check("chaos crawl", format!("no run exited 0: {runs:?}")));
    };
    let summary: serde_json::Value =
        serde_json::from_slice(&output).step("decode the crawl summary")?;
    let served = site.stats(&client).await.step("site stats")?;
    let crawl = CrawlId::parse(crawl_id).step("crawl id")?;
    let found = audit(&stack.probe, &stack.blobs, &Layout::default(), &crawl)
        .await
        .map_err(|e| check("audit", e))?;
    let faults = proxy.counts();
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(SECTION, name, unit, value);
    let mut figures = vec![
        one(
            &format!("{pages}-page crawl through faults and SIGKILLs, time to delivery"),
            "s",
            wall,
        ),
        one("SIGKILLs of the CLI", "kills", runs.killed as f64),
        one("runs of the CLI", "runs", runs.started as f64),
        one(
            "runs that exited with an error (each run again)",
            "runs",
            runs.failed as f64,
        )
        .at_most(0.0),
        one(
            "backend errors the CLI waited out (the run that exited 0)",
            "retries",
            summary["backend_retries"].as_f64().unwrap_or(f64::NAN),
        ),
    ];
    let refetched = Refetches::of(&served, &kills_ms);
    figures.extend(outcome(SECTION, pages, &found, refetched, &faults));
    Ok(figures)
}

/// How long before a kill (or a cut invocation) a page's first request may have been made for
/// its refetch to be the kill's: the fetch was in flight, or its result not yet recorded, when
/// the process died (a turn's fetch, PUT and finish take seconds through faults).
const IN_FLIGHT_MS: u64 = 30_000;

/// Pages fetched more than once, and how many of them a kill explains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refetches {
    /// Requests beyond one per page.
    pub total: u64,
    /// Repeats whose page was first requested at most `IN_FLIGHT_MS` before a kill, and
    /// again after it.
    pub at_kills: u64,
}

impl Refetches {
    /// From the site's requests and the times (Unix ms) processes were killed or cut.
    pub fn of(served: &Stats, kills_ms: &[u64]) -> Self {
        let at_kill = |r: &Repeat| {
            kills_ms
                .iter()
                .any(|&k| r.first_ms <= k && k <= r.at_ms && k - r.first_ms <= IN_FLIGHT_MS)
        };
        Refetches {
            total: served.requests.saturating_sub(served.distinct),
            at_kills: served.repeats.iter().filter(|r| at_kill(r)).count() as u64,
        }
    }
}

/// Now, as the site's request times are written (Unix ms).
pub fn now_unix_ms() -> u64 {
    u64::try_from(trawl_domain::task::now_ms()).unwrap_or(0)
}

/// What every chaos run prints of its outcome: tasks succeeded, invariant violations, pages
/// fetched more than once (those in flight at a kill apart: a dead process's fetches are not
/// recorded, whatever the crawler) and the clean-up's work.
pub fn invariants(
    section: &'static str,
    pages: usize,
    found: &Audit,
    refetched: Refetches,
) -> Vec<Figure> {
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(section, name, unit, value);
    let share = |n: u64| 100.0 * n as f64 / pages as f64;
    vec![
        one("tasks succeeded", "tasks", found.succeeded as f64).at_least(pages as f64),
        one(
            "invariant violations (lost, duplicate, dangling, orphan, md5, summary)",
            "count",
            found.violations() as f64,
        )
        .at_most(0.0),
        one("pages fetched more than once", "%", share(refetched.total)),
        one(
            "… of which in flight at a kill or cut (first fetched ≤ 30 s before it)",
            "pages",
            refetched.at_kills as f64,
        ),
        one(
            "pages fetched more than once for any other reason",
            "%",
            share(refetched.total.saturating_sub(refetched.at_kills)),
        )
        .at_most(1.0),
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
    ]
}

/// What every AWS chaos run prints of its outcome: [`invariants`], then the AWS requests and
/// the faults injected by kind.
pub fn outcome(
    section: &'static str,
    pages: usize,
    found: &Audit,
    refetched: Refetches,
    faults: &Counts,
) -> Vec<Figure> {
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(section, name, unit, value);
    let mut figures = invariants(section, pages, found, refetched);
    figures.extend([one(
        "AWS requests through the proxy",
        "requests",
        faults.requests as f64,
    )]);
    for fault in Fault::ALL {
        figures.push(one(
            &format!("faults injected: {}", fault.name()),
            "requests",
            faults.of(fault) as f64,
        ));
    }
    figures
}
