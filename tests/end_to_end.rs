//! The whole workflow, end to end, on DynamoDB + S3 + a FIFO crawl queue + a delivery queue
//! (moto) and a loopback site of 105 pages: seeded through the seeder from a URL list, a sitemap
//! and a pagination template, with links leading to pages no seed names; crawled by three
//! workers that poll the queue as the Lambda runtime would, one of which dies holding a task;
//! swept until the crawl completes (exactly once); delivered from the completion notice; then,
//! once 5 pages changed and 3 disappeared, recrawled and delivered again with a delta that says
//! exactly that.
//!
//! Single-threaded moto: workers and sweepers run concurrently here, and only a server that
//! serialises requests makes conditional writes and FIFO receives atomic, as AWS does.

use crate::delivering::{gz_lines, read_warc, status_counts, warc_pages};
use crate::site::{Route, Site};
use crate::support::{self, moto, unique};
use futures_util::StreamExt;
use futures_util::future::join_all;
use md5::{Digest, Md5};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use trawl_aws::app::AwsPorts;
use trawl_aws::clients::Clients;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_aws::sqs::SqsQueue;
use trawl_aws::stack::create_stack;
use trawl_core::app::App;
use trawl_core::blob::{BlobStore, Layout};
use trawl_core::clock::{Clock, SkewedClock};
use trawl_core::crawler::{Crawler, Disposition, Outcome};
use trawl_core::deliver::{self, Deliverer, DeliveryReport, DeliveryRequest, ManifestLine};
use trawl_core::fetch::Fetcher;
use trawl_core::queue::{WorkMessage, WorkQueue};
use trawl_core::seed::{PageTemplate, SeedBudget, SeedDefaults, SeedRequest, SeedSource, Seeder};
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskQuery, TaskRecords, TaskStore};
use trawl_core::sweep::{CompletionNotice, SweepBudget, SweepOptions, SweepReport, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{CrawlConfig, CrawlState};
use trawl_domain::task::{Millis, Status, Task, now_ms};

type AwsCrawler = Crawler<AwsPorts>;
type AwsSweeper = Sweeper<AwsPorts>;

/// `/p/{i}`, seeded by a URL list; each links to `/p/{i+1}` and to `/deep/{i}`.
const LISTED: usize = 25;
/// `/s/{i}`, seeded by the sitemap; each links to `/p/{i}`.
const MAPPED: usize = 25;
/// `/list?page={n}` (n from 1), seeded by a pagination template; each links to the next one and
/// to `ITEMS` item pages.
const LIST_PAGES: usize = 5;
/// `/item/{k}`, linked from one list page only.
const ITEMS: usize = 5;
/// Every task the crawl must end with: the seeds plus `/deep/{i}` and `/item/{k}`, which only
/// links lead to.
const TOTAL: usize = LISTED + MAPPED + LIST_PAGES + LIST_PAGES * ITEMS + LISTED;
/// Pages changed and pages removed (404) before the recrawl round.
const CHANGED: [&str; 5] = ["/p/10", "/deep/20", "/s/15", "/item/20", "/list?page=3"];
const REMOVED: [&str; 3] = ["/p/11", "/s/16", "/item/21"];

const WORKERS: usize = 3;
/// Short, so the crashed worker's lease expires within the test.
const LEASE_MS: u64 = 1_500;
const RECRAWL_MS: u64 = 3_600_000;
const PREFIX: &str = "trawl";
/// Bounds: receive rounds per drain, drain-and-sweep rounds per generation, and wall time.
const DRAIN_ROUNDS: usize = 300;
const SWEEP_ROUNDS: usize = 40;
const TIME_LIMIT: Duration = Duration::from_secs(300);

/// Every page of the site: its path (with the query, for list pages) and the paths it links to.
fn site_pages() -> Vec<(String, Vec<String>)> {
    let mut pages = Vec::new();
    for i in 0..LISTED {
        let next = format!("/p/{}", (i + 1) % LISTED);
        pages.push((format!("/p/{i}"), vec![next, format!("/deep/{i}")]));
        pages.push((format!("/deep/{i}"), vec![format!("/p/{i}")]));
    }
    for i in 0..MAPPED {
        pages.push((format!("/s/{i}"), vec![format!("/p/{i}")]));
    }
    for n in 1..=LIST_PAGES {
        let items: Vec<String> = (0..ITEMS)
            .map(|k| format!("/item/{}", (n - 1) * ITEMS + k))
            .collect();
        let mut links = items.clone();
        if n < LIST_PAGES {
            links.push(format!("/list?page={}", n + 1));
        }
        pages.push((format!("/list?page={n}"), links));
        for item in items {
            pages.push((item, vec!["/list?page=1".to_owned()]));
        }
    }
    pages
}

fn page(path: &str, version: u32, links: &[String]) -> Route {
    let anchors: String = links
        .iter()
        .map(|l| format!(r#"<li><a href="{l}">{l}</a></li>"#))
        .collect();
    Route::html(format!(
        "<!doctype html><html><head><title>{path}</title></head><body>\
         <p>{path}, version {version}</p><ul>{anchors}</ul></body></html>"
    ))
}

/// The site: every page at version 1, a sitemap of the `/s/` pages, a robots.txt without
/// Crawl-delay.
async fn start_site() -> Site {
    let site = Site::start().await;
    for (path, links) in site_pages() {
        site.route(&path, page(&path, 1, &links));
    }
    let entries: String = (0..MAPPED)
        .map(|i| format!("<url><loc>{}</loc></url>", site.url(&format!("/s/{i}"))))
        .collect();
    site.route(
        "/sitemap.xml",
        Route::content(
            "application/xml",
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>"#
            ),
        ),
    )
    .route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    site
}

fn canonical(site: &Site, path: &str) -> String {
    CanonicalUrl::parse(&site.url(path)).unwrap().to_string()
}

fn config(site: &Site) -> CrawlConfig {
    let mut config = CrawlConfig {
        lease_ms: LEASE_MS,
        ..CrawlConfig::default()
    };
    config.fetch.guard_exempt = vec![site.addr().to_string()];
    config.fetch.timeout_ms = 5_000;
    // Four FIFO groups: the workers' batches really interleave.
    config.politeness.per_host = 4;
    config.retry.base_delay_ms = 1_000;
    config.recrawl.interval_ms = Some(RECRAWL_MS);
    // A page missing at a check is checked again at once: its two checks in a row fall in the
    // one recrawl round (their spacing is tested in `freshness` and `operator`).
    config.recrawl.missing_recheck_ms = Some(0);
    config
}

/// The stack of this test (`create_stack`: table, bucket, crawl and delivery queues), on
/// single-threaded moto.
struct Stack {
    clients: Clients,
    store: DynamoStore,
    blobs: S3BlobStore,
    queue: SqsQueue,
    /// `s3://{bucket}`: where the manifest says the pages are.
    uri_base: String,
    delivery_url: String,
    calls: Arc<CallCounts>,
    layout: Layout,
}

async fn stack() -> Stack {
    let endpoint = &moto::single_threaded().endpoint;
    let clients = support::clients(endpoint).await;
    let made = create_stack(&clients, &unique("e2e")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb.clone(), &made.table, 4, calls.clone());
    let (bucket, queue_url, delivery_url) = (made.bucket, made.queue_url, made.delivery_queue_url);
    Stack {
        blobs: S3BlobStore::new(clients.s3.clone(), &bucket, calls.clone()),
        queue: SqsQueue::new(clients.sqs.clone(), queue_url, calls.clone()),
        clients,
        store,
        uri_base: format!("s3://{bucket}"),
        delivery_url,
        calls,
        layout: Layout::new(PREFIX),
    }
}

impl Stack {
    /// An App over the stack's ports (sharing their clients and counters).
    fn app(&self) -> App<AwsPorts> {
        App::new(
            self.store.clone(),
            self.blobs.clone(),
            self.queue.clone(),
            self.calls.clone(),
        )
        .with_layout(self.layout.clone())
    }

    /// A worker: a crawler of its own (its own HTTP client and caches), as one Lambda instance,
    /// reading the time from `clock`.
    fn worker(&self, clock: &SkewedClock) -> AwsCrawler {
        let app = self.app().with_clock(Arc::new(clock.clone()));
        Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 4)
    }

    fn deliverer(&self) -> Deliverer<AwsPorts> {
        let limits = deliver::DeliveryLimits::default();
        Deliverer::new(Arc::new(self.app()), self.uri_base.clone(), limits)
    }

    /// Every completion notice on the delivery queue, parsed as the deliverer parses it.
    /// Received messages stay hidden (visibility timeout), so each is read once; delete them
    /// with `delete_notice` once delivered.
    async fn notices(&self) -> Vec<(DeliveryRequest, String)> {
        let mut notices = Vec::new();
        for _ in 0..5 {
            let out = self
                .clients
                .sqs
                .receive_message()
                .queue_url(&self.delivery_url)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap();
            if out.messages().is_empty() {
                break;
            }
            for m in out.messages() {
                let body = m.body().unwrap();
                let notice: CompletionNotice = serde_json::from_str(body).unwrap();
                let request: DeliveryRequest = serde_json::from_str(body).unwrap();
                assert_eq!(
                    (&request.crawl_id, request.generation),
                    (&notice.crawl_id, Some(notice.generation))
                );
                notices.push((request, m.receipt_handle().unwrap().to_owned()));
            }
        }
        notices
    }

    async fn delete_notice(&self, receipt: &str) {
        self.clients
            .sqs
            .delete_message()
            .queue_url(&self.delivery_url)
            .receipt_handle(receipt)
            .send()
            .await
            .unwrap();
    }

    async fn files(&self, report: &DeliveryReport, kind: deliver::FileKind) -> Vec<u8> {
        crate::delivering::files(&self.blobs, report, kind).await
    }

    /// Every task of the crawl, read through the status index, by URL.
    async fn tasks(&self, crawl: &CrawlId) -> BTreeMap<String, Task> {
        let mut ids = Vec::new();
        for status in Status::ALL {
            let mut cursor = None;
            for _ in 0..100 {
                let page = self
                    .store
                    .query(&TaskQuery {
                        crawl_id: crawl.clone(),
                        status,
                        updated_before: None,
                        limit: 100,
                        cursor: cursor.take(),
                        part: trawl_core::store::Part::WHOLE,
                    })
                    .await
                    .unwrap();
                ids.extend(page.tasks.into_iter().map(|t| t.task_id));
                cursor = page.cursor;
                if cursor.is_none() {
                    break;
                }
            }
            assert!(cursor.is_none(), "more {status} tasks than expected");
        }
        let tasks: Vec<Task> = futures_util::stream::iter(ids)
            .map(|id| async move { self.store.get(crawl, &id).await.unwrap().unwrap() })
            .buffer_unordered(8)
            .collect()
            .await;
        let mut by_url = BTreeMap::new();
        for task in tasks {
            let url = task.url.clone();
            assert!(by_url.insert(url.clone(), task).is_none(), "{url} twice");
        }
        by_url
    }
}

/// One worker's turn: receive a batch, process it, and settle each message as the Lambda
/// runtime does (done: deleted; retry: visible again after its delay; rejected: left to come
/// back after the visibility timeout). Returns the outcomes.
async fn work_once(worker: &AwsCrawler) -> Vec<Outcome> {
    let batch = worker.queue().receive(10, 0).await.unwrap();
    if batch.is_empty() {
        return Vec::new();
    }
    let mut handled = Vec::new();
    let mut outcomes = Vec::new();
    for result in worker.process_batch(batch, None).await {
        match result.disposition {
            Disposition::Done => handled.push(result.receipt),
            Disposition::RetryAfter(ms) => worker
                .queue()
                .retry_later(&result.receipt, ms)
                .await
                .unwrap(),
            Disposition::Reject(_) => {}
        }
        outcomes.extend(result.outcomes);
    }
    worker.queue().ack(&handled).await.unwrap();
    outcomes
}

/// Runs every worker at once, round after round, until a round in which none received anything
/// (every round settles all it received, so nothing is in flight then).
async fn drain(workers: &[AwsCrawler], deadline: Instant) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for _ in 0..DRAIN_ROUNDS {
        assert!(Instant::now() < deadline, "out of time while draining");
        let round: Vec<Outcome> = join_all(workers.iter().map(work_once))
            .await
            .into_iter()
            .flatten()
            .collect();
        if round.is_empty() {
            return outcomes;
        }
        outcomes.extend(round);
    }
    panic!("the crawl queue was not drained in {DRAIN_ROUNDS} rounds");
}

