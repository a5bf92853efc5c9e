//! Clean-up: removes a crawl's tasks, page bodies and record once its results are delivered (the
//! frontier clean-up of the seed workflow). Deliveries are kept: they are the product, and so
//! are the segments of a crawl whose deliveries point into them (any `DeliveredPages` but `Copy`).

use crate::app::Store;
use crate::blob::{BlobError, BlobStore, Layout};
use crate::store::StoreError;
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::{CrawlState, DeliveredPages};

/// Objects deleted at once.
const PARALLEL_DELETES: usize = 16;

#[derive(Debug, Error)]
pub enum PurgeError {
    /// The crawl is still running: purging it would pull the frontier from under its workers.
    #[error("crawl {0} is running; pass force to purge it anyway")]
    Running(CrawlId),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Blob(#[from] BlobError),
}

impl PurgeError {
    pub fn is_retryable(&self) -> bool {
        match self {
            PurgeError::Running(_) => false,
            PurgeError::Store(e) => e.is_retryable(),
            PurgeError::Blob(e) => e.is_retryable(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReport {
    pub crawl_id: CrawlId,
    pub tasks_deleted: u64,
    pub objects_deleted: u64,
    /// Segment files left in place: the crawl's deliveries name their pages by place in them.
    #[serde(default)]
    pub segments_kept: u64,
    /// Page objects left in place (the objects layout, delivered by reference): the crawl's
    /// deliveries name them.
    #[serde(default)]
    pub objects_kept: u64,
    /// False when there was no crawl record (already purged, or never created).
    pub crawl_deleted: bool,
}

/// Deletes the crawl's tasks and host records, then its objects, then its record (last, so a purge that stops
/// half-way is finished by running it again). Refuses a running crawl unless `force`. Keeps the
/// page bodies (segments, page objects) when the crawl's pages are delivered by reference, or
/// when its record is gone and so its configuration unknown (a purge run again).
pub async fn purge<S, B>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    crawl_id: &CrawlId,
    force: bool,
) -> Result<PurgeReport, PurgeError>
where
    S: Store,
    B: BlobStore,
{
    let crawl = store.get_crawl(crawl_id).await?;
    if !force
        && crawl
            .as_ref()
            .is_some_and(|c| c.state == CrawlState::Running)
    {
        return Err(PurgeError::Running(crawl_id.clone()));
    }
    let tasks_deleted = store.delete_tasks(crawl_id).await?;
    store.delete_hosts(crawl_id).await?;
    let referenced = crawl
        .as_ref()
        .is_none_or(|c| c.config.delivered_pages() != DeliveredPages::Copy);
    let segments = layout.segments_prefix(crawl_id);
    // The bodies a delivery by reference names: segments, or page objects on the objects
    // layout (their items objects are copied into the delivery, never named).
    let named = |key: &String| key.starts_with(&segments) || key.contains("/attr=html/");
    let (kept, keys): (Vec<String>, Vec<String>) = blobs
        .list(&layout.crawl_prefix(crawl_id))
        .await?
        .into_iter()
        .partition(|key| referenced && named(key));
    let segments_kept = kept.iter().filter(|k| k.starts_with(&segments)).count() as u64;
    for chunk in keys.chunks(PARALLEL_DELETES) {
        try_join_all(chunk.iter().map(|key| blobs.delete(key))).await?;
    }
    if crawl.is_some() {
        store.delete_crawl(crawl_id).await?;
    }
    tracing::info!(crawl = %crawl_id, tasks_deleted, objects = keys.len(), kept = kept.len(), "crawl purged");
    Ok(PurgeReport {
        crawl_id: crawl_id.clone(),
        tasks_deleted,
        objects_deleted: keys.len() as u64,
        segments_kept,
        objects_kept: kept.len() as u64 - segments_kept,
        crawl_deleted: crawl.is_some(),
    })
}
