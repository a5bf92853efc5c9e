use super::super::cut::{CutStore, Cuts};
use super::super::{DeliveryLimits, deliver_items};
use super::*;
use crate::blob::memory::MemoryBlobStore;
use crate::blob::{Body, ObjectMeta};
use flate2::read::MultiGzDecoder;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use trawl_domain::crawl::Crawl;

#[test]
fn csv_rows_quote_what_rfc_4180_asks_and_write_values_plainly() {
    let columns = CsvColumns {
        fields: ["title", "price", "tags", "key"].map(str::to_owned).into(),
    };
    let line = ItemLine {
        key: "http://a.test/1".into(),
        extractor: "x".into(),
        page_url: "http://a.test/list".into(),
        task_id: "t".into(),
        fetched_at: "2026-11-24T00:00:00Z".into(),
        fields: BTreeMap::from([
            (
                "title".to_owned(),
                serde_json::json!("Say \"hi\", then\nleave"),
            ),
            ("price".to_owned(), serde_json::json!(12.5)),
            ("tags".to_owned(), serde_json::Value::Null),
            ("key".to_owned(), serde_json::json!("k")),
        ]),
        detail: None,
        valid: false,
        errors: vec![FieldError {
            field: "tags".into(),
            error: "required: no value".into(),
        }],
        images: BTreeMap::new(),
    };
    let header = String::from_utf8(columns.header().unwrap()).unwrap();
    assert_eq!(
        header,
        "key,extractor,page_url,task_id,fetched_at,valid,title,price,tags,fields.key,errors\r\n"
    );
    let row = String::from_utf8(columns.row(&line).unwrap()).unwrap();
    assert_eq!(
        row,
        "http://a.test/1,x,http://a.test/list,t,2026-11-24T00:00:00Z,false,\
         \"Say \"\"hi\"\", then\nleave\",12.5,,k,tags: required: no value\r\n"
    );
}

#[test]
fn a_delta_line_made_from_the_items_line_is_the_one_serde_writes() {
    let line: ItemLine = serde_json::from_value(json!({
        "key": "http://a.test/\"q\"\u{e9}#0", "extractor": "x", "page_url": "http://a.test/",
        "task_id": "t", "fetched_at": "2026-11-28T00:00:00Z",
        "fields": {"name": "a\tb</p>", "n": 1.5, "none": null}, "valid": false,
        "errors": [{"field": "n", "error": "bad"}]
    }))
    .unwrap();
    let removed = vec![ImageRef::not_fetched("http://a.test/1.png")];
    for (change, removed_images) in [(Change::New, vec![]), (Change::Changed, removed)] {
        let spliced = delta_item_line(
            change,
            &line.key,
            &json_line(&line).unwrap(),
            &removed_images,
        )
        .unwrap();
        let whole = ItemDeltaLine {
            change,
            key: line.key.clone(),
            item: Some(line.clone()),
            reason: None,
            removed_images,
        };
        assert_eq!(
            String::from_utf8(spliced).unwrap(),
            String::from_utf8(json_line(&whole).unwrap()).unwrap()
        );
    }
}

