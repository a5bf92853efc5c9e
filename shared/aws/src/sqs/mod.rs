//! The work queue on SQS, through the real SDK. A message is a host's turn
//! (`{crawl_id, host, epoch}`); politeness is the host record's (one live turn per host, under a
//! fenced lease), not the queue's.
//!
//! - A standard queue (the deployed one) delays each message by its `delay_ms` (`DelaySeconds`,
//!   rounded up, at most SQS's 15 minutes): a host's next turn becomes visible when the host is
//!   due, and a turn received early waits for its host again.
//! - A FIFO queue (a URL ending in `.fifo`, still accepted) takes no per-message delay: messages
//!   are visible at once. Each host's turns are one group (`WorkMessage::group`), and every send
//!   gets its own deduplication id (`{group}#{epoch}#{sent_at}`), so that a re-issued turn is
//!   never swallowed by FIFO's 5-minute deduplication window. Both ids are cut to what SQS
//!   accepts (`sqs_id`).
//! - With a priority queue (`with_priority_queue`, capability S15), a turn whose host's due work
//!   is at or above the threshold is sent there instead (`TurnQueue`): its own consumers (an event
//!   source mapping of its own, with its own concurrency) serve it, so that it never waits behind
//!   the regular queue's backlog. `receive` takes from it first. A message received from it keeps
//!   that in its receipt ([`PRIORITY_RECEIPT`]), so that its hand-back and its deletion go to the
//!   queue that holds it.

mod delivery;
#[cfg(feature = "seed")]
mod seed;

pub use delivery::SqsDeliveryTrigger;
#[cfg(feature = "seed")]
pub use seed::SqsSeedQueue;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use std::sync::Arc;
use trawl_core::queue::{QueueError, QueueResult, Received, SendReport, WorkMessage, WorkQueue};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::priority::{Priority, TurnQueue};
use trawl_domain::task::now_ms;

/// SQS batch limit.
const BATCH: usize = 10;
/// Sends of entries SQS reported as failed, before they are reported to the caller.
const SEND_ATTEMPTS: usize = 3;
/// Longest visibility SQS accepts (12 h), in seconds.
const MAX_VISIBILITY_S: u64 = 43_200;
/// Longest per-message delay SQS accepts (15 min), in seconds.
const MAX_DELAY_S: u64 = 900;
/// Longest MessageGroupId / MessageDeduplicationId SQS accepts.
const MAX_ID_LEN: usize = 128;

/// `raw` as a FIFO group or deduplication id: SQS accepts 1 to 128 ASCII letters, digits and
/// punctuation. Other characters become `_`; a longer id keeps its head and ends with a hash of
/// the whole, so two ids stay apart when their heads are alike.
fn sqs_id(raw: &str) -> String {
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c.is_ascii_punctuation() {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !clean.is_empty() && clean.len() <= MAX_ID_LEN && clean == raw {
        return clean;
    }
    // All ASCII by now (one byte per char). Replaced characters could make two raw ids one,
    // and so could the cut: the hash of the raw id keeps them apart.
    let head = &clean[..clean.len().min(MAX_ID_LEN - 17)];
    format!("{head}~{:016x}", fnv1a(raw))
}

/// FNV-1a, 64 bits: stable across processes and versions (unlike std's hasher).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A standard queue's `DelaySeconds` for a message: `delay_ms` rounded up, capped at 15 min.
fn delay_seconds(delay_ms: u64) -> i32 {
    delay_ms.div_ceil(1000).min(MAX_DELAY_S) as i32
}

/// What the receipt of a message received from the priority queue starts with. SQS's receipt
/// handles are base64 and never hold a `|`.
pub const PRIORITY_RECEIPT: &str = "priority|";

#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
    priority: Option<PriorityQueue>,
    calls: Arc<CallCounts>,
}

/// The queue of the turns whose host's due work has a priority of `from` or more.
#[derive(Debug, Clone)]
struct PriorityQueue {
    url: String,
    /// The queue's name (the URL's last segment), as an event source's ARN ends.
    name: String,
    from: Priority,
}

