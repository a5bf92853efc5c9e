//! Section: one compaction pass (`Deliverer::upkeep`, as after a delivery on AWS: the deliverer
//! not the store's only writer) on SQLite and files, at 1,000 and 10,000 tasks: a crawl on
//! segments, every page stored in generation 0, three pages in four changed in generation 1
//! (their new bodies in a segment of their own), both delivered keeping every delivery; then
//! the crawl keeps its last one and the pass runs: it removes the first delivery, reads every
//! task, rewrites the first segment (a quarter live) and moves its tasks to the copy. Printed:
//! the store's reads and writes, file reads (listings, summaries, records), writes and deletes,
//! the pages moved and the time. The pass reads every task: what must grow with the crawl, and
//! nothing else should.

use crate::delivery::{fill_as, finish_one};
use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::report::Figure;
use std::sync::Arc;
use std::time::Instant;
use trawl_core::app::{App, Unwired};
use trawl_core::blob::Layout;
use trawl_core::deliver::{Deliverer, DeliveryLimits};
use trawl_core::store::{CrawlRecords, CrawlStore, TaskStore};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::transition::update_config;
use trawl_domain::crawl::{CrawlConfig, StorageLayout};
use trawl_domain::task::{Millis, Status, now_ms};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

const SECTION: &str = "compaction";
const DAY: Millis = 86_400_000;
/// Tasks per host.
const PER_HOST: usize = 10;

/// What one pass made and did.
struct Pass {
    tasks: usize,
    ms: f64,
    store_reads: u64,
    store_writes: u64,
    file_reads: u64,
    file_writes: u64,
    file_deletes: u64,
    moved: u64,
    rewritten: u64,
    copied: u64,
}

async fn pass(tasks: usize) -> BenchResult<Pass> {
    let dir = TempDir::new("compaction")?;
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::open(dir.0.join("trawl.db"), calls.clone()).step("open sqlite")?;
    let data = dir.0.join("data");
    let layout = Layout::new("bench");
    let hosts = tasks / PER_HOST;
    let mut config = CrawlConfig::default();
    config.storage.layout = StorageLayout::Segments;
    // Generation 0, in a writer of its own (its segment closed once it is gone).
    let crawl = {
        let blobs = FsBlobStore::new(&data, calls.clone());
        let label = "compact";
        fill_as(&store, &blobs, &layout, config.clone(), tasks, hosts, label).await?
    };
    let blobs = FsBlobStore::new(&data, calls.clone());
    let app = Arc::new(App::new(store, blobs, Unwired, calls.clone()).with_layout(layout.clone()));
    let deliverer = Deliverer::new(app.clone(), "", DeliveryLimits::DEFAULT);
    let start = now_ms();
    deliver(&deliverer, &crawl, 0, start).await?;
    // Generation 1: three pages in four changed, in another writer's segment.
    let store = &app.store;
    if !store.reopen_crawl(&crawl, start).await.step("reopen")? {
        return Err(check("reopen crawl", "refused".to_owned()));
    }
    {
        let blobs = FsBlobStore::new(&data, calls.clone());
        for i in (0..tasks).filter(|i| i % 4 != 0) {
            let url = format!("http://h{}.deliver.invalid/p{i}", i % hosts);
            let url = CanonicalUrl::parse(&url).step("url")?;
            let from = [Status::Succeeded];
            let again = store
                .reschedule(&crawl, &url.task_id(), &from, start)
                .await
                .step("reschedule")?;
            if !again {
                return Err(check("reschedule", format!("{url} refused")));
            }
            finish_one(store, &blobs, &layout, true, &crawl, &url, 1, start).await?;
        }
    }
    let completed = store
        .complete_crawl(&crawl, 1, "bench", start + 1)
        .await
        .step("complete")?;
    if !completed {
        return Err(check("complete crawl", "refused".to_owned()));
    }
    // Delivered a day later: every segment settled (older than a lease) by then.
    deliver(&deliverer, &crawl, 1, start + DAY).await?;
    config.delivery.keep_generations = Some(1);
    store
        .apply_crawl(&crawl, &update_config(&config, start + DAY))
        .await
        .step("keep one delivery")?;

    calls.reset();
    let started = Instant::now();
    let upkeep = deliverer
        .upkeep(&crawl, start + 2 * DAY)
        .await
        .step("compact")?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let Some(c) = upkeep.compaction else {
        return Err(check("compaction", "no pass".to_owned()));
    };
    let moved = c.pages_moved;
    let live_in_first = tasks.div_ceil(4) as u64;
    if c.rewritten != 1 || moved != live_in_first || c.pages_refused != 0 {
        return Err(check(
            "compaction",
            format!("expected the first segment rewritten, {live_in_first} pages moved: {c:?}"),
        ));
    }
    Ok(Pass {
        tasks,
        ms,
        store_reads: calls.get(Call::SqliteRead),
        store_writes: calls.get(Call::SqliteWrite),
        file_reads: calls.get(Call::FileRead),
        file_writes: calls.get(Call::FileWrite),
        file_deletes: calls.get(Call::FileDelete),
        moved,
        rewritten: c.rewritten,
        copied: c.bytes_copied,
    })
}

async fn deliver<P: trawl_core::app::Ports>(
    deliverer: &Deliverer<P>,
    crawl: &CrawlId,
    generation: u64,
    now: Millis,
) -> BenchResult<()> {
    deliverer
        .deliver(crawl, Some(generation), now)
        .await
        .step("deliver")?;
    Ok(())
}

pub async fn run() -> BenchResult<Vec<Figure>> {
    let mut figures = Vec::new();
    for tasks in [1_000, 10_000] {
        let p = pass(tasks).await?;
        let n = p.tasks;
        eprintln!(
            "compaction, SQLite, {n} tasks: {:.0} ms, store reads {}, store writes {}, file reads {}, \
             file writes {}, file deletes {}, segments rewritten {}, pages moved {}, bytes copied {}",
            p.ms,
            p.store_reads,
            p.store_writes,
            p.file_reads,
            p.file_writes,
            p.file_deletes,
            p.rewritten,
            p.moved,
            p.copied
        );
        let name = |what: &str| format!("one pass, SQLite and files, {n} tasks: {what}");
        figures.extend([
            Figure::single(SECTION, name("time"), "ms", p.ms),
            Figure::single(SECTION, name("store reads"), "reads", p.store_reads as f64),
            Figure::single(
                SECTION,
                name("store writes"),
                "writes",
                p.store_writes as f64,
            ),
            Figure::single(SECTION, name("file reads"), "reads", p.file_reads as f64),
            Figure::single(SECTION, name("file writes"), "writes", p.file_writes as f64),
            Figure::single(
                SECTION,
                name("file deletes"),
                "deletes",
                p.file_deletes as f64,
            ),
            Figure::single(SECTION, name("pages moved"), "pages", p.moved as f64),
        ]);
    }
    Ok(figures)
}
