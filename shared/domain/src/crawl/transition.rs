//! The crawl record's rules: every write to a stored crawl as a pure function returning data.
//!
//! A write is a [`CrawlUpdate`]: the [`CrawlCondition`] the stored crawl must meet and the
//! [`CrawlChanges`] it makes, counters as atomic adds (so that DynamoDB needs no read). Adapters
//! only persist it, in one conditional write: SQLite and the in-memory store read the crawl,
//! check `requires.holds` and write `changes.apply`; DynamoDB turns the condition into a
//! condition expression and the changes into an update expression. Completion, the delivery
//! lease and reopening are therefore decided here, once. Every write requires the crawl to
//! exist: none creates one (a crawl is created whole, unless it exists).
//!
//! | event                  | requires                                         | changes                     |
//! |------------------------|--------------------------------------------------|-----------------------------|
//! | `complete`             | generation `g`, and running, or completed by the | completed, `completed_by`,  |
//! |                        | same completer (its repeat: its answer was lost) | updated                     |
//! | `reopen`               | completed                                        | running, generation + 1,    |
//! |                        |                                                  | its start, updated          |
//! | `claim_delivery`       | no live lease of another holder                  | the holder's lease          |
//! |                        | (`DeliveryLease::refuses`)                       |                             |
//! | `release_delivery`     | the lease is the holder's                        | no lease                    |
//! | `update_config`        | exists                                           | config, updated             |
//! | `set_checkpoint`       | exists                                           | checkpoint                  |
//! | `add_reference_misses` | exists                                           | reference misses + n        |
//! | `set_level`            | exists                                           | the estimator's water level |
//! | `reserve_pages`        | `pages_reserved + n <= max`                      | pages reserved + n          |
//! | `release_pages`        | exists                                           | pages reserved - n          |
//! | `add_calls`            | exists                                           | call totals + share         |
//!
//! `reserve_pages` and `add_calls` add to counters and may be tried again after their answer was
//! lost: each carries its caller's [`RequestId`] (`CrawlUpdate::request`), and a store applies a
//! request at most once (`crate::request`). A store may write `add_calls` apart from the crawl
//! record (`CrawlRecords::report_calls`; DynamoDB: the crawl's report lanes, `crate::report`),
//! its calls then read back with the crawl.
//!
//! Invariants (`transition/tests.rs` checks them over random sequences):
//! - the state moves running → completed only by `complete` and back only by `reopen`, and a
//!   generation completes at most once: of its completers exactly one sees its change (again on
//!   its own repeat), so exactly one sends the delivery notice;
//! - the generation only grows, by one per `reopen`;
//! - at most one delivery lease is live at a time;
//! - call totals and reference misses only grow; `pages_reserved` never passes a `max` its
//!   reservations were asked under (slots given back were reserved before).

use super::{Crawl, CrawlConfig, CrawlState, DeliveryLease};
use crate::calls::CallTally;
use crate::estimate::Level;
use crate::request::RequestId;
use crate::task::{Millis, Status};
use crate::transition::Change;
use std::collections::BTreeMap;

/// What a crawl write requires of the stored crawl (which must exist, whatever the condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrawlCondition {
    Exists,
    /// At `generation`, and running, or completed by `completer` (its repeat).
    Completable {
        generation: u64,
        completer: String,
    },
    Completed,
    /// No lease of another holder live at `now` (`DeliveryLease::refuses`).
    DeliveryFree {
        holder: String,
        now: Millis,
    },
    /// The delivery lease is `holder`'s.
    DeliveryHeldBy {
        holder: String,
    },
    /// The delivery lease is `holder`'s, of the crawl completed at `generation` (no task
    /// write can land meanwhile).
    DeliveringCompleted {
        holder: String,
        generation: u64,
    },
    /// Room for `n` more page slots under `max`.
    PagesLeft {
        n: u64,
        max: u64,
    },
}

impl CrawlCondition {
    /// Whether `crawl` meets the condition.
    pub fn holds(&self, crawl: &Crawl) -> bool {
        match self {
            CrawlCondition::Exists => true,
            CrawlCondition::Completable {
                generation,
                completer,
            } => {
                crawl.generation == *generation
                    && match crawl.state {
                        CrawlState::Running => true,
                        CrawlState::Completed => {
                            crawl.completed_by.as_deref() == Some(completer.as_str())
                        }
                    }
            }
            CrawlCondition::Completed => crawl.state == CrawlState::Completed,
            CrawlCondition::DeliveryFree { holder, now } => crawl
                .delivery
                .as_ref()
                .is_none_or(|lease| !lease.refuses(holder, *now)),
            CrawlCondition::DeliveryHeldBy { holder } => crawl
                .delivery
                .as_ref()
                .is_some_and(|lease| lease.holder == *holder),
            CrawlCondition::DeliveringCompleted { holder, generation } => {
                crawl.state == CrawlState::Completed
                    && crawl.generation == *generation
                    && CrawlCondition::DeliveryHeldBy {
                        holder: holder.clone(),
                    }
                    .holds(crawl)
            }
            CrawlCondition::PagesLeft { n, max } => crawl
                .pages_reserved
                .checked_add(*n)
                .is_some_and(|after| after <= *max),
        }
    }
}

