//! The in-memory status store: maps behind a mutex, applying the domain's transitions. No I/O,
//! so unit tests and simulators run without a database; it passes the same conformance suite as
//! DynamoDB and SQLite. Every call is atomic (the lock is held for the whole read-decide-write
//! and never across an await).

use super::budget::PageBudget;
use super::{
    Applied, CrawlRecords, HostCounts, HostPage, HostStore, Seeded, StatusCounts, StoreError,
    StoreResult, TaskPage, TaskQuery, TaskRecords, TaskSummary,
};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use trawl_domain::calls::CallTally;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::request::{REQUEST_WINDOW_MS, RequestId};
use trawl_domain::task::{Millis, Task};
use trawl_domain::transition::{Insert, Update};

/// Marks cursors this store issued.
const CURSOR_TAG: &str = "memory1";

#[derive(Debug, Default)]
struct Tables {
    crawls: BTreeMap<CrawlId, Crawl>,
    tasks: BTreeMap<CrawlId, BTreeMap<TaskId, Task>>,
    /// The hosts' due index (`due_tasks`), as SQLite's and DynamoDB's: (host, due key, task) of
    /// every task with a due time, kept by every task write, so that a turn's query reads its
    /// host's pages, not the crawl's. Each entry holds the task's summary, as the stores'
    /// index items do: a turn reads its host's due tasks again and again, and looking each
    /// one up in the crawl's tasks was most of the freshness simulation's time.
    due: BTreeMap<CrawlId, DueIndex>,
    hosts: BTreeMap<CrawlId, BTreeMap<String, Host>>,
    /// Kept by `put_host` for crawls created with them (`HostStore::host_counts`).
    host_counts: BTreeMap<CrawlId, HostCounts>,
    host_scans: BTreeMap<CrawlId, String>,
    requests: Requests,
}

/// The requests applied (`trawl_domain::request`), kept for the request window after they were.
#[derive(Debug, Default)]
struct Requests {
    applied: HashSet<(CrawlId, RequestId)>,
    /// In the order applied, to forget the oldest first.
    order: VecDeque<(Millis, CrawlId, RequestId)>,
}

impl Requests {
    fn applied(&self, crawl_id: &CrawlId, request: Option<RequestId>) -> bool {
        request.is_some_and(|r| self.applied.contains(&(crawl_id.clone(), r)))
    }

    fn record(&mut self, crawl_id: &CrawlId, request: Option<RequestId>) {
        let Some(request) = request else { return };
        let now = trawl_domain::task::now_ms();
        let window = REQUEST_WINDOW_MS as Millis;
        while let Some((at, ..)) = self.order.front() {
            if at.saturating_add(window) >= now {
                break;
            }
            if let Some((_, crawl, old)) = self.order.pop_front() {
                self.applied.remove(&(crawl, old));
            }
        }
        self.applied.insert((crawl_id.clone(), request));
        self.order.push_back((now, crawl_id.clone(), request));
    }
}

/// One crawl's due index: per host, its tasks with a due time by (due key, task), with their
/// summaries.
type DueIndex = BTreeMap<String, BTreeMap<(Millis, TaskId), TaskSummary>>;

/// Keeps `due` for a task written over `before` (None: a new task).
fn index(due: &mut BTreeMap<CrawlId, DueIndex>, before: Option<&Task>, after: &Task) {
    let key = |t: &Task| t.due_key().map(|at| (t.host(), (at, t.task_id.clone())));
    let (old, new) = (before.and_then(key), key(after));
    if old.is_none() && new.is_none() {
        return;
    }
    let hosts = due.entry(after.crawl_id.clone()).or_default();
    if let Some((host, at)) = old
        && let Some(tasks) = hosts.get_mut(&host)
    {
        tasks.remove(&at);
    }
    if let Some((host, at)) = new {
        hosts
            .entry(host)
            .or_default()
            .insert(at, TaskSummary::from(after));
    }
}

impl Tables {
    fn task(&self, crawl_id: &CrawlId, task_id: &TaskId) -> Option<&Task> {
        self.tasks.get(crawl_id)?.get(task_id)
    }

    fn tasks_of(&self, crawl_id: &CrawlId) -> impl Iterator<Item = &Task> {
        self.tasks
            .get(crawl_id)
            .into_iter()
            .flat_map(|tasks| tasks.values())
    }
}

/// The in-memory adapter. Clones share the same tables.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Tables) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut tables = self.tables.lock().map_err(|_| {
            StoreError::backend(operation, "store lock poisoned by a panicked call")
        })?;
        work(&mut tables)
    }
}

