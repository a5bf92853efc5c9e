//! Section: the chaos run on the embedded backend. The fixture site (10,000 pages; 1,000 with
//! `--quick`) crawled on SQLite + files through the port faults (`trawl_faults::ports`): 2% of
//! port calls answered with a retryable error, 5% slowed by 1-20 ms. The first runs are
//! SIGKILLed part-way — each once the site has served a given share of the pages, so the kill
//! lands mid-crawl however fast the machine — the next ones abort the process at a crash point
//! (after a claim, after a body's append, before a finish), and every run after an interruption
//! continues the same data directory until one delivers. Prints the wall time, the port calls and
//! faults by kind, the runs and how each ended, the pages fetched more than once (at most 1%),
//! and checks the invariants on the data left behind (`trawl_faults::audit`: every finished
//! page's records read back from its segment and its md5 checked). The crawl keeps its bodies
//! in segments, the embedded default.

use crate::error::{BenchResult, Context, check};
use crate::local::{TempDir, fixture_config};
use crate::report::Figure;
use crate::site::Site;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_core::blob::Layout;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;
use trawl_faults::audit::audit;
use trawl_faults::local::{DB_FILE, OBJECTS_DIR, crawl_to_delivery};
use trawl_faults::ports::{CrashMode, PortCounts, PortFault, PortFaults, PortMix};

const SECTION: &str = "chaos (embedded, port faults)";
const SEED: u64 = 18;
const CRAWL_ID: &str = "chaos-local";
/// The first runs are SIGKILLed once the site has served these shares of the pages.
const KILL_AT: [f64; 2] = [0.15, 0.3];
const KILLED_RUNS: u64 = KILL_AT.len() as u64;
/// Runs after the killed ones that may abort at a crash point.
const CRASHING_RUNS: u64 = 3;
/// The bound on runs: every one after the killed and crashing ones meets only errors and
/// latency, so the first of those delivers.
const MAX_RUNS: u64 = KILLED_RUNS + CRASHING_RUNS + 3;
/// The whole run's bound.
const LIMIT: Duration = Duration::from_secs(3_600);
/// A short lease: what the crashes leave behind is old enough for the clean-up at the end.
const LEASE_MS: u64 = 10_000;

fn counts_file(dir: &Path, run: u64) -> std::path::PathBuf {
    dir.join(format!("faults-{run}.json"))
}

