//! Section 6: freshness on a virtual clock, through the real crawler. A simulated site of pages
//! with known change rates is served on loopback, one port per host; the real `Crawler`
//! (in-memory store and blobs, a `ManualClock`) fetches it, the real `Sweeper` wakes its hosts
//! when their recrawls are due (and sets the estimator's water level), the real `Seeder` reads
//! the hosts' sitemaps twice a day, and a virtual-time work queue hands out the turn messages.
//! Time moves only by `TICK` steps of the virtual clock (the sweeper runs once per tick, like
//! DDS's periodic task): no sleeping.
//!
//! The pages' change rates are heavy-tailed: 60% never change, the others are Poisson with a
//! mean time between changes drawn log-uniformly from 1 hour to 60 days (so about 4% of the
//! pages change about hourly). Half the hosts' sitemaps give each page's true `<lastmod>`, the
//! other half say every page was modified at the moment the sitemap is read (a lying sitemap).
//!
//! The site measures what the crawler saw: every page request is a fetch; a fetch that gets a
//! newer version than the last one served detects each change since, its staleness being the
//! time from the change to that fetch; a change still undetected at the end counts with its
//! staleness so far. A page is fresh while the crawler's copy is its current version: the
//! fraction of page-time fresh is summed over the pages of a class.
//!
//! Schedules compared: fixed daily, the document's adaptive defaults, an adaptive setting tuned
//! for a collection that mostly does not change, DDS's best variant at no more than fixed
//! daily's fetches (a grid of its parameters, MIN_TIME calibrated for each), and the
//! change-rate estimator given fixed daily's budget (one fetch per page per day), then at the
//! fetches fixed daily and DDS tuned made; beside them the ideal (every rate known, periodic
//! fetches, steady state). The target is read at equal cost: the estimator at fixed daily's
//! fetches against half of DDS's best at no more than them.
//!
//! Each simulation runs on a thread of its own with a current-thread runtime: the site, the
//! crawler and the HTTP client's connections share it, so a request wakes no other thread
//! (a multi-thread runtime cost a futex wake and a context switch or two per request, and
//! made `--quick` 1.5 times slower). The simulations are independent, so as many run at once
//! as there are cores. What is left per fetch is the crawler's own path through the in-memory
//! store (its due queries clone the summaries they return, which its due index holds, and the
//! sweeper's water level reads every sampled page): on a profile of an estimator run the fetcher, loopback HTTP included, was
//! 11% of the time.
//! Why the first full-size run never finished: the
//! in-memory store answered every turn's due query by reading and sorting all the crawl's tasks
//! (parsing each one's URL for its host); it now keeps a due index per host, as SQLite and
//! DynamoDB do.
use crate::error::{BenchResult, Context, check};
use crate::report::Figure;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use trawl_core::app::App;
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::clock::{Clock, ManualClock};
use trawl_core::crawler::{Crawler, Disposition};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::{QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use trawl_core::seed::{
    ManifestError, ManifestSource, OpenManifest, SeedBudget, SeedDefaults, SeedRequest, SeedSource,
    Seeder,
};
use trawl_core::store::CrawlStore;
use trawl_core::store::memory::MemoryStore;
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, RecrawlPolicy};
use trawl_domain::estimate::{Demand, Estimator, level_ms};
use trawl_domain::schedule::Schedule;
use trawl_domain::task::{Millis, NewTask};

const SECTION: &str = "freshness";
const MINUTE: Millis = 60_000;
const HOUR: Millis = 60 * MINUTE;
const DAY: Millis = 24 * HOUR;
/// The virtual clock's step: the sweeper runs and due turns are taken once per tick (as DDS's
/// periodic task does), so a page is fetched up to one tick after it is due.
const TICK: Millis = 5 * MINUTE;
/// How often the hosts' sitemaps are read (a seed of their sitemaps).
const SITEMAP_EVERY: Millis = 12 * HOUR;
/// Where the virtual clock starts (far from the wall clock, as a check that nothing reads it).
const T0: Millis = 1_000_000_000_000;
/// Turn batches one tick may process before the run is declared stuck.
const MAX_BATCHES_PER_TICK: usize = 100_000;
/// Share of the pages that never change.
const NEVER: f64 = 0.6;
/// The range of the changing pages' mean time between changes (log-uniform).
const FASTEST: Millis = HOUR;
const SLOWEST: Millis = 60 * DAY;

/// The change classes reported, by mean time between changes.
const CLASSES: [&str; 4] = [
    "hourly (< 6 h)",
    "daily (6 h - 3 d)",
    "slow (> 3 d)",
    "never",
];
const NEVER_CLASS: usize = 3;

fn class_of(mean: Option<Millis>) -> usize {
    match mean {
        None => NEVER_CLASS,
        Some(m) if m < 6 * HOUR => 0,
        Some(m) if m <= 3 * DAY => 1,
        Some(_) => 2,
    }
}

/// The size of one simulation.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub pages: usize,
    pub hosts: usize,
    pub days: i64,
}

/// One page of the simulated site: when it changes, and how much of that the crawler has seen.
struct Page {
    /// Mean time between changes (None: never changes).
    mean: Option<Millis>,
    class: usize,
    /// Change times (virtual ms), ascending.
    changes: Vec<Millis>,
    /// Changes already served to the crawler.
    served: usize,
}

/// What the site saw of one run.
#[derive(Default)]
struct Seen {
    /// Page requests per class.
    fetches: [u64; 4],
    /// Sitemap requests.
    sitemaps: u64,
    /// Per class: the staleness of every change, in ms.
    staleness: [Vec<Millis>; 4],
    /// Per class: page-time stale, and page-time, in ms.
    stale_ms: [Millis; 4],
    page_ms: [Millis; 4],
}

