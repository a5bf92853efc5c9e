//! The `trawl` binary, as a user runs it, against loopback sites.

use crate::site::{Route, Site};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The `trawl` binary cargo built beside this test binary (`cargo test --workspace` builds it).
pub(crate) fn trawl_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join("trawl");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p trawl --features aws`",
        bin.display()
    );
    bin
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::support::unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn trawl(args: &[&str], cwd: &Path) -> Output {
    Command::new(trawl_bin())
        .args(args)
        .current_dir(cwd)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

pub(crate) fn json_of(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A site of `n` pages, each linking to the next two and back to the first: all reachable
/// from `/p/0.html`.
pub(crate) async fn linked_site(n: usize) -> Site {
    linked_site_of(n, |route| route).await
}

/// `linked_site` with each page's route made by `page` from the plain one.
pub(crate) async fn linked_site_of(n: usize, page: impl Fn(Route) -> Route) -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for i in 0..n {
        let links: String = [i + 1, i + 2, 0]
            .iter()
            .filter(|&&j| j < n)
            .map(|j| format!(r#"<a href="/p/{j}.html">{j}</a> "#))
            .collect();
        site.route(
            &format!("/p/{i}.html"),
            page(Route::html(format!(
                "<h1>page {i}</h1>{links}{}",
                "text ".repeat(200)
            ))),
        );
    }
    site
}

pub(crate) fn paths(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/p/{i}.html")).collect()
}

const README: &str = include_str!("../README.md");

#[tokio::test]
async fn the_readme_quickstart_crawls_the_demo_site_offline() {
    // GIVEN the quickstart command of the README
    let line = README
        .lines()
        .find(|l| l.starts_with("cargo run --release -p trawl -- "))
        .expect("a quickstart line");
    let args: Vec<&str> = line
        .trim_start_matches("cargo run --release -p trawl -- ")
        .split_whitespace()
        .collect();
    assert_eq!(args, ["demo"]);
    let dir = temp_dir("quickstart");

    // WHEN a newcomer runs it in an empty directory
    let output = trawl(&args, &dir).await;

    // THEN it crawls the whole demo site and writes a delivery under ./trawl-data
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("delivered to"), "{stdout}");
    let status = json_of(&trawl(&["status", "--json"], &dir).await);
    assert_eq!(status["crawls"][0]["counts"]["succeeded"], 201);
    let deliveries = dir.join("trawl-data/deliveries");
    let only_entry = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .next()
            .unwrap()
            .path()
    };
    // deliveries/crawl=ID/run=CREATED/gen-000000/
    let run = only_entry(&only_entry(&deliveries));
    assert!(
        run.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("run=")
    );
    let success = run.join("gen-000000/_SUCCESS");
    assert!(success.exists(), "{}", success.display());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_300_page_site_is_fetched_once_per_page_and_delivered() {
    // GIVEN a site of 300 linked pages
    let site = linked_site(300).await;
    let dir = temp_dir("crawl300");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN it is crawled
    let start = site.url("/p/0.html");
    let output = trawl(
        &[
            "crawl",
            &start,
            "--allow-private-networks",
            "--per-host",
            "4",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN every page succeeded, each fetched exactly once, and a delivery was written
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = json_of(&output);
    assert_eq!(summary["completed"], true);
    assert_eq!(summary["counts"]["succeeded"], 300);
    assert_eq!(summary["pages"], 300);
    for path in paths(300) {
        assert_eq!(site.hits(&path), 1, "{path}");
    }
    let delivery = summary["delivery"].as_str().unwrap();
    assert!(Path::new(delivery).join("_SUCCESS").exists());
    // AND the summary agrees with `trawl status`
    let status = json_of(&trawl(&["status", "--json", "--data-dir", data], &dir).await);
    assert_eq!(status["crawls"][0]["counts"], summary["counts"]);
    // AND `trawl hosts` shows the one host, done, idle, nothing pending
    let hosts = json_of(&trawl(&["hosts", "--json", "--data-dir", data], &dir).await);
    assert_eq!(hosts["hosts"], 1);
    let host = &hosts["shown"][0];
    let name = site.addr().to_string();
    assert_eq!(host["host"], name.as_str());
    assert_eq!(
        (&host["state"], &host["pending"]),
        (&json!("idle"), &json!(0))
    );
    assert_eq!(host["fetches"], 300);
    let shown = json_of(
        &trawl(
            &["hosts", "show", &name, "--json", "--data-dir", data],
            &dir,
        )
        .await,
    );
    assert_eq!(shown["next_tasks"], json!([]));
    let unknown = trawl(
        &["hosts", "show", "nowhere.example", "--data-dir", data],
        &dir,
    )
    .await;
    assert_eq!(unknown.status.code(), Some(2));
    // AND a retry of one host moves only that host's tasks (here: none to move)
    let retried = trawl(
        &[
            "retry",
            "--status",
            "ignored",
            "--host",
            &name,
            "--json",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    assert_eq!(json_of(&retried)["rescheduled"], 0);

    // WHEN the same command runs again, THEN nothing is fetched again
    let again = trawl(
        &[
            "crawl",
            &start,
            "--allow-private-networks",
            "--per-host",
            "4",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    assert!(again.status.success());
    assert_eq!(json_of(&again)["pages"], 0);
    assert_eq!(
        site.total_hits(),
        302,
        "300 pages, and robots.txt once per run (each run's seed reads its Sitemap lines)"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn hosts_counts_the_pending_work_of_its_tasks_after_a_retry() {
    // GIVEN a crawled site whose robots.txt refused 3 of its 4 pages (ignored)
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nDisallow: /private/\n"),
    );
    let links: String = ["a", "b", "c"]
        .iter()
        .map(|p| format!(r#"<a href="/private/{p}.html">{p}</a> "#))
        .collect();
    site.route("/", Route::html(format!("<h1>home</h1>{links}")));
    let dir = temp_dir("hosts-retry");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let crawled = trawl(
        &[
            "crawl",
            &site.url("/"),
            "--allow-private-networks",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    assert_eq!(json_of(&crawled)["counts"]["ignored"], 3);
    let name = site.addr().to_string();

    // WHEN the ignored pages of the host are retried
    let retried = trawl(
        &[
            "retry",
            "--status",
            "ignored",
            "--host",
            &name,
            "--json",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    assert_eq!(json_of(&retried)["rescheduled"], 3);

    // THEN `trawl hosts` and `hosts show` count them pending, as `trawl status` does
    let status = json_of(&trawl(&["status", "--json", "--data-dir", data], &dir).await);
    assert_eq!(status["crawls"][0]["counts"]["pending"], 3);
    let hosts = json_of(&trawl(&["hosts", "--json", "--data-dir", data], &dir).await);
    assert_eq!(hosts["shown"][0]["host"], name.as_str());
    assert_eq!(hosts["shown"][0]["pending"], 3, "{hosts}");
    assert_eq!(hosts["shown"][0]["done"], 1, "{hosts}");
    let shown = json_of(
        &trawl(
            &["hosts", "show", &name, "--json", "--data-dir", data],
            &dir,
        )
        .await,
    );
    assert_eq!(shown["pending"], 3, "{shown}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Starts a crawl in the background and waits until the site has served `hits` pages.
async fn crawl_until(site: &Site, data: &str, cwd: &Path, hits: u64) -> tokio::process::Child {
    let child = Command::new(trawl_bin())
        .args([
            "crawl",
            &site.url("/p/0.html"),
            "--allow-private-networks",
            "--data-dir",
            data,
            "--json",
        ])
        .current_dir(cwd)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while site.total_hits() < hits {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the crawl did not start"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child
}

/// Ctrl-C to `child` (SIGINT), and how it exited (within 30 s).
async fn interrupt(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_crawl_stopped_with_ctrl_c_resumes_without_fetching_anything_twice() {
    // GIVEN a crawl interrupted (SIGINT) after some pages
    let site = linked_site(300).await;
    let dir = temp_dir("ctrlc");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let mut child = crawl_until(&site, data, &dir, 60).await;
    let status = interrupt(&mut child).await;
    assert_eq!(status.code(), Some(130), "an interrupted crawl says so");
    let fetched_before = site.total_hits();
    assert!(fetched_before < 301, "stopped early");

    // WHEN the same command runs again
    let output = trawl(
        &[
            "crawl",
            &site.url("/p/0.html"),
            "--allow-private-networks",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN it completes, and no page was fetched twice
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 300);
    for path in paths(300) {
        assert_eq!(site.hits(&path), 1, "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn ctrl_c_during_a_ten_second_crawl_delay_stops_at_once_and_a_rerun_fetches_when_the_delay_allows()
 {
    // GIVEN a crawl of a site whose robots.txt asks for 10 s between requests, its first page
    // fetched (the next one 10 s away)
    let site = linked_site(20).await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nCrawl-delay: 10\n"),
    );
    let dir = temp_dir("ctrlc-delay");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let args = [
        "crawl",
        &site.url("/p/0.html"),
        "--allow-private-networks",
        "--data-dir",
        data,
    ];
    let spawn = || {
        Command::new(trawl_bin())
            .args(args)
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let pages = |site: &Site| {
        (0..20)
            .map(|i| site.hits(&format!("/p/{i}.html")))
            .sum::<u64>()
    };
    let wait_for_pages = async |n: u64| {
        let started = Instant::now();
        while pages(&site) < n {
            assert!(started.elapsed() < Duration::from_secs(30), "no fetch");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        started.elapsed()
    };
    let mut child = spawn();
    wait_for_pages(1).await;

    // WHEN it is interrupted (SIGINT), then the same command runs again at once
    let interrupted = Instant::now();
    let status = interrupt(&mut child).await;
    let stopped_after = interrupted.elapsed();
    let mut rerun = spawn();
    wait_for_pages(2).await;
    rerun.kill().await.unwrap();

    // THEN the first run ends within 2 s with the interrupted code, not at the next page, and
    // the rerun's first fetch comes as soon as the Crawl-delay allows, within 2 s of it: the
    // host was handed back, its pace kept, no turn's hold waited out
    assert_eq!(status.code(), Some(130));
    assert!(stopped_after < Duration::from_secs(2), "{stopped_after:?}");
    let arrivals: Vec<Instant> = (0..20)
        .flat_map(|i| site.received(&format!("/p/{i}.html")))
        .map(|r| r.at)
        .collect();
    let [first, second] = arrivals[..] else {
        panic!("{} page requests", arrivals.len());
    };
    let (first, second) = (first.min(second), first.max(second));
    let gap = second - first;
    assert!(
        gap >= Duration::from_millis(9_900) && gap < Duration::from_secs(12),
        "{gap:?} between the two runs' fetches"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_crawl_delay_holds_between_turns_as_within_them() {
    // GIVEN a site whose robots.txt asks for 1 s between requests, crawled in turns of two pages
    let site = linked_site(20).await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nCrawl-delay: 1\n"),
    );
    let dir = temp_dir("delay-turns");
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"politeness": {"turn_pages": 2}}"#).unwrap();
    let data = dir.join("data");

    // WHEN six pages are fetched (three turns)
    let output = trawl(
        &[
            "crawl",
            &site.url("/p/0.html"),
            "--allow-private-networks",
            "--config",
            config.to_str().unwrap(),
            "--max-fetches",
            "6",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &dir,
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // THEN no two requests came less than the delay apart, at a turn's start included
    let mut arrivals: Vec<Instant> = (0..20)
        .flat_map(|i| site.received(&format!("/p/{i}.html")))
        .map(|r| r.at)
        .collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 6);
    let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(950)),
        "{gaps:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_crawl_killed_with_sigkill_is_recovered_by_running_it_again() {
    // GIVEN a crawl killed outright mid-way (leases held, in-process queue lost)
    let site = linked_site(300).await;
    let dir = temp_dir("kill9");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let mut child = crawl_until(&site, data, &dir, 60).await;
    child.kill().await.unwrap();
    assert!(site.total_hits() < 301, "killed before the end");

    // WHEN it is run again
    let output = trawl(
        &[
            "crawl",
            &site.url("/p/0.html"),
            "--allow-private-networks",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN every page is stored; only the page in flight at the kill (one host slot) may have
    // been fetched twice
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 300);
    let refetched: u64 = paths(300)
        .iter()
        .map(|p| site.hits(p).saturating_sub(1))
        .sum();
    assert!(refetched <= 1, "{refetched} pages fetched twice");
    assert!(paths(300).iter().all(|p| site.hits(p) >= 1));
    let _ = std::fs::remove_dir_all(dir);
}

/// Every succeeded task of the crawl in `data` names a stored body whose md5 is the one in its
/// key and its record. Returns how many succeeded tasks there are.
/// Asserts that each page body file of the objects layout under `data` (`…/pk=…/attr=html/…`)
/// is the one its task points at.
async fn assert_every_body_file_is_pointed_at(data: &Path) {
    use trawl_core::store::{CrawlStore, TaskRecords};
    let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
    let store =
        trawl_embedded::sqlite::SqliteStore::open_existing(data.join("trawl.db"), calls).unwrap();
    let crawl = store.list_crawls(None).await.unwrap().remove(0).id;
    let mut orphans = Vec::new();
    let mut bodies = 0;
    for file in files_under(data) {
        let key = file
            .strip_prefix(data)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let Some(task_id) = key
            .split('/')
            .find_map(|part| part.strip_prefix("pk="))
            .filter(|_| key.contains("/attr=html/"))
        else {
            continue;
        };
        bodies += 1;
        let task_id = trawl_domain::canonical::TaskId::parse(task_id).unwrap();
        let task = store.get(&crawl, &task_id).await.unwrap();
        let pointed = task
            .and_then(|t| t.fetch)
            .and_then(|f| f.object_key)
            .is_some_and(|k| k == key);
        if !pointed {
            orphans.push(key);
        }
    }
    assert!(bodies >= 300, "{bodies} body files read");
    assert!(orphans.is_empty(), "no task points at {orphans:?}");
}

async fn assert_every_pointer_names_its_body(data: &Path) -> usize {
    use md5::Digest;
    use trawl_core::store::{CrawlStore, TaskQuery, TaskRecords};
    use trawl_domain::task::Status;
    let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
    let store =
        trawl_embedded::sqlite::SqliteStore::open_existing(data.join("trawl.db"), calls).unwrap();
    let mut succeeded = 0;
    for crawl in store.list_crawls(None).await.unwrap() {
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                crawl_id: crawl.id.clone(),
                status: Status::Succeeded,
                updated_before: None,
                limit: 500,
                cursor,
                part: trawl_core::store::Part::WHOLE,
            };
            let page = store.query(&query).await.unwrap();
            for summary in &page.tasks {
                let task = store
                    .get(&crawl.id, &summary.task_id)
                    .await
                    .unwrap()
                    .unwrap();
                let fetch = task.fetch.expect("a succeeded task has its fetch record");
                let key = fetch.object_key.expect("a stored page names its body");
                let stored = std::fs::read(data.join(&key))
                    .unwrap_or_else(|e| panic!("{} names {key}, which is missing: {e}", task.url));
                let body = match fetch.span {
                    // A segment: the span lies within it and holds the page's records.
                    Some(span) => {
                        let (from, to) =
                            (span.offset as usize, (span.offset + span.length) as usize);
                        let records = stored.get(from..to).unwrap_or_else(|| {
                            panic!(
                                "{} names {from}..{to} of {key}, {} bytes",
                                task.url,
                                stored.len()
                            )
                        });
                        trawl_core::blob::segment::decode(&key, records)
                            .unwrap_or_else(|e| panic!("{} names corrupt records: {e}", task.url))
                            .body
                            .to_vec()
                    }
                    None => stored,
                };
                let md5 = hex::encode(md5::Md5::digest(&body));
                if fetch.span.is_none() {
                    assert_eq!(
                        key.rsplit_once("/md5=").map(|(_, m)| m),
                        Some(md5.as_str()),
                        "{key}"
                    );
                }
                assert_eq!(fetch.md5.as_deref(), Some(md5.as_str()), "{key}");
                succeeded += 1;
            }
            cursor = page.cursor;
            if cursor.is_none() {
                break;
            }
        }
    }
    succeeded
}

#[tokio::test]
async fn no_kill_leaves_a_succeeded_task_naming_a_missing_or_wrong_body() {
    kills_leave_no_task_naming_a_missing_or_wrong_body("objects").await;
}

#[tokio::test]
async fn no_kill_leaves_a_succeeded_task_naming_missing_or_corrupt_segment_bytes() {
    kills_leave_no_task_naming_a_missing_or_wrong_body("segments").await;
}

async fn kills_leave_no_task_naming_a_missing_or_wrong_body(layout: &str) {
    // GIVEN a crawl with 8 pages in flight, killed outright five times at varying points, of
    // pages whose content changes on every fetch (a body written before a kill is never the
    // one its page's refetch writes)
    let site = linked_site_of(300, Route::volatile).await;
    let dir = temp_dir(&format!("kill9-{layout}"));
    let data_dir = dir.join("data");
    let data = data_dir.to_str().unwrap();
    let args = [
        "crawl",
        &site.url("/p/0.html"),
        "--allow-private-networks",
        "--per-host",
        "8",
        "--concurrency",
        "8",
        "--layout",
        layout,
        "--data-dir",
        data,
        "--json",
    ];
    const KILLS: u64 = 5;
    let mut at = 0;
    for round in 0..KILLS {
        // Somewhere in the next 25 to 55 pages: the kill lands between any two steps of a page.
        let nanos = u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        );
        at += 25 + (nanos + round * 7) % 30;
        let mut child = Command::new(trawl_bin())
            .args(args)
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let started = Instant::now();
        while site.total_hits() < at && started.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        child.kill().await.unwrap();
        assert!(site.total_hits() < 301, "killed before the end");

        // THEN, as each kill left it, every succeeded task names its own, whole body
        assert_every_pointer_names_its_body(&data_dir).await;
    }

    // WHEN the crawl is run to its end, THEN every page is stored and named rightly
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 300);
    assert_eq!(assert_every_pointer_names_its_body(&data_dir).await, 300);
    // AND no body file is left that no task points at (objects layout; a segment's garbage is
    // accounted below instead)
    if layout == "objects" {
        assert_every_body_file_is_pointed_at(&data_dir).await;
    }
    // AND only pages in flight at a kill were fetched again: at most 8 a kill
    let refetched: u64 = paths(300)
        .iter()
        .map(|p| site.hits(p).saturating_sub(1))
        .sum();
    assert!(refetched <= KILLS * 8, "{refetched} pages fetched twice");
    // AND the crawl says how it keeps its bodies
    let config = json_of(&trawl(&["config", "show", "--json", "--data-dir", data], &dir).await);
    assert_eq!(config["storage"]["layout"], layout);
    // AND the delivery accounts each segment's bytes: those the pages point at, the garbage
    // the kills left (appends never finished) beside them
    let delivery = Path::new(json_of(&output)["delivery"].as_str().unwrap()).to_path_buf();
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(delivery.join("summary.json")).unwrap()).unwrap();
    println!(
        "orphans removed by the delivery: {}",
        summary["orphans_removed"]
    );
    let segments = &summary["segments"];
    if layout == "segments" {
        let (bytes, live) = (
            segments["bytes"].as_u64().unwrap(),
            segments["live_bytes"].as_u64().unwrap(),
        );
        assert!(live > 0 && live <= bytes, "{segments}");
        assert_eq!(segments["garbage_bytes"].as_u64(), Some(bytes - live));
        assert!(
            segments["count"].as_u64().unwrap() >= 4,
            "a segment per run: {segments}"
        );
    } else {
        assert!(segments.is_null(), "{segments}");
    }
    // AND warcio reads every delivered record, digests checked: the objects layout's pages
    // copied into the delivery's WARC; the segment layout's by reference, each manifest offset
    // opening its page's own response record in its segment, no page copied
    let read = warcio_check(&delivery).await;
    if layout == "segments" {
        assert_eq!(
            (&read["files"], &read["responses"]),
            (&0.into(), &0.into()),
            "{read}"
        );
        assert_eq!(read["manifest_offsets"], 300, "{read}");
        assert_eq!(summary["warc"]["referenced"], 300, "{}", summary["warc"]);
    } else {
        assert!(read["files"].as_u64().unwrap() >= 1, "{read}");
        assert_eq!(read["responses"], 300, "{read}");
        assert_eq!(read["manifest_offsets"], 0, "{read}");
    }
    // AND once the crawl is purged, its deliveries still open: a segment the pages were
    // delivered by reference in is kept, objects copied into the delivery are deleted
    let crawl_id = json_of(&output)["crawl_id"].as_str().unwrap().to_owned();
    let purged = trawl(
        &[
            "purge",
            "--crawl-id",
            &crawl_id,
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    assert!(
        purged.status.success(),
        "{}",
        String::from_utf8_lossy(&purged.stderr)
    );
    let purged = json_of(&purged);
    assert_eq!(purged["tasks_deleted"], 300, "{purged}");
    let read = warcio_check(&delivery).await;
    if layout == "segments" {
        assert!(purged["segments_kept"].as_u64().unwrap() >= 4, "{purged}");
        assert_eq!(read["manifest_offsets"], 300, "{read}");
    } else {
        assert_eq!(purged["segments_kept"], 0, "{purged}");
        assert_eq!(read["responses"], 300, "{read}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// What `tests/support/warcio_check.py` counts in `delivery`, read with warcio (`make deps`
/// installs it); it fails on any unreadable record or misplaced offset.
pub(crate) async fn warcio_check(delivery: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/warcio_check.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(delivery)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "warcio: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Asserts a failed command printed one line on stderr, naming the problem and what to do.
pub(crate) fn assert_one_error_line(
    args: &[&str],
    output: &Output,
    code: i32,
    problem: &str,
    next: &str,
) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "{args:?}: one line: {stderr}"
    );
    assert!(
        stderr.contains(problem),
        "{args:?} should say {problem:?}: {stderr}"
    );
    assert!(
        stderr.contains(next),
        "{args:?} should say {next:?}: {stderr}"
    );
}

#[tokio::test]
async fn every_error_is_one_line_naming_what_to_do_next() {
    // GIVEN a data directory with one crawl, and a file where a directory is expected
    let dir = temp_dir("errors");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let site = linked_site(2).await;
    let start = site.url("/p/0.html");
    let seeded = trawl(
        &[
            "crawl",
            &start,
            "--allow-private-networks",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    assert!(
        seeded.status.success(),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    let seeds = dir.join("missing-seeds.txt");
    let seeds = seeds.to_str().unwrap();

    // WHEN each mistake is made, THEN each says what went wrong and what to do, on one line
    let cases: [(&[&str], i32, &str, &str); 13] = [
        (
            &["crawl", "--data-dir", data],
            2,
            "nothing to crawl",
            "give seed URLs",
        ),
        (
            &["crawl", "ftp://example.com/", "--data-dir", data],
            2,
            "invalid seed URL",
            "give absolute http(s) URLs",
        ),
        (
            &["crawl", "--seeds-file", seeds, "--data-dir", data],
            2,
            "cannot read the seeds file",
            "check the --seeds-file path",
        ),
        (
            &[
                "crawl",
                "http://example.com/",
                "--per-host",
                "100",
                "--data-dir",
                data,
            ],
            2,
            "--per-host",
            "`trawl crawl --help`",
        ),
        (
            &["crawl", "http://example.com/", "--data-dir", file],
            1,
            "cannot use the data directory",
            "pass another --data-dir",
        ),
        (
            &["tasks", "list", "--status", "bogus", "--data-dir", data],
            2,
            "unknown status",
            "use one of",
        ),
        (
            &["tasks", "show", "http://nowhere.test/", "--data-dir", data],
            2,
            "has no task",
            "`trawl tasks list --status STATUS`",
        ),
        (
            &["status", "--crawl-id", "nope", "--data-dir", data],
            1,
            "no crawl \"nope\"",
            "see `trawl status`",
        ),
        (
            &["retry", "--status", "succeeded", "--data-dir", data],
            2,
            "retry takes",
            "--status failed",
        ),
        (
            &["purge", "--crawl-id", "bad id!", "--data-dir", data],
            2,
            "invalid crawl id",
            "use 1 to 64 characters",
        ),
        (&["setup"], 2, "creates AWS resources", "add --backend aws"),
        (
            &["status", "--data-dir", file],
            1,
            "no crawl in",
            "start one with `trawl crawl URL",
        ),
        (
            // (--json: the crawl's own notes on stderr are for terminals)
            &["crawl", "http://127.0.0.1:9/", "--data-dir", data, "--json"],
            3,
            "fetched no page",
            "--allow-private-networks",
        ),
    ];
    for (args, code, problem, next) in cases {
        let output = trawl(args, &dir).await;
        assert_one_error_line(args, &output, code, problem, next);
    }

    // AND a data directory in use by another process says so
    let lock = std::fs::File::create(Path::new(data).join(".lock")).unwrap();
    lock.lock().unwrap();
    let args = ["crawl", "--crawl-id", "x", "--data-dir", data];
    let output = trawl(&args, &dir).await;
    assert_one_error_line(
        &args,
        &output,
        1,
        "in use by another trawl process",
        "wait for it",
    );
    // while reading beside it needs no lock
    let status = trawl(&["status", "--data-dir", data], &dir).await;
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    drop(lock);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_crawl_whose_seeds_are_all_refused_says_why_and_fails() {
    // GIVEN seeds on loopback addresses, which the network guard refuses by default
    let dir = temp_dir("refused");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let args = [
        "crawl",
        "http://127.0.0.1:9/a",
        "http://127.0.0.1:9/b",
        "--data-dir",
        data,
        "--json",
    ];

    // WHEN they are crawled
    let output = trawl(&args, &dir).await;

    // THEN the crawl fails with its own exit code, explaining itself on one line
    assert_one_error_line(
        &args,
        &output,
        3,
        "fetched no page",
        "--allow-private-networks",
    );
    // AND the summary lists the refused tasks by reason, with the address class and the way out
    let summary = json_of(&output);
    assert_eq!(summary["counts"]["ignored"], 2);
    assert_eq!(summary["pages"], 0);
    let reasons = summary["given_up"]["reasons"].as_array().unwrap();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    let blocked = &reasons[0];
    assert_eq!(blocked["status"], "ignored");
    assert_eq!(blocked["reason"], "blocked");
    assert_eq!(blocked["tasks"], 2);
    assert_eq!(blocked["address_classes"], serde_json::json!(["loopback"]));
    assert!(
        blocked["example"]["error"]
            .as_str()
            .unwrap()
            .contains("loopback address")
    );
    let hint = blocked["hint"].as_str().unwrap();
    assert!(hint.contains("--allow-private-networks"), "{hint}");
    assert!(hint.contains("--crawl-id"), "{hint}");

    // AND the table says the same
    let table = trawl(
        &["crawl", "--crawl-id", "127.0.0.1-9", "--data-dir", data],
        &dir,
    )
    .await;
    assert_eq!(table.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(stdout.contains("ignored   blocked  2"), "{stdout}");
    assert!(
        stdout.contains("hint (blocked): the network guard refuses loopback"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn commands_other_than_crawl_never_create_a_data_directory() {
    // GIVEN a path that does not exist, and an empty directory
    let dir = temp_dir("nocreate");
    let missing = dir.join("does/not/exist");
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();

    for data in [&missing, &empty] {
        let data = data.to_str().unwrap();
        let commands: [&[&str]; 7] = [
            &["status"],
            &["status", "--json"],
            &["tasks", "list", "--status", "pending"],
            &["tasks", "show", "http://example.com/"],
            &["retry", "--status", "failed"],
            &["deliver"],
            &["purge", "--crawl-id", "c1"],
        ];
        for command in commands {
            // WHEN a command other than crawl runs there
            let mut args = command.to_vec();
            args.extend(["--data-dir", data]);
            let output = trawl(&args, &dir).await;

            // THEN it says there is no crawl there, and fails
            assert_one_error_line(
                &args,
                &output,
                1,
                "no crawl in",
                "trawl crawl URL --data-dir",
            );
        }
    }
    // AND nothing was created
    assert!(!dir.join("does").exists());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs trawl with stdout into a pipe whose reader takes `read` bytes and goes away (none: the
/// reader is gone before trawl starts); returns the exit code and stderr.
async fn with_closed_stdout(args: &[&str], cwd: &Path, read: usize) -> (Option<i32>, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let cwd = cwd.to_owned();
    tokio::task::spawn_blocking(move || {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let mut command = std::process::Command::new(trawl_bin());
        command
            .args(&args)
            .current_dir(&cwd)
            .stdout(writer)
            .stderr(std::process::Stdio::piped());
        if read == 0 {
            drop(reader);
            let output = command.output().unwrap();
            return (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into(),
            );
        }
        let child = command.spawn().unwrap();
        drop(command); // the parent's copy of the write end
        let mut taken = vec![0; read];
        std::io::Read::read_exact(&mut reader, &mut taken).unwrap();
        drop(reader);
        let output = child.wait_with_output().unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_closed_stdout_ends_every_command_quietly() {
    // GIVEN a crawl of 1000 refused pages: listings far larger than a pipe's buffer
    let dir = temp_dir("pipe");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let seeds: String = (1..=100)
        .flat_map(|host| (0..10).map(move |page| format!("http://127.0.0.{host}:9/p{page}\n")))
        .collect();
    std::fs::write(dir.join("seeds.txt"), seeds).unwrap();
    let args = [
        "crawl",
        "--seeds-file",
        "seeds.txt",
        "--crawl-id",
        "many",
        "--per-host",
        "8",
        "--concurrency",
        "16",
        "--data-dir",
        data,
        "--json",
    ];
    let crawled = trawl(&args, &dir).await;
    assert_eq!(json_of(&crawled)["counts"]["ignored"], 1000);

    // WHEN commands write into a pipe whose reader stops early (`| head`), or is gone at once
    let cases: [(&[&str], usize, i32); 6] = [
        (
            &["tasks", "list", "--status", "ignored", "--limit", "1000"],
            100,
            0,
        ),
        (
            &[
                "tasks", "list", "--status", "ignored", "--limit", "1000", "--json",
            ],
            10,
            0,
        ),
        (&["status"], 0, 0),
        (&["tasks", "show", "http://127.0.0.1:9/p0"], 0, 0),
        (&["crawl", "--crawl-id", "many"], 0, 3),
        (&["crawl", "--crawl-id", "many", "--json"], 0, 3),
    ];
    for (command, read, code) in cases {
        let mut args = command.to_vec();
        args.extend(["--data-dir", data]);
        let (exit, stderr) = with_closed_stdout(&args, &dir, read).await;

        // THEN none panics, and each exits as it would have (a crawl that fetched nothing still
        // says so)
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(exit, Some(code), "{args:?}: {stderr}");
        if code == 0 {
            assert!(stderr.is_empty(), "{args:?}: {stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_aws_backend_sets_up_and_crawls_through_dynamodb_s3_and_sqs() {
    // GIVEN a moto server, and trawl pointed at it by the environment only
    let site = linked_site(40).await;
    let dir = temp_dir("aws");
    let endpoint = &crate::support::moto::shared().endpoint;
    let name = crate::support::unique("cli");
    let aws_env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let run = |args: Vec<String>, extra: Vec<(String, String)>| {
        let mut command = Command::new(trawl_bin());
        command
            .args(&args)
            .current_dir(&dir)
            .kill_on_drop(true)
            .envs(aws_env)
            .envs(extra);
        async move { command.output().await.unwrap() }
    };

    // WHEN `trawl setup` creates the resources
    let setup = run(
        vec![
            "--backend".into(),
            "aws".into(),
            "setup".into(),
            "--name".into(),
            name,
            "--json".into(),
        ],
        vec![],
    )
    .await;
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let vars: Vec<(String, String)> = json_of(&setup)
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    assert!(
        vars.iter()
            .any(|(k, v)| k == "TRAWL_QUEUE_URL" && !v.is_empty() && !v.ends_with(".fifo"))
    );

    // AND a crawl runs on them
    let start = site.url("/p/0.html");
    let args = [
        "--backend",
        "aws",
        "crawl",
        &start,
        "--allow-private-networks",
        "--json",
    ];
    let output = run(args.iter().map(|a| a.to_string()).collect(), vars.clone()).await;

    // THEN every page is stored once, and `trawl status` on the same backend agrees
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = json_of(&output);
    assert_eq!(summary["counts"]["succeeded"], 40);
    assert!(summary["delivery"].as_str().unwrap().starts_with("s3://"));
    assert!(paths(40).iter().all(|p| site.hits(p) == 1));
    let status = run(
        ["--backend", "aws", "status", "--json"]
            .iter()
            .map(|a| a.to_string())
            .collect(),
        vars,
    )
    .await;
    let status = json_of(&status);
    let crawl = status["crawls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["crawl_id"] == summary["crawl_id"])
        .unwrap();
    assert_eq!(crawl["counts"], summary["counts"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Every file under `dir`, recursively (the SQLite database and its journal, bodies, deliveries).
/// A file as its reader sees it: a segment (`*.warc.gz`) inflated, anything else as it is.
fn readable(file: &Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    if !file.to_string_lossy().ends_with(".warc.gz") {
        return bytes;
    }
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(&bytes[..]),
        &mut inflated,
    )
    .unwrap();
    inflated
}

pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test]
async fn request_flags_reach_the_site_and_no_secret_reaches_the_disk_or_the_output() {
    request_flags_on("segments").await;
}

#[tokio::test]
async fn request_flags_reach_the_site_and_no_secret_reaches_the_disk_with_objects() {
    request_flags_on("objects").await;
}

async fn request_flags_on(layout: &str) {
    // GIVEN a login page that wants a header and a language and sets a session cookie; a
    // members' page that wants the cookie and a Bearer token; an intranet host that wants Basic
    // credentials; a PDF; and a page that refuses every request
    const TOKEN: &str = "cli-bearer-7b2f0c";
    const PASSWORD: &str = "cli-password-e41d";
    let site = Site::start().await;
    let intranet = Site::start().await;
    let bearer = format!("Bearer {TOKEN}");
    site.route(
        "/login",
        Route::html(r#"<a href="/members.html">members</a>"#)
            .require_header("X-Client", "trawl-cli")
            .require_header("Accept-Language", "de-CH")
            .header("set-cookie", "session=abc; Path=/"),
    )
    .route(
        "/members.html",
        Route::html(format!(
            r#"<a href="/doc.pdf">pdf</a> <a href="/denied.html">no</a> <a href="{}">intranet</a>"#,
            intranet.url("/private.html")
        ))
        .require_cookie("session", "abc")
        .require_header("Authorization", &bearer),
    )
    .route(
        "/doc.pdf",
        Route::content("application/pdf", &b"%PDF-1.4 members only"[..])
            .require_header("Authorization", &bearer),
    )
    .route("/denied.html", Route::status(401));
    // base64("bob:cli-password-e41d")
    intranet.route(
        "/private.html",
        Route::html("<p>intranet</p>")
            .require_header("Authorization", "Basic Ym9iOmNsaS1wYXNzd29yZC1lNDFk"),
    );
    let dir = temp_dir("client-flags");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN it is crawled with the request flags, the secrets in the environment
    let crawl = Command::new(trawl_bin())
        .args([
            "crawl",
            &site.url("/login"),
            "--allow-private-networks",
            "--header",
            "X-Client: trawl-cli",
            "--accept-language",
            "de-CH",
            "--keep-cookies",
            "--store-content-type",
            "application/pdf",
            "--layout",
            layout,
            // Each page's request record is in a delivery's copy only.
            "--deliver-pages",
            "copy",
            "--bearer-env",
            &format!("{}=TRAWL_TEST_TOKEN", site.addr()),
            "--basic-env",
            &format!("{}=TRAWL_TEST_USER:TRAWL_TEST_PASSWORD", intranet.addr()),
            "--data-dir",
            data,
            "--json",
        ])
        .env("TRAWL_TEST_TOKEN", TOKEN)
        .env("TRAWL_TEST_USER", "bob")
        .env("TRAWL_TEST_PASSWORD", PASSWORD)
        .current_dir(&dir)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();

    // THEN every page the flags open is fetched, the PDF stored, the refusing page given up
    assert!(
        crawl.status.success(),
        "{}",
        String::from_utf8_lossy(&crawl.stderr)
    );
    let summary = json_of(&crawl);
    assert_eq!(summary["counts"]["succeeded"], 4, "{summary}");
    assert_eq!(summary["counts"]["ignored"], 1, "{summary}");
    let pdf = trawl(
        &[
            "tasks",
            "show",
            &site.url("/doc.pdf"),
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    let pdf = json_of(&pdf);
    assert_eq!(pdf["status"], "succeeded");
    assert!(pdf["object"].is_string(), "{pdf}");
    let denied = trawl(
        &[
            "tasks",
            "show",
            &site.url("/denied.html"),
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;
    assert_eq!(json_of(&denied)["errors"][0]["message"], "HTTP 401");

    // AND no secret is in any file of the data directory, nor in anything trawl printed
    let mut printed = [&crawl, &denied]
        .iter()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .collect::<String>();
    printed.push_str(&pdf.to_string());
    let files = files_under(Path::new(data));
    let pdf_body = b"%PDF-1.4 members only";
    assert!(
        files
            .iter()
            .any(|f| readable(f).windows(pdf_body.len()).any(|w| w == pdf_body)),
        "the stored bodies are among the files read"
    );
    for secret in [TOKEN, PASSWORD, "Ym9iOmNsaS1wYXNzd29yZC1lNDFk"] {
        assert!(!printed.contains(secret), "{secret} printed");
        for file in &files {
            let bytes = readable(file);
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} in {}",
                file.display()
            );
        }
    }
    // (the stored configuration names the variables instead)
    let names_stored = files.iter().any(|file| {
        let bytes = std::fs::read(file).unwrap();
        bytes.windows(16).any(|w| w == b"TRAWL_TEST_TOKEN")
    });
    assert!(names_stored);
    // AND the delivered WARC's request records show the headers sent, credentials redacted
    let delivery = Path::new(summary["delivery"].as_str().unwrap());
    let members = request_record(delivery, &site.url("/members.html"));
    for line in [
        "GET /members.html HTTP/1.1\r\n",
        "x-client: trawl-cli\r\n",
        "accept-language: de-CH\r\n",
        "authorization: [redacted]\r\n",
        "cookie: session=[redacted]\r\n",
    ] {
        assert!(members.contains(line), "{line:?} not in {members}");
    }
    let private = request_record(delivery, &intranet.url("/private.html"));
    assert!(
        private.contains("authorization: [redacted]\r\n"),
        "{private}"
    );
    for file in files_under(delivery) {
        let bytes = readable(&file);
        assert!(
            !bytes.windows(11).any(|w| w == b"session=abc"),
            "a cookie's value in {}",
            file.display()
        );
    }
    assert!(warcio_check(delivery).await["records"].as_u64().unwrap() > 8);
    let _ = std::fs::remove_dir_all(dir);
}

/// The `request` record of `url` in the WARC files of `delivery`, as text.
fn request_record(delivery: &Path, url: &str) -> String {
    let target = format!("WARC-Target-URI: {url}\r\n");
    files_under(delivery)
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".warc.gz"))
        .flat_map(|f| {
            let text = String::from_utf8_lossy(&readable(f)).into_owned();
            text.split("WARC/1.1\r\n")
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|record| record.contains("WARC-Type: request\r\n") && record.contains(&target))
        .unwrap_or_else(|| panic!("no request record of {url}"))
}

#[tokio::test]
async fn an_empty_or_foreign_database_file_is_refused_not_taken_as_a_new_crawl() {
    // GIVEN a crawled site, and data directories whose trawl.db is empty, not SQLite, cut
    // inside the SQLite header, or another program's SQLite database
    let site = linked_site(2).await;
    let start = site.url("/p/0.html");
    let dir = temp_dir("baddb");
    let mut sqlite_header = b"SQLite format 3\0".to_vec();
    sqlite_header.extend([0u8; 20]);
    let foreign = dir.join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("empty", Vec::new(), "is empty"),
        (
            "text",
            b"https://example.com/\n".repeat(10),
            "not a trawl database",
        ),
        ("cut", sqlite_header, "not a trawl database"),
        (
            "foreign",
            std::fs::read(&foreign).unwrap(),
            "not a trawl database",
        ),
    ];
    for (name, content, problem) in cases {
        let data = dir.join(name);
        std::fs::create_dir(&data).unwrap();
        let db = data.join("trawl.db");
        std::fs::write(&db, &content).unwrap();
        let data = data.to_str().unwrap();

        // WHEN a crawl or any other command runs there
        let commands: [&[&str]; 3] = [
            &["crawl", &start, "--allow-private-networks", "--json"],
            &["status"],
            &["retry", "--status", "failed"],
        ];
        for command in commands {
            let mut args = command.to_vec();
            args.extend(["--data-dir", data]);
            let output = trawl(&args, &dir).await;

            // THEN it is refused on one line saying what to do, and the file is left as it was
            assert_one_error_line(&args, &output, 1, problem, "move it away or restore it");
            assert!(
                String::from_utf8_lossy(&output.stderr).contains(db.to_str().unwrap()),
                "{args:?} names the file: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(std::fs::read(&db).unwrap() == content, "{name}: untouched");
        }
    }
    // AND nothing was fetched
    assert_eq!(site.total_hits(), 0);

    // WHEN the file is moved away, THEN the crawl starts anew (only a missing file is a new crawl)
    let data = dir.join("empty");
    std::fs::rename(data.join("trawl.db"), dir.join("moved.db")).unwrap();
    let data = data.to_str().unwrap();
    let args = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--data-dir",
        data,
        "--json",
    ];
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn concurrency_and_per_host_out_of_range_are_usage_errors_naming_the_range() {
    // GIVEN an empty directory
    let dir = temp_dir("ranges");
    let data = dir.join("data");
    let data = data.to_str().unwrap();

    // WHEN --concurrency or --per-host is out of range, THEN that is a usage error on one line
    // naming the range, and nothing is created
    let cases = [
        ("--concurrency", "0", "1..=256"),
        ("--concurrency", "257", "1..=256"),
        ("--concurrency", "1000000", "1..=256"),
        ("--concurrency", "-1", "--concurrency"),
        ("--per-host", "0", "1..=64"),
        ("--per-host", "65", "1..=64"),
        ("--per-host", "100", "1..=64"),
    ];
    for (flag, value, range) in cases {
        let args = [
            "crawl",
            "http://example.com/",
            flag,
            value,
            "--data-dir",
            data,
        ];
        let output = trawl(&args, &dir).await;
        assert_one_error_line(&args, &output, 2, range, "`trawl crawl --help`");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(flag),
            "{args:?}"
        );
    }
    assert!(!Path::new(data).exists());

    // AND the bounds themselves are accepted
    let site = linked_site(2).await;
    let start = site.url("/p/0.html");
    let args = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--concurrency",
        "256",
        "--per-host",
        "64",
        "--data-dir",
        data,
        "--json",
    ];
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_garbage_line_in_a_seeds_file_is_refused_by_file_and_line_number() {
    // GIVEN a site, and seeds files with comments, blank lines, a byte-order mark and CRLF line
    // ends, some with one bad line
    let site = linked_site(3).await;
    let dir = temp_dir("seedsfile");
    let good = format!(
        "\u{feff}# seeds\r\n\r\n{}\r\n   \r\n  # indented comment\r\n{}\r\n",
        site.url("/p/0.html"),
        site.url("/p/1.html")
    );
    let with_line = |line: &str| {
        format!(
            "# seeds\n{}\n\n{line}\n{}\n",
            site.url("/p/0.html"),
            site.url("/p/1.html")
        )
    };
    let mut not_text = with_line("").into_bytes();
    not_text.splice(not_text.len() - 1.., *b"\n\xff\xfe\n");
    let cases: [(&str, Vec<u8>, &str, &str); 5] = [
        (
            "garbage.txt",
            with_line("this is not a url").into_bytes(),
            "line 4",
            "not a valid URL",
        ),
        (
            "scheme.txt",
            with_line("ftp://example.com/x").into_bytes(),
            "line 4",
            "not http or https",
        ),
        (
            "nohost.txt",
            with_line("http://").into_bytes(),
            "line 4",
            "not a valid URL",
        ),
        (
            "long.txt",
            with_line(&format!("http://example.com/{}", "a".repeat(3000))).into_bytes(),
            "line 4",
            "longer than",
        ),
        ("binary.txt", not_text, "line 6", "not UTF-8 text"),
    ];
    for (name, content, line, reason) in cases {
        let file = dir.join(name);
        std::fs::write(&file, &content).unwrap();
        let data = dir.join(format!("data-{name}"));
        let args = [
            "crawl",
            "--seeds-file",
            file.to_str().unwrap(),
            "--allow-private-networks",
            "--data-dir",
            data.to_str().unwrap(),
        ];

        // WHEN it is crawled
        let output = trawl(&args, &dir).await;

        // THEN the file is refused naming the file, the line and why, before anything is done
        assert_one_error_line(&args, &output, 2, line, "fix or remove that line");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(reason), "{name}: {reason:?}: {stderr}");
        assert!(!data.join("trawl.db").exists(), "{name}: nothing created");
    }
    assert_eq!(site.total_hits(), 0);

    // AND a file with only comments and blank lines says so
    let file = dir.join("comments.txt");
    std::fs::write(&file, "# nothing yet\n\n").unwrap();
    let args = [
        "crawl",
        "--seeds-file",
        file.to_str().unwrap(),
        "--data-dir",
        "data",
    ];
    let output = trawl(&args, &dir).await;
    assert_one_error_line(&args, &output, 2, "has no URL", "add URLs");

    // WHEN the good file is crawled, THEN its URLs are the seeds
    let file = dir.join("good.txt");
    std::fs::write(&file, &good).unwrap();
    let data = dir.join("data-good");
    let args = [
        "crawl",
        "--seeds-file",
        file.to_str().unwrap(),
        "--allow-private-networks",
        "--max-depth",
        "0",
        "--data-dir",
        data.to_str().unwrap(),
        "--json",
    ];
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 2);
    assert_eq!(site.hits("/p/0.html"), 1);
    assert_eq!(site.hits("/p/1.html"), 1);
    assert_eq!(site.hits("/p/2.html"), 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_delivery_lease_left_by_a_killed_run_does_not_hold_the_next_run_off() {
    // GIVEN a crawl run to its delivery, then the delivery lease a run SIGKILLed while
    // delivering leaves in its data directory: a holder that is gone, 15 minutes left to run
    let site = linked_site(30).await;
    let dir = temp_dir("dead-delivery");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let start = site.url("/p/0.html");
    let crawl = [
        "crawl",
        &start,
        "--allow-private-networks",
        "--data-dir",
        data,
        "--json",
    ];
    let first = trawl(&crawl, &dir).await;
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let delivery = json_of(&first)["delivery"].clone();
    assert!(delivery.is_string(), "{delivery}");
    let leave_a_dead_lease = || {
        let db = rusqlite::Connection::open(Path::new(data).join("trawl.db")).unwrap();
        let until = trawl_domain::task::now_ms() + 15 * 60_000;
        let leases = db
            .execute(
                "UPDATE crawls SET delivery_holder = 'killed-run', delivery_until = ?1",
                [until],
            )
            .unwrap();
        assert_eq!(leases, 1);
    };
    leave_a_dead_lease();

    // WHEN the same command runs again
    let started = Instant::now();
    let again = tokio::time::timeout(Duration::from_secs(60), trawl(&crawl, &dir))
        .await
        .expect("the rerun waited for the dead run's lease");

    // THEN it completes at once with the same delivery (the lease, no live process's: the data
    // directory is locked to one, taken over)
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(json_of(&again)["delivery"], delivery);

    // AND so does `trawl deliver` after the same death
    leave_a_dead_lease();
    let deliver = ["deliver", "--data-dir", data, "--json"];
    let delivered = tokio::time::timeout(Duration::from_secs(60), trawl(&deliver, &dir))
        .await
        .expect("trawl deliver waited for the dead run's lease");
    assert!(
        delivered.status.success(),
        "{}",
        String::from_utf8_lossy(&delivered.stderr)
    );
    assert_eq!(json_of(&delivered)["delivery"], delivery);
    assert!(started.elapsed() < Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(dir);
}
