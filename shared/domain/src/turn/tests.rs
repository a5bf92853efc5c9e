//! The turn's rules, table-driven, then a property test over random turns.

use super::*;
use crate::canonical::CanonicalUrl;
use proptest::prelude::*;

const T0: Millis = 1_800_000_000_000;

fn config() -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.politeness.delay_ms = 100;
    config.politeness.turn_pages = 5;
    config.politeness.error_budget = 3;
    config.fetch.timeout_ms = 1_000;
    config.lease_ms = 60_000;
    config
}

fn id(i: u8) -> TaskId {
    CanonicalUrl::parse(&format!("http://example.com/{i}"))
        .unwrap()
        .task_id()
}

fn plan(config: &CrawlConfig, robots: Duration) -> TurnPlan {
    let policy = config.politeness.host_policy("example.com");
    let host = Host::new("example.com", &policy, T0);
    let (host, turn) = host.claim_turn(T0, hold_ms(config)).unwrap();
    TurnPlan::new(host, config, &turn, T0, robots)
}

#[test]
fn the_pace_and_the_crawl_delay_hold_across_turns() {
    // A turn whose last fetch ended at T0 + 1 s, on a host with a 100 ms pace and a 10 s
    // Crawl-delay
    let config = config();
    let policy = config.politeness.host_policy("example.com");
    let host = Host::new("example.com", &policy, T0);
    let (host, turn) = host.claim_turn(T0, hold_ms(&config)).unwrap();
    let mut first = TurnPlan::new(host.clone(), &config, &turn, T0, Duration::from_secs(10));
    assert_eq!(first.start_at(0), 0);
    first.finished(TaskEnd::Ended, Some(HostSignal::Answered), T0 + 1_000);

    // WHEN it hands its host back with work due now
    let holder = first.into_host();
    let (back, visible_at) = host
        .merge_turn(&holder)
        .hand_back(&turn, Some(NextWork::Task(T0)), Some(0), 0, 0, T0 + 1_000)
        .unwrap();

    // THEN the next turn's message is visible, and its claim allowed, 10 s after that fetch
    assert_eq!(visible_at, Some(T0 + 11_000));
    assert_eq!(
        back.claim_turn(T0 + 2_000, hold_ms(&config)).err(),
        Some(crate::host::TurnRejection::NotYet { at: T0 + 11_000 })
    );
    assert!(back.claim_turn(T0 + 11_000, hold_ms(&config)).is_ok());
    // Without a Crawl-delay, the host's own pace alone.
    let mut paced = plan(&config, Duration::ZERO);
    paced.finished(TaskEnd::Ended, Some(HostSignal::Answered), T0 + 1_000);
    assert_eq!(paced.into_host().next_allowed_at, T0 + 1_100);
}

#[test]
fn a_turn_runs_for_its_lease_and_at_least_two_fetch_windows() {
    let mut config = config();
    assert_eq!(turn_ms(&config), 60_000);
    config.fetch.timeout_ms = 40_000;
    assert_eq!(turn_ms(&config), 84_000);
}

#[test]
fn a_turn_holds_its_host_30_s_at_a_time_longer_only_for_a_fetch_that_could_outlast_that() {
    let mut config = config();
    assert_eq!(hold_ms(&config), 30_000);
    config.fetch.timeout_ms = 20_000;
    assert_eq!(hold_ms(&config), 30_000);
    config.fetch.timeout_ms = 40_000;
    assert_eq!(hold_ms(&config), 47_000);
}

#[test]
fn the_hold_is_renewed_at_half_or_before_a_fetch_it_would_not_cover() {
    // A fetch window of 3 s: renewed when half the hold is left.
    let mut short = plan(&config(), Duration::ZERO);
    assert_eq!(short.renew_at(), T0 + 15_000);
    short.renewed(T0 + 15_000);
    assert_eq!(short.renew_at(), T0 + 30_000);
    // A fetch window of 22 s (the default timeout): renewed while it still covers a fetch.
    let mut config = config();
    config.fetch.timeout_ms = 20_000;
    let long = plan(&config, Duration::ZERO);
    assert_eq!(long.renew_at(), T0 + 8_000);
}

#[test]
fn starts_are_spaced_by_the_hosts_delay_or_robots_crawl_delay_whichever_is_longer() {
    let mut fast = plan(&config(), Duration::ZERO);
    assert_eq!(
        [fast.start_at(0), fast.start_at(0), fast.start_at(350)],
        [0, 100, 350]
    );
    let mut robots = plan(&config(), Duration::from_millis(250));
    assert_eq!([robots.start_at(0), robots.start_at(10)], [0, 250]);
}

#[test]
fn a_task_starts_once_and_the_budget_closes_the_turn() {
    let mut plan = plan(&config(), Duration::ZERO);
    assert_eq!(plan.admit(&id(0)), Admit::Start);
    assert!(!plan.is_new(&id(0)));
    assert_eq!(plan.admit(&id(0)), Admit::Again);
    for i in 1..5 {
        assert_eq!(plan.admit(&id(i)), Admit::Start);
    }
    assert_eq!(plan.pages_left(), 0);
    assert_eq!(plan.admit(&id(9)), Admit::Closed);
}

#[test]
fn no_fetch_starts_within_a_fetch_window_of_the_turns_end_or_the_deadline() {
    let config = config();
    let mut near_deadline = plan(&config, Duration::ZERO);
    assert!(near_deadline.may_start(T0, Some(Duration::from_millis(3_001))));
    assert!(!near_deadline.may_start(T0, Some(Duration::from_millis(2_999))));
    assert!(near_deadline.closed() && !near_deadline.may_start(T0, None));
    let mut near_end = plan(&config, Duration::ZERO);
    assert!(near_end.may_start(T0 + 57_000, None));
    assert!(!near_end.may_start(T0 + 57_001, None));
}

