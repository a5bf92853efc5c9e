//! The commands, generic over the backend: the same code serves local and AWS crawls.

#[cfg(feature = "aws")]
use crate::args::SetupArgs;
use crate::args::{
    Command, CompactArgs, CrawlSelector, DeliveriesCommand, HostSort, HostsArgs, HostsCommand,
    PurgeArgs, RetryArgs, TasksCommand, TasksListArgs, TasksShowArgs,
};
use crate::backend::Backend;
use crate::error::CliError;
use crate::generations;
use crate::output;
use serde_json::json;
use trawl_core::app::Ports;
use trawl_core::backoff::{Backoff, persist};
use trawl_core::deliver::{
    Deliverer, DeliveryLimits, DeliveryReport, Upkeep, purge, release_dead_delivery,
};
use trawl_core::discover::ScopeMatcher;
use trawl_core::operate::{self, Operation, Rewind, Selection};
use trawl_core::store::{CrawlStore, HostStore, StatusCounts, TaskQuery, TaskRecords, TaskStore};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::chain::{self, BODY_KEY, KEY_KEY, METHOD_KEY, TaskRequest};
use trawl_domain::crawl::Crawl;
use trawl_domain::host::Host;
use trawl_domain::task::{Status, UserData, now_ms};

pub async fn dispatch<P: Ports>(
    backend: Backend<P>,
    command: Command,
    plan: Option<crate::crawl::Plan>,
    json: bool,
) -> Result<(), CliError> {
    match command {
        Command::Crawl(args) => crate::crawl::run(backend, args, plan, json).await,
        Command::Demo => {
            let site = crate::demo::start_site()
                .await
                .map_err(|e| CliError::other(format!("cannot start the demo site: {e}")))?;
            let exempt = site
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned();
            if !json {
                output::note(format_args!(
                    "demo site: {site} ({} pages); the network guard stays on, exempting only it",
                    crate::demo::DEMO_PAGES
                ));
            }
            let args = crate::args::CrawlArgs {
                urls: vec![site],
                concurrency: 8,
                per_host: Some(4),
                guard_exempt: vec![exempt],
                ..crate::args::CrawlArgs::default()
            };
            crate::crawl::run(backend, args, None, json).await
        }
        Command::Status(args) if args.watch => crate::watch::run(&backend, &args, json).await,
        Command::Status(args) => status(&backend, &args.selector, json).await,
        Command::Tasks(TasksCommand::List(args)) => tasks_list(&backend, &args, json).await,
        Command::Tasks(TasksCommand::Show(args)) => task_show(&backend, &args, json).await,
        Command::Hosts(args) => hosts(&backend, &args, json).await,
        Command::Retry(args) => retry(&backend, &args, json).await,
        Command::Deliver(selector) => {
            let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
            let location = deliver(&backend, &crawl.id).await?.location;
            if json {
                output::json(&json!({"crawl_id": crawl.id.as_str(), "delivery": location}));
            } else {
                output::line(format_args!("delivery: {location}"));
            }
            Ok(())
        }
        Command::Purge(args) => purge_crawl(&backend, &args, json).await,
        Command::Compact(args) => compact(&backend, &args, json).await,
        Command::Setup(_) => Err(CliError::Usage("`trawl setup` needs --backend aws".into())),
        Command::Migrate(_) => Err(CliError::Usage(
            "`trawl migrate` needs --backend aws".into(),
        )),
        Command::Recrawl(args) => {
            let operation = Operation::Recrawl { only: args.only };
            let what = "to fetch again";
            generations::rewind(backend, &args.rewind, operation, what, json).await
        }
        Command::Refetch(args) => {
            let operation = Operation::Refetch {
                urls: args.urls,
                matching: args.matching,
            };
            let what = "to fetch again";
            generations::rewind(backend, &args.rewind, operation, what, json).await
        }
        Command::Reextract(args) => generations::reextract(backend, &args, json).await,
        Command::Pause(selector) => generations::pause(&backend, &selector, true, json).await,
        Command::Resume(selector) => generations::pause(&backend, &selector, false, json).await,
        Command::Reset(args) => {
            generations::rewind(backend, &args, Operation::Reset {}, "reset", json).await
        }
        Command::Config(command) => generations::config(&backend, &command, json).await,
        Command::Check(args) => generations::check(&backend, &args, json).await,
        Command::Extract(args) => crate::extract::run_stored(&backend, &args, json).await,
        #[cfg(not(feature = "aws"))]
        Command::Submit(_) => Err(CliError::NoAwsBackend),
        #[cfg(feature = "aws")]
        Command::Submit(args) => match plan {
            Some(plan) => crate::submit::run(backend.seed_queue.as_ref(), &args, plan, json).await,
            None => Err(CliError::Usage(
                "nothing to submit: give seed URLs, --seeds-file FILE or --sitemap URL".into(),
            )),
        },
        Command::Deliveries(DeliveriesCommand::List(selector)) => {
            let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
            let b = &backend;
            crate::deliveries::print_list(&b.blobs, &b.layout, &b.uri_base, &crawl, json).await
        }
        Command::Deliveries(DeliveriesCommand::Get(args)) => {
            let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
            let b = &backend;
            let (dir, delivery) = crate::deliveries::get(
                &b.blobs,
                &b.layout,
                &crawl,
                args.delivery.as_deref(),
                &args.out,
            )
            .await?;
            if json {
                output::json(&json!({
                    "crawl_id": crawl.id.as_str(),
                    "delivery": delivery.id,
                    "directory": dir.display().to_string(),
                    "files": delivery.files,
                }));
            } else {
                output::line(format_args!(
                    "downloaded {} ({} file(s)) to {}",
                    delivery.id,
                    delivery.files.len(),
                    dir.display()
                ));
            }
            Ok(())
        }
    }
}

