//! A gzip stream written through a `BlobUpload`, in chunks, so memory stays bounded by one chunk
//! (plus the upload's own part buffer) whatever the file's size.
//!
//! A file is one or more gzip members: JSON Lines files are one member; a WARC file has one member
//! per record (the Common Crawl convention, so readers can seek to a record).

use super::DeliverError;
use crate::blob::BlobUpload;
use crate::gz::header;
use flate2::{Compress, Compression, Crc, FlushCompress};
use md5::{Digest, Md5};

/// Compressed bytes handed to the upload at once.
const CHUNK: usize = 256 * 1024;

pub(crate) struct GzipFile<U> {
    upload: U,
    level: Compression,
    /// One raw-deflate compressor for every member, reset between them (`crate::gz`).
    deflate: Compress,
    /// The current member's checksum and length; None between members.
    member: Option<Crc>,
    /// Compressed bytes not yet handed to the upload.
    out: Vec<u8>,
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

fn encode_error(e: impl std::fmt::Display) -> DeliverError {
    DeliverError::Encode(e.to_string())
}

/// Runs the compressor over `input`, as `gz::deflate_into`.
fn deflate_into(
    deflate: &mut Compress,
    input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> Result<(), DeliverError> {
    crate::gz::deflate_into(deflate, input, out, flush).map_err(encode_error)
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
            deflate: Compress::new(level, false),
            member: None,
            out: Vec::new(),
            members: 0,
            compressed: 0,
            md5: Md5::new(),
        }
    }

    /// Appends `data` to the current member (starting one if needed).
    pub(crate) async fn write(&mut self, data: &[u8]) -> Result<(), DeliverError> {
        let crc = match &mut self.member {
            Some(crc) => crc,
            None => {
                self.out.extend_from_slice(&header(self.level));
                self.member.insert(Crc::new())
            }
        };
        crc.update(data);
        deflate_into(&mut self.deflate, data, &mut self.out, FlushCompress::None)?;
        if self.out.len() >= CHUNK {
            self.send().await?;
        }
        Ok(())
    }

    /// Closes the current member; the next write starts a new one.
    pub(crate) async fn end_member(&mut self) -> Result<(), DeliverError> {
        if let Some(crc) = self.member.take() {
            deflate_into(&mut self.deflate, &[], &mut self.out, FlushCompress::Finish)?;
            self.deflate.reset();
            self.out.extend_from_slice(&crc.sum().to_le_bytes());
            self.out.extend_from_slice(&crc.amount().to_le_bytes());
            self.members += 1;
            self.send().await?;
        }
        Ok(())
    }

    /// Appends whole gzip members as they are (a page's records copied from its segment):
    /// ends the current member first.
    pub(crate) async fn copy_members(
        &mut self,
        members: &[u8],
        count: u64,
    ) -> Result<(), DeliverError> {
        self.end_member().await?;
        self.out.extend_from_slice(members);
        self.members += count;
        self.send().await
    }

    /// Hands the buffered compressed bytes to the upload (the buffer is kept for the next ones).
    async fn send(&mut self) -> Result<(), DeliverError> {
        if !self.out.is_empty() {
            self.upload.write(&self.out).await?;
            self.compressed += self.out.len() as u64;
            self.md5.update(&self.out);
            self.out.clear();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blob::BlobStore;
    use crate::blob::memory::MemoryBlobStore;
    use flate2::read::{GzDecoder, MultiGzDecoder};
    use std::io::Read;

    fn inflate(mut reader: impl Read) -> Vec<u8> {
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        out
    }

    #[tokio::test]
    async fn members_share_one_compressor_and_each_is_a_whole_gzip_stream() {
        let blobs = MemoryBlobStore::new();
        let mut file = GzipFile::with_level(
            blobs.upload("f.gz", "application/gzip").await.unwrap(),
            Compression::fast(),
        );
        // Larger than a chunk, so a member spans several uploads' writes.
        let big: Vec<u8> = (0..CHUNK * 3).map(|i| (i * 7 % 251) as u8).collect();
        let records: [&[u8]; 3] = [b"first record", &big, b""];
        for record in records {
            // Written in two parts: a member may take several writes.
            let (head, tail) = record.split_at(record.len() / 2);
            file.write(head).await.unwrap();
            file.write(tail).await.unwrap();
            file.end_member().await.unwrap();
        }
        let written = file.complete().await.unwrap();
        let stored = blobs.get("f.gz").await.unwrap().unwrap();
        assert_eq!(written.bytes, stored.len() as u64);
        assert_eq!(written.md5, hex::encode(Md5::digest(&stored)));
        assert_eq!(inflate(MultiGzDecoder::new(&stored[..])), records.concat());
        // The first member alone decodes to the first record: readers can seek to a record.
        assert_eq!(inflate(GzDecoder::new(&stored[..])), b"first record");
    }

    #[tokio::test]
    async fn an_empty_file_is_one_empty_member() {
        let blobs = MemoryBlobStore::new();
        let file = GzipFile::new(blobs.upload("e.gz", "application/gzip").await.unwrap());
        file.complete().await.unwrap();
        let stored = blobs.get("e.gz").await.unwrap().unwrap();
        assert!(!stored.is_empty());
        assert!(inflate(MultiGzDecoder::new(&stored[..])).is_empty());
    }
}
