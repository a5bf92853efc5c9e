//! The cases. GIVEN / WHEN / THEN; time is passed explicitly, so nothing sleeps.

use crate::support::unique;
use futures_util::future::join_all;
use trawl_core::store::{
    ClaimOutcome, ClaimRejection, CrawlStore, FailOutcome, FinishOutcome, Seeded, TaskQuery,
    TaskStore,
};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::task::{ErrorKind, FetchRecord, Lease, Millis, NewTask, Status, Task};

pub const T0: Millis = 1_800_000_000_000;
const LEASE_MS: u64 = 60_000;

pub fn crawl_id() -> CrawlId {
    CrawlId::parse(&unique("crawl")).unwrap()
}

pub fn new_task(url: &str) -> NewTask {
    NewTask {
        url: CanonicalUrl::parse(url).unwrap(),
        depth: 0,
        parent: None,
    }
}

fn id(url: &str) -> TaskId {
    CanonicalUrl::parse(url).unwrap().task_id()
}

pub fn record(md5: &str, at: Millis) -> FetchRecord {
    FetchRecord {
        object_key: Some(format!("crawl=x/pk=y/attr=html/md5={md5}")),
        md5: Some(md5.to_owned()),
        http_status: 200,
        content_type: Some("text/html".into()),
        content_length: 1234,
        etag: Some("\"v1\"".into()),
        fetched_at: at,
        ..FetchRecord::default()
    }
}

pub async fn claim<S: TaskStore>(
    store: &S,
    crawl: &CrawlId,
    url: &str,
    now: Millis,
) -> (Task, Lease) {
    match store.claim(crawl, &id(url), LEASE_MS, now).await.unwrap() {
        ClaimOutcome::Claimed { task, lease } => (*task, lease),
        other => panic!("expected a claim of {url}, got {other:?}"),
    }
}

async fn rejection<S: TaskStore>(
    store: &S,
    crawl: &CrawlId,
    url: &str,
    now: Millis,
) -> ClaimRejection {
    match store.claim(crawl, &id(url), LEASE_MS, now).await.unwrap() {
        ClaimOutcome::Rejected(why) => why,
        other => panic!("expected a rejected claim of {url}, got {other:?}"),
    }
}

async fn get<S: TaskStore>(store: &S, crawl: &CrawlId, url: &str) -> Task {
    store
        .get(crawl, &id(url))
        .await
        .unwrap()
        .expect("task exists")
}

pub async fn reseed_is_idempotent<S: TaskStore>(store: &S) {
    // GIVEN two seeded URLs, one of them crawled
    let crawl = crawl_id();
    let a = "http://example.com/a";
    let seeded = store
        .seed(&crawl, &[new_task(a), new_task("http://example.com/b")], T0)
        .await
        .unwrap();
    assert_eq!(seeded, [Seeded::Created, Seeded::Created]);
    let (_, lease) = claim(store, &crawl, a, T0 + 1).await;
    store
        .finish(&lease, &record("m1", T0 + 2), T0 + 2)
        .await
        .unwrap();

    // WHEN they are seeded again (another spelling of `a`), with a new one
    let again = store
        .seed(
            &crawl,
            &[
                new_task("HTTP://EXAMPLE.COM/a#top"),
                new_task("http://example.com/b"),
                new_task("http://example.com/c"),
            ],
            T0 + 3,
        )
        .await
        .unwrap();

    // THEN nothing known is reset or duplicated
    assert_eq!(
        again,
        [Seeded::AlreadyKnown, Seeded::AlreadyKnown, Seeded::Created]
    );
    let task = get(store, &crawl, a).await;
    assert_eq!(task.status, Status::Succeeded);
    assert_eq!(task.fetch.unwrap().md5.as_deref(), Some("m1"));
    assert_eq!(task.created_at, T0);
    let counts = store.counts(&crawl).await.unwrap();
    assert_eq!(counts.get(&Status::Pending).copied().unwrap_or(0), 2);
    assert_eq!(counts.get(&Status::Succeeded).copied().unwrap_or(0), 1);
}

