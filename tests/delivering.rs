//! Deliveries and clean-up, on both backends: SQLite + a directory, and DynamoDB + S3 on moto.
//! State is built directly through the ports (seed, claim, store a body, finish or fail), then
//! the delivery files are read back and checked: a small WARC reader lives here for that.

use crate::support::{self, unique};
use bytes::Bytes;
use flate2::bufread::GzDecoder;
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::sync::Arc;
use trawl_aws::s3::S3BlobStore;
use trawl_core::blob::{BlobStore, Layout, ObjectMeta};
use trawl_core::deliver::{
    self, DeliverError, Deliverer, DeliveryReport, DeltaLine, ManifestLine, PurgeError,
};
use trawl_core::queue::WorkQueue;
use trawl_core::store::{
    ClaimOutcome, CrawlStore, FailOutcome, FinishOutcome, HostStore, TaskStore,
};
use trawl_domain::calls::{Call, CallCounts, CallTally};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{ErrorKind, FetchRecord, Millis, NewTask, Status, now_ms};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

const T0: Millis = 1_800_000_000_000;
const LEASE_MS: u64 = 60_000;
const PAGES: usize = 20;

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(unique(&format!("trawl-deliver-{name}")));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One backend: the ports, the layout and the URI base the manifest uses.
struct Backend<S, B> {
    store: S,
    blobs: B,
    layout: Layout,
    uri_base: String,
    calls: Arc<CallCounts>,
    _dir: Option<TempDir>,
}

fn embedded() -> Backend<SqliteStore, FsBlobStore> {
    let dir = TempDir::new("fs");
    let calls = Arc::new(CallCounts::default());
    let root = dir.0.join("objects");
    Backend {
        store: SqliteStore::in_memory(calls.clone()).unwrap(),
        blobs: FsBlobStore::new(root.clone(), calls.clone()),
        layout: Layout::new("data"),
        uri_base: root.display().to_string(),
        calls,
        _dir: Some(dir),
    }
}

async fn aws() -> Backend<trawl_aws::dynamodb::DynamoStore, S3BlobStore> {
    let endpoint = &support::moto::shared().endpoint;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let clients = support::clients(endpoint).await;
    let bucket = unique("bucket");
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    Backend {
        store,
        blobs: S3BlobStore::new(clients.s3, bucket.clone(), calls.clone()),
        layout: Layout::new("trawl"),
        uri_base: format!("s3://{bucket}"),
        calls,
        _dir: None,
    }
}

fn url(i: usize) -> String {
    format!("http://example.com/p{i}")
}

fn task_id(url: &str) -> TaskId {
    CanonicalUrl::parse(url).unwrap().task_id()
}

fn md5_hex(body: &[u8]) -> String {
    hex::encode(Md5::digest(body))
}

