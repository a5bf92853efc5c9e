//! Section `text`: the CPU the main-text analysis (`analysis.text`) adds per page, as the
//! crawler runs it on each body it fetches, measured as this thread's CPU time (as the
//! extraction section does). On the fixture site's ~20 KB pages, then on real pages: the Rust
//! documentation the toolchain ships (`rustc --print sysroot`, `share/doc/rust/html`: the
//! book's chapters, std's module pages and its largest type pages), and the PDFs under
//! `/usr/share/doc`. Beside it, for scale, the title/description/language pass
//! (`analysis.page`) and html5ever's parse alone (what an extracted page costs).

use crate::error::{BenchResult, check};
use crate::extract::thread_cpu_ns;
use crate::report::Figure;
use crate::site;
use std::path::{Path, PathBuf};
use trawl_domain::crawl::Analysis;

const SECTION: &str = "text";
/// Pages of each kind of std's documentation taken (sorted by path, so runs agree).
const STD_TYPE_PAGES: usize = 40;

/// What is timed per page.
#[derive(Clone, Copy)]
enum Work {
    /// `analysis.text`: the main text (readability over its own html5ever tree).
    Text,
    /// `analysis.page`: the one lol_html pass for the title, description and language.
    Page,
    /// html5ever's parse alone.
    Parse,
}

/// Wall time each sample runs at least, the items passed over again and again: the thread's
/// CPU clock moves by scheduler ticks (4 ms here), so a shorter sample would be mostly tick.
const SAMPLE_TIME: std::time::Duration = std::time::Duration::from_millis(300);

/// CPU milliseconds per item of `work` over `items`, one sample per run.
fn per_item_ms<T>(items: &[T], runs: usize, mut work: impl FnMut(&T) -> usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (cpu0, wall0) = (thread_cpu_ns(), std::time::Instant::now());
        let (mut done, mut kept) = (0usize, 0usize);
        while done == 0 || wall0.elapsed() < SAMPLE_TIME {
            for item in items {
                kept += work(item);
            }
            done += items.len();
        }
        std::hint::black_box(kept);
        let ns = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => wall0.elapsed().as_nanos() as f64,
        };
        samples.push(ns / 1e6 / done.max(1) as f64);
    }
    samples
}

/// CPU milliseconds per body of `work` over `bodies`, one sample per run.
fn per_body_ms(work: Work, bodies: &[Vec<u8>], runs: usize) -> Vec<f64> {
    let wanted = Analysis {
        page: false,
        text: true,
    };
    per_item_ms(bodies, runs, |body| match work {
        Work::Text => trawl_core::discover::analyse_body(&wanted, body, Some("text/html"))
            .and_then(|a| a.text)
            .map_or(0, |t| t.len()),
        Work::Page => trawl_core::discover::analyse(body)
            .title
            .map_or(0, |t| t.len()),
        Work::Parse => trawl_core::extract::parse(body).tree.nodes().count(),
    })
}

/// The HTML files of the toolchain's documentation: the book's chapters, std's module pages,
/// and the first `STD_TYPE_PAGES` of its struct pages (some near 1 MB).
fn real_pages() -> Result<Vec<PathBuf>, String> {
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc --print sysroot: {e}"))?;
    let html =
        PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim()).join("share/doc/rust/html");
    let listed = |dir: &Path, keep: &dyn Fn(&Path) -> bool| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| keep(p))
            .collect();
        files.sort();
        files
    };
    let is_html = |p: &Path| p.extension().is_some_and(|e| e == "html");
    let mut pages = listed(&html.join("book"), &is_html);
    let modules = listed(&html.join("std"), &|p: &Path| p.is_dir());
    pages.extend(
        modules
            .iter()
            .map(|m| m.join("index.html"))
            .filter(|p| p.is_file()),
    );
    let types: Vec<PathBuf> = modules
        .iter()
        .flat_map(|m| {
            listed(m, &|p: &Path| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("struct."))
            })
        })
        .take(STD_TYPE_PAGES)
        .collect();
    pages.extend(types);
    if pages.len() < 100 {
        return Err(format!(
            "{} pages under {} (is the rust-docs component installed?)",
            pages.len(),
            html.display()
        ));
    }
    Ok(pages)
}

