//! When an invocation stops starting new work.
//!
//! Lambda hands every invocation a deadline (epoch milliseconds); work still running then is
//! killed mid-way. A function stops *starting* work a safety margin before it, so that what is in
//! flight and the response still fit. The margin is capped at a quarter of the time left: a
//! short deadline then still leaves three quarters of it for work, where a fixed margin would
//! leave none and the invocation would only hand its work back.
//!
//! Lambda never starts an invocation at or after its deadline, but local emulators send one that
//! has long passed (`cargo lambda watch` sends a fixed 600000, ten minutes after the epoch). Such
//! a deadline means no deadline: the invocation runs until its work or its own budget is done.

use std::time::Duration;
use tokio::time::Instant;
use trawl_domain::task::{Millis, now_ms};

/// The margin is at most this fraction (1/N) of the time left.
const MARGIN_CAP_DIVISOR: u32 = 4;

/// How long an invocation may keep starting work, given Lambda's `deadline_ms` and the time
/// `now`; `margin` is what the function keeps back (capped, see the module docs). None when there
/// is no deadline to respect: none given (0) or one already past.
pub fn work_time(deadline_ms: u64, now: Millis, margin: Duration) -> Option<Duration> {
    let now = u64::try_from(now).unwrap_or(0);
    if deadline_ms <= now {
        return None;
    }
    let left = Duration::from_millis(deadline_ms - now);
    Some(left - margin.min(left / MARGIN_CAP_DIVISOR))
}

/// The instant this invocation stops starting work (`work_time` from its context, by the clock).
pub fn work_deadline(context: &lambda_runtime::Context, margin: Duration) -> Option<Instant> {
    work_time(context.deadline, now_ms(), margin).and_then(|time| Instant::now().checked_add(time))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;
    const SECOND: u64 = 1_000;
    const MARGIN: Duration = Duration::from_secs(20);

    fn at(seconds_left: u64) -> u64 {
        NOW as u64 + seconds_left * SECOND
    }

    #[test]
    fn a_long_deadline_keeps_the_whole_margin() {
        assert_eq!(
            work_time(at(300), NOW, MARGIN),
            Some(Duration::from_secs(280))
        );
        assert_eq!(
            work_time(at(80), NOW, MARGIN),
            Some(Duration::from_secs(60)),
            "exactly a quarter"
        );
    }

    #[test]
    fn a_short_deadline_caps_the_margin_at_a_quarter_of_the_time_left() {
        assert_eq!(
            work_time(at(10), NOW, MARGIN),
            Some(Duration::from_millis(7_500))
        );
        assert_eq!(
            work_time(NOW as u64 + 1, NOW, MARGIN),
            Some(Duration::from_micros(750))
        );
    }

    #[test]
    fn no_margin_leaves_all_the_time() {
        assert_eq!(
            work_time(at(60), NOW, Duration::ZERO),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn no_deadline_or_one_already_past_sets_none() {
        assert_eq!(work_time(0, NOW, MARGIN), None, "none given");
        assert_eq!(work_time(600_000, NOW, MARGIN), None, "cargo lambda watch");
        assert_eq!(work_time(NOW as u64, NOW, MARGIN), None);
    }

    #[test]
    fn the_context_deadline_becomes_an_instant_within_the_work_time() {
        let mut context = lambda_runtime::Context::default();
        context.deadline = u64::try_from(now_ms()).unwrap() + 100 * SECOND;
        let before = Instant::now();
        let deadline = work_deadline(&context, MARGIN).unwrap();
        assert!(deadline <= Instant::now() + Duration::from_secs(80));
        assert!(deadline > before + Duration::from_secs(75));
        context.deadline = 600_000;
        assert_eq!(work_deadline(&context, MARGIN), None);
    }
}
