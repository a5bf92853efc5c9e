//! A URL's priority (capability S15): 0 (the default) to 9, higher first.
//!
//! Where it comes from, first found wins:
//! - a seed: its line's `"_priority": N` ([`Priority::KEY`] in its data), else the seed request's
//!   (`--priority N`), else its route's;
//! - a link found on a page: its route's `priority` (`scope.routes`), else the `_priority` of the
//!   data it inherits (`scope.inherit_data`);
//! - a redirect's target: the redirected task's.
//!
//! What it does: a host's due list ([`due_key`], the key of its due index) puts a *pending* task
//! [`Priority::lead_ms`] earlier than its due time, so that a host's turn takes its pending URLs
//! highest priority first, then in the order they became pending. Only pending tasks are moved:
//! a pending task is due at once whatever its key, so moving it earlier never lets a task be
//! taken before it is due, and every task due now still comes before every task that is not (a
//! turn reads its due list from the front and stops at the first page with nothing due). A retry
//! waiting for its backoff and a page waiting for its recrawl sit at their due time and, once
//! due, are taken in due-time order among the priority-0 pending URLs; a page made pending again
//! (a refetch, a reset, an operator's retry, a sitemap's `lastmod`, a URL held back for its
//! host's trouble) is placed by its priority again. Negative priorities are not offered: moving a
//! pending task later would put it behind work that is not due, out of the turn's reach.
//!
//! Where the local runner has a choice of hosts (its queue), the host whose due work has the
//! higher priority gets its turn first (`Host::priority`). SQS has no priorities: on AWS a turn
//! whose host's due work is at or above a deployment's threshold goes to a queue of its own
//! ([`TurnQueue`]), which its own consumers serve, so that it never waits behind the turns of
//! hosts with lower-priority work. Each send of a turn picks its queue; a turn already sent stays
//! where it is (one live message per host, whichever queue holds it: the host's epoch drops any
//! other, and the sweeper re-issues a lost one from the host record, into the queue its priority
//! picks then).

use crate::task::{Millis, Status, UserData};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A URL's priority: [`Priority::MIN`] to [`Priority::MAX`], higher first.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(try_from = "serde_json::Value", into = "u8")]
pub struct Priority(u8);

/// Why a value is not a priority: the seed line is rejected, or the configuration refused, with
/// this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriorityError {
    #[error("priority {0} is out of range: {min} to {max}", min = Priority::MIN.0, max = Priority::MAX.0)]
    OutOfRange(String),
    #[error("priority {0} is not an integer from {min} to {max}", min = Priority::MIN.0, max = Priority::MAX.0)]
    NotAnInteger(String),
}

impl Priority {
    /// The default: every URL nothing gives a priority to.
    pub const MIN: Priority = Priority(0);
    pub const MAX: Priority = Priority(9);

    /// The user data key that gives a seed (and, with `scope.inherit_data`, the pages it leads
    /// to) its priority.
    pub const KEY: &str = "_priority";

    /// How much earlier than its due time each level of priority puts a pending task in its host's
    /// due list: 10^11 ms, about 3.2 years, more than any pending task of a crawl waits, so that
    /// a level's pending tasks all come before the level below's. Nine levels move a task at most
    /// 28.5 years back, far from the range of a `Millis`.
    pub const SPAN_MS: Millis = 100_000_000_000;

    /// The priority `n`, if in range.
    pub fn new(n: i64) -> Result<Priority, PriorityError> {
        u8::try_from(n)
            .ok()
            .filter(|n| *n <= Self::MAX.0)
            .map(Priority)
            .ok_or_else(|| PriorityError::OutOfRange(n.to_string()))
    }

    /// The priority a command-line value or a JSON value says.
    pub fn parse(text: &str) -> Result<Priority, PriorityError> {
        let n: i64 = text
            .trim()
            .parse()
            .map_err(|_| PriorityError::NotAnInteger(text.to_owned()))?;
        Self::new(n)
    }

