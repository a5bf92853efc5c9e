//! Sorted runs: what the delta (`compare`) and the items pass (`items`) spill through the
//! object store, and their merge. A run holds entries of one kind (`Sorted`: a manifest's
//! `delta::Entry` by task id, an item by its detail URL or key …) sorted by their key, in frames:
//! a 4-byte little-endian length, then one gzip member of up to `FRAME_LINES` JSON lines. Frames
//! let a reader fetch its run a range at a time and say where it stands (the offset of a frame,
//! the entries taken from it): a merge cut mid-way resumes from the delivery's checkpoint
//! without reading any run again from its start.
//!
//! A merge (`Merge`) reads all its runs at once, each from its own position, and gives their
//! entries smallest key first; equal keys in run order, then in their run's order (a stable
//! sort spilled in order stays stable).
//!
//! Runs live beside the delivery's files (`RUNS_PREFIX`: `_sort-previous-00000`, named as data
//! tools name what is not data, like `_SUCCESS`; no directory of their own, which a local store
//! would leave behind empty), are never listed in its index, and are removed once the delta is
//! written.

use super::{DeliverError, json_line};
use crate::blob::{BlobStore, BlobUpload};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{Read, Write};

/// How a delivery's runs are named, after its prefix.
pub(crate) const RUNS_PREFIX: &str = "_sort-";
/// Entries per frame: a reader holds one frame's entries at a time.
pub(crate) const FRAME_LINES: usize = 256;
const LENGTH: u64 = 4;
/// Bytes a merge reads ahead, over all its runs (each run reads `MIN_READ` at least).
const MERGE_READ_BYTES: u64 = 32 << 20;
const MIN_READ: u64 = 256 << 10;

/// An entry a run holds, and the key runs are sorted and merged by.
pub(crate) trait Sorted: DeserializeOwned {
    type Key: Ord + Clone;

    /// Its key (`run`: the run it was read from, which an error names).
    fn key(&self, run: &str) -> Result<Self::Key, DeliverError>;
}

/// A run written, and where its reader stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Run {
    pub(crate) key: String,
    pub(crate) bytes: u64,
    pub(crate) entries: u64,
    /// The offset of the frame holding the next entry to read (`bytes`: none left)…
    #[serde(default)]
    pub(crate) frame: u64,
    /// … and the entries of that frame already read.
    #[serde(default)]
    pub(crate) taken: u64,
}

fn corrupt(key: &str, reason: impl Into<String>) -> DeliverError {
    DeliverError::CorruptDelivery {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn encode_error(e: impl std::fmt::Display) -> DeliverError {
    DeliverError::Encode(e.to_string())
}

/// One frame: `lines` (each a JSON line, newline included) as a gzip member behind its length.
fn frame<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>, DeliverError> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    for line in lines {
        gz.write_all(line).map_err(encode_error)?;
    }
    let member = gz.finish().map_err(encode_error)?;
    let length = u32::try_from(member.len()).map_err(encode_error)?;
    let mut out = Vec::with_capacity(member.len() + 4);
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&member);
    Ok(out)
}

/// Writes `entries` (already in key order) as the run at `key`, each as its JSON `line`.
pub(crate) async fn write<B: BlobStore, E>(
    blobs: &B,
    key: &str,
    entries: &[E],
    line: impl for<'e> Fn(&'e E) -> Result<Cow<'e, [u8]>, DeliverError>,
) -> Result<Run, DeliverError> {
    let mut upload = blobs.upload(key, "application/octet-stream").await?;
    let mut bytes = 0;
    let written = async {
        for chunk in entries.chunks(FRAME_LINES) {
            let lines = chunk.iter().map(&line).collect::<Result<Vec<_>, _>>()?;
            let frame = frame(lines.iter().map(|line| line.as_ref()))?;
            upload.write(&frame).await?;
            bytes += frame.len() as u64;
        }
        Ok::<_, DeliverError>(())
    }
    .await;
    if let Err(e) = written {
        let _ = upload.abort().await;
        return Err(e);
    }
    upload.complete().await?;
    Ok(Run {
        key: key.to_owned(),
        bytes,
        entries: entries.len() as u64,
        frame: 0,
        taken: 0,
    })
}

