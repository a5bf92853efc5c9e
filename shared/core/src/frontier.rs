//! Adding URLs to a crawl: the one path shared by the seeder and link discovery.
//!
//! Idempotent (a known URL is never reset), bounded by the crawl's page budget (never exceeded,
//! whatever the concurrency), and only new tasks get a work message. A message that cannot be
//! sent is reported; its task stays `pending` and the sweeper re-enqueues it, so nothing is lost.

use crate::queue::{QueueError, WorkMessage, WorkQueue};
use crate::store::{CrawlStore, Seeded, StoreError, TaskStore};
use std::collections::HashSet;
use thiserror::Error;
use trawl_domain::canonical::{TaskId, UrlError};
use trawl_domain::crawl::Crawl;
use trawl_domain::task::{Millis, NewTask};

#[derive(Debug, Error)]
pub enum FrontierError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// What adding a set of URLs did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// New tasks created (and enqueued, unless listed in `enqueue_failed`).
    pub accepted: u64,
    /// URLs the crawl already had (left untouched).
    pub already_known: u64,
    /// URLs past the crawl's `max_pages` budget (not added).
    pub over_budget: u64,
    /// URLs that were not valid, with the reason.
    pub rejected: Vec<UrlError>,
    /// New tasks whose message could not be sent (the sweeper will enqueue them).
    pub enqueue_failed: Vec<(TaskId, String)>,
}

impl SeedReport {
    pub fn merge(&mut self, other: SeedReport) {
        self.accepted += other.accepted;
        self.already_known += other.already_known;
        self.over_budget += other.over_budget;
        self.rejected.extend(other.rejected);
        self.enqueue_failed.extend(other.enqueue_failed);
    }
}

/// Adds `tasks` to `crawl`: dedupes them, takes page-budget slots, seeds, enqueues the new ones.
pub async fn add_tasks<S, Q>(
    store: &S,
    queue: &Q,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
    now: Millis,
) -> Result<SeedReport, FrontierError>
where
    S: TaskStore + CrawlStore,
    Q: WorkQueue,
{
    let (mut report, messages) = seed_tasks(store, crawl, tasks, now).await?;
    if !messages.is_empty() {
        report.enqueue_failed = queue.send(&messages).await?.failed;
    }
    Ok(report)
}

/// `add_tasks` without the sending: returns the messages of the new tasks, for a caller that
/// pools them into fewer, fuller batches (the crawler, per SQS batch). Until they are sent the
/// new tasks are `pending` without a message, which the sweeper recovers if the send never
/// happens.
pub async fn seed_tasks<S>(
    store: &S,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
    now: Millis,
) -> Result<(SeedReport, Vec<WorkMessage>), FrontierError>
where
    S: TaskStore + CrawlStore,
{
    let mut seen = HashSet::new();
    let mut tasks: Vec<NewTask> = tasks
        .into_iter()
        .filter(|t| seen.insert(t.url.task_id()))
        .collect();
    let mut report = SeedReport::default();
    let reserved = match crawl.config.scope.max_pages {
        Some(max) => {
            let granted = store
                .reserve_pages(&crawl.id, tasks.len() as u64, max)
                .await?;
            report.over_budget = tasks.len() as u64 - granted;
            tasks.truncate(granted as usize);
            Some(granted)
        }
        None => None,
    };
    if tasks.is_empty() {
        return Ok((report, Vec::new()));
    }
    let seeded = store.seed(&crawl.id, &tasks, now).await?;
    let per_host = crawl.config.politeness.per_host;
    let mut messages = Vec::new();
    for (task, outcome) in tasks.iter().zip(&seeded) {
        match outcome {
            Seeded::Created => {
                report.accepted += 1;
                messages.push(WorkMessage::new(
                    crawl.id.clone(),
                    task.url.task_id(),
                    &task.url,
                    task.depth,
                    per_host,
                ));
            }
            Seeded::AlreadyKnown => report.already_known += 1,
        }
    }
    if let Some(granted) = reserved {
        // Slots taken for URLs the crawl already had go back to the budget.
        store
            .release_pages(&crawl.id, granted - report.accepted)
            .await?;
    }
    Ok((report, messages))
}
