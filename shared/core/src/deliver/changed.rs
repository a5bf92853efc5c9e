//! The copy of what changed (`DeliveredPages::Changed`): after the delta, the pages it calls
//! new or changed, in its order, each read from storage and copied with its request into the
//! delivery's `changed-NNNNN.warc.gz`. Every other page stays where it is stored, named by its
//! manifest line, so a generation where little changed reads little.

use super::delta::{self, Change, DeltaLine};
use super::{
    Budget, Checkpoint, DeliverError, Deliverer, FileKind, GZIP, Loaded, PARALLEL_LOADS, PagesFile,
    Phase, Tally, read_manifest,
};
use crate::app::Ports;
use crate::blob::{BlobStore, BlobUpload};
use serde::{Deserialize, Serialize};
use trawl_domain::canonical::TaskId;
use trawl_domain::crawl::{Crawl, DeliveredPages};
use trawl_domain::task::Millis;

/// Where the copy is: the delta file (among the delivery's delta files, in order), the lines of
/// it already copied, and the changed files written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct CopyPosition {
    delta: usize,
    line: usize,
    files: u32,
}

/// Why filling a file of copies stopped.
enum Filled {
    Full,
    Paused,
    Done,
}

impl<P: Ports> Deliverer<P> {
    /// Copies the delta's new and changed pages, a file at a time, until all are copied (true)
    /// or the budget is spent (false). Checkpoints after each file.
    pub(super) async fn copy_changed(
        &self,
        crawl: &Crawl,
        delivery_id: &str,
        prefix: &str,
        state: &mut Checkpoint,
        budget: &mut Budget,
        now: Millis,
    ) -> Result<bool, DeliverError> {
        let Phase::Changed(at) = &state.phase else {
            return Ok(true);
        };
        if crawl.config.delivered_pages() != DeliveredPages::Changed {
            state.phase = Phase::CleanUp { start_after: None };
            return Ok(true);
        }
        let mut at = at.clone();
        let deltas: Vec<String> = state
            .files
            .iter()
            .filter(|f| f.kind == FileKind::Delta)
            .map(|f| format!("{prefix}{}", f.name))
            .collect();
        // Bounded: each round writes a file and moves `at` past its lines, or ends.
        while at.delta < deltas.len() {
            let name = FileKind::Changed.name(at.files);
            let key = format!("{prefix}{name}");
            let upload = self.blobs.upload(&key, GZIP).await?;
            let mut pages = self
                .open_pages(crawl, delivery_id, &name, upload, now)
                .await?;
            let mut copies = Tally::default();
            let filled = self
                .fill_copies(crawl, &deltas, &mut at, &mut pages, &mut copies, budget)
                .await;
            let filled = match filled {
                Ok(filled) => filled,
                Err(e) => {
                    pages.file.abort().await;
                    return Err(e);
                }
            };
            if copies.warc.pages == 0 && copies.warc.problems == 0 {
                // Nothing to copy in what was read: no empty file.
                pages.file.abort().await;
            } else {
                state
                    .files
                    .push(pages.complete(FileKind::Changed, at.files).await?);
                at.files += 1;
                // The task pass counted these pages' bytes already (as referenced).
                copies.page_bytes = 0;
                state.tally.absorb(copies);
            }
            state.phase = Phase::Changed(at.clone());
            self.save(prefix, state).await?;
            if matches!(filled, Filled::Paused) {
                return Ok(false);
            }
        }
        state.phase = Phase::CleanUp { start_after: None };
        Ok(true)
    }

    /// Copies the new and changed pages of the delta files from `at` on into `pages` until it
    /// is full, the budget is spent or the delta ends; `at` moves past every line handled.
    async fn fill_copies<U: BlobUpload>(
        &self,
        crawl: &Crawl,
        deltas: &[String],
        at: &mut CopyPosition,
        pages: &mut PagesFile<U>,
        copies: &mut Tally,
        budget: &mut Budget,
    ) -> Result<Filled, DeliverError> {
        while let Some(key) = deltas.get(at.delta) {
            let bytes = read_manifest(&self.blobs, key).await?;
            let mut lines = delta::lines::<DeltaLine>(key, &bytes).skip(at.line);
            // Bounded: each round handles up to `PARALLEL_LOADS` lines of the file, or ends.
            loop {
                let chunk = lines
                    .by_ref()
                    .take(PARALLEL_LOADS)
                    .collect::<Result<Vec<_>, _>>()?;
                if chunk.is_empty() {
                    break;
                }
                let loads = chunk.iter().map(|line| self.load_copy(crawl, line));
                let loaded = futures_util::future::try_join_all(loads).await?;
                for (line, copy) in chunk.iter().zip(loaded) {
                    if let Some(Loaded { task, body }) = copy
                        && let (Some(fetch), Some(body)) = (task.fetch.as_ref(), body)
                    {
                        if fetch.md5 == line.md5 {
                            self.archive(Some(&mut *pages), copies, crawl, &task, fetch, body)
                                .await?;
                        } else {
                            let key = fetch.object_key.as_deref().unwrap_or_default();
                            let problem = "fetched again since the delta".to_owned();
                            self.problem(copies, &task, key, problem);
                        }
                    }
                    at.line += 1;
                    budget.work += 1;
                    if pages.full(&self.limits) {
                        // The rest of the chunk is read again for the next file.
                        return Ok(Filled::Full);
                    }
                }
                if budget.spent(self.clock.instant()) {
                    return Ok(Filled::Paused);
                }
            }
            at.delta += 1;
            at.line = 0;
        }
        Ok(Filled::Done)
    }

    /// The task of a delta line to copy, with its body: None for a line that copies nothing
    /// (gone, or a task no longer there).
    async fn load_copy(
        &self,
        crawl: &Crawl,
        line: &DeltaLine,
    ) -> Result<Option<Loaded>, DeliverError> {
        if line.change == Change::Gone {
            return Ok(None);
        }
        let Some(task_id) = line.task_id.as_deref().and_then(TaskId::parse) else {
            return Ok(None);
        };
        self.load(&crawl.id, &task_id, true).await
    }
}
