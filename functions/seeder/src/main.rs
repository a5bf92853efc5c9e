//! The seeder Lambda (wiring only; the logic is in `trawl_core::seed`, the glue in `handler`).

mod handler;

use lambda_runtime::{LambdaEvent, service_fn};
use std::sync::Arc;
use trawl_aws::clients as aws;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::settings::AwsSettings;
use trawl_aws::sqs::SqsQueue;
use trawl_core::fetch::Fetcher;
use trawl_core::seed::{SeedDefaults, Seeder};
use trawl_domain::calls::CallCounts;
use trawl_domain::task::now_ms;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = AwsSettings::from_env()?;
    let clients = aws::Clients::new(&aws::load_config().await);
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(
        clients.dynamodb,
        &settings.table,
        settings.shards,
        calls.clone(),
    );
    let queue = SqsQueue::new(clients.sqs, &settings.queue_url, calls.clone());
    let fetcher = Fetcher::new(settings.default_user_agent.as_deref().unwrap_or_default())?;
    let manifests = S3Manifests::new(clients.s3, calls);
    let defaults = SeedDefaults {
        user_agent: settings.default_user_agent.clone(),
        per_host: Some(settings.default_per_host),
    };
    let seeder = Seeder {
        store: &store,
        queue: &queue,
        fetcher: &fetcher,
        manifests: &manifests,
        defaults: &defaults,
    };
    let seeder = &seeder;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let deadline = handler::deadline_from(event.context.deadline, now_ms());
            handler::handle(seeder, event.payload, deadline, now_ms()).await
        },
    ))
    .await
}