impl<S: CrawlStore + TaskStore + HostStore, B: BlobStore> Backend<S, B> {
    fn deliverer(&self) -> Deliverer<'_, S, B> {
        Deliverer {
            store: &self.store,
            blobs: &self.blobs,
            layout: &self.layout,
            uri_base: &self.uri_base,
            calls: &self.calls,
        }
    }

    async fn create(&self, now: Millis) -> CrawlId {
        let id = CrawlId::parse(&unique("crawl")).unwrap();
        let crawl = Crawl::new(id.clone(), CrawlConfig::default(), now);
        assert!(self.store.create_crawl(&crawl).await.unwrap().1);
        id
    }

    async fn seed(&self, crawl: &CrawlId, urls: &[String], now: Millis) {
        let tasks: Vec<NewTask> = urls
            .iter()
            .map(|u| NewTask {
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
            })
            .collect();
        self.store.seed(crawl, &tasks, now).await.unwrap();
    }

    async fn lease(&self, crawl: &CrawlId, url: &str, now: Millis) -> trawl_domain::task::Lease {
        match self
            .store
            .claim(crawl, &task_id(url), LEASE_MS, now)
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { lease, .. } => lease,
            other => panic!("cannot claim {url}: {other:?}"),
        }
    }

    /// Claims `url`, stores `stored` as its body under the key of `body`'s md5, and finishes it.
    /// (`stored` differs from `body` only to plant a corrupt object.)
    async fn succeed_with(
        &self,
        crawl: &CrawlId,
        url: &str,
        body: &[u8],
        stored: Option<&[u8]>,
        now: Millis,
    ) {
        let lease = self.lease(crawl, url, now).await;
        let md5 = md5_hex(body);
        let key = self.layout.html_key(crawl, &task_id(url), &md5);
        if let Some(stored) = stored {
            let meta = ObjectMeta {
                content_type: "text/html".into(),
                md5: Md5::digest(stored).into(),
                source_url: url.to_owned(),
            };
            self.blobs
                .put(&key, Bytes::copy_from_slice(stored), &meta)
                .await
                .unwrap();
        }
        let record = FetchRecord {
            object_key: Some(key),
            md5: Some(md5),
            http_status: 200,
            content_type: Some("text/html; charset=utf-8".into()),
            content_length: body.len() as u64,
            fetched_at: now,
            ..FetchRecord::default()
        };
        let outcome = self.store.finish(&lease, &record, now).await.unwrap();
        assert!(
            matches!(outcome, FinishOutcome::Finished { .. }),
            "{outcome:?}"
        );
    }

    async fn succeed(&self, crawl: &CrawlId, url: &str, body: &[u8], now: Millis) {
        self.succeed_with(crawl, url, body, Some(body), now).await;
    }

    async fn fail(&self, crawl: &CrawlId, url: &str, failure: Failure, now: Millis) {
        let lease = self.lease(crawl, url, now).await;
        let policy = RetryPolicy {
            max_retry: 1,
            ..RetryPolicy::default()
        };
        let outcome = self
            .store
            .fail(&lease, &failure, &policy, &Revisit::ONCE, now)
            .await
            .unwrap();
        assert!(matches!(outcome, FailOutcome::GaveUp { .. }), "{outcome:?}");
    }

    async fn file(&self, report: &DeliveryReport, name: &str) -> Bytes {
        let key = format!(
            "{}{}/{name}",
            self.layout.deliveries_prefix(&report.crawl_id),
            report.delivery_id
        );
        self.blobs
            .get(&key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{key} is missing"))
    }

    async fn objects(&self, crawl: &CrawlId) -> Vec<String> {
        self.blobs
            .list(&self.layout.crawl_prefix(crawl))
            .await
            .unwrap()
    }

    async fn manifest(&self, report: &DeliveryReport) -> Vec<ManifestLine> {
        gz_lines(&self.file(report, deliver::MANIFEST_FILE).await)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    async fn delta(&self, report: &DeliveryReport) -> BTreeSet<(String, String)> {
        gz_lines(&self.file(report, deliver::DELTA_FILE).await)
            .iter()
            .map(|l| {
                let line: DeltaLine = serde_json::from_str(l).unwrap();
                let change = serde_json::to_value(line.change).unwrap();
                (change.as_str().unwrap().to_owned(), line.url)
            })
            .collect()
    }
}

pub(crate) fn gz_lines(gz: &[u8]) -> Vec<String> {
    std::io::BufReader::new(MultiGzDecoder::new(gz))
        .lines()
        .map(Result::unwrap)
        .collect()
}

/// One WARC record: its header fields and its block.
#[derive(Debug)]
pub(crate) struct Record {
    fields: BTreeMap<String, String>,
    block: Vec<u8>,
}

impl Record {
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.fields))
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a `.warc.gz` member by member, asserting one whole record per member.
pub(crate) fn read_warc(gz: &[u8]) -> Vec<Record> {
    let mut rest = gz;
    let mut records = Vec::new();
    for _ in 0..10_000 {
        if rest.is_empty() {
            return records;
        }
        let mut decoder = GzDecoder::new(rest);
        let mut member = Vec::new();
        decoder.read_to_end(&mut member).unwrap();
        rest = decoder.into_inner();

        let end = find(&member, b"\r\n\r\n").expect("end of the WARC header");
        let head = std::str::from_utf8(&member[..end]).unwrap();
        let mut lines = head.split("\r\n");
        assert_eq!(lines.next(), Some("WARC/1.1"));
        let fields: BTreeMap<String, String> = lines
            .map(|l| {
                let (name, value) = l.split_once(": ").unwrap();
                (name.to_owned(), value.to_owned())
            })
            .collect();
        let length: usize = fields["Content-Length"].parse().unwrap();
        let block = member[end + 4..end + 4 + length].to_vec();
        assert_eq!(
            &member[end + 4 + length..],
            b"\r\n\r\n",
            "one record per member, ended by two CRLFs"
        );
        records.push(Record { fields, block });
    }
    panic!("more records than any test writes");
}

