//! Delivery: a completed crawl's results, written under
//! `{prefix}deliveries/crawl={crawl_id}/{delivery_id}/`:
//!
//! - `manifest.jsonl.gz`: one line per task (`ManifestLine`);
//! - `pages.warc.gz`: WARC/1.1, a `warcinfo` record, then `request` + `response` per stored page,
//!   each record its own gzip member;
//! - `delta.jsonl.gz`: new, changed, gone and unchanged pages since the previous delivery;
//! - `summary.json`: counts, errors, bytes, timing, calls and estimated cost (`Summary`);
//! - `_SUCCESS`, written last: a delivery without it is incomplete and is ignored.
//!
//! Everything is streamed (tasks page by page, files through multipart uploads in compressed
//! chunks), so memory is bounded by a few page bodies plus ~50 bytes per task for the delta.
//! The delivery id is derived from the crawl's generation: delivering one completion twice returns
//! the existing delivery instead of writing a second one.

mod delta;
mod gzip;
mod purge;
mod summary;
mod warc;

pub use delta::{Change, DeltaLine};
pub use purge::{PurgeError, PurgeReport, purge};
pub use summary::{CallCount, CostEstimate, DeltaSummary, PageProblem, Summary, WarcSummary};

use crate::blob::{BlobError, BlobStore, BlobUpload, Layout};
use crate::store::{CrawlStore, StoreError, TaskQuery, TaskStore, TaskSummary};
use bytes::Bytes;
use delta::Previous;
use futures_util::future::try_join_all;
use gzip::GzipFile;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::task::{ErrorKind, FetchRecord, Millis, Status, Task};
use warc::Exchange;

pub const MANIFEST_FILE: &str = "manifest.jsonl.gz";
pub const WARC_FILE: &str = "pages.warc.gz";
pub const DELTA_FILE: &str = "delta.jsonl.gz";
pub const SUMMARY_FILE: &str = "summary.json";
pub const SUCCESS_FILE: &str = "_SUCCESS";

/// Tasks per status query page.
const QUERY_PAGE: u32 = 100;
/// Tasks (and their bodies) loaded at once: bounds memory to this many page bodies.
const PARALLEL_LOADS: usize = 8;

/// A delivery request: the delivery queue's message body, and the on-demand request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRequest {
    pub crawl_id: CrawlId,
    /// The completed generation to deliver; None: the crawl's current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// The delivery id of a generation; zero-padded, so ids sort like generations.
pub fn delivery_id(generation: u64) -> String {
    format!("gen-{generation:06}")
}

fn generation_of(delivery_id: &str) -> Option<u64> {
    delivery_id.strip_prefix("gen-")?.parse().ok()
}

/// One line of `manifest.jsonl.gz`: a task as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestLine {
    pub url: String,
    pub task_id: String,
    /// The URL after redirects, when it differs.
    pub final_url: Option<String>,
    /// `pending`, `in_progress`, `failed`, `succeeded`, `ignored` or `gone`.
    pub status: String,
    pub http_status: Option<u16>,
    pub content_type: Option<String>,
    /// Hex md5 of the stored body.
    pub md5: Option<String>,
    /// Where the body is: `s3://bucket/key`, or a file path.
    pub object: Option<String>,
    pub bytes: Option<u64>,
    /// RFC 3339.
    pub fetched_at: Option<String>,
    pub depth: u32,
    pub retries: u32,
    pub last_error: Option<ManifestError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestError {
    pub kind: ErrorKind,
    pub message: String,
    /// RFC 3339.
    pub at: String,
}

/// What a delivery call did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub crawl_id: CrawlId,
    pub generation: u64,
    pub delivery_id: String,
    /// Where the delivery is (`s3://bucket/…/` or a directory).
    pub location: String,
    /// True when the delivery already existed and nothing was written.
    pub already_delivered: bool,
    pub summary: Summary,
}

