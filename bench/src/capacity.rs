//! Section 7: DynamoDB partition accounting on a virtual clock. The frontier simulation's host
//! turns (section 6: Zipf(1) hosts, the 10 biggest at 10 requests/s, the rest at 1/s) are run
//! with a fleet of workers sized for 1,653 URLs/s (a billion URLs in a week), and replayed
//! against a real store:
//! - **store-backed** (default 1,000,000 URLs over 10,000 hosts; `--quick` 100,000 over 1,000):
//!   the URLs are seeded through `frontier::seed_tasks` at 1,653 URLs/s, then every turn claims
//!   its host (`frontier::update_host` with `Host::claim_turn`), every fetch claims and finishes
//!   its task, every turn hands its host back — on the in-memory store metered as DynamoDB
//!   (`crate::meter::Metered`: write units from the items as the DynamoDB
//!   adapter lays them out, on the table and each index). Each virtual second, the units per
//!   partition key (table key, and each index's hash key) are summed: the peak per key is
//!   printed, and any key over 1,000 WCU/s (a partition's limit) is flagged;
//!   Seeds come shuffled across hosts: seeding one big host alone at that rate would put all of
//!   it on the host's due-index key;
//! - **following links** (`links`; default 500,000 URLs over 50,000 hosts, `--quick` 50,000
//!   over 5,000): a link graph (`graph`: Zipf(1) popularity, so a handful of hosts are linked
//!   from most pages; template links on every page of a host) crawled from 100 home pages by the
//!   same 1,653 workers fetching 1,653 pages/s between them, every page's links through `frontier::seed_in_turn` (the known-links
//!   read, offers to other hosts, new hosts created as links name them); per-key peaks as above,
//!   with the host records' offers, the host-list shards, the host counts and the crawl's
//!   report lanes (call reports). Then a burst of host creation at 10,000 new hosts/s, and the rate the hottest
//!   key allows;
//! - **model only** (10⁸ URLs over 10⁶ hosts; `--quick` 10⁷ over 10⁵): the same schedule
//!   without a store, for the makespan of the long tail, and the peak per key scaled from the
//!   store-backed run's units per URL per key kind.
//!
//! Dead hosts' URLs are given up without a write per URL here (the store does write each one
//! `ignored`): 1% of the hosts.

use crate::error::{BenchResult, Context};
use crate::frontier::{Event, Workload, host_turns_with};
use crate::report::Figure;
use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;
use trawl_core::frontier::{seed_tasks, update_host};
use trawl_core::store::memory::MemoryStore;
use trawl_core::store::{ClaimOutcome, TaskStore};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::host::Turn;
use trawl_domain::task::{FetchRecord, Millis, NewTask};
use trawl_faults::meter::{KeyUnits, Metered, TABLE_KEYS, metered};

mod graph;
mod links;

const SECTION: &str = "capacity";
/// A billion URLs in 7 days.
pub const TARGET_RATE: f64 = 1_653.0;
/// A partition's write limit (WCU/s), per the DynamoDB developer guide.
const PARTITION_WCU: u64 = 1_000;
/// Status-index shards per status (the stack's default).
const SHARDS: u32 = 4;
/// URLs per seed call.
const SEED_BATCH: usize = 100;
/// How long a turn may run (as the crawler's).
const TURN_MS: u64 = 120_000;

/// What kind of key a partition key is, from its text (the adapter's key layout).
fn kind(place: &str, key: &str) -> String {
    let tail = key.rsplit('#').next().unwrap_or_default();
    let kind = if place == TABLE_KEYS {
        if key.ends_with("#crawl") {
            "crawl record"
        } else if key.contains("#host#") {
            "host record"
        } else if key.contains("#hostcounts#") {
            "host counts"
        } else if key.contains("#calls#") {
            "report lane"
        } else {
            "task"
        }
    } else if key.ends_with("#hosts") || key.contains("#hosts#") {
        "hosts list"
    } else if key.starts_with("crawls#") {
        "crawl list"
    } else if tail.parse::<u32>().is_ok() && key.matches('#').count() == 2 {
        "status shard"
    } else {
        "host"
    };
    format!("{place}: {kind}")
}