/// The pages of a WARC: target URI → payload, after checking the request/response pairing.
pub(crate) fn warc_pages(records: &[Record]) -> BTreeMap<String, Vec<u8>> {
    assert_eq!(records[0].field("WARC-Type"), "warcinfo");
    let info_id = records[0].field("WARC-Record-ID");
    assert!(
        std::str::from_utf8(&records[0].block)
            .unwrap()
            .contains("software: trawl/")
    );
    let pairs = &records[1..];
    assert_eq!(pairs.len() % 2, 0, "requests and responses come in pairs");
    let mut pages = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for pair in pairs.chunks(2) {
        let (request, response) = (&pair[0], &pair[1]);
        assert_eq!(request.field("WARC-Type"), "request");
        assert_eq!(response.field("WARC-Type"), "response");
        assert_eq!(
            request.field("WARC-Concurrent-To"),
            response.field("WARC-Record-ID")
        );
        assert_eq!(
            response.field("WARC-Concurrent-To"),
            request.field("WARC-Record-ID")
        );
        for record in pair {
            assert_eq!(record.field("WARC-Warcinfo-ID"), info_id);
            assert!(record.field("WARC-Record-ID").starts_with("<urn:uuid:"));
            assert!(ids.insert(record.field("WARC-Record-ID").to_owned()));
        }
        let target = response.field("WARC-Target-URI");
        assert_eq!(request.field("WARC-Target-URI"), target);
        assert!(response.field("WARC-Payload-Digest").starts_with("sha1:"));
        assert!(
            std::str::from_utf8(&request.block)
                .unwrap()
                .starts_with("GET /")
        );
        let split = find(&response.block, b"\r\n\r\n").expect("HTTP header");
        let http = std::str::from_utf8(&response.block[..split]).unwrap();
        let payload = response.block[split + 4..].to_vec();
        assert!(http.starts_with("HTTP/1.1 200 OK\r\n"), "{http}");
        assert!(http.contains(&format!("Content-Length: {}", payload.len())));
        assert!(pages.insert(target.to_owned(), payload).is_none());
    }
    pages
}

pub(crate) fn status_counts(counts: &BTreeMap<Status, u64>) -> BTreeMap<String, u64> {
    counts
        .iter()
        .filter(|&(_, &n)| n > 0)
        .map(|(s, &n)| (s.name().to_owned(), n))
        .collect()
}

fn urls(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(url).collect()
}

/// Pages 0..15 succeed (13 with a good body, 13 missing its object, 14 stored corrupt), 15..17
/// are gone, 17..19 refused (403), 19 ignored after a server error.
async fn crawl_first_generation<S: CrawlStore + TaskStore + HostStore, B: BlobStore>(
    b: &Backend<S, B>,
) -> CrawlId {
    let crawl = b.create(T0).await;
    b.seed(&crawl, &urls(0..PAGES), T0).await;
    for i in 0..13 {
        let body = format!("<html>page {i} v1</html>");
        b.succeed(&crawl, &url(i), body.as_bytes(), T0 + 10).await;
    }
    b.succeed_with(&crawl, &url(13), b"<html>13</html>", None, T0 + 10)
        .await;
    b.succeed_with(
        &crawl,
        &url(14),
        b"<html>14</html>",
        Some(b"<html>tampered</html>"),
        T0 + 10,
    )
    .await;
    for i in 15..17 {
        b.fail(
            &crawl,
            &url(i),
            Failure::from_http_status(404, None),
            T0 + 10,
        )
        .await;
    }
    for i in 17..19 {
        b.fail(
            &crawl,
            &url(i),
            Failure::from_http_status(403, None),
            T0 + 10,
        )
        .await;
    }
    b.fail(
        &crawl,
        &url(19),
        Failure::new(ErrorKind::ServerError, "HTTP 502"),
        T0 + 10,
    )
    .await;
    assert!(b.store.complete_crawl(&crawl, 0, T0 + 20).await.unwrap());
    crawl
}

