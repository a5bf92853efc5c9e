//! The deliverer Lambda (wiring only; the logic is in trawl-core's `deliver` module).

mod handler;

use handler::Handler;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use std::sync::Arc;
use trawl_aws::clients as aws;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::settings::AwsSettings;
use trawl_core::blob::Layout;
use trawl_domain::calls::CallCounts;
use trawl_domain::task::now_ms;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = AwsSettings::from_env()?;
    let clients = aws::Clients::new(&aws::load_config().await);
    let calls = Arc::new(CallCounts::default());
    let handler = Arc::new(Handler {
        store: DynamoStore::new(
            clients.dynamodb,
            settings.table.clone(),
            settings.shards,
            calls.clone(),
        ),
        blobs: S3BlobStore::new(clients.s3, settings.bucket.clone(), calls.clone()),
        layout: Layout::new(&settings.prefix),
        uri_base: format!("s3://{}", settings.bucket),
        calls,
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let handler = Arc::clone(&handler);
        async move { handler.handle(event.payload, now_ms()).await }
    }))
    .await
}
