//! The frontier: URLs wait in the task table, hosts are scheduled. Adding URLs to a crawl (the one
//! path shared by the seeder and link discovery) and the host records' read-decide-write.
//!
//! Adding URLs is idempotent (a known URL is never reset, and is found by a batched read before
//! anything is written: no page slot, offer or refused put for it), bounded by the crawl's page budget
//! (never exceeded, whatever the concurrency), and wakes only idle hosts: a host with a turn
//! running or a message out finds its new work itself, so the queue holds one message per host
//! with work, not one per URL. A message that cannot be sent is reported; its tasks stay
//! `pending` and the sweeper re-issues the host's turn, so nothing is lost.

use crate::app::Store;
use crate::backoff::{Backoff, Transient, persist};
use crate::clock::SystemClock;
use crate::queue::{QueueError, WorkMessage, WorkQueue, send_patiently};
use crate::store::{HostCounts, HostStore, Seeded, StoreError, StoreResult};
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicU64;
use thiserror::Error;
use trawl_domain::canonical::TaskId;
use trawl_domain::canonical::UrlError;
use trawl_domain::crawl::Crawl;
use trawl_domain::host::{Host, HostPolicy, Turn};
use trawl_domain::request::RequestId;
use trawl_domain::task::{Millis, NewTask, Priority};

/// Read-decide-write rounds on one host record before giving up as contended.
const HOST_WRITE_ATTEMPTS: usize = 8;
/// Host records read at once to apply the hosts' task limits (`max_host_tasks`).
const HOST_READ_PARALLELISM: usize = 16;
/// Host records re-issued at once (`reissue_turns`): as many as the DynamoDB adapter reads at
/// once while listing hosts.
const REISSUE_PARALLELISM: usize = 16;

#[derive(Debug, Error)]
pub enum FrontierError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl Transient for FrontierError {
    fn is_transient(&self) -> bool {
        match self {
            FrontierError::Store(e) => e.is_transient(),
            FrontierError::Queue(e) => e.is_transient(),
        }
    }
}

/// What adding a set of URLs did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// New tasks created (their hosts woken, unless listed in `enqueue_failed`).
    pub accepted: u64,
    /// URLs the crawl already had (left untouched).
    pub already_known: u64,
    /// URLs past the crawl's `max_pages` budget (not added).
    pub over_budget: u64,
    /// URLs past their host's `max_host_tasks` (not added; a later fetch of a page linking to
    /// them finds them again, should the limit allow them then).
    pub deferred: u64,
    /// URLs that were not valid, with the reason.
    pub rejected: Vec<UrlError>,
    /// Hosts whose turn message could not be sent (the sweeper will re-issue it).
    pub enqueue_failed: Vec<(String, String)>,
}

impl SeedReport {
    pub fn merge(&mut self, other: SeedReport) {
        self.accepted += other.accepted;
        self.already_known += other.already_known;
        self.over_budget += other.over_budget;
        self.deferred += other.deferred;
        self.rejected.extend(other.rejected);
        self.enqueue_failed.extend(other.enqueue_failed);
    }
}

/// Adds `tasks` to `crawl`: dedupes them, takes page-budget slots, seeds, wakes their hosts.
pub async fn add_tasks<S, Q>(
    store: &S,
    queue: &Q,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
    now: Millis,
) -> Result<SeedReport, FrontierError>
where
    S: Store,
    Q: WorkQueue,
{
    let (mut report, messages) = seed_tasks(store, crawl, tasks, now).await?;
    if !messages.is_empty() {
        report.enqueue_failed = send_patiently(queue, &messages).await?.failed;
    }
    Ok(report)
}

/// `add_tasks` without the sending: returns the turn messages of the hosts it woke, for a caller
/// that pools them into fewer, fuller batches (the crawler, per batch). Until they are sent
/// those hosts wait with a message presumed out, which the sweeper re-issues if the send never
/// happens.
pub async fn seed_tasks<S>(
    store: &S,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
    now: Millis,
) -> Result<(SeedReport, Vec<WorkMessage>), FrontierError>
where
    S: Store,
{
    let (report, messages, _) = seed_in_turn(store, crawl, tasks, None, now).await?;
    Ok((report, messages))
}