fn map_err<E>(operation: &'static str, e: SdkError<E, HttpResponse>) -> QueueError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let retryable = crate::errors::is_retryable(&e);
    let message = crate::errors::describe(&e);
    let error = if retryable {
        QueueError::unavailable(operation, message)
    } else {
        QueueError::backend(operation, message)
    };
    error.caused_by(e)
}

fn build_err(
    operation: &'static str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> QueueError {
    QueueError::backend(operation, e.to_string()).caused_by(e)
}

impl SqsQueue {
    pub fn new(client: Client, url: impl Into<String>, calls: Arc<CallCounts>) -> Self {
        Self {
            client,
            url: url.into(),
            priority: None,
            calls,
        }
    }

    /// This queue with a priority queue at `url` for the turns whose host's due work has a
    /// priority of `from` or more (a standard queue).
    pub fn with_priority_queue(self, url: impl Into<String>, from: Priority) -> Self {
        let url = url.into();
        let name = url.rsplit('/').next().unwrap_or_default().to_owned();
        Self {
            priority: Some(PriorityQueue { url, name, from }),
            ..self
        }
    }

    /// The queue that holds the message of `receipt`, and its SQS receipt handle.
    fn locate<'a>(&'a self, receipt: &'a str) -> (&'a str, &'a str) {
        match (&self.priority, receipt.strip_prefix(PRIORITY_RECEIPT)) {
            (Some(priority), Some(handle)) => (&priority.url, handle),
            _ => (&self.url, receipt),
        }
    }

    fn entry(
        fifo: bool,
        index: usize,
        message: &WorkMessage,
        sent_at: i64,
    ) -> QueueResult<SendMessageBatchRequestEntry> {
        let body = serde_json::to_string(message).map_err(|e| build_err("SendMessageBatch", e))?;
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body);
        if fifo {
            // A fresh deduplication id per send: a re-issued turn (sweeper, hand-back) must not
            // be swallowed by FIFO's 5-minute deduplication window. FIFO takes no delay.
            let group = message.group();
            entry = entry
                .message_deduplication_id(sqs_id(&format!("{group}#{}#{sent_at}", message.epoch)))
                .message_group_id(sqs_id(&group));
        } else if message.delay_ms > 0 {
            entry = entry.delay_seconds(delay_seconds(message.delay_ms));
        }
        entry.build().map_err(|e| build_err("SendMessageBatch", e))
    }
}

