//! Every edge, table-driven, then a property test over random event sequences.

use super::*;
use crate::canonical::CanonicalUrl;
use crate::schedule::Schedule;
use crate::task::ERROR_HISTORY;
use proptest::prelude::*;

const T0: Millis = 1_800_000_000_000;
const LEASE_MS: u64 = 60_000;

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_retry: 3,
        base_delay_ms: 1_000,
        max_delay_ms: 60_000,
    }
}

/// An adaptive crawl's revisits: gone after two 404s in a row, rechecked daily.
fn adaptive() -> Revisit {
    Revisit {
        schedule: Some(Schedule::RECRAWL),
        estimator: None,
        listing: false,
        missing_after: 2,
        missing_recheck_ms: 600_000,
        recheck: Some(Schedule::CHECKER),
    }
}

fn record(md5: &str, at: Millis) -> FetchRecord {
    FetchRecord {
        object_key: Some(format!("k/{md5}")),
        md5: Some(md5.to_owned()),
        http_status: 200,
        fetched_at: at,
        ..FetchRecord::default()
    }
}

fn pending() -> Task {
    let new = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse("http://example.com/a").unwrap(),
        depth: 2,
        parent: None,
        data: None,
    };
    seed(&CrawlId::parse("c").unwrap(), &new, T0).task
}

/// A task in `status` as the transitions leave it: token 3, one earlier error, a previous fetch.
fn task_in(status: Status) -> Task {
    let mut task = pending();
    task.status = status;
    task.token = 3;
    task.retries = 1;
    task.errors = vec![ErrorRecord::new(ErrorKind::Timeout, "slow", T0)];
    task.fetch = Some(record("old", T0));
    task.updated_at = T0 + 10;
    match status {
        Status::InProgress => task.lease_expires_at = Some(T0 + 100),
        Status::Failed => task.next_attempt_at = Some(T0 + 100),
        _ => {}
    }
    task
}

fn lease_on(task: &Task) -> Lease {
    Lease {
        crawl_id: task.crawl_id.clone(),
        task_id: task.task_id.clone(),
        token: task.token,
        expires_at: task.lease_expires_at.unwrap_or(0),
        retries: task.retries,
        errors: task.errors.clone(),
        fetch: task.fetch.clone(),
        kind: LeaseKind::Written,
    }
}

#[test]
fn seed_creates_a_pending_task_where_none_exists() {
    let Insert { requires, task } = seed(
        &CrawlId::parse("c").unwrap(),
        &NewTask {
            lane: None,
            priority: Default::default(),
            url: CanonicalUrl::parse("http://example.com/a").unwrap(),
            depth: 2,
            parent: None,
            data: None,
        },
        T0,
    );
    assert_eq!(requires, Condition::Absent);
    assert!(requires.holds(None));
    assert!(!requires.holds(Some(&task)));
    assert_eq!(
        (
            task.status,
            task.token,
            task.retries,
            task.created_at,
            task.updated_at
        ),
        (Status::Pending, 0, 0, T0, T0)
    );
    assert_eq!(task.url, "http://example.com/a");
    assert_eq!(
        (
            task.lease_expires_at,
            task.next_attempt_at,
            task.enqueued_at
        ),
        (None, None, None)
    );
    assert!(task.errors.is_empty() && task.stale.is_empty() && task.fetch.is_none());
}

