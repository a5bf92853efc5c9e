//! Delivery: a completed crawl generation's results, written under
//! `{prefix}deliveries/crawl={crawl_id}/run={created}/{delivery_id}/`, where `run` is the crawl's
//! creation time (a crawl purged and created again under the same id is a new run, with
//! deliveries of its own) and the delivery id names the generation (`gen-000000`):
//!
//! - `manifest-NNNNN.jsonl.gz`: one line per task (`ManifestLine`), in numbered segments;
//! - `pages-NNNNN.warc.gz`: WARC/1.1, each segment a `warcinfo` record then `request` +
//!   `response` per stored page, each record its own gzip member; segment N holds the pages of
//!   the tasks in manifest segment N. A page of the segment layout is copied as its segment
//!   keeps it (`blob::segment`: a `response` record, and its items' `metadata` record), its
//!   body never inflated;
//! - `delta-NNNNN.jsonl.gz`: new, changed and gone pages since the previous delivery of the run,
//!   each with its reason (unchanged ones are counted in the summary);
//! - `index.json`: every file above with its size, record count and md5 (`DeliveryIndex`);
//! - `items.jsonl.gz` and `items-delta.jsonl.gz`, for a crawl with extractors: the items
//!   extracted from its pages, and those new, changed or gone since the previous delivery
//!   (`items`);
//! - `summary.json`: counts, errors, bytes, timing, calls and estimated cost (`Summary`);
//! - `_SUCCESS`, written last: a delivery without it is incomplete and is ignored.
//!
//! The task pass is written by several writers at once (`DeliveryLimits::writers`, fewer for a
//! small crawl), concurrent tasks of one call: writer `w` of `n` reads part `w` of the tasks
//! (`store::Part`: disjoint, along the store's own keys) and writes segments `w`, `w + n`,
//! `w + 2n` … (a writer that runs out of tasks first leaves its later numbers unused); the index
//! lists the segments in number order.
//!
//! No size has a ceiling: a segment is closed once it reaches its target size
//! (`DeliveryLimits`), and the work is checkpointed (`checkpoint.json`: each writer's position in
//! the task index, files done, counts so far) each time a segment, a sorted run of the delta or
//! a delta file is written. A call
//! given a deadline stops cleanly once it has passed (`Delivery::Paused`) and the next call
//! continues from the checkpoint; a call that crashed continues from the last one (files after
//! it are written again, under the same names). Memory is bounded by a few page bodies, one
//! manifest segment and the delta's sorted run (`compare`); the items pass, in one go at the end,
//! by its sorters' runs (`items`).
//! Delivering one generation twice returns the existing delivery instead of writing a second one.

mod changed;
mod compact;
mod compare;
#[cfg(test)]
mod cut;
mod delta;
mod gzip;
mod items;
pub mod orphans;
mod purge;
mod runs;
mod summary;

pub use compact::{CompactionReport, RetentionReport};
pub use compare::DeltaStats;
pub use delta::{Change, DeltaLine};
pub use items::{
    DetailPage, ITEMS_CSV_FILE, ITEMS_DELTA_FILE, ITEMS_FILE, ItemDeltaLine, ItemLine, ItemsStats,
    PreviousItems,
};
pub use purge::{PurgeError, PurgeReport, purge};
pub use summary::{
    CallCount, ChainSummary, CostEstimate, DeltaSummary, ExtractorItems, InvalidItem, ItemsDelta,
    ItemsSummary, PageProblem, PagingTally, SegmentUse, SegmentsSummary, Summary, WarcSummary,
};

use crate::app::{App, Ports};
use crate::backoff::{Backoff, Transient, persist};
use crate::blob::{BlobError, BlobStore, BlobUpload, Layout};
use crate::clock::SystemClock;
use crate::discover::ScopeMatcher;
use crate::store::{Applied, CrawlRecords, CrawlStore, Part, StoreError, TaskQuery, TaskRecords};
use crate::warc::{self, Exchange};
use bytes::Bytes;
use compare::{Comparison, Progress, Step};
use futures_util::future::{join_all, try_join_all};
use gzip::GzipFile;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::{
    CheckpointFormat, Crawl, CrawlState, DeliveredPages, StorageLayout, transition,
};
use trawl_domain::image::is_image_task;
use trawl_domain::paging::PagePattern;
use trawl_domain::task::{ErrorKind, ErrorRecord, FetchRecord, Millis, Status, Task, UserData};
use trawl_domain::transition as task_transition;

pub const INDEX_FILE: &str = "index.json";
pub const SUMMARY_FILE: &str = "summary.json";
pub const SUCCESS_FILE: &str = "_SUCCESS";
const CHECKPOINT_FILE: &str = "checkpoint.json";
const GZIP: &str = "application/gzip";
/// The one manifest of a delivery written before segments: read as a previous delivery.
const LEGACY_MANIFEST_FILE: &str = "manifest.jsonl.gz";

/// Tasks per status query page.
const QUERY_PAGE: u32 = 100;
/// Tasks (and their bodies) loaded at once: bounds memory to this many page bodies.
const PARALLEL_LOADS: usize = 8;
/// Work a call does before it may stop for its deadline (a task is one unit, a delta partition
/// this many), so that every call moves the delivery on.
const MIN_WORK_PER_CALL: u64 = QUERY_PAGE as u64;
/// One read of the delivery (a stored object, a task, a page of tasks): a read that failed in a
/// way that may pass (a body cut mid-stream, throttling) is tried again for a few seconds, not
/// the end of the delivery (a longer outage fails the call, which is retried as a whole).
const READ: Backoff = Backoff {
    first: Duration::from_millis(100),
    max: Duration::from_secs(1),
    outage: Duration::from_secs(4),
};
/// A call without a deadline holds the delivery this long (Lambda's longest invocation).
const DELIVERY_LEASE: Duration = Duration::from_secs(15 * 60);
/// A call with a deadline holds it this long past it: time to write its last checkpoint.
const DELIVERY_LEASE_MARGIN: Duration = Duration::from_secs(60);

/// Takes over and releases the delivery lease of `crawl_id`, whoever holds it. Only for a store
/// that one process uses at a time (a locked local data directory): there a lease can only have
/// been left by a process that died delivering (a SIGKILL, a power cut), and its 15 minutes
/// would hold the next run off for nothing. The delivery itself resumes from its checkpoint.
pub async fn release_dead_delivery<S: CrawlStore>(
    store: &S,
    crawl_id: &CrawlId,
) -> Result<(), StoreError> {
    let holder = format!("restart-{:016x}", fastrand::u64(..));
    // As if the clock stood past any lease: the claim goes through whatever it finds.
    if store
        .claim_delivery(crawl_id, &holder, Millis::MAX, Millis::MAX)
        .await?
    {
        store.release_delivery(crawl_id, &holder).await?;
    }
    Ok(())
}

/// How large a delivery's pieces grow, and how many writers write them. The defaults suit S3
/// and Lambda; tests make them small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLimits {
    /// A WARC segment is closed at the first page that takes it to this compressed size.
    pub pages_segment_bytes: u64,
    /// Likewise a manifest segment (smaller: the delta reads a manifest segment whole).
    pub manifest_segment_bytes: u64,
    /// Manifest entries the delta sorts in memory at once (a sorted run, `compare`: ~200 bytes
    /// an entry), and the tasks compared per delta file.
    pub delta_index_entries: u64,
    /// Entries the items pass (`items`) sorts in memory at once, per sorter (an item is a few
    /// hundred bytes to a few KB): a generation of more items is sorted through runs.
    pub items_entries: u64,
    /// Writers of a delivery's task pass at most, concurrent within one call: writer `w` of
    /// `n` walks part `w` of the crawl's tasks (`store::Part`) and writes segments `w`,
    /// `w + n`, … Each holds two open uploads and `PARALLEL_LOADS` page bodies.
    pub writers: u32,
    /// Tasks per writer at least: a delivery of fewer tasks has fewer writers (one below twice
    /// this), so that a small crawl is not spread over many small segments. A delivery keeps
    /// the number of writers it started with until it is done (its checkpoint says it).
    pub tasks_per_writer: u64,
    /// Live bytes a compaction pass copies at most (`compact`): it rewrites segments until this
    /// much is copied (the first one whatever its size), the rest left for the next pass.
    pub compact_bytes: u64,
}

impl DeliveryLimits {
    pub const DEFAULT: DeliveryLimits = DeliveryLimits {
        // 1 GiB less room for one large page: segments stay within 1 GiB.
        pages_segment_bytes: 960 << 20,
        manifest_segment_bytes: 64 << 20,
        delta_index_entries: 1_000_000,
        // At most three sorters fill at once: ~150,000 entries. A sorter that does not spill
        // holds its entries typed, ~1.7 KB an item of the bench's (`trawl-bench --only items`
        // measured 365 MiB for 200,000 held; 157 MiB as JSON lines): ~260 MB.
        items_entries: 50_000,
        // A writer waits on reads most of its time (a task, then its body): 8 keep a Lambda
        // of 1 GB busy without holding more than 64 bodies.
        writers: 8,
        tasks_per_writer: 10_000,
        // A few seconds of reads and writes, within a Lambda's memory a batch at a time.
        compact_bytes: 1 << 30,
    };

