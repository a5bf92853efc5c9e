//! The delta's pass: each task's lines of the previous manifest and of the current one brought
//! together (`delta::join`) at any size by an external sort/merge on the task id (a manifest
//! is in status and store order, not task order):
//!
//! 1. **Sorting.** The previous delivery's manifest segments, then this one's, are read once, in
//!    order; every `delta_index_entries` entries are sorted (stably: a task listed twice keeps
//!    its lines' order) and written as a run (`runs`) beside the delivery's files.
//! 2. **Merging.** All runs are read at once, each from its own position, merged by task id
//!    (runs in manifest order: equal keys keep their order), and joined: each task's verdicts
//!    go to the delta files, a file per `delta_index_entries` tasks compared.
//! 3. The runs are removed (by listing: a run written by a call that died before its
//!    checkpoint is removed too).
//!
//! Each manifest byte is read once, and the runs (a projection of the manifest) are written and
//! read once: a constant per manifest byte at any size (`bench --only delta`). Every step (a run,
//! or a delta file) ends in a state the delivery checkpoints (`Progress`); a call cut before its
//! checkpoint writes the same run or file again, under the same name, and a call that resumes
//! reads its manifest segment again up to where the sorting stands.
//!
//! Memory: one run's entries while sorting; while merging, a frame of entries
//! (`runs::FRAME_LINES`) and a read buffer per run (`runs::Merge`: 32 MiB over all, 256 KiB a
//! run at least). The merge is one level, so what it holds grows with the runs (the lines over
//! `delta_index_entries`): at the default, 1,000 runs a side (10^9 lines) hold 512,000 entries and
//! 512 MiB of buffers (an estimate from these constants); a merge of merges is not built.

use super::delta::{self, Entry, TaskKey, Verdict};
use super::gzip::GzipFile;
use super::runs::{self, Merge, Run};
use super::{Change, DeliverError, FileKind, IndexedFile, ManifestLine, json_line};
use super::{DeltaSummary, read_manifest};
use crate::blob::BlobStore;
use serde::{Deserialize, Serialize};

/// How far the delta is, as the delivery's checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub(crate) enum Progress {
    /// Sorting the manifests into runs: the previous delivery's, then this one's.
    Sorting(Sorting),
    /// Merging the runs, a delta file at a time.
    Merging(Merging),
}

impl Progress {
    pub(crate) fn start() -> Self {
        Progress::Sorting(Sorting::default())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Side {
    #[default]
    Previous,
    Current,
}

/// The next manifest line to sort (`line` lines into segment `segment` of `side`), and the
/// runs written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sorting {
    side: Side,
    segment: usize,
    line: u64,
    previous: Vec<Run>,
    current: Vec<Run>,
}

/// The runs, each with its reader's position, and the delta files written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Merging {
    previous: Vec<Run>,
    current: Vec<Run>,
    files: u32,
}

/// What a comparison held and wrote (the bench prints it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeltaStats {
    /// Sorted runs written.
    pub runs: u64,
    /// Manifest entries held in memory at once, at most: a run being sorted, or the frames the
    /// merge has decoded.
    pub peak_entries: u64,
}

/// What one step did.
pub(crate) enum Step {
    /// Wrote a sorted run.
    Sorted,
    /// Wrote a delta file.
    Wrote(IndexedFile),
    /// The delta is written and the runs removed.
    Done,
}

/// A manifest segment being sorted, kept open between the runs of one call.
struct OpenSegment {
    at: (Side, usize, u64),
    lines: Box<dyn Iterator<Item = Result<ManifestLine, DeliverError>> + Send>,
}

/// The comparison of a delivery's manifest (`current`, its segments' keys) with the previous
/// one's, written under `prefix`: one call's worth of steps.
pub(crate) struct Comparison<'a, B> {
    blobs: &'a B,
    prefix: &'a str,
    previous: &'a [String],
    current: &'a [String],
    /// Entries per run, and tasks per delta file.
    entries: usize,
    open: Option<OpenSegment>,
    /// The merge where the last delta file left it, kept between the files of one call (what
    /// its readers read ahead is not fetched again).
    merging: Option<Merge<Entry>>,
    pub(crate) stats: DeltaStats,
}

