use super::*;

const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;

fn id(n: u32) -> TaskId {
    TaskId::parse(&format!("{n:032x}")).unwrap_or_else(|| TaskId::of_key("bad"))
}

fn read(at: Millis, n: u32, verdict: Verdict) -> Read {
    Read {
        place: Place { at, task_id: id(n) },
        verdict,
    }
}

#[test]
fn only_tasks_placed_by_time_alone_are_rostered() {
    assert!(rostered(Priority::MIN, None));
    assert!(!rostered(Priority::MAX, None));
    assert!(!rostered(Priority::MIN, Some("details")));
}

#[test]
fn pending_work_and_retries_are_due_ends_are_passed_a_live_lease_holds_the_cursor() {
    let pass = Pass {
        started_at: 10 * DAY,
        ..Pass::default()
    };
    let now = 10 * DAY + HOUR;
    assert_eq!(
        pass.verdict(Status::Pending, None, None, None, now),
        Verdict::Due
    );
    assert_eq!(
        pass.verdict(Status::Failed, Some(now), None, None, now),
        Verdict::Due
    );
    assert_eq!(
        pass.verdict(Status::Failed, Some(now + 30_000), None, None, now),
        Verdict::Retry(now + 30_000)
    );
    assert_eq!(
        pass.verdict(Status::Ignored, None, None, None, now),
        Verdict::Passed
    );
    assert_eq!(
        pass.verdict(Status::Succeeded, None, None, None, now),
        Verdict::Passed
    );
    assert_eq!(
        pass.verdict(Status::InProgress, None, None, Some(now + 1), now),
        Verdict::Held(now + 1)
    );
    assert_eq!(
        pass.verdict(Status::InProgress, None, None, Some(now), now),
        Verdict::Due
    );
}

#[test]
fn a_page_is_due_once_its_next_fetch_has_come() {
    let pass = Pass {
        started_at: 10 * DAY,
        ..Pass::default()
    };
    let now = 10 * DAY + HOUR;
    let verdict = |next| pass.verdict(Status::Succeeded, None, Some(next), None, now);
    assert_eq!(verdict(now), Verdict::Due);
    assert_eq!(verdict(9 * DAY), Verdict::Due);
    assert_eq!(verdict(now + 1), Verdict::Later(now + 1));
    assert_eq!(
        pass.verdict(Status::Gone, None, Some(11 * DAY), None, now),
        Verdict::Later(11 * DAY)
    );
}

#[test]
fn the_cursor_moves_over_what_the_turn_saw_to_and_stops_at_the_first_it_did_not() {
    let pass = Pass {
        started_at: DAY,
        ..Pass::default()
    };
    let now = 2 * DAY;
    let walk = Walk {
        read: vec![
            read(100, 1, Verdict::Due),
            read(200, 2, Verdict::Passed),
            read(300, 3, Verdict::Later(3 * DAY)),
            read(400, 4, Verdict::Due),
            read(500, 5, Verdict::Due),
        ],
        at_end: true,
    };
    // Task 4 was not ended (the turn's budget ran out): the cursor stops after task 3.
    let ended = Ended::from([(id(1), None), (id(5), None)]);
    let next = walk.hand_back(&pass, &ended, None, now);
    assert_eq!(next.cursor, Some(walk.read[2].place.clone()));
    assert_eq!(next.next_at, Some(3 * DAY));
    assert_eq!(next.ended_at, None);
    assert_eq!(walk.work_left_at(&ended, now), Some(now));
    // Once task 4 ends too, the pass reaches the roster's end; the pages it fetched may be
    // due again sooner than task 3.
    let all = Ended::from([(id(1), None), (id(4), None), (id(5), None)]);
    let next = walk.hand_back(&pass, &all, Some(DAY * 5 / 2), now);
    assert_eq!(next.cursor, Some(walk.read[4].place.clone()));
    assert_eq!(next.next_at, Some(DAY * 5 / 2));
    assert_eq!(next.ended_at, Some(now));
    assert_eq!(walk.work_left_at(&all, now), None);
}

#[test]
fn a_held_entry_stops_the_cursor_and_a_roster_not_read_to_its_end_leaves_work() {
    let pass = Pass {
        started_at: DAY,
        ..Pass::default()
    };
    let walk = Walk {
        read: vec![
            read(100, 1, Verdict::Held(2 * DAY + 60_000)),
            read(200, 2, Verdict::Passed),
        ],
        at_end: true,
    };
    let next = walk.hand_back(&pass, &Ended::new(), None, 2 * DAY);
    assert_eq!(next.cursor, None);
    assert_eq!(next.ended_at, None);
    // Its next turn is due when the lease ends, not at once.
    assert_eq!(
        walk.work_left_at(&Ended::new(), 2 * DAY),
        Some(2 * DAY + 60_000)
    );
    let unread = Walk {
        read: vec![read(200, 2, Verdict::Passed)],
        at_end: false,
    };
    assert_eq!(unread.work_left_at(&Ended::new(), 2 * DAY), Some(2 * DAY));
    assert_eq!(
        unread.hand_back(&pass, &Ended::new(), None, 2 * DAY).cursor,
        Some(unread.read[0].place.clone())
    );
}

#[test]
fn the_cursor_never_passes_an_entry_younger_than_the_settling_window() {
    // An entry created 1 s ago may still have an older one appear before it (another writer's
    // clock behind, an index listing late): the cursor stays before it, the pass still ends.
    let now = 10 * DAY;
    let walk = Walk {
        read: vec![
            read(now - SETTLE_MS, 1, Verdict::Due),
            read(now - 1_000, 2, Verdict::Due),
        ],
        at_end: true,
    };
    let ended = Ended::from([(id(1), None), (id(2), None)]);
    let next = walk.hand_back(&Pass::default(), &ended, None, now);
    assert_eq!(next.cursor, Some(walk.read[0].place.clone()));
    assert_eq!(next.ended_at, Some(now));
    // The next read starts after the last entry read, whatever the cursor.
    assert_eq!(walk.next_from(&next), Some(&walk.read[1].place));
}