    /// The writers of a delivery of `tasks` tasks.
    pub fn writers_for(&self, tasks: u64) -> u32 {
        let wanted = tasks / self.tasks_per_writer.max(1);
        u32::try_from(wanted)
            .unwrap_or(u32::MAX)
            .clamp(1, self.writers.max(1))
    }
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

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

/// Where one run of a crawl keeps its deliveries: `run=` and its creation time, compact
/// RFC 3339 with milliseconds (`run=20270115T080000.000Z`), so runs sort by age.
pub fn run_prefix(layout: &Layout, crawl: &Crawl) -> String {
    let at =
        std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(crawl.created_at).unwrap_or(0));
    let created: String = humantime::format_rfc3339_millis(at)
        .to_string()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{}run={created}/", layout.deliveries_prefix(&crawl.id))
}

/// The kinds of segmented files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    Manifest,
    Pages,
    Delta,
    /// `items.jsonl.gz` (one per delivery).
    Items,
    /// `items-delta.jsonl.gz` (one per delivery).
    ItemsDelta,
    /// `items.csv.gz` (one per delivery, when the crawl asks for it).
    ItemsCsv,
    /// The pages new or changed since the previous delivery, copied (`DeliveredPages::Changed`).
    Changed,
}

impl FileKind {
    /// The file name of segment `n`.
    pub fn name(self, n: u32) -> String {
        match self {
            FileKind::Manifest => format!("manifest-{n:05}.jsonl.gz"),
            FileKind::Pages => format!("pages-{n:05}.warc.gz"),
            FileKind::Delta => format!("delta-{n:05}.jsonl.gz"),
            FileKind::Items => ITEMS_FILE.to_owned(),
            FileKind::ItemsDelta => ITEMS_DELTA_FILE.to_owned(),
            FileKind::ItemsCsv => ITEMS_CSV_FILE.to_owned(),
            FileKind::Changed => format!("changed-{n:05}.warc.gz"),
        }
    }
}

/// One file of a delivery, as `index.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedFile {
    pub name: String,
    pub kind: FileKind,
    /// Compressed size.
    pub bytes: u64,
    /// Manifest and delta lines, or WARC records (the `warcinfo` included).
    pub records: u64,
    /// Hex md5 of the file as stored.
    pub md5: String,
}

/// `index.json`: the files of a delivery, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryIndex {
    pub crawl_id: String,
    pub generation: u64,
    pub delivery_id: String,
    pub files: Vec<IndexedFile>,
}

impl DeliveryIndex {
    /// The files of one kind, in order.
    pub fn of_kind(&self, kind: FileKind) -> impl Iterator<Item = &IndexedFile> {
        self.files.iter().filter(move |f| f.kind == kind)
    }
}

/// One line of a manifest segment: a task as it stands.
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
    /// On the segment layout, where in `object` (a segment) the page's records are: its gzip
    /// members from `offset`, `length` bytes (like a CDX index's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// When the page's items travel with it: the length of their member, the span's last, so
    /// that they are read without inflating the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items_length: Option<u64>,
    pub bytes: Option<u64>,
    /// The page's title, description and language (`analysis.page`), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// The main text of an HTML page or a PDF (`analysis.text`), when read; whether it was cut
    /// at its bound; why none could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub text_cut: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_error: Option<trawl_domain::task::TextError>,
    /// RFC 3339.
    pub fetched_at: Option<String>,
    /// When the fetch record's history began (RFC 3339 with milliseconds): the page's first
    /// fetch, or its first after a reset. The delta names a page whose history began since the
    /// previous delivery `new`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_fetched_at: Option<String>,
    pub depth: u32,
    pub retries: u32,
    pub last_error: Option<ManifestError>,
    /// The task's user data (given at seed time, or inherited), when it has some; a pushed
    /// content (`_content`) is the page's body, not repeated here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<UserData>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestError {
    pub kind: ErrorKind,
    pub message: String,
    /// RFC 3339.
    pub at: String,
    /// Errors of this kind in a row, this one included (`http 404 twice`).
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// How many of the task's last errors in a row are of the last one's kind.
fn times_in_a_row(errors: &[ErrorRecord]) -> u32 {
    let Some(last) = errors.last() else {
        return 0;
    };
    let n = errors
        .iter()
        .rev()
        .take_while(|e| e.kind == last.kind)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// What a delivery call did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub crawl_id: CrawlId,
    pub generation: u64,
    pub delivery_id: String,
    /// Where the delivery is (`s3://bucket/…/` or a directory).
    pub location: String,
    /// Its key prefix in the object store (the files are `{prefix}{name}`).
    pub prefix: String,
    /// True when the delivery already existed and nothing was written.
    pub already_delivered: bool,
    pub summary: Summary,
    /// What the purge that followed the delivery removed (`delivery.purge_after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purged: Option<PurgeReport>,
    /// Retention and compaction after the delivery (`compact`; a crawl with
    /// `delivery.keep_generations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upkeep: Option<Upkeep>,
}

/// What followed a delivery: old deliveries removed, segments compacted (`compact`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upkeep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionReport>,
    /// Why it stopped short after a delivery: left for the next one (the delivery stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How far a delivery that stopped for its deadline got; the next call continues it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryProgress {
    pub crawl_id: CrawlId,
    pub generation: u64,
    pub delivery_id: String,
    /// Tasks written to the manifest so far.
    pub tasks: u64,
    /// Files written so far.
    pub files: usize,
    /// `tasks` or `delta`.
    pub phase: String,
}

/// What a delivery call with a deadline did.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Done(Box<DeliveryReport>),
    Paused(DeliveryProgress),
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
    /// Another call is writing this crawl's delivery (`CrawlStore::claim_delivery`): it
    /// finishes it, or its lease expires and a later call takes over.
    #[error(
        "the delivery of crawl {crawl_id} generation {generation} is being written by another call"
    )]
    Busy { crawl_id: CrawlId, generation: u64 },
    /// An earlier delivery or checkpoint that cannot be read back.
    #[error("delivery file {key} is unreadable: {reason}")]
    CorruptDelivery { key: String, reason: String },
    /// Serialising or compressing a delivery file failed (not expected with in-memory buffers).
    #[error("encoding failed: {0}")]
    Encode(String),
    /// The delivery is written; the purge it asks for after (`delivery.purge_after`) failed.
    /// A call made again finds the delivery done and purges again.
    #[error("delivered, then the purge failed: {0}")]
    Purge(#[from] PurgeError),
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
            DeliverError::Purge(e) => e.is_retryable(),
            // Completion may still come (a delivery requested early).
            DeliverError::NotCompleted { .. } => true,
            // The holder finishes or pauses (then the next call continues), or dies and its
            // lease expires: later, this call goes through or finds the delivery done.
            DeliverError::Busy { .. } => true,
            _ => false,
        }
    }

    /// A stable name for the error class (Lambda's `errorType`, logs, metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            DeliverError::NoSuchCrawl(_) => "NoSuchCrawl",
            DeliverError::NotCompleted { .. } => "NotCompleted",
            DeliverError::Busy { .. } => "Busy",
            DeliverError::UnknownGeneration { .. } => "UnknownGeneration",
            DeliverError::Superseded { .. } => "Superseded",
            DeliverError::CorruptDelivery { .. } => "CorruptDelivery",
            DeliverError::Encode(_) => "Encode",
            DeliverError::Purge(_) => "Purge",
            DeliverError::Store(_) => "Store",
            DeliverError::Blob(_) => "Blob",
        }
    }
}

