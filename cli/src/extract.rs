//! `trawl extract --config FILE URL`: the extractors' dry run (`trawl_core::extract::dry_run`).

use crate::args::ExtractArgs;
use crate::error::CliError;
use crate::output;
use trawl_core::extract::dry_run;
use trawl_core::fetch::Fetcher;
use trawl_domain::canonical::CanonicalUrl;

pub async fn run(args: &ExtractArgs, json: bool) -> Result<(), CliError> {
    let mut config = crate::crawl::read_config(&args.config)?;
    let problems = trawl_core::seed::validate_config(&config);
    if !problems.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: {}",
            args.config.display(),
            problems.join("; ")
        )));
    }
    config.fetch.allow_private_networks |= args.allow_private_networks;
    let url = CanonicalUrl::parse(&args.url)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.url)))?;
    let url = trawl_core::discover::ScopeMatcher::new(&config.scope)
        .map_err(|e| CliError::Usage(format!("scope: {e}")))?
        .normalise(url);
    let fetcher = Fetcher::new(config.user_agent.as_str()).map_err(CliError::other)?;
    let run = dry_run(&fetcher, &config, &url, trawl_domain::task::now_ms())
        .await
        .map_err(|e| CliError::other(format!("{url}: {e}")))?;
    if json {
        output::json(&serde_json::to_value(&run).map_err(CliError::other)?);
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