/// Entry point of the `chaos-run` child: one run of the crawl through the port faults, which
/// writes its fault counts to `faults-{run}.json` as it goes (an abort or a SIGKILL loses at
/// most the last quarter second of them); prints the delivery's summary as JSON on success.
pub fn chaos_run_main(start: &str, dir: &Path, run: u64, crash: f64) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .step("chaos runtime")?;
    runtime.block_on(async {
        let mix = PortMix {
            errors: 0.02,
            latency: 0.05,
            crash,
        };
        let file = counts_file(dir, run);
        let faults =
            Arc::new(PortFaults::new(SEED + run, mix, CrashMode::Abort).reporting_to(file.clone()));
        let reporter = {
            let (faults, file) = (faults.clone(), file.clone());
            tokio::spawn(async move {
                loop {
                    let _ = std::fs::write(&file, faults.counts().to_json().to_string());
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let mut config = fixture_config();
        config.lease_ms = LEASE_MS;
        // The embedded default: every kill lands between appends, flushes and finishes.
        config.storage.layout = trawl_domain::crawl::StorageLayout::Segments;
        let crawl = CrawlId::parse(CRAWL_ID).step("crawl id")?;
        let delivered = crawl_to_delivery(dir, &crawl, start, config, faults.clone(), 4).await;
        reporter.abort();
        std::fs::write(&file, faults.counts().to_json().to_string()).step("write counts")?;
        let (report, retries) = delivered.map_err(|e| check("chaos run", e))?;
        let out = serde_json::json!({
            "tasks": report.summary.tasks,
            "orphans_removed": report.summary.orphans_removed,
            "backend_retries": retries,
        });
        println!("{out}");
        Ok(())
    })
}

/// How a run ended.
#[derive(Debug, Default)]
struct Ends {
    delivered: u64,
    aborted: u64,
    killed: u64,
    other: u64,
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let pages = if quick { 1_000 } else { 10_000 };
    let site = Site::start(pages)?;
    let dir = TempDir::new("chaos-local")?;
    let exe = std::env::current_exe().step("locate trawl-bench")?;
    // About two crashes over the pages left after the kills (three crash points a page), so
    // that each crashing run is likely to end at one.
    let left = pages as f64 * (1.0 - KILL_AT[KILL_AT.len() - 1]);
    let crash = 2.0 / (3.0 * left);
    let client = trawl_core::fetch::http_client()
        .build()
        .step("http client")?;
    let started = Instant::now();
    let mut ends = Ends::default();
    let mut summary = None;
    let mut killed_at = Vec::new();
    let mut kills_ms = Vec::new();
    for run in 0..MAX_RUNS {
        if started.elapsed() > LIMIT {
            return Err(check("chaos run", "outlasted its bound"));
        }
        let crashing = (KILLED_RUNS..KILLED_RUNS + CRASHING_RUNS).contains(&run);
        let mut child = Command::new(&exe)
            .args(["chaos-run", "--start", &site.page_url(0), "--dir"])
            .arg(&dir.0)
            .args(["--run", &run.to_string(), "--crash"])
            .arg(if crashing { crash } else { 0.0 }.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .step("start a chaos run")?;
        let kill_at = usize::try_from(run)
            .ok()
            .and_then(|run| KILL_AT.get(run))
            .map(|share| (share * pages as f64) as u64);
        let status = loop {
            if let Some(status) = child.try_wait().step("wait for a chaos run")? {
                // A run aborted at a crash point died within the last poll.
                if !status.success() {
                    kills_ms.push(crate::chaos::now_unix_ms());
                }
                break status;
            }
            if let Some(at) = kill_at {
                let served = site.stats(&client).await?.distinct;
                if served >= at {
                    child.kill().step("SIGKILL a chaos run")?;
                    kills_ms.push(crate::chaos::now_unix_ms());
                    killed_at.push(served);
                    let status = child.wait().step("wait for a killed chaos run")?;
                    break status;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(6) => ends.aborted += 1,
            Some(9) => ends.killed += 1,
            _ if status.success() => {
                ends.delivered += 1;
                let mut out = String::new();
                if let Some(mut stdout) = child.stdout.take() {
                    std::io::Read::read_to_string(&mut stdout, &mut out).step("read the run")?;
                }
                summary = Some(
                    serde_json::from_str::<serde_json::Value>(out.trim())
                        .step("the run's summary")?,
                );
                break;
            }
            _ => ends.other += 1,
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let summary =
        summary.ok_or_else(|| check("chaos run", format!("no run delivered: {ends:?}")))?;
    let mut counts = PortCounts::default();
    for run in 0..MAX_RUNS {
        if let Ok(text) = std::fs::read_to_string(counts_file(&dir.0, run))
            && let Ok(value) = serde_json::from_str(&text)
        {
            counts.add(&PortCounts::from_json(&value));
        }
    }
    let served = site.stats(&client).await?;
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::open(dir.0.join(DB_FILE), calls.clone()).step("open the data")?;
    let blobs = FsBlobStore::new(dir.0.join(OBJECTS_DIR), calls);
    let crawl = CrawlId::parse(CRAWL_ID).step("crawl id")?;
    let found = audit(&store, &blobs, &Layout::default(), &crawl)
        .await
        .map_err(|e| check("audit", e))?;
    let refetched = crate::chaos::Refetches::of(&served, &kills_ms);
    let one =
        |name: &str, unit: &'static str, value: f64| Figure::single(SECTION, name, unit, value);
    let mut figures = vec![
        one(
            &format!("{pages}-page crawl through port faults and crashes, time to delivery"),
            "s",
            wall,
        ),
        one("runs aborted at a crash point", "runs", ends.aborted as f64),
        one("runs SIGKILLed", "runs", ends.killed as f64).at_least(KILLED_RUNS as f64),
        one(
            "pages served when the first SIGKILL landed",
            "pages",
            killed_at.first().copied().unwrap_or(0) as f64,
        ),
        one(
            "pages served when the last SIGKILL landed",
            "pages",
            killed_at.last().copied().unwrap_or(0) as f64,
        ),
        one("runs ended otherwise", "runs", ends.other as f64).at_most(0.0),
        one(
            "backend errors waited out (delivering run)",
            "retries",
            summary["backend_retries"].as_f64().unwrap_or(f64::NAN),
        ),
        one("port calls", "calls", counts.calls as f64),
    ];
    figures.extend(crate::chaos::invariants(SECTION, pages, &found, refetched));
    for fault in PortFault::ALL {
        figures.push(one(
            &format!("faults injected: {}", fault.name()),
            "calls",
            counts.of(fault) as f64,
        ));
    }
    Ok(figures)
}
