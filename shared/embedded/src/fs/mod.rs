//! The embedded object store: a directory, with S3's key layout as relative paths.
//!
//! Writes go to a temporary file under `{root}/.uploads/` (same file system as the objects) and
//! are renamed into place, so a reader sees the whole old object, the whole new one, or none.
//! `.uploads` is reserved: no key may start with it, and `list` never shows it. Segments
//! (`segments`) are files appended to in place, each batch of appends flushed once.

mod segments;

use bytes::Bytes;
use std::io::ErrorKind as IoErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use tokio::fs;
use trawl_core::blob::{
    Appended, BlobError, BlobResult, BlobStore, BlobUpload, Body, ListPage, Listed, ObjectMeta,
    from_rest, to_rest,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::task::Millis;

/// Where temporary and in-progress files live, under the root.
const UPLOADS_DIR: &str = ".uploads";

/// Object store on a local directory.
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    root: PathBuf,
    calls: Arc<CallCounts>,
    /// The segment writer thread, started by the first append (`segments`).
    segments: Arc<OnceLock<mpsc::Sender<segments::Append>>>,
    /// The segments that writer has open.
    appending: segments::Appending,
}

/// Validates `key` and returns its segments: relative, `/`-separated, nothing that could escape
/// the root or name the uploads area.
fn segments(key: &str) -> BlobResult<Vec<&str>> {
    let invalid = || BlobError::InvalidKey(key.to_owned());
    if key.is_empty() || key.starts_with('/') || key.contains(['\\', '\0']) {
        return Err(invalid());
    }
    let parts: Vec<&str> = key.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(invalid());
    }
    if parts.first() == Some(&UPLOADS_DIR) {
        return Err(invalid());
    }
    Ok(parts)
}

fn io_error(operation: &'static str, key: &str, e: std::io::Error) -> BlobError {
    BlobError::backend(operation, key, e.to_string()).caused_by(e)
}

/// A file name no other writer in this or another process is using.
fn temp_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{:016x}.part",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        fastrand::u64(..)
    )
}

