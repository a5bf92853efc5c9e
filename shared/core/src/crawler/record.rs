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
//! 4. A PUT that failed may still have been applied (its answer lost): its md5 goes on the
//!    task's stale list before the error is returned, so that whoever finishes the task next
//!    deletes the object should it exist (one write per failed PUT, none per page).
//! 5. A finish whose answer was lost and whose retry failed its own condition is recognised by
//!    the task as it now stands (`transition::finished_by`: same token, same record) and ends as
//!    a finish, with rule 2's deletes; never as a lost lease.
//!
//! On the segment layout (`blob::segment`) rule 1 reads: the page's records are appended, and
//! durable, before the finish; no append when the task already points at a body of that md5.
//! A host turn appends its pages' records together (`record_or_gather` keeps them, `seal`
//! appends them in one call and then runs each page's finish with its place in the segment).
//! Rules 2 to 4 delete nothing there: bytes that a finish replaced, or that no finish ever
//! pointed at, stay in their segment as garbage — never a pointer to missing bytes.

use crate::backoff::{Backoff, persist};
use crate::blob::segment::{self, Page};
use crate::blob::{BlobError, BlobStore, Body, Layout, ObjectMeta};
use crate::clock::Clock;
use crate::store::{FinishOutcome, StoreError, TaskStore};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream;
use std::sync::atomic::AtomicU64;
use thiserror::Error;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::StorageLayout;
use trawl_domain::task::{FetchRecord, Lease, Span, Task};
use trawl_domain::transition::finished_by;

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
    pub body: Body,
    /// The crawl keeps its bodies compressed at rest (`storage.compress_bodies`).
    pub compress: bool,
    /// Objects or segments (`storage.layout`).
    pub layout: StorageLayout,
    /// The items extracted from the body (JSON), when an extractor applies to the page.
    pub items: Option<Bytes>,
}

/// Whether the task's objects may have items beside them: the crawl has extractors. Then every
/// object a finish replaces has its items deleted with it, whatever the new fetch brought (a
/// page that turned into a PDF, a redirect or an error page leaves no items behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WithItems(pub bool);

/// Stores `body` (when given) and finishes the claimed `task` with `record`,
/// following the rule above, at `now`. `task` is the task as the claim returned it. On the
/// segment layout the page's records are appended alone (`seal` of one page).
#[allow(clippy::too_many_arguments)]
pub async fn record_page<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    task: &Task,
    lease: &Lease,
    url: &CanonicalUrl,
    record: FetchRecord,
    body: Option<PageBody>,
    with_items: WithItems,
    clock: &dyn Clock,
) -> Result<StoredPage, RecordError> {
    let recorded = record_or_gather(
        store, blobs, layout, task, lease, url, record, body, with_items, clock,
    )
    .await?;
    match recorded {
        Recorded::Stored(stored) => Ok(stored),
        Recorded::Gathered(page) => {
            let dir = layout.segments_prefix(&task.crawl_id);
            let sealed = seal(store, blobs, layout, &dir, [page.as_ref()], clock).await?;
            sealed.into_iter().next().unwrap_or_else(|| {
                Err(BlobError::backend("seal", &dir, "a page sealed without its finish").into())
            })
        }
    }
}

/// What `record_or_gather` did with a page.
#[derive(Debug)]
pub enum Recorded {
    /// Stored (or nothing to store) and its finish run.
    Stored(StoredPage),
    /// A new body on the segment layout: its records wait to be appended with its turn's
    /// other pages (`seal`), and its task is finished after that.
    Gathered(Box<Gathered>),
}

/// A page whose records wait for the append of its turn's segment, its finish after it.
#[derive(Debug)]
pub struct Gathered {
    pub task: Task,
    pub lease: Lease,
    /// The record to finish with, its md5 set; its segment and span are set by `seal`.
    record: FetchRecord,
    /// The page's gzip members, and the length of the last one, its items' (0: none).
    records: Bytes,
    items: u64,
    with_items: bool,
}

impl Gathered {
    /// The bytes its records take in the segment.
    pub fn len(&self) -> u64 {
        self.records.len() as u64
    }

    /// The body's length, as the fetch record gives it.
    pub fn content_length(&self) -> u64 {
        self.record.content_length
    }
}

