//! The sweeper: finds hosts whose turn message is missing while they have due work, re-issues
//! their turns, schedules recrawls, and notices when a crawl is finished.
//!
//! One sweep of a crawl has three parts; the first two are bounded by a [`SweepBudget`] (query
//! pages and time; what is left is found by the next invocation):
//! - **failed tasks due again**, through the status index (`TaskRecords::query`, never a scan),
//!   bounded by an `updated_before` window: the backoff is at least half of
//!   `min(retry.base_delay_ms, retry.max_delay_ms)`, which bounds it;
//! - **the host records**, page by page (`HostStore::list_hosts`): hosts whose turn expired or
//!   whose turn message was lost, and hosts whose wake-up time (a due recrawl) has come, which
//!   reopens a completed crawl; pending and in-progress tasks are found here, as their hosts'
//!   due work, not through the status index;
//! - **completion**: when nothing was re-issued, the crawl's host counts
//!   (`HostStore::host_counts`, kept by the host writes themselves) and one small query of failed
//!   tasks: a few reads whatever the number of hosts, within or past the budget, so a crawl of a
//!   million hosts completes without one invocation seeing them all (the rule: `HostCounts`). A
//!   crawl created before the counts is decided by the old walk (`has_work`).
//!
//! Work is handed out per host, not per task: for the hosts of the tasks found, the host record
//! says whether a turn is running or a message is on its way (`Host::message_lost`); only hosts
//! without either get a new turn message, under a new epoch that supersedes any straggler. A
//! queued message is presumed lost once overdue by a window the queue's depth sets
//! (`host::lost_after_ms`): a minute when the queue holds nothing, hours while it holds a
//! message per open host (a deep queue's turns are waiting, not lost), the crawl's usual window
//! otherwise. Lost
//! messages are found from the host records themselves (a page-by-page scan of the crawl's
//! hosts, never of its tasks): a task merely waiting behind its host's long backlog is never
//! re-sent, and a pending task always has a host that knows of it (hosts are told of URLs
//! before the tasks are written). The work per
//! invocation is bounded by a [`SweepBudget`] (query pages and time); whatever is left is found
//! by the next invocation. A page's hosts are re-issued together: each decided over its record
//! as listed (`frontier::HostRef::Listed`: no read of its own), 16 at a time, and their
//! messages sent several batches at once, so a page of 100 hosts costs a few round trips, not
//! two per host (`make bench`'s sweeper section measures the hosts woken per second).
//!
//! Completion: a running crawl with no open host and no `failed` task (failed tasks are always
//! retryable: a give-up is `ignored` or `gone`) is moved to `completed` by one conditional write;
//! the one sweeper whose write succeeded sends a [`CompletionNotice`] to the deliverer. A host
//! stays open from the write that wakes it (before its tasks are written) until a turn hands it
//! back with nothing left, and the crawler seeds discovered links before it finishes the page
//! that links to them, which keeps a crawl with work left counted as such throughout. A page
//! due again (a recrawl) is not work of the running generation: the host wakes the crawl again.

use crate::app::{App, Ports};
use crate::backoff::{Backoff, Transient, persist};
use crate::frontier::{Reissue, hosts_of, reissue_turns};
use crate::queue::{QueueError, SendReport, WorkMessage, WorkQueue, send_patiently};
use crate::store::{
    CrawlStore, HostStore, StoreError, StoreResult, TaskQuery, TaskRecords, TaskSummary,
};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::{CrawlId, host_key_of};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::{self, Host};
use trawl_domain::task::{Millis, Status};

mod level;

/// Tasks read per status query.
pub const PAGE_SIZE: u32 = 100;
/// The least time a pending task must sit untouched before its message is presumed lost.
pub const MIN_LOST_AFTER_MS: u64 = 5 * 60 * 1000;
/// Attempts to send a completion notice.
const NOTICE_ATTEMPTS: u32 = 3;
/// Messages per queue batch (SQS's most), and batches sent at once.
const SEND_BATCH: usize = 10;
const SEND_PARALLELISM: usize = 10;

#[derive(Debug, Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl SweepError {
    pub fn is_retryable(&self) -> bool {
        match self {
            SweepError::Store(e) => e.is_retryable(),
            SweepError::Queue(e) => matches!(e, QueueError::Unavailable { .. }),
        }
    }
}

