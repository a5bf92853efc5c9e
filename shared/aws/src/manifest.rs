//! Seed manifests read with S3 GetObject (streamed: the body is never collected).

use crate::errors::is_retryable;
use aws_sdk_s3::error::ProvideErrorMetadata;
use std::sync::Arc;
use trawl_core::seed::{ManifestError, ManifestSource, OpenManifest};
use trawl_domain::calls::{Call, CallCounts};

/// Manifests read with S3 GetObject (streamed: the body is never collected).
#[derive(Debug, Clone)]
pub struct S3Manifests {
    client: aws_sdk_s3::Client,
    calls: Arc<CallCounts>,
}

impl S3Manifests {
    pub fn new(client: aws_sdk_s3::Client, calls: Arc<CallCounts>) -> Self {
        Self { client, calls }
    }
}

impl ManifestSource for S3Manifests {
    async fn open(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        if_match: Option<&str>,
    ) -> Result<OpenManifest, ManifestError> {
        let range = (offset > 0).then(|| format!("bytes={offset}-"));
        self.calls.record(Call::S3GetObject);
        let out = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_range(range)
            .set_if_match(if_match.map(str::to_owned))
            .send()
            .await
            .map_err(|e| {
                let retryable = is_retryable(&e);
                let message = match e.code() {
                    Some("PreconditionFailed") => {
                        "the manifest changed since the cursor was issued".to_owned()
                    }
                    Some(code) => format!("{code}: {}", e.message().unwrap_or_default()),
                    None => e.to_string(),
                };
                let (bucket, key) = (bucket.to_owned(), key.to_owned());
                if retryable {
                    ManifestError::Unavailable {
                        bucket,
                        key,
                        message,
                    }
                } else {
                    ManifestError::Unreadable {
                        bucket,
                        key,
                        message,
                    }
                }
            })?;
        Ok(OpenManifest {
            etag: out.e_tag().map(str::to_owned),
            reader: Box::pin(out.body.into_async_read()),
        })
    }
}
