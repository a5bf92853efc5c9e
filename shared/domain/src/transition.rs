//! The task state machine: every transition as a pure function of (task, event, now).
//!
//! A transition is an [`Update`]: the [`Condition`] the stored task must meet and the
//! [`Changes`] that make its new state, every field accounted for (kept or set). Adapters only
//! persist it, in one conditional write: SQLite and the in-memory store read the task, check
//! `requires.holds` and write `update.apply`; DynamoDB turns the condition into a condition
//! expression and the changes into an update expression. The retry verdict, the bounded error
//! history and 404 → gone are therefore decided here, once.
//!
//! | event           | requires                                          | status after         |
//! |-----------------|---------------------------------------------------|----------------------|
//! | `seed`          | no such task                                      | pending              |
//! | `claim`         | pending; failed, succeeded or gone and due;       | in_progress          |
//! |                 | in_progress and expired                           |                      |
//! | `claim_in_turn` | as `claim`; nothing written (`LeaseKind::InTurn`) | unchanged            |
//! | `finish`        | the lease's (`fenced`): in_progress under its     | succeeded            |
//! |                 | token; in a turn, claimable at its token          |                      |
//! | `fail`          | the lease's (`fenced`)                            | failed, ignored,     |
//! |                 |                                                   | gone, succeeded      |
//! | `release`       | in_progress under the lease's token; nothing to   | pending              |
//! |                 | write for a lease taken in a turn                 |                      |
//! | `hold_back`     | the lease's (`fenced`); the error recorded        | pending              |
//! | `reschedule`    | status in `from` (recrawl due, operator retry)    | pending              |
//! | `reset`         | not in_progress, not claimed since it was read    | pending              |
//! | `refresh`       | as read: succeeded or gone, fetched before the    | pending              |
//! |                 | sitemap's lastmod, not claimed since              |                      |
//! | `retire`        | not in_progress, not claimed since it was read    | ignored              |
//! | `add_stale`     | exists; md5 neither its current object nor listed | unchanged            |
//! | `repoint`       | not in_progress, not claimed since it was read    | unchanged            |
//!
//! Lease expiry is a `claim` of an `in_progress` task whose lease has run out: the same write
//! as any claim, and since every claim moves the token by one, the old holder's `finish`,
//! `fail` and `release` no longer meet their condition.
//!
//! Counters:
//! - `retries` counts transient failures, the one that exhausts the budget included: a task
//!   given up after `max_retry` transient failures shows `retries == max_retry`. A permanent
//!   failure leaves it. Only `finish` (a success), `reschedule` (a new round starts with a full
//!   budget), `reset` and a `fail` that puts a page back in its schedule (kept, or gone with
//!   its content) set it back, to 0; nothing else lowers it.
//! - the token is the task's version: it only grows, by one per transition (`add_stale`
//!   excepted: it changes nothing a fenced write builds on). A lease taken in a turn (no claim
//!   written) holds the token as read, so its fenced write lands only if nothing else changed
//!   the task since (`Condition::Unclaimed`).
//! - a terminal task leaves its status only through `reschedule`, `refresh` or `reset`, or, succeeded or
//!   gone, through a `claim` once its page is due again (`crate::revisit`): a recrawl or a check
//!   is a due URL of its host, the page current meanwhile.
//! - a fetch record, once made, is replaced by the next success and never dropped but by
//!   `reset`: a 404 on a page that had content is a check that counts towards `missing_after`
//!   (the page `succeeded`, its content current until then, checked again
//!   `missing_recheck_ms` later), and a recrawl that fails past its retries keeps the page
//!   `succeeded`.

use crate::canonical::CrawlId;
use crate::retry::{Failure, FailureVerdict, Jitter, RetryPolicy};
use crate::revisit::{Missing, Revisit};
use crate::task::{
    ErrorKind, ErrorRecord, FetchRecord, Lease, LeaseKind, Millis, NewTask, Status, Task,
    push_error,
};

