//! Link discovery with many crawler containers, on moto: several `Crawler` values (each with
//! its own memory of links it has seeded, as separate Lambda containers have) take the turns
//! of one shared queue as they come, crawling a site of many loopback hosts whose pages link
//! across hosts, with the same template links (every host's home page, and the most-linked
//! host's top pages) on every page. The store is metered as DynamoDB charges it
//! (`crate::meter::Metered`): write units per fresh URL, link discovery
//! included, and host-record writes refused by their version check on the most-linked host
//! (a turn claim or hand-back that lost to another write of its record).

use crate::hosts_site::{HostsSite, Pages};
use crate::meter::{Metered, WriteMeter, WriteTally, metered};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::sqs::SqsQueue;
use trawl_core::app::App;
use trawl_core::crawler::{Crawler, Disposition, MessageResult};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::WorkQueue;
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{NewTask, Status, now_ms};

type LinkCrawler = Crawler<(Metered<DynamoStore>, S3BlobStore, SqsQueue)>;

/// The AWS side of a run: adapters on one moto stack, their calls counted together, and a
/// probe on the same table whose calls are not counted.
pub struct LinkStack {
    pub store: DynamoStore,
    pub probe: DynamoStore,
    pub blobs: S3BlobStore,
    pub queue: SqsQueue,
    pub calls: Arc<CallCounts>,
}

/// The site and the crawlers of a run.
#[derive(Debug, Clone, Copy)]
pub struct LinkPlan {
    pub hosts: usize,
    pub pages_per_host: usize,
    pub containers: usize,
    /// Host turns a container runs at once (`TRAWL_CONCURRENCY`).
    pub concurrency: usize,
    pub turn_pages: u32,
    /// Each batch on a new `Crawler` (a cold container, or a warm one whose memory of links
    /// seeded was full and cleared): no link is known to a container beforehand.
    pub cold: bool,
    pub timeout: Duration,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LinkRun {
    /// Pages the crawl stored (every page of the site, or the run fails).
    pub pages: u64,
    /// Requests the site received for pages.
    pub fetches: u64,
    /// Write units of every write, by store operation.
    pub writes: BTreeMap<&'static str, WriteTally>,
    /// The most-linked host and its record's writes refused by their version check.
    pub most_linked: String,
    pub refused_on_most_linked: u64,
    /// Refused host-record writes, every host together.
    pub refused_host_writes: u64,
    /// Calls, by `service.Operation`.
    pub calls: BTreeMap<String, u64>,
    pub seconds: f64,
}

impl LinkRun {
    /// Every write together.
    pub fn write_units(&self) -> WriteTally {
        let mut all = WriteTally::default();
        for tally in self.writes.values() {
            all.merge(tally);
        }
        all
    }

    /// Write units per stored page.
    pub fn units_per_url(&self) -> f64 {
        self.write_units().total() as f64 / self.pages.max(1) as f64
    }

