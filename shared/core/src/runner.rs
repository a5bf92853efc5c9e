//! Runs one crawl to completion inside one process (the `trawl` CLI, the benchmarks): worker
//! loops consume the queue through the same `Crawler` the Lambda runs, and whenever the queue
//! goes quiet the same `Sweeper` re-enqueues what is due and decides when the crawl is complete.
//! An in-process queue says when it is drained (nothing deliverable, in flight or delayed): the
//! last worker to go idle then wakes the sweeper at once; any other queue must stay quiet for a
//! while first. A run of a completed crawl that recrawls sweeps it too, so the run does what is
//! due (the next generation, when its first recrawl is) and ends; one with nothing due ends at
//! once.

use crate::app::{Ports, Store};
use crate::backoff::{Backoff, Outage, Transient};
use crate::crawler::{Crawler, Disposition, Outcome};
use crate::frontier::{Reissue, reissue_turns};
use crate::queue::{QueueError, WorkQueue};
use crate::store::{ClaimOutcome, CrawlStore, StoreError, TaskQuery};
use crate::sweep::{LocalDeliveryTrigger, SweepBudget, SweepError, SweepOptions, Sweeper};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::Notify;
use tokio::time::Instant;
use trawl_domain::canonical::{CrawlId, bounded, host_key_of};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::task::{Millis, Status};

/// How long a worker waits on an empty queue (SQS long polling: an empty queue costs one
/// request per second per worker, not a busy loop; the local queue wakes at once on a send).
const RECEIVE_WAIT_MS: u64 = 1_000;
/// How often the coordinator looks whether the queue went quiet (besides being woken by the
/// last worker to go idle).
const COORDINATOR_TICK: Duration = Duration::from_millis(200);
/// How long a queue that cannot say it is drained must stay quiet before the sweeper runs.
const QUIET: Duration = Duration::from_millis(500);
/// Host records read per page while rebuilding the local queue.
const HOST_PAGE: u32 = 500;
/// Delay before a rejected (malformed) message is offered again (until the queue dead-letters
/// it).
const REJECT_DELAY_MS: u64 = 30_000;

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Sweep(#[from] SweepError),
    #[error("no crawl {0}")]
    NoSuchCrawl(CrawlId),
    /// Storage that keeps failing: a permanent error task after task, or processing that kept
    /// failing with no task done for the outage bound.
    #[error("storage keeps failing: {0}")]
    Storage(String),
}

impl Transient for RunError {
    fn is_transient(&self) -> bool {
        match self {
            RunError::Store(e) => e.is_transient(),
            RunError::Queue(e) => e.is_transient(),
            RunError::Sweep(e) => e.is_transient(),
            RunError::NoSuchCrawl(_) | RunError::Storage(_) => false,
        }
    }
}

/// Live counters of a run, for progress displays.
#[derive(Debug, Default)]
pub struct RunStats {
    /// Pages fetched and stored (or recorded).
    pub succeeded: AtomicU64,
    /// Pages found unchanged (304 or same md5): no upload.
    pub unchanged: AtomicU64,
    /// Redirects recorded (their targets are tasks of their own).
    pub redirected: AtomicU64,
    /// Failures that will be retried (snoozed hosts' URLs included).
    pub retrying: AtomicU64,
    /// Tasks given up (permanent failure or retries exhausted).
    pub gave_up: AtomicU64,
    /// Duplicate or stale messages dropped, and malformed ones handed back (see
    /// `dead_lettered`).
    pub skipped: AtomicU64,
    /// Storage errors (the message comes back).
    pub errors: AtomicU64,
    /// Body bytes fetched.
    pub bytes: AtomicU64,
    /// Transient backend errors waited out (the step tried again after a pause).
    pub backend_retries: AtomicU64,
    /// Malformed messages the queue gave up on (moved to its dead letters, each logged once).
    pub dead_lettered: AtomicU64,
}

