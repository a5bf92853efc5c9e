//! Riding out transient backend errors: a throttling burst, a 5xx, a timeout or a lost response
//! that outlived the SDK's own retries is waited out (jittered exponential pauses) and the step
//! tried again; only a permanent error (access denied, a missing table) or an outage that lasts
//! longer than [`Backoff::outage`] of continuous failure ends a run. Every step retried this way
//! is safe to repeat: seed requests are idempotent, sweeps and deliveries resume where they were.
//!
//! The pauses are waits on a [`Clock`]: a service's steps (a claim, a finish, a hand-back, a
//! completion, a run's seeding) wait on the App's, so a test on virtual time rides out an outage
//! at once. One request retried inside a port's helper (an offer or a crawl update under its
//! request id, a send of turns, one read of a delivery) waits on the system clock, as the SDK's
//! own retries beneath it do: those helpers are given no clock, and their waits are seconds.

use crate::clock::Clock;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// An error that may pass if the same step is tried again later.
pub trait Transient: std::fmt::Display {
    fn is_transient(&self) -> bool;
}

/// How long to wait between tries, and for how long to keep trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first pause; each further one doubles, up to `max`, placed at random between half and
    /// the full pause so that workers failing together do not retry together.
    pub first: Duration,
    pub max: Duration,
    /// Continuous failure for this long is an outage: the run ends (resumable).
    pub outage: Duration,
}

impl Backoff {
    /// The CLI's and the runner's bound: five minutes of continuous failure.
    pub const RUN: Backoff = Backoff {
        first: Duration::from_millis(200),
        max: Duration::from_secs(10),
        outage: Duration::from_secs(300),
    };

    /// One write inside a worker's step (a PUT, a finish, a delete): a few tries over seconds,
    /// then the step fails and its message comes back later.
    pub const BRIEF: Backoff = Backoff {
        first: Duration::from_millis(100),
        max: Duration::from_secs(2),
        outage: Duration::from_secs(8),
    };

    /// The pause before try `attempt + 1` (`attempt` ≥ 1), jittered.
    pub fn pause(&self, attempt: u32) -> Duration {
        let full = self
            .first
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max);
        full.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

/// The failures of one step in a row: whether to try again, and after how long.
#[derive(Debug, Default)]
pub struct Outage {
    since: Option<Instant>,
    attempts: u32,
}

impl Outage {
    /// After a failure at `now` (monotonic: the caller's clock): the pause before trying again,
    /// or None when the error is permanent or the failures have lasted past `policy.outage`.
    pub fn after<E: Transient>(
        &mut self,
        policy: &Backoff,
        error: &E,
        now: Instant,
    ) -> Option<Duration> {
        if !error.is_transient() {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        if now.saturating_duration_since(since) >= policy.outage {
            return None;
        }
        self.attempts += 1;
        Some(policy.pause(self.attempts))
    }

    /// A success ends the outage.
    pub fn recovered(&mut self) {
        *self = Outage::default();
    }
}

/// Runs `step` until it succeeds, fails permanently, or fails transiently for longer than
/// `policy.outage` on `clock`; each retry is logged (`what` names the step) and counted in
/// `retries`. Its pauses are waits on `clock`: a service's steps pass the App's clock, so a test
/// on virtual time rides out an outage in no time.
pub async fn persist<T, E, F, Fut>(
    clock: &dyn Clock,
    what: &str,
    policy: &Backoff,
    retries: &std::sync::atomic::AtomicU64,
    mut step: F,
) -> Result<T, E>
where
    E: Transient,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut outage = Outage::default();
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(e) => match outage.after(policy, &e, clock.instant()) {
                Some(pause) => {
                    retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(step = what, error = %e, pause_ms = pause.as_millis() as u64, "transient error; trying again");
                    clock.sleep(pause).await;
                }
                None => return Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use crate::store::StoreError;

    fn unavailable() -> StoreError {
        StoreError::unavailable("Query", "ThrottlingException")
    }

    #[test]
    fn pauses_grow_within_their_jitter_window_up_to_the_cap() {
        let policy = Backoff::RUN;
        for attempt in 1..20 {
            let full = (policy.first * 2u32.pow((attempt - 1).min(16))).min(policy.max);
            let pause = policy.pause(attempt);
            assert!(pause >= full / 2 && pause <= full, "{attempt}: {pause:?}");
        }
    }

    #[test]
    fn a_permanent_error_ends_at_once_and_a_transient_one_until_the_outage_bound() {
        let policy = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(1),
            outage: Duration::from_millis(30),
        };
        let denied = StoreError::backend("Query", "AccessDeniedException");
        let t0 = Instant::now();
        assert_eq!(Outage::default().after(&policy, &denied, t0), None);
        let mut outage = Outage::default();
        assert!(outage.after(&policy, &unavailable(), t0).is_some());
        let late = t0 + Duration::from_millis(40);
        assert_eq!(outage.after(&policy, &unavailable(), late), None);
        outage.recovered();
        assert!(outage.after(&policy, &unavailable(), late).is_some());
    }

    #[tokio::test]
    async fn persist_retries_transient_errors_and_counts_them() {
        let retries = std::sync::atomic::AtomicU64::new(0);
        let policy = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(2),
            outage: Duration::from_secs(5),
        };
        let mut failures = 3;
        let result: Result<u32, StoreError> =
            persist(&SystemClock, "test", &policy, &retries, || {
                let fail = failures > 0;
                failures -= 1;
                async move { if fail { Err(unavailable()) } else { Ok(7) } }
            })
            .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(retries.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn persist_waits_out_an_outage_on_its_clock_and_ends_at_the_outage_bound() {
        // GIVEN a store down for good, and the CLI's five-minute outage bound on virtual time
        let clock = ManualClock::at(0);
        let retries = std::sync::atomic::AtomicU64::new(0);
        let real = Instant::now();
        let result: Result<(), StoreError> =
            persist(&clock, "test", &Backoff::RUN, &retries, || async {
                Err(unavailable())
            })
            .await;
        // THEN the run ends after five minutes of the clock's time, in no real time
        assert!(result.is_err());
        let waited = clock.now_ms();
        assert!((300_000..310_000).contains(&waited), "{waited} ms");
        assert!(retries.load(std::sync::atomic::Ordering::Relaxed) > 30);
        assert!(
            real.elapsed() < Duration::from_secs(5),
            "{:?}",
            real.elapsed()
        );
    }
}
