//! `trawl crawl`: seed, crawl with in-process workers, sweep, deliver — the very code the Lambda
//! functions run. Re-running the same command resumes: known URLs are never fetched again.

use crate::admin::deliver;
use crate::args::{CrawlArgs, ProxyRotationArg, RecrawlArgs, RequestArgs};
use crate::backend::Backend;
use crate::error::CliError;
use crate::given_up::GivenUp;
use crate::output;
use crate::progress::Progress;
use serde_json::json;
use std::collections::BTreeSet;
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use trawl_core::app::{Ports, Store};
use trawl_core::backoff::{Backoff, persist};
use trawl_core::crawler::Crawler;
use trawl_core::deliver::{DeliveryReport, ItemsSummary};
use trawl_core::fetch::{EnvSecrets, Fetcher, cookie_file};
use trawl_core::queue::WorkQueue;
use trawl_core::queue::local::MAX_RECEIVES;
use trawl_core::runner::{
    RunEnd, RunLimits, RunStats, StopReason, rebuild_local_queue, run_crawl_within,
};
use trawl_core::seed::{
    MAX_CHECKPOINT_BYTES, ManifestError, ManifestSource, OpenManifest, SeedBudget, SeedDefaults,
    SeedError, SeedRequest, SeedSource, Seeder, seed_entry, validate_config,
};
use trawl_core::store::{StatusCounts, TaskRecords};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::chain::TaskRequest;
use trawl_domain::crawl::{
    BasicCredentials, Crawl, CrawlConfig, CrawlState, FetchLimits, HostAuth, JarScope, ProxyEntry,
    ProxyRotation, RecrawlPolicy, SecretRef, StorageLayout,
};
use trawl_domain::estimate::Estimator;
use trawl_domain::paging::ChainEnd;
use trawl_domain::task::{Priority, Status, now_ms};

/// Seed URLs per seed request (bounded memory for large seed files).
const SEED_CHUNK: usize = 10_000;

/// The CLI reads seed files itself: S3 manifests are for the seeder Lambda.
struct NoManifests;

impl ManifestSource for NoManifests {
    async fn open(
        &self,
        bucket: &str,
        key: &str,
        _: u64,
        _: Option<&str>,
    ) -> Result<OpenManifest, ManifestError> {
        Err(ManifestError::Unreadable {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            message: "the CLI reads seed files with --seeds-file".into(),
        })
    }
}

/// Longest line a seeds file may have: far above the longest URL trawl accepts
/// (`MAX_URL_BYTES`), low enough that a file without line ends (a binary given by mistake) is
/// not read into memory whole.
const MAX_SEED_LINE: usize = 64 * 1024;

/// A seed URL as given: on the command line, or on a line of the seeds file.
struct Seed {
    url: String,
    /// 1-based line number in the seeds file (None: from the command line).
    line: Option<usize>,
}

/// The seeds file's lines with a URL, numbered from 1 (blank lines and `#` comments skipped; a
/// byte-order mark and CRLF line ends are fine). A line that is too long or not UTF-8 is an
/// error naming it.
struct SeedLines {
    reader: std::io::BufReader<std::fs::File>,
    shown: String,
    line: usize,
    failed: bool,
}

fn seed_file_lines(path: &std::path::Path) -> Result<SeedLines, CliError> {
    let file = std::fs::File::open(path).map_err(|e| {
        CliError::Usage(format!(
            "cannot read the seeds file {}: {e}; check the --seeds-file path",
            path.display()
        ))
    })?;
    Ok(SeedLines {
        reader: std::io::BufReader::new(file),
        shown: path.display().to_string(),
        line: 0,
        failed: false,
    })
}

impl SeedLines {
    fn bad_line(&self, reason: impl std::fmt::Display) -> CliError {
        bad_seed_line(&self.shown, self.line, reason)
    }

