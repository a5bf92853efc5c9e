//! Seeding: starting or extending a crawl from a seed request.
//!
//! A request names the crawl, optionally its configuration, and one source of URLs:
//!
//! ```json
//! {"crawl_id": "news", "config": {"scope": {"max_pages": 1000}},
//!  "source": {"urls": ["https://example.com/"]}}
//! {"crawl_id": "news", "source": {"s3": {"bucket": "b", "key": "seeds.jsonl", "format": "jsonl"}}}
//! {"crawl_id": "news", "source": {"sitemaps": ["https://example.com/sitemap.xml"]}}
//! {"crawl_id": "news", "source": {"pagination": [
//!     {"template": "https://example.com/p/{page}", "start": 1, "stop": 51},
//!     {"template": "https://example.com/c/{page}/", "values": ["books", "films"]}]}}
//! ```
//!
//! Everything is validated before anything is written: a malformed request is a
//! [`SeedError::InvalidRequest`] and changes nothing. Individual URLs that are not valid (or out
//! of the crawl's scope) are rejected with their reason while the others are seeded.
//!
//! Seeding goes through [`frontier::add_tasks`] in batches of [`BATCH_SIZE`], so it is idempotent
//! (re-running a seed is a no-op, never a reset), bounded by the page budget, and memory stays
//! bounded whatever the source's size. A seed larger than one invocation's [`SeedBudget`] stops
//! at a batch boundary and returns a `cursor`; the same request with that cursor continues where
//! it stopped, with nothing seeded twice or skipped.

mod cursor;
mod manifest;
mod sitemap;

pub use manifest::{
    MAX_LINE_BYTES, ManifestError, ManifestFormat, ManifestReader, ManifestSource, OpenManifest,
    OpenManifests, SeedEntry, seed_entry,
};
pub use sitemap::{MAX_SITEMAP_BYTES, MAX_SITEMAP_ENTRIES};
pub use trawl_domain::paging::{MAX_PAGES_PER_TEMPLATE, PageTemplate};

use crate::app::{App, Ports};
use crate::backoff::Transient;
use crate::clock::Clock;
use crate::discover::ScopeMatcher;
use crate::fetch::Fetcher;
use crate::frontier::{self, FrontierError, Reissue, reissue_turns, rewind_hosts};
use crate::operate::{self, OperateError, Rewind, Selection};
use crate::queue::{QueueError, send_patiently};
use crate::reextract::ReextractError;
use crate::store::{CrawlStore, StoreError, TaskQuery, TaskRecords, TaskStore};
use crate::sweep::MIN_LOST_AFTER_MS;
use cursor::{Cursor, Position};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId, host_key_of, truncate};
use trawl_domain::chain::{TaskRequest, keyed};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState, readmits};
use trawl_domain::task::{ErrorKind, Millis, NewTask, Priority, Status, UserData};

/// URLs handed to the frontier at once.
pub const BATCH_SIZE: usize = 500;
/// Most URLs a request may list inline (a Lambda payload is 6 MB; larger lists belong in S3).
pub const MAX_INLINE_URLS: usize = 10_000;
/// Most sitemaps or templates one request may list.
pub const MAX_SOURCE_ITEMS: usize = 1_000;
/// Rejections listed in a response (all are counted).
pub const MAX_LISTED_REJECTIONS: usize = 100;
/// Longest checkpoint a crawl keeps, in bytes.
pub const MAX_CHECKPOINT_BYTES: usize = 4096;
/// Most seed hosts whose robots.txt is read for `Sitemap:` lines, per request.
pub const MAX_ROBOTS_HOSTS: usize = 100;
/// Most distinct hosts an S3 manifest may have when `allowed_domains` is left empty.
pub const MAX_DERIVED_HOSTS: usize = 1_000;

/// A seed request: which crawl, its configuration, where the URLs come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedRequest {
    pub crawl_id: CrawlId,
    /// Used when the crawl is created; an existing crawl keeps its stored configuration.
    /// Absent: the defaults, with the deployment's user agent and per-host parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<CrawlConfig>,
    pub source: SeedSource,
    /// The `cursor` of a previous response, to continue an unfinished seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// An existing crawl whose stored configuration differs from `config` is refused unless
    /// this is set; then `config` replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_config: bool,
    /// Stored as the crawl's checkpoint once this seed is finished (its last invocation): a
    /// source with its own incremental listing keeps its position here (Docido's `since`).
    /// A request with an empty `urls` list seeds nothing and only reads (or writes) it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The priority of its URLs that give none of their own (`"_priority"` in a line's data):
    /// 0 to 9 (`trawl_domain::priority`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

/// Where a seed's URLs come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SeedSource {
    /// URLs listed inline.
    Urls(Vec<String>),
    /// A manifest in S3, streamed line by line.
    S3(S3Manifest),
    /// Sitemaps or sitemap indexes (gzip or not), fetched under the crawl's fetch rules.
    Sitemaps(Vec<String>),
    /// URL templates with a `{page}` placeholder.
    Pagination(Vec<PageTemplate>),
}

/// A URL manifest in S3.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Manifest {
    pub bucket: String,
    pub key: String,
    #[serde(default)]
    pub format: ManifestFormat,
}

/// Settings for crawls whose request carries no configuration (the deployment's environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedDefaults {
    pub user_agent: Option<String>,
    pub per_host: Option<u32>,
}

/// How much one invocation may do before it hands back a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedBudget {
    /// URLs read from the source (accepted or not).
    pub max_urls: u64,
    /// Stop starting new batches after this instant.
    pub deadline: Option<Instant>,
}

impl Default for SeedBudget {
    fn default() -> Self {
        Self {
            max_urls: 100_000,
            deadline: None,
        }
    }
}

#[derive(Debug, Error)]
pub enum SeedError {
    /// The request is malformed; nothing was written.
    #[error("invalid seed request: {}", .0.join("; "))]
    InvalidRequest(Vec<String>),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The manifest stream broke off mid-way.
    #[error("reading the manifest: {0}")]
    Read(#[from] std::io::Error),
}

impl SeedError {
    fn invalid(problem: impl Into<String>) -> Self {
        SeedError::InvalidRequest(vec![problem.into()])
    }

