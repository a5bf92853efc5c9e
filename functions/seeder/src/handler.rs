//! The seeder's glue: a seed request in, a response with counts (and a cursor when unfinished)
//! or a typed error out.

use lambda_runtime::Diagnostic;
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use trawl_core::queue::WorkQueue;
use trawl_core::seed::{ManifestSource, SeedBudget, SeedError, SeedRequest, SeedResponse, Seeder};
use trawl_core::store::{CrawlStore, TaskStore};
use trawl_domain::task::Millis;

/// Time kept back from the Lambda deadline: the batch in flight and the response must fit.
pub const DEADLINE_MARGIN_MS: u64 = 20_000;

/// How an invocation failed, as the caller sees it (`error_type`).
#[derive(Debug, Error)]
pub enum SeederError {
    /// The request is malformed; nothing was written. Fix it, do not retry it.
    #[error("{0}")]
    InvalidRequest(String),
    /// A backend was unavailable; the same request (seeding is idempotent) may be retried.
    #[error("{0}")]
    Retryable(String),
    /// A backend refused the work (permissions, missing table …).
    #[error("{0}")]
    Permanent(String),
}

impl SeederError {
    pub fn error_type(&self) -> &'static str {
        match self {
            SeederError::InvalidRequest(_) => "InvalidRequest",
            SeederError::Retryable(_) => "Retryable",
            SeederError::Permanent(_) => "Permanent",
        }
    }
}

impl From<SeedError> for SeederError {
    fn from(e: SeedError) -> Self {
        match e {
            SeedError::InvalidRequest(_) => SeederError::InvalidRequest(e.to_string()),
            e if e.is_retryable() => SeederError::Retryable(e.to_string()),
            e => SeederError::Permanent(e.to_string()),
        }
    }
}

impl From<SeederError> for Diagnostic {
    fn from(e: SeederError) -> Self {
        Diagnostic {
            error_type: e.error_type().to_owned(),
            error_message: e.to_string(),
        }
    }
}

/// The instant to stop starting batches: the Lambda deadline (epoch ms) minus the margin.
/// None when the runtime gave no deadline.
pub fn deadline_from(deadline_ms: u64, now: Millis) -> Option<Instant> {
    if deadline_ms == 0 {
        return None;
    }
    let remaining = deadline_ms
        .saturating_sub(u64::try_from(now).unwrap_or(0))
        .saturating_sub(DEADLINE_MARGIN_MS);
    Instant::now().checked_add(Duration::from_millis(remaining))
}