    /// The next line, trimmed; None at the end of the file.
    fn read_line(&mut self) -> Result<Option<String>, CliError> {
        let mut buf = Vec::new();
        let read = std::io::Read::take(&mut self.reader, MAX_SEED_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| {
                CliError::Usage(format!(
                    "cannot read the seeds file {}: {e}; check the --seeds-file path",
                    self.shown
                ))
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.line += 1;
        if buf.len() > MAX_SEED_LINE && buf.last() != Some(&b'\n') {
            return Err(self.bad_line(format!("longer than {MAX_SEED_LINE} bytes")));
        }
        let text = std::str::from_utf8(&buf).map_err(|_| self.bad_line("not UTF-8 text"))?;
        Ok(Some(text.trim_start_matches('\u{feff}').trim().to_owned()))
    }
}

impl Iterator for SeedLines {
    type Item = Result<Seed, CliError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed {
            match self.read_line() {
                Ok(None) => return None,
                Ok(Some(text)) if text.is_empty() || text.starts_with('#') => {}
                Ok(Some(url)) => {
                    return Some(Ok(Seed {
                        url,
                        line: Some(self.line),
                    }));
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// A seeds file's line that is not a seed URL: where it is, why, and what to do.
fn bad_seed_line(file: &str, line: usize, reason: impl std::fmt::Display) -> CliError {
    CliError::Usage(format!(
        "bad seed in {file} line {line}: {reason}; fix or remove that line (blank lines and # \
         comments are skipped)"
    ))
}

/// The seeds, command line first: each URL with the line it came from.
fn seeds(args: &CrawlArgs) -> Result<impl Iterator<Item = Result<Seed, CliError>>, CliError> {
    let inline = args.urls.iter().map(|url| {
        Ok(Seed {
            url: url.clone(),
            line: None,
        })
    });
    let from_file = match &args.seeds_file {
        Some(path) => Some(seed_file_lines(path)?),
        None => None,
    };
    Ok(inline
        .collect::<Vec<_>>()
        .into_iter()
        .chain(from_file.into_iter().flatten()))
}

/// A crawl id from a host: `example.com`, `127.0.0.1-8080`.
fn crawl_id_from(url: &CanonicalUrl) -> Result<CrawlId, CliError> {
    let host = url
        .host()
        .trim_matches(|c| c == '[' || c == ']')
        .replace(':', "-");
    let raw = match url.as_url().port() {
        Some(port) => format!("{host}-{port}"),
        None => host,
    };
    CrawlId::parse(&raw).map_err(|e| CliError::Usage(format!("{e}; pass --crawl-id")))
}

/// The crawl's configuration: `--config FILE` (or the defaults), then the flags given; the
/// seeds' hosts join the allowed domains.
fn config_from(args: &CrawlArgs, hosts: &BTreeSet<String>) -> Result<CrawlConfig, CliError> {
    let mut config = match &args.config {
        Some(path) => read_config(path)?,
        None => CrawlConfig::default(),
    };
    let domains = &mut config.scope.allowed_domains;
    for domain in hosts.iter().chain(&args.allow_domain) {
        if !domains.contains(domain) {
            domains.push(domain.clone());
        }
    }
    if args.max_pages.is_some() {
        config.scope.max_pages = args.max_pages;
    }
    if args.max_depth.is_some() {
        config.scope.max_depth = args.max_depth;
    }
    if let Some(per_host) = args.per_host {
        config.politeness.per_host = per_host;
    }
    config.fetch.allow_private_networks |= args.allow_private_networks;
    config
        .fetch
        .guard_exempt
        .extend(args.guard_exempt.iter().cloned());
    config.storage.compress_bodies |= args.compress_bodies;
    if let Some(layout) = args.layout {
        config.storage.layout = layout;
    }
    if args.deliver_pages.is_some() {
        config.delivery.pages = args.deliver_pages;
    }
    config.delivery.purge_after |= args.purge_after_delivery;
    if args.keep_deliveries.is_some() {
        config.delivery.keep_generations = args.keep_deliveries;
    }
    if let Some(percent) = args.compact_below {
        config.storage.compact_below_percent = percent;
    }
    config.scope.inherit_data |= args.inherit_data;
    config.analysis.page |= args.analyse_pages;
    config.analysis.text |= args.analyse_text;
    if args.auto_checkpoint.is_some() {
        config.auto_checkpoint = args.auto_checkpoint;
    }
    if let Some(ua) = &args.user_agent {
        config.user_agent = ua.clone();
    }
    apply_request_args(&args.request, &mut config.fetch)?;
    apply_recrawl_args(&args.recrawl, &mut config.recrawl);
    Ok(config)
}

/// Whether the configuration file at `path` sets `storage.layout` (read by `read_config`
/// before: a file that does not read names nothing).
fn names_layout(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|config| config.pointer("/storage/layout").is_some())
}

/// A crawl configuration from a JSON file (`trawl config show` prints one).
pub fn read_config(path: &std::path::Path) -> Result<CrawlConfig, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{} is not a crawl configuration: {e} (`trawl config show` prints one)",
            path.display()
        ))
    })
}

