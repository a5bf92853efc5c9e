//! The crawler: for each work message, a host's turn. Claim the host (a fenced host lease),
//! then fetch its due URLs at its pace — claim → fetch → discover → store → finish (or fail)
//! each — and hand the host back with its next turn's time. What to fetch next, when, when to
//! stop and what to hand back is decided by the turn's plan (`trawl_domain::turn`), each fetch's
//! record by `trawl_domain::fetched`; this service reads, waits on its clock, fetches and writes.
//! The Lambda function and the CLI's workers both run this; they differ only in how they hand
//! messages back (`Disposition`). On the segment layout a page's store and finish wait for its
//! turn's segment: the turn appends its pages' records together, then finishes them (`gather`;
//! on S3 one PUT per turn, on local files each page at once).
//!
//! Host-wide trouble (429/503, refused connections, an unreachable robots.txt, timeouts in a
//! row) snoozes the host for every worker and ends the turn; the URL that met it goes back
//! without spending a retry (a timeout excepted: one slow page must end in time). A failing URL
//! never holds its host: it gets a due time and the turn goes on with the host's other URLs.

mod chain;
mod gather;
mod record;
mod seen;
mod thumbnail;

use record::{Gathered, Recorded, record_or_gather};
pub use record::{PageBody, RecordError, StoredPage, WithItems, record_page};

use crate::app::{App, Ports};
use crate::backoff::{Backoff, persist};
use crate::blob::BlobStore;
use crate::chain::ChainRules;
use crate::check::{ReferenceChecks, ReferenceOutcome};
use crate::clock::Clock;
use crate::discover::{Links, ScopeMatcher, Want};
use crate::extract::{Extractors, PageItems, PageReading, read_page};
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher, Redirects};
use crate::frontier::{FrontierError, renew_turn, seed_in_turn, turn_message, update_host};
use crate::queue::{
    MalformedMessage, Received, WorkMessage, WorkQueue, resends_hand_back, send_patiently,
};
use crate::revisit::RevisitRules;
use crate::store::{
    ClaimOutcome, CrawlStore, FailOutcome, HostStore, InTurnClaims, StoreError, StoreResult,
    TaskRecords, TaskStore, TaskSummary, claimed_as_read,
};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, RwLock, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::chain::{TaskRequest, keyed, without_request};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::fetched::{self, Answer};
use trawl_domain::host::{Host, HostSignal, NextWork, Turn, TurnRejection, singled_out};
use trawl_domain::image::{image_data, is_image_task};
use trawl_domain::paging::{PageOf, PagePattern, PageStep, PageYield, body_yields, next_page};
use trawl_domain::retry::Failure;
use trawl_domain::revisit::Revisit;
use trawl_domain::roster::{Ended, Pass, Read, Walk};
use trawl_domain::task::{
    ErrorKind, FetchRecord, Lease, Millis, NewTask, Priority, SESSION_KEY, Task, UserData,
    given_content_type, pushed_content, session_of,
};
use trawl_domain::turn::{Admit, TaskEnd, TurnPlan, due_now, hold_ms, next_work};

/// How long a crawl's config is cached in a worker before it is read again.
const CRAWL_CACHE_TTL: Duration = Duration::from_secs(60);
/// Longest a message is held back (SQS's visibility limit is 12 h).
const MAX_HOLD_MS: u64 = 12 * 3600 * 1000;
/// Back-off for a message whose processing hit a storage error.
const INTERNAL_RETRY_MS: u64 = 5_000;
/// Due tasks read per query of a turn.
const DUE_PAGE: u32 = 100;
/// Due tasks read to find a host's next work as its turn ends.
const NEXT_WORK_PAGE: u32 = 8;
/// Tasks of a given-up host ended per turn.
const DRAIN_PER_TURN: u32 = 500;

/// Roster pages a turn reads at most in one refill while none holds due work (a pass that
/// meets pages fetched already reads on to the next due one, within this bound).
const ROSTER_PAGES_PER_READ: usize = 10;

/// What to do with a message once processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Handled (or nothing left to do): delete it.
    Done,
    /// Make it visible again after this many milliseconds (a host not due yet, another
    /// worker's turn still running, work handed back near the deadline, a storage error).
    RetryAfter(u64),
    /// Leave it to come back after the queue's visibility timeout, and eventually reach the
    /// dead-letter queue (malformed bodies). Never silently dropped.
    Reject(String),
}

/// One message's result: its disposition and what became of each task its turn touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageResult {
    pub message_id: String,
    pub receipt: String,
    pub disposition: Disposition,
    /// What happened, task by task, for logs and progress.
    pub outcomes: Vec<Outcome>,
    /// Soft-404 reference pages re-tested in the turn that their rule no longer recognises.
    pub reference_misses: u64,
}

/// What a turn did to one task (or, for `Malformed` and `Error`, to its message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored (or recorded, for content not stored) and succeeded.
    Succeeded {
        bytes: u64,
        put: bool,
    },
    /// 304 or same md5: succeeded without a PUT.
    Unchanged,
    /// A redirect, recorded; its target became a task of its own.
    Redirected,
    /// Failed, to be tried again from this time.
    Retrying {
        next_attempt_at: Millis,
    },
    GaveUp,
    /// The host answered with host-wide trouble: the task went back untouched (no retry spent)
    /// and the host is snoozed.
    Snoozed,
    /// Claimed elsewhere, done meanwhile, or a duplicate message.
    Skipped,
    Malformed,
    Error,
}

impl Outcome {
    /// What the outcome of `task` means to the turn's plan.
    fn end(self, task: &TaskSummary) -> TaskEnd {
        self.end_of(task.fetched_before())
    }

    /// What the outcome of a task, fetched before or not, means to the turn's plan.
    fn end_of(self, fetched_before: bool) -> TaskEnd {
        match self {
            Outcome::Succeeded { .. }
            | Outcome::Unchanged
            | Outcome::Redirected
            | Outcome::GaveUp
                if fetched_before =>
            {
                TaskEnd::EndedAgain
            }
            Outcome::Succeeded { .. }
            | Outcome::Unchanged
            | Outcome::Redirected
            | Outcome::GaveUp => TaskEnd::Ended,
            Outcome::Error => TaskEnd::Failed,
            Outcome::Retrying { .. } | Outcome::Snoozed | Outcome::Skipped | Outcome::Malformed => {
                TaskEnd::Open
            }
        }
    }
}

#[derive(Debug, Error)]
pub enum CrawlerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Frontier(#[from] FrontierError),
}

impl CrawlerError {
    /// Whether the same step may succeed later (a throttled or unreachable backend); a full
    /// disk, a read-only directory or access denied will not.
    pub fn is_retryable(&self) -> bool {
        match self {
            CrawlerError::Store(e) | CrawlerError::Record(RecordError::Store(e)) => {
                e.is_retryable()
            }
            CrawlerError::Record(RecordError::Blob(e)) => e.is_retryable(),
            CrawlerError::Frontier(FrontierError::Store(e)) => e.is_retryable(),
            CrawlerError::Frontier(FrontierError::Queue(e)) => {
                matches!(e, crate::queue::QueueError::Unavailable { .. })
            }
        }
    }
}

/// Tasks that failed in a row on a permanent storage error before the fault is called
/// persistent: one bad object is not a full disk.
const FAULT_STREAK: u32 = 3;

/// Permanent storage errors in a row, with no task done in between (a full disk, a read-only
/// directory, access denied): a run ends on them (`Crawler::persistent_fault`) instead of
/// releasing task after task forever.
#[derive(Debug, Default)]
struct FaultStreak {
    count: std::sync::atomic::AtomicU32,
    last: Mutex<Option<String>>,
}

impl FaultStreak {
    fn failed(&self, error: &CrawlerError) {
        if error.is_retryable() {
            return;
        }
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(error.to_string());
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn done(&self) {
        self.count.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    fn persistent(&self) -> Option<String> {
        if self.count.load(std::sync::atomic::Ordering::Relaxed) < FAULT_STREAK {
            return None;
        }
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Work messages waiting to be sent as a turn ends (its next turn, hosts its links woke).
type Outbox = Mutex<Vec<WorkMessage>>;

/// The host whose turn is running, and how many URLs of it the turn's pages linked to: added to
/// the host's record at hand-back (`frontier::seed_in_turn`), not one write per page; and the
/// pages whose records wait to be appended (`gather`).
struct Held {
    host: String,
    offered: std::sync::atomic::AtomicU64,
    segment: gather::OpenSegment,
    /// Tasks the turn read whole from its host's roster, consistently, not claimed yet: a store
    /// that takes in-turn claims as read (`InTurnClaims::AsRead`) claims them without reading
    /// them again.
    as_read: Mutex<HashMap<TaskId, Task>>,
}

/// What became of a claimed task: it ended, or its records wait in its turn's open segment.
enum Step {
    Ended(Outcome),
    Gathered(Box<Gathered>),
}

impl From<Outcome> for Step {
    fn from(outcome: Outcome) -> Self {
        Step::Ended(outcome)
    }
}

/// A crawl's config with its scope compiled, cached per worker.
struct CrawlContext {
    crawl: Crawl,
    scope: ScopeMatcher,
    revisit: RevisitRules,
    extractors: Extractors,
    /// The crawl's open-ended pagination templates, as its task URLs read.
    paging: Vec<PagePattern>,
    /// Its chain and retry rules (`crate::chain`).
    chains: ChainRules,
    loaded: Instant,
}

impl CrawlContext {
    /// The open-ended template `url` is a page of, and which page.
    fn page_of(&self, url: &str) -> Option<(&PagePattern, PageOf)> {
        self.paging
            .iter()
            .find_map(|p| p.page_of(url).map(|at| (p, at)))
    }
}

/// A turn in progress, shared by its concurrent fetches: its plan and what became of its tasks.
struct TurnState {
    plan: TurnPlan,
    outcomes: Vec<Outcome>,
    /// In a store that keeps rosters.
    roster: Option<RosterTurn>,
}

impl TurnState {
    /// Records what became of a task the turn started.
    fn ended(
        &mut self,
        task_id: &TaskId,
        outcome: Outcome,
        end: TaskEnd,
        signal: Option<HostSignal>,
        now: Millis,
    ) {
        self.outcomes.push(outcome);
        if let Some(roster) = &mut self.roster {
            match (outcome, end) {
                (Outcome::Retrying { next_attempt_at }, _) => {
                    roster.ended.insert(task_id.clone(), Some(next_attempt_at));
                }
                (_, TaskEnd::Ended | TaskEnd::EndedAgain) => {
                    roster.ended.insert(task_id.clone(), None);
                }
                _ => {}
            }
        }
        self.plan.finished(end, signal, now);
    }
}

/// A turn's walk of its host's roster (`trawl_domain::roster`): the pass it walks, what it read
/// and what it saw to an end.
#[derive(Debug, Default)]
struct RosterTurn {
    pass: Pass,
    walk: Walk,
    ended: Ended,
    /// The turn's links to its own host (`Held::offered`) when a read last reached the roster's
    /// end: until more are seeded, no entry can follow it that the turn would see (others'
    /// offers give the host one more turn at its hand-back).
    offered_at_end: Option<u64>,
}

impl RosterTurn {
    /// The pass as the turn hands it back, and when the host has work from its roster next
    /// (`revisit`: when a page the turn ended may be due again).
    fn hand_back(&self, revisit: Option<Millis>, now: Millis) -> (Pass, Option<NextWork>) {
        let pass = self.walk.hand_back(&self.pass, &self.ended, revisit, now);
        let work = match (self.walk.work_left_at(&self.ended, now), pass.next_work()) {
            (Some(at), _) => Some(NextWork::Task(at)),
            (None, Some((Some(retry), _))) => Some(NextWork::Task(retry)),
            (None, Some((None, revisit))) => revisit.map(NextWork::Revisit),
            (None, None) => None,
        };
        (pass, work)
    }
}

/// What renewing a running turn's hold on its host needs: the turn, and the host record as the
/// turn last wrote it (its lock taken by one renewal at a time).
struct Hold<'a> {
    crawl: &'a Crawl,
    turn: &'a Turn,
    written: &'a tokio::sync::Mutex<Host>,
}

/// Per-process crawler state: the App's ports, the HTTP client, and a small crawl-config cache.
/// Build it once per cold start and share it between invocations. It reads the App's ports as
/// its own (`self.store`, `self.clock`, …: it derefs to the App).
pub struct Crawler<P: Ports> {
    app: Arc<App<P>>,
    fetcher: Arc<Fetcher>,
    concurrency: usize,
    crawls: RwLock<HashMap<CrawlId, Arc<CrawlContext>>>,
    seen: seen::SeenLinks,
    faults: FaultStreak,
    halt: Arc<Halt>,
    references: ReferenceChecks,
    lane_slots: LaneSlots,
}

/// The fetches in flight of each lane with a limit (`Scope::lane_limits`), in this process: a
/// semaphore per crawl and lane, made anew when its limit changes.
#[derive(Default)]
struct LaneSlots(Mutex<HashMap<(CrawlId, String), LimitedSlots>>);

/// A lane's limit, and its slots.
type LimitedSlots = (u32, Arc<Semaphore>);

impl LaneSlots {
    /// Waits for a slot of `lane` of `crawl`, whose limit is `limit`; held until dropped.
    async fn take(&self, crawl: &CrawlId, lane: &str, limit: u32) -> Option<OwnedSemaphorePermit> {
        let slots = {
            let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = all
                .entry((crawl.clone(), lane.to_owned()))
                .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit as usize))));
            if entry.0 != limit {
                *entry = (limit, Arc::new(Semaphore::new(limit as usize)));
            }
            Arc::clone(&entry.1)
        };
        slots.acquire_owned().await.ok()
    }
}

