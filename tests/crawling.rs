//! The crawler against the loopback site, on DynamoDB + S3 + SQS (moto): task statuses, stored
//! objects, returned messages, politeness, leases, and the calls a URL costs.

use crate::site::{Fixture, Route, Site, fixture};
use crate::support::{AwsStack, aws_stack, moto, unique};
use std::sync::Arc;
use trawl_aws::app::AwsPorts;
use trawl_core::app::{App, Ports};
use trawl_core::blob::{BlobStore, Body, Layout};
use trawl_core::clock::{Clock, SystemClock};
use trawl_core::crawler::{
    Crawler, Disposition, MessageResult, Outcome, PageBody, StoredPage, WithItems, record_page,
};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::WorkQueue;
use trawl_core::store::{ClaimOutcome, CrawlStore, HostStore, TaskRecords, TaskStore};
use trawl_domain::calls::Call;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::host::Host;
use trawl_domain::task::{ErrorKind, FetchRecord, Lease, NewTask, Status, Task, now_ms};

type AwsCrawler = Crawler<AwsPorts>;

/// A crawl of the site: guard on (only the site's own address exempt), robots honoured with
/// its Crawl-delay capped low so tests stay fast, short timeouts.
fn config(site: &Site) -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.fetch.guard_exempt = vec![site.addr().to_string()];
    config.fetch.timeout_ms = 1_500;
    config.scope.allowed_domains = vec!["127.0.0.1".into()];
    config.politeness.max_crawl_delay_ms = 50;
    config.retry.base_delay_ms = 1_000;
    config
}

async fn start(stack: AwsStack, config: CrawlConfig) -> (AwsCrawler, Crawl) {
    let crawl = Crawl::new(CrawlId::parse(&unique("crawl")).unwrap(), config, now_ms());
    stack.store.create_crawl(&crawl).await.unwrap();
    let crawler = Crawler::new(
        Arc::new(
            App::new(stack.store, stack.blobs, stack.queue, stack.calls)
                .with_layout(Layout::new("pages")),
        ),
        Arc::new(Fetcher::new("").unwrap()),
        4,
    );
    (crawler, crawl)
}

async fn seed(crawler: &AwsCrawler, crawl: &Crawl, urls: &[String]) {
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
    let report = add_tasks(crawler.store(), crawler.queue(), crawl, tasks, now_ms())
        .await
        .unwrap();
    assert!(report.enqueue_failed.is_empty());
}

/// Receives and processes until the queue has nothing visible, deleting handled messages as
/// the Lambda runtime would. A message to retry later would come back after its delay, holding
/// its FIFO group (the host slot) meanwhile; tests do not wait for it: it is deleted here and
/// the task's recorded state is what they assert. Bounded in rounds.
async fn drain<P: Ports>(crawler: &Crawler<P>) -> Vec<MessageResult> {
    drain_batches(crawler).await.into_iter().flatten().collect()
}

/// `drain`, batch by batch.
async fn drain_batches<P: Ports>(crawler: &Crawler<P>) -> Vec<Vec<MessageResult>> {
    let mut batches = Vec::new();
    for _ in 0..40 {
        let mut batch = crawler.queue().receive(10, 0).await.unwrap();
        if batch.is_empty() {
            // A host's next turn may be a moment away: its pace (the Crawl-delay, capped at
            // 50 ms here) holds across turns, and SQS delays by whole seconds (rounded up).
            batch = crawler.queue().receive(10, 2_500).await.unwrap();
        }
        if batch.is_empty() {
            break;
        }
        let results = crawler.process_batch(batch, None).await;
        for result in &results {
            if !matches!(result.disposition, Disposition::Reject(_)) {
                crawler
                    .queue()
                    .ack(std::slice::from_ref(&result.receipt))
                    .await
                    .unwrap();
            }
        }
        batches.push(results);
    }
    batches
}

async fn task(crawler: &AwsCrawler, crawl: &Crawl, url: &str) -> Task {
    let id = CanonicalUrl::parse(url).unwrap().task_id();
    crawler
        .store()
        .get(&crawl.id, &id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no task for {url}"))
}

async fn objects(crawler: &AwsCrawler, crawl: &Crawl) -> Vec<String> {
    crawler
        .blobs()
        .list(&Layout::new("pages").crawl_prefix(&crawl.id))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_site_is_crawled_within_scope_with_links_discovered() {
    // GIVEN the fixture site and a crawl seeded with its index
    let Fixture { site, internal } = fixture().await;
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config(&site)).await;
    seed(&crawler, &crawl, &[site.url("/index.html")]).await;

    // WHEN the queue is drained
    drain(&crawler).await;

    // THEN the index and its in-scope links are stored, once each
    for path in [
        "/index.html",
        "/page1.html",
        "/page2.html",
        "/page2.html?b=2&a=1",
    ] {
        let t = task(&crawler, &crawl, &site.url(path)).await;
        assert_eq!(t.status, Status::Succeeded, "{path}: {:?}", t.errors);
        let fetch = t.fetch.unwrap();
        let key = fetch.object_key.unwrap();
        let body = crawler
            .blobs()
            .get(&key)
            .await
            .unwrap()
            .expect("stored body");
        assert_eq!(
            hex::encode(<md5::Md5 as md5::Digest>::digest(&body)),
            fetch.md5.unwrap()
        );
    }
    assert_eq!(
        task(&crawler, &crawl, &site.url("/page1.html")).await.depth,
        1
    );
    assert_eq!(
        site.hits("/page1.html"),
        1,
        "the duplicate link is fetched once"
    );
    // AND robots-disallowed and internal links are recorded, refused, never fetched
    let private = task(&crawler, &crawl, &site.url("/private/page.html")).await;
    assert_eq!(
        (private.status, private.errors[0].kind),
        (Status::Ignored, ErrorKind::RobotsDenied)
    );
    assert_eq!(site.hits("/private/page.html"), 0);
    let secret = task(&crawler, &crawl, &internal.url("/secret")).await;
    assert_eq!(
        (secret.status, secret.errors[0].kind),
        (Status::Ignored, ErrorKind::Blocked)
    );
    assert_eq!(internal.total_hits(), 0);
    // AND off-scope, metadata and nofollow links are not even seeded
    let counts = crawler.store().counts(&crawl.id).await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 6, "{counts:?}");
    assert_eq!(objects(&crawler, &crawl).await.len(), 4);
}