/// An entry held with its key, made its JSON line (a `Sorter`'s).
fn entry_line<K, T: Serialize>((_, entry): &(K, T)) -> Result<Cow<'_, [u8]>, DeliverError> {
    json_line(entry).map(Cow::Owned)
}

/// A JSON line held with its key, as it is (the delta's runs).
pub(crate) fn held_line<K>((_, line): &(K, Vec<u8>)) -> Result<Cow<'_, [u8]>, DeliverError> {
    Ok(Cow::Borrowed(line))
}

/// Removes every run whose key starts with `under` (listed: a run written by a call that died
/// before its checkpoint is removed too).
pub(crate) async fn remove<B: BlobStore>(blobs: &B, under: &str) -> Result<(), DeliverError> {
    let keys = super::patiently("list the sorted runs", &super::READ, || blobs.list(under)).await?;
    for key in keys {
        blobs.delete(&key).await?;
    }
    Ok(())
}

/// Reads a run from where its `Run` says, `chunk` bytes a request at least.
pub(crate) struct RunReader<T: Sorted> {
    key: String,
    bytes: u64,
    chunk: u64,
    /// Fetched bytes not yet decoded, from offset `start`.
    buffer: Vec<u8>,
    start: u64,
    /// The frame the pending entries come from, the offset after it, and the entries taken.
    frame: u64,
    next: u64,
    taken: u64,
    /// Entries of the first frame to skip (already read before a resume).
    skip: u64,
    pending: VecDeque<(T::Key, T)>,
    last: Option<T::Key>,
    /// The entries of a sorter that never spilled (`Sorter::merge`), sorted: read from here,
    /// no run written.
    memory: VecDeque<(T::Key, T)>,
}

impl<T: Sorted> RunReader<T> {
    pub(crate) fn new(run: &Run, chunk: u64) -> Self {
        Self {
            key: run.key.clone(),
            bytes: run.bytes,
            chunk: chunk.max(1),
            buffer: Vec::new(),
            start: run.frame,
            frame: run.frame,
            next: run.frame,
            taken: 0,
            skip: run.taken,
            pending: VecDeque::new(),
            last: None,
            memory: VecDeque::new(),
        }
    }

    /// A reader of `entries` held in memory (sorted), named `name` in errors.
    fn in_memory(name: &str, entries: Vec<(T::Key, T)>) -> Self {
        let run = Run {
            key: name.to_owned(),
            bytes: 0,
            entries: entries.len() as u64,
            frame: 0,
            taken: 0,
        };
        Self {
            memory: entries.into(),
            ..Self::new(&run, 1)
        }
    }

    /// Where it stands, as a `Run` records it: the next entry's frame and the entries taken
    /// from it.
    pub(crate) fn position(&self) -> (u64, u64) {
        if self.pending.is_empty() {
            (self.next, 0)
        } else {
            (self.frame, self.taken)
        }
    }

    /// Entries decoded and not yet taken.
    pub(crate) fn held(&self) -> usize {
        self.pending.len()
    }

    /// The key of the next entry (None: the run is read), fetching and decoding its frame
    /// when needed.
    pub(crate) async fn peek<B: BlobStore>(
        &mut self,
        blobs: &B,
    ) -> Result<Option<T::Key>, DeliverError> {
        // Bounded: each round decodes the frame at `next` and moves `next` past it, or ends.
        while self.pending.is_empty() {
            if !self.memory.is_empty() {
                // A frame's worth at a time, as from a run: what is held stays as bounded.
                let take = self.memory.len().min(FRAME_LINES);
                self.pending.extend(self.memory.drain(..take));
                continue;
            }
            if self.next >= self.bytes {
                return Ok(None);
            }
            let at = self.next;
            let head = self.fetch(blobs, at, LENGTH).await?;
            let length = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
            let member = self.fetch(blobs, at + LENGTH, length).await?;
            let entries = self.decode(&member)?;
            self.frame = at;
            self.next = at + LENGTH + length;
            self.taken = 0;
            self.pending = entries.into();
            let skip = std::mem::take(&mut self.skip);
            for _ in 0..skip {
                if self.pending.pop_front().is_some() {
                    self.taken += 1;
                }
            }
        }
        Ok(self.pending.front().map(|(key, _)| key.clone()))
    }

    /// Takes the next entry (after `peek`).
    pub(crate) fn take(&mut self) -> Option<T> {
        let (_, entry) = self.pending.pop_front()?;
        self.taken += 1;
        Some(entry)
    }

