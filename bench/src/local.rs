//! Section 1: local crawl throughput on the embedded backend, against the raw serving limit.

use crate::error::{BenchResult, Context, check};
use crate::machine;
use crate::report::Figure;
use crate::site::Site;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_core::app::App;
use trawl_core::crawler::{Crawler, Disposition};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::WorkQueue;
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, StorageLayout};
use trawl_domain::task::{NewTask, Status, now_ms};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

const SECTION: &str = "local crawl";
/// Requests in flight, for the raw loop and within a host's turn in the crawl.
pub const PER_HOST: u32 = 16;
/// Crawl workers (each receives batches of up to 10 turn messages). The fixture is one host, so
/// one turn runs at a time; the others wait for its next turn, as they would on a real crawl.
const WORKERS: usize = 4;
/// Longest one crawl may take before the run is abandoned.
const CRAWL_TIMEOUT: Duration = Duration::from_secs(180);
const SITE: &str = "127.0.0.1";
/// A memory-backed file system, when the machine has one.
pub const TMPFS: &str = "/dev/shm";

/// A crawl config for the loopback fixture: private networks allowed, robots respected, no
/// politeness delay, `PER_HOST` requests in flight within the one host's turn.
pub fn fixture_config() -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.scope.allowed_domains = vec![SITE.to_owned()];
    config.fetch.allow_private_networks = true;
    config.politeness.respect_robots = true;
    config.politeness.delay_ms = 0;
    config.politeness.per_host = PER_HOST;
    config
}

