//! An operator's rewinds of a crawl: the next generation now (`trawl recrawl`), a forced
//! refetch, an operator's retry, a reset that forgets every fetch. Each selects tasks, moves
//! them back to `pending` through the state machine (`transition::reschedule`, or
//! `transition::reset`), reopens a completed crawl first (so that a running crawl owns the
//! work) and gives their hosts a turn. The same operations, a configuration change and a
//! re-extraction from stored bodies (`crate::reextract`, which opens the next generation once
//! done, so that it is delivered) are the seeder's operation requests ([`OperationRequest`]):
//! the CLI and the Lambda share them.

use crate::app::{App, Ports, Store};
use crate::discover::ScopeMatcher;
use crate::frontier::{
    FrontierError, Reissue, add_tasks, drop_hosts, hosts_of, reissue_turns, revive_hosts,
    seed_tasks,
};
use crate::queue::{QueueError, WorkQueue};
use crate::reextract::{ReextractCursor, ReextractError, Reextracted, reextract};
use crate::store::{CrawlStore, StoreError, TaskQuery, TaskStore, TaskSummary};
use regex::Regex;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId, host_key_of};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::task::{Millis, NewTask, Status};

/// How long a woken host's earlier message may be overdue before it is presumed lost.
const LOST_AFTER_MS: u64 = 60_000;

#[derive(Debug, Error)]
pub enum OperateError {
    /// The request names no crawl there is, or asks for something invalid; nothing changed.
    #[error("invalid operation: {0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Frontier(#[from] FrontierError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Reextract(#[from] ReextractError),
}

/// What becomes of a selected task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewind {
    /// Pending again, its fetch record kept (the next fetch is a conditional GET).
    Reschedule,
    /// Pending again, its fetch record forgotten (fetched in full, its delta line `new`).
    Reset,
}

/// Which tasks a rewind takes.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Tasks in these statuses (a task in progress is its holder's and never taken).
    pub statuses: Vec<Status>,
    /// Only these tasks (None: every task in `statuses`).
    pub tasks: Option<Vec<TaskId>>,
    /// Only tasks of this host.
    pub host: Option<String>,
    /// Only tasks whose URL matches.
    pub matching: Option<Regex>,
}

impl Selection {
    /// Pages fetched before: the next generation.
    pub fn fetched() -> Self {
        Self {
            statuses: vec![Status::Succeeded, Status::Gone],
            ..Self::default()
        }
    }

    /// Every task that is not in progress.
    pub fn settled() -> Self {
        Self {
            statuses: vec![
                Status::Pending,
                Status::Failed,
                Status::Succeeded,
                Status::Ignored,
                Status::Gone,
            ],
            ..Self::default()
        }
    }

    fn takes(&self, task: &TaskSummary) -> bool {
        self.statuses.contains(&task.status)
            && self
                .host
                .as_deref()
                .is_none_or(|h| host_key_of(&task.url) == h)
            && self.matching.as_ref().is_none_or(|m| m.is_match(&task.url))
    }
}

/// What a rewind did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewound {
    /// URLs of the tasks moved back to pending.
    pub urls: Vec<String>,
    /// The crawl was completed and runs again (its next generation).
    pub reopened: bool,
    /// Turns sent for the tasks' idle hosts (none without a queue: a local crawl rebuilds its
    /// queue from the store when it runs).
    pub enqueued: u64,
}

