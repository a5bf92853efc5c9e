//! The seeder's glue. Two events:
//! - a seed-queue batch (`trawl submit`, or its own continuation): each record's request is
//!   seeded until the deadline; an unfinished one sends its continuation (the same request with
//!   the cursor) to the seed queue, so any source seeds itself to the end. A record that holds
//!   an operation (an `operation` field) is run the same way: an unfinished `reextract` sends
//!   itself on with its cursor, so a re-extraction sent to the queue runs to its end. A record
//!   that fails (or whose continuation cannot be sent) is reported back and comes again:
//!   seeding and operations are idempotent, so nothing is done twice.
//! - a direct invocation with one seed request: answered with the counts, and the cursor when
//!   unfinished (the caller continues with it); or with an operator's operation (an `operation`
//!   field: recrawl, refetch, reset, config, reextract — `trawl_core::operate`), answered with
//!   what it did (an unfinished `reextract`, stopped at the deadline, with its cursor).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;
use trawl_core::app::Ports;
use trawl_core::continuation::SeedQueue;
use trawl_core::operate::{OperateError, Operation, OperationRequest, OperationResponse, operate};
use trawl_core::seed::{SeedBudget, SeedRequest, SeedResponse, Seeder};
use trawl_domain::task::{Millis, now_ms};
use trawl_lambda::{HandlerError, bounded, metrics, work_deadline};

/// Time kept back from the Lambda deadline: the batch in flight and the response must fit.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(20);

/// What every invocation uses, built once per cold start: the seeder, and the seed queue where
/// unfinished seeds from it go on.
pub struct Handler<P: Ports, C> {
    pub seeder: Seeder<P>,
    pub seeds: C,
}

/// What the function answers.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SeederResponse {
    /// To the seed queue: the records to retry (ReportBatchItemFailures).
    Batch(SqsBatchResponse),
    /// To a direct caller: what was seeded, and the cursor when unfinished.
    Seeded(Box<SeedResponse>),
    /// To a direct caller: what an operation did.
    Operated(Box<OperationResponse>),
}

