//! Storing a page body and recording it on its task, without orphans or dangling pointers.
//!
//! The rule (a body's key names its task and md5, so two writers of the same content write the
//! same bytes to the same key):
//! 1. The body is PUT before the fenced `finish`; no PUT when the task already points at that
//!    key (unchanged content). A pointer therefore never names an object that was not written.
//! 2. A writer whose `finish` succeeded deletes the object it replaced and the objects rejected
//!    writers left on the task (`stale`), never its own. The token proves no other lease
//!    existed meanwhile, and the task cannot be claimed again before a retry backoff or a
//!    recrawl interval, far longer than these deletes take.
//! 3. A writer whose `finish` was rejected (its lease was taken over) never touches the
//!    pointer. If it PUT an object the task does not point at: when the task is terminal
//!    (nobody may write it now) it deletes the object; otherwise another worker may be about
//!    to point at that very key, so it only records the md5 as stale for the next finisher.

use crate::blob::{BlobError, BlobStore, Layout, ObjectMeta};
use crate::store::{FinishOutcome, StoreError, TaskStore};
use bytes::Bytes;
use md5::{Digest, Md5};
use thiserror::Error;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::task::{FetchRecord, Lease, Millis, Task};

#[derive(Debug, Error)]
pub enum RecordError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Blob(#[from] BlobError),
}

/// How recording a page ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredPage {
    /// The task now points at this fetch; `put` says whether a body was uploaded.
    Finished { put: bool },
    /// The lease had been taken over: the newer result stands, untouched.
    LostLease,
}

/// A body to store.
#[derive(Debug, Clone)]
pub struct PageBody {
    pub bytes: Bytes,
    /// Raw md5 of `bytes`.
    pub md5: [u8; 16],
    /// The crawl keeps its bodies compressed at rest (`storage.compress_bodies`).
    pub compress: bool,
    /// The items extracted from the body (JSON), when an extractor applies to the page.
    pub items: Option<Bytes>,
}

/// Stores `body` (when given) and finishes the claimed `task` with `record`,
/// following the rule above, at `now`. `task` is the task as the claim returned it.
#[allow(clippy::too_many_arguments)]
pub async fn record_page<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    task: &Task,
    lease: &Lease,
    url: &CanonicalUrl,
    mut record: FetchRecord,
    body: Option<PageBody>,
    now: Millis,
) -> Result<StoredPage, RecordError> {
    let mut written: Option<(String, String)> = None;
    // Whether the task's objects have items beside them (an extractor applies to its URL, and
    // so to every fetch of it).
    let mut with_items = false;
    if let Some(PageBody {
        bytes,
        md5,
        compress,
        items,
    }) = body
    {
        with_items = items.is_some();
        let md5_hex = hex::encode(md5);
        let key = layout.html_key(&task.crawl_id, &task.task_id, &md5_hex);
        let unchanged = task
            .fetch
            .as_ref()
            .is_some_and(|f| f.object_key.as_deref() == Some(key.as_str()));
        if !unchanged {
            let meta = ObjectMeta {
                content_type: record
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "text/html".to_owned()),
                md5,
                source_url: url.as_str().to_owned(),
                compress,
            };
            blobs.put(&key, bytes, &meta).await?;
            if let Some(items) = items {
                let meta = ObjectMeta {
                    content_type: "application/json".to_owned(),
                    md5: Md5::digest(&items).into(),
                    compress: false,
                    ..meta
                };
                blobs.put(&Layout::items_key_of(&key), items, &meta).await?;
            }
            written = Some((key.clone(), md5_hex.clone()));
        }
        record.object_key = Some(key);
        record.md5 = Some(md5_hex);
    }
    match store.finish(lease, &record, now).await? {
        FinishOutcome::Finished { replaced, stale } => {
            let keep = record.object_key.as_deref();
            let mut doomed: Vec<String> = Vec::new();
            if let Some(old) = replaced.and_then(|r| r.object_key)
                && Some(old.as_str()) != keep
            {
                doomed.push(old);
            }
            for md5 in stale {
                let key = layout.html_key(&task.crawl_id, &task.task_id, &md5);
                if Some(key.as_str()) != keep && !doomed.contains(&key) {
                    doomed.push(key);
                }
            }
            for key in doomed {
                // A failed delete leaves an orphan (never a dangling pointer); purge removes it.
                if let Err(e) = delete_page(blobs, &key, with_items).await {
                    tracing::warn!(key, error = %e, "could not delete a replaced object");
                }
            }
            Ok(StoredPage::Finished {
                put: written.is_some(),
            })
        }
        FinishOutcome::Rejected { current } => {
            if let Some((key, md5)) = written {
                let current_key = current
                    .as_ref()
                    .and_then(|t| t.fetch.as_ref())
                    .and_then(|f| f.object_key.as_deref());
                if current_key != Some(key.as_str()) {
                    match current {
                        Some(t) if t.status.is_terminal() => {
                            delete_page(blobs, &key, with_items).await?;
                        }
                        Some(_) => {
                            store.add_stale(&task.crawl_id, &task.task_id, &md5).await?;
                        }
                        // The task is gone (purged): nothing may point at the object.
                        None => delete_page(blobs, &key, with_items).await?,
                    }
                }
            }
            Ok(StoredPage::LostLease)
        }
    }
}

/// Deletes the body at `key`, and its items when the task has some.
async fn delete_page<B: BlobStore>(
    blobs: &B,
    key: &str,
    with_items: bool,
) -> Result<(), BlobError> {
    if with_items {
        blobs.delete(&Layout::items_key_of(key)).await?;
    }
    blobs.delete(key).await
}
