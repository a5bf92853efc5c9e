//! The sweeper on DynamoDB + SQS (moto) and on the embedded backend: it re-issues the turns of
//! hosts whose message is lost (expired turns, lost sends, due recrawls), and only those,
//! reading the status index and the host records; it spreads a large sweep over invocations;
//! it completes a crawl exactly once, with one notice.

use crate::seeding::crawl_queue;
use crate::support::{self, moto, unique};
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_aws::sqs::SqsQueue;
use trawl_core::app::{App, Store, Unwired};
use trawl_core::frontier::{seed_tasks, update_host};
use trawl_core::queue::local::LocalQueue;
use trawl_core::queue::{WorkMessage, WorkQueue};
use trawl_core::store::{ClaimOutcome, CrawlStore, HostStore, TaskRecords, TaskStore, TaskSummary};
use trawl_core::sweep::{
    CompletionNotice, LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::host::Turn;
use trawl_domain::retry::Failure;
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{ErrorKind, FetchRecord, Lease, Millis, NewTask, Status};
use trawl_embedded::sqlite::SqliteStore;
use trawl_faults::ports::{CrashMode, FaultyStore, PortFaults, PortMix};

const T0: Millis = 1_700_000_000_000;
const HOUR: u64 = 3_600_000;

fn config() -> CrawlConfig {
    let mut config = CrawlConfig {
        lease_ms: 60_000,
        ..CrawlConfig::default()
    };
    config.retry.base_delay_ms = 2_000;
    config.retry.max_delay_ms = 10_000;
    config.recrawl.interval_ms = Some(HOUR);
    config
}

async fn create<S: CrawlStore>(store: &S, config: CrawlConfig) -> Crawl {
    let id = CrawlId::parse(&unique("sweep")).unwrap();
    store
        .create_crawl(&Crawl::new(id, config, T0))
        .await
        .unwrap()
        .0
}

async fn succeed_leased<S: TaskStore>(store: &S, crawl: &Crawl, lease: &Lease, at: Millis) {
    let record = FetchRecord {
        http_status: 200,
        fetched_at: at,
        next_fetch_at: crawl.config.recrawl.interval_ms.map(|ms| at + ms as Millis),
        ..FetchRecord::default()
    };
    store.finish(lease, &record, at).await.unwrap();
}

fn budget() -> SweepBudget {
    SweepBudget::new(50, Duration::from_secs(60))
}

/// The URL `path` of a host of its own, `{path}.example.com`.
fn host_url(path: &str) -> CanonicalUrl {
    CanonicalUrl::parse(&format!("http://{path}.example.com/")).unwrap()
}

/// Adds `path`'s URL the way the seeder does: its host is told first, and woken.
async fn add<S: Store>(store: &S, crawl: &Crawl, path: &str, at: Millis) {
    let task = NewTask {
        lane: None,
        priority: Default::default(),
        url: host_url(path),
        depth: 0,
        parent: None,
        data: None,
    };
    let (report, _messages) = seed_tasks(store, crawl, vec![task], at).await.unwrap();
    assert_eq!(report.accepted, 1);
}

/// A worker takes `path`'s host's turn at `at`, and its task.
async fn take_turn<S: TaskStore + HostStore>(
    store: &S,
    crawl: &Crawl,
    path: &str,
    at: Millis,
) -> (Turn, Lease) {
    let name = host_url(path).host_key();
    let turn = update_host(store, crawl, &name, at, |h| {
        match h.claim_turn(at, crawl.config.lease_ms) {
            Ok((next, turn)) => (Some(next), Some(turn)),
            Err(_) => (None, None),
        }
    })
    .await
    .unwrap()
    .and_then(|(_, turn)| turn)
    .expect("the host's turn");
    let lease = match store
        .claim(
            &crawl.id,
            &host_url(path).task_id(),
            crawl.config.lease_ms,
            at,
        )
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { lease, .. } => lease,
        other => panic!("claim of {path} refused: {other:?}"),
    };
    (turn, lease)
}

