//! Scrapy beside trawl in the local crawl: the same fixture site, the same concurrency, robots.txt
//! obeyed, every body written to a file (`bench/scrapy/spider.py`), timed spawn to exit as
//! `trawl crawl` is, so the ratio between them comes from one run on one machine. Scrapy lives in
//! a virtualenv of its own beside the target directory's binaries, made with pip on first use.

use crate::error::{BenchResult, Context, check};
use crate::local::TempDir;
use crate::machine;
use crate::site::Site;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The version measured against (pinned: figures of different Scrapys do not compare).
const SCRAPY: &str = "scrapy==2.19.0";
const SPIDER: &str = include_str!("../scrapy/spider.py");
/// Longest one Scrapy crawl may take.
const CRAWL_TIMEOUT: Duration = Duration::from_secs(600);

/// The virtualenv's python, with Scrapy installed: `{target}/scrapy-venv`, created when missing.
pub fn python() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe().step("locate trawl-bench")?;
    let target = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| check("scrapy", "no target directory above trawl-bench"))?;
    let venv = target.join("scrapy-venv");
    let python = venv.join("bin").join("python");
    if has_scrapy(&python) {
        return Ok(python);
    }
    eprintln!("  installing {SCRAPY} into {} (first use)", venv.display());
    run(
        "create the Scrapy virtualenv",
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
    )?;
    run(
        "pip install scrapy",
        Command::new(&python).args(["-m", "pip", "install", "--quiet", SCRAPY]),
    )?;
    if !has_scrapy(&python) {
        return Err(check("scrapy", "installed, but `import scrapy` fails"));
    }
    Ok(python)
}

fn has_scrapy(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import scrapy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(what: &'static str, command: &mut Command) -> BenchResult<()> {
    let status = command.stdin(Stdio::null()).status().step(what)?;
    if !status.success() {
        return Err(check(what, format!("exited with {status}")));
    }
    Ok(())
}

/// What the spider prints when it closes.
#[derive(Deserialize)]
struct Closed {
    pages: usize,
}

/// One Scrapy crawl of `site` from its first page, `concurrency` requests in flight: wall time
/// from spawn to exit and CPU seconds of the reaped child. Fails unless every page was stored.
pub fn crawl(python: &Path, site: &Site, concurrency: u32) -> BenchResult<(f64, f64)> {
    let dir = TempDir::new("scrapy")?;
    let spider = dir.0.join("spider.py");
    std::fs::write(&spider, SPIDER).step("write spider.py")?;
    let out = dir.0.join("bodies");
    std::fs::create_dir_all(&out).step("create the bodies dir")?;
    let cpu_before = machine::children_cpu_seconds()?;
    let started = Instant::now();
    let mut child = Command::new(python)
        .arg(&spider)
        .arg(site.page_url(0))
        .arg(&out)
        .arg(concurrency.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .step("run scrapy")?;
    let status = loop {
        if let Some(status) = child.try_wait().step("wait for scrapy")? {
            break status;
        }
        if started.elapsed() > CRAWL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(check("scrapy", "timed out"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = machine::children_cpu_seconds()? - cpu_before;
    if !status.success() {
        return Err(check("scrapy", format!("exited with {status}")));
    }
    let mut printed = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut printed).step("read scrapy's output")?;
    }
    let closed: Closed = printed
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .ok_or_else(|| check("scrapy", format!("printed {printed:?}")))?;
    if closed.pages != site.pages {
        return Err(check(
            "scrapy",
            format!("stored {} of {} pages", closed.pages, site.pages),
        ));
    }
    Ok((elapsed, cpu))
}
