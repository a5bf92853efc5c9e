//! A gzip stream written through a `BlobUpload`, in chunks, so memory stays bounded by one chunk
//! (plus the upload's own part buffer) whatever the file's size.
//!
//! A file is one or more gzip members: JSON Lines files are one member; a WARC file has one member
//! per record (the Common Crawl convention, so readers can seek to a record).

use super::DeliverError;
use crate::blob::BlobUpload;
use flate2::Compression;
use flate2::write::GzEncoder;
use md5::{Digest, Md5};
use std::io::Write;

/// Compressed bytes handed to the upload at once.
const CHUNK: usize = 256 * 1024;

pub(crate) struct GzipFile<U> {
    upload: U,
    level: Compression,
    member: Option<GzEncoder<Vec<u8>>>,
    members: u64,
    compressed: u64,
    /// Of the compressed bytes: the md5 the delivery's index lists.
    md5: Md5,
}

/// What a completed file holds.
pub(crate) struct Written {
    pub(crate) bytes: u64,
    /// Hex md5 of the compressed file.
    pub(crate) md5: String,
}

fn encode_error(e: std::io::Error) -> DeliverError {
    DeliverError::Encode(e.to_string())
}

impl<U: BlobUpload> GzipFile<U> {
    /// A file compressed at zlib's default level (6).
    pub(crate) fn new(upload: U) -> Self {
        Self::with_level(upload, Compression::default())
    }

    pub(crate) fn with_level(upload: U, level: Compression) -> Self {
        Self {
            upload,
            level,
            member: None,
            members: 0,
            compressed: 0,
            md5: Md5::new(),
        }
    }

    /// Appends `data` to the current member (starting one if needed).
    pub(crate) async fn write(&mut self, data: &[u8]) -> Result<(), DeliverError> {
        let level = self.level;
        let encoder = self
            .member
            .get_or_insert_with(|| GzEncoder::new(Vec::new(), level));
        encoder.write_all(data).map_err(encode_error)?;
        if encoder.get_ref().len() >= CHUNK {
            let chunk = std::mem::take(encoder.get_mut());
            self.send(&chunk).await?;
        }
        Ok(())
    }

    /// Closes the current member; the next write starts a new one.
    pub(crate) async fn end_member(&mut self) -> Result<(), DeliverError> {
        if let Some(encoder) = self.member.take() {
            let rest = encoder.finish().map_err(encode_error)?;
            self.members += 1;
            self.send(&rest).await?;
        }
        Ok(())
    }

    async fn send(&mut self, chunk: &[u8]) -> Result<(), DeliverError> {
        if !chunk.is_empty() {
            self.upload.write(chunk).await?;
            self.compressed += chunk.len() as u64;
            self.md5.update(chunk);
        }
        Ok(())
    }

    /// Compressed bytes handed to the upload so far (the current member's buffered tail aside).
    pub(crate) fn compressed(&self) -> u64 {
        self.compressed
    }

    /// Ends the last member and makes the file visible. A file with nothing written still gets
    /// one empty member: a zero-byte file is not valid gzip.
    pub(crate) async fn complete(mut self) -> Result<Written, DeliverError> {
        if self.members == 0 && self.member.is_none() {
            self.write(&[]).await?;
        }
        self.end_member().await?;
        self.upload.complete().await?;
        Ok(Written {
            bytes: self.compressed,
            md5: hex::encode(self.md5.finalize()),
        })
    }

    /// Discards the file. Best effort: it is only called on a path that already failed.
    pub(crate) async fn abort(self) {
        if let Err(e) = self.upload.abort().await {
            tracing::warn!(error = %e, "could not abort a delivery upload");
        }
    }
}