impl RunStats {
    fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Succeeded { bytes, .. } => {
                self.bytes.fetch_add(bytes, Ordering::Relaxed);
                &self.succeeded
            }
            Outcome::Unchanged => &self.unchanged,
            Outcome::Redirected => &self.redirected,
            Outcome::Retrying { .. } | Outcome::Snoozed => &self.retrying,
            Outcome::GaveUp => &self.gave_up,
            // A malformed message is no storage error: counted here, not as a stall.
            Outcome::Skipped | Outcome::Malformed => &self.skipped,
            Outcome::Error => &self.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Tasks brought to an end by this run.
    pub fn finished(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
            + self.unchanged.load(Ordering::Relaxed)
            + self.redirected.load(Ordering::Relaxed)
            + self.gave_up.load(Ordering::Relaxed)
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The crawl has nothing left to do; this generation is ready for delivery.
    Completed { generation: u64 },
    /// Stopped on request or at a limit: in-flight tasks were finished, the rest is left for
    /// the next run.
    Stopped(StopReason),
}

/// Why a run stopped before the crawl completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The caller's stop flag (Ctrl-C), or a worker's failure (the run's error then).
    Asked,
    /// `RunLimits::max_fetches` page fetches started.
    MaxFetches(u64),
    /// `RunLimits::max_time` passed.
    MaxTime(Duration),
}

/// Limits of one run (`trawl crawl --max-fetches / --max-time`, Scrapy's `CLOSESPIDER_*`): the
/// run stops as on Ctrl-C once one is reached, and the next run goes on. They belong to the
/// run, not to the crawl: nothing of them is stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Page fetches the run may start (one request each; robots.txt and the reference
    /// re-tests of soft-404 checks are not counted).
    pub max_fetches: Option<u64>,
    /// How long the run may crawl, on the crawler's clock from the start of `run_crawl`.
    pub max_time: Option<Duration>,
}

impl RunLimits {
    /// The limit reached `elapsed` into the run, if any.
    fn reached<P: Ports>(&self, crawler: &Crawler<P>, elapsed: Duration) -> Option<StopReason> {
        if let Some(n) = self.max_fetches
            && crawler.halt().fetches_spent()
        {
            return Some(StopReason::MaxFetches(n));
        }
        self.max_time
            .filter(|max| elapsed >= *max)
            .map(StopReason::MaxTime)
    }
}

/// Puts the turn of every host with unfinished work (back) on a queue that lives in this
/// process: after a restart (or a kill -9) the in-process queue is empty while the table still
/// knows the work. `in_progress` tasks are leftovers of a dead process (a local data directory is
/// locked to one process): their leases are taken over and released at once rather than waited
/// out, and so are the dead process's host turns (a new epoch per host). `now` is the caller's
/// clock. Returns how many turn messages were sent.
pub async fn rebuild_local_queue<S: Store, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    crawl: &Crawl,
    now: Millis,
) -> Result<u64, RunError> {
    let mut hosts = BTreeSet::new();
    for status in [Status::InProgress, Status::Pending, Status::Failed] {
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                crawl_id: crawl.id.clone(),
                status,
                updated_before: None,
                limit: 500,
                cursor,
                part: crate::store::Part::WHOLE,
            };
            let page = store.query(&query).await?;
            for task in page.tasks {
                if status == Status::InProgress {
                    let expired = task.lease_expires_at.unwrap_or(0).max(now);
                    if let ClaimOutcome::Claimed { lease, .. } =
                        store.claim(&crawl.id, &task.task_id, 1, expired).await?
                    {
                        store.release(&lease, expired).await?;
                    }
                }
                hosts.insert(host_key_of(&task.url));
            }
            cursor = page.cursor;
            if cursor.is_none() {
                break;
            }
        }
    }
    // Hosts the dead process left open with nothing unfinished (its last turn's message, or
    // a turn that was handing its host back): restarted too, or the crawl would wait for the
    // sweeper's lost-message window before it could complete.
    let mut cursor = None;
    loop {
        let page = store.list_hosts(&crawl.id, cursor, HOST_PAGE).await?;
        hosts.extend(page.hosts.into_iter().filter(Host::is_open).map(|h| h.name));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    hosts.remove("");
    let messages = reissue_turns(store, crawl, hosts, Reissue::Restart, now).await?;
    Ok(queue.send(&messages).await?.sent as u64)
}

/// Runs `workers` worker loops and the sweeper until the crawl completes or `stop` is set.
pub async fn run_crawl<P: Ports>(
    crawler: &Crawler<P>,
    crawl_id: &CrawlId,
    workers: usize,
    stats: &RunStats,
    stop: &AtomicBool,
) -> Result<RunEnd, RunError> {
    run_crawl_within(
        crawler,
        crawl_id,
        workers,
        stats,
        stop,
        RunLimits::default(),
    )
    .await
}

