//! The object store for page bodies and deliveries: S3 (`s3`) or a local directory (`fs`), with
//! the same key layout.
//!
//! Page bodies live at `{prefix}crawl={crawl_id}/pk={task_id}/attr=html/md5={md5_hex}`: the key
//! names the content, so writing the same body twice is harmless, and a task's objects are all
//! under one prefix. The items extracted from a body (`crate::extract`) live beside it, at
//! `attr=items/md5={md5_hex}` (the body's md5), as a small JSON object.
//!
//! A crawl may keep its bodies gzip-compressed at rest (`ObjectMeta::compress`): the store
//! compresses on `put` and decompresses on `get`, so every reader sees the page's own bytes and
//! the md5 in the key stays the md5 of those bytes. S3 marks such an object with
//! `Content-Encoding: gzip`; a store without metadata (a directory, memory) recognises its own
//! compressed bodies by the gzip header's comment (`AT_REST_MARK`), so a fetched body that
//! happens to be gzip is never taken for one.
//!
//! A crawl with `storage.layout = segments` appends its bodies to segments instead
//! (`segment`): under `{prefix}crawl={crawl_id}/segments/`, each page a few gzip members at a
//! place its fetch record names.

pub mod memory;
pub mod segment;

use crate::backoff::Transient;
use crate::cause::Cause;
use bytes::Bytes;
use flate2::Compression;
use flate2::read::GzDecoder;
use md5::Digest as _;
use std::future::Future;
use std::io::{Read, Write};
use thiserror::Error;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::task::{Millis, Span};

#[derive(Debug, Error)]
pub enum BlobError {
    /// Throttled, timed out or unreachable: retrying later may succeed.
    #[error("{operation} {key}: unavailable: {message}")]
    Unavailable {
        operation: &'static str,
        key: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    #[error("{operation} {key}: {message}")]
    Backend {
        operation: &'static str,
        key: String,
        message: String,
        #[source]
        source: Option<Cause>,
    },
    /// A key that would escape the store (local directory) or is otherwise unusable.
    #[error("invalid key {0:?}")]
    InvalidKey(String),
}

impl BlobError {
    /// A failure on `key` that may pass if retried later.
    pub fn unavailable(operation: &'static str, key: &str, message: impl Into<String>) -> Self {
        BlobError::Unavailable {
            operation,
            key: key.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// A failure on `key` that will not pass by retrying.
    pub fn backend(operation: &'static str, key: &str, message: impl Into<String>) -> Self {
        BlobError::Backend {
            operation,
            key: key.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// The same error, keeping `cause` as its source (an invalid key has none).
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        if let BlobError::Unavailable { source, .. } | BlobError::Backend { source, .. } = &mut self
        {
            *source = Some(cause.into());
        }
        self
    }

    pub fn is_retryable(&self) -> bool {
        matches!(self, BlobError::Unavailable { .. })
    }
}

impl Transient for BlobError {
    fn is_transient(&self) -> bool {
        self.is_retryable()
    }
}

pub type BlobResult<T> = Result<T, BlobError>;

/// A body and its md5, computed here and nowhere else: the pair cannot disagree, so a store
/// never hashes the body again to check it (S3 still checks the upload against the md5, sent
/// as Content-MD5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    bytes: Bytes,
    md5: [u8; 16],
}

impl Body {
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        let md5 = md5::Md5::digest(&bytes).into();
        Self { bytes, md5 }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Raw md5 of the bytes.
    pub fn md5(&self) -> [u8; 16] {
        self.md5
    }

    pub fn md5_hex(&self) -> String {
        hex::encode(self.md5)
    }

    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }
}

/// What is stored with a page body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub content_type: String,
    /// The page's URL (stored as object metadata).
    pub source_url: String,
    /// Keep the body gzip-compressed at rest (the crawl's `storage.compress_bodies`).
    pub compress: bool,
}

/// The `Content-Encoding` of a body kept compressed.
pub const GZIP: &str = "gzip";

/// The gzip header comment of a body trawl compressed for storage.
pub const AT_REST_MARK: &str = "trawl: body gzip-compressed at rest";

/// `body` gzip-compressed for storage, marked as trawl's own.
pub fn compress(operation: &'static str, key: &str, body: &[u8]) -> BlobResult<Bytes> {
    let failed =
        |e: std::io::Error| BlobError::backend(operation, key, format!("gzip: {e}")).caused_by(e);
    let mut gz = flate2::GzBuilder::new()
        .comment(AT_REST_MARK)
        .write(Vec::with_capacity(body.len() / 4), Compression::default());
    gz.write_all(body).map_err(failed)?;
    Ok(Bytes::from(gz.finish().map_err(failed)?))
}

/// The body a store keeps compressed, decompressed.
pub fn decompress(operation: &'static str, key: &str, stored: &[u8]) -> BlobResult<Bytes> {
    let mut body = Vec::with_capacity(stored.len() * 4);
    GzDecoder::new(stored).read_to_end(&mut body).map_err(|e| {
        BlobError::backend(operation, key, format!("stored gzip body unreadable: {e}")).caused_by(e)
    })?;
    Ok(Bytes::from(body))
}

/// A stored object as read from a store without metadata: decompressed when it is a body trawl
/// compressed (its gzip header carries `AT_REST_MARK`), as stored otherwise.
pub fn from_rest(operation: &'static str, key: &str, stored: Bytes) -> BlobResult<Bytes> {
    if !stored.starts_with(&[0x1f, 0x8b]) {
        return Ok(stored);
    }
    let marked = GzDecoder::new(&stored[..])
        .header()
        .and_then(|h| h.comment())
        .is_some_and(|c| c == AT_REST_MARK.as_bytes());
    if marked {
        decompress(operation, key, &stored)
    } else {
        Ok(stored)
    }
}

/// What a store without metadata keeps for `body`: compressed when the crawl asks for it.
pub fn to_rest(
    operation: &'static str,
    key: &str,
    body: Body,
    meta: &ObjectMeta,
) -> BlobResult<Bytes> {
    if meta.compress {
        compress(operation, key, body.bytes())
    } else {
        Ok(body.into_bytes())
    }
}

/// Where things go in the object store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Prepended to every key; empty or ending in `/`.
    pub prefix: String,
}

