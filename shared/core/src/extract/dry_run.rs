//! The extractors' dry run (`trawl extract --config FILE URL`): fetches a page the way the
//! crawler would and shows the items the crawl's extractors take out of it, and which fields
//! failed. Nothing is written.

use super::{Extractors, Item};
use crate::discover::ScopeMatcher;
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher, Redirects};
use serde::Serialize;
use trawl_domain::canonical::CanonicalUrl;
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
    let extractor = extractors.for_url(url.as_str());
    let mut run = DryRun {
        url: url.as_str().to_owned(),
        answer: String::new(),
        extractor: extractor.map(|e| e.def.name.clone()),
        items: Vec::new(),
        invalid: 0,
        failed: Vec::new(),
    };
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
    };
    let page = match fetcher.fetch(request).await {
        FetchOutcome::Fetched(page) => page,
        FetchOutcome::Failed(failure) => return Err(failure.message),
        FetchOutcome::NotModified(_) => return Err("304 Not Modified".into()),
        FetchOutcome::Redirected { status, location } => {
            return Err(format!("HTTP {status} to {location}"));
        }
    };
    run.answer = format!("HTTP {}", page.status);
    let (Some(extractor), Some(body)) = (extractor, page.body.as_ref().filter(|_| page.is_html()))
    else {
        return Ok(run);
    };
    run.items = extractor
        .extract(body.bytes(), page.final_url.as_url())
        .items;
    for (i, item) in run.items.iter().enumerate() {
        run.invalid += usize::from(!item.is_valid());
        run.failed.extend(item.errors.iter().map(|e| FailedField {
            item: i,
            field: e.field.clone(),
            error: e.error.clone(),
        }));
    }
    Ok(run)
}
