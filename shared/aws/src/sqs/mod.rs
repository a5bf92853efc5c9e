//! The work queue on SQS, through the real SDK. A queue whose URL ends in `.fifo` gets
//! `MessageGroupId = {host}#{slot}`: SQS then never hands two messages of one group to two
//! consumers at once, which is per-host politeness for free (Scrapy Cloud's frontier slots).

mod delivery;

pub use delivery::SqsDeliveryTrigger;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, SendMessageBatchRequestEntry,
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
    let message = DisplayErrorContext(&e).to_string();
    if retryable {
        QueueError::Unavailable { operation, message }
    } else {
        QueueError::Backend { operation, message }
    }
}

fn build_err(operation: &'static str, e: impl std::fmt::Display) -> QueueError {
    QueueError::Backend {
        operation,
        message: e.to_string(),
    }
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
            // A fresh deduplication id per send: a re-enqueue of the same task (sweeper, retry)
            // must not be swallowed by FIFO's 5-minute deduplication window.
            entry = entry
                .message_group_id(&message.group)
                .message_deduplication_id(format!("{}-{sent_at}", message.task_id));
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
                    .filter_map(|(i, why)| chunk.get(i).map(|m| (m.task_id.clone(), why))),
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
                let receive_count = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                Some(Received {
                    message_id: m.message_id?,
                    receipt: m.receipt_handle?,
                    body: m.body.unwrap_or_default(),
                    receive_count,
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
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .visibility_timeout(delay_ms.div_ceil(1000).min(MAX_VISIBILITY_S) as i32)
            .send()
            .await
            .map_err(|e| map_err("ChangeMessageVisibility", e))?;
        Ok(())
    }
}