pub async fn concurrent_claimers_exactly_one_wins<S: TaskStore>(store: &S) {
    // GIVEN one pending task
    let crawl = crawl_id();
    let url = "http://example.com/contended";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();

    // WHEN 8 workers claim it at once
    let task_id = id(url);
    let claims = join_all((0..8).map(|_| store.claim(&crawl, &task_id, LEASE_MS, T0 + 1))).await;

    // THEN exactly one wins; the others are told it is leased, and until when
    let outcomes: Vec<ClaimOutcome> = claims.into_iter().map(Result::unwrap).collect();
    let winners: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|o| match o {
            ClaimOutcome::Claimed { lease, .. } => Some(lease),
            ClaimOutcome::Rejected(_) => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(winners[0].token, 1);
    for o in &outcomes {
        if let ClaimOutcome::Rejected(why) = o {
            assert_eq!(
                *why,
                ClaimRejection::Leased {
                    until: T0 + 1 + LEASE_MS as Millis
                }
            );
        }
    }
}

pub async fn expired_lease_is_reclaimed_and_the_old_holder_is_fenced<S: TaskStore>(store: &S) {
    // GIVEN a task claimed by a worker that then stalls
    let crawl = crawl_id();
    let url = "http://example.com/zombie";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (_, zombie) = claim(store, &crawl, url, T0).await;
    assert_eq!(
        rejection(store, &crawl, url, T0 + 1_000).await,
        ClaimRejection::Leased {
            until: T0 + LEASE_MS as Millis
        }
    );

    // WHEN its lease expires, another worker claims and finishes it
    let (task, fresh) = claim(store, &crawl, url, T0 + LEASE_MS as Millis).await;
    assert_eq!(task.status, Status::InProgress);
    assert_eq!(fresh.token, zombie.token + 1);
    let finished = store
        .finish(&fresh, &record("new", T0 + 70_000), T0 + 70_000)
        .await
        .unwrap();
    assert_eq!(
        finished,
        FinishOutcome::Finished {
            replaced: None,
            stale: vec![]
        }
    );

    // THEN the old holder's finish, fail and release are all rejected, and change nothing
    let late = store
        .finish(&zombie, &record("old", T0 + 80_000), T0 + 80_000)
        .await
        .unwrap();
    let FinishOutcome::Rejected {
        current: Some(current),
    } = late
    else {
        panic!("{late:?}")
    };
    assert_eq!(
        current.fetch.as_ref().and_then(|f| f.md5.as_deref()),
        Some("new")
    );
    let policy = RetryPolicy::default();
    let failed = store
        .fail(
            &zombie,
            &Failure::from_http_status(500, None),
            &policy,
            T0 + 80_001,
        )
        .await
        .unwrap();
    assert_eq!(failed, FailOutcome::Rejected);
    assert!(!store.release(&zombie, T0 + 80_002).await.unwrap());
    let task = get(store, &crawl, url).await;
    assert_eq!(task.status, Status::Succeeded);
    assert_eq!(task.fetch.unwrap().md5.as_deref(), Some("new"));
    assert_eq!(task.token, fresh.token);
    assert_eq!(task.lease_expires_at, None);
}

pub async fn transient_failures_back_off_then_give_up<S: TaskStore>(store: &S) {
    let policy = RetryPolicy {
        max_retry: 3,
        base_delay_ms: 1_000,
        max_delay_ms: 60_000,
    };
    let crawl = crawl_id();
    let url = "http://example.com/flaky";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();

    // GIVEN a first attempt that hits a 500
    let (_, lease) = claim(store, &crawl, url, T0).await;
    let outcome = store
        .fail(&lease, &Failure::from_http_status(500, None), &policy, T0)
        .await
        .unwrap();
    let FailOutcome::Retrying { next_attempt_at } = outcome else {
        panic!("{outcome:?}")
    };
    // THEN it backs off (half to full base delay) and is not claimable before then
    assert!(
        (T0 + 500..=T0 + 1_000).contains(&next_attempt_at),
        "{next_attempt_at}"
    );
    let task = get(store, &crawl, url).await;
    assert_eq!((task.status, task.retries), (Status::Failed, 1));
    assert_eq!(
        rejection(store, &crawl, url, next_attempt_at - 1).await,
        ClaimRejection::NotDue {
            at: next_attempt_at
        }
    );

    // WHEN the second attempt is throttled with Retry-After: 30 s
    let (_, lease) = claim(store, &crawl, url, next_attempt_at).await;
    assert_eq!(lease.retries, 1);
    let now = next_attempt_at;
    let throttled = Failure::from_http_status(429, Some(30_000));
    let outcome = store.fail(&lease, &throttled, &policy, now).await.unwrap();
    // THEN the server's delay is honoured
    assert_eq!(
        outcome,
        FailOutcome::Retrying {
            next_attempt_at: now + 30_000
        }
    );

    // WHEN the third attempt fails too, max_retry is reached: the task is given up
    let (_, lease) = claim(store, &crawl, url, now + 30_000).await;
    let outcome = store
        .fail(
            &lease,
            &Failure::new(ErrorKind::Timeout, "timed out"),
            &policy,
            now + 30_001,
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        FailOutcome::GaveUp {
            status: Status::Ignored
        }
    );
    let task = get(store, &crawl, url).await;
    assert_eq!(task.status, Status::Ignored);
    let kinds: Vec<ErrorKind> = task.errors.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            ErrorKind::ServerError,
            ErrorKind::Throttled,
            ErrorKind::Timeout
        ]
    );
    assert_eq!(
        rejection(store, &crawl, url, now + 10_000_000).await,
        ClaimRejection::Done(Status::Ignored)
    );
}