impl SqsQueue {
    async fn send_to(&self, url: &str, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        let fifo = url.ends_with(".fifo");
        let mut report = SendReport::default();
        let sent_at = now_ms();
        for chunk in messages.chunks(BATCH) {
            let mut pending: Vec<usize> = (0..chunk.len()).collect();
            let mut last_errors: Vec<(usize, String)> = Vec::new();
            for _ in 0..SEND_ATTEMPTS {
                if pending.is_empty() {
                    break;
                }
                let entries = pending
                    .iter()
                    .map(|&i| Self::entry(fifo, i, &chunk[i], sent_at))
                    .collect::<QueueResult<Vec<_>>>()?;
                self.calls.record(Call::SqsSendMessageBatch);
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| map_err("SendMessageBatch", e))?;
                report.sent += out.successful().len();
                last_errors = out
                    .failed()
                    .iter()
                    .filter_map(|f| {
                        let index = f.id().parse::<usize>().ok()?;
                        Some((
                            index,
                            format!("{}: {}", f.code(), f.message().unwrap_or_default()),
                        ))
                    })
                    .collect();
                // Sender faults (a malformed entry) will fail again: only retry the others.
                pending = out
                    .failed()
                    .iter()
                    .filter(|f| !f.sender_fault())
                    .filter_map(|f| f.id().parse::<usize>().ok())
                    .collect();
            }
            report.failed.extend(
                last_errors
                    .into_iter()
                    .filter_map(|(i, why)| chunk.get(i).map(|m| (m.host.clone(), why))),
            );
        }
        Ok(report)
    }

    /// Up to `max` messages of the queue at `url`, their receipts marked when it is the
    /// priority queue.
    async fn receive_from(
        &self,
        url: &str,
        max: u32,
        wait_ms: u64,
        marked: bool,
    ) -> QueueResult<Vec<Received>> {
        self.calls.record(Call::SqsReceiveMessage);
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max.clamp(1, BATCH as u32) as i32)
            .wait_time_seconds((wait_ms / 1000).min(20) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| map_err("ReceiveMessage", e))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                let receives = m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                let receipt = m.receipt_handle?;
                Some(Received {
                    message_id: m.message_id?,
                    receipt: if marked {
                        format!("{PRIORITY_RECEIPT}{receipt}")
                    } else {
                        receipt
                    },
                    body: m.body.unwrap_or_default(),
                    receives,
                })
            })
            .collect())
    }

    async fn delete_from(&self, url: &str, receipts: &[&str]) -> QueueResult<()> {
        for chunk in receipts.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(*r)
                        .build()
                        .map_err(|e| build_err("DeleteMessageBatch", e))
                })
                .collect::<QueueResult<Vec<_>>>()?;
            self.calls.record(Call::SqsDeleteMessageBatch);
            let out = self
                .client
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| map_err("DeleteMessageBatch", e))?;
            if let Some(failed) = out.failed().first() {
                // An undeleted message comes back after its visibility timeout; its claim is then
                // rejected and it is dropped. Worth a warning, not a failure.
                tracing::warn!(
                    code = failed.code(),
                    "message not deleted; it will be redelivered"
                );
            }
        }
        Ok(())
    }

    /// The messages the queue at `url` holds (deliverable, in flight and delayed).
    async fn depth_of(&self, url: &str) -> QueueResult<Option<u64>> {
        const COUNTS: [QueueAttributeName; 3] = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        self.calls.record(Call::SqsGetQueueAttributes);
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .set_attribute_names(Some(COUNTS.to_vec()))
            .send()
            .await
            .map_err(|e| map_err("GetQueueAttributes", e))?;
        let attributes = out.attributes.unwrap_or_default();
        let mut depth = 0u64;
        for name in &COUNTS {
            // A count SQS did not give (or gave as something else) means it cannot be counted.
            match attributes.get(name).map(|n| n.parse::<u64>()) {
                Some(Ok(n)) => depth += n,
                _ => return Ok(None),
            }
        }
        Ok(Some(depth))
    }
}

