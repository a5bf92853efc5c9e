//! Host passes (`docs/scale.md` §7b): a frontier in which a page's finish writes no index.
//!
//! A store may keep, beside its hosts' due lists, a *roster* per host: each task entered once,
//! when it is created, at a place that never changes ([`Place`]: its creation time, then its
//! id). A host's turns walk its roster in *passes*: they read it from the host's cursor, take
//! the tasks that are work in the pass ([`Pass::verdict`]), and at hand-back move the cursor
//! over what they saw to an end ([`Walk::cursor`]). A finish then writes the task alone: on
//! DynamoDB one write unit where moving the task's due-list entry took three (the table, and a
//! delete and a put in the index).
//!
//! Only tasks placed by time alone are rostered ([`rostered`]): a priority or a lane orders a
//! task in its host's due list, which keeps it. A rostered task that needs a time of its own
//! (a retry in backoff) is listed in the due list for that time, as before.
//!
//! What is due in a pass is what is claimable: pending work, and a page whose next fetch has
//! come. A page not due yet is passed, and sets when the next pass starts ([`Pass::next_at`]:
//! the soonest such time, or the soonest next fetch of the pages the pass fetched); a pass
//! begins once the last one reached the roster's end and its time has come. A fixed recrawl
//! interval keeps its pages due in roster order, one pass an interval; pages a faster pass
//! reaches early are fetched by a short pass of their own, as a due list would fetch them.

use crate::canonical::TaskId;
use crate::priority::Priority;
use crate::task::{Millis, Status};
use serde::{Deserialize, Serialize};

/// How long after its creation a roster entry may still appear behind one created later: the
/// creating writers' clocks apart, and an index listing a written entry a moment late. A
/// cursor never passes an entry younger than this, so that such an entry is not skipped.
pub const SETTLE_MS: Millis = 10_000;

/// Whether a task created with `priority` in `lane` is rostered: placed by time alone.
pub fn rostered(priority: Priority, lane: Option<&str>) -> bool {
    priority.is_min() && lane.is_none()
}

/// A task's place in its host's roster: written when it is created, never changed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Place {
    /// When the task was created (its writer's clock).
    pub at: Millis,
    pub task_id: TaskId,
}

/// Where a host's walk of its roster stands: kept in the host's record, written by its turns'
/// hand-backs under the host's fenced lease (a turn lost before it handed back leaves the
/// cursor where it was, and the next turn reads the same entries again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pass {
    /// When this pass began (0: the host's first).
    pub started_at: Millis,
    /// Every entry up to this place was seen to an end, or was not work, in this pass. None:
    /// the roster's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Place>,
    /// The soonest next fetch of the pages this pass left for later: when the next pass is due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_at: Option<Millis>,
    /// The soonest next attempt of the retries this pass left behind its cursor: the next
    /// pass is due then too (sooner than a revisit, it is the host's next turn, not the
    /// sweeper's wake-up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Millis>,
    /// When the walk last reached the roster's end with everything in it seen to (None: not
    /// yet in this pass).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Rewinds so far ([`Pass::rewound`]): a turn that finds more at its hand-back than it read
    /// at its claim hands the rewound pass back, not its own.
    #[serde(skip_serializing_if = "is_zero")]
    pub rewinds: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a rostered task, as read, is to a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Work now: the turn takes it.
    Due,
    /// Not work in this pass (fetched in it, or never fetched again): the cursor may pass it.
    Passed,
    /// A page whose next fetch has not come: passed, and the next pass is due by then.
    Later(Millis),
    /// A retry whose next attempt has not come: passed, and the next pass is due by then.
    Retry(Millis),
    /// Held by a live lease until this time: the cursor stops before it.
    Held(Millis),
}

impl Pass {
    /// What a rostered task in `status` is to this pass at `now`.
    pub fn verdict(
        &self,
        status: Status,
        next_attempt_at: Option<Millis>,
        next_fetch_at: Option<Millis>,
        lease_expires_at: Option<Millis>,
        now: Millis,
    ) -> Verdict {
        match status {
            Status::Pending => Verdict::Due,
            Status::InProgress => match lease_expires_at {
                Some(until) if until > now => Verdict::Held(until),
                _ => Verdict::Due,
            },
            Status::Failed => match next_attempt_at {
                Some(at) if at > now => Verdict::Retry(at),
                _ => Verdict::Due,
            },
            Status::Ignored => Verdict::Passed,
            Status::Succeeded | Status::Gone => match next_fetch_at {
                None => Verdict::Passed,
                Some(at) if at <= now => Verdict::Due,
                Some(at) => Verdict::Later(at),
            },
        }
    }