#[tokio::test]
async fn query_order_and_tracking_parameters_make_one_task_fetched_once() {
    // GIVEN a page linking one item under four spellings: parameters reordered, tracking
    // parameters added, empty parameters
    let site = Site::start().await;
    site.route(
        "/list.html",
        Route::html(
            r#"<a href="/item?a=1&amp;b=2">1</a> <a href="/item?b=2&amp;a=1">2</a>
            <a href="/item?utm_source=news&amp;a=1&amp;b=2&amp;gclid=x">3</a>
            <a href="/item?a=1&amp;&amp;b=2&amp;">4</a>"#,
        ),
    )
    .route("/item", Route::html("<p>item</p>"));
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config(&site)).await;

    // WHEN the crawl of the list page is drained
    seed(&crawler, &crawl, &[site.url("/list.html")]).await;
    drain(&crawler).await;

    // THEN the item is one task, fetched once, under its canonical URL
    assert_eq!(site.hits("/item"), 1);
    let counts = crawler.store().counts(&crawl.id).await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 2, "{counts:?}");
    let item = task(&crawler, &crawl, &site.url("/item?b=2&a=1")).await;
    assert_eq!(
        (item.status, item.url.as_str()),
        (Status::Succeeded, site.url("/item?a=1&b=2").as_str())
    );
}

#[tokio::test]
async fn failures_end_in_the_right_status_with_nothing_stored() {
    // GIVEN a crawl open to any host (so the network guard, not the scope, must refuse
    // internal addresses) with bodies capped at 64 KiB
    let Fixture { site, internal } = fixture().await;
    let internal_url = internal.url("/secret");
    let mut config = config(&site);
    config.scope.allowed_domains.clear();
    config.fetch.max_body_bytes = 64 * 1024;
    // Retries far enough out that none comes due again while the host's turn runs.
    config.retry.base_delay_ms = 60_000;
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config).await;
    // (429 and 503 are the host's trouble, not the URL's: `a_throttled_host_is_snoozed_…`.)
    let paths = [
        "/missing",
        "/gone",
        "/error",
        "/big.html",
        "/bomb.html",
        "/stall.html",
        "/loop/a",
        "/to-metadata",
        "/to-internal",
        "/doc.pdf",
    ];
    let urls: Vec<String> = paths.iter().map(|p| site.url(p)).collect();
    seed(&crawler, &crawl, &urls).await;

    // WHEN the queue is drained
    drain(&crawler).await;

    let status = |p: &'static str| {
        let crawler = &crawler;
        let crawl = &crawl;
        let url = site.url(p);
        async move { task(crawler, crawl, &url).await }
    };
    assert_eq!(status("/missing").await.status, Status::Gone);
    assert_eq!(status("/gone").await.status, Status::Gone);
    for p in ["/error", "/stall.html"] {
        let t = status(p).await;
        assert_eq!((t.status, t.retries), (Status::Failed, 1), "{p}");
    }
    assert_eq!(
        status("/stall.html").await.errors[0].kind,
        ErrorKind::Timeout
    );
    assert_eq!(
        status("/bomb.html").await.errors[0].kind,
        ErrorKind::TooLarge
    );
    // A redirect is recorded on its task, and its target becomes a task of its own: a loop
    // ends when it reaches a known task, each hop fetched once; a target the network guard
    // refuses is refused as its own task, never fetched.
    for (from, to) in [("/loop/a", "/loop/b"), ("/loop/b", "/loop/a")] {
        let hop = status(from).await;
        let record = hop.fetch.unwrap();
        assert_eq!(
            (hop.status, record.http_status, record.final_url),
            (Status::Succeeded, 302, Some(site.url(to)))
        );
        assert_eq!(site.hits(from), 1, "{from}");
    }
    for (from, to) in [
        (
            "/to-metadata",
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
        ("/to-internal", internal_url.clone()),
    ] {
        assert_eq!(status(from).await.status, Status::Succeeded, "{from}");
        let target = task(&crawler, &crawl, &to).await;
        assert_eq!(
            (target.status, target.errors[0].kind),
            (Status::Ignored, ErrorKind::Blocked),
            "{to}"
        );
    }
    // A PDF is recorded (status, type, length) but not stored.
    let pdf = status("/doc.pdf").await;
    assert_eq!(pdf.status, Status::Succeeded);
    let record = pdf.fetch.unwrap();
    assert_eq!(
        (record.object_key, record.content_type.as_deref()),
        (None, Some("application/pdf"))
    );
    assert!(
        objects(&crawler, &crawl).await.is_empty(),
        "no object for any failure"
    );
    // The retries are due times: the host's next turn is queued for the first of them, and a
    // lone timeout did not snooze the host.
    let host = host_of(&crawler, &crawl, &site).await;
    let first_retry = [status("/error").await, status("/stall.html").await]
        .iter()
        .filter_map(|t| t.next_attempt_at)
        .min();
    assert_eq!(host.queued_for, first_retry);
    assert_eq!(host.snoozed_until, None);
}