/// Peak units per second per key, and the busiest second's throughput.
#[derive(Default)]
struct Peaks {
    /// Per key kind: (peak WCU/s of any one key, that key, units in all).
    kinds: BTreeMap<String, (u64, String, u64)>,
    over_limit: BTreeMap<String, u64>,
    seconds: u64,
}

impl Peaks {
    fn add_second(&mut self, keys: KeyUnits) {
        self.seconds += 1;
        for ((place, key), units) in keys {
            let entry = self
                .kinds
                .entry(kind(place, &key))
                .or_insert((0, String::new(), 0));
            entry.2 += units;
            if units > entry.0 {
                entry.0 = units;
                entry.1 = format!("{place} {key}");
            }
            if units > PARTITION_WCU {
                let worst = self.over_limit.entry(format!("{place} {key}")).or_default();
                *worst = (*worst).max(units);
            }
        }
    }
}

/// Drives a store-backed replay and sums units per virtual second.
struct Replay {
    store: Metered<MemoryStore>,
    crawl: Crawl,
    second: Millis,
    peaks: Peaks,
}

impl Replay {
    /// Closes every virtual second before `at`.
    fn tick(&mut self, at: Millis) {
        let second = at / 1_000;
        if second != self.second {
            let keys = self
                .store
                .layer
                .meter()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take_keys();
            self.peaks.add_second(keys);
            self.second = second;
        }
    }
}

fn url(host: usize, n: u64) -> String {
    format!("http://h{host}.sim/{n}")
}

/// What the store-backed run measured.
struct StoreRun {
    seed: Peaks,
    crawl: Peaks,
    makespan_ms: Millis,
    peak_rate: f64,
    refused_turns: u64,
}