/// The recrawl flags given, over the configuration's.
fn apply_recrawl_args(args: &RecrawlArgs, recrawl: &mut RecrawlPolicy) {
    if let Some(every) = args.recrawl_every {
        recrawl.interval_ms = Some(every);
    }
    if args.adaptive || args.recrawl_min.is_some() || args.recrawl_max.is_some() {
        let mut schedule = recrawl.schedule.unwrap_or_default();
        schedule.min_ms = args.recrawl_min.unwrap_or(schedule.min_ms);
        schedule.max_ms = args.recrawl_max.unwrap_or(schedule.max_ms);
        recrawl.schedule = Some(schedule);
    }
    if let Some(budget_per_day) = args.budget_per_day {
        recrawl.estimator = Some(Estimator {
            budget_per_day,
            ..recrawl.estimator.unwrap_or_default()
        });
    }
    if let Some(n) = args.missing_after {
        recrawl.missing_after = n;
    }
    if args.missing_recheck.is_some() {
        recrawl.missing_recheck_ms = args.missing_recheck;
    }
}

/// The request flags as `fetch` settings; credentials by variable name only.
/// Each flag given replaces the configuration's setting; those not given leave it.
fn apply_request_args(args: &RequestArgs, fetch: &mut FetchLimits) -> Result<(), CliError> {
    if !args.store_content_type.is_empty() {
        fetch.store_content_types = args.store_content_type.clone();
    }
    fetch.headers.extend(args.header.iter().cloned());
    if args.accept_language.is_some() {
        fetch.accept_language = args.accept_language.clone();
    }
    let bearer = args.bearer_env.iter().map(|b| HostAuth {
        host: b.host.clone(),
        bearer: Some(SecretRef::Env(b.token_var.clone())),
        basic: None,
    });
    let basic = args.basic_env.iter().map(|b| HostAuth {
        host: b.host.clone(),
        bearer: None,
        basic: Some(BasicCredentials {
            username: SecretRef::Env(b.username_var.clone()),
            password: SecretRef::Env(b.password_var.clone()),
        }),
    });
    fetch.auth.extend(bearer.chain(basic));
    fetch.cookies.jar |= args.keep_cookies || args.cookies_per_host;
    if args.cookies_per_host {
        fetch.cookies.scope = JarScope::Host;
    }
    if let Some(path) = &args.cookies {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        let initial = cookie_file::parse(&text, now_ms())
            .map_err(|e| CliError::Usage(format!("--cookies {}: {e}", path.display())))?;
        for (host, cookies) in initial {
            fetch
                .cookies
                .initial
                .entry(host)
                .or_default()
                .extend(cookies);
        }
    }
    fetch.proxies.extend(args.proxy.iter().map(ProxyEntry::new));
    for credentials in &args.proxy_basic_env {
        let authority = credentials.host.to_ascii_lowercase();
        let mut matched = fetch
            .proxies
            .iter_mut()
            .filter(|p| p.url.split_once("://").is_some_and(|(_, a)| a == authority))
            .peekable();
        if matched.peek().is_none() {
            return Err(CliError::Usage(format!(
                "--proxy-basic-env {}: no --proxy at {authority}; give the proxy's HOST:PORT",
                credentials.host
            )));
        }
        for proxy in matched {
            proxy.username = Some(SecretRef::Env(credentials.username_var.clone()));
            proxy.password = Some(SecretRef::Env(credentials.password_var.clone()));
        }
    }
    if let Some(rotation) = args.proxy_rotation {
        fetch.proxy_rotation = match rotation {
            ProxyRotationArg::PerRequest => ProxyRotation::PerRequest,
            ProxyRotationArg::Sticky => ProxyRotation::Sticky,
        };
    }
    Ok(())
}

/// What `trawl crawl` was asked for, checked before the data directory is created or opened:
/// a bad seed or configuration changes nothing, not even an empty `trawl.db` left behind.
pub struct Plan {
    crawl_id: CrawlId,
    /// The seed URLs as given, command line first, then the seeds file's: the file is read once,
    /// here, and seeded from this.
    seeds: Vec<String>,
    /// `--config` and the flags, checked as the seeder checks them.
    config: CrawlConfig,
    /// Whether `--layout` or the configuration file chose the layout: otherwise a new crawl
    /// on the local backend gets the embedded default (`EMBEDDED_LAYOUT`).
    layout_given: bool,
}