async fn delivery_holds_every_task_and_page<S: CrawlStore + TaskStore + HostStore, B: BlobStore>(
    b: Backend<S, B>,
) {
    // GIVEN a completed crawl of 20 tasks: 15 succeeded (one body missing, one corrupt), 5 failed
    let crawl = crawl_first_generation(&b).await;

    // WHEN it is delivered
    let report = b.deliverer().deliver(&crawl, None, T0 + 30).await.unwrap();

    // THEN the manifest has exactly one line per task, as stored
    assert!(!report.already_delivered);
    assert_eq!(report.delivery_id, "gen-000000");
    let manifest = b.manifest(&report).await;
    assert_eq!(manifest.len(), PAGES);
    let by_url: BTreeMap<&str, &ManifestLine> =
        manifest.iter().map(|l| (l.url.as_str(), l)).collect();
    assert_eq!(by_url.len(), PAGES);
    let page0 = by_url[url(0).as_str()];
    assert_eq!(page0.status, "succeeded");
    assert_eq!(page0.http_status, Some(200));
    assert_eq!(
        page0.md5.as_deref(),
        Some(md5_hex(b"<html>page 0 v1</html>").as_str())
    );
    let key = b
        .layout
        .html_key(&crawl, &task_id(&url(0)), page0.md5.as_ref().unwrap());
    assert_eq!(
        page0.object.as_deref(),
        Some(format!("{}/{key}", b.uri_base).as_str())
    );
    assert_eq!(page0.fetched_at.as_deref(), Some("2027-01-15T08:00:00Z"));
    let gone = by_url[url(15).as_str()];
    assert_eq!(gone.status, "gone");
    assert_eq!(gone.last_error.as_ref().unwrap().kind, ErrorKind::NotFound);

    // AND the WARC holds every good page, each payload matching the task's md5
    let pages = warc_pages(&read_warc(&b.file(&report, deliver::WARC_FILE).await));
    assert_eq!(pages.len(), 13);
    for (target, payload) in &pages {
        assert_eq!(
            by_url[target.as_str()].md5.as_deref(),
            Some(md5_hex(payload).as_str()),
            "{target}"
        );
    }

    // AND the summary's counts are the table's; the two bad objects are reported, not archived
    let summary = &report.summary;
    let counts = b.store.counts(&crawl).await.unwrap();
    assert_eq!(summary.statuses, status_counts(&counts));
    assert_eq!(summary.tasks, PAGES as u64);
    assert_eq!(
        summary.errors,
        BTreeMap::from([
            ("not_found".to_owned(), 2),
            ("client_error".to_owned(), 2),
            ("server_error".to_owned(), 1)
        ])
    );
    assert_eq!((summary.warc.pages, summary.warc.problems), (13, 2));
    let problems: BTreeMap<&str, &str> = summary
        .warc
        .problem_samples
        .iter()
        .map(|p| (p.url.as_str(), p.problem.as_str()))
        .collect();
    assert_eq!(problems[url(13).as_str()], "missing");
    assert!(problems[url(14).as_str()].starts_with("md5 mismatch"));
    assert_eq!(
        summary.page_bytes,
        pages.values().map(|p| p.len() as u64).sum::<u64>()
    );
    assert_eq!(summary.started_at, "2027-01-15T08:00:00Z");
    assert!(!summary.calls.is_empty());
    let written: deliver::Summary =
        serde_json::from_slice(&b.file(&report, deliver::SUMMARY_FILE).await).unwrap();
    assert_eq!(&written, summary);

    // AND the first delta calls every delivered page new
    let delta = b.delta(&report).await;
    assert_eq!(delta.len(), 15);
    assert!(delta.iter().all(|(change, _)| change == "new"));
    assert_eq!(summary.delta.new, 15);
    assert_eq!(summary.delta.previous, None);

    // AND the delivery is marked complete
    let prefix = format!("{}gen-000000/", b.layout.deliveries_prefix(&crawl));
    let mut names: Vec<String> = b
        .blobs
        .list(&prefix)
        .await
        .unwrap()
        .iter()
        .map(|k| k.strip_prefix(&prefix).unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            deliver::SUCCESS_FILE,
            deliver::DELTA_FILE,
            deliver::MANIFEST_FILE,
            deliver::WARC_FILE,
            deliver::SUMMARY_FILE
        ]
    );
}

