//! `trawl deliveries list|get`: a crawl's deliveries as the deliverer leaves them in the object
//! store, under the crawl's run (`deliver::run_prefix`) — one folder per delivery, complete once its
//! `_SUCCESS` marker is written (written last). Every file of a delivery is listed and fetched as
//! it is, whatever its name: segmented deliveries need no change here.

use crate::error::CliError;
use crate::output;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use trawl_core::blob::{BlobStore, Layout};
use trawl_core::deliver::{SUCCESS_FILE, run_prefix};
use trawl_domain::crawl::Crawl;

/// One delivery: its id (folder) and its files, relative to the folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub files: Vec<String>,
}

impl Delivery {
    /// Whether the deliverer finished it.
    pub fn complete(&self) -> bool {
        self.files.iter().any(|f| f == SUCCESS_FILE)
    }
}

/// The crawl's deliveries, oldest first (delivery ids sort like generations).
pub async fn list<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    crawl: &Crawl,
) -> Result<Vec<Delivery>, CliError> {
    let prefix = run_prefix(layout, crawl);
    let keys = blobs.list(&prefix).await.map_err(CliError::other)?;
    let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for key in keys {
        let Some((id, file)) = key
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('/'))
        else {
            continue;
        };
        by_id
            .entry(id.to_owned())
            .or_default()
            .push(file.to_owned());
    }
    Ok(by_id
        .into_iter()
        .map(|(id, mut files)| {
            files.sort();
            Delivery { id, files }
        })
        .collect())
}

/// Where delivery `id` is: `s3://bucket/…/` or a directory.
pub fn location(uri_base: &str, layout: &Layout, crawl: &Crawl, id: &str) -> String {
    format!(
        "{}/{}{id}/",
        uri_base.trim_end_matches('/'),
        run_prefix(layout, crawl)
    )
}

/// Prints the crawl's deliveries.
pub async fn print_list<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    uri_base: &str,
    crawl: &Crawl,
    json: bool,
) -> Result<(), CliError> {
    let crawl_id = &crawl.id;
    let deliveries = list(blobs, layout, crawl).await?;
    let location = |d: &Delivery| location(uri_base, layout, crawl, &d.id);
    if json {
        let listed: Vec<_> = deliveries
            .iter()
            .map(|d| {
                json!({
                    "delivery": d.id,
                    "complete": d.complete(),
                    "location": location(d),
                    "files": d.files,
                })
            })
            .collect();
        output::json(&json!({"crawl_id": crawl_id.as_str(), "deliveries": listed}));
    } else if deliveries.is_empty() {
        output::line(format_args!(
            "crawl {crawl_id} has no delivery yet: `trawl status --crawl-id {crawl_id} --watch` \
             follows it until it has"
        ));
    } else {
        let rows: Vec<Vec<String>> = deliveries
            .iter()
            .map(|d| {
                vec![
                    d.id.clone(),
                    if d.complete() {
                        "complete"
                    } else {
                        "incomplete"
                    }
                    .to_owned(),
                    d.files.len().to_string(),
                    location(d),
                ]
            })
            .collect();
        output::table(&["delivery", "state", "files", "location"], &rows);
    }
    Ok(())
}

/// Downloads delivery `wanted` (default: the newest complete one) into `out/{delivery}/`;
/// returns the directory.
pub async fn get<B: BlobStore>(
    blobs: &B,
    layout: &Layout,
    crawl: &Crawl,
    wanted: Option<&str>,
    out: &Path,
) -> Result<(PathBuf, Delivery), CliError> {
    let crawl_id = &crawl.id;
    let deliveries = list(blobs, layout, crawl).await?;
    let delivery = match wanted {
        Some(id) => deliveries.into_iter().find(|d| d.id == id).ok_or_else(|| {
            CliError::Usage(format!(
                "crawl {crawl_id} has no delivery {id:?}: `trawl deliveries list --crawl-id \
                 {crawl_id}` lists them"
            ))
        })?,
        None => deliveries
            .into_iter()
            .rev()
            .find(Delivery::complete)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "crawl {crawl_id} has no complete delivery yet: `trawl status --crawl-id \
                     {crawl_id} --watch` follows it until it has"
                ))
            })?,
    };
    let dir = out.join(safe_relative(&delivery.id)?);
    let folder = format!("{}{}/", run_prefix(layout, crawl), delivery.id);
    for file in &delivery.files {
        let target = dir.join(safe_relative(file)?);
        let body = blobs
            .get(&format!("{folder}{file}"))
            .await
            .map_err(CliError::other)?
            .ok_or_else(|| {
                CliError::other(format!(
                    "{folder}{file} disappeared while it was downloaded"
                ))
            })?;
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write_error(parent, &e))?;
        }
        std::fs::write(&target, &body).map_err(|e| write_error(&target, &e))?;
    }
    Ok((dir, delivery))
}

