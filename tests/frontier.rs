//! The host-level frontier on both backends — DynamoDB + S3 + SQS (moto) and SQLite + files +
//! the in-process queue — against loopback sites: a failing URL holds none of its host's other
//! URLs back, a throttled host is snoozed for every worker without spending its URLs' retries, a
//! dead host is given up within its error budget so that the crawl completes, a page that
//! several links reach under different query orders, or a redirect and a link, is fetched once;
//! and on a virtual clock (the in-memory store too), a turn's holder that dies costs its host 30 s
//! at most while a live turn longer than that keeps its host.

use crate::site::{Route, Site};
use crate::support::{aws_stack, moto, unique};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_core::app::{App, Ports};
use trawl_core::blob::Layout;
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::clock::{Clock, ManualClock};
use trawl_core::crawler::{Crawler, Disposition, Outcome};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::{SeedReport, add_tasks};
use trawl_core::queue::local::LocalQueue;
use trawl_core::queue::{Received, WorkMessage, WorkQueue};
use trawl_core::store::memory::MemoryStore;
use trawl_core::store::{CrawlStore, HostStore, TaskRecords};
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::host::Host;
use trawl_domain::task::{ErrorKind, NewTask, Status, Task, now_ms};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

/// Longest any scenario drains for.
const DRAIN_TIME: Duration = Duration::from_secs(40);

/// A crawl of loopback sites: guard exempting them, no robots.txt, fast timeouts.
fn config(sites: &[&Site]) -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.fetch.guard_exempt = sites.iter().map(|s| s.addr().to_string()).collect();
    config.fetch.timeout_ms = 1_500;
    config.fetch.connect_timeout_ms = 500;
    config.politeness.respect_robots = false;
    config.scope.follow_links = false;
    config
}

/// A crawler and its crawl, on one backend.
struct Run<P: Ports> {
    crawler: Crawler<P>,
    crawl: Crawl,
}

impl<P: Ports> Run<P> {
    async fn start(app: App<P>, config: CrawlConfig) -> Self {
        let crawl = Crawl::new(
            CrawlId::parse(&unique("frontier")).unwrap(),
            config,
            now_ms(),
        );
        app.store.create_crawl(&crawl).await.unwrap();
        let crawler = Crawler::new(
            Arc::new(app.with_layout(Layout::new("pages"))),
            Arc::new(Fetcher::new("").unwrap()),
            4,
        );
        Self { crawler, crawl }
    }