async fn store_backed(work: &Workload, workers: usize) -> BenchResult<StoreRun> {
    let memory = MemoryStore::new();
    let store = metered(memory.clone(), memory, SHARDS);
    let crawl = Crawl::new(
        CrawlId::parse("capacity").step("crawl id")?,
        CrawlConfig::default(),
        0,
    );
    trawl_core::store::CrawlStore::create_crawl(&store, &crawl)
        .await
        .step("create crawl")?;
    let mut replay = Replay {
        store,
        crawl,
        second: 0,
        peaks: Peaks::default(),
    };
    // Seeds arrive mixed across hosts (shuffled), at the target rate, in calls of `SEED_BATCH`.
    let hosts = work.sizes.len();
    let mut order: Vec<(u32, u32)> = Vec::with_capacity(work.urls() as usize);
    for (h, &size) in work.sizes.iter().enumerate() {
        order.extend((0..size as u32).map(|n| (h as u32, n)));
    }
    fastrand::Rng::with_seed(7).shuffle(&mut order);
    for (i, chunk) in order.chunks(SEED_BATCH).enumerate() {
        let at = ((i * SEED_BATCH) as f64 * 1_000.0 / TARGET_RATE) as Millis;
        replay.tick(at);
        let batch = chunk
            .iter()
            .map(|&(h, n)| {
                Ok(NewTask {
                    lane: None,
                    priority: Default::default(),
                    url: CanonicalUrl::parse(&url(h as usize, u64::from(n))).step("url")?,
                    depth: 0,
                    parent: None,
                    data: None,
                })
            })
            .collect::<BenchResult<Vec<_>>>()?;
        seed_tasks(&replay.store, &replay.crawl, batch, at)
            .await
            .step("seed")?;
    }
    replay.tick(replay.second * 1_000 + 1_000);
    let seed = std::mem::take(&mut replay.peaks);
    let start = (replay.second + 1) * 1_000;

    // The crawl: the schedule, replayed in time order after the seeds.
    let mut log = Vec::new();
    let outcome = host_turns_with(work, Some(workers), Some(&mut log));
    log.sort_by_key(Event::at);
    let names: Vec<String> = (0..hosts)
        .map(|h| {
            CanonicalUrl::parse(&url(h, 0))
                .map(|u| u.host_key())
                .step("host")
        })
        .collect::<BenchResult<_>>()?;
    let mut turns: HashMap<usize, (Turn, u64)> = HashMap::new();
    let mut fetched_per_second: BTreeMap<Millis, u64> = BTreeMap::new();
    let mut refused_turns = 0;
    for event in &log {
        let at = start + event.at();
        replay.tick(at);
        match *event {
            Event::Turn { host, .. } => {
                let claimed =
                    update_host(&replay.store, &replay.crawl, &names[host], at, |h| match h
                        .claim_turn(at, TURN_MS)
                    {
                        Ok((next, turn)) => (Some(next), Some((turn, h.seeded))),
                        Err(_) => (None, None),
                    })
                    .await
                    .step("claim turn")?;
                match claimed.and_then(|(_, turn)| turn) {
                    Some(turn) => {
                        turns.insert(host, turn);
                    }
                    None => refused_turns += 1,
                }
            }
            Event::Fetch { host, url: n, .. } => {
                *fetched_per_second.entry(at / 1_000).or_default() += 1;
                let id = CanonicalUrl::parse(&url(host, n)).step("url")?.task_id();
                // Inside the host's turn, as the crawler claims.
                let claim = replay
                    .store
                    .claim_in_turn(&replay.crawl.id, &id, TURN_MS, at)
                    .await
                    .step("claim")?;
                if let ClaimOutcome::Claimed { lease, .. } = claim {
                    let record = FetchRecord {
                        object_key: Some(format!("pages/md5={id}")),
                        md5: Some(id.to_string()),
                        http_status: 200,
                        content_type: Some("text/html".into()),
                        content_length: 50_000,
                        fetched_at: at,
                        ..FetchRecord::default()
                    };
                    replay
                        .store
                        .finish(&lease, &record, at)
                        .await
                        .step("finish")?;
                }
            }
            Event::HandBack { host, .. } => {
                let Some((turn, seeded)) = turns.remove(&host) else {
                    continue;
                };
                update_host(
                    &replay.store,
                    &replay.crawl,
                    &names[host],
                    at,
                    |h| match h.hand_back(&turn, None, Some(seeded), 0, 0, at) {
                        Some((next, _)) => (Some(next), ()),
                        None => (None, ()),
                    },
                )
                .await
                .step("hand back")?;
            }
        }
    }
    replay.tick(replay.second * 1_000 + 1_000);
    let peak_rate = fetched_per_second.values().copied().max().unwrap_or(0) as f64;
    Ok(StoreRun {
        seed,
        crawl: replay.peaks,
        makespan_ms: outcome.makespan_ms,
        peak_rate,
        refused_turns,
    })
}

/// Workers that run 1,653 URLs/s of 1-request-per-second turns.
fn workers() -> usize {
    TARGET_RATE as usize
}

fn hours(ms: Millis) -> f64 {
    ms as f64 / 3_600_000.0
}

fn peak_figures(figures: &mut Vec<Figure>, phase: &str, peaks: &Peaks) {
    for (kind, (peak, key, _)) in &peaks.kinds {
        let figure = Figure::single(
            SECTION,
            format!("{phase}: peak WCU/s of one key, {kind} ({key})"),
            "WCU/s",
            *peak as f64,
        );
        figures.push(figure.at_most(PARTITION_WCU as f64));
    }
    figures.push(
        Figure::single(
            SECTION,
            format!("{phase}: keys over {PARTITION_WCU} WCU/s"),
            "keys",
            peaks.over_limit.len() as f64,
        )
        .at_most(0.0),
    );
}

