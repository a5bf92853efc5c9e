//! The object store on S3, through the real SDK. Bodies are sent with Content-MD5 (S3 rejects a
//! corrupted upload), their Content-Type and the page URL as metadata.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use bytes::Bytes;
use md5::{Digest, Md5};
use std::sync::Arc;
use trawl_core::blob::{
    Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, GZIP, ListPage, Listed,
    ObjectMeta, compress, decompress,
};
use trawl_domain::calls::{Call, CallCounts};

/// Multipart part size: S3's minimum is 5 MiB for every part but the last.
const PART_SIZE: usize = 8 * 1024 * 1024;

mod segments;

#[derive(Clone)]
pub struct S3BlobStore {
    client: Client,
    bucket: String,
    calls: Arc<CallCounts>,
    commits: Arc<segments::Commits>,
}

impl std::fmt::Debug for S3BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3BlobStore")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// Maps an SDK error by its type (`crate::errors`), keeping it as the source.
fn map_err<E>(operation: &'static str, key: &str, e: SdkError<E, HttpResponse>) -> BlobError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    classify(operation, key, &e).caused_by(e)
}

/// The error an SDK error maps to, without its source (the caller gives it one).
fn classify<E>(operation: &'static str, key: &str, e: &SdkError<E, HttpResponse>) -> BlobError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let message = crate::errors::describe(e);
    if crate::errors::is_retryable(e) {
        BlobError::unavailable(operation, key, message)
    } else {
        BlobError::backend(operation, key, message)
    }
}

impl S3BlobStore {
    pub fn new(client: Client, bucket: impl Into<String>, calls: Arc<CallCounts>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            calls,
            commits: Arc::default(),
        }
    }
}

impl BlobStore for S3BlobStore {
    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        // S3 checks the bytes it receives against Content-MD5: the compressed ones when compressed.
        let (body, md5, encoding) = if meta.compress {
            let gz = compress("PutObject", key, body.bytes())?;
            let md5: [u8; 16] = Md5::digest(&gz).into();
            (gz, md5, Some(GZIP))
        } else {
            let md5 = body.md5();
            (body.into_bytes(), md5, None)
        };
        self.calls.record(Call::S3PutObject);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_md5(base64::engine::general_purpose::STANDARD.encode(md5))
            .content_type(&meta.content_type)
            .set_content_encoding(encoding.map(str::to_owned))
            .metadata("source-url", &meta.source_url)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| map_err("PutObject", key, e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        self.calls.record(Call::S3GetObject);
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if matches!(e.as_service_error(), Some(GetObjectError::NoSuchKey(_))) => {
                return Ok(None);
            }
            Err(e) => return Err(map_err("GetObject", key, e)),
        };
        let compressed = out.content_encoding() == Some(GZIP);
        let body = collect_body(key, out.body).await?;
        if compressed {
            return decompress("GetObject", key, &body).map(Some);
        }
        Ok(Some(body))
    }

    /// A turn's pages in one PUT: a PUT is paid per request (`segments::TURN_SEGMENT_BYTES`).
    fn gather_bytes(&self) -> u64 {
        segments::TURN_SEGMENT_BYTES
    }

    /// Each segment PUT is a whole object, never appended to.
    fn is_appending(&self, _: &str) -> bool {
        false
    }

    /// Group-committed (`segments`): the appends waiting while a PUT is in flight share the
    /// next one.
    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        self.append_grouped(dir, records).await
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        self.calls.record(Call::S3GetObject);
        let last = offset.saturating_add(length).saturating_sub(1);
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={offset}-{last}"))
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if matches!(e.as_service_error(), Some(GetObjectError::NoSuchKey(_))) => {
                return Ok(None);
            }
            Err(e) => return Err(map_err("GetObject", key, e)),
        };
        let body = collect_body(key, out.body).await?;
        if body.len() as u64 != length {
            return Err(BlobError::backend(
                "GetObject",
                key,
                format!("{} bytes at {offset}, {length} asked for", body.len()),
            ));
        }
        Ok(Some(body))
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        self.calls.record(Call::S3DeleteObject);
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| map_err("DeleteObject", key, e))?;
        Ok(())
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            self.calls.record(Call::S3ListObjects);
            let page = page.map_err(|e| map_err("ListObjectsV2", prefix, e))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        keys.sort();
        Ok(keys)
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> BlobResult<ListPage> {
        self.calls.record(Call::S3ListObjects);
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(start_after.map(str::to_owned))
            .max_keys(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| map_err("ListObjectsV2", prefix, e))?;
        let objects: Vec<Listed> = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(Listed {
                    key: o.key()?.to_owned(),
                    modified: o.last_modified().and_then(|t| t.to_millis().ok())?,
                    bytes: o.size().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                })
            })
            .collect();
        let next = match out.is_truncated() {
            Some(true) => objects.last().map(|o| o.key.clone()),
            _ => None,
        };
        Ok(ListPage { objects, next })
    }

    async fn upload(&self, key: &str, content_type: &str) -> BlobResult<impl BlobUpload> {
        Ok(S3Upload {
            store: self.clone(),
            key: key.to_owned(),
            content_type: content_type.to_owned(),
            upload_id: None,
            buffer: Vec::new(),
            parts: Vec::new(),
        })
    }
}