/// [`run_crawl`], stopping as well once one of `limits` is reached.
pub async fn run_crawl_within<P: Ports>(
    crawler: &Crawler<P>,
    crawl_id: &CrawlId,
    workers: usize,
    stats: &RunStats,
    stop: &AtomicBool,
    limits: RunLimits,
) -> Result<RunEnd, RunError> {
    // Every tick, pause and quiet spell is measured and waited on the crawler's clock.
    let clock = crawler.clock();
    let started = clock.instant();
    if let Some(n) = limits.max_fetches {
        crawler.halt().limit_fetches(n);
    }
    let signals = Signals::default();
    let (done, busy) = (&signals.done, &signals.busy);
    let last_work = std::sync::Mutex::new(clock.instant());
    // A worker's permanent queue error (or an outage past the bound) ends the run.
    let failed: std::sync::Mutex<Option<RunError>> = std::sync::Mutex::new(None);
    let worker = || async {
        let mut outage = Outage::default();
        while !done.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
            match work_once(crawler, stats, &signals).await {
                Ok(worked) => {
                    outage.recovered();
                    if worked {
                        *last_work
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = clock.instant()
                    }
                }
                Err(e) => match outage.after(&Backoff::RUN, &e, clock.instant()) {
                    Some(pause) => {
                        stats.backend_retries.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64, "queue error; trying again");
                        clock.sleep(pause).await;
                    }
                    None => {
                        failed
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .get_or_insert(e.into());
                        done.store(true, Ordering::Relaxed);
                    }
                },
            }
        }
    };
    let coordinator = async {
        let sweeper = Sweeper::new(
            crawler.app().clone(),
            Arc::new(LocalDeliveryTrigger::default()),
            SweepOptions::new(),
        );
        let mut outage = Outage::default();
        let mut stall = Stall::default();
        let end = loop {
            let reason = if stop.load(Ordering::Relaxed) {
                Some(StopReason::Asked)
            } else {
                limits.reached(crawler, clock.instant().saturating_duration_since(started))
            };
            if let Some(reason) = reason {
                // Turns stop too: pages in flight finish, no other starts.
                crawler.stop_turns();
                // A limit met by the crawl's last page: once the pages in flight are in (the
                // workers take no more messages), a sweep says whether anything is left; with
                // nothing, the run completed.
                if !matches!(reason, StopReason::Asked) {
                    done.store(true, Ordering::SeqCst);
                    while busy.load(Ordering::SeqCst) > 0 {
                        tokio::select! {
                            () = signals.idle.notified() => {}
                            () = clock.sleep(COORDINATOR_TICK) => {}
                        }
                    }
                    if let Ok(Some(end)) = coordinate(crawler, &sweeper, crawl_id).await {
                        break Ok(end);
                    }
                }
                break Ok(RunEnd::Stopped(reason));
            }
            if done.load(Ordering::Relaxed) {
                // A worker failed for good; its error is the run's.
                break Ok(RunEnd::Stopped(StopReason::Asked));
            }
            // (woken at --max-time too, not up to a tick after it)
            let tick = limits.max_time.map_or(COORDINATOR_TICK, |max| {
                let left = (started + max).saturating_duration_since(clock.instant());
                COORDINATOR_TICK.min(left)
            });
            tokio::select! {
                () = signals.idle.notified() => {}
                () = clock.sleep(tick) => {}
            }
            if let Some(fault) = crawler.persistent_fault() {
                break Err(RunError::Storage(fault));
            }
            if stall.lasted(stats, Backoff::RUN.outage, clock.instant()) {
                break Err(RunError::Storage(format!(
                    "every task failed for {} s with no page done (RUST_LOG=warn shows why)",
                    Backoff::RUN.outage.as_secs()
                )));
            }
            let quiet = busy.load(Ordering::SeqCst) == 0
                && (crawler.queue().is_drained() == Some(true)
                    || clock.instant().saturating_duration_since(
                        *last_work
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                    ) >= QUIET);
            if !quiet {
                continue;
            }
            match coordinate(crawler, &sweeper, crawl_id).await {
                Ok(Some(end)) => break Ok(end),
                Ok(None) => outage.recovered(),
                Err(e) => match outage.after(&Backoff::RUN, &e, clock.instant()) {
                    Some(pause) => {
                        stats.backend_retries.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64, "sweep failed; trying again");
                        clock.sleep(pause).await;
                    }
                    None => break Err(e),
                },
            }
        };
        done.store(true, Ordering::SeqCst);
        if matches!(end, Ok(RunEnd::Completed { .. })) {
            signals.completed.notify_waiters();
        }
        end
    };
    let (end, _) = tokio::join!(
        coordinator,
        futures_util::future::join_all((0..workers.max(1)).map(|_| worker()))
    );
    match failed
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(e) => Err(e),
        None => end,
    }
}

