//! The deliverer's events: a delivery-queue batch (the sweeper's completion message, or the
//! deliverer's own continuation) or an on-demand request, both naming a crawl and optionally a
//! generation.
//!
//! A delivery longer than one invocation stops cleanly near the Lambda deadline, leaving its
//! checkpoint in the bucket, and sends its continuation (the same request) to the delivery
//! queue: the next invocation picks it up where this one stopped.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use trawl_core::app::Ports;
use trawl_core::deliver::{
    DeliverError, Deliverer, Delivery, DeliveryProgress, DeliveryReport, DeliveryRequest,
};
use trawl_core::queue::QueueError;
use trawl_core::sweep::{CompletionNotice, DeliveryTrigger};
use trawl_domain::task::{Millis, now_ms};
use trawl_lambda::{HandlerError, bounded};

/// What the function accepts: an SQS event from the delivery queue, or a direct request
/// `{"crawl_id": "...", "generation": N}` (generation optional).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum DelivererEvent {
    Queue(SqsEvent),
    Direct(DeliveryRequest),
}

impl DelivererEvent {
    /// Decodes an event, naming what is wrong with a malformed one.
    pub fn parse(payload: serde_json::Value) -> Result<Self, HandlerError> {
        let is_queue = payload.get("Records").is_some();
        match serde_json::from_value::<DelivererEvent>(payload.clone()) {
            Ok(event) => Ok(event),
            // The untagged error says only "no variant matched": decode the intended variant
            // again for the precise reason.
            Err(untagged) => {
                let reason = if is_queue {
                    serde_json::from_value::<SqsEvent>(payload).err()
                } else {
                    serde_json::from_value::<DeliveryRequest>(payload).err()
                };
                Err(HandlerError::invalid(format!(
                    "malformed event: {}",
                    reason.unwrap_or(untagged)
                )))
            }
        }
    }
}

/// What the function answers.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DelivererResponse {
    /// To the queue: the records to retry (ReportBatchItemFailures).
    Batch(SqsBatchResponse),
    /// To a direct caller: the delivery.
    Delivery(Box<DeliveryReport>),
    /// To a direct caller: the delivery went on past this invocation; its continuation is on
    /// the delivery queue.
    Continued(DeliveryProgress),
}

/// Time kept before the Lambda deadline: the open segment is completed and the checkpoint and
/// the continuation written in it.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// The instant `margin` before `deadline` (a wall-clock time), on the monotonic clock whose
/// time is `now` (the deliverer's `Clock::instant`).
pub fn stop_at(deadline: SystemTime, margin: Duration, now: Instant) -> Instant {
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        .saturating_sub(margin);
    now + left
}

/// What every invocation uses, built once per cold start: the deliverer, and the queue where a
/// delivery that outlasts its invocation sends its continuation (the delivery queue).
pub struct Handler<P: Ports, C> {
    pub deliverer: Deliverer<P>,
    pub continuation: C,
}