/// The layout of a new local crawl when none is asked for: segments, measured faster and
/// cheaper in CPU than one file per page on disk (README, "Bodies: objects or segments").
pub const EMBEDDED_LAYOUT: StorageLayout = StorageLayout::Segments;

impl Plan {
    /// Checks every seed (the seeds file is read once here, to the end) and the configuration.
    pub fn of(args: &CrawlArgs) -> Result<Self, CliError> {
        let mut first: Option<CanonicalUrl> = None;
        let mut hosts = BTreeSet::new();
        let mut seeds_given = Vec::new();
        for seed in seeds(args)? {
            let seed = seed?;
            let bad = |e: String| match (seed.line, &args.seeds_file) {
                (Some(line), Some(path)) => bad_seed_line(&path.display().to_string(), line, e),
                _ => CliError::Usage(format!("invalid seed URL: {e}; give absolute http(s) URLs")),
            };
            let entry = seed_entry(&seed.url).map_err(bad)?;
            let url = CanonicalUrl::parse(&entry.url).map_err(|e| bad(e.to_string()))?;
            Priority::of_data(entry.data.as_ref())
                .map_err(|e| bad(format!("{}: {e}", Priority::KEY)))?;
            TaskRequest::of_data(entry.data.as_ref()).map_err(|e| bad(e.to_string()))?;
            hosts.insert(url.host().to_owned());
            first.get_or_insert(url);
            seeds_given.push(seed.url);
        }
        for raw in &args.sitemap {
            let url = CanonicalUrl::parse(raw).map_err(|e| {
                CliError::Usage(format!(
                    "invalid sitemap URL: {e}; give absolute http(s) URLs"
                ))
            })?;
            hosts.insert(url.host().to_owned());
            first.get_or_insert(url);
        }
        // Templates were checked as they were parsed: their first page is a URL.
        for url in args.pages.iter().filter_map(|t| t.page(0, None)) {
            if let Ok(url) = CanonicalUrl::parse(&url) {
                hosts.insert(url.host().to_owned());
                first.get_or_insert(url);
            }
        }
        let crawl_id = match (&args.crawl_id, &first, &args.seeds_file) {
            (Some(raw), _, _) => CrawlId::parse(raw).map_err(|e| CliError::Usage(e.to_string()))?,
            (None, Some(url), _) => crawl_id_from(url)?,
            (None, None, Some(path)) => {
                return Err(CliError::Usage(format!(
                    "the seeds file {} has no URL (blank lines and # comments are skipped): add \
                     URLs, one per line, or pass --crawl-id ID to resume",
                    path.display()
                )));
            }
            (None, None, None) => {
                return Err(CliError::Usage(
                    "nothing to crawl: give seed URLs, --seeds-file FILE, --sitemap URL or --pages TEMPLATE (or --crawl-id ID to resume)".into(),
                ));
            }
        };
        if args
            .checkpoint
            .as_ref()
            .is_some_and(|c| c.len() > MAX_CHECKPOINT_BYTES)
        {
            return Err(CliError::Usage(format!(
                "--checkpoint is longer than {MAX_CHECKPOINT_BYTES} bytes"
            )));
        }
        let config = config_from(args, &hosts)?;
        let problems = validate_config(&config);
        if !problems.is_empty() {
            return Err(SeedError::InvalidRequest(problems).into());
        }
        let layout_given =
            args.layout.is_some() || args.config.as_deref().is_some_and(names_layout);
        Ok(Self {
            crawl_id,
            seeds: seeds_given,
            config,
            layout_given,
        })
    }

    /// The plan of a crawl run in this process, which reads secrets from its own environment
    /// only: a secret it cannot read is refused now, naming it, rather than failing every page
    /// of its host (as `--bearer-env` and the other flags are refused when parsed).
    pub fn runs_here(self) -> Result<Self, CliError> {
        for reference in self.config.fetch.secret_refs() {
            match reference {
                SecretRef::Ssm(name) => {
                    return Err(CliError::Usage(format!(
                        "the crawl names the Parameter Store secret {name:?}, which only the \
                         crawler function on AWS reads: name an environment variable \
                         ({{\"env\": NAME}}) for a crawl run here, or hand the crawl to the \
                         functions with `trawl submit`"
                    )));
                }
                SecretRef::Env(name) => {
                    if let Err(e) = EnvSecrets::read(reference) {
                        return Err(CliError::Usage(format!(
                            "the crawl's configuration names the environment variable {name}, \
                             which is {}: set it, or name another in --config",
                            e.reason
                        )));
                    }
                }
            }
        }
        Ok(self)
    }