    /// Seeds `urls` through the frontier; returns what it did (every turn message sent).
    async fn seed(&self, urls: &[String]) -> SeedReport {
        let tasks = urls
            .iter()
            .map(|u| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        let report = add_tasks(
            self.crawler.store(),
            self.crawler.queue(),
            &self.crawl,
            tasks,
            self.crawler.clock().now_ms(),
        )
        .await
        .unwrap();
        assert!(report.enqueue_failed.is_empty());
        report
    }

    /// One receive (waiting up to `wait_ms`) → process → settle round, as Lambda settles it.
    async fn round(&self, wait_ms: u64) -> Option<Vec<Outcome>> {
        let batch = self.crawler.queue().receive(10, wait_ms).await.unwrap();
        if batch.is_empty() {
            return None;
        }
        let mut done = Vec::new();
        let mut outcomes = Vec::new();
        for result in self.crawler.process_batch(batch, None).await {
            match result.disposition {
                Disposition::Done => done.push(result.receipt),
                Disposition::RetryAfter(ms) => self
                    .crawler
                    .queue()
                    .retry_later(&result.receipt, ms)
                    .await
                    .unwrap(),
                Disposition::Reject(why) => panic!("rejected: {why}"),
            }
            outcomes.extend(result.outcomes);
        }
        self.crawler.queue().ack(&done).await.unwrap();
        Some(outcomes)
    }

    /// Rounds until no task has work left (bounded in time).
    async fn drain(&self) -> Vec<Outcome> {
        let started = Instant::now();
        let mut outcomes = Vec::new();
        while !self.finished().await {
            assert!(started.elapsed() < DRAIN_TIME, "not drained: {outcomes:?}");
            outcomes.extend(self.round(1_000).await.unwrap_or_default());
        }
        outcomes
    }

    async fn finished(&self) -> bool {
        let counts = self.crawler.store().counts(&self.crawl.id).await.unwrap();
        [Status::Pending, Status::InProgress, Status::Failed]
            .iter()
            .all(|s| counts.get(s).copied().unwrap_or(0) == 0)
    }

    async fn task(&self, url: &str) -> Task {
        let id = CanonicalUrl::parse(url).unwrap().task_id();
        self.crawler
            .store()
            .get(&self.crawl.id, &id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no task for {url}"))
    }

    async fn host(&self, site: &Site) -> Host {
        let name = CanonicalUrl::parse(&site.url("/")).unwrap().host_key();
        self.crawler
            .store()
            .get_host(&self.crawl.id, &name)
            .await
            .unwrap()
            .expect("a host record")
    }
}

/// An App on DynamoDB + S3 + SQS (moto).
async fn on_aws() -> App<impl Ports> {
    let stack = aws_stack(&moto::shared().endpoint).await;
    App::new(stack.store, stack.blobs, stack.queue, stack.calls)
}

/// An App on the embedded backend: SQLite, files in a scratch directory, the in-process queue.
async fn on_embedded() -> App<impl Ports> {
    let calls = Arc::new(CallCounts::default());
    let dir = std::env::temp_dir().join(unique("trawl-frontier"));
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let blobs = FsBlobStore::new(dir, calls.clone());
    let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
    App::new(store, blobs, queue, calls)
}

/// Ten good pages and one that always answers 500, on one host paced at 50 ms.
async fn one_failing_url_holds_none_of_its_hosts_other_urls_back<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN the failing URL seeded first, then ten good ones
    let site = Site::start().await;
    site.route("/bad", Route::status(500));
    let good: Vec<String> = (0..10)
        .map(|i| {
            site.route(&format!("/good{i}"), Route::html(format!("<p>{i}</p>")));
            site.url(&format!("/good{i}"))
        })
        .collect();
    let mut config = config(&[&site]);
    config.politeness.delay_ms = 50;
    config.retry.base_delay_ms = 60_000;
    let run = Run::start(start().await, config).await;
    let mut urls = vec![site.url("/bad")];
    urls.extend(good.iter().cloned());
    run.seed(&urls).await;

    // WHEN the host's first turn runs
    let outcomes = run.round(1_000).await.expect("the host's turn");

    // THEN that one turn fetched all ten good pages: the failure got a due time and the turn
    // went on (no head-of-line blocking), pacing the host at its delay
    let succeeded = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Succeeded { .. }))
        .count();
    assert_eq!((succeeded, outcomes.len()), (10, 11), "{outcomes:?}");
    for url in &good {
        assert_eq!(run.task(url).await.status, Status::Succeeded);
    }
    let bad = run.task(&site.url("/bad")).await;
    assert_eq!((bad.status, bad.retries), (Status::Failed, 1));
    assert_eq!(site.hits("/bad"), 1);
    // AND the host's next turn is queued for the failure's next attempt
    let host = run.host(&site).await;
    assert_eq!(host.queued_for, bad.next_attempt_at);
    assert!(host.snoozed_until.is_none(), "a 500 is the URL's trouble");
}

#[tokio::test]
async fn one_failing_url_holds_none_of_its_hosts_other_urls_back_on_aws() {
    one_failing_url_holds_none_of_its_hosts_other_urls_back(on_aws).await;
}

#[tokio::test]
async fn one_failing_url_holds_none_of_its_hosts_other_urls_back_embedded() {
    one_failing_url_holds_none_of_its_hosts_other_urls_back(on_embedded).await;
}