impl Transient for DeliverError {
    fn is_transient(&self) -> bool {
        // A delivery asked for before completion is not an outage to wait out here.
        self.is_retryable() && !matches!(self, DeliverError::NotCompleted { .. })
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

/// A time as `format` writes it as a checkpoint.
fn checkpoint_of(format: CheckpointFormat, at: Millis) -> String {
    match format {
        CheckpointFormat::Rfc3339 => warc::rfc3339_millis(at),
        CheckpointFormat::EpochMs => at.to_string(),
        CheckpointFormat::EpochS => at.div_euclid(1000).to_string(),
    }
}

/// The crawl's open-ended pagination templates as its task URLs read (the seeder checked them:
/// one that does not read is left out of the summary, logged).
fn paging_patterns(crawl: &Crawl) -> Vec<PagePattern> {
    if crawl.config.paging.is_empty() {
        return Vec::new();
    }
    let Ok(scope) = ScopeMatcher::new(&crawl.config.scope) else {
        return Vec::new();
    };
    crawl
        .config
        .paging
        .iter()
        .filter_map(|t| match PagePattern::new(t, |url| scope.normalise(url)) {
            Ok(pattern) => Some(pattern),
            Err(e) => {
                tracing::warn!(error = %e, "a stored pagination template does not read");
                None
            }
        })
        .collect()
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

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>, DeliverError> {
    serde_json::to_vec_pretty(value).map_err(|e| DeliverError::Encode(e.to_string()))
}

/// Writes deliveries over its App's ports. Build it once per process; it reads the App's ports
/// as its own (it derefs to the App), so the CLI and the Lambda share one implementation.
pub struct Deliverer<P: Ports> {
    app: Arc<App<P>>,
    /// Prepended to object keys in the manifest: `s3://bucket`, or the blob store's directory.
    uri_base: String,
    limits: DeliveryLimits,
    /// The caller writes the store alone, no crawl running ([`Deliverer::sole_writer`]).
    sole_writer: bool,
}

impl<P: Ports> std::ops::Deref for Deliverer<P> {
    type Target = App<P>;

    fn deref(&self) -> &App<P> {
        &self.app
    }
}

/// A task loaded for writing: the full record and, for a page to archive, its body.
struct Loaded {
    task: Task,
    body: Option<BodyLookup>,
}

enum BodyLookup {
    /// Not read: the delivery points at where the page is stored.
    Referenced,
    Found(Bytes),
    /// A page's records in a segment, as stored: copied into the WARC as they are.
    Records(Bytes),
    Missing,
}

/// Counts gathered while writing (kept in the checkpoint between calls).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    tasks: u64,
    statuses: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    page_bytes: u64,
    warc: WarcSummary,
    delta: DeltaSummary,
    #[serde(default)]
    items: Option<ItemsSummary>,
    #[serde(default)]
    orphans_removed: u64,
    /// Per segment: bytes the generation's pages point at (the task pass), and its size (the
    /// clean-up's listing).
    #[serde(default)]
    segments: BTreeMap<String, SegmentUse>,
    /// The chains of open-ended pagination templates.
    #[serde(default)]
    paging: PagingTally,
    /// Pages whose chain rules stopped, by why.
    #[serde(default)]
    chain_stops: BTreeMap<String, u64>,
}

impl Tally {
    /// Adds what a writer counted in a segment it wrote (the task pass's counts only).
    fn absorb(&mut self, segment: Tally) {
        self.tasks += segment.tasks;
        for (status, n) in segment.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (kind, n) in segment.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.page_bytes += segment.page_bytes;
        self.warc.pages += segment.warc.pages;
        self.warc.referenced += segment.warc.referenced;
        self.warc.problems += segment.warc.problems;
        let room = summary::PROBLEM_SAMPLES.saturating_sub(self.warc.problem_samples.len());
        self.warc
            .problem_samples
            .extend(segment.warc.problem_samples.into_iter().take(room));
        for (key, used) in segment.segments {
            self.segments.entry(key).or_default().live += used.live;
        }
        self.paging.absorb(segment.paging);
        for (reason, n) in segment.chain_stops {
            *self.chain_stops.entry(reason).or_default() += n;
        }
    }
}

/// Where one writer of the task pass is: the status (index in `Status::ALL`; past the last:
/// done), the query page's cursor, the tasks of that page already written, and the segments
/// it has written.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Position {
    status: usize,
    cursor: Option<String>,
    skip: usize,
    #[serde(default)]
    segments: u32,
}

impl Position {
    fn done(&self) -> bool {
        self.status >= Status::ALL.len()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
enum Phase {
    /// Writing manifest and WARC segments with one writer: a checkpoint written before
    /// parallel writers, read as `Writing` with one.
    Tasks(Position),
    /// Writing manifest and WARC segments, one position per writer.
    Writing { writers: Vec<Position> },
    /// Comparing with the previous delivery: sorting both manifests, then merging them.
    Compare(Progress),
    /// A checkpoint written before the delta was sorted (it indexed the previous delivery a
    /// partition at a time): the delta starts again.
    #[serde(rename = "delta")]
    PartitionedDelta { partition: u32, partitions: u32 },
    /// Copying the pages the delta calls new or changed (`changed`), when the crawl asks.
    Changed(changed::CopyPosition),
    /// Removing orphan objects (`orphans`), a listing page at a time from after `start_after`.
    CleanUp { start_after: Option<String> },
}

/// The previous delivery of the run: the one the delta compares with.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Previous {
    delivery_id: String,
    /// Keys of its manifest segments.
    manifests: Vec<String>,
}

/// `checkpoint.json`: what a call that stops leaves for the next one.
#[derive(Debug, Serialize, Deserialize)]
struct Checkpoint {
    generation: u64,
    previous: Option<Previous>,
    phase: Phase,
    /// Files written, in order.
    files: Vec<IndexedFile>,
    tally: Tally,
    /// When the first call of this delivery began, before it read any task (the summary's
    /// `tasks_read_from_ms`). None in a checkpoint written before it was kept.
    #[serde(default)]
    began: Option<Millis>,
}

impl Checkpoint {
    fn segments(&self, kind: FileKind) -> u32 {
        let n = self.files.iter().filter(|f| f.kind == kind).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The keys of the manifest segments written so far, in order.
    fn manifest_keys(&self, prefix: &str) -> Vec<String> {
        self.files
            .iter()
            .filter(|f| f.kind == FileKind::Manifest)
            .map(|f| format!("{prefix}{}", f.name))
            .collect()
    }

    fn progress(&self, crawl_id: &CrawlId) -> DeliveryProgress {
        DeliveryProgress {
            crawl_id: crawl_id.clone(),
            generation: self.generation,
            delivery_id: delivery_id(self.generation),
            tasks: self.tally.tasks,
            files: self.files.len(),
            phase: match self.phase {
                Phase::Tasks(_) | Phase::Writing { .. } => "tasks",
                Phase::Compare(_) | Phase::PartitionedDelta { .. } => "delta",
                Phase::Changed(_) => "changed",
                Phase::CleanUp { .. } => "clean_up",
            }
            .to_owned(),
        }
    }
}

/// The time a call has (its deadline on the App's clock), and the work it did (it stops only
/// after `MIN_WORK_PER_CALL`).
struct Budget {
    deadline: Option<Instant>,
    work: u64,
}

impl Budget {
    /// Whether the call stops at `now` (`Clock::instant`).
    fn spent(&self, now: Instant) -> bool {
        self.work >= MIN_WORK_PER_CALL && self.deadline.is_some_and(|d| now >= d)
    }
}

/// Why filling a segment stopped.
enum Stop {
    Full,
    Paused,
    Exhausted,
}

/// What the writers of one call's task pass share.
struct TaskPass<'a> {
    crawl: &'a Crawl,
    delivery_id: &'a str,
    prefix: &'a str,
    now: Millis,
    paging: Vec<PagePattern>,
    /// The delivery's checkpoint, which each writer adds its segments to.
    state: tokio::sync::Mutex<&'a mut Checkpoint>,
    /// Set by a writer that failed: the others stop at their next task.
    halt: AtomicBool,
}

/// The number of a segment file's name (`manifest-00012.jsonl.gz`: 12).
fn segment_number(name: &str) -> u32 {
    name.rsplit('-')
        .next()
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// One manifest segment and its WARC segment, open together so the tasks are read once.
struct Segment<U> {
    number: u32,
    manifest: GzipFile<U>,
    /// None unless the crawl's pages are copied (`DeliveredPages::Copy`).
    pages: Option<PagesFile<U>>,
    lines: u64,
}

/// A WARC file of copied pages being written: its `warcinfo` record, then each page's.
struct PagesFile<U> {
    file: GzipFile<U>,
    /// Records written, the `warcinfo` included.
    records: u64,
    warcinfo_id: String,
}

impl<U: BlobUpload> PagesFile<U> {
    fn full(&self, limits: &DeliveryLimits) -> bool {
        self.file.compressed() >= limits.pages_segment_bytes
    }

    /// Completes the file: its index entry.
    async fn complete(self, kind: FileKind, number: u32) -> Result<IndexedFile, DeliverError> {
        let written = self.file.complete().await?;
        Ok(IndexedFile {
            name: kind.name(number),
            kind,
            bytes: written.bytes,
            records: self.records,
            md5: written.md5,
        })
    }
}

impl<U: BlobUpload> Segment<U> {
    fn full(&self, limits: &DeliveryLimits) -> bool {
        self.pages.as_ref().is_some_and(|pages| pages.full(limits))
            || self.manifest.compressed() >= limits.manifest_segment_bytes
    }

    async fn abort(self) {
        self.manifest.abort().await;
        if let Some(pages) = self.pages {
            pages.file.abort().await;
        }
    }

    /// Completes its files; their index entries.
    async fn complete(self) -> Result<Vec<IndexedFile>, DeliverError> {
        let manifest = match self.manifest.complete().await {
            Ok(written) => written,
            Err(e) => {
                if let Some(pages) = self.pages {
                    pages.file.abort().await;
                }
                return Err(e);
            }
        };
        let mut files = vec![IndexedFile {
            name: FileKind::Manifest.name(self.number),
            kind: FileKind::Manifest,
            bytes: manifest.bytes,
            records: self.lines,
            md5: manifest.md5,
        }];
        if let Some(pages) = self.pages {
            files.push(pages.complete(FileKind::Pages, self.number).await?);
        }
        Ok(files)
    }
}

/// A manifest segment a delivery wrote (missing: the delivery is corrupt).
async fn read_manifest<B: BlobStore>(blobs: &B, key: &str) -> Result<Bytes, DeliverError> {
    get_with_retry(blobs, key)
        .await?
        .ok_or_else(|| DeliverError::CorruptDelivery {
            key: key.to_owned(),
            reason: "missing".into(),
        })
}

/// The delta between two deliveries' manifest segments (`previous` and `current`), as a
/// delivery computes it within `limits`, written as delta files under `prefix`: its counts, its
/// files and what it held. For measuring the delta on its own (the bench).
pub async fn compare_manifests<B: BlobStore>(
    blobs: &B,
    previous: &[String],
    current: &[String],
    prefix: &str,
    limits: &DeliveryLimits,
) -> Result<(DeltaSummary, Vec<IndexedFile>, DeltaStats), DeliverError> {
    let mut comparison =
        Comparison::new(blobs, prefix, previous, current, limits.delta_index_entries);
    let mut progress = Progress::start();
    let mut counts = DeltaSummary::default();
    let mut files = Vec::new();
    // Bounded: each step writes a run or a delta file, or ends.
    loop {
        match comparison.step(&mut progress, &mut counts).await? {
            Step::Sorted => {}
            Step::Wrote(file) => files.push(file),
            Step::Done => return Ok((counts, files, comparison.stats)),
        }
    }
}

/// Reads a stored object, trying again (`READ`) when the read fails in a way that may
/// pass: a connection reset or a body cut mid-stream.
pub(crate) async fn get_with_retry<B: BlobStore>(
    blobs: &B,
    key: &str,
) -> Result<Option<Bytes>, BlobError> {
    read_patiently(blobs, key, &READ).await
}

async fn read_patiently<B: BlobStore>(
    blobs: &B,
    key: &str,
    policy: &Backoff,
) -> Result<Option<Bytes>, BlobError> {
    patiently("read a stored object", policy, || blobs.get(key)).await
}

/// One call of the delivery, tried again for a few seconds (`policy`) when it fails in a way
/// that may pass: a delivery makes a call or more per task, so a transient error must not
/// end the whole call (and its retry start the segment again).
pub(crate) async fn patiently<T, E, F, Fut>(what: &str, policy: &Backoff, step: F) -> Result<T, E>
where
    E: crate::backoff::Transient,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    // Each retry is logged by `persist`; the delivery keeps no count of them.
    let retries = AtomicU64::new(0);
    persist(&SystemClock, what, policy, &retries, step).await
}

impl<P: Ports> Deliverer<P> {
    pub fn new(app: Arc<App<P>>, uri_base: impl Into<String>, limits: DeliveryLimits) -> Self {
        Self {
            app,
            uri_base: uri_base.into(),
            limits,
            sole_writer: false,
        }
    }