impl Transient for SweepError {
    fn is_transient(&self) -> bool {
        self.is_retryable()
    }
}

/// Sent to the deliverer when a crawl generation completes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionNotice {
    pub crawl_id: CrawlId,
    pub generation: u64,
}

/// Where completion notices go: the delivery queue (AWS) or the process itself (CLI).
pub trait DeliveryTrigger: Send + Sync {
    fn trigger(
        &self,
        notice: &CompletionNotice,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// A [`DeliveryTrigger`] as an object: what a sweeper (or a deliverer's handler) holds, so that
/// its type names only its App's ports. Every trigger is one.
pub trait Notify: Send + Sync {
    fn notify<'a>(&'a self, notice: &'a CompletionNotice) -> BoxFuture<'a, Result<(), QueueError>>;
}

impl<T: DeliveryTrigger> Notify for T {
    fn notify<'a>(&'a self, notice: &'a CompletionNotice) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(self.trigger(notice))
    }
}

/// Keeps completion notices in the process, for the CLI to deliver (and tests to inspect).
#[derive(Debug, Default)]
pub struct LocalDeliveryTrigger {
    notices: Mutex<Vec<CompletionNotice>>,
}

impl LocalDeliveryTrigger {
    /// The notices received so far, removed from the trigger.
    pub fn take(&self) -> Vec<CompletionNotice> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl DeliveryTrigger for LocalDeliveryTrigger {
    async fn trigger(&self, notice: &CompletionNotice) -> Result<(), QueueError> {
        self.notices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(notice.clone());
        Ok(())
    }
}

/// What one invocation may spend, shared by every crawl it sweeps. Its time is counted on the
/// sweeper's clock (`Clock::instant`) from the start of the first sweep that spends from it, so
/// a sweep on virtual time runs out only when that time moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepBudget {
    /// Status-query pages left.
    pub pages_left: u32,
    /// Time for the sweeps, from the first one's start.
    pub time: Duration,
    /// No new page is started after this instant either (an invocation's own deadline).
    pub deadline: Option<Instant>,
    /// How long a host's message may be overdue before it is presumed lost, for this sweep.
    /// None: `max(lease_ms, MIN_LOST_AFTER_MS)` of the crawl, held longer while the queue
    /// holds a message per open host (`host::lost_after_ms`).
    pub lost_after_ms: Option<u64>,
    /// When the first sweep spending from this budget started (on the sweeper's clock).
    started: Option<Instant>,
}

impl SweepBudget {
    pub fn new(max_pages: u32, time_budget: Duration) -> Self {
        Self {
            pages_left: max_pages,
            time: time_budget,
            deadline: None,
            lost_after_ms: None,
            started: None,
        }
    }

    /// Starts the clock of the budget at `now`, unless an earlier sweep did.
    fn start(&mut self, now: Instant) {
        self.started.get_or_insert(now);
    }

    /// Whether nothing more may be started at `now`: no page left, or the time is up.
    pub fn spent(&self, now: Instant) -> bool {
        let end = self.started.and_then(|at| at.checked_add(self.time));
        self.pages_left == 0 || [end, self.deadline].into_iter().flatten().any(|d| now >= d)
    }

    fn take_page(&mut self, now: Instant) -> bool {
        if self.spent(now) {
            return false;
        }
        self.pages_left -= 1;
        true
    }
}

/// Tuning that is not part of a crawl's configuration.
#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    pub page_size: u32,
}

impl SweepOptions {
    pub fn new() -> Self {
        Self {
            page_size: PAGE_SIZE,
        }
    }
}

