//! The estimator and the allocation: worked cases, then properties over random pages.

use super::*;
use proptest::prelude::*;

const HOUR: u64 = 60 * MINUTE;

fn settings() -> Estimator {
    Estimator {
        budget_per_day: 1_000,
        ..Estimator::default()
    }
}

/// Freshness of a page changing at `rate` per ms, fetched every `interval` ms.
fn freshness(rate: f64, interval: f64) -> f64 {
    let x = rate * interval;
    -(-x).exp_m1() / x
}

#[test]
fn with_equal_intervals_the_estimate_is_cho_and_garcia_molinas() {
    // GIVEN 30 daily checks of which 12 found a change
    let mut history = ChangeHistory::default();
    for i in 0..30 {
        history = history.observe(DAY, i % 5 < 2);
    }
    assert_eq!((history.checks, history.changes), (30, 12));
    // THEN the rate is about −ln((n − X + ½)/(n + ½)) / I (the prior's half change aside)
    let (n, x) = (30.0_f64, 12.0_f64);
    let cho = -((n - x + 0.5) / (n + 0.5)).ln() / DAY as f64;
    let rate = history.rate(DAY);
    assert!((rate / cho - 1.0).abs() < 0.05, "{rate} vs {cho}");
    // AND near the true rate of a page changed at 40% of daily checks: ln(1/0.6) a day
    let truth = -(0.6_f64).ln() / DAY as f64;
    assert!((rate / truth - 1.0).abs() < 0.1, "{rate} vs {truth}");
}

#[test]
fn a_page_seen_changed_at_every_check_is_estimated_above_one_change_per_check() {
    let mut history = ChangeHistory::default();
    for _ in 0..20 {
        history = history.observe(DAY, true);
    }
    let per_day = history.rate(DAY) * DAY as f64;
    assert!(per_day.is_finite() && per_day > 2.0, "{per_day}");
}

#[test]
fn a_never_changing_pages_interval_grows_to_the_cap() {
    // GIVEN a crawl whose daily changers are fetched about daily (level 12 h)
    let s = settings();
    let level = Some(12 * HOUR);
    // WHEN a page is found unchanged at every fetch, fetched at the intervals it is given
    let mut history = ChangeHistory::default();
    let mut intervals = Vec::new();
    for _ in 0..100 {
        let interval = s.interval_ms(history.rate(s.initial_ms), level);
        intervals.push(interval);
        history = history.observe(interval, false);
    }
    // THEN its interval grows from less than the cap, reaches the cap, and stays there
    assert!(intervals[0] < s.max_ms, "{intervals:?}");
    assert!(
        intervals[..20].windows(2).all(|w| w[1] >= w[0]),
        "{intervals:?}"
    );
    assert!(
        intervals[50..].iter().all(|&i| i == s.max_ms),
        "{intervals:?}"
    );
    let daily = s.interval_ms(1.0 / DAY as f64, level);
    assert!((20 * HOUR..28 * HOUR).contains(&daily), "{daily}");
}

#[test]
fn a_page_changing_faster_than_the_budget_allows_is_not_chased() {
    // GIVEN a water level of 1 h
    let staleness = settings();
    let freshness = Estimator {
        objective: Objective::Freshness,
        ..settings()
    };
    let level = Some(HOUR);
    let (every_10_min, every_2_h, daily) = (6.0 / HOUR as f64, 0.5 / HOUR as f64, 1.0 / DAY as f64);
    // WHEN the budget is spent on freshness, THEN a page changing every 10 minutes, which
    // cannot be kept fresh, is left at the longest interval
    assert_eq!(freshness.interval_ms(every_10_min, level), freshness.max_ms);
    // AND when it is spent on staleness, that page is fetched more often than a slower one,
    // yet far less than its rate would ask: attention grows as the square root of the rate
    let fast = staleness.interval_ms(every_10_min, level);
    let slow = staleness.interval_ms(every_2_h, level);
    assert!(fast < slow && fast > 10 * MINUTE, "{fast} vs {slow}");
    assert!((slow as f64 / fast as f64 - 12f64.sqrt()).abs() < 0.01);
    // AND under either, a page changing every 2 h gets more attention than a daily one, less
    // than in proportion to its 12 times the rate
    for s in [staleness, freshness] {
        let (two_hourly, daily) = (s.interval_ms(every_2_h, level), s.interval_ms(daily, level));
        let ratio = daily as f64 / two_hourly as f64;
        assert!(ratio > 1.0 && ratio < 12.0, "{ratio} ({:?})", s.objective);
    }
}