impl Layout {
    pub fn new(prefix: &str) -> Self {
        let prefix = prefix.trim_matches('/');
        Self {
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        }
    }

    /// Key of a page body.
    pub fn html_key(&self, crawl_id: &CrawlId, task_id: &TaskId, md5_hex: &str) -> String {
        format!(
            "{}attr=html/md5={md5_hex}",
            self.task_prefix(crawl_id, task_id)
        )
    }

    /// Key of the items extracted from the page body at `html_key` (`crate::extract`): beside
    /// the body, under the same md5, so an unchanged page keeps its items.
    pub fn items_key_of(html_key: &str) -> String {
        html_key.replacen("/attr=html/", "/attr=items/", 1)
    }

    /// Every object of one task lies under this prefix.
    pub fn task_prefix(&self, crawl_id: &CrawlId, task_id: &TaskId) -> String {
        format!("{}pk={task_id}/", self.crawl_prefix(crawl_id))
    }

    /// Every page body of one crawl lies under this prefix.
    pub fn crawl_prefix(&self, crawl_id: &CrawlId) -> String {
        format!("{}crawl={crawl_id}/", self.prefix)
    }

    /// The segments of one crawl lie under this prefix (`segment`).
    pub fn segments_prefix(&self, crawl_id: &CrawlId) -> String {
        format!("{}segments/", self.crawl_prefix(crawl_id))
    }

    /// Every delivery of one crawl lies under this prefix.
    pub fn deliveries_prefix(&self, crawl_id: &CrawlId) -> String {
        format!("{}deliveries/crawl={crawl_id}/", self.prefix)
    }

    /// Extracts the md5 from a page-body key made by `html_key`.
    pub fn md5_of_key(key: &str) -> Option<&str> {
        key.rsplit_once("/md5=").map(|(_, md5)| md5)
    }
}

/// A stored object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    /// When it was last written (S3's `LastModified`, a file's modification time).
    pub modified: Millis,
    /// Its size.
    pub bytes: u64,
}

/// One page of a listing, in lexicographic key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<Listed>,
    /// Pass as `start_after` for the next page; None when the listing is done.
    pub next: Option<String>,
}

/// Where an append landed: the segment's key and the bytes' place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub key: String,
    pub span: Span,
}

/// An object store.
pub trait BlobStore: Send + Sync {
    /// Appends `records` (whole gzip members) to this process's open segment under `dir` (a
    /// key prefix ending in `/`), durably: when it returns, the bytes survive a crash or a power
    /// cut, so a pointer written afterwards never names lost bytes. A store batches the appends
    /// that arrive together into one flush (group commit). Bytes whose append failed, or whose
    /// task was never finished, stay as garbage in their segment; nothing points at them.
    fn append(
        &self,
        dir: &str,
        records: Bytes,
    ) -> impl Future<Output = BlobResult<Appended>> + Send;

    /// How many bytes of page records a host turn gathers before it appends them together
    /// (`crate::crawler`: one `append`, then the fenced finishes of the pages in it); what a
    /// turn holds when its round of fetches ends is appended then. 0: each page is appended
    /// as soon as it is stored, for a store whose appends are cheap and whose concurrent
    /// appends share a flush anyway (a local file): a page is finished at once, and one in
    /// flight at a crash is the only one fetched again. A store paid per request (S3) gathers:
    /// a turn's pages go up in one request, and are fetched again if the turn dies before it.
    fn gather_bytes(&self) -> u64;

