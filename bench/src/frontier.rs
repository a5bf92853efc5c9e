//! Section 5: the frontier on a virtual clock. A Zipf(1) crawl (default 1,000,000 URLs over
//! 10,000 hosts; the 10 biggest hosts allowed 10 requests/s by rule, the rest 1/s, 1% of hosts
//! dead) is scheduled two ways, with unlimited workers:
//! - **host turns** (the design of issue #11): the real host scheduling of
//!   `trawl_domain::host` (fenced turns, pace, snooze, error budget) decides when each host is
//!   fetched; a work message is a turn of up to `TURN` URLs;
//! - **FIFO per URL** (today's design): one SQS FIFO message per URL, grouped by host slot; SQS
//!   hands out only groups present among the first 120,000 messages of the queue (its documented
//!   scan window for FIFO), one in-flight message per group.
//!
//! Printed: the makespan, throughput over time against the sum of the rates of the hosts that
//! had work (the most any scheduler can do), SQS requests per URL and DynamoDB write units per
//! fresh URL (index writes included) from the model stated in `WriteModel`.

use crate::report::Figure;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use trawl_domain::host::{Host, HostPolicy, HostSignal, NextWork};
use trawl_domain::task::Millis;

const SECTION: &str = "frontier";
/// URLs per host turn: one work message covers this many fetches.
const TURN: usize = 50;
/// SQS FIFO looks only at this many messages for groups it can hand out.
const FIFO_WINDOW: usize = 120_000;
/// Throughput is reported per bin of this length.
const BIN_MS: Millis = 600_000;
/// Hosts given a faster rate by rule (the biggest ones).
const FAST_HOSTS: usize = 10;

/// The crawl to schedule.
pub struct Workload {
    /// URLs per host, biggest first.
    pub sizes: Vec<u64>,
    /// Pause between two requests per host.
    delays: Vec<u64>,
    /// Hosts that never answer.
    pub dead: Vec<bool>,
}

impl Workload {
    /// `urls` over `hosts` with sizes proportional to 1/rank (Zipf, s = 1), every host at least
    /// one URL; the biggest `FAST_HOSTS` at 10 requests/s, the rest at 1/s; every 100th host dead.
    pub fn zipf(urls: u64, hosts: usize) -> Self {
        let harmonic: f64 = (1..=hosts).map(|r| 1.0 / r as f64).sum();
        let mut sizes: Vec<u64> = (1..=hosts)
            .map(|r| ((urls as f64 / harmonic / r as f64).round() as u64).max(1))
            .collect();
        // Rounding leaves the total a little off: the biggest host absorbs the difference.
        let total: u64 = sizes.iter().sum();
        if let Some(first) = sizes.first_mut() {
            *first = (*first + urls).saturating_sub(total).max(1);
        }
        let delays = (0..hosts)
            .map(|i| if i < FAST_HOSTS { 100 } else { 1_000 })
            .collect();
        let dead = (0..hosts).map(|i| i % 100 == 99).collect();
        Self {
            sizes,
            delays,
            dead,
        }
    }

    pub fn urls(&self) -> u64 {
        self.sizes.iter().sum()
    }
}

/// What a schedule achieved.
#[derive(Debug, Default)]
pub struct Outcome {
    pub makespan_ms: Millis,
    /// Fetches per bin.
    pub fetched: Vec<u64>,
    /// Per bin: the sum of the request rates (per ms) of hosts that still had work.
    pub capacity: Vec<f64>,
    pub fetches: u64,
    pub ignored: u64,
    pub sqs_requests: u64,
    pub turns: u64,
    /// When each of the biggest hosts finished.
    pub top_done_ms: Vec<Millis>,
}

impl Outcome {
    fn bin(v: &mut Vec<u64>, at: Millis, n: u64) {
        let i = (at / BIN_MS) as usize;
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        v[i] += n;
    }

    fn add_capacity(&mut self, from: Millis, to: Millis, rate_per_ms: f64) {
        let mut t = from;
        while t < to {
            let i = (t / BIN_MS) as usize;
            let bin_end = (i as Millis + 1) * BIN_MS;
            let end = bin_end.min(to);
            if self.capacity.len() <= i {
                self.capacity.resize(i + 1, 0.0);
            }
            self.capacity[i] += rate_per_ms * (end - t) as f64;
            t = end;
        }
    }

    /// Fetched / capacity over the whole run.
    fn efficiency(&self) -> f64 {
        let (mut got, mut could) = (0.0, 0.0);
        for (i, &c) in self.capacity.iter().enumerate() {
            got += self.fetched.get(i).copied().unwrap_or(0) as f64;
            could += c;
        }
        if could == 0.0 { 0.0 } else { got / could }
    }

