//! After a delivery: retention of deliveries (`delivery.keep_generations`) and compaction of
//! segments (`storage.compact_below_percent`), the rules in `trawl_domain::compaction`.
//!
//! Retention removes the files of the run's deliveries older than the last N, `_SUCCESS` first
//! (a half-removed delivery reads as incomplete, and the next pass removes the rest).
//!
//! Compaction, on a crawl that keeps only its last deliveries:
//! 1. lists the crawl's segments, leaving those this process still appends to and, unless the
//!    caller is the store's only writer, those written less than a lease ago (a finish pointing
//!    into one may be on its way, as in `orphans`);
//! 2. reads every task and sums, per segment, the bytes its fetch records point at;
//! 3. rewrites the segments below the live threshold, the least live first, within a byte
//!    budget and the call's deadline: their live records are read, appended to a new segment
//!    through `BlobStore::append` (durable before any task points there), and each task is
//!    moved with one conditional write (`transition::repoint`: the task re-read still points
//!    at the old place, no lease out). A refused write leaves the copy as garbage, never a task
//!    pointing at nothing;
//! 4. deletes a segment no task points into (step 2) that no delivery kept points into
//!    (`summary.json`'s `segments`), while no delivery of the run is half-written, and only
//!    when step 2 read at least as many tasks as the crawl counts; unless the caller is the
//!    only writer, only one last written more than a lease before the newest kept delivery
//!    began reading its tasks (`compaction::segment_settled`): step 2 reads the tasks status
//!    by status and misses one that changes status meanwhile, but a pointer that old was read
//!    by that delivery, which then names the segment.
//!
//! A segment emptied in step 3 is deleted by a later pass, once the deliveries that pointed
//! into it are gone. Nothing is carried from one pass to the next: a pass stopped anywhere (its
//! budget, a crash) leaves every task pointing at whole records, and the next one goes on
//! from what it finds.

use super::{DeliverError, READ, SUCCESS_FILE, SUMMARY_FILE, generation_of, patiently, summary};
use crate::blob::{BlobStore, Layout, Listed};
use crate::clock::Clock;
use crate::store::{Part, TaskQuery, TaskStore};
use bytes::BytesMut;
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tokio::time::Instant;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::compaction::{self, SegmentUse};
use trawl_domain::crawl::Crawl;
use trawl_domain::task::{Millis, Span, Status};
use trawl_domain::transition;

/// Objects listed, and tasks queried, at once.
const PAGE: u32 = 1_000;
/// Tasks read, and objects deleted, at once.
const PARALLEL: usize = 16;
/// Live bytes appended at once: one append (on S3 one PUT) per batch.
const BATCH_BYTES: u64 = 8 << 20;
/// The span of a segment read at once for a batch: garbage between live records included.
const READ_BYTES: u64 = 32 << 20;

/// What retention removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionReport {
    /// Generations kept: from this one on (the last `keep_generations` delivered).
    pub kept_from: u64,
    /// Deliveries removed (their ids), and their files.
    pub removed: Vec<String>,
    pub files_removed: u64,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionReport {
    /// The crawl's segments when the pass began, their bytes and the bytes tasks point at.
    pub segments: u64,
    pub bytes: u64,
    pub live_bytes: u64,
    /// Segments whose live records were copied (at the deadline, part of them), the pages
    /// moved and the bytes copied.
    pub rewritten: u64,
    pub pages_moved: u64,
    pub bytes_copied: u64,
    /// Pages copied but not moved: their task changed meanwhile (the copy is garbage).
    pub pages_refused: u64,
    /// Segments deleted, and their bytes.
    pub deleted: u64,
    pub bytes_freed: u64,
    /// Segments no task points into, kept because a delivery kept does (or one is half-written),
    /// or because it was written too close to the newest kept delivery's read of its tasks.
    pub held: u64,
    pub held_bytes: u64,
    /// False when the budget or the deadline stopped the pass: the next one goes on.
    pub complete: bool,
}