#[derive(Debug, Error)]
pub enum DeliverError {
    #[error("no crawl {0}")]
    NoSuchCrawl(CrawlId),
    /// Only a completed generation is delivered (a running crawl's state is still moving).
    #[error("crawl {crawl_id} generation {generation} is still running")]
    NotCompleted { crawl_id: CrawlId, generation: u64 },
    #[error("crawl {crawl_id} has no generation {requested} yet (current: {current})")]
    UnknownGeneration {
        crawl_id: CrawlId,
        requested: u64,
        current: u64,
    },
    /// The crawl moved on to a later generation before this one was delivered: its state is gone.
    #[error(
        "crawl {crawl_id} generation {requested} was superseded by {current} before it was delivered"
    )]
    Superseded {
        crawl_id: CrawlId,
        requested: u64,
        current: u64,
    },
    /// An earlier delivery that cannot be read back (its manifest or summary).
    #[error("delivery file {key} is unreadable: {reason}")]
    CorruptDelivery { key: String, reason: String },
    /// Serialising or compressing a delivery file failed (not expected with in-memory buffers).
    #[error("encoding failed: {0}")]
    Encode(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Blob(#[from] BlobError),
}

impl DeliverError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            DeliverError::Store(e) => e.is_retryable(),
            DeliverError::Blob(e) => e.is_retryable(),
            // Completion may still come (a delivery requested early).
            DeliverError::NotCompleted { .. } => true,
            _ => false,
        }
    }

    /// A stable name for the error class (Lambda's `errorType`, logs, metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            DeliverError::NoSuchCrawl(_) => "NoSuchCrawl",
            DeliverError::NotCompleted { .. } => "NotCompleted",
            DeliverError::UnknownGeneration { .. } => "UnknownGeneration",
            DeliverError::Superseded { .. } => "Superseded",
            DeliverError::CorruptDelivery { .. } => "CorruptDelivery",
            DeliverError::Encode(_) => "Encode",
            DeliverError::Store(_) => "Store",
            DeliverError::Blob(_) => "Blob",
        }
    }
}

/// `uri_base` and `key` joined: `s3://bucket` + key, or a directory + key.
fn object_uri(uri_base: &str, key: &str) -> String {
    if uri_base.is_empty() {
        key.to_owned()
    } else {
        format!("{}/{key}", uri_base.trim_end_matches('/'))
    }
}

fn error_kind_name(kind: ErrorKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{kind:?}"))
}

fn json_line<T: Serialize>(value: &T) -> Result<Vec<u8>, DeliverError> {
    let mut line = serde_json::to_vec(value).map_err(|e| DeliverError::Encode(e.to_string()))?;
    line.push(b'\n');
    Ok(line)
}

/// Writes a delivery. Borrowed ports, so the CLI and the Lambda share one implementation.
pub struct Deliverer<'a, S, B> {
    pub store: &'a S,
    pub blobs: &'a B,
    pub layout: &'a Layout,
    /// Prepended to object keys in the manifest: `s3://bucket`, or the blob store's directory.
    pub uri_base: &'a str,
    /// The counters the adapters share: the delivery adds its calls to the crawl, whose totals
    /// the summary reports and prices.
    pub calls: &'a CallCounts,
}

/// A task loaded for writing: the full record and, for a page to archive, its body.
struct Loaded {
    task: Task,
    body: Option<BodyLookup>,
}

enum BodyLookup {
    Found(Bytes),
    Missing,
}

/// The keys of the three streamed files.
struct OutputKeys {
    manifest: String,
    warc: String,
    delta: String,
}

impl OutputKeys {
    fn new(prefix: &str) -> Self {
        Self {
            manifest: format!("{prefix}{MANIFEST_FILE}"),
            warc: format!("{prefix}{WARC_FILE}"),
            delta: format!("{prefix}{DELTA_FILE}"),
        }
    }
}

/// The three streamed files of a delivery, open together so the tasks are read once.
struct Outputs<U> {
    manifest: GzipFile<U>,
    warc: GzipFile<U>,
    delta: GzipFile<U>,
}

/// What every record of one delivery shares.
struct Context<'c> {
    crawl: &'c Crawl,
    warcinfo_id: &'c str,
}

/// Counts gathered while writing.
#[derive(Default)]
struct Tally {
    tasks: u64,
    statuses: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    page_bytes: u64,
    warc: WarcSummary,
    delta: DeltaSummary,
}

