//! The seeder end to end: URL lists, S3 manifests, sitemaps (from the loopback site) and
//! pagination templates, on DynamoDB + SQS (moto) and on the embedded backend; idempotent
//! re-seeds, malformed requests that change nothing, and continuation cursors.

use crate::site::{Route, Site};
use crate::support::{self, moto, unique};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::sqs::SqsQueue;
use trawl_core::app::{App, Ports, Unwired};
use trawl_core::fetch::Fetcher;
use trawl_core::queue::local::LocalQueue;
use trawl_core::seed::{SeedBudget, SeedDefaults, SeedError, SeedRequest, SeedResponse, Seeder};
use trawl_core::store::ClaimOutcome;
use trawl_core::store::{CrawlStore, HostStore, TaskRecords, TaskStore};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::CrawlState;
use trawl_domain::task::{FetchRecord, Status};
use trawl_embedded::sqlite::SqliteStore;

const NOW: i64 = 1_700_000_000_000;

fn urlset(urls: &[String]) -> String {
    let entries: String = urls
        .iter()
        .map(|u| {
            format!(
                "<url><loc>{u}</loc><lastmod>2024-03-0{}</lastmod></url>",
                u.len() % 9 + 1
            )
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>"#
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// A site with a sitemap index of two sitemaps (one gzip-compressed file), three pages each,
/// plus a broken child (404) and a nested index.
async fn sitemap_site() -> Site {
    let site = Site::start().await;
    let a: Vec<String> = (1..=3).map(|i| site.url(&format!("/a/{i}"))).collect();
    let b: Vec<String> = (1..=3).map(|i| site.url(&format!("/b/{i}"))).collect();
    let index = format!(
        r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
        <sitemap><loc>{}</loc></sitemap><sitemap><loc>{}</loc></sitemap>
        <sitemap><loc>{}</loc></sitemap><sitemap><loc>{}</loc></sitemap></sitemapindex>"#,
        site.url("/sitemap-a.xml"),
        site.url("/sitemap-b.xml.gz"),
        site.url("/missing.xml"),
        site.url("/nested.xml"),
    );
    site.route(
        "/sitemap.xml",
        Route::content("application/xml", index.clone()),
    )
    .route("/sitemap-a.xml", Route::content("text/xml", urlset(&a)))
    .route(
        "/sitemap-b.xml.gz",
        Route::content("application/gzip", gzip(urlset(&b).as_bytes())),
    )
    .route("/nested.xml", Route::content("application/xml", index));
    site
}

/// The crawl configuration every test uses: the loopback site must be reachable.
fn config() -> serde_json::Value {
    json!({"fetch": {"allow_private_networks": true}})
}

fn request(crawl: &str, source: serde_json::Value) -> SeedRequest {
    SeedRequest::from_json(json!({"crawl_id": crawl, "config": config(), "source": source}))
        .unwrap()
}

async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    out.attributes()
        .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

/// A crawl queue of its own (standard: host turns are delayed per message).
pub async fn crawl_queue(sqs: &aws_sdk_sqs::Client) -> String {
    sqs.create_queue()
        .queue_name(unique("crawl"))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned()
}

/// A seeder over `app`, reading manifests from S3 through `s3`.
fn seeder<P: Ports>(app: App<P>, s3: &aws_sdk_s3::Client) -> Seeder<P> {
    let manifests = S3Manifests::new(s3.clone(), app.calls.clone());
    let fetcher = Fetcher::new("").unwrap();
    Seeder::new(
        Arc::new(app),
        Arc::new(fetcher),
        Arc::new(manifests),
        SeedDefaults::default(),
    )
}

#[tokio::test]
async fn lists_sitemaps_and_pagination_seed_once_on_aws() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let seeder = seeder(App::new(store, Unwired, queue, calls.clone()), &clients.s3);
    let store = &seeder.store;
    let site = sitemap_site().await;
    let crawl = unique("seed");
    let requests = [
        request(
            &crawl,
            json!({"urls": [site.url("/"), site.url("/a/1"), "javascript:alert(1)"]}),
        ),
        request(&crawl, json!({"sitemaps": [site.url("/sitemap.xml")]})),
        request(
            &crawl,
            json!({"pagination": [
                {"template": site.url("/list?page={page}"), "start": 1, "stop": 5},
                {"template": site.url("/tag/{page}"), "values": ["x", "y"]}
            ]}),
        ),
    ];
    let mut first = Vec::new();
    for r in &requests {
        first.push(
            seeder
                .seed(r.clone(), SeedBudget::default(), NOW)
                .await
                .unwrap(),
        );
    }
    // List: 2 new, 1 rejected. Sitemaps: 6 pages, /a/1 already known; the 404 and the nested
    // index rejected with reasons. Pagination: 4 + 2.
    let counts = |r: &SeedResponse| (r.accepted, r.already_known, r.rejected);
    assert_eq!(counts(&first[0]), (2, 0, 1));
    assert!(first[0].created);
    assert_eq!(counts(&first[1]), (5, 1, 2), "{:?}", first[1].rejections);
    let reasons: Vec<&str> = first[1]
        .rejections
        .iter()
        .map(|r| r.reason.as_str())
        .collect();
    assert!(reasons[0].contains("NotFound"), "{reasons:?}");
    assert!(reasons[1].contains("inside a sitemap index"), "{reasons:?}");
    let lastmod = first[1].lastmod.clone().unwrap();
    assert_eq!(lastmod.entries, 6);
    assert!(lastmod.newest.unwrap().starts_with("2024-03-0"));
    assert_eq!(counts(&first[2]), (6, 0, 0));
    assert!(
        first
            .iter()
            .all(|r| r.cursor.is_none() && r.enqueue_failed == 0)
    );

    let id = CrawlId::parse(&crawl).unwrap();
    let stored = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(stored.config.scope.allowed_domains, ["127.0.0.1"]);
    let pending = store.counts(&id).await.unwrap()[&Status::Pending];
    assert_eq!(pending, 13);
    // One message: every URL is of the one loopback host, whose turn takes them all.
    assert_eq!(queue_depth(&clients.sqs, &queue_url).await, 1);

    // Re-running every seed is a no-op: nothing new, nothing sent, nothing reset.
    for r in &requests {
        let again = seeder
            .seed(r.clone(), SeedBudget::default(), NOW + 1)
            .await
            .unwrap();
        assert_eq!(again.accepted, 0);
        assert!(!again.created);
    }
    assert_eq!(queue_depth(&clients.sqs, &queue_url).await, 1);
    assert_eq!(store.counts(&id).await.unwrap()[&Status::Pending], 13);
    assert!(calls.get(Call::DynamoPutItem) >= 13);
}

#[tokio::test]
async fn malformed_requests_change_nothing() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let seeder = seeder(App::new(store, Unwired, queue, calls.clone()), &clients.s3);
    let store = &seeder.store;
    let crawl = unique("bad");
    let bad = [
        json!({"crawl_id": crawl, "source": {"urls": ["http://127.0.0.1/"]},
               "config": {"scope": {"include": ["[unclosed"]}}}),
        json!({"crawl_id": crawl, "source": {"urls": ["not a url", "gopher://x/"]}}),
        json!({"crawl_id": crawl, "source": {"pagination": [{"template": "http://x/{page}", "stop": 3}]}}),
        json!({"crawl_id": crawl, "source": {"s3": {"bucket": "no-such-bucket", "key": "k"}}}),
        json!({"crawl_id": crawl, "source": {"sitemaps": ["http://127.0.0.1/s.xml"]},
               "cursor": "eyJmcCI6IngiLCJwb3MiOnt9fQ"}),
    ];
    for event in bad {
        let result = match SeedRequest::from_json(event.clone()) {
            Err(e) => Err(e),
            Ok(r) => seeder.seed(r, SeedBudget::default(), NOW).await,
        };
        assert!(
            matches!(result, Err(SeedError::InvalidRequest(_))),
            "{event}: {result:?}"
        );
    }
    assert!(store.list_crawls(None).await.unwrap().is_empty());
    assert_eq!(calls.get(Call::DynamoPutItem), 0);
    assert_eq!(calls.get(Call::DynamoUpdateItem), 0);
    assert_eq!(queue_depth(&clients.sqs, &queue_url).await, 0);
}

/// Runs `request` with `budget` until no cursor is returned (bounded); returns every response.
async fn until_done<P: Ports>(
    seeder: &Seeder<P>,
    mut request: SeedRequest,
    max_urls: u64,
) -> Vec<SeedResponse> {
    let budget = SeedBudget {
        max_urls,
        deadline: None,
    };
    let mut responses = Vec::new();
    for _ in 0..100 {
        let response = seeder.seed(request.clone(), budget, NOW).await.unwrap();
        request.cursor = response.cursor.clone();
        responses.push(response);
        if request.cursor.is_none() {
            return responses;
        }
    }
    panic!("the seed never finished");
}

fn totals(responses: &[SeedResponse]) -> (u64, u64, u64) {
    responses.iter().fold((0, 0, 0), |(a, k, r), x| {
        (a + x.accepted, k + x.already_known, r + x.rejected)
    })
}

#[tokio::test]
async fn continuations_seed_everything_exactly_once() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let seeder = seeder(App::new(store, Unwired, queue, calls.clone()), &clients.s3);
    let (store, queue) = (&seeder.store, &seeder.queue);

    // An S3 manifest of 1,000 URLs with comments, blank and bad lines, read 70 lines at a time.
    let bucket = unique("seeds");
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let mut manifest = String::from("# seeds\n");
    for i in 0..1000 {
        manifest.push_str(&format!("http://127.0.0.1:9/m/{i}\n"));
        if i % 250 == 0 {
            manifest.push_str("\nftp://127.0.0.1/x\n");
        }
    }
    clients
        .s3
        .put_object()
        .bucket(&bucket)
        .key("m.txt")
        .body(manifest.into_bytes().into())
        .send()
        .await
        .unwrap();
    let crawl = unique("s3");
    let s3 = request(&crawl, json!({"s3": {"bucket": bucket, "key": "m.txt"}}));
    let responses = until_done(&seeder, s3.clone(), 70).await;
    assert!(responses.len() >= 14, "{} invocations", responses.len());
    assert_eq!(totals(&responses), (1000, 0, 4));
    assert_eq!(queue.len(), 1, "one host, one turn message");
    let id = CrawlId::parse(&crawl).unwrap();
    assert_eq!(store.counts(&id).await.unwrap()[&Status::Pending], 1000);

    // A cursor does not survive a change of the manifest.
    let cursor = seeder
        .seed(
            s3.clone(),
            SeedBudget {
                max_urls: 10,
                deadline: None,
            },
            NOW,
        )
        .await
        .unwrap()
        .cursor
        .unwrap();
    // Same length, other content: only the ETag tells.
    let other: String = (0..1000)
        .map(|i| format!("http://127.0.0.1:9/o/{i}\n"))
        .collect();
    clients
        .s3
        .put_object()
        .bucket(&bucket)
        .key("m.txt")
        .body(other.into_bytes().into())
        .send()
        .await
        .unwrap();
    let changed = SeedRequest {
        cursor: Some(cursor),
        checkpoint: None,
        ..s3
    };
    match seeder.seed(changed, SeedBudget::default(), NOW).await {
        Err(SeedError::InvalidRequest(problems)) => {
            assert!(problems[0].contains("changed"), "{problems:?}")
        }
        other => panic!("a changed manifest was read on: {other:?}"),
    }

    // Sitemaps (an index and its children), two URLs per invocation.
    let site = sitemap_site().await;
    let sitemap_crawl = unique("sm");
    let sm = request(
        &sitemap_crawl,
        json!({"sitemaps": [site.url("/sitemap-a.xml"), site.url("/sitemap.xml")]}),
    );
    let responses = until_done(&seeder, sm, 2).await;
    assert!(responses.len() >= 3);
    // a/1..3 twice (direct and through the index: known the second time), b/1..3 once.
    let (accepted, known, _) = totals(&responses);
    assert_eq!((accepted, known), (6, 3));

    // Pagination and lists, 7 per invocation.
    let pages = request(
        &unique("pg"),
        json!({"pagination": [
            {"template": "http://127.0.0.1:9/p/{page}", "start": 0, "stop": 30, "step": 3},
            {"template": "http://127.0.0.1:9/v/{page}", "values": ["a", "b", "c", "d", "e"]}
        ]}),
    );
    assert_eq!(totals(&until_done(&seeder, pages, 7).await), (15, 0, 0));
    let list: Vec<String> = (0..50)
        .map(|i| format!("http://127.0.0.1:9/l/{i}"))
        .collect();
    let urls = request(&unique("ls"), json!({"urls": list}));
    let responses = until_done(&seeder, urls, 7).await;
    assert_eq!(responses.len(), 8);
    assert_eq!(totals(&responses), (50, 0, 0));
}

