//! Section 4: the sweeper's cost curve. The real sweeper (`trawl_core::sweep::Sweeper`) sweeps
//! one crawl of growing size holding the same number of due tasks (pending, seeded an hour ago,
//! each on a host of its own whose turn message was never received: presumed lost, one turn
//! re-issued per host). Tasks read and queries issued must stay flat as the table grows: the
//! sweeper reads host records and bounded windows, never the crawl's tasks.

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::moto::{Moto, clients};
use crate::report::Figure;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::frontier::seed_tasks;
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::{CrawlStore, HostStore, TaskStore};
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{Millis, NewTask, now_ms};
use trawl_embedded::sqlite::SqliteStore;

const SECTION: &str = "sweeper";
/// Due tasks in every table, whatever its size.
pub const DUE: usize = 50;
/// How long ago the due tasks were last updated, against the rest.
const AGE_MS: Millis = 3_600_000;
const SEED_CHUNK: usize = 1_000;

/// A crawl of `size` pending tasks seeded as the seeder seeds them (`frontier::seed_tasks`, host
/// records included) but whose turn messages are never sent: `DUE` of them an hour ago, each on
/// a host of its own (lost messages), the rest just now on one more host (not overdue yet).
async fn fill<S: TaskStore + CrawlStore + HostStore>(
    store: &S,
    crawl: &Crawl,
    size: usize,
) -> BenchResult<()> {
    let now = now_ms();
    let old = now - AGE_MS;
    let urls: Vec<NewTask> = (0..size)
        .map(|i| {
            let url = if i < DUE {
                format!("http://due-{i}.sweep.invalid/{}/{i}", crawl.id)
            } else {
                format!("http://sweep.invalid/{}/{i}", crawl.id)
            };
            CanonicalUrl::parse(&url).map(|url| NewTask {
                url,
                depth: 0,
                parent: None,
                data: None,
            })
        })
        .collect::<Result<_, _>>()
        .step("sweep urls")?;
    let (due, rest) = urls.split_at(DUE.min(size));
    seed_tasks(store, crawl, due.to_vec(), old)
        .await
        .step("seed due")?;
    for chunk in rest.chunks(SEED_CHUNK) {
        seed_tasks(store, crawl, chunk.to_vec(), now)
            .await
            .step("seed")?;
    }
    Ok(())
}

/// What one sweep of one crawl cost.
struct SweepCost {
    size: usize,
    tasks_read: u64,
    hosts_read: u64,
    queries: u64,
    ms: f64,
}

/// Fills one crawl per size and sweeps it once with the real sweeper (turn messages go to a
/// local queue: the queue is not what is measured).
async fn curve<S: TaskStore + CrawlStore + HostStore>(
    store: &S,
    calls: &CallCounts,
    query_call: Call,
    sizes: &[usize],
    label: &str,
) -> BenchResult<Vec<SweepCost>> {
    let mut out = Vec::new();
    for &size in sizes {
        eprintln!("  sweeper: {label}, {size} tasks");
        let crawl = Crawl::new(
            CrawlId::parse(&format!("sweep-{label}-{size}")).step("crawl id")?,
            CrawlConfig::default(),
            now_ms(),
        );
        store.create_crawl(&crawl).await.step("create crawl")?;
        fill(store, &crawl, size).await?;
        let queue = LocalQueue::new(Duration::from_secs(60), Arc::new(CallCounts::default()));
        let trigger = LocalDeliveryTrigger::default();
        let sweeper = Sweeper {
            store,
            queue: &queue,
            trigger: &trigger,
            calls,
            options: SweepOptions::new(),
        };
        let mut budget = SweepBudget::new(10_000, Duration::from_secs(120));
        calls.reset();
        let started = Instant::now();
        let report = sweeper
            .sweep_crawl(&crawl, now_ms(), &mut budget)
            .await
            .step("sweep")?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if report.lost_messages != DUE as u64
            || report.hosts_requeued != DUE as u64
            || report.unfinished
            || queue.len() != DUE
        {
            return Err(check(
                "sweep",
                format!("{report:?} in {size} tasks, expected {DUE} hosts' turns re-issued"),
            ));
        }
        out.push(SweepCost {
            size,
            tasks_read: report.tasks_read,
            hosts_read: report.hosts_read,
            queries: calls.get(query_call),
            ms,
        });
    }
    Ok(out)
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let sizes: &[usize] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut figures = Vec::new();
    let dir = TempDir::new("sweep")?;
    let calls = Arc::new(CallCounts::default());
    let sqlite = SqliteStore::open(dir.0.join("sweep.db"), calls.clone()).step("open sqlite")?;
    for c in curve(&sqlite, &calls, Call::SqliteRead, sizes, "sqlite").await? {
        let size = c.size;
        figures.extend([
            Figure::single(
                SECTION,
                format!("SQLite, {size} tasks, {DUE} due: tasks read"),
                "tasks",
                c.tasks_read as f64,
            ),
            Figure::single(
                SECTION,
                format!("SQLite, {size} tasks: host records read"),
                "hosts",
                c.hosts_read as f64,
            ),
            Figure::single(
                SECTION,
                format!("SQLite, {size} tasks: reads"),
                "reads",
                c.queries as f64,
            ),
            Figure::single(
                SECTION,
                format!("SQLite, {size} tasks: sweep time (1 sweep)"),
                "ms",
                c.ms,
            ),
        ]);
    }
    let moto = Moto::start(true)?;
    let client = clients(&moto.endpoint).await.dynamodb;
    create_table(&client, "bench-sweep")
        .await
        .step("create table")?;
    let calls = Arc::new(CallCounts::default());
    let dynamo = DynamoStore::new(client, "bench-sweep", crate::moto::SHARDS, calls.clone());
    let moto_sizes: &[usize] = if quick { &[1_000] } else { &[1_000, 10_000] };
    for c in curve(&dynamo, &calls, Call::DynamoQuery, moto_sizes, "dynamodb").await? {
        let size = c.size;
        figures.extend([
            Figure::single(
                SECTION,
                format!("DynamoDB (moto), {size} tasks, {DUE} due: tasks read"),
                "tasks",
                c.tasks_read as f64,
            ),
            Figure::single(
                SECTION,
                format!("DynamoDB (moto), {size} tasks: host records read"),
                "hosts",
                c.hosts_read as f64,
            ),
            Figure::single(
                SECTION,
                format!("DynamoDB (moto), {size} tasks: Query calls"),
                "calls",
                c.queries as f64,
            ),
        ]);
    }
    Ok(figures)
}
