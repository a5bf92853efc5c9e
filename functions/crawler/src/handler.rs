//! SQS batch in, partial batch failures out. Every message that must come back (retry with
//! backoff, handed back near the deadline, malformed) is reported as a failure; nothing is
//! acknowledged that was not handled.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use trawl_core::app::Ports;
use trawl_core::crawler::{Crawler, Disposition, MessageResult, Outcome};
use trawl_core::fetch::FetchStats;
use trawl_core::queue::{Received, WorkMessage, WorkQueue};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Millis, now_ms};
use trawl_lambda::metrics::{Metric, OUTCOME, Record};
use trawl_lambda::{HandlerError, work_deadline};

/// The `Function` dimension of its metrics.
const FUNCTION: &str = "crawler";

/// Nothing kept back from the Lambda deadline here: the crawler itself starts no fetch that could
/// not finish before it (the crawl's fetch timeout plus a margin) and hands those messages back.
pub const DEADLINE_MARGIN: Duration = Duration::ZERO;

/// What every invocation uses, built once per cold start. The crawler (ports, HTTP client,
/// crawl-config cache) is shared, so clones share its cache.
pub struct Handler<P: Ports> {
    pub crawler: Arc<Crawler<P>>,
}

impl<P: Ports> Clone for Handler<P> {
    fn clone(&self) -> Self {
        Self {
            crawler: self.crawler.clone(),
        }
    }
}

impl<P: Ports> Handler<P> {
    pub fn new(crawler: Crawler<P>) -> Self {
        Self {
            crawler: Arc::new(crawler),
        }
    }

    /// The Lambda entry: the event as sent, so that one that is no SQS batch is refused with the
    /// `InvalidEvent` every trawl function answers (the runtime's own decoding error has no
    /// stable type) and nothing is touched.
    pub async fn handle_payload(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<SqsBatchResponse, HandlerError> {
        let (payload, context) = event.into_parts();
        let batch =
            parse_event(payload).inspect_err(|e| tracing::warn!(error = %e, "bad event"))?;
        // Boxed: the batch's future is large, and inside the runtime's it overflows rustc's
        // layout depth.
        Box::pin(self.handle(LambdaEvent::new(batch, context))).await
    }

    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, HandlerError> {
        let deadline = work_deadline(&event.context, DEADLINE_MARGIN).map(|d| d.into_std());
        let started = std::time::Instant::now();
        let mut batch = Vec::with_capacity(event.payload.records.len());
        for (i, record) in event.payload.records.into_iter().enumerate() {
            let (Some(message_id), Some(receipt)) = (record.message_id, record.receipt_handle)
            else {
                return Err(HandlerError::invalid(format!(
                    "record {i} has no messageId or receiptHandle: cannot report it individually"
                )));
            };
            // The event source mapping passes SQS's count in the record's attributes.
            let receives = record
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            // Which crawl queue it came from (the regular or the priority one), for its
            // hand-back.
            let receipt = self
                .crawler
                .queue()
                .receipt_from(record.event_source_arn.as_deref(), receipt);
            batch.push(Received {
                message_id,
                receipt,
                body: record.body.unwrap_or_default(),
                receives,
            });
        }
        let crawls = crawls_of(&batch);
        let results = self.crawler.process_batch(batch, deadline).await;
        let elapsed_ms = started.elapsed().as_millis() as f64;
        let fetches = self.crawler.fetcher().take_stats();
        for record in batch_metrics(&crawls, &results, &fetches, elapsed_ms, now_ms()) {
            record.emit();
        }
        Ok(respond(self.crawler.queue(), results).await)
    }
}

/// Decodes the crawl queue's batch.
pub fn parse_event(payload: serde_json::Value) -> Result<SqsEvent, HandlerError> {
    serde_json::from_value(payload)
        .map_err(|e| HandlerError::invalid(format!("malformed SQS event: {e}")))
}

/// The crawl of each message (by message id); malformed messages have none.
fn crawls_of(batch: &[Received]) -> HashMap<String, CrawlId> {
    batch
        .iter()
        .filter_map(|r| {
            let message = WorkMessage::parse(&r.body).ok()?;
            Some((r.message_id.clone(), message.crawl_id))
        })
        .collect()
}

/// The outcome's name in the `Outcome` dimension.
fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded { .. } => "succeeded",
        Outcome::Unchanged => "unchanged",
        Outcome::Redirected => "redirected",
        Outcome::Retrying { .. } => "retrying",
        Outcome::GaveUp => "gave_up",
        Outcome::Snoozed => "snoozed",
        Outcome::Skipped => "skipped",
        Outcome::Malformed => "malformed",
        Outcome::Error => "error",
    }
}

