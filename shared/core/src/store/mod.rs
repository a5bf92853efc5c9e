//! The status store: crawls and their tasks. Three adapters implement the same ports and pass
//! the same conformance suite (`tests/conformance`): `dynamodb` (AWS, in `trawl-aws`), `sqlite`
//! (embedded, in `trawl-embedded`) and [`memory`] (tests and simulators).
//!
//! What a task operation does is decided in `trawl_domain::transition` (the condition it needs
//! and the task's new state); an adapter only persists it, in one conditional write. Guarantees
//! every adapter gives:
//! - `seed` never resets or duplicates an existing task (one conditional put per URL);
//! - `claim` is one conditional write; of N concurrent claimers exactly one wins; a task stranded
//!   `in_progress` by a crash is claimable again once its lease expires;
//! - every claim increments the task's fencing `token`; `finish`, `fail` and `release` must present
//!   it, so a worker whose lease was taken over can never overwrite a newer result;
//! - `claim_in_turn` (a claim by a host turn, which holds its host's fenced lease) may write
//!   nothing (DynamoDB: `LeaseKind::InTurn`): the lease is the token as read, and the first fenced
//!   write under it moves the token, so that of two holders of one read exactly one result lands;
//!   a holder that dies leaves the task due for the host's next turn;
//! - `finish` writes the status, the object pointer, md5 and fetch metadata in one write.

pub mod budget;
pub mod memory;

use crate::backoff::Transient;
use std::collections::BTreeMap;
use std::future::Future;
use thiserror::Error;
use trawl_domain::calls::CallTally;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::host::{Host, NextWork};
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{FetchRecord, Lease, Millis, NewTask, Status, Task};
use trawl_domain::transition::Failed;

/// A store failure. Conditional-check failures are never errors: they are outcomes.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Throttled, timed out or unreachable: retrying later may succeed.
    #[error("{operation}: backend unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
    },
    /// Any other backend error (bad request, missing table, access denied …).
    #[error("{operation}: {message}")]
    Backend {
        operation: &'static str,
        message: String,
    },
    /// A stored item that does not decode.
    #[error("corrupt item {key}: {reason}")]
    Corrupt { key: String, reason: String },
    /// A crawl that does not exist.
    #[error("no crawl {0}")]
    NoSuchCrawl(CrawlId),
    /// A pagination cursor this store did not issue.
    #[error("invalid cursor")]
    InvalidCursor,
}

impl StoreError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        self.is_retryable()
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What one conditional write of a record did (`apply` of the record ports): the record as it
/// stood before the write, or, when the condition refused it, the record as it stands (None
/// when there is none). The operations decide their outcome from it: no second read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied<T> {
    Done { before: T },
    Refused { current: Option<T> },
}

impl<T> Applied<T> {
    pub fn is_done(&self) -> bool {
        matches!(self, Applied::Done { .. })
    }
}

/// What seeding one URL did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seeded {
    Created,
    AlreadyKnown,
}

/// Why a claim was refused, read from the failed condition itself (no second read).
pub use trawl_domain::transition::ClaimRejection;

// One outcome per store call, moved once: boxing the lease would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The task as it now stands (`in_progress`, new token; or, for a lease taken in a turn
    /// without a write, as read), with its previous fetch record.
    Claimed {
        task: Box<Task>,
        lease: Lease,
    },
    Rejected(ClaimRejection),
}

// One outcome per store call, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishOutcome {
    /// Recorded. `replaced` is the fetch record it replaced; `stale` the md5s of objects that
    /// rejected writers left for this lease holder to delete (see `crawler::record`).
    Finished {
        replaced: Option<FetchRecord>,
        stale: Vec<String>,
    },
    /// The lease was taken over (token mismatch) or the task vanished; nothing was changed.
    Rejected { current: Option<Box<Task>> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailOutcome {
    /// Status `failed`, claimable again from `next_attempt_at`.
    Retrying { next_attempt_at: Millis },
    /// Status `ignored` or `gone`.
    GaveUp { status: Status },
    /// The lease was taken over; nothing was changed.
    Rejected,
}

impl From<Failed> for FailOutcome {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Retrying { next_attempt_at } => FailOutcome::Retrying { next_attempt_at },
            Failed::GaveUp { status } => FailOutcome::GaveUp { status },
        }
    }
}