/// Moves the tasks of `crawl` that `selection` takes back to pending as `how` says, at `now`.
pub async fn rewind<S, Q>(
    store: &S,
    queue: Option<&Q>,
    crawl: &Crawl,
    selection: &Selection,
    how: Rewind,
    now: Millis,
) -> Result<Rewound, OperateError>
where
    S: Store,
    Q: WorkQueue,
{
    let mut done = Rewound::default();
    let mut state = crawl.state;
    match &selection.tasks {
        Some(ids) => {
            for id in ids {
                if let Some(task) = store.get(&crawl.id, id).await? {
                    let summary = TaskSummary::from(&task);
                    if selection.takes(&summary) {
                        move_back(store, crawl, &mut state, &summary, how, now, &mut done).await?;
                    }
                }
            }
        }
        None => {
            for &status in &selection.statuses {
                let mut cursor = None;
                // Moved tasks leave the status (and the `updated_before` window): the cursor
                // goes on past the ones left.
                loop {
                    let page = store
                        .query(&TaskQuery {
                            crawl_id: crawl.id.clone(),
                            status,
                            updated_before: Some(now),
                            limit: 100,
                            cursor: cursor.take(),
                            part: crate::store::Part::WHOLE,
                        })
                        .await?;
                    for task in page.tasks.iter().filter(|t| selection.takes(t)) {
                        move_back(store, crawl, &mut state, task, how, now, &mut done).await?;
                    }
                    match page.cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
            }
        }
    }
    let hosts = hosts_of(done.urls.iter().map(String::as_str));
    revive_hosts(store, crawl, &hosts, now).await?;
    if let Some(queue) = queue.filter(|_| !done.urls.is_empty()) {
        let which = Reissue::Lost {
            lost_after_ms: LOST_AFTER_MS,
            known_work: true,
        };
        let turns = reissue_turns(store, crawl, hosts, which, now).await?;
        done.enqueued = queue.send(&turns).await?.sent as u64;
    }
    Ok(done)
}

async fn move_back<S>(
    store: &S,
    crawl: &Crawl,
    state: &mut CrawlState,
    task: &TaskSummary,
    how: Rewind,
    now: Millis,
    done: &mut Rewound,
) -> Result<(), OperateError>
where
    S: TaskStore + CrawlStore,
{
    if *state == CrawlState::Completed {
        done.reopened = store.reopen_crawl(&crawl.id, now).await?;
        *state = CrawlState::Running;
    }
    let moved = match how {
        Rewind::Reschedule => {
            let from = [task.status];
            store
                .reschedule(&crawl.id, &task.task_id, &from, now)
                .await?
        }
        Rewind::Reset => match store.get(&crawl.id, &task.task_id).await? {
            Some(full) => store.reset(&full, now).await?,
            None => false,
        },
    };
    if moved {
        done.urls.push(task.url.clone());
    }
    Ok(())
}

/// An operator's request, as the seeder takes it (`events/seeder-recrawl.json` …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRequest {
    pub crawl_id: CrawlId,
    pub operation: Operation,
}

/// What to do to the crawl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Operation {
    /// The next generation now: every page fetched before (only those matching) fetched again.
    Recrawl {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only: Option<String>,
    },
    /// These pages (or those matching) fetched again now, whatever their status.
    Refetch {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        urls: Vec<String>,
        #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
        matching: Option<String>,
    },
    /// Every fetch forgotten: everything fetched again in full.
    Reset {},
    /// The crawl's configuration replaced (checked as a seed request's is).
    Config { config: Box<CrawlConfig> },
    /// The crawl's current extractors run over its stored pages, no page fetched; once done,
    /// the next generation opens (a completed crawl), so that it is delivered with them. An
    /// unfinished call answers its `cursor`, to ask again with.
    Reextract {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<ReextractCursor>,
    },
    /// No turn of the crawl starts (those running end), and the sweeper leaves it alone, until
    /// it is resumed; nothing is purged (`CrawlConfig::paused`).
    Pause {},
    /// A paused crawl goes on: the sweeper gives its hosts with work their turns again.
    Resume {},
    /// These hosts (`example.com`, `host:port`) are crawled no more: from their next turns their
    /// due tasks, and the links found to them later, end `ignored` without a fetch, the reason
    /// in each task's last error. A retry of the crawl's ignored tasks on a host takes it back.
    DropHosts {
        hosts: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// These hosts' remaining work (pending, failed and in-progress tasks, with their depth and
    /// user data) is added to crawl `to`, then the hosts are dropped from this crawl with the
    /// reason `moved to crawl TO` (hcfpal's move). At most `MOVED_PER_HOST` tasks a host; a
    /// host with more, or work `to` refuses (its scope or page budget), moves nothing away.
    MoveHosts { hosts: Vec<String>, to: CrawlId },
}

