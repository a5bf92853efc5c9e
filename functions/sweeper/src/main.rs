//! The sweeper Lambda (wiring only; the logic is in `trawl_core::sweep`, the glue in `handler`).

use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use sweeper::handler::Handler;
use trawl_aws::clients::{Clients, load_config};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::settings::{FromEnv, SweeperSettings};
use trawl_aws::sqs::{SqsDeliveryTrigger, SqsQueue};
use trawl_core::fetch::Fetcher;
use trawl_core::sweep::{ReferenceChecks, SweepOptions};
use trawl_domain::calls::CallCounts;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = SweeperSettings::from_env()?;
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
        trigger: SqsDeliveryTrigger::new(clients.sqs, settings.delivery_queue_url, calls.clone()),
        options: SweepOptions {
            references: Some(ReferenceChecks::new(
                Arc::new(Fetcher::new("")?),
                ReferenceChecks::DEFAULT_INTERVAL,
            )),
            ..SweepOptions::new()
        },
        calls,
    };
    run(service_fn(|event| handler.handle(event))).await
}