#[test]
fn claim_edges() {
    let now = T0 + 100;
    let with = |status: Status, f: fn(&mut Task)| {
        let mut t = task_in(status);
        f(&mut t);
        Some(t)
    };
    // (the task, claimable at `now`?)
    let table: Vec<(&str, Option<Task>, Result<(), ClaimRejection>)> = vec![
        ("pending", Some(task_in(Status::Pending)), Ok(())),
        (
            "failed, due now",
            with(Status::Failed, |t| t.next_attempt_at = Some(T0 + 100)),
            Ok(()),
        ),
        (
            "failed, not due",
            with(Status::Failed, |t| t.next_attempt_at = Some(T0 + 101)),
            Err(ClaimRejection::NotDue { at: T0 + 101 }),
        ),
        (
            "lease expiry: in progress, lease ran out now",
            with(Status::InProgress, |t| t.lease_expires_at = Some(T0 + 100)),
            Ok(()),
        ),
        (
            "in progress, lease live",
            with(Status::InProgress, |t| t.lease_expires_at = Some(T0 + 101)),
            Err(ClaimRejection::Leased { until: T0 + 101 }),
        ),
        (
            "in progress without a lease",
            with(Status::InProgress, |t| t.lease_expires_at = None),
            Ok(()),
        ),
        (
            "succeeded",
            Some(task_in(Status::Succeeded)),
            Err(ClaimRejection::Done(Status::Succeeded)),
        ),
        (
            "ignored",
            Some(task_in(Status::Ignored)),
            Err(ClaimRejection::Done(Status::Ignored)),
        ),
        (
            "gone",
            Some(task_in(Status::Gone)),
            Err(ClaimRejection::Done(Status::Gone)),
        ),
        ("missing", None, Err(ClaimRejection::Missing)),
    ];
    let update = claim(LEASE_MS, now);
    for (name, task, expected) in table {
        assert_eq!(claimable(task.as_ref(), now), expected, "{name}");
        assert_eq!(
            update.requires.holds(task.as_ref()),
            expected.is_ok(),
            "{name}"
        );
        let decided = claimed(task.as_ref(), LEASE_MS, now);
        let Some(task) = task else {
            assert_eq!(decided, Err(ClaimRejection::Missing));
            continue;
        };
        let after = update.apply(&task);
        if let Err(why) = expected {
            assert_eq!((after, decided), (None, Err(why)), "{name}");
            continue;
        }
        assert_eq!(decided.as_ref().ok(), after.as_ref(), "{name}");
        let mut want = task.clone();
        want.status = Status::InProgress;
        want.token = 4;
        want.lease_expires_at = Some(now + LEASE_MS as Millis);
        want.next_attempt_at = None;
        want.updated_at = now;
        assert_eq!(after, Some(want), "{name}");
    }
}

#[test]
fn the_lease_carries_what_the_claim_left() {
    let claimed = claim(LEASE_MS, T0 + 100)
        .apply(&task_in(Status::Failed))
        .unwrap();
    let lease = lease_of(&claimed);
    assert_eq!(
        (
            lease.token,
            lease.expires_at,
            lease.retries,
            lease.errors.len()
        ),
        (4, T0 + 100 + LEASE_MS as Millis, 1, 1)
    );
}

#[test]
fn fenced_transitions_need_the_current_token_and_in_progress() {
    let held = task_in(Status::InProgress);
    let current = lease_on(&held);
    let zombie = Lease {
        token: 2,
        ..current.clone()
    };
    let mut released = held.clone();
    released.status = Status::Pending;
    released.lease_expires_at = None;
    let failure = Failure::from_http_status(500, None);
    for (name, update) in [
        ("finish", finish(&zombie, &record("new", T0), T0)),
        (
            "fail",
            fail(&zombie, &failure, &policy(), &Revisit::ONCE, T0).0,
        ),
        ("release", release(&zombie, T0).unwrap()),
    ] {
        assert_eq!(update.apply(&held), None, "zombie {name}");
    }
    for (name, update) in [
        ("finish", finish(&current, &record("new", T0), T0)),
        (
            "fail",
            fail(&current, &failure, &policy(), &Revisit::ONCE, T0).0,
        ),
        ("release", release(&current, T0).unwrap()),
    ] {
        assert!(update.apply(&held).is_some(), "{name}");
        assert_eq!(update.apply(&released), None, "{name} after a release");
    }
}

#[test]
fn finish_records_the_fetch_and_restores_the_budget() {
    let mut held = task_in(Status::InProgress);
    held.stale = vec!["orphan".into()];
    held.enqueued_at = Some(T0 + 5);
    let after = finish(&lease_on(&held), &record("new", T0 + 50), T0 + 50)
        .apply(&held)
        .unwrap();
    let mut want = held.clone();
    want.status = Status::Succeeded;
    want.retries = 0;
    want.lease_expires_at = None;
    want.fetch = Some(record("new", T0 + 50));
    want.updated_at = T0 + 50;
    want.stale = Vec::new();
    want.token += 1;
    assert_eq!(after, want);
}

