//! The capacity simulator following links: a crawl of a [`LinkGraph`] from a few home pages,
//! on the in-memory store metered as DynamoDB, in virtual time, through the functions' paths:
//! - the fleet fetches at most the target rate (1,653 pages/s) between its workers: the
//!   figures are per-key peaks at that rate, whatever the turns' lengths;
//! - a turn message (from a seed, an offer or a hand-back) waits for one of `workers` workers,
//!   which claims the host's turn (`update_host` with the crawler's epoch check and
//!   `Host::claim_turn`);
//! - a turn fetches its host's discovered pages at the host's pace (`Host::observe`), up to
//!   `turn_pages`; each page claims its task in the turn and finishes it, and its links go
//!   through `seed_in_turn` as the crawler's do: known ones told apart by the batched read, new
//!   ones put, other hosts offered their new URLs (`add_seeded`, created and woken when new),
//!   the held host's counted for its hand-back. A turn remembers the links it sent (the
//!   crawler's memory of links seeded, here as a container that is cold at every turn);
//! - the turn hands its host back (`Host::merge_turn`, `Host::hand_back`, with DynamoDB's
//!   settle time), and every `BATCH` turns a crawler batch reports its calls (on one of the
//!   crawl's report lanes).
//!
//! Which pages a host has left to fetch is kept beside the store (the memory store's due list
//! is a scan): the store's answers (`known`) decide what is new, so both agree.
//!
//! Then a burst of host creation: pages naming only new hosts, `BURST_RATE` new hosts per
//! virtual second, to see which key caps the rate at which the store creates hosts.

use super::graph::LinkGraph;
use super::{Peaks, Replay, SHARDS, TURN_MS, url};
use crate::error::{BenchResult, Context};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::PoisonError;
use trawl_core::frontier::{seed_in_turn, seed_tasks, update_host};
use trawl_core::queue::WorkMessage;
use trawl_core::store::memory::MemoryStore;
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskStore};
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, HostRule};
use trawl_domain::host::{Host, HostSignal, NextWork, Turn, TurnRejection};
use trawl_domain::task::{FetchRecord, Millis, NewTask};
use trawl_faults::meter::metered;

/// Home pages the crawl is seeded with (of the most popular hosts).
const SEEDS: usize = 100;
/// The biggest hosts, given 10 requests/s by rule.
const FAST_HOSTS: usize = 10;
/// Turns per crawler batch (a Lambda batch of SQS messages), each batch one call report.
const BATCH: u64 = 10;
/// How long after a count its tasks may be unlisted (DynamoDB's, `App::seeds_settle_ms`).
const SETTLE_MS: u64 = 5_000;
/// Seconds over which a sustained rate is taken.
const WINDOW_S: usize = 10;
/// New hosts per virtual second in the creation burst.
pub const BURST_RATE: u64 = 10_000;
/// Seed calls per second in the burst (each naming `BURST_RATE / BURST_CALLS` new hosts).
const BURST_CALLS: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// A turn message of host (index) at epoch becomes visible.
    Message { host: usize, epoch: u64 },
    /// The running turn of host fetches its next page.
    Fetch { host: usize },
    /// The running turn of host ends.
    HandBack { host: usize },
}

struct Running {
    turn: Turn,
    /// The host as the turn leaves it (pace).
    holder: Host,
    seeded_at_claim: Option<u64>,
    pages_left: u32,
    /// URLs of its own host the turn's pages linked to (counted at the hand-back).
    own_offered: u64,
    /// The links this turn sent (the crawler's memory of links seeded).
    sent: HashSet<(usize, u64)>,
}

/// What the link-following crawl measured.
pub struct LinkRun {
    pub peaks: Peaks,
    pub fetched: u64,
    pub hosts_created: u64,
    /// Fetches per virtual second: the busiest one.
    pub peak_rate: f64,
    /// Fetches per second over the busiest `WINDOW_S` seconds.
    pub sustained_rate: f64,
    /// New host records per virtual second: the busiest second, and the busiest `WINDOW_S`.
    pub peak_creation: u64,
    pub sustained_creation: f64,
    pub makespan_ms: Millis,
    /// Host turns run (a call report per `BATCH` of them).
    pub turns: u64,
    /// Write units of one call report (on a report lane).
    pub report_units: f64,
    /// Turn messages that found their host busy or not yet due (back to the queue).
    pub early_messages: u64,
}