/// A host answering 429 with Retry-After: 1 on every page, until it recovers.
async fn a_throttled_host_is_snoozed_for_every_worker_and_its_urls_spend_no_retries<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN five pages of a host that throttles
    let site = Site::start().await;
    let paths: Vec<String> = (0..5).map(|i| format!("/p{i}")).collect();
    for path in &paths {
        site.route(path, Route::status(429).header("retry-after", "1"));
    }
    let mut config = config(&[&site]);
    config.politeness.snooze_base_ms = 200;
    config.politeness.per_host = 1;
    // The crawler on a virtual clock: the snooze lasts until the test moves it, however slow
    // the backend (a wall clock's second could pass before the early message below arrives).
    let clock = ManualClock::at(now_ms());
    let run = Run::start(start().await.with_clock(Arc::new(clock.clone())), config).await;
    let urls: Vec<String> = paths.iter().map(|p| site.url(p)).collect();
    run.seed(&urls).await;

    // WHEN the host's turn runs
    let before = clock.now_ms();
    let outcomes = run.round(1_000).await.expect("the host's turn");
    let after = clock.now_ms();

    // THEN one request was made: the 429 snoozed the host for the Retry-After (longer than
    // its own backoff), the URL went back untouched, nothing else of the host was fetched
    assert_eq!(outcomes, [Outcome::Snoozed]);
    assert_eq!(site.total_hits(), 1);
    let host = run.host(&site).await;
    let snoozed_until = host.snoozed_until.expect("snoozed");
    assert_eq!(host.queued_for, Some(snoozed_until));
    assert!(
        (before + 1_000..=after + 1_000).contains(&snoozed_until),
        "Retry-After honoured: {before} {snoozed_until} {after}"
    );
    for url in &urls {
        let t = run.task(url).await;
        assert_eq!((t.status, t.retries), (Status::Pending, 0), "{url}");
    }
    // AND no worker gets the host meanwhile: a turn message arriving early is handed back
    let early = run
        .crawler
        .process_batch(vec![turn_received(&run, &host)], None)
        .await;
    assert!(
        matches!(early[0].disposition, Disposition::RetryAfter(ms) if ms > 0),
        "{early:?}"
    );
    assert!(early[0].outcomes.is_empty());
    assert_eq!(site.total_hits(), 1);

    // WHEN the host recovers and its snooze runs out
    for path in &paths {
        site.route(path, Route::html("<p>ok</p>"));
    }
    clock.advance(1_000);
    let outcomes = run.drain().await;

    // THEN every page succeeded without having spent a retry, each fetched once more
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Succeeded { .. }))
            .count(),
        5
    );
    for url in &urls {
        let t = run.task(url).await;
        assert_eq!((t.status, t.retries), (Status::Succeeded, 0), "{url}");
    }
    assert_eq!(site.total_hits(), 6);
    let host = run.host(&site).await;
    assert_eq!((host.snoozed_until, host.trouble_in_a_row), (None, 0));
}

/// The host's current turn message, as another worker would receive it.
fn turn_received<P: Ports>(run: &Run<P>, host: &Host) -> trawl_core::queue::Received {
    let message =
        trawl_core::queue::WorkMessage::new(run.crawl.id.clone(), host.name.clone(), host.epoch, 0);
    trawl_core::queue::Received {
        message_id: "other-worker".into(),
        receipt: "other-worker".into(),
        body: serde_json::to_string(&message).unwrap(),
        receives: 1,
    }
}

#[tokio::test]
async fn a_throttled_host_is_snoozed_for_every_worker_and_its_urls_spend_no_retries_on_aws() {
    a_throttled_host_is_snoozed_for_every_worker_and_its_urls_spend_no_retries(on_aws).await;
}

#[tokio::test]
async fn a_throttled_host_is_snoozed_for_every_worker_and_its_urls_spend_no_retries_embedded() {
    a_throttled_host_is_snoozed_for_every_worker_and_its_urls_spend_no_retries(on_embedded).await;
}

