//! `--analyse-pages` (`analysis.page`): each HTML page's title, description and language in its
//! manifest line, kept while its body is unchanged.

use crate::cli::{json_of, temp_dir, trawl};
use crate::freshness::delivered_lines;
use crate::site::{Route, Site};
use serde_json::Value;
use std::path::Path;

async fn run(args: &[&str], dir: &Path) -> Value {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

#[tokio::test]
async fn analysed_pages_give_their_title_description_and_language_in_the_manifest() {
    // GIVEN a page with a head, linking to a page without one
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    site.route(
        "/",
        Route::html(
            r#"<html lang="de"><head><title> Schuhe &amp;
            Stiefel </title><meta name="description" content="Alles über Schuhe"></head>
            <body><a href="/bare">bare</a></body></html>"#,
        ),
    );
    site.route("/bare", Route::html("<p>no head"));
    let dir = temp_dir("analysis");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let home = site.url("/");
    let crawl = |id: &'static str, analyse: bool| {
        let mut args = vec![
            "crawl",
            home.as_str(),
            "--crawl-id",
            id,
            "--data-dir",
            data,
            "--allow-private-networks",
            "--json",
        ];
        args.extend(analyse.then_some("--analyse-pages"));
        args
    };

    // WHEN it is crawled with --analyse-pages
    let first = run(&crawl("analysed", true), &dir).await;

    // THEN the home page's line gives what its head says, the bare page's nothing
    let lines = delivered_lines(&first, "manifest-");
    let line = |lines: &[Value], path: &str| {
        let url = site.url(path);
        lines
            .iter()
            .find(|l| l["url"] == url.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{url}: {lines:?}"))
    };
    let analysed = line(&lines, "/");
    assert_eq!(analysed["title"], "Schuhe & Stiefel", "{analysed}");
    assert_eq!(analysed["description"], "Alles über Schuhe");
    assert_eq!(analysed["language"], "de");
    let bare = line(&lines, "/bare");
    assert!(
        bare.get("title").is_none() && bare.get("language").is_none(),
        "{bare}"
    );

    // WHEN the crawl's next generation fetches the same bodies again
    let next = [
        "recrawl",
        "--crawl-id",
        "analysed",
        "--data-dir",
        data,
        "--json",
    ];
    let second = run(&next, &dir).await;

    // THEN the unchanged page keeps its analysis
    let again = line(&delivered_lines(&second, "manifest-"), "/");
    assert_eq!(
        (&again["title"], &again["language"]),
        (&analysed["title"], &analysed["language"]),
        "{again}"
    );
    assert_eq!(site.hits("/"), 2);

    // AND a crawl that does not ask for the analysis gives none
    let plain = run(&crawl("plain", false), &dir).await;
    let plain = line(&delivered_lines(&plain, "manifest-"), "/");
    assert!(plain.get("title").is_none(), "{plain}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A paragraph of the article pages: long enough for the readability algorithm to take the
/// block holding it for the article.
const PARAGRAPH: &str = "Lambda functions crawl the web one host turn at a time, and each page \
                         is stored beside its fetch record with its links and its items.";

/// A page whose article sits between navigation, a header and a footer (and a script).
fn article_page(title: &str, paragraphs: usize, nav: &str) -> String {
    let article: String = (0..paragraphs)
        .map(|i| format!("<p>{i}. {PARAGRAPH}</p>"))
        .collect();
    format!(
        r#"<html lang="en"><head><title>{title}</title><script>var tracking = 1;</script>
        </head><body><nav>{nav}</nav><header><div class="banner">Sign up for our newsletter
        </div></header><article><h1>{title}</h1>{article}</article>
        <footer>Copyright 2026 Example Corp</footer></body></html>"#
    )
}

/// The site of the text tests: an article page (`/`) linking to a PDF, a malformed PDF and a
/// long article, and a page (`/skipped.html`) that only a seed reaches.
pub(crate) async fn text_site() -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    let nav = r#"<a href="/report.pdf">Report</a> <a href="/broken.pdf">Broken</a>
        <a href="/long.html">Long</a>"#;
    site.route("/", Route::html(article_page("Crawler guide", 3, nav)));
    site.route("/long.html", Route::html(article_page("Long", 60, "")));
    site.route("/skipped.html", Route::html(article_page("Skipped", 3, "")));
    site.route(
        "/report.pdf",
        Route::content(
            "application/pdf",
            include_bytes!("fixtures/report.pdf").as_slice(),
        ),
    );
    site.route(
        "/broken.pdf",
        Route::content("application/pdf", "%PDF-1.7\n1 0 obj << /Type /Catal"),
    );
    site
}

/// The seeds of the text tests: `/` (the rest is linked from it), and `/skipped.html` with
/// data that skips its analysis.
pub(crate) fn text_seeds(site: &Site) -> [String; 2] {
    [
        site.url("/"),
        serde_json::json!({"url": site.url("/skipped.html"), "data": {"_analysis": false}})
            .to_string(),
    ]
}

/// The manifest line of `path`.
fn line_of(lines: &[Value], site: &Site, path: &str) -> Value {
    let url = site.url(path);
    lines
        .iter()
        .find(|l| l["url"] == url.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{url}: {lines:?}"))
}

/// THEN: the article page's text is its article only; the long one's is cut at 4 KB and says
/// so; the PDF's text is read; the malformed PDF gives an error and no text.
pub(crate) fn assert_texts(lines: &[Value], site: &Site) {
    let guide = line_of(lines, site, "/");
    let text = guide["text"].as_str().unwrap_or_else(|| panic!("{guide}"));
    assert!(text.contains("0. Lambda functions crawl the web"), "{text}");
    for boilerplate in ["Report", "newsletter", "Copyright", "tracking"] {
        assert!(!text.contains(boilerplate), "{boilerplate} in {text}");
    }
    assert!(guide.get("text_cut").is_none(), "{guide}");
    let long = line_of(lines, site, "/long.html");
    let text = long["text"].as_str().unwrap_or_else(|| panic!("{long}"));
    assert!(text.len() <= 4_096 && text.len() > 4_000, "{}", text.len());
    assert!(
        text.contains("0. Lambda") && !text.contains("newsletter"),
        "{text}"
    );
    assert_eq!(long["text_cut"], true, "{long}");
    let report = line_of(lines, site, "/report.pdf");
    let text = report["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        text.contains("Annual report 2026") && text.contains("Revenue grew by a third"),
        "{report}"
    );
    let broken = line_of(lines, site, "/broken.pdf");
    assert_eq!(broken["text_error"], "malformed", "{broken}");
    assert!(broken.get("text").is_none(), "{broken}");
}

/// THEN: the page whose seed line says `"_analysis": false` has no analysis, and keeps its
/// data.
pub(crate) fn assert_skipped(lines: &[Value], site: &Site) {
    let skipped = line_of(lines, site, "/skipped.html");
    assert_eq!(skipped["status"], "succeeded", "{skipped}");
    for field in ["title", "language", "text", "text_error"] {
        assert!(skipped.get(field).is_none(), "{field}: {skipped}");
    }
    assert_eq!(skipped["data"]["_analysis"], false, "{skipped}");
}

/// `trawl crawl` of `text_site()` from `text_seeds()`, with `extra` arguments: its JSON.
async fn crawl_text_site(site: &Site, name: &str, extra: &[&str]) -> Value {
    let dir = temp_dir(name);
    let seeds = dir.join("seeds.txt");
    std::fs::write(&seeds, text_seeds(site).join("\n")).unwrap();
    let data = dir.join("data");
    let mut args = vec![
        "crawl",
        "--seeds-file",
        seeds.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--allow-private-networks",
        "--store-content-type",
        "application/pdf",
        "--json",
    ];
    args.extend(extra);
    run(&args, &dir).await
}

#[tokio::test]
async fn analysed_text_is_each_pages_article_and_each_pdfs_text_bounded_a_bad_pdf_an_error() {
    // GIVEN an article page between navigation and a footer, a long one, a PDF and a
    // malformed PDF
    let site = text_site().await;

    // WHEN they are crawled with --analyse-text (and PDFs stored)
    let crawled = crawl_text_site(&site, "analysis-text", &["--analyse-text"]).await;

    // THEN each line gives the page's main text or the PDF's, bounded, or why there is none
    let lines = delivered_lines(&crawled, "manifest-");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_texts(&lines, &site);
    // AND the text alone reads no title (that is --analyse-pages)
    assert!(line_of(&lines, &site, "/").get("title").is_none());
}

#[tokio::test]
async fn a_seed_line_with_analysis_false_skips_the_analysis_of_its_url_only() {
    // GIVEN a seeds file whose second line's data says `"_analysis": false`
    let site = text_site().await;

    // WHEN it is crawled with both analyses
    let crawled = crawl_text_site(
        &site,
        "analysis-skip",
        &["--analyse-pages", "--analyse-text"],
    )
    .await;

    // THEN that URL has no analysis, and the first seed's page has both
    let lines = delivered_lines(&crawled, "manifest-");
    assert_skipped(&lines, &site);
    let guide = line_of(&lines, &site, "/");
    assert_eq!(guide["title"], "Crawler guide", "{guide}");
    assert!(guide["text"].is_string(), "{guide}");
}

#[tokio::test]
async fn a_word_documents_text_is_read_and_a_seed_line_gives_a_files_media_type() {
    // GIVEN a Word document, a PDF served as `application/octet-stream` whose seed line says
    // it is a PDF (`_mime_type`), and a seed line whose media type is not one
    const DOCX: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    let docx = include_bytes!("fixtures/contract.docx").as_slice();
    site.route("/contract.docx", Route::content(DOCX, docx));
    let pdf = include_bytes!("fixtures/report.pdf").as_slice();
    site.route("/download", Route::content("application/octet-stream", pdf));
    site.route("/bad", Route::content("application/octet-stream", pdf));
    let dir = temp_dir("analysis-word");
    let seeds = dir.join("seeds.txt");
    let lines = [
        site.url("/contract.docx"),
        serde_json::json!({"url": site.url("/download"), "data": {"_mime_type": "application/pdf"}})
            .to_string(),
        serde_json::json!({"url": site.url("/bad"), "data": {"_mime_type": "pdf"}}).to_string(),
    ];
    std::fs::write(&seeds, lines.join("\n")).unwrap();
    let data = dir.join("data");

    // WHEN they are crawled with --analyse-text, PDFs and Word documents stored
    let args = [
        "crawl",
        "--seeds-file",
        seeds.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--allow-private-networks",
        "--analyse-text",
        "--store-content-type",
        "application/pdf",
        "--store-content-type",
        DOCX,
        "--json",
    ];
    let crawled = run(&args, &dir).await;

    // THEN the Word document's text is its paragraphs'
    let lines = delivered_lines(&crawled, "manifest-");
    let contract = line_of(&lines, &site, "/contract.docx");
    assert_eq!(
        contract["text"], "Service contract & terms\nSigned in November 2026",
        "{contract}"
    );
    // AND the file the seed line calls a PDF is stored and read as one
    let download = line_of(&lines, &site, "/download");
    assert_eq!(download["content_type"], "application/pdf", "{download}");
    assert!(download["md5"].is_string(), "{download}");
    let text = download["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{download}"));
    assert!(text.contains("Annual report 2026"), "{download}");
    // AND the line whose media type is not one is given up unfetched, saying why
    let bad = line_of(&lines, &site, "/bad");
    assert_eq!(bad["last_error"]["kind"], "invalid_content", "{bad}");
    let message = bad["last_error"]["message"].as_str().unwrap();
    assert!(message.contains("_mime_type"), "{bad}");
    assert_eq!(site.hits("/bad"), 0);
    let _ = std::fs::remove_dir_all(dir);
}