/// A request to stop every turn of a crawler soon (`Crawler::stop_turns`): no fetch starts after
/// it, and a turn waiting for its host's pace stops waiting; fetches in flight finish and each
/// turn hands its host back as it stands. A fetch budget (`trawl crawl --max-fetches`) asks for
/// the same stop once its last page fetch has started.
#[derive(Debug)]
pub struct Halt {
    asked: std::sync::atomic::AtomicBool,
    woken: tokio::sync::Notify,
    /// Page fetches that may still start (`u64::MAX`: no budget).
    fetches_left: std::sync::atomic::AtomicU64,
}

impl Default for Halt {
    fn default() -> Self {
        Self {
            asked: Default::default(),
            woken: Default::default(),
            fetches_left: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }
}

impl Halt {
    pub fn stop(&self) {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        self.woken.notify_waiters();
    }

    pub fn asked(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Lets at most `n` more page fetches start; a budget of 0 stops at once.
    pub fn limit_fetches(&self, n: u64) {
        self.fetches_left
            .store(n, std::sync::atomic::Ordering::SeqCst);
        if n == 0 {
            self.stop();
        }
    }

    /// Takes one page fetch from the budget, just before it starts: false when none is left.
    /// Taking the last one asks for the stop, so that the run ends once the fetches in flight
    /// are done rather than at the next fetch refused.
    fn take_fetch(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let taken = self
            .fetches_left
            .fetch_update(SeqCst, SeqCst, |left| match left {
                u64::MAX => Some(left),
                left => left.checked_sub(1),
            });
        if matches!(taken, Ok(1) | Err(_)) {
            self.stop();
        }
        taken.is_ok()
    }

    /// Whether a fetch budget was given and every fetch of it has started.
    pub fn fetches_spent(&self) -> bool {
        self.fetches_left.load(std::sync::atomic::Ordering::SeqCst) == 0
    }
}

impl<P: Ports> std::ops::Deref for Crawler<P> {
    type Target = App<P>;

    fn deref(&self) -> &App<P> {
        &self.app
    }
}

impl<P: Ports> Crawler<P> {
    /// A crawler over `app`'s ports fetching with `fetcher`, running at most `concurrency` host
    /// turns of a batch at once.
    pub fn new(app: Arc<App<P>>, fetcher: Arc<Fetcher>, concurrency: usize) -> Self {
        Self {
            app,
            fetcher,
            concurrency: concurrency.max(1),
            crawls: RwLock::default(),
            seen: seen::SeenLinks::default(),
            faults: FaultStreak::default(),
            halt: Arc::default(),
            references: ReferenceChecks::default(),
            lane_slots: LaneSlots::default(),
        }
    }

    /// Stops every running turn soon (Ctrl-C): see [`Halt`].
    pub fn stop_turns(&self) {
        self.halt.stop();
    }

    /// The crawler's stop request, for a caller that must ask from elsewhere.
    pub fn halt(&self) -> Arc<Halt> {
        self.halt.clone()
    }

    /// The last error of a run of permanent storage errors with no task done in between, once
    /// it is long enough to be the storage's state rather than one object's.
    pub fn persistent_fault(&self) -> Option<String> {
        self.faults.persistent()
    }

    pub fn app(&self) -> &Arc<App<P>> {
        &self.app
    }

    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    pub fn store(&self) -> &P::Store {
        &self.store
    }

    pub fn blobs(&self) -> &P::Blobs {
        &self.blobs
    }

    pub fn fetcher(&self) -> &Arc<Fetcher> {
        &self.fetcher
    }

    pub fn queue(&self) -> &P::Queue {
        &self.queue
    }

    pub fn calls(&self) -> &CallCounts {
        &self.calls
    }

    /// Processes a batch of turn messages, at most `concurrency` hosts at once. No fetch is
    /// started once `deadline` is near: turns end early and hand their hosts back. Each turn's
    /// messages (its host's next turn, the hosts its links woke) are sent as that turn ends, not
    /// when the batch does: a host paced fast goes on in another invocation while its slow
    /// batch-mates still run. Ends by adding the batch's calls to its crawls (`crate::calls`).
    pub async fn process_batch(
        &self,
        batch: Vec<Received>,
        deadline: Option<std::time::Instant>,
    ) -> Vec<MessageResult> {
        let deadline = deadline.map(Instant::from_std);
        // Messages per crawl: the weights the batch's calls are shared by.
        let mut crawls: Vec<(CrawlId, u64)> = Vec::new();
        let mut parsed = Vec::with_capacity(batch.len());
        for received in batch {
            let message = WorkMessage::parse(&received.body);
            if let Ok(message) = &message {
                match crawls.iter_mut().find(|(id, _)| *id == message.crawl_id) {
                    Some((_, n)) => *n += 1,
                    None => crawls.push((message.crawl_id.clone(), 1)),
                }
            }
            parsed.push((received, message));
        }
        let results = stream::iter(parsed)
            .map(|(received, message)| async move {
                let outbox = Mutex::new(Vec::new());
                let result = self
                    .process_message(received, message, deadline, &outbox)
                    .await;
                self.send_outbox(outbox).await;
                result
            })
            .buffer_unordered(self.concurrency)
            .collect::<Vec<_>>()
            .await;
        crate::calls::report_shared(&self.store, &self.calls, &crawls).await;
        results
    }

    async fn process_message(
        &self,
        received: Received,
        message: Result<WorkMessage, MalformedMessage>,
        deadline: Option<Instant>,
        outbox: &Outbox,
    ) -> MessageResult {
        let misses = AtomicU64::new(0);
        let (disposition, outcomes) = match message {
            Err(why) => {
                // Logged once here; each receive until the dead-letter queue logs it again.
                tracing::error!(message_id = %received.message_id, error = %why, "malformed work message handed back");
                (
                    Disposition::Reject(format!("malformed message: {why}")),
                    vec![Outcome::Malformed],
                )
            }
            Ok(message) => {
                // A span per message, carried by its future (never entered across an await:
                // turns run concurrently).
                let span = tracing::info_span!(
                    "turn",
                    message_id = %received.message_id,
                    crawl = %message.crawl_id,
                    host = %message.host
                );
                let (disposition, outcomes) = self
                    .process_turn(&message, deadline, outbox, &misses)
                    .instrument(span)
                    .await;
                (
                    self.resend_if_worn(&message, received.receives, disposition)
                        .await,
                    outcomes,
                )
            }
        };
        MessageResult {
            message_id: received.message_id,
            receipt: received.receipt,
            disposition,
            outcomes,
            reference_misses: misses.into_inner(),
        }
    }

    /// A turn handed back by a message the queue has delivered often already is sent anew
    /// (and the received one deleted: `Done`), so that a host busy or early for many receives
    /// never takes its turn to the dead-letter queue; if the send fails, it is handed back.
    async fn resend_if_worn(
        &self,
        message: &WorkMessage,
        receives: u32,
        disposition: Disposition,
    ) -> Disposition {
        let Disposition::RetryAfter(delay_ms) = disposition else {
            return disposition;
        };
        if !self.queue.counts_hand_backs() || !resends_hand_back(receives) {
            return disposition;
        }
        let fresh = WorkMessage {
            delay_ms,
            ..message.clone()
        };
        match self.queue.send(std::slice::from_ref(&fresh)).await {
            Ok(report) if report.sent == 1 => {
                tracing::debug!(receives, delay_ms, "turn handed back as a new message");
                Disposition::Done
            }
            Ok(_) | Err(_) => disposition,
        }
    }