struct Sim<'g> {
    replay: Replay,
    graph: &'g LinkGraph,
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// Pages discovered and not yet fetched, per host.
    pending: Vec<VecDeque<u64>>,
    discovered: HashSet<(usize, u64)>,
    host_known: Vec<bool>,
    steps: BinaryHeap<Reverse<(Millis, u64, Step)>>,
    order: u64,
    waiting: VecDeque<(usize, u64)>,
    free: usize,
    /// The fleet's fetch rate (per ms), and when its next fetch may start.
    rate_per_ms: f64,
    next_slot: f64,
    running: HashMap<usize, Running>,
    turns_ended: u64,
    fetched_per_second: BTreeMap<Millis, u64>,
    created_per_second: BTreeMap<Millis, u64>,
    early_messages: u64,
    makespan_ms: Millis,
}

fn new_task(host: usize, page: u64) -> BenchResult<NewTask> {
    Ok(NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&url(host, page)).step("url")?,
        depth: 0,
        parent: None,
        data: None,
    })
}

impl Sim<'_> {
    fn at(&mut self, at: Millis, step: Step) {
        self.order += 1;
        self.steps.push(Reverse((at, self.order, step)));
    }

    /// Notes links the store will find new (called before they are seeded).
    fn discover(&mut self, links: &[(usize, u64)], at: Millis) {
        for &(host, page) in links {
            if self.discovered.insert((host, page)) {
                self.pending[host].push_back(page);
                if !self.host_known[host] {
                    self.host_known[host] = true;
                    *self.created_per_second.entry(at / 1_000).or_default() += 1;
                }
            }
        }
    }

    fn messages(&mut self, messages: Vec<WorkMessage>, now: Millis) -> BenchResult<()> {
        for m in messages {
            let host = *self
                .index
                .get(&m.host)
                .ok_or("a message of a host never linked")
                .step("message")?;
            self.at(
                now + m.delay_ms as Millis,
                Step::Message {
                    host,
                    epoch: m.epoch,
                },
            );
        }
        Ok(())
    }

    async fn run(&mut self) -> BenchResult<()> {
        let seeds: Vec<(usize, u64)> = (0..SEEDS.min(self.names.len())).map(|h| (h, 0)).collect();
        self.discover(&seeds, 0);
        let tasks = seeds
            .iter()
            .map(|&(h, p)| new_task(h, p))
            .collect::<BenchResult<Vec<_>>>()?;
        let (_, messages) = seed_tasks(&self.replay.store, &self.replay.crawl, tasks, 0)
            .await
            .step("seed")?;
        self.messages(messages, 0)?;
        while let Some(Reverse((at, _, step))) = self.steps.pop() {
            self.replay.tick(at);
            match step {
                Step::Message { host, epoch } => self.message(host, epoch, at).await?,
                Step::Fetch { host } => self.fetch(host, at).await?,
                Step::HandBack { host } => self.hand_back(host, at).await?,
            }
        }
        self.replay.tick(self.replay.second * 1_000 + 1_000);
        Ok(())
    }

    async fn message(&mut self, host: usize, epoch: u64, at: Millis) -> BenchResult<()> {
        if self.free == 0 {
            self.waiting.push_back((host, epoch));
            return Ok(());
        }
        let (store, crawl) = (&self.replay.store, &self.replay.crawl);
        let claimed = update_host(store, crawl, &self.names[host], at, |h| {
            if h.epoch != epoch {
                return (None, Err(None));
            }
            match h.claim_turn(at, TURN_MS) {
                Ok((next, turn)) => (Some(next), Ok((turn, h.seeded))),
                Err(why) => (None, Err(Some(why))),
            }
        })
        .await
        .step("claim turn")?;
        match claimed {
            Some((holder, Ok((turn, seeded)))) => {
                self.free -= 1;
                let first = holder.next_allowed_at.max(at);
                self.running.insert(
                    host,
                    Running {
                        turn,
                        holder,
                        seeded_at_claim: Some(seeded),
                        pages_left: self
                            .replay
                            .crawl
                            .config
                            .politeness
                            .host_policy(&self.names[host])
                            .turn_pages,
                        own_offered: 0,
                        sent: HashSet::new(),
                    },
                );
                self.at(first, Step::Fetch { host });
            }
            // Superseded: dropped.
            Some((_, Err(None))) | None => {}
            Some((
                _,
                Err(Some(TurnRejection::Busy { until } | TurnRejection::NotYet { at: until })),
            )) => {
                self.early_messages += 1;
                self.at(until.max(at + 1), Step::Message { host, epoch });
            }
            Some((_, Err(Some(TurnRejection::GivenUp)))) => {}
        }
        Ok(())
    }

    async fn fetch(&mut self, host: usize, at: Millis) -> BenchResult<()> {
        if self.pending[host].is_empty() {
            self.at(at, Step::HandBack { host });
            return Ok(());
        }
        // The fleet fetches at most `rate` pages a second: a fetch waits for its slot.
        let slot = self.next_slot.max(at as f64);
        if slot >= (at + 1) as f64 {
            self.at(slot.floor() as Millis, Step::Fetch { host });
            return Ok(());
        }
        self.next_slot = slot + 1.0 / self.rate_per_ms;
        let Some(page) = self.pending[host].pop_front() else {
            return Ok(());
        };
        let (store, crawl) = (&self.replay.store, &self.replay.crawl);
        *self.fetched_per_second.entry(at / 1_000).or_default() += 1;
        let id = CanonicalUrl::parse(&url(host, page)).step("url")?.task_id();
        if let ClaimOutcome::Claimed { lease, .. } = store
            .claim_in_turn(&crawl.id, &id, TURN_MS, at)
            .await
            .step("claim")?
        {
            let record = FetchRecord {
                object_key: Some(format!("pages/md5={id}")),
                md5: Some(id.to_string()),
                http_status: 200,
                content_type: Some("text/html".into()),
                content_length: 50_000,
                fetched_at: at,
                ..FetchRecord::default()
            };
            store.finish(&lease, &record, at).await.step("finish")?;
        }
        self.makespan_ms = self.makespan_ms.max(at);
        let Some(turn) = self.running.get_mut(&host) else {
            return Ok(());
        };
        let links: Vec<(usize, u64)> = self
            .graph
            .links(host, page)
            .into_iter()
            .filter(|&link| link != (host, page) && turn.sent.insert(link))
            .collect();
        let tasks = links
            .iter()
            .map(|&(h, p)| new_task(h, p))
            .collect::<BenchResult<Vec<_>>>()?;
        self.discover(&links, at);
        let (store, crawl) = (&self.replay.store, &self.replay.crawl);
        let (_, messages, own) = seed_in_turn(store, crawl, tasks, Some(&self.names[host]), at)
            .await
            .step("seed links")?;
        self.messages(messages, at)?;
        let Some(turn) = self.running.get_mut(&host) else {
            return Ok(());
        };
        turn.own_offered += own;
        let policy = self
            .replay
            .crawl
            .config
            .politeness
            .host_policy(&self.names[host]);
        turn.holder = turn.holder.observe(&policy, HostSignal::Answered, at);
        turn.pages_left = turn.pages_left.saturating_sub(1);
        let next = if turn.pages_left > 0 && !self.pending[host].is_empty() {
            (turn.holder.next_allowed_at.max(at), Step::Fetch { host })
        } else {
            (at, Step::HandBack { host })
        };
        self.at(next.0, next.1);
        Ok(())
    }

    async fn hand_back(&mut self, host: usize, at: Millis) -> BenchResult<()> {
        let Some(turn) = self.running.remove(&host) else {
            return Ok(());
        };
        let next_work = (!self.pending[host].is_empty()).then_some(NextWork::Task(at));
        let (store, crawl) = (&self.replay.store, &self.replay.crawl);
        let handed = update_host(store, crawl, &self.names[host], at, |stored| {
            match stored.merge_turn(&turn.holder).hand_back(
                &turn.turn,
                next_work,
                turn.seeded_at_claim,
                turn.own_offered,
                SETTLE_MS,
                at,
            ) {
                Some((next, visible_at)) => (Some(next), visible_at),
                None => (None, None),
            }
        })
        .await
        .step("hand back")?;
        if let Some((host_record, Some(visible_at))) = handed {
            self.at(
                visible_at.max(at),
                Step::Message {
                    host,
                    epoch: host_record.epoch,
                },
            );
        }
        self.turns_ended += 1;
        if self.turns_ended.is_multiple_of(BATCH) {
            let share = CallTally::from([(Call::ALL[0], BATCH * 20)]);
            let (store, crawl) = (&self.replay.store, &self.replay.crawl);
            store.add_calls(&crawl.id, &share).await.step("report")?;
        }
        self.free += 1;
        if let Some((host, epoch)) = self.waiting.pop_front() {
            self.message(host, epoch, at).await?;
        }
        Ok(())
    }
}

