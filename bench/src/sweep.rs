//! Section 4: the sweeper's cost curve. A sweep finds due tasks through the status index
//! (status, `updated_before` bound), never by scanning; this measures exactly that query
//! (`TaskStore::query`, all pages) on tables of growing size holding the same number of due
//! tasks. Items read and queries issued must stay flat as the table grows.

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::moto::{Moto, clients};
use crate::report::Figure;
use std::sync::Arc;
use std::time::Instant;
use trawl_core::calls::{Call, CallCounts};
use trawl_core::canonical::{CanonicalUrl, CrawlId};
use trawl_core::crawl::{Crawl, CrawlConfig};
use trawl_core::store::dynamodb::{DynamoStore, create_table};
use trawl_core::store::sqlite::SqliteStore;
use trawl_core::store::{CrawlStore, TaskQuery, TaskStore};
use trawl_core::task::{Millis, NewTask, Status, now_ms};

const SECTION: &str = "sweeper";
/// Due tasks in every table, whatever its size.
pub const DUE: usize = 50;
/// How long ago the due tasks were last updated, against the rest.
const AGE_MS: Millis = 3_600_000;
const SEED_CHUNK: usize = 1_000;
/// Timed repetitions of the sweep query (SQLite only: moto's times are not DynamoDB's).
const REPEATS: usize = 5;

/// A table of `size` tasks, `DUE` of them updated long ago; returns the due bound.
async fn fill<S: TaskStore + CrawlStore>(
    store: &S,
    crawl: &Crawl,
    size: usize,
) -> BenchResult<Millis> {
    let now = now_ms();
    let old = now - AGE_MS;
    let urls: Vec<NewTask> = (0..size)
        .map(|i| {
            CanonicalUrl::parse(&format!("http://sweep.invalid/{}/{i}", crawl.id)).map(|url| {
                NewTask {
                    url,
                    depth: 0,
                    parent: None,
                }
            })
        })
        .collect::<Result<_, _>>()
        .step("sweep urls")?;
    let (due, rest) = urls.split_at(DUE.min(size));
    store.seed(&crawl.id, due, old).await.step("seed due")?;
    for chunk in rest.chunks(SEED_CHUNK) {
        store.seed(&crawl.id, chunk, now).await.step("seed")?;
    }
    Ok(old + 60_000)
}

/// One sweep query over every page; returns the items it returned.
async fn sweep<S: TaskStore>(store: &S, crawl: &Crawl, bound: Millis) -> BenchResult<usize> {
    let mut cursor = None;
    let mut items = 0;
    for _ in 0..1_000 {
        let page = store
            .query(&TaskQuery {
                crawl_id: crawl.id.clone(),
                status: Status::Pending,
                updated_before: Some(bound),
                limit: 100,
                cursor,
            })
            .await
            .step("sweep query")?;
        items += page.tasks.len();
        cursor = page.cursor;
        if cursor.is_none() {
            return Ok(items);
        }
    }
    Err(check("sweep", "more than 1,000 pages"))
}

/// Fills and sweeps one crawl per size; returns (size, items, queries, median ms when
/// `timed`) per size.
async fn curve<S: TaskStore + CrawlStore>(
    store: &S,
    calls: &CallCounts,
    query_call: Call,
    sizes: &[usize],
    label: &str,
    timed: bool,
) -> BenchResult<Vec<(usize, usize, u64, f64)>> {
    let mut out = Vec::new();
    for &size in sizes {
        eprintln!("  sweeper: {label}, {size} tasks");
        let crawl = Crawl::new(
            CrawlId::parse(&format!("sweep-{label}-{size}")).step("crawl id")?,
            CrawlConfig::default(),
            now_ms(),
        );
        store.create_crawl(&crawl).await.step("create crawl")?;
        let bound = fill(store, &crawl, size).await?;
        calls.reset();
        let items = sweep(store, &crawl, bound).await?;
        let queries = calls.get(query_call);
        if items != DUE {
            return Err(check(
                "sweep",
                format!("{items} due tasks found in {size}, expected {DUE}"),
            ));
        }
        let mut times = vec![f64::NAN];
        for _ in 0..if timed { REPEATS } else { 0 } {
            let started = Instant::now();
            sweep(store, &crawl, bound).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        times.retain(|t| t.is_finite());
        times.sort_by(f64::total_cmp);
        let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
        out.push((size, items, queries, median));
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
    for (size, items, queries, ms) in
        curve(&sqlite, &calls, Call::SqliteRead, sizes, "sqlite", true).await?
    {
        figures.push(Figure::single(
            SECTION,
            format!("SQLite, {size} tasks, {DUE} due: items read"),
            "items",
            items as f64,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("SQLite, {size} tasks: queries"),
            "queries",
            queries as f64,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("SQLite, {size} tasks: sweep time (median of {REPEATS})"),
            "ms",
            ms,
        ));
    }
    let moto = Moto::start(true)?;
    let client = clients(&moto.endpoint).await.dynamodb;
    create_table(&client, "bench-sweep")
        .await
        .step("create table")?;
    let calls = Arc::new(CallCounts::default());
    let dynamo = DynamoStore::new(client, "bench-sweep", crate::moto::SHARDS, calls.clone());
    let moto_sizes: &[usize] = if quick { &[1_000] } else { &[1_000, 10_000] };
    for (size, items, queries, _) in curve(
        &dynamo,
        &calls,
        Call::DynamoQuery,
        moto_sizes,
        "dynamodb",
        false,
    )
    .await?
    {
        figures.push(Figure::single(
            SECTION,
            format!("DynamoDB (moto), {size} tasks, {DUE} due: items read"),
            "items",
            items as f64,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("DynamoDB (moto), {size} tasks: Query calls"),
            "calls",
            queries as f64,
        ));
    }
    Ok(figures)
}
