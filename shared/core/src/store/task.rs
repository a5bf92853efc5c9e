//! Tasks: the record port an adapter implements ([`TaskRecords`]), and the task operations
//! written once on top of it ([`TaskStore`], implemented for every `TaskRecords`).
//!
//! An adapter stores task records: it inserts new ones, reads them, answers the due and
//! status queries, counts and deletes them, and persists one decided transition
//! (`trawl_domain::transition::Update`) in one conditional write, [`TaskRecords::apply`],
//! which hands back the record as it was before the write, or as it stands when the condition
//! refused it. Every operation (claim, finish, fail, …) builds its update in the domain, calls
//! `apply` once and reads its outcome from what `apply` returned: no second read, and nothing
//! of it is written again per adapter. What wraps a store (metering, faults, latency) is a layer
//! around these few methods (`super::layer`), and names a write by its update's `Event`.

use super::{
    Applied, ClaimOutcome, ClaimRejection, FailOutcome, FinishOutcome, RosterPage, Seeded,
    StatusCounts, StoreError, StoreResult, TaskPage, TaskQuery, TaskSummary,
};
use std::future::Future;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::roster::Place;
use trawl_domain::task::{FetchRecord, Lease, Millis, NewTask, Status, Task};
use trawl_domain::transition::{self, Event, Insert, Update};

/// A claim in a turn of `task` as read consistently (`InTurnClaims::AsRead`): no write, its
/// lease the task's token as read (`transition::claim_in_turn`).
pub fn claimed_as_read(task: Task, lease_ms: u64, now: Millis) -> ClaimOutcome {
    match transition::claim_in_turn(&task, lease_ms, now) {
        Ok(lease) => ClaimOutcome::Claimed {
            lease,
            task: Box::new(task),
        },
        Err(why) => ClaimOutcome::Rejected(why),
    }
}

/// Roster pages `TaskStore::host_tasks` reads at most, and their size.
const ROSTER_READS: usize = 100;
const ROSTER_PAGE: u32 = 100;

/// How a store takes a claim in a host turn (`TaskStore::claim_in_turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InTurnClaims {
    /// Written, as `claim` writes it (the in-memory store: a write costs no more than the
    /// read).
    Written,
    /// Taken on the task as read, writing nothing (`LeaseKind::InTurn`; the fenced write under
    /// the lease is the claim). DynamoDB: one read instead of a write. SQLite: a read in the
    /// writer's group, where a write would dirty the task's pages and its indexes' and add to
    /// the group's commit (measured: ~6% of a local crawl's CPU).
    AsRead,
}

/// Task records: what an adapter implements.
pub trait TaskRecords: Send + Sync {
    /// How this store takes a claim in a host turn.
    const IN_TURN_CLAIMS: InTurnClaims = InTurnClaims::Written;

    /// Creates each task unless one with its key exists (`Insert::requires`), never modifying
    /// an existing one: one conditional put per task. A task repeated in the batch is created
    /// once, at its first place. Results in input order.
    fn insert(&self, tasks: &[Insert]) -> impl Future<Output = StoreResult<Vec<Seeded>>> + Send;

    fn get(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
    ) -> impl Future<Output = StoreResult<Option<Task>>> + Send;

    /// Whether the crawl has a task for each of `ids`, in input order, in as few reads as the
    /// store can make (DynamoDB: BatchGetItem, 100 keys a call, half a read unit a key; SQLite:
    /// one `SELECT … IN`). Link discovery asks before it writes: a conditional put refused by
    /// a known task costs as much as one that lands. A hint: a task created right after the
    /// read is still refused by the put.
    fn known(
        &self,
        crawl_id: &CrawlId,
        ids: &[TaskId],
    ) -> impl Future<Output = StoreResult<Vec<bool>>> + Send;

    /// Persists `update` in one conditional write: `update.changes` made to the task only if
    /// it meets `update.requires`. The task before the write, or, refused, the task as it
    /// stands (None when there is none).
    fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> impl Future<Output = StoreResult<Applied<Task>>> + Send;

    /// Whether the store keeps rosters (`trawl_domain::roster`): a rostered task
    /// (`roster::rostered`) is listed in its host's roster from its creation on, and in its
    /// host's due list (`due_tasks`) only while it waits for a time of its own (a retry); a
    /// host's turns walk the roster in passes. A store that keeps none lists every task in the
    /// due lists.
    const ROSTERS: bool = false;

    /// Up to `limit` entries of `host`'s roster after `after` (from its start when None), in
    /// roster order (`roster::Place`), each with its task as read; an empty page at its end
    /// in a store that keeps no rosters (this default).
    fn roster(
        &self,
        _crawl_id: &CrawlId,
        _host: &str,
        _after: Option<&Place>,
        _limit: u32,
    ) -> impl Future<Output = StoreResult<RosterPage>> + Send {
        std::future::ready(Ok(RosterPage {
            entries: Vec::new(),
            at_end: true,
        }))
    }