/// Where fetches go when a batch held several crawls' turns (the fetcher counts per batch).
const MIXED_CRAWLS: &str = "(several)";

/// The batch's metrics, one record per crawl: pages and bytes fetched, tasks by outcome, snoozes,
/// messages handed back, and the batch's duration; the fetches by status or error kind, and their
/// latencies, go to the batch's crawl (or to [`MIXED_CRAWLS`]).
fn batch_metrics(
    crawls: &HashMap<String, CrawlId>,
    results: &[MessageResult],
    fetches: &FetchStats,
    elapsed_ms: f64,
    now: Millis,
) -> Vec<Record> {
    let mut records: Vec<Record> = Vec::new();
    for result in results {
        let Some(crawl_id) = crawls.get(&result.message_id) else {
            continue;
        };
        let index = match records
            .iter()
            .position(|r| r.crawl_id() == crawl_id.as_str())
        {
            Some(index) => index,
            None => {
                let mut record = Record::new(FUNCTION, crawl_id.as_str(), now);
                record.add(Metric::BatchDuration, elapsed_ms);
                records.push(record);
                records.len() - 1
            }
        };
        let record = &mut records[index];
        let handed_back = !matches!(result.disposition, Disposition::Done);
        record.add(Metric::MessagesHandedBack, f64::from(u8::from(handed_back)));
        if result.reference_misses > 0 {
            record.add(
                Metric::Soft404ReferenceMisses,
                result.reference_misses as f64,
            );
        }
        for outcome in &result.outcomes {
            let (pages, bytes) = match outcome {
                Outcome::Succeeded { bytes, .. } => (1.0, *bytes as f64),
                Outcome::Unchanged | Outcome::Redirected => (1.0, 0.0),
                _ => (0.0, 0.0),
            };
            record
                .add(Metric::PagesFetched, pages)
                .add(Metric::BytesFetched, bytes)
                .add(
                    Metric::HostSnoozes,
                    f64::from(u8::from(*outcome == Outcome::Snoozed)),
                )
                .add_kind(OUTCOME, Metric::TaskOutcomes, outcome_name(outcome), 1.0);
        }
    }
    if fetches.fetches > 0 {
        let fetched = match records.as_mut_slice() {
            [only] => only,
            _ => {
                records.push(Record::new(FUNCTION, MIXED_CRAWLS, now));
                let last = records.len() - 1;
                &mut records[last]
            }
        };
        fetched.add_samples(Metric::FetchLatency, &fetches.latencies_ms);
        for (outcome, count) in &fetches.outcomes {
            fetched.add_kind(OUTCOME, Metric::FetchOutcomes, outcome, *count as f64);
        }
    }
    records
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
            // Malformed (logged by the crawler): it comes back after the visibility timeout
            // and, after the queue's receives, goes to the dead-letter queue.
            Disposition::Reject(_) => response.add_failure(result.message_id),
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::Diagnostic;
    use std::time::{SystemTime, UNIX_EPOCH};
    use trawl_core::app::App;
    use trawl_core::blob::BlobStore;
    use trawl_core::blob::memory::MemoryBlobStore;
    use trawl_core::fetch::Fetcher;
    use trawl_core::frontier::add_tasks;
    use trawl_core::queue::local::LocalQueue;
    use trawl_core::store::CrawlStore;
    use trawl_core::store::TaskRecords;
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
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(u).unwrap(),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect();
        add_tasks(&store, &queue, &crawl, tasks, 0).await.unwrap();
        let app = App::new(store, MemoryBlobStore::new(), queue, calls);
        let handler = Handler::new(Crawler::new(
            Arc::new(app),
            Arc::new(Fetcher::new("").unwrap()),
            10,
        ));

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

    #[test]
    fn a_batch_s_metrics_count_pages_bytes_outcomes_and_messages_handed_back_per_crawl() {
        // GIVEN a batch of two crawls' turns: one stored 2 pages (one unchanged) and snoozed a
        // task and found its soft-404 reference page no longer recognised, one came back to retry
        // later; and a malformed message of no crawl
        let result = |id: &str, disposition, outcomes: Vec<Outcome>| MessageResult {
            message_id: id.into(),
            receipt: String::new(),
            disposition,
            outcomes,
            reference_misses: 0,
        };
        let results = [
            MessageResult {
                reference_misses: 1,
                ..result(
                    "m1",
                    Disposition::Done,
                    vec![
                        Outcome::Succeeded {
                            bytes: 100,
                            put: true,
                        },
                        Outcome::Unchanged,
                        Outcome::Snoozed,
                    ],
                )
            },
            result("m2", Disposition::RetryAfter(1_000), vec![Outcome::Error]),
            result(
                "m3",
                Disposition::Reject("x".into()),
                vec![Outcome::Malformed],
            ),
        ];
        let crawls = HashMap::from([
            ("m1".to_owned(), CrawlId::parse("a").unwrap()),
            ("m2".to_owned(), CrawlId::parse("b").unwrap()),
        ]);

        // WHEN its metrics are made, with the batch's fetches
        let fetches = FetchStats {
            outcomes: [("200".to_owned(), 2), ("error:timeout".to_owned(), 1)].into(),
            latencies_ms: vec![10.0, 20.0, 30.0],
            fetches: 3,
        };
        let records = batch_metrics(&crawls, &results, &fetches, 250.0, 1_000);

        // THEN each crawl has its own, and the malformed message counts for none; the fetches of
        // two crawls' batch go to neither
        let lines: Vec<Vec<serde_json::Value>> = records.iter().map(|r| r.lines()).collect();
        assert_eq!(lines.len(), 3);
        let mixed = &lines[2];
        assert_eq!(mixed[0]["CrawlId"], MIXED_CRAWLS);
        assert_eq!(
            mixed[0]["FetchLatency"],
            serde_json::json!([10.0, 20.0, 30.0])
        );
        assert_eq!(
            (
                mixed[1]["Outcome"].as_str(),
                mixed[1]["FetchOutcomes"].as_f64()
            ),
            (Some("200"), Some(2.0))
        );
        assert_eq!(mixed[2]["Outcome"], "error:timeout");
        let a = &lines[0][0];
        assert_eq!(
            (a["CrawlId"].as_str(), a["Function"].as_str()),
            (Some("a"), Some("crawler"))
        );
        assert_eq!(a["PagesFetched"], 2.0);
        assert_eq!(a["BytesFetched"], 100.0);
        assert_eq!(a["HostSnoozes"], 1.0);
        assert_eq!(a["MessagesHandedBack"], 0.0);
        assert_eq!(a["BatchDuration"], 250.0);
        assert_eq!(a["Soft404ReferenceMisses"], 1.0);
        let outcomes: Vec<(&str, f64)> = lines[0][1..]
            .iter()
            .map(|l| {
                (
                    l["Outcome"].as_str().unwrap(),
                    l["TaskOutcomes"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            [("succeeded", 1.0), ("unchanged", 1.0), ("snoozed", 1.0)]
        );
        assert_eq!(lines[1][0]["MessagesHandedBack"], 1.0);
        assert!(lines[1][0].get("Soft404ReferenceMisses").is_none());
        assert_eq!(lines[1][1]["Outcome"], "error");
    }

    #[tokio::test]
    async fn a_record_without_id_fails_the_whole_batch_so_nothing_is_lost() {
        let mut event: SqsEvent = serde_json::from_str(EVENT).unwrap();
        event.records[1].message_id = None;
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(30), calls.clone());
        let app = App::new(MemoryStore::new(), MemoryBlobStore::new(), queue, calls);
        let handler = Handler::new(Crawler::new(
            Arc::new(app),
            Arc::new(Fetcher::new("").unwrap()),
            10,
        ));
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
