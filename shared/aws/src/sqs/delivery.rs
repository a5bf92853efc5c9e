//! Completion notices on the SQS delivery queue (a standard queue).

use super::build_err;
use std::sync::Arc;
use trawl_core::queue::QueueError;
use trawl_core::sweep::{CompletionNotice, DeliveryTrigger};
use trawl_domain::calls::{Call, CallCounts};

/// Sends completion notices to the SQS delivery queue (a standard queue).
#[derive(Debug, Clone)]
pub struct SqsDeliveryTrigger {
    client: aws_sdk_sqs::Client,
    url: String,
    calls: Arc<CallCounts>,
}

impl SqsDeliveryTrigger {
    pub fn new(
        client: aws_sdk_sqs::Client,
        url: impl Into<String>,
        calls: Arc<CallCounts>,
    ) -> Self {
        Self {
            client,
            url: url.into(),
            calls,
        }
    }
}

impl DeliveryTrigger for SqsDeliveryTrigger {
    async fn trigger(&self, notice: &CompletionNotice) -> Result<(), QueueError> {
        let body = serde_json::to_string(notice).map_err(|e| build_err("SendMessageBatch", e))?;
        let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
            .id("0")
            .message_body(body)
            .build()
            .map_err(|e| build_err("SendMessageBatch", e))?;
        self.calls.record(Call::SqsSendMessageBatch);
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .entries(entry)
            .send()
            .await
            .map_err(|e| super::map_err("SendMessageBatch", e))?;
        match out.failed().first() {
            None => Ok(()),
            Some(f) => Err(QueueError::unavailable(
                "SendMessageBatch",
                format!("{}: {}", f.code(), f.message().unwrap_or_default()),
            )),
        }
    }
}
