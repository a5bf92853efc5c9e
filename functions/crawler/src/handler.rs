//! SQS batch in, partial batch failures out. Every message that must come back (retry with
//! backoff, handed back near the deadline, malformed) is reported as a failure; nothing is
//! acknowledged that was not handled.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use std::sync::Arc;
use std::time::Duration;
use trawl_core::blob::BlobStore;
use trawl_core::crawler::{Crawler, Disposition, MessageResult};
use trawl_core::queue::{Received, WorkQueue};
use trawl_core::store::{CrawlStore, HostStore, TaskStore};
use trawl_lambda::{HandlerError, work_deadline};

/// Nothing kept back from the Lambda deadline here: the crawler itself starts no fetch that could
/// not finish before it (the crawl's fetch timeout plus a margin) and hands those messages back.
pub const DEADLINE_MARGIN: Duration = Duration::ZERO;

/// What every invocation uses, built once per cold start. The crawler (ports, HTTP client,
/// crawl-config cache) is shared, so clones share its cache.
#[derive(Clone)]
pub struct Handler<S, B, Q> {
    pub crawler: Arc<Crawler<S, B, Q>>,
}

impl<S, B, Q> Handler<S, B, Q>
where
    S: TaskStore + CrawlStore + HostStore,
    B: BlobStore,
    Q: WorkQueue,
{
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, HandlerError> {
        let deadline = work_deadline(&event.context, DEADLINE_MARGIN).map(|d| d.into_std());
        let mut batch = Vec::with_capacity(event.payload.records.len());
        for (i, record) in event.payload.records.into_iter().enumerate() {
            let (Some(message_id), Some(receipt)) = (record.message_id, record.receipt_handle)
            else {
                return Err(HandlerError::invalid(format!(
                    "record {i} has no messageId or receiptHandle: cannot report it individually"
                )));
            };
            batch.push(Received {
                message_id,
                receipt,
                body: record.body.unwrap_or_default(),
            });
        }
        let results = self.crawler.process_batch(batch, deadline).await;
        Ok(respond(self.crawler.queue(), results).await)
    }
}

/// Turns dispositions into the batch response, setting the delay of messages that come back.
async fn respond<Q: WorkQueue>(queue: &Q, results: Vec<MessageResult>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for result in results {
        match result.disposition {
            Disposition::Done => {}
            Disposition::RetryAfter(delay_ms) => {
                // If the delay cannot be set, the message still comes back (after the
                // queue's visibility timeout).
                if let Err(e) = queue.retry_later(&result.receipt, delay_ms).await {
                    tracing::warn!(message_id = %result.message_id, error = %e, "could not set the retry delay");
                }
                response.add_failure(result.message_id);
            }
            Disposition::Reject(why) => {
                tracing::warn!(message_id = %result.message_id, %why, "message returned to the queue");
                response.add_failure(result.message_id);
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;
    use std::time::{SystemTime, UNIX_EPOCH};
    use trawl_core::blob::Layout;
    use trawl_core::blob::memory::MemoryBlobStore;
    use trawl_core::fetch::Fetcher;
    use trawl_core::frontier::add_tasks;
    use trawl_core::queue::local::LocalQueue;
    use trawl_core::store::memory::MemoryStore;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::{CanonicalUrl, CrawlId};
    use trawl_domain::crawl::{Crawl, CrawlConfig};
    use trawl_domain::task::{ErrorKind, NewTask, Status};

    const EVENT: &str = include_str!("../../../events/crawler-sqs.json");

    #[tokio::test]
    async fn sample_event_blocks_loopback_and_returns_the_malformed_record() {
        // GIVEN the crawl the sample event names, with two URLs of the event's host seeded (the
        // SSRF guard on): the host's first turn is epoch 1, the event's
        let calls = Arc::new(CallCounts::default());
        let store = MemoryStore::new();
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let crawl = Crawl::new(
            CrawlId::parse("example").unwrap(),
            CrawlConfig::default(),
            0,
        );
        store.create_crawl(&crawl).await.unwrap();
        let urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"];
        let tasks: Vec<NewTask> = urls
            .iter()
            .map(|u| NewTask {
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
            })
            .collect();
        add_tasks(&store, &queue, &crawl, tasks, 0).await.unwrap();
        let handler = Handler {
            crawler: Arc::new(Crawler::new(
                store,
                MemoryBlobStore::new(),
                queue,
                Arc::new(Fetcher::new("").unwrap()),
                Layout::default(),
                10,
                calls,
            )),
        };

        // WHEN the sample event is handled
        let event: SqsEvent = serde_json::from_str(EVENT).unwrap();
        let mut context = lambda_runtime::Context::default();
        context.deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
            + 60_000;
        let response = handler
            .handle(LambdaEvent::new(event, context))
            .await
            .unwrap();

        // THEN only the malformed record comes back; the turn took both URLs of the host:
        // loopback was refused, recorded, not fetched
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["c5f6e7a1-0000-4000-8000-000000000bad"]);
        for url in urls {
            let id = CanonicalUrl::parse(url).unwrap().task_id();
            let task = handler
                .crawler
                .store()
                .get(&crawl.id, &id)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(task.status, Status::Ignored);
            assert_eq!(task.errors[0].kind, ErrorKind::Blocked);
        }
        assert!(handler.crawler.blobs().list("").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_record_without_id_fails_the_whole_batch_so_nothing_is_lost() {
        let mut event: SqsEvent = serde_json::from_str(EVENT).unwrap();
        event.records[1].message_id = None;
        let calls = Arc::new(CallCounts::default());
        let handler = Handler {
            crawler: Arc::new(Crawler::new(
                MemoryStore::new(),
                MemoryBlobStore::new(),
                LocalQueue::new(Duration::from_secs(30), calls.clone()),
                Arc::new(Fetcher::new("").unwrap()),
                Layout::default(),
                10,
                calls,
            )),
        };
        let err = handler
            .handle(LambdaEvent::new(event, lambda_runtime::Context::default()))
            .await
            .unwrap_err();
        let diagnostic = Diagnostic::from(err);
        assert_eq!(diagnostic.error_type, "InvalidEvent");
        assert!(
            diagnostic.error_message.starts_with("record 1 "),
            "{}",
            diagnostic.error_message
        );
    }
}