impl<S, B> Deliverer<'_, S, B>
where
    S: CrawlStore + TaskStore,
    B: BlobStore,
{
    /// Delivers `generation` of the crawl (its current one when None), or returns the delivery
    /// that already exists for it. Ends by adding the delivery's calls to the crawl.
    pub async fn deliver(
        &self,
        crawl_id: &CrawlId,
        generation: Option<u64>,
        now: Millis,
    ) -> Result<DeliveryReport, DeliverError> {
        let delivered = self.deliver_unreported(crawl_id, generation, now).await;
        crate::calls::report(self.store, self.calls, crawl_id).await;
        delivered
    }

    async fn deliver_unreported(
        &self,
        crawl_id: &CrawlId,
        generation: Option<u64>,
        now: Millis,
    ) -> Result<DeliveryReport, DeliverError> {
        let mut crawl = self
            .store
            .get_crawl(crawl_id)
            .await?
            .ok_or_else(|| DeliverError::NoSuchCrawl(crawl_id.clone()))?;
        let generation = generation.unwrap_or(crawl.generation);
        if generation > crawl.generation {
            return Err(DeliverError::UnknownGeneration {
                crawl_id: crawl_id.clone(),
                requested: generation,
                current: crawl.generation,
            });
        }
        let id = delivery_id(generation);
        let prefix = format!("{}{id}/", self.layout.deliveries_prefix(crawl_id));
        let delivered = self.completed_deliveries(crawl_id).await?;
        if delivered.contains_key(&generation) {
            let summary = self.read_summary(&prefix).await?;
            return Ok(self.report(&crawl, generation, &prefix, true, summary));
        }
        if generation < crawl.generation {
            return Err(DeliverError::Superseded {
                crawl_id: crawl_id.clone(),
                requested: generation,
                current: crawl.generation,
            });
        }
        if crawl.state != CrawlState::Completed {
            return Err(DeliverError::NotCompleted {
                crawl_id: crawl_id.clone(),
                generation,
            });
        }
        let mut previous = match delivered.range(..generation).next_back() {
            Some((_, previous_id)) => Some(self.load_previous(crawl_id, previous_id).await?),
            None => None,
        };

        let keys = OutputKeys::new(&prefix);
        let mut outputs = self.open_outputs(&keys).await?;
        let tally = match self
            .write_tasks(&mut outputs, &crawl, &id, previous.as_mut(), now)
            .await
        {
            Ok(tally) => tally,
            Err(e) => {
                outputs.abort().await;
                return Err(e);
            }
        };
        let files = outputs.complete().await?;
        // The crawl's calls so far, this delivery's included (on a failed report: as read above).
        if let Some(totals) = crate::calls::report(self.store, self.calls, crawl_id).await {
            crawl.calls = totals;
        }
        let summary = self.summary(&crawl, generation, &id, tally, files, now);
        self.write_plain(
            &format!("{prefix}{SUMMARY_FILE}"),
            "application/json",
            &serde_json::to_vec_pretty(&summary)
                .map_err(|e| DeliverError::Encode(e.to_string()))?,
        )
        .await?;
        self.write_plain(&format!("{prefix}{SUCCESS_FILE}"), "text/plain", b"")
            .await?;
        tracing::info!(
            crawl = %crawl_id,
            delivery = %id,
            tasks = summary.tasks,
            pages = summary.warc.pages,
            problems = summary.warc.problems,
            "delivery written"
        );
        Ok(self.report(&crawl, generation, &prefix, false, summary))
    }

    fn report(
        &self,
        crawl: &Crawl,
        generation: u64,
        prefix: &str,
        already_delivered: bool,
        summary: Summary,
    ) -> DeliveryReport {
        DeliveryReport {
            crawl_id: crawl.id.clone(),
            generation,
            delivery_id: delivery_id(generation),
            location: object_uri(self.uri_base, prefix),
            already_delivered,
            summary,
        }
    }

    /// Generations with a complete delivery (a `_SUCCESS` marker), and their delivery ids.
    async fn completed_deliveries(
        &self,
        crawl_id: &CrawlId,
    ) -> Result<BTreeMap<u64, String>, DeliverError> {
        let prefix = self.layout.deliveries_prefix(crawl_id);
        let keys = self.blobs.list(&prefix).await?;
        Ok(keys
            .iter()
            .filter_map(|key| {
                let id = key
                    .strip_prefix(&prefix)?
                    .strip_suffix(&format!("/{SUCCESS_FILE}"))?;
                Some((generation_of(id)?, id.to_owned()))
            })
            .collect())
    }

    async fn read_summary(&self, prefix: &str) -> Result<Summary, DeliverError> {
        let key = format!("{prefix}{SUMMARY_FILE}");
        let corrupt = |reason: String| DeliverError::CorruptDelivery {
            key: key.clone(),
            reason,
        };
        let body = self
            .blobs
            .get(&key)
            .await?
            .ok_or_else(|| corrupt("missing beside _SUCCESS".into()))?;
        serde_json::from_slice(&body).map_err(|e| corrupt(e.to_string()))
    }

    async fn load_previous(
        &self,
        crawl_id: &CrawlId,
        previous_id: &str,
    ) -> Result<Previous, DeliverError> {
        let key = format!(
            "{}{previous_id}/{MANIFEST_FILE}",
            self.layout.deliveries_prefix(crawl_id)
        );
        let manifest =
            self.blobs
                .get(&key)
                .await?
                .ok_or_else(|| DeliverError::CorruptDelivery {
                    key: key.clone(),
                    reason: "missing beside _SUCCESS".into(),
                })?;
        Previous::load(previous_id.to_owned(), key, manifest)
    }

    /// Opens the three streamed files. `keys` outlives them: an upload borrows its key.
    async fn open_outputs<'k>(
        &'k self,
        keys: &'k OutputKeys,
    ) -> Result<Outputs<impl BlobUpload + 'k>, DeliverError> {
        const GZIP: &str = "application/gzip";
        let manifest = GzipFile::new(self.blobs.upload(&keys.manifest, GZIP).await?);
        let warc = match self.blobs.upload(&keys.warc, GZIP).await {
            Ok(upload) => GzipFile::new(upload),
            Err(e) => {
                manifest.abort().await;
                return Err(e.into());
            }
        };
        let delta = match self.blobs.upload(&keys.delta, GZIP).await {
            Ok(upload) => GzipFile::new(upload),
            Err(e) => {
                manifest.abort().await;
                warc.abort().await;
                return Err(e.into());
            }
        };
        Ok(Outputs {
            manifest,
            warc,
            delta,
        })
    }

    async fn write_plain(
        &self,
        key: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<(), DeliverError> {
        let mut upload = self.blobs.upload(key, content_type).await?;
        if let Err(e) = upload.write(body).await {
            let _ = upload.abort().await;
            return Err(e.into());
        }
        upload.complete().await?;
        Ok(())
    }

    /// One pass over every task, status by status, page by page, feeding the three files.
    async fn write_tasks<U: BlobUpload>(
        &self,
        out: &mut Outputs<U>,
        crawl: &Crawl,
        delivery_id: &str,
        mut previous: Option<&mut Previous>,
        now: Millis,
    ) -> Result<Tally, DeliverError> {
        let mut tally = Tally::default();
        let warcinfo_id = warc::record_id();
        let robots = if crawl.config.politeness.respect_robots {
            "obey"
        } else {
            "ignore"
        };
        let version = format!("trawl/{}", env!("CARGO_PKG_VERSION"));
        let description = format!("crawl {} delivery {delivery_id}", crawl.id);
        out.warc
            .write(&warc::warcinfo(
                &warcinfo_id,
                now,
                WARC_FILE,
                &[
                    ("software", &version),
                    ("format", "WARC File Format 1.1"),
                    (
                        "conformsTo",
                        "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
                    ),
                    ("isPartOf", crawl.id.as_str()),
                    ("description", &description),
                    ("robots", robots),
                    ("http-header-user-agent", &crawl.config.user_agent),
                ],
            ))
            .await?;
        out.warc.end_member().await?;
        let context = Context {
            crawl,
            warcinfo_id: &warcinfo_id,
        };

        for status in Status::ALL {
            let mut cursor = None;
            loop {
                let page = self
                    .store
                    .query(&TaskQuery {
                        crawl_id: crawl.id.clone(),
                        status,
                        updated_before: None,
                        limit: QUERY_PAGE,
                        cursor,
                    })
                    .await?;
                for chunk in page.tasks.chunks(PARALLEL_LOADS) {
                    let loaded = try_join_all(chunk.iter().map(|t| self.load(t))).await?;
                    for item in loaded.into_iter().flatten() {
                        self.write_task(out, &mut tally, &context, &mut previous, item)
                            .await?;
                    }
                }
                cursor = page.cursor;
                if cursor.is_none() {
                    break;
                }
            }
        }

        if let Some(previous) = previous {
            tally.delta.previous = Some(previous.delivery_id.clone());
            for line in previous.vanished() {
                out.delta.write(&json_line(&line?)?).await?;
                tally.delta.gone += 1;
            }
        }
        Ok(tally)
    }

    /// The full task and, when it is a page to archive, its body. None if the task vanished.
    async fn load(&self, summary: &TaskSummary) -> Result<Option<Loaded>, DeliverError> {
        let Some(task) = self.store.get(&summary.crawl_id, &summary.task_id).await? else {
            return Ok(None);
        };
        let key = task
            .fetch
            .as_ref()
            .filter(|_| delta::is_present(task.status, true))
            .and_then(|f| f.object_key.as_deref());
        let body = match key {
            Some(key) => Some(match self.blobs.get(key).await? {
                Some(bytes) => BodyLookup::Found(bytes),
                None => BodyLookup::Missing,
            }),
            None => None,
        };
        Ok(Some(Loaded { task, body }))
    }

    async fn write_task<U: BlobUpload>(
        &self,
        out: &mut Outputs<U>,
        tally: &mut Tally,
        context: &Context<'_>,
        previous: &mut Option<&mut Previous>,
        Loaded { task, body }: Loaded,
    ) -> Result<(), DeliverError> {
        let fetch = task.fetch.as_ref();
        let last_error = task.errors.last();
        tally.tasks += 1;
        *tally
            .statuses
            .entry(task.status.name().to_owned())
            .or_default() += 1;
        if matches!(task.status, Status::Failed | Status::Ignored | Status::Gone) {
            let kind = last_error.map_or_else(|| "unknown".to_owned(), |e| error_kind_name(e.kind));
            *tally.errors.entry(kind).or_default() += 1;
        }

        let line = ManifestLine {
            url: task.url.clone(),
            task_id: task.task_id.to_string(),
            final_url: fetch.and_then(|f| f.final_url.clone()),
            status: task.status.name().to_owned(),
            http_status: fetch.map(|f| f.http_status),
            content_type: fetch.and_then(|f| f.content_type.clone()),
            md5: fetch.and_then(|f| f.md5.clone()),
            object: fetch
                .and_then(|f| f.object_key.as_deref())
                .map(|key| object_uri(self.uri_base, key)),
            bytes: fetch.map(|f| f.content_length),
            fetched_at: fetch.map(|f| warc::rfc3339(f.fetched_at)),
            depth: task.depth,
            retries: task.retries,
            last_error: last_error.map(|e| ManifestError {
                kind: e.kind,
                message: e.message.clone(),
                at: warc::rfc3339(e.at),
            }),
        };
        out.manifest.write(&json_line(&line)?).await?;

        if let (Some(fetch), Some(body)) = (fetch, body) {
            self.archive(out, tally, context, &task, fetch, body)
                .await?;
        }

        let present = delta::is_present(task.status, fetch.is_some());
        let md5 = fetch.and_then(|f| f.md5.as_deref());
        let change = match previous {
            Some(previous) => previous.compare(task.task_id.as_str(), present, md5),
            None => present.then_some(Change::New),
        };
        if let Some(change) = change {
            match change {
                Change::New => tally.delta.new += 1,
                Change::Changed => tally.delta.changed += 1,
                Change::Gone => tally.delta.gone += 1,
                Change::Unchanged => tally.delta.unchanged += 1,
            }
            out.delta
                .write(&json_line(&DeltaLine {
                    change,
                    url: task.url.clone(),
                    md5: md5.map(str::to_owned),
                })?)
                .await?;
        }
        Ok(())
    }

    /// Writes the page's request and response records, or records why it cannot.
    async fn archive<U: BlobUpload>(
        &self,
        out: &mut Outputs<U>,
        tally: &mut Tally,
        context: &Context<'_>,
        task: &Task,
        fetch: &FetchRecord,
        body: BodyLookup,
    ) -> Result<(), DeliverError> {
        let key = fetch.object_key.as_deref().unwrap_or_default();
        let bytes = match body {
            BodyLookup::Found(bytes) => bytes,
            BodyLookup::Missing => {
                self.problem(tally, task, key, "missing".to_owned());
                return Ok(());
            }
        };
        let actual = hex::encode(Md5::digest(&bytes));
        if let Some(expected) = fetch.md5.as_deref()
            && !expected.eq_ignore_ascii_case(&actual)
        {
            let problem = format!("md5 mismatch: got {actual}, expected {expected}");
            self.problem(tally, task, key, problem);
            return Ok(());
        }
        let (request_id, response_id) = (warc::record_id(), warc::record_id());
        let exchange = Exchange {
            target_uri: fetch.final_url.as_deref().unwrap_or(&task.url),
            fetched_at: fetch.fetched_at,
            http_status: fetch.http_status,
            content_type: fetch.content_type.as_deref(),
            etag: fetch.etag.as_deref(),
            last_modified: fetch.last_modified.as_deref(),
            user_agent: &context.crawl.config.user_agent,
            warcinfo_id: context.warcinfo_id,
            request_id: &request_id,
            response_id: &response_id,
        };
        out.warc.write(&exchange.request_record()).await?;
        out.warc.end_member().await?;
        out.warc.write(&exchange.response_head(&bytes)).await?;
        out.warc.write(&bytes).await?;
        out.warc.write(warc::RECORD_END).await?;
        out.warc.end_member().await?;
        tally.warc.pages += 1;
        tally.page_bytes += bytes.len() as u64;
        Ok(())
    }

    fn problem(&self, tally: &mut Tally, task: &Task, key: &str, problem: String) {
        tracing::warn!(url = %task.url, %key, %problem, "page left out of the WARC");
        tally.warc.problems += 1;
        if tally.warc.problem_samples.len() < summary::PROBLEM_SAMPLES {
            tally.warc.problem_samples.push(PageProblem {
                url: task.url.clone(),
                key: object_uri(self.uri_base, key),
                problem,
            });
        }
    }

    fn summary(
        &self,
        crawl: &Crawl,
        generation: u64,
        delivery_id: &str,
        tally: Tally,
        files: BTreeMap<String, u64>,
        now: Millis,
    ) -> Summary {
        let duration_seconds = (now - crawl.created_at).max(0) as f64 / 1000.0;
        let succeeded = tally
            .statuses
            .get(Status::Succeeded.name())
            .copied()
            .unwrap_or(0);
        let pages_per_second = if duration_seconds > 0.0 {
            succeeded as f64 / duration_seconds
        } else {
            0.0
        };
        Summary {
            crawl_id: crawl.id.to_string(),
            generation,
            delivery_id: delivery_id.to_owned(),
            tasks: tally.tasks,
            statuses: tally.statuses,
            errors: tally.errors,
            page_bytes: tally.page_bytes,
            files,
            started_at: warc::rfc3339(crawl.created_at),
            finished_at: warc::rfc3339(now),
            duration_seconds,
            pages_per_second,
            warc: tally.warc,
            delta: tally.delta,
            calls: summary::call_counts(&crawl.calls),
            estimated_cost: CostEstimate::from_calls(&crawl.calls),
        }
    }
}

