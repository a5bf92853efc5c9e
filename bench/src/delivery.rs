//! Section: deliveries that keep up. The real deliverer (`trawl_core::deliver::Deliverer`)
//! delivers one completed crawl (pages over many hosts, a body each) with 1, 4 and 16 writers
//! (`DeliveryLimits::writers`, concurrent within one call, as in the deliverer Lambda):
//!
//! - behind modelled round trips (`latency`: the in-memory store as DynamoDB, 5 ms a request as
//!   the sweeper section models it; the in-memory object store as S3, 20 ms a request), where a
//!   writer waits on reads as the deployed one does: pages/s and the requests made;
//! - on moto (DynamoDB and S3 through the AWS adapters, no added latency): pages/s, bounded by
//!   moto's own speed, and the requests the adapters made, by service.
//!
//! The same generation is delivered once per writer count (its files removed in between), and
//! each delivery must hold every page.
//!
//! Then the delta on its own (also `--only delta`), in process (`deliver::compare_manifests`,
//! the delivery's own code, over an in-memory object store that counts the bytes read): two
//! generated manifests of 10^5 and 10^6 lines (10^6 not with `--quick`; 1% changed, 1% new, 1%
//! removed), in segments of 10^5 lines, at the default limit (10^6 entries: each side sorted in
//! one run) and at a limit ten times below the lines (ten runs a side, spilled through the
//! object store): bytes read (manifests and runs) per manifest byte, runs, and the entries held
//! in memory at most.
//!
//! Then one generation by layout (also `--only delivery-layouts`; issue 29): 100,000 pages
//! (10,000 with `--quick`) of ~2 KB, stored as objects, or appended to segments, delivered with
//! their pages copied (objects; segments) or by reference (segments), in process over the
//! in-memory stores: time, the deliverer's CPU per page, the bytes it read from the object
//! store and the object requests it made, beside the bytes the pages hold.

use crate::error::{BenchResult, Context, check};
use crate::latency::{Latency, LatentBlobs, LatentStore};
use crate::machine::cpu_seconds;
use crate::report::Figure;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_core::app::{App, Ports, Store, Unwired};
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::blob::{BlobStore, Body, Layout, ObjectMeta, segment};
use trawl_core::deliver::{Deliverer, DeliveryLimits, ManifestLine, compare_manifests};
use trawl_core::frontier::seed_tasks;
use trawl_core::store::memory::MemoryStore;
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskStore};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, DeliveredPages, StorageLayout};
use trawl_domain::task::{FetchRecord, Millis, NewTask, Status, now_ms};

const SECTION: &str = "delivery";
/// A DynamoDB request's round trip, as the sweeper section models it.
const DYNAMODB_ROUND_TRIP: Duration = Duration::from_millis(5);
/// An S3 request's round trip (a GET of a small object: tens of milliseconds to the first byte).
const S3_ROUND_TRIP: Duration = Duration::from_millis(20);
const WRITERS: [u32; 3] = [1, 4, 16];
/// Claims and finishes at once while filling a crawl.
const FILL_AT_ONCE: usize = 16;
const LEASE_MS: u64 = 600_000;

/// `pages` succeeded pages over `hosts` hosts, each with a body of its own (about 2 KB), the
/// crawl completed: seeded, claimed and finished through the store's port.
async fn fill<S: Store, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    pages: usize,
    hosts: usize,
    label: &str,
) -> BenchResult<CrawlId> {
    fill_as(
        store,
        blobs,
        layout,
        CrawlConfig::default(),
        pages,
        hosts,
        label,
    )
    .await
}