/// The host record of the site.
async fn host_of(crawler: &AwsCrawler, crawl: &Crawl, site: &Site) -> Host {
    let name = CanonicalUrl::parse(&site.url("/")).unwrap().host_key();
    crawler
        .store()
        .get_host(&crawl.id, &name)
        .await
        .unwrap()
        .expect("a host record")
}

#[tokio::test]
async fn a_fresh_url_costs_one_read_one_put_one_finish_and_an_unchanged_recrawl_no_put() {
    // GIVEN a leaf page and an ETag'd page, seeded
    let site = Site::start().await;
    site.route("/leaf.html", Route::html("<p>leaf</p>"))
        .route("/etag.html", Route::html("<p>v</p>").etag("\"v1\""));
    let stack = aws_stack(&moto::shared().endpoint).await;
    let calls = stack.calls.clone();
    let (crawler, crawl) = start(stack, config(&site)).await;
    let urls = [site.url("/leaf.html"), site.url("/etag.html")];
    calls.reset();
    seed(&crawler, &crawl, &urls).await;
    assert_eq!(
        (
            calls.get(Call::DynamoPutItem),
            calls.get(Call::DynamoUpdateItem),
            calls.get(Call::DynamoTransactWriteItems)
        ),
        (2, 1, 1),
        "one write per seeded URL; for their host an offer (refused: no record yet; it keeps \
         its request's id, which makes a retry of it change nothing) and the write creating it, \
         woken, with the host counts (it is created and open)"
    );
    assert_eq!(
        calls.get(Call::DynamoBatchGetItem),
        1,
        "which URLs are known, in one read"
    );
    assert_eq!(
        calls.get(Call::SqsSendMessageBatch),
        1,
        "messages go out in batches"
    );

    // WHEN they are crawled
    calls.reset();
    let batches = drain_batches(&crawler).await.len() as u64;

    // THEN each cost one claim in its host's turn (taken as its host's roster read it: no
    // request of its own, no write), one finish (a conditional update) and one PUT; each batch one more write, adding its calls to the crawl (an update
    // of one of its report lanes, applied once per request, no read); each batch here is one
    // turn of the host, which costs a read and a write of the host record to claim it and the
    // same to hand it back, whatever its number of pages (a host record's write is an update:
    // it leaves the offers beside it as they stand); the last hand-back, which leaves the host
    // idle, is written with the host counts (a transaction)
    assert_eq!(calls.get(Call::DynamoUpdateItem), 1 + 3 * batches);
    assert_eq!(calls.get(Call::S3PutObject), 2);
    assert_eq!(calls.get(Call::DynamoTransactWriteItems), 1);
    assert_eq!(calls.get(Call::DynamoPutItem), 0);
    assert_eq!(
        calls.get(Call::DynamoGetItem),
        2 * batches,
        "the host record twice a turn; each task is claimed as the roster read it"
    );
    assert_eq!(
        calls.get(Call::DynamoBatchGetItem),
        1 + batches,
        "the crawl's config, once per worker (with its report lanes' calls), and each turn's \
         page of its host's roster, its tasks in one consistent read"
    );

    // WHEN both are recrawled (content unchanged: one by md5, one by 304)
    for url in &urls {
        let id = CanonicalUrl::parse(url).unwrap().task_id();
        assert!(
            crawler
                .store()
                .reschedule(&crawl.id, &id, &[Status::Succeeded], now_ms())
                .await
                .unwrap()
        );
    }
    seed_messages(&crawler, &crawl, &urls).await;
    calls.reset();
    let batches = drain_batches(&crawler).await.len() as u64;

    // THEN nothing is uploaded, and both are succeeded again
    assert_eq!(calls.get(Call::S3PutObject), 0);
    assert_eq!(
        calls.get(Call::DynamoUpdateItem) + calls.get(Call::DynamoTransactWriteItems),
        2 + batches + 2 * batches
    );
    for url in &urls {
        assert_eq!(task(&crawler, &crawl, url).await.status, Status::Succeeded);
    }
    assert_eq!(site.hits("/etag.html"), 2);
    assert_eq!(objects(&crawler, &crawl).await.len(), 2);
}

const LOST_NOW: trawl_core::frontier::Reissue = trawl_core::frontier::Reissue::Lost {
    lost_after_ms: 0,
    known_work: true,
};

/// Wakes the hosts of known tasks made due again, their passes rewound (as an operator's
/// rewind does: the tasks are behind their roster cursors).
async fn seed_messages(crawler: &AwsCrawler, crawl: &Crawl, urls: &[String]) {
    let hosts = trawl_core::frontier::hosts_of(urls.iter().map(String::as_str));
    trawl_core::frontier::rewind_hosts(crawler.store(), crawl, &hosts, now_ms())
        .await
        .unwrap();
    let messages =
        trawl_core::frontier::reissue_turns(crawler.store(), crawl, hosts, LOST_NOW, now_ms())
            .await
            .unwrap();
    crawler.queue().send(&messages).await.unwrap();
}

async fn claim_at(crawler: &AwsCrawler, crawl: &Crawl, url: &str, at: i64) -> (Task, Lease) {
    let id = CanonicalUrl::parse(url).unwrap().task_id();
    match crawler
        .store()
        .claim(&crawl.id, &id, crawl.config.lease_ms, at)
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { task, lease } => (*task, lease),
        other => panic!("{other:?}"),
    }
}

