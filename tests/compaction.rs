//! Retention of deliveries and compaction of segments (`trawl_core::deliver::compact`), from
//! the CLI: a recrawled crawl whose changed pages leave garbage in its segments.

use crate::cli::{json_of, linked_site, temp_dir, trawl, warcio_check};
use crate::site::{Route, Site};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const PAGES: usize = 20;

fn page_path(i: usize) -> String {
    format!("/p/{i}.html")
}

/// Version `v` of page `i`: the links of `linked_site`, and text of its own (so that each
/// version is stored anew).
fn serve(site: &Site, pages: impl IntoIterator<Item = usize>, v: usize) {
    for i in pages {
        let links: String = [i + 1, i + 2, 0]
            .iter()
            .filter(|&&j| j < PAGES)
            .map(|j| format!(r#"<a href="/p/{j}.html">{j}</a> "#))
            .collect();
        let text: String = (0..150).map(|w| format!("w{}-{v} ", w * (i + 7))).collect();
        site.route(
            &page_path(i),
            Route::html(format!("<h1>page {i} v{v}</h1>{links}{text}")),
        );
    }
}

/// Runs trawl, asserting success; its JSON output.
async fn run(args: &[&str], dir: &Path) -> Value {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

/// The segment files under the data directory, with their sizes.
fn segments(data: &Path) -> BTreeMap<PathBuf, u64> {
    let mut found = BTreeMap::new();
    let mut pending = vec![data.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if dir.ends_with("segments") {
                found.insert(path, entry.metadata().unwrap().len());
            }
        }
    }
    found
}

/// The deliveries of the crawl's run with files, by id (a directory emptied by retention stays
/// behind on the data directory, as an emptied S3 prefix does not).
fn deliveries(data: &Path, crawl_id: &str) -> Vec<String> {
    let crawl = data.join(format!("deliveries/crawl={crawl_id}"));
    let mut ids = Vec::new();
    for run in std::fs::read_dir(crawl).unwrap() {
        for delivery in std::fs::read_dir(run.unwrap().path()).unwrap() {
            let delivery = delivery.unwrap();
            if std::fs::read_dir(delivery.path()).unwrap().next().is_some() {
                ids.push(delivery.file_name().to_string_lossy().into_owned());
            }
        }
    }
    ids.sort();
    ids
}

/// Reads every task's page where its fetch record points now, and checks it against its md5.
async fn assert_every_page_reads_back(site: &Site, data: &str, dir: &Path) {
    for i in 0..PAGES {
        let url = site.url(&page_path(i));
        let task = run(&["tasks", "show", &url, "--json", "--data-dir", data], dir).await;
        let (Some(object), Some(offset), Some(length)) = (
            task["object"].as_str(),
            task["offset"].as_u64(),
            task["length"].as_u64(),
        ) else {
            panic!("no place in a segment: {task}");
        };
        let mut file = std::fs::File::open(object).unwrap_or_else(|e| panic!("{object}: {e}"));
        file.seek(SeekFrom::Start(offset)).unwrap();
        let mut span = vec![0; usize::try_from(length).unwrap()];
        file.read_exact(&mut span).unwrap();
        let page = trawl_core::blob::segment::decode(object, &span)
            .unwrap_or_else(|e| panic!("{url} at {object}:{offset}: {e}"));
        let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(&page.body));
        assert_eq!(Some(md5.as_str()), task["md5"].as_str(), "{url}");
    }
}

fn upkeep(run: &Value) -> &Value {
    &run["upkeep"]
}

#[tokio::test]
async fn a_recrawled_crawl_keeping_one_delivery_frees_the_segments_its_changes_left() {
    // GIVEN a 20-page site crawled on segments with a daily recrawl, keeping the last
    // delivery only (compaction at its default threshold, 50%)
    let site = linked_site(PAGES).await;
    serve(&site, 0..PAGES, 1);
    let dir = temp_dir("compaction");
    let data_dir = dir.join("data");
    let data = data_dir.to_str().unwrap();
    let start = site.url(&page_path(0));
    let mut args = vec!["crawl", &start, "--allow-private-networks", "--json"];
    args.extend([
        "--crawl-id",
        "c",
        "--recrawl-every",
        "1d",
        "--layout",
        "segments",
    ]);
    args.extend(["--keep-deliveries", "1", "--data-dir", data]);
    let first = run(&args, &dir).await;
    // The segment the crawl appended to is still open in its process: left alone.
    let compaction = &upkeep(&first)["compaction"];
    assert_eq!(
        (&compaction["segments"], &compaction["rewritten"]),
        (&1.into(), &0.into()),
        "{first}"
    );
    let gen0 = segments(&data_dir);
    assert_eq!(gen0.len(), 1);
    let gen0_bytes: u64 = gen0.values().sum();

    // WHEN 15 of its pages change and the next generation runs
    serve(&site, 5..PAGES, 2);
    let second = run(&["recrawl", "--json", "--data-dir", data], &dir).await;

    // THEN the first delivery is removed, the second kept
    let up = upkeep(&second);
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000001"], "{up}");
    assert_eq!(
        up["retention"]["removed"],
        serde_json::json!(["gen-000000"])
    );
    // AND the first segment, a quarter live, is rewritten: its 5 live pages copied to the
    // second one, which the second delivery does not prevent; the first stays, held by the
    // second delivery, whose pages point into it
    let c = &up["compaction"];
    assert_eq!(c["rewritten"], 1, "{up}");
    assert_eq!(c["pages_moved"], 5, "{up}");
    assert_eq!(c["pages_refused"], 0, "{up}");
    assert_eq!(c["deleted"], 0, "{up}");
    let copied = c["bytes_copied"].as_u64().unwrap();
    assert_eq!(c["live_bytes"], copied, "{up}");
    assert!(
        copied * 2 < gen0_bytes && copied > 0,
        "{copied} of {gen0_bytes}"
    );
    // AND every page reads back where its task points, and the kept delivery's manifest
    // still opens each page where it was (warcio checks each record's URI and md5)
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(second["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let gen1 = segments(&data_dir);
    assert_eq!(gen1.len(), 2);
    assert!(gen1.contains_key(gen0.keys().next().unwrap()));

    // WHEN the same pages change again and a third generation runs
    serve(&site, 5..PAGES, 3);
    let third = run(&["recrawl", "--json", "--data-dir", data], &dir).await;

    // THEN the second delivery is removed, and with it the last pointer into the first
    // segment: that segment is deleted, its bytes freed
    let up = upkeep(&third);
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000002"], "{up}");
    let c = &up["compaction"];
    assert_eq!(c["deleted"], 1, "{up}");
    assert_eq!(c["bytes_freed"], gen0_bytes, "{up}");
    // AND the second segment (its 15 pages changed since, its 5 copies live) is rewritten
    assert_eq!(c["rewritten"], 1, "{up}");
    assert_eq!(c["pages_moved"], 5, "{up}");
    // AND the disk holds what the pass found, plus its copies, less what it freed
    let gen2 = segments(&data_dir);
    let on_disk: u64 = gen2.values().sum();
    let expected = c["bytes"].as_u64().unwrap() + c["bytes_copied"].as_u64().unwrap()
        - c["bytes_freed"].as_u64().unwrap();
    assert_eq!(on_disk, expected, "{up}");
    assert!(!gen2.contains_key(gen0.keys().next().unwrap()));
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(third["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);

    // WHEN a fourth generation finds nothing changed
    let fourth = run(&["recrawl", "--json", "--data-dir", data], &dir).await;

    // THEN the second segment goes too: what is left is the live pages, and the garbage of
    // the last segment only
    let c = &upkeep(&fourth)["compaction"];
    assert_eq!(c["deleted"], 1, "{fourth}");
    let gen3 = segments(&data_dir);
    let on_disk: u64 = gen3.values().sum();
    eprintln!(
        "segment bytes on disk: gen 0 {gen0_bytes}, gen 1 {}, gen 2 {}, gen 3 {on_disk}; live {}",
        gen1.values().sum::<u64>(),
        gen2.values().sum::<u64>(),
        c["live_bytes"]
    );
    assert_eq!(gen3.len(), 1, "{gen3:?}");
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(fourth["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_compaction_stopped_by_its_budget_goes_on_at_the_next_pass() {
    // GIVEN a crawl whose three generations kept every delivery: half of the first
    // segment's pages changed in the second, half of the second's in the third
    let site = linked_site(PAGES).await;
    serve(&site, 0..PAGES, 1);
    let dir = temp_dir("compaction-budget");
    let data_dir = dir.join("data");
    let data = data_dir.to_str().unwrap();
    let start = site.url(&page_path(0));
    let mut args = vec!["crawl", &start, "--allow-private-networks", "--json"];
    args.extend([
        "--crawl-id",
        "c",
        "--recrawl-every",
        "1d",
        "--layout",
        "segments",
    ]);
    args.extend(["--data-dir", data]);
    let first = run(&args, &dir).await;
    assert!(first.get("upkeep").is_none_or(Value::is_null), "{first}");
    serve(&site, 0..10, 2);
    run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    serve(&site, 0..5, 3);
    let third = run(&["recrawl", "--json", "--data-dir", data], &dir).await;
    let before = segments(&data_dir);
    assert_eq!(before.len(), 3);

    // WHEN it is set to keep one delivery and rewrite segments below 60% live, and a pass
    // may copy 1 byte
    let shown = run(&["config", "show", "--json", "--data-dir", data], &dir).await;
    let mut config = shown.get("config").cloned().unwrap_or(shown);
    config["delivery"]["keep_generations"] = 1.into();
    config["storage"]["compact_below_percent"] = 60.into();
    let file = dir.join("config.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let mut set = vec!["config", "set", "--file", file, "--json"];
    set.extend(["--data-dir", data]);
    run(&set, &dir).await;
    let compact = ["compact", "--max-bytes", "1", "--json", "--data-dir", data];
    let pass = run(&compact, &dir).await;

    // THEN the two older deliveries go, and one of the two half-live segments is rewritten:
    // the pass says it stopped short
    let up = &pass["upkeep"];
    assert_eq!(deliveries(&data_dir, "c"), ["gen-000002"], "{up}");
    let c = &up["compaction"];
    assert_eq!(
        (&c["rewritten"], &c["complete"]),
        (&1.into(), &false.into()),
        "{up}"
    );
    let moved_first = c["pages_moved"].as_u64();
    assert_every_page_reads_back(&site, data, &dir).await;

    // WHEN the pass runs again
    let pass = run(&compact, &dir).await;

    // THEN it rewrites the other one and is done; both stay while the kept delivery points
    // into them, and every page, and every line of that delivery, still reads back
    let c = &pass["upkeep"]["compaction"];
    assert_eq!(
        (&c["rewritten"], &c["complete"]),
        (&1.into(), &true.into()),
        "{pass}"
    );
    let mut moved = [moved_first, c["pages_moved"].as_u64()];
    moved.sort();
    assert_eq!(moved, [Some(5), Some(10)], "{pass}");
    assert_eq!(c["held"], 1, "{pass}");
    assert_every_page_reads_back(&site, data, &dir).await;
    let delivered = Path::new(third["delivery"].as_str().unwrap()).to_path_buf();
    assert_eq!(warcio_check(&delivered).await["manifest_offsets"], PAGES);
    let _ = std::fs::remove_dir_all(dir);
}