    /// Tasks of one host with work left (pending, in progress, failed), in their host's due
    /// order (`Task::due_key`: the soonest due first, a pending task moved earlier by its
    /// priority), at most `limit`: through the per-host due index, never a scan. A host's turn
    /// reads its work here.
    fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<TaskSummary>>> + Send;

    /// `due_tasks` of one lane (`trawl_domain::lane`): the host's tasks with work left that were
    /// created in `lane`, in the host's due order, at most `limit`, through an index of their
    /// own (never a read of the other lanes' tasks). A task created without a lane is in none.
    fn due_in_lane(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        lane: &str,
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

/// The task operations, each one `apply` of a transition decided in `trawl_domain::transition`
/// (see `store` for the guarantees they give). Implemented for every [`TaskRecords`].
pub trait TaskStore: TaskRecords {
    /// A host's tasks with work left: its due list (`due_tasks`) and, in a store that keeps
    /// rosters, the rostered ones read from its roster's start (at most `ROSTER_READS` pages),
    /// at most `limit`, in due order. What reads a host's work outside its turns uses (an
    /// operator's view or move, a given-up host's end, the estimator's sample); a turn walks
    /// the roster from its pass's cursor instead.
    fn host_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<TaskSummary>>> + Send {
        async move {
            let mut tasks = self.due_tasks(crawl_id, host, limit).await?;
            if !Self::ROSTERS {
                return Ok(tasks);
            }
            let mut after: Option<Place> = None;
            for _ in 0..ROSTER_READS {
                let page = self
                    .roster(crawl_id, host, after.as_ref(), ROSTER_PAGE)
                    .await?;
                after = page.entries.last().map(|(place, _)| place.clone());
                let with_work = page.entries.iter().map(|(_, task)| TaskSummary::from(task));
                tasks.extend(with_work.filter(|task| task.due_at().is_some()));
                if page.at_end || after.is_none() || tasks.len() >= limit as usize {
                    break;
                }
            }
            tasks.sort_by(|a, b| (a.due_key(), &a.task_id).cmp(&(b.due_key(), &b.task_id)));
            tasks.truncate(limit as usize);
            Ok(tasks)
        }
    }

    /// Creates each task unless it exists; never modifies an existing one. Results in input order.
    fn seed(
        &self,
        crawl_id: &CrawlId,
        tasks: &[NewTask],
        now: Millis,
    ) -> impl Future<Output = StoreResult<Vec<Seeded>>> + Send {
        let inserts: Vec<Insert> = tasks
            .iter()
            .map(|new| transition::seed(crawl_id, new, now))
            .collect();
        async move { self.insert(&inserts).await }
    }

    /// One conditional write (`transition::claim`). Claimable: `pending`; `failed` with
    /// `next_attempt_at <= now`; `in_progress` with `lease_expires_at <= now`. Sets
    /// `in_progress`, a lease until `now + lease_ms`, and increments the token.
    fn claim(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> impl Future<Output = StoreResult<ClaimOutcome>> + Send {
        claim_with(
            self,
            crawl_id,
            task_id,
            transition::claim(lease_ms, now),
            now,
        )
    }

    /// A claim by a host turn, which holds its host's fenced lease (`transition::claim_in_turn`),
    /// taken as the store takes them (`TaskRecords::IN_TURN_CLAIMS`): written as `claim` is, or,
    /// as read, one read and no write (`LeaseKind::InTurn`: the task's token as read; the fenced
    /// writes then require the task still claimable at that token, and move it). Refused as
    /// `claim` would be.
    fn claim_in_turn(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> impl Future<Output = StoreResult<ClaimOutcome>> + Send {
        async move {
            if Self::IN_TURN_CLAIMS == InTurnClaims::Written {
                let update = Update {
                    event: Event::ClaimInTurn,
                    ..transition::claim(lease_ms, now)
                };
                return claim_with(self, crawl_id, task_id, update, now).await;
            }
            let Some(task) = self.get(crawl_id, task_id).await? else {
                return Ok(ClaimOutcome::Rejected(ClaimRejection::Missing));
            };
            Ok(claimed_as_read(task, lease_ms, now))
        }
    }

    /// One conditional write fenced on the token (`transition::finish`): `succeeded` with
    /// `record`; retries and the lease cleared; the `stale` list handed back and cleared.
    fn finish(
        &self,
        lease: &Lease,
        record: &FetchRecord,
        now: Millis,
    ) -> impl Future<Output = StoreResult<FinishOutcome>> + Send {
        let update = transition::finish(lease, record, now);
        async move {
            Ok(
                match self.apply(&lease.crawl_id, &lease.task_id, &update).await? {
                    Applied::Done { before } => FinishOutcome::Finished {
                        replaced: before.fetch,
                        stale: before.stale,
                    },
                    Applied::Refused { current } => FinishOutcome::Rejected {
                        current: current.map(Box::new),
                    },
                    // A repeat of a finish that landed: what it replaced went to the lost try.
                    Applied::Landed { .. } => FinishOutcome::Finished {
                        replaced: None,
                        stale: Vec::new(),
                    },
                },
            )
        }
    }

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
    ) -> impl Future<Output = StoreResult<FailOutcome>> + Send {
        let (update, failed) = transition::fail(lease, failure, policy, revisit, now);
        async move {
            let applied = self.apply(&lease.crawl_id, &lease.task_id, &update).await?;
            Ok(if applied.is_done() {
                failed.into()
            } else {
                FailOutcome::Rejected
            })
        }
    }

    /// Gives a claimed, untouched task back (`pending`, lease cleared), fenced on the token; true,
    /// writing nothing, for a lease taken in a turn (the task is still due as it was read).
    fn release(
        &self,
        lease: &Lease,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        apply_if(
            self,
            &lease.crawl_id,
            &lease.task_id,
            transition::release(lease, now),
            true,
        )
    }

    /// Gives a claimed task back for its host's trouble (`transition::hold_back`): pending, the
    /// answer recorded, no retry spent. False when the lease was lost meanwhile.
    fn hold_back(
        &self,
        lease: &Lease,
        failure: &Failure,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        apply_if(
            self,
            &lease.crawl_id,
            &lease.task_id,
            Some(transition::hold_back(lease, failure, now)),
            false,
        )
    }

    /// Records `md5` as an object a rejected writer left behind (`transition::add_stale`).
    /// False when nothing was added: the task is gone, points at that object, or lists it already.
    fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        apply_if(
            self,
            crawl_id,
            task_id,
            Some(transition::add_stale(md5)),
            false,
        )
    }

    /// Moves a task from one of `from` to `pending` (recrawl, operator retry), clearing retries
    /// and the lease (`transition::reschedule`). True if it moved.
    fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        let update = transition::reschedule(from, now);
        apply_if(self, crawl_id, task_id, Some(update), false)
    }

    /// Forgets `task`'s fetch record so that it is fetched again in full (`transition::reset`):
    /// pending, its object left for the next finisher to delete. False when the task changed
    /// since it was read (claimed meanwhile) or is in progress.
    fn reset(&self, task: &Task, now: Millis) -> impl Future<Output = StoreResult<bool>> + Send {
        let update = transition::reset(task, now);
        apply_if(self, &task.crawl_id, &task.task_id, Some(update), false)
    }

    /// A page its sitemap says changed (`lastmod`) after `task`'s last fetch: pending again
    /// (`transition::refresh`), if it was not claimed since `task` was read. True if it moved.
    fn refresh(
        &self,
        task: &Task,
        lastmod: Millis,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        let update = transition::refresh(task, lastmod, now);
        apply_if(self, &task.crawl_id, &task.task_id, update, false)
    }
}

impl<S: TaskRecords> TaskStore for S {}

/// A claim written by `update` (`transition::claim`, however named): the lease from the task
/// as the write left it, or why it was refused, from the task the condition refused.
async fn claim_with<S: TaskRecords + ?Sized>(
    store: &S,
    crawl_id: &CrawlId,
    task_id: &TaskId,
    update: Update,
    now: Millis,
) -> StoreResult<ClaimOutcome> {
    match store.apply(crawl_id, task_id, &update).await? {
        Applied::Done { before } => {
            let task = update.changes.apply(&before);
            Ok(ClaimOutcome::Claimed {
                lease: transition::lease_of(&task),
                task: Box::new(task),
            })
        }
        Applied::Landed { current: task } => Ok(ClaimOutcome::Claimed {
            lease: transition::lease_of(&task),
            task: Box::new(task),
        }),
        Applied::Refused { current } => match transition::claimable(current.as_ref(), now) {
            Err(why) => Ok(ClaimOutcome::Rejected(why)),
            Ok(()) => Err(StoreError::backend(
                update.event.name(),
                format!("claim of {task_id} refused although the task is claimable"),
            )),
        },
    }
}

/// Whether `update` landed; `nothing` when the domain decided there is nothing to write.
async fn apply_if<S: TaskRecords + ?Sized>(
    store: &S,
    crawl_id: &CrawlId,
    task_id: &TaskId,
    update: Option<Update>,
    nothing: bool,
) -> StoreResult<bool> {
    match update {
        Some(update) => Ok(store.apply(crawl_id, task_id, &update).await?.is_done()),
        None => Ok(nothing),
    }
}