fn parse_crawl_id(raw: &str) -> Result<CrawlId, CliError> {
    CrawlId::parse(raw).map_err(|e| CliError::Usage(e.to_string()))
}

fn parse_status(raw: &str) -> Result<Status, CliError> {
    Status::from_name(raw).ok_or_else(|| {
        let names: Vec<&str> = Status::ALL.iter().map(|s| s.name()).collect();
        CliError::Usage(format!(
            "unknown status {raw:?}: use one of {}",
            names.join(", ")
        ))
    })
}

/// The crawl named, or the only crawl there is.
pub async fn resolve_crawl<S: CrawlStore>(
    store: &S,
    crawl_id: Option<&str>,
) -> Result<Crawl, CliError> {
    if let Some(raw) = crawl_id {
        let id = parse_crawl_id(raw)?;
        return store
            .get_crawl(&id)
            .await?
            .ok_or_else(|| CliError::NoSuchCrawl(raw.to_owned()));
    }
    let mut crawls = store.list_crawls(None).await?;
    match crawls.len() {
        0 => Err(CliError::Usage(
            "there is no crawl yet: start one with `trawl crawl URL`".into(),
        )),
        1 => Ok(crawls.remove(0)),
        _ => {
            let ids: Vec<String> = crawls.iter().map(|c| c.id.to_string()).collect();
            Err(CliError::Usage(format!(
                "there are several crawls: pass --crawl-id (one of {})",
                ids.join(", ")
            )))
        }
    }
}

/// A task named by its id or its URL.
pub fn task_id_of(raw: &str) -> Result<TaskId, CliError> {
    match TaskId::parse(raw) {
        Some(id) => Ok(id),
        None => Ok(CanonicalUrl::parse(raw)
            .map_err(|e| CliError::Usage(format!("{e}: give a URL or a task id")))?
            .task_id()),
    }
}

