//! The work queue: small JSON messages naming a host whose turn it is. SQS (`sqs`, standard; FIFO
//! still works, without per-message delays) or an in-process queue (`local`) that the embedded
//! backend rebuilds from the task table and the host records on start.
//!
//! Messages are hints, the task table and the host records are the truth: a duplicate message
//! carries an old epoch and is dropped; a lost one is re-issued by the sweeper.

pub mod local;

use crate::backoff::{Backoff, Transient, persist};
use crate::cause::Cause;
use crate::clock::{Clock, SystemClock};
use serde::{Deserialize, Serialize};
use std::future::Future;
use thiserror::Error;
use trawl_domain::canonical::{CrawlId, MAX_HOST_BYTES, truncate};
use trawl_domain::task::Priority;

/// A work message: a host's turn. "Fetch the due URLs of `host` in `crawl_id` at the host's
/// pace, then hand the host back." Small (SQS bills per 64 KB chunk); one live message per host,
/// whatever the host's backlog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkMessage {
    pub crawl_id: CrawlId,
    pub host: String,
    /// The host's message generation (`Host::epoch`): a message of an older epoch is a
    /// duplicate or was superseded, and is dropped.
    pub epoch: u64,
    /// Not part of the body: how long the queue keeps the message invisible after the send
    /// (capped at SQS's 15 minutes; a turn received early waits for its host again).
    #[serde(skip)]
    pub delay_ms: u64,
    /// The priority of the host's due work (`Host::priority`; left out of the body at 0): the
    /// local queue delivers it highest first, and on AWS it picks the queue the turn is sent to
    /// (`TurnQueue`), again when a worn turn is sent anew.
    #[serde(default, skip_serializing_if = "Priority::is_min")]
    pub priority: Priority,
}

impl WorkMessage {
    pub fn new(crawl_id: CrawlId, host: impl Into<String>, epoch: u64, delay_ms: u64) -> Self {
        Self {
            crawl_id,
            host: host.into(),
            epoch,
            delay_ms,
            priority: Priority::MIN,
        }
    }

    /// This message with the priority of its host's due work.
    pub fn with_priority(self, priority: Priority) -> Self {
        Self { priority, ..self }
    }

    /// Reads a message body. A body no sender writes (not JSON, a missing or mistyped field, a
    /// host that is no host key) is a [`MalformedMessage`]: its consumer hands it back, and the
    /// queue's redrive policy takes it to the dead-letter queue after its receives.
    pub fn parse(body: &str) -> Result<WorkMessage, MalformedMessage> {
        let message: WorkMessage = serde_json::from_str(body)
            .map_err(|e| MalformedMessage::Body(truncate(&e.to_string(), SHOWN).to_owned()))?;
        let host_key = (1..=MAX_HOST_LEN).contains(&message.host.len())
            && message
                .host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_:[]".contains(&b));
        if !host_key {
            return Err(MalformedMessage::Host(
                truncate(&message.host, SHOWN).to_owned(),
            ));
        }
        Ok(message)
    }

    /// The host's queue group (the local queue's, or a FIFO queue's MessageGroupId): turns of
    /// different hosts never wait for each other, and one host's turns come in order.
    pub fn group(&self) -> String {
        format!("{}#{}", self.crawl_id, self.host)
    }
}

/// The longest host key a turn may name: the longest host a canonical URL has (a DNS name; an
/// IPv6 literal, bracketed, is shorter) with a port.
const MAX_HOST_LEN: usize = MAX_HOST_BYTES + ":65535".len();
/// Bytes of a bad body or host shown in the error (one log line, whatever was sent).
const SHOWN: usize = 200;

/// Why a message body is not a host's turn.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MalformedMessage {
    #[error("not a turn message: {0}")]
    Body(String),
    #[error("not a host key: {0:?}")]
    Host(String),
}

/// A message received from the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub message_id: String,
    /// Handle for `ack` / `retry_later`.
    pub receipt: String,
    /// The raw body: parsed by the consumer, so one malformed body never fails a batch.
    pub body: String,
    /// How many times the queue has delivered it, this time included (SQS's
    /// `ApproximateReceiveCount`; 1 when the queue does not say).
    pub receives: u32,
}

/// A message the queue gave up on: rejected by its consumer on every one of its receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub message_id: String,
    /// The body as sent.
    pub body: String,
    pub receives: u32,
}

#[derive(Debug, Error)]
pub enum QueueError {
    #[error("{operation}: queue unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("{operation}: {message}")]
    Backend {
        operation: &'static str,
        message: String,
        #[source]
        source: Option<Cause>,
    },
}

