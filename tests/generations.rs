//! Generations a user drives from the CLI: a crawl that recrawls, the next generation now with
//! its delta, a reset, a configuration that does not change behind the user's back, and the
//! checker's dry run.

use crate::cli::{json_of, linked_site, temp_dir, trawl, warcio_check};
use crate::delivering::gz_lines;
use crate::site::Route;
use serde_json::Value;
use std::path::Path;

const PAGES: usize = 20;
const CHANGED: [usize; 5] = [2, 5, 8, 11, 14];
const REMOVED: [usize; 3] = [17, 18, 19];
/// A page that answers 200 but says it is gone (a soft-404 rule recognises it).
const SOFT_GONE: usize = 3;
/// A page that says it is withdrawn, which a soft-404 rule takes for gone at once.
const WITHDRAWN: usize = 4;
/// The soft-404 rule's reference page (known gone; not linked from the site).
const REFERENCE: &str = "/gone-reference";

/// The summary of the delivery a `--json` crawl run reports.
fn delivered_summary(run: &Value) -> Value {
    let delivery = run["delivery"].as_str().unwrap_or_else(|| panic!("{run}"));
    let text = std::fs::read_to_string(Path::new(delivery).join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn page_path(i: usize) -> String {
    format!("/p/{i}.html")
}

#[tokio::test]
async fn a_crawl_is_recrawled_with_its_delta_then_reset_and_fetched_again() {
    // GIVEN a site of 20 linked pages, crawled with a daily recrawl and a 1 s retry backoff, a
    // page missing at a check checked again at once (the two checks that make it gone within
    // one generation; their spacing is tested in `freshness`), a soft-404 rule whose
    // reference page it recognises, and one that marks a page gone at once
    let site = linked_site(PAGES).await;
    site.route(REFERENCE, Route::html("<h1>Sorry, this moved away</h1>"));
    let dir = temp_dir("generations");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let config = dir.join("config.json");
    let rules = serde_json::json!({
        "retry": {"base_delay_ms": 1000},
        "recrawl": {"missing_after": 2, "missing_recheck_ms": 0,
                    "soft_404": [{"selector": "h1", "text": "moved away",
                                  "reference_url": site.url(REFERENCE)},
                                 {"xpath": "//div[@id='status']/@data-state = 'withdrawn'",
                                  "at_once": true}]},
    });
    std::fs::write(&config, rules.to_string()).unwrap();
    let start = site.url("/p/0.html");
    let crawl = |extra: &'static [&'static str]| {
        let (start, config) = (start.clone(), config.clone());
        let dir = dir.clone();
        async move {
            let mut args = vec![
                "crawl",
                start.as_str(),
                "--allow-private-networks",
                "--recrawl-every",
                "1d",
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data,
                "--json",
            ];
            args.extend_from_slice(extra);
            trawl(&args, &dir).await
        }
    };
    let first = crawl(&[]).await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = json_of(&first);
    assert_eq!(first["counts"]["succeeded"], PAGES);
    assert_eq!(delivered_summary(&first)["delta"]["new"], PAGES);
    // (the sweep re-tested the reference page, and the rule recognised it)
    assert!(site.hits(REFERENCE) >= 1);
    assert_eq!(delivered_summary(&first)["soft_404_reference_misses"], 0);

    // AND its configuration is the one asked for
    let shown = json_of(&trawl(&["config", "show", "--json", "--data-dir", data], &dir).await);
    assert_eq!(shown["recrawl"]["interval_ms"], 86_400_000);
    assert_eq!(shown["retry"]["base_delay_ms"], 1_000);

    // WHEN the same crawl is run again with other options
    let other = crawl(&["--per-host", "2"]).await;

    // THEN it is refused, saying where the configuration differs and what to do
    assert_eq!(other.status.code(), Some(2));
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(
        said.contains("politeness") && said.contains("--update-config"),
        "{said}"
    );

    // GIVEN 5 pages changed and 3 removed
    for i in CHANGED {
        let links = format!(
            r#"<a href="/p/{}.html">n</a> <a href="/p/0.html">0</a>"#,
            i + 1
        );
        site.route(
            &page_path(i),
            Route::html(format!("<h1>page {i}, v2</h1>{links}")),
        );
    }
    for i in REMOVED {
        site.route(&page_path(i), Route::status(404));
    }
    site.route(
        &page_path(SOFT_GONE),
        Route::html("<h1>This page moved away</h1>"),
    );
    site.route(
        &page_path(WITHDRAWN),
        Route::html(r#"<h1>Four</h1><div id="status" data-state="withdrawn"></div>"#),
    );
    // AND the site's "not found" page reworded: the rule no longer recognises its reference
    site.route(REFERENCE, Route::html("<h1>Nothing here</h1>"));

    // WHEN the checker's dry run looks at a removed page
    let hits_before = site.hits(&page_path(17));
    let check = json_of(
        &trawl(
            &[
                "check",
                &site.url(&page_path(17)),
                "--allow-private-networks",
                "--json",
                "--data-dir",
                data,
            ],
            &dir,
        )
        .await,
    );

    // THEN it says what the first 404 would do (keep the page, missing once), and writes
    // nothing
    assert_eq!(site.hits(&page_path(17)), hits_before + 1);
    assert_eq!(
        (check["status_after"].as_u64(), check["missing"].as_u64()),
        (Some(40), Some(1)),
        "{check}"
    );
    let task = json_of(
        &trawl(
            &[
                "tasks",
                "show",
                &site.url(&page_path(17)),
                "--json",
                "--data-dir",
                data,
            ],
            &dir,
        )
        .await,
    );
    assert_eq!(task["status"], "succeeded", "{task}");

    // WHEN the next generation starts now
    let recrawl = trawl(&["recrawl", "--json", "--data-dir", data], &dir).await;

    // THEN every page was asked again, the removed ones twice (the withdrawn one once), and
    // the delta says 5 changed and 5 gone (the soft 404s too)
    assert!(
        recrawl.status.success(),
        "{}",
        String::from_utf8_lossy(&recrawl.stderr)
    );
    let logged = String::from_utf8_lossy(&recrawl.stderr);
    assert!(
        logged.contains("no longer recognises its reference page"),
        "{logged}"
    );
    let recrawl = json_of(&recrawl);
    let delta = &delivered_summary(&recrawl)["delta"];
    assert_eq!(
        (&delta["changed"], &delta["gone"], &delta["new"]),
        (
            &Value::from(CHANGED.len()),
            &Value::from(REMOVED.len() + 2),
            &Value::from(0)
        ),
        "{delta}"
    );
    assert_eq!(
        delta["unchanged"],
        PAGES - CHANGED.len() - REMOVED.len() - 2
    );
    for i in REMOVED {
        // The first crawl, two 404s in a row, and the dry run's fetch of page 17.
        let expected = if i == 17 { 4 } else { 3 };
        assert_eq!(site.hits(&page_path(i)), expected, "page {i}");
    }
    assert_eq!(recrawl["counts"]["gone"], REMOVED.len() + 2);
    assert_eq!(
        site.hits(&page_path(SOFT_GONE)),
        3,
        "one fetch, then two soft 404s"
    );
    assert_eq!(
        site.hits(&page_path(WITHDRAWN)),
        2,
        "one fetch, then a soft 404 marked gone at once"
    );
    // AND the sweep's re-test of the reference page was logged as an error and counted
    assert_eq!(delivered_summary(&recrawl)["soft_404_reference_misses"], 1);

    // WHEN the crawl is reset
    let hits: Vec<u64> = (0..PAGES).map(|i| site.hits(&page_path(i))).collect();
    let reset = trawl(&["reset", "--json", "--data-dir", data], &dir).await;

    // THEN everything is fetched again, in full
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    for (i, before) in hits.iter().enumerate() {
        assert!(
            site.hits(&page_path(i)) > *before,
            "page {i} was not fetched again"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_delivery_of_changed_pages_copies_only_what_its_delta_calls_new_or_changed() {
    for layout in ["segments", "objects"] {
        // GIVEN a site of 20 linked pages crawled with a daily recrawl, its deliveries
        // copying only the pages new or changed since the previous one
        let site = linked_site(PAGES).await;
        let dir = temp_dir(&format!("changed-{layout}"));
        let data = dir.join("data");
        let data = data.to_str().unwrap();
        let start = site.url(&page_path(0));
        let mut args = vec!["crawl", &start, "--allow-private-networks", "--json"];
        args.extend(["--recrawl-every", "1d", "--layout", layout]);
        args.extend(["--deliver-pages", "changed", "--data-dir", data]);
        let first = trawl(&args, &dir).await;
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );

        // THEN the first delivery copies every page (all new), and names each where it is
        // stored
        let first = json_of(&first);
        let mut sorted: Vec<String> = (0..PAGES).map(|i| site.url(&page_path(i))).collect();
        sorted.sort();
        let delivery = Path::new(first["delivery"].as_str().unwrap()).to_path_buf();
        let read = warcio_check(&delivery).await;
        assert_eq!(read["changed_uris"], serde_json::json!(sorted), "{read}");
        assert_eq!(read["files"], 0, "no copy of every page: {read}");
        let warc = &delivered_summary(&first)["warc"];
        assert_eq!(
            (&warc["pages"], &warc["referenced"]),
            (&20.into(), &20.into())
        );

        // WHEN 5 pages change and the next generation runs
        for i in CHANGED {
            site.route(&page_path(i), Route::html(format!("<h1>page {i}, v2</h1>")));
        }
        let recrawl = trawl(&["recrawl", "--json", "--data-dir", data], &dir).await;
        assert!(
            recrawl.status.success(),
            "{}",
            String::from_utf8_lossy(&recrawl.stderr)
        );

        // THEN its delivery copies those 5 pages only, warcio reads them, and every page is
        // still named where it is stored (on segments, each offset opens its response)
        let recrawl = json_of(&recrawl);
        let delivery = Path::new(recrawl["delivery"].as_str().unwrap()).to_path_buf();
        let read = warcio_check(&delivery).await;
        let mut changed: Vec<String> = CHANGED.iter().map(|&i| site.url(&page_path(i))).collect();
        changed.sort();
        assert_eq!(
            read["changed_uris"],
            serde_json::json!(changed),
            "{layout}: {read}"
        );
        let offsets = if layout == "segments" { PAGES } else { 0 };
        assert_eq!(read["manifest_offsets"], offsets, "{read}");
        let summary = delivered_summary(&recrawl);
        assert_eq!(summary["delta"]["changed"], CHANGED.len(), "{summary}");
        let warc = &summary["warc"];
        assert_eq!(
            (&warc["pages"], &warc["referenced"]),
            (&5.into(), &20.into())
        );
        // AND each delta line names its task, as the manifest does
        let delta = std::fs::read(delivery.join("delta-00000.jsonl.gz")).unwrap();
        for line in gz_lines(&delta) {
            let line: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(line["task_id"].as_str().map(str::len), Some(32), "{line}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn tasks_show_tells_when_a_page_is_fetched_again_and_its_schedule_factor() {
    // GIVEN a page crawled on an adaptive schedule, and one on a fixed interval
    let site = linked_site(1).await;
    let dir = temp_dir("tasks-show-schedule");
    let url = site.url(&page_path(0));
    for (crawl_id, schedule) in [("adaptive", "--adaptive"), ("fixed", "--recrawl-every")] {
        let data = dir.join(crawl_id);
        let data = data.to_str().unwrap();
        let mut args = vec!["crawl", &url, "--allow-private-networks", "--json"];
        args.extend(["--crawl-id", crawl_id, "--data-dir", data, schedule]);
        if schedule == "--recrawl-every" {
            args.push("6h");
        }
        let crawled = trawl(&args, &dir).await;
        assert!(
            crawled.status.success(),
            "{}",
            String::from_utf8_lossy(&crawled.stderr)
        );

        // WHEN its task is shown
        let shown =
            json_of(&trawl(&["tasks", "show", &url, "--data-dir", data, "--json"], &dir).await);

        // THEN it says when the page is fetched again, after its fetch, and its schedule's
        // factor
        let next = shown["next_fetch_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{shown}"));
        let fetched = shown["fetched_at"].as_str().unwrap();
        assert!(next > fetched, "{shown}");
        assert!(
            shown["schedule_factor"].as_f64().is_some_and(|f| f >= 1.0),
            "{shown}"
        );
        assert_eq!(shown["unchanged_fetches"], 0, "{shown}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn trawl_check_names_the_soft_404_marker_that_matched_css_or_xpath() {
    // GIVEN a crawl whose soft-404 rules mark gone pages by a CSS selector and by an XPath
    let site = crate::site::Site::start().await;
    site.route("/ok.html", Route::html("<h1>Hello</h1>"));
    site.route(
        "/withdrawn.html",
        Route::html(r#"<h1>Offer</h1><div id="status" data-state="Withdrawn">x</div>"#),
    );
    site.route("/missing.html", Route::html("<h1>Page not found</h1>"));
    let dir = temp_dir("check-markers");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let config = dir.join("config.json");
    let rules = serde_json::json!({"recrawl": {"soft_404": [
        {"selector": "h1", "text": "not found"},
        {"xpath": "//div[@id='status']/@data-state", "text": "withdrawn"},
    ]}});
    std::fs::write(&config, rules.to_string()).unwrap();
    let crawl = trawl(
        &[
            "crawl",
            &site.url("/ok.html"),
            "--allow-private-networks",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    assert!(
        crawl.status.success(),
        "{}",
        String::from_utf8_lossy(&crawl.stderr)
    );

    let check = |path: &'static str, json: bool| {
        let (url, dir) = (site.url(path), dir.clone());
        async move {
            let mut args = vec![
                "check",
                url.as_str(),
                "--allow-private-networks",
                "--data-dir",
                data,
            ];
            if json {
                args.push("--json");
            }
            let out = trawl(&args, &dir).await;
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
    };

    // WHEN the checker looks at a page the XPath rule marks
    let shown = check("/withdrawn.html", false).await;
    // THEN it says which rule and marker matched
    assert!(
        shown.contains(
            r#"soft 404: recrawl.soft_404[1] matched, its marker xpath "//div[@id='status']/@data-state" saying "withdrawn""#
        ),
        "{shown}"
    );
    let json: Value = serde_json::from_str(&check("/withdrawn.html", true).await).unwrap();
    assert_eq!(json["soft_404"]["rule"], 1, "{json}");
    assert_eq!(
        json["soft_404"]["marker"],
        r#"xpath "//div[@id='status']/@data-state""#
    );

    // WHEN it looks at a page the CSS rule marks, and at one neither marks
    let json: Value = serde_json::from_str(&check("/missing.html", true).await).unwrap();
    // THEN the first is the CSS rule's, the second no soft 404
    assert_eq!(
        (&json["soft_404"]["rule"], &json["soft_404"]["marker"]),
        (&Value::from(0), &Value::from(r#"css "h1""#)),
        "{json}"
    );
    let shown = check("/ok.html", false).await;
    assert!(!shown.contains("soft 404"), "{shown}");
    let _ = std::fs::remove_dir_all(dir);
}