impl<U: BlobUpload> Outputs<U> {
    async fn abort(self) {
        self.manifest.abort().await;
        self.warc.abort().await;
        self.delta.abort().await;
    }

    /// Completes the three files; their compressed sizes by name.
    async fn complete(self) -> Result<BTreeMap<String, u64>, DeliverError> {
        let Outputs {
            manifest,
            warc,
            delta,
        } = self;
        let manifest_size = match manifest.complete().await {
            Ok(size) => size,
            Err(e) => {
                warc.abort().await;
                delta.abort().await;
                return Err(e);
            }
        };
        let warc_size = match warc.complete().await {
            Ok(size) => size,
            Err(e) => {
                delta.abort().await;
                return Err(e);
            }
        };
        let delta_size = delta.complete().await?;
        Ok(BTreeMap::from([
            (MANIFEST_FILE.to_owned(), manifest_size),
            (WARC_FILE.to_owned(), warc_size),
            (DELTA_FILE.to_owned(), delta_size),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_sort_like_generations_and_parse_back() {
        assert_eq!(delivery_id(1), "gen-000001");
        assert!(delivery_id(9) < delivery_id(10));
        assert_eq!(generation_of(&delivery_id(1_000_000)), Some(1_000_000));
        assert_eq!(generation_of("partial"), None);
    }

    #[test]
    fn delivery_requests_are_strict() {
        let request: DeliveryRequest =
            serde_json::from_str(r#"{"crawl_id":"news","generation":2}"#).unwrap();
        assert_eq!(request.generation, Some(2));
        assert!(serde_json::from_str::<DeliveryRequest>(r#"{"crawl_id":"a/b"}"#).is_err());
        assert!(serde_json::from_str::<DeliveryRequest>(r#"{"crawl_id":"a","x":1}"#).is_err());
    }

    #[test]
    fn object_uris_join_base_and_key() {
        assert_eq!(object_uri("s3://b", "k/x"), "s3://b/k/x");
        assert_eq!(object_uri("/data/objects/", "k"), "/data/objects/k");
        assert_eq!(object_uri("", "k"), "k");
    }
}
