//! `create_stack`, the one way trawl creates its resources outside CloudFormation (`trawl setup`,
//! these tests, the bench): what it makes on moto.

use crate::support::{self, moto, unique};
use aws_sdk_sqs::types::QueueAttributeName;
use trawl_aws::dynamodb::{HOST_INDEX, LANE_INDEX, ROSTER_INDEX, STATUS_INDEX};
use trawl_aws::stack::{MAX_RECEIVE_COUNT, MESSAGE_RETENTION_SECONDS, create_stack};

async fn queue_attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> std::collections::HashMap<QueueAttributeName, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default()
}

#[tokio::test]
async fn create_stack_makes_the_table_bucket_and_queues_with_dead_letter_queues() {
    // GIVEN a moto server
    let clients = support::clients(&moto::shared().endpoint).await;

    // WHEN a stack is created
    let stack = create_stack(&clients, &unique("setup")).await.unwrap();

    // THEN the table has its three indexes
    let table = clients
        .dynamodb
        .describe_table()
        .table_name(&stack.table)
        .send()
        .await
        .unwrap();
    let mut indexes: Vec<&str> = table
        .table()
        .unwrap()
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    indexes.sort_unstable();
    assert_eq!(
        indexes,
        [HOST_INDEX, LANE_INDEX, ROSTER_INDEX, STATUS_INDEX]
    );

    // AND the bucket exists
    clients
        .s3
        .head_bucket()
        .bucket(&stack.bucket)
        .send()
        .await
        .unwrap();

    // AND every queue is standard and keeps messages 14 days; the crawl, delivery and seed queues
    // redrive to their own dead-letter queue after MAX_RECEIVE_COUNT receives, the priority crawl
    // queue to the crawl queue's
    let pairs = [
        (&stack.queue_url, &stack.crawl_dead_letter_url),
        (&stack.priority_queue_url, &stack.crawl_dead_letter_url),
        (&stack.delivery_queue_url, &stack.delivery_dead_letter_url),
        (&stack.seed_queue_url, &stack.seed_dead_letter_url),
    ];
    for (queue, dead_letter) in pairs {
        let source = queue_attributes(&clients.sqs, queue).await;
        let target = queue_attributes(&clients.sqs, dead_letter).await;
        for attributes in [&source, &target] {
            assert_eq!(
                attributes[&QueueAttributeName::MessageRetentionPeriod],
                MESSAGE_RETENTION_SECONDS.to_string()
            );
            assert_ne!(
                attributes
                    .get(&QueueAttributeName::FifoQueue)
                    .map(String::as_str),
                Some("true")
            );
        }
        let redrive: serde_json::Value =
            serde_json::from_str(&source[&QueueAttributeName::RedrivePolicy]).unwrap();
        assert_eq!(
            redrive["deadLetterTargetArn"],
            target[&QueueAttributeName::QueueArn].as_str()
        );
        assert_eq!(
            redrive["maxReceiveCount"].to_string().trim_matches('"'),
            MAX_RECEIVE_COUNT.to_string()
        );
        assert!(!target.contains_key(&QueueAttributeName::RedrivePolicy));
    }
}
