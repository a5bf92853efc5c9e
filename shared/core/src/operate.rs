//! An operator's rewinds of a crawl: the next generation now (`trawl recrawl`), a forced
//! refetch, an operator's retry, a reset that forgets every fetch. Each selects tasks, moves
//! them back to `pending` through the state machine (`transition::reschedule`, or
//! `transition::reset`), reopens a completed crawl first (so that a running crawl owns the
//! work) and gives their hosts a turn.

use crate::frontier::{FrontierError, Reissue, hosts_of, reissue_turns, revive_hosts};
use crate::queue::{QueueError, WorkQueue};
use crate::store::{CrawlStore, HostStore, StoreError, TaskQuery, TaskStore, TaskSummary};
use regex::Regex;
use thiserror::Error;
use trawl_domain::canonical::{TaskId, host_key_of};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::task::{Millis, Status};

/// How long a woken host's earlier message may be overdue before it is presumed lost.
const LOST_AFTER_MS: u64 = 60_000;

#[derive(Debug, Error)]
pub enum OperateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Frontier(#[from] FrontierError),
    #[error(transparent)]
    Queue(#[from] QueueError),
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
    S: TaskStore + CrawlStore + HostStore,
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
