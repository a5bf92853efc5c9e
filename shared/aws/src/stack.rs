//! The one way trawl creates its AWS resources outside CloudFormation: `trawl setup`, the
//! integration tests and the benchmark all call [`create_stack`]. Production stacks come from
//! `infra/template.yaml` (and the CDK app, checked equal to it); `infra/tests` checks that the
//! table definition (`dynamodb::schema`) and the queue settings here match the template.
//!
//! A deployed stack is found by its name: [`stack_variables`] reads the resource names from the
//! CloudFormation stack's outputs ([`OUTPUT_VARIABLES`]), so `trawl --backend aws --stack NAME`
//! needs no environment copied by hand.

use crate::clients::Clients;
use crate::settings::{
    ENV_BUCKET, ENV_DELIVERY_QUEUE_URL, ENV_PREFIX, ENV_PRIORITY_FROM, ENV_PRIORITY_QUEUE_URL,
    ENV_QUEUE_URL, ENV_SEED_QUEUE_URL, ENV_SHARDS, ENV_TABLE,
};
use aws_sdk_cloudformation::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{EventBridgeConfiguration, NotificationConfiguration};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;

/// How long every queue keeps a message: SQS's longest (14 days), as the template. A turn waiting
/// for a slow host must not expire (SQS's default is 4 days).
pub const MESSAGE_RETENTION_SECONDS: u32 = 1_209_600;

/// Receives after which a crawl or delivery message moves to its dead-letter queue, as the
/// template's `RedrivePolicy`.
pub const MAX_RECEIVE_COUNT: u32 = 5;

/// The template's outputs that name what trawl reads from the environment, as
/// (output key, variable). `infra/tests/test_template.py` checks that the template has each.
pub const OUTPUT_VARIABLES: [(&str, &str); 9] = [
    ("TableName", ENV_TABLE),
    ("ShardCount", ENV_SHARDS),
    ("BucketName", ENV_BUCKET),
    ("KeyPrefix", ENV_PREFIX),
    ("CrawlQueueUrl", ENV_QUEUE_URL),
    ("PriorityCrawlQueueUrl", ENV_PRIORITY_QUEUE_URL),
    ("PriorityQueueFrom", ENV_PRIORITY_FROM),
    ("DeliveryQueueUrl", ENV_DELIVERY_QUEUE_URL),
    ("SeedQueueUrl", ENV_SEED_QUEUE_URL),
];

/// Why a deployed stack's outputs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("no CloudFormation stack {0:?} in this account and region")]
    NotFound(String),
    #[error("cannot describe the CloudFormation stack {name:?}: {message}")]
    Unavailable { name: String, message: String },
}

/// The variables (`TRAWL_TABLE` …) the outputs of the deployed stack `name` give, by
/// [`OUTPUT_VARIABLES`]; outputs that name nothing trawl reads are left out.
pub async fn stack_variables(
    config: &aws_config::SdkConfig,
    name: &str,
) -> Result<HashMap<&'static str, String>, StackError> {
    let described = aws_sdk_cloudformation::Client::new(config)
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .map_err(|e| {
            // CloudFormation answers a missing stack with a generic ValidationError.
            let missing = e
                .as_service_error()
                .and_then(ProvideErrorMetadata::code)
                .is_some_and(|code| code == "ValidationError");
            if missing {
                StackError::NotFound(name.to_owned())
            } else {
                StackError::Unavailable {
                    name: name.to_owned(),
                    message: aws_sdk_cloudformation::error::DisplayErrorContext(&e).to_string(),
                }
            }
        })?;
    let stack = described
        .stacks()
        .first()
        .ok_or_else(|| StackError::NotFound(name.to_owned()))?;
    Ok(variables_of(stack.outputs().iter().filter_map(|o| {
        Some((o.output_key()?, o.output_value()?))
    })))
}

/// The variables named by (output key, value) pairs.
fn variables_of<'a>(
    outputs: impl Iterator<Item = (&'a str, &'a str)>,
) -> HashMap<&'static str, String> {
    let mut variables = HashMap::new();
    for (key, value) in outputs {
        if let Some((_, variable)) = OUTPUT_VARIABLES.iter().find(|(k, _)| *k == key) {
            variables.insert(*variable, value.to_owned());
        }
    }
    variables
}

