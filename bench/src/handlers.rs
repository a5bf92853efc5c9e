//! Section: a crawl over many hosts through the four Lambda handlers, on moto. One page per host
//! over 500 and 5,000 hosts (50 and 500 with `--quick`; loopback addresses 127.0.x.y on one port
//! are distinct hosts), seeded by the seeder's handler and crawled, swept and delivered by the
//! others (`trawl_faults::lambda`: batches of 10 messages to 8 crawler invocations at once), once
//! without recrawls and once recrawling daily. Every sweep runs in a cold container with the
//! deployed schedule's budget (`events/sweeper-schedule.json`) at its rate (every 5 minutes of the
//! functions' clock). Prints the time to delivery and its phases, the invocations, the most reads
//! one sweep made, the sweeps whose budget ran out, the reads of the sweep that completed the
//! crawl, the DynamoDB requests of `trawl status`'s reads after it, and the functions' requests
//! per host: sizes ten times apart show what grows with the hosts.
//!
//! Each run is a child process (`trawl-bench handlers-run`) writing its measures to a file: the
//! handlers print their CloudWatch metrics on stdout, which is the harness's report.

use crate::child::{self, SplitStack};
use crate::error::{BenchResult, Context, check};
use crate::moto::{SHARDS, clients};
use crate::report::Figure;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_core::blob::Layout;
use trawl_core::store::{HostStore, TaskRecords};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::CrawlConfig;
use trawl_faults::hosts_site::HostsSite;
use trawl_faults::lambda::{Lambda, LambdaRun, Plan};

const SECTION: &str = "many hosts through the handlers";
const CRAWL_ID: &str = "many-hosts";
const PLAN: Plan = Plan {
    seed: 28,
    duplicates: 0.0,
    crashes: 0.0,
    crash_within: Duration::ZERO,
    concurrency: 8,
    // The deployed schedule's rate (`rate(5 minutes)`, infra/template.yaml), on the functions'
    // clock: a sweep reads every host record, so sweeping every few seconds of wall time would
    // make the sweeps most of the work at 5,000 hosts.
    sweep_every: Duration::from_secs(300),
    sweep_on_functions_clock: true,
    delivery_time: Duration::from_secs(60),
    visibility_timeout_s: 30,
    time_limit: Duration::from_secs(3 * 3_600),
    // Virtual time while nothing runs: what the sweeper waits for (a lost message's window)
    // comes in a few idle rounds.
    idle_skip: Duration::from_secs(5),
    cold_sweeps: true,
};
const DAY_MS: u64 = 24 * 3_600 * 1_000;

/// What one child run measured.
#[derive(Debug, Serialize, Deserialize)]
struct Measured {
    hosts: usize,
    recrawl: bool,
    run: LambdaRun,
    /// DynamoDB requests of `trawl status`'s reads (task counts, host counts) after delivery.
    status_requests: u64,
    /// Pages the site served (robots.txt included).
    served: usize,
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let sizes: [usize; 2] = if quick { [50, 500] } else { [500, 5_000] };
    let mut figures = Vec::new();
    for recrawl in [false, true] {
        for hosts in sizes {
            eprintln!(
                "  {hosts} hosts{} …",
                if recrawl { ", recrawling" } else { "" }
            );
            let measured = run_one(hosts, recrawl).await?;
            figures.extend(figures_of(&measured));
        }
    }
    Ok(figures)
}

async fn run_one(hosts: usize, recrawl: bool) -> BenchResult<Measured> {
    let mut args = vec![
        "handlers-run".to_owned(),
        "--hosts".to_owned(),
        hosts.to_string(),
    ];
    if recrawl {
        args.push("--recrawl".to_owned());
    }
    child::run("the crawl through the handlers", &args).await
}

/// Entry point of the `handlers-run` child: one crawl, its measures written to `out`.
pub fn handlers_main(hosts: usize, recrawl: bool, out: &Path) -> BenchResult<()> {
    child::main(out, measure(hosts, recrawl))
}

