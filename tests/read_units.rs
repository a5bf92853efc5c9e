//! DynamoDB read units as the adapter meters them (`CallCounts::read_units`), on moto: what the
//! cost bench prices reads with. DynamoDB's rules: 4 KB blocks of an item read by key, rounded
//! up, an absent key costing one; a Query's items together; a strongly consistent read a unit a
//! block, an eventually consistent one (every index read) half.

use crate::support::{clients, moto, unique};
use std::sync::Arc;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::stack::create_stack;
use trawl_core::store::{CrawlStore, TaskRecords, TaskStore};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{Millis, NewTask};

const T0: Millis = 1_700_000_000_000;

fn page(path: &str, data_bytes: usize) -> NewTask {
    let data = (data_bytes > 0)
        .then(|| serde_json::Map::from_iter([("note".to_owned(), "x".repeat(data_bytes).into())]));
    NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&format!("http://a.test{path}")).unwrap(),
        depth: 0,
        parent: None,
        data,
    }
}

#[tokio::test]
async fn reads_are_metered_by_item_size_consistency_and_absent_keys() {
    // GIVEN a crawl on moto with two small tasks and one of over 4 KB, all on one host's roster
    let clients = clients(&moto::shared().endpoint).await;
    let stack = create_stack(&clients, &unique("reads")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb, &stack.table, 4, calls.clone());
    let crawl = Crawl::new(CrawlId::parse("reads").unwrap(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    let tasks = [page("/a", 0), page("/b", 0), page("/big", 5_000)];
    store.seed(&crawl.id, &tasks, T0).await.unwrap();
    let ids: Vec<_> = tasks.iter().map(|t| t.url.task_id()).collect();
    let missing = CanonicalUrl::parse("http://a.test/none").unwrap().task_id();
    let units = |calls: &CallCounts| {
        let units = calls.read_units();
        calls.reset();
        units
    };
    calls.reset();

    // WHEN tasks are read by key, strongly consistent
    // THEN a small one costs a unit, one of over 4 KB two, an absent one a unit
    store.get(&crawl.id, &ids[0]).await.unwrap().unwrap();
    assert_eq!(units(&calls), 1.0);
    store.get(&crawl.id, &ids[2]).await.unwrap().unwrap();
    assert_eq!(units(&calls), 2.0);
    assert!(store.get(&crawl.id, &missing).await.unwrap().is_none());
    assert_eq!(units(&calls), 1.0);

    // WHEN links are checked (one BatchGetItem, eventually consistent)
    // THEN half a unit a key, absent or small; the big one a unit
    let known = store
        .known(
            &crawl.id,
            &[ids[0].clone(), missing.clone(), ids[2].clone()],
        )
        .await
        .unwrap();
    assert_eq!(known, [true, false, true]);
    assert_eq!(units(&calls), 0.5 + 0.5 + 1.0);

    // WHEN the host's roster is read: a Query of its keys (small: half a unit) and the tasks in
    // one consistent BatchGetItem
    let roster = store.roster(&crawl.id, "a.test", None, 100).await.unwrap();
    assert_eq!(roster.entries.len(), 3);
    assert_eq!(units(&calls), 0.5 + 1.0 + 1.0 + 2.0);
}