pub async fn permanent_failures_are_terminal<S: TaskStore>(store: &S) {
    // GIVEN two tasks answering 404 and 403
    let policy = RetryPolicy::default();
    let crawl = crawl_id();
    let (missing, forbidden) = ("http://example.com/missing", "http://example.com/forbidden");
    store
        .seed(&crawl, &[new_task(missing), new_task(forbidden)], T0)
        .await
        .unwrap();
    let (_, l1) = claim(store, &crawl, missing, T0).await;
    let (_, l2) = claim(store, &crawl, forbidden, T0).await;

    // WHEN they fail
    let gone = store
        .fail(&l1, &Failure::from_http_status(404, None), &policy, T0)
        .await
        .unwrap();
    let ignored = store
        .fail(&l2, &Failure::from_http_status(403, None), &policy, T0)
        .await
        .unwrap();

    // THEN a 404 burns no retry: the page is gone; a 403 is ignored
    assert_eq!(
        gone,
        FailOutcome::GaveUp {
            status: Status::Gone
        }
    );
    assert_eq!(
        ignored,
        FailOutcome::GaveUp {
            status: Status::Ignored
        }
    );
    let task = get(store, &crawl, missing).await;
    assert_eq!(
        (task.status, task.retries, task.errors.len()),
        (Status::Gone, 0, 1)
    );
    assert_eq!(task.errors[0].message, "HTTP 404");
}

pub async fn error_history_is_bounded<S: TaskStore>(store: &S) {
    // GIVEN a generous retry policy and a task failing 6 times
    let policy = RetryPolicy {
        max_retry: 10,
        base_delay_ms: 1,
        max_delay_ms: 1,
    };
    let crawl = crawl_id();
    let url = "http://example.com/unstable";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let long = "x".repeat(1_000);
    for attempt in 0..6 {
        let now = T0 + attempt * 10;
        let (_, lease) = claim(store, &crawl, url, now).await;
        let failure = Failure::new(ErrorKind::Connection, format!("{attempt} {long}"));
        store.fail(&lease, &failure, &policy, now).await.unwrap();
    }
    // THEN only the last three errors are kept, each cut to 256 bytes
    let task = get(store, &crawl, url).await;
    assert_eq!(task.errors.len(), 3);
    assert!(task.errors[0].message.starts_with("3 "));
    assert!(task.errors[2].message.starts_with("5 "));
    assert!(task.errors.iter().all(|e| e.message.len() <= 256));
    assert_eq!(task.retries, 6);
}

