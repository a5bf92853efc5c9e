//! The delta: what changed since the previous delivery of the same crawl run, from the fetch
//! records the two manifests hold (md5, status, last error), not from status changes: a recrawl
//! that keeps its task `succeeded` with a new fetch record is compared like any other.
//!
//! Memory is bounded whatever the crawl's size: the previous manifest is indexed one hash
//! partition of task ids at a time (task id → md5 and state, ~60 bytes an entry, at most
//! `DeliveryLimits::delta_index_entries` entries). For each partition the current manifest is
//! streamed and compared, then the previous one again to name the tasks that vanished. With P
//! partitions that is P reads of the current manifest and 2P of the previous one; a partition is
//! the delta's unit of progress (one `delta-NNNNN.jsonl.gz` each, checkpointed once written).
//! Linear while the previous delivery fits one partition (measured, `bench --only delivery`:
//! 1.5 bytes read per manifest byte at 10^5 and 10^6 lines), quadratic past it (15 at ten
//! partitions): a crawl of 10^7 pages reads its manifests 15 times over, one of 10^9 1,500.

use super::{DeliverError, ManifestLine};
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use trawl_domain::task::{Millis, Status};

/// One line of a `delta-NNNNN.jsonl.gz`. Unchanged pages are counted in the summary, not listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaLine {
    pub change: Change,
    pub url: String,
    /// The current md5 (the last delivered one for `gone`).
    pub md5: Option<String>,
    /// For `changed`: the md5 the previous delivery had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_md5: Option<String>,
    /// Why: `first fetch`, `content came back`, `md5 changed`, `http 404 twice`, `task removed` …
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    New,
    Changed,
    Gone,
}

/// What the comparison of one current task says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Line(DeltaLine),
    Unchanged,
    /// Absent from both deliveries (never fetched, or still gone).
    Nothing,
}

/// Whether a task's content is part of a delivery: it was fetched, and it is not `gone` or
/// `ignored` (a task waiting for a recrawl still has its content).
pub(crate) fn is_present(status: Status, fetched: bool) -> bool {
    fetched && !matches!(status, Status::Gone | Status::Ignored)
}

type Digest16 = [u8; 16];

fn task_key(key: &str, task_id: &str) -> Result<Digest16, DeliverError> {
    let mut out = [0u8; 16];
    hex::decode_to_slice(task_id, &mut out).map_err(|_| DeliverError::CorruptDelivery {
        key: key.to_owned(),
        reason: format!("bad task id {task_id:?}"),
    })?;
    Ok(out)
}

/// A hex md5 as 16 bytes; anything else by its own md5 (compared, never shown).
fn digest(md5: &str) -> Digest16 {
    let mut out = [0u8; 16];
    match hex::decode_to_slice(md5, &mut out) {
        Ok(()) => out,
        Err(_) => Md5::digest(md5.as_bytes()).into(),
    }
}

/// The partition of a task id: its first four bytes, uniform (task ids are md5s of URLs).
fn partition_of(task: &Digest16, partitions: u32) -> u32 {
    u32::from_be_bytes([task[0], task[1], task[2], task[3]]) % partitions.max(1)
}

/// The partitions needed for `previous_tasks` entries within `max_entries`.
pub(crate) fn partitions_for(previous_tasks: u64, max_entries: u64) -> u32 {
    u32::try_from(previous_tasks.div_ceil(max_entries.max(1)).max(1)).unwrap_or(u32::MAX)
}

/// A task's state in the previous delivery: present with its md5 and when its fetch record's
/// history began, gone, or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Was {
    Present(Option<Digest16>, Option<Millis>),
    Gone,
    Absent,
}

/// When a manifest line's fetch record's history began (None: not said, or not a time).
fn first_fetched(line: &ManifestLine) -> Option<Millis> {
    let at = humantime::parse_rfc3339(line.first_fetched_at.as_deref()?).ok()?;
    let since_epoch = at.duration_since(std::time::UNIX_EPOCH).ok()?;
    Millis::try_from(since_epoch.as_millis()).ok()
}

struct Entry {
    was: Was,
    seen: bool,
}

/// One partition of the previous delivery's manifest, indexed.
#[derive(Default)]
pub(crate) struct PartitionIndex {
    partition: u32,
    partitions: u32,
    entries: HashMap<Digest16, Entry>,
}

/// The lines of a gzipped JSON-lines file (a manifest, items), decoded one at a time.
pub(crate) fn lines<'a, T: serde::de::DeserializeOwned>(
    key: &'a str,
    manifest: &'a [u8],
) -> impl Iterator<Item = Result<T, DeliverError>> + 'a {
    BufReader::new(MultiGzDecoder::new(manifest))
        .lines()
        .filter(|line| !line.as_ref().is_ok_and(|l| l.trim().is_empty()))
        .map(move |line| {
            let corrupt = |reason: String| DeliverError::CorruptDelivery {
                key: key.to_owned(),
                reason,
            };
            let line = line.map_err(|e| corrupt(e.to_string()))?;
            serde_json::from_str::<T>(&line).map_err(|e| corrupt(e.to_string()))
        })
}