/// Processing that fails over and over with no task done: the errors counter moves, the
/// finished one does not.
#[derive(Debug, Default)]
struct Stall {
    finished: u64,
    errors: u64,
    /// The first failure since the last task done.
    since: Option<Instant>,
    last_error: Option<Instant>,
}

impl Stall {
    /// Whether tasks have only failed for `bound`, and still do, at `now` (checked every
    /// coordinator tick; a quiet wait for a retry's backoff is not a stall).
    fn lasted(&mut self, stats: &RunStats, bound: Duration, now: Instant) -> bool {
        let (finished, errors) = (stats.finished(), stats.errors.load(Ordering::Relaxed));
        if finished != self.finished {
            self.finished = finished;
            self.since = None;
        }
        if errors != self.errors {
            self.errors = errors;
            self.last_error = Some(now);
            self.since.get_or_insert(now);
        }
        match (self.since, self.last_error) {
            (Some(since), Some(last)) => {
                now.saturating_duration_since(since) >= bound
                    && now.saturating_duration_since(last) < QUIET * 120
            }
            _ => false,
        }
    }
}

/// One look at the crawl once the queue is quiet: a sweep that re-issues what is due, then
/// Some(end) when it is complete. A completed crawl that recrawls is swept too: its due hosts
/// are woken and its next generation opened, so the run fetches them (`trawl crawl --crawl-id`
/// from cron); one with nothing due, or that never recrawls, ends the run at once.
async fn coordinate<P: Ports>(
    crawler: &Crawler<P>,
    sweeper: &Sweeper<P>,
    crawl_id: &CrawlId,
) -> Result<Option<RunEnd>, RunError> {
    let crawl = crawler
        .store()
        .get_crawl(crawl_id)
        .await?
        .ok_or_else(|| RunError::NoSuchCrawl(crawl_id.clone()))?;
    let completed = RunEnd::Completed {
        generation: crawl.generation,
    };
    let finished = crawl.state == CrawlState::Completed;
    if finished && !crawl.config.recrawl.is_continuous() {
        return Ok(Some(completed));
    }
    let mut budget = SweepBudget::new(1_000, Duration::from_secs(30));
    let report = sweeper
        .sweep_crawl(&crawl, crawler.clock().now_ms(), &mut budget)
        .await?;
    // (woken hosts the run did not reopen for: another process reopened the crawl meanwhile)
    let woke = report.reopened || report.recrawls > 0;
    let ended = report.completed || (finished && !woke);
    Ok(ended.then_some(completed))
}

/// What the workers and the coordinator of one run tell each other.
#[derive(Debug, Default)]
struct Signals {
    /// Set when the run ends (completed, stopped or failed): workers take no more work.
    done: AtomicBool,
    /// Workers holding messages (not those waiting on an empty queue).
    busy: AtomicUsize,
    /// Signalled by the worker that leaves none busy (a permit is kept while the coordinator is
    /// not waiting, so the signal is never lost).
    idle: Notify,
    /// Signalled once the crawl has completed: a worker waiting on the queue stops waiting (any
    /// message still to come is a stale turn) instead of waiting out its receive.
    completed: Notify,
}

/// One receive → process → settle round. Returns whether there was work.
async fn work_once<P: Ports>(
    crawler: &Crawler<P>,
    stats: &RunStats,
    signals: &Signals,
) -> Result<bool, QueueError> {
    // Registered before `done` is read: a completion signalled after the read still wakes us.
    let completed = signals.completed.notified();
    tokio::pin!(completed);
    completed.as_mut().enable();
    if signals.done.load(Ordering::SeqCst) {
        return Ok(false);
    }
    let batch = tokio::select! {
        batch = crawler.queue().receive(10, RECEIVE_WAIT_MS) => batch?,
        () = completed => return Ok(false),
    };
    if batch.is_empty() {
        return Ok(false);
    }
    signals.busy.fetch_add(1, Ordering::SeqCst);
    let settled = settle(crawler, stats, batch).await;
    if signals.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
        signals.idle.notify_one();
    }
    settled.map(|()| true)
}

