//! Section `pace`: each host at its own pace. One fast host (a domain rule: 20 requests/s, 4 in
//! flight, 200 pages a turn) and nine slow ones (robots.txt `Crawl-delay: 10`) of a loopback site
//! (`127.0.0.1` … `127.0.0.10` on one port) are crawled by the core crawler on the in-memory
//! store and the deployed kind of queue (SQS standard, on moto), with several invocations at
//! once, each taking a batch of up to 10 turn messages as Lambda's event source mapping hands
//! them out: the first batch holds every host, the others take the turns sent meanwhile. Printed: the fast host's pages per second over a fixed window, the requests it
//! got, and the slow hosts' (which must keep their 10 s pace).

use crate::error::{BenchResult, Context, check};
use crate::moto::{Moto, stack};
use crate::report::Figure;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use trawl_core::app::App;
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::crawler::{Crawler, Disposition};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::WorkQueue;
use trawl_core::store::CrawlStore;
use trawl_core::store::memory::MemoryStore;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, HostRule};
use trawl_domain::task::{NewTask, now_ms};
use trawl_faults::hosts_site::{HostsSite, ip};

const SECTION: &str = "each host at its own pace";
const HOSTS: usize = 10;
/// The fast host's rule: 20 requests a second.
const FAST_DELAY_MS: u64 = 50;
const FAST_TURN_PAGES: u32 = 200;
/// Invocations running at once (Lambda's concurrency for the function).
const INVOCATIONS: usize = 4;

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let window = Duration::from_secs(if quick { 15 } else { 40 });
    let fast_pages = 30 * window.as_secs() as usize;
    let site = HostsSite::start(
        HOSTS,
        Arc::new(|host, path| match path {
            "/robots.txt" if host == 0 => Some("User-agent: *\nAllow: /\n".to_owned()),
            "/robots.txt" => Some("User-agent: *\nCrawl-delay: 10\n".to_owned()),
            _ => Some(format!(
                "<html><body><p>host {host}, {path}</p></body></html>"
            )),
        }),
    )
    .await
    .step("start site")?;
    let mut config = CrawlConfig::default();
    config.scope.allowed_domains = (0..HOSTS).map(|h| ip(h).to_string()).collect();
    config.scope.follow_links = false;
    config.fetch.allow_private_networks = true;
    config.politeness.respect_robots = true;
    config.politeness.rules = vec![HostRule {
        domain: ip(0).to_string(),
        delay_ms: Some(FAST_DELAY_MS),
        // Starts 50 ms apart, each fetch and its writes taking longer than that: a few in
        // flight, as a rule for a fast host would give.
        per_host: Some(4),
        turn_pages: Some(FAST_TURN_PAGES),
        max_host_tasks: None,
    }];
    // A slow host's turn ends within the window (its hold on the host, less a fetch window).
    config.lease_ms = 30_000;
    config.fetch.timeout_ms = 5_000;
    let crawl = Crawl::new(CrawlId::parse("pace").step("crawl id")?, config, now_ms());
    let store = MemoryStore::new();
    store.create_crawl(&crawl).await.step("create crawl")?;
    let moto = Moto::start(true)?;
    let made = stack(&moto.endpoint, "bench-pace").await?;
    let (queue, calls) = (made.queue, made.calls);
    let mut tasks = Vec::new();
    for host in 0..HOSTS {
        let pages = if host == 0 { fast_pages } else { 20 };
        for i in 0..pages {
            tasks.push(NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&site.url(host, &format!("/p/{i}.html")))
                    .step("page url")?,
                depth: 0,
                parent: None,
                data: None,
            });
        }
    }
    add_tasks(&store, &queue, &crawl, tasks, now_ms())
        .await
        .step("seed")?;
    let app = Arc::new(App::new(store, MemoryBlobStore::new(), queue, calls));
    let crawler = Crawler::new(app, Arc::new(Fetcher::new("").step("fetcher")?), 10);

    let started = Instant::now();
    let stop = AtomicBool::new(false);
    // The first batch holds every host's turn; the other invocations take what comes next.
    let first = crawler.queue().receive(10, 1_000).await.step("receive")?;
    if first.len() != HOSTS {
        return Err(check(
            "pace",
            format!("the first batch holds {} turns", first.len()),
        ));
    }
    let first = std::sync::Mutex::new(Some(first));
    let invocation = || async {
        while !stop.load(Ordering::SeqCst) {
            let taken = first.lock().ok().and_then(|mut f| f.take());
            let batch = match taken {
                Some(batch) => batch,
                None => match crawler.queue().receive(10, 200).await {
                    Ok(batch) => batch,
                    Err(_) => return,
                },
            };
            if batch.is_empty() {
                continue;
            }
            let results = crawler.process_batch(batch, None).await;
            for result in results {
                let settled = match result.disposition {
                    Disposition::Done => crawler.queue().ack(&[result.receipt]).await,
                    Disposition::RetryAfter(ms) => {
                        crawler.queue().retry_later(&result.receipt, ms).await
                    }
                    Disposition::Reject(_) => Ok(()),
                };
                if settled.is_err() {
                    return;
                }
            }
        }
    };
    let invocations = futures_util::future::join_all((0..INVOCATIONS).map(|_| invocation()));
    // The window is measured; the turns still running then are left (the site and store are
    // this section's own).
    let _ = tokio::time::timeout(window + Duration::from_secs(2), invocations).await;
    stop.store(true, Ordering::SeqCst);
    let requests = site.requests();
    let pages_of = |host: usize| {
        requests
            .iter()
            .filter(|(h, path, at)| {
                *h == host && path.starts_with("/p/") && at.duration_since(started) <= window
            })
            .count()
    };
    let fast = pages_of(0);
    let slow: Vec<usize> = (1..HOSTS).map(pages_of).collect();
    let slowest_gap = slow_gap(&requests);
    // Within a turn a slow host's starts are 10 s apart; between two turns its Crawl-delay is
    // not carried over (the host record keeps the policy's delay): printed, not checked.
    let rate = fast as f64 / window.as_secs_f64();
    let mut fast_times: Vec<f64> = requests
        .iter()
        .filter(|(h, path, _)| *h == 0 && path.starts_with("/p/"))
        .map(|(_, _, at)| at.duration_since(started).as_secs_f64())
        .collect();
    fast_times.sort_by(f64::total_cmp);
    let pauses: Vec<String> = fast_times
        .windows(2)
        .filter(|w| w[1] - w[0] > 0.5)
        .map(|w| format!("{:.1}–{:.1} s", w[0], w[1]))
        .collect();
    eprintln!("  fast host's pauses between turns: {pauses:?}");
    eprintln!(
        "  fast host: {fast} pages in {} s ({rate:.1}/s); slow hosts: {slow:?} pages, at least {slowest_gap} ms apart",
        window.as_secs()
    );
    Ok(vec![
        Figure::of(
            SECTION,
            format!(
                "fast host (20 req/s rule) with 9 slow batch-mates (Crawl-delay 10 s), pages/s over {} s",
                window.as_secs()
            ),
            "pages/s",
            &[rate],
        )
        .at_least(15.0),
    ])
}

/// The shortest gap between two page requests to one slow host, in ms (u64::MAX: none had two).
fn slow_gap(requests: &[(usize, String, Instant)]) -> u64 {
    (1..HOSTS)
        .filter_map(|host| {
            let mut times: Vec<Instant> = requests
                .iter()
                .filter(|(h, path, _)| *h == host && path.starts_with("/p/"))
                .map(|(_, _, at)| *at)
                .collect();
            times.sort();
            times
                .windows(2)
                .map(|w| w[1].duration_since(w[0]).as_millis() as u64)
                .min()
        })
        .min()
        .unwrap_or(u64::MAX)
}