struct SiteState {
    pages: Vec<Page>,
    seen: Seen,
}

/// The simulated site, answering from the virtual clock.
struct SimSite {
    clock: ManualClock,
    hosts: usize,
    state: Mutex<SiteState>,
}

/// Change times of one page up to `horizon` after `T0` (a Poisson process).
fn changes(rng: &mut fastrand::Rng, mean: Option<Millis>, horizon: Millis) -> Vec<Millis> {
    let Some(mean) = mean else {
        return Vec::new();
    };
    let mut t = 0;
    let mut out = Vec::new();
    loop {
        // Exponential gap: -ln(U) × mean.
        let u = rng.f64().max(f64::MIN_POSITIVE);
        t += (-u.ln() * mean as f64) as Millis + 1;
        if t >= horizon {
            return out;
        }
        out.push(T0 + t);
    }
}

/// A page's mean time between changes: none (60%), or log-uniform from 1 h to 60 days.
fn mean_change(rng: &mut fastrand::Rng) -> Option<Millis> {
    if rng.f64() < NEVER {
        return None;
    }
    let span = (SLOWEST as f64 / FASTEST as f64).ln();
    Some((FASTEST as f64 * (rng.f64() * span).exp()) as Millis)
}

impl SimSite {
    fn new(clock: ManualClock, size: Size, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let horizon = size.days * DAY;
        let pages = (0..size.pages)
            .map(|_| {
                let mean = mean_change(&mut rng);
                Page {
                    mean,
                    class: class_of(mean),
                    changes: changes(&mut rng, mean, horizon),
                    served: 0,
                }
            })
            .collect();
        Self {
            clock,
            hosts: size.hosts,
            state: Mutex::new(SiteState {
                pages,
                seen: Seen::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SiteState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `/p/{i}`: the page's current version, with an ETag (304 to a matching If-None-Match);
    /// `/sitemap.xml`: the host's pages, with honest `<lastmod>`s on even hosts.
    fn respond(&self, host: usize, port: u16, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.uri().path() == "/sitemap.xml" {
            return reply(StatusCode::OK, None, self.sitemap(host, port));
        }
        let page = req
            .uri()
            .path()
            .strip_prefix("/p/")
            .and_then(|n| n.parse::<usize>().ok());
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let SiteState { pages, seen } = &mut *state;
        let Some((i, page)) = page.and_then(|i| pages.get_mut(i).map(|p| (i, p))) else {
            return reply(StatusCode::NOT_FOUND, None, Bytes::new());
        };
        seen.fetches[page.class] += 1;
        let version = page.changes.partition_point(|&c| c <= now);
        if let Some(&first) = page
            .changes
            .get(page.served..version)
            .and_then(<[_]>::first)
        {
            // Stale from its first change not yet served until now.
            seen.stale_ms[page.class] += now - first;
        }
        for &change in page.changes.get(page.served..version).unwrap_or_default() {
            seen.staleness[page.class].push(now - change);
        }
        page.served = page.served.max(version);
        let etag = format!("\"{i}.{version}\"");
        let fresh = req
            .headers()
            .get("if-none-match")
            .is_some_and(|v| v.as_bytes() == etag.as_bytes());
        if fresh {
            return reply(StatusCode::NOT_MODIFIED, Some(&etag), Bytes::new());
        }
        let body = format!(
            "<!doctype html><html><head><title>Page {i}</title></head>\
             <body><p>Page {i}, version {version}.</p></body></html>\n"
        );
        reply(StatusCode::OK, Some(&etag), Bytes::from(body))
    }

    /// The sitemap of host `host` (served on `port`): honest on even hosts, every page
    /// "modified now" on odd ones.
    fn sitemap(&self, host: usize, port: u16) -> Bytes {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        state.seen.sitemaps += 1;
        let honest = host.is_multiple_of(2);
        let mut xml = String::from(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <urlset xmlns=\"http://www.sitemaps.org/schemas/sitemap/0.9\">\n",
        );
        for (i, page) in state
            .pages
            .iter()
            .enumerate()
            .skip(host)
            .step_by(self.hosts)
        {
            let modified = if honest {
                let version = page.changes.partition_point(|&c| c <= now);
                version.checked_sub(1).map_or(T0 - DAY, |v| page.changes[v])
            } else {
                now
            };
            let _ = writeln!(
                xml,
                "<url><loc>http://127.0.0.1:{port}/p/{i}</loc><lastmod>{}</lastmod></url>",
                w3c(modified)
            );
        }
        xml.push_str("</urlset>\n");
        Bytes::from(xml)
    }

    /// What the site saw, the changes still unseen at `end` counted as stale until then.
    fn take_seen(&self, end: Millis) -> Seen {
        let mut state = self.lock();
        let SiteState { pages, seen } = &mut *state;
        for page in pages.iter() {
            seen.page_ms[page.class] += end - T0;
            let unseen = page.changes.get(page.served..).unwrap_or_default();
            if let Some(&first) = unseen.first() {
                seen.stale_ms[page.class] += end - first;
            }
            for &change in unseen {
                seen.staleness[page.class].push(end - change);
            }
        }
        std::mem::take(seen)
    }
}

/// A W3C datetime (`YYYY-MM-DDThh:mm:ssZ`) of `ms` since the epoch.
fn w3c(ms: Millis) -> String {
    let secs = ms.div_euclid(1_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn reply(status: StatusCode, etag: Option<&str>, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Some(Ok(v)) = etag.map(str::parse) {
        headers.insert("etag", v);
    }
    response
}

/// Serves `site` on `hosts` loopback ports (each port is a host of the crawl). The servers stop
/// when the handles are aborted.
async fn serve(site: Arc<SimSite>, hosts: usize) -> BenchResult<(Vec<u16>, Vec<JoinHandle<()>>)> {
    let mut ports = Vec::with_capacity(hosts);
    let mut servers = Vec::with_capacity(hosts);
    for host in 0..hosts {
        let listener = TcpListener::bind("127.0.0.1:0").await.step("bind site")?;
        let port = listener.local_addr().step("site address")?.port();
        ports.push(port);
        let site = Arc::clone(&site);
        servers.push(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let site = Arc::clone(&site);
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let response = site.respond(host, port, &req);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }));
    }
    Ok((ports, servers))
}

/// A work queue on the virtual clock: a message sent with a delay is received once the clock
/// has reached it; receiving never waits.
struct VirtualQueue {
    clock: ManualClock,
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    next_id: u64,
    /// (visible at, id, body), not yet received.
    waiting: Vec<(Millis, u64, String)>,
    /// Received and not yet acked, by receipt.
    in_flight: HashMap<String, String>,
}

impl VirtualQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WorkQueue for VirtualQueue {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        for message in messages {
            let body = serde_json::to_string(message).unwrap_or_default();
            let id = state.next_id;
            state.next_id += 1;
            let visible = now + message.delay_ms as Millis;
            state.waiting.push((visible, id, body));
        }
        Ok(SendReport {
            sent: messages.len(),
            failed: Vec::new(),
        })
    }

    async fn receive(&self, max: u32, _wait_ms: u64) -> QueueResult<Vec<Received>> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        let mut out = Vec::new();
        let mut k = 0;
        while k < state.waiting.len() && out.len() < max as usize {
            if state.waiting[k].0 > now {
                k += 1;
                continue;
            }
            let (_, id, body) = state.waiting.swap_remove(k);
            let receipt = id.to_string();
            state.in_flight.insert(receipt.clone(), body.clone());
            out.push(Received {
                message_id: receipt.clone(),
                receipt,
                body,
                receives: 1,
            });
        }
        Ok(out)
    }

    async fn ack(&self, receipts: &[String]) -> QueueResult<()> {
        let mut state = self.lock();
        for receipt in receipts {
            state.in_flight.remove(receipt);
        }
        Ok(())
    }

    /// Nothing is dead-lettered here.
    fn counts_hand_backs(&self) -> bool {
        false
    }

    async fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()> {
        let now = self.clock.now_ms();
        let mut state = self.lock();
        if let Some(body) = state.in_flight.remove(receipt) {
            let id = state.next_id;
            state.next_id += 1;
            state.waiting.push((now + delay_ms as Millis, id, body));
        }
        Ok(())
    }
}

/// The seeder reads sitemaps only: S3 manifests are not part of the simulation.
struct NoManifests;

impl ManifestSource for NoManifests {
    async fn open(
        &self,
        bucket: &str,
        key: &str,
        _: u64,
        _: Option<&str>,
    ) -> Result<OpenManifest, ManifestError> {
        Err(ManifestError::Unreadable {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            message: "no manifests in the freshness simulation".into(),
        })
    }
}

/// What one schedule achieved.
struct Outcome {
    seen: Seen,
    sweeps_waking: u64,
}

/// Crawls the simulated site for `size.days` under `recrawl`: seeds every page at `T0`, then
/// tick by tick runs the sweeper and every turn due, and reads the sitemaps every
/// `SITEMAP_EVERY`. On a blocking thread of its own, with its own current-thread runtime.
async fn simulate(recrawl: RecrawlPolicy, size: Size, seed: u64) -> BenchResult<Outcome> {
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .step("simulation runtime")?
            .block_on(simulate_here(recrawl, size, seed))
    })
    .await
    .step("simulation thread")?
}