/// `http 404`, `http 404 twice`, `http 404 3 times`: the last error and how often in a row.
fn gone_reason(line: &ManifestLine) -> String {
    match &line.last_error {
        Some(error) => {
            let what = error.message.to_lowercase();
            match error.times {
                0 | 1 => what,
                2 => format!("{what} twice"),
                n => format!("{what} {n} times"),
            }
        }
        None => format!("now {}", line.status),
    }
}

impl PartitionIndex {
    pub(crate) fn new(partition: u32, partitions: u32) -> Self {
        Self {
            partition,
            partitions,
            entries: HashMap::new(),
        }
    }

    /// The task key of `line` when it falls in this partition.
    fn mine(&self, key: &str, line: &ManifestLine) -> Result<Option<Digest16>, DeliverError> {
        let task = task_key(key, &line.task_id)?;
        Ok((partition_of(&task, self.partitions) == self.partition).then_some(task))
    }

    /// Indexes this partition's lines of one previous manifest segment.
    pub(crate) fn add_previous(&mut self, key: &str, manifest: &[u8]) -> Result<(), DeliverError> {
        for line in lines(key, manifest) {
            let line = line?;
            let Some(task) = self.mine(key, &line)? else {
                continue;
            };
            let status = Status::from_name(&line.status);
            let was = if status.is_some_and(|s| is_present(s, line.fetched_at.is_some())) {
                Was::Present(line.md5.as_deref().map(digest), first_fetched(&line))
            } else if status == Some(Status::Gone) {
                Was::Gone
            } else {
                Was::Absent
            };
            self.entries.insert(task, Entry { was, seen: false });
        }
        Ok(())
    }

    /// Compares one line of the current manifest; None when it belongs to another partition.
    pub(crate) fn compare(
        &mut self,
        key: &str,
        line: &ManifestLine,
    ) -> Result<Option<Verdict>, DeliverError> {
        let Some(task) = self.mine(key, line)? else {
            return Ok(None);
        };
        let was = match self.entries.get_mut(&task) {
            Some(entry) => {
                entry.seen = true;
                entry.was
            }
            None => Was::Absent,
        };
        let status = Status::from_name(&line.status);
        let present = status.is_some_and(|s| is_present(s, line.fetched_at.is_some()));
        let current = line.md5.as_deref().map(digest);
        let first = first_fetched(line);
        let delta = |change, reason: &str, previous_md5: Option<Digest16>| {
            Verdict::Line(DeltaLine {
                change,
                url: line.url.clone(),
                md5: line.md5.clone(),
                previous_md5: previous_md5.map(hex::encode),
                reason: reason.to_owned(),
            })
        };
        Ok(Some(match (was, present) {
            // A record whose history began since (a reset forgot the one delivered): everything
            // is delivered as new, whatever the content.
            (Was::Present(_, was_first), true) if first.is_some() && first != was_first => {
                delta(Change::New, "fetched afresh (reset)", None)
            }
            (Was::Present(old, _), true) if old == current => Verdict::Unchanged,
            (Was::Present(old, _), true) => delta(Change::Changed, "md5 changed", old),
            (Was::Gone, true) => delta(Change::New, "content came back", None),
            (Was::Absent, true) => delta(Change::New, "first fetch", None),
            (Was::Present(..), false) => delta(Change::Gone, &gone_reason(line), None),
            (Was::Gone | Was::Absent, false) => Verdict::Nothing,
        }))
    }