    /// One host's turn. The soft-404 reference pages it re-tests and finds no longer recognised
    /// are counted in `reference_misses`.
    async fn process_turn(
        &self,
        message: &WorkMessage,
        deadline: Option<Instant>,
        outbox: &Outbox,
        reference_misses: &AtomicU64,
    ) -> (Disposition, Vec<Outcome>) {
        let retry_later = || {
            (
                Disposition::RetryAfter(INTERNAL_RETRY_MS),
                vec![Outcome::Error],
            )
        };
        let context = match self.context(&message.crawl_id).await {
            Ok(Some(context)) => context,
            Ok(None) => {
                tracing::warn!("no such crawl (purged?): message dropped");
                return (Disposition::Done, vec![Outcome::Skipped]);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read crawl");
                return retry_later();
            }
        };
        let crawl = &context.crawl;
        let config = &crawl.config;
        if config.paused {
            // The host keeps the message as on its way: once the crawl is resumed, the sweeper
            // finds it lost and sends the host's turn again.
            tracing::info!("crawl paused: turn message dropped");
            return (Disposition::Done, vec![Outcome::Skipped]);
        }
        // The claim is tried again here when it fails: its write may have been applied while
        // its answer was lost, which the retry recognises by the claimer id it wrote (waiting
        // for the message to come back would find the host busy until its turn expired).
        let claimer = fastrand::u64(..);
        let retries = std::sync::atomic::AtomicU64::new(0);
        let claimed = persist(
            self.clock(),
            "claim the host's turn",
            &Backoff::BRIEF,
            &retries,
            || {
                let now = self.clock.now_ms();
                update_host(&self.store, crawl, &message.host, now, move |h| {
                    if let Some(turn) = h.turn_of(claimer) {
                        // Ours, applied; what `seeded` was then is not known.
                        return (None, Ok((turn, None)));
                    }
                    if h.epoch != message.epoch {
                        return (None, Err(None));
                    }
                    match h.claim_turn_by(claimer, now, hold_ms(config)) {
                        Ok((next, turn)) => (Some(next), Ok((turn, Some(h.seeded)))),
                        Err(why) => (None, Err(Some(why))),
                    }
                })
            },
        )
        .await;
        let now = self.clock.now_ms();
        let (host, turn, seeded_at_claim) = match claimed {
            Ok(Some((host, Ok((turn, seeded))))) => (host, turn, seeded),
            Ok(Some((_, Err(None)))) | Ok(None) => {
                tracing::debug!("superseded turn message dropped");
                return (Disposition::Done, vec![Outcome::Skipped]);
            }
            Ok(Some((_, Err(Some(why))))) => {
                return match why {
                    TurnRejection::Busy { until } | TurnRejection::NotYet { at: until } => {
                        (Disposition::RetryAfter(wait_ms(until, now)), Vec::new())
                    }
                    TurnRejection::GivenUp => self.drain(&context, &message.host, outbox).await,
                };
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot claim the host's turn");
                return retry_later();
            }
        };
        tracing::debug!(token = turn.token, until = turn.until, "turn claimed");
        let misses = self.check_references(crawl, &message.host, now).await;
        reference_misses.store(misses, Ordering::Relaxed);
        let held = Held {
            host: host.name.clone(),
            offered: Default::default(),
            as_read: Default::default(),
            segment: gather::OpenSegment::new(gather::turn_bound(
                self.blobs.gather_bytes(),
                self.concurrency,
            )),
        };
        let (holder, mut outcomes, roster) = self
            .run_turn(&context, host, &turn, now, deadline, outbox, &held)
            .await;
        let seeded_by_turn = held.offered.into_inner();
        let holder = if holder.given_up.is_some() {
            let (ended_tasks, ended) = self.end_tasks_of_given_up(&context, &holder).await;
            outcomes.extend(ended_tasks);
            Host {
                done: holder.done + ended,
                ..holder
            }
        } else {
            holder
        };
        // When the host's next turn is due: its soonest task (new links included). A few are
        // read: a store may list a task in progress at the place it was claimed from, ahead of
        // the work that is due before its lease ends.
        let retries = std::sync::atomic::AtomicU64::new(0);
        let due = persist(
            self.clock(),
            "read the host's due tasks",
            &Backoff::BRIEF,
            &retries,
            || {
                self.store
                    .due_tasks(&crawl.id, &holder.name, NEXT_WORK_PAGE)
            },
        )
        .await;
        let now = self.clock.now_ms();
        // The priority its next turn's message carries: its pending work's highest (its due list
        // holds that first), or, unread, the one stored.
        let mut priority = None;
        let next_work = match due {
            Ok(due) => {
                priority = Some(due.iter().map(|t| t.priority).max().unwrap_or_default());
                next_work(
                    due.iter()
                        .filter_map(|t| Some((t.claimable_from()?, t.next_work()))),
                )
            }
            // The host is handed back all the same, its next turn due shortly to read what is
            // due: left held, its message would come back to a busy host until this turn's hold
            // ended (30 s and more).
            Err(e) => {
                tracing::error!(error = %e, "cannot read the host's due tasks");
                outcomes.push(Outcome::Error);
                Some(NextWork::Task(now + INTERNAL_RETRY_MS as Millis))
            }
        };
        // The roster's next pass: the pages the turn ended are due again the crawl's shortest
        // revisit after their fetches, all of which it follows by at most the turn's length
        // (sooner, the pass would wake to find them not due yet).
        let revisit = config
            .recrawl
            .shortest_revisit_ms()
            .map(|ms| now.saturating_add(Millis::try_from(ms).unwrap_or(Millis::MAX)));
        // A given-up host's tasks are ended by its drains, not walked.
        let roster = roster.filter(|_| holder.given_up.is_none());
        let (pass, next_work) = match roster.map(|r| r.hand_back(revisit, now)) {
            Some((pass, work)) => {
                let at = |w: &NextWork| match w {
                    NextWork::Task(at) | NextWork::Revisit(at) => *at,
                };
                (
                    Some(pass),
                    [next_work, work].into_iter().flatten().min_by_key(at),
                )
            }
            None => (None, next_work),
        };
        let holder = &holder;
        let hand_back = || {
            update_host(&self.store, crawl, &holder.name, now, |stored| {
                // This turn's hand-back is stored already (applied while its answer was lost):
                // nothing to write, but its next turn's message is still to be sent.
                if stored.handed_back_by(&turn) {
                    return (None, stored.queued_for);
                }
                // Tasks behind the turn's cursor made due meanwhile (`Pass::rewound`): the
                // rewound pass stands, and its walk goes on at once.
                let rewound = pass
                    .as_ref()
                    .filter(|p| p.rewinds != stored.pass.rewinds)
                    .map(|_| stored.pass.clone());
                let next_work = match rewound {
                    Some(_) => Some(NextWork::Task(now)),
                    None => next_work,
                };
                match stored.merge_turn(holder).hand_back(
                    &turn,
                    next_work,
                    seeded_at_claim,
                    seeded_by_turn,
                    self.seeds_settle_ms,
                    now,
                ) {
                    Some((next, visible_at)) => {
                        let priority = priority.unwrap_or(next.priority);
                        let pass = rewound
                            .or_else(|| pass.clone())
                            .unwrap_or_else(|| next.pass.clone());
                        (
                            Some(Host {
                                priority,
                                pass,
                                ..next
                            }),
                            visible_at,
                        )
                    }
                    None => (None, None),
                }
            })
        };
        // A failed hand-back is tried again here, not left to the message: its write may have
        // been applied (a lost answer), and the message, back from the queue, would then be
        // stale and dropped, its host left without a turn until the sweeper's lost-message
        // window. The retry recognises the applied write and sends the next turn.
        let retries = std::sync::atomic::AtomicU64::new(0);
        let handed = persist(
            self.clock(),
            "hand the host back",
            &Backoff::BRIEF,
            &retries,
            hand_back,
        )
        .await;
        settle_host(handed, crawl, now, outbox, outcomes)
    }

    /// Re-tests the crawl's soft-404 reference pages on `host` when due (see `ReferenceChecks`):
    /// a rule that no longer recognises its page is logged as an error and counted on the crawl.
    /// Returns the misses.
    async fn check_references(&self, crawl: &Crawl, host: &str, now: Millis) -> u64 {
        let checks = self
            .references
            .run(&self.fetcher, &crawl.id, &crawl.config, host, now)
            .await;
        let mut misses = 0;
        for check in &checks {
            match &check.outcome {
                ReferenceOutcome::NotRecognised { answer } => {
                    tracing::error!(
                        rule = check.rule,
                        url = check.url,
                        answer,
                        "soft-404 rule no longer recognises its reference page: update recrawl.soft_404"
                    );
                    misses += 1;
                }
                ReferenceOutcome::Unreachable { error } => {
                    tracing::warn!(
                        rule = check.rule,
                        url = check.url,
                        error,
                        "soft-404 reference page not reachable; re-tested later"
                    );
                }
                ReferenceOutcome::Recognised | ReferenceOutcome::Missing => {}
            }
        }
        if misses > 0
            && let Err(e) = self.store.add_reference_misses(&crawl.id, misses).await
        {
            tracing::warn!(error = %e, "cannot count the reference misses on the crawl");
        }
        misses
    }