/// The task `trawl tasks show` names: a task id, or a URL with what else is part of its
/// identity (`trawl_domain::chain::task_id`): its method and body, and its dedup key, given,
/// or the one the crawl's routes give the URL.
fn shown_task_id(crawl: &Crawl, args: &TasksShowArgs) -> Result<TaskId, CliError> {
    if let Some(id) = TaskId::parse(&args.task) {
        return Ok(id);
    }
    let url = CanonicalUrl::parse(&args.task)
        .map_err(|e| CliError::Usage(format!("{e}: give a URL or a task id")))?;
    let mut data = UserData::new();
    if let Some(method) = &args.method {
        data.insert(METHOD_KEY.to_owned(), json!(method));
    }
    let body = match (&args.body, &args.body_json) {
        (Some(text), _) => Some(json!(text)),
        (None, Some(raw)) => Some(
            serde_json::from_str(raw)
                .map_err(|e| CliError::Usage(format!("--body-json is not JSON: {e}")))?,
        ),
        (None, None) => None,
    };
    if let Some(body) = body {
        data.insert(BODY_KEY.to_owned(), body);
    }
    let routed = || {
        ScopeMatcher::new(&crawl.config.scope)
            .ok()?
            .key_of(url.as_str())
    };
    if let Some(key) = args.key.clone().or_else(routed) {
        data.insert(KEY_KEY.to_owned(), json!(key));
    }
    TaskRequest::of_data(Some(&data)).map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(chain::task_id(&url, Some(&data)))
}

fn count(counts: &StatusCounts, status: Status) -> u64 {
    counts.get(&status).copied().unwrap_or(0)
}

