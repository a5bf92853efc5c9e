//! The invariants checked after a chaos run, read straight from the stores (not through the
//! proxy): every task terminal, one manifest line per task, the summary's counts the table's,
//! every pointer names a stored object, no orphan left by the generation's clean-up (an object
//! no task points at, older than the lease when the delivery ran: `deliver::orphans`), and every
//! body's md5 is its key's (objects) and its task's; a segment span holds its whole records.

use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use trawl_core::blob::{BlobStore, Layout, segment};
use trawl_core::deliver::orphans::is_orphan;
use trawl_core::deliver::{
    DeliveryIndex, FileKind, INDEX_FILE, ManifestLine, SUMMARY_FILE, Summary,
};
use trawl_core::store::{CrawlStore, TaskQuery, TaskStore};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Millis, Status, Task};

/// What the audit found; [`Audit::holds`] when nothing is wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Audit {
    pub tasks: u64,
    pub succeeded: u64,
    /// Tasks pending, in progress or failed: work the run left behind (lost tasks).
    pub unfinished: u64,
    pub manifest_lines: u64,
    /// Manifest lines beyond one per URL.
    pub duplicates: u64,
    /// Pointers to an object that is not stored.
    pub dangling: u64,
    /// Stored objects no task points to that the generation's clean-up should have removed
    /// (older than the lease when the delivery ran).
    pub orphans: u64,
    /// Stored objects no task points to, written within a lease of the delivery: left for the
    /// next generation's clean-up (a writer's finish could have been on its way).
    pub recent_unpointed: u64,
    /// Statuses whose count in `summary.json` differs from the table's (the total included).
    pub summary_mismatches: u64,
    /// Orphans the clean-up removed (`summary.json`).
    pub orphans_removed: u64,
    /// Bodies whose md5 is not their key's or their task's.
    pub md5_mismatches: u64,
}

impl Audit {
    pub fn holds(&self) -> bool {
        self.violations() == 0
    }

    /// Everything found wrong: tasks unfinished, manifest lines missing or beyond one per
    /// task, duplicates, dangling pointers, orphans, summary counts and md5s that differ.
    pub fn violations(&self) -> u64 {
        self.unfinished
            + self.manifest_lines.abs_diff(self.tasks)
            + self.duplicates
            + self.dangling
            + self.orphans
            + self.summary_mismatches
            + self.md5_mismatches
    }
}

