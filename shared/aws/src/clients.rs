//! AWS clients, built once per process from one `SdkConfig`.
//!
//! The SDK reads `AWS_ENDPOINT_URL` (and per-service variants) itself, so pointing trawl at moto
//! or LocalStack needs no code path of its own; S3 then needs path-style addressing.

use aws_config::{BehaviorVersion, SdkConfig};

/// Loads region, credentials and endpoint from the environment (the default provider chain).
pub async fn load_config() -> SdkConfig {
    aws_config::load_defaults(BehaviorVersion::latest()).await
}

/// The clients trawl uses, derived from one config.
#[derive(Debug, Clone)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
}

impl Clients {
    pub fn new(config: &SdkConfig) -> Self {
        // Emulators serve buckets by path, not by virtual host (which needs DNS per bucket).
        let s3_config = aws_sdk_s3::config::Builder::from(config)
            .force_path_style(config.endpoint_url().is_some())
            .build();
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            s3: aws_sdk_s3::Client::from_conf(s3_config),
            sqs: aws_sdk_sqs::Client::new(config),
        }
    }
}

/// Names of a development stack made by `create_stack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub table: String,
    pub bucket: String,
    pub queue_url: String,
    pub delivery_queue_url: String,
}

impl Stack {
    /// The environment that points trawl at this stack.
    pub fn env(&self) -> [(&'static str, String); 4] {
        use crate::settings::{ENV_BUCKET, ENV_DELIVERY_QUEUE_URL, ENV_QUEUE_URL, ENV_TABLE};
        [
            (ENV_TABLE, self.table.clone()),
            (ENV_BUCKET, self.bucket.clone()),
            (ENV_QUEUE_URL, self.queue_url.clone()),
            (ENV_DELIVERY_QUEUE_URL, self.delivery_queue_url.clone()),
        ]
    }
}

/// Why a development stack could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {resource}: {message}")]
pub struct SetupError {
    pub resource: String,
    pub message: String,
}

/// Creates a table (with the status and host indexes), a bucket, the crawl queue (standard: host
/// turns need per-message delays, which FIFO queues do not take) and the delivery queue, named
/// after `name`: for moto and development accounts (production uses the SAM template, whose
/// definitions `infra/tests` checks against these).
pub async fn create_stack(clients: &Clients, name: &str) -> Result<Stack, SetupError> {
    use aws_sdk_dynamodb::error::DisplayErrorContext;
    let fail = |resource: &str, message: String| SetupError {
        resource: resource.to_owned(),
        message,
    };
    let table = format!("{name}-tasks");
    let bucket = format!("{name}-pages");
    crate::dynamodb::create_table(&clients.dynamodb, &table)
        .await
        .map_err(|e| fail(&table, e.to_string()))?;
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| fail(&bucket, DisplayErrorContext(&e).to_string()))?;
    let queue = clients
        .sqs
        .create_queue()
        .queue_name(format!("{name}-crawl"))
        // As the template: a turn waiting for its host must not expire (SQS's default is 4 days).
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
            "1209600",
        )
        .send()
        .await
        .map_err(|e| fail("crawl queue", DisplayErrorContext(&e).to_string()))?;
    let deliveries = clients
        .sqs
        .create_queue()
        .queue_name(format!("{name}-deliveries"))
        .send()
        .await
        .map_err(|e| fail("delivery queue", DisplayErrorContext(&e).to_string()))?;
    Ok(Stack {
        table,
        bucket,
        queue_url: queue.queue_url.unwrap_or_default(),
        delivery_queue_url: deliveries.queue_url.unwrap_or_default(),
    })
}