/// A page a task points at, in a segment.
#[derive(Debug, Clone)]
struct Pointer {
    task: TaskId,
    span: Span,
}

/// What a compaction pass may do.
pub(crate) struct Limits<'a> {
    /// Below this percentage of live bytes a segment is rewritten.
    pub below_percent: u8,
    /// Live bytes copied at most (the first segment is rewritten whatever its size).
    pub max_bytes: u64,
    /// The crawl's lease: segments younger are left alone, and an empty one is deleted only
    /// once written a lease before the newest kept delivery's read (None: the caller is the
    /// only writer, its scan exact).
    pub min_age_ms: Option<u64>,
    pub now: Millis,
    pub deadline: Option<Instant>,
    pub clock: &'a dyn Clock,
}

impl Limits<'_> {
    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| self.clock.instant() >= d)
    }
}

/// The deliveries of a crawl, across its runs: which generations are complete in `run`, and
/// which segments the complete ones point into.
pub(crate) struct Deliveries {
    /// Every key under the crawl's deliveries prefix.
    keys: Vec<String>,
}

impl Deliveries {
    pub(crate) async fn list<B: BlobStore>(
        blobs: &B,
        layout: &Layout,
        crawl_id: &CrawlId,
    ) -> Result<Self, DeliverError> {
        let prefix = layout.deliveries_prefix(crawl_id);
        let keys = patiently("list the deliveries", &READ, || blobs.list(&prefix)).await?;
        Ok(Self { keys })
    }

