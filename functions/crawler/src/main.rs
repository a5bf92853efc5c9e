//! The crawler Lambda: wiring only. Tracing, settings, one `SdkConfig`, the clients, the
//! stores and one HTTP client are built once per cold start and lent to every invocation.

mod handler;

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use std::sync::Arc;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::settings::AwsSettings;
use trawl_aws::sqs::SqsQueue;
use trawl_core::blob::Layout;
use trawl_core::crawler::Crawler;
use trawl_core::fetch::Fetcher;
use trawl_domain::calls::CallCounts;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = AwsSettings::from_env()?;
    let clients = trawl_aws::clients::Clients::new(&trawl_aws::clients::load_config().await);
    let calls = Arc::new(CallCounts::default());
    let crawler = Crawler::new(
        DynamoStore::new(
            clients.dynamodb,
            &settings.table,
            settings.shards,
            calls.clone(),
        ),
        S3BlobStore::new(clients.s3, &settings.bucket, calls.clone()),
        SqsQueue::new(clients.sqs, &settings.queue_url, calls),
        Arc::new(Fetcher::new(
            settings.default_user_agent.as_deref().unwrap_or_default(),
        )?),
        Layout::new(&settings.prefix),
        settings.concurrency,
    );
    run(service_fn(|event: LambdaEvent<_>| {
        handler::handle(&crawler, event)
    }))
    .await
}
