//! Segments in the data directory (`trawl_core::blob::segment`): appends go through one writer
//! thread per store, which takes every append waiting when it wakes, writes each at the end of
//! its directory's open segment file, then flushes each file it wrote once (`fdatasync`, and
//! the directory entries of a file it created) before answering any of them. Group commit: one
//! flush per segment per batch, however many pages the batch holds; a batch waits a moment
//! (`LINGER`) after its first append for others, and the pages that arrive during a flush join
//! the next batch. An append is answered only once its bytes are durable.
//!
//! Each process opens segments of its own (named by time, process and a random number), so
//! the bytes a killed process left half-written at a segment's end are never appended after:
//! they stay garbage that no span covers. A write or flush that fails abandons its segment (its
//! appends fail; the next ones open a new segment).

use std::collections::HashMap;
use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use trawl_core::blob::Appended;
use trawl_domain::task::Span;

/// A segment takes appends until it holds this much; the next append opens another.
const SEGMENT_BYTES: u64 = 256 << 20;

/// How long a batch waits for more appends after its first, and how many end the wait. A flush
/// costs the same CPU whatever it carries (~120 µs on the bench machine's virtual disk, perf):
/// taking only what waited during the last one made a flush every two pages of a local crawl
/// (16 fetches in flight bring a page every ~0.4 ms). A page's finish waits this much longer
/// at most, which its fetch and politeness delay dwarf.
const LINGER: Duration = Duration::from_millis(1);
const LINGER_APPENDS: usize = 32;

/// One append, waiting for the writer.
pub(super) struct Append {
    /// The segments' directory and its key (ending in `/`).
    pub dir: PathBuf,
    pub dir_key: String,
    pub records: bytes::Bytes,
    pub reply: oneshot::Sender<std::io::Result<Appended>>,
}

/// The keys of the segments a writer has open (may still append to): compaction leaves them.
pub(super) type Appending = Arc<Mutex<HashSet<String>>>;

/// The sending end of a store's writer thread, which keeps `appending` up to date; the thread
/// ends when every clone is dropped.
pub(super) fn start(appending: Appending) -> std::io::Result<mpsc::Sender<Append>> {
    let (sender, receiver) = mpsc::channel::<Append>();
    std::thread::Builder::new()
        .name("trawl-segments".to_owned())
        .spawn(move || {
            Writer {
                open: HashMap::new(),
                appending,
            }
            .run(&receiver)
        })?;
    Ok(sender)
}

/// A segment file being appended to.
struct Open {
    key: String,
    file: std::fs::File,
    len: u64,
    /// Directories whose entries changed when the file was created: flushed with its first
    /// batch.
    new_dirs: Vec<PathBuf>,
}

struct Writer {
    open: HashMap<PathBuf, Open>,
    appending: Appending,
}

impl Writer {
    fn run(mut self, receiver: &mpsc::Receiver<Append>) {
        while let Ok(first) = receiver.recv() {
            let mut batch = vec![first];
            let until = Instant::now() + LINGER;
            while batch.len() < LINGER_APPENDS {
                match receiver.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(append) => batch.push(append),
                    Err(_) => break,
                }
            }
            batch.extend(receiver.try_iter());
            self.write(batch);
        }
    }

    /// Writes a batch: each directory's appends in one write, one flush per file.
    fn write(&mut self, batch: Vec<Append>) {
        let mut by_dir: Vec<(PathBuf, String, Vec<Append>)> = Vec::new();
        for append in batch {
            match by_dir.iter_mut().find(|(dir, _, _)| *dir == append.dir) {
                Some((_, _, appends)) => appends.push(append),
                None => by_dir.push((append.dir.clone(), append.dir_key.clone(), vec![append])),
            }
        }
        for (dir, dir_key, appends) in by_dir {
            let written = self.write_dir(&dir, &dir_key, &appends);
            match written {
                Ok(spans) => {
                    for (append, appended) in appends.into_iter().zip(spans) {
                        let _ = append.reply.send(Ok(appended));
                    }
                }
                Err(e) => {
                    // The file's state is unknown: abandoned, its bytes garbage.
                    if let Some(abandoned) = self.open.remove(&dir) {
                        self.closed(&abandoned.key);
                    }
                    for append in appends {
                        let _ = append
                            .reply
                            .send(Err(std::io::Error::new(e.kind(), e.to_string())));
                    }
                }
            }
        }
    }

    fn closed(&self, key: &str) {
        self.appending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    fn write_dir(
        &mut self,
        dir: &Path,
        dir_key: &str,
        appends: &[Append],
    ) -> std::io::Result<Vec<Appended>> {
        if self
            .open
            .get(dir)
            .is_none_or(|open| open.len >= SEGMENT_BYTES)
        {
            let new = create(dir, dir_key)?;
            self.appending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(new.key.clone());
            if let Some(rolled) = self.open.insert(dir.to_path_buf(), new) {
                self.closed(&rolled.key);
            }
        }
        let open = self
            .open
            .get_mut(dir)
            .ok_or_else(|| std::io::Error::other("segment not open"))?;
        let mut buffer = Vec::with_capacity(appends.iter().map(|a| a.records.len()).sum());
        let mut spans = Vec::with_capacity(appends.len());
        for append in appends {
            spans.push(Appended {
                key: open.key.clone(),
                span: Span {
                    offset: open.len + buffer.len() as u64,
                    length: append.records.len() as u64,
                    items: 0,
                },
            });
            buffer.extend_from_slice(&append.records);
        }
        open.file.write_all(&buffer)?;
        open.file.sync_data()?;
        for dir in open.new_dirs.drain(..) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        open.len += buffer.len() as u64;
        Ok(spans)
    }
}

/// A new segment file under `dir`, its directories created.
fn create(dir: &Path, dir_key: &str) -> std::io::Result<Open> {
    let new_dirs = super::create_dirs(dir)?;
    let name = format!(
        "seg-{:013}-{}-{:016x}.warc.gz",
        trawl_domain::task::now_ms(),
        std::process::id(),
        fastrand::u64(..)
    );
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(&name))?;
    Ok(Open {
        key: format!("{dir_key}{name}"),
        file,
        len: 0,
        new_dirs,
    })
}

/// `length` bytes of the file at `path` from `offset`; None when there is no such file.
pub(super) fn read_range(
    path: &Path,
    offset: u64,
    length: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = vec![0; usize::try_from(length).map_err(std::io::Error::other)?];
    std::io::Read::read_exact(&mut file, &mut bytes)?;
    Ok(Some(bytes))
}

/// The ranges `(offset, length)` of the file at `path`, in the order asked; None when there is
/// no such file.
pub(super) fn read_ranges(
    path: &Path,
    ranges: &[(u64, u64)],
) -> std::io::Result<Option<Vec<Vec<u8>>>> {
    use std::os::unix::fs::FileExt;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut read = Vec::with_capacity(ranges.len());
    for &(offset, length) in ranges {
        let mut bytes = vec![0; usize::try_from(length).map_err(std::io::Error::other)?];
        file.read_exact_at(&mut bytes, offset)?;
        read.push(bytes);
    }
    Ok(Some(read))
}