/// `seed_tasks` by the holder of `held`'s turn (link discovery): the URLs of the held host are
/// not written to its record one page at a time (the busiest write of all) but counted and
/// returned, for the holder to add when it hands the host back. Safe: while the turn runs the
/// host needs no waking, and should the holder die, its expired turn is re-issued and finds the
/// tasks in the host's due index.
pub async fn seed_in_turn<S>(
    store: &S,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
    held: Option<&str>,
    now: Millis,
) -> Result<(SeedReport, Vec<WorkMessage>, u64), FrontierError>
where
    S: Store,
{
    let mut seen = HashSet::new();
    let tasks: Vec<NewTask> = tasks
        .into_iter()
        .filter(|t| seen.insert(t.task_id()))
        .collect();
    let mut report = SeedReport::default();
    // Known tasks are told apart by one batched read, not by refused puts (a refused write
    // costs what one that lands costs): they take no page slot, no offer and no put.
    let ids: Vec<TaskId> = tasks.iter().map(NewTask::task_id).collect();
    let known = if ids.is_empty() {
        Vec::new()
    } else {
        store.known(&crawl.id, &ids).await?
    };
    let mut tasks: Vec<NewTask> = tasks
        .into_iter()
        .zip(known)
        .filter_map(|(task, known)| (!known).then_some(task))
        .collect();
    report.already_known = seen.len() as u64 - tasks.len() as u64;
    if crawl.config.politeness.caps_hosts() {
        let before = tasks.len();
        tasks = within_host_limits(store, crawl, tasks).await?;
        report.deferred = (before - tasks.len()) as u64;
    }
    let reserved = match crawl.config.scope.max_pages {
        Some(max) => {
            let granted = store
                .reserve_pages(&crawl.id, tasks.len() as u64, max)
                .await?;
            report.over_budget = tasks.len() as u64 - granted;
            tasks.truncate(granted as usize);
            Some(granted)
        }
        None => None,
    };
    if tasks.is_empty() {
        return Ok((report, Vec::new(), 0));
    }
    // The hosts learn of their URLs before the tasks exist, so that no task can wait unknown
    // to its host (a crash in between leaves a host woken for nothing: one empty turn).
    let mut offered: BTreeMap<String, (u64, Priority)> = BTreeMap::new();
    for task in &tasks {
        let (n, priority) = offered.entry(task.url.host_key()).or_default();
        *n += 1;
        *priority = (*priority).max(task.priority);
    }
    let held_offered = held.and_then(|h| offered.remove(h)).map_or(0, |(n, _)| n);
    let mut messages = Vec::new();
    for (host, (n, priority)) in offered {
        if let Some(message) = offer(store, crawl, &host, n, priority, now).await? {
            messages.push(message);
        }
    }
    let seeded = store.seed(&crawl.id, &tasks, now).await?;
    for outcome in &seeded {
        match outcome {
            Seeded::Created => report.accepted += 1,
            // Created since the read (another worker found it too).
            Seeded::AlreadyKnown => report.already_known += 1,
        }
    }
    if let Some(granted) = reserved {
        // Slots taken for URLs the crawl already had go back to the budget.
        store
            .release_pages(&crawl.id, granted - report.accepted)
            .await?;
    }
    Ok((report, messages, held_offered))
}

/// `tasks` (new ones) without those past their host's `max_host_tasks`: a read of each host's
/// record (its `seeded` count), made only for a crawl that limits its hosts.
async fn within_host_limits<S: HostStore>(
    store: &S,
    crawl: &Crawl,
    tasks: Vec<NewTask>,
) -> StoreResult<Vec<NewTask>> {
    let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
    for task in &tasks {
        *wanted.entry(task.url.host_key()).or_default() += 1;
    }
    let politeness = &crawl.config.politeness;
    let mut room: BTreeMap<String, u64> = futures_util::stream::iter(wanted)
        .map(|(name, n)| async move {
            let seeded = store
                .get_host(&crawl.id, &name)
                .await?
                .map_or(0, |host| host.seeded);
            let room = politeness.host_room(&name, seeded, n);
            Ok::<_, StoreError>((name, room))
        })
        .buffer_unordered(HOST_READ_PARALLELISM)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<StoreResult<_>>()?;
    Ok(tasks
        .into_iter()
        .filter(|task| match room.get_mut(&task.url.host_key()) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        })
        .collect())
}