impl FsBlobStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>, calls: Arc<CallCounts>) -> Self {
        Self {
            root: root.into(),
            calls,
            segments: Arc::default(),
            appending: Arc::default(),
        }
    }

    /// The segment writer, started on first use.
    fn segment_writer(&self) -> std::io::Result<&mpsc::Sender<segments::Append>> {
        if self.segments.get().is_none() {
            // Two first appends at once may both start one: the loser's thread ends at once.
            let _ = self
                .segments
                .set(segments::start(Arc::clone(&self.appending))?);
        }
        self.segments
            .get()
            .ok_or_else(|| std::io::Error::other("segment writer not started"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, key: &str) -> BlobResult<PathBuf> {
        Ok(segments(key)?
            .into_iter()
            .fold(self.root.clone(), |path, segment| path.join(segment)))
    }
}

/// Makes the temporary file `temp` (its content written) the object at `target`, durably:
/// renamed into place (readers see all of it or none), then its data and every directory entry
/// leading to it flushed to disk, the directories this creates included. When this returns, the
/// object survives a power cut, so a pointer written afterwards never names a lost body. The
/// rename comes first so that one journal commit carries both the data and the new names (on
/// ext4 the directories' flushes then find nothing left to do). Removes `temp` if that fails.
/// Blocking: each object is one task of the blocking pool, and the concurrent flushes of the
/// pages in flight share journal commits.
fn publish(file: std::fs::File, temp: &Path, target: &Path) -> std::io::Result<()> {
    let result = (|| {
        let dirs = match target.parent() {
            Some(parent) => create_dirs(parent)?,
            None => Vec::new(),
        };
        std::fs::rename(temp, target)?;
        file.sync_data()?;
        for dir in dirs {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        // Best effort: the temporary file is invisible to `list` anyway.
        let _ = std::fs::remove_file(temp);
    }
    result
}

/// Creates `dir` and its missing parents. Returns the directories whose entries change and must
/// be flushed: `dir` itself, each one created, and the existing one the first was created in.
fn create_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut changed = vec![dir.to_path_buf()];
    let mut existing = dir;
    while !existing.is_dir() {
        match existing.parent() {
            Some(parent) => {
                existing = parent;
                changed.push(parent.to_path_buf());
            }
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    Ok(changed)
}

/// Writes `body` to a new temporary file under `uploads` and publishes it at `target`.
fn write_object(uploads: &Path, target: &Path, body: &[u8]) -> std::io::Result<()> {
    let (temp, file) = create_temp(uploads)?;
    write_and_publish(file, &temp, target, body)
}

/// Writes `rest` at the end of the temporary file `temp` and publishes it at `target`.
fn write_and_publish(
    mut file: std::fs::File,
    temp: &Path,
    target: &Path,
    rest: &[u8],
) -> std::io::Result<()> {
    if let Err(e) = std::io::Write::write_all(&mut file, rest) {
        drop(file);
        let _ = std::fs::remove_file(temp);
        return Err(e);
    }
    publish(file, temp, target)
}

/// Creates a temporary file under the uploads area.
fn create_temp(uploads: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    std::fs::create_dir_all(uploads)?;
    let path = uploads.join(temp_name());
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// Runs blocking file work on the blocking pool, as one task.
async fn blocking<T: Send + 'static>(
    operation: &'static str,
    key: &str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> BlobResult<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| io_error(operation, key, e)),
        Err(e) => Err(
            BlobError::backend(operation, key, format!("blocking task failed: {e}")).caused_by(e),
        ),
    }
}

impl BlobStore for FsBlobStore {
    async fn put(&self, key: &str, body: Body, meta: &ObjectMeta) -> BlobResult<()> {
        let target = self.path_of(key)?;
        let body = to_rest("put", key, body, meta)?;
        self.calls.record(Call::FileWrite);
        let uploads = self.root.join(UPLOADS_DIR);
        blocking("put", key, move || write_object(&uploads, &target, &body)).await
    }

    async fn get(&self, key: &str) -> BlobResult<Option<Bytes>> {
        let path = self.path_of(key)?;
        self.calls.record(Call::FileRead);
        match fs::read(&path).await {
            Ok(stored) => from_rest("get", key, Bytes::from(stored)).map(Some),
            Err(e) if e.kind() == IoErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error("get", key, e)),
        }
    }

    /// Each page on its own: the writer thread gives the appends that arrive together one
    /// flush (`segments`), so gathering a turn's pages would save little and refetch a whole
    /// turn after a kill.
    fn gather_bytes(&self) -> u64 {
        0
    }

    async fn append(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        let dir_key = dir.trim_end_matches('/');
        let path = self.path_of(dir_key)?;
        self.calls.record(Call::FileWrite);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let append = segments::Append {
            dir: path,
            dir_key: format!("{dir_key}/"),
            records,
            reply,
        };
        let stopped = || BlobError::backend("append", dir, "the segment writer stopped");
        let writer = self
            .segment_writer()
            .map_err(|e| io_error("append", dir, e))?;
        writer.send(append).map_err(|_| stopped())?;
        match answer.await {
            Ok(appended) => appended.map_err(|e| io_error("append", dir, e)),
            Err(_) => Err(stopped()),
        }
    }

    fn is_appending(&self, key: &str) -> bool {
        self.appending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(key)
    }

    async fn get_range(&self, key: &str, offset: u64, length: u64) -> BlobResult<Option<Bytes>> {
        let path = self.path_of(key)?;
        self.calls.record(Call::FileRead);
        let read = move || segments::read_range(&path, offset, length);
        Ok(blocking("get_range", key, read).await?.map(Bytes::from))
    }

    /// One blocking task and one open file for them all (a delivery's items pass reads a
    /// segment's pages' items this way, not each with a task of its own).
    async fn get_ranges(&self, key: &str, ranges: &[(u64, u64)]) -> BlobResult<Option<Vec<Bytes>>> {
        let path = self.path_of(key)?;
        for _ in ranges {
            self.calls.record(Call::FileRead);
        }
        let ranges = ranges.to_vec();
        let read = move || segments::read_ranges(&path, &ranges);
        Ok(blocking("get_range", key, read)
            .await?
            .map(|read| read.into_iter().map(Bytes::from).collect()))
    }

    async fn delete(&self, key: &str) -> BlobResult<()> {
        let path = self.path_of(key)?;
        self.calls.record(Call::FileDelete);
        match fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == IoErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("delete", key, e)),
        }
    }

    async fn list(&self, prefix: &str) -> BlobResult<Vec<String>> {
        // Walk from the deepest directory the prefix names fully; filter the rest by string.
        let (dir_key, _) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let start = if dir_key.is_empty() {
            if prefix.starts_with('/') {
                return Err(BlobError::InvalidKey(prefix.to_owned()));
            }
            self.root.clone()
        } else {
            self.path_of(dir_key)?
        };
        self.calls.record(Call::FileRead);
        let mut keys = Vec::new();
        let mut pending = vec![(start, dir_key.to_owned())];
        while let Some((dir, dir_key)) = pending.pop() {
            let mut entries = match fs::read_dir(&dir).await {
                Ok(entries) => entries,
                Err(e)
                    if matches!(e.kind(), IoErrorKind::NotFound | IoErrorKind::NotADirectory) =>
                {
                    continue;
                }
                Err(e) => return Err(io_error("list", prefix, e)),
            };
            while let Some(entry) = entries
                .next_entry()
                .await
                .map_err(|e| io_error("list", prefix, e))?
            {
                let Ok(name) = entry.file_name().into_string() else {
                    continue; // not a key this store wrote
                };
                if dir_key.is_empty() && name == UPLOADS_DIR {
                    continue;
                }
                let key = if dir_key.is_empty() {
                    name
                } else {
                    format!("{dir_key}/{name}")
                };
                let file_type = entry
                    .file_type()
                    .await
                    .map_err(|e| io_error("list", prefix, e))?;
                if file_type.is_dir() {
                    // Only descend where keys under the prefix can be.
                    if key.starts_with(prefix) || prefix.starts_with(&format!("{key}/")) {
                        pending.push((entry.path(), key));
                    }
                } else if file_type.is_file() && key.starts_with(prefix) {
                    keys.push(key);
                }
            }
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
        if prefix.starts_with('/') {
            return Err(BlobError::InvalidKey(prefix.to_owned()));
        }
        self.calls.record(Call::FileRead);
        let walk = SortedWalk {
            prefix: prefix.to_owned(),
            start_after: start_after.unwrap_or_default().to_owned(),
            limit: limit.max(1) as usize,
            page: ListPage::default(),
        };
        let root = self.root.clone();
        blocking("list", prefix, move || walk.run(&root)).await
    }

    async fn upload(&self, key: &str, _content_type: &str) -> BlobResult<impl BlobUpload> {
        let target = self.path_of(key)?;
        let uploads = self.root.join(UPLOADS_DIR);
        let (temp, file) = blocking("upload", key, move || create_temp(&uploads)).await?;
        Ok(FsUpload {
            key: key.to_owned(),
            target,
            temp,
            file: Some(file),
            buffer: Vec::new(),
            calls: Arc::clone(&self.calls),
        })
    }
}