async fn a_second_delivery_reports_the_delta<
    S: CrawlStore + TaskStore + HostStore,
    B: BlobStore,
>(
    b: Backend<S, B>,
) {
    // GIVEN a delivered first generation
    let crawl = crawl_first_generation(&b).await;
    let first = b.deliverer().deliver(&crawl, None, T0 + 30).await.unwrap();

    // WHEN delivering it again
    let again = b
        .deliverer()
        .deliver(&crawl, Some(0), T0 + 40)
        .await
        .unwrap();

    // THEN the existing delivery is returned, nothing rewritten
    assert!(again.already_delivered);
    assert_eq!(again.summary, first.summary);
    let deliveries = b
        .blobs
        .list(&b.layout.deliveries_prefix(&crawl))
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 5, "{deliveries:?}");

    // GIVEN a recrawl round: 5 pages change, 3 disappear, 1 is discovered
    assert!(b.store.reopen_crawl(&crawl, T0 + 50).await.unwrap());
    let t1 = T0 + 60;
    for i in 0..8 {
        assert!(
            b.store
                .reschedule(&crawl, &task_id(&url(i)), &[Status::Succeeded], t1)
                .await
                .unwrap()
        );
    }
    for i in 0..5 {
        let body = format!("<html>page {i} v2</html>");
        b.succeed(&crawl, &url(i), body.as_bytes(), t1).await;
    }
    for i in 5..8 {
        b.fail(&crawl, &url(i), Failure::from_http_status(410, None), t1)
            .await;
    }
    b.seed(&crawl, &[url(PAGES)], t1).await;
    b.succeed(&crawl, &url(PAGES), b"<html>new</html>", t1)
        .await;

    // WHEN generation 1 is delivered before it completes, then after
    let early = b.deliverer().deliver(&crawl, None, t1).await;
    assert!(b.store.complete_crawl(&crawl, 1, t1 + 10).await.unwrap());
    let second = b.deliverer().deliver(&crawl, None, t1 + 20).await.unwrap();

    // THEN the early call is refused, and the delta says exactly what changed
    assert!(
        matches!(early, Err(DeliverError::NotCompleted { generation: 1, .. })),
        "{early:?}"
    );
    assert_eq!(second.delivery_id, "gen-000001");
    let delta = b.delta(&second).await;
    let of = |change: &str| -> BTreeSet<String> {
        delta
            .iter()
            .filter(|(c, _)| c == change)
            .map(|(_, u)| u.clone())
            .collect()
    };
    assert_eq!(of("changed"), urls(0..5).into_iter().collect());
    assert_eq!(of("gone"), urls(5..8).into_iter().collect());
    assert_eq!(of("new"), BTreeSet::from([url(PAGES)]));
    assert_eq!(of("unchanged"), urls(8..15).into_iter().collect());
    assert_eq!(delta.len(), 5 + 3 + 1 + 7);
    let summary = &second.summary.delta;
    assert_eq!(summary.previous.as_deref(), Some("gen-000000"));
    assert_eq!(
        (
            summary.new,
            summary.changed,
            summary.gone,
            summary.unchanged
        ),
        (1, 5, 3, 7)
    );
    // AND the new WARC holds the new content
    let pages = warc_pages(&read_warc(&b.file(&second, deliver::WARC_FILE).await));
    assert_eq!(pages.len(), 13 - 3 + 1);
    assert_eq!(pages[&url(0)], b"<html>page 0 v2</html>");
    assert_eq!(b.manifest(&second).await.len(), PAGES + 1);

    // AND the superseded generation can still be read back, but not rewritten
    assert!(
        b.deliverer()
            .deliver(&crawl, Some(0), t1 + 30)
            .await
            .unwrap()
            .already_delivered
    );
    assert!(matches!(
        b.deliverer().deliver(&crawl, Some(2), t1 + 30).await,
        Err(DeliverError::UnknownGeneration {
            requested: 2,
            current: 1,
            ..
        })
    ));
    let missing = CrawlId::parse(&unique("nothing")).unwrap();
    assert!(matches!(
        b.deliverer().deliver(&missing, None, t1).await,
        Err(DeliverError::NoSuchCrawl(_))
    ));
}

async fn purge_refuses_a_running_crawl_then_removes_everything<
    S: CrawlStore + TaskStore + HostStore,
    B: BlobStore,
