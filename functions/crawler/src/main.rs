//! The crawler Lambda (wiring only; the logic is in `trawl_core::crawler`, the glue in `handler`).

use crawler::handler::Handler;
use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use trawl_aws::app::Root;
use trawl_aws::settings::CrawlerSettings;
use trawl_aws::ssm::SsmSecrets;
use trawl_core::crawler::Crawler;
use trawl_core::fetch::Fetcher;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let root = Root::<CrawlerSettings>::from_env().await?;
    let settings = &root.settings;
    let fetcher = Fetcher::new(settings.default_user_agent.as_deref().unwrap_or_default())?
        .with_secrets(Arc::new(SsmSecrets::new(root.clients.ssm.clone())));
    let crawler = Crawler::new(root.app.clone(), Arc::new(fetcher), settings.concurrency);
    let handler = Handler::new(crawler);
    run(service_fn(|event| handler.handle_payload(event))).await
}