    /// A deliverer whose caller is the only writer of the store and runs no crawl meanwhile
    /// (the CLI on its locked data directory, once its crawl run has ended). No finish can then
    /// be on its way, so the orphan clean-up spares no young object (`orphans`, rule 2): a
    /// body that a killed run wrote and never recorded is removed by the next delivery, however
    /// soon it follows the kill.
    pub fn sole_writer(mut self) -> Self {
        self.sole_writer = true;
        self
    }

    /// Delivers `generation` of the crawl (its current one when None) to the end, or returns the
    /// delivery that already exists for it. Ends by adding the delivery's calls to the crawl.
    pub async fn deliver(
        &self,
        crawl_id: &CrawlId,
        generation: Option<u64>,
        now: Millis,
    ) -> Result<DeliveryReport, DeliverError> {
        // Without a deadline a call never pauses; the loop only satisfies the type.
        loop {
            if let Delivery::Done(report) =
                self.deliver_until(crawl_id, generation, now, None).await?
            {
                return Ok(*report);
            }
        }
    }

    /// Like `deliver`, but stops cleanly once `deadline` has passed on the App's clock
    /// (`Clock::instant`; after a minimum of work), leaving a checkpoint the next call continues
    /// from.
    pub async fn deliver_until(
        &self,
        crawl_id: &CrawlId,
        generation: Option<u64>,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<Delivery, DeliverError> {
        // On the heap: a delivery's frame is large (~320 KB in a debug build), and the
        // deliverer's handler and the CLI's runner nest it.
        let delivered =
            Box::pin(self.deliver_unreported(crawl_id, generation, now, deadline)).await;
        crate::calls::report(&self.store, &self.calls, crawl_id).await;
        delivered
    }

    async fn deliver_unreported(
        &self,
        crawl_id: &CrawlId,
        generation: Option<u64>,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<Delivery, DeliverError> {
        let crawl = self
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
        // One writer at a time, from before it reads what is delivered: a second call of the
        // same delivery would write the same segments and checkpoint over the first one's, or
        // write again a delivery the first one finished meanwhile.
        let holder = format!("{:016x}", fastrand::u64(..));
        let lease_ms = deadline.map_or(DELIVERY_LEASE, |at| {
            at.saturating_duration_since(self.clock.instant()) + DELIVERY_LEASE_MARGIN
        });
        let until = now.saturating_add(i64::try_from(lease_ms.as_millis()).unwrap_or(i64::MAX));
        if !self
            .store
            .claim_delivery(crawl_id, &holder, until, now)
            .await?
        {
            return Err(DeliverError::Busy {
                crawl_id: crawl_id.clone(),
                generation,
            });
        }
        let crawl_purges = crawl.config.delivery.purge_after;
        let written = self.write_delivery(crawl, generation, now, deadline).await;
        if let Ok(Delivery::Done(report)) = &written {
            self.set_task_counts(&holder, report).await;
        }
        self.release(crawl_id, &holder).await;
        if let Ok(Delivery::Done(report)) = written {
            return self.purge_after(crawl_purges, report).await;
        }
        written
    }

    /// Gives the delivery lease back, tried again for a few seconds: a lease left behind holds
    /// every later call (a retry of this one included) off the delivery until it expires,
    /// minutes later.
    async fn release(&self, crawl_id: &CrawlId, holder: &str) {
        let retries = AtomicU64::new(0);
        let released = persist(
            self.clock.as_ref(),
            "release the delivery",
            &Backoff::BRIEF,
            &retries,
            || self.store.release_delivery(crawl_id, holder),
        )
        .await;
        if let Err(e) = released {
            // The lease expires by itself.
            tracing::warn!(crawl = %crawl_id, error = %e, "delivery lease not released");
        }
    }

    /// Retention and compaction now (`compact`; `trawl compact`), under the crawl's delivery
    /// lease, so that no delivery reads a segment meanwhile. Nothing to do for a crawl that
    /// keeps every delivery.
    pub async fn upkeep(&self, crawl_id: &CrawlId, now: Millis) -> Result<Upkeep, DeliverError> {
        let crawl = self
            .store
            .get_crawl(crawl_id)
            .await?
            .ok_or_else(|| DeliverError::NoSuchCrawl(crawl_id.clone()))?;
        let holder = format!("{:016x}", fastrand::u64(..));
        let until =
            now.saturating_add(i64::try_from(DELIVERY_LEASE.as_millis()).unwrap_or(i64::MAX));
        if !self
            .store
            .claim_delivery(crawl_id, &holder, until, now)
            .await?
        {
            return Err(DeliverError::Busy {
                crawl_id: crawl_id.clone(),
                generation: crawl.generation,
            });
        }
        let run = run_prefix(&self.layout, &crawl);
        let done = self.upkeep_of(&crawl, &run, now, None).await;
        self.release(crawl_id, &holder).await;
        crate::calls::report(&self.store, &self.calls, crawl_id).await;
        done
    }

    /// The upkeep after a delivery of `crawl`: a failure is logged and reported, and left for
    /// the next delivery (the delivery stands).
    async fn upkeep_after(
        &self,
        crawl: &Crawl,
        run: &str,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Option<Upkeep> {
        crawl.config.delivery.keep_generations?;
        Some(match self.upkeep_of(crawl, run, now, deadline).await {
            Ok(upkeep) => upkeep,
            Err(e) => {
                tracing::warn!(crawl = %crawl.id, error = %e, "upkeep after the delivery failed");
                Upkeep {
                    error: Some(e.to_string()),
                    ..Upkeep::default()
                }
            }
        })
    }

    /// Retention, then compaction on segments (`compact`), by the holder of the delivery lease.
    async fn upkeep_of(
        &self,
        crawl: &Crawl,
        run: &str,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<Upkeep, DeliverError> {
        let Some(keep) = crawl.config.delivery.keep_generations else {
            return Ok(Upkeep::default());
        };
        let mut deliveries =
            compact::Deliveries::list(&self.blobs, &self.layout, &crawl.id).await?;
        let retention = compact::expire(&self.blobs, &mut deliveries, run, keep).await?;
        let storage = &crawl.config.storage;
        let compaction =
            if storage.layout == StorageLayout::Segments && storage.compact_below_percent > 0 {
                let limits = compact::Limits {
                    below_percent: storage.compact_below_percent,
                    max_bytes: self.limits.compact_bytes,
                    min_age_ms: (!self.sole_writer).then_some(crawl.config.lease_ms),
                    now,
                    deadline,
                    clock: self.clock.as_ref(),
                };
                let pass = compact::compact(
                    &self.store,
                    &self.blobs,
                    &self.layout,
                    crawl,
                    &deliveries,
                    run,
                    &limits,
                );
                Some(Box::pin(pass).await?)
            } else {
                None
            };
        Ok(Upkeep {
            retention,
            compaction,
            error: None,
        })
    }

    /// The delivery `report`, once the crawl is purged when it asks for it
    /// (`delivery.purge_after`): after the lease is released, since the purge removes the
    /// crawl's record last.
    async fn purge_after(
        &self,
        purges: bool,
        mut report: Box<DeliveryReport>,
    ) -> Result<Delivery, DeliverError> {
        if purges {
            let layout = &self.layout;
            let purged = purge(&self.store, &self.blobs, layout, &report.crawl_id, false).await?;
            report.purged = Some(purged);
        }
        Ok(Delivery::Done(report))
    }

    /// Sets the crawl's task counts to those the delivery read, task by task: counts a store
    /// keeps apart from the tasks (the DynamoDB adapter's) heal from any drift. Only while the
    /// crawl is still completed at the delivered generation and the lease held; a failure is
    /// logged (the next delivery sets them).
    async fn set_task_counts(&self, holder: &str, report: &DeliveryReport) {
        if report.already_delivered {
            return;
        }
        let counts: BTreeMap<Status, u64> = report
            .summary
            .statuses
            .iter()
            .filter_map(|(name, &n)| Some((Status::from_name(name)?, n)))
            .collect();
        let update = transition::set_task_counts(holder, report.generation, counts);
        if let Err(e) = self.store.apply_crawl(&report.crawl_id, &update).await {
            tracing::warn!(crawl = %report.crawl_id, error = %e, "task counts not set");
        }
    }

    /// The delivery's writing, by the one holder of its lease.
    async fn write_delivery(
        &self,
        mut crawl: Crawl,
        generation: u64,
        now: Millis,
        deadline: Option<Instant>,
    ) -> Result<Delivery, DeliverError> {
        let crawl_id = &crawl.id.clone();
        let run = run_prefix(&self.layout, &crawl);
        let id = delivery_id(generation);
        let prefix = format!("{run}{id}/");
        let delivered = self.completed_deliveries(&run).await?;
        if delivered.contains_key(&generation) {
            let summary = self
                .read_json::<Summary>(&format!("{prefix}{SUMMARY_FILE}"))
                .await?;
            let report = self.report(&crawl, generation, &prefix, true, summary);
            return Ok(Delivery::Done(Box::new(report)));
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
        let checkpoint_key = format!("{prefix}{CHECKPOINT_FILE}");
        let mut state = match self.read_optional::<Checkpoint>(&checkpoint_key).await? {
            Some(state) if state.generation == generation => state,
            _ => {
                let previous = match delivered.range(..generation).next_back() {
                    Some((_, previous_id)) => Some(
                        self.previous(&format!("{run}{previous_id}/"), previous_id)
                            .await?,
                    ),
                    None => None,
                };
                let tasks = self.store.counts(crawl_id).await?.values().sum();
                let writers = self.limits.writers_for(tasks) as usize;
                let writers = vec![Position::default(); writers];
                Checkpoint {
                    generation,
                    previous,
                    phase: Phase::Writing { writers },
                    files: Vec::new(),
                    tally: Tally::default(),
                    began: Some(now),
                }
            }
        };
        if let Phase::Tasks(at) = &state.phase {
            let segments = state.segments(FileKind::Manifest);
            let writers = vec![Position {
                segments,
                ..at.clone()
            }];
            state.phase = Phase::Writing { writers };
        }
        let mut budget = Budget { deadline, work: 0 };
        if !self
            .write_tasks(&crawl, &id, &prefix, &mut state, &mut budget, now)
            .await?
            || !self.write_delta(&prefix, &mut state, &mut budget).await?
            || !self
                .copy_changed(&crawl, &id, &prefix, &mut state, &mut budget, now)
                .await?
            || !self
                .clean_up(&crawl, &prefix, &mut state, &mut budget, now)
                .await?
        {
            tracing::info!(crawl = %crawl_id, delivery = %id, tasks = state.tally.tasks,
                files = state.files.len(), "delivery paused at its deadline");
            return Ok(Delivery::Paused(state.progress(crawl_id)));
        }
        if !crawl.config.extract.is_empty() {
            self.write_items(&crawl, &run, &prefix, &mut state).await?;
        }

        let index = DeliveryIndex {
            crawl_id: crawl_id.to_string(),
            generation,
            delivery_id: id.clone(),
            files: state.files,
        };
        self.write_plain(
            &format!("{prefix}{INDEX_FILE}"),
            "application/json",
            &to_json(&index)?,
        )
        .await?;
        // The crawl's calls so far, this delivery's included (on a failed report or read: as
        // read above).
        if crate::calls::report(&self.store, &self.calls, crawl_id).await {
            match self.store.get_crawl(crawl_id).await {
                Ok(Some(read)) => crawl.calls = read.calls,
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "call totals not read for the summary"),
            }
        }
        let files = index
            .files
            .iter()
            .map(|f| (f.name.clone(), f.bytes))
            .collect();
        let began = state.began;
        let mut summary = self.summary(&crawl, generation, &id, state.tally, files, now);
        summary.tasks_read_from_ms = began;
        self.write_plain(
            &format!("{prefix}{SUMMARY_FILE}"),
            "application/json",
            &to_json(&summary)?,
        )
        .await?;
        if let Some(format) = crawl.config.auto_checkpoint {
            // Before `_SUCCESS`: a call that fails here is tried again, and sets it again.
            let since = checkpoint_of(format, crawl.generation_start());
            self.store.set_checkpoint(crawl_id, Some(&since)).await?;
        }
        self.write_plain(&format!("{prefix}{SUCCESS_FILE}"), "text/plain", b"")
            .await?;
        if let Err(e) = self.blobs.delete(&checkpoint_key).await {
            // Harmless: a delivery with `_SUCCESS` is never resumed.
            tracing::warn!(key = %checkpoint_key, error = %e, "checkpoint left behind");
        }
        tracing::info!(
            crawl = %crawl_id,
            delivery = %id,
            tasks = summary.tasks,
            pages = summary.warc.pages,
            problems = summary.warc.problems,
            files = index.files.len(),
            "delivery written"
        );
        let mut report = self.report(&crawl, generation, &prefix, false, summary);
        report.upkeep = self.upkeep_after(&crawl, &run, now, deadline).await;
        Ok(Delivery::Done(Box::new(report)))
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
            location: object_uri(&self.uri_base, prefix),
            prefix: prefix.to_owned(),
            already_delivered,
            summary,
            purged: None,
            upkeep: None,
        }
    }

    /// Generations of this run with a complete delivery (a `_SUCCESS` marker), and their ids.
    async fn completed_deliveries(&self, run: &str) -> Result<BTreeMap<u64, String>, DeliverError> {
        let keys = patiently("list the deliveries", &READ, || self.blobs.list(run)).await?;
        Ok(keys
            .iter()
            .filter_map(|key| {
                let id = key
                    .strip_prefix(run)?
                    .strip_suffix(&format!("/{SUCCESS_FILE}"))?;
                Some((generation_of(id)?, id.to_owned()))
            })
            .collect())
    }

    /// A JSON file of a delivery, or None when it does not exist.
    async fn read_optional<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, DeliverError> {
        match get_with_retry(&self.blobs, key).await? {
            Some(body) => {
                serde_json::from_slice(&body)
                    .map(Some)
                    .map_err(|e| DeliverError::CorruptDelivery {
                        key: key.to_owned(),
                        reason: e.to_string(),
                    })
            }
            None => Ok(None),
        }
    }

    /// A JSON file a complete delivery must have.
    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<T, DeliverError> {
        self.read_optional(key)
            .await?
            .ok_or_else(|| DeliverError::CorruptDelivery {
                key: key.to_owned(),
                reason: "missing beside _SUCCESS".into(),
            })
    }

    /// The previous delivery's manifest segments (its one manifest, if written before segments).
    async fn previous(&self, prefix: &str, delivery_id: &str) -> Result<Previous, DeliverError> {
        let index: Option<DeliveryIndex> =
            self.read_optional(&format!("{prefix}{INDEX_FILE}")).await?;
        let manifests = match index {
            Some(index) => index
                .of_kind(FileKind::Manifest)
                .map(|f| format!("{prefix}{}", f.name))
                .collect(),
            None => vec![format!("{prefix}{LEGACY_MANIFEST_FILE}")],
        };
        Ok(Previous {
            delivery_id: delivery_id.to_owned(),
            manifests,
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

    async fn save(&self, prefix: &str, state: &Checkpoint) -> Result<(), DeliverError> {
        self.write_plain(
            &format!("{prefix}{CHECKPOINT_FILE}"),
            "application/json",
            &to_json(state)?,
        )
        .await
    }

    /// The task pass: its writers at once, each segment after segment through its part of the
    /// tasks, until every task is written (true) or the budget is spent (false). Each writer
    /// checkpoints after each of its segments (the checkpoint holds every writer's position at
    /// its last segment written). A writer that fails stops the others at their next task
    /// (they close and checkpoint their segments) and the call fails.
    async fn write_tasks(
        &self,
        crawl: &Crawl,
        delivery_id: &str,
        prefix: &str,
        state: &mut Checkpoint,
        budget: &mut Budget,
        now: Millis,
    ) -> Result<bool, DeliverError> {
        let Phase::Writing { writers } = &state.phase else {
            return Ok(true);
        };
        let positions = writers.clone();
        let of = u32::try_from(positions.len()).unwrap_or(u32::MAX).max(1);
        let pass = TaskPass {
            crawl,
            delivery_id,
            prefix,
            now,
            paging: paging_patterns(crawl),
            state: tokio::sync::Mutex::new(state),
            halt: AtomicBool::new(false),
        };
        let runs = positions.into_iter().zip(Part::all(of)).map(|(at, part)| {
            let budget = Budget {
                deadline: budget.deadline,
                work: 0,
            };
            self.writer(&pass, part, at, budget)
        });
        let ends = join_all(runs).await;
        let mut finished = true;
        for end in ends {
            let (done, work) = end?;
            finished &= done;
            budget.work += work;
        }
        Ok(finished)
    }

    /// One writer of the task pass (`write_tasks`): segment after segment of its `part` from
    /// `at`; whether it is done, and the work it did.
    async fn writer(
        &self,
        pass: &TaskPass<'_>,
        part: Part,
        mut at: Position,
        mut budget: Budget,
    ) -> Result<(bool, u64), DeliverError> {
        // Bounded: each round writes a segment and moves `at` on, or ends.
        while !at.done() {
            let number = part.index + part.of * at.segments;
            let keys = [FileKind::Manifest, FileKind::Pages]
                .map(|k| format!("{}{}", pass.prefix, k.name(number)));
            let written = self
                .write_segment(pass, part, number, &keys, &mut at, &mut budget)
                .await;
            let (stop, files, tally) = match written {
                Ok(written) => written,
                Err(e) => {
                    pass.halt.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            };
            if files.is_some() {
                at.segments += 1;
            }
            if let Err(e) = self.checkpoint_segment(pass, part, &at, files, tally).await {
                pass.halt.store(true, Ordering::Relaxed);
                return Err(e);
            }
            match stop {
                Stop::Full => continue,
                Stop::Paused => return Ok((false, budget.work)),
                Stop::Exhausted => break,
            }
        }
        Ok((true, budget.work))
    }

    /// Writes segment `number` of `part` from `at` on: why it stopped, its files (None: an
    /// empty last segment, not kept, unless it is segment 0) and what it counted.
    async fn write_segment(
        &self,
        pass: &TaskPass<'_>,
        part: Part,
        number: u32,
        keys: &[String; 2],
        at: &mut Position,
        budget: &mut Budget,
    ) -> Result<(Stop, Option<Vec<IndexedFile>>, Tally), DeliverError> {
        let crawl = pass.crawl;
        let mut segment = self
            .open_segment(crawl, pass.delivery_id, number, keys, pass.now)
            .await?;
        let mut tally = Tally::default();
        let filled = self
            .fill(pass, part, &mut segment, at, &mut tally, budget)
            .await;
        let stop = match filled {
            Ok(stop) => stop,
            Err(e) => {
                segment.abort().await;
                return Err(e);
            }
        };
        if matches!(stop, Stop::Exhausted) && segment.lines == 0 && number > 0 {
            // The writer's last segment closed exactly at its last task (or its part is
            // empty): no empty one after it.
            segment.abort().await;
            return Ok((stop, None, tally));
        }
        Ok((stop, Some(segment.complete().await?), tally))
    }

    /// Adds a writer's segment to the delivery (its files, its counts, the writer's position)
    /// and saves the checkpoint; when it was the last writer to finish, moves on to the delta.
    async fn checkpoint_segment(
        &self,
        pass: &TaskPass<'_>,
        part: Part,
        at: &Position,
        files: Option<Vec<IndexedFile>>,
        tally: Tally,
    ) -> Result<(), DeliverError> {
        // Held while saving: checkpoints are written in the order their states were made.
        let mut state = pass.state.lock().await;
        let state = &mut **state;
        state.files.extend(files.into_iter().flatten());
        state.tally.absorb(tally);
        let Phase::Writing { writers } = &mut state.phase else {
            return Ok(());
        };
        if let Some(slot) = writers.get_mut(part.index as usize) {
            *slot = at.clone();
        }
        if writers.iter().all(Position::done) {
            // Segments in number order, whatever order the writers finished them in.
            state.files.sort_by_key(|f| match f.kind {
                FileKind::Manifest | FileKind::Pages => segment_number(&f.name),
                _ => u32::MAX,
            });
            state.phase = Phase::Compare(Progress::start());
        }
        self.save(pass.prefix, state).await
    }

    /// Opens segment `number` (`keys`: its manifest and WARC keys, which outlive the uploads
    /// that borrow them), with its WARC segment when the crawl's pages are copied.
    async fn open_segment<'k>(
        &'k self,
        crawl: &Crawl,
        delivery_id: &str,
        number: u32,
        keys: &'k [String; 2],
        now: Millis,
    ) -> Result<Segment<impl BlobUpload + 'k>, DeliverError> {
        let manifest = GzipFile::new(self.blobs.upload(&keys[0], GZIP).await?);
        let mut segment = Segment {
            number,
            manifest,
            pages: None,
            lines: 0,
        };
        if crawl.config.delivered_pages() != DeliveredPages::Copy {
            return Ok(segment);
        }
        let name = FileKind::Pages.name(number);
        let opened = match self.blobs.upload(&keys[1], GZIP).await {
            Ok(upload) => {
                self.open_pages(crawl, delivery_id, &name, upload, now)
                    .await
            }
            Err(e) => Err(e.into()),
        };
        match opened {
            Ok(pages) => segment.pages = Some(pages),
            Err(e) => {
                segment.abort().await;
                return Err(e);
            }
        }
        Ok(segment)
    }

    /// Starts the WARC file `name` on `upload` with its `warcinfo` record.
    async fn open_pages<U: BlobUpload>(
        &self,
        crawl: &Crawl,
        delivery_id: &str,
        name: &str,
        upload: U,
        now: Millis,
    ) -> Result<PagesFile<U>, DeliverError> {
        let mut pages = PagesFile {
            file: GzipFile::with_level(upload, warc::LEVEL),
            records: 0,
            warcinfo_id: warc::record_id(),
        };
        let robots = if crawl.config.politeness.respect_robots {
            "obey"
        } else {
            "ignore"
        };
        let version = format!("trawl/{}", env!("CARGO_PKG_VERSION"));
        let description = format!("crawl {} delivery {delivery_id}", crawl.id);
        let info = warc::warcinfo(
            &pages.warcinfo_id,
            now,
            name,
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
        );
        let written = async {
            pages.file.write(&info).await?;
            pages.file.end_member().await
        }
        .await;
        if let Err(e) = written {
            pages.file.abort().await;
            return Err(e);
        }
        pages.records = 1;
        Ok(pages)
    }

    /// Writes tasks of `part` from `at` on into `segment` until it is full, the budget is spent,
    /// the pass halts or no task is left; `at` moves past every task written.
    async fn fill<U: BlobUpload>(
        &self,
        pass: &TaskPass<'_>,
        part: Part,
        segment: &mut Segment<U>,
        at: &mut Position,
        tally: &mut Tally,
        budget: &mut Budget,
    ) -> Result<Stop, DeliverError> {
        let crawl = pass.crawl;
        // Bounded: each round either ends or moves `at` to the next page (or status).
        loop {
            let Some(&status) = Status::ALL.get(at.status) else {
                return Ok(Stop::Exhausted);
            };
            let query = TaskQuery {
                crawl_id: crawl.id.clone(),
                status,
                updated_before: None,
                limit: QUERY_PAGE,
                cursor: at.cursor.clone(),
                part,
            };
            let page = patiently("read the tasks", &READ, || self.store.query(&query)).await?;
            let rest = page.tasks.get(at.skip..).unwrap_or_default();
            for chunk in rest.chunks(PARALLEL_LOADS) {
                let copy = segment.pages.is_some();
                let loads = chunk
                    .iter()
                    .map(|t| self.load(&t.crawl_id, &t.task_id, copy));
                let loaded = try_join_all(loads).await?;
                for item in loaded {
                    if let Some(item) = item {
                        self.write_task(segment, tally, crawl, &pass.paging, item)
                            .await?;
                    }
                    at.skip += 1;
                    budget.work += 1;
                    if segment.full(&self.limits) {
                        return Ok(Stop::Full);
                    }
                    if budget.spent(self.clock.instant()) || pass.halt.load(Ordering::Relaxed) {
                        return Ok(Stop::Paused);
                    }
                }
            }
            at.skip = 0;
            at.cursor = page.cursor;
            if at.cursor.is_none() {
                at.status += 1;
            }
        }
    }

    /// The full task and, when it is a page to archive, its body (read only when pages are
    /// copied). None if the task vanished.
    async fn load(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        copy: bool,
    ) -> Result<Option<Loaded>, DeliverError> {
        let read = || self.store.get(crawl_id, task_id);
        let Some(task) = patiently("read a task", &READ, read).await? else {
            return Ok(None);
        };
        let key = task
            .fetch
            .as_ref()
            .filter(|_| delta::is_present(task.status, true))
            .and_then(|f| f.object_key.as_deref());
        let span = task.fetch.as_ref().and_then(|f| f.span);
        let body = match (key, span) {
            (Some(_), _) if !copy => Some(BodyLookup::Referenced),
            (Some(key), Some(span)) => {
                let read = || self.blobs.get_range(key, span.offset, span.length);
                Some(
                    match patiently("read a page's records", &READ, read).await? {
                        Some(records) => BodyLookup::Records(records),
                        None => BodyLookup::Missing,
                    },
                )
            }
            (Some(key), None) => Some(match get_with_retry(&self.blobs, key).await? {
                Some(bytes) => BodyLookup::Found(bytes),
                None => BodyLookup::Missing,
            }),
            (None, _) => None,
        };
        Ok(Some(Loaded { task, body }))
    }

    async fn write_task<U: BlobUpload>(
        &self,
        segment: &mut Segment<U>,
        tally: &mut Tally,
        crawl: &Crawl,
        paging: &[PagePattern],
        Loaded { task, body }: Loaded,
    ) -> Result<(), DeliverError> {
        let fetch = task.fetch.as_ref();
        let last_error = task.errors.last();
        tally.tasks += 1;
        if !paging.is_empty() {
            let error = last_error.map(|e| error_kind_name(e.kind));
            tally.paging.note(paging, &task, error);
        }
        *tally
            .statuses
            .entry(task.status.name().to_owned())
            .or_default() += 1;
        if matches!(task.status, Status::Failed | Status::Ignored | Status::Gone) {
            let kind = last_error.map_or_else(|| "unknown".to_owned(), |e| error_kind_name(e.kind));
            *tally.errors.entry(kind).or_default() += 1;
        }

        if let Some((key, span)) = fetch.and_then(|f| Some((f.object_key.clone()?, f.span?))) {
            tally.segments.entry(key).or_default().live += span.length;
        }
        if let Some(stop) = fetch.and_then(|f| f.chain_stop.as_ref()) {
            *tally
                .chain_stops
                .entry(stop.reason().to_owned())
                .or_default() += 1;
        }
        let analysis = fetch.and_then(|f| f.analysis.as_ref());
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
                .map(|key| object_uri(&self.uri_base, key)),
            offset: fetch.and_then(|f| f.span).map(|s| s.offset),
            length: fetch.and_then(|f| f.span).map(|s| s.length),
            items_length: fetch
                .and_then(|f| f.span)
                .map(|s| s.items)
                .filter(|&n| n > 0),
            bytes: fetch.map(|f| f.content_length),
            title: analysis.and_then(|a| a.title.clone()),
            description: analysis.and_then(|a| a.description.clone()),
            language: analysis.and_then(|a| a.language.clone()),
            text: analysis.and_then(|a| a.text.clone()),
            text_cut: analysis.is_some_and(|a| a.text_cut),
            text_error: analysis.and_then(|a| a.text_error),
            fetched_at: fetch.map(|f| warc::rfc3339(f.fetched_at)),
            first_fetched_at: fetch.and_then(|f| f.first_at).map(warc::rfc3339_millis),
            depth: task.depth,
            retries: task.retries,
            last_error: last_error.map(|e| ManifestError {
                kind: e.kind,
                message: e.message.clone(),
                at: warc::rfc3339(e.at),
                times: times_in_a_row(&task.errors),
            }),
            data: trawl_domain::task::delivered_data(task.data.as_ref()),
        };
        segment.manifest.write(&json_line(&line)?).await?;
        segment.lines += 1;

        if let (Some(fetch), Some(body)) = (fetch, body) {
            self.archive(segment.pages.as_mut(), tally, crawl, &task, fetch, body)
                .await?;
        }
        Ok(())
    }

    /// Writes the page's request and response records, or records why it cannot.
    async fn archive<U: BlobUpload>(
        &self,
        pages: Option<&mut PagesFile<U>>,
        tally: &mut Tally,
        crawl: &Crawl,
        task: &Task,
        fetch: &FetchRecord,
        body: BodyLookup,
    ) -> Result<(), DeliverError> {
        let key = fetch.object_key.as_deref().unwrap_or_default();
        // By reference: the manifest line names where the page is stored; nothing is read.
        let referenced = |tally: &mut Tally| {
            tally.warc.referenced += 1;
            tally.page_bytes += fetch.content_length;
        };
        let Some(pages) = pages else {
            referenced(tally);
            return Ok(());
        };
        let warc = &mut pages.file;
        let bytes = match body {
            BodyLookup::Referenced => {
                referenced(tally);
                return Ok(());
            }
            BodyLookup::Found(bytes) => bytes,
            BodyLookup::Records(records) => {
                // Read by reference: the stored members are the WARC's, byte for byte (their
                // gzip checksums go with them), so the body is neither inflated nor hashed.
                let request = warc::Request {
                    target_uri: fetch.final_url.as_deref().unwrap_or(&task.url),
                    fetched_at: fetch.fetched_at,
                    user_agent: &crawl.config.user_agent,
                    sent: fetch.sent.as_ref(),
                    warcinfo_id: &pages.warcinfo_id,
                    id: &warc::record_id(),
                    response_id: None,
                };
                warc.write(&request.record()).await?;
                warc.end_member().await?;
                let count = fetch.span.map_or(1, |s| s.records());
                warc.copy_members(&records, count).await?;
                pages.records += count + 1;
                tally.warc.pages += 1;
                tally.page_bytes += fetch.content_length;
                return Ok(());
            }
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
            user_agent: &crawl.config.user_agent,
            sent: fetch.sent.as_ref(),
            warcinfo_id: &pages.warcinfo_id,
            request_id: &request_id,
            response_id: &response_id,
        };
        warc.write(&exchange.request_record()).await?;
        warc.end_member().await?;
        warc.write(&exchange.response_head(&bytes)).await?;
        warc.write(&bytes).await?;
        warc.write(warc::RECORD_END).await?;
        warc.end_member().await?;
        pages.records += 2;
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
                key: object_uri(&self.uri_base, key),
                problem,
            });
        }
    }

    /// The delta pass (`compare`): step after step (a sorted run, a delta file) until the delta
    /// is written (true) or the budget is spent (false). Checkpoints after each step.
    async fn write_delta(
        &self,
        prefix: &str,
        state: &mut Checkpoint,
        budget: &mut Budget,
    ) -> Result<bool, DeliverError> {
        if let Phase::PartitionedDelta { .. } = state.phase {
            // Its delta files are written again (under the same names), its counts counted again.
            state.files.retain(|f| f.kind != FileKind::Delta);
            state.tally.delta = DeltaSummary::default();
            state.phase = Phase::Compare(Progress::start());
        }
        let Phase::Compare(progress) = &state.phase else {
            // Past the delta (the task pass ran first).
            return Ok(true);
        };
        let mut progress = progress.clone();
        state.tally.delta.previous = state.previous.as_ref().map(|p| p.delivery_id.clone());
        let current = state.manifest_keys(prefix);
        let previous = state
            .previous
            .as_ref()
            .map(|p| p.manifests.clone())
            .unwrap_or_default();
        let mut comparison = Comparison::new(
            &self.blobs,
            prefix,
            &previous,
            &current,
            self.limits.delta_index_entries,
        );
        // Bounded: each step writes a run or a delta file, or ends.
        loop {
            if budget.spent(self.clock.instant()) {
                return Ok(false);
            }
            match comparison
                .step(&mut progress, &mut state.tally.delta)
                .await?
            {
                Step::Sorted => {}
                Step::Wrote(file) => state.files.push(file),
                Step::Done => break,
            }
            state.phase = Phase::Compare(progress.clone());
            self.save(prefix, state).await?;
            budget.work += MIN_WORK_PER_CALL;
        }
        state.phase = Phase::Changed(changed::CopyPosition::default());
        Ok(true)
    }

    /// The orphan clean-up (`orphans`): page after page of the crawl's objects until the
    /// listing ends (true) or the budget is spent (false). Checkpoints after each page.
    async fn clean_up(
        &self,
        crawl: &Crawl,
        prefix: &str,
        state: &mut Checkpoint,
        budget: &mut Budget,
        now: Millis,
    ) -> Result<bool, DeliverError> {
        // Bounded: each round moves `start_after` on through the listing, or ends.
        loop {
            let Phase::CleanUp { start_after } = &state.phase else {
                return Ok(true);
            };
            if budget.spent(self.clock.instant()) {
                return Ok(false);
            }
            // The store's sole writer has no finish on its way: no object is too young.
            let min_age_ms = (!self.sole_writer).then_some(crawl.config.lease_ms);
            let cleaned = orphans::clean_page(
                &self.store,
                &self.blobs,
                &self.layout,
                &crawl.id,
                min_age_ms,
                start_after.as_deref(),
                now,
            )
            .await?;
            state.tally.orphans_removed += cleaned.removed;
            for (key, bytes) in cleaned.segments {
                state.tally.segments.entry(key).or_default().bytes = bytes;
            }
            let Some(next) = cleaned.next else {
                return Ok(true);
            };
            state.phase = Phase::CleanUp {
                start_after: Some(next),
            };
            self.save(prefix, state).await?;
            budget.work += u64::from(orphans::PAGE);
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
            tasks_read_from_ms: None,
            duration_seconds,
            pages_per_second,
            warc: tally.warc,
            delta: tally.delta,
            soft_404_reference_misses: crawl.reference_misses,
            calls: summary::call_counts(&crawl.calls),
            estimated_cost: CostEstimate::from_calls(&crawl.calls),
            items: tally.items,
            orphans_removed: tally.orphans_removed,
            segments: SegmentsSummary::of(tally.segments),
            paging: tally.paging.summary(),
            chain_stops: tally.chain_stops,
        }
    }

    /// The items pass (`items`), in one go once the delta is written: `items.jsonl.gz` and
    /// `items-delta.jsonl.gz`, indexed, with their counts in the tally.
    async fn write_items(
        &self,
        crawl: &Crawl,
        run: &str,
        prefix: &str,
        state: &mut Checkpoint,
    ) -> Result<(), DeliverError> {
        let previous = match &state.previous {
            Some(previous) => self.previous_items(run, &previous.delivery_id).await?,
            None => None,
        };
        let (files, mut summary, stats) = deliver_items(
            &self.blobs,
            &self.layout,
            &self.uri_base,
            crawl,
            &state.manifest_keys(prefix),
            previous.as_ref(),
            prefix,
            &self.limits,
        )
        .await?;
        summary.delta.images_deleted = self.retire_images(&crawl.id, &stats.unnamed_images).await?;
        state.files.extend(files);
        state.tally.items = Some(summary);
        Ok(())
    }

    /// Gives up the image tasks at `urls` (named by no item any more) with their stored bytes,
    /// as Django Dynamic Scraper deletes an item's images with it: how many. An image being
    /// fetched when it is read, or claimed between its read and its write, is left as it is; a
    /// page that is an image but not an image task is never touched. Its objects are deleted
    /// here; one whose delete fails is the next delivery's orphan (`orphans`). On the segment
    /// layout its records stay in their segment, no task's.
    async fn retire_images(
        &self,
        crawl_id: &CrawlId,
        urls: &[String],
    ) -> Result<u64, DeliverError> {
        let mut retired = 0;
        for url in urls {
            let Ok(url) = CanonicalUrl::parse(url) else {
                continue;
            };
            let id = url.task_id();
            let Some(task) = self.store.get(crawl_id, &id).await? else {
                continue;
            };
            let retired_before = task.status == Status::Ignored
                && task
                    .errors
                    .last()
                    .is_some_and(|e| e.kind == ErrorKind::Removed);
            if !is_image_task(task.data.as_ref()) || retired_before {
                continue;
            }
            let reason = "no delivered item names this image";
            let update = task_transition::retire(&task, reason, self.clock.now_ms());
            let Applied::Done { before } = self.store.apply(crawl_id, &id, &update).await? else {
                continue;
            };
            retired += 1;
            // The objects layout's: its body, and any version left on its stale list.
            if before.fetch.as_ref().is_some_and(|f| f.span.is_none()) {
                let prefix = self.layout.task_prefix(crawl_id, &id);
                let deleted = async {
                    for key in self.blobs.list(&prefix).await? {
                        self.blobs.delete(&key).await?;
                    }
                    Ok::<_, BlobError>(())
                };
                if let Err(e) = deleted.await {
                    tracing::warn!(%prefix, error = %e, "a removed image's objects left to the orphan pass");
                }
            }
        }
        Ok(retired)
    }

    /// The items file of the run's delivery `delivery_id`, as its index lists it (None: it
    /// has none).
    async fn previous_items(
        &self,
        run: &str,
        delivery_id: &str,
    ) -> Result<Option<PreviousItems>, DeliverError> {
        let prefix = format!("{run}{delivery_id}/");
        let index: Option<DeliveryIndex> =
            self.read_optional(&format!("{prefix}{INDEX_FILE}")).await?;
        Ok(index.and_then(|index| {
            let file = index.of_kind(FileKind::Items).next()?;
            Some(PreviousItems {
                delivery_id: delivery_id.to_owned(),
                key: format!("{prefix}{}", file.name),
                bytes: file.bytes,
            })
        }))
    }
}

/// The items pass of a delivery (`items`) over its manifest segments (`manifests`), against the
/// previous delivery's items, its files written under `prefix` within `limits`: its files, its
/// counts and what it held. The deliverer's, and the bench's.
#[allow(clippy::too_many_arguments)]
pub async fn deliver_items<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    uri_base: &str,
    crawl: &Crawl,
    manifests: &[String],
    previous: Option<&PreviousItems>,
    prefix: &str,
    limits: &DeliveryLimits,
) -> Result<(Vec<IndexedFile>, ItemsSummary, ItemsStats), DeliverError> {
    let mut pass = items::ItemsPass::new(
        blobs,
        layout,
        uri_base,
        &crawl.id,
        &crawl.config,
        prefix,
        limits.items_entries,
    )?;
    for key in manifests {
        pass.add(key, &read_manifest(blobs, key).await?).await?;
    }
    pass.finish(previous, crawl.config.items.csv).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_of_the_partitioned_delta_still_reads_and_the_sorted_one_round_trips() {
        // A delivery paused in the delta by the code before the sort/merge.
        let legacy: Phase =
            serde_json::from_str(r#"{"phase":"delta","partition":1,"partitions":2}"#).unwrap();
        assert!(matches!(
            legacy,
            Phase::PartitionedDelta {
                partition: 1,
                partitions: 2
            }
        ));
        let phase = Phase::Compare(Progress::start());
        let read: Phase = serde_json::from_str(&serde_json::to_string(&phase).unwrap()).unwrap();
        assert!(matches!(read, Phase::Compare(p) if p == Progress::start()));
    }

    #[test]
    fn a_checkpoint_is_the_time_in_its_format() {
        let at = 1_795_780_800_123;
        assert_eq!(
            checkpoint_of(CheckpointFormat::Rfc3339, at),
            "2026-11-27T12:00:00.123Z"
        );
        assert_eq!(
            checkpoint_of(CheckpointFormat::EpochMs, at),
            "1795780800123"
        );
        assert_eq!(checkpoint_of(CheckpointFormat::EpochS, at), "1795780800");
    }

    #[test]
    fn segment_files_name_their_number() {
        assert_eq!(segment_number(&FileKind::Manifest.name(12)), 12);
        assert_eq!(segment_number(&FileKind::Pages.name(40_001)), 40_001);
        assert_eq!(segment_number("items.jsonl.gz"), u32::MAX);
    }

    #[test]
    fn writers_grow_with_the_tasks_up_to_the_limit() {
        let limits = DeliveryLimits::DEFAULT;
        assert_eq!(limits.writers_for(0), 1);
        assert_eq!(limits.writers_for(19_999), 1);
        assert_eq!(limits.writers_for(40_000), 4);
        assert_eq!(limits.writers_for(10_000_000), limits.writers);
    }

    #[test]
    fn the_writers_counts_add_up_to_one_writers() {
        // GIVEN the counts of two writers' segments
        let segment = |tasks: u64, status: &str, problems: usize, live: u64| {
            let mut tally = Tally {
                tasks,
                page_bytes: tasks * 10,
                ..Tally::default()
            };
            tally.statuses.insert(status.to_owned(), tasks);
            tally.errors.insert("http_404".to_owned(), 1);
            tally.warc.pages = tasks;
            tally.warc.problems = problems as u64;
            tally.warc.problem_samples = (0..problems)
                .map(|i| PageProblem {
                    url: format!("http://example.com/{status}/{i}"),
                    key: String::new(),
                    problem: "missing".to_owned(),
                })
                .collect();
            tally
                .segments
                .insert("seg-1".to_owned(), SegmentUse { bytes: 0, live });
            tally
        };
        let mut total = Tally::default();

        // WHEN the delivery absorbs both
        total.absorb(segment(3, "succeeded", 2, 100));
        total.absorb(segment(4, "succeeded", summary::PROBLEM_SAMPLES, 50));

        // THEN every count is their sum, and the samples stay within their bound
        assert_eq!(
            (total.tasks, total.page_bytes, total.warc.pages),
            (7, 70, 7)
        );
        assert_eq!(total.statuses["succeeded"], 7);
        assert_eq!(total.errors["http_404"], 2);
        assert_eq!(total.warc.problems, 2 + summary::PROBLEM_SAMPLES as u64);
        assert_eq!(total.warc.problem_samples.len(), summary::PROBLEM_SAMPLES);
        assert_eq!(total.segments["seg-1"].live, 150);
    }

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

    use crate::blob::memory::MemoryBlobStore;
    use crate::blob::{BlobResult, Body, ObjectMeta};
    use cut::{CutStore, Cuts};
    use std::sync::atomic::Ordering;

    /// Reads the one page of a store whose first `failures` reads fail; the result and the reads.
    async fn read_with_cut_reads(failures: u32) -> (BlobResult<Option<Bytes>>, u32) {
        // The first `failures` reads of page bodies fail the way a body cut mid-stream does
        // (`GetObject …: unavailable: streaming error`).
        let blobs = CutStore {
            inner: MemoryBlobStore::new(),
            reads: Cuts::new("/attr=html/", 0, failures),
            uploads: Cuts::default(),
        };
        let body = Body::new(&b"<html>whole</html>"[..]);
        let meta = ObjectMeta {
            content_type: "text/html".into(),
            source_url: "http://example.com/".into(),
            compress: false,
        };
        let key = "crawl=c/pk=p/attr=html/md5=m";
        blobs.put(key, body, &meta).await.unwrap();
        let quick = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(2),
            outage: Duration::from_millis(50),
        };
        let result = read_patiently(&blobs, key, &quick).await;
        (result, blobs.reads.seen.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_body_cut_mid_stream_is_read_again() {
        // GIVEN a store whose first read of a page body fails mid-stream
        // WHEN the deliverer reads it (`load` reads every body this way)
        let (result, reads) = read_with_cut_reads(1).await;

        // THEN it was read twice and comes back whole
        assert_eq!(result.unwrap().as_deref(), Some(&b"<html>whole</html>"[..]));
        assert_eq!(reads, 2);
    }

    #[tokio::test]
    async fn a_body_that_never_reads_fails_after_bounded_attempts() {
        // GIVEN a store whose reads of a page body always fail
        // WHEN the deliverer reads it
        let (result, reads) = read_with_cut_reads(u32::MAX).await;

        // THEN it was read again and again, then fails as retryable once the outage bound has
        // passed (50 ms of 1-2 ms pauses), not forever
        let e = result.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert!((3..=100).contains(&reads), "{reads}");
    }
}