/// What a transition requires of the stored task. Data, so that each adapter can check it in its
/// own way (a condition expression, or a test on the row read in the same transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// No task with this key.
    Absent,
    /// Pending; failed with its next attempt due; or in_progress with its lease expired.
    Claimable { now: Millis },
    /// In progress under this fencing token.
    Leased { token: u64 },
    /// Claimable at `now` (as `Claimable`), still at this token: nobody wrote a fenced result
    /// since the task was read (a lease taken in a turn, `LeaseKind::InTurn`).
    Unclaimed { token: u64, now: Millis },
    /// Exists, with its status one of these (none: never holds).
    StatusIn(Vec<Status>),
    /// Not in progress, and its token still this one: nobody claimed it since it was read.
    Settled { token: u64 },
    /// Exists, and `md5` is neither the object of its current fetch nor on its stale list.
    Unrecorded { md5: String },
}

impl Condition {
    /// Whether `task` (None: no such task) meets the condition.
    pub fn holds(&self, task: Option<&Task>) -> bool {
        match (self, task) {
            (Condition::Absent, task) => task.is_none(),
            (_, None) => false,
            (Condition::Claimable { now }, Some(task)) => claimable(Some(task), *now).is_ok(),
            (Condition::Leased { token }, Some(task)) => {
                task.status == Status::InProgress && task.token == *token
            }
            (Condition::Unclaimed { token, now }, Some(task)) => {
                task.token == *token && claimable(Some(task), *now).is_ok()
            }
            (Condition::StatusIn(statuses), Some(task)) => statuses.contains(&task.status),
            (Condition::Settled { token }, Some(task)) => {
                task.status != Status::InProgress && task.token == *token
            }
            (Condition::Unrecorded { md5 }, Some(task)) => {
                task.fetch.as_ref().and_then(|f| f.md5.as_deref()) != Some(md5.as_str())
                    && !task.stale.contains(md5)
            }
        }
    }
}

/// What becomes of one field of the task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Change<T> {
    #[default]
    Keep,
    Set(T),
}

impl<T: Clone> Change<T> {
    pub(crate) fn apply(&self, field: &mut T) {
        if let Change::Set(value) = self {
            field.clone_from(value);
        }
    }
}

/// What becomes of the fencing token: every transition but `add_stale` moves it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TokenChange {
    #[default]
    Keep,
    Increment,
}

/// What becomes of the stale list (md5s of objects left for the next finisher to delete).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StaleChange {
    #[default]
    Keep,
    /// Appends the md5 unless it is listed already.
    Add(String),
    /// The finisher took the list over.
    Clear,
}

/// The new state of a task, field by field. Identity, URL, depth, parent and creation time
/// never change after the seed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub status: Change<Status>,
    pub retries: Change<u32>,
    pub errors: Change<Vec<ErrorRecord>>,
    pub next_attempt_at: Change<Option<Millis>>,
    pub lease_expires_at: Change<Option<Millis>>,
    pub token: TokenChange,
    pub fetch: Change<Option<FetchRecord>>,
    pub enqueued_at: Change<Option<Millis>>,
    pub updated_at: Change<Millis>,
    pub stale: StaleChange,
}

impl Changes {
    /// What becomes of the task's due time (`Task::due_at`), from the changes alone: an adapter
    /// that writes in place (DynamoDB's per-host due index) keeps it without reading the task.
    /// Every transition that sets a status also sets the field its due time comes from.
    pub fn due(&self) -> Change<Option<Millis>> {
        let Change::Set(status) = self.status else {
            return Change::Keep;
        };
        let field = |change: &Change<Option<Millis>>| match change {
            Change::Set(at) => *at,
            Change::Keep => None,
        };
        Change::Set(match status {
            Status::Pending => match self.updated_at {
                Change::Set(at) => Some(at),
                Change::Keep => None,
            },
            Status::Failed => field(&self.next_attempt_at),
            // Every transition to these sets the fetch record, whose next fetch is the due time.
            Status::Succeeded | Status::Gone => match &self.fetch {
                Change::Set(record) => record.as_ref().and_then(|r| r.next_fetch_at),
                Change::Keep => None,
            },
            Status::InProgress => field(&self.lease_expires_at),
            Status::Ignored => None,
        })
    }

    /// `task` with these changes made.
    pub fn apply(&self, task: &Task) -> Task {
        let mut next = task.clone();
        self.status.apply(&mut next.status);
        self.retries.apply(&mut next.retries);
        self.errors.apply(&mut next.errors);
        self.next_attempt_at.apply(&mut next.next_attempt_at);
        self.lease_expires_at.apply(&mut next.lease_expires_at);
        if self.token == TokenChange::Increment {
            next.token = next.token.saturating_add(1);
        }
        self.fetch.apply(&mut next.fetch);
        self.enqueued_at.apply(&mut next.enqueued_at);
        self.updated_at.apply(&mut next.updated_at);
        match &self.stale {
            StaleChange::Keep => {}
            StaleChange::Add(md5) => {
                if !next.stale.contains(md5) {
                    next.stale.push(md5.clone());
                }
            }
            StaleChange::Clear => next.stale.clear(),
        }
        next
    }
}