    pub fn calls_of(&self, operation: &str) -> u64 {
        self.calls.get(operation).copied().unwrap_or(0)
    }
}

/// The pages of the link site: page `i` of host `h` (`/p/{i}.html`) links to its two children
/// on its own host (a tree from `/p/0.html`), to page `i` on the next host and on the host `i`
/// further, and to the template: every host's home page and the first pages of host 0, the
/// most-linked.
pub fn link_pages(hosts: usize, pages: usize, port: u16) -> Pages {
    Arc::new(move |h: usize, path: &str| {
        let i: usize = path
            .strip_prefix("/p/")?
            .strip_suffix(".html")?
            .parse()
            .ok()?;
        if h >= hosts || i >= pages {
            return None;
        }
        let url = |host: usize, page: usize| {
            format!(
                "http://{}:{port}/p/{page}.html",
                crate::hosts_site::ip(host % hosts)
            )
        };
        let mut links: Vec<String> = (0..hosts).map(|host| url(host, 0)).collect();
        links.extend((1..4.min(pages)).map(|page| url(0, page)));
        links.extend(
            [2 * i + 1, 2 * i + 2]
                .into_iter()
                .filter(|&c| c < pages)
                .map(|c| url(h, c)),
        );
        links.push(url(h + 1, i));
        links.push(url(h + 1 + i, i));
        let anchors: String = links
            .iter()
            .map(|l| format!("<a href=\"{l}\">{l}</a>\n"))
            .collect();
        Some(format!(
            "<html><head><title>{h}/{i}</title></head><body><h1>host {h}, page {i}</h1>\n{anchors}</body></html>"
        ))
    })
}

/// Crawls the link site of `plan` from host 0's home page with `plan.containers` crawlers.
pub async fn run_links(stack: LinkStack, plan: LinkPlan, id: &str) -> Result<LinkRun, String> {
    let site = start_link_site(plan).await?;
    let mut config = CrawlConfig::default();
    config.scope.allowed_domains = (0..plan.hosts)
        .map(|h| crate::hosts_site::ip(h).to_string())
        .collect();
    config.fetch.allow_private_networks = true;
    config.politeness.respect_robots = false;
    config.politeness.delay_ms = 0;
    config.politeness.per_host = 2;
    config.politeness.turn_pages = plan.turn_pages;
    let crawl = Crawl::new(
        CrawlId::parse(id).map_err(|e| e.to_string())?,
        config,
        now_ms(),
    );
    stack
        .store
        .create_crawl(&crawl)
        .await
        .map_err(|e| e.to_string())?;
    let store = metered(stack.store, stack.probe.clone(), stack.probe.shards());
    let meter = store.layer.meter();
    let fetcher = Arc::new(Fetcher::new("").map_err(|e| e.to_string())?);
    let app = Arc::new(App::new(
        store.clone(),
        stack.blobs.clone(),
        stack.queue.clone(),
        stack.calls.clone(),
    ));
    let new_crawler = || Crawler::new(app.clone(), fetcher.clone(), plan.concurrency);
    let start = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&site.url(0, "/p/0.html")).map_err(|e| e.to_string())?,
        depth: 0,
        parent: None,
        data: None,
    };
    add_tasks(&store, &stack.queue, &crawl, vec![start], now_ms())
        .await
        .map_err(|e| e.to_string())?;
    lock(&meter).reset();
    stack.calls.reset();

    let started = Instant::now();
    let done = AtomicBool::new(false);
    let in_flight = AtomicUsize::new(0);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let containers = (0..plan.containers)
        .map(|_| container(&new_crawler, plan.cold, &done, &in_flight, &failure));
    let monitor = async {
        while started.elapsed() < plan.timeout && !done.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if in_flight.load(Ordering::SeqCst) == 0
                && open_tasks(&stack.probe, &crawl).await.unwrap_or(1) == 0
            {
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
    };
    tokio::join!(futures_util::future::join_all(containers), monitor);
    if let Some(why) = lock(&failure).take() {
        return Err(why);
    }
    let expected = (plan.hosts * plan.pages_per_host) as u64;
    let counts = stack
        .probe
        .counts(&crawl.id)
        .await
        .map_err(|e| e.to_string())?;
    let pages = counts.get(&Status::Succeeded).copied().unwrap_or(0);
    if pages != expected {
        return Err(format!(
            "{pages} of {expected} pages stored in {:?}: {counts:?}",
            started.elapsed()
        ));
    }
    let meter: WriteMeter = std::mem::take(&mut *lock(&meter));
    let most_linked = site.host(0);
    let refused_on_most_linked = meter
        .refused_host_writes()
        .get(&most_linked)
        .copied()
        .unwrap_or(0);
    Ok(LinkRun {
        pages,
        fetches: site.requests().len() as u64,
        writes: meter.by_operation().clone(),
        most_linked,
        refused_on_most_linked,
        refused_host_writes: meter.refused_host_writes().values().sum(),
        calls: stack
            .calls
            .snapshot()
            .into_iter()
            .map(|(c, n)| (format!("{}.{}", c.service(), c.operation()), n))
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The link site of `plan`, its pages naming its own port.
async fn start_link_site(plan: LinkPlan) -> Result<HostsSite, String> {
    // The port is known once the first address is bound: the pages read it from a cell.
    let port = Arc::new(std::sync::OnceLock::<u16>::new());
    let cell = port.clone();
    let pages: Pages = Arc::new(move |h, path| {
        let port = *cell.get()?;
        link_pages(plan.hosts, plan.pages_per_host, port)(h, path)
    });
    let site = HostsSite::start(plan.hosts, pages)
        .await
        .map_err(|e| format!("bind site: {e}"))?;
    let _ = port.set(site.port);
    Ok(site)
}

/// One container: receives a batch, runs its turns, settles its messages, until the run is
/// done.
async fn container(
    new_crawler: &impl Fn() -> LinkCrawler,
    cold: bool,
    done: &AtomicBool,
    in_flight: &AtomicUsize,
    failure: &Mutex<Option<String>>,
) {
    let mut crawler = new_crawler();
    while !done.load(Ordering::SeqCst) {
        in_flight.fetch_add(1, Ordering::SeqCst);
        let batch = match crawler.queue().receive(10, 0).await {
            Ok(batch) => batch,
            Err(e) => {
                *lock(failure) = Some(format!("receive: {e}"));
                done.store(true, Ordering::SeqCst);
                in_flight.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        };
        if batch.is_empty() {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if cold {
            crawler = new_crawler();
        }
        let results = crawler.process_batch(batch, None).await;
        if let Err(e) = settle(&crawler, &results).await {
            *lock(failure) = Some(e);
            done.store(true, Ordering::SeqCst);
        }
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Settles a batch as Lambda's event source mapping does: deletes the handled messages, makes
/// the others visible again after their delay.
async fn settle(crawler: &LinkCrawler, results: &[MessageResult]) -> Result<(), String> {
    let mut handled = Vec::new();
    for result in results {
        match &result.disposition {
            Disposition::Done => handled.push(result.receipt.clone()),
            Disposition::RetryAfter(ms) => crawler
                .queue()
                .retry_later(&result.receipt, *ms)
                .await
                .map_err(|e| format!("retry_later: {e}"))?,
            Disposition::Reject(why) => return Err(format!("message rejected: {why}")),
        }
    }
    if !handled.is_empty() {
        crawler
            .queue()
            .ack(&handled)
            .await
            .map_err(|e| format!("ack: {e}"))?;
    }
    Ok(())
}

async fn open_tasks(probe: &DynamoStore, crawl: &Crawl) -> Result<u64, String> {
    let counts = probe.counts(&crawl.id).await.map_err(|e| e.to_string())?;
    Ok([Status::Pending, Status::InProgress, Status::Failed]
        .iter()
        .map(|s| counts.get(s).copied().unwrap_or(0))
        .sum())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