/// A page of a listing: a depth-first walk that visits each directory's entries in the order
/// of the keys they lead to (a directory `a` as `a/`, so `a-b` comes before `a/x`, as on S3)
/// and skips every subtree whose keys all sort at or before `start_after`: a page costs the
/// directories on its path, not the whole tree.
struct SortedWalk {
    prefix: String,
    start_after: String,
    limit: usize,
    page: ListPage,
}

impl SortedWalk {
    fn run(mut self, root: &Path) -> std::io::Result<ListPage> {
        self.visit(root, "")?;
        Ok(self.page)
    }

    /// Walks `dir`, whose keys start with `dir_key` (empty or ending in `/`). False once the
    /// page is full.
    fn visit(&mut self, dir: &Path, dir_key: &str) -> std::io::Result<bool> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if matches!(e.kind(), IoErrorKind::NotFound | IoErrorKind::NotADirectory) => {
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let mut children = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue; // not a key this store wrote
            };
            if dir_key.is_empty() && name == UPLOADS_DIR {
                continue;
            }
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                children.push((format!("{dir_key}{name}/"), entry.path(), true));
            } else if file_type.is_file() {
                children.push((format!("{dir_key}{name}"), entry.path(), false));
            }
        }
        children.sort();
        for (key, path, is_dir) in children {
            if is_dir {
                let under_prefix = key.starts_with(&self.prefix) || self.prefix.starts_with(&key);
                let all_before = key <= self.start_after && !self.start_after.starts_with(&key);
                if under_prefix && !all_before && !self.visit(&path, &key)? {
                    return Ok(false);
                }
            } else if key.starts_with(&self.prefix) && key > self.start_after {
                if self.page.objects.len() == self.limit {
                    self.page.next = self.page.objects.last().map(|o| o.key.clone());
                    return Ok(false);
                }
                let metadata = match std::fs::metadata(&path) {
                    Ok(metadata) => metadata,
                    // Deleted since the directory was read.
                    Err(e) if e.kind() == IoErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                let modified = metadata
                    .modified()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| {
                        Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
                    });
                self.page.objects.push(Listed {
                    key,
                    modified,
                    bytes: metadata.len(),
                });
            }
        }
        Ok(true)
    }
}