    /// When `share` of all the fetches had been made (bin resolution).
    pub fn time_to(&self, share: f64) -> Millis {
        let goal = (self.fetches as f64 * share).ceil() as u64;
        let mut sum = 0;
        for (i, &n) in self.fetched.iter().enumerate() {
            sum += n;
            if sum >= goal {
                return (i as Millis + 1) * BIN_MS;
            }
        }
        self.makespan_ms
    }

    /// The lowest fetched/capacity ratio among bins with real capacity (the worst collapse).
    fn worst_bin(&self) -> f64 {
        self.capacity
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c >= 100.0 && i + 1 < self.capacity.len())
            .map(|(i, &c)| self.fetched.get(i).copied().unwrap_or(0) as f64 / c)
            .fold(f64::INFINITY, f64::min)
    }
}

/// What a host-turn schedule did, in the order it decided it (not in time order), for a
/// store-backed replay (`capacity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A turn of host `host` starts.
    Turn { at: Millis, host: usize },
    /// The `url`-th URL of `host` is fetched.
    Fetch { at: Millis, host: usize, url: u64 },
    /// The turn ends: the host is handed back.
    HandBack { at: Millis, host: usize },
}

impl Event {
    pub fn at(&self) -> Millis {
        match *self {
            Event::Turn { at, .. } | Event::Fetch { at, .. } | Event::HandBack { at, .. } => at,
        }
    }
}

/// Host turns, decided by `trawl_domain::host`. Every host with work is claimed the moment it
/// is due (unlimited workers); a turn fetches up to `TURN` URLs at the host's pace, a dead host
/// answers nothing and is snoozed until its error budget gives it up.
pub fn host_turns(work: &Workload) -> Outcome {
    host_turns_with(work, None, None)
}

/// `host_turns` with at most `workers` turns running at once (a turn waits for the first worker
/// free), and every turn, fetch and hand-back logged to `log`.
pub fn host_turns_with(
    work: &Workload,
    workers: Option<usize>,
    mut log: Option<&mut Vec<Event>>,
) -> Outcome {
    let mut free_at: BinaryHeap<Reverse<Millis>> = BinaryHeap::new();
    if let Some(n) = workers {
        free_at.extend((0..n.max(1)).map(|_| Reverse(0)));
    }
    let mut out = Outcome::default();
    let base = HostPolicy::default();
    let mut hosts: Vec<Host> = Vec::with_capacity(work.sizes.len());
    let mut left = work.sizes.clone();
    let mut queue = BinaryHeap::new();
    for (i, &delay) in work.delays.iter().enumerate() {
        let policy = HostPolicy {
            delay_ms: delay,
            ..base
        };
        hosts.push(Host::new(format!("host{i}"), &policy, 0));
        queue.push(Reverse((0, i)));
    }
    let mut worked_since = vec![0 as Millis; hosts.len()];
    out.top_done_ms = vec![0; FAST_HOSTS.min(hosts.len())];
    while let Some(Reverse((due, i))) = queue.pop() {
        let now = match free_at.pop() {
            Some(Reverse(free)) => free.max(due),
            None => due,
        };
        let policy = HostPolicy {
            delay_ms: work.delays[i],
            ..base
        };
        let turn_ms = TURN as u64 * policy.delay_ms.max(1) + 60_000;
        let Ok((mut host, turn)) = hosts[i].claim_turn(now, turn_ms) else {
            if workers.is_some() {
                free_at.push(Reverse(now));
            }
            continue;
        };
        out.turns += 1;
        if let Some(log) = log.as_deref_mut() {
            log.push(Event::Turn { at: now, host: i });
        }
        let mut t = now;
        let mut fetched = 0;
        while fetched < TURN && left[i] > 0 {
            t = t.max(host.next_allowed_at);
            let signal = if work.dead[i] {
                HostSignal::Unreachable
            } else {
                HostSignal::Answered
            };
            host = host.observe(&policy, signal, t);
            if work.dead[i] {
                // Trouble ends the turn: the host is snoozed for every worker.
                break;
            }
            left[i] -= 1;
            fetched += 1;
            out.fetches += 1;
            if let Some(log) = log.as_deref_mut() {
                log.push(Event::Fetch {
                    at: t,
                    host: i,
                    url: left[i],
                });
            }
            Outcome::bin(&mut out.fetched, t, 1);
        }
        if workers.is_some() {
            free_at.push(Reverse(t));
        }
        if let Some(log) = log.as_deref_mut() {
            log.push(Event::HandBack { at: t, host: i });
        }
        let next_work = (left[i] > 0).then_some(NextWork::Task(t));
        let Some((back, _)) = host.hand_back(&turn, next_work, Some(host.seeded), 0, 0, t) else {
            continue;
        };
        let rate = 1.0 / policy.delay_ms.max(1) as f64;
        if back.given_up.is_some() {
            out.ignored += left[i];
            left[i] = 0;
        }
        if left[i] == 0 {
            if !work.dead[i] {
                out.add_capacity(worked_since[i], t + policy.delay_ms as Millis, rate);
            }
            if let Some(done) = out.top_done_ms.get_mut(i) {
                *done = t;
            }
            out.makespan_ms = out.makespan_ms.max(t);
        } else {
            if work.dead[i] {
                worked_since[i] = back.due_at();
            }
            queue.push(Reverse((back.due_at(), i)));
        }
        hosts[i] = back;
    }
    // One send per turn (the worker that ends a turn sends the next, or the sweeper re-issues
    // it); receives and deletes come 10 to a call on a busy queue.
    out.sqs_requests = out.turns + out.turns.div_ceil(10) * 2;
    out
}