#[test]
fn without_a_level_a_page_is_fetched_at_its_initial_interval() {
    let s = settings();
    assert_eq!(s.interval_ms(1.0 / HOUR as f64, None), DAY);
}

#[test]
fn the_level_spends_the_budget_over_a_sample_that_stands_for_the_crawl() {
    // GIVEN 100 sampled pages standing for 100,000: 80 never changed in 30 days of daily
    // checks, 15 daily, 5 hourly
    let s = settings();
    let mut demand = Demand::default();
    let watched = |changed_every: Option<u32>| {
        let mut h = ChangeHistory::default();
        for day in 0..30 {
            h = h.observe(DAY, changed_every.is_some_and(|k| day % k == 0));
        }
        h.rate(s.initial_ms)
    };
    let (never, daily, hourly) = (watched(None), watched(Some(1)), 24.0 / DAY as f64);
    for (rate, n) in [(never, 80), (daily, 15), (hourly, 5)] {
        for _ in 0..n {
            demand.add(rate, s, 1_000.0);
        }
    }
    assert_eq!(demand.pages(), 100_000.0);
    // WHEN the level for 100,000 fetches a day (fixed daily's) is solved
    let level = level_ms(&demand, 100_000.0);
    // THEN the pages make that many fetches, and the changing ones take most of them
    let spent = demand.fetches_per_day(level as f64);
    assert!((spent / 100_000.0 - 1.0).abs() < 0.01, "{spent}");
    let per_day = |rate: f64| DAY as f64 / s.interval_ms(rate, Some(level)) as f64;
    assert!(per_day(never) < 0.5, "{}", per_day(never));
    assert!(per_day(hourly) > per_day(daily) && per_day(daily) > 1.0);
    // AND a budget below the floor leaves every page at the longest interval
    let starved = level_ms(&demand, 1_000.0);
    assert_eq!(s.interval_ms(daily, Some(starved)), s.max_ms);
}

#[test]
fn a_sample_of_the_pages_due_soonest_stands_for_its_host() {
    // GIVEN a host of 1,000 pages due every day, 100 every hour, at uniform phases
    let mut pages: Vec<(u64, u64)> = (0..1_000).map(|i| (DAY, i * DAY / 1_000)).collect();
    pages.extend((0..100).map(|i| (HOUR, i * HOUR / 100)));
    // WHEN the 200 due soonest are sampled
    pages.sort_by_key(|&(_, due)| due);
    let sample = &pages[..200];
    let window = sample.last().unwrap().1;
    // THEN their weights add up to about the host's pages, hourly and daily alike
    let weight = |every: u64| -> f64 {
        sample
            .iter()
            .filter(|p| p.0 == every)
            .map(|p| due_weight(Some(p.0), Some(window)))
            .sum()
    };
    assert!(
        (weight(DAY) / 1_000.0 - 1.0).abs() < 0.05,
        "{}",
        weight(DAY)
    );
    assert!(
        (weight(HOUR) / 100.0 - 1.0).abs() < 0.05,
        "{}",
        weight(HOUR)
    );
    assert_eq!(due_weight(Some(DAY), None), 1.0, "a host read whole");
}

#[test]
fn a_level_is_due_hourly() {
    assert!(Level::due(None, 0));
    let level = Level { ms: 5, at: 1_000 };
    assert!(!Level::due(Some(&level), 1_000 + LEVEL_EVERY_MS - 1));
    assert!(Level::due(Some(&level), 1_000 + LEVEL_EVERY_MS));
}

#[test]
fn a_history_stays_small_and_forgets_old_habits() {
    // GIVEN a page that changed at every daily check for months, then stopped
    let mut history = ChangeHistory::default();
    for _ in 0..100 {
        history = history.observe(DAY, true);
    }
    let busy = history.rate(DAY);
    for _ in 0..40 {
        history = history.observe(DAY, false);
    }
    // THEN its counts stay bounded and its rate falls well below what it was
    assert!(history.checks <= MEMORY);
    assert!(
        history.rate(DAY) < busy / 4.0,
        "{} vs {busy}",
        history.rate(DAY)
    );
    let json = serde_json::to_string(&history).unwrap();
    assert!(json.len() < 60, "{json}");
}