/// What becomes of `pages_reserved`: an atomic add or subtract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PagesChange {
    #[default]
    Keep,
    Take(u64),
    /// Slots reserved but not used. Never below zero.
    GiveBack(u64),
}

/// The new state of a crawl, field by field; counters as adds (0 or empty: unchanged). Its id
/// and creation time never change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrawlChanges {
    pub state: Change<CrawlState>,
    /// Added to the generation.
    pub generation: u64,
    pub completed_by: Change<Option<String>>,
    pub delivery: Change<Option<DeliveryLease>>,
    pub config: Change<CrawlConfig>,
    pub checkpoint: Change<Option<String>>,
    pub level: Change<Option<Level>>,
    pub generation_started_at: Change<Option<Millis>>,
    pub updated_at: Change<Millis>,
    pub pages_reserved: PagesChange,
    /// Added to the reference misses.
    pub reference_misses: u64,
    /// Added to the call totals.
    pub calls: CallTally,
    /// The task counts per status, set where a store keeps them on the crawl record (the
    /// DynamoDB adapter: `tasks_counted`); no field of [`Crawl`].
    pub task_counts: Option<BTreeMap<Status, u64>>,
}

impl CrawlChanges {
    /// `crawl` with these changes made.
    pub fn apply(&self, crawl: &Crawl) -> Crawl {
        let mut next = crawl.clone();
        self.state.apply(&mut next.state);
        next.generation = next.generation.saturating_add(self.generation);
        self.completed_by.apply(&mut next.completed_by);
        self.delivery.apply(&mut next.delivery);
        self.config.apply(&mut next.config);
        self.checkpoint.apply(&mut next.checkpoint);
        self.level.apply(&mut next.level);
        self.generation_started_at
            .apply(&mut next.generation_started_at);
        self.updated_at.apply(&mut next.updated_at);
        next.pages_reserved = match self.pages_reserved {
            PagesChange::Keep => next.pages_reserved,
            PagesChange::Take(n) => next.pages_reserved.saturating_add(n),
            PagesChange::GiveBack(n) => next.pages_reserved.saturating_sub(n),
        };
        next.reference_misses = next.reference_misses.saturating_add(self.reference_misses);
        for (&call, &n) in &self.calls {
            let total = next.calls.entry(call).or_default();
            *total = total.saturating_add(n);
        }
        next
    }
}

/// Which rule a write carries out (its name is the store operation's, for metering and faults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrawlEvent {
    Complete,
    Reopen,
    ClaimDelivery,
    ReleaseDelivery,
    UpdateConfig,
    SetCheckpoint,
    SetLevel,
    AddReferenceMisses,
    ReservePages,
    ReleasePages,
    AddCalls,
    SetTaskCounts,
}

impl CrawlEvent {
    pub fn name(self) -> &'static str {
        match self {
            CrawlEvent::Complete => "complete_crawl",
            CrawlEvent::Reopen => "reopen_crawl",
            CrawlEvent::ClaimDelivery => "claim_delivery",
            CrawlEvent::ReleaseDelivery => "release_delivery",
            CrawlEvent::UpdateConfig => "update_config",
            CrawlEvent::SetCheckpoint => "set_checkpoint",
            CrawlEvent::SetLevel => "set_level",
            CrawlEvent::AddReferenceMisses => "add_reference_misses",
            CrawlEvent::ReservePages => "reserve_pages",
            CrawlEvent::ReleasePages => "release_pages",
            CrawlEvent::AddCalls => "add_calls",
            CrawlEvent::SetTaskCounts => "set_task_counts",
        }
    }
}

/// A write of an existing crawl: which rule, what it requires, and what it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrawlUpdate {
    pub event: CrawlEvent,
    pub requires: CrawlCondition,
    pub changes: CrawlChanges,
    /// An add's request (`crate::request`): applied at most once, however often it is tried.
    pub request: Option<RequestId>,
}

impl CrawlUpdate {
    /// The crawl after this update, or None when `crawl` does not meet its condition.
    pub fn apply(&self, crawl: &Crawl) -> Option<Crawl> {
        self.requires
            .holds(crawl)
            .then(|| self.changes.apply(crawl))
    }
}

fn update(event: CrawlEvent, requires: CrawlCondition, changes: CrawlChanges) -> CrawlUpdate {
    CrawlUpdate {
        event,
        requires,
        changes,
        request: None,
    }
}

/// Running → completed for `generation`, by `completer` (an id drawn for this completion alone):
/// its own repeat meets the condition again, so that a completion applied while its answer was
/// lost still sends its delivery notice when it is tried again; any other completer is refused.
pub fn complete(generation: u64, completer: &str, now: Millis) -> CrawlUpdate {
    update(
        CrawlEvent::Complete,
        CrawlCondition::Completable {
            generation,
            completer: completer.to_owned(),
        },
        CrawlChanges {
            state: Change::Set(CrawlState::Completed),
            completed_by: Change::Set(Some(completer.to_owned())),
            updated_at: Change::Set(now),
            ..CrawlChanges::default()
        },
    )
}