/// Bytes a streamed upload gathers before writing them out: a delivery writes a record at a
/// time, and each write to the file is a task of the blocking pool.
const UPLOAD_BUFFER: usize = 1 << 20;

/// A streamed upload: a temporary file renamed into place on `complete`.
#[derive(Debug)]
struct FsUpload {
    key: String,
    target: PathBuf,
    temp: PathBuf,
    /// None only while a write of the buffer is under way.
    file: Option<std::fs::File>,
    buffer: Vec<u8>,
    calls: Arc<CallCounts>,
}

impl FsUpload {
    /// The file, unless an earlier write lost it.
    fn take_file(&mut self) -> BlobResult<std::fs::File> {
        self.file
            .take()
            .ok_or_else(|| BlobError::backend("upload", &self.key, "an earlier write failed"))
    }

    /// Writes the buffer to the file, in one task of the blocking pool.
    async fn write_buffer(&mut self) -> BlobResult<()> {
        let mut file = self.take_file()?;
        let mut buffer = std::mem::take(&mut self.buffer);
        let (file, buffer) = blocking("upload", &self.key, move || {
            std::io::Write::write_all(&mut file, &buffer)?;
            buffer.clear();
            Ok((file, buffer))
        })
        .await?;
        self.file = Some(file);
        self.buffer = buffer;
        Ok(())
    }
}

impl BlobUpload for FsUpload {
    async fn write(&mut self, chunk: &[u8]) -> BlobResult<()> {
        self.buffer.extend_from_slice(chunk);
        if self.buffer.len() >= UPLOAD_BUFFER {
            self.write_buffer().await?;
        }
        Ok(())
    }

    async fn complete(mut self) -> BlobResult<()> {
        self.calls.record(Call::FileWrite);
        let file = self.take_file()?;
        let buffer = std::mem::take(&mut self.buffer);
        let (temp, target) = (self.temp, self.target);
        // The rest of the buffer and the publishing: one task of the blocking pool.
        blocking("complete", &self.key, move || {
            write_and_publish(file, &temp, &target, &buffer)
        })
        .await
    }