/// Hosts at 1 request/s, the `FAST_HOSTS` biggest (the most linked) at 10/s in turns of 500
/// pages (as the seed-only run's).
fn config() -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.politeness.delay_ms = 1_000;
    config.politeness.rules = (0..FAST_HOSTS)
        .map(|h| HostRule {
            domain: format!("h{h}.sim"),
            delay_ms: Some(100),
            per_host: None,
            turn_pages: Some(500),
            max_host_tasks: None,
        })
        .collect();
    config
}

async fn new_replay(name: &str) -> BenchResult<Replay> {
    let memory = MemoryStore::new();
    let store = metered(memory.clone(), memory, SHARDS);
    let crawl = Crawl::new(CrawlId::parse(name).step("crawl id")?, config(), 0);
    store.create_crawl(&crawl).await.step("create crawl")?;
    Ok(Replay {
        store,
        crawl,
        second: 0,
        peaks: Peaks::default(),
    })
}

fn host_names(hosts: usize) -> BenchResult<Vec<String>> {
    (0..hosts)
        .map(|h| {
            CanonicalUrl::parse(&url(h, 0))
                .map(|u| u.host_key())
                .step("host")
        })
        .collect()
}

/// The mean per second over the busiest `WINDOW_S` consecutive seconds of `per_second`.
fn busiest_window(per_second: &BTreeMap<Millis, u64>) -> f64 {
    let Some((&last, _)) = per_second.last_key_value() else {
        return 0.0;
    };
    let dense: Vec<u64> = (0..=last)
        .map(|s| per_second.get(&s).copied().unwrap_or(0))
        .collect();
    let best = dense
        .windows(WINDOW_S.min(dense.len()))
        .map(|w| w.iter().sum::<u64>())
        .max()
        .unwrap_or(0);
    best as f64 / WINDOW_S as f64
}