/// What sweeping one crawl did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    pub crawl_id: String,
    /// Failed tasks whose next attempt was due, re-enqueued.
    pub due_retries: u64,
    /// Hosts whose turn message was presumed lost, found by the scan of host records.
    pub lost_messages: u64,
    /// Idle hosts woken because their pages were due again (recrawls, checks of gone pages).
    pub recrawls: u64,
    /// Hosts with a turn running or a message out, as the scan of host records found them: a
    /// crawl is not complete while one is.
    pub hosts_busy: u64,
    /// Hosts whose turn was re-issued (their message presumed lost, or woken by a recrawl).
    pub hosts_requeued: u64,
    /// Messages that could not be sent (found again by a later sweep).
    pub enqueue_failed: u64,
    /// Query pages, tasks and host records read: the sweep's cost.
    pub pages_read: u64,
    pub tasks_read: u64,
    pub hosts_read: u64,
    /// Open hosts, as the crawl's host counts said when completion was considered (None: not
    /// read, or a crawl without host counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_open: Option<i64>,
    /// The budget ran out before every window was read: the next sweep continues.
    pub unfinished: bool,
    /// This sweep reopened the completed crawl for a recrawl round.
    pub reopened: bool,
    /// This sweep completed the crawl (and sent the notice below).
    pub completed: bool,
    /// The change-rate estimator's water level this sweep set (`level`), in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<CompletionNotice>,
    /// The notice could not be sent (deliver this generation on demand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice_error: Option<String>,
}

impl SweepReport {
    fn requeued(&self) -> u64 {
        self.due_retries + self.lost_messages + self.recrawls
    }
}

/// What sweeping every crawl did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepSummary {
    pub crawls: Vec<SweepReport>,
    /// Crawls whose sweep failed, with the error (the others were swept).
    pub errors: Vec<(String, String)>,
    /// Crawls not reached because the budget ran out.
    pub skipped: u64,
}

/// The work queue as a sweep sees it: its depth (None: unknown), and the open hosts of the
/// crawls whose messages it may hold (None: unknown; read only when it holds something).
#[derive(Debug, Clone, Copy)]
struct QueueView {
    depth: Option<u64>,
    open: Option<i64>,
}

/// The due window of failed tasks: last updated at or before `updated_before`.
#[derive(Debug, Clone, Copy)]
struct Window {
    updated_before: Millis,
    /// How long a host's message may be overdue before it is presumed lost.
    lost_after_ms: u64,
}

impl Window {
    fn new(now: Millis, age_ms: u64, lost_after_ms: u64) -> Self {
        let ago = |ms: u64| now.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX));
        Self {
            updated_before: ago(age_ms),
            lost_after_ms,
        }
    }
}

/// Sweeps crawls over its App's ports, sending completion notices to its trigger. Build it once
/// per process; it reads the App's ports as its own (it derefs to the App).
pub struct Sweeper<P: Ports> {
    app: Arc<App<P>>,
    trigger: Arc<dyn Notify>,
    options: SweepOptions,
}

impl<P: Ports> std::ops::Deref for Sweeper<P> {
    type Target = App<P>;

    fn deref(&self) -> &App<P> {
        &self.app
    }
}

impl<P: Ports> Sweeper<P> {
    pub fn new(app: Arc<App<P>>, trigger: Arc<dyn Notify>, options: SweepOptions) -> Self {
        Self {
            app,
            trigger,
            options,
        }
    }

    /// Sweeps every running crawl, and every completed crawl that recrawls, in random order (so
    /// one huge crawl cannot starve the others across invocations); a paused crawl is left
    /// alone.
    pub async fn sweep_all(
        &self,
        now: Millis,
        budget: &mut SweepBudget,
    ) -> Result<SweepSummary, SweepError> {
        let mut crawls = self.store.list_crawls(Some(CrawlState::Running)).await?;
        let completed = self.store.list_crawls(Some(CrawlState::Completed)).await?;
        crawls.extend(
            completed
                .into_iter()
                .filter(|c| c.config.recrawl.is_continuous()),
        );
        // A paused crawl's hosts count against the queue's depth: their messages were dropped
        // while their hosts stay open, so a resumed crawl's turns are not held by others'.
        let queue = self.queue_view(&crawls).await;
        crawls.retain(|c| !c.config.paused);
        fastrand::shuffle(&mut crawls);
        budget.start(self.clock.instant());
        let mut summary = SweepSummary::default();
        for (i, crawl) in crawls.iter().enumerate() {
            if budget.spent(self.clock.instant()) {
                summary.skipped = (crawls.len() - i) as u64;
                break;
            }
            match self.sweep_crawl_in(crawl, now, budget, queue).await {
                Ok(report) => summary.crawls.push(report),
                Err(e) => {
                    tracing::warn!(crawl_id = %crawl.id, error = %e, "sweep failed");
                    summary.errors.push((crawl.id.to_string(), e.to_string()));
                }
            }
        }
        Ok(summary)
    }

