//! Segments on S3 (`trawl_core::blob::segment`), group-committed: the appends that wait while a
//! segment PUT is in flight go out together in the next one, each directory's records one object
//! (`{dir}seg-{md5 of its bytes}.warc.gz`, so a retried PUT writes the same object again). An
//! append is answered only once the PUT holding its records is acknowledged, so a task is never
//! finished before its body is durable; a failed PUT fails each of its appends (their callers
//! retry), and nothing ever points into an object that was not written.
//!
//! One PUT is in flight per store at a time: the turns of a Lambda invocation that seal at once
//! share a PUT. A host turn gathers its pages' records and appends them together when its round
//! of fetches ends, or once they reach `TURN_SEGMENT_BYTES` (`trawl_core::crawler`), so a turn
//! costs one PUT, not one per page; its pages are finished after that PUT.

use super::{S3BlobStore, classify};
use aws_sdk_s3::primitives::ByteStream;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;
use md5::{Digest, Md5};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;
use trawl_core::blob::{Appended, BlobError, BlobResult};
use trawl_domain::calls::Call;
use trawl_domain::task::Span;

/// What a host turn gathers before it PUTs (`BlobStore::gather_bytes`): a turn of 50 pages is
/// usually a few MiB at most, so this bounds only the memory an unusual turn holds. Not a
/// multipart upload: a part is not
/// readable until the upload completes, so pages could not be finished before the turn's end
/// anyway, and completing it is a request more.
pub(super) const TURN_SEGMENT_BYTES: u64 = 8 << 20;

/// One append waiting for its PUT.
struct Waiting {
    dir: String,
    records: Bytes,
    reply: oneshot::Sender<BlobResult<Appended>>,
}

/// The appends waiting, and the turn to PUT them (one PUT in flight at a time).
#[derive(Default)]
pub(super) struct Commits {
    waiting: Mutex<Vec<Waiting>>,
    turn: tokio::sync::Mutex<()>,
}

impl S3BlobStore {
    /// Appends `records` under `dir` in the next segment PUT, answered once that PUT is
    /// acknowledged.
    pub(super) async fn append_grouped(&self, dir: &str, records: Bytes) -> BlobResult<Appended> {
        let (reply, answer) = oneshot::channel();
        self.commits
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Waiting {
                dir: dir.to_owned(),
                records,
                reply,
            });
        {
            // Whoever holds the turn PUTs everything waiting, this append included unless an
            // earlier holder took it already.
            let _turn = self.commits.turn.lock().await;
            let batch = std::mem::take(
                &mut *self
                    .commits
                    .waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            if !batch.is_empty() {
                self.put_batch(batch).await;
            }
        }
        // The holder was dropped mid-PUT: the outcome is unknown, and a retry appends anew.
        answer.await.map_err(|_| {
            BlobError::unavailable("PutObject", dir, "the segment's PUT was abandoned")
        })?
    }

    /// One segment object per directory of `batch`, PUT together; answers every append.
    async fn put_batch(&self, batch: Vec<Waiting>) {
        let mut dirs: Vec<(String, Vec<Waiting>)> = Vec::new();
        for waiting in batch {
            match dirs.iter_mut().find(|(dir, _)| *dir == waiting.dir) {
                Some((_, group)) => group.push(waiting),
                None => dirs.push((waiting.dir.clone(), vec![waiting])),
            }
        }
        join_all(
            dirs.into_iter()
                .map(|(dir, group)| self.put_segment(dir, group)),
        )
        .await;
    }

    async fn put_segment(&self, dir: String, group: Vec<Waiting>) {
        let mut bytes = BytesMut::with_capacity(group.iter().map(|w| w.records.len()).sum());
        let mut spans = Vec::with_capacity(group.len());
        for waiting in &group {
            spans.push(Span {
                offset: bytes.len() as u64,
                length: waiting.records.len() as u64,
                items: 0,
            });
            bytes.extend_from_slice(&waiting.records);
        }
        let bytes = bytes.freeze();
        let md5: [u8; 16] = Md5::digest(&bytes).into();
        let key = format!("{dir}seg-{}.warc.gz", hex::encode(md5));
        self.calls.record(Call::S3PutObject);
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_md5(base64::engine::general_purpose::STANDARD.encode(md5))
            .content_type("application/warc")
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(Arc::new);
        for (waiting, span) in group.into_iter().zip(spans) {
            let answer = match &put {
                Ok(_) => Ok(Appended {
                    key: key.clone(),
                    span,
                }),
                // One failed PUT answers every append in it: each keeps the SDK's error, shared.
                Err(e) => Err(classify("PutObject", &key, e).caused_by(Arc::clone(e))),
            };
            // An append whose caller gave up needs no answer.
            let _ = waiting.reply.send(answer);
        }
    }
}