/// Crawls `graph` from the home pages of its `SEEDS` most popular hosts with `workers` (turns
/// at once) fetching `rate` pages a second at most between them.
pub async fn crawl(graph: &LinkGraph, workers: usize, rate: f64) -> BenchResult<LinkRun> {
    let hosts = graph.sizes.len();
    let names = host_names(hosts)?;
    let index = names.iter().cloned().zip(0..).collect();
    let mut sim = Sim {
        replay: new_replay("links").await?,
        graph,
        names,
        index,
        pending: vec![VecDeque::new(); hosts],
        discovered: HashSet::new(),
        host_known: vec![false; hosts],
        steps: BinaryHeap::new(),
        order: 0,
        waiting: VecDeque::new(),
        free: workers.max(1),
        rate_per_ms: rate / 1_000.0,
        next_slot: 0.0,
        running: HashMap::new(),
        turns_ended: 0,
        fetched_per_second: BTreeMap::new(),
        created_per_second: BTreeMap::new(),
        early_messages: 0,
        makespan_ms: 0,
    };
    sim.run().await?;
    let report_units = {
        let meter = sim.replay.store.layer.meter();
        let meter = meter.lock().unwrap_or_else(PoisonError::into_inner);
        meter
            .by_operation()
            .get("add_calls")
            .map_or(0.0, |t| t.total() as f64 / t.writes.max(1) as f64)
    };
    Ok(LinkRun {
        fetched: sim.fetched_per_second.values().sum(),
        hosts_created: sim.created_per_second.values().sum(),
        peak_rate: sim.fetched_per_second.values().copied().max().unwrap_or(0) as f64,
        sustained_rate: busiest_window(&sim.fetched_per_second),
        peak_creation: sim.created_per_second.values().copied().max().unwrap_or(0),
        sustained_creation: busiest_window(&sim.created_per_second),
        makespan_ms: sim.makespan_ms,
        turns: sim.turns_ended,
        report_units,
        early_messages: sim.early_messages,
        peaks: sim.replay.peaks,
    })
}

