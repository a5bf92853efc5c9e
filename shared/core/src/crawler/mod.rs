//! The crawler: for each work message, claim → fetch → store → discover → finish (or fail).
//! The Lambda function and the CLI's workers both run this; they differ only in how they hand
//! messages back (`Disposition`).

mod record;
mod seen;

pub use record::{RecordError, StoredPage, record_page};

use crate::blob::{BlobStore, Layout};
use crate::clock::{Clock, SystemClock};
use crate::discover::{ScopeMatcher, extract_links};
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher};
use crate::frontier::{FrontierError, seed_tasks};
use crate::queue::{Received, WorkMessage, WorkQueue};
use crate::store::{ClaimOutcome, ClaimRejection, CrawlStore, FailOutcome, StoreError, TaskStore};
use futures_util::StreamExt;
use futures_util::stream;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::RwLock;
use tracing::Instrument;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::Crawl;
use trawl_domain::retry::Failure;
use trawl_domain::task::{ErrorKind, FetchRecord, Lease, Millis, NewTask, Task};

/// How long a crawl's config is cached in a worker before it is read again.
const CRAWL_CACHE_TTL: Duration = Duration::from_secs(60);
/// Longest a message is held back (SQS's visibility limit is 12 h).
const MAX_HOLD_MS: u64 = 12 * 3600 * 1000;
/// Back-off for a message whose processing hit a storage error.
const INTERNAL_RETRY_MS: u64 = 5_000;

/// What to do with a message once processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Handled (or nothing left to do): delete it.
    Done,
    /// Make it visible again after this many milliseconds (a retry with backoff, a task not
    /// due yet, or work handed back near the deadline).
    RetryAfter(u64),
    /// Leave it to come back after the queue's visibility timeout, and eventually reach the
    /// dead-letter queue (malformed bodies). Never silently dropped.
    Reject(String),
}

/// One message's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageResult {
    pub message_id: String,
    pub receipt: String,
    pub disposition: Disposition,
    /// What happened, for logs and progress.
    pub outcome: Outcome,
}

/// What processing a message did to its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Stored (or recorded, for content not stored) and succeeded.
    Succeeded {
        bytes: u64,
        put: bool,
    },
    /// 304 or same md5: succeeded without a PUT.
    Unchanged,
    Retrying,
    GaveUp,
    /// Duplicate or stale message: the task was done, leased elsewhere, or gone.
    Skipped,
    /// Not started: too close to the deadline.
    HandedBack,
    Malformed,
    Error,
}

#[derive(Debug, Error)]
pub enum CrawlerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Frontier(#[from] FrontierError),
}

/// Work messages waiting to be sent at the end of a batch.
type Outbox = std::sync::Mutex<Vec<WorkMessage>>;

/// A received message and its parsed body (or why it does not parse).
type Parsed = (Received, Result<WorkMessage, String>);

/// A crawl's config with its scope compiled, cached per worker.
struct CrawlContext {
    crawl: Crawl,
    scope: ScopeMatcher,
    loaded: Instant,
}

/// Per-process crawler state: ports, the HTTP client, and a small crawl-config cache.
/// Build it once per cold start and share it between invocations.
pub struct Crawler<S, B, Q> {
    store: S,
    blobs: B,
    queue: Q,
    /// The counters the adapters share: each batch adds its calls to its crawls.
    calls: Arc<CallCounts>,
    fetcher: Arc<Fetcher>,
    layout: Layout,
    concurrency: usize,
    crawls: RwLock<HashMap<CrawlId, Arc<CrawlContext>>>,
    seen: seen::SeenLinks,
    clock: Arc<dyn Clock>,
}