    pub fn get(self) -> u8 {
        self.0
    }

    /// Whether this is the default (left out of a stored record).
    pub fn is_min(&self) -> bool {
        *self == Self::MIN
    }

    /// How much earlier than its due time a pending task of this priority sits in its host's due
    /// list.
    pub fn lead_ms(self) -> Millis {
        Millis::from(self.0) * Self::SPAN_MS
    }

    /// The priority whose lead is `lead` (a store that keeps the lead): None when it is none's.
    pub fn of_lead(lead: Millis) -> Option<Priority> {
        if lead % Self::SPAN_MS != 0 {
            return None;
        }
        Self::new(lead / Self::SPAN_MS).ok()
    }

    /// What of `priority` places a task in `status` in its host's due list: all of it while
    /// pending, nothing otherwise (a task in any other status is placed by its due time).
    pub fn placing(status: Status, priority: Priority) -> Priority {
        if status == Status::Pending {
            priority
        } else {
            Priority::MIN
        }
    }

    /// The priority of a task read from its host's due list at `place` (its [`due_key`]), in
    /// `status`, pending since `updated_at`: a pending task's place says it; any other's counts
    /// 0 (it is placed by its due time).
    pub fn of_place(status: Status, updated_at: Millis, place: Millis) -> Priority {
        if status != Status::Pending {
            return Priority::MIN;
        }
        Self::of_lead(updated_at.saturating_sub(place)).unwrap_or_default()
    }

    /// The priority a task's user data gives it (`"_priority": N`): None when it gives none, an
    /// error when the value is not an integer in range.
    pub fn of_data(data: Option<&UserData>) -> Result<Option<Priority>, PriorityError> {
        data.and_then(|d| d.get(Self::KEY))
            .map(|v| Priority::try_from(v.clone()))
            .transpose()
    }

    /// A seed's priority: its own (its line's `_priority`), else the seed request's, else its
    /// route's, else the default.
    pub fn of_seed(
        own: Option<Priority>,
        request: Option<Priority>,
        route: Option<Priority>,
    ) -> Priority {
        own.or(request).or(route).unwrap_or_default()
    }

    /// A link's priority: its route's, else that of the data it inherits (one that is not a
    /// priority was refused at its seed: the default), else the default.
    pub fn of_link(route: Option<Priority>, inherited: Option<&UserData>) -> Priority {
        route
            .or_else(|| Self::of_data(inherited).ok().flatten())
            .unwrap_or_default()
    }
}

impl TryFrom<serde_json::Value> for Priority {
    type Error = PriorityError;

    fn try_from(value: serde_json::Value) -> Result<Priority, PriorityError> {
        match &value {
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(n) => Priority::new(n),
                None if n.is_u64() => Err(PriorityError::OutOfRange(n.to_string())),
                None => Err(PriorityError::NotAnInteger(n.to_string())),
            },
            other => Err(PriorityError::NotAnInteger(other.to_string())),
        }
    }
}

impl From<Priority> for u8 {
    fn from(p: Priority) -> u8 {
        p.0
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which queue a host's turn is sent to on AWS: the regular crawl queue, or the priority queue
/// when the host's due work (`Host::priority`, carried by the turn) is at least the
/// deployment's threshold ([`TurnQueue::FROM_DEFAULT`] unless set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnQueue {
    Regular,
    Priority,
}

impl TurnQueue {
    /// The threshold when the deployment gives none: any priority above the default.
    pub const FROM_DEFAULT: Priority = Priority(1);