impl<P: Ports, C: SeedQueue> Handler<P, C> {
    pub async fn handle(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<SeederResponse, HandlerError> {
        let deadline = work_deadline(&event.context, DEADLINE_MARGIN);
        // Boxed too: the runtime's future holds this one, past rustc's layout depth inline.
        Box::pin(self.dispatch(event.payload, deadline, now_ms())).await
    }

    /// A seed-queue batch or a direct request (told apart by the batch's `Records`).
    pub async fn dispatch(
        &self,
        payload: serde_json::Value,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<SeederResponse, HandlerError> {
        if payload.get("operation").is_some() {
            let operated = self.operate(payload, deadline, now).await?;
            return Ok(SeederResponse::Operated(Box::new(operated)));
        }
        if payload.get("Records").is_none() {
            let response = self.seed(payload, deadline, now).await?;
            return Ok(SeederResponse::Seeded(Box::new(response)));
        }
        let event: SqsEvent = serde_json::from_value(payload)
            .map_err(|e| HandlerError::invalid(format!("malformed SQS event: {e}")))?;
        let mut response = SqsBatchResponse::default();
        for record in &event.records {
            if !self.seed_record(record, deadline, now).await {
                // An empty id makes Lambda retry the whole batch: still no record lost.
                response.add_failure(record.message_id.clone().unwrap_or_default());
            }
        }
        Ok(SeederResponse::Batch(response))
    }

    /// Seeds one seed-queue record, sending its continuation when unfinished; false when the
    /// record must come back (or, after the queue's retries, go to its dead-letter queue).
    async fn seed_record(
        &self,
        record: &SqsMessage,
        deadline: Option<Instant>,
        now: Millis,
    ) -> bool {
        let id = record.message_id.as_deref().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or_default();
        let value: Result<serde_json::Value, String> =
            serde_json::from_str(body).map_err(|e| e.to_string());
        if let Ok(value) = &value
            && value.get("operation").is_some()
        {
            return self.operate_record(id, value.clone(), deadline, now).await;
        }
        let request = match value
            .and_then(|value| SeedRequest::from_json(value).map_err(|e| e.to_string()))
        {
            Ok(request) => request,
            Err(e) => {
                tracing::error!(message_id = id, error = %bounded(e), "malformed seed message");
                return false;
            }
        };
        let mut next = request.clone();
        // Failures are logged by `seed_request`.
        let Ok(response) = self.seed_request(request, deadline, now).await else {
            return false;
        };
        let Some(cursor) = response.cursor else {
            return true;
        };
        next.cursor = Some(cursor);
        match self.seeds.send(&next).await {
            Ok(()) => {
                metrics::seed_continued(next.crawl_id.as_str(), now).emit();
                tracing::info!(message_id = id, crawl_id = %next.crawl_id, "seed continues in a new message");
                true
            }
            Err(e) => {
                tracing::warn!(message_id = id, error = %e, "could not send the seed's continuation");
                false
            }
        }
    }

    /// Runs the operation of one seed-queue record, sending an unfinished `reextract` on with
    /// its cursor; false when the record must come back (a bad operation, after the queue's
    /// retries, goes to its dead-letter queue).
    async fn operate_record(
        &self,
        id: &str,
        value: serde_json::Value,
        deadline: Option<Instant>,
        now: Millis,
    ) -> bool {
        let mut next: OperationRequest = match serde_json::from_value(value) {
            Ok(request) => request,
            Err(e) => {
                tracing::error!(message_id = id, error = %bounded(e.to_string()), "malformed operation message");
                return false;
            }
        };
        let response = match self.run_operation(&next, deadline, now).await {
            Ok(response) => response,
            Err(e) => {
                tracing::error!(message_id = id, crawl_id = %next.crawl_id, error = %e, "operation failed");
                return false;
            }
        };
        let (Operation::Reextract { cursor }, Some(cursor_now)) = (
            &mut next.operation,
            response.reextracted.and_then(|r| r.cursor),
        ) else {
            return true;
        };
        *cursor = Some(cursor_now);
        match self.seeds.send_operation(&next).await {
            Ok(()) => {
                tracing::info!(message_id = id, crawl_id = %next.crawl_id, "re-extraction continues in a new message");
                true
            }
            Err(e) => {
                tracing::warn!(message_id = id, error = %e, "could not send the re-extraction's continuation");
                false
            }
        }
    }

    /// Runs an operator's operation on a crawl (its moved tasks' hosts get their turns); a
    /// `reextract` stops at `deadline`, answering its cursor to ask again with.
    pub async fn operate(
        &self,
        event: serde_json::Value,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<OperationResponse, HandlerError> {
        let request: OperationRequest = serde_json::from_value(event)
            .map_err(|e| HandlerError::invalid(format!("malformed operation request: {e}")))?;
        self.run_operation(&request, deadline, now).await
    }

    async fn run_operation(
        &self,
        request: &OperationRequest,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<OperationResponse, HandlerError> {
        let queue = Some(&self.seeder.queue);
        match operate(&self.seeder, queue, request, deadline, now).await {
            Ok(response) => {
                tracing::info!(
                    crawl_id = response.crawl_id,
                    tasks = response.tasks,
                    reopened = response.reopened,
                    reextracted = response.reextracted.as_ref().map_or(0, |r| r.pages),
                    unfinished = response
                        .reextracted
                        .as_ref()
                        .is_some_and(|r| r.cursor.is_some()),
                    "operated"
                );
                Ok(response)
            }
            Err(OperateError::Invalid(e)) => Err(HandlerError::invalid(e)),
            // An operation is idempotent: one that failed half-way is asked again.
            Err(e) => Err(HandlerError::failed(e, true)),
        }
    }

    /// Handles one seed request, stopping at `deadline` with a cursor when unfinished.
    pub async fn seed(
        &self,
        event: serde_json::Value,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<SeedResponse, HandlerError> {
        let request = SeedRequest::from_json(event).inspect_err(|e| {
            tracing::warn!(error = %e, "malformed seed request");
        })?;
        self.seed_request(request, deadline, now).await
    }

    async fn seed_request(
        &self,
        request: SeedRequest,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<SeedResponse, HandlerError> {
        let crawl_id = request.crawl_id.to_string();
        let budget = SeedBudget {
            deadline,
            ..SeedBudget::default()
        };
        // Boxed: the seed's future is large; inline, it overflows rustc's layout depth inside
        // the runtime's future, and a debug build's stack.
        match Box::pin(self.seeder.seed(request, budget, now)).await {
            Ok(response) => {
                tracing::info!(
                    crawl_id,
                    created = response.created,
                    accepted = response.accepted,
                    already_known = response.already_known,
                    over_budget = response.over_budget,
                    deferred = response.deferred,
                    rejected = response.rejected,
                    enqueue_failed = response.enqueue_failed,
                    unfinished = response.cursor.is_some(),
                    "seeded"
                );
                metrics::seed(&response, now).emit();
                Ok(response)
            }
            Err(e) => {
                tracing::warn!(crawl_id, error = %e, "seed failed");
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::{Context, Diagnostic};
    use std::collections::HashMap;
    use std::sync::Arc;
    use trawl_core::app::{App, Unwired};
    use trawl_core::continuation::LocalSeedQueue;
    use trawl_core::fetch::Fetcher;
    use trawl_core::queue::local::LocalQueue;
    use trawl_core::seed::ManifestSource;
    use trawl_core::seed::{ManifestError, OpenManifest, SeedDefaults, SeedSource};
    use trawl_core::store::TaskRecords;
    use trawl_core::store::memory::MemoryStore;
    use trawl_core::store::{CrawlStore, HostStore, TaskStore};
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::CrawlId;
    use trawl_domain::host::Host;

    const URLS: &str = include_str!("../../../events/seeder-urls.json");
    const S3: &str = include_str!("../../../events/seeder-s3.json");
    const SITEMAP: &str = include_str!("../../../events/seeder-sitemap.json");
    const PAGINATION: &str = include_str!("../../../events/seeder-pagination.json");
    const OPEN_PAGINATION: &str = include_str!("../../../events/seeder-pagination-open.json");
    const SEED_QUEUE: &str = include_str!("../../../events/seeder-sqs.json");
    const CHAIN: &str = include_str!("../../../events/seeder-chain.json");

    /// Manifests served from memory, keyed by (bucket, key).
    #[derive(Default)]
    struct MemoryManifests(HashMap<(String, String), Vec<u8>>);

    impl ManifestSource for MemoryManifests {
        async fn open(
            &self,
            bucket: &str,
            key: &str,
            offset: u64,
            _if_match: Option<&str>,
        ) -> Result<OpenManifest, ManifestError> {
            let body = self
                .0
                .get(&(bucket.to_owned(), key.to_owned()))
                .ok_or_else(|| ManifestError::Unreadable {
                    bucket: bucket.into(),
                    key: key.into(),
                    message: "NoSuchKey".into(),
                })?;
            let rest = body[usize::try_from(offset).unwrap()..].to_vec();
            Ok(OpenManifest {
                reader: Box::pin(std::io::Cursor::new(rest)),
                etag: None,
            })
        }
    }

    type TestHandler = Handler<(MemoryStore, Unwired, LocalQueue), LocalSeedQueue>;

    fn handler() -> TestHandler {
        handler_with(MemoryManifests::default())
    }

    fn handler_with(manifests: MemoryManifests) -> TestHandler {
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
        let app = App::new(MemoryStore::new(), Unwired, queue, calls);
        let seeder = Seeder::new(
            Arc::new(app),
            Arc::new(Fetcher::new("").unwrap()),
            Arc::new(manifests),
            SeedDefaults::default(),
        );
        Handler {
            seeder,
            seeds: LocalSeedQueue::default(),
        }
    }

    /// Whether no crawl was created.
    async fn no_crawl(handler: &TestHandler) -> bool {
        handler
            .seeder
            .store
            .list_crawls(None)
            .await
            .unwrap()
            .is_empty()
    }

    /// The host records of the crawl `id`.
    async fn hosts(handler: &TestHandler, id: &str) -> Vec<Host> {
        let id = CrawlId::parse(id).unwrap();
        let page = handler.seeder.store.list_hosts(&id, None, 10).await;
        page.unwrap().hosts
    }

    /// `body` as the seed queue delivers it to Lambda.
    fn seed_queue_event(body: &str) -> serde_json::Value {
        let mut event: serde_json::Value = serde_json::from_str(SEED_QUEUE).unwrap();
        event["Records"][0]["body"] = body.into();
        event
    }

    #[tokio::test]
    async fn operations_rewind_a_crawl_and_change_its_configuration() {
        // GIVEN a crawl of the sample's id with one page fetched
        let handler = handler();
        let urls = URLS.replace("example-news", "example-com");
        let seeded = run(&handler, &urls).await.unwrap();
        assert!(seeded.accepted > 0);
        let id = CrawlId::parse("example-com").unwrap();
        let store = &handler.seeder.store;
        let task = store
            .query(&trawl_core::store::TaskQuery {
                crawl_id: id.clone(),
                status: trawl_domain::task::Status::Pending,
                updated_before: None,
                limit: 10,
                cursor: None,
                part: trawl_core::store::Part::WHOLE,
            })
            .await
            .unwrap()
            .tasks
            .into_iter()
            .find(|t| t.url.contains("/news/"))
            .unwrap();
        let trawl_core::store::ClaimOutcome::Claimed { lease, .. } = store
            .claim(&id, &task.task_id, 60_000, 2_000)
            .await
            .unwrap()
        else {
            panic!("claim refused");
        };
        let record = trawl_domain::task::FetchRecord {
            http_status: 200,
            fetched_at: 2_000,
            ..Default::default()
        };
        store.finish(&lease, &record, 2_000).await.unwrap();

        // WHEN the sample operations arrive
        let operate = |sample: &str| {
            let event: serde_json::Value = serde_json::from_str(sample).unwrap();
            handler.dispatch(event, None, 3_000)
        };
        let recrawl = operate(include_str!("../../../events/seeder-recrawl.json"))
            .await
            .unwrap();
        let config = operate(include_str!("../../../events/seeder-config.json"))
            .await
            .unwrap();
        let bad = operate(r#"{"crawl_id": "nope", "operation": {"reset": {}}}"#).await;
        let reextract = operate(include_str!("../../../events/seeder-reextract.json")).await;

        // THEN the fetched page is pending again, the configuration replaced, and an unknown
        // crawl is a bad request
        let SeederResponse::Operated(recrawl) = recrawl else {
            panic!("{recrawl:?}");
        };
        assert_eq!(recrawl.tasks, 1);
        let again = store.get(&id, &task.task_id).await.unwrap().unwrap();
        assert_eq!(again.status, trawl_domain::task::Status::Pending);
        let SeederResponse::Operated(config) = config else {
            panic!("{config:?}");
        };
        assert!(config.changed.contains(&"recrawl".to_owned()), "{config:?}");
        let stored = store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(stored.config.recrawl.rules.len(), 2);
        assert!(matches!(bad, Err(HandlerError::InvalidEvent(_))), "{bad:?}");
        // (a re-extraction needs extractors: the items tests run it on moto)
        assert!(
            matches!(&reextract, Err(HandlerError::InvalidEvent(e)) if e.contains("no extractors")),
            "{reextract:?}"
        );
    }

    async fn run(handler: &TestHandler, event: &str) -> Result<SeedResponse, HandlerError> {
        let event = serde_json::from_str(event).unwrap();
        handler.seed(event, None, 1_000).await
    }

    /// #18's bad input on the seeder: each malformed kind of event is a typed error or a record
    /// handed back, and nothing is written.
    #[tokio::test]
    async fn malformed_events_are_refused_and_change_nothing() {
        use serde_json::json;
        let sample: serde_json::Value = serde_json::from_str(URLS).unwrap();
        let with = |field: &str, value: serde_json::Value| {
            let mut event = sample.clone();
            event[field] = value;
            event
        };
        let without = |field: &str| {
            let mut event = sample.clone();
            event.as_object_mut().unwrap().remove(field);
            event
        };
        let megabyte = "x".repeat(1 << 20);
        let direct = [
            ("no crawl id", without("crawl_id")),
            ("a number as crawl id", with("crawl_id", 5.into())),
            (
                "urls as a string",
                with("source", json!({"urls": "http://example.com/"})),
            ),
            ("urls as numbers", with("source", json!({"urls": [1, 2]}))),
            ("a number as source", with("source", 5.into())),
            (
                "an unknown kind of source",
                with("source", json!({"ftp": ["x"]})),
            ),
            ("no source", without("source")),
            ("a 1 MB crawl id", with("crawl_id", megabyte.clone().into())),
            (
                "a 1 MB unknown field",
                with("padding", megabyte.clone().into()),
            ),
            ("an unknown operation", with("operation", "explode".into())),
            (
                "an operation of the wrong type",
                with("operation", 7.into()),
            ),
            ("null", serde_json::Value::Null),
            ("Records not a list", json!({"Records": "x"})),
        ];
        let handler = handler();
        for (case, event) in direct {
            let Err(e) = handler.dispatch(event, None, 1_000).await else {
                panic!("{case}: accepted");
            };
            let diagnostic = Diagnostic::from(e);
            assert_eq!(diagnostic.error_type, "InvalidEvent", "{case}");
            assert!(
                diagnostic.error_message.len() < 2_000,
                "{case}: one short message"
            );
        }
        let queued = [
            "not json",
            "{}",
            &format!(r#"{{"crawl_id":"{megabyte}"}}"#),
            r#"{"crawl_id":"example-com","operation":"explode"}"#,
            r#"{"crawl_id":"no-such-crawl","operation":{"reextract":{}}}"#,
        ];
        for body in queued {
            let answer = handler.dispatch(seed_queue_event(body), None, 1_000).await;
            let Ok(SeederResponse::Batch(batch)) = answer else {
                panic!("{body:.20}: {answer:?}");
            };
            assert_eq!(
                batch.batch_item_failures.len(),
                1,
                "{body:.20}: handed back"
            );
        }
        assert!(no_crawl(&handler).await);
    }

    #[tokio::test]
    async fn the_urls_event_seeds_once_and_reports_rejections() {
        let handler = handler();
        let first = run(&handler, URLS).await.unwrap();
        assert!(first.created);
        assert_eq!((first.accepted, first.rejected), (3, 1));
        assert!(first.rejections[0].input.starts_with("mailto:"));
        // One turn message per host, whatever its number of URLs.
        let hosts = hosts(&handler, "example-news").await;
        assert_eq!(handler.seeder.queue.len(), hosts.len());
        assert_eq!(hosts.iter().map(|h| h.seeded).sum::<u64>(), 3);
        let crawl = handler
            .seeder
            .store
            .get_crawl(&CrawlId::parse("example-news").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            crawl.config.scope.allowed_domains,
            ["example.com", "www.example.com"]
        );
        assert_eq!(crawl.config.politeness.per_host, 2);

        let again = run(&handler, URLS).await.unwrap();
        assert!(!again.created);
        assert_eq!((again.accepted, again.already_known), (0, 3));
        assert_eq!(
            handler.seeder.queue.len(),
            hosts.len(),
            "a re-seed sends nothing"
        );
    }

    #[tokio::test]
    async fn the_s3_event_streams_its_manifest() {
        let manifest = "{\"url\": \"https://example.com/a\", \"sku\": 1}\n\
                        \"https://example.com/b\"\n\
                        not json\n\
                        {\"url\": \"https://elsewhere.org/c\"}\n";
        let handler = handler_with(MemoryManifests(HashMap::from([(
            ("trawl-seeds".into(), "manifests/catalogue.jsonl".into()),
            manifest.as_bytes().to_vec(),
        )])));
        let response = run(&handler, S3).await.unwrap();
        assert_eq!((response.accepted, response.rejected), (2, 2));
        let reasons: Vec<&str> = response
            .rejections
            .iter()
            .map(|r| r.reason.as_str())
            .collect();
        assert!(reasons[0].contains("JSON"), "{reasons:?}");
        assert!(reasons[1].contains("out of scope"), "{reasons:?}");
        assert!(response.cursor.is_none());
    }

    #[tokio::test]
    async fn the_pagination_event_expands_every_page() {
        let handler = handler();
        let response = run(&handler, PAGINATION).await.unwrap();
        assert_eq!((response.accepted, response.rejected), (23, 0));
        assert_eq!(handler.seeder.queue.len(), 1, "one host: one turn message");
    }

    #[tokio::test]
    async fn the_open_pagination_event_seeds_its_first_page_and_keeps_the_template() {
        // GIVEN the open-ended pagination event, sent twice
        let handler = handler();
        let first = run(&handler, OPEN_PAGINATION).await.unwrap();
        let again = run(&handler, OPEN_PAGINATION).await.unwrap();

        // THEN the first seeds the template's first page only (its next pages come one by one
        // from the crawler), with an empty since, then stores the checkpoint; the second seeds
        // the page of that checkpoint
        assert_eq!((first.accepted, first.checkpoint), (1, None));
        assert_eq!(
            (again.accepted, again.checkpoint.as_deref()),
            (1, Some("2026-11-27T08:00:00Z"))
        );
        let id = CrawlId::parse("example-api").unwrap();
        let crawl = handler.seeder.store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(crawl.config.paging.len(), 1);
        assert!(crawl.config.paging[0].is_open());
    }

    #[tokio::test]
    async fn the_chain_event_seeds_two_posts_to_one_url_as_two_tasks_and_refuses_a_bad_method() {
        // GIVEN the chain event: two searches POSTed to one URL, one with a method trawl does
        // not send, and a listing page
        let handler = handler();

        // WHEN it is seeded
        let seeded = run(&handler, CHAIN).await.unwrap();

        // THEN the two POSTs are two tasks beside the listing, the bad one is rejected with its
        // reason, and the crawl keeps its chain and retry rules
        assert_eq!((seeded.accepted, seeded.rejected), (3, 1), "{seeded:?}");
        assert!(
            seeded.rejections[0]
                .reason
                .contains("_method \"PUT\" is not"),
            "{seeded:?}"
        );
        let id = CrawlId::parse("example-chain").unwrap();
        let counts = handler.seeder.store.counts(&id).await.unwrap();
        assert_eq!(counts.values().sum::<u64>(), 3, "{counts:?}");
        let crawl = handler.seeder.store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(
            (crawl.config.chains.len(), crawl.config.retry_with.len()),
            (2, 1)
        );
    }

    #[tokio::test]
    async fn a_short_or_emulated_deadline_still_seeds_the_whole_request() {
        // GIVEN a deadline 10 s away (less than the margin), and the fixed, long-past deadline
        // `cargo lambda watch` sends
        let now = u64::try_from(now_ms()).unwrap();
        for deadline in [now + 10_000, 600_000] {
            let handler = handler();
            let mut context = Context::default();
            context.deadline = deadline;

            // WHEN the pagination event arrives
            let event = LambdaEvent::new(serde_json::from_str(PAGINATION).unwrap(), context);
            let SeederResponse::Seeded(response) = handler.handle(event).await.unwrap() else {
                panic!("a direct request gets the seed's response");
            };

            // THEN every page is seeded at once: no cursor to come back with
            assert_eq!(response.accepted, 23, "deadline {deadline}");
            assert!(response.cursor.is_none(), "deadline {deadline}");
        }
    }

    #[tokio::test]
    async fn a_queued_seed_past_its_deadline_continues_through_the_seed_queue_to_the_end() {
        // GIVEN the seed-queue sample event, and an invocation whose deadline has passed (so
        // each one seeds a single URL before it must stop)
        let handler = handler();
        let sample: serde_json::Value = serde_json::from_str(SEED_QUEUE).unwrap();
        let body = sample["Records"][0]["body"].as_str().unwrap().to_owned();
        let mut pending = vec![body];
        let mut invocations = 0;

        // WHEN each message the seeder sends to its queue is delivered back to it, as the
        // event source mapping would (bounded: 23 URLs need 23 invocations)
        while let Some(body) = pending.pop() {
            invocations += 1;
            assert!(invocations <= 30, "the seed never ends");
            let response = handler
                .dispatch(seed_queue_event(&body), Some(Instant::now()), 1_000)
                .await
                .unwrap();
            let SeederResponse::Batch(batch) = response else {
                panic!("a queue event gets a batch response");
            };
            assert!(batch.batch_item_failures.is_empty());
            pending.extend(
                handler
                    .seeds
                    .take()
                    .iter()
                    .map(|r| serde_json::to_string(r).unwrap()),
            );
        }

        // THEN every page of the template was seeded, once, and nothing is left to send
        let hosts = hosts(&handler, "example-listing").await;
        assert_eq!(hosts.iter().map(|h| h.seeded).sum::<u64>(), 23);
        assert!(invocations > 1, "the deadline split the seed");
    }

    #[tokio::test]
    async fn a_malformed_seed_message_is_reported_back_not_acknowledged() {
        let handler = handler();
        let response = handler
            .dispatch(seed_queue_event("{\"crawl_id\": \"bad id!\"}"), None, 1_000)
            .await
            .unwrap();
        let SeederResponse::Batch(batch) = response else {
            panic!("a queue event gets a batch response");
        };
        assert_eq!(batch.batch_item_failures.len(), 1);
        assert!(no_crawl(&handler).await);
    }

    #[test]
    fn the_sitemap_event_is_a_valid_request() {
        // Fetching it needs the network; tests/seeding.rs seeds sitemaps from a loopback site.
        let request = SeedRequest::from_json(serde_json::from_str(SITEMAP).unwrap()).unwrap();
        assert!(matches!(request.source, SeedSource::Sitemaps(ref s) if s.len() == 2));
    }

    #[tokio::test]
    async fn malformed_events_are_invalid_requests_and_write_nothing() {
        let handler = handler();
        let missing_manifest = S3.replace("catalogue.jsonl", "nope.jsonl");
        let bad_template = PAGINATION.replace("{page}\", \"start\"", "\", \"start\"");
        let bad_scope = URLS.replace("/login", "(");
        for event in [
            r#"{"crawl_id": "x", "source": {"urls": ["https://a/"]}, "typo": 1}"#,
            r#"{"crawl_id": "bad id!", "source": {"urls": ["https://a/"]}}"#,
            r#"{"crawl_id": "x", "source": {"urls": ["ftp://a/", "nonsense"]}}"#,
            r#"{"crawl_id": "x", "source": {"urls": ["https://a/"]}, "cursor": "zzz"}"#,
            r#"{"crawl_id": "x", "source": {"urls": ["https://a/"]},
                "config": {"politeness": {"per_host": 0}}}"#,
            r#"[1, 2]"#,
            &missing_manifest,
            &bad_template,
            &bad_scope,
        ] {
            let err = run(&handler, event).await.unwrap_err();
            let diagnostic = Diagnostic::from(err);
            assert_eq!(diagnostic.error_type, "InvalidEvent", "{event}");
            assert!(!diagnostic.error_message.is_empty());
        }
        assert!(no_crawl(&handler).await);
        assert!(handler.seeder.queue.is_empty());
    }
}