#[test]
fn fail_edges_of_a_first_fetch() {
    let now = T0 + 50;
    let mut held = task_in(Status::InProgress);
    held.fetch = None;
    let lease_with = |retries: u32| Lease {
        retries,
        ..lease_on(&held)
    };
    let jittered = |retries: u32| match policy().verdict(
        &Failure::from_http_status(500, None),
        retries,
        Jitter::of(&held.task_id, held.token),
        now,
    ) {
        FailureVerdict::Retry { next_attempt_at } => next_attempt_at,
        FailureVerdict::GiveUp => panic!("no retry"),
    };
    // (failure, retries before, status after, retries after, next attempt)
    let table = [
        (
            Failure::from_http_status(500, None),
            0,
            Status::Failed,
            1,
            Some(jittered(0)),
        ),
        (
            Failure::from_http_status(500, None),
            1,
            Status::Failed,
            2,
            Some(jittered(1)),
        ),
        // The failure that exhausts the budget counts too.
        (
            Failure::from_http_status(500, None),
            2,
            Status::Ignored,
            3,
            None,
        ),
        (
            Failure::from_http_status(429, Some(30_000)),
            0,
            Status::Failed,
            1,
            Some(now + 30_000),
        ),
        (
            Failure::from_http_status(404, None),
            1,
            Status::Gone,
            1,
            None,
        ),
        (
            Failure::from_http_status(410, None),
            0,
            Status::Gone,
            0,
            None,
        ),
        (
            Failure::from_http_status(403, None),
            1,
            Status::Ignored,
            1,
            None,
        ),
        (
            Failure::new(ErrorKind::RobotsDenied, "denied"),
            0,
            Status::Ignored,
            0,
            None,
        ),
        (
            Failure::new(ErrorKind::Storage, "s3 down"),
            0,
            Status::Failed,
            1,
            Some(jittered(0)),
        ),
    ];
    for (failure, before, status, retries, next_attempt_at) in table {
        let mut task = held.clone();
        task.retries = before;
        let (update, failed) = fail(&lease_with(before), &failure, &policy(), &adaptive(), now);
        let after = update.apply(&task).unwrap();
        let name = format!("{} after {before}", failure.message);
        assert_eq!(
            (
                after.status,
                after.retries,
                after.next_attempt_at,
                after.lease_expires_at
            ),
            (status, retries, next_attempt_at, None),
            "{name}"
        );
        let expected = match next_attempt_at {
            Some(next_attempt_at) => Failed::Retrying { next_attempt_at },
            None => Failed::GaveUp { status },
        };
        assert_eq!(failed, expected, "{name}");
        assert_eq!(after.fetch, None, "{name}: nothing was fetched");
        assert_eq!(after.token, held.token + 1, "{name}");
        assert_eq!(after.updated_at, now, "{name}");
        assert_eq!(after.errors.len(), 2, "{name}");
        assert_eq!(
            after.errors[1],
            ErrorRecord::new(failure.kind, &failure.message, now)
        );
    }
}

#[test]
fn fail_keeps_only_the_latest_errors() {
    let mut held = task_in(Status::InProgress);
    held.errors = (0..ERROR_HISTORY as Millis)
        .map(|i| ErrorRecord::new(ErrorKind::Timeout, &format!("#{i}"), T0 + i))
        .collect();
    let patient = RetryPolicy {
        max_retry: 100,
        ..policy()
    };
    let failure = Failure::new(ErrorKind::Connection, "x".repeat(1_000));
    let after = fail(&lease_on(&held), &failure, &patient, &Revisit::ONCE, T0 + 9)
        .0
        .apply(&held)
        .unwrap();
    assert_eq!(after.errors.len(), ERROR_HISTORY);
    assert_eq!(after.errors[0].message, "#1");
    assert_eq!(after.errors[ERROR_HISTORY - 1].message.len(), 256);
}

