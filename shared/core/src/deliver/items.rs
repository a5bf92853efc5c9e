//! A delivery's items (for a crawl with extractors): `items.jsonl.gz`, one line per item with
//! the page it came from, and `items-delta.jsonl.gz`, the items new, changed or gone since the
//! run's previous delivery; `items.csv.gz` too when the crawl asks for it (`items.csv`).
//!
//! The items are read from the `attr=items` objects the crawler stored beside the HTML bodies
//! of this delivery's manifest, or from the page's records in a segment (no page is parsed
//! again; a body whose type is no longer HTML has none); `crate::reextract` renews them. Each
//! page's items carry the version of the extractor definitions that made them, and the summary
//! says whether all came from the crawl's current ones. A listing item whose extractor names a
//! detail page (`detail.url_field`) gets the fields of the first item found on that page
//! merged in (fields the listing has no value for), and is keyed by the detail page's URL;
//! detail pages' items are never delivered on their own. Other items are keyed by their page's
//! URL and position (`URL#3`). An item with errors is delivered with them, marked invalid and
//! counted per extractor in `summary.json` with examples.
//!
//! The join and the delta hold the generation's items in memory (each a few hundred bytes),
//! unlike the segmented manifest and WARC: the items pass is written in one go after the delta.

use super::delta::{is_present, lines};
use super::summary::{InvalidItem, ItemsDelta, ItemsSummary};
use super::{Change, DeliverError, ManifestLine};
use crate::blob::{BlobStore, Layout, segment};
use crate::discover::{ScopeMatcher, is_html_type};
use crate::extract::{Extractors, FieldError, Item, PageItems};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::extract::{self as rules, ListedItem};
use trawl_domain::task::Status;

/// The file of the items, and of their delta.
pub const ITEMS_FILE: &str = "items.jsonl.gz";
pub const ITEMS_DELTA_FILE: &str = "items-delta.jsonl.gz";
/// The items as CSV, when the crawl asks for it (`items.csv`).
pub const ITEMS_CSV_FILE: &str = "items.csv.gz";
/// The columns of `items.csv.gz` before the fields, and after them.
const CSV_LEADING: [&str; 6] = [
    "key",
    "extractor",
    "page_url",
    "task_id",
    "fetched_at",
    "valid",
];
const CSV_TRAILING: &str = "errors";
/// Invalid items named per extractor in the summary (all are counted).
const INVALID_EXAMPLES: usize = 10;

/// One line of `items.jsonl.gz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemLine {
    /// The item's identity across generations: its detail page's URL, or `page URL#position`.
    pub key: String,
    pub extractor: String,
    /// The page the item was found on, its task and its fetch time (RFC 3339).
    pub page_url: String,
    pub task_id: String,
    pub fetched_at: String,
    pub fields: BTreeMap<String, serde_json::Value>,
    /// The detail page whose fields were merged in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<DetailPage>,
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DetailPage {
    pub url: String,
    pub task_id: String,
    pub fetched_at: String,
}

/// One line of `items-delta.jsonl.gz`: the item as it is now (None when gone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemDeltaLine {
    pub change: Change,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<ItemLine>,
    /// Why an item is gone: `detail page gone`, or `not found` (no page of the delivery has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why an item of the previous delivery is gone.
const GONE_DETAIL: &str = "detail page gone";
const GONE_UNSEEN: &str = "not found";

/// A page's items, with where they came from.
struct Found {
    page: ManifestLine,
    items: PageItems,
}

/// The items pass: fed one manifest segment at a time, then joined.
pub(super) struct ItemsPass<'a, B> {
    blobs: &'a B,
    layout: &'a Layout,
    /// What the manifest's object URIs start with (`object_uri`): a segment's key follows.
    uri_base: String,
    crawl_id: &'a CrawlId,
    extractors: Extractors,
    scope: ScopeMatcher,
    found: Vec<Found>,
    /// The URLs (task's and final) of the pages `gone` in this delivery.
    gone: HashSet<String>,
    summary: ItemsSummary,
}