fn encode_cursor(updated: Millis, task_id: &TaskId) -> String {
    format!("{CURSOR_TAG}:{updated}:{task_id}")
}

fn decode_cursor(cursor: &str) -> StoreResult<(Millis, TaskId)> {
    let rest = cursor
        .strip_prefix(CURSOR_TAG)
        .and_then(|r| r.strip_prefix(':'))
        .ok_or(StoreError::InvalidCursor)?;
    let (updated, task_id) = rest.split_once(':').ok_or(StoreError::InvalidCursor)?;
    let updated = updated.parse().map_err(|_| StoreError::InvalidCursor)?;
    let task_id = TaskId::parse(task_id).ok_or(StoreError::InvalidCursor)?;
    Ok((updated, task_id))
}

impl CrawlRecords for MemoryStore {
    async fn insert_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        self.with("create_crawl", |t| {
            Ok(match t.crawls.entry(crawl.id.clone()) {
                Entry::Vacant(slot) => {
                    t.host_counts.entry(crawl.id.clone()).or_default();
                    (slot.insert(crawl.clone()).clone(), true)
                }
                Entry::Occupied(existing) => (existing.get().clone(), false),
            })
        })
    }

    async fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        self.with("get_crawl", |t| Ok(t.crawls.get(id).cloned()))
    }

    async fn query_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        self.with("list_crawls", |t| {
            Ok(t.crawls
                .values()
                .filter(|c| state.is_none_or(|s| c.state == s))
                .cloned()
                .collect())
        })
    }

    async fn apply_crawl(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<Applied<Crawl>> {
        self.with(update.event.name(), |t| {
            let Some(stored) = t.crawls.get_mut(id) else {
                return Ok(Applied::Refused { current: None });
            };
            if t.requests.applied(id, update.request) {
                return Ok(Applied::Landed {
                    current: stored.clone(),
                });
            }
            Ok(match update.apply(stored) {
                Some(next) => {
                    t.requests.record(id, update.request);
                    Applied::Done {
                        before: std::mem::replace(stored, next),
                    }
                }
                None => Applied::Refused {
                    current: Some(stored.clone()),
                },
            })
        })
    }

    async fn remove_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        self.with("delete_crawl", |t| {
            t.crawls.remove(id);
            Ok(())
        })
    }

    fn own_calls(&self) -> CallTally {
        CallTally::new()
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        None
    }
}

impl TaskRecords for MemoryStore {
    async fn insert(&self, tasks: &[Insert]) -> StoreResult<Vec<Seeded>> {
        self.with("seed", |t| {
            Ok(tasks
                .iter()
                .map(|insert| {
                    let crawl = t.tasks.entry(insert.task.crawl_id.clone()).or_default();
                    match crawl.entry(insert.task.task_id.clone()) {
                        Entry::Vacant(slot) => {
                            slot.insert(insert.task.clone());
                            index(&mut t.due, None, &insert.task);
                            Seeded::Created
                        }
                        Entry::Occupied(_) => Seeded::AlreadyKnown,
                    }
                })
                .collect())
        })
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        self.with("get", |t| Ok(t.task(crawl_id, task_id).cloned()))
    }

    async fn known(&self, crawl_id: &CrawlId, ids: &[TaskId]) -> StoreResult<Vec<bool>> {
        self.with("known", |t| {
            Ok(ids
                .iter()
                .map(|id| t.task(crawl_id, id).is_some())
                .collect())
        })
    }

    async fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> StoreResult<Applied<Task>> {
        self.with(update.event.name(), |t| {
            let stored = t.tasks.get_mut(crawl_id).and_then(|c| c.get_mut(task_id));
            Ok(match stored {
                Some(stored) => match update.apply(stored) {
                    Some(next) => {
                        let before = std::mem::replace(stored, next);
                        index(&mut t.due, Some(&before), stored);
                        Applied::Done { before }
                    }
                    None => Applied::Refused {
                        current: Some(stored.clone()),
                    },
                },
                None => Applied::Refused { current: None },
            })
        })
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let before = query.updated_before.unwrap_or(Millis::MAX);
        let limit = query.limit.max(1) as usize;
        self.with("query", |t| {
            let mut matching: Vec<&Task> = t
                .tasks_of(&query.crawl_id)
                .filter(|task| task.status == query.status && task.updated_at <= before)
                .filter(|task| query.part.holds(task.task_id.shard(query.part.of)))
                .filter(|task| {
                    after
                        .as_ref()
                        .is_none_or(|(at, id)| (task.updated_at, &task.task_id) > (*at, id))
                })
                .collect();
            matching.sort_by(|a, b| (a.updated_at, &a.task_id).cmp(&(b.updated_at, &b.task_id)));
            let more = matching.len() > limit;
            let tasks: Vec<TaskSummary> = matching
                .into_iter()
                .take(limit)
                .map(TaskSummary::from)
                .collect();
            let cursor = match tasks.last() {
                Some(last) if more => Some(encode_cursor(last.updated_at, &last.task_id)),
                _ => None,
            };
            Ok(TaskPage { tasks, cursor })
        })
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        self.with("counts", |t| {
            let mut counts = StatusCounts::new();
            for task in t.tasks_of(crawl_id) {
                *counts.entry(task.status).or_default() += 1;
            }
            Ok(counts)
        })
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        self.with("due_tasks", |t| {
            let Some(due) = t.due.get(crawl_id).and_then(|hosts| hosts.get(host)) else {
                return Ok(Vec::new());
            };
            Ok(due.values().take(limit as usize).cloned().collect())
        })
    }