/// A good site and a host that refuses every connection.
async fn a_dead_host_is_given_up_within_its_budget_and_the_crawl_completes<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN five good pages and five of a dead host (a port bound, then freed), an error
    // budget of 3 and short snoozes
    let site = Site::start().await;
    let good: Vec<String> = (0..5)
        .map(|i| {
            site.route(&format!("/g{i}"), Route::html("<p>g</p>"));
            site.url(&format!("/g{i}"))
        })
        .collect();
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead: Vec<String> = (0..5)
        .map(|i| format!("http://127.0.0.1:{dead_port}/d{i}"))
        .collect();
    let mut config = config(&[&site]);
    config
        .fetch
        .guard_exempt
        .push(format!("127.0.0.1:{dead_port}"));
    config.politeness.error_budget = 3;
    config.politeness.snooze_base_ms = 100;
    let run = Run::start(start().await, config).await;
    let mut urls = good.clone();
    urls.extend(dead.iter().cloned());
    run.seed(&urls).await;

    // WHEN everything is crawled
    run.drain().await;

    // THEN the good pages succeeded; the dead host was tried exactly its budget of times, then
    // given up, its tasks ignored with the host's reason and no retry spent
    for url in &good {
        assert_eq!(run.task(url).await.status, Status::Succeeded);
    }
    let name = format!("127.0.0.1:{dead_port}");
    let host = run
        .crawler
        .store()
        .get_host(&run.crawl.id, &name)
        .await
        .unwrap()
        .unwrap();
    assert!(host.given_up.is_some(), "{host:?}");
    assert_eq!((host.fetches, host.signals), (3, 3));
    for url in &dead {
        let t = run.task(url).await;
        assert_eq!((t.status, t.retries), (Status::Ignored, 0), "{url}");
        assert_eq!(t.errors.last().unwrap().kind, ErrorKind::HostGivenUp);
    }
    // AND the sweeper completes the crawl
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let sweeper = Sweeper::new(run.crawler.app().clone(), trigger, SweepOptions::new());
    let mut budget = SweepBudget::new(100, Duration::from_secs(30));
    let report = sweeper
        .sweep_crawl(&run.crawl, now_ms(), &mut budget)
        .await
        .unwrap();
    assert!(report.completed, "{report:?}");
}

#[tokio::test]
async fn a_dead_host_is_given_up_within_its_budget_and_the_crawl_completes_on_aws() {
    a_dead_host_is_given_up_within_its_budget_and_the_crawl_completes(on_aws).await;
}

#[tokio::test]
async fn a_dead_host_is_given_up_within_its_budget_and_the_crawl_completes_embedded() {
    a_dead_host_is_given_up_within_its_budget_and_the_crawl_completes(on_embedded).await;
}

/// A host that serves its pages but answers two of them 429 (Retry-After: 1) forever: one asked
/// for before any other page answered, one after all of them (the last of its host's work).
async fn a_url_throttled_while_its_host_serves_others_is_ignored_within_its_retries<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN the first throttled URL crawled alone: held back (nothing says it is the URL's)
    let site = Site::start().await;
    for path in ["/first", "/last"] {
        site.route(path, Route::status(429).header("retry-after", "1"));
    }
    let good: Vec<String> = (0..5)
        .map(|i| {
            let path = format!("/g{i}");
            site.route(&path, Route::html("<p>g</p>"));
            site.url(&path)
        })
        .collect();
    let mut config = config(&[&site]);
    config.politeness.snooze_base_ms = 100;
    config.politeness.per_host = 1;
    config.retry.base_delay_ms = 100;
    let max_retry = config.retry.max_retry;
    let run = Run::start(start().await, config).await;
    run.seed(&[site.url("/first")]).await;
    assert_eq!(run.round(1_000).await, Some(vec![Outcome::Snoozed]));
    let first = run.task(&site.url("/first")).await;
    assert_eq!((first.status, first.retries), (Status::Pending, 0));
    assert_eq!(first.errors.len(), 1, "the 429 recorded: {first:?}");

    // WHEN the good pages are seeded and everything is crawled, then the last throttled URL
    run.seed(&good).await;
    run.drain().await;
    run.seed(&[site.url("/last")]).await;
    run.drain().await;

    // THEN the good pages succeeded; each throttled URL was held back while its host had
    // answered nobody (/first: alone, then first in line again), then, singled out by its
    // host's answers, spent its retries and ended ignored, every 429 in its history
    for url in &good {
        assert_eq!(run.task(url).await.status, Status::Succeeded, "{url}");
    }
    for (path, held_back) in [("/first", 2), ("/last", 1)] {
        let throttled = run.task(&site.url(path)).await;
        assert_eq!(
            (throttled.status, throttled.retries),
            (Status::Ignored, max_retry),
            "{throttled:?}"
        );
        assert!(
            throttled
                .errors
                .iter()
                .all(|e| e.kind == ErrorKind::Throttled),
            "{:?}",
            throttled.errors
        );
        assert_eq!(site.hits(path), held_back + u64::from(max_retry), "{path}");
    }
    // AND the host is not given up: its trouble was two URLs'
    let host = run.host(&site).await;
    assert!(host.given_up.is_none(), "{host:?}");
}