/// A site whose robots.txt names its sitemap: four pages, two with a `<lastmod>`.
fn incremental_site(site: &Site, p1_lastmod: &str) {
    let sitemap = format!(
        r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
        <url><loc>{}</loc><lastmod>{p1_lastmod}</lastmod></url>
        <url><loc>{}</loc><lastmod>2024-05-01</lastmod></url>
        <url><loc>{}</loc></url><url><loc>{}</loc></url></urlset>"#,
        site.url("/p/1"),
        site.url("/p/2"),
        site.url("/p/3"),
        site.url("/p/4"),
    );
    let robots = format!(
        "User-agent: *\nAllow: /\nSitemap: {}\n",
        site.url("/sitemap.xml")
    );
    site.route("/robots.txt", Route::content("text/plain", robots))
        .route("/sitemap.xml", Route::content("application/xml", sitemap));
}

/// 2024-06-01T00:00:00Z: when the first generation fetched every page.
const FETCHED: i64 = 1_717_200_000_000;

/// Incremental seeding on one backend: robots.txt's sitemap seeds the crawl; after a generation
/// fetched everything, a re-seed refetches only the page whose lastmod is newer than its fetch,
/// says how many it skipped, wakes the host and reopens the crawl; the checkpoint is kept.
async fn seeds_incrementally<P: Ports>(app: App<P>) {
    let clients = support::clients(&moto::shared().endpoint).await;
    let seeder = seeder(app, &clients.s3);
    let store = &seeder.store;
    let site = Site::start().await;
    incremental_site(&site, "2024-05-01T10:00:00+02:00");
    let crawl = unique("incr");
    let id = CrawlId::parse(&crawl).unwrap();
    let home = json!({"urls": [site.url("/")]});

    // GIVEN a crawl seeded with its home page: robots.txt's sitemap seeds its four pages too
    let first = seeder
        .seed(request(&crawl, home.clone()), SeedBudget::default(), NOW)
        .await
        .unwrap();
    assert_eq!((first.accepted, first.already_known), (5, 0), "{first:?}");
    assert_eq!(first.checkpoint, None);
    // AND switched off, robots.txt is not read for sitemaps
    let plain = unique("plain");
    let off = SeedRequest::from_json(json!({"crawl_id": plain, "source": home,
        "config": {"fetch": {"allow_private_networks": true},
                   "scope": {"sitemaps_from_robots": false}}}))
    .unwrap();
    let off = seeder.seed(off, SeedBudget::default(), NOW).await.unwrap();
    assert_eq!(off.accepted, 1);

    // AND a generation fetched every page at FETCHED, and completed
    let page = |p: &str| CanonicalUrl::parse(&site.url(p)).unwrap().task_id();
    for path in ["/", "/p/1", "/p/2", "/p/3", "/p/4"] {
        let ClaimOutcome::Claimed { lease, .. } = store
            .claim(&id, &page(path), 60_000, FETCHED)
            .await
            .unwrap()
        else {
            panic!("{path} not claimable");
        };
        let record = FetchRecord {
            http_status: 200,
            fetched_at: FETCHED,
            ..FetchRecord::default()
        };
        store.finish(&lease, &record, FETCHED).await.unwrap();
    }
    let generation = store.get_crawl(&id).await.unwrap().unwrap().generation;
    assert!(
        store
            .complete_crawl(&id, generation, "test", FETCHED)
            .await
            .unwrap()
    );
    let hits = site.hits("/sitemap.xml");

    // WHEN /p/1 changes after that fetch and the crawl is seeded again, with a checkpoint
    incremental_site(&site, "2024-06-02T08:00:00Z");
    let mut again = request(&crawl, home.clone());
    again.checkpoint = Some("since=2024-06-02".into());
    let now = FETCHED + 86_400_000;
    let second = seeder
        .seed(again, SeedBudget::default(), now)
        .await
        .unwrap();

    // THEN only /p/1 is due again; /p/2 (not modified since) is skipped, and said so
    assert_eq!(
        site.hits("/sitemap.xml"),
        hits + 1,
        "the sitemap is read again"
    );
    assert_eq!((second.accepted, second.already_known), (0, 5));
    let lastmod = second.lastmod.clone().unwrap();
    assert_eq!((lastmod.refetched, lastmod.skipped), (1, 1), "{lastmod:?}");
    let status = |task: Option<trawl_domain::task::Task>| task.unwrap().status;
    assert_eq!(
        status(store.get(&id, &page("/p/1")).await.unwrap()),
        Status::Pending
    );
    for path in ["/", "/p/2", "/p/3", "/p/4"] {
        let task = store.get(&id, &page(path)).await.unwrap();
        assert_eq!(status(task), Status::Succeeded, "{path}");
    }
    // AND the crawl runs again, a new generation, its host woken with a turn message
    let reopened = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.generation),
        (CrawlState::Running, generation + 1)
    );
    let host = CanonicalUrl::parse(&site.url("/")).unwrap().host_key();
    let woken = store.get_host(&id, &host).await.unwrap().unwrap();
    assert!(woken.queued_for.is_some(), "{woken:?}");
    assert_eq!(
        second.checkpoint, None,
        "the checkpoint as the request found it"
    );

    // AND a request without URLs reads the checkpoint, seeding nothing
    let read = seeder
        .seed(
            request(&crawl, json!({"urls": []})),
            SeedBudget::default(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(read.checkpoint.as_deref(), Some("since=2024-06-02"));
    assert_eq!((read.accepted, read.already_known), (0, 0));
    let stored = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(stored.checkpoint.as_deref(), Some("since=2024-06-02"));
    // AND for a crawl that does not exist, such a request is refused
    let none = seeder
        .seed(
            request(&unique("nope"), json!({"urls": []})),
            SeedBudget::default(),
            now,
        )
        .await;
    assert!(
        matches!(none, Err(SeedError::InvalidRequest(_))),
        "{none:?}"
    );
}

#[tokio::test]
async fn seeds_incrementally_on_the_embedded_backend() {
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    seeds_incrementally(App::new(store, Unwired, queue, calls)).await;
}

#[tokio::test]
async fn seeds_incrementally_on_aws() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    seeds_incrementally(App::new(store, Unwired, queue, calls)).await;
    // The two crawls' first turns (never received here), and the woken host's.
    assert_eq!(queue_depth(&clients.sqs, &queue_url).await, 3);
}