fn budget() -> SweepBudget {
    SweepBudget::new(50, Duration::from_secs(30))
}

/// Drains the queue, then sweeps — two sweeps at once, as overlapping scheduled invocations —
/// until one of them completes the crawl. Returns this crawl's sweep reports and the outcomes of
/// every message processed.
async fn crawl_to_completion(
    workers: &[AwsCrawler],
    sweeper: &AwsSweeper,
    clock: &SkewedClock,
    crawl: &CrawlId,
    deadline: Instant,
) -> (Vec<SweepReport>, Vec<Outcome>) {
    let mut reports = Vec::new();
    let mut outcomes = Vec::new();
    for _ in 0..SWEEP_ROUNDS {
        outcomes.extend(drain(workers, deadline).await);
        let now = clock.now_ms();
        let (mut one, mut two) = (budget(), budget());
        let (a, b) = tokio::join!(
            sweeper.sweep_all(now, &mut one),
            sweeper.sweep_all(now, &mut two)
        );
        let mut completed = false;
        for summary in [a.unwrap(), b.unwrap()] {
            assert!(summary.errors.is_empty(), "{:?}", summary.errors);
            for report in summary.crawls {
                assert_eq!(report.crawl_id, crawl.as_str(), "one crawl in this table");
                assert!(report.notice_error.is_none(), "{report:?}");
                completed |= report.completed;
                reports.push(report);
            }
        }
        if completed {
            return (reports, outcomes);
        }
        assert!(
            Instant::now() < deadline,
            "out of time waiting for completion"
        );
        // Nothing to do yet (the dead worker's lease has not expired): the next schedule.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the crawl did not complete in {SWEEP_ROUNDS} drain-and-sweep rounds");
}

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

fn count(outcomes: &[Outcome], wanted: fn(&Outcome) -> bool) -> usize {
    outcomes.iter().filter(|o| wanted(o)).count()
}

/// Checks a delivery against the table and the bucket: one manifest line per task, one WARC
/// response per stored page with the task's md5, the summary's counts, no stray object.
async fn check_delivery(
    stack: &Stack,
    crawl: &CrawlId,
    report: &DeliveryReport,
    tasks: &BTreeMap<String, Task>,
) {
    // Every task is terminal.
    let counts = stack.store.counts(crawl).await.unwrap();
    for status in [Status::Pending, Status::InProgress, Status::Failed] {
        assert_eq!(counts.get(&status).copied().unwrap_or(0), 0, "{counts:?}");
    }
    let total: u64 = counts.values().sum();
    assert_eq!(total, tasks.len() as u64);

    // The manifest: exactly one line per task, as the table has it.
    let manifest: Vec<ManifestLine> =
        gz_lines(&stack.files(report, deliver::FileKind::Manifest).await)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    assert_eq!(manifest.len() as u64, total);
    let lines: BTreeMap<&str, &ManifestLine> =
        manifest.iter().map(|l| (l.url.as_str(), l)).collect();
    assert_eq!(lines.len(), manifest.len(), "a URL on two lines");
    assert!(lines.keys().copied().eq(tasks.keys().map(String::as_str)));
    for (url, task) in tasks {
        let line = lines[url.as_str()];
        let fetch = task.fetch.as_ref().unwrap();
        assert_eq!(line.status, task.status.name(), "{url}");
        assert_eq!(line.md5, fetch.md5, "{url}");
        assert_eq!(line.task_id, task.task_id.to_string());
    }

    // The WARC: every stored page of a succeeded task, once, with the task's md5.
    let pages = warc_pages(&read_warc(
        &stack.files(report, deliver::FileKind::Pages).await,
    ));
    let stored: BTreeMap<&str, &str> = tasks
        .values()
        .filter(|t| t.status == Status::Succeeded)
        .filter_map(|t| {
            let fetch = t.fetch.as_ref()?;
            fetch.object_key.as_ref()?;
            Some((t.url.as_str(), fetch.md5.as_deref()?))
        })
        .collect();
    assert_eq!(stored.len() as u64, counts[&Status::Succeeded]);
    assert!(pages.keys().map(String::as_str).eq(stored.keys().copied()));
    for (url, payload) in &pages {
        assert_eq!(md5_hex(payload), stored[url.as_str()], "{url}");
    }

    // The summary: the table's counts, every page archived.
    let summary = &report.summary;
    assert_eq!(summary.statuses, status_counts(&counts));
    assert_eq!(summary.tasks, total);
    assert_eq!(
        (summary.warc.pages, summary.warc.problems),
        (pages.len() as u64, 0)
    );

    // The bucket holds exactly the objects the tasks point to: no orphan, no dangling pointer.
    let mut objects = stack
        .blobs
        .list(&stack.layout.crawl_prefix(crawl))
        .await
        .unwrap();
    objects.sort();
    let pointed: Vec<&str> = tasks
        .values()
        .filter_map(|t| t.fetch.as_ref()?.object_key.as_deref())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(objects.iter().map(String::as_str).eq(pointed));
}

#[test]
fn a_crawl_runs_from_seed_to_delivery_through_a_crash_and_a_recrawl_with_its_delta() {
    // On a thread of its own with an 8 MiB stack: in a debug build, this test's future, three
    // workers' turns, their link seeding and the SDK's calls nest deeper than the 2 MiB of a
    // test thread (measured: about 1.2 MiB from a batch down to one DynamoDB call, the page's
    // own step 230 KiB of it).
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(seed_crash_complete_deliver_recrawl());
        })
        .unwrap()
        .join()
        .unwrap();
}