/// Audits the crawl and its (one) delivery.
pub async fn audit<S: TaskStore + CrawlStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    crawl_id: &CrawlId,
) -> Result<Audit, String> {
    let tasks = tasks(store, crawl_id).await?;
    let mut audit = Audit {
        tasks: tasks.len() as u64,
        ..Audit::default()
    };
    let mut pointed = BTreeSet::new();
    for task in &tasks {
        match task.status {
            Status::Pending | Status::InProgress | Status::Failed => audit.unfinished += 1,
            Status::Succeeded => audit.succeeded += 1,
            _ => {}
        }
        let Some(fetch) = &task.fetch else { continue };
        let Some(key) = &fetch.object_key else {
            continue;
        };
        pointed.insert(Layout::items_key_of(key));
        pointed.insert(key.clone());
        // A span's records are read back whole (a span that does not decode is corrupt).
        match segment::read_page(blobs, fetch).await {
            Ok(None) => audit.dangling += 1,
            Ok(Some(page)) => {
                let md5 = hex::encode(Md5::digest(&page.body));
                let key_names_it =
                    fetch.span.is_some() || Layout::md5_of_key(key) == Some(md5.as_str());
                if !key_names_it || fetch.md5.as_deref() != Some(md5.as_str()) {
                    audit.md5_mismatches += 1;
                }
            }
            Err(e) if fetch.span.is_some() && !e.is_retryable() => audit.md5_mismatches += 1,
            Err(e) => return Err(e.to_string()),
        }
    }
    let delivery = delivery(blobs, layout, crawl_id).await?;
    let summary: Summary =
        serde_json::from_slice(&delivery.read(SUMMARY_FILE).await?).map_err(|e| e.to_string())?;
    audit.orphans_removed = summary.orphans_removed;
    let lease_ms = store
        .get_crawl(crawl_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no crawl record")?
        .config
        .lease_ms;
    // Whole seconds: at or before the clean-up's clock, so every orphan counted here was one
    // for the clean-up too.
    let cleaned_at = humantime::parse_rfc3339(&summary.finished_at)
        .map_err(|e| e.to_string())?
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis() as Millis;
    let prefix = layout.crawl_prefix(crawl_id);
    let mut start_after = None;
    for _ in 0..1_000_000 {
        let page = blobs
            .list_page(&prefix, start_after.as_deref(), 1_000)
            .await
            .map_err(|e| e.to_string())?;
        // Segments are never orphans: bytes no span covers are garbage within them.
        let segments = layout.segments_prefix(crawl_id);
        let unpointed = page
            .objects
            .iter()
            .filter(|o| !pointed.contains(&o.key) && !o.key.starts_with(&segments));
        for object in unpointed {
            if is_orphan(object, None, Some(lease_ms), cleaned_at) {
                audit.orphans += 1;
            } else {
                audit.recent_unpointed += 1;
            }
        }
        start_after = page.next;
        if start_after.is_none() {
            break;
        }
    }
    let mut statuses = BTreeMap::new();
    for task in &tasks {
        *statuses
            .entry(task.status.name().to_owned())
            .or_insert(0u64) += 1;
    }
    let in_summary = |name: &str| summary.statuses.get(name).copied().unwrap_or(0);
    audit.summary_mismatches = Status::ALL
        .iter()
        .filter(|s| in_summary(s.name()) != statuses.get(s.name()).copied().unwrap_or(0))
        .count() as u64
        + u64::from(summary.tasks != audit.tasks);
    let lines = delivery.manifest().await?;
    let urls: BTreeSet<&str> = lines.iter().map(|l| l.url.as_str()).collect();
    audit.manifest_lines = lines.len() as u64;
    audit.duplicates = (lines.len() - urls.len()) as u64;
    Ok(audit)
}

/// Every task of the crawl, read whole.
async fn tasks<S: TaskStore>(store: &S, crawl_id: &CrawlId) -> Result<Vec<Task>, String> {
    let mut tasks = Vec::new();
    for status in Status::ALL {
        let mut cursor = None;
        for _ in 0..100_000 {
            let page = store
                .query(&TaskQuery {
                    crawl_id: crawl_id.clone(),
                    status,
                    updated_before: None,
                    limit: 100,
                    cursor: cursor.take(),
                    part: trawl_core::store::Part::WHOLE,
                })
                .await
                .map_err(|e| e.to_string())?;
            for found in page.tasks {
                let task = store
                    .get(crawl_id, &found.task_id)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("task {} vanished", found.task_id))?;
                tasks.push(task);
            }
            cursor = page.cursor;
            if cursor.is_none() {
                break;
            }
        }
    }
    Ok(tasks)
}

/// The crawl's one delivery.
struct Delivery<'a, B> {
    blobs: &'a B,
    /// Its key prefix (the files are `{prefix}{name}`).
    prefix: String,
}

async fn delivery<'a, B: BlobStore>(
    blobs: &'a B,
    layout: &Layout,
    crawl_id: &CrawlId,
) -> Result<Delivery<'a, B>, String> {
    let keys = blobs
        .list(&layout.deliveries_prefix(crawl_id))
        .await
        .map_err(|e| e.to_string())?;
    let indexes: Vec<&String> = keys
        .iter()
        .filter(|k| k.ends_with(&format!("/{INDEX_FILE}")))
        .collect();
    let [index_key] = indexes.as_slice() else {
        return Err(format!("{} deliveries, not one", indexes.len()));
    };
    Ok(Delivery {
        blobs,
        prefix: index_key.trim_end_matches(INDEX_FILE).to_owned(),
    })
}

impl<B: BlobStore> Delivery<'_, B> {
    async fn read(&self, name: &str) -> Result<bytes::Bytes, String> {
        let key = format!("{}{name}", self.prefix);
        self.blobs
            .get(&key)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{key} is missing"))
    }

    /// Its manifest lines.
    async fn manifest(&self) -> Result<Vec<ManifestLine>, String> {
        let index: DeliveryIndex =
            serde_json::from_slice(&self.read(INDEX_FILE).await?).map_err(|e| e.to_string())?;
        let mut lines = Vec::new();
        for file in index.of_kind(FileKind::Manifest) {
            let gz = self.read(&file.name).await?;
            for line in std::io::BufReader::new(MultiGzDecoder::new(&gz[..])).lines() {
                let line = line.map_err(|e| e.to_string())?;
                lines.push(serde_json::from_str(&line).map_err(|e| e.to_string())?);
            }
        }
        Ok(lines)
    }
}