#[test]
fn a_page_with_content_is_gone_at_its_second_check_finding_it_missing_and_a_failed_recrawl_keeps_it()
 {
    let revisit = adaptive();
    let mut held = task_in(Status::InProgress);
    held.fetch = Some(FetchRecord {
        next_fetch_at: Some(T0),
        ..record("old", T0)
    });
    let not_found = Failure::from_http_status(404, None);
    let (update, failed) = fail(&lease_on(&held), &not_found, &policy(), &revisit, T0 + 50);
    let once = update.apply(&held).unwrap();
    // The first check finding it missing: still succeeded, its content current, checked
    // again at the recheck spacing (not at a retry's backoff).
    assert_eq!(
        failed,
        Failed::GaveUp {
            status: Status::Succeeded
        }
    );
    assert_eq!(once.status, Status::Succeeded);
    assert_eq!(
        once.fetch.as_ref().map(|f| (f.md5.clone(), f.missing)),
        Some((Some("old".into()), 1))
    );
    let recheck = revisit.missing_recheck_ms as Millis;
    assert_eq!(once.due_at(), Some(T0 + 50 + recheck));
    assert_eq!(once.next_attempt_at, None);
    assert_eq!(
        once.retries, 0,
        "a 404 spends no retry; back in its schedule, a full budget"
    );
    assert_eq!(
        claimable(Some(&once), T0 + 50 + recheck - 1),
        Err(ClaimRejection::Done(Status::Succeeded))
    );

    let mut again = once.clone();
    again.status = Status::InProgress;
    again.token += 1;
    again.lease_expires_at = Some(T0 + recheck + 10_000);
    let at = T0 + 50 + recheck;
    let (update, failed) = fail(&lease_on(&again), &not_found, &policy(), &revisit, at);
    let gone = update.apply(&again).unwrap();
    assert_eq!(
        failed,
        Failed::GaveUp {
            status: Status::Gone
        }
    );
    let record = gone.fetch.clone().unwrap();
    assert_eq!((record.md5.as_deref(), record.missing), (Some("old"), 2));
    assert_eq!(
        gone.due_at(),
        Some(at + 1_440 * 60_000),
        "rechecked in a day"
    );
    assert_eq!(
        claimable(Some(&gone), at),
        Err(ClaimRejection::Done(Status::Gone))
    );
    assert_eq!(claimable(Some(&gone), gone.due_at().unwrap()), Ok(()));

    // A recrawl that fails past its retries: the page stays, due again later.
    let server_error = Failure::from_http_status(500, None);
    let mut last_try = held.clone();
    last_try.retries = policy().max_retry - 1;
    let (update, failed) = fail(
        &lease_on(&last_try),
        &server_error,
        &policy(),
        &revisit,
        T0 + 50,
    );
    let kept = update.apply(&last_try).unwrap();
    assert_eq!(
        failed,
        Failed::GaveUp {
            status: Status::Succeeded
        }
    );
    assert_eq!(kept.status, Status::Succeeded);
    assert_eq!(kept.fetch.as_ref().unwrap().md5.as_deref(), Some("old"));
    assert_eq!(kept.due_at(), Some(T0 + 50 + 150 * 60_000));
}

#[test]
fn release_gives_back_without_counting_a_failure() {
    let held = task_in(Status::InProgress);
    let after = release(&lease_on(&held), T0 + 50)
        .unwrap()
        .apply(&held)
        .unwrap();
    let mut want = held.clone();
    want.status = Status::Pending;
    want.lease_expires_at = None;
    want.updated_at = T0 + 50;
    want.token += 1;
    assert_eq!(after, want);
}

#[test]
fn hold_back_gives_back_to_the_end_of_the_line_with_the_answer_recorded() {
    let held = task_in(Status::InProgress);
    let throttled = Failure::from_http_status(429, Some(1_000));
    let after = hold_back(&lease_on(&held), &throttled, T0 + 50)
        .apply(&held)
        .unwrap();
    let mut want = held.clone();
    want.status = Status::Pending;
    want.lease_expires_at = None;
    want.updated_at = T0 + 50;
    want.token += 1;
    want.errors.push(ErrorRecord::new(
        ErrorKind::Throttled,
        &throttled.message,
        T0 + 50,
    ));
    assert_eq!(after, want, "no retry spent");
    assert_eq!(after.due_at(), Some(T0 + 50), "behind what was due before");
    // A lease taken in a turn writes it too, fenced on the token read.
    let mut due = held.clone();
    due.status = Status::Pending;
    due.lease_expires_at = None;
    let in_turn = claim_in_turn(&due, LEASE_MS, T0 + 20).unwrap();
    let update = hold_back(&in_turn, &throttled, T0 + 50);
    assert!(update.requires.holds(Some(&due)));
    let mut claimed_since = due.clone();
    claimed_since.token += 1;
    assert!(!update.requires.holds(Some(&claimed_since)));
}