impl<S, B, Q> Crawler<S, B, Q>
where
    S: TaskStore + CrawlStore,
    B: BlobStore,
    Q: WorkQueue,
{
    pub fn new(
        store: S,
        blobs: B,
        queue: Q,
        fetcher: Arc<Fetcher>,
        layout: Layout,
        concurrency: usize,
        calls: Arc<CallCounts>,
    ) -> Self {
        Self {
            store,
            blobs,
            queue,
            calls,
            fetcher,
            layout,
            concurrency: concurrency.max(1),
            crawls: RwLock::default(),
            seen: seen::SeenLinks::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same crawler reading the time from `clock` (a virtual one in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn blobs(&self) -> &B {
        &self.blobs
    }

    pub fn queue(&self) -> &Q {
        &self.queue
    }

    pub fn calls(&self) -> &CallCounts {
        &self.calls
    }

    /// Processes a batch. Messages of one politeness slot (`group`) run one after another with
    /// the host's delay between them; slots run concurrently, at most `concurrency` at once.
    /// Nothing is started once `deadline` is near: those messages are handed back untouched.
    /// Ends by adding the batch's calls to its crawls (`crate::calls`).
    pub async fn process_batch(
        &self,
        batch: Vec<Received>,
        deadline: Option<Instant>,
    ) -> Vec<MessageResult> {
        let mut groups: Vec<(String, Vec<Parsed>)> = Vec::new();
        // Messages per crawl: the weights the batch's calls are shared by.
        let mut crawls: Vec<(CrawlId, u64)> = Vec::new();
        for received in batch {
            let parsed =
                serde_json::from_str::<WorkMessage>(&received.body).map_err(|e| e.to_string());
            if let Ok(message) = &parsed {
                match crawls.iter_mut().find(|(id, _)| *id == message.crawl_id) {
                    Some((_, n)) => *n += 1,
                    None => crawls.push((message.crawl_id.clone(), 1)),
                }
            }
            // A malformed body is a group of its own: it must not hold anything back.
            let group = match &parsed {
                Ok(m) => m.group.clone(),
                Err(_) => format!("malformed#{}", received.message_id),
            };
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, members)) => members.push((received, parsed)),
                None => groups.push((group, vec![(received, parsed)])),
            }
        }
        // Messages of the links the batch discovers, sent together at its end.
        let outbox = std::sync::Mutex::new(Vec::new());
        let results = stream::iter(groups)
            .map(|(_, members)| self.process_group(members, deadline, &outbox))
            .buffer_unordered(self.concurrency)
            .flat_map(stream::iter)
            .collect::<Vec<_>>()
            .await;
        self.send_outbox(outbox).await;
        crate::calls::report_shared(&self.store, &self.calls, &crawls).await;
        results
    }

    async fn process_group(
        &self,
        members: Vec<Parsed>,
        deadline: Option<Instant>,
        outbox: &Outbox,
    ) -> Vec<MessageResult> {
        let mut results = Vec::with_capacity(members.len());
        let mut previous_delay: Option<Duration> = None;
        for (received, parsed) in members {
            let (disposition, outcome) = match parsed {
                Err(why) => {
                    tracing::warn!(message_id = %received.message_id, error = %why, "malformed work message");
                    (
                        Disposition::Reject(format!("malformed message: {why}")),
                        Outcome::Malformed,
                    )
                }
                Ok(message) => {
                    if let Some(delay) = previous_delay.take() {
                        tokio::time::sleep(delay).await;
                    }
                    // A span per message, carried by its future (never entered across an await:
                    // messages run concurrently).
                    let span = tracing::info_span!(
                        "message",
                        message_id = %received.message_id,
                        crawl = %message.crawl_id,
                        task = %message.task_id
                    );
                    let (disposition, outcome, delay) = self
                        .process_message(&message, deadline, outbox)
                        .instrument(span)
                        .await;
                    previous_delay = delay;
                    (disposition, outcome)
                }
            };
            results.push(MessageResult {
                message_id: received.message_id,
                receipt: received.receipt,
                disposition,
                outcome,
            });
        }
        results
    }

    /// One message. Returns the disposition, the outcome and the politeness delay owed to the
    /// host before its next request.
    async fn process_message(
        &self,
        message: &WorkMessage,
        deadline: Option<Instant>,
        outbox: &Outbox,
    ) -> (Disposition, Outcome, Option<Duration>) {
        let context = match self.context(&message.crawl_id).await {
            Ok(Some(context)) => context,
            Ok(None) => {
                tracing::warn!("no such crawl (purged?): message dropped");
                return (Disposition::Done, Outcome::Skipped, None);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot read crawl");
                return (
                    Disposition::RetryAfter(INTERNAL_RETRY_MS),
                    Outcome::Error,
                    None,
                );
            }
        };
        let config = &context.crawl.config;
        // A fetch may take its whole timeout; do not start one that cannot finish in time.
        let needed = Duration::from_millis(config.fetch.timeout_ms + 2_000);
        if deadline.is_some_and(|d| d.saturating_duration_since(Instant::now()) < needed) {
            return (Disposition::RetryAfter(0), Outcome::HandedBack, None);
        }
        let now = self.clock.now_ms();
        let (task, lease) = match self
            .store
            .claim(&message.crawl_id, &message.task_id, config.lease_ms, now)
            .await
        {
            Ok(ClaimOutcome::Claimed { task, lease }) => (*task, lease),
            Ok(ClaimOutcome::Rejected(ClaimRejection::NotDue { at })) => {
                let wait = (at - now).clamp(0, MAX_HOLD_MS as Millis) as u64;
                return (Disposition::RetryAfter(wait), Outcome::Skipped, None);
            }
            // Done, gone, or another worker holds it (the sweeper recovers it if that one dies).
            Ok(ClaimOutcome::Rejected(why)) => {
                tracing::debug!(?why, "claim rejected: duplicate message dropped");
                return (Disposition::Done, Outcome::Skipped, None);
            }
            Err(e) => {
                tracing::error!(error = %e, "claim failed");
                return (
                    Disposition::RetryAfter(INTERNAL_RETRY_MS),
                    Outcome::Error,
                    None,
                );
            }
        };
        let delay = self.politeness_delay(&task, &context).await;
        match self.crawl_claimed(&context, &task, &lease, outbox).await {
            Ok((disposition, outcome)) => (disposition, outcome, delay),
            Err(e) => {
                // Give the task back so it need not wait for its lease to expire.
                tracing::error!(error = %e, "processing failed; task released");
                if let Err(release) = self.store.release(&lease, self.clock.now_ms()).await {
                    tracing::warn!(error = %release, "release failed; the lease will expire");
                }
                (
                    Disposition::RetryAfter(INTERNAL_RETRY_MS),
                    Outcome::Error,
                    delay,
                )
            }
        }
    }

    /// Sends the batch's discovered links in full batches of 10. A message that cannot be sent
    /// leaves its task `pending` without a message: the sweeper re-enqueues it.
    async fn send_outbox(&self, outbox: Outbox) {
        let messages = outbox
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if messages.is_empty() {
            return;
        }
        match self.queue.send(&messages).await {
            Ok(report) if report.failed.is_empty() => {}
            Ok(report) => tracing::warn!(
                failed = report.failed.len(),
                "links not enqueued; the sweeper will"
            ),
            Err(e) => tracing::warn!(error = %e, "links not enqueued; the sweeper will"),
        }
    }

    async fn politeness_delay(&self, task: &Task, context: &CrawlContext) -> Option<Duration> {
        let config = &context.crawl.config;
        let configured = Duration::from_millis(config.politeness.delay_ms);
        let robots = match CanonicalUrl::parse(&task.url) {
            Ok(url) => self.fetcher.crawl_delay(&url, config).await,
            Err(_) => None,
        };
        let delay = robots.map_or(configured, |r| r.max(configured));
        (!delay.is_zero()).then_some(delay)
    }

    /// Fetch, store, discover and record a claimed task.
    async fn crawl_claimed(
        &self,
        context: &CrawlContext,
        task: &Task,
        lease: &Lease,
        outbox: &Outbox,
    ) -> Result<(Disposition, Outcome), CrawlerError> {
        let config = &context.crawl.config;
        let url = match CanonicalUrl::parse(&task.url) {
            Ok(url) => url,
            Err(e) => {
                let failure = Failure::new(ErrorKind::InvalidContent, e.to_string());
                return self.fail(context, lease, &failure).await;
            }
        };
        let now = self.clock.now_ms();
        let request = FetchRequest {
            url: &url,
            config,
            previous: task.fetch.as_ref(),
            scope: &context.scope,
            depth: task.depth,
            now,
        };
        let next_fetch_at = config.recrawl.interval_ms.map(|i| now + i as Millis);
        match self.fetcher.fetch(request).await {
            FetchOutcome::Failed(failure) => self.fail(context, lease, &failure).await,
            FetchOutcome::NotModified(not_modified) => {
                // The stored content stands: refresh the validators, no PUT.
                let previous = task.fetch.clone().unwrap_or_default();
                let record = FetchRecord {
                    etag: not_modified.etag.or(previous.etag.clone()),
                    last_modified: not_modified
                        .last_modified
                        .or(previous.last_modified.clone()),
                    fetched_at: now,
                    next_fetch_at,
                    ..previous
                };
                let stored = record_page(
                    &self.store,
                    &self.blobs,
                    &self.layout,
                    task,
                    lease,
                    &url,
                    record,
                    None,
                    self.clock.now_ms(),
                )
                .await?;
                let outcome = match stored {
                    StoredPage::Finished { .. } => Outcome::Unchanged,
                    StoredPage::LostLease => Outcome::Skipped,
                };
                Ok((Disposition::Done, outcome))
            }
            FetchOutcome::Fetched(page) => {
                let final_url = (page.final_url != url).then(|| page.final_url.as_str().to_owned());
                let record = FetchRecord {
                    object_key: None,
                    md5: page.body.as_ref().map(|b| b.md5_hex()),
                    http_status: page.status,
                    content_type: page.content_type.clone(),
                    content_length: page
                        .body
                        .as_ref()
                        .map_or(page.content_length.unwrap_or(0), |b| b.bytes.len() as u64),
                    etag: page.etag.clone(),
                    last_modified: page.last_modified.clone(),
                    final_url,
                    redirects: page.redirects,
                    fetched_at: now,
                    next_fetch_at,
                };
                // Links first: if seeding them fails, the task is retried and nothing is lost.
                // An unchanged body has the links its previous fetch already seeded.
                let unchanged = record.md5.is_some()
                    && record.md5.as_deref() == task.fetch.as_ref().and_then(|f| f.md5.as_deref());
                if let Some(body) = &page.body
                    && page.is_html()
                    && config.scope.follow_links
                    && !unchanged
                {
                    self.discover(context, task, page.final_url.as_url(), &body.bytes, outbox)
                        .await?;
                }
                let bytes = record.content_length;
                let page_body = page.body.map(|b| (b.bytes, b.md5));
                match record_page(
                    &self.store,
                    &self.blobs,
                    &self.layout,
                    task,
                    lease,
                    &url,
                    record,
                    page_body,
                    self.clock.now_ms(),
                )
                .await?
                {
                    StoredPage::Finished { put } => {
                        let outcome = if put || task.fetch.is_none() {
                            Outcome::Succeeded { bytes, put }
                        } else {
                            Outcome::Unchanged
                        };
                        Ok((Disposition::Done, outcome))
                    }
                    StoredPage::LostLease => Ok((Disposition::Done, Outcome::Skipped)),
                }
            }
        }
    }

    async fn fail(
        &self,
        context: &CrawlContext,
        lease: &Lease,
        failure: &Failure,
    ) -> Result<(Disposition, Outcome), CrawlerError> {
        let now = self.clock.now_ms();
        tracing::info!(kind = ?failure.kind, error = %failure.message, "fetch failed");
        match self
            .store
            .fail(lease, failure, &context.crawl.config.retry, now)
            .await?
        {
            FailOutcome::Retrying { next_attempt_at } => {
                let wait = (next_attempt_at - now).clamp(0, MAX_HOLD_MS as Millis) as u64;
                Ok((Disposition::RetryAfter(wait), Outcome::Retrying))
            }
            FailOutcome::GaveUp { .. } => Ok((Disposition::Done, Outcome::GaveUp)),
            FailOutcome::Rejected => Ok((Disposition::Done, Outcome::Skipped)),
        }
    }

    /// Seeds the page's in-scope links one level deeper.
    async fn discover(
        &self,
        context: &CrawlContext,
        task: &Task,
        base: &url::Url,
        html: &[u8],
        outbox: &Outbox,
    ) -> Result<(), CrawlerError> {
        let depth = task.depth + 1;
        let crawl = &context.crawl;
        let links = extract_links(base, html);
        let tasks: Vec<NewTask> = links
            .urls
            .into_iter()
            .map(|url| context.scope.normalise(url))
            .filter(|url| context.scope.check(url, depth).is_ok())
            .filter(|url| {
                !self
                    .seen
                    .contains(crawl.created_at, crawl.id.as_str(), &url.task_id())
            })
            .map(|url| NewTask {
                url,
                depth,
                parent: Some(task.task_id.clone()),
            })
            .collect();
        if tasks.is_empty() {
            return Ok(());
        }
        let ids: Vec<_> = tasks.iter().map(|t| t.url.task_id()).collect();
        let (report, messages) = seed_tasks(&self.store, crawl, tasks, self.clock.now_ms()).await?;
        if let Ok(mut pending) = outbox.lock() {
            pending.extend(messages);
        }
        // The page itself exists too: pages linking back to it need not seed it again.
        if report.over_budget == 0 {
            let known = ids.iter().chain(std::iter::once(&task.task_id));
            self.seen
                .insert_all(crawl.created_at, crawl.id.as_str(), known);
        }
        tracing::debug!(
            new = report.accepted,
            known = report.already_known,
            over_budget = report.over_budget,
            "links"
        );
        Ok(())
    }

    async fn context(&self, crawl_id: &CrawlId) -> Result<Option<Arc<CrawlContext>>, StoreError> {
        if let Some(context) = self.crawls.read().await.get(crawl_id)
            && context.loaded.elapsed() < CRAWL_CACHE_TTL
        {
            return Ok(Some(context.clone()));
        }
        let Some(crawl) = self.store.get_crawl(crawl_id).await? else {
            return Ok(None);
        };
        let scope = match ScopeMatcher::new(&crawl.config.scope) {
            Ok(scope) => scope,
            Err(e) => {
                // The seeder validates scopes; a stored one that does not compile is corrupt.
                return Err(StoreError::Corrupt {
                    key: crawl_id.to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let context = Arc::new(CrawlContext {
            crawl,
            scope,
            loaded: Instant::now(),
        });
        self.crawls
            .write()
            .await
            .insert(crawl_id.clone(), context.clone());
        Ok(Some(context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::memory::MemoryBlobStore;
    use crate::clock::ManualClock;
    use crate::frontier::add_tasks;
    use crate::queue::local::LocalQueue;
    use crate::store::memory::MemoryStore;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::crawl::CrawlConfig;
    use trawl_domain::retry::RetryPolicy;
    use trawl_domain::task::Status;

    #[tokio::test]
    async fn backoff_and_leases_follow_the_crawlers_clock() {
        // GIVEN a crawler on a virtual clock far from the wall clock, and a URL whose host
        // refuses connections (a port bound, then freed)
        let t0: Millis = 1_000_000_000_000;
        let clock = ManualClock::at(t0);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = CrawlConfig::default();
        config.fetch.guard_exempt = vec![format!("127.0.0.1:{port}")];
        config.politeness.respect_robots = false;
        config.retry = RetryPolicy {
            max_retry: 3,
            base_delay_ms: 60_000,
            max_delay_ms: 3_600_000,
        };
        let crawl = Crawl::new(CrawlId::parse("clock").unwrap(), config, t0);
        let store = MemoryStore::new();
        store.create_crawl(&crawl).await.unwrap();
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let url = CanonicalUrl::parse(&format!("http://127.0.0.1:{port}/page")).unwrap();
        let task = NewTask {
            url: url.clone(),
            depth: 0,
            parent: None,
        };
        add_tasks(&store, &queue, &crawl, vec![task], t0)
            .await
            .unwrap();
        let crawler = Crawler::new(
            store,
            MemoryBlobStore::new(),
            queue,
            Arc::new(Fetcher::new("").unwrap()),
            Layout::default(),
            1,
            calls,
        )
        .with_clock(Arc::new(clock.clone()));

        // WHEN its message is processed
        let batch = crawler.queue().receive(10, 0).await.unwrap();
        let results = crawler.process_batch(batch, None).await;

        // THEN the failure backs off from the virtual now (half to the full base delay)
        assert_eq!(results[0].outcome, Outcome::Retrying);
        let id = url.task_id();
        let failed = crawler.store().get(&crawl.id, &id).await.unwrap().unwrap();
        assert_eq!((failed.status, failed.retries), (Status::Failed, 1));
        let next = failed.next_attempt_at.unwrap();
        assert!((t0 + 30_000..=t0 + 60_000).contains(&next), "{next}");
        assert_eq!(
            results[0].disposition,
            Disposition::RetryAfter((next - t0) as u64)
        );
        // AND the task is claimable exactly when the virtual clock reaches it, with a lease
        // counted from then
        clock.advance(next - t0 - 1);
        let early = crawler
            .store()
            .claim(&crawl.id, &id, 120_000, clock.now_ms())
            .await
            .unwrap();
        assert!(matches!(early, ClaimOutcome::Rejected(_)), "{early:?}");
        clock.advance(1);
        let ClaimOutcome::Claimed { lease, .. } = crawler
            .store()
            .claim(&crawl.id, &id, 120_000, clock.now_ms())
            .await
            .unwrap()
        else {
            panic!("due at {next}")
        };
        assert_eq!(lease.expires_at, next + 120_000);
    }
}