    /// Whether the same request may succeed later (it is idempotent, so retrying is safe).
    pub fn is_retryable(&self) -> bool {
        match self {
            SeedError::InvalidRequest(_) => false,
            SeedError::Store(e) => e.is_retryable(),
            SeedError::Queue(e) => matches!(e, QueueError::Unavailable { .. }),
            SeedError::Manifest(e) => e.is_retryable(),
            SeedError::Read(_) => true,
        }
    }
}

impl From<OperateError> for SeedError {
    fn from(e: OperateError) -> Self {
        match e {
            OperateError::Invalid(problem) => SeedError::invalid(problem),
            OperateError::Store(e) => SeedError::Store(e),
            OperateError::Frontier(e) => e.into(),
            OperateError::Queue(e) => SeedError::Queue(e),
            // Seeding rewinds tasks, and never re-extracts: listed for the match's sake.
            OperateError::Reextract(ReextractError::Store(e)) => SeedError::Store(e),
            OperateError::Reextract(e @ ReextractError::Extractors(_)) => {
                SeedError::invalid(e.to_string())
            }
            OperateError::Reextract(e @ ReextractError::Blob(_)) => {
                SeedError::Read(std::io::Error::other(e))
            }
        }
    }
}

impl Transient for SeedError {
    fn is_transient(&self) -> bool {
        self.is_retryable()
    }
}

impl From<FrontierError> for SeedError {
    fn from(e: FrontierError) -> Self {
        match e {
            FrontierError::Store(e) => SeedError::Store(e),
            FrontierError::Queue(e) => SeedError::Queue(e),
        }
    }
}

/// A URL (or manifest line, or sitemap) that was not seeded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub input: String,
    pub reason: String,
}

/// What sitemaps said about modification times. An entry the crawl already has is fetched again
/// only when its `<lastmod>` is newer than its last fetch (Docido's `since` checkpoint, per URL).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastmodSummary {
    /// Entries that had a `<lastmod>`.
    pub entries: u64,
    /// Known pages modified since their last fetch: due again now.
    #[serde(default)]
    pub refetched: u64,
    /// Known pages not modified since their last fetch: left to their schedule.
    #[serde(default)]
    pub skipped: u64,
    /// The most recent one (W3C datetime strings compare in time order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<String>,
}

/// What a seed invocation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedResponse {
    pub crawl_id: String,
    /// This invocation created the crawl.
    pub created: bool,
    /// New tasks created (and enqueued, unless counted in `enqueue_failed`).
    pub accepted: u64,
    /// URLs the crawl already had (left untouched).
    pub already_known: u64,
    /// URLs past the crawl's `max_pages` budget.
    pub over_budget: u64,
    /// URLs past their host's `max_host_tasks`.
    #[serde(default)]
    pub deferred: u64,
    /// URLs (or lines, or sitemaps) not seeded; the first ones are listed in `rejections`.
    pub rejected: u64,
    pub rejections: Vec<Rejection>,
    /// New tasks whose message could not be sent (the sweeper enqueues them later).
    pub enqueue_failed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lastmod: Option<LastmodSummary>,
    /// The crawl's checkpoint as this request found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Present when the seed is unfinished: send the same request with this cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Tasks the crawl had ignored under its previous config that the updated one allows
    /// (`update_config`), pending again (`crawl::readmits`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub readmitted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl SeedRequest {
    /// Parses a request from JSON, as a typed error when malformed.
    pub fn from_json(value: serde_json::Value) -> Result<Self, SeedError> {
        serde_json::from_value(value).map_err(|e| SeedError::invalid(e.to_string()))
    }

    /// Identifies the request (crawl and source), so that a cursor only continues its own.
    fn fingerprint(&self) -> String {
        let source = serde_json::to_string(&self.source).unwrap_or_default();
        let digest = Md5::new()
            .chain_update(self.crawl_id.as_str())
            .chain_update([0])
            .chain_update(source)
            .finalize();
        hex::encode(&digest[..8])
    }
}