/// A stored name as a relative path that stays inside the download directory.
fn safe_relative(name: &str) -> Result<PathBuf, CliError> {
    let path = PathBuf::from(name);
    let inside = !name.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    if inside {
        Ok(path)
    } else {
        Err(CliError::Usage(format!(
            "{name:?} is not a delivery or file name: `trawl deliveries list` names them"
        )))
    }
}

fn write_error(path: &Path, e: &std::io::Error) -> CliError {
    CliError::Usage(format!(
        "cannot write {}: {e}; pass another --out directory",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::blob::memory::MemoryBlobStore;
    use trawl_core::blob::{Body, ObjectMeta};

    async fn put(blobs: &MemoryBlobStore, key: &str, body: &str) {
        let meta = ObjectMeta {
            content_type: "application/octet-stream".into(),
            source_url: String::new(),
            compress: false,
        };
        blobs
            .put(key, Body::new(body.to_owned()), &meta)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_newest_complete_delivery_is_fetched_whole_and_an_unfinished_one_skipped() {
        // GIVEN a crawl with a complete delivery (two files and a segment folder) and a newer,
        // unfinished one
        let blobs = MemoryBlobStore::new();
        let layout = Layout::new("p");
        let id = trawl_domain::canonical::CrawlId::parse("news").unwrap();
        let crawl = Crawl::new(id, Default::default(), 1_800_000_000_000);
        let base = run_prefix(&layout, &crawl);
        put(&blobs, &format!("{base}gen-000000/manifest.jsonl.gz"), "m").await;
        put(&blobs, &format!("{base}gen-000000/seg/part-1"), "w").await;
        put(&blobs, &format!("{base}gen-000000/{SUCCESS_FILE}"), "").await;
        put(&blobs, &format!("{base}gen-000001/manifest.jsonl.gz"), "x").await;
        let out = std::env::temp_dir().join(format!("trawl-deliveries-{}", std::process::id()));

        // WHEN they are listed and the default one fetched
        let listed = list(&blobs, &layout, &crawl).await.unwrap();
        let (dir, fetched) = get(&blobs, &layout, &crawl, None, &out).await.unwrap();

        // THEN both are listed, only the first complete, and it is the one fetched, file by file
        assert_eq!(
            listed
                .iter()
                .map(|d| (d.id.as_str(), d.complete()))
                .collect::<Vec<_>>(),
            [("gen-000000", true), ("gen-000001", false)]
        );
        assert_eq!(fetched.id, "gen-000000");
        assert_eq!(
            std::fs::read_to_string(dir.join("seg/part-1")).unwrap(),
            "w"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("manifest.jsonl.gz")).unwrap(),
            "m"
        );
        let missing = get(&blobs, &layout, &crawl, Some("../etc"), &out).await;
        assert!(matches!(missing, Err(CliError::Usage(_))));
        let _ = std::fs::remove_dir_all(out);
    }

    #[test]
    fn names_that_would_leave_the_download_directory_are_refused() {
        for bad in ["", "..", "../x", "/abs", "a/../../b"] {
            assert!(safe_relative(bad).is_err(), "{bad}");
        }
        assert!(safe_relative("gen-000001/seg/part-1").is_ok());
    }
}