impl<'a, B: BlobStore> ItemsPass<'a, B> {
    pub fn new(
        blobs: &'a B,
        layout: &'a Layout,
        uri_base: &str,
        crawl_id: &'a CrawlId,
        config: &CrawlConfig,
    ) -> Result<Self, DeliverError> {
        // The seeder checked both; a stored configuration that does not compile is corrupt.
        let corrupt = |reason: String| DeliverError::CorruptDelivery {
            key: format!("crawl {crawl_id} configuration"),
            reason,
        };
        Ok(Self {
            blobs,
            layout,
            uri_base: super::object_uri(uri_base, ""),
            crawl_id,
            extractors: Extractors::new(&config.extract).map_err(|e| corrupt(e.to_string()))?,
            scope: ScopeMatcher::new(&config.scope).map_err(|e| corrupt(e.to_string()))?,
            found: Vec::new(),
            gone: HashSet::new(),
            summary: ItemsSummary::default(),
        })
    }

    /// Reads the items of every present page of the manifest segment at `key`.
    pub async fn add(&mut self, key: &str, manifest: &[u8]) -> Result<(), DeliverError> {
        for line in lines::<ManifestLine>(key, manifest) {
            let line = line?;
            let status = Status::ALL.iter().find(|s| s.name() == line.status);
            if status == Some(&Status::Gone) {
                self.gone.extend(line.final_url.iter().cloned());
                self.gone.insert(line.url);
                continue;
            }
            let present = status.is_some_and(|&s| is_present(s, line.md5.is_some()));
            let (Some(md5), true) = (line.md5.as_deref(), present) else {
                continue;
            };
            if self.extractors.for_url(&line.url).is_none() {
                continue;
            }
            // The items beside a body are those of its HTML: a page served the same bytes
            // under another type since has none.
            if !line.content_type.as_deref().is_some_and(is_html_type) {
                self.summary.pages_without_items += 1;
                continue;
            }
            let task_id =
                TaskId::parse(&line.task_id).ok_or_else(|| DeliverError::CorruptDelivery {
                    key: key.to_owned(),
                    reason: format!("bad task id {:?}", line.task_id),
                })?;
            // Beside the body: in the object layout the items object (which `reextract`
            // rewrites), in segments the page's metadata record — or, once `reextract` made
            // them anew, the items object it wrote beside the segment.
            let beside = Layout::items_key_of(&self.layout.html_key(self.crawl_id, &task_id, md5));
            let mut items = match (&line.object, line.offset, line.length) {
                (Some(object), Some(offset), Some(length)) => {
                    let key = object.strip_prefix(&self.uri_base).unwrap_or(object);
                    let stored = self
                        .segment_items(key, offset, length, line.items_length)
                        .await?;
                    stored.map(|b| parse_items(key, &b)).transpose()?
                }
                _ => None,
            };
            if !items.as_ref().is_some_and(|i| self.is_current(i))
                && let Some(body) = super::get_with_retry(self.blobs, &beside).await?
            {
                items = Some(parse_items(&beside, &body)?);
            }
            let Some(items) = items else {
                // Its items were not stored (they did not serialise, or no extractor applied
                // when it was fetched and none was run on it since).
                self.summary.pages_without_items += 1;
                continue;
            };
            if self.is_current(&items) {
                self.summary.pages_current += 1;
            } else {
                self.summary.pages_older += 1;
            }
            self.found.push(Found { page: line, items });
        }
        Ok(())
    }

    /// Whether `items` were made by the crawl's current extractor definitions.
    fn is_current(&self, items: &PageItems) -> bool {
        items.version.as_deref() == Some(self.extractors.version())
    }

    /// The items in a page's records in a segment (None: the page has none). Only their member
    /// is read when the manifest gives its length; a manifest line without it (written before
    /// lines carried it) has the whole span read and the body inflated.
    async fn segment_items(
        &self,
        key: &str,
        offset: u64,
        length: u64,
        items_length: Option<u64>,
    ) -> Result<Option<Bytes>, DeliverError> {
        let (offset, length) = match items_length {
            Some(items) if items <= length => (offset + length - items, items),
            _ => (offset, length),
        };
        let read = || self.blobs.get_range(key, offset, length);
        let Some(records) = super::patiently("read a page's records", &super::READ, read).await?
        else {
            return Ok(None);
        };
        Ok(match items_length {
            Some(_) => Some(segment::decode_items(key, &records)?),
            None => segment::decode(key, &records)?.items,
        })
    }