/// Which transition of the table an update is. Adapters write every update alike; what wraps
/// them names a write by it (write units per operation, a fault aimed at one operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    Claim,
    /// A claim in a host turn written as a claim, by a store that takes no lease as read.
    ClaimInTurn,
    Finish,
    Fail,
    Release,
    Reschedule,
    Reset,
    Refresh,
    Retire,
    AddStale,
    Repoint,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Claim => "claim",
            Event::ClaimInTurn => "claim_in_turn",
            Event::Finish => "finish",
            Event::Fail => "fail",
            Event::Release => "release",
            Event::Reschedule => "reschedule",
            Event::Reset => "reset",
            Event::Refresh => "refresh",
            Event::Retire => "retire",
            Event::AddStale => "add_stale",
            Event::Repoint => "repoint",
        }
    }
}

/// A transition of an existing task: which one, what it requires, and what it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub event: Event,
    pub requires: Condition,
    pub changes: Changes,
}

impl Update {
    /// The task after this update, or None when `task` does not meet its condition.
    pub fn apply(&self, task: &Task) -> Option<Task> {
        self.requires
            .holds(Some(task))
            .then(|| self.changes.apply(task))
    }
}

/// A new task: created only where none exists (`Condition::Absent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    pub requires: Condition,
    pub task: Task,
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRejection {
    Missing,
    /// `ignored`; or `succeeded` or `gone` and not due again yet.
    Done(Status),
    /// Another worker holds a live lease.
    Leased {
        until: Millis,
    },
    /// Failed, and its next attempt is not due yet.
    NotDue {
        at: Millis,
    },
}

/// What a failure did to its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// `failed`, claimable again from `next_attempt_at`.
    Retrying { next_attempt_at: Millis },
    /// `ignored`, or `gone` for a page that does not exist; or `succeeded` again when a
    /// recrawl failed for good or found the page missing, unconfirmed (the previous content
    /// stays current).
    GaveUp { status: Status },
}

/// A new pending task for `new`.
pub fn seed(crawl_id: &CrawlId, new: &NewTask, now: Millis) -> Insert {
    Insert {
        requires: Condition::Absent,
        task: Task {
            crawl_id: crawl_id.clone(),
            task_id: new.task_id(),
            url: new.url.as_str().to_owned(),
            status: Status::Pending,
            created_at: now,
            updated_at: now,
            depth: new.depth,
            parent: new.parent.clone(),
            data: new.data.clone(),
            priority: new.priority,
            lane: new.lane.clone(),
            token: 0,
            lease_expires_at: None,
            retries: 0,
            next_attempt_at: None,
            enqueued_at: None,
            errors: Vec::new(),
            fetch: None,
            stale: Vec::new(),
        },
    }
}

/// Whether `task` may be claimed at `now`, and if not, why. A task in progress without a lease
/// or failed without a next attempt (which no transition produces) is claimable rather than
/// stranded.
pub fn claimable(task: Option<&Task>, now: Millis) -> Result<(), ClaimRejection> {
    let Some(task) = task else {
        return Err(ClaimRejection::Missing);
    };
    match task.status {
        Status::Pending => Ok(()),
        Status::InProgress => match task.lease_expires_at {
            Some(until) if until > now => Err(ClaimRejection::Leased { until }),
            _ => Ok(()),
        },
        Status::Failed => match task.next_attempt_at {
            Some(at) if at > now => Err(ClaimRejection::NotDue { at }),
            _ => Ok(()),
        },
        Status::Succeeded | Status::Gone if task.due_at().is_some_and(|at| at <= now) => Ok(()),
        done @ (Status::Succeeded | Status::Ignored | Status::Gone) => {
            Err(ClaimRejection::Done(done))
        }
    }
}

