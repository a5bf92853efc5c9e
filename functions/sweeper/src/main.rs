//! The sweeper Lambda (wiring only; the logic is in `trawl_core::sweep`, the glue in `handler`).

use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use sweeper::handler::Handler;
use trawl_aws::app::Root;
use trawl_aws::settings::SweeperSettings;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_core::sweep::{SweepOptions, Sweeper};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let root = Root::<SweeperSettings>::from_env().await?;
    let trigger = SqsDeliveryTrigger::new(
        root.clients.sqs.clone(),
        &root.settings.delivery_queue_url,
        root.calls(),
    );
    let handler = Handler {
        sweeper: Sweeper::new(root.app.clone(), Arc::new(trigger), SweepOptions::new()),
    };
    run(service_fn(|event| handler.handle(event))).await
}
