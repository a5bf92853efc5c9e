//! Keeping a collection fresh on one machine: `trawl crawl --crawl-id ID` from cron fetches
//! what is due (sweeping a completed crawl first), on virtual time; a reset delivers every page
//! as new; a page missing at one check is kept, one missing at two checks in a row is gone at
//! the second (the same on Lambda: `operator`).

use crate::cli::{json_of, linked_site, temp_dir, trawl};
use crate::client::{Run, config};
use crate::site::Route;
use serde_json::Value;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use trawl_core::clock::SkewedClock;
use trawl_core::runner::RunEnd;
use trawl_core::store::CrawlStore;
use trawl_domain::crawl::CrawlState;
use trawl_domain::estimate::Estimator;

const README: &str = include_str!("../README.md");
const DAY: i64 = 86_400_000;
const PAGES: usize = 5;

fn page_path(i: usize) -> String {
    format!("/p/{i}.html")
}

#[tokio::test]
async fn the_cron_command_fetches_nothing_before_the_recrawl_is_due_and_the_next_generation_after()
{
    // GIVEN a site of 5 linked pages crawled with a daily recrawl, on a clock the test moves
    let site = linked_site(PAGES).await;
    let clock = SkewedClock::default();
    let run = Run::on_clock(&[], Arc::new(clock.clone()));
    let mut config = config(&[&site], serde_json::json!({}));
    config.recrawl.interval_ms = Some(DAY as u64);
    run.crawl(config, &[site.url(&page_path(0))]).await;
    let fetched_once = (0..PAGES).map(|i| site.hits(&page_path(i)));
    assert!(fetched_once.into_iter().all(|hits| hits == 1));

    // WHEN the cron command runs before the pages are due
    let early = run.run().await;

    // THEN it ends with the generation it found, having fetched nothing
    assert_eq!(early, RunEnd::Completed { generation: 0 });
    assert_eq!(site.hits(&page_path(0)), 1);

    // WHEN it runs again a day later
    clock.skip(DAY + 1);
    let due = run.run().await;

    // THEN the next generation was opened, every page fetched again, and completed
    assert_eq!(due, RunEnd::Completed { generation: 1 });
    for i in 0..PAGES {
        assert_eq!(site.hits(&page_path(i)), 2, "page {i}");
    }
    let crawl = run.crawler.store().get_crawl(&run.crawl_id).await.unwrap();
    let crawl = crawl.unwrap();
    assert_eq!((crawl.generation, crawl.state), (1, CrawlState::Completed));
}

#[tokio::test]
async fn the_readmes_cron_line_runs_as_written_and_exits_when_nothing_is_due() {
    // GIVEN the README's crontab line, and a crawl with a daily recrawl made in a directory
    let line = README
        .lines()
        .find(|l| l.starts_with("*/15 * * * * cd "))
        .expect("a crontab line");
    let (_, command) = line.split_once("&& trawl ").expect("cd DIR && trawl …");
    let site = linked_site(PAGES).await;
    let dir = temp_dir("cron");
    let first = trawl(
        &[
            "crawl",
            &site.url(&page_path(0)),
            "--allow-private-networks",
            "--recrawl-every",
            "1d",
            "--crawl-id",
            "example.com",
        ],
        &dir,
    )
    .await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );

    // WHEN cron runs the line there before anything is due
    let args: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(args, ["crawl", "--crawl-id", "example.com"]);
    let cron = trawl(&args, &dir).await;

    // THEN it exits at once with the delivery it has, having fetched nothing
    assert!(
        cron.status.success(),
        "{}",
        String::from_utf8_lossy(&cron.stderr)
    );
    let said = String::from_utf8_lossy(&cron.stdout);
    assert!(said.contains("0 page(s) fetched this run"), "{said}");
    assert!(said.contains("gen-000000"), "{said}");
    assert_eq!(site.hits(&page_path(0)), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// The summary of the delivery a `--json` crawl run reports.
fn delivered_summary(run: &Value) -> Value {
    let delivery = run["delivery"].as_str().unwrap_or_else(|| panic!("{run}"));
    let text = std::fs::read_to_string(Path::new(delivery).join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The lines of a delivery's files whose name starts with `prefix` (`delta-`, `manifest-`).
pub(crate) fn delivered_lines(run: &Value, prefix: &str) -> Vec<Value> {
    let delivery = Path::new(run["delivery"].as_str().unwrap_or_else(|| panic!("{run}")));
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(delivery).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            let mut text = String::new();
            let file = std::fs::File::open(entry.path()).unwrap();
            flate2::read::MultiGzDecoder::new(file)
                .read_to_string(&mut text)
                .unwrap();
            lines.extend(
                text.lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()),
            );
        }
    }
    lines
}