/// A streamed upload: a single PUT when it fits in one part, multipart otherwise, so memory
/// stays bounded by one part whatever the object's size.
pub struct S3Upload {
    store: S3BlobStore,
    key: String,
    content_type: String,
    upload_id: Option<String>,
    buffer: Vec<u8>,
    parts: Vec<CompletedPart>,
}

impl S3Upload {
    async fn upload_id(&mut self) -> BlobResult<String> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        self.store.calls.record(Call::S3CreateMultipartUpload);
        let out = self
            .store
            .client
            .create_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .content_type(&self.content_type)
            .send()
            .await
            .map_err(|e| map_err("CreateMultipartUpload", &self.key, e))?;
        let id = out.upload_id.ok_or_else(|| {
            BlobError::backend("CreateMultipartUpload", &self.key, "no upload id")
        })?;
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    async fn flush_part(&mut self) -> BlobResult<()> {
        let upload_id = self.upload_id().await?;
        let number = self.parts.len() as i32 + 1;
        let body = std::mem::take(&mut self.buffer);
        self.store.calls.record(Call::S3UploadPart);
        let out = self
            .store
            .client
            .upload_part()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(upload_id)
            .part_number(number)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| map_err("UploadPart", &self.key, e))?;
        self.parts.push(
            CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag)
                .build(),
        );
        Ok(())
    }
}

impl BlobUpload for S3Upload {
    async fn write(&mut self, chunk: &[u8]) -> BlobResult<()> {
        self.buffer.extend_from_slice(chunk);
        if self.buffer.len() >= PART_SIZE {
            self.flush_part().await?;
        }
        Ok(())
    }

    async fn complete(mut self) -> BlobResult<()> {
        if self.upload_id.is_none() {
            self.store.calls.record(Call::S3PutObject);
            self.store
                .client
                .put_object()
                .bucket(&self.store.bucket)
                .key(&self.key)
                .content_type(&self.content_type)
                .body(ByteStream::from(std::mem::take(&mut self.buffer)))
                .send()
                .await
                .map_err(|e| map_err("PutObject", &self.key, e))?;
            return Ok(());
        }
        if !self.buffer.is_empty() {
            self.flush_part().await?;
        }
        let upload_id = self.upload_id().await?;
        self.store.calls.record(Call::S3CompleteMultipartUpload);
        self.store
            .client
            .complete_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(self.parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| map_err("CompleteMultipartUpload", &self.key, e))?;
        Ok(())
    }

    async fn abort(self) -> BlobResult<()> {
        let Some(upload_id) = self.upload_id else {
            return Ok(());
        };
        self.store.calls.record(Call::S3AbortMultipartUpload);
        self.store
            .client
            .abort_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.key)
            .upload_id(upload_id)
            .send()
            .await
            .map_err(|e| map_err("AbortMultipartUpload", &self.key, e))?;
        Ok(())
    }
}

/// A GetObject's body, read whole; a stream cut short is a retryable error.
async fn collect_body(key: &str, body: aws_sdk_s3::primitives::ByteStream) -> BlobResult<Bytes> {
    body.collect()
        .await
        .map(|data| data.into_bytes())
        .map_err(|e| BlobError::unavailable("GetObject", key, e.to_string()).caused_by(e))
}
