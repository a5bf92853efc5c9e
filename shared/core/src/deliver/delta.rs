//! The delta: what changed since the previous delivery of the same crawl run, from the fetch
//! records the two manifests hold (md5, status, last error), not from status changes: a recrawl
//! that keeps its task `succeeded` with a new fetch record is compared like any other.
//!
//! The rule is `join`: the lines of one task in the previous manifest and in the current one
//! give its delta lines. The pass that brings each task's lines together at any size, with
//! bounded memory, is `compare` (both manifests sorted by task id, then merged).

use super::{DeliverError, ManifestError, ManifestLine};
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use trawl_domain::task::{Millis, Status};

/// One line of a `delta-NNNNN.jsonl.gz`. Unchanged pages are counted in the summary, not listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaLine {
    pub change: Change,
    pub url: String,
    /// The task's id, as its manifest lines give it (None in deltas written before trawl
    /// kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
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

/// What the comparison of one task's line says.
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

/// A task id as 16 bytes: the key the delta sorts and joins on.
pub(crate) type TaskKey = [u8; 16];

fn task_key(key: &str, task_id: &str) -> Result<TaskKey, DeliverError> {
    let mut out = [0u8; 16];
    hex::decode_to_slice(task_id, &mut out).map_err(|_| DeliverError::CorruptDelivery {
        key: key.to_owned(),
        reason: format!("bad task id {task_id:?}"),
    })?;
    Ok(out)
}

/// A hex md5 as 16 bytes; anything else by its own md5 (compared, never shown).
fn digest(md5: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    match hex::decode_to_slice(md5, &mut out) {
        Ok(()) => out,
        Err(_) => Md5::digest(md5.as_bytes()).into(),
    }
}

/// A manifest line as the delta reads it: what a sorted run (`runs`) holds of it, in short
/// field names (a run is written and read once per delivery, never delivered).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The task id, as lower-case hex.
    #[serde(rename = "t")]
    pub(crate) task_id: String,
    #[serde(rename = "u")]
    pub(crate) url: String,
    #[serde(rename = "s")]
    pub(crate) status: String,
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub(crate) md5: Option<String>,
    /// Whether the line has a fetch time.
    #[serde(rename = "f", default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) fetched: bool,
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_fetched_at: Option<String>,
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<ManifestError>,
}

impl Entry {
    /// The entry of a line of the manifest at `key`, and its task key.
    pub(crate) fn of(key: &str, line: ManifestLine) -> Result<(TaskKey, Entry), DeliverError> {
        let task = task_key(key, &line.task_id)?;
        let entry = Entry {
            task_id: hex::encode(task),
            url: line.url,
            status: line.status,
            md5: line.md5,
            fetched: line.fetched_at.is_some(),
            first_fetched_at: line.first_fetched_at,
            last_error: line.last_error,
        };
        Ok((task, entry))
    }

    fn present(&self) -> bool {
        Status::from_name(&self.status).is_some_and(|s| is_present(s, self.fetched))
    }

    /// When its fetch record's history began (None: not said, or not a time).
    fn first_fetched(&self) -> Option<Millis> {
        let at = humantime::parse_rfc3339(self.first_fetched_at.as_deref()?).ok()?;
        let since_epoch = at.duration_since(std::time::UNIX_EPOCH).ok()?;
        Millis::try_from(since_epoch.as_millis()).ok()
    }

    /// `http 404`, `http 404 twice`, `http 404 3 times`: the last error and how often in a row.
    fn gone_reason(&self) -> String {
        match &self.last_error {
            Some(error) => {
                let what = error.message.to_lowercase();
                match error.times {
                    0 | 1 => what,
                    2 => format!("{what} twice"),
                    n => format!("{what} {n} times"),
                }
            }
            None => format!("now {}", self.status),
        }
    }
}

impl super::runs::Sorted for Entry {
    type Key = TaskKey;

    fn key(&self, run: &str) -> Result<TaskKey, DeliverError> {
        task_key(run, &self.task_id)
    }
}

/// A task's state in the previous delivery: present with its md5 and when its fetch record's
/// history began, gone, or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Was {
    Present(Option<[u8; 16]>, Option<Millis>),
    Gone,
    Absent,
}

impl Was {
    /// What the previous delivery said of a task whose last line there is `line`.
    fn of(line: Option<&Entry>) -> Was {
        let Some(line) = line else {
            return Was::Absent;
        };
        if line.present() {
            Was::Present(line.md5.as_deref().map(digest), line.first_fetched())
        } else if Status::from_name(&line.status) == Some(Status::Gone) {
            Was::Gone
        } else {
            Was::Absent
        }
    }
}