    /// The plan of a crawl handed to the deployed functions, which run no bounded run: the
    /// per-run limits are refused rather than ignored.
    pub fn submitted(self, args: &CrawlArgs) -> Result<Self, CliError> {
        if args.max_fetches.is_some() || args.max_time.is_some() {
            return Err(CliError::Usage(
                "--max-fetches and --max-time limit a run of `trawl crawl`; the deployed                  functions crawl until done (drop them, or crawl here with `trawl crawl`)"
                    .into(),
            ));
        }
        Ok(self)
    }

    pub fn crawl_id(&self) -> &CrawlId {
        &self.crawl_id
    }

    /// The seed requests: the seed URLs in chunks of [`SEED_CHUNK`], then the sitemaps, then
    /// the pagination templates; the last one carries the checkpoint to store (alone, in a
    /// request without URLs, when there is no source).
    /// Whether this command names what to crawl (seeds, sitemaps or page templates).
    pub fn seeded_here(&self, args: &CrawlArgs) -> bool {
        !self.seeds.is_empty() || !args.sitemap.is_empty() || !args.pages.is_empty()
    }

    /// The plan of a dry run of an existing crawl: its settings, its pending URLs as seeds.
    pub fn with_stored(self, stored: crate::dry_run::StoredCrawl) -> Self {
        Self {
            seeds: stored.pending,
            config: stored.config,
            layout_given: true,
            ..self
        }
    }

    pub fn requests(self, args: &CrawlArgs) -> Vec<SeedRequest> {
        let mut sources = Vec::new();
        let mut urls = self.seeds.into_iter().peekable();
        while urls.peek().is_some() {
            sources.push(SeedSource::Urls(urls.by_ref().take(SEED_CHUNK).collect()));
        }
        if !args.sitemap.is_empty() {
            sources.push(SeedSource::Sitemaps(args.sitemap.clone()));
        }
        if !args.pages.is_empty() {
            sources.push(SeedSource::Pagination(args.pages.clone()));
        }
        let mut requests: Vec<SeedRequest> = sources
            .into_iter()
            .map(|source| SeedRequest {
                crawl_id: self.crawl_id.clone(),
                config: Some(self.config.clone()),
                source,
                cursor: None,
                update_config: args.update_config,
                checkpoint: None,
                priority: args.priority,
            })
            .collect();
        if let Some(checkpoint) = &args.checkpoint {
            match requests.last_mut() {
                Some(last) => last.checkpoint = Some(checkpoint.clone()),
                // Only the checkpoint: the crawl keeps its configuration.
                None => requests.push(SeedRequest {
                    crawl_id: self.crawl_id,
                    config: None,
                    source: SeedSource::Urls(Vec::new()),
                    cursor: None,
                    update_config: false,
                    checkpoint: Some(checkpoint.clone()),
                    priority: None,
                }),
            }
        }
        requests
    }
}