async fn seed_crash_complete_deliver_recrawl() {
    let deadline = Instant::now() + TIME_LIMIT;
    let site = start_site().await;
    let stack = stack().await;
    let crawl = CrawlId::parse(&unique("e2e")).unwrap();
    let expected: BTreeSet<String> = site_pages()
        .iter()
        .map(|(path, _)| canonical(&site, path))
        .collect();
    assert_eq!(expected.len(), TOTAL);

    // GIVEN a crawl seeded through the seeder from a URL list, a sitemap and a pagination
    // template (the request that creates the crawl carries its config)
    let manifests = S3Manifests::new(stack.clients.s3.clone(), stack.calls.clone());
    let seeder = Seeder::new(
        Arc::new(stack.app()),
        Arc::new(Fetcher::new("").unwrap()),
        Arc::new(manifests),
        SeedDefaults::default(),
    );
    let sources = [
        SeedSource::Urls((0..LISTED).map(|i| site.url(&format!("/p/{i}"))).collect()),
        SeedSource::Sitemaps(vec![site.url("/sitemap.xml")]),
        SeedSource::Pagination(vec![PageTemplate {
            template: site.url("/list?page={page}"),
            start: Some(1),
            stop: Some(LIST_PAGES as i64 + 1),
            step: None,
            values: None,
            max_pages: None,
            yields: None,
        }]),
    ];
    let mut accepted = Vec::new();
    for (i, source) in sources.into_iter().enumerate() {
        let request = SeedRequest {
            crawl_id: crawl.clone(),
            config: (i == 0).then(|| config(&site)),
            source,
            cursor: None,
            update_config: false,
            checkpoint: None,
            priority: None,
        };
        let response = seeder
            .seed(request, SeedBudget::default(), now_ms())
            .await
            .unwrap();
        assert_eq!(response.created, i == 0);
        assert_eq!(
            (response.rejected, response.enqueue_failed, response.cursor),
            (0, 0, None),
            "{:?}",
            response.rejections
        );
        accepted.push(response.accepted);
    }
    assert_eq!(accepted, [LISTED as u64, MAPPED as u64, LIST_PAGES as u64]);

    // AND a worker that took a batch, claimed its first host's turn and that host's first page
    // and died: the page stays in_progress under a lease that expires, so does the host's turn;
    // its message is lost (deleted, as one that went to the dead-letter queue), the rest of its
    // batch comes back
    let batch = stack.queue.receive(10, 0).await.unwrap();
    let (doomed, others) = batch.split_first().expect("a first batch");
    let message: WorkMessage = serde_json::from_str(&doomed.body).unwrap();
    let stored_crawl = stack.store.get_crawl(&crawl).await.unwrap().unwrap();
    let turn = trawl_core::frontier::update_host(
        &stack.store,
        &stored_crawl,
        &message.host,
        now_ms(),
        |h| match h.claim_turn(now_ms(), LEASE_MS) {
            Ok((next, turn)) => (Some(next), Some(turn)),
            Err(_) => (None, None),
        },
    )
    .await
    .unwrap();
    assert!(matches!(turn, Some((_, Some(_)))), "{turn:?}");
    let first = stack
        .store
        .host_tasks(&crawl, &message.host, 1)
        .await
        .unwrap();
    let crashed = match stack
        .store
        .claim(&crawl, &first[0].task_id, LEASE_MS, now_ms())
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { task, .. } => task,
        other => panic!("the doomed worker's claim failed: {other:?}"),
    };
    stack
        .queue
        .ack(std::slice::from_ref(&doomed.receipt))
        .await
        .unwrap();
    for other in others {
        stack.queue.retry_later(&other.receipt, 0).await.unwrap();
    }
    let crashed_path = CanonicalUrl::parse(&crashed.url).unwrap();
    let crashed_path = crashed_path.as_url().path().to_owned();

    // WHEN three workers drain the queue and the sweeper runs until the crawl completes
    let clock = SkewedClock::default();
    let workers: Vec<AwsCrawler> = (0..WORKERS).map(|_| stack.worker(&clock)).collect();
    let trigger = SqsDeliveryTrigger::new(
        stack.clients.sqs.clone(),
        &stack.delivery_url,
        stack.calls.clone(),
    );
    let sweeper = Sweeper::new(
        Arc::new(stack.app()),
        Arc::new(trigger),
        SweepOptions::new(),
    );
    let (reports, outcomes) =
        crawl_to_completion(&workers, &sweeper, &clock, &crawl, deadline).await;

    // THEN the crashed worker's host was re-issued (its message was consumed by the dead
    // worker), and the crawl completed exactly once
    assert!(
        reports.iter().map(|r| r.lost_messages).sum::<u64>() >= 1,
        "{reports:?}"
    );
    assert_eq!(reports.iter().filter(|r| r.completed).count(), 1);
    let stored = stack.store.get_crawl(&crawl).await.unwrap().unwrap();
    assert_eq!(
        (stored.state, stored.generation),
        (CrawlState::Completed, 0)
    );
    // Every page was fetched and stored once; other messages were duplicates (two sweepers
    // may both re-enqueue the crashed page) and were dropped.
    assert_eq!(
        count(&outcomes, |o| matches!(
            o,
            Outcome::Succeeded { put: true, .. }
        )),
        TOTAL
    );
    assert_eq!(
        count(&outcomes, |o| matches!(o, Outcome::Skipped)),
        outcomes.len() - TOTAL,
        "{outcomes:?}"
    );

    // AND every task succeeded, the link-only pages included
    let tasks = stack.tasks(&crawl).await;
    assert!(tasks.keys().cloned().eq(expected.iter().cloned()));
    assert!(tasks.values().all(|t| t.status == Status::Succeeded));
    // AND the crashed page was recovered: taken over, once its lease expired, by its host's
    // re-issued turn (due work of the host), fetched once, stored once
    let recovered = &tasks[&crashed.url];
    assert_eq!(recovered.status, Status::Succeeded);
    assert_eq!(recovered.token, 2, "{recovered:?}");
    assert_eq!(site.hits(&crashed_path), 1);
    let crashed_objects = stack
        .blobs
        .list(&stack.layout.task_prefix(&crawl, &crashed.task_id))
        .await
        .unwrap();
    assert_eq!(crashed_objects.len(), 1, "{crashed_objects:?}");

    // AND exactly one completion notice went out, and a later sweep sends no other
    let notices = stack.notices().await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let (request, receipt) = &notices[0];
    assert_eq!((&request.crawl_id, request.generation), (&crawl, Some(0)));
    let later = sweeper
        .sweep_all(clock.now_ms(), &mut budget())
        .await
        .unwrap();
    let [again] = later.crawls.as_slice() else {
        panic!("{later:?}");
    };
    assert!(!again.completed && !again.reopened && again.recrawls == 0);
    assert!(stack.notices().await.is_empty());

    // WHEN the deliverer handles the notice
    let first = stack
        .deliverer()
        .deliver(&request.crawl_id, request.generation, now_ms())
        .await
        .unwrap();
    stack.delete_notice(receipt).await;

    // THEN the delivery holds every task and every page, and matches the table
    assert!(!first.already_delivered);
    assert_eq!(first.delivery_id, "gen-000000");
    check_delivery(&stack, &crawl, &first, &tasks).await;
    assert_eq!(first.summary.delta.new, TOTAL as u64);

    // GIVEN 5 pages changed and 3 removed, and the recrawl interval elapsed: the scheduled
    // sweep that runs an interval later (its clock moved on) reopens the crawl
    let pages: BTreeMap<String, Vec<String>> = site_pages().into_iter().collect();
    for path in CHANGED {
        site.route(path, page(path, 2, &pages[path]));
    }
    for path in REMOVED {
        site.route(path, Route::status(404));
    }
    clock.skip(RECRAWL_MS as Millis);
    let recrawl = sweeper
        .sweep_all(clock.now_ms(), &mut budget())
        .await
        .unwrap();
    let [round] = recrawl.crawls.as_slice() else {
        panic!("{recrawl:?}");
    };
    // (the site is one host: its wake-up time reopened the crawl and woke it)
    assert!(round.reopened && !round.unfinished, "{round:?}");
    assert_eq!(round.recrawls, 1);
    let reopened = stack.store.get_crawl(&crawl).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.generation),
        (CrawlState::Running, 1)
    );

    // WHEN the workers recrawl everything and the sweeper completes the round
    let (reports, outcomes) =
        crawl_to_completion(&workers, &sweeper, &clock, &crawl, deadline).await;

    // THEN generation 1 completed once, with one notice; only the changed pages were uploaded
    assert_eq!(reports.iter().filter(|r| r.completed).count(), 1);
    let notices = stack.notices().await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let (request, receipt) = &notices[0];
    assert_eq!((&request.crawl_id, request.generation), (&crawl, Some(1)));
    assert_eq!(
        count(&outcomes, |o| matches!(
            o,
            Outcome::Succeeded { put: true, .. }
        )),
        CHANGED.len(),
        "{reports:?} {outcomes:?}"
    );
    // (a removed page is checked twice: kept at its first 404, gone at its second in a row)
    assert_eq!(
        count(&outcomes, |o| matches!(o, Outcome::Retrying { .. })),
        0
    );
    assert_eq!(
        count(&outcomes, |o| matches!(o, Outcome::GaveUp)),
        2 * REMOVED.len()
    );
    assert_eq!(
        count(&outcomes, |o| matches!(o, Outcome::Unchanged)),
        TOTAL - CHANGED.len() - REMOVED.len()
    );
    assert_eq!(
        count(&outcomes, |o| matches!(o, Outcome::Skipped)),
        outcomes.len() - TOTAL - REMOVED.len(),
        "{outcomes:?}"
    );

    // WHEN it is delivered
    let second = stack
        .deliverer()
        .deliver(&request.crawl_id, request.generation, now_ms())
        .await
        .unwrap();
    stack.delete_notice(receipt).await;

    // THEN the delivery matches the table again, the removed pages gone
    assert_eq!(second.delivery_id, "gen-000001");
    let tasks = stack.tasks(&crawl).await;
    assert!(tasks.keys().cloned().eq(expected.iter().cloned()));
    let gone: BTreeSet<String> = tasks
        .values()
        .filter(|t| t.status == Status::Gone)
        .map(|t| t.url.clone())
        .collect();
    let removed: BTreeSet<String> = REMOVED.iter().map(|p| canonical(&site, p)).collect();
    assert_eq!(gone, removed);
    check_delivery(&stack, &crawl, &second, &tasks).await;

    // AND the delta says exactly what happened to the site
    let mut delta: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in gz_lines(&stack.files(&second, deliver::FileKind::Delta).await) {
        let line: deliver::DeltaLine = serde_json::from_str(&line).unwrap();
        let change = serde_json::to_value(line.change).unwrap();
        let change = change.as_str().unwrap().to_owned();
        assert!(delta.entry(change).or_default().insert(line.url));
    }
    let changed: BTreeSet<String> = CHANGED.iter().map(|p| canonical(&site, p)).collect();
    assert_eq!(delta.get("changed"), Some(&changed));
    assert_eq!(delta.get("gone"), Some(&removed));
    assert_eq!(delta.get("unchanged"), None, "counted, not listed");
    assert_eq!(delta.get("new"), None);
    let summary = &second.summary.delta;
    assert_eq!(summary.previous.as_deref(), Some("gen-000000"));
    assert_eq!(
        (
            summary.new,
            summary.changed,
            summary.gone,
            summary.unchanged
        ),
        (0, 5, 3, (TOTAL - 8) as u64)
    );
}