#[tokio::test]
async fn a_url_throttled_while_its_host_serves_others_is_ignored_within_its_retries_on_aws() {
    a_url_throttled_while_its_host_serves_others_is_ignored_within_its_retries(on_aws).await;
}

#[tokio::test]
async fn a_url_throttled_while_its_host_serves_others_is_ignored_within_its_retries_embedded() {
    a_url_throttled_while_its_host_serves_others_is_ignored_within_its_retries(on_embedded).await;
}

/// A server that is not HTTP: it greets every connection with an SSH banner and hangs up.
async fn a_host_that_never_answers_with_http_is_given_up_after_three_attempts<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN two URLs of that server, the default error budget and short snoozes
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
        }
    });
    let urls: Vec<String> = (0..2).map(|i| format!("http://{addr}/p{i}")).collect();
    let mut config = CrawlConfig::default();
    config.fetch.guard_exempt = vec![addr.to_string()];
    config.fetch.timeout_ms = 1_500;
    config.fetch.connect_timeout_ms = 500;
    config.politeness.respect_robots = false;
    config.politeness.snooze_base_ms = 100;
    let budget = config.politeness.error_budget;
    let run = Run::start(start().await, config).await;
    run.seed(&urls).await;

    // WHEN everything is crawled
    run.drain().await;
    server.abort();

    // THEN the host was tried three times, not its budget of errors, and given up with the
    // reason; its URLs are ignored, each attempt's error in their history
    let host = run
        .crawler
        .store()
        .get_host(&run.crawl.id, &addr.to_string())
        .await
        .unwrap()
        .unwrap();
    assert!(budget > 3, "the default budget is longer: {budget}");
    assert_eq!((host.fetches, host.signals), (3, 3), "{host:?}");
    let why = host.given_up.as_deref().unwrap_or_default();
    assert!(why.contains("never answered with HTTP"), "{why}");
    let mut attempts = 0;
    for url in &urls {
        let t = run.task(url).await;
        assert_eq!((t.status, t.retries), (Status::Ignored, 0), "{url}");
        assert_eq!(t.errors.last().unwrap().kind, ErrorKind::HostGivenUp);
        attempts += t
            .errors
            .iter()
            .filter(|e| e.kind == ErrorKind::Connection)
            .count();
    }
    assert_eq!(attempts, 3, "every attempt recorded on its URL");
}

#[tokio::test]
async fn a_host_that_never_answers_with_http_is_given_up_after_three_attempts_on_aws() {
    a_host_that_never_answers_with_http_is_given_up_after_three_attempts(on_aws).await;
}

#[tokio::test]
async fn a_host_that_never_answers_with_http_is_given_up_after_three_attempts_embedded() {
    a_host_that_never_answers_with_http_is_given_up_after_three_attempts(on_embedded).await;
}

