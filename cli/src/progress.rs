//! Progress while crawling: a bar on a terminal, plain periodic lines otherwise, nothing in
//! JSON mode (stdout then carries only the summary).

use crate::output;
use indicatif::{ProgressBar, ProgressStyle};
use std::convert::Infallible;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use trawl_core::runner::RunStats;
use trawl_core::store::TaskStore;
use trawl_domain::canonical::CrawlId;

/// How often plain progress lines are printed when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

pub enum Progress {
    Bar(ProgressBar),
    Lines,
    Silent,
}

impl Progress {
    pub fn start(json: bool) -> Self {
        if json {
            return Progress::Silent;
        }
        if !std::io::stderr().is_terminal() {
            return Progress::Lines;
        }
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{bar:30} {pos}/{len} pages  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress::Bar(bar)
    }

    /// Updates the display until dropped (the crawl ends by winning the `select!`).
    pub async fn tick_loop<S: TaskStore>(
        &self,
        stats: &RunStats,
        store: &S,
        crawl_id: &CrawlId,
        started: Instant,
    ) -> Infallible {
        let every = match self {
            Progress::Bar(_) => Duration::from_millis(500),
            Progress::Lines => PLAIN_EVERY,
            Progress::Silent => Duration::from_secs(3600),
        };
        loop {
            tokio::time::sleep(every).await;
            let known = match store.counts(crawl_id).await {
                Ok(counts) => counts.values().sum::<u64>(),
                Err(_) => continue,
            };
            let done = stats.finished();
            let secs = started.elapsed().as_secs_f64().max(0.001);
            let message = format!(
                "{:.1} pages/s  {:.1} MB  {} retrying  {} given up",
                done as f64 / secs,
                stats.bytes.load(Ordering::Relaxed) as f64 / 1e6,
                stats.retrying.load(Ordering::Relaxed),
                stats.gave_up.load(Ordering::Relaxed),
            );
            match self {
                Progress::Bar(bar) => {
                    bar.set_length(known);
                    bar.set_position(done);
                    bar.set_message(message);
                }
                Progress::Lines => output::note(format_args!("{done}/{known} pages  {message}")),
                Progress::Silent => {}
            }
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