fn counts_json(counts: &StatusCounts) -> serde_json::Value {
    Status::ALL
        .iter()
        .map(|s| (s.name().to_owned(), json!(count(counts, *s))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

async fn status<P: Ports>(
    backend: &Backend<P>,
    selector: &CrawlSelector,
    json: bool,
) -> Result<(), CliError> {
    let crawls = match &selector.crawl_id {
        Some(raw) => vec![resolve_crawl(&backend.store, Some(raw)).await?],
        None => backend.store.list_crawls(None).await?,
    };
    let mut rows = Vec::new();
    let mut objects = Vec::new();
    for crawl in &crawls {
        let counts = backend.store.counts(&crawl.id).await?;
        let total: u64 = counts.values().sum();
        let state = match crawl.config.paused {
            true => format!("{} (paused)", crawl.state.name()),
            false => crawl.state.name().to_owned(),
        };
        let mut row = vec![crawl.id.to_string(), state, crawl.generation.to_string()];
        row.extend(Status::ALL.iter().map(|s| count(&counts, *s).to_string()));
        row.push(total.to_string());
        rows.push(row);
        objects.push(json!({
            "crawl_id": crawl.id.as_str(),
            "state": crawl.state.name(),
            "paused": crawl.config.paused,
            "generation": crawl.generation,
            "counts": counts_json(&counts),
            "total": total,
        }));
    }
    if json {
        output::json(&json!({ "crawls": objects }));
    } else if rows.is_empty() {
        output::line("no crawls yet: start one with `trawl crawl URL`");
    } else {
        let mut header = vec!["crawl", "state", "gen"];
        header.extend(Status::ALL.iter().map(|s| s.name()));
        header.push("total");
        output::table(&header, &rows);
    }
    Ok(())
}

async fn tasks_list<P: Ports>(
    backend: &Backend<P>,
    args: &TasksListArgs,
    json: bool,
) -> Result<(), CliError> {
    let status = parse_status(&args.status)?;
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let mut tasks = Vec::new();
    let mut cursor = None;
    while tasks.len() < args.limit as usize {
        let want = args.limit - tasks.len() as u32;
        let query = TaskQuery {
            crawl_id: crawl.id.clone(),
            status,
            updated_before: None,
            limit: want.min(100),
            cursor,
            part: trawl_core::store::Part::WHOLE,
        };
        let page = backend.store.query(&query).await?;
        tasks.extend(page.tasks);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    tasks.truncate(args.limit as usize);
    if json {
        let items: Vec<_> = tasks
            .iter()
            .map(|t| json!({"task_id": t.task_id.as_str(), "url": t.url, "status": t.status.name(), "updated_at": output::time(t.updated_at), "depth": t.depth, "retries": t.retries}))
            .collect();
        output::json(&json!({ "crawl_id": crawl.id.as_str(), "tasks": items }));
    } else {
        let rows: Vec<Vec<String>> = tasks
            .iter()
            .map(|t| {
                vec![
                    t.task_id.to_string(),
                    output::time(t.updated_at),
                    t.retries.to_string(),
                    t.url.clone(),
                ]
            })
            .collect();
        output::table(&["task", "updated", "retries", "url"], &rows);
    }
    Ok(())
}

async fn task_show<P: Ports>(
    backend: &Backend<P>,
    args: &TasksShowArgs,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let task_id = shown_task_id(&crawl, args)?;
    let task = backend
        .store
        .get(&crawl.id, &task_id)
        .await?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "crawl {} has no task {:?}: `trawl tasks list --status STATUS` lists its tasks \
                 (a POST or a keyed task of a URL is found with --method and --body, or --key)",
                crawl.id, args.task
            ))
        })?;
    let fetch = task.fetch.as_ref();
    let history = fetch.and_then(|f| f.pace).and_then(|p| p.history);
    let value = json!({
        "crawl_id": task.crawl_id.as_str(),
        "task_id": task.task_id.as_str(),
        "url": task.url,
        "status": task.status.name(),
        "depth": task.depth,
        "retries": task.retries,
        "created_at": output::time(task.created_at),
        "updated_at": output::time(task.updated_at),
        "next_attempt_at": task.next_attempt_at.map(output::time),
        "errors": task.errors.iter().map(|e| json!({"kind": e.kind, "message": e.message, "at": output::time(e.at)})).collect::<Vec<_>>(),
        "http_status": fetch.map(|f| f.http_status),
        "content_type": fetch.and_then(|f| f.content_type.clone()),
        "bytes": fetch.map(|f| f.content_length),
        "md5": fetch.and_then(|f| f.md5.clone()),
        "object": fetch.and_then(|f| f.object_key.as_ref()).map(|k| format!("{}/{k}", backend.uri_base)),
        // On the segment layout, where in that segment the page's records are.
        "offset": fetch.and_then(|f| f.span).map(|s| s.offset),
        "length": fetch.and_then(|f| f.span).map(|s| s.length),
        "final_url": fetch.and_then(|f| f.final_url.clone()),
        "fetched_at": fetch.map(|f| output::time(f.fetched_at)),
        // When the page is fetched again, and its place in an adaptive schedule.
        "next_fetch_at": fetch.and_then(|f| f.next_fetch_at).map(output::time),
        "schedule_factor": fetch.and_then(|f| f.pace).map(|p| p.factor),
        "unchanged_fetches": fetch.and_then(|f| f.pace).map(|p| p.unchanged),
        // The change-rate estimator's evidence, for a page it schedules.
        "checks": history.map(|h| h.checks),
        "changes_seen": history.map(|h| h.changes),
        "data": task.data,
        "priority": task.priority.get(),
        // The page it was found on, made of (a chain) or tried again from (`retry_with`).
        "parent": task.parent.as_ref().map(|p| p.as_str()),
        // Why a chain rule made no next request of the page.
        "chain_stop": fetch.and_then(|f| f.chain_stop.clone()),
    });
    if json {
        output::json(&value);
    } else {
        output::fields(value);
    }
    Ok(())
}