/// A directory under the system temp dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> BenchResult<TempDir> {
        Self::new_in(&std::env::temp_dir(), label)
    }

    pub fn new_in(root: &Path, label: &str) -> BenchResult<TempDir> {
        let path = root.join(format!(
            "trawl-bench-{label}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&path).step("create temp dir")?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fetches every page once with `PER_HOST` requests in flight; pages/s.
async fn raw_fetch(site: &Site, client: &reqwest::Client) -> BenchResult<f64> {
    let start = Instant::now();
    let fetched: Vec<BenchResult<usize>> = futures_util::stream::iter(0..site.pages)
        .map(|i| {
            let url = site.page_url(i);
            async move {
                let response = client.get(url).send().await.step("raw fetch")?;
                Ok(response.bytes().await.step("raw fetch body")?.len())
            }
        })
        .buffer_unordered(PER_HOST as usize)
        .collect()
        .await;
    let elapsed = start.elapsed().as_secs_f64();
    let bytes: usize = fetched
        .into_iter()
        .collect::<BenchResult<Vec<_>>>()?
        .iter()
        .sum();
    if bytes < site.pages * 20_000 {
        return Err(check("raw fetch", format!("only {bytes} bytes fetched")));
    }
    Ok(site.pages as f64 / elapsed)
}

/// What one crawl child reports on its stdout.
#[derive(Debug, Serialize, Deserialize)]
pub struct CrawlOnce {
    pub succeeded: u64,
    pub not_succeeded: u64,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
}

/// Entry point of the `crawl-once` child: crawls `start` into `dir` with the core `Crawler` on
/// SQLite + files + the local queue, and prints a `CrawlOnce` JSON line.
pub fn crawl_once_main(
    start: &str,
    dir: &Path,
    extract: bool,
    layout: StorageLayout,
) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .step("crawl runtime")?;
    let result = runtime.block_on(crawl_embedded(start, dir, extract, layout))?;
    println!("{}", serde_json::to_string(&result).step("encode result")?);
    Ok(())
}

async fn crawl_embedded(
    start: &str,
    dir: &Path,
    extract: bool,
    layout: StorageLayout,
) -> BenchResult<CrawlOnce> {
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::open(dir.join("trawl.db"), calls.clone()).step("open sqlite")?;
    let blobs = FsBlobStore::new(dir.join("objects"), calls.clone());
    let queue = LocalQueue::new(Duration::from_secs(120), calls.clone());
    let mut config = fixture_config();
    config.storage.layout = layout;
    if extract {
        config.extract = crate::extract::extractors(true).map_err(|e| check("extractors", e))?;
    }
    let crawl = Crawl::new(CrawlId::parse("bench").step("crawl id")?, config, now_ms());
    store.create_crawl(&crawl).await.step("create crawl")?;
    let fetcher = Arc::new(Fetcher::new("").step("fetcher")?);
    let crawler = Crawler::new(Arc::new(App::new(store, blobs, queue, calls)), fetcher, 10);
    let cpu_before = machine::cpu_seconds("self")?;
    let started = Instant::now();
    let seed = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(start).step("start url")?,
        depth: 0,
        parent: None,
        data: None,
    };
    add_tasks(
        crawler.store(),
        crawler.queue(),
        &crawl,
        vec![seed],
        now_ms(),
    )
    .await
    .step("seed")?;
    let deadline = Instant::now() + CRAWL_TIMEOUT;
    // The workers run concurrently in one task, as the CLI's runner runs them.
    let workers = (0..WORKERS).map(|_| work(&crawler, deadline));
    for worker in futures_util::future::join_all(workers).await {
        worker?;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let cpu_s = machine::cpu_seconds("self")? - cpu_before;
    let counts = crawler.store().counts(&crawl.id).await.step("counts")?;
    let succeeded = counts.get(&Status::Succeeded).copied().unwrap_or(0);
    Ok(CrawlOnce {
        succeeded,
        not_succeeded: counts.values().sum::<u64>() - succeeded,
        elapsed_s,
        cpu_s,
        peak_rss_mib: machine::peak_rss_mib("self").unwrap_or(f64::NAN),
    })
}

type EmbeddedCrawler = Crawler<(SqliteStore, FsBlobStore, LocalQueue)>;

/// One worker: receive → process_batch → ack / retry_later, until the queue holds nothing (not
/// even in flight: discovery happens before a message is acked, so an empty queue is the end).
async fn work(crawler: &EmbeddedCrawler, deadline: Instant) -> BenchResult<()> {
    let queue = crawler.queue();
    while Instant::now() < deadline {
        let batch = queue.receive(10, 20).await.step("receive")?;
        if batch.is_empty() {
            if queue.is_empty() {
                return Ok(());
            }
            continue;
        }
        let mut done = Vec::new();
        for result in crawler.process_batch(batch, None).await {
            match result.disposition {
                Disposition::Done => done.push(result.receipt),
                Disposition::RetryAfter(ms) => {
                    queue
                        .retry_later(&result.receipt, ms)
                        .await
                        .step("retry_later")?;
                }
                Disposition::Reject(why) => return Err(check("crawl", why)),
            }
        }
        queue.ack(&done).await.step("ack")?;
    }
    Err(check("crawl", "timed out"))
}

/// Crawls the site in a child with its data under `root` (extracting items with the extraction
/// section's 10 fields when `extract`); checks every page was stored and fetched exactly once.
pub async fn checked_crawl(
    site: &Site,
    client: &reqwest::Client,
    root: &Path,
    extract: bool,
    layout: StorageLayout,
) -> BenchResult<CrawlOnce> {
    site.reset(client).await?;
    let crawl = crawl_child(site, root, extract, layout)?;
    let stats = site.stats(client).await?;
    let pages = site.pages as u64;
    if crawl.succeeded != pages || stats.distinct != pages || stats.max_per_page != 1 {
        return Err(check(
            "local crawl",
            format!("{crawl:?}, site saw {stats:?}: expected every page stored, each fetched once"),
        ));
    }
    Ok(crawl)
}

/// Runs the `crawl-once` child and returns what it reports.
fn crawl_child(
    site: &Site,
    root: &Path,
    extract: bool,
    layout: StorageLayout,
) -> BenchResult<CrawlOnce> {
    let dir = TempDir::new_in(root, "crawl")?;
    let exe = std::env::current_exe().step("locate trawl-bench")?;
    let output = Command::new(exe)
        .args(["crawl-once", "--start", &site.page_url(0), "--dir"])
        .arg(&dir.0)
        .args(extract.then_some("--extract"))
        .args(["--layout", layout.name()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .step("run crawl child")?;
    if !output.status.success() {
        return Err(check(
            "crawl child",
            format!("exited with {}", output.status),
        ));
    }
    serde_json::from_slice(&output.stdout).step("crawl child output")
}

/// The real `trawl crawl` with its bodies laid out as `layout` (and the extraction section's
/// 10-field extractor when `extract`): wall time, CPU (as a reaped child) and peak RSS (polled
/// VmHWM).
fn crawl_cli(
    cli: &Path,
    site: &Site,
    layout: StorageLayout,
    extract: bool,
) -> BenchResult<(f64, f64, f64)> {
    let dir = TempDir::new("cli")?;
    let config = dir.0.join("extract.json");
    if extract {
        let extractors = crate::extract::extractors(true).map_err(|e| check("extractors", e))?;
        let json = serde_json::json!({ "extract": extractors });
        std::fs::write(&config, json.to_string()).step("write the extractors' config")?;
    }
    let data = dir.0.join("data");
    let cpu_before = machine::children_cpu_seconds()?;
    let started = Instant::now();
    let mut child = Command::new(cli)
        .args(["crawl", &site.page_url(0), "--data-dir"])
        .arg(&data)
        .args(["--layout", layout.name()])
        .args(extract.then_some("--config"))
        .args(extract.then_some(&config))
        .args([
            "--allow-private-networks",
            "--per-host",
            &PER_HOST.to_string(),
            "--concurrency",
            &PER_HOST.to_string(),
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .step("run trawl crawl")?;
    let pid = child.id().to_string();
    let mut peak: f64 = 0.0;
    let status = loop {
        if let Some(rss) = machine::peak_rss_mib(&pid) {
            peak = peak.max(rss);
        }
        if let Some(status) = child.try_wait().step("wait for trawl crawl")? {
            break status;
        }
        if started.elapsed() > CRAWL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(check("trawl crawl", "timed out"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(check("trawl crawl", format!("exited with {status}")));
    }
    Ok((elapsed, machine::children_cpu_seconds()? - cpu_before, peak))
}

/// The layouts compared, the embedded default last.
const LAYOUTS: [StorageLayout; 2] = [StorageLayout::Objects, StorageLayout::Segments];

/// The `trawl crawl` runs of each round: each layout, then segments with extraction on.
const CLI_RUNS: [(StorageLayout, bool); 3] = [
    (StorageLayout::Objects, false),
    (StorageLayout::Segments, false),
    (StorageLayout::Segments, true),
];

/// One crawl's figures over the runs.
#[derive(Default)]
struct Series {
    rate: Vec<f64>,
    cpu: Vec<f64>,
    rss: Vec<f64>,
    fraction: Vec<f64>,
    /// Its pages/s over Scrapy's in the same round.
    versus_scrapy: Vec<f64>,
}

impl Series {
    fn add(&mut self, pages: usize, elapsed_s: f64, cpu_s: f64, rss: f64, limit: f64) {
        let rate = pages as f64 / elapsed_s;
        self.rate.push(rate);
        self.fraction.push(rate / limit);
        self.cpu.push(cpu_s / pages as f64 * 1000.0);
        self.rss.push(rss);
    }
}

fn cli_label(layout: StorageLayout, extract: bool) -> String {
    let extraction = if extract { ", extraction on" } else { "" };
    format!("`trawl crawl --layout {}`{extraction}", layout.name())
}

/// Runs section 1 `runs` times on a site of `pages`: the core crawler and `trawl crawl` with
/// each layout, and Scrapy, in the same rounds.
pub async fn run(
    pages: usize,
    runs: usize,
    cli: Option<&Path>,
    scrapy: Option<&Path>,
) -> BenchResult<Vec<Figure>> {
    let site = Site::start(pages)?;
    let client = trawl_core::fetch::http_client()
        .pool_max_idle_per_host(PER_HOST as usize)
        .build()
        .step("http client")?;
    let mut raw = vec![];
    let mut core: Vec<Series> = LAYOUTS.iter().map(|_| Series::default()).collect();
    // The same crawls with their data on tmpfs, where fsync is free: the disk's share.
    let in_memory = Some(PathBuf::from(TMPFS)).filter(|p| p.is_dir());
    let mut memory: Vec<Series> = LAYOUTS.iter().map(|_| Series::default()).collect();
    let mut cli_series: Vec<Series> = CLI_RUNS.iter().map(|_| Series::default()).collect();
    let mut extraction_cpu = vec![];
    let (mut scrapy_rate, mut scrapy_cpu) = (vec![], vec![]);
    for run in 0..runs {
        eprintln!("  local crawl: run {}/{runs} ({pages} pages)", run + 1);
        let limit = raw_fetch(&site, &client).await?;
        raw.push(limit);
        // Blocking waits on child processes: nothing else runs in this process meanwhile.
        for (layout, series) in LAYOUTS.iter().zip(&mut core) {
            let crawl =
                checked_crawl(&site, &client, &std::env::temp_dir(), false, *layout).await?;
            series.add(
                pages,
                crawl.elapsed_s,
                crawl.cpu_s,
                crawl.peak_rss_mib,
                limit,
            );
        }
        if let Some(root) = &in_memory {
            for (layout, series) in LAYOUTS.iter().zip(&mut memory) {
                let crawl = checked_crawl(&site, &client, root, false, *layout).await?;
                series.add(
                    pages,
                    crawl.elapsed_s,
                    crawl.cpu_s,
                    crawl.peak_rss_mib,
                    limit,
                );
            }
        }
        if let Some(cli) = cli {
            for ((layout, extract), series) in CLI_RUNS.iter().zip(&mut cli_series) {
                site.reset(&client).await?;
                let (elapsed, cpu_s, peak) = crawl_cli(cli, &site, *layout, *extract)?;
                let stats = site.stats(&client).await?;
                if stats.distinct != pages as u64 || stats.max_per_page != 1 {
                    return Err(check("trawl crawl", format!("site saw {stats:?}")));
                }
                series.add(pages, elapsed, cpu_s, peak, limit);
            }
            if let [.., without, with] = &cli_series[..]
                && let (Some(a), Some(b)) = (without.cpu.last(), with.cpu.last())
            {
                extraction_cpu.push(b / a);
            }
        }
        if let Some(python) = scrapy {
            site.reset(&client).await?;
            let (elapsed, cpu_s) = crate::scrapy::crawl(python, &site, PER_HOST)?;
            let stats = site.stats(&client).await?;
            if stats.distinct != pages as u64 {
                return Err(check("scrapy", format!("site saw {stats:?}")));
            }
            let rate = pages as f64 / elapsed;
            scrapy_rate.push(rate);
            scrapy_cpu.push(cpu_s / pages as f64 * 1000.0);
            // Each run's ratios from the crawls of that run.
            for series in &mut cli_series {
                if let Some(cli) = series.rate.last() {
                    series.versus_scrapy.push(cli / rate);
                }
            }
        }
        site.reset(&client).await?;
    }
    let mut figures = vec![Figure::of(
        SECTION,
        format!("raw serving limit ({PER_HOST} in flight)"),
        "pages/s",
        &raw,
    )];
    for (layout, series) in LAYOUTS.iter().zip(&core) {
        figures.extend([
            Figure::of(
                SECTION,
                format!("core Crawler on SQLite+files, {} layout", layout.name()),
                "pages/s",
                &series.rate,
            ),
            Figure::of(
                SECTION,
                "… as a fraction of the raw limit",
                "ratio",
                &series.fraction,
            ),
            Figure::of(SECTION, "… CPU per page", "ms", &series.cpu),
            Figure::of(SECTION, "… peak RSS", "MiB", &series.rss),
        ]);
    }
    if in_memory.is_some() {
        for (layout, series) in LAYOUTS.iter().zip(&memory) {
            figures.extend([
                Figure::of(
                    SECTION,
                    format!(
                        "… same, {} layout, data on tmpfs ({TMPFS}, no disk sync)",
                        layout.name()
                    ),
                    "pages/s",
                    &series.rate,
                ),
                Figure::of(SECTION, "… … CPU per page", "ms", &series.cpu),
            ]);
        }
    }
    if cli.is_some() {
        for ((layout, extract), series) in CLI_RUNS.iter().zip(&cli_series) {
            figures.extend([
                Figure::of(
                    SECTION,
                    format!(
                        "{} (spawn to exit, delivery included)",
                        cli_label(*layout, *extract)
                    ),
                    "pages/s",
                    &series.rate,
                ),
                Figure::of(SECTION, "… CPU per page", "ms", &series.cpu).at_most(0.5),
                Figure::of(SECTION, "… peak RSS (sampled)", "MiB", &series.rss),
            ]);
        }
        figures.push(
            Figure::of(
                SECTION,
                "`trawl crawl --layout segments`: CPU with extraction ÷ without",
                "ratio",
                &extraction_cpu,
            )
            .at_most(1.2),
        );
    }
    if scrapy.is_some() {
        figures.extend([
            Figure::of(
                SECTION,
                format!("Scrapy, same site (spawn to exit, {PER_HOST} in flight, bodies to files)"),
                "pages/s",
                &scrapy_rate,
            ),
            Figure::of(SECTION, "… CPU per page", "ms", &scrapy_cpu),
        ]);
        if cli.is_some() {
            for ((layout, extract), series) in CLI_RUNS.iter().zip(&cli_series) {
                figures.push(
                    Figure::of(
                        SECTION,
                        format!("{} ÷ Scrapy, pages/s", cli_label(*layout, *extract)),
                        "ratio",
                        &series.versus_scrapy,
                    )
                    .at_least(10.0),
                );
            }
        }
    }
    Ok(figures)
}
