//! `trawl crawl --dry-run`: a development run that saves nothing. The run this command would
//! make (its seeds and settings, or, given only `--crawl-id`, an existing crawl's settings and
//! pending URLs, read without writing) runs in memory for at most `--max-fetches` fetches (10 by
//! default); each page's outcome is printed and nothing is delivered or stored.

use crate::args::{BackendKind, CrawlArgs, Global};
use crate::backend::{self, LocalAccess};
use crate::crawl::{Plan, run};
use crate::error::CliError;
use crate::output;
use serde_json::json;
use trawl_core::app::Store;
use trawl_core::store::{Part, TaskQuery};
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::task::Status;

/// Fetches of a dry run unless `--max-fetches` says otherwise.
pub const FETCHES: u64 = 10;
/// URLs found and not fetched that the report lists (the rest are counted).
const FOUND_LISTED: usize = 20;

/// An existing crawl as a dry run starts from: its settings, and up to `limit` pending URLs.
pub struct StoredCrawl {
    pub config: CrawlConfig,
    pub pending: Vec<String>,
}

pub async fn dry_run(mut args: CrawlArgs, plan: Plan, global: &Global) -> Result<(), CliError> {
    let fetches = *args.max_fetches.get_or_insert(FETCHES);
    let plan = match plan.seeded_here(&args) {
        true => plan,
        false => match stored_crawl(global, plan.crawl_id(), fetches).await? {
            Some(stored) => plan.with_stored(stored),
            None => {
                return Err(CliError::Usage(format!(
                    "nothing to try: crawl {} does not exist here; give seed URLs, or the \
                     --crawl-id of an existing crawl",
                    plan.crawl_id()
                )));
            }
        },
    };
    run(backend::memory(), args, Some(plan), global.json).await
}

/// The crawl `id` of the backend the command names, read only (None: there is none).
async fn stored_crawl(
    global: &Global,
    id: &CrawlId,
    limit: u64,
) -> Result<Option<StoredCrawl>, CliError> {
    match global.backend {
        BackendKind::Local => match backend::local(&global.data_dir, LocalAccess::Read) {
            Ok(local) => read_stored(&local.store, id, limit).await,
            Err(CliError::NoCrawlHere(_)) => Ok(None),
            Err(e) => Err(e),
        },
        #[cfg(feature = "aws")]
        BackendKind::Aws => {
            let aws = backend::aws(global.stack.as_deref()).await?;
            read_stored(&aws.store, id, limit).await
        }
        #[cfg(not(feature = "aws"))]
        BackendKind::Aws => Err(CliError::NoAwsBackend),
    }
}

async fn read_stored<S: Store>(
    store: &S,
    id: &CrawlId,
    limit: u64,
) -> Result<Option<StoredCrawl>, CliError> {
    let Some(crawl) = store.get_crawl(id).await? else {
        return Ok(None);
    };
    let page = store
        .query(&TaskQuery {
            crawl_id: id.clone(),
            status: Status::Pending,
            updated_before: None,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            cursor: None,
            part: Part::WHOLE,
        })
        .await?;
    Ok(Some(StoredCrawl {
        config: crawl.config,
        pending: page.tasks.into_iter().map(|t| t.url).collect(),
    }))
}

/// What the dry run did, from the in-memory store it ran on: each page fetched (or tried) with
/// its outcome, and the URLs it found and did not fetch.
pub async fn report<S: Store>(store: &S, crawl_id: &CrawlId, json: bool) -> Result<(), CliError> {
    let mut fetched = Vec::new();
    let mut found = Vec::new();
    for status in Status::ALL {
        let page = store
            .query(&TaskQuery {
                crawl_id: crawl_id.clone(),
                status,
                updated_before: None,
                limit: u32::MAX,
                cursor: None,
                part: Part::WHOLE,
            })
            .await?;
        for summary in page.tasks {
            let Some(task) = store.get(crawl_id, &summary.task_id).await? else {
                continue;
            };
            if status == Status::Pending && task.fetch.is_none() && task.errors.is_empty() {
                found.push(task.url);
                continue;
            }
            let fetch = task.fetch.as_ref();
            fetched.push(json!({
                "url": task.url,
                "status": status.name(),
                "http_status": fetch.map(|f| f.http_status),
                "bytes": fetch.map(|f| f.content_length),
                "error": task.errors.last().map(|e| e.message.clone()),
            }));
        }
    }
    if json {
        output::json(&json!({
            "crawl_id": crawl_id.as_str(),
            "dry_run": true,
            "fetched": fetched,
            "found_not_fetched": found.len(),
            "found": found.iter().take(FOUND_LISTED).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    let cell = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = fetched
        .iter()
        .map(|page| {
            ["status", "http_status", "bytes", "url", "error"]
                .iter()
                .map(|k| cell(&page[*k]))
                .collect()
        })
        .collect();
    output::table(&["status", "http", "bytes", "url", "error"], &rows);
    for url in found.iter().take(FOUND_LISTED) {
        output::line(format_args!("found, not fetched: {url}"));
    }
    output::line(format_args!(
        "dry run: {} page(s) tried, {} URL(s) found and not fetched; nothing was stored",
        fetched.len(),
        found.len()
    ));
    Ok(())
}
