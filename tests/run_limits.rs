//! `trawl crawl --max-fetches N --max-time D`: a run ends cleanly at its limit (exit 0, a
//! `stopped` line and JSON field), and the same command goes on with nothing fetched twice.

use crate::cli::{json_of, linked_site, linked_site_of, paths, temp_dir, trawl};
use crate::site::Site;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// Page requests the site received (robots.txt apart).
fn page_hits(site: &Site, n: usize) -> u64 {
    paths(n).iter().map(|p| site.hits(p)).sum()
}

async fn crawl(site: &Site, data: &str, dir: &Path, extra: &[&str]) -> Output {
    let seed = site.url("/p/0.html");
    let mut args = vec![
        "crawl",
        &seed,
        "--allow-private-networks",
        "--data-dir",
        data,
    ];
    args.extend_from_slice(extra);
    let output = trawl(&args, dir).await;
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test]
async fn max_fetches_ends_a_run_at_its_budget_and_the_same_command_goes_on() {
    // GIVEN a 50-page site, crawled four pages at a time
    let site = linked_site(50).await;
    let dir = temp_dir("max-fetches");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN a run may make 10 page fetches
    let first = crawl(
        &site,
        data,
        &dir,
        &["--per-host", "4", "--max-fetches", "10"],
    )
    .await;

    // THEN it made exactly 10 (the budget is taken before each request starts, so the 4 in
    // flight at once cannot overshoot it), exited 0 and said why it stopped
    assert_eq!(page_hits(&site, 50), 10);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains("stopped: --max-fetches 10 reached; run the same command to go on"),
        "{stdout}"
    );
    assert!(!stdout.contains("delivered to"), "{stdout}");

    // WHEN the same command runs again, with --json
    let second = crawl(
        &site,
        data,
        &dir,
        &["--per-host", "4", "--max-fetches", "10", "--json"],
    )
    .await;

    // THEN it fetched 10 more, none again (the limit is no stored option: no refusal as a
    // changed configuration), and says it stopped at its limit
    let report = json_of(&second);
    assert_eq!(page_hits(&site, 50), 20);
    assert_eq!(report["completed"], false, "{report}");
    assert_eq!(report["stopped"]["reason"], "max_fetches", "{report}");
    assert_eq!(report["stopped"]["max_fetches"], 10, "{report}");
    assert_eq!(report["counts"]["succeeded"], 20, "{report}");

    // WHEN it runs once more without the limit
    let last = crawl(&site, data, &dir, &["--per-host", "4", "--json"]).await;

    // THEN the crawl completes and is delivered, every page fetched exactly once overall
    let report = json_of(&last);
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["stopped"], serde_json::Value::Null, "{report}");
    assert_eq!(report["counts"]["succeeded"], 50, "{report}");
    for path in paths(50) {
        assert_eq!(site.hits(&path), 1, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_run_whose_limit_is_met_by_the_crawls_last_page_completes_and_delivers() {
    // GIVEN a 12-page site
    let site = linked_site(12).await;
    let dir = temp_dir("max-fetches-exact");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN a run may make exactly as many page fetches as the site has pages
    let run = crawl(
        &site,
        data,
        &dir,
        &["--per-host", "4", "--max-fetches", "12", "--json"],
    )
    .await;

    // THEN it is no stop but the crawl's end: completed and delivered, every page once
    let report = json_of(&run);
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["stopped"], serde_json::Value::Null, "{report}");
    assert_eq!(report["counts"]["succeeded"], 12, "{report}");
    assert!(report["delivery"].is_string(), "{report}");
    for path in paths(12) {
        assert_eq!(site.hits(&path), 1, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn max_time_ends_a_run_on_a_slow_site_within_the_time_and_one_fetch() {
    // GIVEN a 50-page site answering each page after 300 ms, one request at a time: 15 s of
    // crawling in all
    let delay = Duration::from_millis(300);
    let site = linked_site_of(50, |page| page.delayed(delay)).await;
    let dir = temp_dir("max-time");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN a run may crawl for 2 s
    let started = Instant::now();
    let first = crawl(&site, data, &dir, &["--max-time", "2s", "--json"]).await;
    let took = started.elapsed();

    // THEN it stopped at its limit, exit 0, having fetched what fits in 2 s and at most the
    // one in flight then (one host, one request at a time, each ≥ 300 ms)
    let report = json_of(&first);
    assert_eq!(report["stopped"]["reason"], "max_time", "{report}");
    assert_eq!(report["stopped"]["max_time_seconds"], 2.0, "{report}");
    let fetched = page_hits(&site, 50);
    let most = (2_000 / delay.as_millis() + 1) as u64;
    assert!((1..=most).contains(&fetched), "{fetched} pages");
    // The process ends within the time, one fetch, the coordinator's look (200 ms) and the
    // workers' receive wait (1 s), with 1 s more for starting, seeding and the report.
    let bound = Duration::from_secs(2) + delay + Duration::from_millis(2_200);
    assert!(took < bound, "took {took:?}");
    println!("--max-time 2s: {fetched} page(s) in {took:?}");

    // WHEN the same command runs without the limit
    let last = crawl(&site, data, &dir, &["--json"]).await;

    // THEN the crawl completes with every page fetched exactly once overall
    let report = json_of(&last);
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["counts"]["succeeded"], 50, "{report}");
    for path in paths(50) {
        assert_eq!(site.hits(&path), 1, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn run_limits_are_refused_by_submit_and_zero_is_a_usage_error() {
    // GIVEN a scratch directory
    let dir = temp_dir("limits-usage");

    // WHEN --max-fetches 0 or --max-time 0s is given, or a limit to `submit`
    let zero = trawl(
        &["crawl", "http://example.com/", "--max-fetches", "0"],
        &dir,
    )
    .await;
    let no_time = trawl(&["crawl", "http://example.com/", "--max-time", "0s"], &dir).await;
    let submit = trawl(
        &[
            "--backend",
            "aws",
            "submit",
            "http://example.com/",
            "--max-fetches",
            "5",
        ],
        &dir,
    )
    .await;

    // THEN each is a usage error (exit 2), and the submit's says why
    assert_eq!(zero.status.code(), Some(2));
    assert_eq!(no_time.status.code(), Some(2));
    assert_eq!(submit.status.code(), Some(2));
    let said = String::from_utf8_lossy(&submit.stderr);
    assert!(said.contains("--max-fetches and --max-time"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_dry_run_fetches_a_few_pages_prints_each_and_stores_nothing() {
    // GIVEN a 30-page site and an empty directory
    let site = linked_site(30).await;
    let dir = temp_dir("dry-run");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN the crawl is tried with --dry-run
    let tried = json_of(&crawl(&site, data, &dir, &["--dry-run", "--json"]).await);

    // THEN it fetched the default 10 pages, each reported with its outcome, listed what it found
    // beyond them, and created nothing
    assert_eq!(tried["dry_run"], true, "{tried}");
    let fetched = tried["fetched"].as_array().unwrap();
    assert_eq!(fetched.len(), 10, "{tried}");
    assert!(
        fetched
            .iter()
            .all(|p| p["status"] == "succeeded" && p["http_status"] == 200),
        "{tried}"
    );
    assert!(tried["found_not_fetched"].as_u64().unwrap() > 0, "{tried}");
    assert_eq!(page_hits(&site, 30), 10);
    assert!(!Path::new(data).exists());

    // GIVEN the crawl made for real, stopped after 5 pages
    crawl(
        &site,
        data,
        &dir,
        &["--crawl-id", "dry", "--max-fetches", "5"],
    )
    .await;
    let status = |dir: &Path| {
        let dir = dir.to_owned();
        async move { json_of(&trawl(&["status", "--json", "--data-dir", data], &dir).await) }
    };
    let before = status(&dir).await;

    // WHEN a dry run is given only its id
    let tried = trawl(
        &[
            "crawl",
            "--crawl-id",
            "dry",
            "--dry-run",
            "--max-fetches",
            "3",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;

    // THEN it tried 3 of the crawl's pending pages with its settings, and the crawl is as it was
    assert!(
        tried.status.success(),
        "{}",
        String::from_utf8_lossy(&tried.stderr)
    );
    let stdout = String::from_utf8_lossy(&tried.stdout);
    assert!(
        stdout.contains("dry run: 3 page(s) tried") && stdout.contains("nothing was stored"),
        "{stdout}"
    );
    assert_eq!(page_hits(&site, 30), 5 + 10 + 3);
    assert_eq!(status(&dir).await, before);

    // AND a dry run of a crawl that is not there says so
    let missing = trawl(
        &[
            "crawl",
            "--crawl-id",
            "nope",
            "--dry-run",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nothing to try"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_paused_crawl_fetches_nothing_until_resumed_and_then_completes() {
    // GIVEN a 20-page crawl stopped after 5 fetches, then paused
    let site = linked_site(20).await;
    let dir = temp_dir("paused");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    crawl(
        &site,
        data,
        &dir,
        &["--crawl-id", "shop", "--max-fetches", "5"],
    )
    .await;
    let verb = async |verb: &str| {
        let output = trawl(
            &[verb, "--crawl-id", "shop", "--data-dir", data, "--json"],
            &dir,
        )
        .await;
        assert!(
            output.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        json_of(&output)
    };
    assert_eq!(verb("pause").await["paused"], true);
    let status = trawl(&["status", "--data-dir", data, "--json"], &dir).await;
    assert_eq!(json_of(&status)["crawls"][0]["paused"], true);
    // (`status --watch` says so on its first line, the crawl going nowhere.)
    let watch = [
        "status",
        "--crawl-id",
        "shop",
        "--watch",
        "--data-dir",
        data,
        "--json",
    ];
    let mut watching = tokio::process::Command::new(crate::cli::trawl_bin())
        .args(watch)
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = watching.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    watching.kill().await.unwrap();
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(
        (&first["state"], &first["paused"]),
        (&serde_json::json!("running"), &serde_json::json!(true))
    );

    // WHEN the crawl is run again (as a cron line would)
    let resumed = ["crawl", "--crawl-id", "shop", "--data-dir", data, "--json"];
    let paused_run = trawl(&resumed, &dir).await;

    // THEN it exits 0 saying the crawl is paused, and fetches nothing
    assert!(paused_run.status.success());
    assert_eq!(json_of(&paused_run)["paused"], true);
    assert_eq!(page_hits(&site, 20), 5);

    // WHEN it is resumed and run again
    assert_eq!(verb("resume").await["paused"], false);
    let done = trawl(&resumed, &dir).await;

    // THEN it completes, every page fetched once
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(json_of(&done)["counts"]["succeeded"], 20);
    assert!(paths(20).iter().all(|p| site.hits(p) == 1));
    let _ = std::fs::remove_dir_all(dir);
}