async fn write(crawler: &AwsCrawler, task: &Task, lease: &Lease, body: &'static str) -> StoredPage {
    let record = FetchRecord {
        http_status: 200,
        content_type: Some("text/html".into()),
        fetched_at: now_ms(),
        ..FetchRecord::default()
    };
    let url = CanonicalUrl::parse(&task.url).unwrap();
    let layout = Layout::new("pages");
    record_page(
        crawler.store(),
        crawler.blobs(),
        &layout,
        task,
        lease,
        &url,
        record,
        Some(PageBody {
            body: Body::new(body),
            compress: false,
            layout: trawl_domain::crawl::StorageLayout::Objects,
            items: None,
        }),
        WithItems(false),
        &SystemClock,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_zombie_writer_disturbs_nothing_and_leaves_no_orphan() {
    let site = Site::start().await;
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config(&site)).await;
    let url = site.url("/z");
    seed(&crawler, &crawl, std::slice::from_ref(&url)).await;
    let lease_ms = crawl.config.lease_ms as i64;

    // GIVEN a worker whose lease expired, and a second worker that took the task over
    let (zombie_task, zombie) = claim_at(&crawler, &crawl, &url, now_ms() - lease_ms - 1_000).await;
    let (fresh_task, fresh) = claim_at(&crawler, &crawl, &url, now_ms()).await;

    // WHEN the zombie writes while the new holder is still working (concurrent writers)
    assert_eq!(
        write(&crawler, &zombie_task, &zombie, "zombie body").await,
        StoredPage::LostLease
    );
    // THEN its object is left for the holder, who deletes it when it finishes
    assert_eq!(objects(&crawler, &crawl).await.len(), 1);
    assert_eq!(
        write(&crawler, &fresh_task, &fresh, "fresh body").await,
        StoredPage::Finished { put: true }
    );
    let keys = objects(&crawler, &crawl).await;
    let current = task(&crawler, &crawl, &url).await.fetch.unwrap();
    assert_eq!(keys, [current.object_key.clone().unwrap()]);

    // WHEN a zombie writes after the task is finished
    assert_eq!(
        write(&crawler, &zombie_task, &zombie, "late body").await,
        StoredPage::LostLease
    );
    // THEN the newer result stands and the late object is gone
    assert_eq!(objects(&crawler, &crawl).await, keys);
    let body = crawler
        .blobs()
        .get(keys[0].as_str())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&body[..], b"fresh body");
    assert_eq!(task(&crawler, &crawl, &url).await.fetch.unwrap(), current);
}

#[tokio::test]
async fn two_writers_of_the_same_content_keep_their_shared_object() {
    let site = Site::start().await;
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config(&site)).await;
    let url = site.url("/same");
    seed(&crawler, &crawl, std::slice::from_ref(&url)).await;
    let lease_ms = crawl.config.lease_ms as i64;
    let (zombie_task, zombie) = claim_at(&crawler, &crawl, &url, now_ms() - lease_ms - 1_000).await;
    let (fresh_task, fresh) = claim_at(&crawler, &crawl, &url, now_ms()).await;

    // WHEN both write the same body, the zombie first
    write(&crawler, &zombie_task, &zombie, "same").await;
    write(&crawler, &fresh_task, &fresh, "same").await;

    // THEN the pointer names an object that exists
    let key = task(&crawler, &crawl, &url)
        .await
        .fetch
        .unwrap()
        .object_key
        .unwrap();
    assert_eq!(objects(&crawler, &crawl).await, std::slice::from_ref(&key));
    assert!(crawler.blobs().get(&key).await.unwrap().is_some());
}

#[tokio::test]
async fn a_crashed_workers_task_is_recovered_through_its_expired_lease_and_stored_once() {
    // GIVEN a worker that claimed a page and died (its lease has expired)
    let site = Site::start().await;
    site.route("/crash.html", Route::html("<p>survivor</p>"));
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config(&site)).await;
    let url = site.url("/crash.html");
    seed(&crawler, &crawl, std::slice::from_ref(&url)).await;
    claim_at(
        &crawler,
        &crawl,
        &url,
        now_ms() - crawl.config.lease_ms as i64 - 1,
    )
    .await;

    // WHEN the host's turn is processed
    drain(&crawler).await;

    // THEN the task is recovered and stored exactly once: claimed by the dead worker, then taken
    // over by the turn (an expired lease is due work of its host)
    let t = task(&crawler, &crawl, &url).await;
    assert_eq!((t.status, t.token), (Status::Succeeded, 2));
    assert_eq!(site.hits("/crash.html"), 1);
    assert_eq!(objects(&crawler, &crawl).await.len(), 1);
}

#[tokio::test]
async fn the_page_budget_caps_discovery() {
    let Fixture { site, .. } = fixture().await;
    let mut config = config(&site);
    config.scope.max_pages = Some(3);
    let (crawler, crawl) = start(aws_stack(&moto::shared().endpoint).await, config).await;
    seed(&crawler, &crawl, &[site.url("/index.html")]).await;
    drain(&crawler).await;
    let counts = crawler.store().counts(&crawl.id).await.unwrap();
    assert_eq!(counts.values().sum::<u64>(), 3, "{counts:?}");
}