#[test]
fn a_pass_ended_starts_again_from_the_roster_start_once_its_next_pass_is_due() {
    let first = Pass::default().current(DAY);
    assert_eq!(first.started_at, DAY);
    let ended = Pass {
        started_at: first.started_at,
        cursor: Some(Place {
            at: 5,
            task_id: id(5),
        }),
        next_at: Some(2 * DAY),
        retry_at: None,
        ended_at: Some(DAY + 3 * HOUR),
        rewinds: 1,
    };
    assert_eq!(ended.next_work(), Some((None, Some(2 * DAY))));
    // Not yet due: the same pass (a new entry after the cursor is still read).
    assert_eq!(ended.current(2 * DAY - 1), ended);
    let next = ended.current(2 * DAY + 5);
    assert_eq!(next.started_at, 2 * DAY + 5);
    assert_eq!(next.rewinds, 1, "kept across passes");
    assert_eq!(next.cursor, None);
    assert_eq!(next.next_at, None);
    assert_eq!(next.ended_at, None);
    assert_eq!(next.next_work(), None);
    // A pass that never leaves a page for later never starts again.
    let done = Pass {
        next_at: None,
        ..ended
    };
    assert_eq!(done.next_work(), Some((None, None)));
    assert_eq!(done.current(100 * DAY), done);
}

#[test]
fn a_recrawl_interval_is_kept_when_a_pass_runs_at_the_last_ones_pace() {
    // Three pages fetched an hour apart in the first pass, each due again a day later: the
    // second pass begins when the first comes due, and each is due when the walk reaches it.
    let interval = DAY;
    let first = Pass::default().current(1);
    let fetched = [1, 1 + HOUR, 1 + 2 * HOUR];
    let walk = Walk {
        read: (0..3).map(|n| read(0, n, Verdict::Due)).collect(),
        at_end: true,
    };
    let ended: Ended = (0..3).map(|n| (id(n), None)).collect();
    // The turn began at 1: no page it ended is due again before 1 + the interval.
    let end = walk.hand_back(&first, &ended, Some(1 + interval), 1 + 2 * HOUR + SETTLE_MS);
    assert_eq!(end.next_work(), Some((None, Some(1 + interval))));
    let second = end.current(1 + interval);
    assert_eq!(second.cursor, None);
    for (n, at) in fetched.iter().enumerate() {
        let now = 1 + interval + n as Millis * HOUR;
        assert_eq!(
            second.verdict(Status::Succeeded, None, Some(at + interval), None, now),
            Verdict::Due,
            "page {n}"
        );
    }
}

#[test]
fn a_crawl_that_never_fetches_again_has_no_shortest_revisit() {
    use crate::crawl::RecrawlPolicy;
    assert_eq!(RecrawlPolicy::default().shortest_revisit_ms(), None);
    let daily = RecrawlPolicy {
        interval_ms: Some(DAY as u64),
        ..RecrawlPolicy::default()
    };
    // A page found missing is checked again sooner than a day: the checker's minimum.
    assert_eq!(
        daily.shortest_revisit_ms(),
        Some(daily.checker.min_ms.min(DAY as u64))
    );
}

#[test]
fn a_retry_the_cursor_passed_is_the_hosts_next_turn_and_starts_the_next_pass() {
    let now = 10 * DAY;
    let pass = Pass::default().current(now);
    let walk = Walk {
        read: vec![read(100, 1, Verdict::Due), read(200, 2, Verdict::Due)],
        at_end: true,
    };
    // Task 1 failed into a retry in 30 s, task 2 succeeded.
    let ended = Ended::from([(id(1), Some(now + 30_000)), (id(2), None)]);
    let next = walk.hand_back(&pass, &ended, Some(now + DAY), now);
    assert_eq!(next.cursor, Some(walk.read[1].place.clone()));
    assert_eq!(
        next.next_work(),
        Some((Some(now + 30_000), Some(now + DAY)))
    );
    // At the retry's time a new pass reads the roster from its start again.
    assert_eq!(next.current(now + 29_999), next);
    let again = next.current(now + 30_000);
    assert_eq!(
        (&again.cursor, again.retry_at, again.next_at),
        (&None, None, None)
    );
    // A retry read in the roster is passed and sets the retry time.
    let later = Walk {
        read: vec![read(100, 1, Verdict::Retry(now + 60_000))],
        at_end: true,
    };
    let next = later.hand_back(&again, &Ended::new(), None, now + 30_000);
    assert_eq!(next.next_work(), Some((Some(now + 60_000), None)));
}

#[test]
fn a_rewound_pass_walks_again_from_the_roster_start() {
    let ended = Pass {
        started_at: DAY,
        cursor: Some(Place {
            at: 5,
            task_id: id(5),
        }),
        next_at: Some(3 * DAY),
        ended_at: Some(DAY + HOUR),
        ..Pass::default()
    };
    let rewound = ended.rewound();
    assert_eq!(rewound.cursor, None);
    assert_eq!(rewound.ended_at, None);
    assert_eq!(rewound.rewinds, 1);
    assert_eq!(rewound.next_work(), None, "its turns go on");
    assert_eq!(rewound.current(DAY + 2 * HOUR), rewound);
}