impl<'a, B: BlobStore> Comparison<'a, B> {
    pub(crate) fn new(
        blobs: &'a B,
        prefix: &'a str,
        previous: &'a [String],
        current: &'a [String],
        entries: u64,
    ) -> Self {
        Self {
            blobs,
            prefix,
            previous,
            current,
            entries: usize::try_from(entries).unwrap_or(usize::MAX).max(1),
            open: None,
            merging: None,
            stats: DeltaStats::default(),
        }
    }

    /// Does the next step from `progress` and moves it on; the verdicts are counted in
    /// `counts`.
    pub(crate) async fn step(
        &mut self,
        progress: &mut Progress,
        counts: &mut DeltaSummary,
    ) -> Result<Step, DeliverError> {
        // Bounded: sorting ends in merging, merging returns.
        loop {
            match progress {
                Progress::Sorting(sorting) => {
                    if self.sort(sorting).await? {
                        return Ok(Step::Sorted);
                    }
                    *progress = Progress::Merging(Merging {
                        previous: std::mem::take(&mut sorting.previous),
                        current: std::mem::take(&mut sorting.current),
                        files: 0,
                    });
                }
                Progress::Merging(merging) => {
                    return match self.merge(merging, counts).await? {
                        Some(file) => Ok(Step::Wrote(file)),
                        None => {
                            // Every run under the delivery's prefix.
                            runs::remove(
                                self.blobs,
                                &format!("{}{}", self.prefix, runs::RUNS_PREFIX),
                            )
                            .await?;
                            Ok(Step::Done)
                        }
                    };
                }
            }
        }
    }