/// Checks a crawl configuration; returns every problem found.
pub fn validate_config(config: &CrawlConfig) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(e) = ScopeMatcher::new(&config.scope) {
        problems.push(format!("scope: {e}"));
    }
    if config.scope.max_pages == Some(0) {
        problems.push("scope.max_pages must be at least 1".into());
    }
    if !(1..=64).contains(&config.politeness.per_host) {
        problems.push("politeness.per_host must be from 1 to 64".into());
    }
    if config.lease_ms < 1_000 {
        problems.push("lease_ms must be at least 1000".into());
    }
    let fetch = &config.fetch;
    if fetch.timeout_ms == 0 || fetch.connect_timeout_ms == 0 {
        problems.push("fetch timeouts must be at least 1 ms".into());
    }
    if fetch.max_body_bytes == 0 {
        problems.push("fetch.max_body_bytes must be at least 1".into());
    }
    if fetch.max_image_bytes == 0 {
        problems.push("fetch.max_image_bytes must be at least 1".into());
    }
    if let Some(problem) = config.scope.images.thumbnail.and_then(|t| t.problem()) {
        problems.push(problem);
    }
    problems.extend(crate::fetch::validate_request_settings(fetch));
    for exempt in &fetch.guard_exempt {
        if exempt.parse::<std::net::SocketAddr>().is_err() {
            problems.push(format!(
                "fetch.guard_exempt entry {exempt:?} is not an ip:port"
            ));
        }
    }
    if config.retry.base_delay_ms > config.retry.max_delay_ms {
        problems.push("retry.base_delay_ms must not exceed retry.max_delay_ms".into());
    }
    let schedules = config
        .recrawl
        .crawl_schedule()
        .into_iter()
        .chain(config.recrawl.rules.iter().filter_map(|r| r.schedule()))
        .chain(std::iter::once(config.recrawl.checker));
    for schedule in schedules {
        if schedule.min_ms < 1_000 || schedule.max_ms < schedule.min_ms {
            problems.push(
                "recrawl intervals must be at least 1000 ms (schedules: 1000 <= min_ms <= max_ms)"
                    .into(),
            );
        }
        if !(schedule.initial_factor >= 1.0 && schedule.factor_change >= 1.0) {
            problems.push("recrawl schedules need initial_factor and factor_change >= 1".into());
        }
    }
    let recrawls = config.recrawl.crawl_schedule().is_some()
        || config.recrawl.rules.iter().any(|r| r.schedule().is_some());
    if config.delivery.purge_after && recrawls {
        problems.push(
            "delivery.purge_after: a crawl that recrawls needs its tasks for its next generation; \
             drop the recrawl schedule or purge_after"
                .into(),
        );
    }
    if let Err(e) = crate::revisit::RevisitRules::new(&config.recrawl) {
        problems.push(e);
    }
    if let Err(e) = crate::extract::Extractors::new(&config.extract) {
        problems.push(e.to_string());
    }
    problems.extend(
        trawl_domain::lane::problems(
            &config.scope.lanes,
            &config.scope.lane_limits,
            &config.scope.routes,
        )
        .iter()
        .map(ToString::to_string),
    );
    for (i, route) in config.scope.routes.iter().enumerate() {
        match &route.extractor {
            Some(_) if route.store == Some(false) => problems.push(format!(
                "scope.routes[{i}]: a page not stored keeps no items: no extractor with store false"
            )),
            Some(name) if !config.extract.iter().any(|e| e.name == *name) => problems.push(
                format!("scope.routes[{i}]: no extractor named {name:?} in `extract`"),
            ),
            _ => {}
        }
    }
    problems.extend(crate::chain::problems(config));
    for t in &config.paging {
        match t.validate() {
            Err(e) => problems.push(format!("paging: {e}")),
            Ok(_) if !t.is_open() => problems.push(format!(
                "paging: template {:?} is not open-ended (ranges and lists are seeded whole)",
                t.template
            )),
            Ok(_) => {}
        }
    }
    let ua = &config.user_agent;
    if ua.len() > 256 || ua.chars().any(char::is_control) {
        problems
            .push("user_agent must be at most 256 characters, without control characters".into());
    }
    problems
}

/// The top-level sections in which two configurations differ (`scope`, `recrawl` …).
pub fn config_differences(stored: &CrawlConfig, asked: &CrawlConfig) -> Vec<String> {
    // Whether the crawl is paused is no part of what a configuration asks for.
    let asked = &CrawlConfig {
        paused: stored.paused,
        ..asked.clone()
    };
    let (Ok(serde_json::Value::Object(stored)), Ok(serde_json::Value::Object(asked))) =
        (serde_json::to_value(stored), serde_json::to_value(asked))
    else {
        return vec!["all".to_owned()];
    };
    let mut keys: Vec<&String> = stored.keys().chain(asked.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| stored.get(*k) != asked.get(*k))
        .cloned()
        .collect()
}

/// Seeds crawls over its App's ports: fetches sitemaps with its fetcher and reads manifests from
/// its source. Build it once per process; it reads the App's ports as its own (it derefs to the
/// App).
pub struct Seeder<P: Ports> {
    app: Arc<App<P>>,
    /// Fetches sitemaps (robots.txt and the network guard apply).
    fetcher: Arc<Fetcher>,
    manifests: Arc<dyn OpenManifests>,
    defaults: SeedDefaults,
}

impl<P: Ports> std::ops::Deref for Seeder<P> {
    type Target = App<P>;

    fn deref(&self) -> &App<P> {
        &self.app
    }
}

impl<P: Ports> Seeder<P> {
    pub fn new(
        app: Arc<App<P>>,
        fetcher: Arc<Fetcher>,
        manifests: Arc<dyn OpenManifests>,
        defaults: SeedDefaults,
    ) -> Self {
        Self {
            app,
            fetcher,
            manifests,
            defaults,
        }
    }

    pub fn app(&self) -> &Arc<App<P>> {
        &self.app
    }

    /// Runs (or continues) a seed request within `budget`, then adds its calls to the crawl.
    pub async fn seed(
        &self,
        request: SeedRequest,
        budget: SeedBudget,
        now: Millis,
    ) -> Result<SeedResponse, SeedError> {
        let crawl_id = request.crawl_id.clone();
        let seeded = self.seed_unreported(request, budget, now).await;
        // A request refused before any write names a crawl that may not exist: its calls (a
        // manifest that could not be read) go with this process's next report.
        if !matches!(seeded, Err(SeedError::InvalidRequest(_))) {
            crate::calls::report(&self.store, &self.calls, &crawl_id).await;
        }
        seeded
    }