#[tokio::test]
async fn a_link_found_on_many_pages_is_seeded_once_per_worker() {
    // GIVEN four pages that all link to each other
    let site = Site::start().await;
    let all: String = (0..4)
        .map(|i| format!(r#"<a href="/m{i}.html">{i}</a>"#))
        .collect();
    for i in 0..4 {
        site.route(&format!("/m{i}.html"), Route::html(all.clone()));
    }
    let stack = aws_stack(&moto::shared().endpoint).await;
    let calls = stack.calls.clone();
    let (crawler, crawl) = start(stack, config(&site)).await;
    seed(&crawler, &crawl, &[site.url("/m0.html")]).await;
    calls.reset();

    // WHEN one worker crawls them
    drain(&crawler).await;

    // THEN each link was offered once in all (not once per page it appears on): the host
    // counts every URL offered to it, known ones too, and each offer is one conditional put
    let host = host_of(&crawler, &crawl, &site).await;
    assert_eq!(host.seeded, 4, "the seed, then each link once");
    let counts = crawler.store().counts(&crawl.id).await.unwrap();
    assert_eq!(counts.get(&Status::Succeeded).copied(), Some(4));
}

#[tokio::test]
async fn the_hosts_view_reads_host_records_only() {
    // GIVEN 30 URLs over three hosts, seeded
    let sites = [
        Site::start().await,
        Site::start().await,
        Site::start().await,
    ];
    let stack = aws_stack(&moto::shared().endpoint).await;
    let calls = stack.calls.clone();
    let (crawler, crawl) = start(stack, config(&sites[0])).await;
    let urls: Vec<String> = (0..30)
        .map(|i| sites[i % 3].url(&format!("/p{i}")))
        .collect();
    seed(&crawler, &crawl, &urls).await;
    calls.reset();

    // WHEN the crawl's hosts are listed (what `trawl hosts` reads)
    let page = crawler
        .store()
        .list_hosts(&crawl.id, None, 100)
        .await
        .unwrap();

    // THEN the three host records come back, each with the ten URLs offered to it, read with one
    // query of the index per key of the host list (its shards, and the key of records older
    // than them) and one BatchGetItem of the host records: no task is read
    assert_eq!(page.hosts.len(), 3);
    assert!(
        page.hosts.iter().all(|h| h.seeded == 10),
        "{:?}",
        page.hosts
    );
    let mut read = calls.snapshot();
    read.sort_by_key(|(call, _)| call.name());
    let keys = u64::from(trawl_domain::host::HOST_SHARDS) + 1;
    let mut expected = vec![(Call::DynamoBatchGetItem, 1), (Call::DynamoQuery, keys)];
    expected.sort_by_key(|(call, _)| call.name());
    assert_eq!(read, expected);
}

/// A crawl of the loopback site, unpaced.
fn loopback_config() -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.fetch.allow_private_networks = true;
    config.scope.allowed_domains = vec!["127.0.0.1".into()];
    config.politeness.delay_ms = 0;
    config
}

/// Port faults answering a share `errors` of the calls with a retryable error, never crashing.
fn port_faults(seed: u64, errors: f64) -> Arc<trawl_faults::ports::PortFaults> {
    let mix = trawl_faults::ports::PortMix {
        errors,
        latency: 0.0,
        crash: 0.0,
    };
    Arc::new(trawl_faults::ports::PortFaults::new(
        seed,
        mix,
        trawl_faults::ports::CrashMode::Halt,
    ))
}

#[tokio::test]
async fn transient_storage_errors_never_cost_a_page_a_second_fetch() {
    // GIVEN a 40-page site, and the embedded backend (SQLite + files) answering 5% of its calls
    // with a retryable error, never crashing
    let pages = 40;
    let site = crate::cli::linked_site(pages).await;
    let dir = crate::cli::temp_dir("transient");
    let crawl = CrawlId::parse("transient").unwrap();
    let mut config = loopback_config();
    config.politeness.per_host = 4;
    // A short lease: a turn or task a failed write left behind is taken over soon.
    config.lease_ms = 2_000;
    let faults = port_faults(18, 0.05);

    // WHEN it is crawled to its delivery
    let (report, _) = trawl_faults::local::crawl_to_delivery(
        &dir,
        &crawl,
        &site.url("/p/0.html"),
        config,
        faults.clone(),
        2,
    )
    .await
    .unwrap();

    // THEN every page was fetched exactly once: each error on the way (seeding the page's
    // links, storing its body, finishing its task) was waited out, not paid with a refetch
    let errors = faults.counts().of(trawl_faults::ports::PortFault::Error);
    assert!(errors >= 10, "{errors} errors injected");
    assert_eq!(report.summary.tasks, pages as u64);
    let fetched: Vec<u64> = (0..pages)
        .map(|i| site.hits(&format!("/p/{i}.html")))
        .collect();
    let twice = fetched.iter().filter(|&&n| n > 1).count();
    assert_eq!(twice, 0, "{twice} pages fetched more than once");
    assert!(fetched.iter().all(|&n| n == 1), "{fetched:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_host_whose_due_tasks_cannot_be_read_for_a_moment_is_handed_back_not_left_held() {
    // GIVEN a 10-page site on one host, and the embedded backend whose next four reads of a
    // host's due tasks answer a retryable error: the first turn's first read, then the read
    // that decides when the host's next turn is due, and two of its retries
    let pages = 10;
    let site = crate::cli::linked_site(pages).await;
    let dir = crate::cli::temp_dir("due-read");
    let crawl = CrawlId::parse("due-read").unwrap();
    let config = loopback_config();
    let faults = port_faults(19, 0.0);
    faults.fail_next("due_tasks", 4);

    // WHEN it is crawled to its delivery
    let started = std::time::Instant::now();
    let (report, _) = trawl_faults::local::crawl_to_delivery(
        &dir,
        &crawl,
        &site.url("/p/0.html"),
        config,
        faults.clone(),
        2,
    )
    .await
    .unwrap();

    // THEN every page is delivered well within a turn's hold: the host was handed back after
    // its turn, not left held (its message coming back to a busy host) until the hold ran out
    let took = started.elapsed();
    let refused = faults.counts().of(trawl_faults::ports::PortFault::Error);
    assert_eq!(refused, 4, "due-task reads refused");
    assert_eq!(
        report.summary.statuses.get("succeeded"),
        Some(&(pages as u64))
    );
    let hold = std::time::Duration::from_millis(trawl_domain::turn::TURN_HOLD_MS);
    assert!(took < hold / 2, "delivered after {took:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The crawler's steps wait out a store outage on the App's clock: on virtual time, seconds of
/// backoff take no real time (a test of an outage runs in milliseconds).
#[tokio::test]
async fn a_finish_refused_for_seconds_is_waited_out_on_the_clock_given_not_in_real_time() {
    // GIVEN a claimed task on a store whose next 8 finishes answer a retryable error (the
    // brief backoff's pauses add up to 4.5–9 s before the ninth try), and a virtual clock
    let faults = port_faults(23, 0.0);
    faults.fail_next("finish", 8);
    let store = trawl_faults::ports::FaultyStore::new(
        trawl_core::store::memory::MemoryStore::new(),
        faults.clone(),
    );
    let blobs = trawl_core::blob::memory::MemoryBlobStore::new();
    let crawl = Crawl::new(CrawlId::parse("outage").unwrap(), CrawlConfig::default(), 0);
    store.create_crawl(&crawl).await.unwrap();
    let url = CanonicalUrl::parse("http://example.com/a").unwrap();
    let new = NewTask {
        lane: None,
        priority: Default::default(),
        url: url.clone(),
        depth: 0,
        parent: None,
        data: None,
    };
    store.seed(&crawl.id, &[new], 0).await.unwrap();
    let ClaimOutcome::Claimed { task, lease } = store
        .claim(&crawl.id, &url.task_id(), 60_000, 0)
        .await
        .unwrap()
    else {
        panic!("not claimed");
    };
    let clock = trawl_core::clock::ManualClock::at(0);

    // WHEN its page is recorded
    let real = std::time::Instant::now();
    let record = FetchRecord {
        http_status: 200,
        ..FetchRecord::default()
    };
    let body = PageBody {
        body: Body::new("<p>page</p>"),
        compress: false,
        layout: trawl_domain::crawl::StorageLayout::Objects,
        items: None,
    };
    let stored = record_page(
        &store,
        &blobs,
        &Layout::default(),
        &task,
        &lease,
        &url,
        record,
        Some(body),
        WithItems(false),
        &clock,
    )
    .await
    .unwrap();

    // THEN the page is finished after seconds of the clock's time, and in no real second
    assert_eq!(stored, StoredPage::Finished { put: true });
    let refused = faults.counts().of(trawl_faults::ports::PortFault::Error);
    assert_eq!(refused, 8, "finishes refused");
    let waited = clock.now_ms();
    assert!((4_500..=9_100).contains(&waited), "waited {waited} ms");
    assert!(
        real.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        real.elapsed()
    );
    let stored = store.get(&crawl.id, &url.task_id()).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Succeeded);
}

/// A turn handed back (`RetryAfter`) after its message was deleted or redelivered: the receipt
/// the worker holds is stale. (Seen: a `trawl --backend aws crawl` exiting 1 on
/// `ChangeMessageVisibility: ReceiptHandleIsInvalid`.)
#[tokio::test]
async fn a_stale_receipt_handed_back_is_the_redelivery_a_fenced_lease_covers_not_an_error() {
    // GIVEN a turn received, then its message deleted (as by a worker whose copy it was)
    let stack = aws_stack(&moto::shared().endpoint).await;
    let message = trawl_core::queue::WorkMessage::new(
        CrawlId::parse("stale-receipt").unwrap(),
        "example.com".to_owned(),
        1,
        0,
    );
    stack.queue.send(&[message]).await.unwrap();
    let received = stack.queue.receive(1, 1_000).await.unwrap();
    let receipt = received[0].receipt.clone();
    stack
        .queue
        .ack(std::slice::from_ref(&receipt))
        .await
        .unwrap();

    // WHEN the turn is handed back on that receipt, and on a receipt SQS never issued
    let stale = stack.queue.retry_later(&receipt, 5_000).await;
    let forged = stack.queue.retry_later("not-a-receipt", 5_000).await;

    // THEN neither ends the caller's run: the message's copy (if any) comes back on its own
    assert!(stale.is_ok(), "{stale:?}");
    assert!(forged.is_ok(), "{forged:?}");
}

/// The segment layout, a host's pages fetched 4 at once with no pause between them.
fn segments_config(site: &Site) -> CrawlConfig {
    let mut config = config(site);
    config.storage.layout = trawl_domain::crawl::StorageLayout::Segments;
    config.politeness.per_host = 4;
    config.politeness.delay_ms = 0;
    config
}

/// `n` pages of the site, each its own text; their URLs.
fn leaves(site: &Site, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let path = format!("/leaf/{i}.html");
            site.route(&path, Route::html(format!("<p>leaf {i}</p>")));
            site.url(&path)
        })
        .collect()
}

/// Asserts that each of `urls` is succeeded and that its span reads back as its page, whose md5
/// is its record's. Returns the segments they are in.
async fn assert_spans_read_back<P: Ports>(
    crawler: &Crawler<P>,
    crawl: &Crawl,
    urls: &[String],
) -> std::collections::BTreeSet<String> {
    let mut segments = std::collections::BTreeSet::new();
    for url in urls {
        let id = CanonicalUrl::parse(url).unwrap().task_id();
        let task = crawler.store().get(&crawl.id, &id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Succeeded, "{url}");
        let fetch = task.fetch.unwrap();
        assert!(fetch.span.is_some(), "{url}: {fetch:?}");
        let page = trawl_core::blob::segment::read_page(crawler.blobs(), &fetch)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{url}: its span names missing bytes"));
        assert_eq!(
            Some(Body::new(page.body.clone()).md5_hex()),
            fetch.md5,
            "{url}"
        );
        let leaf = url.rsplit_once('/').unwrap().1.trim_end_matches(".html");
        assert!(
            String::from_utf8_lossy(&page.body).contains(&format!("leaf {leaf}<")),
            "{url}"
        );
        segments.insert(fetch.object_key.unwrap());
    }
    segments
}

/// The segments of the crawl in the bucket.
async fn segment_objects<P: Ports>(crawler: &Crawler<P>, crawl: &Crawl) -> Vec<String> {
    let prefix = Layout::new("pages").segments_prefix(&crawl.id);
    crawler.blobs().list(&prefix).await.unwrap()
}

/// A crawler over `stack`'s store and queue, its object store behind `faults`, its clock `clock`.
fn crawler_over(
    stack: &AwsStack,
    blobs: trawl_faults::ports::FaultyBlobs<trawl_aws::s3::S3BlobStore>,
    clock: trawl_core::clock::SkewedClock,
) -> Crawler<(
    trawl_aws::dynamodb::DynamoStore,
    trawl_faults::ports::FaultyBlobs<trawl_aws::s3::S3BlobStore>,
    trawl_aws::sqs::SqsQueue,
)> {
    let app = App::new(
        stack.store.clone(),
        blobs,
        stack.queue.clone(),
        stack.calls.clone(),
    )
    .with_layout(Layout::new("pages"))
    .with_clock(Arc::new(clock));
    Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 4)
}

