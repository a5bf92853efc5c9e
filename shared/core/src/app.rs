//! The composition root's shape: an [`App`] holds the ports one binary is built with — its
//! store, blobs and queue, their key layout, the call counters the adapters share, and the
//! clock — and every service (`Seeder`, `Crawler`, `Sweeper`, `Deliverer`) is built once from
//! an `Arc<App<P>>` and reads its ports through it. The Lambda functions build their App from
//! the environment (`trawl_aws::app`), the CLI from a data directory or the environment, tests
//! from memory.
//!
//! The port types travel as one type parameter, [`Ports`] (a tuple `(store, blobs, queue)`), so
//! a service or a function over them says `P: Ports` instead of the bound of each port. A
//! function whose settings name no bucket (the seeder, the sweeper) or no crawl queue (the
//! deliverer) wires [`Unwired`] there: the type says the port is absent, and a use of it fails
//! with an error instead of reaching a resource the function was never given.

use crate::blob::{
    Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, Layout, ListPage, ObjectMeta,
};
use crate::clock::{Clock, SystemClock};
use crate::queue::{QueueError, QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use crate::store::{CrawlStore, HostStore, TaskStore};
use bytes::Bytes;
use std::sync::Arc;
use trawl_domain::calls::CallCounts;

/// The store ports every service uses, as one bound.
pub trait Store: TaskStore + CrawlStore + HostStore {}

impl<T: TaskStore + CrawlStore + HostStore> Store for T {}

/// The adapter types of one binary: `(store, blobs, queue)`.
pub trait Ports: Send + Sync + 'static {
    type Store: Store + 'static;
    type Blobs: BlobStore + 'static;
    type Queue: WorkQueue + 'static;
}

impl<S, B, Q> Ports for (S, B, Q)
where
    S: Store + 'static,
    B: BlobStore + 'static,
    Q: WorkQueue + 'static,
{
    type Store = S;
    type Blobs = B;
    type Queue = Q;
}

/// `App::seeds_settle_ms` by default: a store that lists a task as soon as it is written
/// (SQLite, memory) needs only the seeder's own writes after the count to land.
pub const SEEDS_SETTLE_MS: u64 = 1_000;

/// The ports one binary is built with, built once and shared by its services.
pub struct App<P: Ports> {
    pub store: P::Store,
    pub blobs: P::Blobs,
    pub queue: P::Queue,
    /// Where bodies and deliveries go in the blob store.
    pub layout: Layout,
    /// The counters the adapters share: each service adds its calls to its crawls.
    pub calls: Arc<CallCounts>,
    /// The time the services decide by (a virtual one in tests).
    pub clock: Arc<dyn Clock>,
    /// How long after a host's URLs are counted their tasks may still be unlisted in its due
    /// list (`Host::seeded_at`): the seeder's writes after the count, and the store's index lag.
    pub seeds_settle_ms: u64,
}

impl<S, B, Q> App<(S, B, Q)>
where
    S: Store + 'static,
    B: BlobStore + 'static,
    Q: WorkQueue + 'static,
{
    /// An App on the system clock with the default layout; `calls` is what the adapters count
    /// into.
    pub fn new(store: S, blobs: B, queue: Q, calls: Arc<CallCounts>) -> Self {
        Self {
            store,
            blobs,
            queue,
            layout: Layout::default(),
            calls,
            clock: Arc::new(SystemClock),
            seeds_settle_ms: SEEDS_SETTLE_MS,
        }
    }
}

impl<P: Ports> App<P> {
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The same App reading the time from `clock` (a virtual one in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The same App over a store whose due lists may lag its writes by up to `settle_ms`.
    pub fn with_seeds_settle(mut self, settle_ms: u64) -> Self {
        self.seeds_settle_ms = settle_ms;
        self
    }
}

/// A port a binary is not built with (see the module doc): every operation fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unwired;

impl Unwired {
    const REASON: &'static str = "not wired in this binary";

    fn blob_error(operation: &'static str, key: &str) -> BlobError {
        BlobError::backend(operation, key, Self::REASON)
    }

    fn queue_error(operation: &'static str) -> QueueError {
        QueueError::backend(operation, Self::REASON)
    }
}

impl BlobStore for Unwired {
    async fn put(&self, key: &str, _: Body, _: &ObjectMeta) -> BlobResult<()> {
        Err(Self::blob_error("put", key))
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        Err(Self::blob_error("get", key))
    }

    fn gather_bytes(&self) -> u64 {
        0
    }

    fn is_appending(&self, _: &str) -> bool {
        false
    }

    async fn append(&self, dir: &str, _: Bytes) -> BlobResult<Appended> {
        Err(Self::blob_error("append", dir))
    }

    async fn get_range(&self, key: &str, _: u64, _: u64) -> BlobResult<Option<Bytes>> {
        Err(Self::blob_error("get_range", key))
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        Err(Self::blob_error("delete", key))
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        Err(Self::blob_error("list", prefix))
    }

    async fn list_page(&self, prefix: &str, _: Option<&str>, _: u32) -> BlobResult<ListPage> {
        Err(Self::blob_error("list", prefix))
    }

    async fn upload(&self, key: &str, _: &str) -> BlobResult<impl BlobUpload> {
        Err::<Unwired, _>(Self::blob_error("upload", key))
    }
}

/// Never started: [`Unwired::upload`] fails.
impl BlobUpload for Unwired {
    async fn write(&mut self, _: &[u8]) -> BlobResult<()> {
        Err(Self::blob_error("upload", ""))
    }

    async fn complete(self) -> BlobResult<()> {
        Err(Self::blob_error("upload", ""))
    }

    async fn abort(self) -> BlobResult<()> {
        Ok(())
    }
}

impl WorkQueue for Unwired {
    async fn send(&self, _: &[WorkMessage]) -> QueueResult<SendReport> {
        Err(Self::queue_error("send"))
    }

    async fn receive(&self, _: u32, _: u64) -> QueueResult<Vec<Received>> {
        Err(Self::queue_error("receive"))
    }

    async fn ack(&self, _: &[String]) -> QueueResult<()> {
        Err(Self::queue_error("ack"))
    }

    async fn retry_later(&self, _: &str, _: u64) -> QueueResult<()> {
        Err(Self::queue_error("retry later"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unwired_port_refuses_every_operation() {
        assert!(Unwired.get("k").await.is_err());
        assert!(Unwired.upload("k", "text/plain").await.is_err());
        assert!(Unwired.send(&[]).await.is_err());
        assert!(Unwired.receive(1, 0).await.is_err());
    }
}