    /// The pass a turn starting at `now` walks: this one (begun now if it is the host's
    /// first), or, when this one reached the roster's end and its next pass is due, a new one
    /// from the roster's start.
    pub fn current(&self, now: Millis) -> Pass {
        let next = self.next_at.into_iter().chain(self.retry_at).min();
        match (self.ended_at, next) {
            _ if self.started_at == 0 => Pass {
                started_at: now,
                ..self.clone()
            },
            (Some(_), Some(next)) if next <= now => Pass {
                started_at: now,
                rewinds: self.rewinds,
                ..Pass::default()
            },
            _ => self.clone(),
        }
    }

    /// This pass walked again from the roster's start: what a write that makes tasks behind
    /// the cursor due does to their host (an operator's rewind, a sitemap's newer lastmod).
    pub fn rewound(&self) -> Pass {
        Pass {
            cursor: None,
            ended_at: None,
            rewinds: self.rewinds + 1,
            ..self.clone()
        }
    }

    /// When the host's roster has work next, as this pass left it, once the walk reached the
    /// roster's end: a retry's next attempt (the host's next turn), and a page's next fetch (a
    /// revisit, which the sweeper wakes the host for). None while the walk goes on.
    pub fn next_work(&self) -> Option<(Option<Millis>, Option<Millis>)> {
        self.ended_at.map(|_| (self.retry_at, self.next_at))
    }
}

/// One entry a turn read from its host's roster, with what it was to the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub place: Place,
    pub verdict: Verdict,
}

/// The tasks a turn saw to an end (succeeded, unchanged, redirected, given up: None; their
/// next fetch, if any, is no sooner than the crawl's shortest revisit after the turn began,
/// `RecrawlPolicy::shortest_revisit_ms`), or failed into a retry (its next attempt).
pub type Ended = std::collections::HashMap<TaskId, Option<Millis>>;

/// What an entry the turn is done with leaves for later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaves {
    Nothing,
    Revisit(Millis),
    Retry(Millis),
}

/// A turn's walk of its host's roster: the entries it read, in roster order, from the pass's
/// cursor on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    pub read: Vec<Read>,
    /// The last read reached the roster's end.
    pub at_end: bool,
}

impl Read {
    /// Whether the turn is done with this entry, and what it leaves for later (`revisit`: when
    /// a page the turn ended may be due again).
    fn seen(&self, ended: &Ended, revisit: Option<Millis>) -> Option<Leaves> {
        let revisit = revisit.map_or(Leaves::Nothing, Leaves::Revisit);
        match self.verdict {
            Verdict::Due => match ended.get(&self.place.task_id)? {
                Some(retry) => Some(Leaves::Retry(*retry)),
                None => Some(revisit),
            },
            Verdict::Passed => Some(Leaves::Nothing),
            Verdict::Later(at) => Some(Leaves::Revisit(at)),
            Verdict::Retry(at) => Some(Leaves::Retry(at)),
            Verdict::Held(_) => None,
        }
    }
}

impl Walk {
    /// Where the next read starts: after the last entry read, else at the pass's cursor.
    pub fn next_from<'a>(&'a self, pass: &'a Pass) -> Option<&'a Place> {
        self.read.last().map(|r| &r.place).or(pass.cursor.as_ref())
    }

    /// The pass as the turn hands it back: the cursor moved over the entries read that the
    /// turn is done with, up to the first it is not or that is younger than [`SETTLE_MS`] at
    /// `now` (read again by the next turn); the next pass due by the soonest next fetch the
    /// turn saw (`revisit`: when a page the turn ended may be due again, None if never); the
    /// pass ended when the walk reached the roster's end with every entry seen to.
    pub fn hand_back(
        &self,
        pass: &Pass,
        ended: &Ended,
        revisit: Option<Millis>,
        now: Millis,
    ) -> Pass {
        let mut next = pass.clone();
        let mut moving = true;
        for read in &self.read {
            let seen = read.seen(ended, revisit);
            let soonest = |n: Option<Millis>, at: Millis| Some(n.map_or(at, |n| n.min(at)));
            match seen {
                Some(Leaves::Revisit(at)) => next.next_at = soonest(next.next_at, at),
                Some(Leaves::Retry(at)) => next.retry_at = soonest(next.retry_at, at),
                Some(Leaves::Nothing) | None => {}
            }
            moving = moving && seen.is_some() && read.place.at.saturating_add(SETTLE_MS) <= now;
            if moving {
                next.cursor = Some(read.place.clone());
            }
        }
        next.ended_at = self.work_left_at(ended, now).is_none().then_some(now);
        next
    }

    /// When the walk leaves work the turn did not take: now for a roster not read to its end or
    /// an entry due and not ended, else when the first lease held on an entry ends; None when
    /// it leaves none.
    pub fn work_left_at(&self, ended: &Ended, now: Millis) -> Option<Millis> {
        if !self.at_end {
            return Some(now);
        }
        self.read
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::Due if !ended.contains_key(&r.place.task_id) => Some(now),
                Verdict::Held(until) => Some(until),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests;