pub async fn query_pages_through_every_shard_in_update_order<S: TaskStore>(store: &S) {
    // GIVEN 23 pending tasks seeded at distinct times
    let crawl = crawl_id();
    let urls: Vec<String> = (0..23)
        .map(|i| format!("http://example.com/p{i}"))
        .collect();
    for (i, url) in urls.iter().enumerate() {
        store
            .seed(&crawl, &[new_task(url)], T0 + i as Millis)
            .await
            .unwrap();
    }

    // WHEN they are listed 5 at a time
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..50 {
        let query = TaskQuery {
            crawl_id: crawl.clone(),
            status: Status::Pending,
            updated_before: None,
            limit: 5,
            cursor,
        };
        let page = store.query(&query).await.unwrap();
        assert!(page.tasks.len() <= 5);
        seen.extend(page.tasks);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }

    // THEN every task comes exactly once, oldest update first within each shard
    let mut ids: Vec<&str> = seen.iter().map(|t| t.task_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 23);
    assert_eq!(seen.len(), 23);
    for shard in 0..4 {
        let times: Vec<Millis> = seen
            .iter()
            .filter(|t| t.task_id.shard(4) == shard)
            .map(|t| t.updated_at)
            .collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "shard {shard}: {times:?}"
        );
    }
    // AND the due bound keeps only tasks updated at or before it
    let query = TaskQuery {
        crawl_id: crawl.clone(),
        status: Status::Pending,
        updated_before: Some(T0 + 9),
        limit: 100,
        cursor: None,
    };
    let due = store.query(&query).await.unwrap();
    assert_eq!(due.tasks.len(), 10);
    assert!(due.cursor.is_none());
    assert!(
        due.tasks
            .iter()
            .all(|t| t.updated_at <= T0 + 9 && t.url.starts_with("http://example.com/p"))
    );
    // AND a foreign cursor is refused
    let bogus = TaskQuery {
        cursor: Some("not a cursor".into()),
        ..query
    };
    assert!(store.query(&bogus).await.is_err());
}

pub async fn counts_per_status<S: TaskStore>(store: &S) {
    let crawl = crawl_id();
    let urls: Vec<String> = (0..5).map(|i| format!("http://example.com/c{i}")).collect();
    let tasks: Vec<NewTask> = urls.iter().map(|u| new_task(u)).collect();
    store.seed(&crawl, &tasks, T0).await.unwrap();
    let (_, l0) = claim(store, &crawl, &urls[0], T0).await;
    store.finish(&l0, &record("a", T0), T0).await.unwrap();
    let (_, l1) = claim(store, &crawl, &urls[1], T0).await;
    store
        .fail(
            &l1,
            &Failure::from_http_status(410, None),
            &RetryPolicy::default(),
            T0,
        )
        .await
        .unwrap();
    claim(store, &crawl, &urls[2], T0).await;

    let counts = store.counts(&crawl).await.unwrap();
    let count = |s| counts.get(&s).copied().unwrap_or(0);
    assert_eq!(
        [
            count(Status::Pending),
            count(Status::InProgress),
            count(Status::Succeeded),
            count(Status::Gone)
        ],
        [2, 1, 1, 1]
    );
    // AND another crawl's tasks are not counted
    assert_eq!(
        store
            .counts(&crawl_id())
            .await
            .unwrap()
            .values()
            .sum::<u64>(),
        0
    );
}