    /// The generation of a key of `run` (`{run}gen-NNNNNN/file`), and its file name.
    fn of_run<'k>(run: &str, key: &'k str) -> Option<(u64, &'k str)> {
        let (id, file) = key.strip_prefix(run)?.split_once('/')?;
        Some((generation_of(id)?, file))
    }

    /// The run's generations with a complete delivery.
    pub(crate) fn complete(&self, run: &str) -> BTreeSet<u64> {
        self.keys
            .iter()
            .filter_map(|k| Self::of_run(run, k))
            .filter(|(_, file)| *file == SUCCESS_FILE)
            .map(|(generation, _)| generation)
            .collect()
    }

    /// Whether a delivery of the run has files but no `_SUCCESS`: being written, or paused.
    fn half_written(&self, run: &str) -> bool {
        let mut files: BTreeMap<u64, bool> = BTreeMap::new();
        for (generation, file) in self.keys.iter().filter_map(|k| Self::of_run(run, k)) {
            *files.entry(generation).or_default() |= file == SUCCESS_FILE;
        }
        files.values().any(|complete| !complete)
    }

    /// What the complete deliveries (every run's) say of segments: those they point into,
    /// and when the newest of them began reading its tasks; None when one of them does not
    /// say which segments (a summary without its `segments`, though it delivered pages).
    async fn referenced<B: BlobStore>(&self, blobs: &B) -> Result<Option<Held>, DeliverError> {
        let mut held = Held::default();
        for marker in self.keys.iter().filter(|k| k.ends_with(SUCCESS_FILE)) {
            let dir = &marker[..marker.len() - SUCCESS_FILE.len()];
            let key = format!("{dir}{SUMMARY_FILE}");
            let Some(body) = super::get_with_retry(blobs, &key).await? else {
                return Ok(None);
            };
            let summary: SummarySegments =
                serde_json::from_slice(&body).map_err(|e| DeliverError::CorruptDelivery {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
            match summary.segments {
                Some(segments) => held.segments.extend(
                    segments
                        .per_segment
                        .into_iter()
                        .filter(|(_, used)| used.live > 0)
                        .map(|(key, _)| key),
                ),
                None if summary.warc.referenced > 0 => return Ok(None),
                None => {}
            }
            held.read_from = held.read_from.max(summary.tasks_read_from_ms);
        }
        Ok(Some(held))
    }
}

/// What the kept deliveries hold: the segments they name, and when the newest that says
/// began reading its tasks (None: none says).
#[derive(Debug, Default)]
struct Held {
    segments: BTreeSet<String>,
    read_from: Option<Millis>,
}

/// The part of `summary.json` compaction reads.
#[derive(Deserialize)]
struct SummarySegments {
    #[serde(default)]
    segments: Option<summary::SegmentsSummary>,
    warc: summary::WarcSummary,
    #[serde(default)]
    tasks_read_from_ms: Option<Millis>,
}

/// Removes the deliveries of `run` older than the last `keep` complete ones (None when every
/// one is kept).
pub(crate) async fn expire<B: BlobStore>(
    blobs: &B,
    deliveries: &mut Deliveries,
    run: &str,
    keep: u32,
) -> Result<Option<RetentionReport>, DeliverError> {
    let Some(cutoff) = compaction::retention_cutoff(deliveries.complete(run), Some(keep)) else {
        return Ok(None);
    };
    let mut doomed: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for key in &deliveries.keys {
        if let Some((generation, file)) = Deliveries::of_run(run, key)
            && generation < cutoff
        {
            let files = doomed.entry(generation).or_default();
            // `_SUCCESS` first: a delivery half removed is incomplete, not wrong.
            if file == SUCCESS_FILE {
                files.insert(0, key.clone());
            } else {
                files.push(key.clone());
            }
        }
    }
    let mut report = RetentionReport {
        kept_from: cutoff,
        ..RetentionReport::default()
    };
    for (generation, files) in &doomed {
        // `_SUCCESS` (sorted first) goes alone before the rest.
        let (marker, rest) = files.split_at(usize::from(
            files.first().is_some_and(|f| f.ends_with(SUCCESS_FILE)),
        ));
        delete(blobs, marker).await?;
        delete(blobs, rest).await?;
        report.files_removed += files.len() as u64;
        report.removed.push(super::delivery_id(*generation));
    }
    if !doomed.is_empty() {
        tracing::info!(
            run,
            deliveries = report.removed.len(),
            files = report.files_removed,
            "deliveries beyond retention removed"
        );
    }
    let gone: BTreeSet<&String> = doomed.values().flatten().collect();
    deliveries.keys.retain(|k| !gone.contains(k));
    Ok(Some(report))
}

async fn delete<B: BlobStore>(blobs: &B, keys: &[String]) -> Result<(), DeliverError> {
    for chunk in keys.chunks(PARALLEL) {
        let one = |key| patiently("delete", &READ, move || blobs.delete(key));
        try_join_all(chunk.iter().map(|key| one(key))).await?;
    }
    Ok(())
}

/// One compaction pass over `crawl`'s segments (the module's steps), with `deliveries` as
/// they stand after retention.
pub(crate) async fn compact<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    crawl: &Crawl,
    deliveries: &Deliveries,
    run: &str,
    limits: &Limits<'_>,
) -> Result<CompactionReport, DeliverError> {
    let dir = layout.segments_prefix(&crawl.id);
    let listed = list_segments(blobs, &dir).await?;
    let old_enough = |s: &Listed| {
        limits.min_age_ms.is_none_or(|age| {
            s.modified
                .saturating_add(i64::try_from(age).unwrap_or(i64::MAX))
                < limits.now
        })
    };
    let eligible: HashMap<&str, &Listed> = listed
        .iter()
        .filter(|s| old_enough(s) && !blobs.is_appending(&s.key))
        .map(|s| (s.key.as_str(), s))
        .collect();
    let counted: u64 = patiently("count the tasks", &READ, || store.counts(&crawl.id))
        .await?
        .values()
        .sum();
    let mut report = CompactionReport {
        segments: listed.len() as u64,
        bytes: listed.iter().map(|s| s.bytes).sum(),
        ..CompactionReport::default()
    };
    let Some((pointers, live, scanned)) = scan(store, &crawl.id, &eligible, limits).await? else {
        // The deadline came first: nothing is known yet, nothing is done.
        tracing::info!(crawl = %crawl.id, "compaction stopped at its deadline while reading tasks");
        return Ok(report);
    };
    report.live_bytes = live.values().sum();
    let uses: Vec<SegmentUse> = eligible
        .values()
        .map(|s| SegmentUse {
            key: s.key.clone(),
            bytes: s.bytes,
            live: live.get(&s.key).copied().unwrap_or(0),
        })
        .collect();
    let picked = compaction::pick(&uses, limits.below_percent, limits.max_bytes);
    let worth = uses
        .iter()
        .filter(|s| compaction::worth_compacting(s.bytes, s.live, limits.below_percent))
        .count();
    report.complete = picked.len() == worth;
    for segment in picked.iter().filter(|s| s.live > 0) {
        if limits.past_deadline() {
            report.complete = false;
            break;
        }
        let Some(pages) = pointers.get(&segment.key) else {
            continue;
        };
        rewrite(
            store,
            blobs,
            crawl,
            &dir,
            &segment.key,
            pages,
            limits,
            &mut report,
        )
        .await?;
        report.rewritten += 1;
    }
    // Deletable: no task pointed into it when the pass began, no delivery kept points into it,
    // written before the newest kept delivery read its tasks (`compaction::segment_settled`).
    // A scan that read fewer tasks than the crawl counts (a store whose listing missed some)
    // cannot tell an empty segment: none is deleted.
    let complete_scan = scanned >= counted;
    if !complete_scan {
        tracing::warn!(crawl = %crawl.id, scanned, counted,
            "the task scan read fewer tasks than the crawl counts: no segment deleted");
    }
    let referenced = if deliveries.half_written(run) || !complete_scan {
        None
    } else {
        deliveries.referenced(blobs).await?
    };
    let empty: Vec<&SegmentUse> = uses.iter().filter(|s| s.live == 0).collect();
    let mut doomed = Vec::new();
    for segment in empty {
        // A task the scan missed (it changed status meanwhile) may still point into an empty
        // one: only one written well before the newest kept delivery read its tasks goes.
        let settled = |held: &Held| {
            eligible.get(segment.key.as_str()).is_some_and(|s| {
                compaction::segment_settled(s.modified, limits.min_age_ms, held.read_from)
            })
        };
        if referenced
            .as_ref()
            .is_some_and(|r| !r.segments.contains(&segment.key) && settled(r))
        {
            doomed.push(segment.key.clone());
            report.deleted += 1;
            report.bytes_freed += segment.bytes;
        } else {
            report.held += 1;
            report.held_bytes += segment.bytes;
        }
    }
    delete(blobs, &doomed).await?;
    tracing::info!(crawl = %crawl.id, rewritten = report.rewritten, moved = report.pages_moved,
        copied = report.bytes_copied, deleted = report.deleted, freed = report.bytes_freed,
        held = report.held, complete = report.complete, "segments compacted");
    Ok(report)
}