    /// Whether this store may still append to the segment at `key` (a local file it holds
    /// open): compaction must not rewrite or delete it. A store whose appends each write a
    /// whole object of their own (S3) appends to none.
    fn is_appending(&self, key: &str) -> bool;

    /// `length` bytes of the object at `key` from `offset`, or None when there is no such
    /// object. Fewer bytes than asked for is an error: a span never reaches past its segment.
    fn get_range(
        &self,
        key: &str,
        offset: u64,
        length: u64,
    ) -> impl Future<Output = BlobResult<Option<Bytes>>> + Send;

    /// The ranges `(offset, length)` of the object at `key`, in the order asked, or None when
    /// there is no such object: each as `get_range` reads it. A store may read them in one go
    /// (a local file opened once, for all the pages' items a delivery reads from a segment).
    fn get_ranges(
        &self,
        key: &str,
        ranges: &[(u64, u64)],
    ) -> impl Future<Output = BlobResult<Option<Vec<Bytes>>>> + Send {
        async move {
            let mut read = Vec::with_capacity(ranges.len());
            for &(offset, length) in ranges {
                let Some(bytes) = self.get_range(key, offset, length).await? else {
                    return Ok(None);
                };
                read.push(bytes);
            }
            Ok(Some(read))
        }
    }

    /// Writes `body` at `key` (overwriting: keys are content-addressed).
    fn put(
        &self,
        key: &str,
        body: Body,
        meta: &ObjectMeta,
    ) -> impl Future<Output = BlobResult<()>> + Send;

    /// The object at `key`, or None.
    fn get(&self, key: &str) -> impl Future<Output = BlobResult<Option<Bytes>>> + Send;

    /// Deletes `key`; deleting a missing key is not an error.
    fn delete(&self, key: &str) -> impl Future<Output = BlobResult<()>> + Send;

    /// Keys under `prefix`, in lexicographic order.
    fn list(&self, prefix: &str) -> impl Future<Output = BlobResult<Vec<String>>> + Send;

    /// Up to `limit` objects under `prefix` whose keys sort after `start_after`, in
    /// lexicographic order, with their modification times: a listing a page at a time, so a
    /// pass over millions of objects holds one page (S3: one ListObjectsV2 call).
    fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> impl Future<Output = BlobResult<ListPage>> + Send;

    /// Starts a streamed upload to `key` (S3 multipart, or a temporary file): nothing is visible
    /// at `key` until `complete`.
    fn upload(
        &self,
        key: &str,
        content_type: &str,
    ) -> impl Future<Output = BlobResult<impl BlobUpload>> + Send;
}

/// A streamed upload in progress.
pub trait BlobUpload: Send {
    /// Appends bytes; the adapter buffers up to its part size.
    fn write(&mut self, chunk: &[u8]) -> impl Future<Output = BlobResult<()>> + Send;

    /// Makes the object visible at its key.
    fn complete(self) -> impl Future<Output = BlobResult<()>> + Send;

    /// Discards everything written.
    fn abort(self) -> impl Future<Output = BlobResult<()>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_at_rest_round_trip_and_foreign_gzip_is_left_alone() {
        let html = Bytes::from_static(b"<html>hello hello hello hello</html>");
        let meta = ObjectMeta {
            content_type: "text/html".into(),
            source_url: "http://example.com/".into(),
            compress: true,
        };
        let stored = to_rest("put", "k", Body::new(html.clone()), &meta).unwrap();
        assert_ne!(stored, html);
        assert_eq!(from_rest("get", "k", stored).unwrap(), html);
        // A fetched body that is itself gzip (a .gz file) is kept and read back as fetched.
        let mut foreign = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
        foreign.write_all(b"a tarball").unwrap();
        let foreign = Bytes::from(foreign.finish().unwrap());
        assert_eq!(from_rest("get", "k", foreign.clone()).unwrap(), foreign);
        let plain = ObjectMeta {
            compress: false,
            ..meta.clone()
        };
        assert_eq!(
            to_rest("put", "k", Body::new(foreign.clone()), &plain).unwrap(),
            foreign
        );
    }

    #[test]
    fn keys_follow_the_md5_layout() {
        let crawl = CrawlId::parse("c1").unwrap();
        let task = trawl_domain::canonical::CanonicalUrl::parse("http://example.com/")
            .unwrap()
            .task_id();
        let key = Layout::new("/pages/").html_key(&crawl, &task, "abc");
        assert_eq!(key, format!("pages/crawl=c1/pk={task}/attr=html/md5=abc"));
        assert_eq!(Layout::md5_of_key(&key), Some("abc"));
        assert_eq!(Layout::new("").crawl_prefix(&crawl), "crawl=c1/");
    }
}