>(
    b: Backend<S, B>,
) {
    // GIVEN a delivered crawl that was reopened (running again), and another running crawl
    let crawl = crawl_first_generation(&b).await;
    b.deliverer().deliver(&crawl, None, T0 + 30).await.unwrap();
    assert!(b.store.reopen_crawl(&crawl, T0 + 40).await.unwrap());
    let other = b.create(T0).await;
    b.seed(&other, &urls(0..3), T0).await;
    b.succeed(&other, &url(0), b"<html>other</html>", T0 + 1)
        .await;
    let stored = b.objects(&crawl).await.len();
    assert_eq!(stored, 14); // 13 good bodies + the corrupt one

    // WHEN purged without force
    let refused = deliver::purge(&b.store, &b.blobs, &b.layout, &crawl, false).await;

    // THEN it is refused and nothing is removed
    assert!(
        matches!(&refused, Err(PurgeError::Running(id)) if *id == crawl),
        "{refused:?}"
    );
    assert_eq!(b.objects(&crawl).await.len(), stored);
    assert_eq!(
        b.store.counts(&crawl).await.unwrap().values().sum::<u64>(),
        PAGES as u64
    );

    // WHEN it completes and is purged, and the other is purged by force
    assert!(b.store.complete_crawl(&crawl, 1, T0 + 50).await.unwrap());
    let purged = deliver::purge(&b.store, &b.blobs, &b.layout, &crawl, false)
        .await
        .unwrap();
    let forced = deliver::purge(&b.store, &b.blobs, &b.layout, &other, true)
        .await
        .unwrap();
    let again = deliver::purge(&b.store, &b.blobs, &b.layout, &crawl, false)
        .await
        .unwrap();

    // THEN tasks, objects and records are gone; the delivery is kept
    assert_eq!(
        (
            purged.tasks_deleted,
            purged.objects_deleted,
            purged.crawl_deleted
        ),
        (PAGES as u64, stored as u64, true)
    );
    assert_eq!((forced.tasks_deleted, forced.objects_deleted), (3, 1));
    assert_eq!(
        (
            again.tasks_deleted,
            again.objects_deleted,
            again.crawl_deleted
        ),
        (0, 0, false)
    );
    for id in [&crawl, &other] {
        assert!(b.store.get_crawl(id).await.unwrap().is_none());
        assert_eq!(b.store.counts(id).await.unwrap().values().sum::<u64>(), 0);
        assert!(b.objects(id).await.is_empty());
    }
    assert_eq!(
        b.blobs
            .list(&b.layout.deliveries_prefix(&crawl))
            .await
            .unwrap()
            .len(),
        5
    );
}

/// Incompressible bytes (xorshift), so the compressed WARC really is as large as the pages.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// S3 only: a WARC larger than one part goes up as a multipart upload and reads back whole.
#[tokio::test]
async fn a_large_warc_is_uploaded_in_parts() {
    // GIVEN a completed crawl of 3 pages of 4 MiB of noise each (12 MiB > the 8 MiB part size)
    let b = aws().await;
    let crawl = b.create(T0).await;
    b.seed(&crawl, &urls(0..3), T0).await;
    let bodies: Vec<Vec<u8>> = (0..3).map(|i| noise(4 << 20, i + 1)).collect();
    for (i, body) in bodies.iter().enumerate() {
        b.succeed(&crawl, &url(i), body, T0 + 1).await;
    }
    assert!(b.store.complete_crawl(&crawl, 0, T0 + 2).await.unwrap());
    let parts_before = b.calls.get(trawl_domain::calls::Call::S3UploadPart);

    // WHEN it is delivered
    let report = b.deliverer().deliver(&crawl, None, T0 + 3).await.unwrap();

    // THEN the WARC went up in two parts and holds the three bodies intact
    let parts = b.calls.get(trawl_domain::calls::Call::S3UploadPart) - parts_before;
    assert_eq!(parts, 2);
    let pages = warc_pages(&read_warc(&b.file(&report, deliver::WARC_FILE).await));
    for (i, body) in bodies.iter().enumerate() {
        assert!(pages[&url(i)] == *body, "page {i} differs");
    }
    assert!(report.summary.files[deliver::WARC_FILE] > 12 << 20);
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::embedded()).await;
                }
            )*
        }

        mod aws {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::aws().await).await;
                }
            )*
        }
    };
}