async fn retry<P: Ports>(
    backend: &Backend<P>,
    args: &RetryArgs,
    json: bool,
) -> Result<(), CliError> {
    let status = parse_status(&args.status)?;
    if !matches!(status, Status::Failed | Status::Ignored) {
        return Err(CliError::Usage(
            "retry takes --status failed or --status ignored".into(),
        ));
    }
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let selection = Selection {
        statuses: vec![status],
        host: args.host.clone(),
        ..Selection::default()
    };
    // A local queue lives in `trawl crawl`, which rebuilds it from the table. Otherwise the
    // hosts of the moved tasks that are idle get a turn (the others' turns take them).
    let queue = (!backend.local).then_some(&backend.queue);
    let done = operate::rewind(
        &backend.store,
        queue,
        &crawl,
        &selection,
        Rewind::Reschedule,
        now_ms(),
    )
    .await
    .map_err(CliError::other)?;
    let (moved, enqueued) = (done.urls, done.enqueued);
    if json {
        output::json(
            &json!({"crawl_id": crawl.id.as_str(), "rescheduled": moved.len(), "enqueued": enqueued}),
        );
    } else if backend.local {
        output::line(format_args!(
            "{} {} task(s) of {} are pending again: run `trawl crawl --crawl-id {}` to crawl them",
            moved.len(),
            status,
            crawl.id,
            crawl.id
        ));
    } else {
        output::line(format_args!(
            "{} {} task(s) of {} rescheduled; {enqueued} idle host(s) woken",
            moved.len(),
            status,
            crawl.id
        ));
    }
    Ok(())
}

/// Writes (or finds) the delivery of the crawl's current generation; returns its report.
/// A local backend's store is a data directory locked to this process, so a delivery lease
/// found in it is a dead process's, taken over at once, and no finish is on its way while this
/// runs (no crawl runs beside it): the orphan clean-up spares no young body.
pub async fn deliver<P: Ports>(
    backend: &Backend<P>,
    crawl_id: &CrawlId,
) -> Result<DeliveryReport, CliError> {
    let retries = std::sync::atomic::AtomicU64::new(0);
    if backend.local {
        persist(
            backend.app.clock.as_ref(),
            "take over a dead process's delivery",
            &Backoff::RUN,
            &retries,
            || release_dead_delivery(&backend.store, crawl_id),
        )
        .await?;
    }
    let mut deliverer = Deliverer::new(
        backend.app.clone(),
        backend.uri_base.clone(),
        DeliveryLimits::default(),
    );
    if backend.local {
        deliverer = deliverer.sole_writer();
    }
    // A delivery resumes where it stopped: a transient error is waited out, not the end.
    let report = persist(
        backend.app.clock.as_ref(),
        "deliver",
        &Backoff::RUN,
        &retries,
        || deliverer.deliver(crawl_id, None, now_ms()),
    )
    .await?;
    if let Some(command) = backend.on_delivered.as_deref()
        && !report.already_delivered
    {
        crate::hook::on_delivered(command, &report).await?;
    }
    Ok(report)
}

/// `trawl compact`: retention and compaction now, as after a delivery, on the local backend
/// with the data directory to itself (no young segment spared, as in `deliver`).
async fn compact<P: Ports>(
    backend: &Backend<P>,
    args: &CompactArgs,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, args.selector.crawl_id.as_deref()).await?;
    let retries = std::sync::atomic::AtomicU64::new(0);
    if backend.local {
        persist(
            backend.app.clock.as_ref(),
            "take over a dead process's delivery",
            &Backoff::RUN,
            &retries,
            || release_dead_delivery(&backend.store, &crawl.id),
        )
        .await?;
    }
    let limits = DeliveryLimits {
        compact_bytes: args
            .max_bytes
            .unwrap_or(DeliveryLimits::DEFAULT.compact_bytes),
        ..DeliveryLimits::DEFAULT
    };
    let mut deliverer = Deliverer::new(backend.app.clone(), backend.uri_base.clone(), limits);
    if backend.local {
        deliverer = deliverer.sole_writer();
    }
    let upkeep = deliverer.upkeep(&crawl.id, now_ms()).await?;
    if json {
        output::json(&json!({"crawl_id": crawl.id.as_str(), "upkeep": upkeep}));
    } else if crawl.config.delivery.keep_generations.is_none() {
        output::line(
            "nothing to do: the crawl keeps every delivery (delivery.keep_generations), so every segment stays",
        );
    } else {
        print_upkeep(&upkeep);
    }
    Ok(())
}

