//! The commands, generic over the backend: the same code serves local and AWS crawls.

use crate::args::{
    Command, CrawlSelector, PurgeArgs, RetryArgs, SetupArgs, TasksCommand, TasksListArgs,
    TasksShowArgs,
};
use crate::backend::Backend;
use crate::error::CliError;
use crate::output;
use serde_json::json;
use trawl_core::blob::BlobStore;
use trawl_core::blob::Layout;
use trawl_core::deliver::{Deliverer, purge};
use trawl_core::queue::{WorkMessage, WorkQueue};
use trawl_core::store::{CrawlStore, StatusCounts, TaskQuery, TaskStore};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::task::{Status, now_ms};

pub async fn dispatch<S, B, Q>(
    backend: Backend<S, B, Q>,
    command: Command,
    plan: Option<crate::crawl::Plan>,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
    B: BlobStore,
    Q: WorkQueue,
{
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
                seeds_file: None,
                sitemap: Vec::new(),
                crawl_id: None,
                max_pages: None,
                max_depth: None,
                allow_domain: Vec::new(),
                concurrency: 8,
                per_host: 4,
                user_agent: None,
                allow_private_networks: false,
                guard_exempt: vec![exempt],
                request: Box::default(),
            };
            crate::crawl::run(backend, args, None, json).await
        }
        Command::Status(selector) => status(&backend, &selector, json).await,
        Command::Tasks(TasksCommand::List(args)) => tasks_list(&backend, &args, json).await,
        Command::Tasks(TasksCommand::Show(args)) => task_show(&backend, &args, json).await,
        Command::Retry(args) => retry(&backend, &args, json).await,
        Command::Deliver(selector) => {
            let crawl = resolve_crawl(&backend.store, selector.crawl_id.as_deref()).await?;
            let b = &backend;
            let location = deliver(
                &b.store,
                &b.blobs,
                &b.layout,
                &b.uri_base,
                &b.calls,
                &crawl.id,
            )
            .await?;
            if json {
                output::json(&json!({"crawl_id": crawl.id.as_str(), "delivery": location}));
            } else {
                output::line(format_args!("delivery: {location}"));
            }
            Ok(())
        }
        Command::Purge(args) => purge_crawl(&backend, &args, json).await,
        Command::Setup(_) => Err(CliError::Usage("`trawl setup` needs --backend aws".into())),
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

