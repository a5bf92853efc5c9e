//! Faults between trawl and AWS: the fault-injecting proxy (`trawl-faults`) in front of moto.
//! Races run on single-threaded moto (conditional writes atomic, as on DynamoDB).

use crate::support::{clients, moto, unique};
use bytes::Bytes;
use std::sync::Arc;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::stack::create_stack;
use trawl_core::blob::{BlobError, BlobStore, ObjectMeta};
use trawl_domain::calls::CallCounts;
use trawl_faults::{Fault, FaultProxy, Mix};

fn meta(body: &[u8]) -> ObjectMeta {
    use md5::{Digest, Md5};
    ObjectMeta {
        content_type: "text/html".into(),
        md5: Md5::digest(body).into(),
        source_url: "http://127.0.0.1/".into(),
        compress: false,
    }
}

#[tokio::test]
async fn the_proxy_answers_retryable_errors_and_loses_responses_of_applied_writes() {
    // GIVEN a bucket on moto, and the SDK pointed at a proxy in front of it
    let moto = moto::shared();
    let stack = create_stack(&clients(&moto.endpoint).await, &unique("faults"))
        .await
        .unwrap();
    let proxy = FaultProxy::start(
        &moto.endpoint,
        1,
        Mix {
            errors: 1.0,
            lost: 0.0,
        },
    )
    .await
    .unwrap();
    let calls = Arc::new(CallCounts::default());
    let through_proxy = S3BlobStore::new(
        clients(proxy.endpoint()).await.s3,
        &stack.bucket,
        calls.clone(),
    );
    let direct = S3BlobStore::new(clients(&moto.endpoint).await.s3, &stack.bucket, calls);

    // WHEN every request meets an error
    let body = Bytes::from_static(b"<p>lost</p>");
    let refused = through_proxy.put("a", body.clone(), &meta(&body)).await;

    // THEN the SDK retried, then the error is typed as retryable, and nothing was written
    assert!(
        matches!(refused, Err(BlobError::Unavailable { .. })),
        "{refused:?}"
    );
    let counts = proxy.counts();
    assert!(counts.requests >= 2, "the SDK retries: {counts:?}");
    assert_eq!(counts.errors(), counts.requests);
    assert_eq!(direct.get("a").await.unwrap(), None);

    // WHEN every response is lost instead
    proxy.set_mix(Mix {
        errors: 0.0,
        lost: 1.0,
    });
    let lost = through_proxy.put("b", body.clone(), &meta(&body)).await;

    // THEN the caller sees a retryable error while the write was applied
    assert!(
        matches!(lost, Err(BlobError::Unavailable { .. })),
        "{lost:?}"
    );
    assert_eq!(direct.get("b").await.unwrap(), Some(body.clone()));
    assert!(proxy.counts().lost() >= 1);

    // AND with faults off, requests pass through unchanged
    proxy.set_mix(Mix::NONE);
    let before = proxy.counts();
    through_proxy
        .put("c", body.clone(), &meta(&body))
        .await
        .unwrap();
    assert_eq!(through_proxy.get("c").await.unwrap(), Some(body));
    let after = proxy.counts();
    assert_eq!(after.requests, before.requests + 2);
    assert_eq!(after.injected, before.injected);
    assert!(Fault::ALL.iter().all(|f| after.of(*f) == before.of(*f)));
}
