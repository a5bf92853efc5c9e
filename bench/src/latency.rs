//! A store and a queue that take as long as DynamoDB and SQS would: [`Latency`] waits a round
//! trip before each call to what it wraps (the in-memory store, as a layer around its calls:
//! [`LatentStore`]; the local queue: [`Latent`]), and counts the round trips. Calls that the
//! AWS adapters make as several requests are priced as they make them: a lookup of known tasks
//! is one BatchGetItem per 100 ids; a listing of host records is one Query and then the records
//! read 100 a BatchGetItem, 4 of those at once (`DynamoStore::list_hosts`); a send of messages is one SendMessageBatch per
//! 10, one after the other (`SqsQueue::send`). Everything else is one request. An object store
//! likewise ([`LatentBlobs`]: S3).

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use trawl_core::blob::{Appended, BlobResult, BlobStore, BlobUpload, Body, ListPage, ObjectMeta};
use trawl_core::queue::{QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use trawl_core::store::StoreResult;
use trawl_core::store::layer::{Call, Layer, Layered, Outcome};

/// Keys per BatchGetItem (task ids, host records).
const KEYS_PER_BATCH: usize = 100;
/// BatchGetItems the DynamoDB adapter makes at once while listing hosts.
const HOST_BATCHES_AT_ONCE: usize = 4;
/// Messages per SendMessageBatch.
const SEND_BATCH: usize = 10;

/// A network: each request waits `round_trip` (none while `round_trip` is zero).
pub struct Latency {
    round_trip: Duration,
    requests: AtomicU64,
}

impl Latency {
    pub fn new(round_trip: Duration) -> Self {
        Self {
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

/// A store behind a network.
pub type LatentStore<S> = Layered<S, Latency>;

impl Layer for Latency {
    type Before = ();

    async fn before(&self, call: &Call<'_>) -> StoreResult<()> {
        match call {
            Call::Known { ids, .. } => {
                self.wait(ids.len().div_ceil(KEYS_PER_BATCH).max(1) as u64)
                    .await;
            }
            // Priced from the page it returns.
            Call::ListHosts { .. } => {}
            _ => self.wait(1).await,
        }
        Ok(())
    }

    async fn after(&self, _: &Call<'_>, (): (), outcome: Outcome<'_>) -> StoreResult<()> {
        if let Outcome::Hosts(page) = outcome {
            // The Query, then the records (the index projects none of their fields).
            let batches = page.hosts.len().div_ceil(KEYS_PER_BATCH);
            let rounds = batches.div_ceil(HOST_BATCHES_AT_ONCE);
            self.wait(1 + rounds as u64).await;
            self.requests
                .fetch_add((batches - rounds) as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A queue behind a network.
pub struct Latent<Q> {
    pub inner: Q,
    latency: Latency,
}

impl<Q> Latent<Q> {
    pub fn new(inner: Q, round_trip: Duration) -> Self {
        Self {
            inner,
            latency: Latency::new(round_trip),
        }
    }

    /// Requests made so far (each a round trip), and the count set back to zero.
    pub fn take_requests(&self) -> u64 {
        self.latency.take_requests()
    }
}

impl<Q: WorkQueue> WorkQueue for Latent<Q> {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        let batches = messages.len().div_ceil(SEND_BATCH) as u64;
        self.latency.wait(batches).await;
        self.inner.send(messages).await
    }

    async fn receive(&self, max: u32, wait_ms: u64) -> QueueResult<Vec<Received>> {
        self.latency.wait(1).await;
        self.inner.receive(max, wait_ms).await
    }

    async fn ack(&self, receipts: &[String]) -> QueueResult<()> {
        self.latency.wait(1).await;
        self.inner.ack(receipts).await
    }

    async fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()> {
        self.latency.wait(1).await;
        self.inner.retry_later(receipt, delay_ms).await
    }

    fn is_drained(&self) -> Option<bool> {
        self.inner.is_drained()
    }
}

/// An object store behind a network: each call one request (a streamed upload: one, when it
/// starts; its parts are not priced).
/// It counts the bytes read too.
pub struct LatentBlobs<B> {
    pub inner: B,
    latency: Latency,
    bytes_read: AtomicU64,
}

impl<B> LatentBlobs<B> {
    pub fn new(inner: B, round_trip: Duration) -> Self {
        Self {
            inner,
            latency: Latency::new(round_trip),
            bytes_read: AtomicU64::new(0),
        }
    }

    /// Requests made so far (each a round trip), and the count set back to zero.
    pub fn take_requests(&self) -> u64 {
        self.latency.take_requests()
    }

    /// Bytes read so far (`get`, `get_range`), and the count set back to zero.
    pub fn take_bytes_read(&self) -> u64 {
        self.bytes_read.swap(0, Ordering::Relaxed)
    }

    fn note(&self, read: BlobResult<Option<Bytes>>) -> BlobResult<Option<Bytes>> {
        if let Ok(Some(bytes)) = &read {
            self.bytes_read
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        read
    }
}

impl<B: BlobStore> BlobStore for LatentBlobs<B> {
    fn gather_bytes(&self) -> u64 {
        self.inner.gather_bytes()
    }

    fn is_appending(&self, key: &str) -> bool {
        self.inner.is_appending(key)
    }

    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        self.latency.wait(1).await;
        self.inner.append(dir, records).await
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        self.latency.wait(1).await;
        self.note(self.inner.get_range(key, offset, length).await)
    }

    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        self.latency.wait(1).await;
        self.inner.put(key, body, meta).await
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        self.latency.wait(1).await;
        self.note(self.inner.get(key).await)
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        self.latency.wait(1).await;
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        self.latency.wait(1).await;
        self.inner.list(prefix).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> BlobResult<ListPage> {
        self.latency.wait(1).await;
        self.inner.list_page(prefix, start_after, limit).await
    }

    async fn upload(&self, key: &str, content_type: &str) -> BlobResult<impl BlobUpload> {
        self.latency.wait(1).await;
        self.inner.upload(key, content_type).await
    }
}
