//! Crawl records: what an adapter implements ([`CrawlRecords`]: create, read, list, one
//! conditional write, delete) and the operations written once on top of it ([`CrawlStore`]).
//!
//! What a crawl write does is decided in `trawl_domain::crawl::transition` (the condition and the
//! changes, counters as atomic adds); `apply_crawl` persists one such update in one conditional
//! write and answers with the crawl before it, or as it stands when the condition refused it. An
//! operation's answer is derived from that alone (no second read): a reservation's grant, the
//! call totals after an add. Each operation is one `apply_crawl`, but a reservation that meets
//! less room than it asked for, which asks again for what is left (at most a few times).
//!
//! The adds (page slots, call totals) are requests (`trawl_domain::request`): each draws its id
//! once and is tried again here, with that id, while the store is unavailable (`Backoff::BRIEF`),
//! so that one whose write landed while its answer was lost is taken or counted once.

use super::budget::{PageBudget, Taken};
use super::{Applied, StoreError, StoreResult};
use crate::backoff::{Backoff, persist};
use crate::clock::SystemClock;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use trawl_domain::calls::CallTally;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::transition::{self, CrawlUpdate};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::estimate::Level;
use trawl_domain::request::RequestId;
use trawl_domain::task::Millis;

/// How often a reservation asks again after finding less room than it asked for. Bounded:
/// contention only shrinks the ask.
const RESERVE_ATTEMPTS: usize = 8;

/// The crawl records of a store.
pub trait CrawlRecords: Send + Sync {
    /// Creates the crawl unless it exists. Returns the stored crawl and whether it was created.
    fn insert_crawl(
        &self,
        crawl: &Crawl,
    ) -> impl Future<Output = StoreResult<(Crawl, bool)>> + Send;

    fn read_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<Option<Crawl>>> + Send;

    /// Crawls in `state` (all crawls when None), through the index: never a table scan.
    fn query_crawls(
        &self,
        state: Option<CrawlState>,
    ) -> impl Future<Output = StoreResult<Vec<Crawl>>> + Send;

    /// Persists `update` in one conditional write: `Done` with the crawl before it, or `Refused`
    /// with the crawl as it stands (None: there is no such crawl, and none is created).
    ///
    /// An update that adds calls (`CrawlChanges::calls`) holds this write's own calls
    /// ([`own_calls`](Self::own_calls)): a store that counts its calls counts those as
    /// reported, and gives them back to the next report when the write fails (not when the
    /// crawl is gone).
    fn apply_crawl(
        &self,
        id: &CrawlId,
        update: &CrawlUpdate,
    ) -> impl Future<Output = StoreResult<Applied<Crawl>>> + Send;

    fn remove_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<()>> + Send;

    /// Persists a call report (`transition::add_calls`, a request, its own calls included):
    /// true once it is applied (by this try, or an earlier one whose answer was lost), false
    /// when there is no such crawl. A store whose reports have a place of their own writes
    /// them there (DynamoDB: the crawl's report lanes, `trawl_domain::report`), and its
    /// `read_crawl` counts them in the crawl's `calls`; by default, `apply_crawl`.
    fn report_calls(
        &self,
        id: &CrawlId,
        update: &CrawlUpdate,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        async move { Ok(self.apply_crawl(id, update).await?.is_done()) }
    }

    /// The calls one `report_calls` is counted as, when this store counts its calls (empty
    /// when it does not).
    fn own_calls(&self) -> CallTally;

    /// This worker's page slots (`budget`), for a store shared by many workers: then page
    /// slots are taken from the crawl record in chunks. None: each reservation writes.
    fn page_budget(&self) -> Option<&PageBudget>;
}

/// The crawl operations, written once over [`CrawlRecords`] (every store has them).
pub trait CrawlStore: CrawlRecords {
    /// Creates the crawl unless it exists. Returns the stored crawl and whether it was created.
    fn create_crawl(
        &self,
        crawl: &Crawl,
    ) -> impl Future<Output = StoreResult<(Crawl, bool)>> + Send;

    fn get_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<Option<Crawl>>> + Send;

    /// Crawls in `state` (all crawls when None), through the index: never a table scan.
    fn list_crawls(
        &self,
        state: Option<CrawlState>,
    ) -> impl Future<Output = StoreResult<Vec<Crawl>>> + Send;