pub async fn crawl_lifecycle<S: CrawlStore>(store: &S) {
    // GIVEN a new crawl
    let id = crawl_id();
    let mut config = CrawlConfig::default();
    config.scope.max_pages = Some(10);
    let crawl = Crawl::new(id.clone(), config.clone(), T0);
    let (stored, created) = store.create_crawl(&crawl).await.unwrap();
    assert!(created);
    assert_eq!(stored, crawl);

    // WHEN it is created again with another config, THEN the first one stands
    let other = Crawl::new(id.clone(), CrawlConfig::default(), T0 + 1);
    let (stored, created) = store.create_crawl(&other).await.unwrap();
    assert!(!created);
    assert_eq!(stored.config, config);
    assert!(
        store
            .list_crawls(Some(CrawlState::Running))
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == id)
    );

    // WHEN it completes, THEN it is listed as completed; a recrawl round reopens it
    assert!(store.complete_crawl(&id, 0, T0 + 2).await.unwrap());
    assert!(!store.complete_crawl(&id, 0, T0 + 3).await.unwrap());
    assert_eq!(
        store.get_crawl(&id).await.unwrap().unwrap().state,
        CrawlState::Completed
    );
    assert!(
        store
            .list_crawls(Some(CrawlState::Completed))
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == id)
    );
    assert!(store.reopen_crawl(&id, T0 + 4).await.unwrap());
    assert!(!store.reopen_crawl(&id, T0 + 5).await.unwrap());
    let reopened = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.generation),
        (CrawlState::Running, 1)
    );
    assert!(
        !store.complete_crawl(&id, 0, T0 + 6).await.unwrap(),
        "stale generation"
    );

    store.delete_crawl(&id).await.unwrap();
    assert!(store.get_crawl(&id).await.unwrap().is_none());
}

pub async fn page_budget_is_never_exceeded<S: CrawlStore>(store: &S) {
    // GIVEN a crawl limited to 20 pages
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();

    // WHEN 10 workers each try to reserve 3 slots at once
    let grants = join_all((0..10).map(|_| store.reserve_pages(&id, 3, 20))).await;

    // THEN exactly 20 are granted, never more
    let granted: u64 = grants.into_iter().map(Result::unwrap).sum();
    assert_eq!(granted, 20);
    assert_eq!(store.reserve_pages(&id, 1, 20).await.unwrap(), 0);
    // AND released slots can be taken again
    store.release_pages(&id, 2).await.unwrap();
    assert_eq!(store.reserve_pages(&id, 5, 20).await.unwrap(), 2);
}

pub async fn completion_happens_exactly_once<S: CrawlStore>(store: &S) {
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let results = join_all((0..6).map(|_| store.complete_crawl(&id, 0, T0 + 1))).await;
    let winners = results
        .into_iter()
        .map(Result::unwrap)
        .filter(|&won| won)
        .count();
    assert_eq!(winners, 1);
}

pub async fn reschedule_and_mark_enqueued<S: TaskStore>(store: &S) {
    // GIVEN a succeeded task
    let crawl = crawl_id();
    let url = "http://example.com/recrawl";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (_, lease) = claim(store, &crawl, url, T0).await;
    store.finish(&lease, &record("v1", T0), T0).await.unwrap();

    // WHEN it is rescheduled from `succeeded`, THEN it is pending, once
    assert!(
        !store
            .reschedule(&crawl, &id(url), &[Status::Failed, Status::Ignored], T0 + 1)
            .await
            .unwrap()
    );
    assert!(
        store
            .reschedule(&crawl, &id(url), &[Status::Succeeded], T0 + 2)
            .await
            .unwrap()
    );
    assert!(
        !store
            .reschedule(&crawl, &id(url), &[Status::Succeeded], T0 + 3)
            .await
            .unwrap()
    );
    let task = get(store, &crawl, url).await;
    assert_eq!((task.status, task.updated_at), (Status::Pending, T0 + 2));
    assert_eq!(
        task.fetch.unwrap().md5.as_deref(),
        Some("v1"),
        "the previous fetch is kept for conditional GETs"
    );

    // WHEN a message is sent for it, THEN that is recorded, only while the status matches
    assert!(
        store
            .mark_enqueued(&crawl, &id(url), Status::Pending, T0 + 4)
            .await
            .unwrap()
    );
    assert!(
        !store
            .mark_enqueued(&crawl, &id(url), Status::Failed, T0 + 5)
            .await
            .unwrap()
    );
    let task = get(store, &crawl, url).await;
    assert_eq!((task.enqueued_at, task.updated_at), (Some(T0 + 4), T0 + 4));
}