    /// `length` bytes from offset `at` (past what was decoded), fetched as needed.
    async fn fetch<B: BlobStore>(
        &mut self,
        blobs: &B,
        at: u64,
        length: u64,
    ) -> Result<Vec<u8>, DeliverError> {
        let end = at + length;
        if end > self.bytes {
            return Err(corrupt(
                &self.key,
                format!("a frame runs past the end at {at}"),
            ));
        }
        let drop = usize::try_from(at.saturating_sub(self.start)).map_err(encode_error)?;
        self.buffer.drain(..drop.min(self.buffer.len()));
        self.start = self.start.max(at);
        let fetched = self.start + self.buffer.len() as u64;
        if fetched < end {
            let want = (end - fetched).max(self.chunk).min(self.bytes - fetched);
            let read = super::patiently("read a sorted run", &super::READ, || {
                blobs.get_range(&self.key, fetched, want)
            })
            .await?
            .ok_or_else(|| corrupt(&self.key, "missing"))?;
            self.buffer.extend_from_slice(&read);
        }
        let from = usize::try_from(at - self.start).map_err(encode_error)?;
        let to = usize::try_from(end - self.start).map_err(encode_error)?;
        self.buffer
            .get(from..to)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| corrupt(&self.key, format!("cut short at {at}")))
    }

    /// The entries of one frame's gzip member, checked to follow the run's order.
    fn decode(&mut self, member: &[u8]) -> Result<Vec<(T::Key, T)>, DeliverError> {
        let mut text = String::new();
        GzDecoder::new(member)
            .read_to_string(&mut text)
            .map_err(|e| corrupt(&self.key, e.to_string()))?;
        let mut entries = Vec::with_capacity(FRAME_LINES);
        for line in text.lines().filter(|l| !l.is_empty()) {
            let entry: T =
                serde_json::from_str(line).map_err(|e| corrupt(&self.key, e.to_string()))?;
            let key = entry.key(&self.key)?;
            if self.last.as_ref().is_some_and(|last| key < *last) {
                return Err(corrupt(&self.key, "entries out of key order"));
            }
            self.last = Some(key.clone());
            entries.push((key, entry));
        }
        Ok(entries)
    }
}

/// The next key of each run not yet read to its end, smallest first (then the lowest run).
type Heads<K> = BinaryHeap<Reverse<(K, usize)>>;

/// Runs merged: every entry of every run once, smallest key first (equal keys in run order).
pub(crate) struct Merge<T: Sorted> {
    readers: Vec<RunReader<T>>,
    /// The next key of each run not yet read to its end; None until first read.
    heads: Option<Heads<T::Key>>,
    /// Entries the readers have decoded and not given, now and at most.
    held: usize,
    pub(crate) peak_held: usize,
    /// Runs it reads from the object store (not one held in memory).
    written: usize,
}

