//! Seed requests on the SQS seed queue (a standard queue that triggers the seeder).

use super::{build_err, map_err};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use std::sync::Arc;
use trawl_core::continuation::SeedQueue;
use trawl_core::operate::OperationRequest;
use trawl_core::queue::QueueError;
use trawl_core::seed::SeedRequest;
use trawl_domain::calls::{Call, CallCounts};

/// Sends seed requests to the seed queue: `trawl submit`, and the seeder's continuations (of
/// seeds and of operations).
#[derive(Debug, Clone)]
pub struct SqsSeedQueue {
    client: aws_sdk_sqs::Client,
    url: String,
    calls: Arc<CallCounts>,
}

impl SqsSeedQueue {
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

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl SeedQueue for SqsSeedQueue {
    async fn send(&self, request: &SeedRequest) -> Result<(), QueueError> {
        self.send_json(request).await
    }

    async fn send_operation(&self, request: &OperationRequest) -> Result<(), QueueError> {
        self.send_json(request).await
    }
}

impl SqsSeedQueue {
    /// One request, sent as a batch of one: every SQS send trawl makes is a SendMessageBatch
    /// (one action to grant, one call to count and price).
    async fn send_json(&self, request: &impl serde::Serialize) -> Result<(), QueueError> {
        const OPERATION: &str = "SendMessageBatch";
        let body = serde_json::to_string(request).map_err(|e| build_err(OPERATION, e))?;
        let entry = SendMessageBatchRequestEntry::builder()
            .id("seed")
            .message_body(body)
            .build()
            .map_err(|e| build_err(OPERATION, e))?;
        self.calls.record(Call::SqsSendMessageBatch);
        let out = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .entries(entry)
            .send()
            .await
            .map_err(|e| map_err(OPERATION, e))?;
        match out.failed().first() {
            None => Ok(()),
            Some(failed) => Err(QueueError::unavailable(
                OPERATION,
                format!(
                    "{}: {}",
                    failed.code(),
                    failed.message().unwrap_or_default()
                ),
            )),
        }
    }
}