/// `simulate` on the calling thread's runtime.
async fn simulate_here(recrawl: RecrawlPolicy, size: Size, seed: u64) -> BenchResult<Outcome> {
    let clock = ManualClock::at(T0);
    let site = Arc::new(SimSite::new(clock.clone(), size, seed));
    let (ports, servers) = serve(Arc::clone(&site), size.hosts).await?;
    let outcome = crawl_site(recrawl, size, &clock, &ports).await;
    for server in servers {
        server.abort();
    }
    let mut outcome = outcome?;
    outcome.seen = site.take_seen(clock.now_ms());
    Ok(outcome)
}

type SimPorts = (MemoryStore, MemoryBlobStore, VirtualQueue);

async fn crawl_site(
    recrawl: RecrawlPolicy,
    size: Size,
    clock: &ManualClock,
    ports: &[u16],
) -> BenchResult<Outcome> {
    let mut config = CrawlConfig::default();
    config.scope.follow_links = false;
    config.scope.sitemaps_from_robots = false;
    config.scope.allowed_domains = vec!["127.0.0.1".to_owned()];
    config.fetch.guard_exempt = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    config.politeness.respect_robots = false;
    config.politeness.delay_ms = 0;
    config.politeness.per_host = 8;
    config.recrawl = recrawl;
    let crawl = Crawl::new(CrawlId::parse("freshness").step("crawl id")?, config, T0);
    let calls = Arc::new(CallCounts::default());
    let app = Arc::new(
        App::new(
            MemoryStore::new(),
            MemoryBlobStore::new(),
            VirtualQueue {
                clock: clock.clone(),
                state: Mutex::default(),
            },
            Arc::clone(&calls),
        )
        .with_clock(Arc::new(clock.clone())),
    );
    let fetcher = Arc::new(Fetcher::new("trawl-bench").step("fetcher")?);
    let crawler = Crawler::new(Arc::clone(&app), Arc::clone(&fetcher), size.hosts);
    let seeder = Seeder::new(
        Arc::clone(&app),
        fetcher,
        Arc::new(NoManifests),
        SeedDefaults::default(),
    );
    let store = crawler.store();
    store.create_crawl(&crawl).await.step("create crawl")?;
    let tasks = (0..size.pages)
        .map(|i| {
            let port = ports[i % ports.len()];
            CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/p/{i}")).map(|url| NewTask {
                lane: None,
                priority: Default::default(),
                url,
                depth: 0,
                parent: None,
                data: None,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .step("page urls")?;
    add_tasks(store, crawler.queue(), &crawl, tasks, T0)
        .await
        .step("seed")?;
    let sitemaps: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}/sitemap.xml"))
        .collect();
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let sweeper = Sweeper::new(Arc::clone(&app), trigger.clone(), SweepOptions::new());
    let mut sweeps_waking = 0;
    let end = T0 + size.days * DAY;
    let mut next_sitemaps = T0 + SITEMAP_EVERY;
    while clock.now_ms() < end {
        let now = clock.now_ms();
        if now >= next_sitemaps {
            next_sitemaps += SITEMAP_EVERY;
            let request = SeedRequest {
                crawl_id: crawl.id.clone(),
                config: None,
                source: SeedSource::Sitemaps(sitemaps.clone()),
                cursor: None,
                update_config: false,
                checkpoint: None,
                priority: None,
            };
            seeder
                .seed(request, SeedBudget::default(), now)
                .await
                .step("read the sitemaps")?;
        }
        let current = store
            .get_crawl(&crawl.id)
            .await
            .step("read crawl")?
            .ok_or_else(|| check("read crawl", "the crawl is gone"))?;
        let mut budget = SweepBudget::new(1_000, Duration::from_secs(60));
        let report = sweeper
            .sweep_crawl(&current, now, &mut budget)
            .await
            .step("sweep")?;
        sweeps_waking += u64::from(report.recrawls > 0);
        // Completion notices are the deliverer's; nothing delivers here.
        trigger.take();
        run_due_turns(&crawler).await?;
        clock.advance(TICK);
    }
    Ok(Outcome {
        seen: Seen::default(),
        sweeps_waking,
    })
}

/// Processes every turn message visible now, and those the turns send for now.
async fn run_due_turns(crawler: &Crawler<SimPorts>) -> BenchResult<()> {
    let queue = crawler.queue();
    for _ in 0..MAX_BATCHES_PER_TICK {
        let batch = queue.receive(10, 0).await.step("receive")?;
        if batch.is_empty() {
            return Ok(());
        }
        for result in crawler.process_batch(batch, None).await {
            match result.disposition {
                Disposition::Done => queue.ack(&[result.receipt]).await.step("ack")?,
                // Later in virtual time; a zero delay would spin within the tick.
                Disposition::RetryAfter(ms) => queue
                    .retry_later(&result.receipt, ms.max(1))
                    .await
                    .step("retry")?,
                Disposition::Reject(why) => return Err(check("turn", why)),
            }
        }
    }
    Err(check("turns", "still turns due after the tick's bound"))
}

fn mean_and_p95(values: &mut [Millis]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    values.sort_unstable();
    let mean = values.iter().sum::<Millis>() as f64 / values.len() as f64;
    let p95 = values[((values.len() as f64 * 0.95) as usize).min(values.len() - 1)];
    (mean, p95 as f64)
}

/// An adaptive schedule for a collection that mostly does not change: MIN_TIME 1 h, MAX_TIME
/// 7 days, starting at one day (factor 24), slowing down after more than 1 unchanged fetch in a
/// row, by 1.5.
pub const TUNED: Schedule = Schedule {
    min_ms: HOUR as u64,
    max_ms: 7 * DAY as u64,
    initial_factor: 24.0,
    zero_actions: 1,
    factor_change: 1.5,
};

fn adaptive(schedule: Schedule) -> RecrawlPolicy {
    RecrawlPolicy {
        schedule: Some(schedule),
        ..RecrawlPolicy::default()
    }
}

fn fixed(interval: Millis) -> RecrawlPolicy {
    RecrawlPolicy {
        interval_ms: Some(interval as u64),
        ..RecrawlPolicy::default()
    }
}

/// The change-rate estimator's settings with `budget_per_day` fetches a day, told that the
/// sitemaps are read every `SITEMAP_EVERY` (as an operator sets it beside the reseed rate), the
/// others the defaults (15 min to 7 days, a day until the crawl has a water level).
fn estimator_settings(budget_per_day: u64) -> Estimator {
    Estimator {
        budget_per_day,
        sitemaps_every_ms: Some(SITEMAP_EVERY as u64),
        ..Estimator::default()
    }
}

fn estimator(budget_per_day: u64) -> RecrawlPolicy {
    RecrawlPolicy {
        estimator: Some(estimator_settings(budget_per_day)),
        ..RecrawlPolicy::default()
    }
}

const FIXED_NAME: &str = "fixed daily";
const TUNED_NAME: &str = "DDS tuned (1 h, 7 d, 24, 1, 1.5)";
const AT_FIXED_NAME: &str = "estimator, fixed daily's fetches";
const AT_TUNED_NAME: &str = "estimator, DDS tuned's fetches";
/// Runs that calibrate the estimator's budget to a number of fetches (`at_fetches`), at most,
/// and how close to it (a fraction of it) is close enough.
const CALIBRATION_RUNS: usize = 4;
const CALIBRATED: f64 = 0.005;

/// The schedules compared, by name: the estimator at fixed daily's budget (and, in `run`, at
/// the fetches DDS tuned made).
fn schedules(size: Size) -> [(&'static str, RecrawlPolicy); 4] {
    [
        (FIXED_NAME, fixed(DAY)),
        (
            "DDS defaults (15 min, 7 d, 10, 20, 1.3)",
            adaptive(Schedule::RECRAWL),
        ),
        (TUNED_NAME, adaptive(TUNED)),
        (
            "estimator, fixed daily's budget",
            estimator(size.pages as u64),
        ),
    ]
}

/// The simulation's size: 10,000 pages on 20 hosts for 30 days; with `--quick`, 1,000 pages
/// on 4 hosts for 7 days.
pub fn size(quick: bool) -> Size {
    if quick {
        Size {
            pages: 1_000,
            hosts: 4,
            days: 7,
        }
    } else {
        Size {
            pages: 10_000,
            hosts: 20,
            days: 30,
        }
    }
}

/// One schedule's line of the table.
struct Row {
    name: String,
    /// The estimator's budget (fetches a day); 0 for the other schedules.
    budget: u64,
    fetches: u64,
    /// Per changing class, and over all changing pages: mean and p95 staleness, in hours.
    staleness: Vec<(f64, f64)>,
    /// Per class and over all: the fraction of page-time fresh.
    fresh: Vec<f64>,
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let size = size(quick);
    let label = format!(
        "{} pages, {} hosts, {} days",
        size.pages, size.hosts, size.days
    );
    let label = label.as_str();
    // The simulations are independent and each runs on one thread: as many at once as there
    // are cores, the longest (DDS defaults) first.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let slots = Semaphore::new(cores);
    let slots = &slots;
    let [fixed_daily, defaults, tuned, budget] = schedules(size);
    let one =
        |(name, recrawl): (&'static str, RecrawlPolicy)| measure(name, recrawl, size, label, slots);
    // Beside DDS defaults, the longest chain first: DDS tuned and the estimator at its budget,
    // then the estimator calibrated to DDS tuned's fetches; fixed daily, then the estimator
    // calibrated to its fetches beside DDS's search at them, as slots free up.
    let others = async {
        let (tuned, budget) = tokio::join!(one(tuned), one(budget));
        let (tuned, budget) = (tuned?, budget?);
        let start = &budget.0;
        let (at_tuned, fixed) = tokio::join!(
            at_fetches(
                AT_TUNED_NAME,
                tuned.0.fetches,
                false,
                start,
                size,
                label,
                slots
            ),
            async {
                let fixed = one(fixed_daily).await?;
                let target = fixed.0.fetches;
                let (at_fixed, dds_best) = tokio::join!(
                    at_fetches(AT_FIXED_NAME, target, true, start, size, label, slots),
                    dds_best(target, size, label, slots)
                );
                BenchResult::Ok((fixed, at_fixed?, dds_best?))
            }
        );
        let (fixed, at_fixed, dds_best) = fixed?;
        BenchResult::Ok([fixed, tuned, dds_best, budget, at_fixed, at_tuned?])
    };
    let (defaults, others) = tokio::join!(one(defaults), others);
    let [fixed_daily, tuned, dds_best, budget, at_fixed, at_tuned] = others?;
    let fixed = fixed_daily.0.fetches;
    let (estimated, best) = (changing_mean(&at_fixed.0), changing_mean(&dds_best.0));
    let verdict = format!(
        "target (the estimator's mean staleness over every changing page at most half the best \
         DDS variant's, both at no more than fixed daily's {fixed} fetches): {}: the estimator \
         {estimated:.2} h at {} fetches against half of {best:.2} h = {:.2} h ({})",
        if estimated <= best / 2.0 {
            "met"
        } else {
            "not met"
        },
        at_fixed.0.fetches,
        best / 2.0,
        dds_best.0.name,
    );
    let mut figures = vec![
        Figure::single(
            SECTION,
            format!(
                "target: estimator at fixed daily's fetches, every changing page: staleness mean \
                 (<= half of DDS best at fixed daily's fetches) ({label})"
            ),
            "h",
            estimated,
        )
        .at_most(best / 2.0),
    ];
    let mut table_rows = Vec::new();
    for (row, row_figures) in [
        fixed_daily,
        defaults?,
        tuned,
        dds_best,
        budget,
        at_fixed,
        at_tuned,
    ] {
        figures.extend(row_figures);
        table_rows.push(row);
    }
    eprintln!("{}", table(label, &table_rows));
    eprintln!("{verdict}");
    let days = u64::try_from(size.days).unwrap_or(1).max(1);
    // What knowing every rate would give, at fixed daily's budget and at the fetches it made.
    for (budget, what) in [
        (size.pages as u64, "fixed daily's budget"),
        (fixed / days, "fixed daily's fetches a day"),
    ] {
        let ideal = ideal(size, 11, estimator_settings(budget));
        figures.push(Figure::single(
            SECTION,
            format!(
                "ideal at {what} ({budget}; known rates, periodic fetches, no sitemaps, \
                 steady state): every changing page: staleness mean ({label})"
            ),
            "h",
            ideal,
        ));
        eprintln!(
            "ideal at {what} ({budget} a day; every rate known, each page fetched periodically \
             at the estimator's allocation, no sitemaps, steady state): {ideal:.2} h mean \
             staleness over every changing page"
        );
    }
    Ok(figures)
}

/// Only fixed daily and DDS's best variant at no more than its fetches (`--only
/// freshness-dds`): the search alone, its rows and its figures, without the other schedules.
pub async fn run_dds(quick: bool) -> BenchResult<Vec<Figure>> {
    let size = size(quick);
    let label = format!(
        "{} pages, {} hosts, {} days",
        size.pages, size.hosts, size.days
    );
    let label = label.as_str();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let slots = Semaphore::new(cores);
    let [fixed_daily, ..] = schedules(size);
    let (name, recrawl) = fixed_daily;
    let fixed = measure(name, recrawl, size, label, &slots).await?;
    let best = dds_best(fixed.0.fetches, size, label, &slots).await?;
    let mut figures = Vec::new();
    let mut rows = Vec::new();
    for (row, row_figures) in [fixed, best] {
        figures.extend(row_figures);
        rows.push(row);
    }
    eprintln!("{}", table(label, &rows));
    Ok(figures)
}

/// The estimator's row at about `target` fetches over the run (`at_most`: at no more than
/// them). Its sitemap refreshes and its exploring come on top of its budget, by an amount that
/// varies with the budget, so the budget is calibrated: from the run at fixed daily's budget
/// (`start`), a run at the budget that would make `target` if that amount stayed the same,
/// then secant steps on (budget, fetches made), until a run is within `CALIBRATED` of `target`
/// (and, `at_most`, not over it: each step then aims half of that under it) or
/// `CALIBRATION_RUNS` were made; the last run is reported (`at_most`: the last not over
/// `target`, if any), its fetches in the table.
async fn at_fetches(
    name: &'static str,
    target: u64,
    at_most: bool,
    start: &Row,
    size: Size,
    label: &str,
    slots: &Semaphore,
) -> BenchResult<(Row, Vec<Figure>)> {
    let days = u64::try_from(size.days).unwrap_or(1).max(1) as f64;
    let aim = if at_most {
        target as f64 * (1.0 - CALIBRATED / 2.0)
    } else {
        target as f64
    };
    let mut tried = vec![(start.budget as f64, start.fetches as f64)];
    let mut budget = start.budget as f64 + (aim - start.fetches as f64) / days;
    let mut under: Option<(Row, Vec<Figure>)> = None;
    for run in 1..=CALIBRATION_RUNS {
        let (row, figures) =
            measure(name, estimator(budget.max(1.0) as u64), size, label, slots).await?;
        let fetches = row.fetches;
        let off = fetches.abs_diff(target) as f64 / target.max(1) as f64;
        let over = at_most && fetches > target;
        if off <= CALIBRATED && !over {
            return Ok((row, figures));
        }
        if run == CALIBRATION_RUNS {
            return Ok(match under {
                Some(kept) if over => kept,
                _ => (row, figures),
            });
        }
        tried.push((budget, fetches as f64));
        if !over && under.as_ref().is_none_or(|(u, _)| fetches > u.fetches) {
            under = Some((row, figures));
        }
        budget = match tried[..] {
            [.., (b0, f0), (b1, f1)] if (f1 - f0).abs() > 0.0 => {
                b1 + (aim - f1) * (b1 - b0) / (f1 - f0)
            }
            _ => budget * aim / (fetches.max(1) as f64),
        };
    }
    Err(check("calibration", "no run reported"))
}

/// The mean staleness (h) over every changing page of a row.
fn changing_mean(row: &Row) -> f64 {
    row.staleness.last().map_or(f64::NAN, |&(mean, _)| mean)
}

/// The shapes of DDS's schedule searched at fixed daily's fetches: INITIAL_NEXT_ACTION_FACTOR
/// (the document's 10, the tuned 24) by FACTOR_CHANGE_FACTOR (the document's 1.3, the tuned
/// 1.5, and 2), with ZERO_ACTIONS_FACTOR_CHANGE 1 and MAX_TIME 7 days (the tuned variant's; at
/// the document's 20 a page that never changes is fetched 21 times at its starting interval
/// before it slows down, so at fixed daily's cost that interval is about a day for 3 weeks).
/// MIN_TIME, which scales every interval, is calibrated for each.
const DDS_INITIAL: [f64; 2] = [10.0, 24.0];
/// The best at `--quick` first (a run cut short has them).
const DDS_FACTOR_CHANGE: [f64; 3] = [2.0, 1.5, 1.3];
const DDS_BEST_NAME: &str = "DDS best at fixed daily's fetches";
/// MIN_TIME's first try (DDS tuned's 1 h made twice fixed daily's fetches), the runs one shape
/// may take, and the share of the target a run must reach to stop early.
const DDS_FIRST_MIN: Millis = 3 * HOUR;
const DDS_CALIBRATION_RUNS: usize = 4;
const DDS_CLOSE: f64 = 0.97;
/// How fetches first are taken to follow 1 / MIN_TIME (as its power): what `--quick`'s runs
/// showed (0.26 to 0.35).
const DDS_ELASTICITY: f64 = 0.3;

/// DDS's best variant at no more than `target` fetches: every shape of the grid with its
/// MIN_TIME calibrated, the lowest mean staleness over every changing page. Its row is named
/// with its parameters; its figures under `DDS_BEST_NAME`, to compare across runs.
async fn dds_best(
    target: u64,
    size: Size,
    label: &str,
    slots: &Semaphore,
) -> BenchResult<(Row, Vec<Figure>)> {
    let shapes = DDS_FACTOR_CHANGE.iter().flat_map(|&factor_change| {
        DDS_INITIAL.iter().map(move |&initial_factor| Schedule {
            min_ms: DDS_FIRST_MIN as u64,
            max_ms: 7 * DAY as u64,
            initial_factor,
            zero_actions: 1,
            factor_change,
        })
    });
    // Shape after shape as slots free up, so that a run cut short has whole shapes done.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let found: Vec<_> = futures_util::stream::iter(
        shapes.map(|shape| dds_at_most(shape, target, size, label, slots)),
    )
    .buffered(cores)
    .collect()
    .await;
    let mut best: Option<(Row, Vec<Figure>)> = None;
    for candidate in found {
        let Some((row, figures)) = candidate? else {
            continue;
        };
        if best
            .as_ref()
            .is_none_or(|(b, _)| changing_mean(&row) < changing_mean(b))
        {
            best = Some((row, figures));
        }
    }
    let (mut row, figures) =
        best.ok_or_else(|| check("DDS search", "no shape made at most fixed daily's fetches"))?;
    let figures = figures
        .into_iter()
        .map(|mut figure| {
            figure.name = figure.name.replacen(&row.name, DDS_BEST_NAME, 1);
            figure
        })
        .collect();
    row.name = format!("{DDS_BEST_NAME} {}", row.name.trim_start_matches("DDS "));
    Ok((row, figures))
}

/// `shape`'s run with the most fetches at most `target`, MIN_TIME calibrated: fetches are taken
/// as a power of 1 / MIN_TIME (a floor that does not move with it — the lying sitemaps'
/// refreshes, the pages at MAX_TIME — makes them fall more slowly than 1 / MIN_TIME:
/// `DDS_ELASTICITY` at first, then the power the runs so far show), each step aiming 2% under
/// `target` and kept inside the range the runs above and below it bound, until a run is
/// within `DDS_CLOSE` of it or `DDS_CALIBRATION_RUNS` were made. None if every run made more.
async fn dds_at_most(
    shape: Schedule,
    target: u64,
    size: Size,
    label: &str,
    slots: &Semaphore,
) -> BenchResult<Option<(Row, Vec<Figure>)>> {
    let aim = (0.98 * target as f64).ln();
    let mut min = DDS_FIRST_MIN as f64;
    // The runs closest to the target from above and from below, as (ln 1/MIN_TIME, ln fetches),
    // and the last run.
    let mut over: Option<(f64, f64)> = None;
    let mut under: Option<(f64, f64)> = None;
    let mut last: Option<(f64, f64)> = None;
    let mut best: Option<(Row, Vec<Figure>)> = None;
    for _ in 0..DDS_CALIBRATION_RUNS {
        let schedule = Schedule {
            min_ms: (min / MINUTE as f64).round().max(1.0) as u64 * MINUTE as u64,
            ..shape
        };
        let name = format!(
            "DDS ({:.2} h, 7 d, {}, {}, {})",
            schedule.min_ms as f64 / HOUR as f64,
            schedule.initial_factor,
            schedule.zero_actions,
            schedule.factor_change
        );
        let (row, figures) = measure(&name, adaptive(schedule), size, label, slots).await?;
        let fetches = row.fetches;
        let point = (-(schedule.min_ms as f64).ln(), (fetches.max(1) as f64).ln());
        if fetches <= target {
            if best.as_ref().is_none_or(|(b, _)| fetches > b.fetches) {
                best = Some((row, figures));
            }
            if fetches as f64 >= DDS_CLOSE * target as f64 {
                break;
            }
            under = under.filter(|u| u.1 > point.1).or(Some(point));
        } else {
            over = over.filter(|o| o.1 < point.1).or(Some(point));
        }
        let power = match last {
            Some((x0, f0))
                if (point.0 - x0).abs() > 1e-9 && (point.1 - f0) / (point.0 - x0) > 0.0 =>
            {
                ((point.1 - f0) / (point.0 - x0)).clamp(0.05, 2.0)
            }
            _ => DDS_ELASTICITY,
        };
        last = Some(point);
        let mut x = point.0 + (aim - point.1) / power;
        // Inside the bracket, and not at its ends: at least a tenth of the way in.
        if let (Some(o), Some(u)) = (over, under) {
            let (lo, hi) = (u.0.min(o.0), u.0.max(o.0));
            let margin = 0.1 * (hi - lo);
            x = x.clamp(lo + margin, hi - margin);
        }
        // MIN_TIME from a minute to MAX_TIME.
        min = (-x).exp().clamp(MINUTE as f64, shape.max_ms as f64);
    }
    Ok(best)
}

/// The mean staleness (h) of every change if each page's rate were known and it were fetched
/// every interval the estimator's allocation gives that rate (a page never changing at the
/// longest), in steady state, without sitemaps: a change waits half an interval on average.
fn ideal(size: Size, seed: u64, settings: Estimator) -> f64 {
    let site = SimSite::new(ManualClock::at(T0), size, seed);
    let rates: Vec<f64> = site
        .lock()
        .pages
        .iter()
        .filter_map(|p| p.mean)
        .map(|m| 1.0 / m as f64)
        .collect();
    let never = size.pages - rates.len();
    let mut demand = Demand::default();
    for &rate in &rates {
        demand.add(rate, settings, 1.0);
    }
    let left = settings.budget_per_day as f64 - never as f64 * DAY as f64 / settings.max_ms as f64;
    let level = level_ms(&demand, left);
    let waited: f64 = rates
        .iter()
        .map(|&rate| rate * settings.interval_ms(rate, Some(level)) as f64 / 2.0)
        .sum();
    waited / rates.iter().sum::<f64>() / HOUR as f64
}

/// Simulates one schedule once a slot is free, and returns its line of the table and its
/// figures.
async fn measure(
    name: &str,
    recrawl: RecrawlPolicy,
    size: Size,
    label: &str,
    slots: &Semaphore,
) -> BenchResult<(Row, Vec<Figure>)> {
    let _slot = slots.acquire().await.step("simulation slot")?;
    eprintln!("  freshness: {name}");
    let budget = recrawl.estimator.map_or(0, |e| e.budget_per_day);
    let started = std::time::Instant::now();
    let mut outcome = simulate(recrawl, size, 11).await?;
    let mut figures = Vec::new();
    let seen = &mut outcome.seen;
    let fetches: u64 = seen.fetches.iter().sum();
    figures.push(Figure::single(
        SECTION,
        format!("{name}: page fetches ({label})"),
        "fetches",
        fetches as f64,
    ));
    figures.push(Figure::single(
        SECTION,
        format!("{name}: sitemap reads"),
        "reads",
        seen.sitemaps as f64,
    ));
    let mut row = Row {
        name: name.to_owned(),
        budget,
        fetches,
        staleness: Vec::new(),
        fresh: Vec::new(),
    };
    let mut changing: Vec<Millis> = Vec::new();
    for (c, class) in CLASSES.iter().enumerate() {
        let fresh = 1.0 - seen.stale_ms[c] as f64 / seen.page_ms[c].max(1) as f64;
        row.fresh.push(fresh);
        figures.push(Figure::single(
            SECTION,
            format!("{name}: {class}: page-time fresh"),
            "%",
            100.0 * fresh,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{name}: {class}: fetches"),
            "fetches",
            seen.fetches[c] as f64,
        ));
        if c == NEVER_CLASS {
            continue;
        }
        changing.extend_from_slice(&seen.staleness[c]);
        let (mean, p95) = mean_and_p95(&mut seen.staleness[c]);
        row.staleness.push((mean / HOUR as f64, p95 / HOUR as f64));
        figures.push(Figure::single(
            SECTION,
            format!("{name}: {class}: staleness mean"),
            "h",
            mean / HOUR as f64,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{name}: {class}: staleness p95"),
            "h",
            p95 / HOUR as f64,
        ));
    }
    let (mean, p95) = mean_and_p95(&mut changing);
    row.staleness.push((mean / HOUR as f64, p95 / HOUR as f64));
    figures.push(Figure::single(
        SECTION,
        format!("{name}: every changing page: staleness mean"),
        "h",
        mean / HOUR as f64,
    ));
    let all_fresh = 1.0
        - seen.stale_ms.iter().sum::<Millis>() as f64
            / seen.page_ms.iter().sum::<Millis>().max(1) as f64;
    row.fresh.push(all_fresh);
    figures.push(Figure::single(
        SECTION,
        format!("{name}: every page: page-time fresh"),
        "%",
        100.0 * all_fresh,
    ));
    figures.push(Figure::single(
        SECTION,
        format!("{name}: sweeps that woke hosts"),
        "sweeps",
        outcome.sweeps_waking as f64,
    ));
    let wall = started.elapsed().as_secs_f64();
    figures.push(Figure::single(
        SECTION,
        format!("{name}: simulation wall time"),
        "s",
        wall,
    ));
    eprintln!(
        "  freshness: {name}: {fetches} fetches, {:.2} h mean staleness over every changing \
         page, {wall:.1} s",
        mean / HOUR as f64
    );
    Ok((row, figures))
}

/// The comparison as a Markdown table (the README's).
fn table(label: &str, rows: &[Row]) -> String {
    let mut out = format!(
        "| {label} | fetches | hourly: mean / p95 staleness | daily | slow | every changing page | page-time fresh: changing / all |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for row in rows {
        let _ = write!(out, "| {} | {} |", row.name, row.fetches);
        for (mean, p95) in &row.staleness {
            let _ = write!(out, " {mean:.2} h / {p95:.1} h |");
        }
        let changing = row.fresh[..NEVER_CLASS].iter().sum::<f64>() / NEVER_CLASS as f64;
        let all = row.fresh.last().copied().unwrap_or(f64::NAN);
        let _ = writeln!(out, " {:.1}% / {:.1}% |", 100.0 * changing, 100.0 * all);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w3c_dates_are_civil_dates() {
        assert_eq!(w3c(0), "1970-01-01T00:00:00Z");
        assert_eq!(w3c(T0), "2001-09-09T01:46:40Z");
        assert_eq!(w3c(951_782_400_000 + 3_661_000), "2000-02-29T01:01:01Z");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_crawler_detects_changes_and_the_estimator_keeps_its_budget() {
        // GIVEN a small site over 3 days
        let size = Size {
            pages: 200,
            hosts: 2,
            days: 3,
        };
        // WHEN it is crawled daily and by the estimator at the same budget
        let mut daily = simulate(fixed(DAY), size, 3).await.unwrap().seen;
        let estimated = simulate(estimator(200), size, 3).await.unwrap().seen;
        // THEN fixed daily fetches every page once a day (seeded at T0: days 0, 1, 2), plus
        // the pages its sitemaps made due
        let scheduled = 600;
        let fetched = daily.fetches.iter().sum::<u64>();
        assert!(fetched >= scheduled, "{fetched}");
        assert_eq!(
            daily.sitemaps,
            2 * 5,
            "two hosts, every 12 h from 12 h to 60 h"
        );
        // AND changes are detected, none later than the daily interval (and a tick)
        for class in 0..2 {
            assert!(!daily.staleness[class].is_empty(), "class {class}");
        }
        let (daily_mean, _) = mean_and_p95(&mut daily.staleness[0]);
        assert!(daily_mean < 24.0 * HOUR as f64, "{daily_mean}");
        // AND the estimator stays near its budget: 200 a day, the lying sitemap's twice per page,
        // and on top of them its exploring (an early first check of each page, and checks
        // brought forward while every check of a page found a change): over 3 days, at most two
        // fetches a page more than fixed daily's
        let spent = estimated.fetches.iter().sum::<u64>();
        assert!(
            spent <= fetched + 2 * size.pages as u64,
            "{spent} vs {fetched}"
        );
        // AND it spends them where the changes are: more on the hourly changers, less on the
        // pages that never change, than fixed daily
        let (on_hourly, on_never) = (estimated.fetches[0], estimated.fetches[NEVER_CLASS]);
        assert!(
            on_hourly > daily.fetches[0],
            "{on_hourly} vs {:?}",
            daily.fetches
        );
        assert!(
            on_never < daily.fetches[NEVER_CLASS],
            "{on_never} vs {:?}",
            daily.fetches
        );
        // AND a page that never changes is never counted stale
        assert!(
            daily.staleness[NEVER_CLASS].is_empty() && estimated.staleness[NEVER_CLASS].is_empty()
        );
    }
}
