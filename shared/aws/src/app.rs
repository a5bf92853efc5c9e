//! The composition root on AWS: each reader's settings (`settings`) build its App from one set
//! of clients, with exactly the ports its variables name — the sweeper has no
//! bucket and the deliverer no crawl queue, so those are `Unwired`. A Lambda function's `main`
//! builds a [`Root`] once per cold start and its handler from it; `trawl --backend aws` builds
//! its App from `CliSettings` (read from the environment or a stack's outputs).

use crate::clients::{Clients, load_config};
use crate::dynamodb::{DUE_LIST_SETTLE_MS, DynamoStore};
use crate::s3::S3BlobStore;
use crate::settings::{
    CliSettings, CrawlerSettings, DelivererSettings, FromEnv, PriorityQueueSettings,
    SeederSettings, SettingsError, SweeperSettings,
};
use crate::sqs::SqsQueue;
use std::sync::Arc;
use trawl_core::app::{App, Ports, Unwired};
use trawl_core::blob::Layout;
use trawl_core::queue::WorkQueue;
use trawl_domain::calls::CallCounts;

/// Every port: the crawler's and the CLI's.
pub type AwsPorts = (DynamoStore, S3BlobStore, SqsQueue);
/// No bucket: the sweeper's.
pub type NoBlobs = (DynamoStore, Unwired, SqsQueue);
/// No crawl queue: the deliverer's.
pub type NoQueue = (DynamoStore, S3BlobStore, Unwired);

/// A reader's settings, and the App they build.
pub trait Wiring: FromEnv {
    type Ports: Ports;

    /// The App over `clients`, counting its calls into `calls`.
    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<Self::Ports>;
}

/// What a Lambda function builds once per cold start: its settings, the clients (for the
/// function's own ports besides the App's) and its App.
pub struct Root<W: Wiring> {
    pub settings: W,
    pub clients: Clients,
    pub app: Arc<App<W::Ports>>,
}

impl<W: Wiring> Root<W> {
    /// Reads the function's settings from the environment, then builds its clients and App.
    pub async fn from_env() -> Result<Self, SettingsError> {
        let settings = W::from_env()?;
        let clients = Clients::new(&load_config().await);
        let app = Arc::new(settings.app(&clients, Arc::new(CallCounts::default())));
        Ok(Self {
            settings,
            clients,
            app,
        })
    }

    /// The counters the App's adapters share, for the function's own ports.
    pub fn calls(&self) -> Arc<CallCounts> {
        self.app.calls.clone()
    }
}

/// The crawl queue at `url`, with the priority queue if one is named.
fn crawl_queue(
    clients: &Clients,
    calls: &Arc<CallCounts>,
    url: &str,
    priority: Option<&PriorityQueueSettings>,
) -> SqsQueue {
    let queue = SqsQueue::new(clients.sqs.clone(), url, calls.clone());
    match priority {
        Some(p) => queue.with_priority_queue(&p.url, p.from),
        None => queue,
    }
}

/// The table's store and the crawl queue; no bucket.
fn without_blobs(
    clients: &Clients,
    calls: Arc<CallCounts>,
    (table, shards): (&str, u32),
    queue: SqsQueue,
) -> App<NoBlobs> {
    let store = DynamoStore::new(clients.dynamodb.clone(), table, shards, calls.clone());
    App::new(store, Unwired, queue, calls).with_seeds_settle(DUE_LIST_SETTLE_MS)
}

/// The table's store, the bucket's blobs (under `prefix`) and `queue`.
fn with_blobs<Q: WorkQueue + 'static>(
    clients: &Clients,
    calls: Arc<CallCounts>,
    (table, shards): (&str, u32),
    (bucket, prefix): (&str, &str),
    queue: Q,
) -> App<(DynamoStore, S3BlobStore, Q)> {
    let store = DynamoStore::new(clients.dynamodb.clone(), table, shards, calls.clone());
    let blobs = S3BlobStore::new(clients.s3.clone(), bucket, calls.clone());
    App::new(store, blobs, queue, calls)
        .with_layout(Layout::new(prefix))
        .with_seeds_settle(DUE_LIST_SETTLE_MS)
}

impl Wiring for SeederSettings {
    type Ports = AwsPorts;

    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<AwsPorts> {
        let bucket = (self.bucket.as_str(), self.prefix.as_str());
        let queue = crawl_queue(
            clients,
            &calls,
            &self.queue_url,
            self.priority_queue.as_ref(),
        );
        with_blobs(clients, calls, (&self.table, self.shards), bucket, queue)
    }
}

impl Wiring for CrawlerSettings {
    type Ports = AwsPorts;

    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<AwsPorts> {
        let bucket = (self.bucket.as_str(), self.prefix.as_str());
        let queue = crawl_queue(
            clients,
            &calls,
            &self.queue_url,
            self.priority_queue.as_ref(),
        );
        with_blobs(clients, calls, (&self.table, self.shards), bucket, queue)
    }
}

impl Wiring for SweeperSettings {
    type Ports = NoBlobs;

    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<NoBlobs> {
        let queue = crawl_queue(
            clients,
            &calls,
            &self.queue_url,
            self.priority_queue.as_ref(),
        );
        without_blobs(clients, calls, (&self.table, self.shards), queue)
    }
}

impl Wiring for DelivererSettings {
    type Ports = NoQueue;

    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<NoQueue> {
        let bucket = (self.bucket.as_str(), self.prefix.as_str());
        with_blobs(clients, calls, (&self.table, self.shards), bucket, Unwired)
    }
}

impl Wiring for CliSettings {
    type Ports = AwsPorts;

    /// The crawler's ports, from the CLI's variables (the stack's outputs stand in for unset ones).
    fn app(&self, clients: &Clients, calls: Arc<CallCounts>) -> App<AwsPorts> {
        let bucket = (self.bucket.as_str(), self.prefix.as_str());
        let queue = crawl_queue(
            clients,
            &calls,
            &self.queue_url,
            self.priority_queue.as_ref(),
        );
        with_blobs(clients, calls, (&self.table, self.shards), bucket, queue)
    }
}