/// A redirect chain whose target is also linked directly.
async fn a_redirect_target_also_linked_is_fetched_once<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN /old → /older → /page, and /page seeded too
    let site = Site::start().await;
    site.route("/old", Route::redirect(301, "/older"))
        .route("/older", Route::redirect(302, "/page"))
        .route("/page", Route::html("<p>the page</p>"));
    let run = Run::start(start().await, config(&[&site])).await;
    run.seed(&[site.url("/old"), site.url("/page")]).await;

    // WHEN everything is crawled
    let outcomes = run.drain().await;

    // THEN every URL was fetched once: each redirect recorded on its own task, pointing at its
    // target, and the page stored once under its own task
    for path in ["/old", "/older", "/page"] {
        assert_eq!(site.hits(path), 1, "{path}");
    }
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Redirected)
            .count(),
        2,
        "{outcomes:?}"
    );
    for (from, to, status) in [("/old", "/older", 301), ("/older", "/page", 302)] {
        let hop = run.task(&site.url(from)).await;
        let record = hop.fetch.expect("the redirect recorded");
        assert_eq!(
            (hop.status, record.http_status, record.final_url, record.md5),
            (Status::Succeeded, status, Some(site.url(to)), None)
        );
    }
    let page = run.task(&site.url("/page")).await;
    assert_eq!(page.status, Status::Succeeded);
    assert!(page.fetch.unwrap().object_key.is_some());
}

#[tokio::test]
async fn a_redirect_target_also_linked_is_fetched_once_on_aws() {
    a_redirect_target_also_linked_is_fetched_once(on_aws).await;
}

#[tokio::test]
async fn a_redirect_target_also_linked_is_fetched_once_embedded() {
    a_redirect_target_also_linked_is_fetched_once(on_embedded).await;
}

/// Two workers (crawler values) on one App and a virtual clock, and a crawl of five pages of
/// one host paced 10 s apart: a turn of 40 s, longer than the 30 s hold a turn has on its host.
struct Rivals<P: Ports> {
    first: Crawler<P>,
    second: Crawler<P>,
    crawl: Crawl,
    clock: ManualClock,
    site: Site,
}

impl<P: Ports> Rivals<P> {
    async fn start(app: App<P>) -> Self {
        let site = Site::start().await;
        let urls: Vec<String> = (0..5)
            .map(|i| {
                site.route(&format!("/p{i}"), Route::html(format!("<p>{i}</p>")));
                site.url(&format!("/p{i}"))
            })
            .collect();
        let mut config = config(&[&site]);
        config.politeness.delay_ms = 10_000;
        let clock = ManualClock::at(now_ms());
        let app = Arc::new(
            app.with_clock(Arc::new(clock.clone()))
                .with_layout(Layout::new("pages")),
        );
        let worker = || Crawler::new(app.clone(), Arc::new(Fetcher::new("").unwrap()), 4);
        let (first, second) = (worker(), worker());
        let crawl = Crawl::new(CrawlId::parse(&unique("hold")).unwrap(), config, now_ms());
        first.store().create_crawl(&crawl).await.unwrap();
        let run = Self {
            first,
            second,
            crawl,
            clock,
            site,
        };
        let tasks = urls
            .iter()
            .map(|u| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        let now = run.clock.now_ms();
        add_tasks(run.first.store(), run.first.queue(), &run.crawl, tasks, now)
            .await
            .unwrap();
        run
    }

    async fn host(&self) -> Host {
        let name = CanonicalUrl::parse(&self.site.url("/")).unwrap().host_key();
        let host = self.first.store().get_host(&self.crawl.id, &name).await;
        host.unwrap().expect("a host record")
    }

    /// The host's turn message handed to `worker` again (redelivered, or re-issued).
    async fn turn_again(&self, worker: &Crawler<P>) -> trawl_core::crawler::MessageResult {
        let host = self.host().await;
        let message = WorkMessage::new(self.crawl.id.clone(), host.name, host.epoch, 0);
        let received = Received {
            message_id: unique("again"),
            receipt: unique("again"),
            body: serde_json::to_string(&message).unwrap(),
            receives: 2,
        };
        let mut results = worker.process_batch(vec![received], None).await;
        results.remove(0)
    }
}

/// An App on the in-memory store and blobs, and the in-process queue.
async fn on_memory() -> App<impl Ports> {
    let calls = Arc::new(CallCounts::default());
    let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
    App::new(MemoryStore::new(), MemoryBlobStore::new(), queue, calls)
}

async fn a_dead_holders_host_is_taken_over_within_30_s<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN a worker whose turn on the host dies (its future dropped, as a killed process or a
    // timed-out invocation) after its second page, mid-turn
    let run = Rivals::start(start().await).await;
    let batch = run.first.queue().receive(10, 1_000).await.unwrap();
    let mut turn = Box::pin(run.first.process_batch(batch, None));
    let died = loop {
        // Checked between any two steps of the turn, however fast the store.
        tokio::select! {
            biased;
            _ = &mut turn => panic!("the turn ended before it could be killed"),
            _ = tokio::task::yield_now() => {
                if run.site.total_hits() >= 2 {
                    break run.clock.now_ms();
                }
            }
        }
    };
    drop(turn);
    let fetched = run.site.total_hits();

    // WHEN another worker is handed the host's turn
    let early = run.turn_again(&run.second).await;

    // THEN it finds the host held for at most 30 s more, and takes it once that time has passed,
    // fetching the rest
    let Disposition::RetryAfter(wait) = early.disposition else {
        panic!("the dead turn's hold is over at once: {early:?}");
    };
    let held = run.host().await.turn_until.expect("a turn held");
    assert!(held - died <= 30_000, "held {} ms after death", held - died);
    assert!(wait <= 30_000, "{wait} ms");
    run.clock.advance(wait as i64);
    let taken = run.turn_again(&run.second).await;
    assert_eq!(taken.disposition, Disposition::Done, "{taken:?}");
    let succeeded = taken
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Succeeded { .. }))
        .count();
    assert!(succeeded as u64 >= 5 - fetched, "{taken:?}");
    assert_eq!(run.host().await.token, 2);
}