/// Object-store calls behind faults of `mix`; a crash never returns (`CrashMode::Halt`).
fn faulty(
    stack: &AwsStack,
    mix: trawl_faults::ports::PortMix,
) -> (
    trawl_faults::ports::FaultyBlobs<trawl_aws::s3::S3BlobStore>,
    Arc<trawl_faults::ports::PortFaults>,
) {
    let faults = Arc::new(trawl_faults::ports::PortFaults::new(
        1,
        mix,
        trawl_faults::ports::CrashMode::Halt,
    ));
    let blobs = trawl_faults::ports::FaultyBlobs {
        inner: stack.blobs.clone(),
        faults: faults.clone(),
    };
    (blobs, faults)
}

#[tokio::test]
async fn a_turn_on_segments_stores_its_pages_in_one_put_and_finishes_them_after_it() {
    // GIVEN 12 pages of one host, seeded, on the segment layout
    let site = Site::start().await;
    let urls = leaves(&site, 12);
    let stack = aws_stack(&moto::shared().endpoint).await;
    let calls = stack.calls.clone();
    let (crawler, crawl) = start(stack, segments_config(&site)).await;
    seed(&crawler, &crawl, &urls).await;
    calls.reset();

    // WHEN the host's turn runs
    let results = drain(&crawler).await;

    // THEN its pages' bodies went up in one PUT, and every page was stored by it
    assert_eq!(calls.get(Call::S3PutObject), 1);
    let stored = results
        .iter()
        .flat_map(|r| &r.outcomes)
        .filter(|o| matches!(o, Outcome::Succeeded { put: true, .. }))
        .count();
    assert_eq!(stored, urls.len());
    // AND each finished task's span reads back as its page (md5 checked), all in that segment
    let segments = assert_spans_read_back(&crawler, &crawl, &urls).await;
    assert_eq!(segments.len(), 1);
    assert_eq!(segment_objects(&crawler, &crawl).await.len(), 1);
}