/// The verdict on one current line of a task that the previous delivery saw as `was`.
fn verdict(was: Was, line: &Entry) -> Verdict {
    let present = line.present();
    let current = line.md5.as_deref().map(digest);
    let first = line.first_fetched();
    let delta = |change, reason: &str, previous_md5: Option<[u8; 16]>| {
        Verdict::Line(DeltaLine {
            change,
            url: line.url.clone(),
            task_id: Some(line.task_id.clone()),
            md5: line.md5.clone(),
            previous_md5: previous_md5.map(hex::encode),
            reason: reason.to_owned(),
        })
    };
    match (was, present) {
        // A record whose history began since (a reset forgot the one delivered): everything
        // is delivered as new, whatever the content.
        (Was::Present(_, was_first), true) if first.is_some() && first != was_first => {
            delta(Change::New, "fetched afresh (reset)", None)
        }
        (Was::Present(old, _), true) if old == current => Verdict::Unchanged,
        (Was::Present(old, _), true) => delta(Change::Changed, "md5 changed", old),
        (Was::Gone, true) => delta(Change::New, "content came back", None),
        (Was::Absent, true) => delta(Change::New, "first fetch", None),
        (Was::Present(..), false) => delta(Change::Gone, &line.gone_reason(), None),
        (Was::Gone | Was::Absent, false) => Verdict::Nothing,
    }
}

/// The delta of one task: its lines in the previous delivery's manifest and in this one's, each
/// in manifest order (a task listed twice is rare; the previous delivery's last line is what it
/// delivered). Each current line gets a verdict; a task delivered then and not in this manifest
/// at all was removed: each of its previous lines is reported `gone`.
pub(crate) fn join(previous: &[Entry], current: &[Entry]) -> Vec<Verdict> {
    let was = Was::of(previous.last());
    if current.is_empty() {
        if !matches!(was, Was::Present(..)) {
            return Vec::new();
        }
        return previous
            .iter()
            .map(|line| {
                Verdict::Line(DeltaLine {
                    change: Change::Gone,
                    url: line.url.clone(),
                    task_id: Some(line.task_id.clone()),
                    md5: line.md5.clone(),
                    previous_md5: None,
                    reason: "task removed".to_owned(),
                })
            })
            .collect();
    }
    current.iter().map(|line| verdict(was, line)).collect()
}

/// The lines of a gzipped JSON-lines file (a manifest, items), decoded one at a time.
pub(crate) fn lines<'a, T: serde::de::DeserializeOwned>(
    key: &'a str,
    manifest: &'a [u8],
) -> impl Iterator<Item = Result<T, DeliverError>> {
    lines_of(key.to_owned(), manifest)
}

