//! When a page is fetched again, beyond Django Dynamic Scraper: each page's change rate is
//! estimated from its own fetch history, and a crawl-wide fetch budget (fetches per day) is
//! spread over the pages to keep the collection as fresh as the budget allows (Cho &
//! Garcia-Molina, "Estimating frequency of change" and "Effective page refresh policies").
//!
//! **Evidence.** Every scheduled fetch after the first is a check of the interval since the
//! previous fetch: a 304 or the same md5 is "no change seen", a new md5 (new links on a listing
//! page, a new redirect target) is "changed" — at least once, maybe more: a check sees whether,
//! not how often. A fetch made well before its time ([`prompted`]: a sitemap's `<lastmod>` made
//! the page due, or an operator did) is counted apart too: it tells whether the page's
//! `<lastmod>` can be believed ([`ChangeHistory::trusts_lastmod`]). A page whose sitemap said
//! "modified" at two such fetches and was right at fewer than half is no longer refreshed by its
//! `<lastmod>` (`transition::refresh`): a lying sitemap costs a page two fetches, not one per
//! reading. A prompted fetch that found a change is also a check of its interval (one that found
//! none is not: it came because of a claim, and says only that the claim was wrong). Were it
//! not, a page that changes hourly and whose sitemap says so every 12 hours would be fetched
//! at every reading and never once on its schedule: its rate would stay the prior's forever.
//! Counting only the prompted fetches that found a change does not inflate a slow page's rate:
//! its scheduled checks (finding it unchanged, the sitemap having caught its changes) add the
//! unchanged time, and the estimate below stays about changes ÷ time watched.
//!
//! **What a page keeps** ([`ChangeHistory`], in its fetch record's pace, a few bytes): checks,
//! checks that found a change, the summed intervals of each kind, and the prompted fetches and
//! those that found a change. Counts and sums, never lists: past [`MEMORY`] checks every figure
//! of the checks is halved, so an old habit fades.
//!
//! **The estimate** ([`ChangeHistory::rate`]): Cho & Garcia-Molina's estimator for Poisson
//! changes seen only as "changed or not" at each check, `r̂ = −ln((n − X + ½)/(n + ½)) / I` for
//! `X` changes in `n` checks `I` apart, in its irregular-interval form: with `T` the time
//! checked, `Tu` the part of it in checks that saw no change and `Tc/X` the mean interval of the
//! checks that did, `r̂ = ln((T + Ī/2)/(Tu + Ī/2)) / (Tc/X)`, `Ī = T/n` (the same figure when
//! intervals are equal). A prior of a tenth of a change in one check of `initial_ms` is added to
//! the counts, so that a page never seen to change has a rate of about a tenth of a change over
//! the time it has been watched (its interval grows with that time), never zero at its second
//! fetch. A tenth, not a half: most pages of a collection never change, and each fetch spent on
//! one of them is taken from the pages that do (with half, the never-changing 60% of the
//! freshness simulation's pages took half of the budget for the whole first week).
//!
//! **Exploring** ([`Estimator::explore`]). A check that finds a change says "at least one": a
//! page seen changed at every check of `I` is estimated at about `ln(2n + 1)` changes per `I`,
//! whatever its true rate, so a page changing hourly and first checked after a day would be
//! believed to change a few times a day for days. Two rules get it uncensored evidence sooner:
//! a page's first check comes at most a quarter of `initial_ms` after its first fetch, and a
//! check that found a change while no check of the page ever found none brings the next one
//! forward to at most half the interval it covered — until a check finds no change, after which
//! the estimate alone decides.
//!
//! **The allocation** ([`Objective`]). A page changing at rate `λ` (Poisson) and fetched every
//! `I = 1/f` has each change found `I/2` after it on average, so it adds `λI/2` of staleness per
//! unit of time; it is fresh a share `F(λ, f) = (f/λ)(1 − e^(−λ/f))` of the time. Under
//! `Σ f = budget`, the allocation that minimises the summed staleness (the default,
//! `staleness`) equalises `∂(λ/2f)/∂f` over the pages: `I = √(2μ/λ)` for one crawl-wide
//! multiplier `μ` (the **water level**, in ms) — attention grows as the square root of the rate,
//! less than proportionally, and a page that never changes would get none. The allocation that
//! maximises `Σ F` (Cho & Garcia-Molina's, `freshness`) equalises `∂F/∂f = g(x)/λ`, with
//! `x = λ/f` and `g(x) = 1 − (1 + x)e^(−x)` rising from 0 to 1: each page takes the `x` with
//! `g(x) = μλ`. As `g(x) ≈ x²/2` for small `x`, the two agree for pages checked more often than
//! they change; they part for pages changing faster: a page whose mean time between changes is
//! below `μ` (`μλ ≥ 1`) cannot be kept fresh at the budget and freshness gives it up, while
//! staleness keeps finding its many changes sooner. Every interval is then held within
//! `[min_ms, max_ms]`: `max_ms` is the floor of attention a page never seen to change (or given
//! up) still gets, and until the crawl has a water level a page is fetched every `initial_ms`.
//!
//! **Sitemaps read for free** ([`Objective::read_interval_ms`]). A crawl whose sitemaps are
//! read every `S` (`sitemaps_every_ms`, set beside the reseed rate) finds a change of a page
//! whose `<lastmod>` is honest at the next reading, without a scheduled check: a fetch then
//! helps only when it comes before the reading. A change waits `E[min(U·I, V·S)]` for the
//! first of the two, and minimising `λ·wait + μ/I` gives such a page no scheduled fetch at
//! all (the longest interval) unless its plain interval is below `S/√3`, and then one a little
//! longer than plain (below `S`); the budget it leaves goes to the pages the readings do not
//! cover, through the water level ([`Demand::add_history`] counts each sampled page as it is
//! scheduled). It counts only for a page whose `<lastmod>` has made it due and been right at
//! least once and is still believed ([`ChangeHistory::lastmod_proven`]): a page no sitemap
//! lists, one whose `<lastmod>` never moves, and one whose sitemap lies keep the allocation
//! without it, so a lying sitemap earns nothing. Not counted: a page whose `<lastmod>` was
//! right once and whose sitemap then stops being read or listing it keeps the longest
//! interval until its scheduled checks, finding its changes, raise its rate.
//!
//! **The water level scales.** A page's interval needs only its own history and `μ`. `μ` is set
//! per crawl ([`level_ms`]) from aggregate figures, at most every [`LEVEL_EVERY_MS`], by the
//! sweeper: the rates of a bounded sample of pages, each weighted by the pages it stands for
//! ([`Demand`]), so that the sample's fetches per day sum to the budget. The sample is up to
//! [`LEVEL_HOSTS`] hosts (standing for all the crawl's hosts), and of each the
//! [`LEVEL_PAGES_PER_HOST`] pages due soonest (its due index): a host with more is represented
//! by the pages due within a window `W`, and a page due every `I` is among them with
//! probability `min(1, W/I)` (its phase in its interval being uniform), so it counts for
//! `max(1, I/W)` pages ([`due_weight`], Horvitz–Thompson). The cost is bounded whatever the
//! crawl's size (20 hosts × 1,000 pages at most), and the rates are grouped into log-spaced bins
//! first, so solving is a few thousand evaluations.