/// Tells `name` of `n` URLs: one atomic add to its offers, which moves no version (neither
/// seeders of a busy host nor its own turn claims contend with it), and a wake-up when it was
/// idle, its priority raised to `priority` (the URLs' highest). Returns the message of its turn
/// when it was woken. The add is a request
/// (`trawl_domain::request`), tried again with its id while the store is unavailable: an offer
/// that landed while its answer was lost is counted once.
async fn offer<S: HostStore>(
    store: &S,
    crawl: &Crawl,
    name: &str,
    n: u64,
    priority: Priority,
    now: Millis,
) -> StoreResult<Option<WorkMessage>> {
    let request = RequestId(fastrand::u64(..));
    let retries = AtomicU64::new(0);
    let offered = persist(
        &SystemClock,
        "offer URLs to their host",
        &Backoff::BRIEF,
        &retries,
        || store.add_seeded(&crawl.id, name, n, request),
    )
    .await?;
    let to_add = match offered {
        Some(host) if !host.is_idle(now) => return Ok(None),
        // Counted; wake it unless someone else did meanwhile.
        Some(_) => 0,
        // No record yet: created with the count (or added to the record a racer created).
        None => n,
    };
    let woken = update_host(store, crawl, name, now, |h| {
        let (next, send) = h.note_seeded(to_add, now);
        let next = match send {
            Some(_) => next.with_priority_at_least(priority),
            None => next,
        };
        let write = to_add > 0 || send.is_some();
        (write.then_some(next), send)
    })
    .await?;
    Ok(match woken {
        Some((host, Some(visible_at))) => Some(turn_message(crawl, &host, visible_at, now)),
        _ => None,
    })
}

/// The message of `host`'s next turn (its current epoch, its due work's priority), visible at
/// `visible_at`.
pub fn turn_message(crawl: &Crawl, host: &Host, visible_at: Millis, now: Millis) -> WorkMessage {
    let delay_ms = u64::try_from(visible_at.saturating_sub(now)).unwrap_or(0);
    WorkMessage::new(crawl.id.clone(), host.name.clone(), host.epoch, delay_ms)
        .with_priority(host.priority)
}

/// Read-decide-write of one host record (a new one from the crawl's politeness when there is
/// none). `decide` sees the stored host and returns the host to write (None: write nothing) and
/// what to hand back; a lost race re-reads and decides again. Returns the host as written (or
/// as read, when nothing was written) and `decide`'s answer.
pub async fn update_host<S, T>(
    store: &S,
    crawl: &Crawl,
    name: &str,
    now: Millis,
    decide: impl FnMut(&Host) -> (Option<Host>, T),
) -> StoreResult<Option<(Host, T)>>
where
    S: HostStore,
{
    update_host_from(store, crawl, name, None, now, decide).await
}

/// Renews `turn`'s hold on its host until `now + hold_ms` (`Host::renew`: a heartbeat of its
/// live holder), deciding first over `known`, the record as the holder last wrote it (a stale
/// one is read again). Returns the record as written, or None when the turn is no longer the
/// host's (taken over, or re-issued after its hold ran out): its holder stops.
pub async fn renew_turn<S: HostStore>(
    store: &S,
    crawl: &Crawl,
    known: &Host,
    turn: &Turn,
    now: Millis,
    hold_ms: u64,
) -> StoreResult<Option<Host>> {
    let renewed = update_host_from(
        store,
        crawl,
        &known.name,
        Some(known.clone()),
        now,
        |h| match h.renew(turn, now, hold_ms) {
            Some(next) => (Some(next), true),
            None => (None, false),
        },
    )
    .await?;
    Ok(renewed.and_then(|(host, renewed)| renewed.then_some(host)))
}