impl<P: Ports, C: DeliveryTrigger> Handler<P, C> {
    pub async fn handle(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<DelivererResponse, HandlerError> {
        let deadline = stop_at(
            event.context.deadline(),
            DEADLINE_MARGIN,
            self.deliverer.clock.instant(),
        );
        // Boxed: the delivery's future is deep, and inside the runtime's it overflows rustc's
        // layout depth.
        Box::pin(self.deliver(event.payload, now_ms(), Some(deadline))).await
    }

    /// Delivers what the event asks for: one crawl (direct) or each record's (queue), stopping
    /// after `deadline` with the rest queued.
    pub async fn deliver(
        &self,
        payload: serde_json::Value,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<DelivererResponse, HandlerError> {
        match DelivererEvent::parse(payload)? {
            DelivererEvent::Direct(request) => {
                Ok(match self.deliver_request(&request, now, deadline).await? {
                    Delivery::Done(report) => DelivererResponse::Delivery(report),
                    Delivery::Paused(progress) => {
                        self.continue_later(&progress).await.map_err(|e| {
                            HandlerError::failed(
                                format!("delivery paused but not continued: {e}"),
                                true,
                            )
                        })?;
                        DelivererResponse::Continued(progress)
                    }
                })
            }
            DelivererEvent::Queue(event) => {
                let mut response = SqsBatchResponse::default();
                for record in &event.records {
                    if !self.deliver_record(record, now, deadline).await {
                        let mut failure = BatchItemFailure::default();
                        // An empty id makes Lambda retry the whole batch: still no record lost.
                        failure.item_identifier = record.message_id.clone().unwrap_or_default();
                        response.batch_item_failures.push(failure);
                    }
                }
                Ok(DelivererResponse::Batch(response))
            }
        }
    }

    async fn deliver_request(
        &self,
        request: &DeliveryRequest,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<Delivery, DeliverError> {
        let started = std::time::Instant::now();
        let delivery = self
            .deliverer
            .deliver_until(&request.crawl_id, request.generation, now, deadline)
            .await?;
        if let Delivery::Done(report) = &delivery {
            let elapsed_ms = started.elapsed().as_millis() as f64;
            if let Some(record) = trawl_lambda::metrics::delivery(report, elapsed_ms, now) {
                record.emit();
            }
        }
        Ok(delivery)
    }

    /// Queues the continuation of a paused delivery. Its checkpoint is in the bucket whether
    /// or not this succeeds: a failed send only means the request is retried instead.
    async fn continue_later(&self, progress: &DeliveryProgress) -> Result<(), QueueError> {
        // The generation is named, so a later generation cannot take the continuation over.
        let notice = CompletionNotice {
            crawl_id: progress.crawl_id.clone(),
            generation: progress.generation,
        };
        self.continuation.trigger(&notice).await?;
        tracing::info!(
            crawl = %progress.crawl_id,
            delivery = %progress.delivery_id,
            tasks = progress.tasks,
            files = progress.files,
            phase = %progress.phase,
            "delivery continues in the next invocation"
        );
        Ok(())
    }

    /// Delivers one queue record; false when the record must come back (or go to the DLQ).
    async fn deliver_record(
        &self,
        record: &SqsMessage,
        now: Millis,
        deadline: Option<Instant>,
    ) -> bool {
        let id = record.message_id.as_deref().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or_default();
        let request = match serde_json::from_str::<DeliveryRequest>(body) {
            Ok(request) => request,
            Err(e) => {
                // Kept as a failure: after the queue's retries it lands in the DLQ for a human.
                tracing::error!(message_id = id, error = %bounded(e), "malformed delivery message");
                return false;
            }
        };
        match self.deliver_request(&request, now, deadline).await {
            Ok(Delivery::Paused(progress)) => match self.continue_later(&progress).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(message_id = id, error = %e, "continuation not queued");
                    false
                }
            },
            Ok(Delivery::Done(report)) => {
                tracing::info!(
                    message_id = id,
                    crawl = %report.crawl_id,
                    delivery = %report.delivery_id,
                    already_delivered = report.already_delivered,
                    "delivered"
                );
                true
            }
            // A later generation completed first: its own delivery covers the crawl.
            Err(e @ DeliverError::Superseded { .. }) => {
                tracing::warn!(message_id = id, error = %e, "delivery skipped");
                true
            }
            Err(e) => {
                tracing::error!(
                    message_id = id,
                    error = %e,
                    error_type = e.kind(),
                    retryable = e.is_retryable(),
                    "delivery failed"
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use lambda_runtime::Diagnostic;
    use md5::{Digest, Md5};
    use std::path::PathBuf;
    use std::sync::Arc;
    use trawl_core::app::{App, Unwired};
    use trawl_core::blob::memory::MemoryBlobStore;
    use trawl_core::blob::{BlobStore, Body, ObjectMeta};
    use trawl_core::deliver::DeliveryLimits;
    use trawl_core::store::memory::MemoryStore;
    use trawl_core::store::{ClaimOutcome, CrawlStore, FinishOutcome, TaskStore};
    use trawl_core::sweep::LocalDeliveryTrigger;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::{CanonicalUrl, CrawlId};
    use trawl_domain::crawl::{Crawl, CrawlConfig};
    use trawl_domain::task::{FetchRecord, NewTask};

    const DIRECT: &str = include_str!("../../../events/deliverer.json");
    const QUEUE: &str = include_str!("../../../events/deliverer-sqs.json");
    const T0: Millis = 1_800_000_000_000;

    /// A directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The handler on the embedded backend, with the sample events' crawl: two pages, one
    /// stored, completed (generation 0).
    type TestHandler = Handler<(MemoryStore, MemoryBlobStore, Unwired), LocalDeliveryTrigger>;

    async fn handler(name: &str) -> (TestHandler, TempDir) {
        let dir = TempDir(std::env::temp_dir().join(format!(
            "trawl-deliverer-{name}-{}-{}",
            std::process::id(),
            nanos()
        )));
        let calls = Arc::new(CallCounts::default());
        let app = App::new(MemoryStore::new(), MemoryBlobStore::new(), Unwired, calls);
        let deliverer = Deliverer::new(
            Arc::new(app),
            dir.0.display().to_string(),
            DeliveryLimits::default(),
        );
        let handler = Handler {
            deliverer,
            continuation: LocalDeliveryTrigger::default(),
        };
        let crawl = CrawlId::parse("news-2026").unwrap();
        let store = &handler.deliverer.store;
        store
            .create_crawl(&Crawl::new(crawl.clone(), CrawlConfig::default(), T0))
            .await
            .unwrap();
        let urls = ["http://example.com/", "http://example.com/about"];
        let tasks: Vec<NewTask> = urls
            .iter()
            .map(|u| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        store.seed(&crawl, &tasks, T0).await.unwrap();
        let task_id = tasks[0].url.task_id();
        let ClaimOutcome::Claimed { lease, .. } =
            store.claim(&crawl, &task_id, 60_000, T0).await.unwrap()
        else {
            panic!("claim refused");
        };
        let body = b"<html>home</html>";
        let md5 = hex::encode(Md5::digest(body));
        let key = handler.deliverer.layout.html_key(&crawl, &task_id, &md5);
        let meta = ObjectMeta {
            content_type: "text/html".into(),
            source_url: urls[0].into(),
            compress: false,
        };
        handler
            .deliverer
            .blobs
            .put(&key, Body::new(Bytes::from_static(body)), &meta)
            .await
            .unwrap();
        let record = FetchRecord {
            object_key: Some(key),
            md5: Some(md5),
            http_status: 200,
            content_type: Some("text/html".into()),
            content_length: body.len() as u64,
            fetched_at: T0 + 1,
            ..FetchRecord::default()
        };
        assert!(matches!(
            store.finish(&lease, &record, T0 + 1).await.unwrap(),
            FinishOutcome::Finished { .. }
        ));
        assert!(
            store
                .complete_crawl(&crawl, 0, "test", T0 + 2)
                .await
                .unwrap()
        );
        (handler, dir)
    }

    fn nanos() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }

    fn event(json: &str) -> serde_json::Value {
        serde_json::from_str(json).unwrap()
    }

    async fn delivery_keys(handler: &TestHandler) -> Vec<String> {
        handler.deliverer.blobs.list("deliveries/").await.unwrap()
    }

    #[tokio::test]
    async fn the_sample_direct_event_delivers_once() {
        // GIVEN the sample crawl, completed
        let (handler, _dir) = handler("direct").await;

        // WHEN the sample direct event arrives twice
        let first = handler.deliver(event(DIRECT), T0 + 10, None).await.unwrap();
        let second = handler.deliver(event(DIRECT), T0 + 20, None).await.unwrap();

        // THEN one delivery is written, and the second call returns it
        let (DelivererResponse::Delivery(first), DelivererResponse::Delivery(second)) =
            (first, second)
        else {
            panic!("direct events answer with the delivery");
        };
        assert!(!first.already_delivered);
        assert!(second.already_delivered);
        assert_eq!(first.delivery_id, "gen-000000");
        assert_eq!(first.summary.tasks, 2);
        assert_eq!(first.summary.warc.pages, 1);
        assert_eq!(delivery_keys(&handler).await.len(), 6);
        let json = serde_json::to_value(DelivererResponse::Delivery(first)).unwrap();
        assert_eq!(json["crawl_id"], "news-2026");
    }

    #[tokio::test]
    async fn the_sample_queue_event_delivers_and_reports_no_failure() {
        // GIVEN the sample crawl, completed
        let (handler, _dir) = handler("queue").await;

        // WHEN the sample SQS event arrives
        let response = handler.deliver(event(QUEUE), T0 + 10, None).await.unwrap();

        // THEN the record succeeded and the delivery exists
        let DelivererResponse::Batch(batch) = response else {
            panic!("queue events answer with a batch response");
        };
        assert!(batch.batch_item_failures.is_empty());
        let keys = delivery_keys(&handler).await;
        assert!(
            keys.iter()
                .any(|k| k.starts_with("deliveries/crawl=news-2026/run=")
                    && k.ends_with("/gen-000000/_SUCCESS")),
            "{keys:?}"
        );
        let json = serde_json::to_value(DelivererResponse::Batch(batch)).unwrap();
        assert_eq!(json, serde_json::json!({"batchItemFailures": []}));
    }

    #[tokio::test]
    async fn malformed_events_are_typed_errors_and_change_nothing() {
        // GIVEN the sample crawl
        let (handler, _dir) = handler("malformed").await;
        let bad = [
            r#"{}"#,
            r#"{"crawl_id": "no/slashes"}"#,
            r#"{"crawl_id": "news-2026", "generation": "zero"}"#,
            r#"{"crawl_id": "news-2026", "extra": true}"#,
            r#"{"Records": "not a list"}"#,
            r#"[1, 2]"#,
        ];

        for json in bad {
            // WHEN a malformed event arrives
            let result = handler.deliver(event(json), T0 + 10, None).await;

            // THEN it is an InvalidEvent naming the problem, and nothing is delivered
            let Err(e) = result else {
                panic!("{json} was accepted");
            };
            let diagnostic = Diagnostic::from(e);
            assert_eq!(diagnostic.error_type, "InvalidEvent", "{json}");
            assert!(!diagnostic.error_message.is_empty());
        }
        let diagnostic = Diagnostic::from(
            handler
                .deliver(
                    event(r#"{"crawl_id": "news-2026", "extra": true}"#),
                    T0,
                    None,
                )
                .await
                .unwrap_err(),
        );
        assert!(
            diagnostic.error_message.contains("extra"),
            "{}",
            diagnostic.error_message
        );
        assert!(delivery_keys(&handler).await.is_empty());
    }

    #[tokio::test]
    async fn a_bad_queue_record_fails_alone() {
        // GIVEN a batch with a malformed body, an unknown crawl and the sample record
        let (handler, _dir) = handler("records").await;
        let mut batch = event(QUEUE);
        let good = batch["Records"][0].clone();
        let mut malformed = good.clone();
        malformed["messageId"] = "malformed".into();
        malformed["body"] = "{not json".into();
        let mut unknown = good.clone();
        unknown["messageId"] = "unknown".into();
        unknown["body"] = r#"{"crawl_id":"nobody"}"#.into();
        batch["Records"] = serde_json::json!([malformed, unknown, good]);

        // WHEN it is handled
        let response = handler.deliver(batch, T0 + 10, None).await.unwrap();

        // THEN only the two bad records are failures; the good one is delivered
        let DelivererResponse::Batch(batch) = response else {
            panic!("queue events answer with a batch response");
        };
        let failed: Vec<&str> = batch
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["malformed", "unknown"]);
        assert_eq!(delivery_keys(&handler).await.len(), 6);
    }

    #[tokio::test]
    async fn a_running_crawl_is_not_delivered() {
        // GIVEN the sample crawl reopened (running again, generation 1)
        let (handler, _dir) = handler("running").await;
        let crawl = CrawlId::parse("news-2026").unwrap();
        assert!(
            handler
                .deliverer
                .store
                .reopen_crawl(&crawl, T0 + 5)
                .await
                .unwrap()
        );

        // WHEN it is requested without a generation
        let e = handler
            .deliver(event(r#"{"crawl_id": "news-2026"}"#), T0 + 10, None)
            .await
            .unwrap_err();

        // THEN the error says so (completion may still come), and nothing is written
        let diagnostic = Diagnostic::from(e);
        assert_eq!(diagnostic.error_type, "Retryable");
        assert!(
            diagnostic.error_message.contains("still running"),
            "{}",
            diagnostic.error_message
        );
        assert!(delivery_keys(&handler).await.is_empty());
    }

    #[tokio::test]
    async fn a_delivery_past_its_deadline_continues_through_the_queue() {
        // GIVEN the sample crawl with 300 more tasks, and a deadline already passed
        let (handler, _dir) = handler("continued").await;
        let crawl = CrawlId::parse("news-2026").unwrap();
        let more: Vec<NewTask> = (0..300)
            .map(|i| NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&format!("http://example.com/more/{i}")).unwrap(),
                depth: 1,
                parent: None,
                data: None,
            })
            .collect();
        handler
            .deliverer
            .store
            .seed(&crawl, &more, T0)
            .await
            .unwrap();
        let record = |body: String| {
            let mut batch = event(QUEUE);
            batch["Records"][0]["body"] = body.into();
            batch
        };

        // WHEN the sample record is handled, then each continuation it queues, each invocation
        // stopping at once (after the minimum of work)
        let mut pending = vec![record(r#"{"crawl_id":"news-2026"}"#.to_owned())];
        let mut invocations = 0;
        while let Some(batch) = pending.pop() {
            invocations += 1;
            assert!(invocations < 50, "the delivery does not end");
            let response = handler
                .deliver(batch, T0 + 10, Some(Instant::now()))
                .await
                .unwrap();
            let DelivererResponse::Batch(batch) = response else {
                panic!("queue events answer with a batch response");
            };
            assert!(batch.batch_item_failures.is_empty());
            for notice in handler.continuation.take() {
                pending.push(record(serde_json::to_string(&notice).unwrap()));
            }
        }

        // THEN it took several invocations, each acknowledged, and ended with one delivery of
        // every task
        assert!(invocations >= 3, "{invocations}");
        let keys = delivery_keys(&handler).await;
        assert!(
            keys.iter().any(|k| k.ends_with("/gen-000000/_SUCCESS")),
            "{keys:?}"
        );
        assert!(
            !keys.iter().any(|k| k.ends_with("checkpoint.json")),
            "{keys:?}"
        );
        let DelivererResponse::Delivery(report) =
            handler.deliver(event(DIRECT), T0 + 20, None).await.unwrap()
        else {
            panic!("direct events answer with the delivery");
        };
        assert!(report.already_delivered);
        assert_eq!(report.summary.tasks, 302);
        assert_eq!(report.summary.warc.pages, 1);
    }
}
