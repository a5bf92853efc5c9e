//! Section `items`: the delivery's items pass (`deliver::deliver_items`, the deliverer's own
//! code) at two sizes ten times apart (10^5 and 10^6 items; 10^4 and 10^5 with `--quick`), on
//! the embedded backend's file store (so that the data is on disk, not in the process).
//!
//! The generated crawl: listing pages of `PER_LISTING` items, each item linking to a detail
//! page; one item in `DETAIL_EVERY` links to one that was fetched (its fields merged in), the
//! others to none (delivered invalid). The first generation is delivered once; the second,
//! without the first 1% of the listing pages, is delivered against it (its delta: those items
//! gone, the rest unchanged) in a child process per bound, so that its peak resident memory
//! (VmHWM) is the pass's alone: at `BOUND` entries a sorter, and with no bound (every sorter in
//! one run, as the pass held everything before it streamed). Printed: time, peak RSS, runs and
//! the entries held at most.

use crate::child;
use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::machine::peak_rss_mib;
use crate::report::Figure;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use trawl_core::blob::{BlobStore, Body, Layout, ObjectMeta};
use trawl_core::deliver::{DeliveryLimits, ManifestLine, PreviousItems, deliver_items};
use trawl_core::extract::{Item, PageItems};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_embedded::fs::FsBlobStore;

const SECTION: &str = "items";
/// Items per listing page, and the share of items whose detail page was fetched.
const PER_LISTING: usize = 500;
const DETAIL_EVERY: usize = 100;
/// Entries a sorter holds in the bounded passes.
pub const BOUND: u64 = 10_000;
/// Manifest lines per segment.
const SEGMENT_LINES: usize = 10_000;

fn crawl() -> BenchResult<Crawl> {
    let config: CrawlConfig = serde_json::from_value(serde_json::json!({
        "extract": [
            {"name": "listing", "match": "/list/", "base": {"css": "li"},
             "fields": {"title": {"css": "a"}, "price": {"css": "b"},
                        "url": {"xpath": ".//a/@href"}},
             "detail": {"url_field": "url", "extractor": "product"}},
            {"name": "product", "match": "/p/",
             "fields": {"stock": {"css": "i"}, "description": {"css": "p"}}}
        ]
    }))
    .step("items config")?;
    let id = CrawlId::parse("items").step("crawl id")?;
    Ok(Crawl::new(id, config, 0))
}

fn store(dir: &Path) -> FsBlobStore {
    FsBlobStore::new(dir.join("objects"), Arc::new(CallCounts::default()))
}