#[test]
fn a_claim_in_a_turn_writes_nothing_and_its_first_fenced_write_is_its_claim() {
    // GIVEN a task due again (a recrawl) and a task not due
    let mut due = task_in(Status::Succeeded);
    due.fetch = Some(FetchRecord {
        next_fetch_at: Some(T0 + 40),
        ..record("old", T0)
    });
    let now = T0 + 50;
    assert_eq!(
        claim_in_turn(&task_in(Status::Ignored), LEASE_MS, now),
        Err(ClaimRejection::Done(Status::Ignored))
    );
    assert_eq!(
        claim_in_turn(&task_in(Status::Failed), LEASE_MS, now),
        Err(ClaimRejection::NotDue { at: T0 + 100 })
    );
    // WHEN two turns take the due one (the first outlived its host lease)
    let first = claim_in_turn(&due, LEASE_MS, now).unwrap();
    let second = claim_in_turn(&due, LEASE_MS, now + 1).unwrap();
    assert_eq!(
        (first.token, first.kind, first.expires_at),
        (due.token, LeaseKind::InTurn, now + LEASE_MS as Millis)
    );
    assert_eq!((&first.fetch, first.retries), (&due.fetch, due.retries));
    assert_eq!(release(&first, now), None, "nothing to give back");
    // THEN the first finish lands and moves the token; the second is refused
    let fetched = record("new", now);
    let finished = finish(&first, &fetched, now + 2).apply(&due).unwrap();
    assert_eq!(finished.token, due.token + 1);
    assert_eq!(finished.status, Status::Succeeded);
    assert!(finished_by(&finished, &first, &fetched));
    assert!(!finished_by(&due, &first, &fetched));
    assert_eq!(
        finish(&second, &record("other", now), now + 3).apply(&finished),
        None
    );
    let failure = Failure::from_http_status(500, None);
    let (failed, _) = fail(&second, &failure, &policy(), &Revisit::ONCE, now + 3);
    assert_eq!(failed.apply(&finished), None);
    // AND a holder that died leaves the task due, at its token: the next turn takes it
    assert_eq!(
        claim_in_turn(&due, LEASE_MS, now + 10).unwrap().token,
        due.token
    );
    // AND a written claim since the read fences the turn's lease out
    let claimed = claim(LEASE_MS, now).apply(&due).unwrap();
    assert_eq!(finish(&first, &fetched, now + 2).apply(&claimed), None);
    // AND a task no longer due (finished by a written lease, not due again) is refused
    let mut done = due.clone();
    done.fetch = Some(record("later", now));
    assert_eq!(finish(&first, &fetched, now + 2).apply(&done), None);
}

#[test]
fn reschedule_edges() {
    let update = reschedule(&[Status::Succeeded, Status::Ignored], T0 + 50);
    for status in Status::ALL {
        let task = task_in(status);
        let after = update.apply(&task);
        if matches!(status, Status::Succeeded | Status::Ignored) {
            let mut want = task.clone();
            want.status = Status::Pending;
            want.retries = 0;
            want.updated_at = T0 + 50;
            want.token += 1;
            assert_eq!(after, Some(want), "{status}");
        } else {
            assert_eq!(after, None, "{status}");
        }
    }
    assert_eq!(reschedule(&[], T0).apply(&task_in(Status::Failed)), None);
    let failed = reschedule(&[Status::Failed], T0 + 50)
        .apply(&task_in(Status::Failed))
        .unwrap();
    assert_eq!((failed.next_attempt_at, failed.retries), (None, 0));
}

#[test]
fn a_sitemap_lastmod_after_the_last_fetch_makes_a_done_page_due_now() {
    // `task_in` was fetched at T0
    for status in Status::ALL {
        let task = task_in(status);
        let update = refresh(&task, T0 + 1, T0 + 50);
        if !matches!(status, Status::Succeeded | Status::Gone) {
            assert_eq!(
                update, None,
                "{status}: a fetch is on its way or never done"
            );
            continue;
        }
        let after = update.unwrap().apply(&task);
        let mut want = task.clone();
        want.status = Status::Pending;
        want.retries = 0;
        want.updated_at = T0 + 50;
        want.token += 1;
        assert_eq!(
            after,
            Some(want),
            "{status}: pending, its fetch record kept"
        );
    }
    let done = task_in(Status::Succeeded);
    // Not modified since the fetch (the same instant included): nothing to do
    assert_eq!(refresh(&done, T0, T0 + 50), None);
    assert_eq!(refresh(&done, T0 - 1, T0 + 50), None);
    // Never fetched: its first fetch is to come anyway
    let mut unfetched = done.clone();
    unfetched.fetch = None;
    assert_eq!(refresh(&unfetched, T0 + 1, T0 + 50), None);
    // Claimed since it was read: the write does not hold
    let update = refresh(&done, T0 + 1, T0 + 50).unwrap();
    let mut claimed = done.clone();
    claimed.token += 1;
    assert_eq!(update.apply(&claimed), None);
    // An estimated page whose lastmod lied at two fetches: its sitemap is no longer believed
    let mut lied = done.clone();
    let history = crate::estimate::ChangeHistory::default()
        .prompted(false)
        .prompted(false);
    lied.fetch.as_mut().unwrap().pace = Some(crate::schedule::Pace::estimated(history));
    assert_eq!(refresh(&lied, T0 + 1, T0 + 50), None);
}

