//! The sweeper on DynamoDB + SQS (moto) and on the embedded backend: it finds expired leases,
//! due retries, lost messages and due recrawls, and only those, through the status index; it
//! spreads a large sweep over invocations; it completes a crawl exactly once, with one notice.

use crate::seeding::fifo_queue;
use crate::support::{self, moto, unique};
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_aws::sqs::SqsQueue;
use trawl_core::queue::WorkQueue;
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskStore};
use trawl_core::sweep::{
    CompletionNotice, LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::retry::Failure;
use trawl_domain::task::{ErrorKind, FetchRecord, Lease, Millis, NewTask, Status};
use trawl_embedded::sqlite::SqliteStore;

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

fn url(path: &str) -> CanonicalUrl {
    CanonicalUrl::parse(&format!("http://example.com/{path}")).unwrap()
}

async fn create<S: CrawlStore>(store: &S, config: CrawlConfig) -> Crawl {
    let id = CrawlId::parse(&unique("sweep")).unwrap();
    store
        .create_crawl(&Crawl::new(id, config, T0))
        .await
        .unwrap()
        .0
}

async fn seed<S: TaskStore>(store: &S, crawl: &Crawl, path: &str, at: Millis) {
    let task = NewTask {
        url: url(path),
        depth: 0,
        parent: None,
    };
    store.seed(&crawl.id, &[task], at).await.unwrap();
}

async fn claim<S: TaskStore>(store: &S, crawl: &Crawl, path: &str, at: Millis) -> Lease {
    match store
        .claim(&crawl.id, &url(path).task_id(), crawl.config.lease_ms, at)
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { lease, .. } => lease,
        other => panic!("claim of {path} refused: {other:?}"),
    }
}

async fn succeed<S: TaskStore>(store: &S, crawl: &Crawl, path: &str, at: Millis) {
    let lease = claim(store, crawl, path, at).await;
    let record = FetchRecord {
        http_status: 200,
        fetched_at: at,
        next_fetch_at: crawl.config.recrawl.interval_ms.map(|ms| at + ms as Millis),
        ..FetchRecord::default()
    };
    store.finish(&lease, &record, at).await.unwrap();
}

async fn fail<S: TaskStore>(store: &S, crawl: &Crawl, path: &str, at: Millis, failure: Failure) {
    let lease = claim(store, crawl, path, at).await;
    store
        .fail(&lease, &failure, &crawl.config.retry, at)
        .await
        .unwrap();
}

fn budget() -> SweepBudget {
    SweepBudget::new(50, Duration::from_secs(60))
}

