//! The cases. GIVEN / WHEN / THEN; time is passed explicitly, so nothing sleeps.
//!
//! Every task transition goes through [`Tracked`], which compares the WHOLE stored task (every
//! field) after each one with what `trawl_domain::transition` says it must be, and checks that
//! the store applied or refused it exactly when the domain's condition says so.

use crate::support::unique;
use futures_util::future::join_all;
use std::hash::{BuildHasher, RandomState};
use trawl_core::frontier::update_host;
use trawl_core::store::{
    Applied, ClaimOutcome, ClaimRejection, CrawlStore, FailOutcome, FinishOutcome, HostStore,
    Seeded, StoreError, TaskQuery, TaskStore,
};
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::transition::{self as crawl_rules, CrawlUpdate};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::estimate::{ChangeHistory, Level};
use trawl_domain::host::{Host, HostCounts, HostPolicy, NextWork, Turn};
use trawl_domain::request::RequestId;
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::roster::Place;
use trawl_domain::schedule::{Pace, Schedule};
use trawl_domain::task::{
    ErrorKind, FetchRecord, Lease, LeaseKind, Millis, NewTask, Priority, Span, Status, Task,
};
use trawl_domain::transition::{self, Update};

pub const T0: Millis = 1_800_000_000_000;
const LEASE_MS: u64 = 60_000;

pub fn crawl_id() -> CrawlId {
    CrawlId::parse(&unique("crawl")).unwrap()
}

pub fn new_task(url: &str) -> NewTask {
    NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(url).unwrap(),
        depth: 0,
        parent: None,
        data: None,
    }
}

fn id(url: &str) -> TaskId {
    CanonicalUrl::parse(url).unwrap().task_id()
}

const DAY: Millis = 86_400_000;
const HOUR: Millis = 3_600_000;

pub fn record(md5: &str, at: Millis) -> FetchRecord {
    FetchRecord {
        object_key: Some(format!("crawl=x/pk=y/attr=html/md5={md5}")),
        md5: Some(md5.to_owned()),
        http_status: 200,
        content_type: Some("text/html".into()),
        content_length: 1234,
        etag: Some("\"v1\"".into()),
        fetched_at: at,
        next_fetch_at: Some(at + DAY),
        ..FetchRecord::default()
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_retry: 3,
        base_delay_ms: 1_000,
        max_delay_ms: 60_000,
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

/// One task under test, and what the store must hold for it.
struct Tracked<'a, S> {
    store: &'a S,
    task: Task,
}

impl<'a, S: TaskStore> Tracked<'a, S> {
    /// Seeds `url` and checks the stored task is the domain's new task.
    async fn seed(store: &'a S, crawl: &CrawlId, url: &str, now: Millis) -> Self {
        Self::seed_new(store, crawl, new_task(url), now).await
    }

    /// Seeds `new` and checks the stored task is the domain's new task.
    async fn seed_new(store: &'a S, crawl: &CrawlId, new: NewTask, now: Millis) -> Self {
        let seeded = store
            .seed(crawl, std::slice::from_ref(&new), now)
            .await
            .unwrap();
        assert_eq!(seeded, [Seeded::Created]);
        let task = transition::seed(crawl, &new, now).task;
        assert_eq!(stored(store, &task).await, Some(task.clone()));
        Self { store, task }
    }

    /// Follows a task seeded otherwise, from its stored state.
    async fn follow(store: &'a S, crawl: &CrawlId, url: &str) -> Self {
        let task = store.get(crawl, &id(url)).await.unwrap().unwrap();
        Self { store, task }
    }

    /// Checks that the store did to the task exactly what `update` says, and that it applied
    /// it exactly when the domain's condition holds.
    async fn check(&mut self, update: &Update, applied: bool) {
        let decided = update.apply(&self.task);
        assert_eq!(
            applied,
            decided.is_some(),
            "store and domain disagree on whether {update:?} applies to {:?}",
            self.task
        );
        let expected = decided.unwrap_or_else(|| self.task.clone());
        assert_eq!(
            stored(self.store, &self.task).await,
            Some(expected.clone()),
            "stored task is not the domain's after {update:?}"
        );
        self.task = expected;
    }

    /// Checks that the store still holds the task as last seen.
    async fn unchanged(&self) {
        assert_eq!(
            stored(self.store, &self.task).await,
            Some(self.task.clone())
        );
    }

    /// A claim at `now` whose fetch answers 500; returns when the task may be tried again.
    async fn fails_once_with_500(&mut self, now: Millis) -> Millis {
        let lease = self.claim(now).await;
        let outcome = self
            .fail(
                &lease,
                &Failure::from_http_status(500, None),
                &policy(),
                now,
            )
            .await;
        let FailOutcome::Retrying { next_attempt_at } = outcome else {
            panic!("{outcome:?}")
        };
        next_attempt_at
    }

    async fn claim(&mut self, now: Millis) -> Lease {
        match self.try_claim(now).await {
            Ok(lease) => lease,
            Err(why) => panic!("claim refused: {why:?} on {:?}", self.task),
        }
    }

    /// A claim by a host turn: written (as `claim`) or taken as read, writing nothing.
    async fn claim_in_turn(&mut self, now: Millis) -> Lease {
        let (crawl, id) = (&self.task.crawl_id, &self.task.task_id);
        let outcome = self
            .store
            .claim_in_turn(crawl, id, LEASE_MS, now)
            .await
            .unwrap();
        let ClaimOutcome::Claimed { task, lease } = outcome else {
            panic!("claim in turn refused: {outcome:?} on {:?}", self.task)
        };
        match lease.kind {
            LeaseKind::InTurn => {
                self.unchanged().await;
                let read = transition::claim_in_turn(&self.task, LEASE_MS, now);
                assert_eq!(Ok(&lease), read.as_ref(), "the lease is the task as read");
            }
            LeaseKind::Written => {
                self.check(&transition::claim(LEASE_MS, now), true).await;
                assert_eq!(lease, transition::lease_of(&self.task));
            }
        }
        assert_eq!(*task, self.task, "the claim returns the task as it stands");
        lease
    }

    async fn refused_claim(&mut self, now: Millis) -> ClaimRejection {
        match self.try_claim(now).await {
            Ok(lease) => panic!("claim granted: {lease:?}"),
            Err(why) => why,
        }
    }

    async fn try_claim(&mut self, now: Millis) -> Result<Lease, ClaimRejection> {
        let outcome = self
            .store
            .claim(&self.task.crawl_id, &self.task.task_id, LEASE_MS, now)
            .await
            .unwrap();
        let expected = transition::claimed(Some(&self.task), LEASE_MS, now);
        let update = transition::claim(LEASE_MS, now);
        match outcome {
            ClaimOutcome::Claimed { task, lease } => {
                self.check(&update, true).await;
                assert_eq!(*task, self.task, "the claim returns the claimed task");
                assert_eq!(lease, transition::lease_of(&self.task));
                Ok(lease)
            }
            ClaimOutcome::Rejected(why) => {
                self.check(&update, false).await;
                assert_eq!(Err(why.clone()), expected.map(|_| ()), "rejection reason");
                Err(why)
            }
        }
    }

    async fn finish(&mut self, lease: &Lease, record: &FetchRecord, now: Millis) -> FinishOutcome {
        let before = self.task.clone();
        let outcome = self.store.finish(lease, record, now).await.unwrap();
        let update = transition::finish(lease, record, now);
        match &outcome {
            FinishOutcome::Finished { replaced, stale } => {
                self.check(&update, true).await;
                assert_eq!((replaced, stale), (&before.fetch, &before.stale));
            }
            FinishOutcome::Rejected { current } => {
                self.check(&update, false).await;
                assert_eq!(current.as_deref(), Some(&self.task));
            }
        }
        outcome
    }

    /// A failure of a crawl that fetches each page once.
    async fn fail(
        &mut self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        now: Millis,
    ) -> FailOutcome {
        self.fail_with(lease, failure, policy, &Revisit::ONCE, now)
            .await
    }

    async fn fail_with(
        &mut self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        revisit: &Revisit,
        now: Millis,
    ) -> FailOutcome {
        let outcome = self
            .store
            .fail(lease, failure, policy, revisit, now)
            .await
            .unwrap();
        let (update, failed) = transition::fail(lease, failure, policy, revisit, now);
        let applied = outcome != FailOutcome::Rejected;
        self.check(&update, applied).await;
        if applied {
            assert_eq!(outcome, FailOutcome::from(failed));
        }
        outcome
    }

    async fn release(&mut self, lease: &Lease, now: Millis) -> bool {
        let applied = self.store.release(lease, now).await.unwrap();
        match transition::release(lease, now) {
            Some(update) => self.check(&update, applied).await,
            None => self.unchanged().await,
        }
        applied
    }

    async fn reschedule(&mut self, from: &[Status], now: Millis) -> bool {
        let (crawl, task) = (&self.task.crawl_id, &self.task.task_id);
        let applied = self.store.reschedule(crawl, task, from, now).await.unwrap();
        self.check(&transition::reschedule(from, now), applied)
            .await;
        applied
    }

    async fn refresh(&mut self, lastmod: Millis, now: Millis) -> bool {
        let read = self.task.clone();
        let applied = self.store.refresh(&read, lastmod, now).await.unwrap();
        match transition::refresh(&read, lastmod, now) {
            Some(update) => self.check(&update, applied).await,
            None => assert!(!applied, "refresh applied where the domain decides nothing"),
        }
        applied
    }

    async fn add_stale(&mut self, md5: &str) -> bool {
        let (crawl, task) = (&self.task.crawl_id, &self.task.task_id);
        let applied = self.store.add_stale(crawl, task, md5).await.unwrap();
        self.check(&transition::add_stale(md5), applied).await;
        applied
    }
}

/// Records host `name` of `crawl`, as seeding does before it writes the host's tasks: a store
/// may find tasks that are not settled yet through their hosts.
async fn record_host<S: HostStore>(store: &S, crawl: &CrawlId, name: &str) {
    let host = Host::new(name, &HostPolicy::default(), T0);
    let counted = HostCounts::change(None, &host);
    assert!(store.put_host(crawl, &host, counted).await.unwrap());
}

async fn stored<S: TaskStore>(store: &S, task: &Task) -> Option<Task> {
    store.get(&task.crawl_id, &task.task_id).await.unwrap()
}

pub async fn reseed_is_idempotent<S: TaskStore + HostStore>(store: &S) {
    // GIVEN two seeded URLs of a recorded host, one of them crawled
    let crawl = crawl_id();
    record_host(store, &crawl, "example.com").await;
    let (a, b) = ("http://example.com/a", "http://example.com/b");
    let mut crawled = Tracked::seed(store, &crawl, a, T0).await;
    let untouched = Tracked::seed(store, &crawl, b, T0).await;
    let lease = crawled.claim(T0 + 1).await;
    crawled.finish(&lease, &record("m1", T0 + 2), T0 + 2).await;

    // WHEN they are seeded again (another spelling of `a`), with a new one twice in the batch
    let again = store
        .seed(
            &crawl,
            &[
                new_task("HTTP://EXAMPLE.COM/a#top"),
                new_task(b),
                new_task("http://example.com/c"),
                new_task("http://example.com/c"),
            ],
            T0 + 3,
        )
        .await
        .unwrap();

    // THEN nothing known is reset or duplicated: both tasks are exactly as they were
    assert_eq!(
        again,
        [
            Seeded::AlreadyKnown,
            Seeded::AlreadyKnown,
            Seeded::Created,
            Seeded::AlreadyKnown
        ]
    );
    crawled.unchanged().await;
    untouched.unchanged().await;
    let counts = store.counts(&crawl).await.unwrap();
    assert_eq!(counts.get(&Status::Pending).copied().unwrap_or(0), 2);
    assert_eq!(counts.get(&Status::Succeeded).copied().unwrap_or(0), 1);
}

pub async fn user_data_stays_with_its_task_through_every_transition<S: TaskStore>(store: &S) {
    // GIVEN a task seeded with user data of nested JSON values
    let crawl = crawl_id();
    let url = "http://example.com/product/7";
    let data =
        serde_json::json!({"sku": 7, "tags": ["a", "b"], "price": {"eur": 9.5}, "none": null});
    let new = NewTask {
        priority: Default::default(),
        data: data.as_object().cloned(),
        ..new_task(url)
    };
    // WHEN it is stored, claimed, failed, claimed again and finished
    let mut task = Tracked::seed_new(store, &crawl, new, T0).await;
    let next_attempt_at = task.fails_once_with_500(T0).await;
    let lease = task.claim(next_attempt_at).await;
    task.finish(&lease, &record("m1", next_attempt_at), next_attempt_at)
        .await;

    // THEN the store holds the data as given at every step (each step is checked against the
    // domain's task by `Tracked`), and at the end
    let stored = store.get(&crawl, &id(url)).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Succeeded);
    assert_eq!(stored.data.as_ref(), data.as_object());
}

