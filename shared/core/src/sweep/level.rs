//! The change-rate estimator's water level (`trawl_domain::estimate`), recomputed by the sweep
//! of a crawl whose pages the estimator schedules, at most every `LEVEL_EVERY_MS`.
//!
//! The sample is the first `LEVEL_HOSTS` host records (standing for all the crawl's hosts, as
//! its host counts say) and, of each, the `LEVEL_PAGES_PER_HOST` pages due soonest (the host's
//! due index), each weighted by the pages it stands for (`estimate::due_weight`). The level that
//! spends the crawl's budget on that demand is written to the crawl; turns take it up with the
//! crawl record. The cost is bounded whatever the crawl's size: a page of hosts, a due query
//! and the sampled pages' reads per sampled host, one write. A crawl with nothing fetched yet
//! keeps no level (its pages wait `initial_ms`) and is looked at again at the next sweep.

use super::{SweepError, Sweeper};
use crate::app::Ports;
use crate::store::{CrawlStore, HostStore, TaskRecords, TaskStore};
use crate::url_rules::RecrawlRules;
use futures_util::StreamExt;
use trawl_domain::crawl::Crawl;
use trawl_domain::estimate::{
    Demand, LEVEL_HOSTS, LEVEL_PAGES_PER_HOST, Level, due_weight, level_ms,
};
use trawl_domain::task::{Millis, Status};

/// Sampled pages read at once.
const READS_IN_FLIGHT: usize = 16;
/// The shortest window a host's sample is taken to cover (its pages all overdue).
const MIN_WINDOW_MS: Millis = 60_000;

impl<P: Ports> Sweeper<P> {
    /// Recomputes `crawl`'s water level when it is due; the level set, if any.
    pub(super) async fn level(
        &self,
        crawl: &Crawl,
        now: Millis,
    ) -> Result<Option<Level>, SweepError> {
        let recrawl = &crawl.config.recrawl;
        let Some(budget) = recrawl.estimator_budget() else {
            return Ok(None);
        };
        if !Level::due(crawl.level.as_ref(), now) {
            return Ok(None);
        }
        // The seeder validated the rules; a stored set that does not compile schedules nothing.
        let Ok(rules) = RecrawlRules::new(recrawl) else {
            return Ok(None);
        };
        let page = self.store.list_hosts(&crawl.id, None, LEVEL_HOSTS).await?;
        if page.hosts.is_empty() {
            return Ok(None);
        }
        let sampled = page.hosts.len() as f64;
        let hosts = match self.store.host_counts(&crawl.id).await? {
            Some(counts) => (counts.hosts as f64).max(sampled),
            None => sampled,
        };
        let mut demand = Demand::default();
        for host in &page.hosts {
            let due = self
                .store
                .host_tasks(&crawl.id, &host.name, LEVEL_PAGES_PER_HOST)
                .await?;
            // A host with more pages than were read is represented by those due within the
            // window the read covered.
            let window = (due.len() >= LEVEL_PAGES_PER_HOST as usize)
                .then(|| due.last().and_then(|t| t.next_fetch_at))
                .flatten()
                .map(|last| u64::try_from(last.saturating_sub(now).max(MIN_WINDOW_MS)))
                .and_then(Result::ok);
            let store = &self.store;
            let fetchable = due
                .iter()
                .filter(|t| matches!(t.status, Status::Succeeded | Status::Pending));
            let mut reads = futures_util::stream::iter(fetchable)
                .map(|t| store.get(&crawl.id, &t.task_id))
                .buffer_unordered(READS_IN_FLIGHT);
            while let Some(task) = reads.next().await {
                let Some(task) = task? else { continue };
                let Some(estimated) = rules.for_url(&task.url).estimator else {
                    continue;
                };
                let fetch = task.fetch.as_ref();
                let interval = fetch
                    .and_then(|f| Some(f.next_fetch_at?.saturating_sub(f.fetched_at)))
                    .and_then(|i| u64::try_from(i).ok());
                let history = fetch
                    .and_then(|f| f.pace)
                    .and_then(|p| p.history)
                    .unwrap_or_default();
                let settings = estimated.settings;
                let weight = hosts / sampled * due_weight(interval, window);
                demand.add_history(&history, settings, weight);
            }
        }
        if demand.pages() == 0.0 {
            return Ok(None);
        }
        let level = Level {
            ms: level_ms(&demand, budget as f64),
            at: now,
        };
        self.store.set_level(&crawl.id, level).await?;
        tracing::debug!(crawl_id = %crawl.id, level_ms = level.ms, pages = demand.pages(),
            "water level");
        Ok(Some(level))
    }
}