/// `lines`, over any reader of the gzipped file (an owned one: `compare` keeps a segment open
/// between the runs it sorts).
pub(crate) fn lines_of<T: serde::de::DeserializeOwned, R: Read>(
    key: String,
    manifest: R,
) -> impl Iterator<Item = Result<T, DeliverError>> {
    BufReader::new(MultiGzDecoder::new(manifest))
        .lines()
        .filter(|line| !line.as_ref().is_ok_and(|l| l.trim().is_empty()))
        .map(move |line| {
            let corrupt = |reason: String| DeliverError::CorruptDelivery {
                key: key.clone(),
                reason,
            };
            let line = line.map_err(|e| corrupt(e.to_string()))?;
            serde_json::from_str::<T>(&line).map_err(|e| corrupt(e.to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::super::ManifestError;
    use super::*;
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
            items_length: None,
            title: None,
            description: None,
            language: None,
            text: None,
            text_cut: false,
            text_error: None,
            bytes: Some(1),
            fetched_at: Some("2027-01-15T08:00:00Z".to_owned()),
            first_fetched_at: None,
            depth: 0,
            retries: 0,
            last_error: None,
            data: None,
        }
    }

    fn entry(line: ManifestLine) -> Entry {
        Entry::of("manifest", line).unwrap().1
    }

    fn change(verdicts: Vec<Verdict>) -> Vec<(String, String)> {
        verdicts
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Line(l) => (format!("{:?}", l.change), l.reason),
                other => (format!("{other:?}"), String::new()),
            })
            .collect()
    }

    /// The delta of tasks, each with its previous and current lines (None: not listed).
    fn deltas(tasks: Vec<(Option<ManifestLine>, Option<ManifestLine>)>) -> Vec<(String, String)> {
        tasks
            .into_iter()
            .flat_map(|(was, is)| {
                let was: Vec<Entry> = was.into_iter().map(entry).collect();
                let is: Vec<Entry> = is.into_iter().map(entry).collect();
                change(join(&was, &is))
            })
            .collect()
    }

    #[test]
    fn compares_fetch_records_and_names_the_reason() {
        // GIVEN a previous manifest: 1..=3 and 7 delivered, 4 gone
        let mut gone_twice = line(7, "gone", "ee");
        gone_twice.last_error = Some(ManifestError {
            kind: ErrorKind::NotFound,
            message: "HTTP 404".into(),
            at: "2027-01-15T08:00:00Z".into(),
            times: 2,
        });
        let never_fetched = ManifestLine {
            fetched_at: None,
            md5: None,
            ..line(6, "pending", "")
        };

        // WHEN this delivery has 1 unchanged, 2 changed, 4 back, 5 new, 6 never fetched, 7 gone;
        // 3 vanished
        let changes = deltas(vec![
            (
                Some(line(1, "succeeded", "aa")),
                Some(line(1, "succeeded", "aa")),
            ),
            (
                Some(line(2, "succeeded", "bb")),
                Some(line(2, "succeeded", "b2")),
            ),
            (
                Some(line(4, "gone", "dd")),
                Some(line(4, "succeeded", "dd")),
            ),
            (None, Some(line(5, "succeeded", "ff"))),
            (None, Some(never_fetched)),
            (Some(line(7, "succeeded", "ee")), Some(gone_twice)),
            (Some(line(3, "succeeded", "cc")), None),
        ]);

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
                s("Gone", "task removed"),
            ]
        );
    }

    #[test]
    fn a_page_whose_record_began_since_the_previous_delivery_is_new_whatever_its_content() {
        // GIVEN a previous delivery of three pages, one from before records kept their start
        let began = |n: u8, at: &str| ManifestLine {
            first_fetched_at: Some(at.to_owned()),
            ..line(n, "succeeded", "aa")
        };
        let t0 = "2027-01-15T08:00:00.000Z";

        // WHEN 1 was fetched again, 2 and 3 were reset (a new history, the same content)
        let changes = deltas(vec![
            (Some(began(1, t0)), Some(began(1, t0))),
            (
                Some(began(2, t0)),
                Some(began(2, "2027-01-15T08:00:00.001Z")),
            ),
            (
                Some(line(3, "succeeded", "aa")),
                Some(began(3, "2027-01-16T08:00:00.000Z")),
            ),
        ]);

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
    fn a_task_listed_twice_is_judged_by_its_last_previous_line_and_each_current_one() {
        // GIVEN a task delivered twice over (gone, then present with md5 aa)
        let previous = [
            entry(line(1, "gone", "aa")),
            entry(line(1, "succeeded", "aa")),
        ];

        // WHEN this delivery lists it twice, unchanged then changed
        let twice = [
            entry(line(1, "succeeded", "aa")),
            entry(line(1, "succeeded", "bb")),
        ];
        let listed = change(join(&previous, &twice));
        // OR not at all
        let removed = change(join(&previous, &[]));

        // THEN each current line is compared with the last previous one; a removal names each
        // previous line
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(listed, [s("Unchanged", ""), s("Changed", "md5 changed")]);
        assert_eq!(
            removed,
            [s("Gone", "task removed"), s("Gone", "task removed")]
        );
        // AND a task removed that the previous delivery did not hold is not reported
        assert!(join(&[entry(line(2, "gone", "aa"))], &[]).is_empty());
    }

    #[test]
    fn a_bad_task_id_is_a_typed_error() {
        let bad = ManifestLine {
            task_id: "nope".into(),
            ..line(1, "succeeded", "aa")
        };
        assert!(matches!(
            Entry::of("k", bad),
            Err(DeliverError::CorruptDelivery { key, .. }) if key == "k"
        ));
    }

    #[test]
    fn a_corrupt_manifest_is_a_typed_error() {
        let mut read = lines::<ManifestLine>("k", b"nope");
        assert!(matches!(
            read.next(),
            Some(Err(DeliverError::CorruptDelivery { key, .. })) if key == "k"
        ));
    }
}