/// Tasks with work left a host may have for `move_hosts` to move it (all read in one go).
pub const MOVED_PER_HOST: u32 = 100_000;

/// What an operation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationResponse {
    pub crawl_id: String,
    /// Tasks moved back to pending.
    pub tasks: u64,
    pub reopened: bool,
    /// Turns sent for their hosts.
    pub enqueued: u64,
    /// The configuration's sections that changed (`config`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// What `reextract` did, and its cursor when unfinished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reextracted: Option<Reextracted>,
    /// Whether the crawl is paused now (`pause`, `resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The hosts dropped (`drop_hosts`, `move_hosts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// What `move_hosts` did: the tasks added to the other crawl, and those it knew already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<Moved>,
}

/// The tasks `move_hosts` handed to the other crawl.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub to: String,
    /// New tasks there.
    pub added: u64,
    /// Tasks it had already (its own, or from an earlier move).
    pub already_known: u64,
}

impl Operation {
    /// The tasks this operation takes in `crawl`, and what becomes of them (None: `config`).
    pub fn selection(&self, crawl: &Crawl) -> Result<Option<(Selection, Rewind)>, OperateError> {
        // `field`: the operation's (the CLI's flag of the same name).
        let regex = |field: &str, raw: &str| {
            Regex::new(raw).map_err(|e| {
                OperateError::Invalid(format!(
                    "{field} {raw:?} is not a valid pattern: {}",
                    crate::problem::regex(&e)
                ))
            })
        };
        Ok(Some(match self {
            Operation::Recrawl { only } => {
                let selection = Selection {
                    matching: only.as_deref().map(|p| regex("only", p)).transpose()?,
                    ..Selection::fetched()
                };
                (selection, Rewind::Reschedule)
            }
            Operation::Refetch { urls, matching } => {
                if urls.is_empty() && matching.is_none() {
                    return Err(OperateError::Invalid(
                        "refetch what? give URLs or a match".into(),
                    ));
                }
                let scope = ScopeMatcher::new(&crawl.config.scope)
                    .map_err(|e| OperateError::Invalid(format!("stored scope: {e}")))?;
                let tasks = (!urls.is_empty())
                    .then(|| {
                        urls.iter()
                            .map(|raw| {
                                CanonicalUrl::parse(raw)
                                    .map(|url| scope.normalise(url).task_id())
                                    .map_err(|e| OperateError::Invalid(format!("{raw}: {e}")))
                            })
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .transpose()?;
                let selection = Selection {
                    tasks,
                    matching: matching.as_deref().map(|p| regex("match", p)).transpose()?,
                    ..Selection::settled()
                };
                (selection, Rewind::Reschedule)
            }
            Operation::Reset {} => (Selection::settled(), Rewind::Reset),
            Operation::Config { .. }
            | Operation::Reextract { .. }
            | Operation::Pause {}
            | Operation::Resume {}
            | Operation::DropHosts { .. }
            | Operation::MoveHosts { .. } => return Ok(None),
        }))
    }
}

/// Runs `request` at `now` on `app`'s ports; `queue` gives the moved tasks' hosts their turns
/// (None: a local crawl, whose run rebuilds its queue from the store). A `reextract` stops once
/// `deadline` (on the App's clock) has passed.
pub async fn operate<P: Ports>(
    app: &App<P>,
    queue: Option<&P::Queue>,
    request: &OperationRequest,
    deadline: Option<Instant>,
    now: Millis,
) -> Result<OperationResponse, OperateError> {
    let store = &app.store;
    let crawl = store
        .get_crawl(&request.crawl_id)
        .await?
        .ok_or_else(|| OperateError::Invalid(format!("no crawl {}", request.crawl_id)))?;
    let mut response = OperationResponse {
        crawl_id: crawl.id.to_string(),
        ..OperationResponse::default()
    };
    match (&request.operation, request.operation.selection(&crawl)?) {
        (_, Some((selection, how))) => {
            let done = rewind(store, queue, &crawl, &selection, how, now).await?;
            response.tasks = done.urls.len() as u64;
            response.reopened = done.reopened;
            response.enqueued = done.enqueued;
        }
        (Operation::Config { config }, None) => {
            let mut problems = crate::seed::validate_config(config);
            if config.storage.layout != crawl.config.storage.layout {
                problems.push(format!(
                    "storage.layout: the crawl keeps its bodies as {} for its life",
                    crawl.config.storage.layout.name()
                ));
            }
            if !problems.is_empty() {
                return Err(OperateError::Invalid(problems.join("; ")));
            }
            response.changed = crate::seed::config_differences(&crawl.config, config);
            let config = CrawlConfig {
                paused: crawl.config.paused,
                ..(**config).clone()
            };
            store.update_config(&crawl.id, &config, now).await?;
        }
        (Operation::Pause {} | Operation::Resume {}, None) => {
            let paused = matches!(request.operation, Operation::Pause {});
            if crawl.config.paused != paused {
                let config = CrawlConfig {
                    paused,
                    ..crawl.config.clone()
                };
                store.update_config(&crawl.id, &config, now).await?;
            }
            response.paused = Some(paused);
        }
        (Operation::DropHosts { hosts, reason }, None) => {
            let names = known_hosts(store, &crawl, hosts, "drop").await?;
            response.enqueued = drop_and_wake(store, queue, &crawl, &names, reason, now).await?;
            response.dropped = names;
        }
        (Operation::MoveHosts { hosts, to }, None) => {
            let names = known_hosts(store, &crawl, hosts, "move").await?;
            let moved = move_work(store, queue, &crawl, &names, to, now).await?;
            let reason = Some(format!("moved to crawl {to}"));
            response.enqueued += drop_and_wake(store, queue, &crawl, &names, &reason, now).await?;
            response.dropped = names;
            response.moved = Some(moved);
        }
        (Operation::Reextract { cursor }, None) => {
            if crawl.config.extract.is_empty() {
                return Err(OperateError::Invalid(format!(
                    "crawl {} has no extractors (`extract` in its configuration)",
                    crawl.id
                )));
            }
            let done = reextract(app, &crawl, cursor.clone(), deadline).await?;
            if done.cursor.is_none() && crawl.state == CrawlState::Completed {
                response.reopened = store.reopen_crawl(&crawl.id, now).await?;
            }
            response.reextracted = Some(done);
        }
        (_, None) => {}
    }
    Ok(response)
}

/// `hosts` as the crawl names them (trimmed, lower case, once each), every one checked before
/// anything changes: a mistyped one is refused. `verb`: what the operation does to them.
async fn known_hosts<S: Store>(
    store: &S,
    crawl: &Crawl,
    hosts: &[String],
    verb: &str,
) -> Result<Vec<String>, OperateError> {
    let mut names: Vec<String> = hosts.iter().map(|h| h.trim().to_lowercase()).collect();
    names.sort();
    names.dedup();
    if names.is_empty() || names.iter().any(String::is_empty) {
        return Err(OperateError::Invalid(format!(
            "{verb} which hosts? name them"
        )));
    }
    for name in &names {
        if store.get_host(&crawl.id, name).await?.is_none() {
            return Err(OperateError::Invalid(format!(
                "crawl {} has no host {name:?} (`trawl hosts` lists them)",
                crawl.id
            )));
        }
    }
    Ok(names)
}

/// Drops `names` with `reason`; the turns sent. An idle host with work left gets a turn, which
/// ends that work; the others' next turns (running, or on their way) do.
async fn drop_and_wake<S: Store, Q: WorkQueue>(
    store: &S,
    queue: Option<&Q>,
    crawl: &Crawl,
    names: &[String],
    reason: &Option<String>,
    now: Millis,
) -> Result<u64, OperateError> {
    drop_hosts(store, crawl, names, reason.as_deref(), now).await?;
    let Some(queue) = queue else {
        return Ok(0);
    };
    let which = Reissue::Lost {
        lost_after_ms: LOST_AFTER_MS,
        known_work: false,
    };
    let turns = reissue_turns(store, crawl, names.to_vec(), which, now).await?;
    Ok(queue.send(&turns).await?.sent as u64)
}

/// Adds the remaining work of `crawl`'s hosts `names` to crawl `to` (reopened if it had
/// completed), with each task's depth and user data. Everything is read before anything is
/// added; a host with more than `MOVED_PER_HOST` tasks of work, or a task `to` refuses (out of
/// its scope or its page budget), is an error, so that no work is dropped that was not moved
/// (tasks added before the refusal stay: moving again finds them known).
async fn move_work<S: Store, Q: WorkQueue>(
    store: &S,
    queue: Option<&Q>,
    crawl: &Crawl,
    names: &[String],
    to: &CrawlId,
    now: Millis,
) -> Result<Moved, OperateError> {
    if *to == crawl.id {
        return Err(OperateError::Invalid(format!(
            "move to crawl {to}: the hosts are in it already"
        )));
    }
    let target = store
        .get_crawl(to)
        .await?
        .ok_or_else(|| OperateError::Invalid(format!("move to crawl {to}: no such crawl")))?;
    // A moved task takes the lane its URL's route gives it in `to`.
    let scope = ScopeMatcher::new(&target.config.scope)
        .map_err(|e| OperateError::Invalid(format!("crawl {to}'s stored scope: {e}")))?;
    let mut tasks = Vec::new();
    for name in names {
        let due = store
            .host_tasks(&crawl.id, name, MOVED_PER_HOST + 1)
            .await?;
        if due.len() > MOVED_PER_HOST as usize {
            return Err(OperateError::Invalid(format!(
                "host {name} has more than {MOVED_PER_HOST} tasks due: too many to move at once"
            )));
        }
        for summary in due.iter().filter(|t| {
            matches!(
                t.status,
                Status::Pending | Status::Failed | Status::InProgress
            )
        }) {
            let Some(task) = store.get(&crawl.id, &summary.task_id).await? else {
                continue;
            };
            let url = CanonicalUrl::parse(&task.url)
                .map_err(|e| OperateError::Invalid(format!("stored URL {}: {e}", task.url)))?;
            tasks.push(NewTask {
                lane: scope.lane_of(url.as_str()),
                priority: task.priority,
                url,
                depth: task.depth,
                parent: None,
                data: task.data,
            });
        }
    }
    let wanted = tasks.len() as u64;
    if target.state == CrawlState::Completed && wanted > 0 {
        store.reopen_crawl(&target.id, now).await?;
    }
    let report = match queue {
        Some(queue) => add_tasks(store, queue, &target, tasks, now).await?,
        None => seed_tasks(store, &target, tasks, now).await?.0,
    };
    let refused = wanted - report.accepted - report.already_known;
    if refused > 0 {
        return Err(OperateError::Invalid(format!(
            "crawl {to} took {} of the {wanted} tasks ({} rejected, {} over its page budget, \
             {} over a host's task limit): the hosts stay in crawl {}",
            report.accepted + report.already_known,
            report.rejected.len(),
            report.over_budget,
            report.deferred,
            crawl.id
        )));
    }
    Ok(Moved {
        to: to.to_string(),
        added: report.accepted,
        already_known: report.already_known,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_samples_are_operation_requests() {
        for sample in [
            include_str!("../../../events/seeder-recrawl.json"),
            include_str!("../../../events/seeder-refetch.json"),
            include_str!("../../../events/seeder-reset.json"),
            include_str!("../../../events/seeder-config.json"),
            include_str!("../../../events/seeder-reextract.json"),
            include_str!("../../../events/seeder-pause.json"),
            include_str!("../../../events/seeder-resume.json"),
            include_str!("../../../events/seeder-drop-hosts.json"),
            include_str!("../../../events/seeder-move-hosts.json"),
        ] {
            let request: OperationRequest = serde_json::from_str(sample).unwrap();
            assert_eq!(request.crawl_id.as_str(), "example-com");
        }
        let unknown = r#"{"crawl_id": "c", "operation": {"rewind": {}}}"#;
        assert!(serde_json::from_str::<OperationRequest>(unknown).is_err());
    }
}
