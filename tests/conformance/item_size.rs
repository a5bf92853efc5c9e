//! A typical succeeded task must fit one DynamoDB write unit (1 KB): every status change is
//! one write, so this is what each URL costs in WCUs. And the write-unit model's images of a
//! task (`trawl_aws::dynamodb::capacity::task_image`) must be the items DynamoDB really holds
//! after every step of a task's life, or its figures would price items that do not exist.

use super::cases::{T0, claim, crawl_id, new_task, record};
use crate::support::{clients, moto, unique};
use aws_sdk_dynamodb::types::AttributeValue;
use std::sync::Arc;
use trawl_aws::dynamodb::capacity::{image_of, task_image};
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::store::{ClaimOutcome, TaskRecords, TaskStore};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::capacity::{Image, item_size};
use trawl_domain::schedule::Pace;
use trawl_domain::task::{FetchRecord, PageAnalysis, Sent, Status};

/// The item stored under `url`'s task, as the model reads it.
async fn stored(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    crawl: &CrawlId,
    url: &str,
) -> Image {
    let task_id = CanonicalUrl::parse(url).unwrap().task_id();
    let item = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("{crawl}#{task_id}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    image_of(&item)
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
        span: None,
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
            history: None,
        }),
        missing: 0,
        first_at: Some(T0 - 86_400_000),
        // A recrawl's conditional request (what the WARC's request record shows).
        sent: Some(Sent {
            method: None,
            headers: vec![
                ("if-none-match".into(), "W/\"5f3a-1c2b3d4e5f6a7b8c\"".into()),
                ("if-modified-since".into(), "Sat, 21 Nov 2026 08:15:00 GMT".into()),
            ],
        }),
        paging_stop: None,
        chain_stop: None,
        analysis: None,
    };
    store.finish(&lease, &record, T0 + 1).await.unwrap();

    // WHEN its stored item is measured
    let item = stored(&client, &table, &crawl, url).await;
    let bytes = item_size(&item);

    // THEN it fits one write unit
    println!("typical succeeded task item: {bytes} bytes");
    assert!(bytes < 1024, "{bytes} bytes: {item:?}");
    // AND it reads back whole, the request it sent included
    let read = store.get(&crawl, &task.task_id).await.unwrap().unwrap();
    assert_eq!(read.fetch.as_ref(), Some(&record));
}

#[tokio::test]
async fn a_task_with_the_fullest_analysis_stays_within_six_write_units() {
    // GIVEN the typical task, its analysis (`analysis.page` and `analysis.text`) at every bound
    let client = clients(&moto::shared().endpoint).await.dynamodb;
    let table = unique("size-analysis");
    create_table(&client, &table).await.unwrap();
    let store = DynamoStore::new(client.clone(), &table, 4, Arc::new(CallCounts::default()));
    let crawl = crawl_id();
    let url = "https://www.example-news-site.com/2026/11/21/politics/some-long-article-slug-about-things?ref=home";
    store.seed(&crawl, &[new_task(url)], T0).await.unwrap();
    let (task, lease) = claim(&store, &crawl, url, T0).await;
    let long = |n: usize| "é".repeat(n);
    let analysis = PageAnalysis::new(
        Some(&long(PageAnalysis::TITLE_BYTES)),
        Some(&long(PageAnalysis::DESCRIPTION_BYTES)),
        Some("zh-Hant-TW"),
        None,
    )
    .with_text(&long(PageAnalysis::TEXT_BYTES));
    assert!(analysis.text_cut);
    let record = FetchRecord {
        analysis: Some(analysis),
        ..record("0123456789abcdef0123456789abcdef", T0)
    };
    store.finish(&lease, &record, T0 + 1).await.unwrap();

    // WHEN its stored item is measured
    let bytes = item_size(&stored(&client, &table, &crawl, url).await);

    // THEN every write of it costs at most six write units, and it reads back whole
    println!("task item with the fullest analysis: {bytes} bytes");
    assert!(bytes <= 6 * 1024, "{bytes} bytes");
    let read = store.get(&crawl, &task.task_id).await.unwrap().unwrap();
    assert_eq!(read.fetch.as_ref(), Some(&record));
}

#[tokio::test]
async fn the_capacity_model_prices_the_items_dynamodb_holds() {
    // GIVEN a task taken through seed, claim, finish, reschedule, claim, a changed finish,
    // reschedule, and a finish in a turn of a page never fetched again
    let client = clients(&moto::shared().endpoint).await.dynamodb;
    let table = unique("images");
    create_table(&client, &table).await.unwrap();
    let store = DynamoStore::new(client.clone(), &table, 4, Arc::new(CallCounts::default()));
    let crawl = crawl_id();
    let url = "https://a.example/page?id=7";
    let id = CanonicalUrl::parse(url).unwrap().task_id();
    let steps = [
        "seed",
        "claim",
        "finish",
        "reschedule",
        "claim again",
        "changed finish",
        "reschedule",
        "finish in a turn",
    ];
    let mut before = None;
    for (i, step) in steps.iter().enumerate() {
        let now = T0 + i as i64 * 1_000;
        match *step {
            "seed" => {
                store.seed(&crawl, &[new_task(url)], now).await.unwrap();
            }
            "claim" | "claim again" => {
                claim(&store, &crawl, url, now).await;
            }
            "finish in a turn" => {
                let ClaimOutcome::Claimed { lease, .. } =
                    store.claim_in_turn(&crawl, &id, 60_000, now).await.unwrap()
                else {
                    panic!("not claimed");
                };
                let last = FetchRecord {
                    next_fetch_at: None,
                    ..record("cc", now)
                };
                store.finish(&lease, &last, now).await.unwrap();
            }
            "reschedule" => {
                assert!(
                    store
                        .reschedule(&crawl, &id, &[Status::Succeeded], now)
                        .await
                        .unwrap()
                );
            }
            _ => {
                let task = store.get(&crawl, &id).await.unwrap().unwrap();
                let lease = trawl_domain::transition::lease_of(&task);
                let md5 = if *step == "finish" { "aa" } else { "bb" };
                store.finish(&lease, &record(md5, now), now).await.unwrap();
            }
        }
        // WHEN the stored item is compared with the model's image of the stored task
        let task = store.get(&crawl, &id).await.unwrap().unwrap();
        // THEN they are the same item, attribute for attribute
        let image = task_image(&task, before.as_ref(), 4).unwrap();
        assert_eq!(
            stored(&client, &table, &crawl, url).await,
            image,
            "after {step}"
        );
        before = Some(image);
    }
}