/// Handles one seed event.
pub async fn handle<S, Q, M>(
    seeder: &Seeder<'_, S, Q, M>,
    event: serde_json::Value,
    deadline: Option<Instant>,
    now: Millis,
) -> Result<SeedResponse, SeederError>
where
    S: TaskStore + CrawlStore,
    Q: WorkQueue,
    M: ManifestSource,
{
    let request = SeedRequest::from_json(event).inspect_err(|e| {
        tracing::warn!(error = %e, "malformed seed request");
    })?;
    let crawl_id = request.crawl_id.to_string();
    let budget = SeedBudget {
        deadline,
        ..SeedBudget::default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;
    use trawl_core::fetch::Fetcher;
    use trawl_core::seed::{ManifestError, OpenManifest, SeedDefaults, SeedSource};
    use trawl_core::store::StoreError;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::CrawlId;
    use trawl_embedded::local_queue::LocalQueue;
    use trawl_embedded::sqlite::SqliteStore;

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

    struct Ports {
        store: SqliteStore,
        queue: LocalQueue,
        fetcher: Fetcher,
        manifests: MemoryManifests,
        defaults: SeedDefaults,
    }

    impl Ports {
        fn new() -> Self {
            let calls = Arc::new(CallCounts::default());
            Self {
                store: SqliteStore::in_memory(calls.clone()).unwrap(),
                queue: LocalQueue::new(Duration::from_secs(60), calls),
                fetcher: Fetcher::new("").unwrap(),
                manifests: MemoryManifests::default(),
                defaults: SeedDefaults::default(),
            }
        }

        fn seeder(&self) -> Seeder<'_, SqliteStore, LocalQueue, MemoryManifests> {
            Seeder {
                store: &self.store,
                queue: &self.queue,
                fetcher: &self.fetcher,
                manifests: &self.manifests,
                defaults: &self.defaults,
            }
        }

        async fn run(&self, event: &str) -> Result<SeedResponse, SeederError> {
            let event = serde_json::from_str(event).unwrap();
            handle(&self.seeder(), event, None, 1_000).await
        }
    }

    #[tokio::test]
    async fn the_urls_event_seeds_once_and_reports_rejections() {
        let ports = Ports::new();
        let first = ports.run(URLS).await.unwrap();
        assert!(first.created);
        assert_eq!((first.accepted, first.rejected), (3, 1));
        assert!(first.rejections[0].input.starts_with("mailto:"));
        assert_eq!(ports.queue.len(), 3);
        let crawl = ports
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

        let again = ports.run(URLS).await.unwrap();
        assert!(!again.created);
        assert_eq!((again.accepted, again.already_known), (0, 3));
        assert_eq!(ports.queue.len(), 3, "a re-seed sends nothing");
    }

    #[tokio::test]
    async fn the_s3_event_streams_its_manifest() {
        let mut ports = Ports::new();
        let manifest = "{\"url\": \"https://example.com/a\", \"sku\": 1}\n\
                        \"https://example.com/b\"\n\
                        not json\n\
                        {\"url\": \"https://elsewhere.org/c\"}\n";
        ports.manifests.0.insert(
            ("trawl-seeds".into(), "manifests/catalogue.jsonl".into()),
            manifest.as_bytes().to_vec(),
        );
        let response = ports.run(S3).await.unwrap();
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
        let ports = Ports::new();
        let response = ports.run(PAGINATION).await.unwrap();
        assert_eq!((response.accepted, response.rejected), (23, 0));
        assert_eq!(ports.queue.len(), 23);
    }

    #[test]
    fn the_sitemap_event_is_a_valid_request() {
        // Fetching it needs the network; tests/seeding.rs seeds sitemaps from a loopback site.
        let request = SeedRequest::from_json(serde_json::from_str(SITEMAP).unwrap()).unwrap();
        assert!(matches!(request.source, SeedSource::Sitemaps(ref s) if s.len() == 2));
    }

    #[tokio::test]
    async fn malformed_events_are_invalid_requests_and_write_nothing() {
        let ports = Ports::new();
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
            let err = ports.run(event).await.unwrap_err();
            let diagnostic = Diagnostic::from(err);
            assert_eq!(diagnostic.error_type, "InvalidRequest", "{event}");
            assert!(!diagnostic.error_message.is_empty());
        }
        assert!(ports.store.list_crawls(None).await.unwrap().is_empty());
        assert!(ports.queue.is_empty());
    }

    #[test]
    fn backend_failures_map_to_stable_error_types() {
        let unavailable = SeedError::Store(StoreError::Unavailable {
            operation: "PutItem",
            message: "throttled".into(),
        });
        assert_eq!(SeederError::from(unavailable).error_type(), "Retryable");
        let denied = SeedError::Store(StoreError::Backend {
            operation: "PutItem",
            message: "AccessDenied".into(),
        });
        assert_eq!(SeederError::from(denied).error_type(), "Permanent");
    }

    #[test]
    fn the_deadline_keeps_a_margin() {
        assert!(deadline_from(0, 5).is_none());
        let soon = deadline_from(10_000, 0).unwrap();
        assert!(
            soon <= Instant::now(),
            "less than the margin left: stop at once"
        );
        let later = deadline_from(100_000, 0).unwrap();
        assert!(later > Instant::now() + Duration::from_secs(60));
    }
}