/// As `record_page`, except that a new body on the segment layout is not appended here: it
/// comes back `Gathered`, for the caller to `seal` with others (a host turn's pages: one
/// append, which on S3 is one PUT). Every other page is stored and finished as `record_page`
/// does.
#[allow(clippy::too_many_arguments)]
pub async fn record_or_gather<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    task: &Task,
    lease: &Lease,
    url: &CanonicalUrl,
    mut record: FetchRecord,
    body: Option<PageBody>,
    WithItems(with_items): WithItems,
    clock: &dyn Clock,
) -> Result<Recorded, RecordError> {
    let mut written: Option<(String, String)> = None;
    if let Some(page) = body {
        match page.layout {
            StorageLayout::Objects => {
                written =
                    put_object(store, blobs, layout, task, url, &mut record, page, clock).await?;
            }
            StorageLayout::Segments => {
                if let Some(records) = gather_page(task, url, &mut record, page)? {
                    return Ok(Recorded::Gathered(Box::new(Gathered {
                        task: task.clone(),
                        lease: lease.clone(),
                        record,
                        records: records.records,
                        items: records.items,
                        with_items,
                    })));
                }
            }
        }
    }
    let wrote = match written {
        Some((key, md5)) => Wrote::Object { key, md5 },
        None => Wrote::Nothing,
    };
    let stored = finish_page(
        store, blobs, layout, task, lease, record, wrote, with_items, clock,
    );
    Ok(Recorded::Stored(stored.await?))
}

/// Rule 1 for pages gathered on the segment layout: appends their records under `dir` at once
/// (one `append`: on S3, one PUT) and, once that append is durable, runs each page's fenced
/// finish with its place in the segment, at `now`. Err: the append failed, and no page was
/// finished (its bytes, if they landed, are garbage). Else each page's finish, in order.
pub async fn seal<'a, S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    dir: &str,
    pages: impl IntoIterator<Item = &'a Gathered>,
    clock: &dyn Clock,
) -> Result<Vec<Result<StoredPage, RecordError>>, RecordError> {
    let pages: Vec<&Gathered> = pages.into_iter().collect();
    let mut segment = bytes::BytesMut::with_capacity(pages.iter().map(|p| p.records.len()).sum());
    let mut offsets = Vec::with_capacity(pages.len());
    for page in &pages {
        offsets.push(segment.len() as u64);
        segment.extend_from_slice(&page.records);
    }
    let segment = segment.freeze();
    let retries = AtomicU64::new(0);
    // A failed append leaves garbage at worst: nothing to record.
    let appended = persist(clock, "append", &Backoff::BRIEF, &retries, || {
        blobs.append(dir, segment.clone())
    })
    .await?;
    let finishes = pages.into_iter().zip(offsets).map(|(page, offset)| {
        let record = FetchRecord {
            object_key: Some(appended.key.clone()),
            span: Some(Span {
                offset: appended.span.offset + offset,
                length: page.len(),
                items: page.items,
            }),
            ..page.record.clone()
        };
        let (task, lease) = (&page.task, &page.lease);
        let with_items = page.with_items;
        finish_page(
            store,
            blobs,
            layout,
            task,
            lease,
            record,
            Wrote::Appended,
            with_items,
            clock,
        )
    });
    Ok(stream::iter(finishes)
        .buffered(SEAL_FINISHES)
        .collect()
        .await)
}

/// Finishes of a sealed segment's pages in flight at once.
const SEAL_FINISHES: usize = 16;

/// What was written for a page before its finish.
#[derive(Debug)]
enum Wrote {
    /// No body, or an unchanged one.
    Nothing,
    /// The object PUT for it (object layout), and its md5.
    Object { key: String, md5: String },
    /// Its records, appended to a segment.
    Appended,
}