pub async fn stale_objects_are_handed_to_the_next_finisher<S: TaskStore>(store: &S) {
    // GIVEN a task whose current pointer is md5 `cur`
    let crawl = crawl_id();
    let url = "http://example.com/stale";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (_, lease) = claim(store, &crawl, url, T0).await;
    store.finish(&lease, &record("cur", T0), T0).await.unwrap();

    // WHEN a rejected writer reports its object: the current pointer is never marked stale
    assert!(!store.add_stale(&crawl, &id(url), "cur").await.unwrap());
    assert!(store.add_stale(&crawl, &id(url), "orphan").await.unwrap());

    // THEN the next finisher receives it (and the record it replaced), and the list is cleared
    store
        .reschedule(&crawl, &id(url), &[Status::Succeeded], T0 + 1)
        .await
        .unwrap();
    let (_, lease) = claim(store, &crawl, url, T0 + 2).await;
    let outcome = store
        .finish(&lease, &record("next", T0 + 3), T0 + 3)
        .await
        .unwrap();
    let FinishOutcome::Finished { replaced, stale } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(replaced.and_then(|r| r.md5).as_deref(), Some("cur"));
    assert_eq!(stale, ["orphan"]);
    store
        .reschedule(&crawl, &id(url), &[Status::Succeeded], T0 + 4)
        .await
        .unwrap();
    let (_, lease) = claim(store, &crawl, url, T0 + 5).await;
    let FinishOutcome::Finished { stale, .. } = store
        .finish(&lease, &record("last", T0 + 6), T0 + 6)
        .await
        .unwrap()
    else {
        panic!()
    };
    assert!(stale.is_empty());
}

pub async fn release_gives_the_task_back<S: TaskStore>(store: &S) {
    let crawl = crawl_id();
    let url = "http://example.com/released";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (_, lease) = claim(store, &crawl, url, T0).await;
    assert!(store.release(&lease, T0 + 1).await.unwrap());
    let task = get(store, &crawl, url).await;
    assert_eq!(
        (task.status, task.lease_expires_at),
        (Status::Pending, None)
    );
    let (_, again) = claim(store, &crawl, url, T0 + 2).await;
    assert_eq!(again.token, lease.token + 1);
    assert_eq!(store.delete_tasks(&crawl).await.unwrap(), 1);
    assert!(store.get(&crawl, &id(url)).await.unwrap().is_none());
}

pub async fn request_settings_are_stored_as_given<S: CrawlStore>(store: &S) {
    // GIVEN a crawl with every request setting, a JSON body with nested values among them
    let config = CrawlConfig {
        fetch: serde_json::from_value(serde_json::json!({
            "headers": {"X-Client": "trawl"},
            "accept_language": "fr",
            "rules": [{"match": "/api/", "method": "POST",
                       "body": {"json": {"q": "x", "page": 2, "tags": ["a", "b"], "deep": {"n": null}}}}],
            "auth": [{"host": "api.example.com:8443", "bearer": {"env": "API_TOKEN"}},
                     {"host": "intranet", "basic": {"username": {"env": "U"}, "password": {"env": "P"}}}],
            "cookies": {"jar": true, "initial": {"example.com": {"consent": "yes"}}}
        }))
        .unwrap(),
        ..CrawlConfig::default()
    };
    let crawl = Crawl::new(crawl_id(), config, T0);

    // WHEN it is created and read back, THEN the settings are unchanged
    store.create_crawl(&crawl).await.unwrap();
    assert_eq!(store.get_crawl(&crawl.id).await.unwrap().unwrap(), crawl);
}