    async fn seed_unreported(
        &self,
        request: SeedRequest,
        budget: SeedBudget,
        now: Millis,
    ) -> Result<SeedResponse, SeedError> {
        if budget.max_urls == 0 {
            return Err(SeedError::invalid("the URL budget must be at least 1"));
        }
        let fingerprint = request.fingerprint();
        let cursor = match &request.cursor {
            Some(raw) => Cursor::decode(raw, &fingerprint).map_err(SeedError::invalid)?,
            None => Cursor::default(),
        };
        let mut config = match &request.config {
            Some(config) => config.clone(),
            None => self.default_config(),
        };
        let mut problems = validate_config(&config);
        // No URLs: a request for the checkpoint of an existing crawl.
        let checkpoint_only = matches!(&request.source, SeedSource::Urls(urls) if urls.is_empty());
        if !checkpoint_only {
            problems.extend(validate_source(&request.source));
        }
        if request
            .checkpoint
            .as_ref()
            .is_some_and(|c| c.len() > MAX_CHECKPOINT_BYTES)
        {
            problems.push(format!(
                "checkpoint is longer than {MAX_CHECKPOINT_BYTES} bytes"
            ));
        }
        if !problems.is_empty() {
            return Err(SeedError::InvalidRequest(problems));
        }

        // Open the manifest first: an unreadable one is a bad request, found before any write.
        let mut manifest = match &request.source {
            SeedSource::S3(m) => Some(
                self.manifests
                    .open_at(
                        &m.bucket,
                        &m.key,
                        cursor.position.offset,
                        cursor.etag.as_deref(),
                    )
                    .await
                    .map_err(unreadable_is_invalid)?,
            ),
            _ => None,
        };
        let existing = self.store.get_crawl(&request.crawl_id).await?;
        if checkpoint_only && existing.is_none() {
            return Err(SeedError::invalid(
                "source.urls is empty (a request without URLs reads or writes the checkpoint \
                 of an existing crawl)",
            ));
        }
        if existing.is_none() && config.scope.allowed_domains.is_empty() {
            config.scope.allowed_domains = self.seed_hosts(&request.source).await?;
        }
        let mut readmitted = 0;
        // The source's open-ended templates join the crawl's: its crawler continues them.
        let open: Vec<PageTemplate> = match &request.source {
            SeedSource::Pagination(templates) => {
                templates.iter().filter(|t| t.is_open()).cloned().collect()
            }
            _ => Vec::new(),
        };
        let (mut crawl, created) = match existing {
            Some(mut crawl) if request.config.is_some() => {
                if config.scope.allowed_domains.is_empty() {
                    config.scope.allowed_domains = crawl.config.scope.allowed_domains.clone();
                }
                if config.paging.is_empty() {
                    config.paging = crawl.config.paging.clone();
                }
                // A crawl keeps its layout for life: its bodies are where it put them; and
                // stays paused or not as its operator left it.
                config.storage.layout = crawl.config.storage.layout;
                config.paused = crawl.config.paused;
                let differs = config_differences(&crawl.config, &config);
                if !differs.is_empty() {
                    if !request.update_config {
                        return Err(SeedError::invalid(format!(
                            "crawl {} exists with another configuration (it differs in: {}); \
                             ask to update it (CLI: --update-config) or leave it as it is",
                            crawl.id,
                            differs.join(", ")
                        )));
                    }
                    self.store.update_config(&crawl.id, &config, now).await?;
                    let refused_by = std::mem::replace(&mut crawl.config, config);
                    readmitted = self.readmit(&crawl, &refused_by, now).await?;
                }
                (crawl, false)
            }
            Some(crawl) => (crawl, false),
            None => {
                add_templates(&mut config.paging, &open);
                self.store
                    .create_crawl(&Crawl::new(request.crawl_id.clone(), config, now))
                    .await?
            }
        };
        let mut paging = crawl.config.paging.clone();
        if add_templates(&mut paging, &open) {
            // Seeding a template is asking for its pages: no `update_config` needed.
            let config = CrawlConfig {
                paging,
                ..crawl.config.clone()
            };
            self.store.update_config(&crawl.id, &config, now).await?;
            crawl.config = config;
        }
        let scope = ScopeMatcher::new(&crawl.config.scope)
            .map_err(|e| SeedError::invalid(format!("stored scope: {e}")))?;
        let checkpoint = crawl.checkpoint.clone();
        let mut sink = Sink::<P> {
            store: &self.store,
            clock: self.clock.as_ref(),
            queue: &self.queue,
            crawl,
            scope,
            priority: request.priority,
            now,
            budget,
            batch: Vec::with_capacity(BATCH_SIZE),
            dated: Vec::new(),
            refetched_hosts: BTreeSet::new(),
            read: 0,
            response: SeedResponse {
                crawl_id: request.crawl_id.to_string(),
                created,
                checkpoint,
                readmitted,
                ..SeedResponse::default()
            },
        };
        let pos = cursor.position;
        // A cursor naming robots.txt sitemaps continues with them: the source itself is done.
        let source = if cursor.robots.is_some() {
            None
        } else {
            Some(&request.source)
        };
        let mut stopped = match source {
            None => None,
            Some(SeedSource::Urls(urls)) => seed_urls(&mut sink, urls, pos).await?,
            Some(SeedSource::S3(m)) => match manifest.as_mut() {
                Some(open) => seed_manifest(&mut sink, open, m.format, pos).await?,
                None => None,
            },
            Some(SeedSource::Sitemaps(urls)) => {
                seed_sitemaps(&mut sink, &self.fetcher, urls, pos).await?
            }
            Some(SeedSource::Pagination(templates)) => {
                seed_pages(&mut sink, templates, pos).await?
            }
        };
        // Then the sitemaps the seed hosts' robots.txt lists, once the source is done.
        let mut robots = None;
        if stopped.is_none() {
            let (sitemaps, from) = match cursor.robots {
                Some(sitemaps) => (sitemaps, pos),
                None => {
                    let sitemaps = self.robots_sitemaps(&sink.crawl.config, &request.source);
                    (sitemaps.await, Position::default())
                }
            };
            stopped = seed_sitemaps(&mut sink, &self.fetcher, &sitemaps, from).await?;
            robots = stopped.is_some().then_some(sitemaps);
        }
        sink.flush().await?;
        sink.wake_refetched().await?;
        if let (None, Some(checkpoint)) = (stopped, &request.checkpoint) {
            self.store
                .set_checkpoint(&request.crawl_id, Some(checkpoint))
                .await?;
        }
        let mut response = sink.response;
        response.cursor = stopped.map(|position| {
            Cursor {
                position,
                etag: manifest.and_then(|m| m.etag),
                robots,
            }
            .encode(&fingerprint)
        });
        Ok(response)
    }