/// `in_progress` with a lease until `now + lease_ms` and the next token; a failed task's due
/// attempt is now this one. Also the lease expiry edge: an `in_progress` task whose lease ran
/// out is claimable.
pub fn claim(lease_ms: u64, now: Millis) -> Update {
    let until = now.saturating_add(Millis::try_from(lease_ms).unwrap_or(Millis::MAX));
    Update {
        event: Event::Claim,
        requires: Condition::Claimable { now },
        changes: Changes {
            status: Change::Set(Status::InProgress),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(Some(until)),
            token: TokenChange::Increment,
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    }
}

/// A claim decided on the task as read (by an adapter that reads and writes in one
/// transaction): the claimed task, or why it cannot be claimed.
pub fn claimed(task: Option<&Task>, lease_ms: u64, now: Millis) -> Result<Task, ClaimRejection> {
    let Some(task) = task else {
        return Err(ClaimRejection::Missing);
    };
    claimable(Some(task), now)?;
    Ok(claim(lease_ms, now).changes.apply(task))
}

/// The lease a claim grants, from the task as the claim left it. It carries what the fenced
/// writes build on (retries, errors): the token guarantees nobody changed them since.
pub fn lease_of(claimed: &Task) -> Lease {
    Lease {
        crawl_id: claimed.crawl_id.clone(),
        task_id: claimed.task_id.clone(),
        token: claimed.token,
        expires_at: claimed.lease_expires_at.unwrap_or(claimed.updated_at),
        retries: claimed.retries,
        errors: claimed.errors.clone(),
        fetch: claimed.fetch.clone(),
        kind: LeaseKind::Written,
    }
}

/// A claim inside a host turn, decided on the task as read (`LeaseKind::InTurn`): nothing is
/// written; the lease holds the task's token as read, until `now + lease_ms` (the turn ends
/// first). Refused as `claim` would be.
pub fn claim_in_turn(task: &Task, lease_ms: u64, now: Millis) -> Result<Lease, ClaimRejection> {
    claimable(Some(task), now)?;
    Ok(Lease {
        crawl_id: task.crawl_id.clone(),
        task_id: task.task_id.clone(),
        token: task.token,
        expires_at: now.saturating_add(Millis::try_from(lease_ms).unwrap_or(Millis::MAX)),
        retries: task.retries,
        errors: task.errors.clone(),
        fetch: task.fetch.clone(),
        kind: LeaseKind::InTurn,
    })
}

/// What a fenced write under `lease` at `now` requires: a written claim's lease, the task still
/// in progress under its token; a lease taken in a turn, the task still claimable at its token
/// (nothing changed it since it was read). The write moves the token, as every transition does,
/// so that a second write under the same read is refused.
pub fn fenced(lease: &Lease, now: Millis) -> Condition {
    match lease.kind {
        LeaseKind::Written => Condition::Leased { token: lease.token },
        LeaseKind::InTurn => Condition::Unclaimed {
            token: lease.token,
            now,
        },
    }
}

/// `succeeded` with `record`; the retry budget restored, the lease and the stale list (handed
/// to the finisher) cleared. The error history stays, as a record of what happened before.
pub fn finish(lease: &Lease, record: &FetchRecord, now: Millis) -> Update {
    Update {
        event: Event::Finish,
        requires: fenced(lease, now),
        changes: Changes {
            status: Change::Set(Status::Succeeded),
            retries: Change::Set(0),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            fetch: Change::Set(Some(record.clone())),
            updated_at: Change::Set(now),
            stale: StaleChange::Clear,
            ..Changes::default()
        },
    }
}

/// Whether `current` is the task as `finish(lease, record, _)` left it: the finish was applied
/// although its answer was lost, and the retried write then failed its own condition. The token
/// proves that nothing else came between.
pub fn finished_by(current: &Task, lease: &Lease, record: &FetchRecord) -> bool {
    current.token == lease.token.saturating_add(1)
        && current.status == Status::Succeeded
        && current.fetch.as_ref() == Some(record)
}

/// A failed attempt: the error joins the bounded history; `policy` decides between a retry at
/// a backoff placed by the attempt's [`Jitter`] and a give-up (`gone` for a page that does not
/// exist, else `ignored`). What the page had is kept (`revisit`): a page with content answering
/// 404/410 stays `succeeded`, its content current, and is checked again later until
/// `missing_after` checks in a row make it gone (`Revisit::missing`), and a recrawl given up is
/// `succeeded` again with its previous content.
pub fn fail(
    lease: &Lease,
    failure: &Failure,
    policy: &RetryPolicy,
    revisit: &Revisit,
    now: Millis,
) -> (Update, Failed) {
    let mut errors = lease.errors.clone();
    push_error(
        &mut errors,
        ErrorRecord::new(failure.kind, &failure.message, now),
    );
    let retries = if failure.kind.is_transient() {
        lease.retries.saturating_add(1)
    } else {
        lease.retries
    };
    let previous = lease.fetch.as_ref();
    let jitter = Jitter::of(&lease.task_id, lease.token);
    let retry = |at: Millis| {
        (
            Status::Failed,
            Some(at),
            Failed::Retrying {
                next_attempt_at: at,
            },
        )
    };
    let (status, next_attempt_at, failed, fetch) = if failure.kind == ErrorKind::NotFound {
        let (status, page) = match revisit.missing(previous, now) {
            Missing::Unconfirmed(page) => (Status::Succeeded, Some(page)),
            Missing::Gone(page) => (Status::Gone, page),
        };
        (status, None, Failed::GaveUp { status }, page)
    } else {
        match policy.verdict(failure, lease.retries, jitter, now) {
            FailureVerdict::Retry { next_attempt_at } => {
                let (status, at, failed) = retry(next_attempt_at);
                (status, at, failed, previous.cloned())
            }
            FailureVerdict::GiveUp => match previous {
                Some(page) => {
                    let page = revisit.kept(page, now);
                    let status = if revisit.confirmed(&page) {
                        Status::Gone
                    } else {
                        Status::Succeeded
                    };
                    (status, None, Failed::GaveUp { status }, Some(page))
                }
                None => {
                    let failed = Failed::GaveUp {
                        status: Status::Ignored,
                    };
                    (Status::Ignored, None, failed, None)
                }
            },
        }
    };
    // A page back in its schedule (kept, or gone and to be re-checked) starts its next fetch
    // with a full budget, as after a success.
    let retries = if fetch.is_some() && matches!(status, Status::Succeeded | Status::Gone) {
        0
    } else {
        retries
    };
    let update = Update {
        event: Event::Fail,
        requires: fenced(lease, now),
        changes: Changes {
            status: Change::Set(status),
            retries: Change::Set(retries),
            errors: Change::Set(errors),
            next_attempt_at: Change::Set(next_attempt_at),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            fetch: Change::Set(fetch),
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    };
    (update, failed)
}

/// Gives a claimed, untouched task back: `pending`, lease cleared. Not a failure: `retries`
/// and the error history stay. None for a lease taken in a turn: the task is still due as it
/// was read, and nothing is to be written.
pub fn release(lease: &Lease, now: Millis) -> Option<Update> {
    (lease.kind == LeaseKind::Written).then(|| Update {
        event: Event::Release,
        requires: Condition::Leased { token: lease.token },
        changes: Changes {
            status: Change::Set(Status::Pending),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    })
}

/// Gives a claimed task back for its host's trouble (a 429, a 503, a refused connection):
/// `pending` at the back of its host's due list, the answer in its error history, no retry
/// spent. Written for a lease taken in a turn too, unlike `release`: the history says why the
/// URL is still pending, and it is what singles out a URL throttled while its host serves others
/// (`host::singled_out`).
pub fn hold_back(lease: &Lease, failure: &Failure, now: Millis) -> Update {
    let mut errors = lease.errors.clone();
    push_error(
        &mut errors,
        ErrorRecord::new(failure.kind, &failure.message, now),
    );
    Update {
        event: Event::Release,
        requires: fenced(lease, now),
        changes: Changes {
            status: Change::Set(Status::Pending),
            errors: Change::Set(errors),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    }
}

/// From one of `from` to `pending` (a recrawl that is due, an operator's retry) with a full
/// retry budget. The fetch record stays, for conditional GETs.
pub fn reschedule(from: &[Status], now: Millis) -> Update {
    Update {
        event: Event::Reschedule,
        requires: Condition::StatusIn(from.to_vec()),
        changes: Changes {
            status: Change::Set(Status::Pending),
            retries: Change::Set(0),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    }
}

/// A page its sitemap says changed (`lastmod`) after the task's last fetch is due now, as a
/// recrawl is (`reschedule`'s changes: pending, a full retry budget, the fetch record kept for a
/// conditional GET). None when nothing is to be done: never fetched (its first fetch is still to
/// come), fetched since `lastmod`, or not done (in progress, pending, failed: a fetch is on its
/// way), or a page whose `<lastmod>` was found lying (`ChangeHistory::trusts_lastmod`, kept for
/// the pages the change-rate estimator schedules). Conditioned on the token, so that the fetch
/// compared is the one read.
pub fn refresh(task: &Task, lastmod: Millis, now: Millis) -> Option<Update> {
    let done = matches!(task.status, Status::Succeeded | Status::Gone);
    let fetched_before = task.fetch.as_ref().is_some_and(|f| f.fetched_at < lastmod);
    let believed = task
        .fetch
        .as_ref()
        .and_then(|f| f.pace)
        .and_then(|p| p.history)
        .is_none_or(|h| h.trusts_lastmod());
    if !(done && fetched_before && believed) {
        return None;
    }
    let Update { changes, .. } = reschedule(&[task.status], now);
    Some(Update {
        event: Event::Refresh,
        requires: Condition::Settled { token: task.token },
        changes,
    })
}

/// Forgets `task`'s fetch record so that it is fetched again in full (no conditional GET, no
/// "unchanged"): `pending` with a full retry budget. The forgotten record's object joins the
/// stale list, so that the next finisher deletes it (no orphan); conditioned on the token, so
/// that the record forgotten is the one read.
pub fn reset(task: &Task, now: Millis) -> Update {
    let forgotten = task
        .fetch
        .as_ref()
        .filter(|f| f.object_key.is_some())
        .and_then(|f| f.md5.clone());
    Update {
        event: Event::Reset,
        requires: Condition::Settled { token: task.token },
        changes: Changes {
            status: Change::Set(Status::Pending),
            retries: Change::Set(0),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            fetch: Change::Set(None),
            updated_at: Change::Set(now),
            stale: forgotten.map_or(StaleChange::Keep, StaleChange::Add),
            ..Changes::default()
        },
    }
}

/// Gives `task` up for `reason` with its stored bytes (an image no delivered item names any
/// more, `crate::image`): `ignored`, never fetched again unless an operator retries it, its
/// fetch record forgotten so that its objects are no task's (the deliverer deletes them, else
/// the next delivery's orphan pass does). Conditioned on the token, so that the record
/// forgotten is the one read.
pub fn retire(task: &Task, reason: &str, now: Millis) -> Update {
    let mut errors = task.errors.clone();
    push_error(
        &mut errors,
        ErrorRecord::new(ErrorKind::Removed, reason, now),
    );
    Update {
        event: Event::Retire,
        requires: Condition::Settled { token: task.token },
        changes: Changes {
            status: Change::Set(Status::Ignored),
            errors: Change::Set(errors),
            next_attempt_at: Change::Set(None),
            lease_expires_at: Change::Set(None),
            token: TokenChange::Increment,
            fetch: Change::Set(None),
            updated_at: Change::Set(now),
            ..Changes::default()
        },
    }
}

/// Records `md5` as an object a rejected writer left behind. Not a status change: `updated_at`
/// stays, so the task keeps its place in the status index.
pub fn add_stale(md5: &str) -> Update {
    Update {
        event: Event::AddStale,
        requires: Condition::Unrecorded {
            md5: md5.to_owned(),
        },
        changes: Changes {
            stale: StaleChange::Add(md5.to_owned()),
            ..Changes::default()
        },
    }
}

/// Moves `task`'s stored page to `key` at `offset` (compaction copied its bytes there, the
/// same length): the fetch record as read, with a new place. None when it has no page in a
/// segment. Conditioned on the token and on no lease being out (`Settled`), so that the place
/// replaced is the one read; and the token moves, so that a worker that took a lease in a turn
/// (no write) is fenced out: its finish of an unchanged page would keep the old place, which
/// compaction is about to delete. `updated_at` stays: the task keeps its place in its index.
pub fn repoint(task: &Task, key: &str, offset: u64) -> Option<Update> {
    let fetch = task.fetch.as_ref()?;
    let span = fetch.span?;
    fetch.object_key.as_ref()?;
    let moved = FetchRecord {
        object_key: Some(key.to_owned()),
        span: Some(crate::task::Span { offset, ..span }),
        ..fetch.clone()
    };
    Some(Update {
        event: Event::Repoint,
        requires: Condition::Settled { token: task.token },
        changes: Changes {
            token: TokenChange::Increment,
            fetch: Change::Set(Some(moved)),
            ..Changes::default()
        },
    })
}

#[cfg(test)]
mod tests;