    async fn abort(self) -> BlobResult<()> {
        drop(self.file);
        match fs::remove_file(&self.temp).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == IoErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("abort", &self.key, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory under the system temp dir, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir()
                .join(format!("trawl-fs-{name}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn meta() -> ObjectMeta {
        ObjectMeta {
            content_type: "text/html".to_owned(),
            compress: false,
            source_url: "http://example.com/".to_owned(),
        }
    }

    fn store(dir: &TempDir) -> FsBlobStore {
        FsBlobStore::new(dir.0.join("objects"), Arc::new(CallCounts::default()))
    }

    fn leftovers(store: &FsBlobStore) -> usize {
        std::fs::read_dir(store.root().join(UPLOADS_DIR))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    const KEY: &str = "crawl=c1/pk=abc/attr=html/md5=0123";

    #[tokio::test]
    async fn keys_that_could_escape_the_root_are_refused() {
        // GIVEN a store inside a temp dir
        let dir = TempDir::new("keys");
        let store = store(&dir);
        let bad = [
            "",
            "/etc/passwd",
            "a/../../escape",
            "..",
            "a/./b",
            "a//b",
            "a/",
            r"a\b",
            "a\0b",
            ".uploads/x",
        ];

        // WHEN each bad key is used for every operation
        for key in bad {
            let put = store.put(key, Body::new(&b"x"[..]), &meta()).await;
            let get = store.get(key).await;
            let delete = store.delete(key).await;
            let upload = store.upload(key, "text/html").await.map(|_| ());

            // THEN each is an InvalidKey error
            assert!(matches!(put, Err(BlobError::InvalidKey(_))), "put {key:?}");
            assert!(matches!(get, Err(BlobError::InvalidKey(_))), "get {key:?}");
            assert!(
                matches!(delete, Err(BlobError::InvalidKey(_))),
                "delete {key:?}"
            );
            assert!(
                matches!(upload, Err(BlobError::InvalidKey(_))),
                "upload {key:?}"
            );
        }
        for prefix in ["/etc", "../", "a//", ".uploads/"] {
            assert!(
                matches!(store.list(prefix).await, Err(BlobError::InvalidKey(_))),
                "list {prefix:?}"
            );
        }
        // AND nothing was written beside the store
        let siblings: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
        assert!(siblings.len() <= 1, "{siblings:?}");
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_file_systems_error_as_its_source() {
        // GIVEN a store holding an object under `crawl=c1/`
        let dir = TempDir::new("cause");
        let store = store(&dir);
        store.put(KEY, Body::new(&b"x"[..]), &meta()).await.unwrap();

        // WHEN a directory is read as an object
        let failed = store.get("crawl=c1").await.unwrap_err();

        // THEN the message names the key, and the source is the I/O error itself
        assert!(matches!(failed, BlobError::Backend { .. }), "{failed:?}");
        assert!(failed.to_string().starts_with("get crawl=c1: "), "{failed}");
        let source = std::error::Error::source(&failed).expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), IoErrorKind::IsADirectory);
    }

    #[tokio::test]
    async fn put_get_delete_round_trip() {
        // GIVEN an empty store
        let dir = TempDir::new("roundtrip");
        let calls = Arc::new(CallCounts::default());
        let store = FsBlobStore::new(dir.0.join("objects"), Arc::clone(&calls));
        let body = Bytes::from_static(b"<html>hello</html>");

        // WHEN an object is written, read, deleted twice and read again
        let missing = store.get(KEY).await.unwrap();
        store
            .put(KEY, Body::new(body.clone()), &meta())
            .await
            .unwrap();
        let read = store.get(KEY).await.unwrap();
        store.delete(KEY).await.unwrap();
        store.delete(KEY).await.unwrap();
        let gone = store.get(KEY).await.unwrap();

        // THEN it reads back whole, and is gone after the (idempotent) delete
        assert_eq!(missing, None);
        assert_eq!(read, Some(body));
        assert_eq!(gone, None);
        assert_eq!(leftovers(&store), 0);
        assert_eq!(
            (
                calls.get(Call::FileWrite),
                calls.get(Call::FileRead),
                calls.get(Call::FileDelete)
            ),
            (1, 3, 2)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_never_see_half_an_object() {
        // GIVEN two large bodies, written alternately to one key
        let dir = TempDir::new("atomic");
        let store = store(&dir);
        let a = Bytes::from(vec![b'a'; 1 << 20]);
        let b = Bytes::from(vec![b'b'; 1 << 20]);
        let writer = {
            let store = store.clone();
            let (a, b) = (a.clone(), b.clone());
            tokio::spawn(async move {
                for i in 0..20 {
                    let body = if i % 2 == 0 { &a } else { &b };
                    store
                        .put(KEY, Body::new(body.clone()), &meta())
                        .await
                        .unwrap();
                }
            })
        };

        // WHEN a reader reads it while the writer works
        let mut reads = 0;
        while !writer.is_finished() && reads < 2_000 {
            if let Some(body) = store.get(KEY).await.unwrap() {
                // THEN every read is one whole body
                assert!(body == a || body == b, "torn read of {} bytes", body.len());
            }
            reads += 1;
        }
        writer.await.unwrap();
        assert_eq!(store.get(KEY).await.unwrap(), Some(b));
        assert_eq!(leftovers(&store), 0);
    }

    #[tokio::test]
    async fn list_returns_keys_under_a_prefix_in_order() {
        // GIVEN objects of two tasks and two crawls, and an upload in progress
        let dir = TempDir::new("list");
        let store = store(&dir);
        let keys = [
            "crawl=c1/pk=b/attr=html/md5=2",
            "crawl=c1/pk=a/attr=html/md5=1",
            "crawl=c1/pk=a/attr=html/md5=0",
            "crawl=c10/pk=a/attr=html/md5=9",
            "deliveries/crawl=c1/part-0.jsonl.gz",
        ];
        for key in keys {
            store.put(key, Body::new(&b"x"[..]), &meta()).await.unwrap();
        }
        let mut upload = store
            .upload("crawl=c1/pk=c/attr=html/md5=3", "text/html")
            .await
            .unwrap();
        upload.write(b"partial").await.unwrap();

        // WHEN listed by crawl, by task, by partial segment and in full
        let crawl = store.list("crawl=c1/").await.unwrap();
        let task = store.list("crawl=c1/pk=a/").await.unwrap();
        let partial = store.list("crawl=c1").await.unwrap();
        let all = store.list("").await.unwrap();
        let none = store.list("crawl=c2/").await.unwrap();

        // THEN each is exactly the keys under its prefix, sorted, without the upload
        assert_eq!(
            crawl,
            [
                "crawl=c1/pk=a/attr=html/md5=0",
                "crawl=c1/pk=a/attr=html/md5=1",
                "crawl=c1/pk=b/attr=html/md5=2"
            ]
        );
        assert_eq!(task, crawl[..2]);
        assert_eq!(partial.len(), 4);
        assert_eq!(partial[3], "crawl=c10/pk=a/attr=html/md5=9");
        let mut sorted = keys.to_vec();
        sorted.sort();
        assert_eq!(all, sorted);
        assert!(none.is_empty());
        upload.abort().await.unwrap();
    }

    #[tokio::test]
    async fn an_upload_is_invisible_until_complete_and_gone_when_aborted() {
        // GIVEN two uploads written in chunks
        let dir = TempDir::new("upload");
        let store = store(&dir);
        let mut kept = store
            .upload("deliveries/crawl=c1/a.jsonl", "application/x-ndjson")
            .await
            .unwrap();
        let mut dropped = store
            .upload("deliveries/crawl=c1/b.jsonl", "application/x-ndjson")
            .await
            .unwrap();
        for chunk in [&b"{\"n\":1}\n"[..], b"{\"n\":2}\n"] {
            kept.write(chunk).await.unwrap();
            dropped.write(chunk).await.unwrap();
        }

        // WHEN nothing is completed yet, then one completes and the other aborts
        let before = store.list("deliveries/").await.unwrap();
        let early = store.get("deliveries/crawl=c1/a.jsonl").await.unwrap();
        kept.complete().await.unwrap();
        dropped.abort().await.unwrap();

        // THEN only the completed one appears, whole, and no temporary file is left
        assert!(before.is_empty());
        assert_eq!(early, None);
        assert_eq!(
            store.list("deliveries/").await.unwrap(),
            ["deliveries/crawl=c1/a.jsonl"]
        );
        assert_eq!(
            store
                .get("deliveries/crawl=c1/a.jsonl")
                .await
                .unwrap()
                .unwrap(),
            Bytes::from_static(b"{\"n\":1}\n{\"n\":2}\n")
        );
        assert_eq!(
            store.get("deliveries/crawl=c1/b.jsonl").await.unwrap(),
            None
        );
        assert_eq!(leftovers(&store), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_land_whole_in_one_segment_and_read_back_by_range() {
        // GIVEN a store and 64 records of different sizes
        let dir = TempDir::new("segments");
        let store = store(&dir);
        let records: Vec<Bytes> = (0..64u8)
            .map(|i| Bytes::from(vec![i; 100 + usize::from(i) * 37]))
            .collect();

        // WHEN they are appended at once
        let appends = records.iter().map(|r| {
            let store = store.clone();
            let r = r.clone();
            tokio::spawn(async move { store.append("crawl=c1/segments/", r).await })
        });
        let mut appended = Vec::new();
        for append in appends {
            appended.push(append.await.unwrap().unwrap());
        }

        // THEN each reads back from its span, the spans tile one segment of this process
        for (record, at) in records.iter().zip(&appended) {
            assert_eq!(at.span.length, record.len() as u64);
            let read = store
                .get_range(&at.key, at.span.offset, at.span.length)
                .await
                .unwrap();
            assert_eq!(read.as_ref(), Some(record));
        }
        let mut spans: Vec<_> = appended
            .iter()
            .map(|a| (a.span.offset, a.span.length))
            .collect();
        spans.sort_unstable();
        let mut end = 0;
        for (offset, length) in spans {
            assert_eq!(offset, end);
            end += length;
        }
        let keys: std::collections::BTreeSet<_> = appended.iter().map(|a| &a.key).collect();
        assert_eq!(keys.len(), 1);
        let key = appended[0].key.clone();
        assert!(key.starts_with("crawl=c1/segments/seg-"), "{key}");
        assert_eq!(
            std::fs::metadata(store.root().join(&key)).unwrap().len(),
            end
        );
        // AND a range past the end is an error, a missing segment None
        assert!(store.get_range(&key, end - 10, 20).await.is_err());
        let missing = "crawl=c1/segments/seg-missing.warc.gz";
        assert_eq!(store.get_range(missing, 0, 1).await.unwrap(), None);
        // AND ranges read together come back in the order asked, with the same refusals
        let backwards: Vec<(u64, u64)> = appended
            .iter()
            .rev()
            .map(|a| (a.span.offset, a.span.length))
            .collect();
        let read = store.get_ranges(&key, &backwards).await.unwrap().unwrap();
        assert_eq!(read, records.iter().rev().cloned().collect::<Vec<_>>());
        assert!(
            store
                .get_ranges(&key, &[(0, 1), (end - 10, 20)])
                .await
                .is_err()
        );
        assert_eq!(store.get_ranges(missing, &[(0, 1)]).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_new_store_never_appends_after_bytes_another_left() {
        // GIVEN a segment whose writer died with a half-written record at its end
        let dir = TempDir::new("segments-restart");
        let first = store(&dir);
        let before = first
            .append("crawl=c1/segments/", Bytes::from_static(b"kept"))
            .await
            .unwrap();
        drop(first);
        let path = dir.0.join("objects").join(&before.key);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"torn").unwrap();

        // WHEN the next process appends
        let second = store(&dir);
        let after = second
            .append("crawl=c1/segments/", Bytes::from_static(b"next"))
            .await
            .unwrap();

        // THEN it writes to a segment of its own, and both records read back
        assert_ne!(after.key, before.key);
        assert_eq!(after.span.offset, 0);
        let read = |s: FsBlobStore, a: Appended| async move {
            s.get_range(&a.key, a.span.offset, a.span.length)
                .await
                .unwrap()
        };
        assert_eq!(
            read(second.clone(), before).await.as_deref(),
            Some(&b"kept"[..])
        );
        assert_eq!(read(second, after).await.as_deref(), Some(&b"next"[..]));
    }
}
