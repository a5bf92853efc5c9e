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
//!
//! Crawl records ([`crawl`]): an adapter implements `CrawlRecords` (create, read, list, one
//! conditional write of an update decided in `trawl_domain::crawl::transition`, delete); the
//! crawl operations (`CrawlStore`: completion, the delivery lease, reopening, page slots, call
//! totals …) are written once on top of it, for every store and wrapper.
//!
//! What wraps a store (the write meter, faults, modelled latency) is a [`layer::Layer`] around
//! each call of the record ports: [`layer::Layered`] implements the ports once for every layer.

pub mod budget;
pub mod crawl;
pub mod layer;
pub mod memory;
mod task;

pub use self::task::{InTurnClaims, TaskRecords, TaskStore, claimed_as_read};

use crate::backoff::Transient;
use crate::cause::Cause;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use thiserror::Error;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::host::{Host, NextWork};
use trawl_domain::request::RequestId;

pub use trawl_domain::host::HostCounts;
use trawl_domain::task::{FetchRecord, Lease, Millis, Priority, Status, Task};
use trawl_domain::transition::Failed;

pub use self::crawl::{CrawlRecords, CrawlStore};

/// A store failure. Conditional-check failures are never errors: they are outcomes.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Throttled, timed out or unreachable: retrying later may succeed.
    #[error("{operation}: backend unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// Any other backend error (bad request, missing table, access denied …).
    #[error("{operation}: {message}")]
    Backend {
        operation: &'static str,
        message: String,
        #[source]
        source: Option<Cause>,
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
    /// A failure that may pass if retried later.
    pub fn unavailable(operation: &'static str, message: impl Into<String>) -> Self {
        StoreError::Unavailable {
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// A failure that will not pass by retrying.
    pub fn backend(operation: &'static str, message: impl Into<String>) -> Self {
        StoreError::Backend {
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// The same error, keeping `cause` as its source (a variant without one is returned as is:
    /// its message says all there is).
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        if let StoreError::Unavailable { source, .. } | StoreError::Backend { source, .. } =
            &mut self
        {
            *source = Some(cause.into());
        }
        self
    }

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
    Done {
        before: T,
    },
    Refused {
        current: Option<T>,
    },
    /// An update carrying a request (`trawl_domain::request`) is applied, by an earlier try of
    /// the request whose answer was lost, or by this write where the store cannot tell which
    /// (DynamoDB's idempotent transactions answer alike): nothing was changed twice. `current`
    /// is the record as it stands.
    Landed {
        current: T,
    },
}

impl<T> Applied<T> {
    /// Whether the update is applied (by this write or, for a request, an earlier try).
    pub fn is_done(&self) -> bool {
        matches!(self, Applied::Done { .. } | Applied::Landed { .. })
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

/// A page of a host's roster (`TaskRecords::roster`): entries in roster order, each with its
/// task as read (consistently: a turn's claim takes it as read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RosterPage {
    pub entries: Vec<(trawl_domain::roster::Place, Task)>,
    /// No entry follows the last one (as the index listed them).
    pub at_end: bool,
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
    /// What of its priority places it in its host's due list (`Priority::placing`): its
    /// priority while pending, 0 in any other status. What every store can tell from its
    /// index alone (DynamoDB's host index does not project the priority: `Priority::of_place`).
    pub priority: Priority,
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
            priority: Priority::placing(t.status, t.priority),
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

    /// Whether the page was fetched before (a recrawl): due again once succeeded or gone, or
    /// holding the time of its next fetch while a retry or a lease of it is under way.
    pub fn fetched_before(&self) -> bool {
        matches!(self.status, Status::Succeeded | Status::Gone) || self.next_fetch_at.is_some()
    }

    /// The task's place in its host's due list (`Task::due_key`).
    pub fn due_key(&self) -> Option<Millis> {
        trawl_domain::priority::due_key(self.status, self.due_at(), self.priority)
    }

    /// The task's due time (`Task::due_at`, from the projected attributes).
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
    /// Only the tasks of this part (`Part::WHOLE`: all of them).
    pub part: Part,
}

/// One of `of` disjoint parts of a crawl's tasks, so that `of` walkers (the deliverer's
/// writers) read each task once between them, each without reading the others' tasks. The
/// store chooses the split along its own keys: DynamoDB by status-index shard and host-list
/// key (part `index` holds the shards and keys `k` with `k % of == index`: with more parts than
/// keys, some parts are empty), SQLite and memory by `TaskId::shard(of)`. Every task is in
/// exactly one part of a given `of`, whatever its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Part {
    pub index: u32,
    pub of: u32,
}

impl Part {
    /// All the tasks.
    pub const WHOLE: Part = Part { index: 0, of: 1 };

    /// The `of` parts, in order (at least one).
    pub fn all(of: u32) -> impl Iterator<Item = Part> {
        let of = of.max(1);
        (0..of).map(move |index| Part { index, of })
    }

    /// Whether the key numbered `key` (a shard, a list key) falls in this part.
    pub fn holds(&self, key: u32) -> bool {
        key % self.of.max(1) == self.index
    }
}

/// Tasks per status.
pub type StatusCounts = BTreeMap<Status, u64>;

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
/// re-read and re-decide when they lose (`crate::frontier::update_host`). Offers
/// (`add_seeded`) are kept beside the record (`Host::offered`): they never move the version,
/// and a write never overwrites them.
pub trait HostStore: Send + Sync {
    fn get_host(
        &self,
        crawl_id: &CrawlId,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<Host>>> + Send;

    /// Writes `host` if the stored record is at `host.version` (version 0: no record yet) and,
    /// when `host.waits_for_offers()`, its offers are still `host.offered`; stores it at
    /// `host.version + 1` with the offers as they stand (its `seeded` is
    /// `host.seeded_by_writes()` plus those), adding `counted` (`HostCounts::change` from the
    /// record the writer read to `host`) to the crawl's host counts in the same atomic write.
    /// False, changing nothing, when another write (or, for a record written idle, an offer)
    /// came first.
    fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// The crawl's host counts, as `put_host` keeps them: a few reads whatever the number of
    /// hosts. None when the crawl has no counts (created before they were kept, or gone): the
    /// caller walks the hosts instead.
    fn host_counts(
        &self,
        crawl_id: &CrawlId,
    ) -> impl Future<Output = StoreResult<Option<HostCounts>>> + Send;

    /// Offers `n` URLs to the host: adds `n` to its `offered` count (and so to `seeded`) in one
    /// atomic write that leaves its version alone, so that neither seeders nor the host's own
    /// turn claims contend with offers; returns the host as it now stands; None, writing
    /// nothing, when there is no such record. Added once per `request` (`trawl_domain::request`):
    /// a try of a request applied before adds nothing and answers the host as it stands.
    fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> impl Future<Output = StoreResult<Option<Host>>> + Send;

    /// A crawl's hosts by name, a page at a time: reads host records only.
    fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<HostPage>> + Send;

    /// Where the sweeper's scan of the crawl's host records stopped (a `list_hosts` cursor),
    /// kept in the store so that the next sweep, in whatever process, goes on from there.
    fn host_scan(
        &self,
        crawl_id: &CrawlId,
    ) -> impl Future<Output = StoreResult<Option<String>>> + Send;

    /// Keeps (Some) or clears (None) the scan position. A crawl without host counts may not
    /// keep it: its sweeps then start from the first host.
    fn set_host_scan(
        &self,
        crawl_id: &CrawlId,
        at: Option<&str>,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Deletes every host record of the crawl, and its host counts; returns how many records.
    fn delete_hosts(&self, crawl_id: &CrawlId) -> impl Future<Output = StoreResult<u64>> + Send;
}