pub async fn two_posts_to_one_url_with_different_bodies_are_two_tasks<S: TaskStore>(store: &S) {
    // GIVEN a URL fetched with GET, and two POSTs to it whose data gives different bodies
    let crawl = crawl_id();
    let url = "http://example.com/api/search";
    let post = |body: serde_json::Value| NewTask {
        data: serde_json::json!({"_method": "POST", "_body": body})
            .as_object()
            .cloned(),
        ..new_task(url)
    };
    let shoes = post(serde_json::json!({"q": "shoes", "page": 1}));
    let boots = post(serde_json::json!({"q": "boots", "page": 1}));

    // WHEN all three are seeded, then the first POST again (its body's keys in another order
    // is the same body)
    let first = store
        .seed(&crawl, &[new_task(url), shoes.clone(), boots.clone()], T0)
        .await
        .unwrap();
    let shoes_again = post(serde_json::json!({"page": 1, "q": "shoes"}));
    let again = store.seed(&crawl, &[shoes_again], T0 + 1).await.unwrap();

    // THEN three tasks exist, each under its own id with its request, and the repeat is known
    assert_eq!(first, [Seeded::Created, Seeded::Created, Seeded::Created]);
    assert_eq!(again, [Seeded::AlreadyKnown]);
    let ids = [new_task(url).task_id(), shoes.task_id(), boots.task_id()];
    assert_eq!(ids[0], id(url));
    for (task_id, new) in ids.iter().zip([new_task(url), shoes, boots]) {
        let stored = store.get(&crawl, task_id).await.unwrap().unwrap();
        assert_eq!((stored.url.as_str(), &stored.data), (url, &new.data));
    }
    assert_eq!(store.known(&crawl, &ids).await.unwrap(), [true, true, true]);
}

pub async fn concurrent_claimers_exactly_one_wins<S: TaskStore>(store: &S) {
    // GIVEN one pending task
    let crawl = crawl_id();
    let url = "http://example.com/contended";
    let mut tracked = Tracked::seed(store, &crawl, url, T0).await;

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
    // AND the task is exactly what one claim makes of it
    tracked
        .check(&transition::claim(LEASE_MS, T0 + 1), true)
        .await;
}

pub async fn expired_lease_is_reclaimed_and_the_old_holder_is_fenced<S: TaskStore>(store: &S) {
    // GIVEN a task claimed by a worker that then stalls
    let crawl = crawl_id();
    let url = "http://example.com/zombie";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;
    let zombie = task.claim(T0).await;
    let until = T0 + LEASE_MS as Millis;
    assert_eq!(
        task.refused_claim(until - 1).await,
        ClaimRejection::Leased { until }
    );

    // WHEN its lease expires, another worker claims and finishes it
    let fresh = task.claim(until).await;
    assert_eq!(fresh.token, zombie.token + 1);
    let finished = task
        .finish(&fresh, &record("new", T0 + 70_000), T0 + 70_000)
        .await;
    assert_eq!(
        finished,
        FinishOutcome::Finished {
            replaced: None,
            stale: vec![]
        }
    );

    // THEN the old holder's finish, fail and release are all rejected, and change nothing
    let late = task
        .finish(&zombie, &record("old", T0 + 80_000), T0 + 80_000)
        .await;
    assert!(matches!(late, FinishOutcome::Rejected { current: Some(_) }));
    let failed = task
        .fail(
            &zombie,
            &Failure::from_http_status(500, None),
            &policy(),
            T0 + 80_001,
        )
        .await;
    assert_eq!(failed, FailOutcome::Rejected);
    assert!(!task.release(&zombie, T0 + 80_002).await);
    assert_eq!(
        (task.task.status, task.task.updated_at, task.task.token),
        (Status::Succeeded, T0 + 70_000, fresh.token + 1)
    );
}

pub async fn of_two_turns_holding_one_task_only_the_first_result_lands<S: TaskStore>(store: &S) {
    // GIVEN a pending task taken by a turn that then outlives its host lease, and by the next
    // turn once that lease is over
    let crawl = crawl_id();
    let url = "http://example.com/two-turns";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;
    let first = task.claim_in_turn(T0).await;
    let second = task.claim_in_turn(first.expires_at).await;

    // WHEN both finish at once
    let at = first.expires_at + 1;
    let (a, b) = (record("a", at), record("b", at));
    let (one, two) =
        futures_util::join!(store.finish(&first, &a, at), store.finish(&second, &b, at));
    let (one, two) = (one.unwrap(), two.unwrap());

    // THEN exactly one finish lands, and the task is what that one made of it
    let landed = |o: &FinishOutcome| matches!(o, FinishOutcome::Finished { .. });
    assert!(landed(&one) != landed(&two), "{one:?} {two:?}");
    let (lease, fetched) = if landed(&one) {
        (&first, &a)
    } else {
        (&second, &b)
    };
    task.check(&transition::finish(lease, fetched, at), true)
        .await;
    // AND a late fail under either lease changes nothing
    for lease in [&first, &second] {
        let failed = task
            .fail(
                lease,
                &Failure::from_http_status(500, None),
                &policy(),
                at + 1,
            )
            .await;
        assert_eq!(failed, FailOutcome::Rejected);
    }
}

pub async fn a_task_whose_turn_died_is_taken_by_the_next_turn<S: TaskStore + HostStore>(store: &S) {
    // GIVEN a task taken in a turn whose worker then dies, writing nothing more
    let crawl = crawl_id();
    record_host(store, &crawl, "example.com").await;
    let url = "http://example.com/orphaned";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;
    let dead = task.claim_in_turn(T0).await;

    // WHEN the host's next turn reads its due list once the dead turn's lease is over
    let next_turn = dead.expires_at;
    let due = store.host_tasks(&crawl, "example.com", 10).await.unwrap();

    // THEN the task is there, due by then, and the next turn takes and finishes it
    let listed = due.iter().find(|t| t.task_id == task.task.task_id).unwrap();
    assert!(
        listed.claimable_from().is_some_and(|at| at <= next_turn),
        "{listed:?}"
    );
    let lease = task.claim_in_turn(next_turn).await;
    let fetched = record("new", next_turn);
    assert!(matches!(
        task.finish(&lease, &fetched, next_turn).await,
        FinishOutcome::Finished { .. }
    ));
    // AND the dead turn's lease writes nothing, should its worker come back
    let late = task
        .finish(&dead, &record("old", next_turn + 1), next_turn + 1)
        .await;
    assert!(matches!(late, FinishOutcome::Rejected { .. }));
    assert_eq!(task.task.fetch, Some(fetched));
}

pub async fn transient_failures_back_off_then_give_up<S: TaskStore>(store: &S) {
    let crawl = crawl_id();
    let url = "http://example.com/flaky";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;

    // GIVEN a first attempt that hits a 500
    let next_attempt_at = task.fails_once_with_500(T0).await;
    // THEN it backs off (half to full base delay) and is not claimable before then
    assert!(
        (T0 + 500..=T0 + 1_000).contains(&next_attempt_at),
        "{next_attempt_at}"
    );
    assert_eq!((task.task.status, task.task.retries), (Status::Failed, 1));
    assert_eq!(
        task.refused_claim(next_attempt_at - 1).await,
        ClaimRejection::NotDue {
            at: next_attempt_at
        }
    );

    // WHEN the second attempt is throttled with Retry-After: 30 s
    let lease = task.claim(next_attempt_at).await;
    assert_eq!(lease.retries, 1);
    let now = next_attempt_at;
    let throttled = Failure::from_http_status(429, Some(30_000));
    let outcome = task.fail(&lease, &throttled, &policy(), now).await;
    // THEN the server's delay is honoured exactly
    assert_eq!(
        outcome,
        FailOutcome::Retrying {
            next_attempt_at: now + 30_000
        }
    );

    // WHEN the third attempt fails too, max_retry is reached: the task is given up
    let lease = task.claim(now + 30_000).await;
    let outcome = task
        .fail(
            &lease,
            &Failure::new(ErrorKind::Timeout, "timed out"),
            &policy(),
            now + 30_001,
        )
        .await;
    assert_eq!(
        outcome,
        FailOutcome::GaveUp {
            status: Status::Ignored
        }
    );
    assert_eq!(task.task.status, Status::Ignored);
    // `retries` counts every transient failure, the one that exhausted the budget included.
    assert_eq!((task.task.retries, task.task.next_attempt_at), (3, None));
    let kinds: Vec<ErrorKind> = task.task.errors.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            ErrorKind::ServerError,
            ErrorKind::Throttled,
            ErrorKind::Timeout
        ]
    );
    assert_eq!(
        task.refused_claim(now + 10_000_000).await,
        ClaimRejection::Done(Status::Ignored)
    );
}

pub async fn permanent_failures_are_terminal<S: TaskStore>(store: &S) {
    // GIVEN two tasks answering 404 and 403
    let crawl = crawl_id();
    let mut missing = Tracked::seed(store, &crawl, "http://example.com/missing", T0).await;
    let mut forbidden = Tracked::seed(store, &crawl, "http://example.com/forbidden", T0).await;
    let l1 = missing.claim(T0).await;
    let l2 = forbidden.claim(T0).await;

    // WHEN they fail
    let gone = missing
        .fail(&l1, &Failure::from_http_status(404, None), &policy(), T0)
        .await;
    let ignored = forbidden
        .fail(&l2, &Failure::from_http_status(403, None), &policy(), T0)
        .await;

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
    assert_eq!((missing.task.retries, missing.task.errors.len()), (0, 1));
    assert_eq!(missing.task.errors[0].message, "HTTP 404");
}