/// `update_host` deciding first over `known`, the record as the caller just read it (a listing:
/// it saves a read per host); a stale one loses the write's version check, and the next round
/// reads the record.
async fn update_host_from<S, T>(
    store: &S,
    crawl: &Crawl,
    name: &str,
    mut known: Option<Host>,
    now: Millis,
    mut decide: impl FnMut(&Host) -> (Option<Host>, T),
) -> StoreResult<Option<(Host, T)>>
where
    S: HostStore,
{
    for _ in 0..HOST_WRITE_ATTEMPTS {
        let stored = match known.take() {
            Some(host) => Some(host),
            None => store.get_host(&crawl.id, name).await?,
        };
        let existed = stored.is_some();
        let current = match stored {
            Some(host) => host,
            None => Host::new(name, &crawl.config.politeness.host_policy(name), now),
        };
        let (next, answer) = decide(&current);
        let Some(next) = next else {
            return Ok(Some((current, answer)));
        };
        let next = Host {
            version: current.version,
            ..next
        };
        // Exact: the write lands only over the version read.
        let counted = HostCounts::change(existed.then_some(&current), &next);
        if store.put_host(&crawl.id, &next, counted).await? {
            let written = Host {
                version: current.version + 1,
                ..next
            };
            return Ok(Some((written, answer)));
        }
    }
    Err(StoreError::unavailable(
        "put_host",
        format!("host record {name} kept changing under {HOST_WRITE_ATTEMPTS} writes"),
    ))
}

/// A host `reissue_turns` is given: by name (its record is read), or its record as the caller
/// just listed it (decided over as listed: a stale one loses the write's version check and is
/// read then).
pub enum HostRef {
    Name(String),
    Listed(Box<Host>),
}

impl From<String> for HostRef {
    fn from(name: String) -> Self {
        HostRef::Name(name)
    }
}

impl From<Host> for HostRef {
    fn from(host: Host) -> Self {
        HostRef::Listed(Box::new(host))
    }
}

/// Which hosts `reissue_turns` gives a new turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reissue {
    /// Those whose message is presumed lost (`Host::message_lost`); `known_work`: the caller saw
    /// due tasks of each.
    Lost {
        lost_after_ms: u64,
        known_work: bool,
    },
    /// Every one, taking over any turn that seems to run (the in-process queue was rebuilt
    /// after a restart: no message is out, and no turn runs).
    Restart,
}

/// Re-issues the turn of each of `hosts` that `which` selects, `REISSUE_PARALLELISM` host
/// records at a time (each its own read-decide-write: a page of hosts costs a few round trips,
/// not one per host). Returns the messages to send, in the order of `hosts`.
pub async fn reissue_turns<S, H>(
    store: &S,
    crawl: &Crawl,
    hosts: impl IntoIterator<Item = H>,
    which: Reissue,
    now: Millis,
) -> StoreResult<Vec<WorkMessage>>
where
    S: HostStore,
    H: Into<HostRef>,
{
    let decide = move |h: &Host| {
        let (next, visible_at) = match which {
            Reissue::Restart => h.restart(now),
            Reissue::Lost {
                lost_after_ms,
                known_work,
            } if h.message_lost(now, lost_after_ms, known_work) => h.requeue(now),
            Reissue::Lost { .. } => return (None, None),
        };
        (Some(next), Some(visible_at))
    };
    let requeued: Vec<StoreResult<_>> = futures_util::stream::iter(hosts)
        .map(|host| async move {
            let (name, known) = match host.into() {
                HostRef::Name(name) => (name, None),
                HostRef::Listed(host) => (host.name.clone(), Some(*host)),
            };
            update_host_from(store, crawl, &name, known, now, decide).await
        })
        .buffered(REISSUE_PARALLELISM)
        .collect()
        .await;
    let mut messages = Vec::new();
    for requeued in requeued {
        if let Some((host, Some(visible_at))) = requeued? {
            messages.push(turn_message(crawl, &host, visible_at, now));
        }
    }
    Ok(messages)
}

/// Gives the given-up ones among `hosts` another chance (an operator's retry): their trouble is
/// forgotten, so their next turn fetches again; and rewinds each one's pass (`Pass::rewound`),
/// since the rewind made tasks due behind its roster cursor.
pub async fn revive_hosts<S>(
    store: &S,
    crawl: &Crawl,
    hosts: &[String],
    now: Millis,
) -> StoreResult<()>
where
    S: HostStore,
{
    rewind_each(store, crawl, hosts, now, |h, policy| match h.given_up {
        Some(_) => h.revive(policy),
        None => h.clone(),
    })
    .await
}