use crate::task::Millis;
use serde::{Deserialize, Serialize};

const MINUTE: u64 = 60_000;
const DAY: u64 = 1_440 * MINUTE;

/// Checks a history remembers at full weight: past it, every figure is halved.
pub const MEMORY: u32 = 32;
/// How often a crawl's water level is recomputed.
pub const LEVEL_EVERY_MS: Millis = 3_600_000;
/// Hosts sampled to recompute it, and pages of each (`due_weight`).
pub const LEVEL_HOSTS: u32 = 20;
pub const LEVEL_PAGES_PER_HOST: u32 = 1_000;
/// Changes the prior adds (in one check of `initial_ms`).
const PRIOR_CHANGES: f64 = 0.1;
/// A page's first check comes at most `initial_ms` divided by this after its first fetch.
const FIRST_CHECK_DIVISOR: u64 = 4;

/// The estimator's settings (per crawl, or per URL rule): the pages it schedules share one
/// budget, the sum of the budgets their settings name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Estimator {
    /// Fetches per day for these pages, recrawls and checks alike.
    pub budget_per_day: u64,
    /// The shortest interval between two fetches of a page.
    pub min_ms: u64,
    /// The longest: the attention a page never seen to change still gets.
    pub max_ms: u64,
    /// A page's interval until the crawl has a water level, and the prior's check.
    pub initial_ms: u64,
    /// What the budget is spent to minimise.
    pub objective: Objective,
    /// How often the crawl's sitemaps are read (the reseed rate), if they are: a page whose
    /// `<lastmod>` has been right ([`ChangeHistory::lastmod_proven`]) is then found changed
    /// within about that long without a scheduled check ([`Objective::read_interval_ms`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sitemaps_every_ms: Option<u64>,
}

