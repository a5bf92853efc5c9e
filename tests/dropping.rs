//! `trawl hosts drop` (and the seeder's `drop_hosts`): an operator stops a crawl from fetching a
//! host; its due tasks end `ignored` with the reason, without a request, and a retry takes the
//! host back.

use crate::cli::{json_of, temp_dir, trawl};
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, OnceLock};
use trawl_faults::hosts_site::{HostsSite, Pages};

/// Pages of each host besides its home page.
const PAGES: usize = 5;

/// Two hosts; host 0's home page links to its own pages and to host 1's.
async fn two_hosts() -> HostsSite {
    // The port is known once the site is bound: host 0's home page reads it then.
    let port = Arc::new(OnceLock::new());
    let known = port.clone();
    let pages: Pages = Arc::new(move |host, path| match (host, path) {
        (_, "/robots.txt") => Some("User-agent: *\nAllow: /\n".to_owned()),
        (0, "/") => {
            let port: u16 = known.get().copied().unwrap_or_default();
            let links: String = (0..PAGES)
                .map(|i| {
                    format!(
                        r#"<a href="/p/{i}">{i}</a><a href="http://127.0.0.2:{port}/p/{i}">{i}</a>"#
                    )
                })
                .collect();
            Some(format!("<html><body>{links}</body></html>"))
        }
        (_, p) if p.starts_with("/p/") => Some(format!("<html><body>{host} {p}</body></html>")),
        _ => None,
    });
    let site = HostsSite::start(2, pages).await.unwrap();
    port.set(site.port).unwrap();
    site
}

async fn run(args: &[&str], dir: &Path) -> Output {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{args:?}: exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Crawl "two" of both hosts, stopped after host 0's home page (5 pages of each host due).
async fn crawl_home_only(site: &HostsSite, dir: &Path, data: &str) {
    let home = site.url(0, "/");
    let first = [
        "crawl",
        &home,
        "--crawl-id",
        "two",
        "--allow-domain",
        "127.0.0.1",
        "--allow-domain",
        "127.0.0.2",
        "--max-fetches",
        "1",
        "--allow-private-networks",
        "--data-dir",
        data,
        "--json",
    ];
    run(&first, dir).await;
    assert_eq!(page_requests(site), [1, 0]);
}

/// Page requests (robots.txt apart) each host received.
fn page_requests(site: &HostsSite) -> [usize; 2] {
    let mut counts = [0; 2];
    for (host, path, _) in site.requests() {
        if path != "/robots.txt" {
            counts[host] += 1;
        }
    }
    counts
}

#[tokio::test]
async fn a_dropped_host_is_fetched_no_more_its_tasks_end_ignored_with_the_reason_and_a_retry_takes_it_back()
 {
    // GIVEN a crawl of two hosts stopped after host 0's home page, which linked 5 pages of each
    let site = two_hosts().await;
    let dir = temp_dir("drop-host");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let other = site.host(1);
    // Where the crawl is, and the flag each command prints JSON with.
    let base = ["--crawl-id", "two", "--data-dir", data, "--json"];
    crawl_home_only(&site, &dir, data).await;

    // WHEN a mistyped host is named beside the real one
    let mut mistyped = vec![
        "hosts",
        "drop",
        &other,
        "nosuch.example",
        "--reason",
        "spam",
    ];
    mistyped.extend_from_slice(&base);
    let refused = trawl(&mistyped, &dir).await;

    // THEN nothing is dropped: a usage error names the unknown host
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("nosuch.example"), "{stderr}");
    let mut show = vec!["hosts", "show", &other];
    show.extend_from_slice(&base);
    assert_eq!(
        json_of(&run(&show, &dir).await)["given_up"],
        serde_json::Value::Null
    );

    // WHEN host 1 is dropped, then the crawl runs to its end
    let mut drop = vec!["hosts", "drop", &other, "--reason", "a spam trap"];
    drop.extend_from_slice(&base);
    let dropped = json_of(&run(&drop, &dir).await);
    assert_eq!(dropped["dropped"], serde_json::json!([other]));
    let mut resume = vec!["crawl", "--allow-private-networks"];
    resume.extend_from_slice(&base);
    let done = json_of(&run(&resume, &dir).await);

    // THEN host 0's pages are fetched, host 1 gets no request, and its 5 tasks end ignored
    // with the operator's reason; the crawl completes
    assert_eq!(page_requests(&site), [1 + PAGES, 0]);
    assert_eq!(done["completed"], true, "{done}");
    assert_eq!(done["counts"]["ignored"], PAGES as u64, "{done}");
    assert_eq!(done["counts"]["succeeded"], 1 + PAGES as u64, "{done}");
    let url = site.url(1, "/p/0");
    let mut task = vec!["tasks", "show", &url];
    task.extend_from_slice(&base);
    let task = json_of(&run(&task, &dir).await);
    let error = &task["errors"][0];
    assert_eq!(error["kind"], "host_given_up", "{task}");
    assert_eq!(error["message"], "dropped by the operator: a spam trap");

    // WHEN the operator retries the host's ignored tasks and runs the crawl again
    let mut retry = vec!["retry", "--status", "ignored", "--host", &other];
    retry.extend_from_slice(&base);
    run(&retry, &dir).await;
    let again = json_of(&run(&resume, &dir).await);

    // THEN the host is taken back: each of its pages is fetched once
    assert_eq!(page_requests(&site), [1 + PAGES, PAGES]);
    assert_eq!(
        again["counts"]["succeeded"],
        1 + 2 * PAGES as u64,
        "{again}"
    );
    assert_eq!(again["counts"]["ignored"], 0, "{again}");
}

