//! Task counts per status, kept on the crawl item without a write of their own, so that
//! `trawl status` reads one item whatever the size of the crawl (walking the hosts' due lists,
//! as a count of pending or succeeded tasks must otherwise, is a query per host).
//!
//! Every task write that lands (a created task, a status moved) is noted in the process, per
//! crawl ([`Deltas`]); the next report of the process's calls to that crawl (the `add_calls`
//! update each invocation ends with, `trawl_core::calls`) adds the notes to the crawl item's
//! `tasks_{status}` attributes in the same UpdateItem. A report that fails gives its notes back
//! for the next one. A read adds the reading process's own notes: it sees its own writes, and
//! lags other processes by their unreported notes (a running invocation's), no more.
//!
//! A report is a request (`trawl_domain::request`), tried again with its id when its answer is
//! lost: its notes are bound to it ([`Deltas::take_for`]) so that every try sends the same
//! write, which DynamoDB then applies once. Notes of a request given up (its tries all failed,
//! its outcome unknown) are not given back: counted once at most.
//!
//! A process that dies between its task writes and its report takes its notes with it: the
//! counts drift. They heal at each delivery: the deliverer reads every task of the generation
//! and sets the counts to what it read (`CrawlChanges::task_counts`), on the condition that the
//! crawl is still completed at that generation (no task write can land meanwhile). A crawl
//! created before the counts (no `tasks_counted` on its item) is counted by the walk.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use trawl_domain::canonical::CrawlId;
use trawl_domain::request::{REQUEST_WINDOW_MS, RequestId};
use trawl_domain::task::Status;

/// The crawl item's mark: its task counts are kept from its creation.
pub(super) const COUNTED: &str = "tasks_counted";

/// The crawl item's attribute holding the count of `status`.
pub(super) fn attribute(status: Status) -> String {
    format!("tasks_{}", status.name())
}

/// Changes of task counts, per status.
type Notes = BTreeMap<Status, i64>;

/// Changes to the task counts noted by this process and not yet reported, per crawl; and those
/// taken by a report, per request, with when it was first tried.
#[derive(Debug, Default)]
pub(super) struct Deltas(
    Mutex<HashMap<CrawlId, Notes>>,
    Mutex<HashMap<RequestId, (Instant, Notes)>>,
);

impl Deltas {
    /// Notes `n` tasks created with `status`.
    pub(super) fn created(&self, crawl_id: &CrawlId, status: Status, n: i64) {
        if n != 0 {
            self.add(crawl_id, [(status, n)]);
        }
    }

    /// Notes a task moved from `from` to `to`.
    pub(super) fn moved(&self, crawl_id: &CrawlId, from: Status, to: Status) {
        if from != to {
            self.add(crawl_id, [(from, -1), (to, 1)]);
        }
    }

    /// The notes of `crawl_id`, taken to be reported.
    pub(super) fn take(&self, crawl_id: &CrawlId) -> BTreeMap<Status, i64> {
        self.lock().remove(crawl_id).unwrap_or_default()
    }

    /// The notes a try of `request` (a report to `crawl_id`) sends: those its first try took,
    /// the same on every try — its answer may be lost above the store too, so a request's
    /// notes are kept for its window whatever the answer, then dropped.
    pub(super) fn take_for(&self, crawl_id: &CrawlId, request: RequestId) -> BTreeMap<Status, i64> {
        let mut bound = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, notes)) = bound.get(&request) {
            return notes.clone();
        }
        let window = Duration::from_millis(REQUEST_WINDOW_MS);
        bound.retain(|_, (at, _)| at.elapsed() < window);
        let notes = self.take(crawl_id);
        bound.insert(request, (Instant::now(), notes.clone()));
        notes
    }

    /// The notes of `crawl_id`, left to be reported.
    pub(super) fn peek(&self, crawl_id: &CrawlId) -> BTreeMap<Status, i64> {
        self.lock().get(crawl_id).cloned().unwrap_or_default()
    }

    /// Gives back notes whose report failed.
    pub(super) fn restore(&self, crawl_id: &CrawlId, notes: BTreeMap<Status, i64>) {
        self.add(crawl_id, notes);
    }

    fn add(&self, crawl_id: &CrawlId, changes: impl IntoIterator<Item = (Status, i64)>) {
        let mut all = self.lock();
        let notes = all.entry(crawl_id.clone()).or_default();
        for (status, n) in changes {
            *notes.entry(status).or_default() += n;
        }
        notes.retain(|_, n| *n != 0);
        if notes.is_empty() {
            all.remove(crawl_id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CrawlId, BTreeMap<Status, i64>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_add_up_per_crawl_and_cancel_out() {
        let deltas = Deltas::default();
        let (a, b) = (CrawlId::parse("a").unwrap(), CrawlId::parse("b").unwrap());
        deltas.created(&a, Status::Pending, 3);
        deltas.moved(&a, Status::Pending, Status::Succeeded);
        deltas.moved(&b, Status::Pending, Status::Pending);
        assert_eq!(
            deltas.take(&a),
            BTreeMap::from([(Status::Pending, 2), (Status::Succeeded, 1)])
        );
        assert!(deltas.take(&a).is_empty());
        assert!(deltas.take(&b).is_empty());
        deltas.restore(&a, BTreeMap::from([(Status::Failed, 1)]));
        deltas.moved(&a, Status::Failed, Status::Pending);
        assert_eq!(deltas.take(&a), BTreeMap::from([(Status::Pending, 1)]));
    }
}