/// A manifest line of a fetched HTML page at `path`.
fn page(path: &str) -> BenchResult<ManifestLine> {
    let url = CanonicalUrl::parse(&format!("http://shop.invalid/{path}")).step("items url")?;
    Ok(ManifestLine {
        url: url.as_str().to_owned(),
        task_id: url.task_id().to_string(),
        final_url: None,
        status: "succeeded".to_owned(),
        http_status: Some(200),
        content_type: Some("text/html".to_owned()),
        md5: Some(format!("{:032x}", path.len())),
        object: None,
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

fn item(fields: serde_json::Value) -> Item {
    let fields = match fields {
        serde_json::Value::Object(map) => map.into_iter().collect(),
        _ => Default::default(),
    };
    Item {
        fields,
        errors: Vec::new(),
    }
}

/// Writes `lines` as manifest segments under `prefix`.
async fn write_manifest<B: BlobStore>(
    blobs: &B,
    prefix: &str,
    lines: &[ManifestLine],
) -> BenchResult<()> {
    let meta = ObjectMeta {
        content_type: "application/gzip".into(),
        source_url: String::new(),
        compress: false,
    };
    for (n, chunk) in lines.chunks(SEGMENT_LINES).enumerate() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for line in chunk {
            serde_json::to_writer(&mut gz, line).step("manifest line")?;
            gz.write_all(b"\n").step("gzip")?;
        }
        let key = format!("{prefix}manifest-{n:05}.jsonl.gz");
        let body = Body::new(gz.finish().step("gzip")?);
        blobs.put(&key, body, &meta).await.step("store manifest")?;
    }
    Ok(())
}

/// Stores the items of a crawl of `items` listing items and its two generations' manifests
/// (`m-0/`, `m-1/`); delivers the first under `d/gen-0/`: its items file's size.
async fn prepare(dir: &Path, items: usize) -> BenchResult<u64> {
    let blobs = store(dir);
    let crawl = crawl()?;
    let layout = Layout::new("");
    let version = trawl_core::extract::Extractors::new(&crawl.config.extract)
        .step("extractors")?
        .version()
        .to_owned();
    let meta = ObjectMeta {
        content_type: "application/json".into(),
        source_url: String::new(),
        compress: false,
    };
    let put = |line: &ManifestLine, page_items: PageItems| {
        let task = trawl_domain::canonical::TaskId::parse(&line.task_id);
        let md5 = line.md5.clone().unwrap_or_default();
        let blobs = &blobs;
        let layout = &layout;
        let crawl = &crawl;
        let meta = &meta;
        async move {
            let task = task.ok_or_else(|| check("items", "a bad task id"))?;
            let key = Layout::items_key_of(&layout.html_key(&crawl.id, &task, &md5));
            let body = serde_json::to_vec(&page_items).step("items json")?;
            blobs
                .put(&key, Body::new(body), meta)
                .await
                .step("store items")
        }
    };
    let mut listings = Vec::new();
    let mut details = Vec::new();
    for l in 0..items.div_ceil(PER_LISTING) {
        let line = page(&format!("list/{l}"))?;
        let found = (l * PER_LISTING..((l + 1) * PER_LISTING).min(items))
            .map(|i| {
                item(serde_json::json!({
                    "title": format!("Item {i} of the shop's long listing"),
                    "price": (i % 997) as f64 / 10.0,
                    "url": format!("http://shop.invalid/p/{i}"),
                }))
            })
            .collect();
        let listed = PageItems {
            extractor: "listing".to_owned(),
            items: found,
            version: Some(version.clone()),
        };
        put(&line, listed).await?;
        listings.push(line);
    }
    for i in (0..items).step_by(DETAIL_EVERY) {
        let line = page(&format!("p/{i}"))?;
        let detail = PageItems {
            extractor: "product".to_owned(),
            items: vec![item(serde_json::json!({
                "stock": i % 13,
                "description": format!("The description of item {i}, a few words long."),
            }))],
            version: Some(version.clone()),
        };
        put(&line, detail).await?;
        details.push(line);
    }
    let first: Vec<ManifestLine> = listings.iter().chain(&details).cloned().collect();
    let kept = &listings[listings.len() / 100..];
    let second: Vec<ManifestLine> = kept.iter().chain(&details).cloned().collect();
    write_manifest(&blobs, "m-0/", &first).await?;
    write_manifest(&blobs, "m-1/", &second).await?;
    let manifests = blobs.list("m-0/").await.step("list manifests")?;
    let limits = DeliveryLimits {
        items_entries: BOUND,
        ..DeliveryLimits::DEFAULT
    };
    let (files, summary, _) = deliver_items(
        &blobs, &layout, "", &crawl, &manifests, None, "d/gen-0/", &limits,
    )
    .await
    .step("deliver the first generation's items")?;
    if summary.items != items as u64 {
        return Err(check(
            "items",
            format!("{} items of {items}", summary.items),
        ));
    }
    Ok(files.first().map_or(0, |f| f.bytes))
}

/// What the child measured of one pass.
#[derive(Debug, Serialize, Deserialize)]
pub struct Measured {
    items: u64,
    gone: u64,
    seconds: f64,
    peak_rss_mib: f64,
    runs: u64,
    peak_entries: u64,
}

/// The child's side: the second generation's items pass over the store in `dir`, `entries` a
/// sorter, against the first's items file (`previous_bytes` long).
pub fn items_pass_main(
    dir: &Path,
    entries: u64,
    previous_bytes: u64,
    out: &Path,
) -> BenchResult<()> {
    child::main(out, async move {
        let blobs = store(dir);
        let crawl = crawl()?;
        let manifests = blobs.list("m-1/").await.step("list manifests")?;
        let previous = PreviousItems {
            delivery_id: "gen-000000".to_owned(),
            key: "d/gen-0/items.jsonl.gz".to_owned(),
            bytes: previous_bytes,
        };
        let limits = DeliveryLimits {
            items_entries: entries,
            ..DeliveryLimits::DEFAULT
        };
        let prefix = format!("d/gen-1-{entries}/");
        let started = Instant::now();
        let (_, summary, stats) = deliver_items(
            &blobs,
            &Layout::new(""),
            "",
            &crawl,
            &manifests,
            Some(&previous),
            &prefix,
            &limits,
        )
        .await
        .step("deliver the second generation's items")?;
        Ok(Measured {
            items: summary.items,
            gone: summary.delta.gone,
            seconds: started.elapsed().as_secs_f64(),
            peak_rss_mib: peak_rss_mib("self").unwrap_or(0.0),
            runs: stats.runs,
            peak_entries: stats.peak_entries,
        })
    })
}

/// The pass at two sizes, each at `BOUND` entries a sorter and with none.
pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let sizes = if quick {
        [10_000, 100_000]
    } else {
        [100_000, 1_000_000]
    };
    let mut figures = Vec::new();
    for items in sizes {
        let dir = TempDir::new("items")?;
        eprintln!("  items: {items} items, first generation …");
        let previous_bytes = prepare(&dir.0, items).await?;
        let gone = (items.div_ceil(PER_LISTING) / 100 * PER_LISTING) as u64;
        for entries in [BOUND, u64::MAX] {
            let bound = if entries == u64::MAX {
                "no bound".to_owned()
            } else {
                format!("{entries} entries a sorter")
            };
            eprintln!("  items: {items} items, second generation, {bound} …");
            let args = [
                "items-pass".to_owned(),
                "--dir".to_owned(),
                dir.0.display().to_string(),
                "--entries".to_owned(),
                entries.to_string(),
                "--previous-bytes".to_owned(),
                previous_bytes.to_string(),
            ];
            let m: Measured = child::run("the items pass", &args).await?;
            if (m.items, m.gone) != (items as u64 - gone, gone) {
                return Err(check("items", format!("{m:?} for {items} items")));
            }
            eprintln!(
                "  items: {items} items, {bound}: {:.1} s, peak RSS {:.0} MiB, {} runs, {} entries held at most",
                m.seconds, m.peak_rss_mib, m.runs, m.peak_entries
            );
            let name = |what: &str| format!("items pass of {items} items, {bound}: {what}");
            figures.extend([
                Figure::single(SECTION, name("time"), "s", m.seconds),
                Figure::single(SECTION, name("peak RSS"), "MiB", m.peak_rss_mib),
                Figure::single(SECTION, name("sorted runs"), "runs", m.runs as f64),
                Figure::single(
                    SECTION,
                    name("peak entries held"),
                    "entries",
                    m.peak_entries as f64,
                ),
            ]);
        }
    }
    Ok(figures)
}