/// The crawl following links (`links`), and the host-creation burst.
async fn link_figures(figures: &mut Vec<Figure>, quick: bool) -> BenchResult<()> {
    let (urls, hosts, burst_seconds) = if quick {
        (50_000, 5_000, 2)
    } else {
        (500_000, 50_000, 5)
    };
    eprintln!("  capacity: following links, {urls} URLs over {hosts} hosts");
    let graph = graph::LinkGraph::new(urls, hosts);
    let run = links::crawl(&graph, workers(), TARGET_RATE).await?;
    let label = format!("links ({} URLs / {hosts} hosts)", graph.urls());
    for (name, unit, value) in [
        ("pages fetched", "URLs", run.fetched as f64),
        ("peak fetches", "URLs/s", run.peak_rate),
        ("fetches, busiest 10 s", "URLs/s", run.sustained_rate),
        ("makespan", "min", run.makespan_ms as f64 / 60_000.0),
        ("host records created", "hosts", run.hosts_created as f64),
        ("peak host creation", "hosts/s", run.peak_creation as f64),
        (
            "host creation, busiest 10 s",
            "hosts/s",
            run.sustained_creation,
        ),
        (
            "host turns (a call report per 10)",
            "turns",
            run.turns as f64,
        ),
        (
            "WCU of a call report (a report lane)",
            "WCU",
            run.report_units,
        ),
        (
            "turn messages back to the queue (host busy or not due)",
            "messages",
            run.early_messages as f64,
        ),
    ] {
        figures.push(Figure::single(
            SECTION,
            format!("{label}: {name}"),
            unit,
            value,
        ));
    }
    peak_figures(figures, "links: crawling", &run.peaks);

    eprintln!(
        "  capacity: host creation, {burst_seconds} s at {} hosts/s",
        links::BURST_RATE
    );
    let burst = links::host_burst(burst_seconds).await?;
    let rate = links::BURST_RATE;
    peak_figures(figures, &format!("host creation at {rate} hosts/s"), &burst);
    // Every key's load grows with the creation rate: the hottest key says where it stops.
    let hottest = burst
        .kinds
        .values()
        .map(|(peak, _, _)| *peak)
        .max()
        .unwrap_or(0);
    figures.push(
        Figure::single(
            SECTION,
            "host creation the store sustains (hottest key at its partition's limit)",
            "hosts/s",
            rate as f64 * PARTITION_WCU as f64 / hottest.max(1) as f64,
        )
        .at_least(rate as f64),
    );
    Ok(())
}