    /// The sitemaps named by the `Sitemap:` lines of the seed hosts' robots.txt, when the crawl
    /// wants them (`scope.sitemaps_from_robots`) and reads robots.txt at all
    /// (`politeness.respect_robots`: its crawler then reads the same file): for URL lists and page templates, whose hosts
    /// are known from the request, at most `MAX_ROBOTS_HOSTS` of them. Sitemap sources name
    /// their own; a manifest's hosts would take a pass over it.
    async fn robots_sitemaps(&self, config: &CrawlConfig, source: &SeedSource) -> Vec<String> {
        if !(config.scope.sitemaps_from_robots && config.politeness.respect_robots) {
            return Vec::new();
        }
        let seeds: Vec<String> = match source {
            SeedSource::Urls(urls) => seed_urls_of(urls),
            SeedSource::Pagination(templates) => {
                templates.iter().filter_map(|t| t.page(0, None)).collect()
            }
            SeedSource::Sitemaps(_) | SeedSource::S3(_) => return Vec::new(),
        };
        let mut hosts = BTreeSet::new();
        let origins = seeds
            .iter()
            .filter_map(|raw| CanonicalUrl::parse(raw).ok())
            .filter(|url| hosts.insert(url.host_key()))
            .take(MAX_ROBOTS_HOSTS);
        let mut sitemaps = Vec::new();
        for origin in origins.collect::<Vec<_>>() {
            for sitemap in self.fetcher.robots_sitemaps(&origin, config).await {
                if sitemaps.len() < MAX_SOURCE_ITEMS && !sitemaps.contains(&sitemap) {
                    sitemaps.push(sitemap);
                }
            }
        }
        sitemaps
    }

    fn default_config(&self) -> CrawlConfig {
        let mut config = CrawlConfig::default();
        if let Some(ua) = &self.defaults.user_agent {
            config.user_agent = ua.clone();
        }
        if let Some(per_host) = self.defaults.per_host {
            config.politeness.per_host = per_host;
        }
        config
    }

    /// Makes the tasks `refused_by` (the crawl's previous config) ignored that the crawl's
    /// config now allows pending again, their hosts woken (`crawl::readmits`). Reads the ignored
    /// tasks only when the update loosened a setting that refuses tasks.
    async fn readmit(
        &self,
        crawl: &Crawl,
        refused_by: &CrawlConfig,
        now: Millis,
    ) -> Result<u64, SeedError> {
        const REFUSALS: [ErrorKind; 3] = [
            ErrorKind::Blocked,
            ErrorKind::RobotsDenied,
            ErrorKind::OutOfScope,
        ];
        let config = &crawl.config;
        if !REFUSALS.iter().any(|&k| readmits(refused_by, config, k)) {
            return Ok(0);
        }
        let scope = ScopeMatcher::new(&config.scope)
            .map_err(|e| SeedError::invalid(format!("scope: {e}")))?;
        let mut ids = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .store
                .query(&TaskQuery {
                    crawl_id: crawl.id.clone(),
                    status: Status::Ignored,
                    updated_before: None,
                    limit: 100,
                    cursor: cursor.take(),
                    part: crate::store::Part::WHOLE,
                })
                .await?;
            for summary in &page.tasks {
                let Some(task) = self.store.get(&crawl.id, &summary.task_id).await? else {
                    continue;
                };
                let Some(refused) = task.errors.last().map(|e| e.kind) else {
                    continue;
                };
                let in_scope = refused != ErrorKind::OutOfScope
                    || CanonicalUrl::parse(&task.url)
                        .is_ok_and(|url| scope.check(&url, task.depth).is_ok());
                if in_scope && readmits(refused_by, config, refused) {
                    ids.push(task.task_id);
                }
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let selection = Selection {
            statuses: vec![Status::Ignored],
            tasks: Some(ids),
            ..Selection::default()
        };
        let done = operate::rewind(
            &self.store,
            Some(&self.queue),
            crawl,
            &selection,
            Rewind::Reschedule,
            now,
        )
        .await?;
        Ok(done.urls.len() as u64)
    }

    /// The hosts a new crawl is confined to when the request names none: the seed URLs' hosts
    /// (for sitemaps, the sitemaps' hosts, which the protocol requires their URLs to share).
    async fn seed_hosts(&self, source: &SeedSource) -> Result<Vec<String>, SeedError> {
        let mut hosts = BTreeSet::new();
        fn add(hosts: &mut BTreeSet<String>, raw: &str) {
            if let Ok(url) = CanonicalUrl::parse(raw) {
                hosts.insert(url.host().to_owned());
            }
        }
        match source {
            SeedSource::Urls(urls) => seed_urls_of(urls).iter().for_each(|u| add(&mut hosts, u)),
            SeedSource::Sitemaps(urls) => urls.iter().for_each(|u| add(&mut hosts, u)),
            SeedSource::Pagination(templates) => templates
                .iter()
                .filter_map(|t| t.page(0, None))
                .for_each(|u| add(&mut hosts, &u)),
            SeedSource::S3(m) => {
                // A first pass over the manifest, hosts only (once, when the crawl is created).
                let mut open = self
                    .manifests
                    .open_at(&m.bucket, &m.key, 0, None)
                    .await
                    .map_err(unreadable_is_invalid)?;
                let mut buf = Vec::new();
                while let Some(line) =
                    manifest::read_line(&mut open.reader, &mut buf, MAX_LINE_BYTES).await?
                {
                    if let manifest::Entry::Url(entry) =
                        manifest::parse_line(&buf, line.too_long, m.format)
                    {
                        add(&mut hosts, &entry.url);
                    }
                    if hosts.len() > MAX_DERIVED_HOSTS {
                        return Err(SeedError::invalid(format!(
                            "the manifest has more than {MAX_DERIVED_HOSTS} hosts: \
                             set config.scope.allowed_domains"
                        )));
                    }
                }
            }
        }
        if hosts.is_empty() {
            return Err(SeedError::invalid("no valid seed URL"));
        }
        Ok(hosts.into_iter().collect())
    }
}

/// Adds to `paging` the templates of `open` it does not have; true when it added one.
fn add_templates(paging: &mut Vec<PageTemplate>, open: &[PageTemplate]) -> bool {
    let before = paging.len();
    for t in open {
        if !paging.contains(t) {
            paging.push(t.clone());
        }
    }
    paging.len() > before
}

fn unreadable_is_invalid(e: ManifestError) -> SeedError {
    match e {
        ManifestError::Unreadable { .. } => SeedError::invalid(e.to_string()),
        e => SeedError::Manifest(e),
    }
}

/// The URLs of `source.urls` entries (an entry that does not parse is left as written, to be
/// rejected as a URL).
fn seed_urls_of(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|raw| manifest::seed_entry(raw).map_or_else(|_| raw.clone(), |e| e.url))
        .collect()
}