/// `seconds` virtual seconds of `BURST_RATE` new hosts each: pages whose links name only hosts
/// the crawl has not met, through `seed_tasks` (as `seed_in_turn` offers them). Returns the
/// peaks per key.
pub async fn host_burst(seconds: u64) -> BenchResult<Peaks> {
    let mut replay = new_replay("burst").await?;
    let per_call = BURST_RATE / BURST_CALLS;
    let mut next = 0usize;
    for call in 0..seconds * BURST_CALLS {
        let at = call * 1_000 / BURST_CALLS;
        replay.tick(at as Millis);
        let tasks = (next..next + per_call as usize)
            .map(|h| new_task(h, 0))
            .collect::<BenchResult<Vec<_>>>()?;
        next += per_call as usize;
        let (report, _) = seed_tasks(&replay.store, &replay.crawl, tasks, at as Millis)
            .await
            .step("burst")?;
        if report.accepted != per_call {
            return Err(crate::error::BenchError::Step {
                step: "burst".into(),
                message: format!("{} of {per_call} hosts' URLs created", report.accepted),
            });
        }
    }
    replay.tick(replay.second * 1_000 + 1_000);
    Ok(replay.peaks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sustained_rate_is_the_busiest_ten_seconds_gaps_included() {
        let mut per_second = BTreeMap::from([(0, 100), (3, 50)]);
        per_second.extend((20..30).map(|s| (s, 30)));
        assert_eq!(busiest_window(&per_second), 30.0);
        assert_eq!(busiest_window(&BTreeMap::from([(0, 100), (3, 50)])), 15.0);
    }

    #[tokio::test]
    async fn a_crawl_following_links_reaches_every_page_and_host_and_writes_each_kind_of_key() {
        let graph = LinkGraph::new(2_000, 100);
        let run = crawl(&graph, 50, 30.0).await.unwrap();
        // Seeded with the 100 home pages, every page is reached by following links.
        assert_eq!(run.fetched, graph.urls());
        assert_eq!(run.hosts_created, 100);
        let kinds: Vec<&String> = run.peaks.kinds.keys().collect();
        for kind in [
            "table: task",
            "table: host record",
            "table: host counts",
            "table: crawl record",
            "status-index: hosts list",
            "roster-index: host",
        ] {
            assert!(
                run.peaks.kinds.contains_key(kind),
                "{kind} not in {kinds:?}"
            );
        }
        // 20 workers at 1 page/s per host, 10 at most at 10/s: at most 2 × 20 × 10 fetches in
        // a second (a turn ending and the next starting within it).
        assert!(
            run.peak_rate > 0.0 && run.peak_rate <= 400.0,
            "{}",
            run.peak_rate
        );
        assert!(run.peaks.over_limit.is_empty());
    }
}
