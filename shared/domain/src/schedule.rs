//! When a page is fetched again: Django Dynamic Scraper's adaptive scheduler, exactly.
//!
//! A page carries a next-action factor and a count of unchanged fetches. The interval to its next
//! fetch is `min × factor`, bounded by `min` and `max`. A fetch that found a change divides the
//! factor by `factor_change`; more than `zero_actions` unchanged fetches in a row multiply it by
//! `factor_change` and restart the count. `min == max` is a fixed interval. The factor itself is
//! kept within the range that can still move the interval (from 1 to `max / min`), so a page that
//! sat at `max` for months reacts to its first change at once.

use crate::estimate::ChangeHistory;
use crate::task::Millis;
use serde::{Deserialize, Serialize};

const MINUTE: u64 = 60_000;

/// One schedule (per crawl, or per URL rule).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Schedule {
    /// MIN_TIME: the shortest interval, in milliseconds.
    pub min_ms: u64,
    /// MAX_TIME: the longest interval, in milliseconds.
    pub max_ms: u64,
    /// INITIAL_NEXT_ACTION_FACTOR.
    pub initial_factor: f64,
    /// ZERO_ACTIONS_FACTOR_CHANGE: unchanged fetches in a row tolerated before slowing down.
    pub zero_actions: u32,
    /// FACTOR_CHANGE_FACTOR.
    pub factor_change: f64,
}

impl Schedule {
    /// The scraper defaults of the document: 15 min, 10080 min, 10, 20, 1.3.
    pub const RECRAWL: Schedule = Schedule {
        min_ms: 15 * MINUTE,
        max_ms: 10_080 * MINUTE,
        initial_factor: 10.0,
        zero_actions: 20,
        factor_change: 1.3,
    };

    /// The checker defaults of the document: 1440 min, 10080 min, 1, 5, 1.3.
    pub const CHECKER: Schedule = Schedule {
        min_ms: 1_440 * MINUTE,
        max_ms: 10_080 * MINUTE,
        initial_factor: 1.0,
        zero_actions: 5,
        factor_change: 1.3,
    };

    /// A fixed interval (MIN_TIME = MAX_TIME).
    pub fn fixed(interval_ms: u64) -> Self {
        Schedule {
            min_ms: interval_ms,
            max_ms: interval_ms,
            initial_factor: 1.0,
            ..Self::RECRAWL
        }
    }

    /// A page's state before its first fetch.
    pub fn start(&self) -> Pace {
        Pace {
            factor: self.initial_factor,
            unchanged: 0,
            history: None,
        }
    }

    /// The interval to the next fetch at `pace`.
    pub fn interval_ms(&self, pace: &Pace) -> u64 {
        let min = self.min_ms.max(1);
        let raw = min as f64 * pace.factor;
        (raw.round() as u64).clamp(min, self.max_ms.max(min))
    }

    /// The pace after a fetch that did (`changed`) or did not find a change.
    pub fn after_fetch(&self, pace: &Pace, changed: bool) -> Pace {
        let change = if self.factor_change > 1.0 {
            self.factor_change
        } else {
            1.0
        };
        let (factor, unchanged) = if changed {
            (pace.factor / change, 0)
        } else if pace.unchanged + 1 > self.zero_actions {
            (pace.factor * change, 0)
        } else {
            (pace.factor, pace.unchanged + 1)
        };
        let ceiling = (self.max_ms.max(1) as f64 / self.min_ms.max(1) as f64).max(1.0);
        Pace {
            factor: factor.clamp(1.0, ceiling),
            unchanged,
            history: None,
        }
    }

    /// When a page fetched at `now` is due again, and its new pace.
    pub fn next(&self, pace: &Pace, changed: bool, now: Millis) -> (Millis, Pace) {
        let pace = self.after_fetch(pace, changed);
        (now + self.interval_ms(&pace) as Millis, pace)
    }
}

// Its factors come from JSON, which has no NaN.
impl Eq for Schedule {}

impl Default for Schedule {
    fn default() -> Self {
        Self::RECRAWL
    }
}

/// A page's place in its schedule (kept in its fetch record, in a few bytes): DDS's factor and
/// count, or, for a page the change-rate estimator schedules, its history (`crate::estimate`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pace {
    /// The next-action factor (1 for an estimated page).
    #[serde(rename = "f")]
    pub factor: f64,
    /// Unchanged fetches in a row (ZERO_ACTIONS so far; 0 for an estimated page).
    #[serde(rename = "u")]
    pub unchanged: u32,
    /// What the page's fetches have shown of its changes, when the estimator schedules it.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub history: Option<ChangeHistory>,
}

impl Pace {
    /// The pace of a page the estimator schedules.
    pub fn estimated(history: ChangeHistory) -> Self {
        Pace {
            factor: 1.0,
            unchanged: 0,
            history: Some(history),
        }
    }
}

// The factor is always finite: it starts from a configured number (JSON has no NaN) and is
// clamped into [1, max / min] by every step.
impl Eq for Pace {}

#[cfg(test)]
mod tests {
    use super::*;

    fn minutes(ms: u64) -> f64 {
        ms as f64 / MINUTE as f64
    }

    #[test]
    fn the_documents_sequence_150_then_115_after_a_change_and_195_after_21_unchanged() {
        let s = Schedule::RECRAWL;
        let start = s.start();
        assert_eq!(minutes(s.interval_ms(&start)), 150.0);
        let changed = s.after_fetch(&start, true);
        assert_eq!(minutes(s.interval_ms(&changed)).round(), 115.0);
        let mut pace = start;
        for _ in 0..20 {
            pace = s.after_fetch(&pace, false);
            assert_eq!(minutes(s.interval_ms(&pace)), 150.0, "{pace:?}");
        }
        pace = s.after_fetch(&pace, false);
        assert_eq!(minutes(s.interval_ms(&pace)), 195.0);
        assert_eq!(pace.unchanged, 0, "the count restarts");
    }

    #[test]
    fn intervals_stay_within_min_and_max_and_react_at_once_after_a_long_quiet() {
        let s = Schedule::RECRAWL;
        let mut pace = s.start();
        for _ in 0..10_000 {
            pace = s.after_fetch(&pace, false);
        }
        assert_eq!(s.interval_ms(&pace), s.max_ms);
        let woke = s.after_fetch(&pace, true);
        assert!(s.interval_ms(&woke) < s.max_ms, "{woke:?}");
        let mut busy = s.start();
        for _ in 0..100 {
            busy = s.after_fetch(&busy, true);
        }
        assert_eq!(s.interval_ms(&busy), s.min_ms);
    }

    #[test]
    fn the_checker_sequence_prolongs_a_page_that_stays() {
        let s = Schedule::CHECKER;
        let mut pace = s.start();
        let mut seen = vec![minutes(s.interval_ms(&pace))];
        for _ in 0..18 {
            pace = s.after_fetch(&pace, false);
            seen.push(minutes(s.interval_ms(&pace)));
        }
        // A day for the first 6 checks, then ×1.3 every 6 more, up to the week.
        assert_eq!(&seen[..6], &[1440.0; 6]);
        assert_eq!(seen[6], 1872.0);
        assert_eq!(seen[12], 2433.6);
        assert!(seen.iter().all(|&m| m <= 10_080.0));
    }

    #[test]
    fn a_fixed_interval_never_moves() {
        let s = Schedule::fixed(3_600_000);
        let mut pace = s.start();
        for changed in [true, false, true, false, false] {
            let (due, next) = s.next(&pace, changed, 1_000);
            assert_eq!(due, 3_601_000);
            pace = next;
        }
    }
}