/// Checks the shape of a source (not its individual URLs: those are rejected one by one).
fn validate_source(source: &SeedSource) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check_list = |what: &str, len: usize, max: usize| {
        if len == 0 {
            problems.push(format!("{what} is empty"));
        } else if len > max {
            problems.push(format!("{what} has {len} entries (at most {max})"));
        }
    };
    match source {
        SeedSource::Urls(urls) => {
            check_list("source.urls", urls.len(), MAX_INLINE_URLS);
            let urls = seed_urls_of(urls);
            if !urls.is_empty() && urls.iter().all(|u| CanonicalUrl::parse(u).is_err()) {
                let reasons = urls
                    .iter()
                    .take(5)
                    .filter_map(|u| CanonicalUrl::parse(u).err());
                problems.push("no valid URL in source.urls".into());
                problems.extend(reasons.map(|e| e.to_string()));
            }
        }
        SeedSource::Sitemaps(urls) => {
            check_list("source.sitemaps", urls.len(), MAX_SOURCE_ITEMS);
            for url in urls {
                if let Err(e) = CanonicalUrl::parse(url) {
                    problems.push(format!("sitemap: {e}"));
                }
            }
        }
        SeedSource::Pagination(templates) => {
            check_list("source.pagination", templates.len(), MAX_SOURCE_ITEMS);
            for t in templates {
                if let Err(problem) = t.validate() {
                    problems.push(problem.to_string());
                }
            }
        }
        SeedSource::S3(m) => {
            if m.bucket.trim().is_empty() || m.key.trim().is_empty() {
                problems.push("source.s3 needs a bucket and a key".into());
            }
        }
    }
    problems
}

/// Collects URLs into batches for the frontier and keeps the tally and the budget.
struct Sink<'a, P: Ports> {
    store: &'a P::Store,
    queue: &'a P::Queue,
    /// What the budget's deadline is read on.
    clock: &'a dyn Clock,
    crawl: Crawl,
    scope: ScopeMatcher,
    /// The request's priority (`SeedRequest::priority`).
    priority: Option<Priority>,
    now: Millis,
    budget: SeedBudget,
    batch: Vec<NewTask>,
    /// The batch's entries with a `<lastmod>`, in ms.
    dated: Vec<(TaskId, Millis)>,
    /// Hosts of the pages made due again by their `<lastmod>`, to wake at the end.
    refetched_hosts: BTreeSet<String>,
    /// Source entries read by this invocation.
    read: u64,
    response: SeedResponse,
}

impl<P: Ports> Sink<'_, P> {
    /// Takes one seed URL: canonical, in scope and with a valid `_priority`, `_method` and
    /// `_body` if its data gives them, or rejected with the reason. Returns its task id when
    /// taken (its URL's, or its URL's and request's: `trawl_domain::chain::task_id`).
    fn offer(&mut self, raw: &str, data: Option<UserData>) -> Option<TaskId> {
        self.read += 1;
        let own = match Priority::of_data(data.as_ref()) {
            Ok(own) => own,
            Err(e) => {
                self.reject(raw, format!("{}: {e}", Priority::KEY));
                return None;
            }
        };
        if let Err(e) = TaskRequest::of_data(data.as_ref()) {
            self.reject(raw, e.to_string());
            return None;
        }
        match CanonicalUrl::parse(raw).map(|url| self.scope.normalise(url)) {
            Err(e) => self.reject(raw, e.reason.to_string()),
            Ok(url) => match self.scope.check(&url, 0) {
                Err(reason) => self.reject(raw, format!("out of scope: {reason}")),
                Ok(()) => {
                    let route = self.scope.route(url.as_str()).and_then(|r| r.priority);
                    let data = keyed(data, self.scope.key_of(url.as_str()));
                    let task = NewTask {
                        lane: self.scope.lane_of(url.as_str()),
                        priority: Priority::of_seed(own, self.priority, route),
                        url,
                        depth: 0,
                        parent: None,
                        data,
                    };
                    let id = task.task_id();
                    self.batch.push(task);
                    return Some(id);
                }
            },
        }
        None
    }

    fn reject(&mut self, input: &str, reason: impl Into<String>) {
        self.response.rejected += 1;
        if self.response.rejections.len() < MAX_LISTED_REJECTIONS {
            self.response.rejections.push(Rejection {
                input: truncate(input, 200).to_owned(),
                reason: reason.into(),
            });
        }
    }

    fn note_lastmod(&mut self, lastmod: &str) {
        let summary = self.response.lastmod.get_or_insert_with(Default::default);
        summary.entries += 1;
        if summary.newest.as_deref().is_none_or(|n| n < lastmod) {
            summary.newest = Some(lastmod.to_owned());
        }
    }

    fn exhausted(&self) -> bool {
        self.read >= self.budget.max_urls
            || self
                .budget
                .deadline
                .is_some_and(|d| self.clock.instant() >= d)
    }

    /// Flushes a full batch, or any batch once the budget is spent. True when the invocation
    /// must stop (everything read so far is then flushed).
    async fn checkpoint(&mut self) -> Result<bool, SeedError> {
        let exhausted = self.exhausted();
        if exhausted || self.batch.len() >= BATCH_SIZE {
            self.flush().await?;
        }
        Ok(exhausted)
    }

    async fn flush(&mut self) -> Result<(), SeedError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let tasks = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_SIZE));
        let report =
            frontier::add_tasks(self.store, self.queue, &self.crawl, tasks, self.now).await?;
        let dated = std::mem::take(&mut self.dated);
        if report.already_known > 0 {
            self.refetch_modified(dated).await?;
        }
        if report.accepted > 0 && self.crawl.state == CrawlState::Completed {
            // New work for a finished crawl: it runs again (and will complete and deliver anew).
            self.store.reopen_crawl(&self.crawl.id, self.now).await?;
            self.crawl.state = CrawlState::Running;
        }
        let r = &mut self.response;
        r.accepted += report.accepted;
        r.already_known += report.already_known;
        r.over_budget += report.over_budget;
        r.deferred += report.deferred;
        r.enqueue_failed += report.enqueue_failed.len() as u64;
        for e in report.rejected {
            self.reject(&e.url, e.reason.to_string());
        }
        Ok(())
    }
}

