//! Section: the chaos run through the Lambda handlers. The fixture site (1,000 pages; 200 with
//! `--quick`) crawled by the four functions' handlers in-process (`trawl_faults::lambda`), every
//! AWS call of theirs through the fault-injecting proxy (10% retryable errors, 5% applied with
//! the response lost, seed 18) in front of single-threaded moto (the queues on a threaded one),
//! while a batch loop plays Lambda: batches of up to 10 messages to 4 crawler invocations at
//! once, partial batch failures honoured, 10% of messages delivered twice (in the same batch or
//! a later one), 2% of the crawler's invocations cut short (a timeout, a crash: nothing of
//! theirs acknowledged, the next one cold), the sweeper on a 5 s schedule, the deliverer fed by
//! the delivery queue; turns of 10 pages, so that the one host's work goes through many
//! messages. Prints the wall time, the invocations and how they ended, the duplicates
//! delivered, the AWS requests and faults by kind, the pages fetched twice, and the invariants
//! read straight from moto (`trawl_faults::audit`).
//!
//! The run is a child process (`trawl-bench chaos-lambda`) writing its measures to a file: the
//! handlers print their CloudWatch metrics on stdout, which is the harness's report.

use crate::chaos::Refetches;
use crate::child::{self, SplitStack};
use crate::error::{BenchResult, Context, check};
use crate::local::fixture_config;
use crate::moto::{SHARDS, clients};
use crate::report::Figure;
use crate::site::{Site, Stats};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_core::blob::Layout;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_faults::audit::{Audit, audit};
use trawl_faults::lambda::{Lambda, LambdaRun, Plan};
use trawl_faults::{Counts, FaultProxy, Mix};

const SECTION: &str = "chaos (Lambda handlers)";
const CRAWL_ID: &str = "chaos-lambda";
/// The seed of the proxy's faults and of the loop's duplicates and cuts.
const SEED: u64 = 18;
const MIX: Mix = Mix {
    errors: 0.10,
    lost: 0.05,
};
const PLAN: Plan = Plan {
    seed: SEED,
    duplicates: 0.10,
    crashes: 0.02,
    crash_within: Duration::from_secs(5),
    concurrency: 4,
    sweep_every: Duration::from_secs(5),
    sweep_on_functions_clock: false,
    delivery_time: Duration::from_secs(10),
    visibility_timeout_s: 10,
    time_limit: Duration::from_secs(3_600),
    // Real time: the figures are of a run as Lambda would make it.
    idle_skip: Duration::ZERO,
    cold_sweeps: false,
};
/// A short lease (a cut invocation's tasks are taken over within seconds), and a fetch timeout
/// that keeps a host's turn as short (a turn lasts at least two fetch timeouts).
const LEASE_MS: u64 = 10_000;
const FETCH_TIMEOUT_MS: u64 = 3_000;
const PER_HOST: u32 = 4;
/// Short turns: the one host's work goes through many messages (and so many invocations,
/// duplicates and cuts) instead of a few.
const TURN_PAGES: u32 = 10;

/// What the child measured.
#[derive(Debug, Serialize, Deserialize)]
struct Measured {
    pages: usize,
    run: LambdaRun,
    faults: Counts,
    /// What the site served (its repeats, for the refetches the cuts explain).
    served: Stats,
    audit: Audit,
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let pages = if quick { 200 } else { 1_000 };
    let args = [
        "chaos-lambda".to_owned(),
        "--pages".to_owned(),
        pages.to_string(),
    ];
    let measured: Measured = child::run("the Lambda chaos run", &args).await?;
    Ok(figures(&measured))
}

/// Entry point of the `chaos-lambda` child: the whole run, its measures written to `out`.
pub fn chaos_lambda_main(pages: usize, out: &Path) -> BenchResult<()> {
    child::main(out, measure(pages))
}

async fn measure(pages: usize) -> BenchResult<Measured> {
    let site = Site::start(pages)?;
    let SplitStack {
        moto,
        queues,
        queue_clients,
        stack,
    } = SplitStack::start(CRAWL_ID).await?;
    let proxy = FaultProxy::start_split(&moto.endpoint, Some(&queues.endpoint), SEED, MIX)
        .await
        .step("start the fault proxy")?;
    let through_proxy = clients(proxy.endpoint()).await;
    let lambda = Lambda {
        clients: &through_proxy,
        mapping: &queue_clients.sqs,
        stack: &stack,
        layout: Layout::default(),
        shards: SHARDS,
    };
    let mut config = fixture_config();
    config.lease_ms = LEASE_MS;
    config.fetch.timeout_ms = FETCH_TIMEOUT_MS;
    config.politeness.per_host = PER_HOST;
    config.politeness.turn_pages = TURN_PAGES;
    let request = serde_json::json!({
        "crawl_id": CRAWL_ID,
        "config": config,
        "source": {"urls": [site.page_url(0)]},
    });
    let direct = clients(&moto.endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(direct.dynamodb, &stack.table, SHARDS, calls.clone());
    let blobs = S3BlobStore::new(direct.s3, &stack.bucket, calls);
    let crawl = CrawlId::parse(CRAWL_ID).step("crawl id")?;
    let run = lambda
        .run_to_delivery(request, &crawl, &blobs, &PLAN)
        .await
        .map_err(|e| check("Lambda chaos run", e))?;
    let faults = proxy.counts();
    let served = site
        .stats(
            &trawl_core::fetch::http_client()
                .build()
                .step("http client")?,
        )
        .await
        .step("site stats")?;
    let audit = audit(&store, &blobs, &Layout::default(), &crawl)
        .await
        .map_err(|e| check("audit", e))?;
    Ok(Measured {
        pages,
        run,
        faults,
        served,
        audit,
    })
}

fn figures(m: &Measured) -> Vec<Figure> {
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(SECTION, name, unit, value);
    let (run, pages) = (&m.run, m.pages);
    let mut figures = vec![
        one(
            &format!("{pages}-page crawl by the handlers through faults, time to delivery"),
            "s",
            run.wall.as_secs_f64(),
        ),
        one(
            "seeder invocations (a failed one invoked again)",
            "invocations",
            run.seed_invocations as f64,
        ),
        one(
            "crawler invocations",
            "invocations",
            run.crawler_invocations as f64,
        ),
        one(
            "crawler invocations that returned an error",
            "invocations",
            run.failed_invocations as f64,
        ),
        one(
            "crawler invocations cut short (timeout, crash)",
            "invocations",
            run.crashed_invocations as f64,
        ),
        one(
            "records handed to the crawler",
            "records",
            run.records as f64,
        ),
        one(
            "records handed back (batchItemFailures)",
            "records",
            run.handed_back as f64,
        ),
        one("duplicate deliveries", "records", run.duplicates as f64),
        one("sweeper invocations", "invocations", run.sweeps as f64),
        one(
            "sweeper invocations that returned an error",
            "invocations",
            run.failed_sweeps as f64,
        ),
        one(
            "deliverer invocations",
            "invocations",
            run.deliverer_invocations as f64,
        ),
        one(
            "deliverer invocations that returned an error",
            "invocations",
            run.failed_deliveries as f64,
        ),
    ];
    figures.extend(crate::chaos::outcome(
        SECTION,
        pages,
        &m.audit,
        Refetches::of(&m.served, &m.run.cut_at_ms),
        &m.faults,
    ));
    figures
}