#[tokio::test]
async fn a_dead_holders_host_is_taken_over_within_30_s_in_memory() {
    a_dead_holders_host_is_taken_over_within_30_s(on_memory).await;
}

#[tokio::test]
async fn a_dead_holders_host_is_taken_over_within_30_s_embedded() {
    a_dead_holders_host_is_taken_over_within_30_s(on_embedded).await;
}

#[tokio::test]
async fn a_dead_holders_host_is_taken_over_within_30_s_on_aws() {
    a_dead_holders_host_is_taken_over_within_30_s(on_aws).await;
}

async fn a_live_turn_longer_than_its_hold_keeps_its_host<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN a worker running the host's 40 s turn
    let run = Rivals::start(start().await).await;
    let batch = run.first.queue().receive(10, 1_000).await.unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let turn = async {
        let results = run.first.process_batch(batch, None).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        results
    };

    // WHEN another worker is handed the host's turn again and again meanwhile
    let rival = async {
        let mut refused = 0;
        // From the moment the turn holds the host.
        while run.host().await.turn_until.is_none() {
            tokio::task::yield_now().await;
        }
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            // The hold is live whenever the turn is recorded…
            let now = run.clock.now_ms();
            let host = run.host().await;
            if let (Some(until), 1) = (host.turn_until, host.token) {
                assert!(until > now, "the hold ran out at {until}, seen at {now}");
            }
            // …and the rival gets nothing of the host (once the turn has handed it back, the
            // rival may take it: there is nothing left to fetch then).
            let result = run.turn_again(&run.second).await;
            assert!(
                !result
                    .outcomes
                    .iter()
                    .any(|o| matches!(o, Outcome::Succeeded { .. })),
                "the rival took the host at {}: {result:?}",
                run.clock.now_ms()
            );
            refused += u32::from(matches!(result.disposition, Disposition::RetryAfter(_)));
            // Between any two steps of the turn, however fast the store.
            tokio::task::yield_now().await;
        }
        refused
    };
    let start = run.clock.now_ms();
    let (results, refused) = tokio::join!(turn, rival);

    // THEN the turn kept its host, renewing its hold, and fetched every page itself
    assert!(refused > 0);
    assert!(run.clock.now_ms() - start >= 40_000);
    let succeeded = results[0]
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Succeeded { .. }))
        .count();
    assert_eq!(succeeded, 5, "{results:?}");
    assert_eq!(run.site.total_hits(), 5);
}