async fn measure(hosts: usize, recrawl: bool) -> BenchResult<Measured> {
    let pages: trawl_faults::hosts_site::Pages =
        Arc::new(|_, path| (path == "/").then(|| "<html><body>one page</body></html>".to_owned()));
    let site = HostsSite::start(hosts, pages)
        .await
        .step("serve the hosts")?;
    let SplitStack {
        moto,
        queues: _queues,
        queue_clients,
        stack,
    } = SplitStack::start(CRAWL_ID).await?;
    let direct = clients(&moto.endpoint).await;
    // The functions' clients: the table and bucket on one server, the queues on the other.
    let functions = trawl_aws::clients::Clients {
        sqs: queue_clients.sqs.clone(),
        ..clients(&moto.endpoint).await
    };
    let lambda = Lambda {
        clients: &functions,
        mapping: &queue_clients.sqs,
        stack: &stack,
        layout: Layout::default(),
        shards: SHARDS,
    };
    let mut config = CrawlConfig::default();
    config.scope.allowed_domains = (0..hosts)
        .map(|i| trawl_faults::hosts_site::ip(i).to_string())
        .collect();
    config.fetch.allow_private_networks = true;
    config.politeness.delay_ms = 0;
    if recrawl {
        config.recrawl.interval_ms = Some(DAY_MS);
    }
    let urls: Vec<String> = (0..hosts).map(|i| site.url(i, "/")).collect();
    let request = serde_json::json!({
        "crawl_id": CRAWL_ID,
        "config": config,
        "source": {"urls": urls},
    });
    let blobs = S3BlobStore::new(
        direct.s3.clone(),
        &stack.bucket,
        Arc::new(CallCounts::default()),
    );
    let crawl = CrawlId::parse(CRAWL_ID).step("crawl id")?;
    let run = lambda
        .run_to_delivery(request, &crawl, &blobs, &PLAN)
        .await
        .map_err(|e| check("crawl through the handlers", e))?;
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(direct.dynamodb.clone(), &stack.table, SHARDS, calls.clone());
    let counts = store
        .counts(&crawl)
        .await
        .map_err(|e| check("task counts", e.to_string()))?;
    store
        .host_counts(&crawl)
        .await
        .map_err(|e| check("host counts", e.to_string()))?;
    let succeeded = counts
        .get(&trawl_domain::task::Status::Succeeded)
        .copied()
        .unwrap_or_default();
    if succeeded != hosts as u64 || run.completing_sweep_reads.is_none() {
        return Err(check(
            "crawl through the handlers",
            format!("{succeeded} of {hosts} pages succeeded; completed by a sweep: {run:?}"),
        ));
    }
    Ok(Measured {
        hosts,
        recrawl,
        run,
        status_requests: calls.snapshot().iter().map(|(_, n)| n).sum(),
        served: site.requests().len(),
    })
}

fn figures_of(m: &Measured) -> Vec<Figure> {
    let label = format!(
        "{} hosts{}",
        m.hosts,
        if m.recrawl { ", recrawling daily" } else { "" }
    );
    let one = |name: &str, unit: &'static str, value: f64| {
        Figure::single(SECTION, format!("{label}: {name}"), unit, value)
    };
    let run = &m.run;
    let completed = run.completed.unwrap_or(run.wall);
    let per_host = |service: &str| {
        let prefix = format!("{service}.");
        let n: u64 = run
            .calls
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(_, n)| n)
            .sum();
        n as f64 / m.hosts.max(1) as f64
    };
    vec![
        one("seed to delivery", "s", run.wall.as_secs_f64()),
        one("of which seeding", "s", run.seeded.as_secs_f64()),
        one(
            "of which crawling (to the last crawler invocation)",
            "s",
            run.crawled.saturating_sub(run.seeded).as_secs_f64(),
        ),
        one(
            "of which to the sweep that completed the crawl",
            "s",
            completed.saturating_sub(run.crawled).as_secs_f64(),
        ),
        one(
            "of which delivering",
            "s",
            run.wall.saturating_sub(completed).as_secs_f64(),
        ),
        one(
            "the functions' DynamoDB requests per host",
            "requests",
            per_host("dynamodb"),
        ),
        one(
            "the functions' S3 requests per host",
            "requests",
            per_host("s3"),
        ),
        one(
            "the functions' SQS requests per host",
            "requests",
            per_host("sqs"),
        ),
        one(
            "pages served (robots.txt included)",
            "requests",
            m.served as f64,
        ),
        one(
            "crawler invocations",
            "invocations",
            run.crawler_invocations as f64,
        ),
        one(
            "sweeper invocations (each cold)",
            "invocations",
            run.sweeps as f64,
        ),
        one(
            "most reads of one sweep",
            "reads",
            run.sweep_reads_max as f64,
        ),
        one(
            "sweeps whose budget ran out",
            "sweeps",
            run.sweeps_unfinished as f64,
        ),
        one(
            "reads of the sweep that completed the crawl",
            "reads",
            run.completing_sweep_reads.unwrap_or_default() as f64,
        ),
        one(
            "trawl status's DynamoDB requests",
            "requests",
            m.status_requests as f64,
        ),
    ]
}