on_both_backends!(
    delivery_holds_every_task_and_page,
    a_second_delivery_reports_the_delta,
    purge_refuses_a_running_crawl_then_removes_everything,
);

/// The AWS resources of one deployment. Each function container builds adapters of its own on
/// them, with counters of its own, as each Lambda container does.
struct Deployment {
    endpoint: String,
    table: String,
    bucket: String,
    queue_url: String,
    delivery_url: String,
}

/// One container's adapters and the counters they share.
struct Container {
    store: trawl_aws::dynamodb::DynamoStore,
    blobs: S3BlobStore,
    queue: trawl_aws::sqs::SqsQueue,
    trigger: trawl_aws::sqs::SqsDeliveryTrigger,
    calls: Arc<CallCounts>,
}

impl Deployment {
    async fn create() -> Self {
        let endpoint = support::moto::shared().endpoint.clone();
        let clients = support::clients(&endpoint).await;
        let made = trawl_aws::stack::create_stack(&clients, &unique("deployment"))
            .await
            .unwrap();
        let (table, bucket, queue_url, delivery_url) = (
            made.table,
            made.bucket,
            made.queue_url,
            made.delivery_queue_url,
        );
        Self {
            endpoint,
            table,
            bucket,
            queue_url,
            delivery_url,
        }
    }

    async fn container(&self) -> Container {
        let clients = support::clients(&self.endpoint).await;
        let calls = Arc::new(CallCounts::default());
        Container {
            store: trawl_aws::dynamodb::DynamoStore::new(
                clients.dynamodb,
                &self.table,
                4,
                calls.clone(),
            ),
            blobs: S3BlobStore::new(clients.s3, &self.bucket, calls.clone()),
            queue: trawl_aws::sqs::SqsQueue::new(
                clients.sqs.clone(),
                &self.queue_url,
                calls.clone(),
            ),
            trigger: trawl_aws::sqs::SqsDeliveryTrigger::new(
                clients.sqs,
                &self.delivery_url,
                calls.clone(),
            ),
            calls,
        }
    }
}

fn tally(calls: &[deliver::CallCount]) -> CallTally {
    calls
        .iter()
        .map(|c| {
            let name = format!("{}.{}", c.service, c.operation);
            (Call::from_name(&name).unwrap(), c.count)
        })
        .collect()
}

fn sum(tallies: impl IntoIterator<Item = CallTally>) -> CallTally {
    let mut total = CallTally::new();
    for (call, n) in tallies.into_iter().flatten() {
        *total.entry(call).or_default() += n;
    }
    total
}

