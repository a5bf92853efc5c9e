//! The crawler Lambda (wiring only; the logic is in `trawl_core::crawler`, the glue in `handler`).

use crawler::handler::Handler;
use lambda_runtime::{Error, run, service_fn};
use std::sync::Arc;
use trawl_aws::clients::{Clients, load_config};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::settings::{CrawlerSettings, FromEnv};
use trawl_aws::sqs::SqsQueue;
use trawl_aws::ssm::SsmSecrets;
use trawl_core::blob::Layout;
use trawl_core::crawler::Crawler;
use trawl_core::fetch::Fetcher;
use trawl_domain::calls::CallCounts;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = CrawlerSettings::from_env()?;
    let clients = Clients::new(&load_config().await);
    let calls = Arc::new(CallCounts::default());
    let handler = Handler {
        crawler: Arc::new(Crawler::new(
            DynamoStore::new(
                clients.dynamodb,
                &settings.table,
                settings.shards,
                calls.clone(),
            ),
            S3BlobStore::new(clients.s3, &settings.bucket, calls.clone()),
            SqsQueue::new(clients.sqs, &settings.queue_url, calls.clone()),
            Arc::new(
                Fetcher::new(settings.default_user_agent.as_deref().unwrap_or_default())?
                    .with_secrets(Arc::new(SsmSecrets::new(clients.ssm))),
            ),
            Layout::new(&settings.prefix),
            settings.concurrency,
            calls,
        )),
    };
    run(service_fn(|event| handler.handle_payload(event))).await
}
