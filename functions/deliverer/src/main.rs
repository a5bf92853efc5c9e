//! The deliverer Lambda (wiring only; the logic is in `trawl_core::deliver`, the glue in `handler`).

use deliverer::handler::Handler;
use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use trawl_aws::clients::{Clients, load_config};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::settings::{DelivererSettings, FromEnv};
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_core::blob::Layout;
use trawl_core::deliver::DeliveryLimits;
use trawl_domain::calls::CallCounts;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = DelivererSettings::from_env()?;
    let clients = Clients::new(&load_config().await);
    let calls = Arc::new(CallCounts::default());
    let handler = Handler {
        store: DynamoStore::new(
            clients.dynamodb,
            &settings.table,
            settings.shards,
            calls.clone(),
        ),
        blobs: S3BlobStore::new(clients.s3, &settings.bucket, calls.clone()),
        layout: Layout::new(&settings.prefix),
        uri_base: format!("s3://{}", settings.bucket),
        continuation: SqsDeliveryTrigger::new(
            clients.sqs,
            settings.delivery_queue_url,
            calls.clone(),
        ),
        calls,
        limits: DeliveryLimits::default(),
    };
    run(service_fn(|event| handler.handle(event))).await
}