/// `fill`, the crawl configured with `config` (its bodies laid out as it says).
pub(crate) async fn fill_as<S: Store, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    config: CrawlConfig,
    pages: usize,
    hosts: usize,
    label: &str,
) -> BenchResult<CrawlId> {
    let now = now_ms();
    let id = CrawlId::parse(&format!("deliver-{label}-{pages}")).step("crawl id")?;
    let segments = config.storage.layout == StorageLayout::Segments;
    let crawl = Crawl::new(id.clone(), config, now);
    store.create_crawl(&crawl).await.step("create crawl")?;
    let urls: Vec<CanonicalUrl> = (0..pages)
        .map(|i| CanonicalUrl::parse(&format!("http://h{}.deliver.invalid/p{i}", i % hosts)))
        .collect::<Result<_, _>>()
        .step("urls")?;
    for chunk in urls.chunks(1_000) {
        let tasks = chunk
            .iter()
            .map(|url| NewTask {
                lane: None,
                priority: Default::default(),
                url: url.clone(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        seed_tasks(store, &crawl, tasks, now).await.step("seed")?;
    }
    let finished = futures_util::stream::iter(&urls)
        .map(|url| finish_one(store, blobs, layout, segments, &id, url, 0, now))
        .buffer_unordered(FILL_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    finished.into_iter().collect::<BenchResult<Vec<()>>>()?;
    let completed = store
        .complete_crawl(&id, 0, "bench", now + 1)
        .await
        .step("complete")?;
    if !completed {
        return Err(check("complete crawl", "refused".to_owned()));
    }
    Ok(id)
}

/// Claims and finishes `url`'s task with a stored body (`version` changes it).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn finish_one<S: Store, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    segments: bool,
    crawl: &CrawlId,
    url: &CanonicalUrl,
    version: u32,
    now: Millis,
) -> BenchResult<()> {
    let task_id = url.task_id();
    let ClaimOutcome::Claimed { lease, .. } = store
        .claim(crawl, &task_id, LEASE_MS, now)
        .await
        .step("claim")?
    else {
        return Err(check("claim", format!("{url} not claimed")));
    };
    let body = Body::new(format!(
        "<html><p>{url}, version {version}</p>{}</html>",
        "x".repeat(2_000)
    ));
    let md5 = body.md5_hex();
    let length = body.bytes().len() as u64;
    let (key, span) = if segments {
        let page = segment::Page {
            target_uri: url.as_str(),
            fetched_at: now,
            http_status: 200,
            content_type: Some("text/html"),
            body: &body,
            items: None,
        };
        let encoded = segment::encode(&page).step("encode page")?;
        let dir = layout.segments_prefix(crawl);
        let appended = blobs
            .append(&dir, encoded.records)
            .await
            .step("append page")?;
        (appended.key, Some(appended.span))
    } else {
        let key = layout.html_key(crawl, &task_id, &md5);
        let meta = ObjectMeta {
            content_type: "text/html".into(),
            source_url: url.as_str().to_owned(),
            compress: false,
        };
        blobs.put(&key, body, &meta).await.step("store body")?;
        (key, None)
    };
    let record = FetchRecord {
        object_key: Some(key),
        span,
        md5: Some(md5),
        http_status: 200,
        content_type: Some("text/html".into()),
        content_length: length,
        fetched_at: now,
        ..FetchRecord::default()
    };
    store.finish(&lease, &record, now).await.step("finish")?;
    Ok(())
}

/// One delivery's measures.
struct Run {
    writers: u32,
    secs: f64,
    /// CPU seconds of this process (the deliverer; moto is another process).
    cpu: f64,
    requests: u64,
}

/// One delivery of the crawl's generation 0 by `writers` writers: seconds and CPU seconds
/// taken, and its key prefix.
async fn deliver_once<P: Ports>(
    app: &Arc<App<P>>,
    crawl: &CrawlId,
    writers: u32,
    pages: usize,
) -> BenchResult<(f64, f64, String)> {
    let (secs, cpu, prefix, _) = deliver_generation(app, crawl, 0, writers, pages).await?;
    Ok((secs, cpu, prefix))
}

/// `deliver_once` of `generation`, and the pages it copied.
async fn deliver_generation<P: Ports>(
    app: &Arc<App<P>>,
    crawl: &CrawlId,
    generation: u64,
    writers: u32,
    pages: usize,
) -> BenchResult<(f64, f64, String, u64)> {
    let limits = DeliveryLimits {
        writers,
        tasks_per_writer: 1,
        ..DeliveryLimits::DEFAULT
    };
    let deliverer = Deliverer::new(app.clone(), "", limits);
    let (started, cpu) = (Instant::now(), cpu_seconds("self")?);
    let report = deliverer
        .deliver(crawl, Some(generation), now_ms())
        .await
        .step("deliver")?;
    let (secs, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds("self")? - cpu);
    let warc = &report.summary.warc;
    // Every page copied, or referenced (and the changed ones copied besides).
    let delivered = warc.pages.max(warc.referenced);
    if delivered != pages as u64 || report.summary.tasks != pages as u64 || warc.problems > 0 {
        return Err(check(
            "delivery",
            format!(
                "{} tasks, {delivered} pages delivered of {pages}, {} problems",
                report.summary.tasks, warc.problems
            ),
        ));
    }
    Ok((secs, cpu, report.prefix, warc.pages))
}

/// Removes a delivery's files, so that its generation is delivered again.
async fn forget<B: BlobStore>(blobs: &B, prefix: &str) -> BenchResult<()> {
    for key in blobs.list(prefix).await.step("list delivery")? {
        blobs.delete(&key).await.step("remove delivery")?;
    }
    Ok(())
}

fn figures(label: &str, pages: usize, hosts: usize, runs: &[Run]) -> Vec<Figure> {
    let mut out = Vec::new();
    for &Run {
        writers,
        secs,
        cpu,
        requests,
    } in runs
    {
        let name = |what: &str| {
            format!("{label}, {pages} pages over {hosts} hosts, {writers} writer(s): {what}")
        };
        out.push(Figure::single(
            SECTION,
            name("pages/s"),
            "pages/s",
            pages as f64 / secs.max(1e-9),
        ));
        out.push(Figure::single(
            SECTION,
            name("CPU of the deliverer per page"),
            "ms",
            cpu * 1e3 / pages as f64,
        ));
        out.push(Figure::single(
            SECTION,
            name("requests per page"),
            "requests",
            requests as f64 / pages as f64,
        ));
        out.push(Figure::single(
            SECTION,
            name("requests"),
            "requests",
            requests as f64,
        ));
    }
    out
}

/// The crawl behind modelled round trips.
async fn modelled(pages: usize, hosts: usize) -> BenchResult<Vec<Figure>> {
    eprintln!("  delivery: {pages} pages over {hosts} hosts, modelled round trips");
    let memory = MemoryStore::new();
    let objects = MemoryBlobStore::new();
    let layout = Layout::new("bench");
    let crawl = fill(&memory, &objects, &layout, pages, hosts, "modelled").await?;
    let store = LatentStore::new(memory.clone(), Latency::new(DYNAMODB_ROUND_TRIP));
    let blobs = LatentBlobs::new(objects.clone(), S3_ROUND_TRIP);
    let calls = Arc::new(CallCounts::default());
    let app = Arc::new(App::new(store, blobs, Unwired, calls).with_layout(layout));
    let mut runs = Vec::new();
    for writers in WRITERS {
        eprintln!("  delivery: modelled, {writers} writer(s)");
        let (secs, cpu, prefix) = deliver_once(&app, &crawl, writers, pages).await?;
        let requests = app.store.layer.take_requests() + app.blobs.take_requests();
        forget(&objects, &prefix).await?;
        runs.push(Run {
            writers,
            secs,
            cpu,
            requests,
        });
    }
    Ok(figures(
        "modelled round trips (DynamoDB 5 ms, S3 20 ms)",
        pages,
        hosts,
        &runs,
    ))
}

/// The crawl on moto, through the AWS adapters.
async fn on_moto(pages: usize, hosts: usize) -> BenchResult<Vec<Figure>> {
    eprintln!("  delivery: {pages} pages over {hosts} hosts, moto");
    let moto = crate::moto::Moto::start(true)?;
    let stack = crate::moto::stack(&moto.endpoint, "bench-delivery").await?;
    let layout = Layout::new("bench");
    let crawl = fill(&stack.store, &stack.blobs, &layout, pages, hosts, "moto").await?;
    let calls = stack.calls.clone();
    let app =
        Arc::new(App::new(stack.store, stack.blobs, Unwired, calls.clone()).with_layout(layout));
    let mut runs = Vec::new();
    let mut by_service = Vec::new();
    for writers in WRITERS {
        eprintln!("  delivery: moto, {writers} writer(s)");
        calls.reset();
        let (secs, cpu, prefix) = deliver_once(&app, &crawl, writers, pages).await?;
        let dynamodb = calls.service_total("dynamodb");
        let s3 = calls.service_total("s3");
        forget(&app.blobs, &prefix).await?;
        runs.push(Run {
            writers,
            secs,
            cpu,
            requests: dynamodb + s3,
        });
        by_service.push((writers, dynamodb, s3));
    }
    let mut out = figures("moto", pages, hosts, &runs);
    for (writers, dynamodb, s3) in by_service {
        out.push(Figure::single(
            SECTION,
            format!("moto, {writers} writer(s): DynamoDB requests per page"),
            "requests",
            dynamodb as f64 / pages as f64,
        ));
        out.push(Figure::single(
            SECTION,
            format!("moto, {writers} writer(s): S3 requests per page"),
            "requests",
            s3 as f64 / pages as f64,
        ));
    }
    Ok(out)
}

/// Lines per generated manifest segment.
const SEGMENT_LINES: usize = 100_000;

/// Line `i` of a generated manifest of generation `generation`: every 100th page changed in
/// the second generation.
fn manifest_line(i: usize, generation: u32) -> BenchResult<ManifestLine> {
    let url = CanonicalUrl::parse(&format!("http://h{}.delta.invalid/p{i}", i % 1_000))
        .step("delta url")?;
    let version = if generation > 0 && i.is_multiple_of(100) {
        1
    } else {
        0
    };
    Ok(ManifestLine {
        url: url.as_str().to_owned(),
        task_id: url.task_id().to_string(),
        final_url: None,
        status: "succeeded".to_owned(),
        http_status: Some(200),
        content_type: Some("text/html".to_owned()),
        md5: Some(format!("{:016x}{version:016x}", i)),
        object: Some(format!("s3://bucket/trawl/pk={}", url.task_id())),
        offset: None,
        length: None,
        items_length: None,
        title: None,
        description: None,
        language: None,
        text: None,
        text_cut: false,
        text_error: None,
        bytes: Some(2_000),
        fetched_at: Some("2027-01-15T08:00:00Z".to_owned()),
        first_fetched_at: None,
        depth: 1,
        retries: 0,
        last_error: None,
        data: None,
    })
}

/// Writes the manifest of pages `pages` as segments under `prefix`: their keys and bytes.
async fn write_manifest<B: BlobStore>(
    blobs: &B,
    prefix: &str,
    pages: std::ops::Range<usize>,
    generation: u32,
) -> BenchResult<(Vec<String>, u64)> {
    use std::io::Write as _;
    let mut keys = Vec::new();
    let mut bytes = 0;
    let all: Vec<usize> = pages.collect();
    for (n, chunk) in all.chunks(SEGMENT_LINES).enumerate() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for &i in chunk {
            let line = serde_json::to_vec(&manifest_line(i, generation)?).step("manifest line")?;
            gz.write_all(&line).step("gzip")?;
            gz.write_all(b"\n").step("gzip")?;
        }
        let segment = gz.finish().step("gzip")?;
        bytes += segment.len() as u64;
        let key = format!("{prefix}manifest-{n:05}.jsonl.gz");
        let meta = ObjectMeta {
            content_type: "application/gzip".into(),
            source_url: String::new(),
            compress: false,
        };
        blobs
            .put(&key, Body::new(segment), &meta)
            .await
            .step("store manifest")?;
        keys.push(key);
    }
    Ok((keys, bytes))
}

/// The delta of a crawl of `lines` pages between two generations, `index_entries` held at
/// most: bytes read (manifests and sorted runs) per manifest byte (both generations'), the
/// runs spilled and the entries held.
async fn delta_once(lines: usize, index_entries: u64) -> BenchResult<Vec<Figure>> {
    eprintln!("  delivery: delta of {lines} lines, index of {index_entries} entries");
    let blobs = LatentBlobs::new(MemoryBlobStore::new(), Duration::ZERO);
    // The second generation lost the first 1% and gained as many new pages.
    let gone = lines / 100;
    let (previous, previous_bytes) = write_manifest(&blobs.inner, "gen-0/", 0..lines, 0).await?;
    let (current, current_bytes) =
        write_manifest(&blobs.inner, "gen-1/", gone..lines + gone, 1).await?;
    let limits = DeliveryLimits {
        delta_index_entries: index_entries,
        ..DeliveryLimits::DEFAULT
    };
    let (counts, files, held) = compare_manifests(&blobs, &previous, &current, "gen-1/", &limits)
        .await
        .step("delta")?;
    let read = blobs.take_bytes_read();
    // Pages kept whose number is a multiple of 100 changed.
    let expected = (gone as u64, gone as u64, ((lines - gone) / 100) as u64);
    if (counts.new, counts.gone, counts.changed) != expected {
        return Err(check("delta", format!("{counts:?} for {lines} lines")));
    }
    let name = |what: &str| {
        format!("delta of {lines} manifest lines, index of {index_entries} entries: {what}")
    };
    let manifests = previous_bytes + current_bytes;
    Ok(vec![
        Figure::single(SECTION, name("sorted runs"), "runs", held.runs as f64),
        Figure::single(
            SECTION,
            name("peak entries held"),
            "entries",
            held.peak_entries as f64,
        ),
        Figure::single(SECTION, name("delta files"), "files", files.len() as f64),
        Figure::single(
            SECTION,
            name("manifest bytes (both generations)"),
            "MB",
            manifests as f64 / 1e6,
        ),
        Figure::single(SECTION, name("bytes read"), "MB", read as f64 / 1e6),
        Figure::single(
            SECTION,
            name("bytes read per manifest byte"),
            "x",
            read as f64 / manifests as f64,
        ),
        Figure::single(
            SECTION,
            name("bytes read per line"),
            "B",
            read as f64 / lines as f64,
        ),
    ])
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let (modelled_pages, moto_pages) = if quick { (2_000, 300) } else { (10_000, 1_000) };
    let mut figures = modelled(modelled_pages, 100).await?;
    figures.extend(on_moto(moto_pages, 24).await?);
    figures.extend(run_delta(quick).await?);
    figures.extend(run_layouts(quick).await?);
    Ok(figures)
}

/// The generation after a segments crawl's first, 1% of its pages changed, delivered with
/// the changed pages copied (`DeliveredPages::Changed`): what it reads and copies.
async fn run_changed(pages: usize, hosts: usize) -> BenchResult<Vec<Figure>> {
    eprintln!(
        "  delivery: {pages} pages, the next generation with 1% changed, segments, pages changed"
    );
    let memory = MemoryStore::new();
    let objects = MemoryBlobStore::new();
    let keys = Layout::new("bench");
    let mut config = CrawlConfig::default();
    config.storage.layout = StorageLayout::Segments;
    config.delivery.pages = Some(DeliveredPages::Changed);
    let label = "segments-changed";
    let crawl = fill_as(&memory, &objects, &keys, config, pages, hosts, label).await?;
    let blobs = LatentBlobs::new(objects, Duration::ZERO);
    let calls = Arc::new(CallCounts::default());
    let app = Arc::new(App::new(memory, blobs, Unwired, calls).with_layout(keys.clone()));
    let writers = DeliveryLimits::DEFAULT.writers_for(pages as u64);
    // The first generation: every page new, every page copied.
    deliver_generation(&app, &crawl, 0, writers, pages).await?;
    let now = now_ms();
    if !app.store.reopen_crawl(&crawl, now).await.step("reopen")? {
        return Err(check("reopen crawl", "refused".to_owned()));
    }
    let changed: Vec<CanonicalUrl> = (0..pages)
        .step_by(100)
        .map(|i| CanonicalUrl::parse(&format!("http://h{}.deliver.invalid/p{i}", i % hosts)))
        .collect::<Result<_, _>>()
        .step("urls")?;
    for url in &changed {
        let again = app
            .store
            .reschedule(&crawl, &url.task_id(), &[Status::Succeeded], now)
            .await
            .step("reschedule")?;
        if !again {
            return Err(check("reschedule", format!("{url} refused")));
        }
        finish_one(&app.store, &app.blobs, &keys, true, &crawl, url, 1, now).await?;
    }
    let completed = app
        .store
        .complete_crawl(&crawl, 1, "bench", now + 1)
        .await
        .step("complete")?;
    if !completed {
        return Err(check("complete crawl", "refused".to_owned()));
    }
    let (_, _) = (app.blobs.take_bytes_read(), app.blobs.take_requests());
    let (secs, cpu, _, copied) = deliver_generation(&app, &crawl, 1, writers, pages).await?;
    let (read, requests) = (app.blobs.take_bytes_read(), app.blobs.take_requests());
    let name = |what: &str| {
        format!("next generation of {pages} pages, 1% changed, segments, pages changed: {what}")
    };
    Ok(vec![
        Figure::single(SECTION, name("seconds"), "s", secs),
        Figure::single(
            SECTION,
            name("CPU of the deliverer per page"),
            "ms",
            cpu * 1e3 / pages as f64,
        ),
        Figure::single(SECTION, name("pages copied"), "pages", copied as f64),
        Figure::single(SECTION, name("bytes read"), "MB", read as f64 / 1e6),
        Figure::single(
            SECTION,
            name("object requests"),
            "requests",
            requests as f64,
        ),
    ])
}

/// How a generation is stored and delivered: objects copied, segments copied, segments by
/// reference.
const SHAPES: [(StorageLayout, DeliveredPages); 3] = [
    (StorageLayout::Objects, DeliveredPages::Copy),
    (StorageLayout::Segments, DeliveredPages::Copy),
    (StorageLayout::Segments, DeliveredPages::Reference),
];

/// One generation delivered in each of `SHAPES`, in process (no modelled latency: what is
/// compared is the work, not the waits).
pub async fn run_layouts(quick: bool) -> BenchResult<Vec<Figure>> {
    let pages = if quick { 10_000 } else { 100_000 };
    let hosts = 100;
    let mut out = Vec::new();
    for (layout, delivered) in SHAPES {
        let shape = format!("{}, pages {}", layout.name(), delivered.name());
        eprintln!("  delivery: {pages} pages, {shape}");
        let memory = MemoryStore::new();
        let objects = MemoryBlobStore::new();
        let keys = Layout::new("bench");
        let mut config = CrawlConfig::default();
        config.storage.layout = layout;
        config.delivery.pages = Some(delivered);
        let label = format!("{}-{}", layout.name(), delivered.name());
        let crawl = fill_as(&memory, &objects, &keys, config, pages, hosts, &label).await?;
        let stored = stored_bytes(&objects, &keys, &crawl).await?;
        let blobs = LatentBlobs::new(objects, Duration::ZERO);
        let calls = Arc::new(CallCounts::default());
        let app = Arc::new(App::new(memory, blobs, Unwired, calls).with_layout(keys));
        let limits = DeliveryLimits::DEFAULT;
        let writers = limits.writers_for(pages as u64);
        let (secs, cpu, _) = deliver_once(&app, &crawl, writers, pages).await?;
        let (read, requests) = (app.blobs.take_bytes_read(), app.blobs.take_requests());
        let name = |what: &str| {
            format!("one generation of {pages} pages, {shape}, {writers} writer(s): {what}")
        };
        out.extend([
            Figure::single(SECTION, name("seconds"), "s", secs),
            Figure::single(
                SECTION,
                name("CPU of the deliverer per page"),
                "ms",
                cpu * 1e3 / pages as f64,
            ),
            Figure::single(
                SECTION,
                name("bytes the pages hold (stored)"),
                "MB",
                stored as f64 / 1e6,
            ),
            Figure::single(SECTION, name("bytes read"), "MB", read as f64 / 1e6),
            Figure::single(
                SECTION,
                name("object requests"),
                "requests",
                requests as f64,
            ),
        ]);
    }
    out.extend(run_changed(pages, hosts).await?);
    Ok(out)
}

/// Bytes of the crawl's stored pages (objects or segments) in `blobs`.
async fn stored_bytes(
    blobs: &MemoryBlobStore,
    layout: &Layout,
    crawl: &CrawlId,
) -> BenchResult<u64> {
    let mut total = 0;
    for key in blobs
        .list(&layout.crawl_prefix(crawl))
        .await
        .step("list the pages")?
    {
        let bytes = blobs.get(&key).await.step("read a page")?;
        total += bytes.map_or(0, |b| b.len() as u64);
    }
    Ok(total)
}

/// The delta alone: at the default limit, and at a limit ten times below the lines.
pub async fn run_delta(quick: bool) -> BenchResult<Vec<Figure>> {
    let default_entries = DeliveryLimits::DEFAULT.delta_index_entries;
    let mut deltas = vec![(100_000, default_entries), (100_000, 10_000)];
    if !quick {
        deltas.extend([(1_000_000, default_entries), (1_000_000, 100_000)]);
    }
    let mut figures = Vec::new();
    for (lines, entries) in deltas {
        figures.extend(delta_once(lines, entries).await?);
    }
    Ok(figures)
}