/// One page of a status query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPage {
    pub tasks: Vec<TaskSummary>,
    /// Pass back to get the next page; None when there is no more.
    pub cursor: Option<String>,
}

/// What a status query returns: the attributes the status index projects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSummary {
    pub crawl_id: CrawlId,
    pub task_id: TaskId,
    pub url: String,
    pub status: Status,
    pub updated_at: Millis,
    pub depth: u32,
    pub retries: u32,
    pub lease_expires_at: Option<Millis>,
    pub next_attempt_at: Option<Millis>,
    pub next_fetch_at: Option<Millis>,
    pub enqueued_at: Option<Millis>,
}

impl From<&Task> for TaskSummary {
    fn from(t: &Task) -> Self {
        Self {
            crawl_id: t.crawl_id.clone(),
            task_id: t.task_id.clone(),
            url: t.url.clone(),
            status: t.status,
            updated_at: t.updated_at,
            depth: t.depth,
            retries: t.retries,
            lease_expires_at: t.lease_expires_at,
            next_attempt_at: t.next_attempt_at,
            next_fetch_at: t.fetch.as_ref().and_then(|f| f.next_fetch_at),
            enqueued_at: t.enqueued_at,
        }
    }
}

impl TaskSummary {
    /// From when the task can be claimed through its host's due index: at once when pending
    /// (whatever its place in the due order), at its next attempt when failed, when its page is
    /// due again when succeeded or gone, when its lease expires when in progress; never
    /// otherwise.
    pub fn claimable_from(&self) -> Option<Millis> {
        match self.status {
            Status::Pending => Some(Millis::MIN),
            _ => self.due_at(),
        }
    }

    /// The task as its host's next work, when its turn ends with it the soonest due: a page
    /// fetched before (succeeded or gone) is a revisit, left to the sweeper.
    pub fn next_work(&self) -> Option<NextWork> {
        let at = self.claimable_from()?;
        Some(match self.status {
            Status::Succeeded | Status::Gone => NextWork::Revisit(at),
            _ => NextWork::Task(at),
        })
    }

    /// The task's place in its host's due order (`Task::due_at`, from the projected attributes).
    pub fn due_at(&self) -> Option<Millis> {
        trawl_domain::task::due_at(
            self.status,
            self.updated_at,
            self.next_attempt_at,
            self.next_fetch_at,
            self.lease_expires_at,
        )
    }
}

/// A status query: tasks of one crawl in one status, oldest update first within each shard,
/// all shards in turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    pub crawl_id: CrawlId,
    pub status: Status,
    /// Only tasks last updated at or before this time (the sweeper's "due" bound).
    pub updated_before: Option<Millis>,
    pub limit: u32,
    pub cursor: Option<String>,
}

/// Tasks per status.
pub type StatusCounts = BTreeMap<Status, u64>;

/// Crawl records.
pub trait CrawlStore: Send + Sync {
    /// Creates the crawl unless it exists. Returns the stored crawl and whether it was created.
    fn create_crawl(
        &self,
        crawl: &Crawl,
    ) -> impl Future<Output = StoreResult<(Crawl, bool)>> + Send;

    fn get_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<Option<Crawl>>> + Send;

    /// Crawls in `state` (all crawls when None), through the index: never a table scan.
    fn list_crawls(
        &self,
        state: Option<CrawlState>,
    ) -> impl Future<Output = StoreResult<Vec<Crawl>>> + Send;

