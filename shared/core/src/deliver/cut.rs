//! A blob store for tests whose calls fail on purpose: some reads of matching keys, some
//! uploads, the way an outage or a call cut mid-way makes them fail.

use crate::blob::ObjectMeta;
use crate::blob::memory::MemoryBlobStore;
use crate::blob::{Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, ListPage};
use bytes::Bytes;
use std::sync::atomic::{AtomicU32, Ordering};

/// Which calls of one kind fail: the `from`th to the `to`th (from 0, `to` excluded) of those
/// whose key contains `under`.
#[derive(Debug, Default)]
pub(crate) struct Cuts {
    pub(crate) under: String,
    pub(crate) from: u32,
    pub(crate) to: u32,
    /// Matching calls so far.
    pub(crate) seen: AtomicU32,
}

impl Cuts {
    pub(crate) fn new(under: &str, from: u32, to: u32) -> Self {
        Self {
            under: under.to_owned(),
            from,
            to,
            seen: AtomicU32::new(0),
        }
    }

    /// Whether this call of `op` on `key` fails (and the error it fails with).
    fn cut(&self, op: &'static str, key: &str) -> BlobResult<()> {
        if self.under.is_empty() || !key.contains(&self.under) {
            return Ok(());
        }
        let n = self.seen.fetch_add(1, Ordering::SeqCst);
        if (self.from..self.to).contains(&n) {
            return Err(BlobError::unavailable(op, key, "streaming error"));
        }
        Ok(())
    }
}

/// `inner`, its `get`s cut as `reads` says and its uploads as `uploads` says.
pub(crate) struct CutStore {
    pub(crate) inner: MemoryBlobStore,
    pub(crate) reads: Cuts,
    pub(crate) uploads: Cuts,
}

impl BlobStore for CutStore {
    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        self.inner.put(key, body, meta).await
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        self.reads.cut("GetObject", key)?;
        self.inner.get(key).await
    }

    fn gather_bytes(&self) -> u64 {
        self.inner.gather_bytes()
    }

    fn is_appending(&self, key: &str) -> bool {
        self.inner.is_appending(key)
    }

    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        self.inner.append(dir, records).await
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        self.inner.get_range(key, offset, length).await
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        self.inner.delete(key).await
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        self.inner.list(prefix).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> BlobResult<ListPage> {
        self.inner.list_page(prefix, start_after, limit).await
    }

    async fn upload(&self, key: &str, content_type: &str) -> BlobResult<impl BlobUpload> {
        self.uploads.cut("CreateMultipartUpload", key)?;
        self.inner.upload(key, content_type).await
    }
}