/// Crawls as `plan` (checked beforehand with [`Plan::of`] and [`Plan::runs_here`]; None:
/// checked here) says: seed, crawl
/// until done or stopped, deliver if completed, report.
pub async fn run<P: Ports>(
    backend: Backend<P>,
    args: CrawlArgs,
    plan: Option<Plan>,
    json: bool,
) -> Result<(), CliError> {
    let started = Instant::now();
    let plan = match plan {
        Some(plan) => plan,
        None => Plan::of(&args)?.runs_here()?,
    };
    let mut config = plan.config.clone();
    if backend.local && !plan.layout_given {
        config.storage.layout = EMBEDDED_LAYOUT;
    }
    let crawl_id = plan.crawl_id.clone();
    let fetcher = Arc::new(Fetcher::new(config.user_agent.as_str()).map_err(CliError::other)?);

    let stats = RunStats::default();
    let retries = &stats.backend_retries;
    let seeder = Seeder::new(
        backend.app.clone(),
        fetcher.clone(),
        Arc::new(NoManifests),
        SeedDefaults::default(),
    );
    let requests = Plan { config, ..plan }.requests(&args);
    let (accepted, readmitted) = seed(&seeder, requests, json, retries).await?;
    let crawl = persist(
        seeder.clock.as_ref(),
        "open the crawl",
        &Backoff::RUN,
        retries,
        || open_crawl(&backend.store, &backend.queue, &crawl_id, backend.local),
    )
    .await?;
    if !json {
        let state = if crawl.state == CrawlState::Completed {
            "completed"
        } else {
            "running"
        };
        let readmitted = match readmitted {
            0 => String::new(),
            n => format!(", {n} refused task(s) re-admitted by the updated config"),
        };
        output::note(format_args!(
            "crawl {crawl_id} ({state}): {accepted} new seed(s){readmitted}; data in {}",
            backend.uri_base
        ));
    }

    if crawl.config.paused {
        // Nothing of a paused crawl runs (a cron line's run included): said, and done.
        if json {
            output::json(&json!({"crawl_id": crawl_id.as_str(), "paused": true}));
        } else {
            output::note(format_args!(
                "crawl {crawl_id} is paused: nothing fetched (`trawl resume --crawl-id {crawl_id}` goes on)"
            ));
        }
        return Ok(());
    }
    let crawler = Crawler::new(backend.app.clone(), fetcher, args.concurrency);
    let limits = RunLimits {
        max_fetches: args.max_fetches,
        max_time: args.max_time,
    };
    let end = crawl_until_done(
        &crawler,
        &crawl_id,
        args.concurrency,
        limits,
        &stats,
        started,
        json,
    )
    .await?;
    if backend.dry_run {
        return crate::dry_run::report(crawler.store(), &crawl_id, json).await;
    }
    let tally = || async {
        let counts = persist(
            crawler.clock(),
            "count the tasks",
            &Backoff::RUN,
            retries,
            || crawler.store().counts(&crawl_id),
        )
        .await?;
        let given_up = persist(
            crawler.clock(),
            "read the given-up tasks",
            &Backoff::RUN,
            retries,
            || GivenUp::read(crawler.store(), &crawl_id, &counts),
        )
        .await?;
        Ok::<_, CliError>((counts, given_up))
    };
    // Counted after the delivery, which heals a store's kept counts from the tasks; before it
    // for a crawl purged once delivered (`delivery.purge_after`): no task is left after.
    let before = match crawl.config.delivery.purge_after {
        true => Some(tally().await?),
        false => None,
    };
    let delivery = match end {
        RunEnd::Completed { .. } => Some(deliver(&backend, &crawl_id).await?),
        RunEnd::Stopped(_) => None,
    };
    let (counts, given_up) = match before {
        Some(tallied) => tallied,
        None => tally().await?,
    };
    let outcome = Outcome {
        crawl_id: &crawl_id,
        counts: &counts,
        given_up: &given_up,
        stats: &stats,
        elapsed: started.elapsed().as_secs_f64(),
        delivery: delivery.as_ref(),
        stopped: match end {
            RunEnd::Completed { .. } => None,
            RunEnd::Stopped(reason) => Some(reason),
        },
    };
    if json {
        outcome.print_json();
    } else {
        outcome.print_text();
    }
    match end {
        RunEnd::Completed { .. } => given_up.check_fetched(&crawl_id, &counts),
        // A limit reached is the run asked for: exit 0, the output says it stopped.
        RunEnd::Stopped(StopReason::MaxFetches(_) | StopReason::MaxTime(_)) => Ok(()),
        RunEnd::Stopped(StopReason::Asked) => Err(CliError::Interrupted),
    }
}

/// Seeds the crawl with `requests` (idempotent: a re-run adds nothing it already has), following
/// each request's cursor; returns how many seeds were new and how many refused tasks an updated
/// config re-admitted. Rejected seeds are warned about.
async fn seed<P: Ports>(
    seeder: &Seeder<P>,
    requests: Vec<SeedRequest>,
    json: bool,
    retries: &AtomicU64,
) -> Result<(u64, u64), CliError> {
    let (mut accepted, mut readmitted) = (0, 0);
    for mut request in requests {
        for _ in 0..100_000 {
            // Seed requests are idempotent: a transient error is waited out and the same
            // request sent again.
            let response = persist(
                seeder.clock.as_ref(),
                "seed",
                &Backoff::RUN,
                retries,
                || seeder.seed(request.clone(), SeedBudget::default(), now_ms()),
            )
            .await?;
            accepted += response.accepted;
            readmitted += response.readmitted;
            if let Some(rejection) = response.rejections.first() {
                tracing::warn!(rejected = response.rejected, first = ?rejection, "some seeds were rejected");
                if !json {
                    output::note(format_args!(
                        "warning: {} seed(s) rejected, e.g. {}: {}",
                        response.rejected, rejection.input, rejection.reason
                    ));
                }
            }
            match response.cursor {
                Some(cursor) => request.cursor = Some(cursor),
                None => break,
            }
        }
    }
    Ok((accepted, readmitted))
}