    /// `running` → `completed` for `generation`, written with `completer` (an id the caller
    /// drew for this completion alone); true only for the one caller that made the change, and
    /// again for its repeat (same `completer`): a completion applied while its answer was lost
    /// must still send its delivery notice when it is tried again.
    fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        completer: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Replaces the crawl's configuration (an operator's `trawl config set`, a seed request
    /// that asks to update it). False when there is no such crawl.
    fn update_config(
        &self,
        id: &CrawlId,
        config: &CrawlConfig,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Replaces the crawl's checkpoint (`Crawl::checkpoint`; None clears it). False when there
    /// is no such crawl.
    fn set_checkpoint(
        &self,
        id: &CrawlId,
        checkpoint: Option<&str>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Adds `n` to the crawl's `reference_misses` (one atomic add). False when there is no
    /// such crawl.
    fn add_reference_misses(
        &self,
        id: &CrawlId,
        n: u64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Takes the writing of the crawl's delivery for `holder` until `until`, unless another
    /// holder's lease is live at `now` (`DeliveryLease::refuses`); its own lease is renewed. One
    /// conditional write: of concurrent claimers exactly one wins. False, changing nothing, when
    /// refused or when there is no such crawl.
    fn claim_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
        until: Millis,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Ends `holder`'s delivery lease, if it still holds it (a call that paused or finished:
    /// the next one need not wait the lease out).
    fn release_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// `completed` → `running` with `generation + 1` (a recrawl round or a retry starts).
    /// True only for the one caller that made the change.
    fn reopen_crawl(
        &self,
        id: &CrawlId,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Takes up to `wanted` of the crawl's `max` task slots; returns how many were granted
    /// (possibly 0). Atomic: the sum granted never exceeds `max`, whatever the concurrency.
    fn reserve_pages(
        &self,
        id: &CrawlId,
        wanted: u64,
        max: u64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Gives back slots that were reserved but not used (the URL was already known). Stores
    /// shared by many workers hand slots out in chunks (`budget::PageBudget`): there the slots
    /// go back to the worker's chunk, and only the first reservation of a chunk writes.
    fn release_pages(&self, id: &CrawlId, n: u64) -> impl Future<Output = StoreResult<()>> + Send;

    /// Adds `share` to the crawl's call totals (`Crawl::calls`) in one atomic write, and returns
    /// the totals after it. The write's own call is part of the add: an adapter that counts its
    /// calls records that one with `CallCounts::record_reported`, so reporting costs nothing
    /// unaccounted. `NoSuchCrawl` when the crawl does not exist (the write never creates one).
    ///
    /// Cost: one write per report (`crate::calls::report`). The crawler reports once per batch
    /// and crawl: a Lambda batch holds up to 10 messages, so at least 0.1 write per URL, more
    /// when batches run short. Per crawl, not per URL: the seeder once per invocation, the
    /// sweeper once per crawl it sweeps (twice when it completes one), the deliverer twice per
    /// delivery. On DynamoDB the write is one UpdateItem of the crawl item (1-2 WRU: the item
    /// holds the config; nothing the status index projects changes).
    fn add_calls(
        &self,
        id: &CrawlId,
        share: &CallTally,
    ) -> impl Future<Output = StoreResult<CallTally>> + Send;

    fn delete_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<()>> + Send;
}

/// Tasks and their life cycle.
pub trait TaskStore: Send + Sync {
    /// Creates each task unless it exists; never modifies an existing one. Results in input order.
    fn seed(
        &self,
        crawl_id: &CrawlId,
        tasks: &[NewTask],
        now: Millis,
    ) -> impl Future<Output = StoreResult<Vec<Seeded>>> + Send;

    fn get(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
    ) -> impl Future<Output = StoreResult<Option<Task>>> + Send;

    /// One conditional write (`transition::claim`). Claimable: `pending`; `failed` with
    /// `next_attempt_at <= now`; `in_progress` with `lease_expires_at <= now`. Sets
    /// `in_progress`, a lease until `now + lease_ms`, and increments the token.
    fn claim(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> impl Future<Output = StoreResult<ClaimOutcome>> + Send;

    /// A claim by a host turn, which holds its host's fenced lease (`transition::claim_in_turn`).
    /// A store may take it without a write (`LeaseKind::InTurn`: the task's token as read; the
    /// fenced writes then require the task still claimable at that token, and move it); by
    /// default it is `claim`. Refused as `claim` would be.
    fn claim_in_turn(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> impl Future<Output = StoreResult<ClaimOutcome>> + Send {
        self.claim(crawl_id, task_id, lease_ms, now)
    }

    /// One conditional write fenced on the token (`transition::finish`): `succeeded` with
    /// `record`; retries and the lease cleared; the `stale` list handed back and cleared.
    fn finish(
        &self,
        lease: &Lease,
        record: &FetchRecord,
        now: Millis,
    ) -> impl Future<Output = StoreResult<FinishOutcome>> + Send;

    /// One conditional write fenced on the token (`transition::fail`): the error joins the
    /// bounded history, `retries` counts the failure if it is transient, and `policy` decides
    /// between `failed` until a next attempt and a give-up (`gone` for NotFound, else `ignored`);
    /// `revisit` what the page keeps (its previous content, its place in its schedule).
    fn fail(
        &self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        revisit: &Revisit,
        now: Millis,
    ) -> impl Future<Output = StoreResult<FailOutcome>> + Send;

    /// Gives a claimed, untouched task back (`pending`, lease cleared), fenced on the token; true,
    /// writing nothing, for a lease taken in a turn (the task is still due as it was read).
    fn release(&self, lease: &Lease, now: Millis)
    -> impl Future<Output = StoreResult<bool>> + Send;

    /// Records `md5` as an object a rejected writer left behind (`transition::add_stale`).
    /// False when nothing was added: the task is gone, points at that object, or lists it already.
    fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Moves a task from one of `from` to `pending` (recrawl, operator retry), clearing retries
    /// and the lease (`transition::reschedule`). True if it moved.
    fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Forgets `task`'s fetch record so that it is fetched again in full (`transition::reset`):
    /// pending, its object left for the next finisher to delete. False when the task changed
    /// since it was read (claimed meanwhile) or is in progress.
    fn reset(&self, task: &Task, now: Millis) -> impl Future<Output = StoreResult<bool>> + Send;

    /// A page its sitemap says changed (`lastmod`) after `task`'s last fetch: pending again
    /// (`transition::refresh`), if it was not claimed since `task` was read. True if it moved.
    fn refresh(
        &self,
        task: &Task,
        lastmod: Millis,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Tasks of one host with work left (pending, in progress, failed), the soonest due first
    /// (`Task::due_at`), at most `limit`: through the per-host due index, never a scan. A
    /// host's turn reads its work here.
    fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<TaskSummary>>> + Send;

    /// Tasks of one crawl in one status, through the status index, or, for a status a store
    /// does not list there (DynamoDB: pending and in progress), through the crawl's hosts' due
    /// lists, host after host.
    fn query(&self, query: &TaskQuery) -> impl Future<Output = StoreResult<TaskPage>> + Send;

    /// Tasks per status for a crawl (statuses with no task are absent or 0).
    fn counts(&self, crawl_id: &CrawlId) -> impl Future<Output = StoreResult<StatusCounts>> + Send;

    /// Deletes every task of the crawl; returns how many.
    fn delete_tasks(&self, crawl_id: &CrawlId) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// One page of a crawl's hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPage {
    pub hosts: Vec<Host>,
    /// Pass back to get the next page; None when there is no more.
    pub cursor: Option<String>,
}

/// Host records (`trawl_domain::host`): one per crawl and host. What a host transition does is
/// decided in the domain; the store only persists it, with optimistic concurrency: a write
/// succeeds only over the version the writer read, and the store bumps the version. Callers
/// re-read and re-decide when they lose (`crate::frontier::update_host`).
pub trait HostStore: Send + Sync {
    fn get_host(
        &self,
        crawl_id: &CrawlId,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<Host>>> + Send;

    /// Writes `host` if the stored record is at `host.version` (version 0: no record yet), and
    /// stores it at `host.version + 1`. False, changing nothing, when another write came first.
    fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Adds `n` to the host's `seeded` count in one atomic write (bumping its version, so that a
    /// read-decide-write over the old count fails and decides again) and returns the host as it
    /// now stands; None, writing nothing, when there is no such record. Seeders of one host never
    /// contend with each other this way.
    fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
    ) -> impl Future<Output = StoreResult<Option<Host>>> + Send;

    /// A crawl's hosts by name, a page at a time: reads host records only.
    fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<HostPage>> + Send;

    /// Deletes every host record of the crawl; returns how many.
    fn delete_hosts(&self, crawl_id: &CrawlId) -> impl Future<Output = StoreResult<u64>> + Send;
}
