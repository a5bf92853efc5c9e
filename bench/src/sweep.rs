//! Section 4: the sweeper's cost curve. The real sweeper (`trawl_core::sweep::Sweeper`) sweeps
//! one crawl of growing size holding the same number of due tasks (pending, seeded an hour ago,
//! each on a host of its own whose turn message was never received: presumed lost, one turn
//! re-issued per host). Tasks read and queries issued must stay flat as the table grows: the
//! sweeper reads host records and bounded windows, never the crawl's tasks.
//!
//! Then the sweeper at scale: a weekly recrawl come due. A Zipf(1) crawl's pages were all
//! fetched a week ago with a recrawl due now, and every host is idle with its wake-up time
//! passed, so every host needs a turn. The real sweeper sweeps it once, with the deployed
//! schedule's budget (`events/sweeper-schedule.json`), on the in-memory store and queue behind
//! modelled round trips (`latency::Latency`: DynamoDB and SQS requests take as long as stated
//! below, made as the AWS adapters make them): hosts woken, the due tasks their turns cover
//! (each woken host's turns fetch every due page of the host), requests, time; and from its
//! rate, the hosts one sweep per 5-minute tick visits, and how long a visit of a billion-URL
//! crawl's 10⁶ hosts takes: the longest a due host waits for its wake-up.