/// Today's design: one FIFO message per URL in seed order (shuffled across hosts), grouped by
/// host slot (`per_host` slots for the fast hosts, so their pace is the same as above). Each
/// slot delivers one message per its delay, but only slots with a message among the first
/// `scan_window` messages of the queue are served. Dead hosts' messages fail and return
/// (3 attempts) as they do today, holding their slot meanwhile.
pub fn fifo_per_url(work: &Workload, seed: u64, scan_window: usize) -> Outcome {
    let mut out = Outcome::default();
    // Slots: a fast host has 10 slots of 1 request/s, the rest one.
    let mut slot_of_host: Vec<(usize, usize)> = Vec::new();
    let mut slots = 0usize;
    for &d in &work.delays {
        let n = (1_000 / d.max(1)).max(1) as usize;
        slot_of_host.push((slots, n));
        slots += n;
    }
    // The queue's order: every URL's slot, shuffled (seeds arrive mixed across hosts).
    let mut order: Vec<u32> = Vec::with_capacity(work.urls() as usize);
    for (h, &size) in work.sizes.iter().enumerate() {
        let (first, n) = slot_of_host[h];
        for k in 0..size as usize {
            order.push((first + k % n) as u32);
        }
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    rng.shuffle(&mut order);
    let host_of_slot: Vec<usize> = slot_of_host
        .iter()
        .enumerate()
        .flat_map(|(h, &(_, n))| std::iter::repeat_n(h, n))
        .collect();
    let mut in_window = vec![0u32; slots];
    let mut remaining = vec![0u64; slots];
    for &s in &order {
        remaining[s as usize] += 1;
    }
    // Slots that could deliver right now if SQS saw them: the most any scheduler could do.
    let mut busy_slots = (0..slots)
        .filter(|&s| remaining[s] > 0 && !work.dead[host_of_slot[s]])
        .count();
    let mut active: Vec<usize> = Vec::new();
    let (mut next, mut window) = (0usize, 0usize);
    let mut total_left = order.len() as u64;
    let mut attempts = vec![0u8; slots];
    let step: Millis = 1_000;
    let mut now: Millis = 0;
    while total_left > 0 && now < 400 * 24 * 3_600_000 {
        while window < scan_window && next < order.len() {
            let s = order[next] as usize;
            if in_window[s] == 0 {
                active.push(s);
            }
            in_window[s] += 1;
            window += 1;
            next += 1;
        }
        out.add_capacity(now, now + step, busy_slots as f64 / step as f64);
        let serving = std::mem::take(&mut active);
        for s in serving {
            out.sqs_requests += 1;
            let h = host_of_slot[s];
            let delivered = if work.dead[h] {
                // A failure: the message comes back after its backoff; after 3 it is given up.
                attempts[s] += 1;
                if attempts[s] < 3 {
                    active.push(s);
                    continue;
                }
                attempts[s] = 0;
                out.ignored += 1;
                false
            } else {
                out.fetches += 1;
                Outcome::bin(&mut out.fetched, now, 1);
                true
            };
            in_window[s] -= 1;
            remaining[s] -= 1;
            window -= 1;
            total_left -= 1;
            if in_window[s] > 0 {
                active.push(s);
            }
            if delivered && remaining[s] == 0 {
                busy_slots -= 1;
                let (first, n) = slot_of_host[h];
                if h < FAST_HOSTS && (first..first + n).all(|x| remaining[x] == 0) {
                    out.top_done_ms.push(now);
                }
            }
        }
        now += step;
    }
    out.makespan_ms = now;
    // One send (batched 10 per call), one receive and one delete per message, at best.
    out.sqs_requests = out.sqs_requests * 2 + order.len().div_ceil(10) as u64;
    out
}

/// DynamoDB write units per fresh URL in each design, index writes included (items under 1 KB:
/// 1 WRU per write; an index entry whose key changes costs a delete and an insert).
struct WriteModel;

impl WriteModel {
    /// Host turns, as `docs/scale.md` §2 meters them: seed put (1) + its entry in its host's
    /// due index (1); the claim inside the turn, a read (0); the finish, fenced by the token
    /// as read (1) + its due-index entry moved to after every due time, where a succeeded
    /// page stays listed (2); per turn: claim and end of the host record (2), which is in no
    /// index that changes.
    fn host_turns(out: &Outcome, urls: u64) -> f64 {
        (5.0 * urls as f64 + 2.0 * out.turns as f64) / urls as f64
    }

    /// Today (as issue #13 counts it): seed put (1 + 1 index), claim (1 + 2), finish (1 + 2):
    /// 8 on a fresh crawl (8.08 with the crawl item's page-budget writes).
    fn fifo_per_url() -> f64 {
        8.0
    }
}

pub fn run(quick: bool) -> Vec<Figure> {
    let (urls, hosts) = if quick {
        (100_000, 1_000)
    } else {
        (1_000_000, 10_000)
    };
    let work = Workload::zipf(urls, hosts);
    let turns = host_turns(&work);
    let fifo = fifo_per_url(&work, 7, FIFO_WINDOW);
    // At a billion URLs the window holds 0.012% of the queue, not 12%: the same ratio here.
    let billion_window = (FIFO_WINDOW as u64 * urls / 1_000_000_000).max(1) as usize;
    let fifo_at_scale = fifo_per_url(&work, 7, billion_window);
    let hours = |ms: Millis| ms as f64 / 3_600_000.0;
    let mut figures = Vec::new();
    let label = format!("{urls} URLs / {hosts} hosts");
    let scaled = format!("FIFO per URL, window at 1B scale ({billion_window})");
    for (design, out) in [
        ("host turns", &turns),
        ("FIFO per URL", &fifo),
        (scaled.as_str(), &fifo_at_scale),
    ] {
        figures.push(Figure::single(
            SECTION,
            format!("{design}: makespan ({label})"),
            "h",
            hours(out.makespan_ms),
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{design}: 90% of the URLs fetched by"),
            "h",
            hours(out.time_to(0.9)),
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{design}: fetches / sum of active hosts' rates"),
            "ratio",
            out.efficiency(),
        ));
        figures.push(Figure::single(
            SECTION,
            format!("{design}: worst 10-minute bin vs capacity"),
            "ratio",
            out.worst_bin(),
        ));
        let sqs = Figure::single(
            SECTION,
            format!("{design}: SQS requests per URL"),
            "req",
            out.sqs_requests as f64 / urls as f64,
        );
        figures.push(if design == "host turns" {
            sqs.at_most(0.1)
        } else {
            sqs
        });
        figures.push(Figure::single(
            SECTION,
            format!("{design}: URLs given up (dead hosts)"),
            "URLs",
            out.ignored as f64,
        ));
    }
    figures.push(
        Figure::single(
            SECTION,
            "host turns: DynamoDB WRU per fresh URL (index incl.)",
            "WRU",
            WriteModel::host_turns(&turns, urls),
        )
        .at_most(5.5),
    );
    figures.push(Figure::single(
        SECTION,
        "FIFO per URL: DynamoDB WRU per fresh URL (index incl.)",
        "WRU",
        WriteModel::fifo_per_url(),
    ));
    let top = turns.top_done_ms.iter().copied().max().unwrap_or(0);
    figures.push(Figure::single(
        SECTION,
        format!("host turns: the {FAST_HOSTS} biggest hosts done by"),
        "h",
        hours(top),
    ));
    figures
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_turns_keep_up_with_the_hosts_rates_and_give_up_dead_hosts() {
        let work = Workload::zipf(20_000, 200);
        assert_eq!(work.urls(), 20_000);
        let out = host_turns(&work);
        let dead_urls: u64 = (0..200)
            .filter(|&i| work.dead[i])
            .map(|i| work.sizes[i])
            .sum();
        assert_eq!(out.fetches + out.ignored, 20_000);
        assert_eq!(out.ignored, dead_urls);
        assert!(out.efficiency() > 0.9, "{}", out.efficiency());
        assert!((out.sqs_requests as f64 / 20_000.0) < 0.1);
    }

    #[test]
    fn the_fifo_window_serves_only_the_groups_it_sees() {
        // One huge host fills the window: the small ones wait behind it.
        let work = Workload {
            sizes: vec![300_000, 10, 10],
            delays: vec![1_000, 1_000, 1_000],
            dead: vec![false; 3],
        };
        let out = fifo_per_url(&work, 1, FIFO_WINDOW);
        assert_eq!(out.fetches, 300_020);
        assert!(out.efficiency() < 0.9, "{}", out.efficiency());
    }
}