pub async fn a_page_comes_due_again_and_is_gone_only_at_its_second_check_finding_it_missing<
    S: TaskStore,
>(
    store: &S,
) {
    let revisit = Revisit {
        schedule: Some(Schedule::fixed(DAY as u64)),
        estimator: None,
        listing: false,
        missing_after: 2,
        missing_recheck_ms: HOUR as u64,
        recheck: Some(Schedule::CHECKER),
    };
    // GIVEN a page fetched once, due again in a day (`record`)
    let crawl = crawl_id();
    let mut task = Tracked::seed(store, &crawl, "http://example.com/moved", T0).await;
    let lease = task.claim(T0).await;
    task.finish(&lease, &record("aa", T0), T0).await;

    // THEN it is not claimable before its next fetch, and is at it: a recrawl needs no write
    // before its host's turn takes it
    assert_eq!(
        store
            .claim(&crawl, &task.task.task_id, LEASE_MS, T0 + DAY - 1)
            .await
            .unwrap(),
        ClaimOutcome::Rejected(ClaimRejection::Done(Status::Succeeded))
    );
    let recrawl = task.claim(T0 + DAY).await;

    // WHEN the page now answers 404
    let not_found = Failure::from_http_status(404, None);
    let outcome = task
        .fail_with(&recrawl, &not_found, &policy(), &revisit, T0 + DAY + 1)
        .await;

    // THEN it stays succeeded, its content current, and is checked again an hour later (not
    // before)
    assert_eq!(
        outcome,
        FailOutcome::GaveUp {
            status: Status::Succeeded
        }
    );
    let kept = task.task.fetch.clone().unwrap();
    assert_eq!((kept.md5.as_deref(), kept.missing), (Some("aa"), 1));
    let next_check = T0 + DAY + 1 + HOUR;
    assert_eq!(task.task.due_at(), Some(next_check));
    assert_eq!(
        store
            .claim(&crawl, &task.task.task_id, LEASE_MS, next_check - 1)
            .await
            .unwrap(),
        ClaimOutcome::Rejected(ClaimRejection::Done(Status::Succeeded))
    );

    // WHEN it answers 404 at that check too
    let again = task.claim(next_check).await;
    let outcome = task
        .fail_with(&again, &not_found, &policy(), &revisit, next_check + 1)
        .await;

    // THEN it is gone, the last good fetch still recorded, and re-checked a day later
    assert_eq!(
        outcome,
        FailOutcome::GaveUp {
            status: Status::Gone
        }
    );
    let gone = task.task.fetch.clone().unwrap();
    assert_eq!((gone.md5.as_deref(), gone.missing), (Some("aa"), 2));
    let check_at = next_check + 1 + DAY;
    assert_eq!(task.task.due_at(), Some(check_at));
    task.claim(check_at).await;
}

pub async fn an_estimated_pages_change_history_is_kept_with_its_fetch<S: TaskStore>(store: &S) {
    // GIVEN a page the change-rate estimator schedules, fetched with a history behind it
    let crawl = crawl_id();
    let url = "http://history.test/p";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (_, lease) = claim(store, &crawl, url, T0).await;
    let history = ChangeHistory {
        checks: 31,
        changes: 12,
        unchanged_ms: 1_700_000_000,
        changed_ms: 400_000_000,
        prompted: 3,
        prompted_changed: 1,
    };
    let fetched = FetchRecord {
        pace: Some(Pace::estimated(history)),
        ..record("a1", T0 + 1)
    };
    // WHEN it is finished
    store.finish(&lease, &fetched, T0 + 1).await.unwrap();
    // THEN the record reads back whole, the history with it
    let stored = store.get(&crawl, &id(url)).await.unwrap().unwrap();
    assert_eq!(stored.fetch, Some(fetched));
}

pub async fn error_history_is_bounded<S: TaskStore>(store: &S) {
    // GIVEN a generous retry policy and a task failing 6 times
    let patient = RetryPolicy {
        max_retry: 10,
        base_delay_ms: 1,
        max_delay_ms: 1,
    };
    let crawl = crawl_id();
    let mut task = Tracked::seed(store, &crawl, "http://example.com/unstable", T0).await;
    let long = "x".repeat(1_000);
    for attempt in 0..6 {
        let now = T0 + attempt * 10;
        let lease = task.claim(now).await;
        let failure = Failure::new(ErrorKind::Connection, format!("{attempt} {long}"));
        task.fail(&lease, &failure, &patient, now).await;
    }
    // THEN only the last three errors are kept, each cut to 256 bytes
    let errors = &task.task.errors;
    assert_eq!(errors.len(), 3);
    assert!(errors[0].message.starts_with("3 "));
    assert!(errors[2].message.starts_with("5 "));
    assert!(errors.iter().all(|e| e.message.len() <= 256));
    assert_eq!(task.task.retries, 6);
}

pub async fn query_pages_through_every_shard_in_update_order<S: TaskStore + HostStore>(store: &S) {
    // GIVEN 23 pending tasks of a recorded host seeded at distinct times; one then enqueued, one
    // claimed
    let crawl = crawl_id();
    record_host(store, &crawl, "example.com").await;
    let urls: Vec<String> = (0..23)
        .map(|i| format!("http://example.com/p{i}"))
        .collect();
    for (i, url) in urls.iter().enumerate() {
        store
            .seed(&crawl, &[new_task(url)], T0 + i as Millis)
            .await
            .unwrap();
    }
    let mut enqueued = Tracked::follow(store, &crawl, &urls[3]).await;
    assert!(enqueued.reschedule(&[Status::Pending], T0 + 100).await);
    Tracked::follow(store, &crawl, &urls[4])
        .await
        .claim(T0 + 101)
        .await;

    // WHEN the pending ones are listed 5 at a time
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..50 {
        let query = TaskQuery {
            crawl_id: crawl.clone(),
            status: Status::Pending,
            updated_before: None,
            limit: 5,
            cursor,
            part: trawl_core::store::Part::WHOLE,
        };
        let page = store.query(&query).await.unwrap();
        assert!(page.tasks.len() <= 5);
        seen.extend(page.tasks);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }

    // THEN every pending task comes exactly once, oldest update first within each shard (a
    // store that keeps rosters lists a host's rostered tasks in roster order: by creation)
    let mut ids: Vec<&str> = seen.iter().map(|t| t.task_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 22);
    assert_eq!(seen.len(), 22);
    for shard in (0..4).filter(|_| !S::ROSTERS) {
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
    // AND the summaries say what the tasks say
    let summary = seen
        .iter()
        .find(|t| t.task_id == enqueued.task.task_id)
        .unwrap();
    assert_eq!(*summary, (&enqueued.task).into());
    // AND the due bound keeps only tasks updated at or before it
    let query = TaskQuery {
        crawl_id: crawl.clone(),
        status: Status::Pending,
        updated_before: Some(T0 + 9),
        limit: 100,
        cursor: None,
        part: trawl_core::store::Part::WHOLE,
    };
    let due = store.query(&query).await.unwrap();
    assert_eq!(
        due.tasks.len(),
        8,
        "p0..p9 less the enqueued and the claimed one"
    );
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
    assert!(matches!(
        store.query(&bogus).await,
        Err(StoreError::InvalidCursor)
    ));
}

pub async fn a_status_few_hosts_hold_is_listed_whole_over_many_hosts<S: TaskStore + HostStore>(
    store: &S,
) {
    // GIVEN 100 hosts with a fetched page each, and pending pages on three of them (on
    // DynamoDB a pending task is found by walking the hosts, and one page of the walk ends
    // after a bounded number of hosts, with what it found so far)
    let crawl = crawl_id();
    let mut pending = Vec::new();
    for host in 0..100 {
        let name = format!("h{host}.example.com");
        record_host(store, &crawl, &name).await;
        let mut done = Tracked::seed(store, &crawl, &format!("http://{name}/done"), T0).await;
        let lease = done.claim(T0 + 1).await;
        done.finish(&lease, &record("aa", T0 + 1), T0 + 1).await;
        if host % 40 == 39 || host == 0 {
            let url = format!("http://{name}/todo");
            pending.push(
                Tracked::seed(store, &crawl, &url, T0)
                    .await
                    .task
                    .task_id
                    .to_string(),
            );
        }
    }

    // WHEN the pending tasks are listed, as many as 1,000 a page, page after page
    let mut listed = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 50, "the listing does not end");
        let query = TaskQuery {
            crawl_id: crawl.clone(),
            status: Status::Pending,
            updated_before: None,
            limit: 1_000,
            cursor,
            part: trawl_core::store::Part::WHOLE,
        };
        let page = store.query(&query).await.unwrap();
        listed.extend(page.tasks.into_iter().map(|t| t.task_id.to_string()));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }

    // THEN every pending task is listed exactly once, however many pages the walk took
    listed.sort();
    pending.sort();
    assert_eq!(listed, pending, "{pages} page(s)");
}

pub async fn the_parts_of_a_query_hold_every_task_once<S: TaskStore + HostStore>(store: &S) {
    // GIVEN tasks over eight recorded hosts: pending, succeeded (walked through the hosts on
    // DynamoDB) and gone (listed by the status index)
    let crawl = crawl_id();
    let urls: Vec<String> = (0..48)
        .map(|i| format!("http://h{}.example.com/p{i}", i % 8))
        .collect();
    for host in 0..8 {
        record_host(store, &crawl, &format!("h{host}.example.com")).await;
    }
    for url in &urls {
        let mut task = Tracked::seed(store, &crawl, url, T0).await;
        let n: usize = url.rsplit('p').next().unwrap().parse().unwrap();
        match n % 3 {
            0 => {}
            1 => {
                let lease = task.claim(T0 + 1).await;
                task.finish(&lease, &record("aa", T0 + 1), T0 + 1).await;
            }
            _ => {
                let lease = task.claim(T0 + 1).await;
                let missing = Failure::from_http_status(404, None);
                task.fail(&lease, &missing, &policy(), T0 + 1).await;
            }
        }
    }

    // WHEN each status is listed whole, and in each of three parts, 4 tasks a page
    let list = |status: Status, part: trawl_core::store::Part| {
        let crawl = crawl.clone();
        async move {
            let mut ids = Vec::new();
            let mut cursor = None;
            for _ in 0..100 {
                let query = TaskQuery {
                    crawl_id: crawl.clone(),
                    status,
                    updated_before: None,
                    limit: 4,
                    cursor,
                    part,
                };
                let page = store.query(&query).await.unwrap();
                ids.extend(page.tasks.into_iter().map(|t| t.task_id.to_string()));
                cursor = page.cursor;
                if cursor.is_none() {
                    return ids;
                }
            }
            panic!("the listing does not end");
        }
    };
    for status in [Status::Pending, Status::Succeeded, Status::Gone] {
        let whole = list(status, trawl_core::store::Part::WHOLE).await;
        let mut parts = Vec::new();
        for part in trawl_core::store::Part::all(3) {
            parts.push(list(status, part).await);
        }

        // THEN the parts hold the whole listing between them, every task in exactly one
        assert_eq!(whole.len(), 16, "{status:?}");
        let mut joined: Vec<String> = parts.concat();
        joined.sort();
        let mut expected = whole.clone();
        expected.sort();
        assert_eq!(joined, expected, "{status:?}");
    }
}