    /// Sweeps one crawl within `budget`, then adds the sweep's calls to it. The queue's depth is
    /// compared with this crawl's open hosts alone (`sweep_all` compares it with every crawl's).
    pub async fn sweep_crawl(
        &self,
        crawl: &Crawl,
        now: Millis,
        budget: &mut SweepBudget,
    ) -> Result<SweepReport, SweepError> {
        budget.start(self.clock.instant());
        let queue = self.queue_view(std::slice::from_ref(crawl)).await;
        self.sweep_crawl_in(crawl, now, budget, queue).await
    }

    async fn sweep_crawl_in(
        &self,
        crawl: &Crawl,
        now: Millis,
        budget: &mut SweepBudget,
        queue: QueueView,
    ) -> Result<SweepReport, SweepError> {
        budget.start(self.clock.instant());
        let swept = self.sweep_and_complete(crawl, now, budget, queue).await;
        crate::calls::report(&self.store, &self.calls, &crawl.id).await;
        swept
    }

    /// Completes `crawl`'s generation; true when this sweep did (and so sends the notice). A
    /// failed try is tried again under the same completer id: its write may have been applied
    /// while its answer was lost, and a notice not sent then would never be.
    async fn complete(&self, crawl: &Crawl, now: Millis) -> StoreResult<bool> {
        let completer = format!("{:016x}", fastrand::u64(..));
        let retries = std::sync::atomic::AtomicU64::new(0);
        persist(
            self.clock.as_ref(),
            "complete the crawl",
            &Backoff::BRIEF,
            &retries,
            || {
                self.store
                    .complete_crawl(&crawl.id, crawl.generation, &completer, now)
            },
        )
        .await
    }

    async fn sweep_and_complete(
        &self,
        crawl: &Crawl,
        now: Millis,
        budget: &mut SweepBudget,
        queue: QueueView,
    ) -> Result<SweepReport, SweepError> {
        let mut report = SweepReport {
            crawl_id: crawl.id.to_string(),
            ..SweepReport::default()
        };
        let config = &crawl.config;
        let lost_after = match budget.lost_after_ms {
            // A window given to this sweep (an operator's) is not held by a deep queue.
            Some(given) => host::lost_after_ms(given, queue.depth, None),
            None => host::lost_after_ms(
                config.lease_ms.max(MIN_LOST_AFTER_MS),
                queue.depth,
                queue.open,
            ),
        };
        // A level not set now is computed by the next sweep: the pages keep the last one.
        match self.level(crawl, now).await {
            Ok(level) => report.level_ms = level.map(|l| l.ms),
            Err(e) => tracing::warn!(crawl_id = %crawl.id, error = %e, "water level not updated"),
        }
        let mut state = crawl.state;
        if state == CrawlState::Running {
            // An in-progress task whose holder died needs no window: its expired lease is due
            // work of its host (`Task::due_at`), whose lost turn the host scan re-issues.
            let min_backoff = config.retry.base_delay_ms.min(config.retry.max_delay_ms) / 2;
            let window = Window::new(now, min_backoff, lost_after);
            self.scan(crawl, window, now, &mut report, budget).await?;
        }
        // Due recrawls are hosts' wake-up times: a completed crawl that recrawls is scanned too,
        // and reopened by the first host it wakes.
        if state == CrawlState::Running || config.recrawl.is_continuous() {
            self.scan_hosts(crawl, now, lost_after, &mut state, &mut report, budget)
                .await?;
        }
        if crawl.state == CrawlState::Running
            && report.requeued() == 0
            && report.enqueue_failed == 0
            && !self.has_work(&crawl.id, &mut report, budget).await?
            && self.complete(crawl, now).await?
        {
            report.completed = true;
            // The deliverer reads the crawl's calls as soon as it has the notice: add ours first
            // (the notice itself goes with the report after it).
            crate::calls::report(&self.store, &self.calls, &crawl.id).await;
            let notice = CompletionNotice {
                crawl_id: crawl.id.clone(),
                generation: crawl.generation,
            };
            if let Err(e) = self.send_notice(&notice).await {
                tracing::error!(crawl_id = %crawl.id, generation = crawl.generation, error = %e,
                    "crawl completed but the delivery notice was not sent: deliver it on demand");
                report.notice_error = Some(e.to_string());
            }
            report.notice = Some(notice);
        }
        Ok(report)
    }