/// A worker takes `path`'s host's turn at `at`, fetches its page and hands the host back.
async fn succeed_in_turn<S: TaskStore + HostStore>(
    store: &S,
    crawl: &Crawl,
    path: &str,
    at: Millis,
) {
    let (turn, lease) = take_turn(store, crawl, path, at).await;
    succeed_leased(store, crawl, &lease, at).await;
    hand_back(store, crawl, path, turn, at).await;
}

/// The worker's turn ends at `at`; the host's next turn is queued when there is work left.
async fn hand_back<S: TaskStore + HostStore>(
    store: &S,
    crawl: &Crawl,
    path: &str,
    turn: Turn,
    at: Millis,
) {
    let name = host_url(path).host_key();
    let next = store.host_tasks(&crawl.id, &name, 1).await.unwrap();
    let next_work = next.first().and_then(TaskSummary::next_work);
    update_host(store, crawl, &name, at, |h| {
        match h.hand_back(&turn, next_work, Some(h.seeded), 0, 0, at) {
            Some((next, _)) => (Some(next), ()),
            None => (None, ()),
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_sweeper_reissues_the_turns_of_hosts_whose_message_is_lost_and_only_those() {
    // GIVEN hosts of one crawl in every state a host can be in, each with one task
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let crawl = create(&store, config()).await;
    let now = T0 + 4 * HOUR as Millis;
    for path in [
        "crashed",
        "crawling",
        "lost",
        "retrying",
        "recrawl-due",
        "recrawl-later",
        "dead",
    ] {
        add(&store, &crawl, path, T0).await;
    }
    add(&store, &crawl, "just-queued", now - 1_000).await;
    // crashed: its worker died mid-turn, long ago (turn and lease expired, message consumed)
    take_turn(&store, &crawl, "crashed", T0 + 1_000).await;
    // crawling: a live turn
    take_turn(&store, &crawl, "crawling", now - 1_000).await;
    // lost: queued at T0, never received (the send failed, or it went to the dead-letter queue)
    // retrying: failed 20 s ago, its next turn queued for the retry, which is due
    let (turn, lease) = take_turn(&store, &crawl, "retrying", now - 20_000).await;
    let failure = Failure::new(ErrorKind::ServerError, "HTTP 500");
    store
        .fail(
            &lease,
            &failure,
            &crawl.config.retry,
            &Revisit::ONCE,
            now - 20_000,
        )
        .await
        .unwrap();
    hand_back(&store, &crawl, "retrying", turn, now - 20_000).await;
    // recrawl-due / -later: fetched, idle; one's next fetch is due
    for (path, at) in [("recrawl-due", T0 + 2_000), ("recrawl-later", now - 1_000)] {
        let (turn, lease) = take_turn(&store, &crawl, path, at).await;
        succeed_leased(&store, &crawl, &lease, at).await;
        hand_back(&store, &crawl, path, turn, at).await;
    }
    // dead: gone (404), idle
    let (turn, lease) = take_turn(&store, &crawl, "dead", T0 + 3_000).await;
    let gone = Failure::new(ErrorKind::NotFound, "HTTP 404");
    store
        .fail(
            &lease,
            &gone,
            &crawl.config.retry,
            &Revisit::ONCE,
            T0 + 3_000,
        )
        .await
        .unwrap();
    hand_back(&store, &crawl, "dead", turn, T0 + 3_000).await;
    calls.reset();

    // WHEN the sweeper runs
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        trigger.clone(),
        SweepOptions::new(),
    );
    let (store, queue) = (&sweeper.store, &sweeper.queue);
    let report = sweeper
        .sweep_crawl(&crawl, now, &mut budget())
        .await
        .unwrap();

    // THEN it re-issued the turns of exactly the crashed, lost and recrawl-due hosts: the
    // retrying host's message is on its way, the crawling one is busy, the rest idle
    // (the crashed host's turn expired: its message is lost, and its task, whose lease expired,
    // is due work the re-issued turn takes over)
    let found = (report.due_retries, report.lost_messages, report.recrawls);
    assert_eq!(found, (0, 2, 1), "{report:?}");
    assert_eq!(report.hosts_requeued, 3);
    // Read: the failed task (due, but its host is served); the hosts' records, whose turns and
    // wake-up times say which hosts to re-issue. Nothing else.
    assert_eq!(report.tasks_read, 1, "{report:?}");
    assert_eq!(report.hosts_read, 8, "{report:?}");
    assert!(!report.unfinished && !report.completed);
    assert_eq!(
        calls.get(Call::DynamoUpdateItem) + calls.get(Call::DynamoTransactWriteItems),
        3 + 1,
        "one host write per re-issued turn (an update: offers stay as they stand), and the \
         sweep's calls added to its crawl"
    );
    assert_eq!(
        calls.get(Call::DynamoTransactWriteItems),
        1,
        "the idle recrawl-due host goes open: written with the host counts (the sweep's calls \
         are added to a report lane, an update)"
    );
    // The 8 records listed (one BatchGetItem), the retrying task's host and the scan's stored
    // position: a re-issued host is decided over as listed, without a read of its own (the
    // sweep's calls are added without a read).
    assert_eq!(calls.get(Call::DynamoGetItem), 2, "{report:?}");
    assert_eq!(calls.get(Call::DynamoBatchGetItem), 1, "{report:?}");
    let mut sent = Vec::new();
    for _ in 0..10 {
        let batch = queue.receive(10, 100).await.unwrap();
        if batch.is_empty() && sent.len() >= 3 {
            break;
        }
        for m in &batch {
            let message: WorkMessage = serde_json::from_str(&m.body).unwrap();
            sent.push(message.host);
        }
        queue
            .ack(&batch.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    sent.sort();
    assert_eq!(
        sent,
        ["crashed", "lost", "recrawl-due"].map(|p| host_url(p).host_key())
    );
    // The recrawl costs no write before its host's turn: the page stays current, and due.
    let due = store
        .get(&crawl.id, &host_url("recrawl-due").task_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(due.status, Status::Succeeded);
    assert!(due.due_at().is_some_and(|at| at <= now), "{due:?}");

    // AND the next pass re-issues nothing: every host it woke has its message out now
    let again = sweeper
        .sweep_crawl(&crawl, now + 1, &mut budget())
        .await
        .unwrap();
    assert_eq!(
        (again.hosts_requeued, again.enqueue_failed),
        (0, 0),
        "{again:?}"
    );
    assert!(!again.completed);
    assert!(trigger.take().is_empty());
}

#[tokio::test]
async fn a_large_sweep_spreads_over_invocations() {
    // GIVEN 45 hosts whose messages were lost, on the embedded backend
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let crawl = create(&store, config()).await;
    for i in 0..45 {
        add(&store, &crawl, &format!("h{i:02}"), T0).await;
    }
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        trigger.clone(),
        SweepOptions { page_size: 10 },
    );
    let queue = &sweeper.queue;
    // WHEN invocations of four pages each sweep it
    let now = T0 + 120_000;
    let mut lost = Vec::new();
    for i in 0..10 {
        let mut budget = SweepBudget::new(4, Duration::from_secs(60));
        budget.lost_after_ms = Some(60_000);
        let report = sweeper
            .sweep_crawl(&crawl, now + i, &mut budget)
            .await
            .unwrap();
        lost.push(report.lost_messages);
        if !report.unfinished {
            break;
        }
    }
    // THEN each reads the (empty) window of failed tasks and three pages of ten hosts; hosts
    // re-issued stay out of the next invocation's count, and the last one finishes the scan
    assert_eq!(lost.iter().sum::<u64>(), 45, "{lost:?}");
    assert_eq!(lost[..2], [30, 15], "{lost:?}");
    assert_eq!(queue.len(), 45);
}

#[tokio::test]
async fn completion_happens_once_and_a_recrawl_round_completes_again() {
    // Single-threaded moto: conditional writes are atomic there, as on DynamoDB.
    let endpoint = &moto::single_threaded().endpoint;
    let clients = support::clients(endpoint).await;
    let made = trawl_aws::stack::create_stack(&clients, &unique("sweep"))
        .await
        .unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = trawl_aws::dynamodb::DynamoStore::new(
        clients.dynamodb.clone(),
        &made.table,
        2,
        calls.clone(),
    );
    let queue = SqsQueue::new(clients.sqs.clone(), &made.queue_url, calls.clone());
    let trigger =
        SqsDeliveryTrigger::new(clients.sqs.clone(), &made.delivery_queue_url, calls.clone());
    let crawl = create(&store, config()).await;
    for path in ["a", "b", "c"] {
        add(&store, &crawl, path, T0).await;
    }
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        Arc::new(trigger),
        SweepOptions::new(),
    );
    let store = &sweeper.store;
    // Work left: no completion.
    let early = sweeper
        .sweep_crawl(&crawl, T0 + 10, &mut budget())
        .await
        .unwrap();
    assert!(!early.completed);
    for path in ["a", "b", "c"] {
        succeed_in_turn(store, &crawl, path, T0 + 20).await;
    }
    let now = T0 + 30;
    let (mut one, mut two) = (budget(), budget());
    let (first, second) = tokio::join!(
        sweeper.sweep_crawl(&crawl, now, &mut one),
        sweeper.sweep_crawl(&crawl, now, &mut two),
    );
    let third = sweeper.sweep_all(now + 1, &mut budget()).await.unwrap();
    let completions = [first.unwrap(), second.unwrap()]
        .into_iter()
        .chain(third.crawls)
        .filter(|r| r.completed)
        .count();
    assert_eq!(completions, 1);
    let stored = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.state, stored.generation),
        (CrawlState::Completed, 0)
    );

    // Before its pages are due, nothing happens; one hour on, every page is due again: the
    // hosts' wake-up times reopen the crawl (generation 1) and wake them, and once the round
    // is done it completes again with a second notice.
    let early = sweeper
        .sweep_all(T0 + HOUR as Millis, &mut budget())
        .await
        .unwrap();
    assert!(
        early.crawls.iter().all(|r| !r.reopened && r.recrawls == 0),
        "{early:?}"
    );
    let later = T0 + 20 + HOUR as Millis;
    let round = sweeper.sweep_all(later, &mut budget()).await.unwrap();
    let report = round
        .crawls
        .iter()
        .find(|r| r.crawl_id == crawl.id.as_str())
        .unwrap();
    assert!(report.reopened);
    assert_eq!(report.recrawls, 3);
    let reopened = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    assert_eq!(
        (reopened.state, reopened.generation),
        (CrawlState::Running, 1)
    );
    // Woken, not yet fetched: the round is not complete.
    let waiting = sweeper.sweep_all(later + 5, &mut budget()).await.unwrap();
    assert!(waiting.crawls.iter().all(|r| !r.completed), "{waiting:?}");
    for path in ["a", "b", "c"] {
        succeed_in_turn(store, &reopened, path, later + 10).await;
    }
    let done = sweeper.sweep_all(later + 20, &mut budget()).await.unwrap();
    assert!(
        done.crawls
            .iter()
            .any(|r| r.completed && r.crawl_id == crawl.id.as_str())
    );

    let mut notices = Vec::new();
    for _ in 0..5 {
        let out = clients
            .sqs
            .receive_message()
            .queue_url(&made.delivery_queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        for m in out.messages() {
            let notice: CompletionNotice = serde_json::from_str(m.body().unwrap()).unwrap();
            notices.push((notice.crawl_id.to_string(), notice.generation));
        }
        if notices.len() >= 2 {
            break;
        }
    }
    notices.sort();
    let id = crawl.id.to_string();
    assert_eq!(notices, [(id.clone(), 0), (id, 1)]);
}

#[tokio::test]
async fn a_turn_whose_message_never_went_out_is_reissued_within_a_minute_once_the_queue_is_empty() {
    // GIVEN a host woken 90 s ago whose turn message was never sent (as when an invocation is
    // cut between a turn's hand-back and the send of its next message), on DynamoDB + SQS, with
    // the crawl's usual lost-message window at 5 minutes
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let crawl = create(&store, config()).await;
    let now = T0 + HOUR as Millis;
    add(&store, &crawl, "cut", now - 90_000).await;
    // AND another host's message waiting in the queue
    let other = WorkMessage::new(crawl.id.clone(), "busy.example.com", 1, 0);
    assert_eq!(queue.send(&[other]).await.unwrap().sent, 1);
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        trigger.clone(),
        SweepOptions::new(),
    );
    let queue = &sweeper.queue;

    // WHEN the sweeper runs while the queue holds a message
    let busy = sweeper
        .sweep_crawl(&crawl, now, &mut budget())
        .await
        .unwrap();

    // THEN the host is left alone: its message may be behind others in a busy queue
    assert_eq!(busy.lost_messages, 0, "{busy:?}");

    // WHEN the queue is empty and the sweeper runs again
    let waiting = queue.receive(10, 0).await.unwrap();
    assert_eq!(waiting.len(), 1);
    queue.ack(&[waiting[0].receipt.clone()]).await.unwrap();
    let drained = sweeper
        .sweep_crawl(&crawl, now + 1, &mut budget())
        .await
        .unwrap();

    // THEN the host's turn is re-issued: a message sent a minute ago would be counted
    assert_eq!(drained.lost_messages, 1, "{drained:?}");
    let sent = queue.receive(10, 0).await.unwrap();
    let hosts: Vec<String> = sent
        .iter()
        .map(|m| serde_json::from_str::<WorkMessage>(&m.body).unwrap().host)
        .collect();
    assert_eq!(hosts, [host_url("cut").host_key()]);
    assert!(calls.get(Call::SqsGetQueueAttributes) >= 2);
}

#[tokio::test]
async fn turns_waiting_in_a_deep_queue_are_not_reissued_and_a_lost_one_still_is() {
    // GIVEN five hosts seeded an hour ago whose turn messages all wait in the queue (a queue
    // holding far more than the usual 5 minutes of turns), on DynamoDB + SQS
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let crawl = create(&store, config()).await;
    let paths = ["w0", "w1", "w2", "w3", "w4"];
    let tasks = paths
        .iter()
        .map(|p| NewTask {
            lane: None,
            priority: Default::default(),
            url: host_url(p),
            depth: 0,
            parent: None,
            data: None,
        })
        .collect();
    let (_, messages) = seed_tasks(&store, &crawl, tasks, T0).await.unwrap();
    assert_eq!(queue.send(&messages).await.unwrap().sent, 5);
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        Arc::new(LocalDeliveryTrigger::default()),
        SweepOptions::new(),
    );
    let queue = &sweeper.queue;
    let now = T0 + HOUR as Millis;

    // WHEN the sweeper runs an hour later
    let waiting = sweeper
        .sweep_crawl(&crawl, now, &mut budget())
        .await
        .unwrap();

    // THEN no turn is re-issued: the queue holds a message for each of the five open hosts
    assert_eq!(
        (
            waiting.lost_messages,
            waiting.hosts_busy,
            waiting.hosts_open
        ),
        (0, 5, Some(5)),
        "{waiting:?}"
    );

    // WHEN one message is lost (received and deleted without its turn, as one gone to the
    // dead-letter queue) and the sweeper runs again
    let taken = queue.receive(1, 0).await.unwrap();
    assert_eq!(taken.len(), 1);
    queue.ack(&[taken[0].receipt.clone()]).await.unwrap();
    let lost_host = serde_json::from_str::<WorkMessage>(&taken[0].body)
        .unwrap()
        .host;
    let short = sweeper
        .sweep_crawl(&crawl, now + 1, &mut budget())
        .await
        .unwrap();

    // THEN the queue holds fewer messages than open hosts: the usual window applies, and every
    // overdue turn is re-issued, the lost one with them
    assert_eq!(short.lost_messages, 5, "{short:?}");

    // AND a sweep ten minutes later re-issues nothing: the queue holds a message per open host
    // again (the stale ones count: they stand in for nothing lost)
    let later = now + 600_000;
    let again = sweeper
        .sweep_crawl(&crawl, later, &mut budget())
        .await
        .unwrap();
    assert_eq!(again.lost_messages, 0, "{again:?}");

    // WHEN every message is lost and the sweeper runs with the queue drained
    let mut drained = Vec::new();
    for _ in 0..10 {
        let batch = queue.receive(10, 0).await.unwrap();
        if batch.is_empty() {
            break;
        }
        queue
            .ack(&batch.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
        drained.extend(batch);
    }
    assert_eq!(drained.len(), 9, "four waiting, five re-issued");
    let recovered = sweeper
        .sweep_crawl(&crawl, later + 1, &mut budget())
        .await
        .unwrap();

    // THEN every host's turn is re-issued, the first lost one's too
    assert_eq!(recovered.lost_messages, 5, "{recovered:?}");
    let sent = queue.receive(10, 0).await.unwrap();
    let mut hosts: Vec<String> = sent
        .iter()
        .map(|m| serde_json::from_str::<WorkMessage>(&m.body).unwrap().host)
        .collect();
    hosts.sort();
    assert_eq!(hosts, paths.map(|p| host_url(p).host_key()));
    assert!(hosts.contains(&lost_host));
}

#[tokio::test]
async fn a_crawl_whose_messages_are_gone_is_not_held_by_another_crawls_deep_queue() {
    // GIVEN, on the embedded backend, a crawl of five hosts whose turns all wait in the queue,
    // seeded an hour ago
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let waiting = create(&store, config()).await;
    let seed = |paths: &[&str]| {
        paths
            .iter()
            .map(|p| NewTask {
                lane: None,
                priority: Default::default(),
                url: host_url(p),
                depth: 0,
                parent: None,
                data: None,
            })
            .collect::<Vec<_>>()
    };
    let (_, messages) = seed_tasks(&store, &waiting, seed(&["a0", "a1", "a2", "a3", "a4"]), T0)
        .await
        .unwrap();
    assert_eq!(queue.send(&messages).await.unwrap().sent, 5);
    let sweeper = Sweeper::new(
        Arc::new(App::new(store, Unwired, queue, calls.clone())),
        Arc::new(LocalDeliveryTrigger::default()),
        SweepOptions::new(),
    );
    let now = T0 + HOUR as Millis;
    let lost_of = |summary: &trawl_core::sweep::SweepSummary, crawl: &Crawl| {
        summary
            .crawls
            .iter()
            .find(|r| r.crawl_id == crawl.id.to_string())
            .map(|r| r.lost_messages)
    };
    let held = sweeper.sweep_all(now, &mut budget()).await.unwrap();
    assert_eq!(lost_of(&held, &waiting), Some(0), "{held:?}");

    // WHEN a second crawl's three hosts are open with no message in the queue (dropped while
    // the crawl was paused, now resumed), and the sweeper runs over every crawl
    let resumed = create(&sweeper.store, config()).await;
    let (_, dropped) = seed_tasks(&sweeper.store, &resumed, seed(&["b0", "b1", "b2"]), T0)
        .await
        .unwrap();
    assert_eq!(dropped.len(), 3);
    let swept = sweeper.sweep_all(now + 1, &mut budget()).await.unwrap();

    // THEN the queue's five messages do not cover the eight open hosts of both crawls: the
    // resumed crawl's turns are re-issued (the waiting crawl's too, under the usual window)
    assert_eq!(lost_of(&swept, &resumed), Some(3), "{swept:?}");
    assert_eq!(lost_of(&swept, &waiting), Some(5), "{swept:?}");
}

/// A worker that died between its task's finish and its host's hand-back (the write that
/// updates the host counts), on `store`: the counts stay right and heal with the host's next
/// turn, and the crawl completes then, not before.
async fn counts_heal_after_a_crash_between_a_finish_and_its_hand_back<S, Q>(store: S, queue: Q)
where
    S: Store + 'static,
    Q: WorkQueue + 'static,
{
    // GIVEN a crawl of two hosts, one crawled, the other's worker crashing right after its
    // finish (a targeted crash point of the fault layer), before its hand-back
    let crawl = create(&store, config()).await;
    for path in ["healthy", "crashing"] {
        add(&store, &crawl, path, T0).await;
    }
    succeed_in_turn(&store, &crawl, "healthy", T0 + 10).await;
    let none = PortMix {
        errors: 0.0,
        latency: 0.0,
        crash: 0.0,
    };
    let faults = Arc::new(PortFaults::new(0, none, CrashMode::Halt));
    let faulty = FaultyStore::new(store, faults.clone());
    faults.crash_after("finish", 1);
    let (_turn, lease) = take_turn(&faulty, &crawl, "crashing", T0 + 20).await;
    let worker = succeed_leased(&faulty, &crawl, &lease, T0 + 20);
    tokio::select! {
        () = worker => panic!("the worker did not crash"),
        () = faults.crashed() => {}
    }
    let store = faulty.inner;
    let counts = store.host_counts(&crawl.id).await.unwrap().unwrap();
    assert_eq!(
        (counts.hosts, counts.open),
        (2, 1),
        "the dead turn's host is open"
    );
    let sweeper = Sweeper::new(
        Arc::new(App::new(
            store,
            Unwired,
            queue,
            Arc::new(CallCounts::default()),
        )),
        Arc::new(LocalDeliveryTrigger::default()),
        SweepOptions::new(),
    );

    // WHEN the sweeper runs while the dead turn's lease runs, THEN it does not complete
    let early = sweeper
        .sweep_crawl(&crawl, T0 + 30, &mut budget())
        .await
        .unwrap();
    assert!(!early.completed, "{early:?}");
    assert_eq!(early.hosts_open, Some(1));

    // WHEN it runs once the turn expired, THEN it re-issues the turn, and still does not complete
    let expired = T0 + 20 + crawl.config.lease_ms as Millis + 1;
    let reissued = sweeper
        .sweep_crawl(&crawl, expired, &mut budget())
        .await
        .unwrap();
    assert_eq!(reissued.lost_messages, 1, "{reissued:?}");
    assert!(!reissued.completed);

    // WHEN the host's next turn finds its page fetched and hands the host back
    let store = &sweeper.store;
    let name = host_url("crashing").host_key();
    let at = expired + 1_000;
    let (_, turn) = update_host(store, &crawl, &name, at, |h| {
        match h.claim_turn(at, 60_000) {
            Ok((next, turn)) => (Some(next), Some(turn)),
            Err(_) => (None, None),
        }
    })
    .await
    .unwrap()
    .unwrap();
    hand_back(store, &crawl, "crashing", turn.unwrap(), at).await;

    // THEN the counts agree again and the next sweep completes the crawl
    let counts = store.host_counts(&crawl.id).await.unwrap().unwrap();
    assert_eq!((counts.hosts, counts.open), (2, 0));
    let done = sweeper
        .sweep_crawl(&crawl, at + 1, &mut budget())
        .await
        .unwrap();
    assert!(done.completed, "{done:?}");
}

#[tokio::test]
async fn counts_heal_after_a_crash_between_a_finish_and_its_hand_back_on_dynamodb() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = crawl_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls);
    counts_heal_after_a_crash_between_a_finish_and_its_hand_back(store, queue).await;
}

#[tokio::test]
async fn counts_heal_after_a_crash_between_a_finish_and_its_hand_back_on_sqlite() {
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls);
    counts_heal_after_a_crash_between_a_finish_and_its_hand_back(store, queue).await;
}