/// Retention and compaction, for a human.
pub fn print_upkeep(upkeep: &Upkeep) {
    if let Some(retention) = &upkeep.retention {
        output::line(format_args!(
            "deliveries kept from generation {}; removed {} ({} file(s))",
            retention.kept_from,
            retention.removed.len(),
            retention.files_removed
        ));
    }
    if let Some(c) = &upkeep.compaction {
        output::line(format_args!(
            "segments: {} ({} bytes, {} live); rewritten {} ({} page(s), {} bytes copied, {} refused); deleted {} ({} bytes freed); held by deliveries {} ({} bytes){}",
            c.segments,
            c.bytes,
            c.live_bytes,
            c.rewritten,
            c.pages_moved,
            c.bytes_copied,
            c.pages_refused,
            c.deleted,
            c.bytes_freed,
            c.held,
            c.held_bytes,
            if c.complete {
                ""
            } else {
                "; stopped by its budget: run again to go on"
            }
        ));
    }
    if let Some(error) = &upkeep.error {
        output::line(format_args!(
            "upkeep stopped short (the next delivery tries again): {error}"
        ));
    }
}

async fn purge_crawl<P: Ports>(
    backend: &Backend<P>,
    args: &PurgeArgs,
    json: bool,
) -> Result<(), CliError> {
    let id = parse_crawl_id(&args.crawl_id)?;
    let report = purge(
        &backend.store,
        &backend.blobs,
        &backend.layout,
        &id,
        args.force,
    )
    .await?;
    // Nothing there at all: a mistyped id, as for the other commands (a purge that stopped
    // half-way still has its record, deleted last, and is finished here).
    if !report.crawl_deleted && report.tasks_deleted == 0 && report.objects_deleted == 0 {
        return Err(CliError::NoSuchCrawl(id.to_string()));
    }
    if json {
        output::json(
            &json!({"crawl_id": id.as_str(), "tasks_deleted": report.tasks_deleted, "objects_deleted": report.objects_deleted, "segments_kept": report.segments_kept, "objects_kept": report.objects_kept}),
        );
    } else {
        output::line(format_args!(
            "purged {id}: {} task(s), {} object(s)",
            report.tasks_deleted, report.objects_deleted
        ));
        if report.segments_kept > 0 {
            output::line(format_args!(
                "kept {} segment file(s): the crawl's deliveries point into them",
                report.segments_kept
            ));
        }
        if report.objects_kept > 0 {
            output::line(format_args!(
                "kept {} page object(s): the crawl's deliveries name them",
                report.objects_kept
            ));
        }
    }
    Ok(())
}

/// Creates the table, bucket and queues on the AWS endpoint of the environment, and prints the
/// variables that point trawl at them.
#[cfg(feature = "aws")]
pub async fn setup(args: &SetupArgs, json: bool) -> Result<(), CliError> {
    let clients = trawl_aws::clients::Clients::new(&trawl_aws::clients::load_config().await);
    let stack = trawl_aws::stack::create_stack(&clients, &args.name)
        .await
        .map_err(|e| {
            CliError::other(format!(
                "{e}; check the AWS credentials and region (and AWS_ENDPOINT_URL for moto)"
            ))
        })?;
    let vars = stack.env();
    if json {
        output::json(
            &vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        );
    } else {
        for (k, v) in vars {
            output::line(format_args!("export {k}={v}"));
        }
    }
    Ok(())
}

/// Tasks `trawl migrate` moves per call of the store (a bounded batch, then the next).
#[cfg(feature = "aws")]
const MIGRATE_BATCH: u64 = 1_000;

/// `trawl migrate`: each crawl's (or the named one's) tasks written before the sparse status
/// index, moved to their hosts' due lists batch after batch, until none is left under an old
/// key. A batch that moves nothing without reaching the end (the index lags the moves) stops
/// the run: run it again later.
#[cfg(feature = "aws")]
pub async fn migrate(
    store: &trawl_aws::dynamodb::DynamoStore,
    selector: &CrawlSelector,
    json: bool,
) -> Result<(), CliError> {
    let crawls = match selector.crawl_id.as_deref() {
        Some(id) => vec![resolve_crawl(store, Some(id)).await?],
        None => store.list_crawls(None).await?,
    };
    for crawl in crawls {
        let (mut moved, mut changed, mut done) = (0, 0, false);
        while !done {
            let batch = store.migrate_unlisted(&crawl.id, MIGRATE_BATCH).await?;
            moved += batch.moved;
            changed += batch.changed;
            done = batch.done;
            if batch.moved == 0 {
                break;
            }
        }
        if json {
            output::json(&json!({
                "crawl_id": crawl.id.as_str(), "moved": moved, "changed": changed, "done": done,
            }));
        } else {
            let left = if done {
                ""
            } else {
                "; some are left: run it again"
            };
            output::line(format_args!(
                "{}: {moved} tasks moved to their hosts' due lists ({changed} changed meanwhile){left}",
                crawl.id
            ));
        }
    }
    Ok(())
}

