//! Sorted runs: what the delta (`compare`) spills through the object store. A run holds
//! manifest entries (`delta::Entry`) sorted by task id, in frames: a 4-byte little-endian length,
//! then one gzip member of up to `FRAME_LINES` JSON lines. Frames let a reader fetch its run a
//! range at a time and say where it stands (the offset of a frame, the entries taken from it):
//! a merge cut mid-way resumes from the delivery's checkpoint without reading any run again
//! from its start.
//!
//! Runs live beside the delivery's files (`RUNS_PREFIX`: `_sort-previous-00000`, named as data
//! tools name what is not data, like `_SUCCESS`; no directory of their own, which a local store
//! would leave behind empty), are never listed in its index, and are removed once the delta is
//! written.

use super::DeliverError;
use super::delta::{Entry, TaskKey};
use crate::blob::{BlobStore, BlobUpload};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{Read, Write};

/// How a delivery's runs are named, after its prefix.
pub(crate) const RUNS_PREFIX: &str = "_sort-";
/// Entries per frame: a reader holds one frame's entries at a time.
pub(crate) const FRAME_LINES: usize = 256;
const LENGTH: u64 = 4;

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

/// Writes `entries` (JSON lines, already in task-id order) as the run at `key`.
pub(crate) async fn write<B: BlobStore>(
    blobs: &B,
    key: &str,
    entries: &[(TaskKey, Vec<u8>)],
) -> Result<Run, DeliverError> {
    let mut upload = blobs.upload(key, "application/octet-stream").await?;
    let mut bytes = 0;
    let written = async {
        for chunk in entries.chunks(FRAME_LINES) {
            let frame = frame(chunk.iter().map(|(_, line)| line.as_slice()))?;
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

/// Reads a run from where its `Run` says, `chunk` bytes a request at least.
pub(crate) struct RunReader {
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
    pending: VecDeque<(TaskKey, Entry)>,
    last: Option<TaskKey>,
}

impl RunReader {
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

    /// The task key of the next entry (None: the run is read), fetching and decoding its frame
    /// when needed.
    pub(crate) async fn peek<B: BlobStore>(
        &mut self,
        blobs: &B,
    ) -> Result<Option<TaskKey>, DeliverError> {
        // Bounded: each round decodes the frame at `next` and moves `next` past it, or ends.
        while self.pending.is_empty() {
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
        Ok(self.pending.front().map(|(task, _)| *task))
    }

    /// Takes the next entry (after `peek`).
    pub(crate) fn take(&mut self) -> Option<Entry> {
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
    fn decode(&mut self, member: &[u8]) -> Result<Vec<(TaskKey, Entry)>, DeliverError> {
        let mut text = String::new();
        GzDecoder::new(member)
            .read_to_string(&mut text)
            .map_err(|e| corrupt(&self.key, e.to_string()))?;
        let mut entries = Vec::with_capacity(FRAME_LINES);
        for line in text.lines().filter(|l| !l.is_empty()) {
            let entry: Entry =
                serde_json::from_str(line).map_err(|e| corrupt(&self.key, e.to_string()))?;
            let task = entry.task(&self.key)?;
            if self.last.is_some_and(|last| task < last) {
                return Err(corrupt(&self.key, "entries out of task-id order"));
            }
            self.last = Some(task);
            entries.push((task, entry));
        }
        Ok(entries)
    }
}