    /// The columns of `items.csv.gz`.
    pub fn csv_columns(&self) -> CsvColumns {
        CsvColumns::new(&self.extractors)
    }

    /// The delivered items, joined, their counts, and the keys of the listing items left out
    /// because their detail pages are gone.
    pub fn finish(mut self) -> (Vec<ItemLine>, ItemsSummary, HashSet<String>) {
        self.summary.extractors_version = self.extractors.version().to_owned();
        self.summary.from_current_extractors = self.summary.pages_older == 0;
        let (items, gone) = join(
            &self.extractors,
            &self.scope,
            &self.found,
            &self.gone,
            &mut self.summary,
        );
        (items, self.summary, gone)
    }
}

/// The delivered items: listing items with their detail fields merged, in manifest order
/// (`trawl_domain::extract::listed_item` decides by the detail page); and the keys of those
/// left out, their detail pages being `gone` (the URLs in `gone`).
fn join(
    extractors: &Extractors,
    scope: &ScopeMatcher,
    found: &[Found],
    gone: &HashSet<String>,
    summary: &mut ItemsSummary,
) -> (Vec<ItemLine>, HashSet<String>) {
    let detail_names: HashSet<&str> = extractors.detail_extractors().collect();
    // Detail pages by their task URL and their final URL.
    let mut details: HashMap<String, usize> = HashMap::new();
    for (i, f) in found.iter().enumerate() {
        if detail_names.contains(f.items.extractor.as_str()) {
            details.insert(f.page.url.clone(), i);
            if let Some(final_url) = &f.page.final_url {
                details.insert(final_url.clone(), i);
            }
        }
    }
    let mut linked: HashSet<usize> = HashSet::new();
    let mut out = Vec::new();
    let mut left_out = HashSet::new();
    // Items keyed by their `key` fields, by key: how many so far.
    let mut keyed: HashMap<String, usize> = HashMap::new();
    for f in found {
        if detail_names.contains(f.items.extractor.as_str()) {
            continue;
        }
        let def = extractors.named(&f.items.extractor).map(|e| &e.def);
        let link = def.and_then(|d| d.detail.as_ref());
        let key_fields = def.map_or(&[][..], |d| &d.key[..]);
        for (position, item) in f.items.items.iter().enumerate() {
            let mut line = item_line(&f.page, &f.items.extractor, item);
            line.key = format!("{}#{position}", f.page.url);
            if let Some(link) = link {
                let url = item
                    .fields
                    .get(&link.url_field)
                    .and_then(|v| v.as_str())
                    .and_then(|u| CanonicalUrl::parse(u).ok())
                    .map(|u| scope.normalise(u).as_str().to_owned());
                let detail = url.as_ref().and_then(|u| details.get(u).copied());
                let state = match (detail, &url) {
                    (Some(_), _) => rules::DetailPage::Items,
                    (None, Some(url)) if gone.contains(url) => rules::DetailPage::Gone,
                    (None, _) => rules::DetailPage::Absent,
                };
                if let Some(url) = url {
                    line.key = url;
                }
                match (rules::listed_item(state), detail) {
                    (ListedItem::Merged, Some(i)) => {
                        linked.insert(i);
                        merge(&mut line, &found[i]);
                    }
                    (ListedItem::Gone, _) => {
                        summary.detail_pages_gone += 1;
                        let key = rules::item_key(&f.items.extractor, key_fields, &line.fields);
                        match key {
                            Ok(key) if !key_fields.is_empty() => left_out.insert(key),
                            _ => left_out.insert(line.key),
                        };
                        continue;
                    }
                    _ => {
                        line.errors.push(FieldError {
                            field: link.url_field.clone(),
                            error: "its detail page has no items in this delivery".into(),
                        });
                        line.valid = false;
                    }
                }
            }
            if !key_fields.is_empty() {
                key_by_fields(&mut line, key_fields, &mut keyed);
            }
            count(summary, &line);
            out.push(line);
        }
    }
    summary.detail_pages_unlinked = found
        .iter()
        .enumerate()
        .filter(|(i, f)| detail_names.contains(f.items.extractor.as_str()) && !linked.contains(i))
        .count() as u64;
    (out, left_out)
}