#[test]
fn a_lastmod_that_lied_at_two_fetches_is_no_longer_believed() {
    // GIVEN a page fetched at 0, due at 100
    assert!(
        prompted(0, Some(100), 74),
        "before three quarters of its interval"
    );
    assert!(!prompted(0, Some(100), 75) && !prompted(0, Some(100), 130));
    assert!(!prompted(0, None, 10), "nothing was scheduled");
    // WHEN its sitemap said "modified" and the fetches found nothing, twice
    let lied = ChangeHistory::default().prompted(false);
    assert!(lied.trusts_lastmod(), "one miss is no pattern");
    let lied = lied.prompted(false);
    // THEN the lastmod is no longer believed; an honest one stays believed
    assert!(!lied.trusts_lastmod());
    let honest = (0..10).fold(ChangeHistory::default(), |h, i| h.prompted(i % 3 != 0));
    assert!(honest.trusts_lastmod());
    // AND prompted fetches are no checks: the rate does not move
    assert_eq!(lied.rate(DAY), ChangeHistory::default().rate(DAY));
}

fn history() -> impl Strategy<Value = ChangeHistory> {
    proptest::collection::vec((1u64..30 * DAY, any::<bool>()), 0..80).prop_map(|checks| {
        checks
            .into_iter()
            .fold(ChangeHistory::default(), |h, (i, c)| h.observe(i, c))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rates_are_positive_and_evidence_moves_them_the_right_way(
        h in history(),
        interval in 1u64..30 * DAY,
        prior in 1u64..30 * DAY,
    ) {
        let rate = h.rate(prior);
        prop_assert!(rate > 0.0 && rate.is_finite(), "{rate}");
        // A change seen raises the rate above what no change over the same interval gives.
        if h.checks < MEMORY {
            prop_assert!(h.observe(interval, true).rate(prior) > h.observe(interval, false).rate(prior));
        }
    }

    #[test]
    fn the_allocation_equalises_the_marginal_freshness(
        log_rate in -14.0f64..-5.0,
        log_level in 2.0f64..9.0,
    ) {
        // A page at rate λ (per ms) given its interval at level μ gains μ freshness per unit
        // of frequency: ∂F/∂f = μ (the Lagrange condition), whenever it is chased.
        let (rate, level) = (10f64.powf(log_rate), 10f64.powf(log_level));
        // Away from the ends, where finite differences of F lose their digits.
        prop_assume!((1e-6..0.99).contains(&(rate * level)));
        let interval = interval_ms(rate, level);
        let f = 1.0 / interval;
        let df = f * 1e-4;
        let marginal = (freshness(rate, 1.0 / (f + df)) - freshness(rate, 1.0 / (f - df))) / (2.0 * df);
        prop_assert!((marginal / level - 1.0).abs() < 1e-3, "{marginal} vs {level}");
    }

    #[test]
    fn a_higher_level_never_fetches_a_page_more_often(
        log_rate in -14.0f64..-4.0,
        log_level in 0.0f64..12.0,
        raise in 1.0f64..100.0,
    ) {
        let s = settings();
        let rate = 10f64.powf(log_rate);
        let level = 10f64.powf(log_level) as u64;
        let low = s.interval_ms(rate, Some(level));
        let high = s.interval_ms(rate, Some((level as f64 * raise) as u64));
        prop_assert!(high >= low);
        prop_assert!((s.min_ms..=s.max_ms).contains(&low));
    }

    #[test]
    fn the_level_meets_any_budget_between_the_floor_and_the_ceiling(
        pages in proptest::collection::vec((-16.0f64..-4.0, 1.0f64..100.0), 1..50),
        share in 0.0f64..1.0,
    ) {
        let s = settings();
        let mut demand = Demand::default();
        for (log_rate, weight) in pages {
            demand.add(10f64.powf(log_rate), s, weight);
        }
        // Up to what the lowest level the crawl keeps (1 ms) gives.
        let floor = demand.pages() * DAY as f64 / s.max_ms as f64;
        let ceiling = demand.fetches_per_day(1.0);
        let budget = floor + share * (ceiling - floor);
        let level = level_ms(&demand, budget);
        // THEN the level is the lowest whole ms at which the pages keep within the budget
        let spent = |level: u64| demand.fetches_per_day(level as f64);
        prop_assert!(spent(level) <= budget * 1.000_001, "{} vs {budget}", spent(level));
        prop_assert!(level <= 1 || spent(level - 1) > budget * 0.999_999, "{} vs {budget}", spent(level - 1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn exploring_only_brings_checks_forward_and_only_while_the_evidence_is_censored(
        h in history(),
        allocated in 1u64..30 * DAY,
        interval in 1u64..30 * DAY,
        changed in any::<bool>(),
        first in any::<bool>(),
    ) {
        let s = settings();
        let check = (!first).then_some(Check { interval_ms: interval, changed });
        let next = s.explore(allocated, check, &h);
        // Within the settings' bounds, and never later than the allocation.
        prop_assert!((s.min_ms..=s.max_ms).contains(&next), "{next}");
        prop_assert!(next <= allocated.max(s.min_ms), "{next} vs {allocated}");
        let bound = |ms: u64| ms.clamp(s.min_ms, s.max_ms);
        match check {
            None => prop_assert!(next <= bound(s.initial_ms / 4)),
            Some(c) if c.changed && h.censored() => prop_assert!(next <= bound(c.interval_ms / 2)),
            // Uncensored evidence (or no change found): the estimate alone decides.
            Some(_) => prop_assert_eq!(next, bound(allocated)),
        }
    }
}

#[test]
fn a_page_never_seen_to_change_is_estimated_at_a_tenth_of_a_change_over_its_time_watched() {
    // GIVEN a page found unchanged at every daily check for 30 days
    let mut history = ChangeHistory::default();
    for _ in 0..30 {
        history = history.observe(DAY, false);
    }
    // THEN its rate is about 0.1 change over the 31 days (30 watched, the prior's one)
    let per_day = history.rate(DAY) * DAY as f64;
    assert!((per_day * 31.0 / 0.1 - 1.0).abs() < 0.1, "{per_day}");
    assert!(!history.censored());
    assert!(ChangeHistory::default().observe(DAY, true).censored());
    assert!(
        !ChangeHistory::default().censored(),
        "no check: nothing censored"
    );
}

/// `E[min(U·I, V·S)]`: how long a change waits for a fetch every `interval` or a sitemap
/// reading every `reading`, at independent phases.
fn read_wait(interval: f64, reading: f64) -> f64 {
    let (short, long) = (interval.min(reading), interval.max(reading));
    short / 2.0 - short * short / (6.0 * long)
}

fn read_settings() -> Estimator {
    Estimator {
        sitemaps_every_ms: Some(12 * HOUR),
        ..settings()
    }
}

/// `start` after 40 checks `every` ms apart, of which those at `i % 5 < changed` found a change.
fn observed(start: ChangeHistory, every: u64, changed: u32) -> ChangeHistory {
    (0..40).fold(start, |h, i| h.observe(every, i % 5 < changed))
}

#[test]
fn a_page_whose_sitemap_has_been_right_is_scheduled_around_its_reading() {
    // GIVEN sitemaps read every 12 h, a water level of 2 h, and a page whose lastmod made it
    // due once and was right
    let s = read_settings();
    let level = Some(2 * HOUR);
    let proven = ChangeHistory::default().prompted(true);
    assert!(proven.lastmod_proven() && !ChangeHistory::default().lastmod_proven());
    // WHEN it changes about daily (at 1 in 5 checks 6 h apart): its plain interval is past
    // 12 h / √3, so the reading finds its changes for free and no scheduled fetch is worth
    // its cost
    let daily = observed(proven, 6 * HOUR, 1);
    assert_eq!(s.allocated_ms(&daily, level), s.max_ms);
    let plain = s.interval_ms(daily.rate(s.initial_ms), level);
    assert!(plain > 12 * HOUR * 10 / 17 && plain < s.max_ms, "{plain}");
    // AND a page changing about hourly (at 2 in 5 checks 30 min apart) is still fetched on its
    // schedule, a little less often than without the reading (each fetch is worth less),
    // more often than the reading
    let hourly = observed(proven, 30 * MINUTE, 2);
    let read = s.allocated_ms(&hourly, level);
    let plain = s.interval_ms(hourly.rate(s.initial_ms), level);
    assert!(read > plain && read < 12 * HOUR, "{read} vs {plain}");
    // AND a page whose lastmod has never been right, or was found lying, or a crawl that does
    // not say its sitemaps are read, keeps the allocation without the reading
    let unproven = observed(ChangeHistory::default(), 6 * HOUR, 1);
    let lying = observed(proven.prompted(false).prompted(false), 6 * HOUR, 1);
    assert!(!lying.trusts_lastmod());
    for h in [unproven, lying] {
        let alone = s.interval_ms(h.rate(s.initial_ms), level);
        assert_eq!(s.allocated_ms(&h, level), alone);
    }
    assert_eq!(
        settings().allocated_ms(&daily, level),
        settings().interval_ms(daily.rate(s.initial_ms), level)
    );
    // AND before the crawl has a level, every page waits its initial interval
    assert_eq!(s.allocated_ms(&daily, None), s.initial_ms);
}

#[test]
fn the_level_gives_what_the_read_pages_leave_to_the_others() {
    // GIVEN 100 pages, half changing about daily, half about hourly
    let s = read_settings();
    let watched = |hourly: bool, proven: bool| {
        let start = if proven {
            ChangeHistory::default().prompted(true)
        } else {
            ChangeHistory::default()
        };
        if hourly {
            observed(start, 30 * MINUTE, 2)
        } else {
            observed(start, 6 * HOUR, 1)
        }
    };
    let level = |proven: bool| {
        let mut demand = Demand::default();
        for _ in 0..50 {
            demand.add_history(&watched(false, proven), s, 1.0);
            demand.add_history(&watched(true, proven), s, 1.0);
        }
        let level = level_ms(&demand, 400.0);
        let spent = demand.fetches_per_day(level as f64);
        assert!((spent / 400.0 - 1.0).abs() < 0.01, "{spent}");
        level
    };
    // WHEN their sitemaps have been right, THEN the daily pages are left to the reading and
    // the budget they leave makes the hourly ones fetched more often than when no reading
    // counts
    let (read, alone) = (level(true), level(false));
    let every = |hourly: bool, proven: bool, level: u64| {
        s.allocated_ms(&watched(hourly, proven), Some(level))
    };
    assert_eq!(every(false, true, read), s.max_ms);
    assert!(every(false, false, alone) < s.max_ms);
    assert!(
        every(true, true, read) < every(true, false, alone),
        "{read} vs {alone}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn with_a_reading_the_interval_minimises_staleness_plus_cost(
        log_rate in -12.0f64..-5.0,
        log_level in 2.0f64..8.0,
        reading_hours in 1.0f64..48.0,
    ) {
        let (rate, level) = (10f64.powf(log_rate), 10f64.powf(log_level));
        let reading = reading_hours * HOUR as f64;
        // λ·wait + μ/I: the staleness a page adds plus its fetches at the level's price.
        let cost = |interval: f64| rate * read_wait(interval, reading) + level / interval;
        let chosen = Objective::Staleness.read_interval_ms(rate, level, Some(reading));
        let plain = Objective::Staleness.interval_ms(rate, level);
        // Never fetched more often than without the reading.
        prop_assert!(chosen >= plain * (1.0 - 1e-9), "{chosen} vs {plain}");
        // No interval does better: none at all (the limit λS/2), or a nearby one.
        let none = rate * reading / 2.0;
        if chosen.is_finite() {
            prop_assert!(chosen < reading);
            prop_assert!(cost(chosen) <= none * (1.0 + 1e-9), "{} vs {none}", cost(chosen));
            for step in [0.99, 1.01] {
                prop_assert!(cost(chosen) <= cost(chosen * step) * (1.0 + 1e-9));
            }
        } else {
            for interval in [plain, reading / 4.0, reading / 2.0, reading, 4.0 * reading] {
                prop_assert!(none <= cost(interval) * (1.0 + 1e-9), "{interval}");
            }
        }
        // The freshness objective ignores the reading.
        prop_assert_eq!(
            Objective::Freshness.read_interval_ms(rate, level, Some(reading)).to_bits(),
            Objective::Freshness.interval_ms(rate, level).to_bits()
        );
    }

    #[test]
    fn an_unproven_lastmod_leaves_the_allocation_as_it_was(
        h in history(),
        prompted in proptest::collection::vec(any::<bool>(), 0..10),
        log_level in 0.0f64..10.0,
    ) {
        let h = prompted.iter().fold(h, |h, &c| h.prompted(c));
        let s = read_settings();
        let level = Some(10f64.powf(log_level) as u64);
        let alone = s.interval_ms(h.rate(s.initial_ms), level);
        let allocated = s.allocated_ms(&h, level);
        if h.lastmod_proven() {
            prop_assert!(allocated >= alone);
        } else {
            prop_assert_eq!(allocated, alone);
        }
        prop_assert_eq!(settings().allocated_ms(&h, level), settings().interval_ms(h.rate(s.initial_ms), level));
    }
}
