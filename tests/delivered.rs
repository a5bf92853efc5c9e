//! A signal when a delivery lands: `--on-delivered CMD` runs once per delivery the process
//! writes, with the delivery in its environment (locally); the deployed bucket sends S3's
//! "Object Created" event for each delivery's `_SUCCESS` marker to EventBridge (on moto, routed
//! to a queue by a rule as the README shows).

use crate::cli::{json_of, linked_site, temp_dir, trawl};
use std::path::Path;

/// The hook of these tests: one line per delivery in `log`, and some output of its own, which
/// must not reach stdout.
fn hook(log: &Path) -> String {
    format!(
        r#"echo "hook output"; printf '%s %s %s %s %s\n' "$TRAWL_CRAWL_ID" "$TRAWL_GENERATION" "$TRAWL_DELIVERY_ID" "$TRAWL_DELIVERY" "$TRAWL_TASKS" >> '{}'"#,
        log.display()
    )
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_on_delivered_command_runs_once_per_delivery_written_with_the_delivery_in_its_environment()
 {
    // GIVEN a site of 5 pages and a hook that logs the delivery it is run for
    let site = linked_site(5).await;
    let dir = temp_dir("delivered");
    let log = dir.join("deliveries.log");
    let hook = hook(&log);
    let data = "data";
    let url = site.url("/p/0.html");

    // WHEN the site is crawled to its delivery, with --json
    let crawled = trawl(
        &[
            "crawl",
            &url,
            "--crawl-id",
            "signal",
            "--allow-private-networks",
            "--json",
            "--data-dir",
            data,
            "--on-delivered",
            &hook,
        ],
        &dir,
    )
    .await;

    // THEN the hook ran once, told the crawl, generation, delivery id, location and task count,
    // and its output stayed off stdout (which is one JSON object)
    assert!(
        crawled.status.success(),
        "{}",
        String::from_utf8_lossy(&crawled.stderr)
    );
    let location = json_of(&crawled)["delivery"].as_str().unwrap().to_owned();
    assert_eq!(lines(&log), [format!("signal 0 gen-000000 {location} 5")]);
    assert!(String::from_utf8_lossy(&crawled.stderr).contains("hook output"));

    // WHEN the delivery is asked for again: it exists, so nothing is written or signalled
    let again = trawl(
        &[
            "deliver",
            "--crawl-id",
            "signal",
            "--data-dir",
            data,
            "--on-delivered",
            &hook,
        ],
        &dir,
    )
    .await;
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(lines(&log).len(), 1);

    // WHEN the next generation is crawled and delivered
    let recrawl = trawl(
        &[
            "recrawl",
            "--crawl-id",
            "signal",
            "--data-dir",
            data,
            "--on-delivered",
            &hook,
        ],
        &dir,
    )
    .await;

    // THEN the hook ran for it
    assert!(
        recrawl.status.success(),
        "{}",
        String::from_utf8_lossy(&recrawl.stderr)
    );
    let logged = lines(&log);
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(logged[1].starts_with("signal 1 gen-000001 "), "{logged:?}");

    // WHEN a hook fails
    let failing = trawl(
        &[
            "recrawl",
            "--crawl-id",
            "signal",
            "--data-dir",
            data,
            "--on-delivered",
            "exit 7",
        ],
        &dir,
    )
    .await;

    // THEN the command fails and says so, and the delivery it ran for is in place
    assert_eq!(failing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&failing.stderr);
    assert!(
        stderr.contains("but the --on-delivered command failed: it exited with 7"),
        "{stderr}"
    );
    let listed = json_of(
        &trawl(
            &[
                "deliveries",
                "list",
                "--crawl-id",
                "signal",
                "--json",
                "--data-dir",
                data,
            ],
            &dir,
        )
        .await,
    );
    assert!(listed.to_string().contains("gen-000002"), "{listed}");
    let _ = std::fs::remove_dir_all(dir);
}
