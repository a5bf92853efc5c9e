//! Re-extraction from stored bodies (`trawl reextract`, the seeder's `reextract` operation): the
//! crawl's current extractors run over every page it has stored, without a fetch, and each
//! page's items are written beside its body (`attr=items/md5=…`, in either layout: the object
//! layout's items object is replaced; on segments, whose records cannot change, the object
//! stands beside them and the delivery prefers it to older items). The items carry the version
//! of the definitions that made them, so the next delivery's items and items delta are the
//! current extractors', and its summary says so (`items.from_current_extractors`).
//!
//! The pages are those a delivery holds: every task with a stored HTML body that is not `gone`
//! or `ignored`, read a status at a time from the task index. Bounded: a call with a deadline
//! stops once it has passed (after some work) and answers where it stopped; a call from that
//! cursor goes on. A page done twice is written twice, with the same items. Cost: per page one
//! task read, one body read (a range read on segments) and one PUT; no request to any site.

use crate::app::{App, Ports};
use crate::blob::{BlobError, BlobStore, Body, Layout, ObjectMeta, segment};
use crate::discover::is_html_type;
use crate::extract::Extractors;
use crate::store::{StoreError, TaskQuery, TaskRecords};
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::TaskId;
use trawl_domain::crawl::Crawl;
use trawl_domain::task::Status;

/// Tasks read from the index at once.
const PAGE: u32 = 100;
/// Pages read, extracted and written at once (their reads and writes overlap).
const PARALLEL: usize = 16;
/// Pages a call does before it may stop for its deadline (so that every call moves on).
const MIN_WORK_PER_CALL: u64 = 10;
/// The statuses of tasks whose stored body a delivery holds, in the order they are read.
const STATUSES: [Status; 4] = [
    Status::Succeeded,
    Status::Pending,
    Status::Failed,
    Status::InProgress,
];

#[derive(Debug, Error)]
pub enum ReextractError {
    /// The crawl's extractors do not compile (the seeder checked them: a corrupt record).
    #[error("the crawl's extractors: {0}")]
    Extractors(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Blob(#[from] BlobError),
}

/// Where a pass stopped: the status (index in its order), the index page's cursor, and the
/// tasks of that page already done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReextractCursor {
    pub status: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default)]
    pub skip: usize,
}

/// What a call did (counts of this call only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reextracted {
    /// Pages whose items were made anew, and their items (invalid ones among them).
    pub pages: u64,
    pub items: u64,
    pub invalid: u64,
    /// Stored pages left as they are: no extractor applies to their URL, or not HTML.
    pub skipped: u64,
    /// Pages whose stored body could not be found (their items stay as they were).
    pub missing: u64,
    /// The version of the definitions the items were made with.
    pub version: String,
    /// Where the next call goes on (None: the pass is done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<ReextractCursor>,
}

/// Runs `crawl`'s current extractors over its stored pages from `from` (None: the start),
/// stopping once `deadline` (on the App's clock) has passed.
pub async fn reextract<P: Ports>(
    app: &App<P>,
    crawl: &Crawl,
    from: Option<ReextractCursor>,
    deadline: Option<Instant>,
) -> Result<Reextracted, ReextractError> {
    let extractors = Extractors::new(&crawl.config.extract)
        .map_err(|e| ReextractError::Extractors(e.to_string()))?;
    let mut done = Reextracted {
        version: extractors.version().to_owned(),
        ..Reextracted::default()
    };
    let mut at = from.unwrap_or_default();
    let mut work = 0u64;
    // Bounded: each round ends the pass or moves `at` to the next page (or status).
    while let Some(&status) = STATUSES.get(at.status) {
        let page = app
            .store
            .query(&TaskQuery {
                crawl_id: crawl.id.clone(),
                status,
                updated_before: None,
                limit: PAGE,
                cursor: at.cursor.clone(),
                part: crate::store::Part::WHOLE,
            })
            .await?;
        for chunk in page
            .tasks
            .get(at.skip..)
            .unwrap_or_default()
            .chunks(PARALLEL)
        {
            let each = chunk
                .iter()
                .map(|t| page_items(app, &extractors, crawl, &t.task_id));
            for counted in try_join_all(each).await? {
                done.add(&counted);
            }
            at.skip += chunk.len();
            work += chunk.len() as u64;
            let spent = deadline.is_some_and(|d| app.clock.instant() >= d);
            if work >= MIN_WORK_PER_CALL && spent {
                done.cursor = Some(at);
                return Ok(done);
            }
        }
        at.skip = 0;
        at.cursor = page.cursor;
        if at.cursor.is_none() {
            at.status += 1;
        }
    }
    Ok(done)
}

impl Reextracted {
    fn add(&mut self, other: &Reextracted) {
        self.pages += other.pages;
        self.items += other.items;
        self.invalid += other.invalid;
        self.skipped += other.skipped;
        self.missing += other.missing;
    }
}

/// Makes the items of the stored page of `crawl`'s task `task_id` anew and writes them beside
/// its body; what it did, counted.
async fn page_items<P: Ports>(
    app: &App<P>,
    extractors: &Extractors,
    crawl: &Crawl,
    task_id: &TaskId,
) -> Result<Reextracted, ReextractError> {
    let mut done = Reextracted::default();
    let Some(task) = app.store.get(&crawl.id, task_id).await? else {
        return Ok(done);
    };
    let Some(fetch) = task.fetch.as_ref().filter(|f| f.object_key.is_some()) else {
        return Ok(done);
    };
    let (Some(md5), Some(extractor)) = (fetch.md5.as_deref(), extractors.for_url(&task.url)) else {
        done.skipped += 1;
        return Ok(done);
    };
    if !fetch.content_type.as_deref().is_some_and(is_html_type) {
        done.skipped += 1;
        return Ok(done);
    }
    let Some(stored) = segment::read_page(&app.blobs, fetch).await? else {
        tracing::warn!(url = %task.url, "reextract: the stored body is missing");
        done.missing += 1;
        return Ok(done);
    };
    // Relative links resolve against where the page was fetched from, as in the crawl.
    let fetched_from = fetch.final_url.as_deref().unwrap_or(&task.url);
    let Ok(page_url) = url::Url::parse(fetched_from) else {
        done.skipped += 1;
        return Ok(done);
    };
    let items = extractor.extract(&stored.body, &page_url);
    done.pages += 1;
    done.items += items.items.len() as u64;
    done.invalid += items.items.iter().filter(|i| !i.is_valid()).count() as u64;
    let json = serde_json::to_vec(&items).map_err(|e| {
        BlobError::backend(
            "PutObject",
            &task.url,
            format!("items do not serialise: {e}"),
        )
    })?;
    let key = Layout::items_key_of(&app.layout.html_key(&task.crawl_id, &task.task_id, md5));
    let meta = ObjectMeta {
        content_type: "application/json".to_owned(),
        source_url: task.url.clone(),
        compress: false,
    };
    app.blobs.put(&key, Body::new(json), &meta).await?;
    Ok(done)
}