use crate::error::{BenchResult, Context, check};
use crate::frontier::Workload;
use crate::latency::{Latency, Latent, LatentStore};
use crate::local::TempDir;
use crate::moto::{Moto, clients};
use crate::report::Figure;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::app::{App, Store, Unwired};
use trawl_core::frontier::{seed_tasks, update_host};
use trawl_core::queue::local::LocalQueue;
use trawl_core::queue::{WorkMessage, WorkQueue as _};
use trawl_core::store::memory::MemoryStore;
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskStore};
use trawl_core::sweep::{LocalDeliveryTrigger, PAGE_SIZE, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::host::NextWork;
use trawl_domain::task::{FetchRecord, Millis, NewTask, now_ms};
use trawl_embedded::sqlite::SqliteStore;

const SECTION: &str = "sweeper";
/// Due tasks in every table, whatever its size.
pub const DUE: usize = 50;
/// How long ago the due tasks were last updated, against the rest.
const AGE_MS: Millis = 3_600_000;
const SEED_CHUNK: usize = 1_000;
/// A DynamoDB request's round trip, as modelled ("single-digit milliseconds" in the developer
/// guide; a Lambda function in the table's Region).
const DYNAMODB_ROUND_TRIP: Duration = Duration::from_millis(5);
/// An SQS SendMessageBatch's round trip, as modelled ("tens of milliseconds" typical, per the
/// developer guide).
const SQS_ROUND_TRIP: Duration = Duration::from_millis(20);
/// The deployed schedule's input (its budget per invocation), and its rate (`SweeperRate`).
const SCHEDULE: &str = include_str!("../../events/sweeper-schedule.json");
const TICK_S: f64 = 300.0;
/// The hosts of a billion-URL crawl.
const BILLION_HOSTS: f64 = 1_000_000.0;
const WEEK_MS: Millis = 7 * 24 * 3_600_000;

/// A crawl of `size` pending tasks seeded as the seeder seeds them (`frontier::seed_tasks`, host
/// records included) but whose turn messages are never sent: `DUE` of them an hour ago, each on
/// a host of its own (lost messages), the rest just now on one more host (not overdue yet).
async fn fill<S: Store>(store: &S, crawl: &Crawl, size: usize) -> BenchResult<()> {
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
                lane: None,
                priority: Default::default(),
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
async fn curve<S: Store + Clone + 'static>(
    store: &S,
    calls: &Arc<CallCounts>,
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
        let app = App::new(store.clone(), Unwired, queue, calls.clone());
        let trigger = Arc::new(LocalDeliveryTrigger::default());
        let sweeper = Sweeper::new(Arc::new(app), trigger, SweepOptions::new());
        let queue = &sweeper.queue;
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

/// A crawl of `work` fetched at `fetched` with every page due again a week later, and every host
/// idle until then (its last turn found only that revisit: `NextWork::Revisit`), as a weekly
/// recrawl leaves them. Returns the crawl, the due time, and each host's due tasks.
async fn weekly_recrawl(store: &MemoryStore, work: &Workload) -> BenchResult<Recrawl> {
    let fetched = now_ms() - WEEK_MS - 60_000;
    let due = fetched + WEEK_MS;
    let crawl = Crawl::new(
        CrawlId::parse("sweep-weekly").step("crawl id")?,
        CrawlConfig::default(),
        fetched,
    );
    store.create_crawl(&crawl).await.step("create crawl")?;
    let mut due_tasks = HashMap::with_capacity(work.sizes.len());
    for (h, &size) in work.sizes.iter().enumerate() {
        let urls = (0..size)
            .map(|n| {
                CanonicalUrl::parse(&format!("http://w{h}.sweep.invalid/{n}")).map(|url| NewTask {
                    lane: None,
                    priority: Default::default(),
                    url,
                    depth: 0,
                    parent: None,
                    data: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .step("weekly urls")?;
        let name = urls.first().map(|t| t.url.host_key()).unwrap_or_default();
        due_tasks.insert(name, size);
        for chunk in urls.chunks(SEED_CHUNK) {
            seed_tasks(store, &crawl, chunk.to_vec(), fetched)
                .await
                .step("seed")?;
            for task in chunk {
                let id = task.url.task_id();
                let claim = store
                    .claim_in_turn(&crawl.id, &id, 60_000, fetched)
                    .await
                    .step("claim")?;
                let ClaimOutcome::Claimed { lease, .. } = claim else {
                    return Err(check("weekly recrawl", format!("{id} not claimed")));
                };
                let record = FetchRecord {
                    http_status: 200,
                    fetched_at: fetched,
                    next_fetch_at: Some(due),
                    ..FetchRecord::default()
                };
                store
                    .finish(&lease, &record, fetched)
                    .await
                    .step("finish")?;
            }
        }
    }
    for name in due_tasks.keys() {
        update_host(store, &crawl, name, fetched, |h| {
            let idle = h.claim_turn(fetched, 60_000).ok().and_then(|(held, turn)| {
                held.hand_back(
                    &turn,
                    Some(NextWork::Revisit(due)),
                    Some(held.seeded),
                    0,
                    0,
                    fetched,
                )
            });
            (idle.map(|(host, _)| host), ())
        })
        .await
        .step("idle host")?;
    }
    Ok(Recrawl {
        crawl,
        due,
        due_tasks,
    })
}

/// A weekly recrawl come due (`weekly_recrawl`).
struct Recrawl {
    crawl: Crawl,
    due: Millis,
    /// Per host, its due tasks (every page it has).
    due_tasks: HashMap<String, u64>,
}

/// What one sweep of the weekly recrawl did.
struct DueWork {
    hosts_woken: u64,
    /// Due tasks of the woken hosts: what their turns fetch.
    tasks_covered: u64,
    pages: u64,
    requests: u64,
    secs: f64,
}

/// One sweep of the recrawl within `budget`, behind modelled round trips.
async fn sweep_due(
    memory: &MemoryStore,
    recrawl: &Recrawl,
    mut budget: SweepBudget,
) -> BenchResult<DueWork> {
    let store = LatentStore::new(memory.clone(), Latency::new(DYNAMODB_ROUND_TRIP));
    let local = LocalQueue::new(Duration::from_secs(60), Arc::new(CallCounts::default()));
    let queue = Latent::new(local, SQS_ROUND_TRIP);
    let app = App::new(store, Unwired, queue, Arc::new(CallCounts::default()));
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let sweeper = Sweeper::new(Arc::new(app), trigger, SweepOptions::new());
    let (store, queue) = (&sweeper.store, &sweeper.queue);
    let started = Instant::now();
    let report = sweeper
        .sweep_crawl(&recrawl.crawl, recrawl.due + 1_000, &mut budget)
        .await
        .step("sweep")?;
    let secs = started.elapsed().as_secs_f64();
    let requests = store.layer.take_requests() + queue.take_requests();
    // The woken hosts' turns, as the crawler would receive them: their due work.
    let mut tasks_covered = 0;
    let mut woken = 0;
    // Each round takes at least one message of a distinct host, or ends.
    for _ in 0..=recrawl.due_tasks.len() {
        let received = queue.inner.receive(10, 0).await.step("receive")?;
        if received.is_empty() {
            break;
        }
        for message in &received {
            woken += 1;
            let turn: WorkMessage = serde_json::from_str(&message.body).step("turn message")?;
            tasks_covered += recrawl.due_tasks.get(&turn.host).copied().unwrap_or(0);
        }
        let receipts: Vec<String> = received.into_iter().map(|r| r.receipt).collect();
        queue.inner.ack(&receipts).await.step("ack")?;
    }
    if woken != report.recrawls || report.recrawls != report.hosts_requeued {
        return Err(check(
            "weekly sweep",
            format!("{report:?}: {woken} turns in the queue, expected one per host woken"),
        ));
    }
    Ok(DueWork {
        hosts_woken: woken,
        tasks_covered,
        pages: report.pages_read,
        requests,
        secs,
    })
}

/// The deployed schedule's budget: query pages and time per invocation.
fn schedule() -> BenchResult<(u32, Duration)> {
    let input: serde_json::Value = serde_json::from_str(SCHEDULE).step("sweeper schedule")?;
    let pages = input["max_pages"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok());
    let time_ms = input["time_budget_ms"].as_u64();
    match (pages, time_ms) {
        (Some(pages), Some(ms)) => Ok((pages, Duration::from_millis(ms))),
        _ => Err(check(
            "sweeper schedule",
            format!("no budget in {SCHEDULE}"),
        )),
    }
}

/// The weekly recrawl at scale, swept once with the deployed schedule's budget.
async fn due_work(quick: bool) -> BenchResult<Vec<Figure>> {
    let (urls, hosts) = if quick {
        (50_000, 2_000)
    } else {
        (300_000, 10_000)
    };
    eprintln!("  sweeper: weekly recrawl of {urls} URLs over {hosts} hosts");
    let (pages, time) = schedule()?;
    let memory = MemoryStore::new();
    let recrawl = weekly_recrawl(&memory, &Workload::zipf(urls, hosts)).await?;
    let run = sweep_due(&memory, &recrawl, SweepBudget::new(pages, time)).await?;
    let per_s = |n: u64| n as f64 / run.secs.max(1e-9);
    let name = |what: &str| format!("weekly recrawl ({urls} URLs / {hosts} hosts): {what}");
    // One invocation per 5-minute tick: it visits what its page budget allows (a page to the
    // failed tasks, the rest of 100 hosts each) or what it reaches in its time, the fewer.
    let pages_allow = f64::from(pages.saturating_sub(1)) * f64::from(PAGE_SIZE);
    let per_tick = pages_allow.min(per_s(run.hosts_woken) * time.as_secs_f64());
    Ok(vec![
        Figure::single(
            SECTION,
            name("hosts woken"),
            "hosts",
            run.hosts_woken as f64,
        ),
        Figure::single(
            SECTION,
            name("due tasks their turns cover"),
            "tasks",
            run.tasks_covered as f64,
        ),
        Figure::single(SECTION, name("pages read"), "pages", run.pages as f64),
        Figure::single(
            SECTION,
            name("requests (DynamoDB + SQS)"),
            "requests",
            run.requests as f64,
        ),
        Figure::single(
            SECTION,
            name("sweep time (modelled round trips)"),
            "s",
            run.secs,
        ),
        Figure::single(
            SECTION,
            name("hosts woken per second of sweep"),
            "hosts/s",
            per_s(run.hosts_woken),
        ),
        Figure::single(
            SECTION,
            name("due tasks made available per second of sweep"),
            "tasks/s",
            per_s(run.tasks_covered),
        )
        .at_least(2_000.0),
        Figure::single(
            SECTION,
            format!(
                "deployed schedule ({pages} pages, {} s per 5-minute tick): hosts visited per tick",
                time.as_secs()
            ),
            "hosts",
            per_tick,
        ),
        Figure::single(
            SECTION,
            "deployed schedule: hours to visit 10^6 hosts once (the latest a due host is woken)",
            "h",
            BILLION_HOSTS / per_tick.max(1.0) * TICK_S / 3_600.0,
        ),
    ])
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
    figures.extend(due_work(quick).await?);
    Ok(figures)
}