/// The PDFs under `/usr/share/doc` (a few on a Debian machine with -doc packages).
fn real_pdfs() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "pdf") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("/usr/share/doc"), &mut found);
    found.sort();
    found
}

pub fn run(pages: usize, runs: usize) -> BenchResult<Vec<Figure>> {
    let sample = pages.min(1_000);
    let fixture: Vec<Vec<u8>> = (0..sample)
        .map(|i| site::page(i, sample).to_vec())
        .collect();
    let mut figures = Vec::new();
    let mut timed = |label: &str, bodies: &[Vec<u8>]| {
        for (work, what, unit_name) in [
            (Work::Text, "main text (analysis.text)", "ms"),
            (
                Work::Page,
                "title, description, language (analysis.page)",
                "ms",
            ),
            (Work::Parse, "html5ever parse alone, for scale", "ms"),
        ] {
            figures.push(Figure::of(
                SECTION,
                format!("CPU per page, {what}: {label}"),
                unit_name,
                &per_body_ms(work, bodies, runs),
            ));
        }
    };
    timed(
        &format!("fixture site ({sample} pages of ~20 KB)"),
        &fixture,
    );

    let paths = real_pages().map_err(|e| check(SECTION, e))?;
    let real: Vec<Vec<u8>> = paths.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    let kb = real.iter().map(Vec::len).sum::<usize>() as f64 / real.len().max(1) as f64 / 1e3;
    timed(
        &format!(
            "Rust documentation ({} pages, {kb:.0} KB on average)",
            real.len()
        ),
        &real,
    );
    // What the text gives on them: how many have one, how many are cut or skipped as too
    // large, and the text of one chapter, to be read.
    let wanted = Analysis {
        page: false,
        text: true,
    };
    let analysed: Vec<_> = real
        .iter()
        .map(|b| trawl_core::discover::analyse_body(&wanted, b, Some("text/html")))
        .collect();
    let share = |keep: &dyn Fn(&trawl_domain::task::PageAnalysis) -> bool| {
        100.0 * analysed.iter().flatten().filter(|a| keep(a)).count() as f64
            / real.len().max(1) as f64
    };
    figures.push(Figure::single(
        SECTION,
        "Rust documentation: pages with a main text",
        "%",
        share(&|a| a.text.is_some()),
    ));
    figures.push(Figure::single(
        SECTION,
        "Rust documentation: texts cut at 4 KB",
        "%",
        share(&|a| a.text_cut),
    ));
    figures.push(Figure::single(
        SECTION,
        "Rust documentation: pages past the element or depth bound (no text)",
        "%",
        share(&|a| a.text_error.is_some()),
    ));
    if let Some((path, Some(text))) = paths
        .iter()
        .zip(&analysed)
        .find(|(p, _)| p.ends_with("book/ch08-01-vectors.html"))
        .map(|(p, a)| (p, a.as_ref().and_then(|a| a.text.as_deref())))
    {
        let excerpt: String = text.chars().take(400).collect();
        eprintln!("  text of {}:\n{excerpt}\n  …", path.display());
    }

    let pdfs: Vec<(PathBuf, Vec<u8>)> = real_pdfs()
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    for (path, pdf) in &pdfs {
        let read = trawl_core::discover::pdf_text(pdf);
        let samples = per_item_ms(std::slice::from_ref(pdf), runs, |pdf| {
            trawl_core::discover::pdf_text(pdf).map_or(0, |t| t.len())
        });
        let outcome = match &read {
            Ok(text) => format!("{} bytes of text read", text.len()),
            Err(e) => format!("error: {e}"),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        figures.push(Figure::of(
            SECTION,
            format!(
                "CPU per PDF, text read until 4 KB: {} ({} KB; {outcome})",
                name.unwrap_or_default(),
                pdf.len() / 1_000
            ),
            "ms",
            &samples,
        ));
    }
    Ok(figures)
}