#[test]
fn reset_forgets_the_fetch_and_hands_its_object_to_the_next_finisher() {
    for status in Status::ALL {
        let task = task_in(status);
        let after = reset(&task, T0 + 50).apply(&task);
        if status == Status::InProgress {
            assert_eq!(after, None, "a held task is not reset under its holder");
            continue;
        }
        let mut want = task.clone();
        want.status = Status::Pending;
        want.retries = 0;
        want.next_attempt_at = None;
        want.fetch = None;
        want.stale = vec!["old".into()];
        want.updated_at = T0 + 50;
        want.token += 1;
        assert_eq!(after, Some(want), "{status}");
    }
    // Claimed since it was read: the record to forget may have changed.
    let read = task_in(Status::Succeeded);
    let mut since = read.clone();
    since.token += 1;
    assert_eq!(reset(&read, T0).apply(&since), None);
    // A record without a stored object leaves nothing to delete.
    let mut unstored = read.clone();
    unstored.fetch = Some(FetchRecord {
        object_key: None,
        ..record("pdf", T0)
    });
    assert!(
        reset(&unstored, T0)
            .apply(&unstored)
            .unwrap()
            .stale
            .is_empty()
    );
}

#[test]
fn repoint_moves_a_settled_page_and_fences_out_a_lease_taken_since() {
    let span = crate::task::Span {
        offset: 10,
        length: 20,
        items: 5,
    };
    for status in Status::ALL {
        let mut task = task_in(status);
        if let Some(fetch) = task.fetch.as_mut() {
            fetch.span = Some(span);
        }
        let after = repoint(&task, "segments/new", 700).and_then(|u| u.apply(&task));
        if status == Status::InProgress {
            assert_eq!(after, None, "a leased task keeps its place");
            continue;
        }
        let mut want = task.clone();
        if let Some(fetch) = want.fetch.as_mut() {
            fetch.object_key = Some("segments/new".into());
            fetch.span = Some(crate::task::Span {
                offset: 700,
                ..span
            });
        }
        want.token += 1;
        assert_eq!(after, Some(want), "{status}");
    }
    // Changed since it was read (claimed in a turn, finished): the place read is not current.
    let mut read = task_in(Status::Succeeded);
    if let Some(fetch) = read.fetch.as_mut() {
        fetch.span = Some(span);
    }
    let mut since = read.clone();
    since.token += 1;
    let update = repoint(&read, "segments/new", 0).unwrap();
    assert_eq!(update.apply(&since), None);
    // A page stored as an object has no place in a segment to move.
    assert_eq!(
        repoint(&task_in(Status::Succeeded), "segments/new", 0),
        None
    );
}

#[test]
fn add_stale_edges() {
    let mut task = task_in(Status::InProgress);
    task.stale = vec!["listed".into()];
    // (md5, added?)
    for (md5, added) in [("new", true), ("old", false), ("listed", false)] {
        let after = add_stale(md5).apply(&task);
        match after {
            Some(after) => {
                assert!(added, "{md5}");
                let mut want = task.clone();
                want.stale.push(md5.to_owned());
                assert_eq!(after, want);
            }
            None => assert!(!added, "{md5}"),
        }
    }
    assert!(!add_stale("new").requires.holds(None));
}

// ---------------------------------------------------------------------------------------------
// Property: random event sequences on one task.

#[derive(Debug, Clone)]
enum Event {
    Claim {
        lease_ms: u64,
    },
    /// A claim inside a turn: a lease as read, nothing written.
    ClaimInTurn {
        lease_ms: u64,
    },
    /// Fenced events name one of the leases granted so far (not necessarily the latest).
    Finish {
        lease: usize,
        md5: u8,
    },
    Fail {
        lease: usize,
        failure: Failure,
    },
    Release {
        lease: usize,
    },
    Reschedule {
        from: Vec<Status>,
    },
    Reset,
    Refresh,
    Retire,
    AddStale {
        md5: u8,
    },
}

