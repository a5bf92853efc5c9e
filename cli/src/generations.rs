//! Generations a user drives: the next one now (`recrawl`), forced refetches, a reset, the
//! crawl's configuration, and the checker's dry run.

use crate::admin::resolve_crawl;
use crate::args::{CheckArgs, ConfigCommand, CrawlArgs, RewindArgs};
use crate::backend::Backend;
use crate::error::CliError;
use crate::output;
use regex::Regex;
use serde_json::json;
use trawl_core::blob::BlobStore;
use trawl_core::fetch::Fetcher;
use trawl_core::operate::{self, Rewind, Selection};
use trawl_core::queue::WorkQueue;
use trawl_core::seed::{config_differences, validate_config};
use trawl_core::store::{CrawlStore, HostStore, TaskStore};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::task::now_ms;

/// A regular expression from the command line.
pub fn regex(raw: &str, flag: &str) -> Result<Regex, CliError> {
    Regex::new(raw).map_err(|e| CliError::Usage(format!("{flag}: invalid regular expression: {e}")))
}

/// Moves the selected tasks back to pending, then (unless detached) crawls until done.
pub async fn rewind<S, B, Q>(
    backend: Backend<S, B, Q>,
    args: &RewindArgs,
    selection: Selection,
    how: Rewind,
    what: &str,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore + HostStore,
    B: BlobStore,
    Q: WorkQueue,
{
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    // A local queue lives in the crawl run, which rebuilds it from the store.
    let queue = (!backend.local).then_some(&backend.queue);
    let done = operate::rewind(&backend.store, queue, &crawl, &selection, how, now_ms())
        .await
        .map_err(CliError::other)?;
    if json && args.detach {
        output::json(&json!({
            "crawl_id": crawl.id.as_str(),
            what: done.urls.len(),
            "reopened": done.reopened,
            "enqueued": done.enqueued,
        }));
    } else if !json {
        output::note(format_args!(
            "crawl {}: {} page(s) {what}{}",
            crawl.id,
            done.urls.len(),
            if done.reopened {
                " (its next generation starts)"
            } else {
                ""
            }
        ));
    }
    if args.detach {
        if !json && backend.local {
            output::line(format_args!(
                "run `trawl crawl --crawl-id {}` to fetch them",
                crawl.id
            ));
        }
        return Ok(());
    }
    let resume = CrawlArgs {
        crawl_id: Some(crawl.id.to_string()),
        concurrency: args.concurrency,
        ..CrawlArgs::default()
    };
    crate::crawl::run(backend, resume, None, json).await
}

/// `trawl refetch`: the URLs given, or those matching.
pub fn refetch_selection(
    config: &CrawlConfig,
    urls: &[String],
    matching: Option<&str>,
) -> Result<Selection, CliError> {
    let scope = trawl_core::discover::ScopeMatcher::new(&config.scope)
        .map_err(|e| CliError::other(format!("stored scope: {e}")))?;
    let tasks = match (urls.is_empty(), matching) {
        (true, None) => {
            return Err(CliError::Usage(
                "refetch what? give URLs or --match REGEX".into(),
            ));
        }
        (true, Some(_)) => None,
        (false, _) => Some(
            urls.iter()
                .map(|raw| {
                    CanonicalUrl::parse(raw)
                        .map(|url| scope.normalise(url).task_id())
                        .map_err(|e| CliError::Usage(format!("{raw}: {e}")))
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    Ok(Selection {
        tasks,
        matching: matching.map(|m| regex(m, "--match")).transpose()?,
        ..Selection::settled()
    })
}

pub async fn config<S, B, Q>(
    backend: &Backend<S, B, Q>,
    command: &ConfigCommand,
    json: bool,
) -> Result<(), CliError>
where
    S: CrawlStore,
{
    match command {
        ConfigCommand::Show(selector) => {
            let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
            output::json(&serde_json::to_value(&crawl.config).map_err(CliError::other)?);
        }
        ConfigCommand::Set { crawl_id, file } => {
            let crawl = resolve_crawl(&backend.store, crawl_id.as_deref()).await?;
            let config = crate::crawl::read_config(file)?;
            let problems = validate_config(&config);
            if !problems.is_empty() {
                return Err(CliError::Usage(format!(
                    "{}: {}",
                    file.display(),
                    problems.join("; ")
                )));
            }
            let changed = config_differences(&crawl.config, &config);
            backend
                .store
                .update_config(&crawl.id, &config, now_ms())
                .await?;
            if json {
                output::json(&json!({"crawl_id": crawl.id.as_str(), "changed": changed}));
            } else if changed.is_empty() {
                output::line(format_args!("crawl {}: configuration unchanged", crawl.id));
            } else {
                output::line(format_args!(
                    "crawl {}: configuration updated ({})",
                    crawl.id,
                    changed.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// `trawl check URL`: the dry run, under the crawl's rules (or the defaults).
pub async fn check<S, B, Q>(
    backend: &Backend<S, B, Q>,
    args: &CheckArgs,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
{
    let url = CanonicalUrl::parse(&args.url)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.url)))?;
    let crawl = match (&args.crawl_id, backend.store.list_crawls(None).await?.len()) {
        (None, 0) => None,
        (id, _) => Some(resolve_crawl(&backend.store, id.as_deref()).await?),
    };
    let (crawl_id, mut config) = match &crawl {
        Some(c) => (c.id.clone(), c.config.clone()),
        None => (
            CrawlId::parse("check").map_err(CliError::other)?,
            CrawlConfig::default(),
        ),
    };
    config.fetch.allow_private_networks |= args.allow_private_networks;
    let url = trawl_core::discover::ScopeMatcher::new(&config.scope)
        .map_err(|e| CliError::other(format!("stored scope: {e}")))?
        .normalise(url);
    let known = match &crawl {
        Some(c) => backend.store.get(&c.id, &url.task_id()).await?,
        None => None,
    };
    let fetcher = Fetcher::new(config.user_agent.as_str()).map_err(CliError::other)?;
    let check =
        trawl_core::check::check(&fetcher, &config, &crawl_id, known.as_ref(), &url, now_ms())
            .await
            .map_err(CliError::other)?;
    if json {
        output::json(&serde_json::to_value(&check).map_err(CliError::other)?);
        return Ok(());
    }
    let before = check
        .status_before
        .map_or("not in the crawl".to_owned(), |s| s.to_string());
    output::line(format_args!("{}: {}", check.url, check.answer));
    if let Some(found) = &check.soft_404 {
        output::line(format_args!("  soft 404: {found}"));
    }
    if check.missing > 0 {
        output::line(format_args!(
            "  404s in a row: {} of {} that make it gone",
            check.missing, check.missing_after
        ));
    }
    output::line(format_args!(
        "  would go from {before} to {}{}",
        check.status_after,
        if check.changed {
            " (content changed)"
        } else {
            ""
        }
    ));
    output::line(format_args!(
        "  next fetch: {}",
        check.next_fetch_at.map_or("never".to_owned(), output::time)
    ));
    output::line(format_args!("  (a dry run: nothing was written)"));
    Ok(())
}
