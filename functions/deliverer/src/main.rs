//! The deliverer Lambda (wiring only; the logic is in `trawl_core::deliver`, the glue in `handler`).

use deliverer::handler::Handler;
use lambda_runtime::{Error, run, service_fn};
use trawl_aws::app::Root;
use trawl_aws::settings::DelivererSettings;
use trawl_aws::sqs::SqsDeliveryTrigger;
use trawl_core::deliver::{Deliverer, DeliveryLimits};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let root = Root::<DelivererSettings>::from_env().await?;
    let settings = &root.settings;
    let uri_base = format!("s3://{}", settings.bucket);
    let handler = Handler {
        deliverer: Deliverer::new(root.app.clone(), uri_base, DeliveryLimits::default()),
        continuation: SqsDeliveryTrigger::new(
            root.clients.sqs.clone(),
            &settings.delivery_queue_url,
            root.calls(),
        ),
    };
    run(service_fn(|event| handler.handle(event))).await
}
