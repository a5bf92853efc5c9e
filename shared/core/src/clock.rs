//! The clock port: every service takes the time from here, never from the system directly, so
//! backoff, leases and recrawl timing can be tested on a virtual clock in milliseconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use trawl_domain::task::Millis;

/// Milliseconds since the Unix epoch, now.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> Millis;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        trawl_domain::task::now_ms()
    }
}

/// A clock that moves only when told to. Clones share the time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn at(now: Millis) -> Self {
        Self(Arc::new(AtomicI64::new(now)))
    }

    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
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