    /// The queue of a turn whose host's due work has `priority`, where the priority queue takes
    /// turns from `from` up. A threshold of 0 would send every turn to the priority queue (and
    /// leave the regular one idle): it counts as 1.
    pub fn of(priority: Priority, from: Priority) -> TurnQueue {
        if priority >= from.max(Self::FROM_DEFAULT) {
            TurnQueue::Priority
        } else {
            TurnQueue::Regular
        }
    }
}

/// A task's place in its host's due list (the due index's key): its due time (`Task::due_at`),
/// a pending task's moved [`Priority::lead_ms`] earlier. None: not in the list (never due).
pub fn due_key(status: Status, due: Option<Millis>, priority: Priority) -> Option<Millis> {
    let due = due?;
    Some(match status {
        Status::Pending => due.saturating_sub(priority.lead_ms()),
        _ => due,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A task in a host's due list at `now`: its status, due time and priority. A pending task is
    /// due since it became pending (at or before `now`); the others at any time around `now`.
    fn listed(now: Millis) -> impl Strategy<Value = (Status, Millis, Priority)> {
        (
            proptest::sample::select(vec![
                Status::Pending,
                Status::Failed,
                Status::Succeeded,
                Status::Gone,
                Status::InProgress,
            ]),
            -400 * 86_400_000i64..400 * 86_400_000,
            0u8..=9,
        )
            .prop_map(move |(status, offset, p)| {
                let due = match status {
                    Status::Pending => now - offset.abs(),
                    _ => now + offset,
                };
                (status, due, Priority(p))
            })
    }

    proptest! {
        /// Whatever the tasks, a host's due list holds every task due now before every task that
        /// is not, and among the pending ones a higher priority first: a turn reading it from
        /// the front takes the most urgent due work and never meets work it may not take before
        /// the work it may.
        #[test]
        fn due_work_comes_first_and_pending_work_by_priority(
            tasks in proptest::collection::vec(listed(1_800_000_000_000), 2..40)
        ) {
            let now = 1_800_000_000_000;
            let keyed: Vec<(Millis, bool, Status, Priority, Millis)> = tasks
                .iter()
                .map(|&(status, due, p)| {
                    let key = due_key(status, Some(due), p).unwrap();
                    (key, due <= now, status, p, due)
                })
                .collect();
            for a in &keyed {
                for b in &keyed {
                    if a.1 && !b.1 {
                        prop_assert!(a.0 < b.0, "due {a:?} after not-due {b:?}");
                    }
                    if a.2 == Status::Pending && b.2 == Status::Pending && a.3 > b.3 {
                        prop_assert!(a.0 < b.0, "{a:?} not before {b:?}");
                    }
                }
                // A pending task's place gives its priority back (pending since its due time).
                if a.2 == Status::Pending {
                    prop_assert_eq!(Priority::of_place(a.2, a.4, a.0), a.3);
                }
            }
        }
    }

    fn data(value: serde_json::Value) -> UserData {
        let serde_json::Value::Object(map) = json!({ "_priority": value }) else {
            unreachable!()
        };
        map
    }

    #[test]
    fn a_priority_is_an_integer_from_0_to_9_and_anything_else_is_refused_with_its_reason() {
        assert_eq!(Priority::new(0), Ok(Priority::MIN));
        assert_eq!(Priority::new(9), Ok(Priority::MAX));
        assert_eq!(
            Priority::new(10),
            Err(PriorityError::OutOfRange("10".into()))
        );
        assert_eq!(
            Priority::new(-1),
            Err(PriorityError::OutOfRange("-1".into()))
        );
        assert_eq!(Priority::parse(" 3 ").map(Priority::get), Ok(3));
        assert_eq!(
            Priority::parse("high"),
            Err(PriorityError::NotAnInteger("high".into()))
        );
        for bad in [
            json!(2.5),
            json!("5"),
            json!(true),
            json!(null),
            json!(u64::MAX),
        ] {
            let refused = Priority::of_data(Some(&data(bad.clone())));
            assert!(refused.is_err(), "{bad} was taken");
        }
        assert_eq!(
            Priority::of_data(Some(&data(json!(12))))
                .unwrap_err()
                .to_string(),
            "priority 12 is out of range: 0 to 9"
        );
        assert_eq!(
            Priority::of_data(Some(&data(json!(7)))),
            Ok(Priority::new(7).ok())
        );
        assert_eq!(Priority::of_data(Some(&UserData::new())), Ok(None));
        assert_eq!(Priority::of_data(None), Ok(None));
        // In a configuration (a route's), as a number only.
        let route: Priority = serde_json::from_str("4").unwrap();
        assert_eq!(route.get(), 4);
        assert!(serde_json::from_str::<Priority>("11").is_err());
        assert_eq!(serde_json::to_string(&route).unwrap(), "4");
    }

    #[test]
    fn a_seed_takes_its_own_priority_then_its_requests_then_its_routes_and_a_link_its_routes_then_its_datas()
     {
        let p = |n| Priority::new(n).ok();
        assert_eq!(Priority::of_seed(p(1), p(2), p(3)), Priority(1));
        assert_eq!(Priority::of_seed(None, p(2), p(3)), Priority(2));
        assert_eq!(Priority::of_seed(None, None, p(3)), Priority(3));
        assert_eq!(Priority::of_seed(None, None, None), Priority::MIN);
        let inherited = data(json!(5));
        assert_eq!(Priority::of_link(p(8), Some(&inherited)), Priority(8));
        assert_eq!(Priority::of_link(None, Some(&inherited)), Priority(5));
        // Data whose priority its seed refused gives none.
        assert_eq!(
            Priority::of_link(None, Some(&data(json!("x")))),
            Priority::MIN
        );
        assert_eq!(Priority::of_link(None, None), Priority::MIN);
    }

    #[test]
    fn a_turn_goes_to_the_priority_queue_from_the_threshold_up_and_default_work_never_does() {
        let p = |n| Priority::new(n).unwrap();
        for from in 0..=9 {
            for n in 0..=9 {
                let queue = TurnQueue::of(p(n), p(from));
                let expected = if n > 0 && n >= from {
                    TurnQueue::Priority
                } else {
                    TurnQueue::Regular
                };
                assert_eq!(queue, expected, "priority {n}, threshold {from}");
            }
        }
        assert_eq!(
            TurnQueue::of(Priority::MAX, TurnQueue::FROM_DEFAULT),
            TurnQueue::Priority
        );
        assert_eq!(
            TurnQueue::of(Priority::MIN, TurnQueue::FROM_DEFAULT),
            TurnQueue::Regular
        );
    }

    #[test]
    fn only_pending_tasks_move_and_due_work_stays_ahead_of_work_that_is_not_due() {
        let now: Millis = 1_800_000_000_000;
        let high = Priority::MAX;
        // A pending task moves by its priority; a retry or a recrawl keeps its due time.
        assert_eq!(
            due_key(Status::Pending, Some(now), high),
            Some(now - 9 * Priority::SPAN_MS)
        );
        assert_eq!(
            due_key(Status::Pending, Some(now), Priority::MIN),
            Some(now)
        );
        for status in [
            Status::Failed,
            Status::Succeeded,
            Status::Gone,
            Status::InProgress,
        ] {
            assert_eq!(due_key(status, Some(now + 5), high), Some(now + 5));
        }
        assert_eq!(due_key(Status::Ignored, None, high), None);
        // Every level's pending tasks come before the level below's, however long those waited,
        // and a pending task of any priority comes before any task not yet due.
        let old_low = due_key(Status::Pending, Some(now - 365 * 86_400_000), Priority(2));
        let new_high = due_key(Status::Pending, Some(now), Priority(3));
        assert!(new_high < old_low);
        assert!(new_high.unwrap() <= now && old_low.unwrap() <= now);
        // The place gives the priority back, for a pending task.
        let place = due_key(Status::Pending, Some(now), Priority(6)).unwrap();
        assert_eq!(Priority::of_place(Status::Pending, now, place), Priority(6));
        assert_eq!(
            Priority::of_place(Status::Failed, now, place),
            Priority::MIN
        );
        assert_eq!(Priority::of_lead(Priority(6).lead_ms()), Some(Priority(6)));
        assert_eq!(Priority::of_lead(12), None);
    }
}