/// Processes a batch and acts on each message's disposition.
async fn settle<P: Ports>(
    crawler: &Crawler<P>,
    stats: &RunStats,
    batch: Vec<crate::queue::Received>,
) -> Result<(), QueueError> {
    let results = crawler.process_batch(batch, None).await;
    let mut handled = Vec::new();
    for result in results {
        for outcome in &result.outcomes {
            stats.record(*outcome);
        }
        match result.disposition {
            Disposition::Done => handled.push(result.receipt),
            Disposition::RetryAfter(ms) => crawler.queue().retry_later(&result.receipt, ms).await?,
            Disposition::Reject(why) => {
                let queue = crawler.queue();
                if let Some(dead) = queue.reject(&result.receipt, REJECT_DELAY_MS).await? {
                    stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        message_id = %dead.message_id,
                        receives = dead.receives,
                        error = %why,
                        body = %bounded(&dead.body),
                        "malformed work message moved to the dead letters"
                    );
                }
            }
        }
    }
    crawler.queue().ack(&handled).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::App;
    use crate::blob::memory::MemoryBlobStore;
    use crate::fetch::Fetcher;
    use crate::queue::WorkMessage;
    use crate::queue::local::{LocalQueue, MAX_RECEIVES};
    use crate::store::memory::MemoryStore;
    use trawl_domain::calls::CallCounts;

    #[tokio::test]
    async fn a_restart_sends_the_turn_of_a_host_left_open_with_nothing_unfinished() {
        // GIVEN a crawl whose one host the dead process left with its message out, every task
        // of it ended (the message died with the process's in-memory queue)
        let store = MemoryStore::new();
        let crawl = Crawl::new(
            CrawlId::parse("restart").unwrap(),
            Default::default(),
            1_000,
        );
        store.create_crawl(&crawl).await.unwrap();
        let woken = crate::frontier::update_host(&store, &crawl, "a.example", 1_000, |h| {
            let (next, visible_at) = h.note_seeded(0, 1_000);
            (Some(next), visible_at)
        })
        .await
        .unwrap()
        .unwrap();
        assert!(woken.0.is_open());
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(60), calls);

        // WHEN the next process rebuilds its queue
        let sent = rebuild_local_queue(&store, &queue, &crawl, 2_000)
            .await
            .unwrap();

        // THEN the host's turn is sent again at once (a new epoch), not left to the sweeper's
        // lost-message window
        assert_eq!(sent, 1);
        let received = queue.receive(10, 0).await.unwrap();
        let message: WorkMessage = serde_json::from_str(&received[0].body).unwrap();
        assert_eq!(
            (message.host.as_str(), message.epoch),
            ("a.example", woken.0.epoch + 1)
        );
    }

    #[tokio::test]
    async fn a_malformed_turn_rejected_at_its_last_receive_is_dead_lettered_and_counted() {
        // GIVEN a crawler whose local queue holds a turn naming no host key (malformed once
        // read), already received and rejected on all but its last receive
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
        let turn = WorkMessage::new(CrawlId::parse("c1").unwrap(), "not a host", 1, 0);
        queue.send(&[turn]).await.unwrap();
        for _ in 1..MAX_RECEIVES {
            let received = queue.receive(1, 0).await.unwrap();
            assert_eq!(queue.reject(&received[0].receipt, 0).await.unwrap(), None);
        }
        let app = App::new(MemoryStore::new(), MemoryBlobStore::new(), queue, calls);
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);
        let stats = RunStats::default();

        // WHEN a worker settles its last receive
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        settle(&crawler, &stats, batch).await.unwrap();

        // THEN the message left the queue for its dead letters, and the run counts it
        assert_eq!(stats.dead_lettered.load(Ordering::Relaxed), 1);
        // (not as a storage error: a malformed message is no sign of a failing store)
        assert_eq!(stats.errors.load(Ordering::Relaxed), 0);
        assert_eq!(stats.skipped.load(Ordering::Relaxed), 1);
        assert_eq!(crawler.queue().is_drained(), Some(true));
        let dead = crawler.queue().dead_letters();
        assert_eq!(dead.len(), 1);
        assert!(dead[0].body.contains("not a host"), "{dead:?}");
    }
}
