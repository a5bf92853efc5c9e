//! What an AWS error becomes: a port's error with its one-line message and the SDK's error kept
//! as its `source()` (for callers and logs), classified as before. On moto, against resources
//! that do not exist.

use crate::support::{clients, moto};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use bytes::Bytes;
use std::error::Error;
use std::sync::Arc;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::sqs::SqsQueue;
use trawl_core::blob::{BlobError, BlobStore};
use trawl_core::queue::{QueueError, WorkQueue};
use trawl_core::store::{StoreError, TaskRecords};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};

type GetItemFailure = SdkError<aws_sdk_dynamodb::operation::get_item::GetItemError, HttpResponse>;
type ReceiveFailure =
    SdkError<aws_sdk_sqs::operation::receive_message::ReceiveMessageError, HttpResponse>;
type GetObjectFailure = SdkError<aws_sdk_s3::operation::get_object::GetObjectError, HttpResponse>;
type PutObjectFailure = SdkError<aws_sdk_s3::operation::put_object::PutObjectError, HttpResponse>;

/// The source of `e`, as the SDK error type `T`.
fn source_as<'a, T: Error + 'static>(e: &'a (dyn Error + 'static)) -> &'a T {
    e.source()
        .unwrap_or_else(|| panic!("no source: {e:?}"))
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("source of another type: {e:?}"))
}

#[tokio::test]
async fn an_aws_error_keeps_the_sdks_error_as_its_source_and_its_one_line_message() {
    // GIVEN clients of a moto server, and a table, a queue and a bucket that do not exist
    let clients = clients(&moto::shared().endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb.clone(), "no-such-table", 1, calls.clone());
    let queue = SqsQueue::new(
        clients.sqs.clone(),
        format!("{}/000000000000/no-such-queue", moto::shared().endpoint),
        calls.clone(),
    );
    let blobs = S3BlobStore::new(clients.s3.clone(), "no-such-bucket", calls);
    let task = CanonicalUrl::parse("http://example.com/")
        .unwrap()
        .task_id();

    // WHEN each is used
    let store_error = store
        .get(&CrawlId::parse("c1").unwrap(), &task)
        .await
        .unwrap_err();
    let queue_error = queue.receive(1, 0).await.unwrap_err();
    let blob_error = blobs.get("crawl=c1/a").await.unwrap_err();
    let append_error = blobs
        .append("crawl=c1/segments/", Bytes::from_static(b"records"))
        .await
        .unwrap_err();

    // THEN each is the permanent error it was, its message one line naming the operation
    assert!(
        matches!(store_error, StoreError::Backend { .. }),
        "{store_error:?}"
    );
    assert!(
        matches!(queue_error, QueueError::Backend { .. }),
        "{queue_error:?}"
    );
    assert!(
        matches!(blob_error, BlobError::Backend { .. }),
        "{blob_error:?}"
    );
    assert!(
        matches!(append_error, BlobError::Backend { .. }),
        "{append_error:?}"
    );
    assert!(
        store_error
            .to_string()
            .starts_with("GetItem: ResourceNotFoundException (HTTP 400)"),
        "{store_error}"
    );
    assert!(
        blob_error
            .to_string()
            .starts_with("GetObject crawl=c1/a: NoSuchBucket (HTTP 404)"),
        "{blob_error}"
    );
    for message in [
        store_error.to_string(),
        queue_error.to_string(),
        blob_error.to_string(),
        append_error.to_string(),
    ] {
        assert_eq!(message.lines().count(), 1, "{message}");
    }

    // AND its source is the SDK's own error, with the service's code
    let get_item: &GetItemFailure = source_as(&store_error);
    assert!(
        get_item
            .as_service_error()
            .is_some_and(|e| e.is_resource_not_found_exception()),
        "{get_item:?}"
    );
    let receive: &ReceiveFailure = source_as(&queue_error);
    assert!(receive.as_service_error().is_some(), "{receive:?}");
    let get_object: &GetObjectFailure = source_as(&blob_error);
    assert!(get_object.as_service_error().is_some(), "{get_object:?}");
    // One segment PUT answers every append in it: each append's error shares the SDK's error.
    let put_object: &Arc<PutObjectFailure> = source_as(&append_error);
    assert!(put_object.as_service_error().is_some(), "{put_object:?}");
}
