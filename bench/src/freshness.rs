//! Section 6: freshness on a virtual clock, through the real crawler. A simulated site of pages
//! with known change rates (1% change about hourly, 10% about daily — Poisson changes — the rest
//! never) is served on loopback, one port per host; the real `Crawler` (in-memory store and
//! blobs, a `ManualClock`) fetches it, the real `Sweeper` wakes its hosts when their recrawls are
//! due, and a virtual-time work queue hands out the turn messages. Time moves only by `TICK`
//! steps of the virtual clock (the sweeper runs once per tick, like DDS's periodic task): no
//! sleeping. Schedules compared: fixed daily, fixed hourly, the document's adaptive defaults and
//! an adaptive setting for a collection that mostly does not change.
//!
//! The site measures what the crawler saw: every page request is a fetch, and a fetch that gets
//! a newer version than the last one served detects each change since, its staleness being the
//! time from the change to that fetch. Changes still undetected when the simulation ends are
//! not counted.

use crate::error::{BenchResult, Context, check};
use crate::report::Figure;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use trawl_core::app::App;
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::clock::{Clock, ManualClock};
use trawl_core::crawler::{Crawler, Disposition};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::{QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use trawl_core::store::CrawlStore;
use trawl_core::store::memory::MemoryStore;
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, RecrawlPolicy};
use trawl_domain::schedule::Schedule;
use trawl_domain::task::{Millis, NewTask};

const SECTION: &str = "freshness";
const MINUTE: Millis = 60_000;
const HOUR: Millis = 60 * MINUTE;
const DAY: Millis = 24 * HOUR;
/// The virtual clock's step: the sweeper runs and due turns are taken once per tick (as DDS's
/// periodic task does), so a page is fetched up to one tick after it is due.
const TICK: Millis = 5 * MINUTE;
/// Where the virtual clock starts (far from the wall clock, as a check that nothing reads it).
const T0: Millis = 1_000_000_000_000;
/// Turn batches one tick may process before the run is declared stuck.
const MAX_BATCHES_PER_TICK: usize = 100_000;

/// How often a class of pages changes (mean interval between changes; None: never).
#[derive(Clone, Copy)]
struct Class {
    name: &'static str,
    mean_change_ms: Option<Millis>,
}

const CLASSES: [Class; 3] = [
    Class {
        name: "hourly changers",
        mean_change_ms: Some(HOUR),
    },
    Class {
        name: "daily changers",
        mean_change_ms: Some(DAY),
    },
    Class {
        name: "never changed",
        mean_change_ms: None,
    },
];

