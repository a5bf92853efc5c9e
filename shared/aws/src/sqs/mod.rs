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

#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
    fifo: bool,
    calls: Arc<CallCounts>,
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
        let url = url.into();
        let fifo = url.ends_with(".fifo");
        Self {
            client,
            url,
            fifo,
            calls,
        }
    }

    fn entry(
        &self,
        index: usize,
        message: &WorkMessage,
        sent_at: i64,
    ) -> QueueResult<SendMessageBatchRequestEntry> {
        let body = serde_json::to_string(message).map_err(|e| build_err("SendMessageBatch", e))?;
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body);
        if self.fifo {
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

impl WorkQueue for SqsQueue {
    async fn send(&self, messages: &[WorkMessage]) -> QueueResult<SendReport> {
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
                    .map(|&i| self.entry(i, &chunk[i], sent_at))
                    .collect::<QueueResult<Vec<_>>>()?;
                self.calls.record(Call::SqsSendMessageBatch);
                let out = self
                    .client
                    .send_message_batch()
                    .queue_url(&self.url)
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

    async fn receive(&self, max: u32, wait_ms: u64) -> QueueResult<Vec<Received>> {
        self.calls.record(Call::SqsReceiveMessage);
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
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
                Some(Received {
                    message_id: m.message_id?,
                    receipt: m.receipt_handle?,
                    body: m.body.unwrap_or_default(),
                    receives,
                })
            })
            .collect())
    }

    async fn ack(&self, receipts: &[String]) -> QueueResult<()> {
        for chunk in receipts.chunks(BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(r)
                        .build()
                        .map_err(|e| build_err("DeleteMessageBatch", e))
                })
                .collect::<QueueResult<Vec<_>>>()?;
            self.calls.record(Call::SqsDeleteMessageBatch);
            let out = self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
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

    async fn retry_later(&self, receipt: &str, delay_ms: u64) -> QueueResult<()> {
        self.calls.record(Call::SqsChangeMessageVisibility);
        let sent = self
            .client
            .change_message_visibility()
            .queue_url(&self.url)
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

    async fn depth(&self) -> QueueResult<Option<u64>> {
        const COUNTS: [QueueAttributeName; 3] = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        self.calls.record(Call::SqsGetQueueAttributes);
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
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