/// What a crawl's fetch budget is spent on (`Estimator::objective`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// The summed time between each change and the fetch that finds it.
    #[default]
    Staleness,
    /// The page-time not fresh (Cho & Garcia-Molina's freshness): pages changing faster than
    /// the budget can follow are given up.
    Freshness,
}

impl Objective {
    /// The unbounded interval (ms) at water level `level` for a page changing at `rate` per
    /// ms: infinite for a page never changing (or given up).
    pub fn interval_ms(self, rate: f64, level: f64) -> f64 {
        match self {
            Objective::Staleness if rate > 0.0 => (2.0 * level / rate).sqrt(),
            Objective::Staleness => f64::INFINITY,
            Objective::Freshness => interval_ms(rate, level),
        }
    }

    /// `interval_ms` for a page whose changes its sitemap's reading, every `reading` ms (None:
    /// none), finds anyway. A change then waits for the scheduled fetch or the reading,
    /// whichever comes first: `E[min(U·I, V·S)]`, `I/2 − I²/6S` for `I ≤ S`, `S/2 − S²/6I`
    /// beyond. Minimising `λ·wait + μ/I` (staleness): past `S` the fetches' worth `λS²/6I²`
    /// falls as their cost `μ/I²` does, so a page worth `μ` at `S` (`λS²/6 > μ`, i.e. the
    /// plain interval below `S/√3`) gets the `I < S` with `λI²(1/2 − I/3S) = μ` — longer than
    /// the plain `√(2μ/λ)`, a fetch now being worth less — and any other page none at all
    /// (infinite: the longest interval). The freshness objective ignores the reading.
    pub fn read_interval_ms(self, rate: f64, level: f64, reading: Option<f64>) -> f64 {
        let plain = self.interval_ms(rate, level);
        let Some(s) = reading.filter(|_| self == Objective::Staleness) else {
            return plain;
        };
        if plain.is_nan() || plain >= s / 3f64.sqrt() {
            return f64::INFINITY;
        }
        // I²(1 − 2I/3S) rises from plain²(1 − 2·plain/3S) < plain² at `plain` to S²/3 > plain²
        // at `S`: bisected in between.
        let target = plain * plain;
        let (mut lo, mut hi) = (plain, s);
        for _ in 0..48 {
            let mid = 0.5 * (lo + hi);
            if mid * mid * (1.0 - 2.0 * mid / (3.0 * s)) < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    }
}

impl Default for Estimator {
    fn default() -> Self {
        Self {
            budget_per_day: 0,
            min_ms: 15 * MINUTE,
            max_ms: 7 * DAY,
            initial_ms: DAY,
            objective: Objective::Staleness,
            sitemaps_every_ms: None,
        }
    }
}

impl Estimator {
    fn bound(&self, ms: f64) -> u64 {
        let min = self.min_ms.max(1);
        let max = self.max_ms.max(min);
        if ms.is_nan() {
            return max;
        }
        (ms.round().min(max as f64) as u64).clamp(min, max)
    }