    /// Fetches the host's due tasks as its plan says (`trawl_domain::turn`), `parallel` at a
    /// time, until none is due, the turn's page budget or time is spent, or the host is snoozed
    /// or given up; renews the turn's hold on the host as the plan says, and stops when it was
    /// taken over. Returns the host as the turn leaves it and what became of its tasks.
    #[allow(clippy::too_many_arguments)]
    async fn run_turn(
        &self,
        context: &CrawlContext,
        host: Host,
        turn: &Turn,
        claimed_at: Millis,
        deadline: Option<Instant>,
        outbox: &Outbox,
        held: &Held,
    ) -> (Host, Vec<Outcome>, Option<RosterTurn>) {
        let crawl = &context.crawl;
        let config = &crawl.config;
        let name = &host.name.clone();
        let mut roster = P::Store::ROSTERS.then(|| RosterTurn {
            pass: host.pass.current(claimed_at),
            ..RosterTurn::default()
        });
        // robots.txt's Crawl-delay, read once per turn (the fetcher caches robots.txt per host,
        // so this costs a request only for a host's first turn). The first roster page read for
        // it is the turn's first work.
        let mut opening = VecDeque::new();
        let first = match self.store.due_tasks(&crawl.id, name, 1).await {
            Ok(due) => due.into_iter().next(),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the host's due tasks");
                return (host, vec![Outcome::Error], roster);
            }
        };
        let first = match (first, &mut roster) {
            (Some(first), _) => first,
            (None, None) => return (host, Vec::new(), roster),
            (None, Some(walking)) => {
                let limit = config.politeness.host_policy(name).turn_pages;
                match self
                    .read_roster(&crawl.id, name, walking, limit.clamp(1, DUE_PAGE), held)
                    .await
                {
                    Ok(due) => {
                        walking.offered_at_end = walking.walk.at_end.then_some(0);
                        opening = due.into();
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "cannot read the host's roster");
                        return (host, vec![Outcome::Error], roster);
                    }
                }
                match opening.front() {
                    Some(first) => first.clone(),
                    None => return (host, Vec::new(), roster),
                }
            }
        };
        let robots_delay = match CanonicalUrl::parse(&first.url) {
            Ok(url) => self.fetcher.crawl_delay(&url, config).await,
            Err(_) => None,
        }
        .unwrap_or(Duration::ZERO);
        // The pace is kept on the clock's monotonic time, from the turn's start.
        let started = self.clock.instant();
        // The host record as this turn last wrote it: what a renewal of its hold writes over.
        let written = tokio::sync::Mutex::new(host.clone());
        let hold = Hold {
            crawl,
            turn,
            written: &written,
        };
        let hold = &hold;
        let owned = Mutex::new(TurnState {
            plan: TurnPlan::new(host, config, turn, claimed_at, robots_delay),
            outcomes: Vec::new(),
            roster,
        });
        // Shared by the turn's concurrent fetches.
        let state = &owned;
        let parallel = lock(state).plan.parallel();
        // Rounds: each runs the host's due tasks, refilled as fetch slots free up, until none is
        // due; the pages those fetches linked to may be due by then, which the next round takes.
        loop {
            let before = {
                let plan = &lock(state).plan;
                if plan.closed() {
                    break;
                }
                plan.pages_left()
            };
            let due = stream::unfold(std::mem::take(&mut opening), |mut buffer| async move {
                loop {
                    if lock(state).plan.stopped() {
                        return None;
                    }
                    if let Some(task) = buffer.pop_front() {
                        match lock(state).plan.admit(&task.task_id) {
                            Admit::Start => return Some((task, buffer)),
                            Admit::Again => continue,
                            Admit::Closed => return None,
                        }
                    }
                    let now = self.clock.now_ms();
                    let page = match self.due_page(crawl, name, state, held).await {
                        Ok(page) => page,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot read the host's due tasks");
                            let mut turn_state = lock(state);
                            turn_state.outcomes.push(Outcome::Error);
                            turn_state.plan.stop();
                            return None;
                        }
                    };
                    let plan = &lock(state).plan;
                    let takes = |t: &TaskSummary| {
                        due_now(t.claimable_from(), now) && plan.is_new(&t.task_id)
                    };
                    // Each lane's due work is kept before the lanes are taken in rotation, so
                    // that a lane's rotation slots go to work the turn may start.
                    buffer = trawl_domain::lane::rotate(
                        page.into_iter()
                            .map(|list| list.into_iter().filter(takes).collect())
                            .collect(),
                    )
                    .into();
                    if buffer.is_empty() {
                        return None;
                    }
                }
            });
            due.map(|task| async move {
                let elapsed = self.clock.instant().saturating_duration_since(started);
                let start = lock(state)
                    .plan
                    .start_at(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
                if !self
                    .wait_holding(started + Duration::from_millis(start), hold, state)
                    .await
                {
                    return;
                }
                let time_left = deadline.map(|d| d.saturating_duration_since(self.clock.instant()));
                if !lock(state).plan.may_start(self.clock.now_ms(), time_left) {
                    return;
                }
                // The last check before the request: a spent budget starts nothing more.
                if !self.halt.take_fetch() {
                    lock(state).plan.stop();
                    return;
                }
                let span = tracing::info_span!("task", task = %task.task_id);
                let answered_at = lock(state).plan.host().answered_at;
                let (outcome, signal) = self
                    .crawl_task(context, &task, answered_at, outbox, held)
                    .instrument(span)
                    .await;
                let now = self.clock.now_ms();
                {
                    let mut turn_state = lock(state);
                    // A page gathered ends when its segment is appended (`gather`).
                    match outcome {
                        Some(outcome) => {
                            let end = outcome.end(&task);
                            turn_state.ended(&task.task_id, outcome, end, signal, now);
                        }
                        None => turn_state.plan.finished(TaskEnd::Open, signal, now),
                    }
                }
                let full = held.segment.take_full();
                self.seal(context, full, hold, state).await;
            })
            .buffer_unordered(parallel)
            .collect::<Vec<()>>()
            .await;
            // The round's pages are finished before the due tasks are read again.
            self.seal(context, held.segment.take(), hold, state).await;
            if lock(state).plan.pages_left() == before {
                break;
            }
        }
        let TurnState {
            plan,
            outcomes,
            roster,
        } = owned.into_inner().unwrap_or_else(PoisonError::into_inner);
        (plan.into_host(), outcomes, roster)
    }

    /// Reads `host`'s roster on from where `walking` stands, a page of at most `limit` entries
    /// at a time, until one holds due work or the roster ends (at most `ROSTER_PAGES_PER_READ`
    /// pages); records what each entry is to the pass, and keeps the due tasks as read for
    /// their claims (`Held::as_read`). The due work, in due order.
    async fn read_roster(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        walking: &mut RosterTurn,
        limit: u32,
        held: &Held,
    ) -> StoreResult<Vec<TaskSummary>> {
        let mut due = Vec::new();
        for _ in 0..ROSTER_PAGES_PER_READ {
            let after = walking.walk.next_from(&walking.pass).cloned();
            let page = self
                .store
                .roster(crawl_id, host, after.as_ref(), limit)
                .await?;
            let now = self.clock.now_ms();
            let read = page.entries.len();
            for (place, task) in page.entries {
                let verdict = walking.pass.verdict(
                    task.status,
                    task.next_attempt_at,
                    task.fetch.as_ref().and_then(|f| f.next_fetch_at),
                    task.lease_expires_at,
                    now,
                );
                walking.walk.read.push(Read { place, verdict });
                if verdict == trawl_domain::roster::Verdict::Due {
                    due.push(TaskSummary::from(&task));
                    lock(&held.as_read).insert(task.task_id.clone(), task);
                }
            }
            walking.walk.at_end = page.at_end;
            if !due.is_empty() || page.at_end || read == 0 {
                break;
            }
        }
        // In due order within what was read, as a due list gives them: a task that went back
        // untouched (its host snoozed) comes after those not tried yet.
        due.sort_by(|a, b| (a.due_key(), &a.task_id).cmp(&(b.due_key(), &b.task_id)));
        Ok(due)
    }

    /// A page of `host`'s due tasks as a turn reads them, as lists to be taken in rotation
    /// (`trawl_domain::lane::rotate`): the host's due list alone in a crawl without lanes; in
    /// a crawl with lanes, each lane's (`TaskRecords::due_in_lane`), and the host's tasks that
    /// are in none of them (created before the crawl had lanes, or in a lane it no longer
    /// names) as one more. In a store that keeps rosters, the roster's due work follows, read on
    /// from the turn's walk (`read_roster`).
    /// The queries run at once: a refill waits for one round trip, not one per lane.
    async fn due_page(
        &self,
        crawl: &Crawl,
        host: &str,
        state: &Mutex<TurnState>,
        held: &Held,
    ) -> StoreResult<Vec<Vec<TaskSummary>>> {
        let offered = held.offered.load(Ordering::Relaxed);
        let mut lists = self.due_lists(crawl, host).await?;
        // The roster's due work after the due lists' (a priority or a lane orders those), read
        // on from where the turn's walk stands: taken out of the turn's state while read (one
        // read at a time: the turn refills its work one page after another).
        let walking = {
            let mut turn = lock(state);
            let limit = turn.plan.pages_left().clamp(1, DUE_PAGE);
            let unchanged = |r: &RosterTurn| r.walk.at_end && r.offered_at_end == Some(offered);
            match &turn.roster {
                Some(walking) if unchanged(walking) => None,
                _ => turn.roster.take().map(|walking| (walking, limit)),
            }
        };
        if let Some((mut walking, limit)) = walking {
            let read = self
                .read_roster(&crawl.id, host, &mut walking, limit, held)
                .await;
            walking.offered_at_end = walking.walk.at_end.then_some(offered);
            lock(state).roster = Some(walking);
            match lists.last_mut() {
                Some(rest) => rest.extend(read?),
                None => lists.push(read?),
            }
        }
        Ok(lists)
    }

    /// The host's due lists (`due_page`): its own, or its lanes' and the rest.
    async fn due_lists(&self, crawl: &Crawl, host: &str) -> StoreResult<Vec<Vec<TaskSummary>>> {
        let lanes = trawl_domain::lane::lanes_of(&crawl.config.scope.lanes);
        if lanes.is_empty() {
            return Ok(vec![self.store.due_tasks(&crawl.id, host, DUE_PAGE).await?]);
        }
        let (all, lists) = futures_util::future::join(
            self.store.due_tasks(&crawl.id, host, DUE_PAGE),
            futures_util::future::try_join_all(
                lanes
                    .iter()
                    .map(|lane| self.store.due_in_lane(&crawl.id, host, lane, DUE_PAGE)),
            ),
        )
        .await;
        let (all, mut lists) = (all?, lists?);
        let laned: HashSet<&TaskId> = lists.iter().flatten().map(|t| &t.task_id).collect();
        let rest: Vec<TaskSummary> = all
            .iter()
            .filter(|t| !laned.contains(&t.task_id))
            .cloned()
            .collect();
        lists.push(rest);
        Ok(lists)
    }

    /// Waits until `at` (the clock's monotonic time), renewing the turn's hold on its host
    /// whenever the plan says it is due (`TurnPlan::renew_at`), so that the hold covers the
    /// fetch that starts then. False when the hold was lost (the turn was taken over, or the
    /// renewal failed): the plan is stopped and nothing more starts. A stopped turn renews
    /// nothing: it starts no fetch.
    async fn wait_holding(&self, at: Instant, hold: &Hold<'_>, state: &Mutex<TurnState>) -> bool {
        loop {
            // Registered before the check, so that a stop asked in between still wakes it.
            let halted = self.halt.woken.notified();
            tokio::pin!(halted);
            halted.as_mut().enable();
            if self.halt.asked() {
                lock(state).plan.stop();
            }
            let now = self.clock.now_ms();
            let (renew_at, stopped) = {
                let plan = &lock(state).plan;
                (plan.renew_at(), plan.stopped())
            };
            if stopped {
                return false;
            }
            if now >= renew_at {
                if !self.renew(hold, state).await {
                    lock(state).plan.stop();
                    return false;
                }
                continue;
            }
            let here = self.clock.instant();
            if here >= at {
                return true;
            }
            let renewal = here + Duration::from_millis(u64::try_from(renew_at - now).unwrap_or(0));
            tokio::select! {
                () = self.clock.sleep_until(at.min(renewal)) => {}
                () = &mut halted => {}
            }
        }
    }

    /// Renews the turn's hold on its host (`Host::renew`; one write of the host record, over the
    /// version the turn last wrote), unless a concurrent fetch of the turn did meanwhile. False
    /// when the turn is no longer the host's, or the write failed.
    async fn renew(&self, hold: &Hold<'_>, state: &Mutex<TurnState>) -> bool {
        let mut written = hold.written.lock().await;
        let now = self.clock.now_ms();
        let (renew_at, hold_ms) = {
            let plan = &lock(state).plan;
            (plan.renew_at(), plan.hold_ms())
        };
        if now < renew_at {
            return true;
        }
        match renew_turn(&self.store, hold.crawl, &written, hold.turn, now, hold_ms).await {
            Ok(Some(host)) => {
                tracing::debug!(until = host.turn_until, "turn's hold renewed");
                lock(state).plan.renewed(now);
                *written = host;
                true
            }
            Ok(None) => {
                tracing::warn!("the host's turn was taken over: this turn stops");
                false
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot renew the turn's hold on its host: the turn stops");
                false
            }
        }
    }

