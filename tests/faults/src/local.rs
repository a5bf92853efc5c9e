//! One run of a crawl on the embedded backend (SQLite + files + the in-process queue) through
//! the port faults ([`crate::ports`]), as `trawl crawl` runs it: open or create the crawl, seed
//! the start page, put every unfinished host back on the queue (a crash left the queue empty
//! and leases behind), run the workers and the sweeper to completion, deliver. A run that a
//! crash ended is simply started again on the same directory until one delivers.

use crate::ports::{FaultyBlobs, FaultyStore, PortFaults};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;
use trawl_core::app::App;
use trawl_core::backoff::{Backoff, persist};
use trawl_core::clock::SystemClock;
use trawl_core::crawler::Crawler;
use trawl_core::deliver::{Deliverer, DeliveryLimits, DeliveryReport};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::local::LocalQueue;
use trawl_core::runner::{RunEnd, RunStats, rebuild_local_queue, run_crawl};
use trawl_core::store::CrawlStore;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::task::{NewTask, now_ms};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

/// Where a run keeps its data under its directory.
pub const DB_FILE: &str = "trawl.db";
pub const OBJECTS_DIR: &str = "objects";

/// Crawls `start` as `crawl_id` with `config` into `dir` through `faults`, with `workers`
/// workers, to its delivery; continues whatever an earlier run left there. Returns the
/// delivery and the backend errors waited out.
pub async fn crawl_to_delivery(
    dir: &Path,
    crawl_id: &CrawlId,
    start: &str,
    config: CrawlConfig,
    faults: Arc<PortFaults>,
    workers: usize,
) -> Result<(DeliveryReport, u64), String> {
    let calls = Arc::new(CallCounts::default());
    let sqlite = SqliteStore::open(dir.join(DB_FILE), calls.clone()).map_err(|e| e.to_string())?;
    let store = FaultyStore::new(sqlite, faults.clone());
    let blobs = FaultyBlobs {
        inner: FsBlobStore::new(dir.join(OBJECTS_DIR), calls.clone()),
        faults,
    };
    let queue = LocalQueue::new(Duration::from_secs(120), calls.clone());
    let stats = RunStats::default();
    let retries = &stats.backend_retries;
    let fresh = Crawl::new(crawl_id.clone(), config, now_ms());
    let (crawl, created) = persist(
        &SystemClock,
        "create the crawl",
        &Backoff::RUN,
        retries,
        || store.create_crawl(&fresh),
    )
    .await
    .map_err(|e| e.to_string())?;
    if crawl.state == CrawlState::Running {
        if created {
            let url = CanonicalUrl::parse(start).map_err(|e| e.to_string())?;
            let seed = NewTask {
                lane: None,
                priority: Default::default(),
                url,
                depth: 0,
                parent: None,
                data: None,
            };
            // Waited out as `trawl crawl` waits out its seeding's transient errors (seeding is
            // idempotent); one that persists fails the run, whose next run seeds again.
            persist(&SystemClock, "seed", &Backoff::RUN, retries, || {
                add_tasks(&store, &queue, &crawl, vec![seed.clone()], now_ms())
            })
            .await
            .map_err(|e| e.to_string())?;
        }
        persist(
            &SystemClock,
            "rebuild the queue",
            &Backoff::RUN,
            retries,
            || rebuild_local_queue(&store, &queue, &crawl, now_ms()),
        )
        .await
        .map_err(|e| e.to_string())?;
    }
    let fetcher =
        Arc::new(Fetcher::new(crawl.config.user_agent.as_str()).map_err(|e| e.to_string())?);
    let app = Arc::new(App::new(store, blobs, queue, calls));
    let crawler = Crawler::new(app.clone(), fetcher, 16);
    if crawl.state == CrawlState::Running {
        let stop = AtomicBool::new(false);
        match run_crawl(&crawler, crawl_id, workers, &stats, &stop)
            .await
            .map_err(|e| e.to_string())?
        {
            RunEnd::Completed { .. } => {}
            RunEnd::Stopped(_) => return Err("the run stopped before completion".to_owned()),
        }
    }
    let uri_base = dir.join(OBJECTS_DIR).display().to_string();
    let deliverer = Deliverer::new(app, uri_base, DeliveryLimits::default());
    let report = persist(
        deliverer.clock.as_ref(),
        "deliver",
        &Backoff::RUN,
        retries,
        || deliverer.deliver(crawl_id, None, now_ms()),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((report, counter(retries)))
}

fn counter(n: &AtomicU64) -> u64 {
    n.load(std::sync::atomic::Ordering::Relaxed)
}