/// The class of page `i`: the first page of every hundred changes hourly, the next ten daily.
fn class_of(i: usize) -> usize {
    match i % 100 {
        0 => 0,
        1..=10 => 1,
        _ => 2,
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
    fetches: [u64; 3],
    /// Per class: the staleness of every detected change, in ms.
    staleness: [Vec<Millis>; 3],
}

struct SiteState {
    pages: Vec<Page>,
    seen: Seen,
}

/// The simulated site, answering from the virtual clock.
struct SimSite {
    clock: ManualClock,
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

impl SimSite {
    fn new(clock: ManualClock, pages: usize, horizon: Millis, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let pages = (0..pages)
            .map(|i| {
                let class = class_of(i);
                Page {
                    class,
                    changes: changes(&mut rng, CLASSES[class].mean_change_ms, horizon),
                    served: 0,
                }
            })
            .collect();
        Self {
            clock,
            state: Mutex::new(SiteState {
                pages,
                seen: Seen::default(),
            }),
        }
    }

    /// `/p/{i}`: the page's current version, with an ETag (304 to a matching If-None-Match).
    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let page = req
            .uri()
            .path()
            .strip_prefix("/p/")
            .and_then(|n| n.parse::<usize>().ok());
        let now = self.clock.now_ms();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let SiteState { pages, seen } = &mut *state;
        let Some((i, page)) = page.and_then(|i| pages.get_mut(i).map(|p| (i, p))) else {
            return reply(StatusCode::NOT_FOUND, None, Bytes::new());
        };
        seen.fetches[page.class] += 1;
        let version = page.changes.partition_point(|&c| c <= now);
        for &change in &page.changes[page.served.min(version)..version] {
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

    fn take_seen(&self) -> Seen {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut state.seen)
    }
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
    for _ in 0..hosts {
        let listener = TcpListener::bind("127.0.0.1:0").await.step("bind site")?;
        ports.push(listener.local_addr().step("site address")?.port());
        let site = Arc::clone(&site);
        servers.push(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let site = Arc::clone(&site);
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let response = site.respond(&req);
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

/// What one schedule achieved.
struct Outcome {
    seen: Seen,
    sweeps_waking: u64,
}

/// Crawls the simulated site for `size.days` under `recrawl`: seeds every page at `T0`, then
/// tick by tick runs the sweeper and every turn due.
async fn simulate(recrawl: RecrawlPolicy, size: Size, seed: u64) -> BenchResult<Outcome> {
    let horizon = size.days * DAY;
    let clock = ManualClock::at(T0);
    let site = Arc::new(SimSite::new(clock.clone(), size.pages, horizon, seed));
    let (ports, servers) = serve(Arc::clone(&site), size.hosts).await?;
    let outcome = crawl_site(recrawl, size, &clock, &ports).await;
    for server in servers {
        server.abort();
    }
    let mut outcome = outcome?;
    outcome.seen = site.take_seen();
    Ok(outcome)
}

async fn crawl_site(
    recrawl: RecrawlPolicy,
    size: Size,
    clock: &ManualClock,
    ports: &[u16],
) -> BenchResult<Outcome> {
    let mut config = CrawlConfig::default();
    config.scope.follow_links = false;
    config.fetch.guard_exempt = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    config.politeness.respect_robots = false;
    config.politeness.delay_ms = 0;
    config.politeness.per_host = 8;
    config.recrawl = recrawl;
    let crawl = Crawl::new(CrawlId::parse("freshness").step("crawl id")?, config, T0);
    let calls = Arc::new(CallCounts::default());
    let crawler = Crawler::new(
        Arc::new(
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
        ),
        Arc::new(Fetcher::new("trawl-bench").step("fetcher")?),
        size.hosts,
    );
    let store = crawler.store();
    store.create_crawl(&crawl).await.step("create crawl")?;
    let tasks = (0..size.pages)
        .map(|i| {
            let port = ports[i % ports.len()];
            CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/p/{i}")).map(|url| NewTask {
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
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let sweeper = Sweeper::new(crawler.app().clone(), trigger.clone(), SweepOptions::new());
    let mut sweeps_waking = 0;
    let end = T0 + size.days * DAY;
    while clock.now_ms() < end {
        let now = clock.now_ms();
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
async fn run_due_turns(
    crawler: &Crawler<(MemoryStore, MemoryBlobStore, VirtualQueue)>,
) -> BenchResult<()> {
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

/// The schedules compared, by name.
fn schedules() -> [(&'static str, RecrawlPolicy); 4] {
    [
        ("fixed daily", fixed(DAY)),
        ("fixed hourly", fixed(HOUR)),
        (
            "adaptive, the document's defaults",
            adaptive(Schedule::RECRAWL),
        ),
        ("adaptive (1 h - 7 d, 24, 1, 1.5)", adaptive(TUNED)),
    ]
}

/// The simulation's size: 2,000 pages on 10 hosts for 30 days (fixed hourly alone is 1.44
/// million fetches through the crawler); with `--quick`, 500 pages on 5 hosts for 7 days.
pub fn size(quick: bool) -> Size {
    if quick {
        Size {
            pages: 500,
            hosts: 5,
            days: 7,
        }
    } else {
        Size {
            pages: 2_000,
            hosts: 10,
            days: 30,
        }
    }
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let size = size(quick);
    let mut figures = Vec::new();
    let label = format!("{} pages, {} days", size.pages, size.days);
    for (name, recrawl) in schedules() {
        eprintln!("  freshness: {name}");
        let started = std::time::Instant::now();
        let mut outcome = simulate(recrawl, size, 11).await?;
        let seen = &mut outcome.seen;
        let fetches: u64 = seen.fetches.iter().sum();
        figures.push(Figure::single(
            SECTION,
            format!("{name}: fetches ({label})"),
            "fetches",
            fetches as f64,
        ));
        for (c, class) in CLASSES.iter().enumerate() {
            if class.mean_change_ms.is_none() {
                continue;
            }
            let (mean, p95) = mean_and_p95(&mut seen.staleness[c]);
            figures.push(Figure::single(
                SECTION,
                format!("{name}: {} staleness mean", class.name),
                "h",
                mean / HOUR as f64,
            ));
            figures.push(Figure::single(
                SECTION,
                format!("{name}: {} staleness p95", class.name),
                "h",
                p95 / HOUR as f64,
            ));
        }
        figures.push(Figure::single(
            SECTION,
            format!("{name}: sweeps that woke hosts"),
            "sweeps",
            outcome.sweeps_waking as f64,
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{name}: simulation wall time"),
            "s",
            started.elapsed().as_secs_f64(),
        ));
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_crawler_detects_changes_and_the_tuned_schedule_beats_daily() {
        // GIVEN a small site over 3 days
        let size = Size {
            pages: 200,
            hosts: 2,
            days: 3,
        };
        // WHEN it is crawled daily and with the tuned adaptive schedule
        let mut daily = simulate(fixed(DAY), size, 3).await.unwrap().seen;
        let mut tuned = simulate(adaptive(TUNED), size, 3).await.unwrap().seen;
        // THEN fixed daily fetches every page once a day (seeded at T0: days 0, 1, 2)
        assert_eq!(daily.fetches.iter().sum::<u64>(), 600);
        // AND both detect changes, none later than the daily interval (and a tick) under daily
        for class in 0..2 {
            assert!(!daily.staleness[class].is_empty(), "class {class}");
            assert!(daily.staleness[class].iter().all(|&s| s <= DAY + TICK));
        }
        let (daily_mean, _) = mean_and_p95(&mut daily.staleness[0]);
        let (tuned_mean, _) = mean_and_p95(&mut tuned.staleness[0]);
        assert!(tuned_mean < daily_mean, "{tuned_mean} vs {daily_mean}");
        // AND a page that never changes is never counted stale
        assert!(daily.staleness[2].is_empty() && tuned.staleness[2].is_empty());
    }
}