#[test]
fn items_keyed_by_fields_are_keyed_once_and_a_missing_or_repeated_key_is_invalid() {
    let line = |sku: serde_json::Value| ItemLine {
        key: "http://a.test/list#0".into(),
        extractor: "shop".into(),
        page_url: "http://a.test/list".into(),
        task_id: "t".into(),
        fetched_at: String::new(),
        fields: BTreeMap::from([("sku".to_owned(), sku)]),
        detail: None,
        valid: true,
        errors: Vec::new(),
        images: BTreeMap::new(),
    };
    let key = ["sku".to_owned()];
    let mut keyed = std::collections::HashMap::new();
    let mut lines = [
        line(serde_json::json!("S1")),
        line(serde_json::json!("S2")),
        line(serde_json::Value::Null),
        line(serde_json::json!("S1")),
    ];
    // As the pass keys them: by field key, each key's items in manifest order.
    for l in &mut lines {
        if let Some(k) = field_key(l, &key) {
            let seen = keyed.entry(k.clone()).or_insert(0);
            *seen += 1;
            rank(l, &k, *seen);
        }
    }
    let keys: Vec<(&str, bool)> = lines.iter().map(|l| (l.key.as_str(), l.valid)).collect();
    assert_eq!(
        keys,
        [
            (r#"shop:["S1"]"#, true),
            (r#"shop:["S2"]"#, true),
            ("http://a.test/list#0", false),
            (r#"shop:["S1"]#2"#, false),
        ]
    );
    assert_eq!(lines[2].errors[0].field, "sku");
    assert_eq!(lines[3].errors[0].field, "key");
}

// The streaming pass against the pass as it was before (every item in memory): `reference`.

/// A listing whose items link to detail pages, the detail pages, items keyed by a field, and
/// plain ones.
fn crawl() -> Crawl {
    let config: CrawlConfig = serde_json::from_value(json!({
        "items": {"csv": true},
        "extract": [
            {"name": "listing", "match": "/list/", "base": {"css": "li"},
             "fields": {"title": {"css": "a"}, "url": {"xpath": ".//a/@href"}},
             "detail": {"url_field": "url", "extractor": "product"}},
            {"name": "product", "match": "/p/",
             "fields": {"price": {"css": "span"}, "title": {"css": "h1"}}},
            {"name": "shop", "match": "/shop/", "base": {"css": "li"},
             "fields": {"sku": {"css": "b"}, "name": {"css": "i"}}, "key": ["sku"]},
            {"name": "news", "match": "/news/", "base": {"css": "li"},
             "fields": {"headline": {"css": "h2"}}}
        ]
    }))
    .unwrap();
    Crawl::new(CrawlId::parse("shop").unwrap(), config, 0)
}

fn url(path: &str) -> String {
    CanonicalUrl::parse(&format!("http://a.test/{path}"))
        .unwrap()
        .as_str()
        .to_owned()
}

/// A page of a generation: its manifest line, and the items stored beside it (None: none).
struct Page {
    line: ManifestLine,
    items: Option<PageItems>,
}

fn page(path: &str, status: &str, generation: u64) -> ManifestLine {
    let url = url(path);
    ManifestLine {
        task_id: CanonicalUrl::parse(&url).unwrap().task_id().to_string(),
        md5: Some(format!("{generation:016x}{:016x}", url.len())),
        url,
        final_url: None,
        status: status.to_owned(),
        http_status: Some(200),
        content_type: Some("text/html".to_owned()),
        object: None,
        offset: None,
        length: None,
        items_length: None,
        bytes: Some(1),
        title: None,
        description: None,
        language: None,
        text: None,
        text_cut: false,
        text_error: None,
        fetched_at: Some(format!("2027-01-1{generation}T08:00:00Z")),
        first_fetched_at: None,
        depth: 1,
        retries: 0,
        last_error: None,
        data: None,
    }
}

fn pick(rng: &mut fastrand::Rng, values: &[Value]) -> Value {
    values[rng.usize(..values.len())].clone()
}

fn item(fields: Vec<(&str, Value)>, invalid: bool) -> Item {
    Item {
        fields: fields
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
        errors: if invalid {
            vec![FieldError {
                field: "title".into(),
                error: "required: no value".into(),
            }]
        } else {
            Vec::new()
        },
    }
}

/// Generation `generation` of the crawl, drawn from `seed`, in manifest order: detail pages
/// present (with items, with none), gone or never fetched, some redirected to another's URL;
/// listing items linking to them (always to the first three, in both), to none or to a URL
/// that does not read; shop items whose
/// `sku` repeats or is missing; news items; a page that is no longer HTML; invalid items.
fn generation(seed: u64, generation: u64, version: &str) -> Vec<Page> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut pages = Vec::new();
    let items = |extractor: &str, items: Vec<Item>| PageItems {
        extractor: extractor.to_owned(),
        items,
        version: Some(version.to_owned()),
    };
    for k in 0..30 {
        let path = format!("p/{k}");
        // The first three are there in the first generation, gone in the second.
        let kind = match (k, generation) {
            (0..3, 0) => 9,
            (0..3, _) => 0,
            _ => rng.u8(..10),
        };
        match kind {
            0 | 1 => pages.push(Page {
                line: page(&path, "gone", generation),
                items: None,
            }),
            2 => {}
            kind => {
                let mut line = page(&path, "succeeded", generation);
                if rng.u8(..6) == 0 {
                    line.final_url = Some(url(&format!("p/{}", rng.u8(..30))));
                }
                let found = (0..u8::from(kind != 3) + rng.u8(..2))
                    .map(|_| {
                        let price = pick(&mut rng, &[json!(1), json!(2), Value::Null]);
                        let title = pick(&mut rng, &[json!("P"), json!("Q"), Value::Null]);
                        item(vec![("price", price), ("title", title)], rng.u8(..8) == 0)
                    })
                    .collect();
                pages.push(Page {
                    line,
                    items: Some(items("product", found)),
                });
            }
        }
    }
    for l in 0..10 {
        let mut links: Vec<u8> = (0..rng.u8(..7)).map(|_| rng.u8(..32)).collect();
        links.extend((l < 3).then_some(l));
        let found = links
            .into_iter()
            .map(|p| {
                let link = match rng.u8(..10) {
                    0 => Value::Null,
                    1 => json!("not a url"),
                    _ => json!(url(&format!("p/{p}"))),
                };
                let title = pick(&mut rng, &[json!("a"), json!("b"), Value::Null]);
                item(vec![("url", link), ("title", title)], rng.u8(..10) == 0)
            })
            .collect();
        pages.push(Page {
            line: page(&format!("list/{l}"), "succeeded", generation),
            items: Some(items("listing", found)),
        });
    }
    for s in 0..5 {
        let found = (0..rng.u8(..6))
            .map(|_| {
                let sku = pick(
                    &mut rng,
                    &[
                        json!("S1"),
                        json!("S2"),
                        json!("S3"),
                        json!("S4"),
                        Value::Null,
                    ],
                );
                let name = pick(&mut rng, &[json!("n"), json!("m")]);
                item(vec![("sku", sku), ("name", name)], false)
            })
            .collect();
        pages.push(Page {
            line: page(&format!("shop/{s}"), "succeeded", generation),
            items: Some(items("shop", found)),
        });
    }
    for n in 0..4 {
        let found = (0..rng.u8(..4))
            .map(|_| {
                item(
                    vec![("headline", pick(&mut rng, &[json!("h"), json!("i")]))],
                    false,
                )
            })
            .collect();
        pages.push(Page {
            line: page(&format!("news/{n}"), "succeeded", generation),
            items: Some(items("news", found)),
        });
    }
    let mut pdf = page("list/pdf", "succeeded", generation);
    pdf.content_type = Some("application/pdf".into());
    pages.push(Page {
        line: pdf,
        items: None,
    });
    rng.shuffle(&mut pages);
    pages
}

/// Stores the pages' items beside their bodies and their manifest in segments of 7 lines
/// under `prefix`: the segments' keys.
async fn store(blobs: &MemoryBlobStore, prefix: &str, pages: &[Page]) -> Vec<String> {
    let crawl = crawl();
    let layout = Layout::new("");
    let meta = ObjectMeta {
        content_type: "application/json".into(),
        source_url: String::new(),
        compress: false,
    };
    let mut keys = Vec::new();
    for (n, chunk) in pages.chunks(7).enumerate() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for page in chunk {
            gz.write_all(&json_line(&page.line).unwrap()).unwrap();
            if let (Some(items), Some(md5)) = (&page.items, &page.line.md5) {
                let task = TaskId::parse(&page.line.task_id).unwrap();
                let key = Layout::items_key_of(&layout.html_key(&crawl.id, &task, md5));
                let body = Body::new(serde_json::to_vec(items).unwrap());
                blobs.put(&key, body, &meta).await.unwrap();
            }
        }
        let key = format!("{prefix}{}", FileKind::Manifest.name(n as u32));
        let body = Body::new(gz.finish().unwrap());
        blobs.put(&key, body, &meta).await.unwrap();
        keys.push(key);
    }
    keys
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    MultiGzDecoder::new(bytes)
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// A delivery's items files, by name, as text.
async fn texts<B: BlobStore>(blobs: &B, prefix: &str, files: &[IndexedFile]) -> Vec<String> {
    let mut out = Vec::new();
    for file in files {
        let bytes = blobs.get(&format!("{prefix}{}", file.name)).await.unwrap();
        out.push(gunzip(&bytes.unwrap()));
    }
    out
}

type Delivered = (Vec<IndexedFile>, ItemsSummary, ItemsStats);

/// The items pass of `manifests` under `prefix` with `entries` a sorter, after `previous`.
async fn pass<B: BlobStore>(
    blobs: &B,
    manifests: &[String],
    prefix: &str,
    previous: Option<&Delivered>,
    previous_prefix: &str,
    entries: u64,
) -> Result<Delivered, DeliverError> {
    let limits = DeliveryLimits {
        items_entries: entries,
        ..DeliveryLimits::DEFAULT
    };
    let previous = previous.map(|(files, ..)| PreviousItems {
        delivery_id: "gen-000000".to_owned(),
        key: format!("{previous_prefix}{ITEMS_FILE}"),
        bytes: files[0].bytes,
    });
    let layout = Layout::new("");
    deliver_items(
        blobs,
        &layout,
        "",
        &crawl(),
        manifests,
        previous.as_ref(),
        prefix,
        &limits,
    )
    .await
}

/// The pass as it was before it streamed: every page's items in memory, joined through a map
/// of the detail pages, keyed through a map of the keys, compared through a map of the
/// previous items. Its items, their delta and counts.
fn reference(
    pages: &[Page],
    previous: &[ItemLine],
) -> (Vec<ItemLine>, Vec<ItemDeltaLine>, ItemsSummary) {
    let crawl = crawl();
    let extractors = Extractors::new(&crawl.config.extract).unwrap();
    let scope = ScopeMatcher::new(&crawl.config.scope).unwrap();
    let found: Vec<(&ManifestLine, &PageItems)> = pages
        .iter()
        .filter(|p| {
            p.line.status == "succeeded" && p.line.content_type.as_deref() == Some("text/html")
        })
        .filter_map(|p| Some((&p.line, p.items.as_ref()?)))
        .collect();
    let gone: HashSet<String> = pages
        .iter()
        .filter(|p| p.line.status == "gone")
        .flat_map(|p| p.line.final_url.iter().chain([&p.line.url]).cloned())
        .collect();
    let detail_names: HashSet<&str> = extractors.detail_extractors().collect();
    let is_detail = |items: &PageItems| detail_names.contains(items.extractor.as_str());
    let mut details: HashMap<String, usize> = HashMap::new();
    for (i, (page, items)) in found.iter().enumerate() {
        if is_detail(items) {
            details.insert(page.url.clone(), i);
            if let Some(final_url) = &page.final_url {
                details.insert(final_url.clone(), i);
            }
        }
    }
    let mut summary = ItemsSummary::default();
    let mut linked = HashSet::new();
    let mut out = Vec::new();
    let mut left_out = HashSet::new();
    let mut keyed: HashMap<String, usize> = HashMap::new();
    for (page, items) in &found {
        if is_detail(items) {
            continue;
        }
        let def = extractors.named(&items.extractor).map(|e| &e.def).unwrap();
        for (position, item) in items.items.iter().enumerate() {
            let mut line = item_line(page, &items.extractor, item.clone());
            line.key = format!("{}#{position}", page.url);
            if let Some(link) = &def.detail {
                let url = item
                    .fields
                    .get(&link.url_field)
                    .and_then(|v| v.as_str())
                    .and_then(|u| CanonicalUrl::parse(u).ok())
                    .map(|u| scope.normalise(u).as_str().to_owned());
                let detail = url.as_ref().and_then(|u| details.get(u).copied());
                if let Some(url) = &url {
                    line.key = url.clone();
                }
                match (detail, url) {
                    (Some(i), _) => {
                        linked.insert(i);
                        let (page, items) = found[i];
                        let detail = Detail {
                            page: DetailPage {
                                url: page.url.clone(),
                                task_id: page.task_id.clone(),
                                fetched_at: page.fetched_at.clone().unwrap_or_default(),
                            },
                            extractor: items.extractor.clone(),
                            first: items.items.first().cloned(),
                        };
                        merge(&mut line, &detail);
                    }
                    (None, Some(url)) if gone.contains(&url) => {
                        summary.detail_pages_gone += 1;
                        match rules::item_key(&items.extractor, &def.key, &line.fields) {
                            Ok(key) if !def.key.is_empty() => left_out.insert(key),
                            _ => left_out.insert(line.key),
                        };
                        continue;
                    }
                    _ => unlinked(&mut line, &link.url_field),
                }
            }
            if !def.key.is_empty()
                && let Some(key) = field_key(&mut line, &def.key)
            {
                let seen = keyed.entry(key.clone()).or_default();
                *seen += 1;
                rank(&mut line, &key, *seen);
            }
            count(&mut summary, &line);
            out.push(line);
        }
    }
    summary.detail_pages_unlinked = found
        .iter()
        .enumerate()
        .filter(|(i, (_, items))| is_detail(items) && !linked.contains(i))
        .count() as u64;
    let mut before: HashMap<String, ItemLine> = previous
        .iter()
        .map(|line| (line.key.clone(), line.clone()))
        .collect();
    let mut delta = Vec::new();
    for item in &out {
        let change = match before.remove(&item.key) {
            None => Change::New,
            Some(old) if old.fields != item.fields || old.errors != item.errors => Change::Changed,
            Some(_) => {
                summary.delta.unchanged += 1;
                continue;
            }
        };
        match change {
            Change::New => summary.delta.new += 1,
            _ => summary.delta.changed += 1,
        }
        delta.push(ItemDeltaLine {
            change,
            key: item.key.clone(),
            item: Some(item.clone()),
            reason: None,
            removed_images: Vec::new(),
        });
    }
    let mut gone_keys: Vec<String> = before.into_keys().collect();
    gone_keys.sort();
    summary.delta.gone = gone_keys.len() as u64;
    delta.extend(gone_keys.into_iter().map(|key| {
        ItemDeltaLine {
            change: Change::Gone,
            reason: Some(
                if left_out.contains(&key) {
                    GONE_DETAIL
                } else {
                    GONE_UNSEEN
                }
                .to_owned(),
            ),
            key,
            item: None,
            removed_images: Vec::new(),
        }
    }));
    (out, delta, summary)
}

fn text_of<T: Serialize>(lines: &[T]) -> String {
    lines
        .iter()
        .map(|l| String::from_utf8(json_line(l).unwrap()).unwrap())
        .collect()
}

fn csv_of(lines: &[ItemLine]) -> String {
    let columns = CsvColumns::new(&Extractors::new(&crawl().config.extract).unwrap());
    let mut out = columns.header().unwrap();
    for line in lines {
        out.extend(columns.row(line).unwrap());
    }
    String::from_utf8(out).unwrap()
}

/// Two generations stored, and what the pass before streaming made of them.
struct Generations {
    blobs: MemoryBlobStore,
    manifests: [Vec<String>; 2],
    expected: [(String, String, String, ItemsSummary); 2],
}

async fn generations() -> Generations {
    let version = Extractors::new(&crawl().config.extract)
        .unwrap()
        .version()
        .to_owned();
    let pages = [generation(31, 0, &version), generation(32, 1, &version)];
    let blobs = MemoryBlobStore::new();
    let manifests = [
        store(&blobs, "m-0/", &pages[0]).await,
        store(&blobs, "m-1/", &pages[1]).await,
    ];
    let (items_0, delta_0, summary_0) = reference(&pages[0], &[]);
    let (items_1, delta_1, summary_1) = reference(&pages[1], &items_0);
    let expected = [
        (
            text_of(&items_0),
            text_of(&delta_0),
            csv_of(&items_0),
            summary_0,
        ),
        (
            text_of(&items_1),
            text_of(&delta_1),
            csv_of(&items_1),
            summary_1,
        ),
    ];
    Generations {
        blobs,
        manifests,
        expected,
    }
}

/// The join's and the delta's counts of a summary (the pages' counts, and the delivery
/// compared with, aside).
fn join_counts(summary: &ItemsSummary) -> ItemsSummary {
    let mut delta = summary.delta.clone();
    delta.previous = None;
    ItemsSummary {
        delta,
        pages_without_items: 0,
        pages_current: 0,
        pages_older: 0,
        extractors_version: String::new(),
        from_current_extractors: false,
        ..summary.clone()
    }
}

#[tokio::test]
async fn a_bound_of_three_entries_spills_many_runs_and_writes_the_files_of_the_pass_in_memory_byte_for_byte()
 {
    // GIVEN two generations: listing items linked to detail pages (present, without items,
    // gone, never fetched, redirected), items keyed by a field (repeated, missing), plain
    // ones, invalid ones; items changed, new and gone between them
    let g = generations().await;
    let (_, delta, _, summary) = &g.expected[1];
    let d = &summary.delta;
    assert!(
        [d.new, d.changed, d.unchanged, d.gone]
            .iter()
            .all(|&n| n > 0),
        "{d:?}"
    );
    assert!(
        delta.contains(GONE_DETAIL) && delta.contains(GONE_UNSEEN),
        "{delta}"
    );
    for (items, _, _, summary) in &g.expected {
        assert!(
            summary.invalid > 0 && summary.detail_pages_unlinked > 0,
            "{summary:?}"
        );
        assert!(summary.detail_pages_gone > 0, "{summary:?}");
        assert!(items.contains("\"detail\":") && items.contains(r#"shop:[\"S1\"]#2"#));
    }

    // WHEN both are delivered holding 3 entries a sorter, and holding them all
    let mut delivered: Vec<Vec<Delivered>> = Vec::new();
    for entries in [3, u64::MAX] {
        let first = format!("{entries}/gen-0/");
        let second = format!("{entries}/gen-1/");
        let gen_0 = pass(&g.blobs, &g.manifests[0], &first, None, "", entries)
            .await
            .unwrap();
        let gen_1 = pass(
            &g.blobs,
            &g.manifests[1],
            &second,
            Some(&gen_0),
            &first,
            entries,
        )
        .await
        .unwrap();

        // THEN each generation's files are those of the pass before streaming, line for line,
        // and so are its counts and invalid examples
        for ((prefix, (files, summary, _)), expected) in [(&first, &gen_0), (&second, &gen_1)]
            .into_iter()
            .zip(&g.expected)
        {
            let (items, delta, csv, counts) = expected;
            let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names, [ITEMS_FILE, ITEMS_DELTA_FILE, ITEMS_CSV_FILE]);
            let got = texts(&g.blobs, prefix, files).await;
            assert_eq!(&got[0], items);
            assert_eq!(&got[1], delta);
            assert_eq!(&got[2], csv);
            assert_eq!(join_counts(summary), join_counts(counts));
            assert_eq!(files[0].records, counts.items);
        }
        // AND no run is left behind
        let runs = format!("{entries}/");
        let left: Vec<String> = g.blobs.list(&runs).await.unwrap();
        assert!(!left.iter().any(|k| k.contains("_sort-")), "{left:?}");
        delivered.push(vec![gen_0, gen_1]);
    }

    // AND the two bounds wrote the same files byte for byte (the same md5s), the small one
    // through many runs
    let [small, whole] = &delivered[..] else {
        unreachable!()
    };
    for (small, whole) in small.iter().zip(whole) {
        assert_eq!(small.0, whole.0);
        assert_eq!(small.1, whole.1);
    }
    assert!(small[1].2.runs > 50, "{:?}", small[1].2);
    // (the whole bound spills none: its sorters are merged from memory)
    assert_eq!(whole[1].2.runs, 0, "{:?}", whole[1].2);
}

#[tokio::test]
async fn an_items_pass_cut_at_any_upload_is_done_again_from_the_start_to_the_same_files() {
    // GIVEN the second generation's items written in one go, 3 entries a sorter
    let g = generations().await;
    let whole = {
        let gen_0 = pass(&g.blobs, &g.manifests[0], "a/gen-0/", None, "", 3)
            .await
            .unwrap();
        pass(
            &g.blobs,
            &g.manifests[1],
            "a/gen-1/",
            Some(&gen_0),
            "a/gen-0/",
            3,
        )
        .await
        .unwrap()
    };
    let whole_texts = texts(&g.blobs, "a/gen-1/", &whole.0).await;

    // WHEN it is written again, cut at its first upload, then its 2nd … (a run or a file
    // failing: the call fails, and the delivery's next call does the pass again)
    let cut_store = |cut| CutStore {
        inner: g.blobs.clone(),
        reads: Cuts::default(),
        uploads: Cuts::new("b/gen-1/", cut, cut + 1),
    };
    let uploads = whole.2.runs as u32 + 3;
    let gen_0 = pass(&g.blobs, &g.manifests[0], "b/gen-0/", None, "", 3)
        .await
        .unwrap();
    for cut in (0..uploads).step_by(7).chain([uploads - 1]) {
        let store = cut_store(cut);
        let cut_pass = pass(
            &store,
            &g.manifests[1],
            "b/gen-1/",
            Some(&gen_0),
            "b/gen-0/",
            3,
        )
        .await;
        assert!(cut_pass.is_err(), "cut at upload {cut}");

        // THEN the pass done again writes the same files, and leaves no run behind
        let again = pass(
            &store,
            &g.manifests[1],
            "b/gen-1/",
            Some(&gen_0),
            "b/gen-0/",
            3,
        )
        .await
        .unwrap();
        assert_eq!(
            (&again.0, &again.1),
            (&whole.0, &whole.1),
            "cut at upload {cut}"
        );
        assert_eq!(texts(&g.blobs, "b/gen-1/", &again.0).await, whole_texts);
        let left = g.blobs.list("b/gen-1/_sort-").await.unwrap();
        assert!(left.is_empty(), "cut at upload {cut}: {left:?}");
    }
}

/// Products naming their photo by an image field (the same crawl id as `crawl`'s, so that
/// `store` puts their items where the pass reads them).
fn photo_crawl() -> Crawl {
    let config: CrawlConfig = serde_json::from_value(json!({
        "extract": [{"name": "product", "match": "/p/",
                     "fields": {"photo": {"css": "img", "value": "attr(src)", "image": true}}}]
    }))
    .unwrap();
    Crawl::new(CrawlId::parse("shop").unwrap(), config, 0)
}

/// A product page of `generation` naming the photo at `photo`, or gone (None).
fn product(path: &str, photo: Option<&str>, generation: u64) -> Page {
    let Some(photo) = photo else {
        return Page {
            line: page(path, "gone", generation),
            items: None,
        };
    };
    Page {
        line: page(path, "succeeded", generation),
        items: Some(PageItems {
            extractor: "product".to_owned(),
            items: vec![item(vec![("photo", json!(url(photo)))], false)],
            version: None,
        }),
    }
}

/// The stored image task at `path`.
fn photo(path: &str) -> Page {
    let mut line = page(path, "succeeded", 0);
    line.content_type = Some("image/png".to_owned());
    line.data = Some(trawl_domain::image::image_data(None));
    Page { line, items: None }
}

#[tokio::test]
async fn an_image_no_item_names_any_more_is_found_to_retire_and_one_another_item_names_is_kept() {
    // GIVEN three products, two naming one shared photo, the third its own
    let blobs = MemoryBlobStore::default();
    let crawl = photo_crawl();
    let limits = DeliveryLimits {
        items_entries: 2,
        ..DeliveryLimits::DEFAULT
    };
    let layout = Layout::new("");
    let images = || [photo("img/shared.png"), photo("img/own.png")];
    let mut first = vec![
        product("p/1", Some("img/shared.png"), 0),
        product("p/2", Some("img/shared.png"), 0),
        product("p/3", Some("img/own.png"), 0),
    ];
    first.extend(images());
    let manifests = store(&blobs, "d0/", &first).await;
    let (files, ..) = deliver_items(
        &blobs, &layout, "", &crawl, &manifests, None, "d0/", &limits,
    )
    .await
    .unwrap();

    // WHEN the first and the third are gone at the next delivery
    let mut second = vec![
        product("p/1", None, 1),
        product("p/2", Some("img/shared.png"), 1),
        product("p/3", None, 1),
    ];
    second.extend(images());
    let manifests = store(&blobs, "d1/", &second).await;
    let previous = PreviousItems {
        delivery_id: "gen-000000".to_owned(),
        key: format!("d0/{ITEMS_FILE}"),
        bytes: files[0].bytes,
    };
    let (_, summary, stats) = deliver_items(
        &blobs,
        &layout,
        "",
        &crawl,
        &manifests,
        Some(&previous),
        "d1/",
        &limits,
    )
    .await
    .unwrap();

    // THEN both list their photo as removed, and only the photo no item names is to retire
    assert_eq!(summary.delta.gone, 2);
    assert_eq!(summary.delta.images_removed, 2);
    assert_eq!(stats.unnamed_images, [url("img/own.png")]);
}