#[tokio::test]
async fn the_sweeper_finds_what_is_due_and_only_that() {
    let endpoint = &moto::shared().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 4).await;
    let queue_url = fifo_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let trigger = LocalDeliveryTrigger::default();
    let crawl = create(&store, config()).await;
    let now = T0 + 4 * HOUR as Millis;
    let transient = || Failure::new(ErrorKind::ServerError, "HTTP 500");
    let throttled = || Failure {
        retry_after_ms: Some(10_000),
        ..Failure::new(ErrorKind::Throttled, "HTTP 429")
    };
    for path in ["crashed", "working", "retry-due", "retry-later", "lost"] {
        seed(&store, &crawl, path, T0).await;
    }
    seed(&store, &crawl, "just-seeded", now - 1_000).await;
    for path in ["recrawl-due", "recrawl-later", "dead"] {
        seed(&store, &crawl, path, T0).await;
    }
    claim(&store, &crawl, "crashed", T0 + 1_000).await; // its lease ended long ago
    claim(&store, &crawl, "working", now - 1_000).await; // a live lease
    fail(&store, &crawl, "retry-due", now - 20_000, transient()).await; // due by now - 10 s
    fail(&store, &crawl, "retry-later", now - 1_500, throttled()).await; // due at now + 8.5 s
    succeed(&store, &crawl, "recrawl-due", T0 + 2_000).await; // next fetch at T0 + 1 h
    succeed(&store, &crawl, "recrawl-later", now - 1_000).await;
    fail(
        &store,
        &crawl,
        "dead",
        T0 + 3_000,
        Failure::new(ErrorKind::NotFound, "HTTP 404"),
    )
    .await;
    calls.reset();

    let sweeper = Sweeper {
        store: &store,
        queue: &queue,
        trigger: &trigger,
        calls: &calls,
        options: SweepOptions::default(),
    };
    let report = sweeper
        .sweep_crawl(&crawl, now, &mut budget())
        .await
        .unwrap();
    let found = (
        report.expired_leases,
        report.due_retries,
        report.lost_messages,
        report.recrawls,
    );
    assert_eq!(found, (1, 1, 1, 1), "{report:?}");
    // Read: crashed; retry-due and retry-later; lost; recrawl-due. Nothing else.
    assert_eq!(report.tasks_read, 5, "{report:?}");
    assert!(!report.unfinished && !report.completed);
    assert!(
        calls.get(Call::DynamoQuery) <= 4 * 4 + 4,
        "{} queries",
        calls.get(Call::DynamoQuery)
    );
    assert_eq!(calls.get(Call::DynamoPutItem), 0);
    let mut sent = Vec::new();
    for _ in 0..10 {
        let batch = queue.receive(10, 100).await.unwrap();
        if batch.is_empty() && sent.len() >= 4 {
            break;
        }
        for m in &batch {
            let body: serde_json::Value = serde_json::from_str(&m.body).unwrap();
            sent.push(body["url"].as_str().unwrap().to_owned());
        }
        queue
            .ack(&batch.iter().map(|m| m.receipt.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    sent.sort();
    assert_eq!(
        sent,
        ["crashed", "lost", "recrawl-due", "retry-due"].map(|p| url(p).to_string())
    );
    let rescheduled = store
        .get(&crawl.id, &url("recrawl-due").task_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rescheduled.status, Status::Pending);
    assert_eq!(rescheduled.enqueued_at, Some(now));

    // Everything handled left the due windows: the next pass finds nothing and reads only the
    // failed task that is not due yet (plus the completion check's first hit).
    let again = sweeper
        .sweep_crawl(&crawl, now + 1, &mut budget())
        .await
        .unwrap();
    assert_eq!(
        (
            again.expired_leases,
            again.due_retries,
            again.lost_messages,
            again.recrawls
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(again.tasks_read, 2, "{again:?}");
    assert!(!again.completed);
    assert!(trigger.take().is_empty());
}

#[tokio::test]
async fn a_large_sweep_spreads_over_invocations() {
    let calls = Arc::new(CallCounts::default());
    let store = SqliteStore::in_memory(calls.clone()).unwrap();
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let trigger = LocalDeliveryTrigger::default();
    let crawl = create(&store, config()).await;
    let tasks: Vec<NewTask> = (0..45)
        .map(|i| NewTask {
            url: url(&format!("p/{i}")),
            depth: 0,
            parent: None,
        })
        .collect();
    store.seed(&crawl.id, &tasks, T0).await.unwrap();
    let sweeper = Sweeper {
        store: &store,
        queue: &queue,
        trigger: &trigger,
        calls: &calls,
        options: SweepOptions {
            page_size: 10,
            lost_after_ms: Some(60_000),
        },
    };
    let now = T0 + 120_000;
    let mut lost = Vec::new();
    for i in 0..10 {
        let mut budget = SweepBudget::new(4, Duration::from_secs(60));
        let report = sweeper
            .sweep_crawl(&crawl, now + i, &mut budget)
            .await
            .unwrap();
        lost.push(report.lost_messages);
        if !report.unfinished {
            break;
        }
    }
    // Four pages per invocation: one each for the (empty) in-progress and failed windows, two
    // of ten pending tasks; the last one also reads the (empty) recrawl window.
    assert_eq!(lost, [20, 20, 5]);
    assert_eq!(queue.len(), 45);
}

#[tokio::test]
async fn completion_happens_once_and_a_recrawl_round_completes_again() {
    // Single-threaded moto: conditional writes are atomic there, as on DynamoDB.
    let endpoint = &moto::single_threaded().endpoint;
    let clients = support::clients(endpoint).await;
    let (store, calls) = support::dynamo_store(endpoint, 2).await;
    let queue_url = fifo_queue(&clients.sqs).await;
    let queue = SqsQueue::new(clients.sqs.clone(), &queue_url, calls.clone());
    let delivery_url = clients
        .sqs
        .create_queue()
        .queue_name(unique("delivery"))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let trigger = SqsDeliveryTrigger::new(clients.sqs.clone(), &delivery_url, calls.clone());
    let crawl = create(&store, config()).await;
    for path in ["a", "b", "c"] {
        seed(&store, &crawl, path, T0).await;
    }
    let sweeper = Sweeper {
        store: &store,
        queue: &queue,
        trigger: &trigger,
        calls: &calls,
        options: SweepOptions::default(),
    };
    // Work left: no completion.
    let early = sweeper
        .sweep_crawl(&crawl, T0 + 10, &mut budget())
        .await
        .unwrap();
    assert!(!early.completed);
    for path in ["a", "b", "c"] {
        succeed(&store, &crawl, path, T0 + 20).await;
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

    // One hour on, every page is due again: the crawl reopens (generation 1) and, once the
    // round is done, completes again with a second notice.
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
    for path in ["a", "b", "c"] {
        succeed(&store, &reopened, path, later + 10).await;
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
            .queue_url(&delivery_url)
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