impl<P: Ports> Sink<'_, P> {
    /// Makes the known pages among `dated` that were modified since their last fetch due now
    /// (`transition::refresh`); the others are skipped. One read per entry the crawl may know.
    async fn refetch_modified(&mut self, dated: Vec<(TaskId, Millis)>) -> Result<(), SeedError> {
        for (id, lastmod) in dated {
            let Some(task) = self.store.get(&self.crawl.id, &id).await? else {
                continue;
            };
            let Some(fetched_at) = task.fetch.as_ref().map(|f| f.fetched_at) else {
                continue;
            };
            let summary = self.response.lastmod.get_or_insert_with(Default::default);
            if fetched_at >= lastmod {
                summary.skipped += 1;
            } else if self.store.refresh(&task, lastmod, self.now).await? {
                summary.refetched += 1;
                self.refetched_hosts.insert(host_key_of(&task.url));
            }
        }
        Ok(())
    }

    /// Wakes the hosts of the pages made due again (a completed crawl runs again first). A
    /// host with a turn running or a message out needs nothing: that turn finds them.
    async fn wake_refetched(&mut self) -> Result<(), SeedError> {
        if self.refetched_hosts.is_empty() {
            return Ok(());
        }
        if self.crawl.state == CrawlState::Completed {
            self.store.reopen_crawl(&self.crawl.id, self.now).await?;
            self.crawl.state = CrawlState::Running;
        }
        let hosts = std::mem::take(&mut self.refetched_hosts);
        let hosts: Vec<String> = hosts.into_iter().collect();
        rewind_hosts(self.store, &self.crawl, &hosts, self.now).await?;
        let which = Reissue::Lost {
            lost_after_ms: MIN_LOST_AFTER_MS,
            known_work: true,
        };
        let turns = reissue_turns(self.store, &self.crawl, hosts, which, self.now).await?;
        if !turns.is_empty() {
            let report = send_patiently(self.queue, &turns).await?;
            self.response.enqueue_failed += report.failed.len() as u64;
        }
        Ok(())
    }
}

/// Position of the `index`-th element, as a u64 cursor field.
fn at(index: usize) -> u64 {
    index as u64
}