    /// The interval to a page's next fetch at its estimated `rate` (changes per ms) and the
    /// crawl's water level (None: not computed yet, `initial_ms`).
    pub fn interval_ms(&self, rate: f64, level_ms: Option<u64>) -> u64 {
        match level_ms {
            None => self.bound(self.initial_ms as f64),
            Some(level) => self.bound(self.objective.interval_ms(rate, level as f64)),
        }
    }

    /// How often the sitemap reading finds a page's changes, if it counts for the page: the
    /// crawl's sitemaps are read every `sitemaps_every_ms` and the page's `<lastmod>` has been
    /// right and is believed.
    pub fn reading_ms(&self, history: &ChangeHistory) -> Option<u64> {
        self.sitemaps_every_ms
            .filter(|&ms| ms > 0 && history.lastmod_proven())
    }

    /// The interval to a page's next fetch by its `history` (its estimated rate, and the
    /// sitemap reading that counts for it, `reading_ms`) and the crawl's water level (None:
    /// `initial_ms`).
    pub fn allocated_ms(&self, history: &ChangeHistory, level_ms: Option<u64>) -> u64 {
        let rate = history.rate(self.initial_ms);
        match level_ms {
            None => self.bound(self.initial_ms as f64),
            Some(level) => {
                let reading = self.reading_ms(history).map(|ms| ms as f64);
                self.bound(self.objective.read_interval_ms(rate, level as f64, reading))
            }
        }
    }

    /// The interval to a page's next fetch after `check` (None: its first fetch), given
    /// `allocated` by its estimate and the water level, and its `history` after the check:
    /// never longer than `allocated`, at most a quarter of `initial_ms` before the first check,
    /// and at most half the checked interval after a change seen while every check of the page
    /// found one (module doc, "Exploring").
    pub fn explore(&self, allocated: u64, check: Option<Check>, history: &ChangeHistory) -> u64 {
        let cap = match check {
            None => self.initial_ms / FIRST_CHECK_DIVISOR,
            Some(check) if check.changed && history.censored() => check.interval_ms / 2,
            Some(_) => u64::MAX,
        };
        self.bound(allocated.min(cap) as f64)
    }
}

/// A check as [`Estimator::explore`] sees it: the interval it covered and what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub interval_ms: u64,
    pub changed: bool,
}

/// The interval (ms) that equalises `∂F/∂f` at water level `level` for a page changing at `rate`
/// per ms (the freshness objective), unbounded: infinite for a page given up
/// (`level × rate ≥ 1`) or never changing.
pub fn interval_ms(rate: f64, level: f64) -> f64 {
    let y = level * rate;
    // NaN (from a NaN rate or level) is given up too.
    let chased = rate > 0.0 && y < 1.0;
    if !chased {
        return f64::INFINITY;
    }
    if y <= 0.0 {
        return 0.0;
    }
    inverse_gain(y) / rate
}

/// `g(x) = 1 − (1 + x)e^(−x)`: the marginal freshness of a fetch, times the rate.
fn gain(x: f64) -> f64 {
    -(-x).exp_m1() - x * (-x).exp()
}

/// The `x` with `g(x) = y`, for `0 < y < 1` (bisection on ln x; `g` rises from 0 to 1).
fn inverse_gain(y: f64) -> f64 {
    // g(x) ≈ x²/2 for small x: the bracket starts around it.
    let guess = (2.0 * y).sqrt();
    let (mut lo, mut hi) = ((guess / 4.0).ln(), (guess * 4.0).max(1.0).ln());
    while gain(hi.exp()) < y && hi < 8.0 {
        hi += 1.0;
    }
    for _ in 0..48 {
        let mid = 0.5 * (lo + hi);
        if gain(mid.exp()) < y {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)).exp()
}