/// A host as `trawl hosts` shows it.
struct HostView {
    host: Host,
    pending: u64,
    /// Ended tasks: the record's count, at most what the pending ones leave of its seeds.
    done: u64,
    /// Estimated time to drain the backlog at the host's pace (None: unpaced or nothing left).
    eta_ms: Option<u64>,
    state: String,
}

/// Tasks read per shown host to count its pending work exactly (`HostView::counted`).
const PENDING_READ: u32 = 1_000;

impl HostView {
    /// From the host record alone: its counts as of its last turn's end (seeds found during a
    /// turn, and tasks moved back by `retry`, are counted at the next hand-back).
    fn of(host: Host, crawl: &Crawl, now: i64) -> Self {
        let pending = host.backlog();
        Self::with_pending(host, crawl, now, pending)
    }

    /// With its pending work counted from its tasks (its due list, up to [`PENDING_READ`]):
    /// what `trawl status` counts, during a turn and after a retry too.
    async fn counted<P: Ports>(
        backend: &Backend<P>,
        host: Host,
        crawl: &Crawl,
        now: i64,
    ) -> Result<Self, CliError> {
        let due = backend
            .store
            .host_tasks(&crawl.id, &host.name, PENDING_READ)
            .await?;
        let open = due
            .iter()
            .filter(|t| {
                matches!(
                    t.status,
                    Status::Pending | Status::InProgress | Status::Failed
                )
            })
            .count() as u64;
        let pending = match due.len() < PENDING_READ as usize {
            true => open,
            false => open.max(host.backlog()),
        };
        Ok(Self::with_pending(host, crawl, now, pending))
    }

    fn with_pending(host: Host, crawl: &Crawl, now: i64, pending: u64) -> Self {
        let parallel = u64::from(crawl.config.politeness.host_policy(&host.name).parallel);
        let eta_ms = (pending > 0 && host.delay_ms > 0)
            .then(|| pending.saturating_mul(host.delay_ms) / parallel.max(1));
        let state = if let Some(reason) = &host.given_up {
            format!("given up: {reason}")
        } else if let Some(until) = host.snoozed_until.filter(|&u| u > now) {
            format!("snoozed until {}", output::time(until))
        } else if host.turn_until.is_some_and(|u| u > now) {
            "crawling".to_owned()
        } else if host.queued_for.is_some() {
            "queued".to_owned()
        } else {
            "idle".to_owned()
        };
        let done = host.done.min(host.seeded.saturating_sub(pending));
        Self {
            host,
            pending,
            done,
            eta_ms,
            state,
        }
    }

    fn json(&self) -> serde_json::Value {
        let h = &self.host;
        json!({
            "host": h.name,
            "state": self.state,
            "pending": self.pending,
            "seeded": h.seeded,
            "done": self.done,
            "fetches": h.fetches,
            "host_errors": h.signals,
            "delay_ms": h.delay_ms,
            "eta_ms": self.eta_ms,
            "snoozed_until": h.snoozed_until.map(output::time),
            "given_up": h.given_up,
            // Its pending work's best, as its last turn left it: what orders the local turns.
            "priority": h.priority.get(),
        })
    }
}

