//! The seeder Lambda (wiring only; the logic is in `trawl_core::seed`, the glue in `handler`).

use lambda_runtime::{Error, run, service_fn};
use seeder::handler::Handler;
use std::sync::Arc;
use trawl_aws::clients::{Clients, load_config};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::settings::{FromEnv, SeederSettings};
use trawl_aws::sqs::{SqsQueue, SqsSeedQueue};
use trawl_core::fetch::Fetcher;
use trawl_core::seed::SeedDefaults;
use trawl_domain::calls::CallCounts;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = SeederSettings::from_env()?;
    let clients = Clients::new(&load_config().await);
    let calls = Arc::new(CallCounts::default());
    let handler = Handler {
        store: DynamoStore::new(
            clients.dynamodb,
            &settings.table,
            settings.shards,
            calls.clone(),
        ),
        queue: SqsQueue::new(clients.sqs.clone(), &settings.queue_url, calls.clone()),
        fetcher: Arc::new(Fetcher::new(
            settings.default_user_agent.as_deref().unwrap_or_default(),
        )?),
        manifests: S3Manifests::new(clients.s3, calls.clone()),
        defaults: SeedDefaults {
            user_agent: settings.default_user_agent,
            per_host: Some(settings.default_per_host),
        },
        seeds: SqsSeedQueue::new(clients.sqs.clone(), &settings.seed_queue_url, calls.clone()),
        calls,
    };
    run(service_fn(|event| handler.handle(event))).await
}