    /// `running` → `completed` for `generation`, written with `completer` (an id the caller
    /// drew for this completion alone; `transition::complete`); true only for the one caller
    /// that made the change, and again for its repeat (same `completer`): a completion applied
    /// while its answer was lost must still send its delivery notice when it is tried again.
    fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        completer: &str,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Replaces the crawl's configuration (an operator's `trawl config set`, a seed request
    /// that asks to update it). False when there is no such crawl.
    fn update_config(
        &self,
        id: &CrawlId,
        config: &CrawlConfig,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Replaces the crawl's checkpoint (`Crawl::checkpoint`; None clears it). False when there
    /// is no such crawl.
    fn set_checkpoint(
        &self,
        id: &CrawlId,
        checkpoint: Option<&str>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Adds `n` to the crawl's `reference_misses` (one atomic add). False when there is no
    /// such crawl.
    fn add_reference_misses(
        &self,
        id: &CrawlId,
        n: u64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Replaces the crawl's water level (`Crawl::level`, `trawl_domain::estimate`). False when
    /// there is no such crawl.
    fn set_level(
        &self,
        id: &CrawlId,
        level: Level,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Takes the writing of the crawl's delivery for `holder` until `until`, unless another
    /// holder's lease is live at `now` (`transition::claim_delivery`); its own lease is renewed.
    /// One conditional write: of concurrent claimers exactly one wins. False, changing nothing,
    /// when refused or when there is no such crawl.
    fn claim_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
        until: Millis,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Ends `holder`'s delivery lease, if it still holds it (a call that paused or finished:
    /// the next one need not wait the lease out).
    fn release_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// `completed` → `running` with `generation + 1` (a recrawl round or a retry starts).
    /// True only for the one caller that made the change.
    fn reopen_crawl(
        &self,
        id: &CrawlId,
        now: Millis,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Takes up to `wanted` of the crawl's `max` task slots; returns how many were granted
    /// (possibly 0). Atomic: the sum granted never exceeds `max`, whatever the concurrency.
    fn reserve_pages(
        &self,
        id: &CrawlId,
        wanted: u64,
        max: u64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Gives back slots that were reserved but not used (the URL was already known). Stores
    /// shared by many workers hand slots out in chunks (`budget::PageBudget`): there the slots
    /// go back to the worker's chunk, and only the first reservation of a chunk writes.
    fn release_pages(&self, id: &CrawlId, n: u64) -> impl Future<Output = StoreResult<()>> + Send;

    /// Adds `share` to the crawl's call totals (`Crawl::calls`) in one atomic write
    /// (`CrawlRecords::report_calls`). The write's own calls are part of the add
    /// (`CrawlRecords::own_calls`), so reporting costs nothing unaccounted. `NoSuchCrawl` when
    /// the crawl does not exist (the write never creates one).
    ///
    /// Cost: one write per report (`crate::calls::report`). The crawler reports once per batch
    /// and crawl: a Lambda batch holds up to 10 messages, so at least 0.1 write per URL, more
    /// when batches run short. Per crawl, not per URL: the seeder once per invocation, the
    /// sweeper once per crawl it sweeps (twice when it completes one), the deliverer twice per
    /// delivery. It is a request (tried again with its id when its answer is lost, added once):
    /// on DynamoDB one UpdateItem of one of the crawl's 32 report lanes (1 WRU: a lane holds
    /// counts and a few entries; `trawl_domain::report`), no read.
    fn add_calls(
        &self,
        id: &CrawlId,
        share: &CallTally,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    fn delete_crawl(&self, id: &CrawlId) -> impl Future<Output = StoreResult<()>> + Send;
}

impl<R: CrawlRecords> CrawlStore for R {
    async fn create_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        self.insert_crawl(crawl).await
    }

    async fn get_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        self.read_crawl(id).await
    }

    async fn list_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        self.query_crawls(state).await
    }

    async fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        completer: &str,
        now: Millis,
    ) -> StoreResult<bool> {
        let update = transition::complete(generation, completer, now);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn update_config(
        &self,
        id: &CrawlId,
        config: &CrawlConfig,
        now: Millis,
    ) -> StoreResult<bool> {
        let update = transition::update_config(config, now);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn set_checkpoint(&self, id: &CrawlId, checkpoint: Option<&str>) -> StoreResult<bool> {
        let update = transition::set_checkpoint(checkpoint);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn add_reference_misses(&self, id: &CrawlId, n: u64) -> StoreResult<bool> {
        let update = transition::add_reference_misses(n);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn set_level(&self, id: &CrawlId, level: Level) -> StoreResult<bool> {
        Ok(self
            .apply_crawl(id, &transition::set_level(level))
            .await?
            .is_done())
    }

    async fn claim_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
        until: Millis,
        now: Millis,
    ) -> StoreResult<bool> {
        let update = transition::claim_delivery(holder, until, now);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn release_delivery(&self, id: &CrawlId, holder: &str) -> StoreResult<()> {
        // Refused: the lease was taken over after it expired, or the crawl is gone.
        self.apply_crawl(id, &transition::release_delivery(holder))
            .await
            .map(drop)
    }

    async fn reopen_crawl(&self, id: &CrawlId, now: Millis) -> StoreResult<bool> {
        let update = transition::reopen(now);
        Ok(self.apply_crawl(id, &update).await?.is_done())
    }

    async fn reserve_pages(&self, id: &CrawlId, wanted: u64, max: u64) -> StoreResult<u64> {
        match self.page_budget() {
            Some(budget) => {
                budget
                    .reserve(id, wanted, max, |ask| take_pages(self, id, ask, max))
                    .await
            }
            None => Ok(take_pages(self, id, wanted, max).await?.granted),
        }
    }

    async fn release_pages(&self, id: &CrawlId, n: u64) -> StoreResult<()> {
        if n == 0
            || self
                .page_budget()
                .is_some_and(|budget| budget.release(id, n))
        {
            return Ok(());
        }
        match self.apply_crawl(id, &transition::release_pages(n)).await? {
            Applied::Done { .. } | Applied::Landed { .. } => Ok(()),
            Applied::Refused { .. } => Err(StoreError::NoSuchCrawl(id.clone())),
        }
    }

    async fn add_calls(&self, id: &CrawlId, share: &CallTally) -> StoreResult<()> {
        let mut share = share.clone();
        for (call, n) in self.own_calls() {
            *share.entry(call).or_default() += n;
        }
        let update = transition::add_calls(&share, RequestId(fastrand::u64(..)));
        let retries = AtomicU64::new(0);
        let applied = persist(
            &SystemClock,
            "add the calls",
            &Backoff::BRIEF,
            &retries,
            || self.report_calls(id, &update),
        )
        .await?;
        match applied {
            true => Ok(()),
            // The crawl is gone: its calls, this one included, go with it.
            false => Err(StoreError::NoSuchCrawl(id.clone())),
        }
    }

    async fn delete_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        if let Some(budget) = self.page_budget() {
            budget.forget(id);
        }
        self.remove_crawl(id).await
    }
}

/// Raises the crawl's `pages_reserved` by up to `ask`, never past `max`: one conditional add,
/// optimistic; when the crawl has less room, it asks again for the room the refusal shows.
async fn take_pages<R: CrawlRecords + ?Sized>(
    records: &R,
    id: &CrawlId,
    ask: u64,
    max: u64,
) -> StoreResult<Taken> {
    let mut ask = ask.min(max);
    let mut reserved = max;
    for _ in 0..RESERVE_ATTEMPTS {
        if ask == 0 {
            break;
        }
        let update = transition::reserve_pages(ask, max, RequestId(fastrand::u64(..)));
        match apply_request(records, id, &update, "reserve page slots").await? {
            Applied::Done { before } => {
                return Ok(Taken {
                    granted: ask,
                    reserved: before.pages_reserved.saturating_add(ask),
                });
            }
            Applied::Landed { current } => {
                return Ok(Taken {
                    granted: ask,
                    reserved: current.pages_reserved,
                });
            }
            Applied::Refused {
                current: Some(current),
            } => {
                reserved = current.pages_reserved;
                ask = ask.min(max.saturating_sub(reserved));
            }
            Applied::Refused { current: None } => return Err(StoreError::NoSuchCrawl(id.clone())),
        }
    }
    Ok(Taken {
        granted: 0,
        reserved,
    })
}

/// Persists `update`, a request, trying it again with the same id while the store is
/// unavailable: a try whose write landed while its answer was lost is answered `Landed` by the
/// next one, never applied twice.
async fn apply_request<R: CrawlRecords + ?Sized>(
    records: &R,
    id: &CrawlId,
    update: &CrawlUpdate,
    what: &str,
) -> StoreResult<Applied<Crawl>> {
    let retries = AtomicU64::new(0);
    persist(&SystemClock, what, &Backoff::BRIEF, &retries, || {
        records.apply_crawl(id, update)
    })
    .await
}
