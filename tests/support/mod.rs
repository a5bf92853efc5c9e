//! Test harness: moto servers, AWS clients pointed at them, unique resource names.

pub mod moto;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use trawl_core::aws::Clients;
use trawl_core::calls::CallCounts;
use trawl_core::store::dynamodb::{DynamoStore, create_table};

/// A name no other test in this run uses (tables, buckets, queues, crawl ids).
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// AWS clients for a moto server, with test credentials (never the developer's).
pub async fn clients(endpoint: &str) -> Clients {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "trawl-tests",
        ))
        .load()
        .await;
    Clients::new(&config)
}

/// A fresh table on `endpoint`, wrapped in the DynamoDB store.
pub async fn dynamo_store(endpoint: &str, shards: u32) -> (DynamoStore, Arc<CallCounts>) {
    let clients = clients(endpoint).await;
    let table = unique("tasks");
    create_table(&clients.dynamodb, &table)
        .await
        .expect("create table");
    let calls = Arc::new(CallCounts::default());
    (
        DynamoStore::new(clients.dynamodb, table, shards, calls.clone()),
        calls,
    )
}
