//! `trawl extract --config FILE URL` and `trawl extract --task ID`: the extractors' dry run
//! (`trawl_core::extract::dry_run`, `dry_run_stored`).

use crate::args::ExtractArgs;
use crate::backend::Backend;
use crate::error::CliError;
use crate::output;
use std::path::Path;
use trawl_core::app::Ports;
use trawl_core::extract::{DryRun, dry_run, dry_run_stored};
use trawl_core::fetch::Fetcher;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::CrawlConfig;

/// The dry run of a URL: fetched now, with the configuration in `--config`.
pub async fn run(args: &ExtractArgs, json: bool) -> Result<(), CliError> {
    let (Some(raw_url), Some(path)) = (&args.url, &args.config) else {
        return Err(CliError::Usage(
            "give a URL and --config FILE, or --task ID".into(),
        ));
    };
    let mut config = checked_config(path)?;
    config.fetch.allow_private_networks |= args.allow_private_networks;
    let url =
        CanonicalUrl::parse(raw_url).map_err(|e| CliError::Usage(format!("{raw_url}: {e}")))?;
    let url = trawl_core::discover::ScopeMatcher::new(&config.scope)
        .map_err(|e| CliError::Usage(format!("scope: {e}")))?
        .normalise(url);
    let fetcher = Fetcher::new(config.user_agent.as_str()).map_err(CliError::other)?;
    let run = dry_run(&fetcher, &config, &url, trawl_domain::task::now_ms())
        .await
        .map_err(|e| CliError::other(format!("{url}: {e}")))?;
    print(&run, json)
}

/// The dry run of the page a crawl stored for `--task`: nothing is fetched; the extractors are
/// those of `--config`, else the crawl's own.
pub async fn run_stored<P: Ports>(
    backend: &Backend<P>,
    args: &ExtractArgs,
    json: bool,
) -> Result<(), CliError> {
    let Some(raw_task) = &args.task else {
        return run(args, json).await;
    };
    let crawl = crate::admin::resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let config = match &args.config {
        Some(path) => checked_config(path)?,
        None => crawl.config.clone(),
    };
    let task_id = crate::admin::task_id_of(raw_task)?;
    let run = dry_run_stored(&backend.store, &backend.blobs, &config, &crawl.id, &task_id)
        .await
        .map_err(|e| CliError::other(format!("{raw_task}: {e}")))?;
    print(&run, json)
}

/// The configuration in the file at `path`, refused with its problems.
fn checked_config(path: &Path) -> Result<CrawlConfig, CliError> {
    let config = crate::crawl::read_config(path)?;
    let problems = trawl_core::seed::validate_config(&config);
    if !problems.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: {}",
            path.display(),
            problems.join("; ")
        )));
    }
    Ok(config)
}

fn print(run: &DryRun, json: bool) -> Result<(), CliError> {
    if json {
        output::json(&serde_json::to_value(run).map_err(CliError::other)?);
        return Ok(());
    }
    let Some(extractor) = &run.extractor else {
        output::line(format_args!(
            "{}: {}; no extractor applies",
            run.url, run.answer
        ));
        return Ok(());
    };
    output::line(format_args!(
        "{}: {}; extractor {extractor}: {} items, {} invalid",
        run.url,
        run.answer,
        run.items.len(),
        run.invalid
    ));
    for item in &run.items {
        output::line(format_args!(
            "{}",
            serde_json::to_string(&item.fields).map_err(CliError::other)?
        ));
    }
    for failed in &run.failed {
        output::line(format_args!(
            "  item {} field {}: {}",
            failed.item, failed.field, failed.error
        ));
    }
    output::line(format_args!("  (a dry run: nothing was written)"));
    Ok(())
}
