//! A store and a queue that take as long as DynamoDB and SQS would: [`Latent`] waits a round
//! trip before each call to what it wraps (the in-memory store and queue), and counts the
//! round trips. Calls that the AWS adapters make as several requests are priced as they make
//! them: a listing of host records is one Query and then the records read 16 at a time
//! (`DynamoStore::list_hosts`); a send of messages is one SendMessageBatch per 10, one after the
//! other (`SqsQueue::send`). Everything else is one request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use trawl_core::queue::{QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{
    Applied, ClaimOutcome, CrawlRecords, FailOutcome, FinishOutcome, HostPage, HostStore, Seeded,
    StatusCounts, StoreResult, TaskPage, TaskQuery, TaskStore, TaskSummary,
};
use trawl_domain::calls::Call;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{FetchRecord, Lease, Millis, NewTask, Status, Task};

/// Host records the DynamoDB adapter reads at once while listing hosts.
const HOST_READS_AT_ONCE: usize = 16;
/// Messages per SendMessageBatch.
const SEND_BATCH: usize = 10;

/// `inner` behind a network: each request waits `round_trip` (none while `round_trip` is zero).
pub struct Latent<T> {
    pub inner: T,
    round_trip: Duration,
    requests: AtomicU64,
}

impl<T> Latent<T> {
    pub fn new(inner: T, round_trip: Duration) -> Self {
        Self {
            inner,
            round_trip,
            requests: AtomicU64::new(0),
        }
    }

    /// Requests made so far (each a round trip), and the count set back to zero.
    pub fn take_requests(&self) -> u64 {
        self.requests.swap(0, Ordering::Relaxed)
    }

    /// `n` requests one after the other.
    async fn wait(&self, n: u64) {
        self.requests.fetch_add(n, Ordering::Relaxed);
        let pause = self.round_trip * u32::try_from(n).unwrap_or(u32::MAX);
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// Methods that are one request each: wait, then call through.
macro_rules! one_request {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;)*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) -> $out {
                self.wait(1).await;
                self.inner.$name($($arg),*).await
            }
        )*
    };
}

impl<S: CrawlRecords> CrawlRecords for Latent<S> {
    one_request! {
        fn insert_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)>;
        fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>>;
        fn query_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>>;
        fn apply_crawl(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<Applied<Crawl>>;
        fn remove_crawl(&self, id: &CrawlId) -> StoreResult<()>;
    }

    fn own_call(&self) -> Option<Call> {
        self.inner.own_call()
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        self.inner.page_budget()
    }
}

impl<S: TaskStore> TaskStore for Latent<S> {
    one_request! {
        fn seed(&self, crawl_id: &CrawlId, tasks: &[NewTask], now: Millis) -> StoreResult<Vec<Seeded>>;
        fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>>;
        fn claim(&self, crawl_id: &CrawlId, task_id: &TaskId, lease_ms: u64, now: Millis) -> StoreResult<ClaimOutcome>;
        fn claim_in_turn(&self, crawl_id: &CrawlId, task_id: &TaskId, lease_ms: u64, now: Millis) -> StoreResult<ClaimOutcome>;
        fn finish(&self, lease: &Lease, record: &FetchRecord, now: Millis) -> StoreResult<FinishOutcome>;
        fn fail(&self, lease: &Lease, failure: &Failure, policy: &RetryPolicy, revisit: &Revisit, now: Millis) -> StoreResult<FailOutcome>;
        fn release(&self, lease: &Lease, now: Millis) -> StoreResult<bool>;
        fn add_stale(&self, crawl_id: &CrawlId, task_id: &TaskId, md5: &str) -> StoreResult<bool>;
        fn reschedule(&self, crawl_id: &CrawlId, task_id: &TaskId, from: &[Status], now: Millis) -> StoreResult<bool>;
        fn reset(&self, task: &Task, now: Millis) -> StoreResult<bool>;
        fn refresh(&self, task: &Task, lastmod: Millis, now: Millis) -> StoreResult<bool>;
        fn due_tasks(&self, crawl_id: &CrawlId, host: &str, limit: u32) -> StoreResult<Vec<TaskSummary>>;
        fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage>;
        fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts>;
        fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64>;
    }
}

impl<S: HostStore> HostStore for Latent<S> {
    one_request! {
        fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>>;
        fn put_host(&self, crawl_id: &CrawlId, host: &Host) -> StoreResult<bool>;
        fn add_seeded(&self, crawl_id: &CrawlId, name: &str, n: u64) -> StoreResult<Option<Host>>;
        fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64>;
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let page = self.inner.list_hosts(crawl_id, cursor, limit).await?;
        // The Query, then the records (the index projects none of their fields).
        let reads = page.hosts.len().div_ceil(HOST_READS_AT_ONCE) as u64;
        self.wait(1 + reads).await;
        self.requests
            .fetch_add(page.hosts.len() as u64 - reads, Ordering::Relaxed);
        Ok(page)
    }
}

impl<Q: WorkQueue> WorkQueue for Latent<Q> {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        self.wait(messages.len().div_ceil(SEND_BATCH) as u64).await;
        self.inner.send(messages).await
    }

    one_request! {
        fn receive(&self, max: u32, wait_ms: u64) -> QueueResult<Vec<Received>>;
        fn ack(&self, receipts: &[String]) -> QueueResult<()>;
        fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()>;
    }

    fn is_drained(&self) -> Option<bool> {
        self.inner.is_drained()
    }
}
