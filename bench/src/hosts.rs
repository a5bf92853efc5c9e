//! Section 8: `trawl hosts` on a large crawl. 100,000 tasks over 1,000 hosts (10,000 and 100
//! with `--quick`) seeded on the embedded backend through the real frontier, then listed by the
//! real CLI binary, spawn to exit (median of the runs). It reads host records only, so its time
//! follows the number of hosts, not of tasks.

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::report::Figure;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use trawl_core::frontier::seed_tasks;
use trawl_core::store::CrawlStore;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{NewTask, now_ms};
use trawl_embedded::sqlite::SqliteStore;

const SECTION: &str = "hosts view";
const SEED_CHUNK: usize = 1_000;

pub async fn run(quick: bool, runs: usize, cli: &Path) -> BenchResult<Vec<Figure>> {
    let (tasks, hosts) = if quick {
        (10_000, 100)
    } else {
        (100_000, 1_000)
    };
    let dir = TempDir::new("hosts")?;
    let store = SqliteStore::open(dir.0.join("trawl.db"), Arc::new(CallCounts::default()))
        .step("open store")?;
    let crawl = Crawl::new(
        CrawlId::parse("hosts-view").step("crawl id")?,
        CrawlConfig::default(),
        now_ms(),
    );
    store.create_crawl(&crawl).await.step("create crawl")?;
    for start in (0..tasks).step_by(SEED_CHUNK) {
        let chunk = (start..(start + SEED_CHUNK).min(tasks))
            .map(|i| {
                let url = format!("http://h{}.hosts.invalid/p/{i}", i % hosts);
                CanonicalUrl::parse(&url).map(|url| NewTask {
                    lane: None,
                    priority: Default::default(),
                    url,
                    depth: 0,
                    parent: None,
                    data: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .step("host urls")?;
        seed_tasks(&store, &crawl, chunk, now_ms())
            .await
            .step("seed")?;
    }
    drop(store);
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let output = tokio::process::Command::new(cli)
            .args(["hosts", "--json", "--limit", "10", "--data-dir"])
            .arg(&dir.0)
            .output()
            .await
            .step("run trawl hosts")?;
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        let listed: serde_json::Value =
            serde_json::from_slice(&output.stdout).step("trawl hosts --json")?;
        if listed["hosts"] != hosts {
            return Err(check(
                "trawl hosts",
                format!("listed {} hosts of {hosts}", listed["hosts"]),
            ));
        }
    }
    Ok(vec![
        Figure::of(
            SECTION,
            format!("`trawl hosts`, {tasks} tasks over {hosts} hosts (SQLite), spawn to exit"),
            "ms",
            &times,
        )
        .at_most(1_000.0),
    ])
}