/// The crawl as seeded; an in-process queue (lost with its last process) is rebuilt from the
/// table first.
async fn open_crawl<S: Store, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    crawl_id: &CrawlId,
    local: bool,
) -> Result<Crawl, CliError> {
    let crawl = store
        .get_crawl(crawl_id)
        .await?
        .ok_or_else(|| CliError::NoSuchCrawl(crawl_id.to_string()))?;
    if local {
        rebuild_local_queue(store, queue, &crawl, now_ms()).await?;
    }
    Ok(crawl)
}

/// Runs the in-process workers until the crawl completes, Ctrl-C stops it or one of `limits` is
/// reached, showing progress.
async fn crawl_until_done<P: Ports>(
    crawler: &Crawler<P>,
    crawl_id: &CrawlId,
    workers: usize,
    limits: RunLimits,
    stats: &RunStats,
    started: Instant,
    json: bool,
) -> Result<RunEnd, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    let signals = tokio::spawn(watch_ctrl_c(stop.clone(), json));
    let progress = Progress::start(json);
    let end = tokio::select! {
        end = run_crawl_within(crawler, crawl_id, workers, stats, &stop, limits) => end,
        never = progress.tick_loop(stats, crawler.store(), crawl_id, started) => match never {},
    };
    signals.abort();
    progress.finish();
    Ok(end?)
}

/// How a run ended, as the last lines of `trawl crawl` report it.
struct Outcome<'a> {
    crawl_id: &'a CrawlId,
    counts: &'a StatusCounts,
    given_up: &'a GivenUp,
    stats: &'a RunStats,
    elapsed: f64,
    /// The delivery (None: stopped before the crawl completed).
    delivery: Option<&'a DeliveryReport>,
    /// Why the run stopped before the crawl completed (None: it completed).
    stopped: Option<StopReason>,
}

