//! The sweeper Lambda (wiring only; the logic is in `trawl_core::sweep`, the glue in `handler`).

mod handler;

use lambda_runtime::{LambdaEvent, service_fn};
use std::sync::Arc;
use trawl_aws::clients as aws;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::settings::{AwsSettings, ENV_DELIVERY_QUEUE_URL, SettingsError};
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_aws::sqs::SqsQueue;
use trawl_domain::calls::CallCounts;
use trawl_domain::task::now_ms;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = AwsSettings::from_env()?;
    let delivery_queue_url = settings
        .delivery_queue_url
        .clone()
        .ok_or(SettingsError::Missing(ENV_DELIVERY_QUEUE_URL))?;
    let clients = aws::Clients::new(&aws::load_config().await);
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(
        clients.dynamodb,
        &settings.table,
        settings.shards,
        calls.clone(),
    );
    let queue = SqsQueue::new(clients.sqs.clone(), &settings.queue_url, calls.clone());
    let trigger = SqsDeliveryTrigger::new(clients.sqs, delivery_queue_url, calls);
    let ports = handler::Ports {
        store: &store,
        queue: &queue,
        trigger: &trigger,
    };
    let ports = &ports;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let deadline = handler::deadline_from(event.context.deadline, now_ms());
            handler::handle(ports, event.payload, deadline, now_ms()).await
        },
    ))
    .await
}
