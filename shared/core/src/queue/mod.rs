//! The work queue: small JSON messages naming a task to crawl. SQS (`sqs`, FIFO or standard) or an
//! in-process queue (`local`) that the embedded backend rebuilds from the task table on start.
//!
//! Messages are hints, the task table is the truth: a duplicate message loses its claim and is
//! dropped; a lost one is found again by the sweeper.

pub mod local;

use serde::{Deserialize, Serialize};
use std::future::Future;
use thiserror::Error;
use trawl_domain::canonical::{CrawlId, TaskId};

/// A work message: which task to crawl. Small (SQS bills per 64 KB chunk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkMessage {
    pub crawl_id: CrawlId,
    pub task_id: TaskId,
    pub url: String,
    pub depth: u32,
    /// The politeness slot: `{host}#{n}`, n = task hash mod the crawl's per-host parallelism.
    /// It is the FIFO MessageGroupId, so one slot is never crawled by two workers at once.
    pub group: String,
}

impl WorkMessage {
    pub fn new(
        crawl_id: CrawlId,
        task_id: TaskId,
        url: &trawl_domain::canonical::CanonicalUrl,
        depth: u32,
        per_host: u32,
    ) -> Self {
        let group = format!("{}#{}", url.host(), task_id.shard(per_host.max(1)));
        Self {
            crawl_id,
            task_id,
            url: url.as_str().to_owned(),
            depth,
            group,
        }
    }
}

/// A message received from the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub message_id: String,
    /// Handle for `ack` / `retry_later`.
    pub receipt: String,
    /// The raw body: parsed by the consumer, so one malformed body never fails a batch.
    pub body: String,
    pub receive_count: u32,
}

#[derive(Debug, Error)]
pub enum QueueError {
    #[error("{operation}: queue unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
    },
    #[error("{operation}: {message}")]
    Backend {
        operation: &'static str,
        message: String,
    },
}

pub type QueueResult<T> = Result<T, QueueError>;

/// Result of a send: messages SQS refused are named, never dropped silently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub failed: Vec<(TaskId, String)>,
}

pub trait WorkQueue: Send + Sync {
    /// Sends in batches of 10. A message that cannot be sent is reported, not dropped.
    fn send(
        &self,
        messages: &[WorkMessage],
    ) -> impl Future<Output = QueueResult<SendReport>> + Send;

    /// Up to `max` messages (≤ 10), waiting up to `wait_ms` for the first.
    fn receive(
        &self,
        max: u32,
        wait_ms: u64,
    ) -> impl Future<Output = QueueResult<Vec<Received>>> + Send;

    /// Deletes handled messages.
    fn ack(&self, receipts: &[String]) -> impl Future<Output = QueueResult<()>> + Send;

    /// Makes a received message visible again after `delay_ms` (retry with backoff).
    fn retry_later(
        &self,
        receipt: &str,
        delay_ms: u64,
    ) -> impl Future<Output = QueueResult<()>> + Send;
}