    async fn due_in_lane(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        lane: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        self.with("due_tasks", |t| {
            let (Some(due), Some(tasks)) = (
                t.due.get(crawl_id).and_then(|hosts| hosts.get(host)),
                t.tasks.get(crawl_id),
            ) else {
                return Ok(Vec::new());
            };
            Ok(due
                .values()
                .filter(|s| {
                    tasks
                        .get(&s.task_id)
                        .is_some_and(|task| task.lane.as_deref() == Some(lane))
                })
                .take(limit as usize)
                .cloned()
                .collect())
        })
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        self.with("delete_tasks", |t| {
            t.due.remove(crawl_id);
            Ok(t.tasks
                .remove(crawl_id)
                .map_or(0, |tasks| tasks.len() as u64))
        })
    }
}

impl HostStore for MemoryStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        self.with("get_host", |t| {
            Ok(t.hosts.get(crawl_id).and_then(|h| h.get(name)).cloned())
        })
    }

    async fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        self.with("put_host", |t| {
            let hosts = t.hosts.entry(crawl_id.clone()).or_default();
            let (stored, offered) = hosts
                .get(&host.name)
                .map_or((0, 0), |h| (h.version, h.offered));
            if stored != host.version || (host.waits_for_offers() && offered != host.offered) {
                return Ok(false);
            }
            let written = Host {
                version: host.version + 1,
                seeded: host.seeded_by_writes(),
                offered: 0,
                ..host.clone()
            }
            .with_offers(offered);
            hosts.insert(host.name.clone(), written);
            if let Some(counts) = t.host_counts.get_mut(crawl_id) {
                counts.add(counted);
            }
            Ok(true)
        })
    }

    async fn host_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<HostCounts>> {
        self.with("host_counts", |t| Ok(t.host_counts.get(crawl_id).copied()))
    }

    async fn host_scan(&self, crawl_id: &CrawlId) -> StoreResult<Option<String>> {
        self.with("host_scan", |t| Ok(t.host_scans.get(crawl_id).cloned()))
    }

    async fn set_host_scan(&self, crawl_id: &CrawlId, at: Option<&str>) -> StoreResult<()> {
        self.with("set_host_scan", |t| {
            match at {
                Some(at) => t.host_scans.insert(crawl_id.clone(), at.to_owned()),
                None => t.host_scans.remove(crawl_id),
            };
            Ok(())
        })
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> StoreResult<Option<Host>> {
        self.with("add_seeded", |t| {
            let host = t.hosts.get_mut(crawl_id).and_then(|h| h.get_mut(name));
            Ok(host.map(|host| {
                if !t.requests.applied(crawl_id, Some(request)) {
                    t.requests.record(crawl_id, Some(request));
                    host.seeded += n;
                    host.offered += n;
                }
                host.clone()
            }))
        })
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        self.with("list_hosts", |t| {
            let limit = limit.max(1) as usize;
            let after = cursor.unwrap_or_default();
            let mut hosts: Vec<Host> = t
                .hosts
                .get(crawl_id)
                .into_iter()
                .flat_map(|h| {
                    h.range::<String, _>((
                        std::ops::Bound::Excluded(after.clone()),
                        std::ops::Bound::Unbounded,
                    ))
                })
                .map(|(_, h)| h.clone())
                .take(limit + 1)
                .collect();
            let more = hosts.len() > limit;
            hosts.truncate(limit);
            let cursor = more.then(|| hosts.last().map(|h| h.name.clone())).flatten();
            Ok(HostPage { hosts, cursor })
        })
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        self.with("delete_hosts", |t| {
            t.host_counts.remove(crawl_id);
            t.host_scans.remove(crawl_id);
            Ok(t.hosts.remove(crawl_id).map_or(0, |h| h.len() as u64))
        })
    }
}