async fn status<S, B, Q>(
    backend: &Backend<S, B, Q>,
    selector: &CrawlSelector,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
{
    let crawls = match &selector.crawl_id {
        Some(raw) => vec![resolve_crawl(&backend.store, Some(raw)).await?],
        None => backend.store.list_crawls(None).await?,
    };
    let mut rows = Vec::new();
    let mut objects = Vec::new();
    for crawl in &crawls {
        let counts = backend.store.counts(&crawl.id).await?;
        let total: u64 = counts.values().sum();
        let mut row = vec![
            crawl.id.to_string(),
            crawl.state.name().to_owned(),
            crawl.generation.to_string(),
        ];
        row.extend(Status::ALL.iter().map(|s| count(&counts, *s).to_string()));
        row.push(total.to_string());
        rows.push(row);
        objects.push(json!({
            "crawl_id": crawl.id.as_str(),
            "state": crawl.state.name(),
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

async fn tasks_list<S, B, Q>(
    backend: &Backend<S, B, Q>,
    args: &TasksListArgs,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
{
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

async fn task_show<S, B, Q>(
    backend: &Backend<S, B, Q>,
    args: &TasksShowArgs,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
{
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let task_id = match TaskId::parse(&args.task) {
        Some(id) => id,
        None => CanonicalUrl::parse(&args.task)
            .map_err(|e| CliError::Usage(format!("{e}: give a URL or a task id")))?
            .task_id(),
    };
    let task = backend
        .store
        .get(&crawl.id, &task_id)
        .await?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "crawl {} has no task {:?}: `trawl tasks list --status STATUS` lists its tasks",
                crawl.id, args.task
            ))
        })?;
    let fetch = task.fetch.as_ref();
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
        "final_url": fetch.and_then(|f| f.final_url.clone()),
        "fetched_at": fetch.map(|f| output::time(f.fetched_at)),
    });
    if json {
        output::json(&value);
    } else if let serde_json::Value::Object(fields) = value {
        let rows: Vec<Vec<String>> = fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| vec![k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)])
            .collect();
        output::table(&["field", "value"], &rows);
    }
    Ok(())
}

async fn retry<S, B, Q>(
    backend: &Backend<S, B, Q>,
    args: &RetryArgs,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
    Q: WorkQueue,
{
    let status = parse_status(&args.status)?;
    if !matches!(status, Status::Failed | Status::Ignored) {
        return Err(CliError::Usage(
            "retry takes --status failed or --status ignored".into(),
        ));
    }
    let crawl = resolve_crawl(&backend.store, args.crawl_id.as_deref()).await?;
    let now = now_ms();
    let mut moved = Vec::new();
    // Rescheduled tasks leave the status, so the first page is always the next one.
    for _ in 0..100_000 {
        let query = TaskQuery {
            crawl_id: crawl.id.clone(),
            status,
            updated_before: Some(now),
            limit: 100,
            cursor: None,
        };
        let page = backend.store.query(&query).await?;
        if page.tasks.is_empty() {
            break;
        }
        for task in page.tasks {
            if backend
                .store
                .reschedule(&crawl.id, &task.task_id, &[status], now)
                .await?
                && let Ok(url) = CanonicalUrl::parse(&task.url)
            {
                moved.push(WorkMessage::new(
                    crawl.id.clone(),
                    task.task_id,
                    &url,
                    task.depth,
                    crawl.config.politeness.per_host,
                ));
            }
        }
    }
    if !moved.is_empty() && crawl.state == CrawlState::Completed {
        backend.store.reopen_crawl(&crawl.id, now).await?;
    }
    // A local queue lives in `trawl crawl`, which rebuilds it from the table.
    let enqueued = if backend.local || moved.is_empty() {
        0
    } else {
        backend
            .queue
            .send(&moved)
            .await
            .map_err(CliError::other)?
            .sent
    };
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
            "{} {} task(s) of {} rescheduled and enqueued",
            moved.len(),
            status,
            crawl.id
        ));
    }
    Ok(())
}

/// Writes (or finds) the delivery of the crawl's current generation; returns where it is.
pub async fn deliver<S, B>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    uri_base: &str,
    calls: &CallCounts,
    crawl_id: &CrawlId,
) -> Result<String, CliError>
where
    S: TaskStore + CrawlStore,
    B: BlobStore,
{
    let deliverer = Deliverer {
        store,
        blobs,
        layout,
        uri_base,
        calls,
    };
    let report = deliverer.deliver(crawl_id, None, now_ms()).await?;
    Ok(report.location)
}

async fn purge_crawl<S, B, Q>(
    backend: &Backend<S, B, Q>,
    args: &PurgeArgs,
    json: bool,
) -> Result<(), CliError>
where
    S: TaskStore + CrawlStore,
    B: BlobStore,
{
    let id = parse_crawl_id(&args.crawl_id)?;
    let report = purge(
        &backend.store,
        &backend.blobs,
        &backend.layout,
        &id,
        args.force,
    )
    .await?;
    if json {
        output::json(
            &json!({"crawl_id": id.as_str(), "tasks_deleted": report.tasks_deleted, "objects_deleted": report.objects_deleted}),
        );
    } else {
        output::line(format_args!(
            "purged {id}: {} task(s), {} object(s)",
            report.tasks_deleted, report.objects_deleted
        ));
    }
    Ok(())
}

/// Creates the table, bucket and queues on the AWS endpoint of the environment, and prints the
/// variables that point trawl at them.
pub async fn setup(args: &SetupArgs, json: bool) -> Result<(), CliError> {
    let clients = trawl_aws::clients::Clients::new(&trawl_aws::clients::load_config().await);
    let stack = trawl_aws::clients::create_stack(&clients, &args.name)
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