    /// Claims and crawls one due task. Returns what became of it (None: its records wait in
    /// the turn's open segment, `held`) and, when the host answered or failed to, the signal
    /// for the host. `answered_at`: when the host last answered.
    async fn crawl_task(
        &self,
        context: &CrawlContext,
        due: &TaskSummary,
        answered_at: Option<Millis>,
        outbox: &Outbox,
        held: &Held,
    ) -> (Option<Outcome>, Option<HostSignal>) {
        let config = &context.crawl.config;
        let now = self.clock.now_ms();
        // The turn holds its host's lease: a store may take the task without a write, as read
        // in the roster when it was.
        let as_read = lock(&held.as_read)
            .remove(&due.task_id)
            .filter(|_| P::Store::IN_TURN_CLAIMS == InTurnClaims::AsRead);
        let claimed = match as_read {
            Some(task) => Ok(claimed_as_read(task, config.lease_ms, now)),
            None => {
                self.store
                    .claim_in_turn(&context.crawl.id, &due.task_id, config.lease_ms, now)
                    .await
            }
        };
        let (task, lease) = match claimed {
            Ok(ClaimOutcome::Claimed { task, lease }) => (*task, lease),
            // Done, not due after all, or leased by another worker: nothing to do here.
            Ok(ClaimOutcome::Rejected(why)) => {
                tracing::debug!(?why, "claim rejected");
                return (Some(Outcome::Skipped), None);
            }
            Err(e) => {
                tracing::error!(error = %e, "claim failed");
                self.faults.failed(&CrawlerError::Store(e));
                return (Some(Outcome::Error), None);
            }
        };
        match self
            .crawl_claimed(context, &task, &lease, answered_at, outbox, held)
            .await
        {
            Ok((Step::Ended(outcome), signal)) => {
                self.faults.done();
                (Some(outcome), signal)
            }
            Ok((Step::Gathered(page), signal)) => {
                let fetched_before = due.fetched_before();
                held.segment.push(gather::Waiting {
                    page,
                    fetched_before,
                });
                (None, signal)
            }
            Err(e) => {
                self.faults.failed(&e);
                // Give the task back so it need not wait for its lease to expire.
                tracing::error!(error = %e, "processing failed; task released");
                if let Err(release) = self.store.release(&lease, self.clock.now_ms()).await {
                    tracing::warn!(error = %release, "release failed; the lease will expire");
                }
                (Some(Outcome::Error), None)
            }
        }
    }