impl Outcome<'_> {
    /// Pages fetched (or found unchanged) this run; given-up tasks are counted apart, with their
    /// reasons.
    fn pages(&self) -> u64 {
        self.stats.succeeded.load(Ordering::Relaxed) + self.stats.unchanged.load(Ordering::Relaxed)
    }

    fn bytes(&self) -> u64 {
        self.stats.bytes.load(Ordering::Relaxed)
    }

    fn rate(&self) -> f64 {
        if self.elapsed > 0.0 {
            self.pages() as f64 / self.elapsed
        } else {
            0.0
        }
    }

    fn dead_lettered(&self) -> u64 {
        self.stats.dead_lettered.load(Ordering::Relaxed)
    }

    fn count(&self, status: Status) -> u64 {
        self.counts.get(&status).copied().unwrap_or(0)
    }

    fn print_json(&self) {
        let per_status: serde_json::Map<String, serde_json::Value> = Status::ALL
            .iter()
            .map(|s| (s.name().to_owned(), json!(self.count(*s))))
            .collect();
        output::json(&json!({
            "crawl_id": self.crawl_id.as_str(),
            "completed": self.delivery.is_some(),
            "counts": per_status,
            "pages": self.pages(),
            "bytes": self.bytes(),
            "elapsed_seconds": (self.elapsed * 1000.0).round() / 1000.0,
            "pages_per_second": (self.rate() * 10.0).round() / 10.0,
            "backend_retries": self.stats.backend_retries.load(Ordering::Relaxed),
            "dead_lettered": self.dead_lettered(),
            "delivery": self.delivery.map(|d| d.location.as_str()),
            "purged": self.delivery.and_then(|d| d.purged.as_ref()),
            "upkeep": self.delivery.and_then(|d| d.upkeep.as_ref()),
            "stopped": self.stopped.map(stopped_json),
            "items_from_current_extractors": self.items().map(|i| i.from_current_extractors),
            "paging": self.delivery.map(|d| &d.summary.paging),
            "given_up": self.given_up.to_json(self.crawl_id),
        }));
    }

    fn print_text(&self) {
        let rows: Vec<Vec<String>> = Status::ALL
            .iter()
            .map(|s| vec![s.name().to_owned(), self.count(*s).to_string()])
            .collect();
        output::table(&["status", "tasks"], &rows);
        self.given_up.print(self.crawl_id);
        let (pages, bytes, elapsed, rate) = (self.pages(), self.bytes(), self.elapsed, self.rate());
        output::line(format_args!(
            "{pages} page(s) fetched this run, {bytes} bytes in {elapsed:.1} s ({rate:.1} pages/s)"
        ));
        let dead = self.dead_lettered();
        if dead > 0 {
            output::line(format_args!(
                "{dead} malformed work message(s) given up after {MAX_RECEIVES} receives (each logged at error level with its body)"
            ));
        }
        match (self.delivery, self.stopped) {
            (Some(delivery), _) => {
                output::line(format_args!("delivered to {}", delivery.location));
                if let Some(purged) = &delivery.purged {
                    output::line(format_args!(
                        "purged after the delivery: {} task(s), {} object(s)",
                        purged.tasks_deleted, purged.objects_deleted
                    ));
                }
                if let Some(upkeep) = &delivery.upkeep {
                    crate::admin::print_upkeep(upkeep);
                }
            }
            (None, Some(StopReason::MaxFetches(n))) => output::line(format_args!(
                "stopped: --max-fetches {n} reached; run the same command to go on"
            )),
            (None, Some(StopReason::MaxTime(d))) => output::line(format_args!(
                "stopped: --max-time {} reached; run the same command to go on",
                humantime::format_duration(d)
            )),
            (None, _) => output::line("stopped: run the same command again to resume"),
        }
        for chain in self
            .delivery
            .map(|d| d.summary.paging.as_slice())
            .unwrap_or_default()
        {
            output::line(format_args!(
                "pages of {}: {}, the last {} ({})",
                chain.template,
                chain.pages,
                chain.last_page,
                chain_end_text(&chain.stopped)
            ));
        }
        match self.items() {
            Some(items) if items.from_current_extractors => output::line(format_args!(
                "its items came from the current extractors (version {})",
                items.extractors_version
            )),
            Some(items) => output::line(format_args!(
                "the items of {} page(s) came from older extractors than the current ones \
                 (version {}): `trawl reextract --crawl-id {}` makes them anew without fetching",
                items.pages_older, items.extractors_version, self.crawl_id
            )),
            None => {}
        }
    }

    /// The delivery's items summary (a crawl with extractors).
    fn items(&self) -> Option<&ItemsSummary> {
        self.delivery.and_then(|d| d.summary.items.as_ref())
    }
}

/// Why a pagination chain ended, in words.
fn chain_end_text(end: &ChainEnd) -> String {
    match end {
        ChainEnd::NothingYielded { rule } => format!("it yielded no {}", rule.name()),
        ChainEnd::Cap { max_pages } => format!("max_pages {max_pages} reached"),
        ChainEnd::Failed { status, error } => {
            format!("{status}: {}", error.as_deref().unwrap_or("unknown"))
        }
        ChainEnd::NotSeeded => "its next page was not taken: page budget or scope".into(),
        ChainEnd::Unfinished => "not done yet".into(),
    }
}

/// The `stopped` field of `trawl crawl --json`: why the run ended before the crawl completed.
fn stopped_json(reason: StopReason) -> serde_json::Value {
    match reason {
        StopReason::Asked => json!({"reason": "interrupted"}),
        StopReason::MaxFetches(n) => json!({"reason": "max_fetches", "max_fetches": n}),
        StopReason::MaxTime(d) => {
            json!({"reason": "max_time", "max_time_seconds": d.as_secs_f64()})
        }
    }
}

/// First Ctrl-C: stop taking new work, finish what is in flight. Second: quit at once.
async fn watch_ctrl_c(stop: Arc<AtomicBool>, json: bool) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    stop.store(true, Ordering::Relaxed);
    if !json {
        output::note(format_args!(
            "\nstopping: finishing the pages in flight (Ctrl-C again to quit now; nothing is lost either way)"
        ));
    }
    if tokio::signal::ctrl_c().await.is_ok() {
        std::process::exit(130);
    }
}