/// What a page's fetches have shown of its changes: counts and sums (in its fetch record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeHistory {
    /// Checks: fetches after a previous one.
    #[serde(rename = "n")]
    pub checks: u32,
    /// Checks that found the page changed.
    #[serde(rename = "x")]
    pub changes: u32,
    /// The summed intervals of the checks that found no change, in ms.
    #[serde(rename = "tu")]
    pub unchanged_ms: u64,
    /// The summed intervals of the checks that found a change, in ms.
    #[serde(rename = "tc")]
    pub changed_ms: u64,
    /// Fetches made well before their time (`prompted`), and those that found a change.
    #[serde(rename = "pn", default, skip_serializing_if = "is_zero")]
    pub prompted: u32,
    #[serde(rename = "px", default, skip_serializing_if = "is_zero")]
    pub prompted_changed: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Whether a fetch at `now` of a page last fetched at `fetched_at` and due at `due` came well
/// before its time (before three quarters of its interval): made due by a sitemap's
/// `<lastmod>` or an operator, not by its schedule.
pub fn prompted(fetched_at: Millis, due: Option<Millis>, now: Millis) -> bool {
    due.is_some_and(|due| now < due.saturating_sub(due.saturating_sub(fetched_at) / 4))
}

impl ChangeHistory {
    /// The history after a check `interval_ms` after the previous fetch, `changed` or not.
    pub fn observe(self, interval_ms: u64, changed: bool) -> Self {
        let mut next = if self.checks >= MEMORY {
            ChangeHistory {
                checks: self.checks / 2,
                changes: self.changes / 2,
                unchanged_ms: self.unchanged_ms / 2,
                changed_ms: self.changed_ms / 2,
                ..self
            }
        } else {
            self
        };
        next.checks += 1;
        if changed {
            next.changes += 1;
            next.changed_ms = next.changed_ms.saturating_add(interval_ms);
        } else {
            next.unchanged_ms = next.unchanged_ms.saturating_add(interval_ms);
        }
        next
    }

    /// The history after a prompted fetch (`prompted`) that did or did not find a change.
    pub fn prompted(self, changed: bool) -> Self {
        let halve = self.prompted >= MEMORY;
        let keep = |n: u32| if halve { n / 2 } else { n };
        ChangeHistory {
            prompted: keep(self.prompted) + 1,
            prompted_changed: keep(self.prompted_changed) + u32::from(changed),
            ..self
        }
    }

    /// Whether every check of the page found a change (and there was one): what it knows of
    /// its rate is only a lower bound.
    pub fn censored(&self) -> bool {
        self.checks > 0 && self.changes == self.checks
    }

    /// Whether the page's `<lastmod>` is believed: unless it made the page due at least twice
    /// and was right (a change found) less than half of the time.
    pub fn trusts_lastmod(&self) -> bool {
        self.prompted < 2 || 2 * self.prompted_changed >= self.prompted
    }

    /// Whether the page's `<lastmod>` has made it due and been right (a change found) at least
    /// once, and is believed: its sitemap lists it with dates that follow its changes. A page
    /// never made due by its sitemap (none lists it, or its `<lastmod>` never moves) has shown
    /// nothing, and is scheduled as if there were no sitemap.
    pub fn lastmod_proven(&self) -> bool {
        self.prompted_changed > 0 && self.trusts_lastmod()
    }

    /// The estimated change rate, in changes per ms (always positive and finite), with the
    /// prior of half a change in one check of `prior_ms`.
    pub fn rate(&self, prior_ms: u64) -> f64 {
        let prior = prior_ms.max(1) as f64;
        let changes = f64::from(self.changes) + PRIOR_CHANGES;
        let changed = self.changed_ms as f64 + PRIOR_CHANGES * prior;
        let unchanged = self.unchanged_ms as f64 + (1.0 - PRIOR_CHANGES) * prior;
        let checks = f64::from(self.checks) + 1.0;
        let total = changed + unchanged;
        let half_check = 0.5 * total / checks;
        ((total + half_check) / (unchanged + half_check)).ln() / (changed / changes)
    }
}

/// The rates of a sample of pages, each standing for `weight` pages, grouped into bins an
/// eighth of an octave wide (per settings): what the water level is solved over.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    /// By (rate bin, settings, the sitemap reading counts for the pages).
    bins: std::collections::BTreeMap<(i32, Estimator, bool), f64>,
}

