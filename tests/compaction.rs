//! Retention of deliveries and compaction of segments (`trawl_core::deliver::compact`), from
//! the CLI: a recrawled crawl whose changed pages leave garbage in its segments.

use crate::cli::{json_of, linked_site, temp_dir, trawl, warcio_check};
use crate::site::{Route, Site};
use crate::support::{aws_stack, moto, unique};
use deliverer::handler::{DelivererResponse, Handler};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use trawl_aws::app::AwsPorts;
use trawl_core::app::App;
use trawl_core::blob::{BlobStore, Body, Layout, segment};
use trawl_core::deliver::{Deliverer, DeliveryLimits, DeliveryReport};
use trawl_core::store::{ClaimOutcome, CrawlStore, FinishOutcome, TaskRecords, TaskStore};
use trawl_core::sweep::LocalDeliveryTrigger;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, StorageLayout};
use trawl_domain::task::{FetchRecord, NewTask, Span, Status, now_ms};

const PAGES: usize = 20;

fn page_path(i: usize) -> String {
    format!("/p/{i}.html")
}

/// Version `v` of page `i`: the links of `linked_site`, and text of its own (so that each
/// version is stored anew).
fn serve(site: &Site, pages: impl IntoIterator<Item = usize>, v: usize) {
    for i in pages {
        let links: String = [i + 1, i + 2, 0]
            .iter()
            .filter(|&&j| j < PAGES)
            .map(|j| format!(r#"<a href="/p/{j}.html">{j}</a> "#))
            .collect();
        let text: String = (0..150).map(|w| format!("w{}-{v} ", w * (i + 7))).collect();
        site.route(
            &page_path(i),
            Route::html(format!("<h1>page {i} v{v}</h1>{links}{text}")),
        );
    }
}

/// `trawl crawl` of the site from `start` as crawl `c`, on segments, recrawled daily.
fn crawl_args(start: &str) -> Vec<&str> {
    vec![
        "crawl",
        start,
        "--allow-private-networks",
        "--json",
        "--crawl-id",
        "c",
        "--recrawl-every",
        "1d",
        "--layout",
        "segments",
    ]
}

/// Runs trawl, asserting success; its JSON output.
async fn run(args: &[&str], dir: &Path) -> Value {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

/// The segment files under the data directory, with their sizes.
fn segments(data: &Path) -> BTreeMap<PathBuf, u64> {
    let mut found = BTreeMap::new();
    let mut pending = vec![data.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if dir.ends_with("segments") {
                found.insert(path, entry.metadata().unwrap().len());
            }
        }
    }
    found
}

/// The deliveries of the crawl's run with files, by id (a directory emptied by retention stays
/// behind on the data directory, as an emptied S3 prefix does not).
fn deliveries(data: &Path, crawl_id: &str) -> Vec<String> {
    let crawl = data.join(format!("deliveries/crawl={crawl_id}"));
    let mut ids = Vec::new();
    for run in std::fs::read_dir(crawl).unwrap() {
        for delivery in std::fs::read_dir(run.unwrap().path()).unwrap() {
            let delivery = delivery.unwrap();
            if std::fs::read_dir(delivery.path()).unwrap().next().is_some() {
                ids.push(delivery.file_name().to_string_lossy().into_owned());
            }
        }
    }
    ids.sort();
    ids
}

/// Reads every task's page where its fetch record points now, and checks it against its md5.
async fn assert_every_page_reads_back(site: &Site, data: &str, dir: &Path) {
    for i in 0..PAGES {
        let url = site.url(&page_path(i));
        let task = run(&["tasks", "show", &url, "--json", "--data-dir", data], dir).await;
        let (Some(object), Some(offset), Some(length)) = (
            task["object"].as_str(),
            task["offset"].as_u64(),
            task["length"].as_u64(),
        ) else {
            panic!("no place in a segment: {task}");
        };
        let mut file = std::fs::File::open(object).unwrap_or_else(|e| panic!("{object}: {e}"));
        file.seek(SeekFrom::Start(offset)).unwrap();
        let mut span = vec![0; usize::try_from(length).unwrap()];
        file.read_exact(&mut span).unwrap();
        let page = trawl_core::blob::segment::decode(object, &span)
            .unwrap_or_else(|e| panic!("{url} at {object}:{offset}: {e}"));
        let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(&page.body));
        assert_eq!(Some(md5.as_str()), task["md5"].as_str(), "{url}");
    }
}

fn upkeep(run: &Value) -> &Value {
    &run["upkeep"]
}

#[tokio::test]
async fn a_recrawled_crawl_keeping_one_delivery_frees_the_segments_its_changes_left() {
    // GIVEN a 20-page site crawled on segments with a daily recrawl, keeping the last
    // delivery only (compaction at its default threshold, 50%)
    let site = linked_site(PAGES).await;
    serve(&site, 0..PAGES, 1);
    let dir = temp_dir("compaction");
    let data_dir = dir.join("data");
    let data = data_dir.to_str().unwrap();
    let start = site.url(&page_path(0));
    let mut args = crawl_args(&start);
    args.extend(["--keep-deliveries", "1", "--data-dir", data]);
    let first = run(&args, &dir).await;
    // AND the same crawl keeping every delivery (the default), in a data directory of its own
    let kept_dir = dir.join("kept");
    let kept = kept_dir.to_str().unwrap();
    let mut twin = crawl_args(&start);
    twin.extend(["--data-dir", kept]);
    let recrawl_kept = || async {
        let ran = run(&["recrawl", "--json", "--data-dir", kept], &dir).await;
        assert!(ran["upkeep"].is_null(), "{ran}");
    };
    assert!(run(&twin, &dir).await["upkeep"].is_null());
    // The segment the crawl appended to is still open in its process: left alone.
    let compaction = &upkeep(&first)["compaction"];
    assert_eq!(
        (&compaction["segments"], &compaction["rewritten"]),
        (&1.into(), &0.into()),
        "{first}"
    );
    let gen0 = segments(&data_dir);
    assert_eq!(gen0.len(), 1);
    let gen0_bytes: u64 = gen0.values().sum();

    // WHEN 15 of its pages change and the next generation runs
    serve(&site, 5..PAGES, 2);
    let second = run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    recrawl_kept().await;

    // THEN the first delivery is removed, the second kept
    let up = upkeep(&second);
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000001"], "{up}");
    assert_eq!(
        up["retention"]["removed"],
        serde_json::json!(["gen-000000"])
    );
    // AND the first segment, a quarter live, is rewritten: its 5 live pages copied to the
    // second one, which the second delivery does not prevent; the first stays, held by the
    // second delivery, whose pages point into it
    let c = &up["compaction"];
    assert_eq!(c["rewritten"], 1, "{up}");
    assert_eq!(c["pages_moved"], 5, "{up}");
    assert_eq!(c["pages_refused"], 0, "{up}");
    assert_eq!(c["deleted"], 0, "{up}");
    let copied = c["bytes_copied"].as_u64().unwrap();
    assert_eq!(c["live_bytes"], copied, "{up}");
    assert!(
        copied * 2 < gen0_bytes && copied > 0,
        "{copied} of {gen0_bytes}"
    );
    // AND every page reads back where its task points, and the kept delivery's manifest
    // still opens each page where it was (warcio checks each record's URI and md5)
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(second["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let gen1 = segments(&data_dir);
    assert_eq!(gen1.len(), 2);
    assert!(gen1.contains_key(gen0.keys().next().unwrap()));

    // WHEN the same pages change again and a third generation runs
    serve(&site, 5..PAGES, 3);
    let third = run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    recrawl_kept().await;

    // THEN the second delivery is removed, and with it the last pointer into the first
    // segment: that segment is deleted, its bytes freed
    let up = upkeep(&third);
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000002"], "{up}");
    let c = &up["compaction"];
    assert_eq!(c["deleted"], 1, "{up}");
    assert_eq!(c["bytes_freed"], gen0_bytes, "{up}");
    // AND the second segment (its 15 pages changed since, its 5 copies live) is rewritten
    assert_eq!(c["rewritten"], 1, "{up}");
    assert_eq!(c["pages_moved"], 5, "{up}");
    // AND the disk holds what the pass found, plus its copies, less what it freed
    let gen2 = segments(&data_dir);
    let on_disk: u64 = gen2.values().sum();
    let expected = c["bytes"].as_u64().unwrap() + c["bytes_copied"].as_u64().unwrap()
        - c["bytes_freed"].as_u64().unwrap();
    assert_eq!(on_disk, expected, "{up}");
    assert!(!gen2.contains_key(gen0.keys().next().unwrap()));
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(third["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);

    // WHEN a fourth generation finds nothing changed
    let fourth = run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    recrawl_kept().await;

    // THEN the second segment goes too: what is left is the live pages, and the garbage of
    // the last segment only
    let c = &upkeep(&fourth)["compaction"];
    assert_eq!(c["deleted"], 1, "{fourth}");
    let gen3 = segments(&data_dir);
    let on_disk: u64 = gen3.values().sum();
    let kept_bytes: u64 = segments(&kept_dir).values().sum();
    eprintln!(
        "segment bytes on disk: gen 0 {gen0_bytes}, gen 1 {}, gen 2 {}, gen 3 {on_disk}; live {}; keeping every delivery: {kept_bytes} in {} deliveries",
        gen1.values().sum::<u64>(),
        gen2.values().sum::<u64>(),
        c["live_bytes"],
        deliveries(&kept_dir, "c").len()
    );
    // AND the crawl keeping every delivery deleted nothing: it holds every version stored
    assert!(kept_bytes > on_disk * 2, "{kept_bytes} against {on_disk}");
    assert_eq!(deliveries(&kept_dir, "c").len(), 4);
    assert_eq!(gen3.len(), 1, "{gen3:?}");
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(fourth["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_compaction_stopped_by_its_budget_goes_on_at_the_next_pass() {
    // GIVEN a crawl whose three generations kept every delivery: half of the first
    // segment's pages changed in the second, half of the second's in the third
    let site = linked_site(PAGES).await;
    serve(&site, 0..PAGES, 1);
    let dir = temp_dir("compaction-budget");
    let data_dir = dir.join("data");
    let data = data_dir.to_str().unwrap();
    let start = site.url(&page_path(0));
    let mut args = crawl_args(&start);
    args.extend(["--data-dir", data]);
    let first = run(&args, &dir).await;
    assert!(first.get("upkeep").is_none_or(Value::is_null), "{first}");
    serve(&site, 0..10, 2);
    run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    serve(&site, 0..5, 3);
    let third = run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    let before = segments(&data_dir);
    assert_eq!(before.len(), 3);

    // WHEN it is set to keep one delivery and rewrite segments below 60% live, and a pass
    // may copy 1 byte
    let shown = run(&["config", "show", "--json", "--data-dir", data], &dir).await;
    let mut config = shown.get("config").cloned().unwrap_or(shown);
    config["delivery"]["keep_generations"] = 1.into();
    config["storage"]["compact_below_percent"] = 60.into();
    let file = dir.join("config.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let mut set = vec!["config", "set", "--file", file, "--json"];
    set.extend(["--data-dir", data]);
    run(&set, &dir).await;
    let compact = ["compact", "--max-bytes", "1", "--json", "--data-dir", data];
    let pass = run(&compact, &dir).await;

    // THEN the two older deliveries go, and one of the two half-live segments is rewritten:
    // the pass says it stopped short
    let up = &pass["upkeep"];
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000002"], "{up}");
    let c = &up["compaction"];
    assert_eq!(
        (&c["rewritten"], &c["complete"]),
        (&1.into(), &false.into()),
        "{up}"
    );
    let moved_first = c["pages_moved"].as_u64();
    assert_every_page_reads_back(&site, data, &dir).await;

    // WHEN the pass runs again
    let pass = run(&compact, &dir).await;

    // THEN it rewrites the other one and is done; both stay while the kept delivery points
    // into them, and every page, and every line of that delivery, still reads back
    let c = &pass["upkeep"]["compaction"];
    assert_eq!(
        (&c["rewritten"], &c["complete"]),
        (&1.into(), &true.into()),
        "{pass}"
    );
    let mut moved = [moved_first, c["pages_moved"].as_u64()];
    moved.sort();
    assert_eq!(moved, [Some(5), Some(10)], "{pass}");
    assert_eq!(c["held"], 1, "{pass}");
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(third["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let _ = std::fs::remove_dir_all(dir);
}

/// Pages of the S3 test: their URLs on a host nobody fetches (the test stores them itself).
const S3_PAGES: usize = 8;

fn s3_url(i: usize) -> String {
    format!("http://compaction.example/p/{i}")
}

/// One generation of `crawl` stored on the stack as the crawler stores it: the pages whose
/// version is `version` (the others keep theirs) appended together in one segment PUT, then
/// each task finished with its place (an unchanged page keeps the place it had); the crawl
/// completed for `generation`.
async fn store_generation(
    app: &App<AwsPorts>,
    crawl: &CrawlId,
    generation: u64,
    changed: &[usize],
    version: usize,
) {
    let now = now_ms();
    let store = &app.store;
    let mut leases = Vec::new();
    for i in 0..S3_PAGES {
        let id = CanonicalUrl::parse(&s3_url(i)).unwrap().task_id();
        if generation > 0 {
            assert!(
                store
                    .reschedule(crawl, &id, &[Status::Succeeded], now)
                    .await
                    .unwrap()
            );
        }
        let ClaimOutcome::Claimed { lease, task } =
            store.claim(crawl, &id, 60_000, now).await.unwrap()
        else {
            panic!("claim refused");
        };
        leases.push((i, lease, task.fetch));
    }
    let mut records = Vec::new();
    let mut bodies = Vec::new();
    for (i, _, _) in leases.iter().filter(|(i, _, _)| changed.contains(i)) {
        let text: String = (0..200)
            .map(|w| format!("w{}-{version} ", w * (i + 3)))
            .collect();
        let body = Body::new(format!("<p>page {i} v{version}</p>{text}"));
        let url = s3_url(*i);
        let page = segment::Page {
            target_uri: &url,
            fetched_at: now,
            http_status: 200,
            content_type: Some("text/html"),
            body: &body,
            items: None,
        };
        records.push((*i, segment::encode(&page).unwrap().records));
        bodies.push(body);
    }
    let all: Vec<u8> = records.iter().flat_map(|(_, r)| r.to_vec()).collect();
    let dir = app.layout.segments_prefix(crawl);
    let appended = app.blobs.append(&dir, all.into()).await.unwrap();
    let mut offset = appended.span.offset;
    let mut placed = BTreeMap::new();
    for ((i, r), body) in records.iter().zip(&bodies) {
        let span = Span {
            offset,
            length: r.len() as u64,
            items: 0,
        };
        offset += r.len() as u64;
        let record = FetchRecord {
            object_key: Some(appended.key.clone()),
            span: Some(span),
            md5: Some(body.md5_hex()),
            http_status: 200,
            content_type: Some("text/html".into()),
            content_length: body.bytes().len() as u64,
            fetched_at: now,
            ..FetchRecord::default()
        };
        placed.insert(*i, record);
    }
    for (i, lease, before) in leases {
        let record = match placed.remove(&i) {
            Some(record) => record,
            None => FetchRecord {
                fetched_at: now,
                ..before.expect("an unchanged page was fetched before")
            },
        };
        let finished = store.finish(&lease, &record, now).await.unwrap();
        assert!(
            matches!(finished, FinishOutcome::Finished { .. }),
            "{finished:?}"
        );
    }
    assert!(
        store
            .complete_crawl(crawl, generation, "test", now)
            .await
            .unwrap()
    );
}

/// Asserts that every task's page reads back from S3 where its fetch record points, md5 checked.
async fn assert_every_page_reads_back_from_s3(app: &App<AwsPorts>, crawl: &CrawlId) {
    for i in 0..S3_PAGES {
        let id = CanonicalUrl::parse(&s3_url(i)).unwrap().task_id();
        let task = app.store.get(crawl, &id).await.unwrap().unwrap();
        let fetch = task.fetch.unwrap();
        let page = segment::read_page(&app.blobs, &fetch)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("page {i} points at missing bytes: {fetch:?}"));
        assert_eq!(Some(Body::new(page.body).md5_hex()), fetch.md5, "page {i}");
    }
}

/// Delivers `crawl` through the deliverer Lambda's handler (a direct event), as if `later_ms`
/// from now (its segments then older than the crawl's lease).
async fn deliver_on_lambda(
    handler: &Handler<AwsPorts, LocalDeliveryTrigger>,
    crawl: &CrawlId,
    later_ms: i64,
) -> DeliveryReport {
    let event = serde_json::json!({"crawl_id": crawl.as_str()});
    let response = handler
        .deliver(event, now_ms() + later_ms, None)
        .await
        .unwrap();
    let DelivererResponse::Delivery(report) = response else {
        panic!("a direct event answers with its delivery");
    };
    *report
}

/// The S3 test's stack: the deliverer's handler over moto, and a crawl on segments keeping its
/// last delivery, its pages seeded as the seeder seeds them (their host's due list written;
/// its turn message sent to a queue nobody reads here).
async fn s3_crawl() -> (
    Arc<App<AwsPorts>>,
    Handler<AwsPorts, LocalDeliveryTrigger>,
    CrawlId,
) {
    let stack = aws_stack(&moto::shared().endpoint).await;
    let app = App::new(stack.store, stack.blobs, stack.queue, stack.calls)
        .with_layout(Layout::new("pages"));
    let app = Arc::new(app);
    let handler = Handler {
        deliverer: Deliverer::new(app.clone(), S3_BASE, DeliveryLimits::DEFAULT),
        continuation: LocalDeliveryTrigger::default(),
    };
    let crawl = CrawlId::parse(&unique("compact")).unwrap();
    let mut config = CrawlConfig::default();
    config.storage.layout = StorageLayout::Segments;
    config.delivery.keep_generations = Some(1);
    let store = &app.store;
    let record = Crawl::new(crawl.clone(), config, now_ms());
    store.create_crawl(&record).await.unwrap();
    let tasks: Vec<NewTask> = (0..S3_PAGES)
        .map(|i| NewTask {
            lane: None,
            priority: Default::default(),
            url: CanonicalUrl::parse(&s3_url(i)).unwrap(),
            depth: 0,
            parent: None,
            data: None,
        })
        .collect();
    trawl_core::frontier::add_tasks(store, &app.queue, &record, tasks, now_ms())
        .await
        .unwrap();
    (app, handler, crawl)
}

/// Only the manifest's object URIs are made of it.
const S3_BASE: &str = "s3://the-bucket";

#[tokio::test]
async fn the_deliverer_lambda_keeps_one_delivery_and_compacts_segments_on_s3() {
    // GIVEN a crawl on segments in S3 and DynamoDB (moto) keeping its last delivery, its 8
    // pages stored in one segment, delivered by the deliverer's handler
    let (app, handler, crawl) = s3_crawl().await;
    let store = &app.store;
    let all: Vec<usize> = (0..S3_PAGES).collect();
    store_generation(&app, &crawl, 0, &all, 1).await;
    let segments_dir = app.layout.segments_prefix(&crawl);
    // Within the crawl's lease a segment may still be about to be pointed at: left alone.
    let first = deliver_on_lambda(&handler, &crawl, 0).await;
    let c = first.upkeep.unwrap().compaction.unwrap();
    assert_eq!((c.segments, c.rewritten, c.deleted), (1, 0, 0), "{c:?}");
    let gen0 = app.blobs.list(&segments_dir).await.unwrap();

    // WHEN 6 of the 8 pages change in the next generation, delivered once the segments are
    // older than the lease
    app.store.reopen_crawl(&crawl, now_ms()).await.unwrap();
    store_generation(&app, &crawl, 1, &all[2..], 2).await;
    let later = i64::try_from(CrawlConfig::default().lease_ms).unwrap() + 60_000;
    let second = deliver_on_lambda(&handler, &crawl, later).await;

    // THEN the first delivery is gone from the bucket; the first segment, a quarter live, is
    // rewritten (its 2 live pages in a PUT of their own) and held by the second delivery
    let upkeep = second.upkeep.unwrap();
    assert_eq!(upkeep.retention.unwrap().removed, ["gen-000000"]);
    let run = trawl_core::deliver::run_prefix(
        &app.layout,
        &store.get_crawl(&crawl).await.unwrap().unwrap(),
    );
    let delivered = app.blobs.list(&run).await.unwrap();
    assert!(
        delivered.iter().all(|k| k.contains("/gen-000001/")),
        "{delivered:?}"
    );
    let c = upkeep.compaction.unwrap();
    assert_eq!(
        (c.rewritten, c.pages_moved, c.pages_refused, c.deleted),
        (1, 2, 0, 0),
        "{c:?}"
    );
    assert_every_page_reads_back_from_s3(&app, &crawl).await;
    let gen1 = app.blobs.list(&segments_dir).await.unwrap();
    assert_eq!(gen1.len(), 3, "{gen1:?}");

    // WHEN the same pages change again
    app.store.reopen_crawl(&crawl, now_ms()).await.unwrap();
    store_generation(&app, &crawl, 2, &all[2..], 3).await;
    let third = deliver_on_lambda(&handler, &crawl, later).await;

    // THEN the first segment (emptied) and the second (all replaced) are deleted with the
    // delivery that pointed into them: what is left is the copies' segment and the third's
    let c = third.upkeep.unwrap().compaction.unwrap();
    assert_eq!(c.deleted, 2, "{c:?}");
    let left = app.blobs.list(&segments_dir).await.unwrap();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.contains(&gen0[0]), "{left:?}");
    assert_eq!(
        c.bytes_freed + left_bytes(&app, &left).await,
        c.bytes,
        "{c:?}"
    );
    assert_every_page_reads_back_from_s3(&app, &crawl).await;
    // AND the kept delivery's manifest opens each page where it names it
    let manifest = app
        .blobs
        .get(&format!("{}manifest-00000.jsonl.gz", third.prefix))
        .await
        .unwrap()
        .unwrap();
    let mut opened = 0;
    for line in crate::delivering::gz_lines(&manifest) {
        let line: Value = serde_json::from_str(&line).unwrap();
        let key = line["object"].as_str().unwrap();
        let key = key.strip_prefix(&format!("{S3_BASE}/")).unwrap();
        let (offset, length) = (
            line["offset"].as_u64().unwrap(),
            line["length"].as_u64().unwrap(),
        );
        let span = app
            .blobs
            .get_range(key, offset, length)
            .await
            .unwrap()
            .unwrap();
        let page = segment::decode(key, &span).unwrap();
        assert_eq!(
            Some(Body::new(page.body).md5_hex().as_str()),
            line["md5"].as_str()
        );
        opened += 1;
    }
    assert_eq!(opened, S3_PAGES);
}

/// The bytes of the segments `keys`.
async fn left_bytes(app: &App<AwsPorts>, keys: &[String]) -> u64 {
    let mut bytes = 0;
    for key in keys {
        bytes += app.blobs.get(key).await.unwrap().unwrap().len() as u64;
    }
    bytes
}