/// Rewinds the passes of `hosts` (`Pass::rewound`): their tasks were made due behind their
/// roster cursors (a sitemap's newer lastmod), where their next turns would not read them.
pub async fn rewind_hosts<S>(
    store: &S,
    crawl: &Crawl,
    hosts: &[String],
    now: Millis,
) -> StoreResult<()>
where
    S: HostStore,
{
    rewind_each(store, crawl, hosts, now, |h, _| h.clone()).await
}

/// Rewinds the pass of each of `hosts`, its record changed first by `change` (given the host's
/// politeness).
async fn rewind_each<S>(
    store: &S,
    crawl: &Crawl,
    hosts: &[String],
    now: Millis,
    change: impl Fn(&Host, &HostPolicy) -> Host,
) -> StoreResult<()>
where
    S: HostStore,
{
    for name in hosts {
        let policy = crawl.config.politeness.host_policy(name);
        update_host(store, crawl, name, now, |h| {
            let pass = h.pass.rewound();
            (
                Some(Host {
                    pass,
                    ..change(h, &policy)
                }),
                (),
            )
        })
        .await?;
    }
    Ok(())
}

/// Drops `hosts` (an operator's): each is given up with `reason` (`Host::dropped`), so that its
/// next turns end its due tasks `ignored` without a fetch, until a retry revives it.
pub async fn drop_hosts<S>(
    store: &S,
    crawl: &Crawl,
    hosts: &[String],
    reason: Option<&str>,
    now: Millis,
) -> StoreResult<()>
where
    S: HostStore,
{
    for name in hosts {
        update_host(store, crawl, name, now, |h| (Some(h.dropped(reason)), ())).await?;
    }
    Ok(())
}

/// The distinct hosts of some task URLs.
pub fn hosts_of<'a>(urls: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut hosts: Vec<String> = urls
        .into_iter()
        .map(trawl_domain::canonical::host_key_of)
        .filter(|h| !h.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CrawlStore;
    use crate::store::memory::MemoryStore;
    use trawl_domain::canonical::CrawlId;
    use trawl_domain::crawl::CrawlConfig;

    const LOST: Reissue = Reissue::Lost {
        lost_after_ms: 300_000,
        known_work: false,
    };

    #[tokio::test]
    async fn a_listed_record_is_decided_over_as_listed_and_a_stale_one_read_again() {
        let store = MemoryStore::new();
        let crawl = Crawl::new(CrawlId::parse("c").unwrap(), CrawlConfig::default(), 0);
        store.create_crawl(&crawl).await.unwrap();
        // A host idle with work left (its message lost), as a listing saw it…
        let policy = crawl.config.politeness.host_policy("h.test");
        let idle = Host {
            seeded: 1,
            ..Host::new("h.test", &policy, 0)
        };
        let counted = HostCounts::change(None, &idle);
        assert!(store.put_host(&crawl.id, &idle, counted).await.unwrap());
        let listed = store.get_host(&crawl.id, "h.test").await.unwrap().unwrap();
        // …whose turn a worker has claimed since.
        update_host(&store, &crawl, "h.test", 10, |h| {
            (h.claim_turn(10, 60_000).ok().map(|(next, _)| next), ())
        })
        .await
        .unwrap();

        // The stale record loses the version check: the host is read, and its running turn
        // is left alone.
        let messages = reissue_turns(&store, &crawl, [listed], LOST, 20)
            .await
            .unwrap();
        assert!(messages.is_empty(), "{messages:?}");

        // Once that turn has expired unreturned, the record as listed is re-issued.
        let listed = store.get_host(&crawl.id, "h.test").await.unwrap().unwrap();
        let at = 10 + 60_000;
        let messages = reissue_turns(&store, &crawl, [listed], LOST, at)
            .await
            .unwrap();
        assert_eq!(messages.len(), 1);
        let host = store.get_host(&crawl.id, "h.test").await.unwrap().unwrap();
        assert_eq!((messages[0].epoch, host.queued_for), (host.epoch, Some(at)));
    }
}
