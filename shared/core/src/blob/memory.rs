//! An object store in memory, for unit tests and simulations: the same contract as S3 and the
//! directory store (an upload is invisible until complete).

use super::{
    Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, ListPage, Listed, ObjectMeta,
    from_rest, to_rest,
};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};
use trawl_domain::task::{Millis, Span, now_ms};

/// A segment takes appends until it holds this much (each append copies it: kept small).
const SEGMENT_BYTES: usize = 4 << 20;

/// Each object with when it was written (wall clock).
type Objects = Arc<Mutex<BTreeMap<String, (Bytes, Millis)>>>;

/// Objects by key. Cheap to clone: clones share the objects.
#[derive(Debug, Clone, Default)]
pub struct MemoryBlobStore {
    objects: Objects,
    /// `BlobStore::gather_bytes` (0 unless a test gathers, as S3 does).
    gather: u64,
}

impl MemoryBlobStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose host turns gather up to `bytes` of page records per append, as on S3.
    pub fn gathering(bytes: u64) -> Self {
        Self {
            gather: bytes,
            ..Self::default()
        }
    }
}

fn store(objects: &Objects, key: &str, body: Bytes) {
    objects
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.to_owned(), (body, now_ms()));
}

impl BlobStore for MemoryBlobStore {
    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        store(&self.objects, key, to_rest("put", key, body, meta)?);
        Ok(())
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        let stored = {
            let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
            objects.get(key).map(|(body, _)| body.clone())
        };
        stored.map(|s| from_rest("get", key, s)).transpose()
    }

    fn gather_bytes(&self) -> u64 {
        self.gather
    }

    /// The last segment of its directory takes the next appends (`append`).
    fn is_appending(&self, key: &str) -> bool {
        let Some((dir, _)) = key.rsplit_once('/') else {
            return false;
        };
        let dir = format!("{dir}/");
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        objects
            .range(dir.clone()..)
            .take_while(|(k, _)| k.starts_with(&dir))
            .last()
            .is_some_and(|(k, _)| k == key)
    }

    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        // The open segment is the last one under `dir`, while it has room.
        let segments: Vec<(&String, usize)> = objects
            .range(dir.to_owned()..)
            .take_while(|(k, _)| k.starts_with(dir))
            .map(|(k, (bytes, _))| (k, bytes.len()))
            .collect();
        let key = match segments.last() {
            Some((key, len)) if *len < SEGMENT_BYTES => (*key).clone(),
            _ => format!("{dir}seg-{:08}.warc.gz", segments.len()),
        };
        let mut segment = objects
            .get(&key)
            .map(|(b, _)| b.to_vec())
            .unwrap_or_default();
        let span = Span {
            offset: segment.len() as u64,
            length: records.len() as u64,
            items: 0,
        };
        segment.extend_from_slice(&records);
        objects.insert(key.clone(), (Bytes::from(segment), now_ms()));
        Ok(Appended { key, span })
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((bytes, _)) = objects.get(key) else {
            return Ok(None);
        };
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(offset.saturating_add(length)).ok())
            .and_then(|(from, to)| bytes.get(from..to).map(|_| from..to));
        match range {
            Some(range) => Ok(Some(bytes.slice(range))),
            None => Err(BlobError::backend(
                "get_range",
                key,
                format!(
                    "{length} bytes at {offset} reach past its {} bytes",
                    bytes.len()
                ),
            )),
        }
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        objects.remove(key);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> BlobResult<ListPage> {
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        let from = match start_after {
            Some(after) => Bound::Excluded(after.to_owned()),
            None => Bound::Included(prefix.to_owned()),
        };
        let mut page = ListPage::default();
        for (key, (stored, modified)) in objects
            .range((from, Bound::Unbounded))
            .skip_while(|(k, _)| !k.starts_with(prefix) && k.as_str() < prefix)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            if page.objects.len() == limit as usize {
                page.next = page.objects.last().map(|o: &Listed| o.key.clone());
                break;
            }
            page.objects.push(Listed {
                key: key.clone(),
                modified: *modified,
                bytes: stored.len() as u64,
            });
        }
        Ok(page)
    }

    async fn upload(&self, key: &str, _content_type: &str) -> BlobResult<impl BlobUpload> {
        Ok(MemoryUpload {
            objects: Arc::clone(&self.objects),
            key: key.to_owned(),
            body: Vec::new(),
        })
    }
}

/// An upload collected in memory until `complete`.
pub struct MemoryUpload {
    objects: Objects,
    key: String,
    body: Vec<u8>,
}

impl BlobUpload for MemoryUpload {
    async fn write(&mut self, chunk: &[u8]) -> BlobResult<()> {
        self.body.extend_from_slice(chunk);
        Ok(())
    }

    async fn complete(self) -> BlobResult<()> {
        store(&self.objects, &self.key, Bytes::from(self.body));
        Ok(())
    }

    async fn abort(self) -> BlobResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ObjectMeta {
        ObjectMeta {
            content_type: "text/html".to_owned(),
            source_url: "http://example.com/".to_owned(),
            compress: false,
        }
    }

    #[tokio::test]
    async fn objects_are_listed_by_prefix_and_uploads_appear_on_completion() {
        let blobs = MemoryBlobStore::new();
        blobs
            .put("crawl=a/pk=1", Body::new(&b"x"[..]), &meta())
            .await
            .unwrap();
        blobs
            .put("crawl=ab/pk=1", Body::new(&b"y"[..]), &meta())
            .await
            .unwrap();
        let mut upload = blobs.upload("crawl=a/pk=3", "text/plain").await.unwrap();
        upload.write(b"part").await.unwrap();
        assert_eq!(blobs.list("crawl=a/").await.unwrap(), ["crawl=a/pk=1"]);
        upload.complete().await.unwrap();
        assert_eq!(
            blobs.list("crawl=a/").await.unwrap(),
            ["crawl=a/pk=1", "crawl=a/pk=3"]
        );
        blobs.delete("crawl=a/pk=1").await.unwrap();
        assert_eq!(
            blobs.get("crawl=a/pk=3").await.unwrap().as_deref(),
            Some(&b"part"[..])
        );
        assert_eq!(blobs.get("crawl=a/pk=1").await.unwrap(), None);
    }
}