#[tokio::test]
async fn after_a_reset_the_next_delivery_has_every_page_new_in_its_delta() {
    // GIVEN a site of 5 pages crawled and delivered
    let site = linked_site(PAGES).await;
    let dir = temp_dir("reset-delta");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let start = site.url(&page_path(0));
    let args = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--json",
        "--data-dir",
        data,
    ];
    let first = trawl(&args, &dir).await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(delivered_summary(&json_of(&first))["delta"]["new"], PAGES);

    // WHEN the crawl is reset (and crawled again: the pages are the same)
    let reset = trawl(&["reset", "--json", "--data-dir", data], &dir).await;

    // THEN every page is fetched again and delivered as new, none as unchanged
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    let reset = json_of(&reset);
    let delta = &delivered_summary(&reset)["delta"];
    assert_eq!(
        (&delta["new"], &delta["unchanged"]),
        (&Value::from(PAGES), &Value::from(0)),
        "{delta}"
    );
    let lines = delivered_lines(&reset, "delta-");
    assert_eq!(lines.len(), PAGES);
    assert!(
        lines
            .iter()
            .all(|l| l["change"] == "new" && l["reason"] == "fetched afresh (reset)"),
        "{lines:?}"
    );
    for i in 0..PAGES {
        assert_eq!(site.hits(&page_path(i)), 2, "page {i}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_page_missing_at_one_check_is_kept_and_one_missing_at_two_checks_is_gone_at_the_second() {
    // GIVEN a site of 5 pages crawled with a daily recrawl
    let site = linked_site(PAGES).await;
    let dir = temp_dir("missing-checks");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let start = site.url(&page_path(0));
    let args = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--recrawl-every",
        "1d",
        "--json",
        "--data-dir",
        data,
    ];
    let first = trawl(&args, &dir).await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let recrawl = || async {
        let out = trawl(&["recrawl", "--json", "--data-dir", data], &dir).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json_of(&out)
    };

    // WHEN pages 3 and 4 answer 404 at the next generation's check
    let (kept, back) = (page_path(3), page_path(4));
    site.route(&kept, Route::status(404))
        .route(&back, Route::status(404));
    let once = recrawl().await;

    // THEN both are kept, delivered unchanged with their last answer in the manifest, and
    // were asked once (no retry seconds later)
    let delta = &delivered_summary(&once)["delta"];
    assert_eq!(
        (&delta["gone"], &delta["unchanged"]),
        (&Value::from(0), &Value::from(PAGES)),
        "{delta}"
    );
    assert_eq!(once["counts"]["succeeded"], PAGES);
    assert_eq!((site.hits(&kept), site.hits(&back)), (2, 2));
    let manifest = delivered_lines(&once, "manifest-");
    let line = manifest
        .iter()
        .find(|l| l["url"] == site.url(&kept))
        .unwrap();
    assert_eq!(line["status"], "succeeded", "{line}");
    assert_eq!(line["last_error"]["message"], "HTTP 404", "{line}");
    assert!(line["md5"].is_string(), "the content is kept: {line}");

    // WHEN page 4 is back as it was and page 3 still answers 404 at the check after
    let links = r#"<a href="/p/0.html">0</a> "#;
    let page_4 = format!("<h1>page 4</h1>{links}{}", "text ".repeat(200));
    site.route(&back, Route::html(page_4));
    let twice = recrawl().await;

    // THEN page 3 is gone at that second check, and page 4 was never gone
    let delta = &delivered_summary(&twice)["delta"];
    assert_eq!(delta["gone"], 1, "{delta}");
    let lines = delivered_lines(&twice, "delta-");
    let gone: Vec<&Value> = lines.iter().filter(|l| l["change"] == "gone").collect();
    assert_eq!(gone.len(), 1, "{lines:?}");
    assert_eq!(
        (&gone[0]["url"], &gone[0]["reason"]),
        (
            &Value::from(site.url(&kept)),
            &Value::from("http 404 twice")
        )
    );
    assert!(
        lines
            .iter()
            .all(|l| l["url"] != site.url(&back) || l["change"] != "gone")
    );
    assert_eq!(twice["counts"]["gone"], 1);
    assert_eq!(site.hits(&kept), 3);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_estimator_crawl_gets_a_water_level_and_lengthens_the_interval_of_an_unchanged_page() {
    // GIVEN 5 linked pages crawled under the change-rate estimator at 5 fetches a day
    let site = linked_site(PAGES).await;
    let clock = SkewedClock::default();
    let run = Run::on_clock(&[], Arc::new(clock.clone()));
    let mut config = config(&[&site], serde_json::json!({}));
    config.recrawl.estimator = Some(Estimator {
        budget_per_day: PAGES as u64,
        ..Estimator::default()
    });
    run.crawl(config, &[site.url(&page_path(0))]).await;
    // (a page's first check comes a quarter of the initial day after its first fetch)
    let first = run.task(&site.url(&page_path(1))).await.fetch.unwrap();
    assert_eq!(first.next_fetch_at, Some(first.fetched_at + DAY / 4));

    // WHEN the cron command runs once they are due
    clock.skip(DAY + 1);
    let end = run.run().await;

    // THEN its sweeps set the crawl's water level, and every page was fetched again
    assert_eq!(end, RunEnd::Completed { generation: 1 });
    let crawl = run.crawler.store().get_crawl(&run.crawl_id).await.unwrap();
    let level = crawl.unwrap().level.expect("a water level");
    assert!(
        level.at > first.fetched_at,
        "recomputed when the pages were due"
    );
    for i in 0..PAGES {
        assert_eq!(site.hits(&page_path(i)), 2, "page {i}");
    }
    // AND a page found unchanged after a day has one check behind it, which at the crawl's
    // level earns it longer than the day the budget gives a page on average (a turn takes the
    // level up with the crawl record, which this process's crawler holds for a minute of real
    // time: its next turn, as any later process's)
    let again = run.task(&site.url(&page_path(1))).await.fetch.unwrap();
    let history = again.pace.and_then(|p| p.history).unwrap();
    assert_eq!((history.checks, history.changes), (1, 0));
    let settings = Estimator::default();
    let interval = settings.interval_ms(history.rate(settings.initial_ms), Some(level.ms));
    assert!(interval > DAY as u64, "{interval}");
}
