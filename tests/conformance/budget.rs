//! Page budgets without a hot item (`trawl_core::store::budget`), on the two stores that many
//! workers share: DynamoDB and the embedded SQLite file. A worker is one store instance; here
//! several instances on one table (or one file) stand for several workers.
//!
//! The DynamoDB race runs on the single-threaded moto: threaded moto does not make conditional
//! writes atomic, so only there does "never exceeded" test the store and not the emulator.

use super::cases::{T0, crawl_id};
use crate::support::{clients, moto, unique};
use futures_util::future::join_all;
use std::sync::Arc;
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::store::CrawlStore;
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_embedded::sqlite::SqliteStore;

/// `workers` DynamoDB stores on one new table, each counting its calls apart.
async fn dynamo_workers(endpoint: &str, workers: usize) -> Vec<(DynamoStore, Arc<CallCounts>)> {
    let client = clients(endpoint).await.dynamodb;
    let table = unique("budget");
    create_table(&client, &table).await.unwrap();
    (0..workers)
        .map(|_| {
            let calls = Arc::new(CallCounts::default());
            let store = DynamoStore::new(client.clone(), &table, 4, calls.clone());
            (store, calls)
        })
        .collect()
}

/// `workers` SQLite stores on one new file.
fn sqlite_workers(workers: usize) -> Vec<(SqliteStore, Arc<CallCounts>)> {
    let dir = std::env::temp_dir().join(unique("budget"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trawl.db");
    (0..workers)
        .map(|_| {
            let calls = Arc::new(CallCounts::default());
            (SqliteStore::open(&path, calls.clone()).unwrap(), calls)
        })
        .collect()
}

/// GIVEN a crawl of a million pages, WHEN one worker reserves one slot per page for 500 pages,
/// THEN it wrote to the crawl record twice (an exact first ask, then one chunk), not 500 times.
async fn pages_are_reserved_in_chunks<S: CrawlStore>(store: &S, calls: &CallCounts, write: Call) {
    let id = crawl_id();
    store
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    calls.reset();
    let mut granted = 0;
    for _ in 0..500 {
        granted += store.reserve_pages(&id, 1, 1_000_000).await.unwrap();
        // Half the URLs were known already: their slots come back to the worker's chunk.
        store.release_pages(&id, 0).await.unwrap();
    }
    store.release_pages(&id, 100).await.unwrap();
    granted += store.reserve_pages(&id, 100, 1_000_000).await.unwrap();
    assert_eq!(granted, 600);
    assert_eq!(calls.get(write), 2, "{:?}", calls.snapshot());
    let reserved = store.get_crawl(&id).await.unwrap().unwrap().pages_reserved;
    assert_eq!(reserved, 1 + trawl_core::store::budget::MAX_CHUNK);
}

/// GIVEN a crawl limited to 300 pages and 8 workers, WHEN they all reserve a few slots at a time
/// at once, giving some back (known URLs), until none is granted, THEN the slots in use never
/// exceed 300, the crawl record never counts more than 300, and at most a few slots per worker
/// are left unused.
async fn concurrent_workers_never_exceed_the_budget<S: CrawlStore>(workers: &[S]) {
    let id = crawl_id();
    workers[0]
        .create_crawl(&Crawl::new(id.clone(), CrawlConfig::default(), T0))
        .await
        .unwrap();
    let max = 300;
    let work = workers.iter().enumerate().map(|(w, store)| {
        let id = id.clone();
        async move {
            let mut used = 0u64;
            // Bounded: each round takes at least a slot or ends.
            for round in 0..max {
                let want = 1 + (w as u64 + round) % 4;
                let got = store.reserve_pages(&id, want, max).await.unwrap();
                if got == 0 {
                    break;
                }
                let known = u64::from(got > 1);
                store.release_pages(&id, known).await.unwrap();
                used += got - known;
            }
            used
        }
    });
    let used: u64 = join_all(work).await.into_iter().sum();
    let reserved = workers[0]
        .get_crawl(&id)
        .await
        .unwrap()
        .unwrap()
        .pages_reserved;
    assert!(used <= max, "{used} slots in use, budget {max}");
    assert!(reserved <= max, "record at {reserved}, budget {max}");
    // Chunks are at most 1/64 of what is left: at most 300/64 (4) slots per worker unused.
    assert!(used >= max - 4 * workers.len() as u64, "only {used} used");
}

#[tokio::test]
async fn dynamodb_reserves_pages_in_chunks() {
    let workers = dynamo_workers(&moto::shared().endpoint, 1).await;
    let (store, calls) = &workers[0];
    // A reservation is a request: a one-item TransactWriteItems (`trawl_domain::request`).
    pages_are_reserved_in_chunks(store, calls, Call::DynamoTransactWriteItems).await;
}

#[tokio::test]
async fn sqlite_reserves_pages_in_chunks() {
    let workers = sqlite_workers(1);
    let (store, calls) = &workers[0];
    pages_are_reserved_in_chunks(store, calls, Call::SqliteWrite).await;
}

/// On the single-threaded moto (see the module docs).
#[tokio::test]
async fn dynamodb_workers_never_exceed_the_budget() {
    let workers = dynamo_workers(&moto::single_threaded().endpoint, 8).await;
    let stores: Vec<DynamoStore> = workers.into_iter().map(|(s, _)| s).collect();
    concurrent_workers_never_exceed_the_budget(&stores).await;
}

#[tokio::test]
async fn sqlite_workers_never_exceed_the_budget() {
    let stores: Vec<SqliteStore> = sqlite_workers(8).into_iter().map(|(s, _)| s).collect();
    concurrent_workers_never_exceed_the_budget(&stores).await;
}