/// `trawl hosts`: read from the host records only (never a scan of the tasks).
async fn hosts<P: Ports>(
    backend: &Backend<P>,
    args: &HostsArgs,
    json: bool,
) -> Result<(), CliError> {
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let now = now_ms();
    match &args.show {
        Some(HostsCommand::Show { host }) => return host_show(backend, &crawl, host, json).await,
        Some(HostsCommand::Drop { hosts, reason }) => {
            let operation = Operation::DropHosts {
                hosts: hosts.clone(),
                reason: reason.clone(),
            };
            return crate::generations::host_operation(backend, &crawl, operation, json).await;
        }
        Some(HostsCommand::Move { hosts, to }) => {
            let to = parse_crawl_id(to)?;
            let operation = Operation::MoveHosts {
                hosts: hosts.clone(),
                to,
            };
            return crate::generations::host_operation(backend, &crawl, operation, json).await;
        }
        None => {}
    }
    let mut views = Vec::new();
    let mut cursor = None;
    loop {
        let page = backend.store.list_hosts(&crawl.id, cursor, 1_000).await?;
        views.extend(page.hosts.into_iter().map(|h| HostView::of(h, &crawl, now)));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    let total = views.len();
    match args.sort {
        HostSort::Pending => views.sort_by_key(|v| std::cmp::Reverse(v.pending)),
        HostSort::Errors => views.sort_by_key(|v| std::cmp::Reverse(v.host.signals)),
        HostSort::Eta => views.sort_by_key(|v| std::cmp::Reverse(v.eta_ms)),
    }
    views.truncate(args.limit);
    // The shown hosts' pending work from their tasks: the records' counts lag a running turn.
    let mut shown = Vec::with_capacity(views.len());
    for view in views {
        shown.push(HostView::counted(backend, view.host, &crawl, now).await?);
    }
    let mut views = shown;
    if args.sort == HostSort::Pending {
        views.sort_by_key(|v| std::cmp::Reverse(v.pending));
    }
    if json {
        output::json(&json!({
            "crawl_id": crawl.id.as_str(),
            "hosts": total,
            "shown": views.iter().map(HostView::json).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    if views.is_empty() {
        output::line(format_args!("crawl {} has no hosts yet", crawl.id));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.host.name.clone(),
                v.pending.to_string(),
                v.done.to_string(),
                v.host.signals.to_string(),
                format!("{} ms", v.host.delay_ms),
                v.eta_ms.map_or_else(
                    || "-".to_owned(),
                    |ms| {
                        humantime::format_duration(std::time::Duration::from_secs(ms / 1000))
                            .to_string()
                    },
                ),
                v.state.clone(),
            ]
        })
        .collect();
    output::table(
        &["host", "pending", "done", "errors", "pace", "eta", "state"],
        &rows,
    );
    if total > rows.len() {
        output::note(format_args!(
            "{} of {total} hosts shown (--limit)",
            rows.len()
        ));
    }
    Ok(())
}

async fn host_show<P: Ports>(
    backend: &Backend<P>,
    crawl: &Crawl,
    name: &str,
    json: bool,
) -> Result<(), CliError> {
    let host = backend
        .store
        .get_host(&crawl.id, name)
        .await?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "crawl {} has no host {name:?}: `trawl hosts` lists them",
                crawl.id
            ))
        })?;
    let due = backend.store.host_tasks(&crawl.id, name, 10).await?;
    let view = HostView::counted(backend, host, crawl, now_ms()).await?;
    let next: Vec<serde_json::Value> = due
        .iter()
        .map(|t| json!({"url": t.url, "status": t.status.name(), "due": t.due_at().map(output::time), "priority": t.priority.get()}))
        .collect();
    if json {
        let mut value = view.json();
        value["next_tasks"] = json!(next);
        output::json(&value);
        return Ok(());
    }
    output::fields(view.json());
    if !due.is_empty() {
        let rows: Vec<Vec<String>> = due
            .iter()
            .map(|t| {
                vec![
                    t.status.name().to_owned(),
                    t.due_at().map(output::time).unwrap_or_default(),
                    t.url.clone(),
                ]
            })
            .collect();
        output::table(&["status", "due", "url"], &rows);
    }
    Ok(())
}