impl QueueError {
    /// A failure that may pass if retried later.
    pub fn unavailable(operation: &'static str, message: impl Into<String>) -> Self {
        QueueError::Unavailable {
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// A failure that will not pass by retrying.
    pub fn backend(operation: &'static str, message: impl Into<String>) -> Self {
        QueueError::Backend {
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// The same error, keeping `cause` as its source.
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        let (QueueError::Unavailable { source, .. } | QueueError::Backend { source, .. }) =
            &mut self;
        *source = Some(cause.into());
        self
    }
}

impl Transient for QueueError {
    fn is_transient(&self) -> bool {
        matches!(self, QueueError::Unavailable { .. })
    }
}

pub type QueueResult<T> = Result<T, QueueError>;

/// Result of a send: messages SQS refused are named (by host), never dropped silently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendReport {
    pub sent: usize,
    pub failed: Vec<(String, String)>,
}

/// Receives from which a message handed back (not rejected) is sent anew rather than made
/// visible again: below the crawl queue's `maxReceiveCount` of 5, with two receives to spare
/// for redeliveries (a lost answer, a timed-out invocation), so that only poison messages reach
/// the dead-letter queue and raise its alarm.
pub const RESEND_FROM_RECEIVE: u32 = 3;

/// Whether a message received `receives` times and handed back is sent anew (a fresh message,
/// its receive count at zero) instead of made visible again.
pub fn resends_hand_back(receives: u32) -> bool {
    receives >= RESEND_FROM_RECEIVE
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

    /// Whether a message handed back with `retry_later` counts a receive toward the queue's
    /// dead letters (SQS's redrive policy counts every receive; a queue in this process only
    /// the receives of rejected messages). Where it does, a turn handed back again and again
    /// (a busy or early host) is sent anew instead ([`resends_hand_back`]).
    fn counts_hand_backs(&self) -> bool {
        true
    }

    /// The receipt of a message this queue's consumer was handed by its trigger (a Lambda event
    /// source mapping) from the queue `source` (its ARN), as `retry_later` and `ack` take it: a
    /// queue made of several (SQS's regular and priority crawl queues) notes which one holds it.
    fn receipt_from(&self, _source: Option<&str>, receipt: String) -> String {
        receipt
    }

    /// Makes a received message visible again after `delay_ms` (retry with backoff).
    fn retry_later(
        &self,
        receipt: &str,
        delay_ms: u64,
    ) -> impl Future<Output = QueueResult<()>> + Send;

    /// Hands back a message its consumer rejects (a malformed body) to come back after
    /// `delay_ms`, unless the queue has delivered it as often as it allows: then it moves to the
    /// queue's dead letters and is returned. By default only hands it back: SQS's redrive
    /// policy counts the receives and moves the message itself.
    fn reject(
        &self,
        receipt: &str,
        delay_ms: u64,
    ) -> impl Future<Output = QueueResult<Option<DeadLetter>>> + Send {
        async move { self.retry_later(receipt, delay_ms).await.map(|()| None) }
    }

    /// Whether the queue holds no message at all (none deliverable, in flight or delayed), when
    /// it knows at once (a queue in this process); None when it cannot tell (SQS's counts are
    /// approximate and lag), and a quiet period must stand in for it.
    fn is_drained(&self) -> Option<bool> {
        None
    }

    /// The messages the queue holds (deliverable, in flight and delayed) as it counts them:
    /// SQS's counts are approximate and may lag by a minute. None: it cannot count.
    fn depth(&self) -> impl Future<Output = QueueResult<Option<u64>>> + Send {
        std::future::ready(Ok(None))
    }
}

/// Rounds of re-sending the messages a send reported as failed.
const RESEND_ROUNDS: usize = 3;

/// Sends `messages`, waiting out a transient error (briefly: [`Backoff::BRIEF`]) and sending
/// again the messages the queue refused, so that a turn is not left to the sweeper's window for
/// lost messages because of one throttled call. A message sent twice (a lost answer) is
/// harmless: a turn carries its host's epoch, and a stale one is dropped.
pub async fn send_patiently<Q: WorkQueue>(
    queue: &Q,
    messages: &[WorkMessage],
) -> QueueResult<SendReport> {
    let retries = std::sync::atomic::AtomicU64::new(0);
    let mut pending = messages.to_vec();
    let mut total = SendReport::default();
    for round in 0..=RESEND_ROUNDS {
        let report = persist(
            &SystemClock,
            "send turns",
            &Backoff::BRIEF,
            &retries,
            || queue.send(&pending),
        )
        .await?;
        total.sent += report.sent;
        if report.failed.is_empty() || round == RESEND_ROUNDS {
            total.failed = report.failed;
            break;
        }
        let refused: std::collections::HashSet<&str> = report
            .failed
            .iter()
            .map(|(host, _)| host.as_str())
            .collect();
        pending.retain(|m| refused.contains(m.host.as_str()));
        SystemClock
            .sleep(Backoff::BRIEF.pause(round as u32 + 1))
            .await;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_message_reads_back_and_anything_else_is_malformed_in_one_short_line() {
        let sent = WorkMessage::new(CrawlId::parse("c1").unwrap(), "[::1]:8080", 3, 0);
        let body = serde_json::to_string(&sent).unwrap();
        assert!(!body.contains("priority"), "{body}");
        assert_eq!(WorkMessage::parse(&body), Ok(sent.clone()));
        // A turn of a host with priority work says so, for the queue it is sent anew to.
        let urgent = sent.with_priority(Priority::new(7).unwrap());
        let body = serde_json::to_string(&urgent).unwrap();
        assert_eq!(WorkMessage::parse(&body), Ok(urgent));
        let megabyte = "x".repeat(1 << 20);
        for body in [
            String::new(),
            "{not json".to_owned(),
            r#"{"crawl_id": "c1", "host": "a", "epoch": "1"}"#.to_owned(),
            r#"{"crawl_id": "c1", "host": "a", "epoch": 1, "x": 0}"#.to_owned(),
            r#"{"crawl_id": "c1", "host": "", "epoch": 1}"#.to_owned(),
            r#"{"crawl_id": "c1", "host": "a b", "epoch": 1}"#.to_owned(),
            format!(r#"{{"crawl_id": "c1", "host": "{megabyte}", "epoch": 1}}"#),
            format!(r#"{{"crawl_id": "c1", "host": "a", "epoch": "{megabyte}"}}"#),
        ] {
            let Err(e) = WorkMessage::parse(&body) else {
                panic!("{body:.40} accepted");
            };
            let shown = e.to_string().len();
            assert!(shown < 300, "{body:.40}: an error of {shown} bytes");
        }
    }
}
