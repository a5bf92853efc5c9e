//! Extraction cost: a 10-field extractor (`trawl_core::extract`) run on the fixture site's
//! ~20 KB pages, as the crawler runs it on each page it fetches. Measured as this thread's CPU
//! time (`/proc/thread-self/schedstat`; wall time where that is missing), so a busy machine does
//! not inflate it; then the local crawl (section 1's core crawler) with and without the
//! extractor, CPU per page compared, with the data on tmpfs and on disk.

use crate::error::Context;
use crate::error::{BenchResult, check};
use crate::local::{self, CrawlOnce};
use crate::report::Figure;
use crate::site::{self, Site};
use std::path::{Path, PathBuf};
use trawl_core::extract::Extractors;
use trawl_domain::extract::Extractor;

const SECTION: &str = "extract";
/// Fields of the definition.
const FIELDS: usize = 10;

/// Ten fields over the fixture page: text, attributes, HTML, a regex capture, counts, a join;
/// `xpath` decides whether half of them are XPath (the page is then also copied into the XPath
/// document) or all are CSS.
fn definition(xpath: bool) -> serde_json::Value {
    let (title, links, paragraphs, first_href, words) = if xpath {
        (
            serde_json::json!({"xpath": "//title/text()", "processors": ["trim", "required"]}),
            serde_json::json!({"xpath": "count(//nav/a)", "processors": ["number"]}),
            serde_json::json!({"xpath": "count(//p)", "processors": ["number"]}),
            serde_json::json!({"xpath": "//nav/a[1]/@href", "processors": ["absolute_url"]}),
            serde_json::json!({"xpath": "//p[2]", "regex": "(lambda|queue)", "processors": [{"default": "none"}]}),
        )
    } else {
        (
            serde_json::json!({"css": "title", "processors": ["trim", "required"]}),
            serde_json::json!({"css": "nav a", "processors": [{"join": "|"}]}),
            serde_json::json!({"css": "p", "value": "html", "processors": [{"join": ""}]}),
            serde_json::json!({"css": "nav a", "value": "attr(href)", "processors": ["absolute_url"]}),
            serde_json::json!({"css": "p", "regex": "(lambda|queue)", "processors": [{"default": "none"}]}),
        )
    };
    serde_json::json!([{
        "name": "bench",
        "fields": {
            "title": title,
            "links": links,
            "paragraphs": paragraphs,
            "first_href": first_href,
            "words": words,
            "h1": {"css": "h1", "processors": ["trim", "required"]},
            "number": {"css": "h1", "regex": "Page (\\d+)", "processors": ["number"]},
            "link_texts": {"css": "nav a", "processors": ["trim", {"join": ", "}]},
            "nav": {"css": "nav", "value": "html"},
            "first_paragraph": {"css": "p", "processors": ["trim"]}
        }
    }])
}

/// The 10-field extractor (`xpath`: half of its fields XPath), as a crawl configures it.
pub fn extractors(xpath: bool) -> Result<Vec<Extractor>, String> {
    serde_json::from_value(definition(xpath)).map_err(|e| e.to_string())
}

/// This thread's CPU time so far, in nanoseconds (None off Linux).
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// What is timed per fixture page.
#[derive(Clone, Copy)]
enum Work {
    /// The 10-field extractor (`xpath`: 5 of its fields XPath), the page parsed first.
    Extract { xpath: bool },
    /// Only the parse (html5ever), which every extracted page costs whatever its fields.
    Parse,
}

/// Milliseconds of CPU per page of `work` over `pages` fixture pages, one sample per run.
fn per_page_ms(work: Work, pages: usize, runs: usize) -> Result<Vec<f64>, String> {
    let extractors = Extractors::new(&extractors(matches!(work, Work::Extract { xpath: true }))?)
        .map_err(|e| e.to_string())?;
    let extractor = extractors
        .for_url("http://127.0.0.1/p/0.html")
        .ok_or("the extractor matches every page")?;
    let bodies: Vec<_> = (0..pages).map(|i| site::page(i, pages)).collect();
    let base = reqwest::Url::parse("http://127.0.0.1/p/0.html").map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (cpu0, wall0) = (thread_cpu_ns(), std::time::Instant::now());
        let mut invalid = 0;
        let mut nodes = 0;
        for body in &bodies {
            match work {
                Work::Extract { .. } => {
                    let found = extractor.extract(body, &base);
                    invalid += found.items.iter().filter(|i| !i.is_valid()).count();
                }
                Work::Parse => nodes += trawl_core::extract::parse(body).tree.nodes().count(),
            }
        }
        if invalid > 0 {
            return Err(format!("{invalid} fixture pages gave invalid items"));
        }
        if matches!(work, Work::Parse) && nodes < bodies.len() {
            return Err("the fixture pages parsed to nothing".into());
        }
        let ns = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => wall0.elapsed().as_nanos() as f64,
        };
        samples.push(ns / 1e6 / pages.max(1) as f64);
    }
    Ok(samples)
}