/// The link-following crawl and the host-creation burst alone (`--only capacity-links`).
pub async fn run_links(quick: bool) -> BenchResult<Vec<Figure>> {
    let mut figures = Vec::new();
    link_figures(&mut figures, quick).await?;
    Ok(figures)
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let (urls, hosts) = if quick {
        (100_000, 1_000)
    } else {
        (1_000_000, 10_000)
    };
    let work = Workload::zipf(urls, hosts);
    eprintln!("  capacity: store-backed, {urls} URLs over {hosts} hosts");
    let run = store_backed(&work, workers()).await?;
    let mut figures = vec![
        Figure::single(
            SECTION,
            format!("store-backed ({urls} URLs / {hosts} hosts): peak fetches"),
            "URLs/s",
            run.peak_rate,
        ),
        Figure::single(
            SECTION,
            "store-backed: makespan (long tail)",
            "h",
            hours(run.makespan_ms),
        ),
        Figure::single(
            SECTION,
            "store-backed: turns the store refused",
            "turns",
            run.refused_turns as f64,
        ),
    ];
    peak_figures(&mut figures, "seeding at 1,653 URLs/s", &run.seed);
    peak_figures(&mut figures, "crawling", &run.crawl);
    link_figures(&mut figures, quick).await?;

    // The model at scale: the schedule alone; per-key peaks scaled from the store-backed run.
    let (big_urls, big_hosts) = if quick {
        (10_000_000, 100_000)
    } else {
        (100_000_000, 1_000_000)
    };
    eprintln!("  capacity: model only, {big_urls} URLs over {big_hosts} hosts");
    let big = Workload::zipf(big_urls, big_hosts);
    let outcome = host_turns_with(&big, Some(workers()), None);
    let label = format!("model ({big_urls} URLs / {big_hosts} hosts)");
    figures.push(Figure::single(
        SECTION,
        format!("{label}: makespan (long tail)"),
        "h",
        hours(outcome.makespan_ms),
    ));
    figures.push(Figure::single(
        SECTION,
        format!("{label}: 90% of the URLs fetched by"),
        "h",
        hours(outcome.time_to(0.9)),
    ));
    figures.push(Figure::single(
        SECTION,
        format!("{label}: URLs/s until 90% fetched"),
        "URLs/s",
        0.9 * big_urls as f64 / (outcome.time_to(0.9).max(1) as f64 / 1_000.0),
    ));
    // A status shard's load is a fixed share of the crawl's: the store-backed run's peak, scaled
    // to the target rate. (Per-host keys do not grow with the crawl: a host's rate bounds them.)
    if let Some((peak, _, _)) = run.crawl.kinds.get("status-index: status shard") {
        figures.push(
            Figure::single(
                SECTION,
                format!("{label}: a status shard's peak at 1,653 URLs/s (scaled)"),
                "WCU/s",
                *peak as f64 * TARGET_RATE / run.peak_rate.max(1.0),
            )
            .at_most(PARTITION_WCU as f64),
        );
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_told_apart_by_the_adapters_layout() {
        assert_eq!(kind(TABLE_KEYS, "c#crawl"), "table: crawl record");
        assert_eq!(kind(TABLE_KEYS, "c#host#h1.sim"), "table: host record");
        assert_eq!(kind(TABLE_KEYS, "c#0123abcd"), "table: task");
        assert_eq!(kind(TABLE_KEYS, "c#hostcounts#3"), "table: host counts");
        assert_eq!(kind(TABLE_KEYS, "c#calls#31"), "table: report lane");
        assert_eq!(
            kind("status-index", "c#hosts#15"),
            "status-index: hosts list"
        );
        assert_eq!(kind("status-index", "c#1#3"), "status-index: status shard");
        assert_eq!(kind("status-index", "c#hosts"), "status-index: hosts list");
        assert_eq!(kind("host-index", "c#h1.sim"), "host-index: host");
    }

    #[tokio::test]
    async fn a_small_crawl_replayed_on_the_store_spreads_its_writes_over_keys() {
        // 2,000 URLs over 40 hosts with 5 workers: at most 5 turns at once (40 unlimited).
        let work = Workload::zipf(2_000, 40);
        let run = store_backed(&work, 5).await.unwrap();
        assert_eq!(run.refused_turns, 0);
        // The 10 fastest hosts run at 10/s, the rest at 1/s: 5 workers fetch at most 50/s.
        // (A second may hold the end of one turn and the start of the next: twice that at most.)
        assert!(
            run.peak_rate <= 100.0 && run.peak_rate > 0.0,
            "{}",
            run.peak_rate
        );
        let kinds: Vec<&String> = run.crawl.kinds.keys().collect();
        for expected in ["table: task", "table: host record"] {
            assert!(run.crawl.kinds.contains_key(expected), "{kinds:?}");
        }
        // A finish writes its task alone: its host's roster entry was written at seed.
        assert!(
            !run.crawl.kinds.contains_key("roster-index: host"),
            "{kinds:?}"
        );
        // Every fetch succeeds: the status index, which lists failures only, is not written.
        assert!(
            !run.crawl.kinds.contains_key("status-index: status shard"),
            "{kinds:?}"
        );
        assert!(run.seed.kinds.contains_key("roster-index: host"));
        assert!(run.crawl.over_limit.is_empty() && run.seed.over_limit.is_empty());
    }
}