/// Every segment under `dir`.
async fn list_segments<B: BlobStore>(blobs: &B, dir: &str) -> Result<Vec<Listed>, DeliverError> {
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = patiently("list the segments", &READ, || {
            blobs.list_page(dir, after.as_deref(), PAGE)
        })
        .await?;
        listed.extend(page.objects);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(listed),
        }
    }
}

/// What a scan of the tasks found.
type Scanned = (HashMap<String, Vec<Pointer>>, HashMap<String, u64>, u64);

/// Every task pointing into one of `segments`: the pages per segment, their live bytes, and
/// the tasks read; None when the deadline passes first.
async fn scan<S: TaskStore>(
    store: &S,
    crawl_id: &CrawlId,
    segments: &HashMap<&str, &Listed>,
    limits: &Limits<'_>,
) -> Result<Option<Scanned>, DeliverError> {
    let mut pointers: HashMap<String, Vec<Pointer>> = HashMap::new();
    let mut live: HashMap<String, u64> = HashMap::new();
    let mut tasks_read = 0u64;
    for status in Status::ALL {
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                crawl_id: crawl_id.clone(),
                status,
                updated_before: None,
                limit: PAGE,
                cursor: cursor.clone(),
                part: Part::WHOLE,
            };
            let page = patiently("query the tasks", &READ, || store.query(&query)).await?;
            for chunk in page.tasks.chunks(PARALLEL) {
                let read = |id| patiently("read a task", &READ, move || store.get(crawl_id, id));
                let tasks = try_join_all(chunk.iter().map(|t| read(&t.task_id))).await?;
                for task in tasks.into_iter().flatten() {
                    tasks_read += 1;
                    let Some((key, span)) = task
                        .fetch
                        .as_ref()
                        .and_then(|f| Some((f.object_key.as_deref()?, f.span?)))
                    else {
                        continue;
                    };
                    if !segments.contains_key(key) {
                        continue;
                    }
                    *live.entry(key.to_owned()).or_default() += span.length;
                    pointers.entry(key.to_owned()).or_default().push(Pointer {
                        task: task.task_id.clone(),
                        span,
                    });
                }
            }
            if limits.past_deadline() {
                return Ok(None);
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    Ok(Some((pointers, live, tasks_read)))
}

/// Copies the pages `pages` of the segment `key` to a new segment under `dir` and moves
/// their tasks there, a batch at a time.
#[allow(clippy::too_many_arguments)]
async fn rewrite<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    crawl: &Crawl,
    dir: &str,
    key: &str,
    pages: &[Pointer],
    limits: &Limits<'_>,
    report: &mut CompactionReport,
) -> Result<(), DeliverError> {
    let mut pages = pages.to_vec();
    pages.sort_by_key(|p| p.span.offset);
    let mut start = 0;
    while start < pages.len() {
        let first = pages[start].span.offset;
        let mut end = start;
        let mut live = 0;
        while end < pages.len()
            && (end == start
                || (live + pages[end].span.length <= BATCH_BYTES
                    && pages[end].span.offset + pages[end].span.length - first <= READ_BYTES))
        {
            live += pages[end].span.length;
            end += 1;
        }
        let batch = &pages[start..end];
        start = end;
        let last = batch
            .last()
            .map_or(first, |p| p.span.offset + p.span.length);
        let read = || blobs.get_range(key, first, last - first);
        let Some(stored) = patiently("read a segment", &READ, read).await? else {
            // Gone meanwhile (another pass deleted it): its tasks point elsewhere by now.
            return Ok(());
        };
        let mut records = BytesMut::with_capacity(usize::try_from(live).unwrap_or(0));
        let mut places = Vec::with_capacity(batch.len());
        for page in batch {
            let at = usize::try_from(page.span.offset - first).unwrap_or(usize::MAX);
            let length = usize::try_from(page.span.length).unwrap_or(usize::MAX);
            let Some(bytes) = stored.get(at..at.saturating_add(length)) else {
                return Err(DeliverError::Blob(crate::blob::BlobError::backend(
                    "compact",
                    key,
                    "a span reaches past its segment",
                )));
            };
            places.push(records.len() as u64);
            records.extend_from_slice(bytes);
        }
        let records = records.freeze();
        let copied = records.len() as u64;
        let appended = patiently("append a segment", &READ, || {
            blobs.append(dir, records.clone())
        })
        .await?;
        report.bytes_copied += copied;
        for chunk in batch
            .iter()
            .zip(places)
            .collect::<Vec<_>>()
            .chunks(PARALLEL)
        {
            let moves = chunk.iter().map(|(page, at)| {
                move_page(
                    store,
                    &crawl.id,
                    key,
                    page,
                    &appended.key,
                    appended.span.offset + at,
                )
            });
            for moved in try_join_all(moves).await? {
                if moved {
                    report.pages_moved += 1;
                } else {
                    report.pages_refused += 1;
                }
            }
        }
        if limits.past_deadline() && start < pages.len() {
            report.complete = false;
            return Ok(());
        }
    }
    Ok(())
}

