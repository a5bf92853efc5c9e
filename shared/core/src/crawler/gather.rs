//! A host turn's open segment: on the segment layout, the pages a turn stores wait here, their
//! records gathered, until the turn appends them together (`record::seal`: on S3 one PUT) and
//! only then runs their fenced finishes. The rule, as the blob port sets it
//! (`BlobStore::gather_bytes`):
//! - **When.** A turn appends what it gathered when its round of fetches ends (the turn's end,
//!   or before it reads its due tasks again: a page gathered is still due until finished), and
//!   as soon as the records reach the store's bound. A local store's bound is 0: each page is
//!   appended as it comes, its finish right after (the store groups concurrent appends into one
//!   flush), so a kill costs only the pages in flight.
//! - **Durable first.** No page is finished before the append holding its records is
//!   acknowledged. A failed append, or a turn that dies before it, finishes none of its pages:
//!   they are fetched again, and bytes that landed are garbage in their segment, never a task
//!   pointing at nothing.
//! - **Under the hold.** A turn appends and finishes only while it holds its host (renewing the
//!   hold when due): one whose turn was taken over finishes nothing and gives its tasks back,
//!   for the new holder to fetch. Each finish stays fenced by its task's lease besides.

use super::record::{self, Gathered, StoredPage};
use super::{CrawlContext, CrawlerError, Hold, Outcome, TurnState, lock};
use crate::app::Ports;
use crate::crawler::Crawler;
use crate::store::TaskStore;
use std::sync::{Mutex, PoisonError};

/// What the turns of one process gather at most, all together: each turn's bound is the store's
/// (`BlobStore::gather_bytes`), or its share of this when that is less. A crawler Lambda runs a
/// whole batch of turns at once (50 by default), and 50 turns of 8 MiB would not fit its 512 MB.
pub(super) const GATHERED_PER_PROCESS: u64 = 128 << 20;

/// A turn's bound when `turns` run at once over a store that gathers up to `store_bound`.
pub(super) fn turn_bound(store_bound: u64, turns: usize) -> u64 {
    store_bound.min(GATHERED_PER_PROCESS / turns.max(1) as u64)
}

/// A page gathered by a turn, and whether its task was fetched before (what its end means to
/// the turn's plan).
pub(super) struct Waiting {
    pub page: Box<Gathered>,
    pub fetched_before: bool,
}

/// The pages a turn gathered and have not been appended yet.
pub(super) struct OpenSegment {
    /// Append once the records reach this many bytes (`BlobStore::gather_bytes`).
    limit: u64,
    waiting: Mutex<(Vec<Waiting>, u64)>,
}

impl OpenSegment {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            waiting: Mutex::new((Vec::new(), 0)),
        }
    }

    pub fn push(&self, waiting: Waiting) {
        let mut open = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        open.1 += waiting.page.len();
        open.0.push(waiting);
    }

    /// Everything gathered, once it reached the bound; else nothing.
    pub fn take_full(&self) -> Vec<Waiting> {
        let mut open = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if open.0.is_empty() || open.1 < self.limit {
            return Vec::new();
        }
        std::mem::take(&mut *open).0
    }

    /// Everything gathered.
    pub fn take(&self) -> Vec<Waiting> {
        let mut open = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *open).0
    }
}

impl<P: Ports> Crawler<P> {
    /// Appends `pages` together and finishes them (see the module doc), telling the turn's plan
    /// how each ended.
    pub(super) async fn seal(
        &self,
        context: &CrawlContext,
        pages: Vec<Waiting>,
        hold: &Hold<'_>,
        state: &Mutex<TurnState>,
    ) {
        if pages.is_empty() {
            return;
        }
        let holding = self.clock.now_ms() < lock(state).plan.renew_at() || {
            let renewed = self.renew(hold, state).await;
            if !renewed {
                lock(state).plan.stop();
            }
            renewed
        };
        let sealed = if holding {
            let dir = self.layout.segments_prefix(&context.crawl.id);
            let gathered = pages.iter().map(|w| w.page.as_ref());
            let clock = self.clock();
            Some(
                record::seal(
                    &self.store,
                    &self.blobs,
                    &self.layout,
                    &dir,
                    gathered,
                    clock,
                )
                .await,
            )
        } else {
            tracing::warn!(
                pages = pages.len(),
                "the host's turn was lost before its pages were stored: they are fetched again"
            );
            None
        };
        let ends: Vec<(Outcome, bool)> = match sealed {
            None => {
                for waiting in &pages {
                    self.release(&waiting.page).await;
                }
                pages
                    .iter()
                    .map(|w| (Outcome::Skipped, w.fetched_before))
                    .collect()
            }
            Some(Err(e)) => {
                let e = CrawlerError::Record(e);
                tracing::error!(error = %e, pages = pages.len(), "segment append failed; tasks released");
                for waiting in &pages {
                    self.faults.failed(&e);
                    self.release(&waiting.page).await;
                }
                pages
                    .iter()
                    .map(|w| (Outcome::Error, w.fetched_before))
                    .collect()
            }
            Some(Ok(finishes)) => {
                let mut ends = Vec::with_capacity(pages.len());
                for (waiting, finish) in pages.iter().zip(finishes) {
                    let outcome = match finish {
                        Ok(StoredPage::Finished { put }) => {
                            self.faults.done();
                            Outcome::Succeeded {
                                bytes: waiting.page.content_length(),
                                put,
                            }
                        }
                        Ok(StoredPage::LostLease) => {
                            tracing::debug!(task = %waiting.page.task.task_id, "lease lost: another worker recorded the page");
                            Outcome::Skipped
                        }
                        Err(e) => {
                            let e = CrawlerError::Record(e);
                            tracing::error!(task = %waiting.page.task.task_id, error = %e, "finish failed; task released");
                            self.faults.failed(&e);
                            self.release(&waiting.page).await;
                            Outcome::Error
                        }
                    };
                    ends.push((outcome, waiting.fetched_before));
                }
                ends
            }
        };
        let now = self.clock.now_ms();
        let mut turn = lock(state);
        for (waiting, (outcome, fetched_before)) in pages.iter().zip(ends) {
            let end = outcome.end_of(fetched_before);
            turn.ended(&waiting.page.task.task_id, outcome, end, None, now);
        }
    }

    /// Gives a gathered page's task back, so it need not wait for its lease to expire.
    async fn release(&self, page: &Gathered) {
        if let Err(e) = self.store.release(&page.lease, self.clock.now_ms()).await {
            tracing::warn!(task = %page.task.task_id, error = %e, "release failed; the lease will expire");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_gathers_the_stores_bound_or_its_share_of_the_process_budget() {
        // S3's 8 MiB for the 10 turns of a small batch; a 50-turn batch shares 128 MiB.
        assert_eq!(turn_bound(8 << 20, 10), 8 << 20);
        assert_eq!(turn_bound(8 << 20, 50), (128 << 20) / 50);
        assert!(turn_bound(8 << 20, 50) * 50 <= GATHERED_PER_PROCESS);
        // A local store appends each page as it comes, whatever the concurrency.
        assert_eq!(turn_bound(0, 50), 0);
        assert_eq!(turn_bound(8 << 20, 0), 8 << 20);
    }
}