    /// This partition's tasks of one previous manifest segment that were delivered then and are
    /// not in the current manifest at all (removed tasks), as `gone` lines.
    pub(crate) fn vanished(
        &self,
        key: &str,
        manifest: &[u8],
    ) -> Result<Vec<DeltaLine>, DeliverError> {
        let mut gone = Vec::new();
        for line in lines(key, manifest) {
            let line = line?;
            let Some(task) = self.mine(key, &line)? else {
                continue;
            };
            if let Some(Entry {
                was: Was::Present(..),
                seen: false,
            }) = self.entries.get(&task)
            {
                gone.push(DeltaLine {
                    change: Change::Gone,
                    url: line.url,
                    md5: line.md5,
                    previous_md5: None,
                    reason: "task removed".to_owned(),
                });
            }
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ManifestError;
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;
    use trawl_domain::task::ErrorKind;

    fn line(n: u8, status: &str, md5: &str) -> ManifestLine {
        ManifestLine {
            url: format!("http://example.com/{n}"),
            task_id: hex::encode([n; 16]),
            final_url: None,
            status: status.to_owned(),
            http_status: Some(200),
            content_type: None,
            md5: Some(md5.to_owned()),
            object: None,
            offset: None,
            length: None,
            bytes: Some(1),
            fetched_at: Some("2027-01-15T08:00:00Z".to_owned()),
            first_fetched_at: None,
            depth: 0,
            retries: 0,
            last_error: None,
            data: None,
        }
    }

    fn gz(lines: &[ManifestLine]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        for l in lines {
            gz.write_all(&serde_json::to_vec(l).unwrap()).unwrap();
            gz.write_all(b"\n").unwrap();
        }
        gz.finish().unwrap()
    }

    fn change(verdict: Option<Verdict>) -> (String, String) {
        match verdict {
            Some(Verdict::Line(l)) => (format!("{:?}", l.change), l.reason),
            Some(other) => (format!("{other:?}"), String::new()),
            None => ("None".to_owned(), String::new()),
        }
    }

    #[test]
    fn compares_fetch_records_and_names_the_reason() {
        // GIVEN a previous manifest: 1..=3 delivered, 4 gone
        let previous = gz(&[
            line(1, "succeeded", "aa"),
            line(2, "succeeded", "bb"),
            line(3, "succeeded", "cc"),
            line(4, "gone", "dd"),
            line(7, "succeeded", "ee"),
        ]);
        let mut index = PartitionIndex::new(0, 1);
        index.add_previous("prev", &previous).unwrap();
        let mut gone_twice = line(7, "gone", "ee");
        gone_twice.last_error = Some(ManifestError {
            kind: ErrorKind::NotFound,
            message: "HTTP 404".into(),
            at: "2027-01-15T08:00:00Z".into(),
            times: 2,
        });

        // WHEN this delivery has 1 unchanged, 2 changed, 4 back, 5 new, 6 never fetched, 7 gone;
        // 3 vanished
        let changes: Vec<_> = [
            line(1, "succeeded", "aa"),
            line(2, "succeeded", "b2"),
            line(4, "succeeded", "dd"),
            line(5, "succeeded", "ff"),
            ManifestLine {
                fetched_at: None,
                md5: None,
                ..line(6, "pending", "")
            },
            gone_twice,
        ]
        .iter()
        .map(|l| change(index.compare("cur", l).unwrap()))
        .collect();
        let vanished = index.vanished("prev", &previous).unwrap();

        // THEN each change is named with its reason, and only 3 is reported removed
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            changes,
            [
                s("Unchanged", ""),
                s("Changed", "md5 changed"),
                s("New", "content came back"),
                s("New", "first fetch"),
                s("Nothing", ""),
                s("Gone", "http 404 twice"),
            ]
        );
        assert_eq!(vanished.len(), 1);
        assert_eq!(vanished[0].url, "http://example.com/3");
        assert_eq!(vanished[0].reason, "task removed");
    }

    #[test]
    fn a_page_whose_record_began_since_the_previous_delivery_is_new_whatever_its_content() {
        // GIVEN a previous delivery of three pages, one from before records kept their start
        let began = |n: u8, at: &str| ManifestLine {
            first_fetched_at: Some(at.to_owned()),
            ..line(n, "succeeded", "aa")
        };
        let t0 = "2027-01-15T08:00:00.000Z";
        let previous = gz(&[began(1, t0), began(2, t0), line(3, "succeeded", "aa")]);
        let mut index = PartitionIndex::new(0, 1);
        index.add_previous("prev", &previous).unwrap();

        // WHEN 1 was fetched again, 2 and 3 were reset (a new history, the same content)
        let changes: Vec<_> = [
            began(1, t0),
            began(2, "2027-01-15T08:00:00.001Z"),
            began(3, "2027-01-16T08:00:00.000Z"),
        ]
        .iter()
        .map(|l| change(index.compare("cur", l).unwrap()))
        .collect();

        // THEN the reset pages are new, the other unchanged
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            changes,
            [
                s("Unchanged", ""),
                s("New", "fetched afresh (reset)"),
                s("New", "fetched afresh (reset)"),
            ]
        );
    }

    #[test]
    fn partitions_split_the_tasks_between_them() {
        // GIVEN 200 previous tasks indexed in 3 partitions
        let previous: Vec<ManifestLine> = (0..200u8).map(|n| line(n, "succeeded", "aa")).collect();
        let manifest = gz(&previous);
        let partitions = partitions_for(200, 70);
        assert_eq!(partitions, 3);
        let mut sizes = Vec::new();
        for p in 0..partitions {
            let mut index = PartitionIndex::new(p, partitions);
            index.add_previous("prev", &manifest).unwrap();
            // WHEN every current task is compared with each partition
            let mine = previous
                .iter()
                .filter_map(|l| index.compare("cur", l).unwrap())
                .count();
            sizes.push((index.entries.len(), mine));
        }
        // THEN each task lands in exactly one partition, none holding them all
        assert_eq!(sizes.iter().map(|s| s.0).sum::<usize>(), 200);
        assert!(
            sizes
                .iter()
                .all(|&(held, compared)| held == compared && held < 200)
        );
    }

    #[test]
    fn a_corrupt_manifest_is_a_typed_error() {
        let mut index = PartitionIndex::new(0, 1);
        assert!(matches!(
            index.add_previous("k", b"nope"),
            Err(DeliverError::CorruptDelivery { key, .. }) if key == "k"
        ));
    }
}