/// Moves one task from `page` in segment `from` to `to` at `offset`: true when it moved; false
/// when it no longer points there, is leased, or changed before the write.
async fn move_page<S: TaskStore>(
    store: &S,
    crawl_id: &CrawlId,
    from: &str,
    page: &Pointer,
    to: &str,
    offset: u64,
) -> Result<bool, DeliverError> {
    let read = || store.get(crawl_id, &page.task);
    let Some(task) = patiently("read a task", &READ, read).await? else {
        return Ok(false);
    };
    let fetch = task.fetch.as_ref();
    let still_there = fetch.and_then(|f| f.object_key.as_deref()) == Some(from)
        && fetch.and_then(|f| f.span) == Some(page.span);
    let Some(update) = transition::repoint(&task, to, offset).filter(|_| still_there) else {
        return Ok(false);
    };
    let apply = || store.apply(crawl_id, &page.task, &update);
    Ok(patiently("move a task", &READ, apply).await?.is_done())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::memory::MemoryBlobStore;
    use crate::store::layer::{Call, Layer, Layered, Outcome};
    use crate::store::memory::MemoryStore;
    use crate::store::{ClaimOutcome, CrawlStore, FinishOutcome, TaskRecords};
    use bytes::Bytes;
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::crawl::CrawlConfig;
    use trawl_domain::task::now_ms;
    use trawl_domain::task::{FetchRecord, NewTask};

    const T0: Millis = 1_800_000_000_000;

    #[tokio::test]
    async fn a_task_moves_only_from_the_place_it_was_read_at_and_never_under_a_lease() {
        // GIVEN a task finished with its page at offset 0 of segment `old`
        let store = MemoryStore::new();
        let crawl = CrawlId::parse("c").unwrap();
        let config = CrawlConfig::default();
        store
            .create_crawl(&Crawl::new(crawl.clone(), config, T0))
            .await
            .unwrap();
        let url = CanonicalUrl::parse("http://example.com/a").unwrap();
        let new = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        store.seed(&crawl, &[new], T0).await.unwrap();
        let id = url.task_id();
        let claim = |at| store.claim(&crawl, &id, 60_000, at);
        let Ok(ClaimOutcome::Claimed { lease, .. }) = claim(T0).await else {
            panic!("claim refused");
        };
        let span = Span {
            offset: 0,
            length: 10,
            items: 0,
        };
        let record = FetchRecord {
            object_key: Some("segs/old".into()),
            span: Some(span),
            md5: Some("aa".into()),
            http_status: 200,
            fetched_at: T0,
            ..FetchRecord::default()
        };
        let finished = store.finish(&lease, &record, T0).await.unwrap();
        assert!(matches!(finished, FinishOutcome::Finished { .. }));
        let read = Pointer {
            task: id.clone(),
            span,
        };
        let place = |task: Option<trawl_domain::task::Task>| {
            let fetch = task.and_then(|t| t.fetch).unwrap();
            (fetch.object_key.unwrap(), fetch.span.unwrap().offset)
        };

        // WHEN it is moved from where it was read
        let moved = move_page(&store, &crawl, "segs/old", &read, "segs/new", 5).await;

        // THEN it points at the copy, the rest of its record as it was
        assert!(moved.unwrap());
        let task = store.get(&crawl, &id).await.unwrap();
        assert_eq!(
            task.as_ref()
                .and_then(|t| t.fetch.as_ref())
                .and_then(|f| f.md5.as_deref()),
            Some("aa")
        );
        assert_eq!(place(task), ("segs/new".to_owned(), 5));
        // AND a second move from the place read before is refused: it points elsewhere now
        let again = move_page(&store, &crawl, "segs/old", &read, "segs/other", 0).await;
        assert!(!again.unwrap());
        assert_eq!(
            place(store.get(&crawl, &id).await.unwrap()),
            ("segs/new".to_owned(), 5)
        );
        // AND a task under a lease keeps its place: its holder may finish with it
        let from = [trawl_domain::task::Status::Succeeded];
        assert!(store.reschedule(&crawl, &id, &from, T0).await.unwrap());
        assert!(matches!(
            claim(T0 + 1).await,
            Ok(ClaimOutcome::Claimed { .. })
        ));
        let at_new = Pointer {
            task: id.clone(),
            span: Span { offset: 5, ..span },
        };
        let leased = move_page(&store, &crawl, "segs/new", &at_new, "segs/other", 0).await;
        assert!(!leased.unwrap());
        assert_eq!(
            place(store.get(&crawl, &id).await.unwrap()),
            ("segs/new".to_owned(), 5)
        );
    }

    /// Around the scan's query of succeeded tasks, once: `moved` (succeeded) is put back to
    /// pending, already read (a retry keeping its stored body), and `finished` (in progress,
    /// already read) succeeds, read again: the scan misses one task and still reads as many as
    /// the crawl counts.
    struct MidScan {
        store: MemoryStore,
        moved: TaskId,
        finished: std::sync::Mutex<Option<trawl_domain::task::Lease>>,
    }

    impl Layer for MidScan {
        type Before = ();

        async fn before(&self, call: &Call<'_>) -> crate::store::StoreResult<()> {
            let Call::Query { query } = call else {
                return Ok(());
            };
            if query.status != Status::Succeeded {
                return Ok(());
            }
            let lease = self.finished.lock().unwrap().take();
            if let Some(lease) = lease {
                let crawl = &query.crawl_id;
                let from = [Status::Succeeded];
                assert!(self.store.reschedule(crawl, &self.moved, &from, T0).await?);
                let record = FetchRecord {
                    http_status: 200,
                    ..FetchRecord::default()
                };
                self.store.finish(&lease, &record, T0).await?;
            }
            Ok(())
        }

        async fn after(
            &self,
            _: &Call<'_>,
            (): (),
            _: Outcome<'_>,
        ) -> crate::store::StoreResult<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_segment_only_a_task_missed_by_the_scan_points_into_is_kept() {
        // GIVEN a task X whose page is in segment S, the only pointer into it, while task Z is
        // being fetched; and a kept delivery that began reading its tasks before S was written
        // (X was re-fetched into S after it), so that its summary does not name S
        let store = MemoryStore::new();
        let blobs = MemoryBlobStore::new();
        let layout = Layout::new("p");
        let crawl_id = CrawlId::parse("c").unwrap();
        let config = CrawlConfig::default();
        let lease_ms = config.lease_ms;
        let crawl = Crawl::new(crawl_id.clone(), config, T0);
        store.create_crawl(&crawl).await.unwrap();
        let run = format!("{}run=0/", layout.deliveries_prefix(&crawl_id));
        let before_s = now_ms() - 1;
        let summary = serde_json::json!({
            "warc": summary::WarcSummary::default(),
            "tasks_read_from_ms": before_s,
        });
        let plain = |bytes: Vec<u8>| crate::blob::Body::new(bytes);
        let meta = crate::blob::ObjectMeta {
            content_type: "application/json".into(),
            source_url: String::new(),
            compress: false,
        };
        let put = |key: String, body: Vec<u8>| {
            let blobs = blobs.clone();
            let meta = meta.clone();
            async move { blobs.put(&key, plain(body), &meta).await.unwrap() }
        };
        put(
            format!("{run}gen-000000/{SUMMARY_FILE}"),
            summary.to_string().into_bytes(),
        )
        .await;
        put(format!("{run}gen-000000/{SUCCESS_FILE}"), Vec::new()).await;
        let urls = ["http://example.com/x", "http://example.com/z"]
            .map(|u| CanonicalUrl::parse(u).unwrap());
        let new = urls.clone().map(|url| NewTask {
            lane: None,
            priority: Default::default(),
            url,
            depth: 0,
            parent: None,
            data: None,
        });
        store.seed(&crawl_id, &new, T0).await.unwrap();
        let [x, z] = urls.map(|u| u.task_id());
        let dir = layout.segments_prefix(&crawl_id);
        // S is full (another append opens the next segment): not the one being appended to
        let page = Bytes::from(vec![b'x'; 4 << 20]);
        let s = blobs.append(&dir, page.clone()).await.unwrap();
        blobs
            .append(&dir, Bytes::from_static(b"next"))
            .await
            .unwrap();
        let claim = |id| store.claim(&crawl_id, id, lease_ms, T0);
        let Ok(ClaimOutcome::Claimed { lease, .. }) = claim(&x).await else {
            panic!("claim refused");
        };
        let record = FetchRecord {
            object_key: Some(s.key.clone()),
            span: Some(s.span),
            http_status: 200,
            fetched_at: T0,
            ..FetchRecord::default()
        };
        store.finish(&lease, &record, T0).await.unwrap();
        let Ok(ClaimOutcome::Claimed { lease: z_lease, .. }) = claim(&z).await else {
            panic!("claim refused");
        };
        let racing = Layered::new(
            store.clone(),
            MidScan {
                store: store.clone(),
                moved: x.clone(),
                finished: std::sync::Mutex::new(Some(z_lease)),
            },
        );
        let deliveries = Deliveries::list(&blobs, &layout, &crawl_id).await.unwrap();
        let clock = crate::clock::SystemClock;
        let limits = |min_age_ms| Limits {
            below_percent: 50,
            max_bytes: 1 << 30,
            min_age_ms,
            // past the lease: S is old enough to be looked at
            now: now_ms() + i64::try_from(lease_ms).unwrap() + 1,
            deadline: None,
            clock: &clock,
        };

        // WHEN a pass runs while X changes status under its scan
        let ruled = limits(Some(lease_ms));
        let pass = compact(&racing, &blobs, &layout, &crawl, &deliveries, &run, &ruled);

        // THEN the scan missed X (S looks empty) yet S is held: written after the delivery's
        // read, a task may point into it unseen; X's page reads back
        let report = pass.await.unwrap();
        assert_eq!(
            (report.live_bytes, report.deleted, report.held),
            (0, 0, 1),
            "{report:?}"
        );
        let read = blobs
            .get_range(&s.key, s.span.offset, s.span.length)
            .await
            .unwrap();
        assert_eq!(read, Some(page));
        let task = store.get(&crawl_id, &x).await.unwrap().unwrap();
        assert_eq!(task.fetch.and_then(|f| f.object_key), Some(s.key.clone()));

        // AND the same race again (X succeeded, Z in progress), decided without the rule (the
        // scan and the deliveries alone, as before it): S is deleted under X, the loss closed
        let Ok(ClaimOutcome::Claimed { lease, .. }) = claim(&x).await else {
            panic!("claim refused");
        };
        store.finish(&lease, &record, T0).await.unwrap();
        let from = [Status::Succeeded];
        assert!(store.reschedule(&crawl_id, &z, &from, T0).await.unwrap());
        let Ok(ClaimOutcome::Claimed { lease: z_lease, .. }) = claim(&z).await else {
            panic!("claim refused");
        };
        let racing = Layered::new(
            store.clone(),
            MidScan {
                store: store.clone(),
                moved: x.clone(),
                finished: std::sync::Mutex::new(Some(z_lease)),
            },
        );
        let unruled = limits(None);
        let pass = compact(
            &racing,
            &blobs,
            &layout,
            &crawl,
            &deliveries,
            &run,
            &unruled,
        );
        let report = pass.await.unwrap();
        assert_eq!((report.live_bytes, report.deleted), (0, 1), "{report:?}");
        assert_eq!(blobs.get(&s.key).await.unwrap(), None);
        let task = store.get(&crawl_id, &x).await.unwrap().unwrap();
        assert_eq!(task.fetch.and_then(|f| f.object_key), Some(s.key));
    }
}