fn parse_items(key: &str, body: &[u8]) -> Result<PageItems, DeliverError> {
    serde_json::from_slice(body).map_err(|e| DeliverError::CorruptDelivery {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

fn item_line(page: &ManifestLine, extractor: &str, item: &Item) -> ItemLine {
    ItemLine {
        key: String::new(),
        extractor: extractor.to_owned(),
        page_url: page.url.clone(),
        task_id: page.task_id.clone(),
        fetched_at: page.fetched_at.clone().unwrap_or_default(),
        fields: item.fields.clone(),
        detail: None,
        valid: item.is_valid(),
        errors: item.errors.clone(),
    }
}

/// Keys `line` by its extractor's `key` fields (`trawl_domain::extract::item_key`). An item
/// without a value for one is delivered invalid under its default key; one whose key an earlier
/// item of this delivery has is delivered invalid under the key and its rank (`KEY#2`), so that
/// the delta still holds every item once.
fn key_by_fields(line: &mut ItemLine, key_fields: &[String], keyed: &mut HashMap<String, usize>) {
    let key = match rules::item_key(&line.extractor, key_fields, &line.fields) {
        Ok(key) => key,
        Err(field) => {
            line.errors.push(FieldError {
                field: field.to_owned(),
                error: "no value to key the item on (the extractor's `key`)".into(),
            });
            line.valid = false;
            return;
        }
    };
    let seen = keyed.entry(key.clone()).or_default();
    *seen += 1;
    line.key = match *seen {
        1 => key,
        n => {
            line.errors.push(FieldError {
                field: "key".into(),
                error: "the same key as an earlier item of this delivery".into(),
            });
            line.valid = false;
            format!("{key}#{n}")
        }
    };
}

/// Merges the detail page's first item into `line`: its fields fill the ones `line` has no
/// value for, its errors join `line`'s.
fn merge(line: &mut ItemLine, detail: &Found) {
    line.detail = Some(DetailPage {
        url: detail.page.url.clone(),
        task_id: detail.page.task_id.clone(),
        fetched_at: detail.page.fetched_at.clone().unwrap_or_default(),
    });
    let Some(item) = detail.items.items.first() else {
        line.errors.push(FieldError {
            field: "detail".into(),
            error: format!("no {} item on the detail page", detail.items.extractor),
        });
        line.valid = false;
        return;
    };
    for (name, value) in &item.fields {
        let slot = line
            .fields
            .entry(name.clone())
            .or_insert(serde_json::Value::Null);
        if slot.is_null() {
            *slot = value.clone();
        }
    }
    line.errors.extend(item.errors.iter().cloned());
    line.valid = line.errors.is_empty();
}

fn count(summary: &mut ItemsSummary, line: &ItemLine) {
    summary.items += 1;
    let of = summary
        .by_extractor
        .entry(line.extractor.clone())
        .or_default();
    of.items += 1;
    if !line.valid {
        summary.invalid += 1;
        of.invalid += 1;
        if of.invalid_examples.len() < INVALID_EXAMPLES {
            of.invalid_examples.push(InvalidItem {
                key: line.key.clone(),
                page_url: line.page_url.clone(),
                errors: line.errors.clone(),
            });
        }
    }
}

/// The delta of `current` against the previous delivery's items (`previous`, gzipped JSON
/// lines; None: no previous delivery, or one without items): its lines and counts. An item
/// gone says why: its key in `detail_gone` (its detail page is gone), or not found.
pub(super) fn delta(
    key: &str,
    previous: Option<&[u8]>,
    current: &[ItemLine],
    detail_gone: &HashSet<String>,
    counts: &mut ItemsDelta,
) -> Result<Vec<ItemDeltaLine>, DeliverError> {
    let mut before: HashMap<String, ItemLine> = HashMap::new();
    if let Some(previous) = previous {
        for line in lines::<ItemLine>(key, previous) {
            let line = line?;
            before.insert(line.key.clone(), line);
        }
    }
    let mut out = Vec::new();
    for item in current {
        let change = match before.remove(&item.key) {
            None => Change::New,
            Some(old) if old.fields != item.fields || old.errors != item.errors => Change::Changed,
            Some(_) => {
                counts.unchanged += 1;
                continue;
            }
        };
        match change {
            Change::New => counts.new += 1,
            _ => counts.changed += 1,
        }
        out.push(ItemDeltaLine {
            change,
            key: item.key.clone(),
            item: Some(item.clone()),
            reason: None,
        });
    }
    let mut gone: Vec<String> = before.into_keys().collect();
    gone.sort();
    counts.gone += gone.len() as u64;
    out.extend(gone.into_iter().map(|key| {
        ItemDeltaLine {
            change: Change::Gone,
            reason: Some(
                if detail_gone.contains(&key) {
                    GONE_DETAIL
                } else {
                    GONE_UNSEEN
                }
                .to_owned(),
            ),
            key,
            item: None,
        }
    }));
    Ok(out)
}

/// The columns of `items.csv.gz`: the item's key, extractor, page URL, task id, fetch time and
/// validity (`CSV_LEADING`); the fields of the extractors whose items are delivered (a
/// listing's, then those its detail pages add), each once, in the order defined; the errors. A
/// field named like one of the item's own columns is headed `fields.NAME`.
pub(super) struct CsvColumns {
    fields: Vec<String>,
}

impl CsvColumns {
    fn new(extractors: &Extractors) -> Self {
        let detail: HashSet<&str> = extractors.detail_extractors().collect();
        let mut fields: Vec<String> = Vec::new();
        for listing in extractors
            .all()
            .filter(|e| !detail.contains(e.def.name.as_str()))
        {
            let merged = listing
                .def
                .detail
                .as_ref()
                .and_then(|d| extractors.named(&d.extractor));
            for extractor in std::iter::once(listing).chain(merged) {
                for name in extractor.def.fields.keys() {
                    if !fields.contains(name) {
                        fields.push(name.clone());
                    }
                }
            }
        }
        Self { fields }
    }

    /// The header record.
    pub fn header(&self) -> Result<Vec<u8>, DeliverError> {
        let fields = self.fields.iter().map(|name| {
            if CSV_LEADING.contains(&name.as_str()) || name == CSV_TRAILING {
                format!("fields.{name}")
            } else {
                name.clone()
            }
        });
        let leading = CSV_LEADING.map(str::to_owned);
        csv_record(
            leading
                .into_iter()
                .chain(fields)
                .chain([CSV_TRAILING.into()]),
        )
    }

    /// The record of `line`: a string field as it is, another value as JSON, no value empty;
    /// the errors as `field: error` joined by `; `.
    pub fn row(&self, line: &ItemLine) -> Result<Vec<u8>, DeliverError> {
        let leading = [
            line.key.clone(),
            line.extractor.clone(),
            line.page_url.clone(),
            line.task_id.clone(),
            line.fetched_at.clone(),
            line.valid.to_string(),
        ];
        let fields = self.fields.iter().map(|name| match line.fields.get(name) {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        });
        let errors: Vec<String> = line
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.error))
            .collect();
        csv_record(leading.into_iter().chain(fields).chain([errors.join("; ")]))
    }
}

/// One CSV record (RFC 4180: CRLF line end, fields quoted where needed).
fn csv_record(fields: impl IntoIterator<Item = String>) -> Result<Vec<u8>, DeliverError> {
    let encode = |e: csv::Error| DeliverError::Encode(e.to_string());
    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .buffer_capacity(1024)
        .from_writer(Vec::new());
    out.write_record(fields).map_err(encode)?;
    out.into_inner().map_err(|e| encode(e.into_error().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let key = ["sku".to_owned()];
        let mut keyed = HashMap::new();
        let mut lines = [
            line(serde_json::json!("S1")),
            line(serde_json::json!("S2")),
            line(serde_json::Value::Null),
            line(serde_json::json!("S1")),
        ];
        for l in &mut lines {
            key_by_fields(l, &key, &mut keyed);
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
}