#[tokio::test]
async fn a_turn_dying_after_its_segment_put_finishes_no_page_and_its_pages_are_fetched_again() {
    // GIVEN 8 pages of one host on the segment layout, and a worker that dies (its calls never
    // return) as soon as its turn's segment PUT is acknowledged, before any finish
    let site = Site::start().await;
    let urls = leaves(&site, 8);
    let stack = aws_stack(&moto::shared().endpoint).await;
    let (blobs, faults) = faulty(
        &stack,
        trawl_faults::ports::PortMix {
            crash: 1.0,
            ..Default::default()
        },
    );
    let dying = crawler_over(&stack, blobs, Default::default());
    let clock = trawl_core::clock::SkewedClock::default();
    let (plain, _) = faulty(&stack, Default::default());
    let later = crawler_over(&stack, plain, clock.clone());
    let (crawler, crawl) = start(stack, segments_config(&site)).await;
    seed(&crawler, &crawl, &urls).await;

    // WHEN its turn runs until it dies
    tokio::select! {
        _ = drain(&dying) => panic!("the worker was to die at its segment's PUT"),
        () = faults.crashed() => {}
    }
    drop(dying);

    // THEN the segment is in the bucket, but no task was finished: none points at anything
    let garbage = segment_objects(&crawler, &crawl).await;
    assert_eq!(garbage.len(), 1);
    for url in &urls {
        let t = task(&crawler, &crawl, url).await;
        assert_eq!((t.status, t.fetch), (Status::Pending, None), "{url}");
        assert_eq!(site.hits(url.strip_prefix(&site.url("")).unwrap()), 1);
    }

    // WHEN another worker takes the host once the dead turn's hold has run out
    clock.skip(2 * trawl_domain::turn::TURN_HOLD_MS as i64);
    let hosts = trawl_core::frontier::hosts_of(urls.iter().map(String::as_str));
    let messages =
        trawl_core::frontier::reissue_turns(later.store(), &crawl, hosts, LOST_NOW, clock.now_ms())
            .await
            .unwrap();
    later.queue().send(&messages).await.unwrap();
    drain(&later).await;

    // THEN every page was fetched again and stored in a segment of its own; each span reads
    // back, and the dead turn's segment is garbage nothing points at
    for url in &urls {
        assert_eq!(site.hits(url.strip_prefix(&site.url("")).unwrap()), 2);
    }
    let live = assert_spans_read_back(&later, &crawl, &urls).await;
    assert_eq!(live.len(), 1);
    assert!(!live.contains(&garbage[0]));
    assert_eq!(segment_objects(&crawler, &crawl).await.len(), 2);
}

