//! The sweeper Lambda (wiring only; the logic is in `trawl_core::sweep`, the glue in `handler`).

use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use sweeper::handler::Handler;
use trawl_aws::app::Root;
use trawl_aws::settings::SweeperSettings;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_core::fetch::Fetcher;
use trawl_core::sweep::{ReferenceChecks, SweepOptions, Sweeper};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let root = Root::<SweeperSettings>::from_env().await?;
    let trigger = SqsDeliveryTrigger::new(
        root.clients.sqs.clone(),
        &root.settings.delivery_queue_url,
        root.calls(),
    );
    let options = SweepOptions {
        references: Some(ReferenceChecks::new(
            Arc::new(Fetcher::new("")?),
            ReferenceChecks::DEFAULT_INTERVAL,
        )),
        ..SweepOptions::new()
    };
    let handler = Handler {
        sweeper: Sweeper::new(root.app.clone(), Arc::new(trigger), options),
    };
    run(service_fn(|event| handler.handle(event))).await
}