    /// The work queue's depth, and the open hosts of `crawls` (those whose messages it may
    /// hold) when it holds something: what presumes a queued message lost
    /// (`host::lost_after_ms`). An unknown depth or count (an error, a crawl without counts)
    /// is None: the usual window.
    async fn queue_view(&self, crawls: &[Crawl]) -> QueueView {
        let depth = match self.queue.depth().await {
            Ok(depth) => depth,
            Err(e) => {
                tracing::debug!(error = %e, "queue depth unknown; the usual lost-message window");
                None
            }
        };
        let mut open = None;
        if depth.is_some_and(|d| d > 0) {
            open = Some(0);
            for crawl in crawls {
                match self.store.host_counts(&crawl.id).await {
                    Ok(counts) => {
                        open = open.zip(counts).map(|(sum, counts)| sum + counts.open);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "host counts unknown; the usual window");
                        open = None;
                    }
                }
                if open.is_none() {
                    break;
                }
            }
        }
        QueueView { depth, open }
    }

    /// Reads one due window page by page, re-enqueueing what is due.
    async fn scan(
        &self,
        crawl: &Crawl,
        window: Window,
        now: Millis,
        report: &mut SweepReport,
        budget: &mut SweepBudget,
    ) -> Result<(), SweepError> {
        let mut cursor = None;
        loop {
            if !budget.take_page(self.clock.instant()) {
                report.unfinished = true;
                return Ok(());
            }
            let page = self
                .store
                .query(&TaskQuery {
                    crawl_id: crawl.id.clone(),
                    status: Status::Failed,
                    updated_before: Some(window.updated_before),
                    limit: self.options.page_size.max(1),
                    cursor: cursor.take(),
                    part: crate::store::Part::WHOLE,
                })
                .await?;
            report.pages_read += 1;
            report.tasks_read += page.tasks.len() as u64;
            let due: Vec<&TaskSummary> = page.tasks.iter().filter(|t| is_due(t, now)).collect();
            if !due.is_empty() {
                self.requeue(crawl, &due, now, window.lost_after_ms, report)
                    .await?;
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Reads the crawl's host records page by page, from where the last sweep stopped (the
    /// position is kept in the store: `HostStore::host_scan`), and re-issues the turns of those whose
    /// message is presumed lost (`Host::message_lost`): a send that failed, a message that went
    /// to the dead-letter queue, an idle host that still has work, or whose pages are due again
    /// (its wake-up time: a completed crawl is reopened first, so that a running crawl owns the
    /// fetches). Only host records are read; a task merely waiting behind its host's backlog is
    /// never re-sent. Counts the hosts busy meanwhile (a scan resumed from an earlier sweep has
    /// not seen them all, and counts as one).
    async fn scan_hosts(
        &self,
        crawl: &Crawl,
        now: Millis,
        lost_after_ms: u64,
        state: &mut CrawlState,
        report: &mut SweepReport,
        budget: &mut SweepBudget,
    ) -> Result<(), SweepError> {
        // Where the last sweep stopped, in whatever process it ran (a cold container too).
        let resumed = self.store.host_scan(&crawl.id).await?;
        if resumed.is_some() {
            report.hosts_busy += 1;
        }
        let mut cursor = resumed.clone();
        loop {
            if !budget.take_page(self.clock.instant()) {
                report.unfinished = true;
                if cursor.is_some() && cursor != resumed {
                    self.store
                        .set_host_scan(&crawl.id, cursor.as_deref())
                        .await?;
                }
                return Ok(());
            }
            let page = self
                .store
                .list_hosts(&crawl.id, cursor.take(), self.options.page_size.max(1))
                .await?;
            report.pages_read += 1;
            report.hosts_read += page.hosts.len() as u64;
            report.hosts_busy += page.hosts.iter().filter(|h| !h.is_idle(now)).count() as u64;
            let (lost, woken): (Vec<&Host>, Vec<&Host>) = page
                .hosts
                .iter()
                .filter(|h| h.message_lost(now, lost_after_ms, false))
                .partition(|h| h.wake_at.is_none_or(|at| at > now));
            if !woken.is_empty() && *state == CrawlState::Completed {
                report.reopened = self.store.reopen_crawl(&crawl.id, now).await?;
                *state = CrawlState::Running;
            }
            if *state == CrawlState::Running && !(lost.is_empty() && woken.is_empty()) {
                let listed = lost.iter().chain(&woken).map(|&h| h.clone());
                let which = Reissue::Lost {
                    lost_after_ms,
                    known_work: false,
                };
                let messages = reissue_turns(&self.store, crawl, listed, which, now).await?;
                let sent = send_turns(&self.queue, &messages).await?;
                report.enqueue_failed += sent.failed.len() as u64;
                let failed: HashSet<&str> =
                    sent.failed.iter().map(|(host, _)| host.as_str()).collect();
                let sent_to = |hosts: &[&Host]| {
                    hosts
                        .iter()
                        .filter(|h| messages.iter().any(|m| m.host == h.name))
                        .filter(|h| !failed.contains(h.name.as_str()))
                        .count() as u64
                };
                report.lost_messages += sent_to(&lost);
                report.recrawls += sent_to(&woken);
                report.hosts_requeued += sent_to(&lost) + sent_to(&woken);
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None if resumed.is_some() => {
                    // A full round of the hosts is done: the next sweep starts from the first.
                    self.store.set_host_scan(&crawl.id, None).await?;
                    return Ok(());
                }
                None => return Ok(()),
            }
        }
    }

    /// Re-issues the turns of `due`'s hosts whose message is presumed lost. A host with a live
    /// turn or a message still on its way is left alone: that turn takes its due tasks.
    async fn requeue(
        &self,
        crawl: &Crawl,
        tasks: &[&TaskSummary],
        now: Millis,
        lost_after_ms: u64,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let hosts = hosts_of(tasks.iter().map(|t| t.url.as_str()));
        let which = Reissue::Lost {
            lost_after_ms,
            known_work: true,
        };
        let messages = reissue_turns(&self.store, crawl, hosts, which, now).await?;
        if messages.is_empty() {
            return Ok(());
        }
        let sent = send_turns(&self.queue, &messages).await?;
        let failed: HashSet<&str> = sent.failed.iter().map(|(host, _)| host.as_str()).collect();
        report.enqueue_failed += failed.len() as u64;
        let woken: HashSet<&str> = messages
            .iter()
            .map(|m| m.host.as_str())
            .filter(|host| !failed.contains(host))
            .collect();
        let n = tasks
            .iter()
            .filter(|t| woken.contains(host_key_of(&t.url).as_str()))
            .count() as u64;
        report.hosts_requeued += woken.len() as u64;
        report.due_retries += n;
        Ok(())
    }

    /// Whether the crawl still has work to do, by the rule of `HostCounts`: a host open, or a
    /// failed task (one small query of the status index) — a few reads whatever the number of
    /// hosts. A crawl without host counts (created before them) is decided as it was: only by a
    /// sweep that read every host record within its budget and found none busy, then one small
    /// query per unfinished status (on DynamoDB pending and in-progress tasks are read from the
    /// hosts' due lists, host after host).
    async fn has_work(
        &self,
        crawl_id: &CrawlId,
        report: &mut SweepReport,
        budget: &SweepBudget,
    ) -> Result<bool, SweepError> {
        let unfinished = match self.store.host_counts(crawl_id).await? {
            Some(counts) => {
                report.hosts_open = Some(counts.open);
                if !counts.all_idle() {
                    return Ok(true);
                }
                &[Status::Failed][..]
            }
            None if report.hosts_busy > 0
                || report.unfinished
                || budget.spent(self.clock.instant()) =>
            {
                return Ok(true);
            }
            None => &[Status::Pending, Status::InProgress, Status::Failed][..],
        };
        for &status in unfinished {
            let page = self
                .store
                .query(&TaskQuery {
                    crawl_id: crawl_id.clone(),
                    status,
                    updated_before: None,
                    limit: 1,
                    cursor: None,
                    part: crate::store::Part::WHOLE,
                })
                .await?;
            report.pages_read += 1;
            report.tasks_read += page.tasks.len() as u64;
            if !page.tasks.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn send_notice(&self, notice: &CompletionNotice) -> Result<(), QueueError> {
        let mut attempt = 0;
        loop {
            match self.trigger.notify(notice).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt + 1 >= NOTICE_ATTEMPTS => return Err(e),
                Err(_) => {
                    attempt += 1;
                    self.clock
                        .sleep(Duration::from_millis(200 << attempt))
                        .await;
                }
            }
        }
    }
}

/// Sends turn messages `SEND_PARALLELISM` batches at once: a queue sends its batches one after
/// the other, and a page of re-issued hosts is ten batches.
async fn send_turns<Q: WorkQueue>(
    queue: &Q,
    messages: &[WorkMessage],
) -> Result<SendReport, QueueError> {
    let reports: Vec<Result<SendReport, QueueError>> =
        futures_util::stream::iter(messages.chunks(SEND_BATCH))
            .map(|batch| send_patiently(queue, batch))
            .buffered(SEND_PARALLELISM)
            .collect()
            .await;
    let mut total = SendReport::default();
    for report in reports {
        let report = report?;
        total.sent += report.sent;
        total.failed.extend(report.failed);
    }
    Ok(total)
}

/// Whether a failed task found in the window is due to be tried again.
fn is_due(t: &TaskSummary, now: Millis) -> bool {
    t.next_attempt_at.is_none_or(|at| at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::canonical::CanonicalUrl;

    fn summary(status: Status, updated: Millis) -> TaskSummary {
        let url = CanonicalUrl::parse("http://example.com/").unwrap();
        TaskSummary {
            crawl_id: CrawlId::parse("c").unwrap(),
            task_id: url.task_id(),
            url: url.as_str().into(),
            status,
            updated_at: updated,
            depth: 0,
            retries: 0,
            lease_expires_at: None,
            next_attempt_at: None,
            next_fetch_at: None,
            enqueued_at: None,
            priority: Default::default(),
        }
    }

    #[test]
    fn a_failed_task_is_due_at_its_next_attempt() {
        let now = 1_000_000;
        let mut f = summary(Status::Failed, 100);
        f.next_attempt_at = Some(now + 5);
        assert!(!is_due(&f, now));
        f.next_attempt_at = Some(now - 5);
        assert!(is_due(&f, now));
    }

    #[test]
    fn budgets_count_pages_and_time_on_the_clock_given() {
        let t0 = Instant::now();
        let mut b = SweepBudget::new(2, Duration::from_secs(60));
        b.start(t0);
        assert!(b.take_page(t0) && b.take_page(t0));
        assert!(!b.take_page(t0) && b.spent(t0));
        let mut timed = SweepBudget::new(10, Duration::from_secs(60));
        timed.start(t0);
        // A later sweep spends from the same start.
        timed.start(t0 + Duration::from_secs(30));
        assert!(!timed.spent(t0 + Duration::from_secs(59)));
        assert!(timed.spent(t0 + Duration::from_secs(60)));
        timed.deadline = Some(t0 + Duration::from_secs(10));
        assert!(timed.spent(t0 + Duration::from_secs(10)));
        // Not started, no time is spent; started, a zero budget is spent at once.
        let mut late = SweepBudget::new(10, Duration::ZERO);
        assert!(!late.spent(t0));
        late.start(t0);
        assert!(late.spent(t0));
    }

    #[tokio::test]
    async fn the_local_trigger_keeps_notices() {
        let trigger = LocalDeliveryTrigger::default();
        let notice = CompletionNotice {
            crawl_id: CrawlId::parse("c").unwrap(),
            generation: 2,
        };
        trigger.trigger(&notice).await.unwrap();
        assert_eq!(trigger.take(), [notice]);
        assert!(trigger.take().is_empty());
        let json = serde_json::to_string(&CompletionNotice {
            crawl_id: CrawlId::parse("c").unwrap(),
            generation: 2,
        })
        .unwrap();
        assert_eq!(json, r#"{"crawl_id":"c","generation":2}"#);
    }
}
