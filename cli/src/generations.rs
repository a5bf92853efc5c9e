//! Generations a user drives: the next one now (`recrawl`), forced refetches, a reset, the
//! crawl's configuration, and the checker's dry run.

use crate::admin::resolve_crawl;
use crate::args::{CheckArgs, ConfigCommand, CrawlArgs, CrawlSelector, RewindArgs};
use crate::backend::Backend;
use crate::error::CliError;
use crate::output;
use serde_json::json;
use trawl_core::app::Ports;
use trawl_core::fetch::Fetcher;
use trawl_core::operate::{self, OperateError, Operation, OperationRequest};
use trawl_core::seed::MAX_CHECKPOINT_BYTES;
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::now_ms;

/// Moves the tasks `operation` takes back to pending, then (unless detached) crawls until done.
pub async fn rewind<P: Ports>(
    backend: Backend<P>,
    args: &RewindArgs,
    operation: Operation,
    what: &str,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let Some((selection, how)) = operation.selection(&crawl).map_err(usage)? else {
        return Ok(());
    };
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

/// `trawl reextract`: the crawl's current extractors over its stored pages (no fetch), then
/// (unless detached) the crawl run, which delivers its next generation with their items.
pub async fn reextract<P: Ports>(
    backend: Backend<P>,
    args: &RewindArgs,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let request = OperationRequest {
        crawl_id: crawl.id.clone(),
        operation: Operation::Reextract { cursor: None },
    };
    let done = operate::operate(&backend.app, None, &request, None, now_ms())
        .await
        .map_err(usage)?;
    let made = done.reextracted.unwrap_or_default();
    if json && args.detach {
        output::json(&json!({
            "crawl_id": crawl.id.as_str(),
            "reextracted": made,
            "reopened": done.reopened,
        }));
    } else if !json {
        output::note(format_args!(
            "crawl {}: items made anew from {} stored page(s), no page fetched: {} item(s), {} \
             invalid (extractors version {}); {} page(s) no extractor applies to or not HTML, \
             {} without their stored body{}",
            crawl.id,
            made.pages,
            made.items,
            made.invalid,
            made.version,
            made.skipped,
            made.missing,
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
                "run `trawl crawl --crawl-id {}` to deliver them",
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

/// `trawl pause` (`paused`) and `trawl resume`: the seeder's operations of the same names.
pub async fn pause<P: Ports>(
    backend: &Backend<P>,
    selector: &CrawlSelector,
    paused: bool,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
    let operation = match paused {
        true => Operation::Pause {},
        false => Operation::Resume {},
    };
    let request = OperationRequest {
        crawl_id: crawl.id.clone(),
        operation,
    };
    operate::operate(&backend.app, None, &request, None, now_ms())
        .await
        .map_err(usage)?;
    if json {
        output::json(&json!({"crawl_id": crawl.id.as_str(), "paused": paused}));
    } else if paused {
        output::note(format_args!(
            "crawl {}: paused (turns running end; none starts until `trawl resume`)",
            crawl.id
        ));
    } else if backend.local {
        output::note(format_args!(
            "crawl {}: resumed; `trawl crawl --crawl-id {}` runs it",
            crawl.id, crawl.id
        ));
    } else {
        output::note(format_args!(
            "crawl {}: resumed; the sweeper gives its hosts their turns again (within its lost-turn window: 5 minutes at most)",
            crawl.id
        ));
    }
    Ok(())
}

/// `trawl hosts drop` and `trawl hosts move`: the seeder's `drop_hosts` and `move_hosts`
/// operations.
pub async fn host_operation<P: Ports>(
    backend: &Backend<P>,
    crawl: &Crawl,
    operation: Operation,
    json: bool,
) -> Result<(), CliError> {
    let request = OperationRequest {
        crawl_id: crawl.id.clone(),
        operation,
    };
    // A local crawl's queue is rebuilt from the store by its next run, whose turns end them.
    let queue = (!backend.local).then_some(&backend.queue);
    let done = operate::operate(&backend.app, queue, &request, None, now_ms())
        .await
        .map_err(usage)?;
    if json {
        output::json(&json!({
            "crawl_id": crawl.id.as_str(),
            "dropped": done.dropped,
            "enqueued": done.enqueued,
            "moved": done.moved,
        }));
        return Ok(());
    }
    if let Some(moved) = &done.moved {
        output::note(format_args!(
            "crawl {}: {} task(s) added ({} there already)",
            moved.to, moved.added, moved.already_known
        ));
    }
    let next = match backend.local {
        true => format!("`trawl crawl --crawl-id {}` ends their due tasks", crawl.id),
        false => "their next turns end their due tasks".to_owned(),
    };
    output::note(format_args!(
        "crawl {}: dropped {}; {next} (`ignored`, not fetched)",
        crawl.id,
        done.dropped.join(", ")
    ));
    Ok(())
}

/// An operation's refusal (a bad pattern or URL) as a usage error; the rest as they come.
fn usage(e: OperateError) -> CliError {
    match e {
        OperateError::Invalid(why) => CliError::Usage(why),
        e => CliError::other(e),
    }
}

pub async fn config<P: Ports>(
    backend: &Backend<P>,
    command: &ConfigCommand,
    json: bool,
) -> Result<(), CliError> {
    match command {
        ConfigCommand::Show(selector) => {
            let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
            output::json(&serde_json::to_value(&crawl.config).map_err(CliError::other)?);
        }
        ConfigCommand::Get { crawl_id, .. } => {
            // `checkpoint`, the one key clap lets through.
            let crawl = resolve_crawl(&backend.store, crawl_id.as_deref()).await?;
            if json {
                output::json(
                    &json!({"crawl_id": crawl.id.as_str(), "checkpoint": crawl.checkpoint}),
                );
            } else if let Some(checkpoint) = &crawl.checkpoint {
                output::line(checkpoint);
            }
        }
        ConfigCommand::Set {
            crawl_id,
            key: Some(_),
            value,
            ..
        } => {
            let crawl = resolve_crawl(&backend.store, crawl_id.as_deref()).await?;
            let value = value.as_deref().filter(|v| !v.is_empty());
            if value.is_some_and(|v| v.len() > MAX_CHECKPOINT_BYTES) {
                return Err(CliError::Usage(format!(
                    "a checkpoint is at most {MAX_CHECKPOINT_BYTES} bytes"
                )));
            }
            backend.store.set_checkpoint(&crawl.id, value).await?;
            if json {
                output::json(&json!({"crawl_id": crawl.id.as_str(), "checkpoint": value}));
            } else {
                output::line(format_args!(
                    "crawl {}: checkpoint {}",
                    crawl.id,
                    value.map_or_else(|| "cleared".to_owned(), |v| format!("set to {v}"))
                ));
            }
        }
        ConfigCommand::Set {
            crawl_id,
            file: Some(file),
            ..
        } => {
            let crawl = resolve_crawl(&backend.store, crawl_id.as_deref()).await?;
            let request = OperationRequest {
                crawl_id: crawl.id.clone(),
                operation: Operation::Config {
                    config: Box::new(crate::crawl::read_config(file)?),
                },
            };
            let done = operate::operate(&backend.app, None, &request, None, now_ms())
                .await
                .map_err(usage)?;
            if json {
                output::json(&json!({"crawl_id": crawl.id.as_str(), "changed": done.changed}));
            } else if done.changed.is_empty() {
                output::line(format_args!("crawl {}: configuration unchanged", crawl.id));
            } else {
                output::line(format_args!(
                    "crawl {}: configuration updated ({})",
                    crawl.id,
                    done.changed.join(", ")
                ));
            }
        }
        ConfigCommand::Set { .. } => {
            return Err(CliError::Usage(
                "give --file FILE, or `checkpoint VALUE`".into(),
            ));
        }
    }
    Ok(())
}

/// `trawl check URL`: the dry run, under the crawl's rules (or the defaults).
pub async fn check<P: Ports>(
    backend: &Backend<P>,
    args: &CheckArgs,
    json: bool,
) -> Result<(), CliError> {
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
        output::line(format_args!(
            "  soft 404: recrawl.soft_404[{}] matched, its marker {}{}",
            found.rule,
            found.marker,
            found
                .text
                .as_ref()
                .map_or(String::new(), |t| format!(" saying {t:?}"))
        ));
    }
    if check.missing > 0 {
        output::line(format_args!(
            "  checks in a row finding it missing: {} of {} that make it gone",
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