// Settings as a map key: `Estimator` has only integers.
impl Ord for Estimator {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |e: &Estimator| {
            (
                e.budget_per_day,
                e.min_ms,
                e.max_ms,
                e.initial_ms,
                e.objective,
                e.sitemaps_every_ms,
            )
        };
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for Estimator {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

const BINS_PER_OCTAVE: f64 = 8.0;

impl Demand {
    /// Adds `weight` pages changing at `rate` per ms, scheduled with `settings`, whose sitemap
    /// reading does not count (`Estimator::reading_ms`).
    pub fn add(&mut self, rate: f64, settings: Estimator, weight: f64) {
        self.add_read(rate, settings, false, weight);
    }

    /// Adds `weight` pages with `history`, scheduled with `settings`: at their estimated rate,
    /// with their sitemap reading when it counts for them.
    pub fn add_history(&mut self, history: &ChangeHistory, settings: Estimator, weight: f64) {
        let read = settings.reading_ms(history).is_some();
        self.add_read(history.rate(settings.initial_ms), settings, read, weight);
    }

    fn add_read(&mut self, rate: f64, settings: Estimator, read: bool, weight: f64) {
        let counted = rate > 0.0 && rate.is_finite() && weight > 0.0;
        if !counted {
            return;
        }
        let bin = (rate.log2() * BINS_PER_OCTAVE).round() as i32;
        *self.bins.entry((bin, settings, read)).or_default() += weight;
    }

    /// Pages added.
    pub fn pages(&self) -> f64 {
        self.bins.values().sum()
    }

    /// Fetches per day the pages make at water level `level` (ms).
    pub fn fetches_per_day(&self, level: f64) -> f64 {
        self.bins
            .iter()
            .map(|(&(bin, settings, read), &weight)| {
                let rate = (f64::from(bin) / BINS_PER_OCTAVE).exp2();
                let reading = settings
                    .sitemaps_every_ms
                    .filter(|&ms| read && ms > 0)
                    .map(|ms| ms as f64);
                let objective = settings.objective;
                let interval = settings.bound(objective.read_interval_ms(rate, level, reading));
                weight * DAY as f64 / interval as f64
            })
            .sum()
    }
}

/// The pages a sampled page due every `interval_ms` stands for, when its host's sample was its
/// pages due within `window_ms` of now (None: every page of the host): `max(1, I/W)`.
pub fn due_weight(interval_ms: Option<u64>, window_ms: Option<u64>) -> f64 {
    match (interval_ms, window_ms) {
        (Some(interval), Some(window)) => (interval as f64 / window.max(1) as f64).max(1.0),
        _ => 1.0,
    }
}

/// The water level at which `demand`'s pages make `budget_per_day` fetches a day: the lowest
/// whole ms at which they keep within it (1 when even that does), or, when the budget cannot pay
/// for every page at its longest interval, a level that leaves them all there.
pub fn level_ms(demand: &Demand, budget_per_day: f64) -> u64 {
    // μ from 1 ms to about 30 years, bisected on its logarithm.
    let (mut lo, mut hi) = (0.0_f64, 40.0_f64);
    if demand.fetches_per_day(1.0) <= budget_per_day {
        return 1;
    }
    if demand.fetches_per_day(hi.exp()) >= budget_per_day {
        return hi.exp() as u64;
    }
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if demand.fetches_per_day(mid.exp()) > budget_per_day {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // The whole ms at or above the level found: never more than the budget.
    let level = hi.exp().ceil() as u64;
    if level > 1 && demand.fetches_per_day((level - 1) as f64) <= budget_per_day {
        return level - 1;
    }
    level
}

/// The water level a crawl keeps (`Crawl::level`), and when it was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Level {
    pub ms: u64,
    pub at: Millis,
}

impl Level {
    /// Whether a crawl's level (None: never computed) is due for recomputing at `now`.
    pub fn due(level: Option<&Level>, now: Millis) -> bool {
        level.is_none_or(|l| now >= l.at.saturating_add(LEVEL_EVERY_MS))
    }
}

#[cfg(test)]
mod tests;