impl<T: Sorted> Merge<T> {
    /// The merge of `runs`, each read from its position (`Run::frame`, `Run::taken`).
    pub(crate) fn new<'r>(runs: impl IntoIterator<Item = &'r Run>) -> Self {
        let runs: Vec<&Run> = runs.into_iter().collect();
        let chunk = (MERGE_READ_BYTES / runs.len().max(1) as u64).max(MIN_READ);
        let written = runs.len();
        Self {
            readers: runs
                .into_iter()
                .map(|run| RunReader::new(run, chunk))
                .collect(),
            heads: None,
            held: 0,
            peak_held: 0,
            written,
        }
    }

    /// The merge of entries held in memory, sorted (`name` for errors): one reader, no run.
    fn in_memory(name: &str, entries: Vec<(T::Key, T)>) -> Self {
        Self {
            readers: vec![RunReader::in_memory(name, entries)],
            heads: None,
            held: 0,
            peak_held: 0,
            written: 0,
        }
    }

    /// Runs merged from the object store.
    pub(crate) fn runs(&self) -> usize {
        self.written
    }

    /// Entries the readers have decoded and not given.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Where each run's reader stands (`RunReader::position`), in run order.
    pub(crate) fn positions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.readers.iter().map(RunReader::position)
    }

    /// Peeks run `n` (decoding its next frame when needed) and counts what it holds.
    async fn peek_run<B: BlobStore>(
        &mut self,
        blobs: &B,
        n: usize,
    ) -> Result<Option<T::Key>, DeliverError> {
        let Some(reader) = self.readers.get_mut(n) else {
            return Ok(None);
        };
        let before = reader.held();
        let key = reader.peek(blobs).await?;
        self.held = (self.held + reader.held()).saturating_sub(before);
        self.peak_held = self.peak_held.max(self.held);
        Ok(key)
    }

    async fn heads<B: BlobStore>(&mut self, blobs: &B) -> Result<&mut Heads<T::Key>, DeliverError> {
        if self.heads.is_none() {
            let mut heads = BinaryHeap::new();
            for n in 0..self.readers.len() {
                if let Some(key) = self.peek_run(blobs, n).await? {
                    heads.push(Reverse((key, n)));
                }
            }
            self.heads = Some(heads);
        }
        Ok(self.heads.get_or_insert_default())
    }

    /// The key of the next entry (None: every run is read).
    pub(crate) async fn peek<B: BlobStore>(
        &mut self,
        blobs: &B,
    ) -> Result<Option<T::Key>, DeliverError> {
        let heads = self.heads(blobs).await?;
        Ok(heads.peek().map(|Reverse((key, _))| key.clone()))
    }

    /// The next entry and the number of its run (None: every run is read).
    pub(crate) async fn next<B: BlobStore>(
        &mut self,
        blobs: &B,
    ) -> Result<Option<(usize, T)>, DeliverError> {
        let Some(Reverse((_, n))) = self.heads(blobs).await?.pop() else {
            return Ok(None);
        };
        let Some(entry) = self.readers.get_mut(n).and_then(RunReader::take) else {
            return Ok(None);
        };
        self.held -= 1;
        if let Some(key) = self.peek_run(blobs, n).await? {
            self.heads(blobs).await?.push(Reverse((key, n)));
        }
        Ok(Some((n, entry)))
    }
}

/// Entries gathered into sorted runs named `{name}00000`, `{name}00001` …, `entries` at a time.
pub(crate) struct Sorter<T: Sorted> {
    name: String,
    entries: usize,
    /// The entries not yet in a run, with their keys: made JSON only when they spill.
    buffer: Vec<(T::Key, T)>,
    runs: Vec<Run>,
}

impl<T: Sorted + Serialize> Sorter<T> {
    pub(crate) fn new(name: String, entries: usize) -> Self {
        Self {
            name,
            entries: entries.max(1),
            buffer: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Takes the sorter, leaving an empty one of the same name and bound.
    pub(crate) fn take(&mut self) -> Self {
        let empty = Self::new(self.name.clone(), self.entries);
        std::mem::replace(self, empty)
    }

    /// Entries held, not yet in a run.
    pub(crate) fn held(&self) -> usize {
        self.buffer.len()
    }

    /// Adds `entry`, writing a run when `entries` are held.
    pub(crate) async fn push<B: BlobStore>(
        &mut self,
        blobs: &B,
        entry: T,
    ) -> Result<(), DeliverError> {
        self.buffer.push((entry.key(&self.name)?, entry));
        if self.buffer.len() >= self.entries {
            self.spill(blobs).await?;
        }
        Ok(())
    }

    async fn spill<B: BlobStore>(&mut self, blobs: &B) -> Result<(), DeliverError> {
        // Stable: entries of one key keep the order they came in.
        self.buffer.sort_by(|a, b| a.0.cmp(&b.0));
        let key = format!("{}{:05}", self.name, self.runs.len());
        self.runs
            .push(write(blobs, &key, &self.buffer, entry_line).await?);
        self.buffer.clear();
        Ok(())
    }

    /// Writes what is held as the last run; the merge of all its runs. A sorter that never
    /// spilled is merged from memory: its one run written and read straight back (gzip, the
    /// store's round trip) cost ~2.4% of the bench's crawl with extraction (its profile), and
    /// its entries made JSON and read back ~1.2% more.
    pub(crate) async fn merge<B: BlobStore>(mut self, blobs: &B) -> Result<Merge<T>, DeliverError> {
        if self.runs.is_empty() {
            // Stable: entries of one key keep the order they came in.
            self.buffer.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(Merge::in_memory(&self.name, self.buffer));
        }
        if !self.buffer.is_empty() {
            self.spill(blobs).await?;
        }
        Ok(Merge::new(&self.runs))
    }
}
