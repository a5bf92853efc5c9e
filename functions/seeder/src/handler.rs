//! The seeder's glue: a seed request in, a response with counts (and a cursor when unfinished)
//! or a typed error out.

use lambda_runtime::LambdaEvent;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use trawl_core::fetch::Fetcher;
use trawl_core::queue::WorkQueue;
use trawl_core::seed::{
    ManifestSource, SeedBudget, SeedDefaults, SeedRequest, SeedResponse, Seeder,
};
use trawl_core::store::{CrawlStore, HostStore, TaskStore};
use trawl_domain::calls::CallCounts;
use trawl_domain::task::{Millis, now_ms};
use trawl_lambda::{HandlerError, work_deadline};

/// Time kept back from the Lambda deadline: the batch in flight and the response must fit.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(20);

/// What every invocation uses, built once per cold start (cheap to clone: SDK clients and `Arc`s).
#[derive(Clone)]
pub struct Handler<S, Q, M> {
    pub store: S,
    pub queue: Q,
    pub fetcher: Arc<Fetcher>,
    pub manifests: M,
    pub defaults: SeedDefaults,
    /// The counters the adapters share.
    pub calls: Arc<CallCounts>,
}

impl<S, Q, M> Handler<S, Q, M>
where
    S: TaskStore + CrawlStore + HostStore,
    Q: WorkQueue,
    M: ManifestSource,
{
    pub async fn handle(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<SeedResponse, HandlerError> {
        let deadline = work_deadline(&event.context, DEADLINE_MARGIN);
        self.seed(event.payload, deadline, now_ms()).await
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
        let crawl_id = request.crawl_id.to_string();
        let budget = SeedBudget {
            deadline,
            ..SeedBudget::default()
        };
        let seeder = Seeder {
            store: &self.store,
            queue: &self.queue,
            fetcher: &self.fetcher,
            manifests: &self.manifests,
            defaults: &self.defaults,
            calls: &self.calls,
        };
        match seeder.seed(request, budget, now).await {
            Ok(response) => {
                tracing::info!(
                    crawl_id,
                    created = response.created,
                    accepted = response.accepted,
                    already_known = response.already_known,
                    over_budget = response.over_budget,
                    rejected = response.rejected,
                    enqueue_failed = response.enqueue_failed,
                    unfinished = response.cursor.is_some(),
                    "seeded"
                );
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
    use trawl_core::fetch::Fetcher;
    use trawl_core::queue::local::LocalQueue;
    use trawl_core::seed::{ManifestError, OpenManifest, SeedDefaults, SeedSource};
    use trawl_core::store::memory::MemoryStore;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::CrawlId;

    const URLS: &str = include_str!("../../../events/seeder-urls.json");
    const S3: &str = include_str!("../../../events/seeder-s3.json");
    const SITEMAP: &str = include_str!("../../../events/seeder-sitemap.json");
    const PAGINATION: &str = include_str!("../../../events/seeder-pagination.json");

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

    type TestHandler = Handler<MemoryStore, LocalQueue, MemoryManifests>;

    fn handler() -> TestHandler {
        let calls = Arc::new(CallCounts::default());
        Handler {
            store: MemoryStore::new(),
            queue: LocalQueue::new(Duration::from_secs(60), calls.clone()),
            fetcher: Arc::new(Fetcher::new("").unwrap()),
            manifests: MemoryManifests::default(),
            defaults: SeedDefaults::default(),
            calls,
        }
    }

    async fn run(handler: &TestHandler, event: &str) -> Result<SeedResponse, HandlerError> {
        let event = serde_json::from_str(event).unwrap();
        handler.seed(event, None, 1_000).await
    }

    #[tokio::test]
    async fn the_urls_event_seeds_once_and_reports_rejections() {
        let handler = handler();
        let first = run(&handler, URLS).await.unwrap();
        assert!(first.created);
        assert_eq!((first.accepted, first.rejected), (3, 1));
        assert!(first.rejections[0].input.starts_with("mailto:"));
        // One turn message per host, whatever its number of URLs.
        let id = CrawlId::parse("example-news").unwrap();
        let hosts = handler.store.list_hosts(&id, None, 10).await.unwrap().hosts;
        assert_eq!(handler.queue.len(), hosts.len());
        assert_eq!(hosts.iter().map(|h| h.seeded).sum::<u64>(), 3);
        let crawl = handler
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
        assert_eq!(handler.queue.len(), hosts.len(), "a re-seed sends nothing");
    }

    #[tokio::test]
    async fn the_s3_event_streams_its_manifest() {
        let mut handler = handler();
        let manifest = "{\"url\": \"https://example.com/a\", \"sku\": 1}\n\
                        \"https://example.com/b\"\n\
                        not json\n\
                        {\"url\": \"https://elsewhere.org/c\"}\n";
        handler.manifests.0.insert(
            ("trawl-seeds".into(), "manifests/catalogue.jsonl".into()),
            manifest.as_bytes().to_vec(),
        );
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
        assert_eq!(handler.queue.len(), 1, "one host: one turn message");
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
            let response = handler.handle(event).await.unwrap();

            // THEN every page is seeded at once: no cursor to come back with
            assert_eq!(response.accepted, 23, "deadline {deadline}");
            assert!(response.cursor.is_none(), "deadline {deadline}");
        }
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
        assert!(handler.store.list_crawls(None).await.unwrap().is_empty());
        assert!(handler.queue.is_empty());
    }
}