/// Completed → running, the next generation (a recrawl round or a retry starts), begun `now`.
pub fn reopen(now: Millis) -> CrawlUpdate {
    update(
        CrawlEvent::Reopen,
        CrawlCondition::Completed,
        CrawlChanges {
            state: Change::Set(CrawlState::Running),
            generation: 1,
            generation_started_at: Change::Set(Some(now)),
            updated_at: Change::Set(now),
            ..CrawlChanges::default()
        },
    )
}

/// The writing of the crawl's delivery for `holder` until `until`, unless another holder's lease
/// is live at `now`; its own lease is renewed.
pub fn claim_delivery(holder: &str, until: Millis, now: Millis) -> CrawlUpdate {
    update(
        CrawlEvent::ClaimDelivery,
        CrawlCondition::DeliveryFree {
            holder: holder.to_owned(),
            now,
        },
        CrawlChanges {
            delivery: Change::Set(Some(DeliveryLease {
                holder: holder.to_owned(),
                until,
            })),
            ..CrawlChanges::default()
        },
    )
}

/// Ends `holder`'s delivery lease, if it still holds it (taken over after it expired: not).
pub fn release_delivery(holder: &str) -> CrawlUpdate {
    update(
        CrawlEvent::ReleaseDelivery,
        CrawlCondition::DeliveryHeldBy {
            holder: holder.to_owned(),
        },
        CrawlChanges {
            delivery: Change::Set(None),
            ..CrawlChanges::default()
        },
    )
}

/// Sets the task counts to `counts`, read task by task by `holder`'s delivery of the crawl
/// completed at `generation`: the counts a store keeps apart from the tasks heal from any drift
/// (a process that died before reporting its task writes).
pub fn set_task_counts(
    holder: &str,
    generation: u64,
    counts: BTreeMap<Status, u64>,
) -> CrawlUpdate {
    update(
        CrawlEvent::SetTaskCounts,
        CrawlCondition::DeliveringCompleted {
            holder: holder.to_owned(),
            generation,
        },
        CrawlChanges {
            task_counts: Some(counts),
            ..CrawlChanges::default()
        },
    )
}

/// Replaces the configuration.
pub fn update_config(config: &CrawlConfig, now: Millis) -> CrawlUpdate {
    update(
        CrawlEvent::UpdateConfig,
        CrawlCondition::Exists,
        CrawlChanges {
            config: Change::Set(config.clone()),
            updated_at: Change::Set(now),
            ..CrawlChanges::default()
        },
    )
}

/// Replaces the checkpoint (None clears it). Not a change of the crawl's life: `updated_at` stays.
pub fn set_checkpoint(checkpoint: Option<&str>) -> CrawlUpdate {
    update(
        CrawlEvent::SetCheckpoint,
        CrawlCondition::Exists,
        CrawlChanges {
            checkpoint: Change::Set(checkpoint.map(str::to_owned)),
            ..CrawlChanges::default()
        },
    )
}

/// Replaces the estimator's water level (`crate::estimate`): the last sweeper to compute it
/// wins, and any of their figures serves until the next.
pub fn set_level(level: Level) -> CrawlUpdate {
    update(
        CrawlEvent::SetLevel,
        CrawlCondition::Exists,
        CrawlChanges {
            level: Change::Set(Some(level)),
            ..CrawlChanges::default()
        },
    )
}

/// Adds `n` reference misses.
pub fn add_reference_misses(n: u64) -> CrawlUpdate {
    update(
        CrawlEvent::AddReferenceMisses,
        CrawlCondition::Exists,
        CrawlChanges {
            reference_misses: n,
            ..CrawlChanges::default()
        },
    )
}

/// Takes `n` page slots, if that leaves the crawl within `max`; all or none, so that the sum
/// taken never exceeds `max` whatever the concurrency (a refused taker asks again for less, as
/// a new request). Taken once per `request`, however often it is tried.
pub fn reserve_pages(n: u64, max: u64, request: RequestId) -> CrawlUpdate {
    CrawlUpdate {
        request: Some(request),
        ..update(
            CrawlEvent::ReservePages,
            CrawlCondition::PagesLeft { n, max },
            CrawlChanges {
                pages_reserved: PagesChange::Take(n),
                ..CrawlChanges::default()
            },
        )
    }
}

/// Gives back `n` slots reserved but not used.
pub fn release_pages(n: u64) -> CrawlUpdate {
    update(
        CrawlEvent::ReleasePages,
        CrawlCondition::Exists,
        CrawlChanges {
            pages_reserved: PagesChange::GiveBack(n),
            ..CrawlChanges::default()
        },
    )
}

/// Adds `share` to the call totals, once per `request`, however often it is tried.
pub fn add_calls(share: &CallTally, request: RequestId) -> CrawlUpdate {
    CrawlUpdate {
        request: Some(request),
        ..update(
            CrawlEvent::AddCalls,
            CrawlCondition::Exists,
            CrawlChanges {
                calls: share.clone(),
                ..CrawlChanges::default()
            },
        )
    }
}

#[cfg(test)]
mod tests;