/// The calls' futures are boxed: an SDK call's future is large in a debug build, and the
/// crawler's futures hold this queue's inline, up to a test's own (run on one thread's 2 MiB
/// stack, the chaos run through the handlers overflowed it once a send held two of them).
impl WorkQueue for SqsQueue {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
        let Some(priority) = &self.priority else {
            return Box::pin(self.send_to(&self.url, messages)).await;
        };
        let (urgent, regular): (Vec<WorkMessage>, Vec<WorkMessage>) = messages
            .iter()
            .cloned()
            .partition(|m| TurnQueue::of(m.priority, priority.from) == TurnQueue::Priority);
        let mut report = SendReport::default();
        for (url, messages) in [(&priority.url, urgent), (&self.url, regular)] {
            if messages.is_empty() {
                continue;
            }
            let sent = Box::pin(self.send_to(url, &messages)).await?;
            report.sent += sent.sent;
            report.failed.extend(sent.failed);
        }
        Ok(report)
    }

    /// The priority queue's messages first; the regular queue's wait (up to `wait_ms`) only when
    /// the priority queue had none.
    async fn receive(&self, max: u32, wait_ms: u64) -> QueueResult<Vec<Received>> {
        let Some(priority) = &self.priority else {
            return Box::pin(self.receive_from(&self.url, max, wait_ms, false)).await;
        };
        let mut received = Box::pin(self.receive_from(&priority.url, max, 0, true)).await?;
        let room = max.clamp(1, BATCH as u32) as usize - received.len().min(BATCH);
        if room > 0 {
            let wait_ms = if received.is_empty() { wait_ms } else { 0 };
            let regular =
                Box::pin(self.receive_from(&self.url, room as u32, wait_ms, false)).await?;
            received.extend(regular);
        }
        Ok(received)
    }

    async fn ack(&self, receipts: &[String]) -> QueueResult<()> {
        let (mut urgent, mut regular) = (Vec::new(), Vec::new());
        for receipt in receipts {
            match self.locate(receipt) {
                (url, handle) if url == self.url => regular.push(handle),
                (_, handle) => urgent.push(handle),
            }
        }
        if let Some(priority) = &self.priority
            && !urgent.is_empty()
        {
            Box::pin(self.delete_from(&priority.url, &urgent)).await?;
        }
        Box::pin(self.delete_from(&self.url, &regular)).await
    }

    fn receipt_from(&self, source: Option<&str>, receipt: String) -> String {
        let from_priority = self.priority.as_ref().is_some_and(|p| {
            source.and_then(|arn| arn.rsplit(':').next()) == Some(p.name.as_str())
        });
        if from_priority {
            format!("{PRIORITY_RECEIPT}{receipt}")
        } else {
            receipt
        }
    }

    async fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()> {
        let (url, receipt) = self.locate(receipt);
        self.calls.record(Call::SqsChangeMessageVisibility);
        let sent = self
            .client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(receipt)
            .visibility_timeout(delay_ms.div_ceil(1000).min(MAX_VISIBILITY_S) as i32)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            // The message was redelivered meanwhile (its receipt superseded) or is no longer in
            // flight: as for a delete that fails so, the turn's fenced lease already protects
            // the work, and the copy in the queue comes back on its own.
            Err(e)
                if e.as_service_error().is_some_and(|e| {
                    e.is_receipt_handle_is_invalid() || e.is_message_not_inflight()
                }) =>
            {
                tracing::warn!(
                    code = e.code(),
                    "message visibility not changed; it will be redelivered"
                );
                Ok(())
            }
            Err(e) => Err(map_err("ChangeMessageVisibility", e)),
        }
    }

    /// Both queues' messages: the sweeper's lost-message window shortens only when neither
    /// holds any.
    async fn depth(&self) -> QueueResult<Option<u64>> {
        let regular = Box::pin(self.depth_of(&self.url)).await?;
        let Some(priority) = &self.priority else {
            return Ok(regular);
        };
        let urgent = Box::pin(self.depth_of(&priority.url)).await?;
        Ok(regular.zip(urgent).map(|(a, b)| a + b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_what_sqs_accepts() {
        let ok = |id: &str| {
            !id.is_empty()
                && id.len() <= MAX_ID_LEN
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation())
        };
        assert_eq!(
            sqs_id("crawl-1#example.com:8080"),
            "crawl-1#example.com:8080"
        );
        assert_eq!(sqs_id("c#[::1]:80#3#17"), "c#[::1]:80#3#17");
        for raw in [
            "",
            "a b",
            "h\u{e9}te",
            &"x".repeat(300),
            &format!("{}\u{e9}", "y".repeat(200)),
        ] {
            assert!(ok(&sqs_id(raw)), "{raw:?} -> {:?}", sqs_id(raw));
        }
        let long = "a".repeat(200);
        assert_ne!(sqs_id(&format!("{long}#1")), sqs_id(&format!("{long}#2")));
        assert_ne!(sqs_id("a b"), sqs_id("a_b"));
    }

    #[test]
    fn delays_round_up_and_cap_at_15_minutes() {
        assert_eq!(delay_seconds(1), 1);
        assert_eq!(delay_seconds(1000), 1);
        assert_eq!(delay_seconds(1001), 2);
        assert_eq!(delay_seconds(3_600_000), 900);
    }
}
