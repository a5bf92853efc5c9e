//! A typical succeeded task must fit one DynamoDB write unit (1 KB): every status change is
//! one write, so this is what each URL costs in WCUs.

use super::cases::{T0, claim, crawl_id, new_task};
use crate::support::{clients, moto, unique};
use aws_sdk_dynamodb::types::AttributeValue;
use std::sync::Arc;
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::store::TaskStore;
use trawl_domain::calls::CallCounts;
use trawl_domain::schedule::Pace;
use trawl_domain::task::FetchRecord;

/// DynamoDB's item size rules: names + values; numbers ~1 byte per 2 digits + 1; maps and
/// lists 3 bytes + 1 per element.
fn size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.trim_start_matches('-').len().div_ceil(2) + 1,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(items) => 3 + items.iter().map(|v| size(v) + 1).sum::<usize>(),
        AttributeValue::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| k.len() + size(v) + 1)
                .sum::<usize>()
        }
        other => panic!("unexpected attribute {other:?}"),
    }
}

#[tokio::test]
async fn a_typical_succeeded_task_is_under_one_kilobyte() {
    // GIVEN a realistic URL, fetched and stored
    let client = clients(&moto::shared().endpoint).await.dynamodb;
    let table = unique("size");
    create_table(&client, &table).await.unwrap();
    let store = DynamoStore::new(client.clone(), &table, 4, Arc::new(CallCounts::default()));
    let crawl = crawl_id();
    let url = "https://www.example-news-site.com/2026/11/21/politics/some-long-article-slug-about-things?ref=home";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (task, lease) = claim(&store, &crawl, url, T0).await;
    let record = FetchRecord {
        object_key: Some(format!("pages/crawl={crawl}/pk={}/attr=html/md5=0123456789abcdef0123456789abcdef", task.task_id)),
        md5: Some("0123456789abcdef0123456789abcdef".into()),
        http_status: 200,
        content_type: Some("text/html; charset=utf-8".into()),
        content_length: 187_345,
        etag: Some("W/\"5f3a-1c2b3d4e5f6a7b8c\"".into()),
        last_modified: Some("Sat, 21 Nov 2026 08:15:00 GMT".into()),
        final_url: Some("https://www.example-news-site.com/2026/11/21/politics/some-long-article-slug-about-things".into()),
        redirects: 1,
        fetched_at: T0 + 1,
        next_fetch_at: Some(T0 + 86_400_000),
        pace: Some(Pace {
            factor: 7.692_307_692_307_692,
            unchanged: 17,
        }),
        missing: 0,
    };
    store.finish(&lease, &record, T0 + 1).await.unwrap();

    // WHEN its stored item is measured
    let item = client
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S(format!("{crawl}#{}", task.task_id)))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let bytes: usize = item.iter().map(|(k, v)| k.len() + size(v)).sum();

    // THEN it fits one write unit
    println!("typical succeeded task item: {bytes} bytes");
    assert!(bytes < 1024, "{bytes} bytes: {item:?}");
}
