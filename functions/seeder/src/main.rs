//! The seeder Lambda (wiring only; the logic is in `trawl_core::seed`, the glue in `handler`).

use lambda_runtime::{Error, run, service_fn};
use seeder::handler::Handler;
use std::sync::Arc;
use trawl_aws::app::Root;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::settings::SeederSettings;
use trawl_aws::sqs::SqsSeedQueue;
use trawl_core::fetch::Fetcher;
use trawl_core::seed::{SeedDefaults, Seeder};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let root = Root::<SeederSettings>::from_env().await?;
    let (settings, clients) = (&root.settings, &root.clients);
    let user_agent = settings.default_user_agent.clone();
    let fetcher = Fetcher::new(user_agent.as_deref().unwrap_or_default())?;
    let manifests = S3Manifests::new(clients.s3.clone(), root.calls());
    let defaults = SeedDefaults {
        user_agent,
        per_host: Some(settings.default_per_host),
    };
    let handler = Handler {
        seeder: Seeder::new(
            root.app.clone(),
            Arc::new(fetcher),
            Arc::new(manifests),
            defaults,
        ),
        seeds: SqsSeedQueue::new(clients.sqs.clone(), &settings.seed_queue_url, root.calls()),
    };
    run(service_fn(|event| handler.handle(event))).await
}