    /// Ends the due tasks of a given-up host (`ignored`, with the host's reason), a bounded
    /// number per turn; the host's next turn ends the rest.
    /// Returns what became of them, and how many were brought to their first end (the host's
    /// `done`).
    async fn end_tasks_of_given_up(
        &self,
        context: &CrawlContext,
        host: &Host,
    ) -> (Vec<Outcome>, u64) {
        let crawl = &context.crawl;
        let reason = host.given_up.clone().unwrap_or_default();
        let due = match self
            .store
            .host_tasks(&crawl.id, &host.name, DRAIN_PER_TURN)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the given-up host's tasks");
                return (vec![Outcome::Error], 0);
            }
        };
        let failure = Failure::new(ErrorKind::HostGivenUp, reason);
        let mut outcomes = Vec::with_capacity(due.len());
        let mut ended = 0;
        let now = self.clock.now_ms();
        let due_now = due
            .into_iter()
            .filter(|t| t.claimable_from().is_some_and(|at| at <= now));
        for task in due_now {
            let revisit = context.revisit.for_url(&task.url);
            let now = self.clock.now_ms();
            let claimed = self
                .store
                .claim(&crawl.id, &task.task_id, crawl.config.lease_ms, now)
                .await;
            let outcome = match claimed {
                Ok(ClaimOutcome::Claimed { lease, .. }) => {
                    match self.fail(context, &lease, &failure, &revisit).await {
                        Ok(outcome) => outcome,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot end a task of a given-up host");
                            Outcome::Error
                        }
                    }
                }
                Ok(ClaimOutcome::Rejected(_)) => Outcome::Skipped,
                Err(e) => {
                    tracing::error!(error = %e, "claim failed");
                    Outcome::Error
                }
            };
            ended += u64::from(outcome.end(&task) == TaskEnd::Ended);
            outcomes.push(outcome);
        }
        (outcomes, ended)
    }

    /// A turn of a given-up host: its due tasks end `ignored`; the host goes idle once none is
    /// left (a later seed wakes it, and that turn ends the new ones too).
    async fn drain(
        &self,
        context: &CrawlContext,
        name: &str,
        outbox: &Outbox,
    ) -> (Disposition, Vec<Outcome>) {
        let crawl = &context.crawl;
        let Ok(Some(host)) = self.store.get_host(&crawl.id, name).await else {
            return (
                Disposition::RetryAfter(INTERNAL_RETRY_MS),
                vec![Outcome::Error],
            );
        };
        let (outcomes, ended) = self.end_tasks_of_given_up(context, &host).await;
        let now = self.clock.now_ms();
        // Pages due later (recrawls) are not left: the sweeper wakes the host when they are due.
        let left = match self.store.host_tasks(&crawl.id, name, 1).await {
            Ok(due) => due
                .first()
                .and_then(TaskSummary::claimable_from)
                .is_some_and(|at| at <= now),
            Err(_) => true,
        };
        let settled = update_host(&self.store, crawl, name, now, |h| {
            let counted = Host {
                done: h.done + ended,
                ..h.clone()
            };
            if left {
                let (next, visible_at) = counted.requeue(now);
                (Some(next), Some(visible_at))
            } else {
                let (next, visible_at) = counted.drained_unless_settling(now, self.seeds_settle_ms);
                (Some(next), visible_at)
            }
        })
        .await;
        settle_host(settled, crawl, now, outbox, outcomes)
    }

    /// Sends a turn's messages (its next turn, hosts its links woke) in batches of 10.
    /// A message that cannot be sent leaves its host presumed queued: the sweeper re-issues it.
    async fn send_outbox(&self, outbox: Outbox) {
        let messages = outbox.into_inner().unwrap_or_else(PoisonError::into_inner);
        if messages.is_empty() {
            return;
        }
        match send_patiently(&self.queue, &messages).await {
            Ok(report) if report.failed.is_empty() => {}
            Ok(report) => tracing::warn!(
                failed = report.failed.len(),
                "turns not enqueued; the sweeper will re-issue them"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "turns not enqueued; the sweeper will re-issue them")
            }
        }
    }

    /// Fetch, store, discover and record a claimed task. Returns what became of it and what
    /// the fetch said about its host (None: no request reached the host).
    async fn crawl_claimed(
        &self,
        context: &CrawlContext,
        task: &Task,
        lease: &Lease,
        answered_at: Option<Millis>,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<(Step, Option<HostSignal>), CrawlerError> {
        let config = &context.crawl.config;
        let revisit = context.revisit.for_url(&task.url);
        let url = match CanonicalUrl::parse(&task.url) {
            Ok(url) => url,
            Err(e) => {
                let failure = Failure::new(ErrorKind::InvalidContent, e.to_string());
                return Ok((
                    self.fail(context, lease, &failure, &revisit).await?.into(),
                    None,
                ));
            }
        };
        let given_type = match given_content_type(task.data.as_ref()) {
            Ok(given) => given,
            Err(e) => {
                let failure = Failure::new(ErrorKind::InvalidContent, e);
                return Ok((
                    self.fail(context, lease, &failure, &revisit).await?.into(),
                    None,
                ));
            }
        };
        let given = session_of(task.data.as_ref())
            .and_then(|s| Ok((s, pushed_content(task.data.as_ref())?)));
        let (session, content) = match given {
            Ok(given) => given,
            Err(e) => {
                let failure = Failure::new(ErrorKind::InvalidContent, e);
                return Ok((
                    self.fail(context, lease, &failure, &revisit).await?.into(),
                    None,
                ));
            }
        };
        let now = self.clock.now_ms();
        // An image is a leaf: fetched through its redirects (each hop in the image scope),
        // never read for links or items.
        let image = is_image_task(task.data.as_ref());
        let own = match TaskRequest::of_data(task.data.as_ref()) {
            Ok(own) => own,
            Err(e) => {
                let failure = Failure::new(ErrorKind::InvalidContent, e.to_string());
                return Ok((
                    self.fail(context, lease, &failure, &revisit).await?.into(),
                    None,
                ));
            }
        };
        let request = FetchRequest {
            url: &url,
            crawl_id: Some(&context.crawl.id),
            config,
            previous: task.fetch.as_ref(),
            scope: &context.scope,
            depth: task.depth,
            now,
            redirects: match image {
                true => Redirects::Follow,
                false => Redirects::Report,
            },
            content_type: given_type,
            image,
            session,
            request: own.as_ref(),
        };
        let previous = task.fetch.as_ref();
        tracing::debug!(url = %task.url, token = lease.token, "fetch");
        let answered = {
            // A lane with a limit: a slot of it for the fetch.
            let limited = task
                .lane
                .as_deref()
                .and_then(|lane| Some((lane, *config.scope.lane_limits.get(lane)?)));
            let _slot = match limited {
                Some((lane, limit)) => self.lane_slots.take(&context.crawl.id, lane, limit).await,
                None => None,
            };
            match content {
                Some(content) => crate::fetch::pushed(&request, content),
                None => self.fetcher.fetch(request).await,
            }
        };
        let answered = match config.scope.images.thumbnail.filter(|_| image) {
            Some(fit) => thumbnail::of(answered, fit).await,
            None => answered,
        };
        match answered {
            FetchOutcome::Failed(failure) => {
                let signal = HostSignal::of_failure(&failure);
                if signal.spends_retry() || singled_out(answered_at, &task.errors) {
                    let outcome = self.fail(context, lease, &failure, &revisit).await?;
                    if outcome == Outcome::GaveUp {
                        self.retry_changed(context, task, &failure, outbox, held)
                            .await;
                    }
                    return Ok((outcome.into(), Some(signal)));
                }
                // The host's trouble, not the URL's: back to pending, no retry spent.
                tracing::info!(kind = ?failure.kind, error = %failure.message, "host-wide trouble; host snoozed");
                self.store
                    .hold_back(lease, &failure, self.clock.now_ms())
                    .await?;
                Ok((Outcome::Snoozed.into(), Some(signal)))
            }
            FetchOutcome::Redirected { status, location } => {
                // The redirect is recorded here; its target is a task of its own (seeded at this
                // task's depth), fetched once however many redirects and links lead to it.
                let target = NewTask {
                    lane: context.scope.lane_of(location.as_str()),
                    priority: task.priority,
                    url: location.clone(),
                    depth: task.depth,
                    parent: Some(task.task_id.clone()),
                    data: inherited_data(config, task),
                };
                self.seed_found(context, task, vec![target], outbox, held)
                    .await?;
                let record =
                    fetched::redirected(previous, status, location.as_str(), &revisit, now);
                self.record_bodiless(context, task, lease, &url, record, Outcome::Redirected)
                    .await
            }
            FetchOutcome::NotModified(not_modified) => {
                // The stored content stands: refresh the validators, no PUT.
                let record = FetchRecord {
                    sent: not_modified.sent,
                    ..fetched::not_modified(
                        previous,
                        not_modified.etag,
                        not_modified.last_modified,
                        &revisit,
                        now,
                    )
                };
                self.record_bodiless(context, task, lease, &url, record, Outcome::Unchanged)
                    .await
            }
            FetchOutcome::Fetched(page) => {
                if let Some(body) = page.body.as_ref().filter(|_| page.is_html())
                    && let Some(found) = context.revisit.soft_404(url.as_str(), body.bytes())
                {
                    let failure = Failure {
                        http_status: Some(page.status),
                        ..Failure::new(ErrorKind::NotFound, found.to_string())
                    };
                    let revisit = revisit.on_marker(found.at_once);
                    let outcome = self.fail(context, lease, &failure, &revisit).await?;
                    return Ok((outcome.into(), Some(HostSignal::Answered)));
                }
                let answer = Answer {
                    status: page.status,
                    md5: page.body.as_ref().map(|b| b.md5_hex()),
                    content_type: page.content_type.clone(),
                    content_length: page
                        .body
                        .as_ref()
                        .map_or(page.content_length.unwrap_or(0), |b| b.bytes().len() as u64),
                    etag: page.etag.clone(),
                    last_modified: page.last_modified.clone(),
                    final_url: (page.final_url != url).then(|| page.final_url.as_str().to_owned()),
                    redirects: page.redirects,
                };
                let record = fetched::answered(answer, now);
                // Links first: if seeding them fails, the task is retried and nothing is lost.
                // An unchanged body has the links its previous fetch already seeded.
                let unchanged = fetched::same_body(&record, previous);
                // What pages of this kind get: the crawl's, unless a route says otherwise.
                let route = context.scope.route(url.as_str());
                let keep = route.and_then(|r| r.store).unwrap_or(true);
                // Items travel with their page's body: a page not kept is read for links only.
                let extractor = match route.and_then(|r| r.extractor.as_deref()) {
                    _ if !keep => None,
                    Some(name) => context.extractors.named(name),
                    None => context.extractors.for_url(url.as_str()),
                };
                let want = Want {
                    links: route
                        .and_then(|r| r.follow_links)
                        .unwrap_or(config.scope.follow_links),
                    images: context.scope.images_of(url.as_str()),
                };
                // Links, images and items are read while the body is in memory, from one parse
                // when an extractor applies; an unchanged page keeps its items.
                let reading = match &page.body {
                    Some(body) if page.is_html() && !unchanged && !image => {
                        read_page(body.bytes(), page.final_url.as_url(), extractor, want)
                    }
                    _ => PageReading::default(),
                };
                let mut new_links = 0;
                let mut images = Vec::new();
                if let Some(mut links) = reading.links {
                    images = std::mem::take(&mut links.images);
                    if want.links {
                        new_links = self.discover(context, task, links, outbox, held).await?;
                    }
                }
                // The images the page's items name are fetched whatever the page's route says.
                if let Some(found) = &reading.items {
                    images.extend(
                        context
                            .extractors
                            .image_urls(found)
                            .into_iter()
                            .filter_map(|u| CanonicalUrl::parse(u).ok()),
                    );
                }
                if !images.is_empty() {
                    self.seed_images(context, task, images, outbox, held)
                        .await?;
                }
                // An open-ended template's page seeds the next one (before its own finish, as
                // links are), or records why it is the last; unchanged, it decided before.
                let paging_stop = match context.page_of(&task.url) {
                    Some((pattern, at)) if !unchanged => {
                        let yielded = PageYield {
                            new_links,
                            items: reading.items.as_ref().map_or(0, |i| i.items.len() as u64),
                            // A body not kept (a type not stored) yields by its length.
                            body: page
                                .body
                                .as_ref()
                                .map_or(record.content_length > 0, |b| body_yields(b.bytes())),
                        };
                        match next_page(pattern, &at, yielded) {
                            PageStep::Next(next) => {
                                self.seed_next_page(context, task, &next, outbox, held)
                                    .await?;
                                None
                            }
                            PageStep::Stop(stop) => {
                                tracing::info!(url = %task.url, ?stop, "pagination stops");
                                Some(stop)
                            }
                        }
                    }
                    _ => previous.and_then(|p| p.paging_stop),
                };
                // A chained page seeds its next requests (before its finish, as links are), or
                // records why it made none; unchanged, it decided before.
                let chain_stop = match unchanged {
                    _ if image => None,
                    true => previous.and_then(|p| p.chain_stop.clone()),
                    false => {
                        let items = reading.items.as_ref();
                        self.seed_chained(context, task, &page, items, outbox, held)
                            .await?
                    }
                };
                // The page's analysis, when the crawl asks for it and the task's data does not
                // skip it: an unchanged body's stands.
                let wanted = config.analysis.for_task(task.data.as_ref());
                let analysis = match &page.body {
                    _ if wanted.is_off() || image => None,
                    _ if unchanged => previous.and_then(|p| p.analysis.clone()),
                    Some(body) => crate::discover::analyse_body(
                        &wanted,
                        body.bytes(),
                        page.content_type.as_deref(),
                    ),
                    None => None,
                };
                let changed = fetched::changed(&revisit, unchanged, new_links);
                let record = FetchRecord {
                    sent: page.sent,
                    paging_stop,
                    chain_stop,
                    analysis,
                    ..fetched::scheduled(record, previous, changed, &revisit, now)
                };
                let bytes = record.content_length;
                let items = reading.items.and_then(items_json);
                let page_body = page.body.filter(|_| keep).map(|body| PageBody {
                    body,
                    compress: config.storage.compress_bodies,
                    layout: config.storage.layout,
                    items,
                });
                // On the heap: its frame is the largest of a turn's (~290 KB in a debug build),
                // and a handler's future nests it deep.
                let recorded = Box::pin(record_or_gather(
                    &self.store,
                    &self.blobs,
                    &self.layout,
                    task,
                    lease,
                    &url,
                    record,
                    page_body,
                    WithItems(!context.extractors.is_empty()),
                    self.clock(),
                ))
                .await?;
                let step = match recorded {
                    Recorded::Stored(StoredPage::Finished { put }) => {
                        if put || task.fetch.is_none() {
                            Outcome::Succeeded { bytes, put }
                        } else {
                            Outcome::Unchanged
                        }
                        .into()
                    }
                    Recorded::Stored(StoredPage::LostLease) => {
                        tracing::debug!(url = %task.url, "lease lost: another worker recorded the page");
                        Outcome::Skipped.into()
                    }
                    Recorded::Gathered(page) => Step::Gathered(page),
                };
                Ok((step, Some(HostSignal::Answered)))
            }
        }
    }

    /// Finishes `task` with a record that stores no body (a redirect, a 304): `done` when the
    /// finish holds, skipped when the lease was taken over.
    async fn record_bodiless(
        &self,
        context: &CrawlContext,
        task: &Task,
        lease: &Lease,
        url: &CanonicalUrl,
        record: FetchRecord,
        done: Outcome,
    ) -> Result<(Step, Option<HostSignal>), CrawlerError> {
        let stored = record_page(
            &self.store,
            &self.blobs,
            &self.layout,
            task,
            lease,
            url,
            record,
            None,
            WithItems(!context.extractors.is_empty()),
            self.clock(),
        )
        .await?;
        let outcome = match stored {
            StoredPage::Finished { .. } => done,
            StoredPage::LostLease => Outcome::Skipped,
        };
        Ok((outcome.into(), Some(HostSignal::Answered)))
    }

    async fn fail(
        &self,
        context: &CrawlContext,
        lease: &Lease,
        failure: &Failure,
        revisit: &Revisit,
    ) -> Result<Outcome, CrawlerError> {
        let now = self.clock.now_ms();
        tracing::info!(kind = ?failure.kind, error = %failure.message, "fetch failed");
        // A retry is a due time on the task: the turn goes on with the host's other URLs.
        Ok(
            match self
                .store
                .fail(lease, failure, &context.crawl.config.retry, revisit, now)
                .await?
            {
                FailOutcome::Retrying { next_attempt_at } => Outcome::Retrying { next_attempt_at },
                FailOutcome::GaveUp { .. } => Outcome::GaveUp,
                FailOutcome::Rejected => Outcome::Skipped,
            },
        )
    }

    /// Seeds the page's in-scope links one level deeper; returns how many were new.
    async fn discover(
        &self,
        context: &CrawlContext,
        task: &Task,
        links: Links,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<u64, CrawlerError> {
        let depth = task.depth + 1;
        let crawl = &context.crawl;
        let tasks: Vec<NewTask> = links
            .urls
            .into_iter()
            .map(|url| context.scope.normalise(url))
            .filter(|url| context.scope.check(url, depth).is_ok())
            // An open-ended template's pages come one after the other, by its rule only.
            .filter(|url| context.page_of(url.as_str()).is_none())
            .map(|url| {
                let data = keyed(
                    inherited_data(&crawl.config, task),
                    context.scope.key_of(url.as_str()),
                );
                NewTask {
                    lane: context.scope.lane_of(url.as_str()),
                    priority: link_priority(context, &url, data.as_ref()),
                    url,
                    depth,
                    parent: Some(task.task_id.clone()),
                    data,
                }
            })
            .collect();
        self.seed_found(context, task, tasks, outbox, held).await
    }

    /// Seeds the images found on `task`'s page (`trawl_domain::image`) that the image scope
    /// admits, one level deeper, marked as images; returns how many were new.
    async fn seed_images(
        &self,
        context: &CrawlContext,
        task: &Task,
        images: Vec<CanonicalUrl>,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<u64, CrawlerError> {
        let data = image_data(inherited_data(&context.crawl.config, task));
        let tasks: Vec<NewTask> = images
            .into_iter()
            .map(|url| context.scope.normalise(url))
            .filter(|url| context.scope.check_image(url).is_ok())
            .map(|url| NewTask {
                lane: context.scope.lane_of(url.as_str()),
                priority: link_priority(context, &url, Some(&data)),
                url,
                depth: task.depth + 1,
                parent: Some(task.task_id.clone()),
                data: Some(data.clone()),
            })
            .collect();
        self.seed_found(context, task, tasks, outbox, held).await
    }

    /// Seeds the next page of the open-ended template `task` is a page of, at `task`'s depth
    /// (a seed's chain is not cut by `max_depth`), if the crawl's scope admits it.
    async fn seed_next_page(
        &self,
        context: &CrawlContext,
        task: &Task,
        next: &str,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<u64, CrawlerError> {
        let Ok(url) = CanonicalUrl::parse(next).map(|url| context.scope.normalise(url)) else {
            return Ok(0);
        };
        if let Err(reason) = context.scope.check(&url, task.depth) {
            tracing::warn!(url = %url, %reason, "the next page is out of the crawl's scope");
            return Ok(0);
        }
        let data = inherited_data(&context.crawl.config, task);
        let found = NewTask {
            lane: context.scope.lane_of(url.as_str()),
            priority: link_priority(context, &url, data.as_ref()),
            url,
            depth: task.depth,
            parent: Some(task.task_id.clone()),
            data,
        };
        self.seed_found(context, task, vec![found], outbox, held)
            .await
    }

    /// Seeds URLs `task` led to (its links, its redirect's target) that this worker has not
    /// seeded yet, and remembers them (from before the seed: concurrent fetches finding the same
    /// links put them once), so that pages linking to them again need not seed them again; a
    /// seed that fails or is cut short by the page budget forgets them. Returns how many tasks
    /// were new.
    async fn seed_found(
        &self,
        context: &CrawlContext,
        task: &Task,
        tasks: Vec<NewTask>,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<u64, CrawlerError> {
        let crawl = &context.crawl;
        let (created_at, crawl_name) = (crawl.created_at, crawl.id.as_str());
        // The page itself exists too: pages linking back to it need not seed it again.
        self.seen
            .insert_new(created_at, crawl_name, std::slice::from_ref(&task.task_id));
        let ids: Vec<_> = tasks.iter().map(NewTask::task_id).collect();
        let new = self.seen.insert_new(created_at, crawl_name, &ids);
        let (tasks, ids): (Vec<NewTask>, Vec<_>) = tasks
            .into_iter()
            .zip(ids)
            .zip(new)
            .filter_map(|(found, new)| new.then_some(found))
            .unzip();
        if tasks.is_empty() {
            return Ok(0);
        }
        let now = self.clock.now_ms();
        // A transient error is waited out here, briefly, rather than costing the page a refetch
        // (its task released): seeding is safe to repeat (tasks are put if absent; a host told
        // twice of its URLs gets at most one empty turn), as the refetch would repeat it anyway.
        let retries = std::sync::atomic::AtomicU64::new(0);
        let seeded = persist(
            self.clock(),
            "seed the links",
            &Backoff::BRIEF,
            &retries,
            || seed_in_turn(&self.store, crawl, tasks.clone(), Some(&held.host), now),
        )
        .await;
        let (report, messages, offered) = match seeded {
            Ok(seeded) => seeded,
            Err(e) => {
                self.seen.forget(created_at, crawl_name, &ids);
                return Err(e.into());
            }
        };
        held.offered
            .fetch_add(offered, std::sync::atomic::Ordering::Relaxed);
        lock(outbox).extend(messages);
        if report.over_budget > 0 {
            self.seen.forget(created_at, crawl_name, &ids);
        }
        tracing::debug!(
            new = report.accepted,
            known = report.already_known,
            over_budget = report.over_budget,
            deferred = report.deferred,
            "links"
        );
        Ok(report.accepted)
    }

    async fn context(&self, crawl_id: &CrawlId) -> Result<Option<Arc<CrawlContext>>, StoreError> {
        if let Some(context) = self.crawls.read().await.get(crawl_id)
            && self
                .clock
                .instant()
                .saturating_duration_since(context.loaded)
                < CRAWL_CACHE_TTL
        {
            return Ok(Some(context.clone()));
        }
        let Some(crawl) = self.store.get_crawl(crawl_id).await? else {
            return Ok(None);
        };
        let scope = match ScopeMatcher::new(&crawl.config.scope) {
            Ok(scope) => scope,
            Err(e) => {
                // The seeder validates scopes; a stored one that does not compile is corrupt.
                return Err(StoreError::Corrupt {
                    key: crawl_id.to_string(),
                    reason: e.to_string(),
                });
            }
        };
        // The seeder validates recrawl rules too.
        let revisit = RevisitRules::new(&crawl.config.recrawl)
            .map_err(|reason| StoreError::Corrupt {
                key: crawl_id.to_string(),
                reason,
            })?
            .at_level(crawl.level);
        // And extractors.
        let extractors =
            Extractors::new(&crawl.config.extract).map_err(|e| StoreError::Corrupt {
                key: crawl_id.to_string(),
                reason: e.to_string(),
            })?;
        // And pagination templates.
        let paging = crawl
            .config
            .paging
            .iter()
            .map(|t| PagePattern::new(t, |url| scope.normalise(url)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Corrupt {
                key: crawl_id.to_string(),
                reason: e.to_string(),
            })?;
        // And chain rules.
        let chains = ChainRules::new(&crawl.config).map_err(|reason| StoreError::Corrupt {
            key: crawl_id.to_string(),
            reason,
        })?;
        let context = Arc::new(CrawlContext {
            crawl,
            scope,
            revisit,
            extractors,
            paging,
            chains,
            loaded: self.clock.instant(),
        });
        // A paused crawl is read again at each of its turns (each dropped): its resume takes
        // effect at once, not a cache's lifetime later.
        let mut cached = self.crawls.write().await;
        match context.crawl.config.paused {
            true => cached.remove(crawl_id),
            false => cached.insert(crawl_id.clone(), context.clone()),
        };
        Ok(Some(context))
    }
}

/// A page's items as the JSON stored beside its body; None (logged) in the unexpected case that
/// they do not serialise.
fn items_json(found: PageItems) -> Option<Bytes> {
    let invalid = found.items.iter().filter(|i| !i.is_valid()).count();
    tracing::debug!(extractor = %found.extractor, items = found.items.len(), invalid, "items");
    match serde_json::to_vec(&found) {
        Ok(json) => Some(Bytes::from(json)),
        Err(e) => {
            tracing::error!(error = %e, "items not stored");
            None
        }
    }
}

/// The lock of a turn's shared state. No code path panics while holding it, so a poisoned lock
/// still guards a consistent state.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a turn's message ends once its host's record was written: done, with the host's next
/// turn queued when it has one; or, when the write failed, back to the queue (the turn's lease
/// runs out and a worker takes the host over).
fn settle_host(
    written: StoreResult<Option<(Host, Option<Millis>)>>,
    crawl: &Crawl,
    now: Millis,
    outbox: &Outbox,
    mut outcomes: Vec<Outcome>,
) -> (Disposition, Vec<Outcome>) {
    match written {
        Ok(Some((host, Some(visible_at)))) => {
            lock(outbox).push(turn_message(crawl, &host, visible_at, now));
            (Disposition::Done, outcomes)
        }
        Ok(_) => (Disposition::Done, outcomes),
        Err(e) => {
            tracing::error!(error = %e, "cannot write the host back");
            outcomes.push(Outcome::Error);
            (Disposition::RetryAfter(INTERNAL_RETRY_MS), outcomes)
        }
    }
}

/// Milliseconds from `now` until `at`, within what a queue can hold a message back.
fn wait_ms(at: Millis, now: Millis) -> u64 {
    u64::try_from(at.saturating_sub(now)).map_or(0, |ms| ms.min(MAX_HOLD_MS))
}

/// The priority of a link to `url` (`Priority::of_link`): its route's, else its inherited data's.
fn link_priority(context: &CrawlContext, url: &CanonicalUrl, data: Option<&UserData>) -> Priority {
    let route = context.scope.route(url.as_str()).and_then(|r| r.priority);
    Priority::of_link(route, data)
}

/// The user data a task found on `task`'s page starts with (`scope.inherit_data`): a link (or a
/// reported redirect's target) is a GET, whatever request its page was (a POST follows its
/// redirects within its fetch, as `RequestPlan::follow` says).
/// What a page found on `task`'s page carries of its data: all of it with `scope.inherit_data`
/// (but its request and key), else its session alone (a session's pages stay in it).
fn inherited_data(config: &CrawlConfig, task: &Task) -> Option<UserData> {
    let data = task.data.clone()?;
    if config.scope.inherit_data {
        return Some(without_request(data));
    }
    let session = data.get(SESSION_KEY)?.clone();
    Some(UserData::from_iter([(SESSION_KEY.to_owned(), session)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::memory::MemoryBlobStore;
    use crate::clock::ManualClock;
    use crate::frontier::add_tasks;
    use crate::queue::WorkQueue;
    use crate::queue::local::LocalQueue;
    use crate::store::TaskRecords;
    use crate::store::memory::MemoryStore;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::crawl::CrawlConfig;
    use trawl_domain::task::Status;

    /// A turn message of `host` at `epoch`, as the queue would deliver it.
    fn delivered(crawl: &CrawlId, host: &str, epoch: u64) -> Received {
        let body = serde_json::to_string(&WorkMessage::new(crawl.clone(), host, epoch, 0)).unwrap();
        Received {
            message_id: format!("m{epoch}"),
            receipt: format!("r{epoch}"),
            body,
            receives: 1,
        }
    }

    /// A loopback site answering every request with a small HTML page; returns its port and
    /// the times (on `clock`) its requests arrived.
    async fn paced_site(clock: ManualClock) -> (u16, Arc<Mutex<Vec<Millis>>>) {
        site_calling(clock, || {}).await
    }

    /// `paced_site`, calling `on_request` as each request arrives (before it is answered).
    async fn site_calling(
        clock: ManualClock,
        on_request: impl Fn() + Send + 'static,
    ) -> (u16, Arc<Mutex<Vec<Millis>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                lock(&seen).push(clock.now_ms());
                on_request();
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let body = "<p>ok</p>";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        (port, arrivals)
    }

    #[tokio::test]
    async fn a_turn_paces_its_host_and_stops_before_its_deadline_on_the_crawlers_clock() {
        // GIVEN a crawler on a virtual clock, a host paced at one request a minute with six due
        // pages, and an invocation deadline 5 virtual minutes and 2 s away (fetch window: 3 s)
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let (port, arrivals) = paced_site(clock.clone()).await;
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.fetch.timeout_ms = 1_000;
        config.politeness.respect_robots = false;
        config.politeness.delay_ms = 60_000;
        config.scope.follow_links = false;
        config.lease_ms = 3_600_000;
        let crawl = Crawl::new(CrawlId::parse("paced").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let tasks = (0..6)
            .map(|i| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/{i}")).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        add_tasks(&store, &queue, &crawl, tasks, t0).await.unwrap();
        let app = App::new(store, MemoryBlobStore::new(), queue, calls)
            .with_clock(Arc::new(clock.clone()));
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);
        let deadline = std::time::Instant::now() + Duration::from_millis(302_000);
        let real = std::time::Instant::now();

        // WHEN the host's turn runs
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, Some(deadline)).await;

        // THEN its requests went a virtual minute apart, and the sixth, whose start came within
        // a fetch window of the deadline, did not start: the turn handed its host back
        let arrivals = lock(&arrivals).clone();
        let gaps: Vec<Millis> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(arrivals.len(), 5, "{arrivals:?}");
        assert!(gaps.iter().all(|gap| *gap >= 60_000), "{gaps:?}");
        assert_eq!(clock.now_ms() - t0, 300_000);
        let succeeded = results[0]
            .outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Succeeded { .. }))
            .count();
        assert_eq!(
            (succeeded, &results[0].disposition),
            (5, &Disposition::Done)
        );
        // AND five minutes of pace took no real minutes
        assert!(
            real.elapsed() < Duration::from_secs(30),
            "{:?}",
            real.elapsed()
        );
    }

    #[tokio::test]
    async fn a_turn_whose_host_was_taken_over_before_its_segment_was_appended_finishes_nothing() {
        // GIVEN a crawler on a virtual clock and a store gathering a turn's records (as S3
        // does), and a page on the segment layout whose fetch outlasts the turn's hold: while
        // it is answered the hold runs out and another worker takes the host's turn
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let store = MemoryStore::new();
        let mut config = CrawlConfig::default();
        config.fetch.allow_private_networks = true;
        config.politeness.respect_robots = false;
        config.scope.follow_links = false;
        config.storage.layout = trawl_domain::crawl::StorageLayout::Segments;
        let crawl = Crawl::new(CrawlId::parse("taken").unwrap(), config, t0);
        let (rival_store, rival_crawl, rival_clock) = (store.clone(), crawl.clone(), clock.clone());
        let host = Arc::new(std::sync::OnceLock::<String>::new());
        let rival_host = host.clone();
        let (port, _) = site_calling(clock.clone(), move || {
            rival_clock.advance(3 * trawl_domain::turn::TURN_HOLD_MS as Millis);
            let now = rival_clock.now_ms();
            let name = rival_host.get().map_or("", String::as_str);
            let taken = update_host(&rival_store, &rival_crawl, name, now, |h| {
                match h.claim_turn_by(7, now, 30_000) {
                    Ok((next, _)) => (Some(next), true),
                    Err(_) => (None, false),
                }
            });
            let taken = futures_util::FutureExt::now_or_never(taken);
            assert!(matches!(taken, Some(Ok(Some((_, true))))), "{taken:?}");
        })
        .await;
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let url = CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/a")).unwrap();
        let _ = host.set(trawl_domain::canonical::host_key_of(url.as_str()));
        let task = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        add_tasks(&store, &queue, &crawl, vec![task], t0)
            .await
            .unwrap();
        let blobs = MemoryBlobStore::gathering(8 << 20);
        let app = App::new(store.clone(), blobs.clone(), queue, calls)
            .with_clock(Arc::new(clock.clone()));
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);

        // WHEN the turn runs
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, None).await;

        // THEN the page was fetched but neither appended nor finished: the new holder fetches it
        assert_eq!(results[0].outcomes, [Outcome::Skipped]);
        let task = store.get(&crawl.id, &url.task_id()).await.unwrap().unwrap();
        assert_eq!((task.status, task.fetch), (Status::Pending, None));
        let segments = crawler.layout.segments_prefix(&crawl.id);
        assert_eq!(blobs.list(&segments).await.unwrap(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_stop_ends_a_paced_turn_once_its_fetch_in_flight_is_done() {
        // GIVEN a host paced at one request a minute with six due pages, on a virtual clock,
        // whose site asks the crawler to stop as the first request arrives (Ctrl-C)
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let halt: Arc<std::sync::OnceLock<Arc<Halt>>> = Arc::default();
        let asked = halt.clone();
        let (port, arrivals) = site_calling(clock.clone(), move || {
            if let Some(halt) = asked.get() {
                halt.stop();
            }
        })
        .await;
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.politeness.respect_robots = false;
        config.politeness.delay_ms = 60_000;
        config.scope.follow_links = false;
        let crawl = Crawl::new(CrawlId::parse("halted").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let tasks = (0..6)
            .map(|i| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/{i}")).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        add_tasks(&store, &queue, &crawl, tasks, t0).await.unwrap();
        let app = App::new(store, MemoryBlobStore::new(), queue, calls)
            .with_clock(Arc::new(clock.clone()));
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);
        halt.get_or_init(|| crawler.halt());

        // WHEN the host's turn runs
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, None).await;

        // THEN the fetch in flight finished and no other started: the turn handed its host back
        // with its other five pages pending, for the next run
        assert_eq!(lock(&arrivals).len(), 1);
        assert!(
            matches!(results[0].outcomes[..], [Outcome::Succeeded { .. }]),
            "{:?}",
            results[0].outcomes
        );
        let name = format!("127.0.0.1:{port}");
        let host = crawler.store().get_host(&crawl.id, &name).await.unwrap();
        let host = host.unwrap();
        assert_eq!((host.turn_until, host.done, host.seeded), (None, 1, 6));
        assert!(host.queued_for.is_some(), "{host:?}");
        let pending = crawler.store().counts(&crawl.id).await.unwrap();
        assert_eq!(pending.get(&Status::Pending), Some(&5));
    }

    #[tokio::test]
    async fn a_fetch_budget_stops_a_turn_fetching_three_at_once_at_its_last_fetch() {
        // GIVEN a host with six due pages fetched three at a time, and a crawler that may start
        // two more page fetches (`trawl crawl --max-fetches 2`)
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let (port, arrivals) = paced_site(clock.clone()).await;
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.politeness.respect_robots = false;
        config.politeness.delay_ms = 0;
        config.politeness.per_host = 3;
        config.scope.follow_links = false;
        let crawl = Crawl::new(CrawlId::parse("budget").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let tasks = (0..6)
            .map(|i| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/{i}")).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        add_tasks(&store, &queue, &crawl, tasks, t0).await.unwrap();
        let app = App::new(store, MemoryBlobStore::new(), queue, calls)
            .with_clock(Arc::new(clock.clone()));
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);
        crawler.halt().limit_fetches(2);
        assert!(!crawler.halt().fetches_spent());

        // WHEN the host's turn runs
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, None).await;

        // THEN exactly two requests were made, the last one asked for the stop, and the host
        // was handed back with its other four pages pending for the next run
        assert_eq!(lock(&arrivals).len(), 2);
        assert_eq!(results[0].outcomes.len(), 2, "{:?}", results[0].outcomes);
        assert!(crawler.halt().asked() && crawler.halt().fetches_spent());
        let pending = crawler.store().counts(&crawl.id).await.unwrap();
        assert_eq!(pending.get(&Status::Pending), Some(&4));
    }

    #[tokio::test]
    async fn a_turn_between_a_seeds_count_and_its_task_leaves_the_host_open_until_they_settle() {
        // GIVEN a host woken by a seed's count (written before its task, as the frontier does)
        // whose task is not written yet when the turn reads its due list
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let (port, arrivals) = paced_site(clock.clone()).await;
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.politeness.respect_robots = false;
        config.scope.follow_links = false;
        let crawl = Crawl::new(CrawlId::parse("settle").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let url = CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/late")).unwrap();
        let name = url.host_key();
        let woken = update_host(&store, &crawl, &name, t0, |h| {
            let (next, visible_at) = h.note_seeded(1, t0);
            (Some(next), visible_at)
        })
        .await
        .unwrap()
        .unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let app = App::new(store, MemoryBlobStore::new(), queue, calls)
            .with_clock(Arc::new(clock.clone()))
            .with_seeds_settle(5_000);
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);

        // WHEN its turn runs and finds no due task
        clock.advance(100);
        let first = crawler
            .process_batch(vec![delivered(&crawl.id, &name, woken.0.epoch)], None)
            .await;
        assert!(first[0].outcomes.is_empty(), "{:?}", first[0].outcomes);

        // THEN the host is not idled: its next turn waits for the count to settle, and the
        // crawl's host counts still hold it open (so the crawl cannot complete)
        let host = crawler.store().get_host(&crawl.id, &name).await.unwrap();
        let host = host.unwrap();
        assert_eq!(host.queued_for, Some(t0 + 5_000), "{host:?}");
        let counts = crawler.store().host_counts(&crawl.id).await.unwrap();
        assert_eq!(counts.map(|c| c.open), Some(1));

        // WHEN the task lands, and the next turn comes once it settled
        let task = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        crawler
            .store()
            .seed(&crawl.id, &[task], t0 + 200)
            .await
            .unwrap();
        clock.advance(4_900);
        let second = crawler
            .process_batch(vec![delivered(&crawl.id, &name, host.epoch)], None)
            .await;

        // THEN the page is fetched, and only then does the host go idle
        assert!(
            matches!(second[0].outcomes[..], [Outcome::Succeeded { .. }]),
            "{:?}",
            second[0].outcomes
        );
        assert_eq!(lock(&arrivals).len(), 1);
        let done = crawler
            .store()
            .get(&crawl.id, &url.task_id())
            .await
            .unwrap();
        assert_eq!(done.map(|t| t.status), Some(Status::Succeeded));
        let idle = crawler.store().get_host(&crawl.id, &name).await.unwrap();
        assert_eq!(idle.and_then(|h| h.queued_for), None);
    }

    #[tokio::test]
    async fn a_dead_host_is_snoozed_on_the_crawlers_clock_then_given_up_without_spending_retries() {
        // GIVEN a crawler on a virtual clock far from the wall clock, and a URL whose host
        // refuses connections (a port bound, then freed), with an error budget of 3
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.politeness.respect_robots = false;
        config.politeness.snooze_base_ms = 60_000;
        config.politeness.error_budget = 3;
        let crawl = Crawl::new(CrawlId::parse("clock").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let url = CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/page")).unwrap();
        let host = url.host_key();
        let task = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        add_tasks(&store, &queue, &crawl, vec![task], t0)
            .await
            .unwrap();
        let app = App::new(store, MemoryBlobStore::new(), queue, calls)
            .with_clock(Arc::new(clock.clone()));
        let crawler = Crawler::new(Arc::new(app), Arc::new(Fetcher::new("").unwrap()), 1);
        let id = url.task_id();

        // WHEN the host's first turn runs
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, None).await;

        // THEN the task went back untouched and the host is snoozed from the virtual now, its
        // next turn queued (epoch 2) for when the snooze ends
        assert_eq!(results[0].outcomes, [Outcome::Snoozed]);
        assert_eq!(results[0].disposition, Disposition::Done);
        let task = crawler.store().get(&crawl.id, &id).await.unwrap().unwrap();
        assert_eq!((task.status, task.retries), (Status::Pending, 0));
        let snoozed = crawler
            .store()
            .get_host(&crawl.id, &host)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snoozed.snoozed_until, Some(t0 + 60_000));
        assert_eq!((snoozed.epoch, snoozed.queued_for), (2, Some(t0 + 60_000)));

        // AND a message of the superseded epoch is dropped, while the current one arriving
        // early waits for the snooze to end
        let stale = crawler
            .process_batch(vec![delivered(&crawl.id, &host, 1)], None)
            .await;
        assert_eq!(stale[0].disposition, Disposition::Done);
        clock.advance(10_000);
        let early = crawler
            .process_batch(vec![delivered(&crawl.id, &host, 2)], None)
            .await;
        assert_eq!(early[0].disposition, Disposition::RetryAfter(50_000));
        assert!(early[0].outcomes.is_empty());

        // WHEN the clock reaches the snooze and the host still refuses, twice more
        clock.advance(50_000);
        let second = crawler
            .process_batch(vec![delivered(&crawl.id, &host, 2)], None)
            .await;
        assert_eq!(second[0].outcomes, [Outcome::Snoozed]);
        let host_now = crawler
            .store()
            .get_host(&crawl.id, &host)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            host_now.snoozed_until,
            Some(clock.now_ms() + 120_000),
            "doubled"
        );
        clock.advance(120_000);
        let third = crawler
            .process_batch(vec![delivered(&crawl.id, &host, 3)], None)
            .await;

        // THEN the host is given up within its budget of 3 and its task ends ignored with
        // the host's reason, having spent no retry
        assert_eq!(third[0].outcomes, [Outcome::Snoozed, Outcome::GaveUp]);
        let given_up = crawler
            .store()
            .get_host(&crawl.id, &host)
            .await
            .unwrap()
            .unwrap();
        assert!(given_up.given_up.is_some(), "{given_up:?}");
        assert_eq!((given_up.fetches, given_up.signals), (3, 3));
        let task = crawler.store().get(&crawl.id, &id).await.unwrap().unwrap();
        assert_eq!((task.status, task.retries), (Status::Ignored, 0));
        assert_eq!(task.errors.last().unwrap().kind, ErrorKind::HostGivenUp);
        // AND the host is idle: nothing left, no message out
        assert_eq!(given_up.queued_for, None);
    }
}