#[tokio::test]
async fn a_moved_host_is_crawled_by_the_other_crawl_at_its_depth_and_ended_in_the_first() {
    // GIVEN crawl "two" stopped after host 0's home page (5 pages of each host due), and an
    // empty crawl "other" of its own
    let site = two_hosts().await;
    let dir = temp_dir("move-host");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let moving = site.host(1);
    let base = ["--data-dir", data, "--json"];
    crawl_home_only(&site, &dir, data).await;
    let robots = site.url(0, "/robots.txt");
    let mut other = vec![
        "crawl",
        &robots,
        "--crawl-id",
        "other",
        "--allow-domain",
        "127.0.0.2",
        "--allow-private-networks",
    ];
    other.extend_from_slice(&base);
    run(&other, &dir).await;
    assert_eq!(page_requests(&site), [1, 0]);

    // WHEN host 1 is moved to a crawl that does not exist, or to its own
    for to in ["nosuch", "two"] {
        let mut refused = vec!["hosts", "move", &moving, "--to", to, "--crawl-id", "two"];
        refused.extend_from_slice(&base);
        let refused = trawl(&refused, &dir).await;
        // THEN it is refused, naming why, and the host stays
        assert_eq!(refused.status.code(), Some(2), "{to}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(to), "{stderr}");
    }

    // WHEN it is moved to "other", and both crawls run to their ends
    let mut moved = vec![
        "hosts",
        "move",
        &moving,
        "--to",
        "other",
        "--crawl-id",
        "two",
    ];
    moved.extend_from_slice(&base);
    let moved = json_of(&run(&moved, &dir).await);
    assert_eq!(moved["dropped"], serde_json::json!([moving]), "{moved}");
    assert_eq!(moved["moved"]["added"], PAGES as u64, "{moved}");
    let mut resume = vec!["crawl", "--allow-private-networks", "--crawl-id", "two"];
    resume.extend_from_slice(&base);
    let two = json_of(&run(&resume, &dir).await);
    let mut resume = vec!["crawl", "--allow-private-networks", "--crawl-id", "other"];
    resume.extend_from_slice(&base);
    let other = json_of(&run(&resume, &dir).await);

    // THEN each of host 1's pages is fetched once, by "other"; "two" ends them ignored with
    // the reason and fetches its own host's
    assert_eq!(page_requests(&site), [1 + PAGES, PAGES]);
    assert_eq!(two["counts"]["ignored"], PAGES as u64, "{two}");
    assert_eq!(two["counts"]["succeeded"], 1 + PAGES as u64, "{two}");
    assert_eq!(other["counts"]["succeeded"], PAGES as u64 + 1, "{other}");
    let url = site.url(1, "/p/0");
    let mut task = vec!["tasks", "show", &url, "--crawl-id", "two"];
    task.extend_from_slice(&base);
    let task = json_of(&run(&task, &dir).await);
    assert_eq!(
        task["errors"][0]["message"], "dropped by the operator: moved to crawl other",
        "{task}"
    );
    let mut task = vec!["tasks", "show", &url, "--crawl-id", "other"];
    task.extend_from_slice(&base);
    let task = json_of(&run(&task, &dir).await);
    assert_eq!(task["status"], "succeeded", "{task}");
    assert_eq!(task["depth"], 1, "{task}");
}