fn status() -> impl Strategy<Value = Status> {
    proptest::sample::select(Status::ALL.to_vec())
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        (
            proptest::sample::select(vec![403u16, 404, 408, 410, 429, 500, 503]),
            proptest::option::of(0u64..100_000)
        )
            .prop_map(|(status, retry_after)| Failure::from_http_status(status, retry_after)),
        proptest::sample::select(vec![
            ErrorKind::Timeout,
            ErrorKind::Connection,
            ErrorKind::RobotsDenied,
            ErrorKind::RobotsUnavailable,
            ErrorKind::Blocked,
            ErrorKind::TooLarge,
            ErrorKind::Storage,
        ])
        .prop_map(|kind| Failure::new(kind, "boom")),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (1u64..200_000).prop_map(|lease_ms| Event::Claim { lease_ms }),
        3 => (1u64..200_000).prop_map(|lease_ms| Event::ClaimInTurn { lease_ms }),
        2 => (0usize..8, 0u8..4).prop_map(|(lease, md5)| Event::Finish { lease, md5 }),
        3 => (0usize..8, failure()).prop_map(|(lease, failure)| Event::Fail { lease, failure }),
        1 => (0usize..8).prop_map(|lease| Event::Release { lease }),
        1 => proptest::collection::vec(status(), 0..3).prop_map(|from| Event::Reschedule { from }),
        1 => Just(Event::Reset),
        1 => Just(Event::Refresh),
        1 => Just(Event::Retire),
        1 => (0u8..4).prop_map(|md5| Event::AddStale { md5 }),
    ]
}

/// Whether `event` may move a task from `from` to `to`: the table in the module docs.
fn legal_edge(event: &Event, from: Status, to: Status) -> bool {
    use Status::*;
    match event {
        Event::Claim { .. } => {
            matches!(from, Pending | Failed | InProgress | Succeeded | Gone) && to == InProgress
        }
        Event::ClaimInTurn { .. } => false,
        // From a lease taken in a turn, any claimable status.
        Event::Finish { .. } => from != Ignored && to == Succeeded,
        Event::Fail { .. } => from != Ignored && matches!(to, Failed | Ignored | Gone | Succeeded),
        Event::Release { .. } => from == InProgress && to == Pending,
        Event::Reschedule { from: set } => set.contains(&from) && to == Pending,
        Event::Reset => from != InProgress && to == Pending,
        Event::Refresh => matches!(from, Succeeded | Gone) && to == Pending,
        Event::Retire => from != InProgress && to == Ignored,
        Event::AddStale { .. } => from == to,
    }
}