/// Names (and URLs) of a stack made by [`create_stack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub table: String,
    pub bucket: String,
    /// The crawl queue (standard: host turns need per-message delays, which FIFO queues do not
    /// take).
    pub queue_url: String,
    /// The turns of hosts with priority work (`trawl_domain::priority::TurnQueue`), standard
    /// too, redriven to the crawl queue's dead-letter queue.
    pub priority_queue_url: String,
    pub delivery_queue_url: String,
    /// Where crawl messages (of either crawl queue) received [`MAX_RECEIVE_COUNT`] times go.
    pub crawl_dead_letter_url: String,
    /// Where delivery messages received [`MAX_RECEIVE_COUNT`] times go.
    pub delivery_dead_letter_url: String,
    /// Seed requests (`trawl submit`) and the seeder's own continuations.
    pub seed_queue_url: String,
    /// Where seed requests received [`MAX_RECEIVE_COUNT`] times go.
    pub seed_dead_letter_url: String,
}

impl Stack {
    /// The resource names of the stack called `name`.
    fn names(name: &str) -> [String; 9] {
        [
            format!("{name}-tasks"),
            format!("{name}-pages"),
            format!("{name}-crawl"),
            format!("{name}-crawl-priority"),
            format!("{name}-crawl-dlq"),
            format!("{name}-deliveries"),
            format!("{name}-deliveries-dlq"),
            format!("{name}-seeds"),
            format!("{name}-seeds-dlq"),
        ]
    }

    /// The environment that points trawl at this stack.
    pub fn env(&self) -> [(&'static str, String); 6] {
        [
            (ENV_TABLE, self.table.clone()),
            (ENV_BUCKET, self.bucket.clone()),
            (ENV_QUEUE_URL, self.queue_url.clone()),
            (ENV_PRIORITY_QUEUE_URL, self.priority_queue_url.clone()),
            (ENV_DELIVERY_QUEUE_URL, self.delivery_queue_url.clone()),
            (ENV_SEED_QUEUE_URL, self.seed_queue_url.clone()),
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
/// (`dynamodb::schema`), the bucket (its events sent to EventBridge), the crawl, delivery and
/// seed queues, each with a dead-letter queue, and the priority crawl queue (into the crawl
/// queue's dead-letter queue), every queue keeping messages
/// [`MESSAGE_RETENTION_SECONDS`]. For moto, development accounts, the tests and the benchmark.
pub async fn create_stack(clients: &Clients, name: &str) -> Result<Stack, SetupError> {
    let [
        table,
        bucket,
        crawl,
        priority,
        crawl_dlq,
        deliveries,
        deliveries_dlq,
        seeds,
        seeds_dlq,
    ] = Stack::names(name);
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
    // The signal that a delivery landed, as the template sets it (README, "When a delivery
    // lands").
    let to_eventbridge = NotificationConfiguration::builder()
        .event_bridge_configuration(EventBridgeConfiguration::builder().build())
        .build();
    clients
        .s3
        .put_bucket_notification_configuration()
        .bucket(&bucket)
        .notification_configuration(to_eventbridge)
        .send()
        .await
        .map_err(|e| fail(&bucket, DisplayErrorContext(&e)))?;
    let (crawl_dead_letter_url, crawl_dead_letter_arn) =
        create_queue(clients, &crawl_dlq, None).await?;
    let (queue_url, _) = create_queue(clients, &crawl, Some(&crawl_dead_letter_arn)).await?;
    let (priority_queue_url, _) =
        create_queue(clients, &priority, Some(&crawl_dead_letter_arn)).await?;
    let (delivery_dead_letter_url, delivery_dead_letter_arn) =
        create_queue(clients, &deliveries_dlq, None).await?;
    let (delivery_queue_url, _) =
        create_queue(clients, &deliveries, Some(&delivery_dead_letter_arn)).await?;
    let (seed_dead_letter_url, seed_dead_letter_arn) =
        create_queue(clients, &seeds_dlq, None).await?;
    let (seed_queue_url, _) = create_queue(clients, &seeds, Some(&seed_dead_letter_arn)).await?;
    Ok(Stack {
        table,
        bucket,
        queue_url,
        priority_queue_url,
        delivery_queue_url,
        crawl_dead_letter_url,
        delivery_dead_letter_url,
        seed_queue_url,
        seed_dead_letter_url,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_become_the_variables_they_name_and_others_are_left_out() {
        let variables = variables_of(
            [
                ("TableName", "t"),
                ("SeedQueueUrl", "https://sqs/seeds"),
                ("SeederFunctionName", "f"),
            ]
            .into_iter(),
        );
        assert_eq!(variables.len(), 2);
        assert_eq!(variables[ENV_TABLE], "t");
        assert_eq!(variables[ENV_SEED_QUEUE_URL], "https://sqs/seeds");
    }
}
