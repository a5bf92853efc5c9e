//! The comparison with the previous delivery: a compact index of its manifest (task id → md5
//! fingerprint and presence, ~50 bytes a task whatever the URL length), built by streaming the
//! manifest, and a second streamed pass to name the tasks that vanished altogether.

use super::{DeliverError, ManifestLine};
use bytes::Bytes;
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use trawl_domain::task::Status;

/// One line of `delta.jsonl.gz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaLine {
    pub change: Change,
    pub url: String,
    /// The current md5 (the previous one for `gone`).
    pub md5: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    New,
    Changed,
    Gone,
    Unchanged,
}

/// Whether a task's content is part of a delivery: it was fetched, and it is not `gone` or
/// `ignored` (a task waiting for a recrawl still has its content).
pub(crate) fn is_present(status: Status, fetched: bool) -> bool {
    fetched && !matches!(status, Status::Gone | Status::Ignored)
}

type Fingerprint = [u8; 16];

fn fingerprint(md5: Option<&str>) -> Option<Fingerprint> {
    md5.map(|m| Md5::digest(m.as_bytes()).into())
}

fn task_key(task_id: &str) -> Option<Fingerprint> {
    let mut key = [0u8; 16];
    hex::decode_to_slice(task_id, &mut key).ok().map(|()| key)
}

struct Entry {
    md5: Option<Fingerprint>,
    present: bool,
    seen: bool,
}

/// The previous delivery's manifest, indexed.
pub(crate) struct Previous {
    pub(crate) delivery_id: String,
    key: String,
    manifest: Bytes,
    index: HashMap<Fingerprint, Entry>,
}

/// The lines of a gzipped manifest, decoded one at a time.
fn lines<'a>(
    key: &'a str,
    manifest: &'a [u8],
) -> impl Iterator<Item = Result<ManifestLine, DeliverError>> + 'a {
    BufReader::new(MultiGzDecoder::new(manifest))
        .lines()
        .filter(|line| !line.as_ref().is_ok_and(|l| l.trim().is_empty()))
        .map(move |line| {
            let corrupt = |reason: String| DeliverError::CorruptDelivery {
                key: key.to_owned(),
                reason,
            };
            let line = line.map_err(|e| corrupt(e.to_string()))?;
            serde_json::from_str::<ManifestLine>(&line).map_err(|e| corrupt(e.to_string()))
        })
}

impl Previous {
    pub(crate) fn load(
        delivery_id: String,
        key: String,
        manifest: Bytes,
    ) -> Result<Self, DeliverError> {
        let mut index = HashMap::new();
        for line in lines(&key, &manifest) {
            let line = line?;
            let task = task_key(&line.task_id).ok_or_else(|| DeliverError::CorruptDelivery {
                key: key.clone(),
                reason: format!("bad task id {:?}", line.task_id),
            })?;
            let present = Status::from_name(&line.status)
                .is_some_and(|s| is_present(s, line.fetched_at.is_some()));
            index.insert(
                task,
                Entry {
                    md5: fingerprint(line.md5.as_deref()),
                    present,
                    seen: false,
                },
            );
        }
        Ok(Self {
            delivery_id,
            key,
            manifest,
            index,
        })
    }

    /// What happened to `task_id` since; None when it was and is absent from both deliveries.
    pub(crate) fn compare(
        &mut self,
        task_id: &str,
        present: bool,
        md5: Option<&str>,
    ) -> Option<Change> {
        let before = task_key(task_id).and_then(|k| self.index.get_mut(&k));
        let was = match before {
            Some(entry) => {
                entry.seen = true;
                entry.present.then_some(entry.md5)
            }
            None => None,
        };
        match (was, present) {
            (None, true) => Some(Change::New),
            (Some(old), true) if old == fingerprint(md5) => Some(Change::Unchanged),
            (Some(_), true) => Some(Change::Changed),
            (Some(_), false) => Some(Change::Gone),
            (None, false) => None,
        }
    }

    /// Streams the previous manifest again: the tasks it delivered that this delivery no longer
    /// has at all (deleted tasks), as `gone` lines.
    pub(crate) fn vanished(&self) -> impl Iterator<Item = Result<DeltaLine, DeliverError>> + '_ {
        lines(&self.key, &self.manifest).filter_map(|line| match line {
            Err(e) => Some(Err(e)),
            Ok(line) => {
                let entry = task_key(&line.task_id).and_then(|k| self.index.get(&k))?;
                (entry.present && !entry.seen).then_some(Ok(DeltaLine {
                    change: Change::Gone,
                    url: line.url,
                    md5: line.md5,
                }))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

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
            bytes: Some(1),
            fetched_at: Some("2027-01-15T08:00:00Z".to_owned()),
            depth: 0,
            retries: 0,
            last_error: None,
        }
    }

    #[test]
    fn compares_with_the_previous_manifest_and_finds_vanished_tasks() {
        // GIVEN a previous manifest: 1..=3 delivered, 4 gone
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        for l in [
            line(1, "succeeded", "a"),
            line(2, "succeeded", "b"),
            line(3, "succeeded", "c"),
            line(4, "gone", "d"),
        ] {
            gz.write_all(&serde_json::to_vec(&l).unwrap()).unwrap();
            gz.write_all(b"\n").unwrap();
        }
        let manifest = Bytes::from(gz.finish().unwrap());
        let mut previous = Previous::load("gen-000000".into(), "k".into(), manifest).unwrap();
        let id = |n: u8| hex::encode([n; 16]);

        // WHEN this delivery has 1 unchanged, 2 changed, 4 back, 5 new, 6 never fetched; 3 vanished
        let changes = [
            previous.compare(&id(1), true, Some("a")),
            previous.compare(&id(2), true, Some("b2")),
            previous.compare(&id(4), true, Some("d")),
            previous.compare(&id(5), true, Some("e")),
            previous.compare(&id(6), false, None),
        ];
        let vanished: Vec<DeltaLine> = previous.vanished().map(Result::unwrap).collect();

        // THEN each change is named, and only 3 is reported gone at the end
        assert_eq!(
            changes,
            [
                Some(Change::Unchanged),
                Some(Change::Changed),
                Some(Change::New),
                Some(Change::New),
                None
            ]
        );
        assert_eq!(
            vanished,
            [DeltaLine {
                change: Change::Gone,
                url: "http://example.com/3".into(),
                md5: Some("c".into()),
            }]
        );
    }

    #[test]
    fn a_corrupt_manifest_is_a_typed_error() {
        let result = Previous::load("gen-000000".into(), "k".into(), Bytes::from_static(b"nope"));
        assert!(matches!(
            result,
            Err(DeliverError::CorruptDelivery { key, .. }) if key == "k"
        ));
    }
}