pub async fn run(pages: usize, runs: usize) -> BenchResult<Vec<Figure>> {
    let sample = pages.min(1_000);
    let mixed =
        per_page_ms(Work::Extract { xpath: true }, sample, runs).map_err(|e| check(SECTION, e))?;
    let css =
        per_page_ms(Work::Extract { xpath: false }, sample, runs).map_err(|e| check(SECTION, e))?;
    let parse = per_page_ms(Work::Parse, sample, runs).map_err(|e| check(SECTION, e))?;
    let rate: Vec<f64> = mixed.iter().map(|ms| 1_000.0 / ms).collect();
    // What the fields add to the parse, per field (runs paired as they ran).
    let per_field: Vec<f64> = mixed
        .iter()
        .zip(&parse)
        .map(|(all, parse)| (all - parse).max(0.0) / FIELDS as f64 * 1_000.0)
        .collect();
    // The crawl itself, with and without the extractor: on tmpfs (CPU alone), then on disk.
    let site = Site::start(pages)?;
    let client = trawl_core::fetch::http_client()
        .build()
        .step("http client")?;
    let tmpfs = Some(PathBuf::from(local::TMPFS))
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let (without, with) = crawl_pairs(&site, &client, &tmpfs, runs).await?;
    let (disk_without, disk_with) =
        crawl_pairs(&site, &client, &std::env::temp_dir(), runs).await?;
    let disk_ratio: Vec<f64> = disk_with
        .iter()
        .zip(&disk_without)
        .map(|(w, o)| w.cpu_s / o.cpu_s)
        .collect();
    let disk_rate_ratio: Vec<f64> = disk_with
        .iter()
        .zip(&disk_without)
        .map(|(w, o)| o.elapsed_s / w.elapsed_s)
        .collect();
    let (without, with): (Vec<f64>, Vec<f64>) = (
        without
            .iter()
            .map(|c| c.cpu_s / pages as f64 * 1_000.0)
            .collect(),
        with.iter()
            .map(|c| c.cpu_s / pages as f64 * 1_000.0)
            .collect(),
    );
    let ratio: Vec<f64> = with.iter().zip(&without).map(|(w, o)| w / o).collect();
    Ok(vec![
        Figure::of(
            SECTION,
            format!("CPU per ~20 KB page, 10 fields, 5 of them XPath ({sample} pages)"),
            "ms",
            &mixed,
        ),
        Figure::of(
            SECTION,
            "pages extracted per second of one core (10 fields, 5 XPath)",
            "pages/s",
            &rate,
        ),
        Figure::of(
            SECTION,
            "CPU per ~20 KB page, 10 fields, all CSS",
            "ms",
            &css,
        ),
        Figure::of(
            SECTION,
            "of which parsing the page (html5ever), per page",
            "ms",
            &parse,
        ),
        Figure::of(
            SECTION,
            "CPU per field beyond the parse (10 fields, 5 XPath)",
            "µs",
            &per_field,
        ),
        Figure::of(
            SECTION,
            format!("core crawl CPU per page without extraction ({pages} pages, tmpfs)"),
            "ms",
            &without,
        ),
        Figure::of(
            SECTION,
            "core crawl CPU per page extracting 10 fields (5 XPath)",
            "ms",
            &with,
        ),
        Figure::of(
            SECTION,
            "crawl CPU with extraction ÷ without",
            "ratio",
            &ratio,
        )
        .at_most(1.2),
        Figure::of(
            SECTION,
            "data on disk: crawl CPU with extraction ÷ without",
            "ratio",
            &disk_ratio,
        )
        .at_most(1.2),
        Figure::of(
            SECTION,
            "data on disk: pages/s with extraction ÷ without",
            "ratio",
            &disk_rate_ratio,
        ),
    ])
}

/// `runs` crawls of `site` under `root` without the extractor and with it, alternating (so load
/// drifts hit both).
async fn crawl_pairs(
    site: &Site,
    client: &reqwest::Client,
    root: &Path,
    runs: usize,
) -> BenchResult<(Vec<CrawlOnce>, Vec<CrawlOnce>)> {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for run in 0..runs {
        eprintln!(
            "  extraction: crawl run {}/{runs} ({} pages, under {})",
            run + 1,
            site.pages,
            root.display()
        );
        // The embedded default layout: items in the same segment records as their page.
        let layout = trawl_domain::crawl::StorageLayout::Segments;
        without.push(local::checked_crawl(site, client, root, false, layout).await?);
        with.push(local::checked_crawl(site, client, root, true, layout).await?);
    }
    Ok((without, with))
}