#[tokio::test]
async fn summary_calls_are_the_sum_of_every_invocations_calls() {
    // GIVEN a deployment on moto, two sites (two hosts) of two pages each, and five function
    // containers with counters of their own; the harness stands for Lambda's event source
    // mapping (its receives and deletes are not the functions' calls)
    let sites = [
        crate::site::Site::start().await,
        crate::site::Site::start().await,
    ];
    let paths = ["/a", "/b"];
    for site in &sites {
        for path in paths {
            site.route(
                path,
                crate::site::Route::html(format!("<html>{path}</html>")),
            );
        }
    }
    let deployment = Deployment::create().await;
    let harness = deployment.container().await;
    let seeder = deployment.container().await;
    let crawlers = [deployment.container().await, deployment.container().await];
    let sweeper = deployment.container().await;
    let deliverer = deployment.container().await;
    let crawl = CrawlId::parse(&unique("costs")).unwrap();
    let layout = Layout::new("trawl");
    let fetcher = Arc::new(trawl_core::fetch::Fetcher::new("").unwrap());

    // WHEN the seeder seeds the four URLs
    let mut config = CrawlConfig::default();
    config.fetch.guard_exempt = sites.iter().map(|s| s.addr().to_string()).collect();
    config.politeness.respect_robots = false;
    config.scope.follow_links = false;
    let urls = sites
        .iter()
        .flat_map(|s| paths.iter().map(|p| s.url(p)))
        .collect();
    let request = trawl_core::seed::SeedRequest {
        crawl_id: crawl.clone(),
        config: Some(config),
        source: trawl_core::seed::SeedSource::Urls(urls),
        cursor: None,
        checkpoint: None,
    };
    let seeded = trawl_core::seed::Seeder {
        store: &seeder.store,
        queue: &seeder.queue,
        fetcher: &fetcher,
        manifests: &trawl_aws::manifest::S3Manifests::new(
            support::clients(&deployment.endpoint).await.s3,
            seeder.calls.clone(),
        ),
        defaults: &trawl_core::seed::SeedDefaults::default(),
        calls: &seeder.calls,
    }
    .seed(request, trawl_core::seed::SeedBudget::default(), now_ms())
    .await
    .unwrap();
    assert_eq!(seeded.accepted, 4);

    // AND two crawler invocations take one host's turn each (two pages)
    for container in &crawlers {
        let batch = harness.queue.receive(1, 0).await.unwrap();
        assert_eq!(batch.len(), 1);
        let crawler = trawl_core::crawler::Crawler::new(
            container.store.clone(),
            container.blobs.clone(),
            container.queue.clone(),
            fetcher.clone(),
            layout.clone(),
            4,
            container.calls.clone(),
        );
        let results = crawler.process_batch(batch, None).await;
        let receipts: Vec<String> = results.iter().map(|r| r.receipt.clone()).collect();
        assert!(
            results
                .iter()
                .flat_map(|r| &r.outcomes)
                .all(|o| matches!(o, trawl_core::crawler::Outcome::Succeeded { .. })),
            "{results:?}"
        );
        harness.queue.ack(&receipts).await.unwrap();
    }

    // AND a sweeper invocation completes the crawl, and a deliverer invocation delivers it
    let swept = trawl_core::sweep::Sweeper {
        store: &sweeper.store,
        queue: &sweeper.queue,
        trigger: &sweeper.trigger,
        calls: &sweeper.calls,
        options: trawl_core::sweep::SweepOptions::new(),
    }
    .sweep_all(
        now_ms(),
        &mut trawl_core::sweep::SweepBudget::new(100, std::time::Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert!(swept.crawls.iter().all(|r| r.completed), "{swept:?}");
    let report = Deliverer {
        store: &deliverer.store,
        blobs: &deliverer.blobs,
        layout: &layout,
        uri_base: "",
        calls: &deliverer.calls,
    }
    .deliver(&crawl, None, now_ms())
    .await
    .unwrap();

    // THEN the crawl holds exactly the sum of every container's calls, none left unreported
    let containers = [&seeder, &crawlers[0], &crawlers[1], &sweeper, &deliverer];
    let every = sum(containers
        .iter()
        .map(|c| c.calls.snapshot().into_iter().collect::<CallTally>()));
    for container in containers {
        assert!(container.calls.take_unreported().is_empty());
    }
    let totals = harness
        .store
        .get_crawl(&crawl)
        .await
        .unwrap()
        .unwrap()
        .calls;
    assert_eq!(totals, every);
    assert!(every[&Call::DynamoUpdateItem] > 0 && every[&Call::S3PutObject] >= 4);
    // AND summary.json's calls are that sum but for the delivery's last writes, which come
    // after it: summary.json and _SUCCESS, and the report that adds them
    let key = format!(
        "{}{}/{}",
        layout.deliveries_prefix(&crawl),
        report.delivery_id,
        deliver::SUMMARY_FILE
    );
    let written: deliver::Summary =
        serde_json::from_slice(&harness.blobs.get(&key).await.unwrap().unwrap()).unwrap();
    let tail = CallTally::from([(Call::DynamoUpdateItem, 1), (Call::S3PutObject, 2)]);
    assert_eq!(sum([tally(&written.calls), tail]), every);
    // AND its cost is priced from those calls with the shared price table (to the last bit
    // but one: serde_json's default float parsing may differ from the written value by an ulp)
    let priced = deliver::CostEstimate::from_calls(&tally(&written.calls));
    let cost = &written.estimated_cost;
    for (got, want) in [
        (cost.dynamodb_usd, priced.dynamodb_usd),
        (cost.s3_usd, priced.s3_usd),
        (cost.sqs_usd, priced.sqs_usd),
        (cost.total_usd, priced.total_usd),
    ] {
        assert!(
            (got - want).abs() <= want.abs() * 1e-12,
            "{cost:?} vs {priced:?}"
        );
    }
    assert_eq!(cost.basis, priced.basis);
}