pub async fn a_purge_deletes_every_task_over_many_hosts_whatever_its_status<
    S: TaskStore + HostStore,
>(
    store: &S,
) {
    // GIVEN 40 hosts (on DynamoDB, more than a page of host keys under each key of the host
    // list: the conformance store reads a few at a time), each with a page succeeded, one
    // pending, one retrying after a 500 and one gone, and another crawl's task
    let crawl = crawl_id();
    let mut expected = 0;
    for host in 0..40 {
        let name = format!("p{host}.example.com");
        record_host(store, &crawl, &name).await;
        let urls: Vec<String> = (0..4).map(|i| format!("http://{name}/t{i}")).collect();
        let tasks: Vec<NewTask> = urls.iter().map(|u| new_task(u)).collect();
        store.seed(&crawl, &tasks, T0).await.unwrap();
        let mut done = Tracked::follow(store, &crawl, &urls[0]).await;
        let lease = done.claim(T0).await;
        done.finish(&lease, &record("a", T0), T0).await;
        let mut failed = Tracked::follow(store, &crawl, &urls[1]).await;
        let lease = failed.claim(T0).await;
        failed
            .fail(&lease, &Failure::from_http_status(500, None), &policy(), T0)
            .await;
        let mut gone = Tracked::follow(store, &crawl, &urls[2]).await;
        let lease = gone.claim(T0).await;
        gone.fail(&lease, &Failure::from_http_status(410, None), &policy(), T0)
            .await;
        expected += urls.len() as u64;
    }
    let other = crawl_id();
    record_host(store, &other, "example.com").await;
    Tracked::seed(store, &other, "http://example.com/other", T0).await;

    // WHEN the crawl's tasks are deleted
    let deleted = store.delete_tasks(&crawl).await.unwrap();

    // THEN every one of them is gone, each counted once, and the other crawl's task stays
    assert_eq!(deleted, expected);
    let counts = store.counts(&crawl).await.unwrap();
    assert!(counts.values().all(|n| *n == 0), "{counts:?}");
    assert!(
        store
            .get(&crawl, &id("http://p7.example.com/t1"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .get(&other, &id("http://example.com/other"))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(store.delete_tasks(&crawl).await.unwrap(), 0, "nothing left");
}

pub async fn counts_per_status<S: TaskStore + HostStore>(store: &S) {
    let crawl = crawl_id();
    record_host(store, &crawl, "example.com").await;
    let urls: Vec<String> = (0..6).map(|i| format!("http://example.com/c{i}")).collect();
    let tasks: Vec<NewTask> = urls.iter().map(|u| new_task(u)).collect();
    store.seed(&crawl, &tasks, T0).await.unwrap();
    let mut done = Tracked::follow(store, &crawl, &urls[0]).await;
    let lease = done.claim(T0).await;
    done.finish(&lease, &record("a", T0), T0).await;
    let mut gone = Tracked::follow(store, &crawl, &urls[1]).await;
    let lease = gone.claim(T0).await;
    gone.fail(&lease, &Failure::from_http_status(410, None), &policy(), T0)
        .await;
    let mut failed = Tracked::follow(store, &crawl, &urls[2]).await;
    let lease = failed.claim(T0).await;
    failed
        .fail(&lease, &Failure::from_http_status(500, None), &policy(), T0)
        .await;
    Tracked::follow(store, &crawl, &urls[3])
        .await
        .claim(T0)
        .await;

    let counts = store.counts(&crawl).await.unwrap();
    let count = |s| counts.get(&s).copied().unwrap_or(0);
    assert_eq!(
        [
            count(Status::Pending),
            count(Status::InProgress),
            count(Status::Failed),
            count(Status::Succeeded),
            count(Status::Gone),
            count(Status::Ignored),
        ],
        [2, 1, 1, 1, 1, 0]
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

pub async fn a_crawl_keeps_the_checkpoint_it_is_given<S: CrawlStore>(store: &S) {
    // GIVEN a crawl, without a checkpoint
    let id = crawl_id();
    let crawl = Crawl::new(id.clone(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    let checkpoint = |c: Option<Crawl>| c.unwrap().checkpoint;
    assert_eq!(checkpoint(store.get_crawl(&id).await.unwrap()), None);
    // WHEN a checkpoint is set, replaced, then cleared, THEN each is what the crawl reads
    for value in [Some("since=1"), Some("since=2"), None] {
        assert!(store.set_checkpoint(&id, value).await.unwrap());
        let stored = store.get_crawl(&id).await.unwrap();
        assert_eq!(checkpoint(stored).as_deref(), value);
    }
    // AND a crawl that does not exist gets none
    let missing = crawl_id();
    assert!(!store.set_checkpoint(&missing, Some("x")).await.unwrap());
    assert_eq!(store.get_crawl(&missing).await.unwrap(), None);
}

pub async fn a_crawl_keeps_the_water_level_its_sweeper_sets<S: CrawlStore>(store: &S) {
    // GIVEN a crawl, without a level
    let id = crawl_id();
    let crawl = Crawl::new(id.clone(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    let level = |c: Option<Crawl>| c.unwrap().level;
    assert_eq!(level(store.get_crawl(&id).await.unwrap()), None);
    // WHEN a level is set, then replaced, THEN each is what the crawl reads
    for value in [
        Level {
            ms: 3_600_000,
            at: T0,
        },
        Level { ms: 7, at: T0 + 1 },
    ] {
        assert!(store.set_level(&id, value).await.unwrap());
        assert_eq!(level(store.get_crawl(&id).await.unwrap()), Some(value));
    }
    // AND a crawl that does not exist gets none
    let missing = crawl_id();
    assert!(
        !store
            .set_level(&missing, Level { ms: 1, at: T0 })
            .await
            .unwrap()
    );
    assert_eq!(store.get_crawl(&missing).await.unwrap(), None);
}

pub async fn reference_misses_add_up<S: CrawlStore>(store: &S) {
    // GIVEN a crawl without reference misses
    let id = crawl_id();
    let crawl = Crawl::new(id.clone(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    let misses = |c: Option<Crawl>| c.unwrap().reference_misses;
    assert_eq!(misses(store.get_crawl(&id).await.unwrap()), 0);
    // WHEN two sweeps add theirs, THEN the crawl reads their sum
    assert!(store.add_reference_misses(&id, 1).await.unwrap());
    assert!(store.add_reference_misses(&id, 2).await.unwrap());
    assert_eq!(misses(store.get_crawl(&id).await.unwrap()), 3);
    // AND a crawl that does not exist is not created by an add
    let missing = crawl_id();
    assert!(!store.add_reference_misses(&missing, 1).await.unwrap());
    assert_eq!(store.get_crawl(&missing).await.unwrap(), None);
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
    assert_eq!(stored, crawl);
    assert!(
        store
            .list_crawls(Some(CrawlState::Running))
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == id)
    );

    // WHEN it completes, THEN it is listed as completed; a recrawl round reopens it
    assert!(store.complete_crawl(&id, 0, "first", T0 + 2).await.unwrap());
    assert!(
        !store
            .complete_crawl(&id, 0, "second", T0 + 3)
            .await
            .unwrap()
    );
    // AND the completer's own repeat (its first answer lost) is still its change
    assert!(store.complete_crawl(&id, 0, "first", T0 + 2).await.unwrap());
    let completed = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        (completed.state, completed.updated_at),
        (CrawlState::Completed, T0 + 2)
    );
    let listed = store
        .list_crawls(Some(CrawlState::Completed))
        .await
        .unwrap();
    assert!(listed.contains(&completed));
    assert!(
        !store
            .list_crawls(Some(CrawlState::Running))
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == id)
    );
    assert!(store.list_crawls(None).await.unwrap().contains(&completed));
    assert!(store.reopen_crawl(&id, T0 + 4).await.unwrap());
    assert!(!store.reopen_crawl(&id, T0 + 5).await.unwrap());
    let reopened = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.generation, reopened.updated_at),
        (CrawlState::Running, 1, T0 + 4)
    );
    assert!(
        !store.complete_crawl(&id, 0, "first", T0 + 6).await.unwrap(),
        "stale generation, even for its completer"
    );
    assert!(store.complete_crawl(&id, 1, "third", T0 + 7).await.unwrap());

    // WHEN it is deleted, THEN it is gone, and its page budget with it
    store.delete_crawl(&id).await.unwrap();
    assert!(store.get_crawl(&id).await.unwrap().is_none());
    assert!(matches!(
        store.reserve_pages(&id, 1, 10).await,
        Err(StoreError::NoSuchCrawl(_))
    ));
    assert!(matches!(
        store.release_pages(&id, 1).await,
        Err(StoreError::NoSuchCrawl(_))
    ));
}

pub async fn every_crawl_write_leaves_the_crawl_the_domain_says<S: CrawlStore>(store: &S) {
    // GIVEN a crawl
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let mut config = CrawlConfig {
        user_agent: "other".into(),
        ..CrawlConfig::default()
    };
    config.scope.max_pages = Some(5);

    // WHEN every crawl rule is written in turn, some of them refused
    let updates = [
        crawl_rules::update_config(&config, T0 + 1),
        crawl_rules::set_checkpoint(Some("since=1")),
        crawl_rules::add_reference_misses(2),
        crawl_rules::claim_delivery("a", T0 + 100, T0 + 2),
        crawl_rules::claim_delivery("b", T0 + 200, T0 + 3),
        crawl_rules::complete(0, "s1", T0 + 4),
        crawl_rules::complete(0, "s2", T0 + 5),
        crawl_rules::complete(0, "s1", T0 + 4),
        crawl_rules::release_delivery("b"),
        crawl_rules::release_delivery("a"),
        crawl_rules::reopen(T0 + 6),
        crawl_rules::reopen(T0 + 7),
        crawl_rules::complete(0, "s1", T0 + 8),
        crawl_rules::reserve_pages(3, 5, request()),
        crawl_rules::reserve_pages(3, 5, request()),
        crawl_rules::release_pages(1),
        crawl_rules::add_calls(&CallTally::from([(Call::S3PutObject, 2)]), request()),
        crawl_rules::set_checkpoint(None),
        crawl_rules::set_level(Level {
            ms: 4_200_000,
            at: T0 + 9,
        }),
        crawl_rules::set_level(Level { ms: 1, at: T0 + 10 }),
    ];
    for update in &updates {
        let before = store.get_crawl(&id).await.unwrap().unwrap();
        let expected = update.apply(&before);
        let applied = store.apply_crawl(&id, update).await.unwrap();

        // THEN the store applied it exactly when the domain's condition held, answering with
        // the crawl it found (or, for a request a store cannot tell the first try of, the
        // crawl it made), and the WHOLE stored crawl is what the domain made of it
        match &applied {
            Applied::Done { before: found } => assert_eq!(found, &before, "{:?}", update.event),
            Applied::Refused { current } => {
                assert_eq!(current.as_ref(), Some(&before), "{:?}", update.event);
            }
            Applied::Landed { current } => {
                assert_eq!(Some(current), expected.as_ref(), "{:?}", update.event);
            }
        }
        assert_eq!(applied.is_done(), expected.is_some(), "{:?}", update.event);
        let stored = store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(stored, expected.unwrap_or(before), "{:?}", update.event);
    }

    // AND a crawl that does not exist is refused every write, and none is created
    let missing = crawl_id();
    for update in &updates {
        // A request names one write of one record: another crawl's is another request.
        let update = CrawlUpdate {
            request: update.request.map(|_| request()),
            ..update.clone()
        };
        let applied = store.apply_crawl(&missing, &update).await.unwrap();
        assert_eq!(
            applied,
            Applied::Refused { current: None },
            "{:?}",
            update.event
        );
    }
    assert_eq!(store.get_crawl(&missing).await.unwrap(), None);
}

/// A request id of its own (`trawl_domain::request`): moto keeps tokens for ten minutes, across
/// tests.
fn request() -> RequestId {
    RequestId(RandomState::new().hash_one(unique("request")))
}

pub async fn an_add_is_applied_once_however_often_its_request_is_tried<
    S: CrawlStore + HostStore,
>(
    store: &S,
) {
    // GIVEN a crawl and a host record
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let host = Host::new("r.example", &HostPolicy::default(), T0);
    let counted = HostCounts::change(None, &host);
    assert!(store.put_host(&id, &host, counted).await.unwrap());

    // WHEN each add of the crawl is tried again with its request, as after a lost answer
    let reserve = crawl_rules::reserve_pages(3, 10, request());
    let calls = crawl_rules::add_calls(&CallTally::from([(Call::S3PutObject, 2)]), request());
    for update in [&reserve, &calls] {
        assert!(store.apply_crawl(&id, update).await.unwrap().is_done());
        let after = store.get_crawl(&id).await.unwrap().unwrap();
        let again = store.apply_crawl(&id, update).await.unwrap();

        // THEN the repeat lands without changing anything, answering the crawl as it stands
        assert_eq!(
            again,
            Applied::Landed {
                current: after.clone()
            },
            "{:?}",
            update.event
        );
        assert_eq!(store.get_crawl(&id).await.unwrap().unwrap(), after);
    }
    let crawl = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        (crawl.pages_reserved, crawl.calls[&Call::S3PutObject]),
        (3, 2)
    );
    // AND another request of the same add is another add, refused when its condition fails
    let more = crawl_rules::reserve_pages(3, 10, request());
    assert!(store.apply_crawl(&id, &more).await.unwrap().is_done());
    let refused = store
        .apply_crawl(&id, &crawl_rules::reserve_pages(5, 10, request()))
        .await
        .unwrap();
    assert!(matches!(refused, Applied::Refused { current: Some(c) } if c.pages_reserved == 6));

    // WHEN an offer to the host is tried again with its request
    let offer = request();
    let first = store.add_seeded(&id, "r.example", 2, offer).await.unwrap();
    let again = store.add_seeded(&id, "r.example", 2, offer).await.unwrap();

    // THEN it is counted once, and the repeat answers the host as it stands
    assert_eq!(first.map(|h| h.offered), Some(2));
    assert_eq!(again.map(|h| (h.offered, h.seeded)), Some((2, 2)));
    let other = store.add_seeded(&id, "r.example", 1, request()).await;
    assert_eq!(other.unwrap().map(|h| h.offered), Some(3));
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
    assert_eq!(
        store.get_crawl(&id).await.unwrap().unwrap().pages_reserved,
        20
    );
}

pub async fn a_call_report_tried_again_after_another_landed_counts_once<S: CrawlStore>(store: &S) {
    // GIVEN a crawl
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let put = Call::S3PutObject;
    let report = |n: u64| crawl_rules::add_calls(&CallTally::from([(put, n)]), request());

    // WHEN report A lands, report B lands, then A is tried again (its answer was lost), and B
    let (a, b) = (report(2), report(5));
    for update in [&a, &b, &a, &b] {
        assert!(store.report_calls(&id, update).await.unwrap());
    }

    // THEN each is counted once
    let calls = || async { store.get_crawl(&id).await.unwrap().unwrap().calls[&put] };
    assert_eq!(calls().await, 7);

    // WHEN reports are made at once, each tried twice, THEN each is counted once
    let many: Vec<CrawlUpdate> = (0..6).map(|_| report(1)).collect();
    let tries = many.iter().chain(many.iter());
    let done = join_all(tries.map(|update| store.report_calls(&id, update))).await;
    assert!(done.into_iter().all(|d| d.unwrap()));
    assert_eq!(calls().await, 13);

    // AND a report to a crawl that does not exist is refused and creates nothing
    let gone = crawl_id();
    assert!(!store.report_calls(&gone, &report(1)).await.unwrap());
    assert!(store.get_crawl(&gone).await.unwrap().is_none());
}

pub async fn call_counts_add_up_atomically<S: CrawlStore>(store: &S) {
    // GIVEN a crawl
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();

    // WHEN 8 invocations add their calls at once
    let share = CallTally::from([(Call::S3PutObject, 1), (Call::SqsSendMessageBatch, 2)]);
    let adds = join_all((0..8).map(|_| store.add_calls(&id, &share))).await;

    // THEN none is lost: the crawl holds the sum, plus each add's own calls when the backend
    // counts its calls (one call of each of its kinds per add: a write)
    assert!(adds.iter().all(Result::is_ok), "{adds:?}");
    let calls = store.get_crawl(&id).await.unwrap().unwrap().calls;
    assert_eq!(calls[&Call::S3PutObject], 8);
    assert_eq!(calls[&Call::SqsSendMessageBatch], 16);
    let own: Vec<_> = calls
        .iter()
        .filter(|(call, _)| !share.contains_key(call))
        .collect();
    assert!(
        own.len() <= 2 && own.iter().all(|(_, n)| **n == 8),
        "{own:?}"
    );
    // AND listing shows the totals as they now stand
    let listed = store.list_crawls(None).await.unwrap();
    assert_eq!(listed.iter().find(|c| c.id == id).unwrap().calls, calls);

    // WHEN calls are added to a crawl that does not exist, THEN nothing is created
    let gone = crawl_id();
    assert!(matches!(
        store.add_calls(&gone, &share).await,
        Err(StoreError::NoSuchCrawl(_))
    ));
    assert!(store.get_crawl(&gone).await.unwrap().is_none());
}

pub async fn completion_happens_exactly_once<S: CrawlStore>(store: &S) {
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let completers: Vec<String> = (0..6).map(|i| format!("sweeper-{i}")).collect();
    let results = join_all(
        completers
            .iter()
            .map(|completer| store.complete_crawl(&id, 0, completer, T0 + 1)),
    )
    .await;
    let winners = results
        .into_iter()
        .map(Result::unwrap)
        .filter(|&won| won)
        .count();
    assert_eq!(winners, 1);
}

pub async fn a_delivery_is_written_by_one_holder_at_a_time<S: CrawlStore>(store: &S) {
    // GIVEN a crawl
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    // WHEN six callers claim its delivery at once
    let holders: Vec<String> = (0..6).map(|i| format!("h{i}")).collect();
    let results = join_all(
        holders
            .iter()
            .map(|h| store.claim_delivery(&id, h, T0 + 1000, T0)),
    )
    .await;
    // THEN exactly one holds it
    let won: Vec<&String> = holders
        .iter()
        .zip(results)
        .filter(|(_, won)| *won.as_ref().unwrap())
        .map(|(h, _)| h)
        .collect();
    assert_eq!(won.len(), 1);
    let (holder, other) = (won[0].as_str(), "other");
    // AND it renews its own lease; another caller waits until the lease expires
    assert!(
        store
            .claim_delivery(&id, holder, T0 + 2000, T0 + 1)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_delivery(&id, other, T0 + 3000, T0 + 1999)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_delivery(&id, other, T0 + 3000, T0 + 2000)
            .await
            .unwrap()
    );
    // AND the holder it was taken from cannot release the new holder's lease
    store.release_delivery(&id, holder).await.unwrap();
    assert!(
        !store
            .claim_delivery(&id, "third", T0 + 4000, T0 + 2001)
            .await
            .unwrap()
    );
    // AND a released lease is free at once
    store.release_delivery(&id, other).await.unwrap();
    assert!(
        store
            .claim_delivery(&id, "third", T0 + 4000, T0 + 2001)
            .await
            .unwrap()
    );
    // AND a crawl that does not exist has no delivery to claim
    let missing = crawl_id();
    assert!(
        !store
            .claim_delivery(&missing, "h", T0 + 1000, T0)
            .await
            .unwrap()
    );
}

pub async fn reschedule_moves_a_task_back_to_pending<S: TaskStore>(store: &S) {
    // GIVEN a succeeded task
    let crawl = crawl_id();
    let url = "http://example.com/recrawl";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;
    let lease = task.claim(T0).await;
    task.finish(&lease, &record("v1", T0), T0).await;

    // WHEN it is rescheduled from `succeeded`, THEN it is pending, once
    assert!(!task.reschedule(&[], T0 + 1).await);
    assert!(
        !task
            .reschedule(&[Status::Failed, Status::Ignored], T0 + 1)
            .await
    );
    assert!(task.reschedule(&[Status::Succeeded], T0 + 2).await);
    assert!(!task.reschedule(&[Status::Succeeded], T0 + 3).await);
    assert_eq!(
        task.task.fetch,
        Some(record("v1", T0)),
        "the previous fetch is kept for conditional GETs"
    );

    // AND a failed task rescheduled by an operator gets its whole retry budget back
    let lease = task.claim(T0 + 6).await;
    task.fail(
        &lease,
        &Failure::from_http_status(503, None),
        &policy(),
        T0 + 6,
    )
    .await;
    assert!(task.reschedule(&[Status::Failed], T0 + 7).await);
    assert_eq!((task.task.retries, task.task.next_attempt_at), (0, None));

    // AND nothing happens to a task that does not exist
    let missing = id("http://example.com/never-seeded");
    assert_eq!(
        store.claim(&crawl, &missing, LEASE_MS, T0).await.unwrap(),
        ClaimOutcome::Rejected(ClaimRejection::Missing)
    );
    assert!(
        !store
            .reschedule(&crawl, &missing, &[Status::Pending], T0)
            .await
            .unwrap()
    );
    assert!(!store.add_stale(&crawl, &missing, "x").await.unwrap());
    assert_eq!(store.get(&crawl, &missing).await.unwrap(), None);
}

/// A fetch record whose page is `length` 100 at `offset` of segment `key`.
fn in_segment(key: &str, offset: u64, at: Millis) -> FetchRecord {
    FetchRecord {
        object_key: Some(key.to_owned()),
        span: Some(Span {
            offset,
            length: 100,
            items: 0,
        }),
        ..record("seg", at)
    }
}

/// Where a task's page is: its segment and offset.
fn place(task: &Task) -> Option<(&str, u64)> {
    let fetch = task.fetch.as_ref()?;
    Some((fetch.object_key.as_deref()?, fetch.span?.offset))
}

/// `transition::repoint` (compaction moving a page to its copy), applied as the store applies it.
async fn repoint<S: TaskStore>(task: &mut Tracked<'_, S>, read: &Task, key: &str) -> bool {
    let update = transition::repoint(read, key, 0).unwrap();
    let applied = task
        .store
        .apply(&read.crawl_id, &read.task_id, &update)
        .await
        .unwrap()
        .is_done();
    task.check(&update, applied).await;
    applied
}

pub async fn a_repoint_lands_on_the_task_as_read_and_fences_a_lease_taken_before<S: TaskStore>(
    store: &S,
) {
    // GIVEN a succeeded task whose page is in segment `a`
    let crawl = crawl_id();
    let mut task = Tracked::seed(store, &crawl, "http://example.com/compacted", T0).await;
    let lease = task.claim(T0).await;
    task.finish(&lease, &in_segment("segs/a", 40, T0), T0).await;

    // WHEN it is repointed, unchanged and unleased since it was read: the page is at its copy,
    // the rest of the record as it was
    let read = task.task.clone();
    assert!(repoint(&mut task, &read, "segs/b").await);
    assert_eq!(place(&task.task), Some(("segs/b", 0)));
    assert_eq!(task.task.updated_at, read.updated_at);
    // AND a second repoint decided on the same read is refused: the task changed since
    assert!(!repoint(&mut task, &read, "segs/c").await);
    assert_eq!(place(&task.task), Some(("segs/b", 0)));

    // WHEN it is leased by a written claim: a repoint of the task as read is refused, and the
    // holder's finish lands
    task.reschedule(&[Status::Succeeded], T0 + 1).await;
    let lease = task.claim(T0 + 2).await;
    let read = task.task.clone();
    assert!(!repoint(&mut task, &read, "segs/c").await);
    let outcome = task
        .finish(&lease, &in_segment("segs/b", 0, T0 + 3), T0 + 3)
        .await;
    assert!(matches!(outcome, FinishOutcome::Finished { .. }));

    // WHEN a host turn takes it before a repoint
    task.reschedule(&[Status::Succeeded], T0 + 4).await;
    let lease = task.claim_in_turn(T0 + 5).await;
    let read = task.task.clone();
    let moved = repoint(&mut task, &read, "segs/c").await;
    let outcome = task
        .finish(&lease, &in_segment("segs/b", 0, T0 + 6), T0 + 6)
        .await;
    match lease.kind {
        // THEN a lease taken as read writes nothing: the repoint lands and moves the token, so
        // the turn's finish with the old place is refused (compaction may delete it)
        LeaseKind::InTurn => {
            assert!(moved);
            assert!(matches!(outcome, FinishOutcome::Rejected { .. }));
            assert_eq!(place(&task.task), Some(("segs/c", 0)));
        }
        // THEN a written one is a lease out: the repoint is refused, the finish lands
        LeaseKind::Written => {
            assert!(!moved);
            assert!(matches!(outcome, FinishOutcome::Finished { .. }));
            assert_eq!(place(&task.task), Some(("segs/b", 0)));
        }
    }
}

pub async fn a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_page_due_now<S: TaskStore>(
    store: &S,
) {
    // GIVEN a task never fetched yet
    let crawl = crawl_id();
    let mut task = Tracked::seed(store, &crawl, "http://example.com/dated", T0).await;
    // THEN a lastmod changes nothing: its first fetch is to come
    assert!(!task.refresh(T0 + 1, T0 + 1).await);

    // GIVEN it was fetched at T0 + 10
    let lease = task.claim(T0 + 10).await;
    task.finish(&lease, &record("v1", T0 + 10), T0 + 10).await;
    // WHEN its sitemap says it changed before, or at, that fetch: nothing to do
    assert!(!task.refresh(T0 + 5, T0 + 20).await);
    assert!(!task.refresh(T0 + 10, T0 + 20).await);
    // WHEN it says it changed after: pending again, due now, the fetch record kept
    assert!(task.refresh(T0 + 15, T0 + 20).await);
    assert_eq!(task.task.status, Status::Pending);
    assert_eq!(task.task.fetch, Some(record("v1", T0 + 10)));
    assert!(
        matches!(
            store.host_tasks(&crawl, "example.com", 10).await.unwrap().first(),
            Some(due) if due.task_id == task.task.task_id
        ),
        "due on its host"
    );
    // AND a refresh decided on a task read before another claim does not hold
    let lease = task.claim(T0 + 30).await;
    task.finish(&lease, &record("v2", T0 + 30), T0 + 30).await;
    let mut read_before = task.task.clone();
    read_before.token -= 1;
    assert!(
        !store.refresh(&read_before, T0 + 40, T0 + 41).await.unwrap(),
        "claimed since it was read"
    );
    assert!(task.refresh(T0 + 40, T0 + 42).await);
}

pub async fn stale_objects_are_handed_to_the_next_finisher<S: TaskStore>(store: &S) {
    // GIVEN a task whose current pointer is md5 `cur`
    let crawl = crawl_id();
    let mut task = Tracked::seed(store, &crawl, "http://example.com/stale", T0).await;
    let lease = task.claim(T0).await;
    task.finish(&lease, &record("cur", T0), T0).await;

    // WHEN rejected writers report their objects: the current pointer is never marked stale,
    // and an object reported twice is listed once
    assert!(!task.add_stale("cur").await);
    assert!(task.add_stale("orphan").await);
    assert!(!task.add_stale("orphan").await);
    assert_eq!(task.task.stale, ["orphan"]);

    // THEN the next finisher receives it (and the record it replaced), and the list is cleared
    task.reschedule(&[Status::Succeeded], T0 + 1).await;
    let lease = task.claim(T0 + 2).await;
    let outcome = task.finish(&lease, &record("next", T0 + 3), T0 + 3).await;
    assert_eq!(
        outcome,
        FinishOutcome::Finished {
            replaced: Some(record("cur", T0)),
            stale: vec!["orphan".to_owned()]
        }
    );
    task.reschedule(&[Status::Succeeded], T0 + 4).await;
    let lease = task.claim(T0 + 5).await;
    let FinishOutcome::Finished { stale, .. } =
        task.finish(&lease, &record("last", T0 + 6), T0 + 6).await
    else {
        panic!()
    };
    assert!(stale.is_empty());
}

pub async fn release_gives_the_task_back<S: TaskStore + HostStore>(store: &S) {
    let crawl = crawl_id();
    record_host(store, &crawl, "example.com").await;
    let url = "http://example.com/released";
    let mut task = Tracked::seed(store, &crawl, url, T0).await;
    let lease = task.claim(T0).await;
    assert!(task.release(&lease, T0 + 1).await);
    assert!(!task.release(&lease, T0 + 2).await, "released once");
    let again = task.claim(T0 + 2).await;
    assert_eq!(
        again.token,
        lease.token + 2,
        "moved by the release and the claim"
    );
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

/// A crawl whose hosts are scheduled with the default politeness.
fn crawl_of(id: &CrawlId) -> Crawl {
    Crawl::new(id.clone(), CrawlConfig::default(), T0)
}

pub async fn a_rostered_task_stays_at_its_place_in_its_hosts_roster_from_seed_to_finish<
    S: TaskStore,
>(
    store: &S,
) {
    // GIVEN four tasks of one host seeded one after another, one of them with a priority
    let crawl = crawl_id();
    let urls: Vec<String> = (0..4).map(|i| format!("http://r.example/{i}")).collect();
    let mut tracked = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let new = NewTask {
            priority: Priority::new(if i == 2 { 5 } else { 0 }).unwrap(),
            ..new_task(url)
        };
        tracked.push(Tracked::seed_new(store, &crawl, new, T0 + i as Millis).await);
    }
    let roster = |after: Option<Place>, limit: u32| {
        let crawl = crawl.clone();
        async move {
            let page = store
                .roster(&crawl, "r.example", after.as_ref(), limit)
                .await
                .unwrap();
            let places: Vec<Place> = page.entries.iter().map(|(p, _)| p.clone()).collect();
            (page, places)
        }
    };
    if !S::ROSTERS {
        // THEN a store without rosters lists every task in its host's due list
        let (page, _) = roster(None, 10).await;
        assert!(page.at_end && page.entries.is_empty());
        assert_eq!(
            store
                .due_tasks(&crawl, "r.example", 10)
                .await
                .unwrap()
                .len(),
            4
        );
        return;
    }
    // THEN the roster holds the three placed by time alone, in creation order, each at its
    // creation time, read a page after another; the one with a priority is in the due list
    let at_places: Vec<Place> = (0..4)
        .map(|i| Place {
            at: T0 + i as Millis,
            task_id: tracked[i].task.task_id.clone(),
        })
        .collect();
    let place = |i: usize| at_places[i].clone();
    let (first, places) = roster(None, 2).await;
    assert_eq!(places, [place(0), place(1)]);
    assert!(
        first
            .entries
            .iter()
            .all(|(_, t)| t.status == Status::Pending)
    );
    assert_eq!(
        first.entries[0].1, tracked[0].task,
        "each task whole, as stored"
    );
    let (rest, places) = roster(Some(place(1)), 10).await;
    assert_eq!(places, [place(3)]);
    assert!(rest.at_end);
    let due = store.due_tasks(&crawl, "r.example", 10).await.unwrap();
    assert_eq!(
        due.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>(),
        [tracked[2].task.task_id.clone()]
    );
    // WHEN the first is claimed in a turn and finished
    let lease = tracked[0].claim_in_turn(T0 + 10).await;
    tracked[0]
        .finish(&lease, &record("m0", T0 + 11), T0 + 11)
        .await;
    // THEN it is still at its place, as it now stands; the host's work lists it (its recrawl)
    // and the rest
    let (page, places) = roster(None, 1).await;
    assert_eq!(places, [place(0)]);
    assert_eq!(page.entries[0].1.status, Status::Succeeded);
    let work = store.host_tasks(&crawl, "r.example", 10).await.unwrap();
    assert_eq!(work.len(), 4, "{work:?}");
    assert_eq!(work[3].task_id, tracked[0].task.task_id);
}

pub async fn due_tasks_are_per_host_in_due_order<S: TaskStore>(store: &S) {
    // GIVEN tasks of two hosts, seeded one after another
    let crawl = crawl_id();
    let a: Vec<String> = (0..4).map(|i| format!("http://a.example/{i}")).collect();
    for (i, url) in a.iter().enumerate() {
        Tracked::seed(store, &crawl, url, T0 + i as Millis).await;
    }
    Tracked::seed(store, &crawl, "http://b.example:8080/x", T0).await;
    let crawl_ref = &crawl;
    let due = |host: &'static str, limit: u32| async move {
        store
            .host_tasks(crawl_ref, host, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|t| (t.url.clone(), t.due_at()))
            .collect::<Vec<_>>()
    };
    // THEN each host sees only its own, in seed order; a port is part of the host
    assert_eq!(
        due("a.example", 10).await,
        a.iter()
            .enumerate()
            .map(|(i, u)| (u.clone(), Some(T0 + i as Millis)))
            .collect::<Vec<_>>()
    );
    assert_eq!(due("a.example", 2).await.len(), 2);
    assert_eq!(
        due("b.example:8080", 10).await,
        [("http://b.example:8080/x".to_owned(), Some(T0))]
    );
    assert!(due("b.example", 10).await.is_empty());

    // WHEN the first fails (due at its next attempt), the second is claimed (due when its
    // lease expires) and the third succeeds (no longer due)
    let mut first = Tracked::follow(store, &crawl, &a[0]).await;
    let lease = first.claim(T0 + 10).await;
    first
        .fail(
            &lease,
            &Failure::from_http_status(500, None),
            &policy(),
            T0 + 10,
        )
        .await;
    let retry_at = first.task.next_attempt_at.unwrap();
    let mut second = Tracked::follow(store, &crawl, &a[1]).await;
    second.claim(T0 + 11).await;
    let mut third = Tracked::follow(store, &crawl, &a[2]).await;
    let lease = third.claim(T0 + 12).await;
    third.finish(&lease, &record("v1", T0 + 12), T0 + 12).await;

    // THEN the host's due order follows: the untouched one now, the failed one at its next
    // attempt, the leased one when its lease expires (should its holder die, the host's next
    // turn takes it over), the finished one when it is fetched again
    let mut want = vec![
        (a[3].clone(), Some(T0 + 3)),
        (a[0].clone(), Some(retry_at)),
        (a[1].clone(), Some(T0 + 11 + LEASE_MS as Millis)),
        (a[2].clone(), Some(T0 + 12 + DAY)),
    ];
    want.sort_by_key(|(_, due)| *due);
    assert_eq!(due("a.example", 10).await, want);
}

pub async fn a_lanes_due_list_holds_its_own_tasks_and_follows_them_out<S: TaskStore>(store: &S) {
    // GIVEN one host's tasks in two lanes and one created without a lane, seeded one after
    // another, the last detail at priority 4, and a task of another host in the same lane
    let crawl = crawl_id();
    let url = |name: &str| format!("http://l.example/{name}");
    let mut seeded = Vec::new();
    for (i, (name, lane, priority)) in [
        ("d1", Some("details"), 0),
        ("l1", Some("listings"), 0),
        ("none", None, 0),
        ("d2", Some("details"), 0),
        ("l2", Some("listings"), 0),
        ("d3", Some("details"), 4),
    ]
    .into_iter()
    .enumerate()
    {
        let new = NewTask {
            lane: lane.map(str::to_owned),
            priority: Priority::new(priority).unwrap(),
            ..new_task(&url(name))
        };
        seeded.push(Tracked::seed_new(store, &crawl, new, T0 + i as Millis).await);
    }
    let other = NewTask {
        lane: Some("details".to_owned()),
        ..new_task("http://m.example/d")
    };
    Tracked::seed_new(store, &crawl, other, T0).await;
    let crawl_ref = &crawl;
    let lane = |lane: &'static str, limit: u32| async move {
        store
            .due_in_lane(crawl_ref, "l.example", lane, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.url.rsplit('/').next().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    // THEN a lane's due list holds its host's tasks of that lane only, in due order (a pending
    // task moved earlier by its priority), up to the limit; a task keeps its lane as stored;
    // the host's own due list still holds them all
    assert_eq!(lane("details", 10).await, ["d3", "d1", "d2"]);
    assert_eq!(lane("details", 2).await, ["d3", "d1"]);
    assert_eq!(lane("listings", 10).await, ["l1", "l2"]);
    assert!(lane("default", 10).await.is_empty());
    assert_eq!(seeded[0].task.lane.as_deref(), Some("details"));
    assert_eq!(seeded[2].task.lane, None);
    let read = store
        .get(&crawl, &seeded[1].task.task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.lane.as_deref(), Some("listings"));
    assert_eq!(
        store
            .host_tasks(&crawl, "l.example", 10)
            .await
            .unwrap()
            .len(),
        6
    );

    // WHEN a listing is fetched (no longer due) and a detail fails (due at its next attempt)
    let [d1, l1, ..] = &mut seeded[..] else {
        unreachable!()
    };
    let lease = l1.claim(T0 + 10).await;
    l1.finish(&lease, &record("v1", T0 + 10), T0 + 10).await;
    let lease = d1.claim(T0 + 11).await;
    d1.fail(
        &lease,
        &Failure::from_http_status(500, None),
        &policy(),
        T0 + 11,
    )
    .await;
    // THEN the lanes follow: the fetched listing waits for its recrawl, the failed detail
    // for its retry, behind the pending ones
    assert_eq!(lane("listings", 10).await, ["l2", "l1"]);
    assert_eq!(lane("details", 10).await, ["d3", "d2", "d1"]);
}

pub async fn a_hosts_pending_tasks_are_due_highest_priority_first<S: TaskStore>(store: &S) {
    // GIVEN one host's tasks seeded one after another at priorities 0, 5, 2, 9 and 0
    let crawl = crawl_id();
    let url = |name: &str| format!("http://p.example/{name}");
    let mut seeded = Vec::new();
    for (i, (name, priority)) in [
        ("low", 0),
        ("high", 5),
        ("mid", 2),
        ("urgent", 9),
        ("last", 0),
    ]
    .into_iter()
    .enumerate()
    {
        let new = NewTask {
            priority: Priority::new(priority).unwrap(),
            ..new_task(&url(name))
        };
        seeded.push(Tracked::seed_new(store, &crawl, new, T0 + i as Millis).await);
    }
    let crawl_ref = &crawl;
    let due = || async move {
        store
            .host_tasks(crawl_ref, "p.example", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|t| {
                let name = t.url.rsplit('/').next().unwrap_or_default().to_owned();
                (name, t.priority.get())
            })
            .collect::<Vec<_>>()
    };
    let order = |names: &[(&str, u8)]| {
        names
            .iter()
            .map(|(n, p)| ((*n).to_owned(), *p))
            .collect::<Vec<_>>()
    };
    // THEN its due list holds them highest priority first, then in seed order, each summary
    // with its priority
    assert_eq!(
        due().await,
        order(&[
            ("urgent", 9),
            ("high", 5),
            ("mid", 2),
            ("low", 0),
            ("last", 0)
        ])
    );

    // WHEN the most urgent fails (a retry at its backoff) and a high one is claimed and released
    let [_, high, _, urgent, _] = &mut seeded[..] else {
        unreachable!()
    };
    let retry_at = urgent.fails_once_with_500(T0 + 10).await;
    let lease = high.claim(T0 + 11).await;
    assert!(high.release(&lease, T0 + 12).await);

    // THEN the retry waits at its time, behind every pending task however low (it is not due),
    // and the released task is back at its priority's place
    assert!(retry_at > T0 + 12);
    assert_eq!(
        due().await,
        order(&[
            ("high", 5),
            ("mid", 2),
            ("low", 0),
            ("last", 0),
            ("urgent", 0)
        ])
    );

    // WHEN the operator retries it (pending again), THEN its priority places it first again;
    // its stored task keeps it through every transition
    assert!(urgent.reschedule(&[Status::Failed], T0 + 13).await);
    assert_eq!(urgent.task.priority.get(), 9);
    assert_eq!(due().await[0], ("urgent".to_owned(), 9));

    // WHEN the high one is fetched (due again in a day) and then reset (pending again)
    let lease = high.claim(T0 + 14).await;
    high.finish(&lease, &record("h1", T0 + 14), T0 + 14).await;
    assert_eq!(due().await.last(), Some(&("high".to_owned(), 0)));
    let fetched = high.task.clone();
    assert!(store.reset(&fetched, T0 + 15).await.unwrap());
    high.check(&transition::reset(&fetched, T0 + 15), true)
        .await;

    // THEN it is back ahead of the lower priorities
    assert_eq!(
        due().await,
        order(&[
            ("urgent", 9),
            ("high", 5),
            ("mid", 2),
            ("low", 0),
            ("last", 0)
        ])
    );
}

pub async fn host_records_are_written_only_over_the_version_read<S: HostStore>(store: &S) {
    // GIVEN a new host record
    let crawl = crawl_of(&crawl_id());
    let policy = crawl.config.politeness.host_policy("h.example");
    let new = Host::new("h.example", &policy, T0);
    assert_eq!(store.get_host(&crawl.id, "h.example").await.unwrap(), None);

    // WHEN it is created, THEN only once, at version 1, as written
    let created = HostCounts::change(None, &new);
    assert!(store.put_host(&crawl.id, &new, created).await.unwrap());
    assert!(
        !store.put_host(&crawl.id, &new, created).await.unwrap(),
        "exists already"
    );
    let stored = store
        .get_host(&crawl.id, "h.example")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored,
        Host {
            version: 1,
            ..new.clone()
        }
    );

    // WHEN two writers read version 1 and both write, THEN only the first one lands
    let (seeded, _) = stored.note_seeded(3, T0 + 1);
    let woken = HostCounts::change(Some(&stored), &seeded);
    assert!(store.put_host(&crawl.id, &seeded, woken).await.unwrap());
    let (late, _) = stored.note_seeded(5, T0 + 2);
    assert!(!store.put_host(&crawl.id, &late, woken).await.unwrap());
    let stored = store
        .get_host(&crawl.id, "h.example")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored,
        Host {
            version: 2,
            ..seeded
        }
    );

    // AND hosts are listed a page at a time, every one once, and deleted per crawl
    for i in 0..5 {
        let name = format!("h{i}.example");
        assert!(
            store
                .put_host(&crawl.id, &Host::new(name, &policy, T0), created)
                .await
                .unwrap()
        );
    }
    let other = crawl_of(&crawl_id());
    assert!(store.put_host(&other.id, &new, created).await.unwrap());
    let mut names = Vec::new();
    let mut cursor = None;
    for _ in 0..10 {
        let page = store.list_hosts(&crawl.id, cursor, 2).await.unwrap();
        assert!(page.hosts.len() <= 2);
        names.extend(page.hosts.into_iter().map(|h| h.name));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "h.example",
            "h0.example",
            "h1.example",
            "h2.example",
            "h3.example",
            "h4.example"
        ]
    );
    assert_eq!(store.delete_hosts(&crawl.id).await.unwrap(), 6);
    assert!(
        store
            .list_hosts(&crawl.id, None, 10)
            .await
            .unwrap()
            .hosts
            .is_empty()
    );
    assert!(
        store
            .get_host(&other.id, "h.example")
            .await
            .unwrap()
            .is_some()
    );
}

pub async fn a_page_of_hundreds_of_hosts_holds_every_record_as_written<S: HostStore>(store: &S) {
    // GIVEN 250 host records of a crawl, each with a count of its own (on DynamoDB a page's
    // records are read 100 keys a BatchGetItem, so a page of 250 takes three)
    let crawl = crawl_of(&crawl_id());
    let mut written = Vec::new();
    for i in 0..250u64 {
        let name = format!("h{i}.example");
        let policy = crawl.config.politeness.host_policy(&name);
        let (host, _) = Host::new(name, &policy, T0).note_seeded(i + 1, T0);
        let created = HostCounts::change(None, &host);
        assert!(store.put_host(&crawl.id, &host, created).await.unwrap());
        written.push(Host { version: 1, ..host });
    }
    written.sort_by(|a, b| a.name.cmp(&b.name));

    // WHEN they are listed in one page of up to 1,000
    let page = store.list_hosts(&crawl.id, None, 1_000).await.unwrap();

    // THEN it holds every record once, as written, and is the last page
    assert!(page.cursor.is_none());
    let mut listed = page.hosts;
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(listed, written);

    // AND pages of 100 hold every one once too
    let mut names = Vec::new();
    let mut cursor = None;
    for _ in 0..10 {
        let page = store.list_hosts(&crawl.id, cursor, 100).await.unwrap();
        assert!(page.hosts.len() <= 100);
        names.extend(page.hosts.into_iter().map(|h| h.name));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    names.sort();
    let all: Vec<String> = written.into_iter().map(|h| h.name).collect();
    assert_eq!(names, all);
}

pub async fn a_zombie_turn_holder_cannot_hand_back_over_a_newer_turn<S: HostStore>(store: &S) {
    // GIVEN a host whose turn was claimed by a worker that then stalled past the turn's end,
    // and taken over by another worker
    let crawl = crawl_of(&crawl_id());
    let turn_ms = 30_000;
    let claim = |now: Millis| {
        update_host(store, &crawl, "z.example", now, move |h| {
            match h.claim_turn(now, turn_ms) {
                Ok((next, turn)) => (Some(next), Some(turn)),
                Err(_) => (None, None),
            }
        })
    };
    let (_, zombie) = claim(T0).await.unwrap().unwrap();
    let zombie = zombie.unwrap();
    let (_, busy) = claim(T0 + 1_000).await.unwrap().unwrap();
    assert_eq!(busy, None, "one turn at a time");
    let (_, newer) = claim(T0 + 30_000).await.unwrap().unwrap();
    let newer = newer.unwrap();
    assert_eq!((zombie.token, newer.token), (1, 2));

    // WHEN the zombie hands the host back, THEN nothing is written: the newer turn stands
    let hand_back = |turn: Turn, now: Millis| {
        update_host(store, &crawl, "z.example", now, move |h| {
            match h.hand_back(&turn, Some(NextWork::Task(now)), Some(h.seeded), 0, 0, now) {
                Some((next, visible_at)) => (Some(next), visible_at),
                None => (None, None),
            }
        })
    };
    let before = store
        .get_host(&crawl.id, "z.example")
        .await
        .unwrap()
        .unwrap();
    let (after, sent) = hand_back(zombie, T0 + 31_000).await.unwrap().unwrap();
    assert_eq!((after.clone(), sent), (before.clone(), None));
    assert_eq!(
        store.get_host(&crawl.id, "z.example").await.unwrap(),
        Some(before)
    );
    // AND the holder of the newer turn hands it back, with its next turn queued
    let (back, sent) = hand_back(newer, T0 + 32_000).await.unwrap().unwrap();
    assert_eq!((back.turn_until, sent), (None, Some(T0 + 32_000)));
}

pub async fn known_tasks_are_told_apart_in_one_batched_read<S: TaskStore>(store: &S) {
    // GIVEN two seeded tasks, and 150 links (more than one BatchGetItem holds), two of them
    // those tasks, one repeated, and one task of another crawl
    let crawl = crawl_id();
    let other = crawl_id();
    let (a, b) = ("http://k.example/a", "http://k.example/b");
    store
        .seed(&crawl, &[new_task(a), new_task(b)], T0)
        .await
        .unwrap();
    store
        .seed(&other, &[new_task("http://k.example/x")], T0)
        .await
        .unwrap();
    let mut links: Vec<TaskId> = (0..146)
        .map(|i| id(&format!("http://k.example/new/{i}")))
        .collect();
    links.insert(3, id(a));
    links.insert(120, id(b));
    links.push(id(a));
    links.push(id("http://k.example/x"));

    // WHEN the crawl asks which it knows
    let known = store.known(&crawl, &links).await.unwrap();

    // THEN exactly its own two tasks, wherever they stand in the list, every time
    let positions: Vec<usize> = known
        .iter()
        .enumerate()
        .filter_map(|(i, k)| k.then_some(i))
        .collect();
    assert_eq!(known.len(), links.len());
    assert_eq!(positions, [3, 120, 148]);
    assert!(store.known(&crawl, &[]).await.unwrap().is_empty());
}

pub async fn offers_leave_the_version_alone_and_no_write_overwrites_them<S: HostStore>(store: &S) {
    // GIVEN a host whose turn is running
    let crawl = crawl_of(&crawl_id());
    let policy = crawl.config.politeness.host_policy("o.example");
    async fn read<S: HostStore>(store: &S, crawl: &CrawlId) -> Host {
        store.get_host(crawl, "o.example").await.unwrap().unwrap()
    }
    let new = Host::new("o.example", &policy, T0);
    assert!(
        store
            .put_host(&crawl.id, &new, HostCounts::change(None, &new))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .add_seeded(&crawl.id, "none.example", 1, request())
            .await
            .unwrap(),
        None
    );
    let created = read(store, &crawl.id).await;
    let (claimed, turn) = created.claim_turn(T0, 30_000).unwrap();
    let change = HostCounts::change(Some(&created), &claimed);
    assert!(store.put_host(&crawl.id, &claimed, change).await.unwrap());
    let at_claim = read(store, &crawl.id).await;

    // WHEN other workers offer it 3 URLs
    let offered = store
        .add_seeded(&crawl.id, "o.example", 3, request())
        .await
        .unwrap()
        .unwrap();

    // THEN its version is the one the turn read, and the offers are counted
    assert_eq!(offered.version, at_claim.version);
    assert_eq!(
        (offered.seeded, offered.offered),
        (at_claim.seeded + 3, at_claim.offered + 3)
    );

    // WHEN the turn hands the host back, with work left, over the record it read before
    let (back, _) = at_claim
        .hand_back(
            &turn,
            Some(NextWork::Task(T0 + 10)),
            Some(at_claim.seeded),
            2,
            0,
            T0 + 10,
        )
        .unwrap();
    assert!(back.queued_for.is_some());
    let change = HostCounts::change(Some(&at_claim), &back);
    assert!(store.put_host(&crawl.id, &back, change).await.unwrap());

    // THEN the write lands and keeps the offers made since the read
    let stored = read(store, &crawl.id).await;
    assert_eq!(stored.version, at_claim.version + 1);
    assert_eq!((stored.seeded, stored.offered), (back.seeded + 3, 3));

    // WHEN a later turn would leave the host idle over a record read before another offer
    let (claimed, turn) = stored.claim_turn(T0 + 20, 30_000).unwrap();
    let change = HostCounts::change(Some(&stored), &claimed);
    assert!(store.put_host(&crawl.id, &claimed, change).await.unwrap());
    let at_claim = read(store, &crawl.id).await;
    store
        .add_seeded(&crawl.id, "o.example", 1, request())
        .await
        .unwrap();
    let (idle, _) = at_claim
        .hand_back(&turn, None, Some(at_claim.seeded), 0, 0, T0 + 30)
        .unwrap();
    assert!(idle.waits_for_offers());

    // THEN that write is refused, and decided again over the offer it missed, the host gets
    // another turn
    let counts = store.host_counts(&crawl.id).await.unwrap();
    let change = HostCounts::change(Some(&at_claim), &idle);
    assert!(!store.put_host(&crawl.id, &idle, change).await.unwrap());
    assert_eq!(store.host_counts(&crawl.id).await.unwrap(), counts);
    let now = read(store, &crawl.id).await;
    let (again, visible_at) = now
        .hand_back(&turn, None, Some(at_claim.seeded), 0, 0, T0 + 30)
        .unwrap();
    assert_eq!(visible_at, Some(T0 + 30));
    let change = HostCounts::change(Some(&now), &again);
    assert!(store.put_host(&crawl.id, &again, change).await.unwrap());
    let stored = read(store, &crawl.id).await;
    assert_eq!((stored.seeded, stored.offered), (at_claim.seeded + 1, 4));
    assert_eq!(stored.queued_for, Some(T0 + 30));
}

pub async fn host_counts_are_kept_by_the_host_writes_that_land<S: HostStore + CrawlStore>(
    store: &S,
) {
    // GIVEN a crawl created with host counts, and one that never was
    let crawl = crawl_of(&crawl_id());
    store.create_crawl(&crawl).await.unwrap();
    let zero = HostCounts::default();
    assert_eq!(store.host_counts(&crawl.id).await.unwrap(), Some(zero));
    let unknown = crawl_id();
    assert_eq!(
        store.host_counts(&unknown).await.unwrap(),
        None,
        "not counted"
    );
    let counts = || async { store.host_counts(&crawl.id).await.unwrap().unwrap() };

    // WHEN 20 hosts are woken by seeds (created open), across every shard
    let names: Vec<String> = (0..20).map(|i| format!("h{i}.example")).collect();
    for name in &names {
        update_host(store, &crawl, name, T0, |h| {
            (Some(h.note_seeded(1, T0).0), ())
        })
        .await
        .unwrap();
    }
    // THEN they are counted, created and open
    assert_eq!(
        counts().await,
        HostCounts {
            hosts: 20,
            open: 20
        }
    );

    // WHEN two writers race over one version of a host going idle, THEN one write lands and
    // is counted once
    let first = &names[0];
    let stored = store.get_host(&crawl.id, first).await.unwrap().unwrap();
    let idle = Host {
        queued_for: None,
        done: stored.seeded,
        ..stored.clone()
    };
    let change = HostCounts::change(Some(&stored), &idle);
    assert_eq!(change, HostCounts { hosts: 0, open: -1 });
    let writes = join_all((0..4).map(|_| store.put_host(&crawl.id, &idle, change))).await;
    let landed = writes.into_iter().filter(|w| *w.as_ref().unwrap()).count();
    assert_eq!(landed, 1, "one writer over version {}", stored.version);
    assert_eq!(
        counts().await,
        HostCounts {
            hosts: 20,
            open: 19
        }
    );

    // AND a host taking a turn stays open; handing it back with nothing left, it is idle
    let mut open = 19;
    for name in &names[1..] {
        let claim = |h: &Host| match h.claim_turn(T0 + 1, 60_000) {
            Ok((next, turn)) => (Some(next), Some(turn)),
            Err(_) => (None, None),
        };
        let (_, turn) = update_host(store, &crawl, name, T0 + 1, claim)
            .await
            .unwrap()
            .unwrap();
        let turn = turn.unwrap();
        assert_eq!(counts().await.open, open, "a turn running is open");
        update_host(store, &crawl, name, T0 + 2, |h| {
            let back = h.hand_back(&turn, None, Some(h.seeded), 0, 0, T0 + 2);
            (back.map(|(next, _)| next), ())
        })
        .await
        .unwrap();
        open -= 1;
        assert_eq!(counts().await.open, open);
    }
    assert_eq!(counts().await, HostCounts { hosts: 20, open: 0 });
    assert!(counts().await.all_idle());

    // AND the counts go with the crawl's hosts
    assert_eq!(store.delete_hosts(&crawl.id).await.unwrap(), 20);
    assert_eq!(store.host_counts(&crawl.id).await.unwrap(), None);
}
