//! A crawl's page budget (`scope.max_pages`) without a hot item: a worker (one store instance,
//! shared by its clones) takes slots from the crawl record in chunks and hands them out from
//! memory, so a discovering page writes nothing to the crawl record; slots given back (URLs the
//! crawl already had) return to the worker's chunk, not to the record.
//!
//! Never exceeded: the record's count is only raised by its atomic conditional add, and a
//! worker grants only slots it took there. What it costs: a worker that ends while holding
//! slots leaves them unused, at most `MAX_CHUNK` and at most 1/`SPREAD` of what was left when it
//! took them — chunks shrink as the budget runs out, and the first ask of a worker (which has
//! not seen the count yet) is exact, so a small budget is spent exactly.

use super::{StoreError, StoreResult};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use trawl_domain::canonical::CrawlId;

/// Most slots a worker takes at once beyond what it needs.
pub const MAX_CHUNK: u64 = 1_000;
/// A chunk is at most this fraction of the budget left.
pub const SPREAD: u64 = 64;

/// What one conditional add on the crawl record gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub granted: u64,
    /// The record's count after the add (what the next chunk is sized from).
    pub reserved: u64,
}

/// How many slots to take from the record when `short` are missing and `left` were seen left
/// (None: not seen yet).
pub fn chunk(short: u64, left: Option<u64>) -> u64 {
    let spare = left.map_or(0, |left| (left / SPREAD).min(MAX_CHUNK));
    short.max(spare)
}

#[derive(Debug, Default)]
struct Held {
    slots: u64,
    left: Option<u64>,
}

/// One worker's slots, per crawl.
#[derive(Debug, Default)]
pub struct PageBudget {
    held: Mutex<HashMap<CrawlId, Held>>,
}

impl PageBudget {
    fn with<T>(&self, id: &CrawlId, f: impl FnOnce(&mut Held) -> T) -> T {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        f(held.entry(id.clone()).or_default())
    }

    /// Up to `wanted` of `max` slots: from the chunk held, the rest through `take` (one
    /// conditional add on the record, asked for a chunk), whose surplus is kept.
    pub async fn reserve<F, Fut>(
        &self,
        id: &CrawlId,
        wanted: u64,
        max: u64,
        take: F,
    ) -> StoreResult<u64>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = StoreResult<Taken>>,
    {
        let (from_held, ask) = self.with(id, |held| {
            let got = held.slots.min(wanted);
            held.slots -= got;
            let short = wanted - got;
            (
                got,
                if short == 0 {
                    0
                } else {
                    chunk(short, held.left)
                },
            )
        });
        if ask == 0 {
            return Ok(from_held);
        }
        let taken = match take(ask.min(max)).await {
            Ok(taken) => taken,
            Err(StoreError::NoSuchCrawl(gone)) => {
                self.forget(id);
                return Err(StoreError::NoSuchCrawl(gone));
            }
            Err(e) => {
                self.with(id, |held| held.slots += from_held);
                return Err(e);
            }
        };
        let used = taken.granted.min(wanted - from_held);
        self.with(id, |held| {
            held.slots += taken.granted - used;
            held.left = Some(max.saturating_sub(taken.reserved));
        });
        Ok(from_held + used)
    }

    /// Takes back `n` unused slots into the chunk; false when this worker holds nothing of the
    /// crawl (it never reserved, or the crawl was forgotten): then the caller gives them back to
    /// the record.
    pub fn release(&self, id: &CrawlId, n: u64) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        match held.get_mut(id) {
            Some(h) => {
                h.slots += n;
                true
            }
            None => false,
        }
    }

    /// Drops what is held for a deleted crawl.
    pub fn forget(&self, id: &CrawlId) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A record: an atomic count capped at `max`, and how many adds it took.
    struct Record {
        reserved: AtomicU64,
        writes: AtomicU64,
    }

    impl Record {
        fn take(&self, ask: u64, max: u64) -> StoreResult<Taken> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            let before = self.reserved.load(Ordering::SeqCst);
            let granted = ask.min(max - before);
            self.reserved.fetch_add(granted, Ordering::SeqCst);
            Ok(Taken {
                granted,
                reserved: before + granted,
            })
        }
    }

    #[test]
    fn chunks_shrink_as_the_budget_runs_out() {
        assert_eq!(chunk(3, None), 3);
        assert_eq!(chunk(3, Some(1_000_000)), MAX_CHUNK);
        assert_eq!(chunk(3, Some(640)), 10);
        assert_eq!(chunk(3, Some(100)), 3);
    }

    #[tokio::test]
    async fn a_big_budget_is_taken_in_chunks_a_small_one_exactly() {
        let id = CrawlId::parse("c").unwrap();
        let record = Record {
            reserved: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        };
        let budget = PageBudget::default();
        let max = 1_000_000;
        let mut granted = 0;
        for _ in 0..1_000 {
            granted += budget
                .reserve(&id, 1, max, |ask| {
                    let taken = record.take(ask, max);
                    async move { taken }
                })
                .await
                .unwrap();
        }
        // 1,000 pages: an exact first ask, then one chunk.
        assert_eq!(granted, 1_000);
        assert_eq!(record.writes.load(Ordering::SeqCst), 2);
        // Given back, then reused without a write.
        assert!(budget.release(&id, 5));
        let again = budget
            .reserve(&id, 5, max, |ask| {
                let taken = record.take(ask, max);
                async move { taken }
            })
            .await
            .unwrap();
        assert_eq!((again, record.writes.load(Ordering::SeqCst)), (5, 2));

        // A budget of 10: every slot used, never one more.
        let small = CrawlId::parse("small").unwrap();
        let record = Record {
            reserved: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        };
        let mut granted = 0;
        for _ in 0..20 {
            granted += budget
                .reserve(&small, 1, 10, |ask| {
                    let taken = record.take(ask, 10);
                    async move { taken }
                })
                .await
                .unwrap();
        }
        assert_eq!(granted, 10);
        assert_eq!(record.reserved.load(Ordering::SeqCst), 10);
    }
}