    fn segments(&self, side: Side) -> &'a [String] {
        match side {
            Side::Previous => self.previous,
            Side::Current => self.current,
        }
    }

    /// The lines of segment `segment` of `side` from line `line` on: the open one when it stands
    /// there, else read again and skipped to it.
    async fn lines_at(
        &mut self,
        (side, segment, line): (Side, usize, u64),
        key: &str,
    ) -> Result<&mut OpenSegment, DeliverError> {
        let open = match self.open.take() {
            Some(open) if open.at == (side, segment, line) => open,
            _ => {
                let bytes = read_manifest(self.blobs, key).await?;
                let mut lines = delta::lines_of(key.to_owned(), std::io::Cursor::new(bytes));
                for _ in 0..line {
                    lines.next().transpose()?;
                }
                OpenSegment {
                    at: (side, segment, line),
                    lines: Box::new(lines),
                }
            }
        };
        Ok(self.open.insert(open))
    }

    /// Sorts the next run's worth of manifest lines and writes the run; false when every line
    /// is in a run.
    async fn sort(&mut self, at: &mut Sorting) -> Result<bool, DeliverError> {
        let entries = self.entries;
        let mut run: Vec<(TaskKey, Vec<u8>)> = Vec::new();
        // Bounded: each round takes lines until the run is full, or moves to the next segment.
        while run.len() < entries {
            let Some(key) = self.segments(at.side).get(at.segment) else {
                if at.side == Side::Previous && run.is_empty() {
                    *at = Sorting {
                        side: Side::Current,
                        segment: 0,
                        line: 0,
                        ..std::mem::take(at)
                    };
                    continue;
                }
                // A run holds the lines of one side only.
                break;
            };
            let open = self.lines_at((at.side, at.segment, at.line), key).await?;
            while run.len() < entries {
                let Some(line) = open.lines.next() else {
                    break;
                };
                let (task, entry) = Entry::of(key, line?)?;
                run.push((task, json_line(&entry)?));
                at.line += 1;
                open.at.2 += 1;
            }
            if run.len() < entries {
                at.segment += 1;
                at.line = 0;
            }
        }
        if run.is_empty() {
            self.open = None;
            return Ok(false);
        }
        self.stats.peak_entries = self.stats.peak_entries.max(run.len() as u64);
        // Stable: a task's lines keep their manifest order.
        run.sort_by_key(|(task, _)| *task);
        let runs = match at.side {
            Side::Previous => &mut at.previous,
            Side::Current => &mut at.current,
        };
        let side = match at.side {
            Side::Previous => "previous",
            Side::Current => "current",
        };
        let key = format!(
            "{}{}{side}-{:05}",
            self.prefix,
            runs::RUNS_PREFIX,
            runs.len()
        );
        runs.push(runs::write(self.blobs, &key, &run, runs::held_line).await?);
        self.stats.runs += 1;
        Ok(true)
    }

    /// Writes the next delta file: the next `entries` tasks of the merged runs. None when every
    /// run is read and a delta file written (a delivery always has one).
    async fn merge(
        &mut self,
        at: &mut Merging,
        counts: &mut DeltaSummary,
    ) -> Result<Option<IndexedFile>, DeliverError> {
        // Taken: a merge a failed step moved on is not kept; a kept one must stand where `at`
        // says.
        let runs = || at.previous.iter().chain(&at.current);
        let kept = self.merging.take().filter(|merge| {
            merge.positions().count() == runs().count()
                && merge
                    .positions()
                    .zip(runs())
                    .all(|(position, run)| position == (run.frame, run.taken))
        });
        // Runs in order, previous ones first: equal tasks come previous lines first, each
        // side's in manifest order.
        let mut merge = match kept {
            Some(merge) => merge,
            None => Merge::new(at.previous.iter().chain(&at.current)),
        };
        let first = merge.peek(self.blobs).await;
        self.stats.peak_entries = self.stats.peak_entries.max(merge.peak_held as u64);
        if first?.is_none() && at.files > 0 {
            return Ok(None);
        }
        let name = FileKind::Delta.name(at.files);
        let key = format!("{}{name}", self.prefix);
        let mut out = GzipFile::new(self.blobs.upload(&key, "application/gzip").await?);
        let mut file_counts = DeltaSummary::default();
        let mut lines = 0;
        let previous_runs = at.previous.len();
        let written = async {
            let mut tasks = 0;
            let mut previous = Vec::new();
            let mut current = Vec::new();
            while tasks < self.entries {
                let Some(task) = merge.peek(self.blobs).await? else {
                    break;
                };
                previous.clear();
                current.clear();
                // Bounded: each round takes an entry of the task, or ends.
                while merge.peek(self.blobs).await? == Some(task) {
                    let Some((n, entry)) = merge.next(self.blobs).await? else {
                        break;
                    };
                    if n < previous_runs {
                        previous.push(entry);
                    } else {
                        current.push(entry);
                    }
                }
                for verdict in delta::join(&previous, &current) {
                    match verdict {
                        Verdict::Line(line) => {
                            match line.change {
                                Change::New => file_counts.new += 1,
                                Change::Changed => file_counts.changed += 1,
                                Change::Gone => file_counts.gone += 1,
                            }
                            out.write(&json_line(&line)?).await?;
                            lines += 1;
                        }
                        Verdict::Unchanged => file_counts.unchanged += 1,
                        Verdict::Nothing => {}
                    }
                }
                tasks += 1;
            }
            Ok::<_, DeliverError>(())
        }
        .await;
        self.stats.peak_entries = self.stats.peak_entries.max(merge.peak_held as u64);
        if let Err(e) = written {
            out.abort().await;
            return Err(e);
        }
        let file = out.complete().await?;
        counts.new += file_counts.new;
        counts.changed += file_counts.changed;
        counts.gone += file_counts.gone;
        counts.unchanged += file_counts.unchanged;
        for (run, position) in at
            .previous
            .iter_mut()
            .chain(&mut at.current)
            .zip(merge.positions())
        {
            (run.frame, run.taken) = position;
        }
        at.files += 1;
        self.merging = Some(merge);
        Ok(Some(IndexedFile {
            name,
            kind: FileKind::Delta,
            bytes: file.bytes,
            records: lines,
            md5: file.md5,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::DeltaLine;
    use super::*;
    use crate::blob::memory::MemoryBlobStore;
    use crate::blob::{Body, ObjectMeta};
    use flate2::write::GzEncoder;
    use std::collections::BTreeMap;
    use std::io::Write;

    /// Task keys to draw from: the lowest and highest there are, keys sharing their first
    /// bytes, and spread ones.
    fn task_pool() -> Vec<TaskKey> {
        let mut pool = vec![[0x00; 16], [0xff; 16]];
        for n in 0..20u8 {
            let mut key = [0xab; 16];
            key[15] = n;
            pool.push(key);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        pool.extend((0..200).map(|_| std::array::from_fn(|_| rng.u8(..))));
        pool
    }

    /// A manifest of `lines` lines over the pool: some tasks listed twice, statuses and md5s
    /// drawn so that every kind of change happens.
    fn manifest(rng: &mut fastrand::Rng, pool: &[TaskKey], lines: usize) -> Vec<ManifestLine> {
        (0..lines)
            .map(|_| {
                let task = pool[rng.usize(..pool.len())];
                let (status, fetched) = match rng.u8(..10) {
                    0 => ("gone", true),
                    1 => ("pending", false),
                    2 => ("ignored", true),
                    _ => ("succeeded", true),
                };
                ManifestLine {
                    url: format!("http://example.com/{}", hex::encode(task)),
                    task_id: hex::encode(task),
                    final_url: None,
                    status: status.to_owned(),
                    http_status: Some(200),
                    content_type: None,
                    md5: fetched.then(|| format!("{:032x}", rng.u8(..3))),
                    object: None,
                    offset: None,
                    length: None,
                    items_length: None,
                    title: None,
                    description: None,
                    language: None,
                    text: None,
                    text_cut: false,
                    text_error: None,
                    bytes: Some(1),
                    fetched_at: fetched.then(|| "2027-01-15T08:00:00Z".to_owned()),
                    first_fetched_at: None,
                    depth: 0,
                    retries: 0,
                    last_error: None,
                    data: None,
                }
            })
            .collect()
    }

    /// Writes `lines` as manifest segments of `per_segment` lines under `prefix`: their keys.
    async fn write_segments(
        blobs: &MemoryBlobStore,
        prefix: &str,
        lines: &[ManifestLine],
        per_segment: usize,
    ) -> Vec<String> {
        let mut keys = Vec::new();
        for (n, chunk) in lines.chunks(per_segment).enumerate() {
            let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
            for line in chunk {
                gz.write_all(&json_line(line).unwrap()).unwrap();
            }
            let key = format!("{prefix}{}", FileKind::Manifest.name(n as u32));
            let meta = ObjectMeta {
                content_type: "application/gzip".into(),
                source_url: String::new(),
                compress: false,
            };
            blobs
                .put(&key, Body::new(gz.finish().unwrap()), &meta)
                .await
                .unwrap();
            keys.push(key);
        }
        keys
    }

    fn sorted(mut lines: Vec<DeltaLine>) -> Vec<String> {
        let mut out: Vec<String> = lines
            .drain(..)
            .map(|l| serde_json::to_string(&l).unwrap())
            .collect();
        out.sort();
        out
    }

    /// The delta the simple way: every task's lines gathered in memory, then joined.
    fn simple_delta(
        previous: &[ManifestLine],
        current: &[ManifestLine],
    ) -> (DeltaSummary, Vec<String>) {
        let mut tasks: BTreeMap<TaskKey, (Vec<Entry>, Vec<Entry>)> = BTreeMap::new();
        for line in previous {
            let (task, entry) = Entry::of("previous", line.clone()).unwrap();
            tasks.entry(task).or_default().0.push(entry);
        }
        for line in current {
            let (task, entry) = Entry::of("current", line.clone()).unwrap();
            tasks.entry(task).or_default().1.push(entry);
        }
        let mut counts = DeltaSummary::default();
        let mut lines = Vec::new();
        for (previous, current) in tasks.values() {
            for verdict in delta::join(previous, current) {
                match verdict {
                    Verdict::Line(line) => {
                        match line.change {
                            Change::New => counts.new += 1,
                            Change::Changed => counts.changed += 1,
                            Change::Gone => counts.gone += 1,
                        }
                        lines.push(line);
                    }
                    Verdict::Unchanged => counts.unchanged += 1,
                    Verdict::Nothing => {}
                }
            }
        }
        (counts, sorted(lines))
    }

    /// The lines of the delta files `files` under `prefix`.
    async fn delta_lines(
        blobs: &MemoryBlobStore,
        prefix: &str,
        files: &[IndexedFile],
    ) -> Vec<String> {
        let mut lines = Vec::new();
        for file in files {
            let key = format!("{prefix}{}", file.name);
            let bytes = blobs.get(&key).await.unwrap().unwrap();
            let read: Vec<DeltaLine> = delta::lines(&key, &bytes).map(Result::unwrap).collect();
            assert_eq!(read.len() as u64, file.records);
            lines.extend(read);
        }
        sorted(lines)
    }

    struct Generations {
        blobs: MemoryBlobStore,
        previous: Vec<String>,
        current: Vec<String>,
        expected: (DeltaSummary, Vec<String>),
        tasks: usize,
    }

    /// Two generations over one pool of tasks, in segments of 37 lines.
    async fn generations() -> Generations {
        let pool = task_pool();
        let mut rng = fastrand::Rng::with_seed(28);
        // Each generation lists most of the pool, some tasks twice, and misses some.
        let previous_lines = manifest(&mut rng, &pool[..180], 250);
        let current_lines = manifest(&mut rng, &pool[40..], 260);
        let blobs = MemoryBlobStore::new();
        let previous = write_segments(&blobs, "gen-0/", &previous_lines, 37).await;
        let current = write_segments(&blobs, "gen-1/", &current_lines, 37).await;
        let tasks = previous_lines
            .iter()
            .chain(&current_lines)
            .map(|l| l.task_id.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let expected = simple_delta(&previous_lines, &current_lines);
        Generations {
            blobs,
            previous,
            current,
            expected,
            tasks,
        }
    }

    fn limits(entries: u64) -> super::super::DeliveryLimits {
        super::super::DeliveryLimits {
            delta_index_entries: entries,
            ..super::super::DeliveryLimits::DEFAULT
        }
    }

    #[tokio::test]
    async fn a_tiny_memory_bound_spills_many_runs_and_gives_the_delta_of_the_simple_way() {
        // GIVEN two generations of ~250 lines, with tasks listed twice, the lowest and highest
        // task ids, new, changed, unchanged, gone and removed tasks
        let g = generations().await;
        let (expected_counts, expected_lines) = &g.expected;
        assert!(
            [
                expected_counts.new,
                expected_counts.changed,
                expected_counts.unchanged,
                expected_counts.gone
            ]
            .iter()
            .all(|&n| n > 0),
            "{expected_counts:?}"
        );

        // WHEN the delta is computed holding 7 entries at a time
        let (counts, files, stats) = super::super::compare_manifests(
            &g.blobs,
            &g.previous,
            &g.current,
            "gen-1/",
            &limits(7),
        )
        .await
        .unwrap();

        // THEN it is the delta of the simple way, line for line
        assert_eq!(&counts, expected_counts);
        assert_eq!(
            &delta_lines(&g.blobs, "gen-1/", &files).await,
            expected_lines
        );
        // AND it spilled a run per 7 lines, held 7 entries while sorting, and wrote a delta
        // file per 7 tasks
        assert_eq!(
            stats.runs,
            250usize.div_ceil(7) as u64 + 260usize.div_ceil(7) as u64
        );
        assert_eq!(files.len(), g.tasks.div_ceil(7));
        // AND no run is left behind
        assert!(g.blobs.list("gen-1/_sort-").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_bound_above_the_manifests_sorts_each_side_in_one_run() {
        let g = generations().await;
        let (counts, files, stats) = super::super::compare_manifests(
            &g.blobs,
            &g.previous,
            &g.current,
            "gen-1/",
            &limits(1_000_000),
        )
        .await
        .unwrap();
        assert_eq!((stats.runs, files.len()), (2, 1));
        // The larger run while sorting; then a frame of each run (250 + 256) while merging.
        assert_eq!(stats.peak_entries, 250 + runs::FRAME_LINES as u64);
        assert_eq!(
            (counts, delta_lines(&g.blobs, "gen-1/", &files).await),
            g.expected
        );
    }

    #[tokio::test]
    async fn a_first_delivery_has_one_delta_file_even_when_empty() {
        let blobs = MemoryBlobStore::new();
        let (counts, files, _) =
            super::super::compare_manifests(&blobs, &[], &[], "gen-0/", &limits(7))
                .await
                .unwrap();
        assert_eq!(counts, DeltaSummary::default());
        assert_eq!(
            files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["delta-00000.jsonl.gz"]
        );
    }

    #[tokio::test]
    async fn a_comparison_cut_at_every_step_resumes_to_the_same_delta() {
        // GIVEN the delta computed in one go
        let g = generations().await;
        let (_, whole, _) = super::super::compare_manifests(
            &g.blobs,
            &g.previous,
            &g.current,
            "gen-1/",
            &limits(7),
        )
        .await
        .unwrap();

        // WHEN it is computed again call by call, each call one step from the checkpoint
        // (read back from JSON), and every other step cut after its work but before its
        // checkpoint (a call that died): its run or file written, its progress lost
        let mut checkpoint = serde_json::to_string(&Progress::start()).unwrap();
        let mut counts = DeltaSummary::default();
        let mut files: Vec<IndexedFile> = Vec::new();
        let mut cuts = 0;
        for call in 0.. {
            assert!(call < 1_000, "the comparison does not end");
            let mut progress: Progress = serde_json::from_str(&checkpoint).unwrap();
            let mut call_counts = counts.clone();
            let mut comparison = Comparison::new(&g.blobs, "gen-1/", &g.previous, &g.current, 7);
            let step = comparison
                .step(&mut progress, &mut call_counts)
                .await
                .unwrap();
            if call % 2 == 0 && !matches!(step, Step::Done) {
                cuts += 1;
                continue;
            }
            match step {
                Step::Sorted => {}
                Step::Wrote(file) => files.push(file),
                Step::Done => break,
            }
            checkpoint = serde_json::to_string(&progress).unwrap();
            counts = call_counts;
        }

        // THEN the delta is the same, file for file, and no run is left
        assert!(cuts > 50, "{cuts}");
        assert_eq!(files, whole);
        assert_eq!(
            (counts, delta_lines(&g.blobs, "gen-1/", &files).await),
            g.expected
        );
        assert!(g.blobs.list("gen-1/_sort-").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_run_out_of_task_order_is_a_corrupt_delivery() {
        // GIVEN a run whose entries are not sorted
        let blobs = MemoryBlobStore::new();
        let entry = |n: u8| {
            let (task, entry) = Entry::of(
                "m",
                manifest(&mut fastrand::Rng::with_seed(u64::from(n)), &[[n; 16]], 1).remove(0),
            )
            .unwrap();
            (task, json_line(&entry).unwrap())
        };
        let run = runs::write(
            &blobs,
            "gen-1/_sort-previous-00000",
            &[entry(2), entry(1)],
            runs::held_line,
        )
        .await
        .unwrap();
        let mut progress = Progress::Merging(Merging {
            previous: vec![run],
            current: Vec::new(),
            files: 0,
        });

        // WHEN it is merged, THEN the error names it
        let mut comparison = Comparison::new(&blobs, "gen-1/", &[], &[], 7);
        let merged = comparison
            .step(&mut progress, &mut DeltaSummary::default())
            .await;
        assert!(matches!(
            merged,
            Err(DeliverError::CorruptDelivery { key, .. }) if key.ends_with("previous-00000")
        ));
    }
}