/// What every reachable task looks like.
fn assert_invariants(task: &Task, policy: &RetryPolicy) {
    assert_eq!(
        task.status == Status::InProgress,
        task.lease_expires_at.is_some(),
        "a lease exactly while in progress: {task:?}"
    );
    assert_eq!(
        task.status == Status::Failed,
        task.next_attempt_at.is_some(),
        "a next attempt exactly while failed: {task:?}"
    );
    assert!(task.errors.len() <= ERROR_HISTORY);
    assert!(task.retries <= policy.max_retry.max(1), "{task:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_event_sequences_keep_the_state_machine(
        events in proptest::collection::vec((0i64..150_000, event()), 1..60),
        max_retry in 0u32..5,
        recrawled in 0u8..3,
    ) {
        // Short schedules, so that succeeded and gone pages come due within the sequence: a
        // fixed one, or the change-rate estimator's (its intervals from 10 s to 5 min).
        let revisit = match recrawled {
            0 => Revisit::ONCE,
            1 => Revisit {
                schedule: Some(Schedule::fixed(100_000)),
                recheck: Some(Schedule::fixed(300_000)),
                ..adaptive()
            },
            _ => Revisit {
                schedule: None,
                estimator: Some(crate::revisit::Estimated {
                    settings: crate::estimate::Estimator {
                        budget_per_day: 1_000,
                        min_ms: 10_000,
                        max_ms: 300_000,
                        initial_ms: 100_000,
                        ..crate::estimate::Estimator::default()
                    },
                    level_ms: Some(20_000),
                }),
                recheck: Some(Schedule::fixed(300_000)),
                ..adaptive()
            },
        };
        let policy = RetryPolicy { max_retry, base_delay_ms: 1_000, max_delay_ms: 60_000 };
        let mut task = pending();
        let mut leases: Vec<Lease> = Vec::new();
        let mut now = T0;
        for (dt, event) in events {
            now += dt;
            let lease = |i: usize| leases.get(i % leases.len().max(1)).cloned();
            let update = match &event {
                Event::Claim { lease_ms } => Some(claim(*lease_ms, now)),
                Event::ClaimInTurn { lease_ms } => {
                    // Granted exactly when a written claim would be; nothing written.
                    let read = claim_in_turn(&task, *lease_ms, now);
                    prop_assert_eq!(read.is_ok(), claim(*lease_ms, now).requires.holds(Some(&task)));
                    leases.extend(read);
                    None
                }
                Event::Finish { lease: i, md5 } => lease(*i).map(|l| {
                    let (next_fetch_at, pace) = revisit.after_fetch(l.fetch.as_ref(), true, now);
                    let record = FetchRecord {
                        next_fetch_at,
                        pace,
                        ..record(&md5.to_string(), now)
                    };
                    finish(&l, &record, now)
                }),
                Event::Fail { lease: i, failure } => lease(*i).map(|l| {
                    let (update, failed) = fail(&l, failure, &policy, &revisit, now);
                    if let Some(after) = update.apply(&task) {
                        let said = match failed {
                            Failed::Retrying { next_attempt_at } => {
                                (Status::Failed, Some(next_attempt_at))
                            }
                            Failed::GaveUp { status } => (status, None),
                        };
                        prop_assert_eq!((after.status, after.next_attempt_at), said);
                    }
                    Ok(update)
                }).transpose()?,
                Event::Release { lease: i } => lease(*i).and_then(|l| release(&l, now)),
                Event::Reschedule { from } => Some(reschedule(from, now)),
                Event::Reset => Some(reset(&task, now)),
                // A sitemap saying the page changed just now.
                Event::Refresh => refresh(&task, now, now),
                Event::Retire => Some(retire(&task, "named by no item", now)),
                Event::AddStale { md5 } => Some(add_stale(&md5.to_string())),
            };
            let Some(update) = update else { continue };
            if let Condition::Leased { token } = update.requires
                && update.requires.holds(Some(&task))
            {
                // What lets a fenced write build the new state from the lease alone.
                let l = leases.iter().find(|l| l.token == token).unwrap();
                prop_assert_eq!(
                    (l.retries, &l.errors, &l.fetch),
                    (task.retries, &task.errors, &task.fetch)
                );
                prop_assert_eq!(token, leases.last().unwrap().token, "only the latest lease writes");
            }
            if let Condition::Unclaimed { token, .. } = update.requires
                && update.requires.holds(Some(&task))
            {
                // Only a lease read at the current token writes, and the write moves it.
                prop_assert_eq!(token, task.token);
            }
            let Some(after) = update.apply(&task) else {
                continue;
            };
            // The per-host due index written in place agrees with the task it indexes.
            match update.changes.due() {
                Change::Set(due) => prop_assert_eq!(due, after.due_at(), "{:?}", event),
                Change::Keep => prop_assert_eq!(task.due_at(), after.due_at(), "{:?}", event),
            }
            let before = std::mem::replace(&mut task, after);
            prop_assert!(
                legal_edge(&event, before.status, task.status),
                "{:?}: {} -> {}", event, before.status, task.status
            );
            match event {
                Event::Finish { .. }
                | Event::Reschedule { .. }
                | Event::Reset
                | Event::Refresh => {
                    prop_assert_eq!(task.retries, 0);
                }
                Event::Fail { .. }
                    if task.fetch.is_some()
                        && matches!(task.status, Status::Succeeded | Status::Gone) =>
                {
                    prop_assert_eq!(task.retries, 0, "back in its schedule");
                }
                _ => prop_assert!(task.retries >= before.retries, "{:?}", event),
            }
            match event {
                Event::AddStale { .. } => prop_assert_eq!(task.token, before.token),
                _ => prop_assert_eq!(task.token, before.token + 1, "{:?}", event),
            }
            if let Event::Claim { .. } = event {
                leases.push(lease_of(&task));
            }
            if before.status.is_terminal() && task.status != before.status {
                // A claim, written or in a turn (then its finish or fail is the change).
                let due_again = matches!(event, Event::Claim { .. } | Event::Finish { .. } | Event::Fail { .. })
                    && before.due_at().is_some_and(|at| at <= now);
                prop_assert!(
                    due_again || matches!(event, Event::Reschedule { .. } | Event::Reset | Event::Refresh | Event::Retire),
                    "{:?} took a {} task out", event, before.status
                );
            }
            if before.fetch.is_some() && !matches!(event, Event::Reset | Event::Retire) {
                prop_assert!(task.fetch.is_some(), "{:?} dropped the fetch record", event);
            }
            prop_assert_eq!(
                (&task.crawl_id, &task.task_id, &task.url, task.depth, task.created_at),
                (&before.crawl_id, &before.task_id, &before.url, before.depth, before.created_at)
            );
            prop_assert!(task.updated_at >= before.updated_at);
            assert_invariants(&task, &policy);
        }
    }
}
