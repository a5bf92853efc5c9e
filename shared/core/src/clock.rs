//! The clock port: every service takes the time from here, never from the system directly, and
//! waits on it — a host's pace, a deadline, the runner's ticks and pauses — so that backoff,
//! leases, recrawl timing and pacing can be tested on virtual time in milliseconds.
//!
//! Two times, one source: `now_ms` is the time records are written with (leases, due times);
//! `instant` is monotonic, what deadlines, budgets and a host's pace are measured on, and
//! `sleep_until` waits for it. A `ManualClock` is virtual time: it moves only when told to or
//! slept on (a sleep ends at once, the clock moved to its end), so a test of pacing, deadlines
//! or backoff runs in milliseconds while its HTTP, SQLite or moto I/O stays real.
//!
//! Why not tokio's paused clock (`start_paused`): it jumps to the next timer whenever the
//! runtime is idle, which includes waiting on real I/O (a loopback HTTP server, SQLite on a
//! blocking thread, moto), so every timeout racing such I/O fires at once; and it needs tokio's
//! `test-util` feature, which, enabled for tests only, builds tokio and everything above it
//! (hyper, reqwest, the AWS SDK) a second time in `make test`. The other clocks wait on tokio's
//! timer.
//!
//! Every wait of the services goes through here: a host's pace, turn holds, the runner's ticks,
//! the sweeper's and deliverer's budgets, the seeder's deadline, backoff's pauses
//! (`crate::backoff`) and the embedded queue's delays (`queue::local`). The fetcher alone keeps
//! real time: its timeouts race real sockets, and what it caches (robots.txt, a benched proxy)
//! ages with them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use trawl_domain::task::Millis;

/// A wait on a clock.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The time now (epoch milliseconds, and monotonic), and waits until a later time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch, now.
    fn now_ms(&self) -> Millis;

    /// Monotonic time, now: what deadlines, budgets and a host's pace are measured on.
    fn instant(&self) -> Instant {
        Instant::now()
    }

    /// Waits until `instant()` reaches `at` (at once when it has).
    fn sleep_until(&self, at: Instant) -> Sleep<'_> {
        Box::pin(tokio::time::sleep_until(at))
    }

    /// Waits for `duration` on this clock.
    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        self.sleep_until(self.instant() + duration)
    }
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        trawl_domain::task::now_ms()
    }
}

/// A clock that moves only when told to, or when slept on: a sleep moves it to the sleep's end
/// at once (concurrent sleepers wake together, the clock at the latest end). Clones share the
/// time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Manual>);

#[derive(Debug)]
struct Manual {
    now: AtomicI64,
    /// `instant()` at the clock's start time.
    origin: Instant,
    start: Millis,
}

impl ManualClock {
    pub fn at(now: Millis) -> Self {
        Self(Arc::new(Manual {
            now: AtomicI64::new(now),
            origin: Instant::now(),
            start: now,
        }))
    }

    pub fn advance(&self, ms: Millis) {
        self.0.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::at(0)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.now.load(Ordering::SeqCst)
    }

    fn instant(&self) -> Instant {
        let elapsed = self.now_ms().saturating_sub(self.0.start).max(0);
        self.0.origin + Duration::from_millis(elapsed.unsigned_abs())
    }

    fn sleep_until(&self, at: Instant) -> Sleep<'_> {
        let ahead = at.saturating_duration_since(self.instant());
        self.advance(Millis::try_from(ahead.as_millis()).unwrap_or(Millis::MAX));
        // Still a yield: a loop that waits on the clock lets the runtime's other tasks run.
        Box::pin(tokio::task::yield_now())
    }
}

/// The wall clock set forward by a chosen amount: time passing (a day to a recrawl) for a test or
/// a benchmark that drives real I/O, which a `ManualClock` standing still would time out. Clones
/// share the offset.
#[derive(Debug, Clone, Default)]
pub struct SkewedClock(Arc<AtomicI64>);

impl SkewedClock {
    pub fn skip(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> Millis {
        trawl_domain::task::now_ms().saturating_add(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_moves_when_slept_on_and_its_instant_with_it() {
        let clock = ManualClock::at(1_000);
        let start = clock.instant();
        clock.sleep(Duration::from_millis(250)).await;
        assert_eq!(clock.now_ms(), 1_250);
        assert_eq!(clock.instant() - start, Duration::from_millis(250));
        // A time already passed is no wait.
        clock.sleep_until(start).await;
        assert_eq!(clock.now_ms(), 1_250);
    }
}
