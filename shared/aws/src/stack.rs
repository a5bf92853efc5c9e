//! The one way trawl creates its AWS resources outside CloudFormation: `trawl setup`, the
//! integration tests and the benchmark all call [`create_stack`]. Production stacks come from
//! `infra/template.yaml` (and the CDK app, checked equal to it); `infra/tests` checks that the
//! table definition (`dynamodb::schema`) and the queue settings here match the template.

use crate::clients::Clients;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;

/// How long every queue keeps a message: SQS's longest (14 days), as the template. A turn waiting
/// for a slow host must not expire (SQS's default is 4 days).
pub const MESSAGE_RETENTION_SECONDS: u32 = 1_209_600;

/// Receives after which a crawl or delivery message moves to its dead-letter queue, as the
/// template's `RedrivePolicy`.
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// Names (and URLs) of a stack made by [`create_stack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub table: String,
    pub bucket: String,
    /// The crawl queue (standard: host turns need per-message delays, which FIFO queues do not
    /// take).
    pub queue_url: String,
    pub delivery_queue_url: String,
    /// Where crawl messages received [`MAX_RECEIVE_COUNT`] times go.
    pub crawl_dead_letter_url: String,
    /// Where delivery messages received [`MAX_RECEIVE_COUNT`] times go.
    pub delivery_dead_letter_url: String,
}

impl Stack {
    /// The resource names of the stack called `name`.
    fn names(name: &str) -> [String; 6] {
        [
            format!("{name}-tasks"),
            format!("{name}-pages"),
            format!("{name}-crawl"),
            format!("{name}-crawl-dlq"),
            format!("{name}-deliveries"),
            format!("{name}-deliveries-dlq"),
        ]
    }

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

/// Why a stack could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {resource}: {message}")]
pub struct SetupError {
    pub resource: String,
    pub message: String,
}

fn fail(resource: &str, message: impl std::fmt::Display) -> SetupError {
    SetupError {
        resource: resource.to_owned(),
        message: message.to_string(),
    }
}

/// Creates the stack called `name`: the table with its status and host indexes
/// (`dynamodb::schema`), the bucket, the crawl queue and the delivery queue, each with a
/// dead-letter queue, every queue keeping messages [`MESSAGE_RETENTION_SECONDS`]. For moto,
/// development accounts, the tests and the benchmark.
pub async fn create_stack(clients: &Clients, name: &str) -> Result<Stack, SetupError> {
    let [table, bucket, crawl, crawl_dlq, deliveries, deliveries_dlq] = Stack::names(name);
    crate::dynamodb::create_table(&clients.dynamodb, &table)
        .await
        .map_err(|e| fail(&table, e))?;
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .map_err(|e| fail(&bucket, DisplayErrorContext(&e)))?;
    let (crawl_dead_letter_url, crawl_dead_letter_arn) =
        create_queue(clients, &crawl_dlq, None).await?;
    let (queue_url, _) = create_queue(clients, &crawl, Some(&crawl_dead_letter_arn)).await?;
    let (delivery_dead_letter_url, delivery_dead_letter_arn) =
        create_queue(clients, &deliveries_dlq, None).await?;
    let (delivery_queue_url, _) =
        create_queue(clients, &deliveries, Some(&delivery_dead_letter_arn)).await?;
    Ok(Stack {
        table,
        bucket,
        queue_url,
        delivery_queue_url,
        crawl_dead_letter_url,
        delivery_dead_letter_url,
    })
}

/// Creates a standard queue keeping messages [`MESSAGE_RETENTION_SECONDS`], redriven to
/// `dead_letter_arn` (if any) after [`MAX_RECEIVE_COUNT`] receives; returns its URL and ARN.
async fn create_queue(
    clients: &Clients,
    name: &str,
    dead_letter_arn: Option<&str>,
) -> Result<(String, String), SetupError> {
    let mut request = clients.sqs.create_queue().queue_name(name).attributes(
        QueueAttributeName::MessageRetentionPeriod,
        MESSAGE_RETENTION_SECONDS.to_string(),
    );
    if let Some(arn) = dead_letter_arn {
        let policy = serde_json::json!({
            "deadLetterTargetArn": arn,
            "maxReceiveCount": MAX_RECEIVE_COUNT,
        });
        request = request.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    let url = request
        .send()
        .await
        .map_err(|e| fail(name, DisplayErrorContext(&e)))?
        .queue_url
        .ok_or_else(|| fail(name, "CreateQueue returned no queue URL"))?;
    let arn = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| fail(name, DisplayErrorContext(&e)))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| fail(name, "GetQueueAttributes returned no QueueArn"))?;
    Ok((url, arn))
}
