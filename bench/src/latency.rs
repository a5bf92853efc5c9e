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
    Applied, CrawlRecords, HostCounts, HostPage, HostStore, InTurnClaims, Seeded, StatusCounts,
    StoreResult, TaskPage, TaskQuery, TaskRecords, TaskSummary,
};
use trawl_domain::calls::CallTally;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::request::RequestId;
use trawl_domain::task::Task;
use trawl_domain::transition::{Insert, Update};

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

    fn own_calls(&self) -> CallTally {
        self.inner.own_calls()
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        self.inner.page_budget()
    }
}

impl<S: TaskRecords> TaskRecords for Latent<S> {
    const IN_TURN_CLAIMS: InTurnClaims = S::IN_TURN_CLAIMS;

    async fn insert(&self, tasks: &[Insert]) -> StoreResult<Vec<Seeded>> {
        self.wait(1).await;
        self.inner.insert(tasks).await
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        self.wait(1).await;
        self.inner.get(crawl_id, task_id).await
    }

    async fn known(&self, crawl_id: &CrawlId, ids: &[TaskId]) -> StoreResult<Vec<bool>> {
        self.wait(ids.len().div_ceil(100).max(1) as u64).await;
        self.inner.known(crawl_id, ids).await
    }

    async fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> StoreResult<Applied<Task>> {
        self.wait(1).await;
        self.inner.apply(crawl_id, task_id, update).await
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        self.wait(1).await;
        self.inner.due_tasks(crawl_id, host, limit).await
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        self.wait(1).await;
        self.inner.query(query).await
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        self.wait(1).await;
        self.inner.counts(crawl_id).await
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        self.wait(1).await;
        self.inner.delete_tasks(crawl_id).await
    }
}

impl<S: HostStore> HostStore for Latent<S> {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        self.wait(1).await;
        self.inner.get_host(crawl_id, name).await
    }

    async fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        self.wait(1).await;
        self.inner.put_host(crawl_id, host, counted).await
    }

    async fn host_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<HostCounts>> {
        self.wait(1).await;
        self.inner.host_counts(crawl_id).await
    }

    async fn host_scan(&self, crawl_id: &CrawlId) -> StoreResult<Option<String>> {
        self.wait(1).await;
        self.inner.host_scan(crawl_id).await
    }

    async fn set_host_scan(&self, crawl_id: &CrawlId, at: Option<&str>) -> StoreResult<()> {
        self.wait(1).await;
        self.inner.set_host_scan(crawl_id, at).await
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> StoreResult<Option<Host>> {
        self.wait(1).await;
        self.inner.add_seeded(crawl_id, name, n, request).await
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        self.wait(1).await;
        self.inner.delete_hosts(crawl_id).await
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