/// Skips the first `n` of an iterator, `n` coming from a cursor.
fn skip(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

async fn seed_urls<P: Ports>(
    sink: &mut Sink<'_, P>,
    urls: &[String],
    pos: Position,
) -> Result<Option<Position>, SeedError> {
    for (i, raw) in urls.iter().enumerate().skip(skip(pos.item)) {
        match manifest::seed_entry(raw) {
            Ok(entry) => {
                sink.offer(&entry.url, entry.data);
            }
            Err(reason) => {
                sink.read += 1;
                sink.reject(raw, reason);
            }
        }
        if sink.checkpoint().await? && i + 1 < urls.len() {
            return Ok(Some(Position {
                item: at(i + 1),
                ..Position::default()
            }));
        }
    }
    Ok(None)
}

async fn seed_manifest<P: Ports>(
    sink: &mut Sink<'_, P>,
    open: &mut OpenManifest,
    format: ManifestFormat,
    pos: Position,
) -> Result<Option<Position>, SeedError> {
    let mut offset = pos.offset;
    let mut buf = Vec::new();
    while let Some(line) = manifest::read_line(&mut open.reader, &mut buf, MAX_LINE_BYTES).await? {
        let line_at = offset;
        offset += line.consumed;
        match manifest::parse_line(&buf, line.too_long, format) {
            manifest::Entry::Skip => continue,
            manifest::Entry::Url(entry) => {
                sink.offer(&entry.url, entry.data);
            }
            manifest::Entry::Invalid(reason) => {
                sink.read += 1;
                sink.reject(&format!("line at byte {line_at}"), reason);
            }
        }
        if sink.checkpoint().await? && !manifest::at_end(&mut open.reader).await? {
            return Ok(Some(Position {
                offset,
                ..Position::default()
            }));
        }
    }
    Ok(None)
}

async fn seed_sitemaps<P: Ports>(
    sink: &mut Sink<'_, P>,
    fetcher: &Fetcher,
    sitemaps: &[String],
    pos: Position,
) -> Result<Option<Position>, SeedError> {
    let config = sink.crawl.config.clone();
    for (i, raw) in sitemaps.iter().enumerate().skip(skip(pos.item)) {
        let resuming = at(i) == pos.item;
        let (first_child, first_entry) = if resuming {
            (pos.inner, pos.offset)
        } else {
            (0, 0)
        };
        if !resuming && sink.exhausted() {
            return Ok(Some(Position {
                item: at(i),
                ..Position::default()
            }));
        }
        let document = match CanonicalUrl::parse(raw) {
            Err(e) => Err(e.reason.to_string()),
            Ok(url) => sitemap::fetch(fetcher, &config, &url, sink.now).await,
        };
        let (document, truncated) = match document {
            Ok(parsed) => parsed,
            Err(reason) => {
                sink.reject(raw, format!("sitemap: {reason}"));
                continue;
            }
        };
        if truncated {
            sink.reject(
                raw,
                format!("sitemap has more than {MAX_SITEMAP_ENTRIES} entries; the rest is ignored"),
            );
        }
        let children = match document {
            sitemap::Document::UrlSet(entries) => {
                if let Some(offset) = seed_entries(sink, &entries, first_entry).await? {
                    return Ok(Some(Position {
                        item: at(i),
                        inner: 0,
                        offset,
                    }));
                }
                continue;
            }
            sitemap::Document::Index(children) => children,
        };
        for (k, child) in children.iter().enumerate().skip(skip(first_child)) {
            let resuming_child = resuming && at(k) == first_child;
            if !resuming_child && sink.exhausted() {
                return Ok(Some(Position {
                    item: at(i),
                    inner: at(k),
                    offset: 0,
                }));
            }
            let document = match CanonicalUrl::parse(child) {
                Err(e) => Err(e.reason.to_string()),
                Ok(url) => sitemap::fetch(fetcher, &config, &url, sink.now).await,
            };
            match document {
                Err(reason) => sink.reject(child, format!("sitemap: {reason}")),
                Ok((sitemap::Document::Index(_), _)) => {
                    sink.reject(child, "sitemap index inside a sitemap index (not followed)");
                }
                Ok((sitemap::Document::UrlSet(entries), truncated)) => {
                    if truncated {
                        sink.reject(
                            child,
                            format!(
                                "sitemap has more than {MAX_SITEMAP_ENTRIES} entries; \
                                 the rest is ignored"
                            ),
                        );
                    }
                    let start = if resuming_child { first_entry } else { 0 };
                    if let Some(offset) = seed_entries(sink, &entries, start).await? {
                        return Ok(Some(Position {
                            item: at(i),
                            inner: at(k),
                            offset,
                        }));
                    }
                }
            }
        }
    }
    Ok(None)
}

/// Seeds a urlset's entries from `start`; Some(next entry) when the budget ran out.
async fn seed_entries<P: Ports>(
    sink: &mut Sink<'_, P>,
    entries: &[sitemap::Entry],
    start: u64,
) -> Result<Option<u64>, SeedError> {
    for (j, entry) in entries.iter().enumerate().skip(skip(start)) {
        let id = sink.offer(&entry.loc, None);
        if let Some(lastmod) = &entry.lastmod {
            sink.note_lastmod(lastmod);
            if let (Some(id), Some(ms)) = (id, sitemap::lastmod_ms(lastmod)) {
                sink.dated.push((id, ms));
            }
        }
        if sink.checkpoint().await? && j + 1 < entries.len() {
            return Ok(Some(at(j + 1)));
        }
    }
    Ok(None)
}

async fn seed_pages<P: Ports>(
    sink: &mut Sink<'_, P>,
    templates: &[PageTemplate],
    pos: Position,
) -> Result<Option<Position>, SeedError> {
    for (i, template) in templates.iter().enumerate().skip(skip(pos.item)) {
        let resuming = at(i) == pos.item;
        if !resuming && sink.exhausted() {
            return Ok(Some(Position {
                item: at(i),
                ..Position::default()
            }));
        }
        // `{since}`: the crawl's checkpoint as this request found it.
        let since = sink.response.checkpoint.clone();
        let pages = template.seeded_pages();
        let mut j = if resuming { pos.offset } else { 0 };
        while let Some(url) = template.page(j, since.as_deref()).filter(|_| j < pages) {
            sink.offer(&url, None);
            j += 1;
            if sink.checkpoint().await? && j < pages {
                return Ok(Some(Position {
                    item: at(i),
                    inner: 0,
                    offset: j,
                }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_parse_per_source_and_reject_unknown_fields() {
        let r = SeedRequest::from_json(json!({
            "crawl_id": "c1",
            "source": {"s3": {"bucket": "b", "key": "k"}}
        }))
        .unwrap();
        assert_eq!(
            r.source,
            SeedSource::S3(S3Manifest {
                bucket: "b".into(),
                key: "k".into(),
                format: ManifestFormat::Lines
            })
        );
        for bad in [
            json!({"crawl_id": "c1", "source": {"urls": ["http://a/"]}, "extra": 1}),
            json!({"crawl_id": "c 1", "source": {"urls": ["http://a/"]}}),
            json!({"crawl_id": "c1", "source": {"ftp": ["x"]}}),
            json!({"crawl_id": "c1", "source": {"urls": ["http://a/"], "sitemaps": []}}),
            json!({"crawl_id": "c1", "source": {"urls": []}, "config": {"scope": {"bogus": 1}}}),
            json!({"crawl_id": "c1"}),
        ] {
            assert!(
                matches!(
                    SeedRequest::from_json(bad.clone()),
                    Err(SeedError::InvalidRequest(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn configs_and_sources_are_validated() {
        let mut config = CrawlConfig::default();
        assert!(validate_config(&config).is_empty());
        config.scope.include = vec!["(".into()];
        config.politeness.per_host = 0;
        config.recrawl.interval_ms = Some(5);
        assert_eq!(validate_config(&config).len(), 3);
        assert!(validate_source(&SeedSource::Urls(vec![])).len() == 1);
        let all_bad = validate_source(&SeedSource::Urls(vec!["ftp://x/".into()]));
        assert!(all_bad[0].contains("no valid URL"), "{all_bad:?}");
        assert!(
            validate_source(&SeedSource::Urls(vec![
                "ftp://x/".into(),
                "http://a/".into()
            ]))
            .is_empty()
        );
        assert_eq!(
            validate_source(&SeedSource::Sitemaps(vec!["nope".into()])).len(),
            1
        );
    }

    #[test]
    fn the_fingerprint_covers_crawl_and_source_but_not_the_cursor() {
        let mut a = SeedRequest::from_json(json!({
            "crawl_id": "c1", "source": {"urls": ["http://a/"]}
        }))
        .unwrap();
        let fp = a.fingerprint();
        a.cursor = Some("x".into());
        assert_eq!(a.fingerprint(), fp);
        a.source = SeedSource::Urls(vec!["http://b/".into()]);
        assert_ne!(a.fingerprint(), fp);
    }
}
