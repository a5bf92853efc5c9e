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
