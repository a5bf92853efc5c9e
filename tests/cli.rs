//! The `trawl` binary, as a user runs it, against loopback sites.

use crate::site::{Route, Site};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The `trawl` binary cargo built beside this test binary (`cargo test --workspace` builds it).
fn trawl_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join("trawl");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p trawl`",
        bin.display()
    );
    bin
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::support::unique(name));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn trawl(args: &[&str], cwd: &Path) -> Output {
    Command::new(trawl_bin())
        .args(args)
        .current_dir(cwd)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap()
}

fn json_of(output: &Output) -> Value {
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
async fn linked_site(n: usize) -> Site {
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
            Route::html(format!("<h1>page {i}</h1>{links}{}", "text ".repeat(200))),
        );
    }
    site
}

fn paths(n: usize) -> Vec<String> {
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
    let success = std::fs::read_dir(&deliveries)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("gen-000000/_SUCCESS");
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
    assert_eq!(site.total_hits(), 301, "300 pages and one robots.txt");
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

#[tokio::test]
async fn a_crawl_stopped_with_ctrl_c_resumes_without_fetching_anything_twice() {
    // GIVEN a crawl interrupted (SIGINT) after some pages
    let site = linked_site(300).await;
    let dir = temp_dir("ctrlc");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let mut child = crawl_until(&site, data, &dir, 60).await;
    let pid = child.id().unwrap().to_string();
    Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
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

#[tokio::test]
async fn bad_arguments_and_refused_seeds_give_one_clear_line() {
    let dir = temp_dir("errors");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 4] = [
        (&["crawl", "--data-dir", data], 2, "nothing to crawl"),
        (
            &["crawl", "ftp://example.com/", "--data-dir", data],
            2,
            "invalid seed URL",
        ),
        (
            &["tasks", "list", "--status", "bogus", "--data-dir", data],
            2,
            "unknown status",
        ),
        (&["setup"], 2, "--backend aws"),
    ];
    for (args, code, message) in cases {
        let output = trawl(args, &dir).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(message),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
    // A seed the network guard refuses is recorded as such, with the reason shown.
    let output = trawl(&["crawl", "http://127.0.0.1:9/", "--data-dir", data], &dir).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("blocked"), "{stdout}");
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
            .any(|(k, v)| k == "TRAWL_QUEUE_URL" && v.ends_with(".fifo"))
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
fn files_under(dir: &Path) -> Vec<PathBuf> {
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
        files.iter().any(|f| std::fs::read(f).unwrap() == pdf_body),
        "the stored bodies are among the files read"
    );
    for secret in [TOKEN, PASSWORD, "Ym9iOmNsaS1wYXNzd29yZC1lNDFk"] {
        assert!(!printed.contains(secret), "{secret} printed");
        for file in &files {
            let bytes = std::fs::read(file).unwrap();
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
    let _ = std::fs::remove_dir_all(dir);
}