#[tokio::test]
async fn a_live_turn_longer_than_its_hold_keeps_its_host_in_memory() {
    a_live_turn_longer_than_its_hold_keeps_its_host(on_memory).await;
}

#[tokio::test]
async fn a_live_turn_longer_than_its_hold_keeps_its_host_embedded() {
    a_live_turn_longer_than_its_hold_keeps_its_host(on_embedded).await;
}

#[tokio::test]
async fn a_live_turn_longer_than_its_hold_keeps_its_host_on_aws() {
    a_live_turn_longer_than_its_hold_keeps_its_host(on_aws).await;
}

/// Two hosts under `max_host_tasks` (the rules' override is a unit test of the domain: both
/// sites here are 127.0.0.1, which a domain rule cannot tell apart).
async fn a_host_holds_at_most_its_task_limit_and_the_rest_is_deferred<P: Ports>(
    start: impl AsyncFnOnce() -> App<P>,
) {
    // GIVEN a crawl limiting each host to 3 URLs; the first host's first page links to four
    // more of its pages
    let (a, b) = (Site::start().await, Site::start().await);
    let links: String = (5..9)
        .map(|i| format!("<a href=\"/{i}\">{i}</a>"))
        .collect();
    a.route("/0", Route::html(links));
    for i in 1..9 {
        a.route(&format!("/{i}"), Route::html("<p>a</p>"));
    }
    for i in 0..9 {
        b.route(&format!("/{i}"), Route::html("<p>b</p>"));
    }
    let mut config = config(&[&a, &b]);
    config.scope.follow_links = true;
    config.politeness.max_host_tasks = Some(3);
    let run = Run::start(start().await, config).await;

    // WHEN 5 URLs of the first host and 7 of the second are seeded
    let mut urls: Vec<String> = (0..5).map(|i| a.url(&format!("/{i}"))).collect();
    urls.extend((0..7).map(|i| b.url(&format!("/{i}"))));
    let report = run.seed(&urls).await;

    // THEN each host takes up to its limit, in the order given, and the rest is deferred
    assert_eq!((report.accepted, report.deferred), (6, 6), "{report:?}");
    let exists = async |url: String| {
        let id = CanonicalUrl::parse(&url).unwrap().task_id();
        run.crawler
            .store()
            .get(&run.crawl.id, &id)
            .await
            .unwrap()
            .is_some()
    };
    for i in 0..9 {
        assert_eq!(exists(a.url(&format!("/{i}"))).await, i < 3, "a/{i}");
        assert_eq!(exists(b.url(&format!("/{i}"))).await, i < 3, "b/{i}");
    }

    // WHEN more are seeded to a full host, and its pages' links are followed
    let again = run.seed(&[a.url("/3"), b.url("/8")]).await;
    run.drain().await;

    // THEN nothing more was added to either: the links to the full host were deferred too
    assert_eq!((again.accepted, again.deferred), (0, 2), "{again:?}");
    for i in 3..9 {
        assert!(!exists(a.url(&format!("/{i}"))).await, "a/{i}");
    }
    assert_eq!(run.host(&a).await.seeded, 3);
    assert_eq!(run.host(&b).await.seeded, 3);
    assert_eq!(a.hits("/0"), 1);
}

#[tokio::test]
async fn a_host_holds_at_most_its_task_limit_and_the_rest_is_deferred_on_aws() {
    a_host_holds_at_most_its_task_limit_and_the_rest_is_deferred(on_aws).await;
}

#[tokio::test]
async fn a_host_holds_at_most_its_task_limit_and_the_rest_is_deferred_embedded() {
    a_host_holds_at_most_its_task_limit_and_the_rest_is_deferred(on_embedded).await;
}