/// The fenced finish and what follows it (rules 2 to 5), once the page's body is stored.
#[allow(clippy::too_many_arguments)]
async fn finish_page<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    task: &Task,
    lease: &Lease,
    record: FetchRecord,
    wrote: Wrote,
    with_items: bool,
    clock: &dyn Clock,
) -> Result<StoredPage, RecordError> {
    let put = !matches!(wrote, Wrote::Nothing);
    let written = match wrote {
        Wrote::Object { key, md5 } => Some((key, md5)),
        Wrote::Nothing | Wrote::Appended => None,
    };
    let keep = record.object_key.clone();
    let retries = AtomicU64::new(0);
    let finished = persist(clock, "finish", &Backoff::BRIEF, &retries, || {
        store.finish(lease, &record, clock.now_ms())
    })
    .await;
    let finished = match finished {
        Ok(finished) => finished,
        Err(e) => {
            // Rule 4: the finish may not have been applied, and the object must not outlive it.
            if let Some((_, md5)) = &written {
                record_unknown_put(store, task, md5, clock).await;
            }
            return Err(e.into());
        }
    };
    match finished {
        FinishOutcome::Finished { replaced, stale } => {
            let keep = keep.as_deref();
            delete_replaced(
                blobs, layout, task, keep, replaced, stale, with_items, clock,
            )
            .await;
            Ok(StoredPage::Finished { put })
        }
        // Rule 5: our own finish, applied; what it replaced is what the claim returned.
        FinishOutcome::Rejected {
            current: Some(current),
        } if finished_by(&current, lease, &record) => {
            let (replaced, stale) = (task.fetch.clone(), task.stale.clone());
            let keep = keep.as_deref();
            delete_replaced(
                blobs, layout, task, keep, replaced, stale, with_items, clock,
            )
            .await;
            Ok(StoredPage::Finished { put })
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

/// Rule 1 on the object layout: PUTs the body (and its items) unless the task points at it
/// already; sets the record's key and md5. Returns the key and md5 written, if any.
#[allow(clippy::too_many_arguments)]
async fn put_object<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    task: &Task,
    url: &CanonicalUrl,
    record: &mut FetchRecord,
    PageBody {
        body,
        compress,
        items,
        ..
    }: PageBody,
    clock: &dyn Clock,
) -> Result<Option<(String, String)>, RecordError> {
    let md5_hex = body.md5_hex();
    let key = layout.html_key(&task.crawl_id, &task.task_id, &md5_hex);
    let unchanged = task
        .fetch
        .as_ref()
        .is_some_and(|f| f.object_key.as_deref() == Some(key.as_str()));
    let mut written = None;
    if !unchanged {
        let meta = ObjectMeta {
            content_type: record
                .content_type
                .clone()
                .unwrap_or_else(|| "text/html".to_owned()),
            source_url: url.as_str().to_owned(),
            compress,
        };
        let retries = AtomicU64::new(0);
        let put = async {
            persist(clock, "PutObject", &Backoff::BRIEF, &retries, || {
                blobs.put(&key, body.clone(), &meta)
            })
            .await?;
            let Some(items) = items else {
                return Ok(());
            };
            let meta = ObjectMeta {
                content_type: "application/json".to_owned(),
                compress: false,
                ..meta.clone()
            };
            let items = Body::new(items);
            let items_key = Layout::items_key_of(&key);
            persist(clock, "PutObject", &Backoff::BRIEF, &retries, || {
                blobs.put(&items_key, items.clone(), &meta)
            })
            .await
        };
        if let Err(e) = put.await {
            record_unknown_put(store, task, &md5_hex, clock).await;
            return Err(e.into());
        }
        written = Some((key.clone(), md5_hex.clone()));
    }
    record.object_key = Some(key);
    record.md5 = Some(md5_hex);
    Ok(written)
}

/// Rule 1 on the segment layout, its first half: the page's records, encoded for `seal`, unless
/// the task points at a body of the same md5 already, whose place the record keeps. Sets the
/// record's md5 (and, unchanged, its segment and span).
fn gather_page(
    task: &Task,
    url: &CanonicalUrl,
    record: &mut FetchRecord,
    PageBody { body, items, .. }: PageBody,
) -> Result<Option<segment::Encoded>, RecordError> {
    let md5_hex = body.md5_hex();
    let previous = task
        .fetch
        .as_ref()
        .filter(|f| f.object_key.is_some() && f.md5.as_deref() == Some(md5_hex.as_str()));
    let encoded = match previous {
        Some(previous) => {
            record.object_key = previous.object_key.clone();
            record.span = previous.span;
            None
        }
        None => Some(segment::encode(&Page {
            target_uri: record.final_url.as_deref().unwrap_or(url.as_str()),
            fetched_at: record.fetched_at,
            http_status: record.http_status,
            content_type: record.content_type.as_deref(),
            body: &body,
            items: items.as_deref(),
        })?),
    };
    record.md5 = Some(md5_hex);
    Ok(encoded)
}

/// Rule 4: the md5 of an object whose PUT (or whose finish) failed goes on the task's stale
/// list, for the next finisher to delete should the object exist.
async fn record_unknown_put<S: TaskStore>(store: &S, task: &Task, md5: &str, clock: &dyn Clock) {
    let retries = AtomicU64::new(0);
    let added = persist(clock, "add_stale", &Backoff::BRIEF, &retries, || {
        store.add_stale(&task.crawl_id, &task.task_id, md5)
    });
    if let Err(e) = added.await {
        tracing::warn!(task = %task.task_id, md5, error = %e, "could not record an unknown PUT");
    }
}

/// Rule 2: deletes the object the finish replaced and those on the stale list, never `keep`
/// (with their items, when the task has some).
#[allow(clippy::too_many_arguments)]
async fn delete_replaced<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    task: &Task,
    keep: Option<&str>,
    replaced: Option<FetchRecord>,
    stale: Vec<String>,
    with_items: bool,
    clock: &dyn Clock,
) {
    let mut doomed: Vec<String> = Vec::new();
    // A body in a segment is never deleted: its bytes stay, as garbage, with the segment's.
    if let Some(old) = replaced
        .filter(|r| r.span.is_none())
        .and_then(|r| r.object_key)
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
        let retries = AtomicU64::new(0);
        let deleted = persist(clock, "DeleteObject", &Backoff::BRIEF, &retries, || {
            delete_page(blobs, &key, with_items)
        });
        if let Err(e) = deleted.await {
            tracing::warn!(key, error = %e, "could not delete a replaced object");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::memory::MemoryBlobStore;
    use crate::clock::ManualClock;
    use crate::store::memory::MemoryStore;
    use crate::store::{ClaimOutcome, CrawlStore};
    use trawl_domain::canonical::CrawlId;
    use trawl_domain::crawl::{Crawl, CrawlConfig};
    use trawl_domain::task::NewTask;

    #[tokio::test]
    async fn a_finish_applied_under_a_lost_answer_ends_as_a_finish_with_its_deletes() {
        // GIVEN a claimed task with an object a rejected writer left (on its stale list)
        let store = MemoryStore::new();
        let blobs = MemoryBlobStore::new();
        let layout = Layout::default();
        let crawl = Crawl::new(CrawlId::parse("lost").unwrap(), CrawlConfig::default(), 0);
        store.create_crawl(&crawl).await.unwrap();
        let url = CanonicalUrl::parse("http://example.com/a").unwrap();
        let new = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        store.seed(&crawl.id, &[new], 0).await.unwrap();
        let task_id = url.task_id();
        let left = layout.html_key(&crawl.id, &task_id, "00");
        let meta = ObjectMeta {
            content_type: "text/html".into(),
            source_url: url.as_str().to_owned(),
            compress: false,
        };
        blobs
            .put(&left, Body::new(&b"stray"[..]), &meta)
            .await
            .unwrap();
        store.add_stale(&crawl.id, &task_id, "00").await.unwrap();
        let ClaimOutcome::Claimed { task, lease } =
            store.claim(&crawl.id, &task_id, 60_000, 1).await.unwrap()
        else {
            panic!("not claimed");
        };

        // WHEN its finish was applied but the answer lost, and the retry meets its own write
        let bytes = Bytes::from_static(b"<p>page</p>");
        let page = Body::new(bytes.clone());
        let key = layout.html_key(&crawl.id, &task_id, &page.md5_hex());
        let applied = FetchRecord {
            object_key: Some(key.clone()),
            md5: Some(page.md5_hex()),
            http_status: 200,
            ..FetchRecord::default()
        };
        store.finish(&lease, &applied, 2).await.unwrap();
        let record = FetchRecord {
            http_status: 200,
            ..FetchRecord::default()
        };
        let body = PageBody {
            body: page,
            compress: false,
            layout: StorageLayout::Objects,
            items: None,
        };
        let stored = record_page(
            &store,
            &blobs,
            &layout,
            &task,
            &lease,
            &url,
            record,
            Some(body),
            WithItems(false),
            &ManualClock::at(2),
        )
        .await
        .unwrap();

        // THEN it ends as a finish: the page stands, the stale object is deleted
        assert_eq!(stored, StoredPage::Finished { put: true });
        assert_eq!(blobs.get(&key).await.unwrap(), Some(bytes));
        assert_eq!(blobs.get(&left).await.unwrap(), None);
    }
}
