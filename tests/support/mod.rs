//! Test harness: moto servers, AWS clients pointed at them, unique resource names.

pub mod moto;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use trawl_aws::clients::Clients;
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_aws::stack::create_stack;
use trawl_domain::calls::CallCounts;

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
    Clients::new(&config(endpoint).load().await)
}

/// `clients`, whose retries of a failed request come at once: the SDK's standard retries (the
/// same three attempts) without their pauses of up to seconds, for the runs through the fault
/// proxy, whose faults are drawn per request, not in time.
pub async fn clients_retrying_at_once(endpoint: &str) -> Clients {
    let retries = aws_config::retry::RetryConfig::standard()
        .with_initial_backoff(std::time::Duration::from_millis(1))
        .with_max_backoff(std::time::Duration::from_millis(10));
    Clients::new(&config(endpoint).retry_config(retries).load().await)
}

fn config(endpoint: &str) -> aws_config::ConfigLoader {
    trawl_aws::clients::config_loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "trawl-tests",
        ))
}

/// A fresh table on `endpoint` (only the table of `create_stack`), wrapped in the DynamoDB store.
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

/// A full AWS stack on moto for one test: table, bucket and queues of its own.
pub struct AwsStack {
    pub store: DynamoStore,
    pub blobs: trawl_aws::s3::S3BlobStore,
    pub queue: trawl_aws::sqs::SqsQueue,
    pub calls: Arc<CallCounts>,
}

/// A stack of its own on `endpoint`, made as `trawl setup` makes one (`create_stack`), with the
/// store, blobs and crawl queue on it counting their calls in one counter.
pub async fn aws_stack(endpoint: &str) -> AwsStack {
    let clients = clients(endpoint).await;
    let stack = create_stack(&clients, &unique("stack"))
        .await
        .expect("create stack");
    let calls = Arc::new(CallCounts::default());
    AwsStack {
        store: DynamoStore::new(clients.dynamodb.clone(), stack.table, 4, calls.clone()),
        blobs: trawl_aws::s3::S3BlobStore::new(clients.s3.clone(), stack.bucket, calls.clone()),
        queue: trawl_aws::sqs::SqsQueue::new(clients.sqs.clone(), stack.queue_url, calls.clone()),
        calls,
    }
}