#[test]
fn host_wide_trouble_stops_the_turn_and_an_answer_does_not() {
    let mut plan = plan(&config(), Duration::ZERO);
    plan.finished(TaskEnd::Ended, Some(HostSignal::Answered), T0);
    plan.finished(TaskEnd::Open, Some(HostSignal::Timeout), T0);
    assert!(!plan.closed(), "one timeout may be one slow page");
    assert_eq!(plan.host().done, 1);
    plan.finished(TaskEnd::Open, Some(HostSignal::Unreachable), T0);
    assert!(plan.closed());
    assert!(plan.host().snoozed_until.is_some_and(|at| at > T0));
}

#[test]
fn a_storage_error_stops_the_turn() {
    let mut plan = plan(&config(), Duration::ZERO);
    plan.finished(TaskEnd::Failed, None, T0);
    assert!(plan.closed());
    assert_eq!(plan.admit(&id(1)), Admit::Closed);
}

#[test]
fn the_host_goes_back_with_its_soonest_due_task() {
    assert_eq!(next_work([]), None);
    let due = [
        (T0 + 50, Some(NextWork::Revisit(T0 + 50))),
        (T0 + 10, Some(NextWork::Task(T0 + 10))),
        (T0 + 30, Some(NextWork::Task(T0 + 30))),
    ];
    assert_eq!(next_work(due), Some(NextWork::Task(T0 + 10)));
    assert!(due_now(Some(T0), T0) && !due_now(Some(T0 + 1), T0) && !due_now(None, T0));
}

/// One step of a random turn.
#[derive(Debug, Clone)]
enum Step {
    /// Time passes (ms).
    Wait(u16),
    /// A due task is read and offered to the turn.
    Offer(u8),
    /// A started fetch ends.
    End(TaskEnd, Option<HostSignal>),
}

fn step() -> impl Strategy<Value = Step> {
    let end = prop_oneof![
        Just(TaskEnd::Ended),
        Just(TaskEnd::EndedAgain),
        Just(TaskEnd::Open),
        Just(TaskEnd::Failed)
    ];
    let signal = prop_oneof![
        Just(None),
        Just(Some(HostSignal::Answered)),
        Just(Some(HostSignal::Timeout)),
        Just(Some(HostSignal::Unreachable)),
        (0u64..5_000).prop_map(|ms| Some(HostSignal::Throttled {
            retry_after_ms: Some(ms)
        })),
    ];
    prop_oneof![
        1 => (0u16..30_000).prop_map(Step::Wait),
        4 => (0u8..12).prop_map(Step::Offer),
        2 => (end, signal).prop_map(|(end, signal)| Step::End(end, signal)),
    ]
}

proptest! {
    #[test]
    fn a_turn_keeps_its_pace_budget_and_time(
        steps in prop::collection::vec(step(), 1..60),
        robots_ms in 0u64..300,
        deadline_ms in prop::option::of(0u64..120_000),
    ) {
        let config = config();
        let robots = Duration::from_millis(robots_ms);
        let mut plan = plan(&config, robots);
        let window = fetch_window_ms(&config);
        let last_start = T0 + turn_ms(&config) as Millis - window as Millis;
        let (mut elapsed, mut starts, mut ended) = (0u64, Vec::<(u64, u64)>::new(), 0u64);
        let mut started = HashSet::new();
        let mut closed = false;
        for step in steps {
            match step {
                Step::Wait(ms) => elapsed += u64::from(ms),
                Step::Offer(i) => {
                    let pause = plan.host().delay_ms.max(robots_ms);
                    match plan.admit(&id(i)) {
                        Admit::Start => {
                            prop_assert!(!closed, "started after the turn closed");
                            prop_assert!(started.insert(i), "task {i} started twice");
                            let at = plan.start_at(elapsed);
                            prop_assert!(at >= elapsed);
                            if let Some((previous, gap)) = starts.last() {
                                prop_assert!(at >= previous + gap, "{at} too soon after {previous}");
                            }
                            starts.push((at, pause));
                            let now = T0 + at as Millis;
                            let left = deadline_ms.map(|d| Duration::from_millis(d.saturating_sub(at)));
                            let may = plan.may_start(now, left);
                            let late = left.is_some_and(|l| l < Duration::from_millis(window));
                            prop_assert_eq!(may, !closed && !late && now <= last_start);
                            elapsed = at;
                        }
                        Admit::Again => prop_assert!(started.contains(&i)),
                        Admit::Closed => prop_assert!(closed || started.len() == 5),
                    }
                }
                Step::End(end, signal) => {
                    plan.finished(end, signal, T0 + elapsed as Millis);
                    ended += u64::from(end == TaskEnd::Ended);
                    let host = plan.host();
                    if end == TaskEnd::Failed || host.snoozed_until.is_some() || host.given_up.is_some() {
                        prop_assert!(plan.closed());
                    }
                }
            }
            // Once closed, the turn starts nothing more.
            prop_assert!(!closed || plan.closed());
            closed = plan.closed() && plan.pages_left() > 0 || closed;
            prop_assert!(started.len() <= 5);
            prop_assert_eq!(plan.pages_left() as usize, 5 - started.len());
        }
        prop_assert_eq!(plan.host().done, ended);
    }
}
