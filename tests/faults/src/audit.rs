//! The invariants checked after a chaos run, read straight from the stores (not through the
//! proxy): every task terminal, one manifest line per task, every pointer names a stored object
//! and every stored body is pointed at, and every body's md5 is its key's and its task's.

use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use std::collections::BTreeSet;
use std::io::BufRead;
use trawl_core::blob::{BlobStore, Layout};
use trawl_core::deliver::{DeliveryIndex, FileKind, INDEX_FILE, ManifestLine};
use trawl_core::store::{TaskQuery, TaskStore};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Status, Task};

/// What the audit found; [`Audit::holds`] when nothing is wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Stored page bodies no task points to.
    pub orphans: u64,
    /// Bodies whose md5 is not their key's or their task's.
    pub md5_mismatches: u64,
}

impl Audit {
    pub fn holds(&self) -> bool {
        self.unfinished == 0
            && self.manifest_lines == self.tasks
            && self.duplicates == 0
            && self.dangling == 0
            && self.orphans == 0
            && self.md5_mismatches == 0
    }
}

/// Audits the crawl and its (one) delivery.
pub async fn audit<S: TaskStore, B: BlobStore>(
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
        pointed.insert(key.clone());
        match blobs.get(key).await.map_err(|e| e.to_string())? {
            None => audit.dangling += 1,
            Some(body) => {
                let md5 = hex::encode(Md5::digest(&body));
                if Layout::md5_of_key(key) != Some(md5.as_str())
                    || fetch.md5.as_deref() != Some(md5.as_str())
                {
                    audit.md5_mismatches += 1;
                }
            }
        }
    }
    let stored = blobs
        .list(&layout.crawl_prefix(crawl_id))
        .await
        .map_err(|e| e.to_string())?;
    audit.orphans = stored.iter().filter(|k| !pointed.contains(*k)).count() as u64;
    let lines = manifest(blobs, layout, crawl_id).await?;
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

/// The manifest lines of the crawl's one delivery.
async fn manifest<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    crawl_id: &CrawlId,
) -> Result<Vec<ManifestLine>, String> {
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
    let prefix = index_key.trim_end_matches(INDEX_FILE);
    let read = |key: String| async move {
        blobs
            .get(&key)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{key} is missing"))
    };
    let index: DeliveryIndex =
        serde_json::from_slice(&read((*index_key).clone()).await?).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for file in index.of_kind(FileKind::Manifest) {
        let gz = read(format!("{prefix}{}", file.name)).await?;
        for line in std::io::BufReader::new(MultiGzDecoder::new(&gz[..])).lines() {
            let line = line.map_err(|e| e.to_string())?;
            lines.push(serde_json::from_str(&line).map_err(|e| e.to_string())?);
        }
    }
    Ok(lines)
}
