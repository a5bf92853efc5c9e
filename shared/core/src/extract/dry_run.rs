//! The extractors' dry run (`trawl extract --config FILE URL`, or `--task ID`): fetches a page
//! the way the crawler would, or reads the body a crawl stored for a task, and shows the items
//! the configuration's extractors take out of it, and which fields failed. Nothing is written.

use super::{Extractors, Item};
use crate::blob::BlobStore;
use crate::discover::ScopeMatcher;
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher, Redirects, is_html_type};
use crate::store::TaskStore;
use serde::Serialize;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::task::Millis;

/// What the extractors made of one page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRun {
    pub url: String,
    /// What the server answered.
    pub answer: String,
    /// The extractor that applies to the URL (None: none does).
    pub extractor: Option<String>,
    pub items: Vec<Item>,
    /// Items with errors, and every failed field (`item` is the item's position).
    pub invalid: usize,
    pub failed: Vec<FailedField>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedField {
    pub item: usize,
    pub field: String,
    pub error: String,
}

/// Fetches `url` under `config` at `now` (following redirects) and extracts its items.
pub async fn dry_run(
    fetcher: &Fetcher,
    config: &CrawlConfig,
    url: &CanonicalUrl,
    now: Millis,
) -> Result<DryRun, String> {
    let extractors = Extractors::new(&config.extract).map_err(|e| e.to_string())?;
    let scope = ScopeMatcher::new(&config.scope).map_err(|e| format!("scope: {e}"))?;
    // No cookie jar: a dry run belongs to no crawl.
    let request = FetchRequest {
        url,
        crawl_id: None,
        config,
        previous: None,
        scope: &scope,
        depth: 0,
        now,
        redirects: Redirects::Follow,
        content_type: None,
        image: false,
        session: None,
        request: None,
    };
    let page = match fetcher.fetch(request).await {
        FetchOutcome::Fetched(page) => page,
        FetchOutcome::Failed(failure) => return Err(failure.message),
        FetchOutcome::NotModified(_) => return Err("304 Not Modified".into()),
        FetchOutcome::Redirected { status, location } => {
            return Err(format!("HTTP {status} to {location}"));
        }
    };
    let html = page.body.as_ref().filter(|_| page.is_html());
    Ok(run_on(
        &extractors,
        url.as_str(),
        format!("HTTP {}", page.status),
        html.map(|body| (&body.bytes()[..], page.final_url.as_url())),
    ))
}

/// Extracts the items of the body the crawl `crawl_id` stored for its task `task_id` (read
/// through the blob store: nothing is fetched), with the extractors of `config`, which need not
/// be the crawl's own: a new definition can be tried on pages already crawled.
pub async fn dry_run_stored<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    config: &CrawlConfig,
    crawl_id: &CrawlId,
    task_id: &TaskId,
) -> Result<DryRun, String> {
    let extractors = Extractors::new(&config.extract).map_err(|e| e.to_string())?;
    let task = store
        .get(crawl_id, task_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("crawl {crawl_id} has no task {task_id}"))?;
    let Some(fetch) = &task.fetch else {
        return Err(format!(
            "task {task_id} ({}) has not been fetched",
            task.url
        ));
    };
    let answer = format!("stored HTTP {}", fetch.http_status);
    let Some(key) = &fetch.object_key else {
        return Ok(run_on(&extractors, &task.url, answer, None));
    };
    let body = crate::blob::segment::read_page(blobs, fetch)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the stored body of task {task_id} is missing: {key}"))?
        .body;
    // Relative links resolve against where the page was fetched from, as in the crawl.
    let fetched_from = fetch.final_url.as_deref().unwrap_or(&task.url);
    let page_url = url::Url::parse(fetched_from).map_err(|e| format!("{fetched_from}: {e}"))?;
    let is_html = fetch.content_type.as_deref().is_some_and(is_html_type);
    Ok(run_on(
        &extractors,
        &task.url,
        answer,
        is_html.then_some((&body[..], &page_url)),
    ))
}

/// The dry run of the page at `url` that answered `answer`, with its HTML body and the URL it
/// came from when it has one.
fn run_on(
    extractors: &Extractors,
    url: &str,
    answer: String,
    html: Option<(&[u8], &url::Url)>,
) -> DryRun {
    let extractor = extractors.for_url(url);
    let mut run = DryRun {
        url: url.to_owned(),
        answer,
        extractor: extractor.map(|e| e.def.name.clone()),
        items: Vec::new(),
        invalid: 0,
        failed: Vec::new(),
    };
    let (Some(extractor), Some((html, page_url))) = (extractor, html) else {
        return run;
    };
    run.items = extractor.extract(html, page_url).items;
    for (i, item) in run.items.iter().enumerate() {
        run.invalid += usize::from(!item.is_valid());
        run.failed.extend(item.errors.iter().map(|e| FailedField {
            item: i,
            field: e.field.clone(),
            error: e.error.clone(),
        }));
    }
    run
}