#[tokio::test]
async fn a_failed_segment_put_finishes_no_page_and_the_next_turn_fetches_them_again() {
    // GIVEN 6 pages of one host on the segment layout, and a worker whose object-store calls
    // all fail (its retries spent)
    let site = Site::start().await;
    let urls = leaves(&site, 6);
    let stack = aws_stack(&moto::shared().endpoint).await;
    let (blobs, faults) = faulty(
        &stack,
        trawl_faults::ports::PortMix {
            errors: 1.0,
            ..Default::default()
        },
    );
    let failing = crawler_over(&stack, blobs, Default::default());
    let (crawler, crawl) = start(stack, segments_config(&site)).await;
    seed(&crawler, &crawl, &urls).await;

    // WHEN its turn runs
    let batch = failing.queue().receive(10, 0).await.unwrap();
    let results = failing.process_batch(batch, None).await;
    for result in &results {
        failing
            .queue()
            .ack(std::slice::from_ref(&result.receipt))
            .await
            .unwrap();
    }

    // THEN each page was fetched, its append failed, and none was finished
    let ended: Vec<Outcome> = results.iter().flat_map(|r| r.outcomes.clone()).collect();
    assert_eq!(ended, vec![Outcome::Error; urls.len()]);
    assert!(faults.counts().of(trawl_faults::ports::PortFault::Error) >= 2);
    assert!(segment_objects(&crawler, &crawl).await.is_empty());
    for url in &urls {
        let t = task(&crawler, &crawl, url).await;
        assert_eq!((t.status, t.fetch), (Status::Pending, None), "{url}");
    }

    // WHEN a healthy worker takes the host's next turn
    seed_messages(&crawler, &crawl, &urls).await;
    drain(&crawler).await;

    // THEN the pages were fetched again and stored, each span reading back
    for url in &urls {
        assert_eq!(site.hits(url.strip_prefix(&site.url("")).unwrap()), 2);
    }
    assert_eq!(
        assert_spans_read_back(&crawler, &crawl, &urls).await.len(),
        1
    );
}

#[tokio::test]
async fn a_segment_page_finished_by_another_worker_before_the_seal_keeps_that_workers_record() {
    // GIVEN two pages of one host on the segment layout, fetched at once, one of them slow: the
    // turn's segment waits for it
    let site = Site::start().await;
    site.route("/leaf/0.html", Route::html("<p>leaf 0</p>"))
        .route(
            "/slow.html",
            Route::html("<p>slow</p>").delayed(std::time::Duration::from_millis(800)),
        );
    let (fast, slow) = (site.url("/leaf/0.html"), site.url("/slow.html"));
    let stack = aws_stack(&moto::shared().endpoint).await;
    let calls = stack.calls.clone();
    let (crawler, crawl) = start(stack, segments_config(&site)).await;
    seed(&crawler, &crawl, &[fast.clone(), slow.clone()]).await;
    calls.reset();

    // WHEN, while the slow page is fetched, another worker takes over the fast one (fetched
    // and waiting in the turn's segment) and finishes it with its own body
    let rival = async {
        while site.hits("/leaf/0.html") == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let (task, lease) = claim_at(&crawler, &crawl, &fast, now_ms()).await;
        write(&crawler, &task, &lease, "<p>rival</p>").await
    };
    let (results, rival) = tokio::join!(drain(&crawler), rival);

    // THEN the rival's record stands: the turn's finish of that page was refused by its lease
    assert_eq!(rival, StoredPage::Finished { put: true });
    let outcomes: Vec<Outcome> = results.iter().flat_map(|r| r.outcomes.clone()).collect();
    assert!(outcomes.contains(&Outcome::Skipped), "{outcomes:?}");
    let taken = task(&crawler, &crawl, &fast).await.fetch.unwrap();
    assert_eq!(taken.span, None);
    let rival_body = crawler
        .blobs()
        .get(taken.object_key.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(rival_body.as_deref(), Some(&b"<p>rival</p>"[..]));
    // AND the slow page went up in the turn's one PUT (beside the rival's object), its span
    // reading back; the fast page's bytes there are garbage
    assert_eq!(calls.get(Call::S3PutObject), 2);
    let slow_fetch = task(&crawler, &crawl, &slow).await.fetch.unwrap();
    let page = trawl_core::blob::segment::read_page(crawler.blobs(), &slow_fetch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(Body::new(page.body).md5_hex()), slow_fetch.md5);
    let segments = segment_objects(&crawler, &crawl).await;
    assert_eq!(segments, [slow_fetch.object_key.clone().unwrap()]);
    let segment = crawler.blobs().get(&segments[0]).await.unwrap().unwrap();
    assert!(segment.len() as u64 > slow_fetch.span.unwrap().length);
}
