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
//! The pass holds no generation's worth of items: the join and the delta are external
//! sort/merges through sorted runs (`runs`, as the manifest's delta), each item numbered in
//! manifest order (`seq`) so that the files come out in that order:
//!
//! 1. **Reading** (`ItemsPass::add`): each page's items, in manifest order. Listing items that
//!    name a detail page, the detail pages (under their URL and final URL) and the URLs of
//!    the pages `gone` are sorted by URL; the other items go on to 3 or 4.
//! 2. **Join**, by detail URL: a URL's gone mark and detail pages come before the listing
//!    items that link to it, so each gets its detail page's first item merged in (the last
//!    detail page read under that URL, as a map filled in manifest order would give).
//!
//!    Then (2b) **images**, by image URL, for items whose extractor (or its detail extractor)
//!    has fields marked `image`: the image tasks of the manifest (marked `_image`, or answered
//!    with an `image/*` type; under their URL and final URL) come before the items naming
//!    them, so that each image field gets its image's state and place
//!    (`trawl_domain::image::ImageRef`; `not_fetched` when no task has it); the images are
//!    then gathered back to their item by seq, and the item goes on.
//! 3. **Keys**, for extractors with `key` fields: items sorted by (key, seq), so that the first
//!    item of a key in manifest order keeps it and the next ones are `KEY#2` …
//! 4. **Delta**, by item key: the previous delivery's `items.jsonl.gz` (read a range at a time;
//!    its last line of a key counts), the keys left out for a gone detail page, and this
//!    delivery's items. The first item of a key is compared with the previous one; a previous
//!    key no item has is gone, in key order. Images are compared too: an item whose images
//!    changed is changed, and the images an item gone or changed names no more are listed in
//!    its delta line (`removed_images`).
//! 5. **Writing**, by seq: `items.jsonl.gz`, the delta's lines for items (then the gone ones,
//!    in key order) and `items.csv.gz` in one read; items are counted (the invalid examples
//!    are the first in manifest order) and the detail pages linked counted once each.
//!
//! Memory: `DeliveryLimits::items_entries` entries a sorter (at most three fill at once), and
//! while merging a frame (`runs::FRAME_LINES`) and a read buffer per run. The runs
//! (`_sort-items-…`) are removed at the end.
//!
//! The pass is not checkpointed: it runs in one go once the clean-up is done, and a delivery
//! cut during it (a crash, a failed write) does it again from the start on its next call (the
//! checkpoint still stands at the clean-up's last page): the runs are written again under the
//! same names, and the files with them, and the runs of the cut call are removed with them. Nor
//! does it stop for the call's deadline: it must fit in one call (a Lambda's 15 minutes).

use super::delta::{is_present, lines};
use super::gzip::GzipFile;
use super::runs::{self, Merge, Sorted, Sorter};
use super::summary::{InvalidItem, ItemsSummary};
use super::{Change, DeliverError, FileKind, IndexedFile, ManifestLine, json_line};
use crate::blob::{BlobStore, Layout, segment};
use crate::discover::{ScopeMatcher, is_html_type};
use crate::extract::{Extractors, FieldError, Item, PageItems};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::extract::{self as rules, ListedItem};
use trawl_domain::image::{self, ImageRef};
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
/// The items files' gzip level. Every generation writes its items twice (the items and their
/// delta), ~1.3 KB of JSON a page with ten fields: at zlib's default (6) that was 7% of a local
/// crawl's CPU with extraction (profile of the bench's 5,000 pages). Level 1 compresses the same
/// items in less than half the time (gzip: 0.14 → 0.06 s) into a file 23% larger (1.15 → 1.41 MB).
const ITEMS_LEVEL: flate2::Compression = flate2::Compression::fast();

/// Invalid items named per extractor in the summary (all are counted).
const INVALID_EXAMPLES: usize = 10;
/// How the pass's runs are named, after the delivery's prefix.
const RUNS: &str = "items-";
/// Compressed bytes of the previous delivery's items read at once.
const PREVIOUS_READ: u64 = 256 << 10;

/// Manifest lines read ahead at most (`ItemsPass::add`), and bytes of their pages' items
/// members: the members of a batch are read together.
const BATCH_LINES: usize = 512;
const BATCH_BYTES: u64 = 4 << 20;

/// What the items pass does with a manifest line.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An image task (or an image stored as a page) to the images' join.
    Image(Option<Status>),
    /// Gone: its URLs to the join, so that no listing item takes a detail page's fields.
    Gone,
    /// Present, an extractor's, but no longer HTML: counted, without items.
    NotHtml,
    /// A present HTML page an extractor applies to: its items are read.
    Items,
    /// Nothing to read.
    Skip,
}

/// Where a page's items are in a segment.
struct Member<'a> {
    key: &'a str,
    offset: u64,
    length: u64,
    /// The whole span (the response and the items' members), from a manifest line without
    /// `items_length`.
    whole_span: bool,
}

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
    /// The images its fields marked `image` name, by field: each image's state, md5 and where
    /// its bytes are stored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageRef>,
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
    /// The images the item named in the previous delivery and names no more (all of them when
    /// it is gone): their bytes stay stored with their task, until `trawl purge`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_images: Vec<ImageRef>,
}

/// Why an item of the previous delivery is gone.
const GONE_DETAIL: &str = "detail page gone";
const GONE_UNSEEN: &str = "not found";

/// The previous delivery's items file: its key and size (its index says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousItems {
    pub delivery_id: String,
    pub key: String,
    pub bytes: u64,
}

/// What an items pass held and wrote (the bench prints it), and what its deliverer is left to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemsStats {
    /// Sorted runs written.
    pub runs: u64,
    /// Entries held in memory at once, at most: those the sorters gather, and the frames the
    /// merge being read has decoded.
    pub peak_entries: u64,
    /// The URLs of the images items named in the previous delivery and none names in this one.
    pub unnamed_images: Vec<String>,
}

/// A detail page as a listing item gets it: the page, and its first item (None: it has none).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Detail {
    page: DetailPage,
    extractor: String,
    first: Option<Item>,
}

/// Step 2's entries, by URL: its gone mark, then its detail pages (in the order read), then the
/// listing items linking to it (in manifest order).
#[derive(Debug, Serialize, Deserialize)]
enum ByUrl {
    #[serde(rename = "g")]
    Gone { u: String },
    #[serde(rename = "d")]
    Detail { u: String, n: u64, d: Detail },
    #[serde(rename = "l")]
    Listed { u: String, n: u64, l: ItemLine },
}

impl Sorted for ByUrl {
    type Key = (String, u8, u64);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            ByUrl::Gone { u } => (u.clone(), 0, 0),
            ByUrl::Detail { u, n, .. } => (u.clone(), 1, *n),
            ByUrl::Listed { u, n, .. } => (u.clone(), 2, *n),
        })
    }
}

/// Step 2b's entries, by image URL: the image tasks (in the order read), then the items'
/// image fields naming it (by seq).
#[derive(Debug, Serialize, Deserialize)]
enum ByImage {
    #[serde(rename = "t")]
    Task { u: String, n: u64, i: ImageRef },
    #[serde(rename = "w")]
    Wanted { u: String, n: u64, f: String },
}

impl Sorted for ByImage {
    type Key = (String, u8, u64);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            ByImage::Task { u, n, .. } => (u.clone(), 0, *n),
            ByImage::Wanted { u, n, .. } => (u.clone(), 1, *n),
        })
    }
}

/// Step 2b's gathering, by seq: an item's images (by field), then the item.
#[derive(Debug, Serialize, Deserialize)]
enum ByItem {
    #[serde(rename = "i")]
    Image { n: u64, f: String, i: ImageRef },
    #[serde(rename = "w")]
    Waiting { n: u64, l: ItemLine },
}

impl Sorted for ByItem {
    type Key = (u64, u8, String);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            ByItem::Image { n, f, .. } => (*n, 0, f.clone()),
            ByItem::Waiting { n, .. } => (*n, 1, String::new()),
        })
    }
}

/// Step 3's entries: an item by its `key` fields' key, then its seq.
#[derive(Debug, Serialize, Deserialize)]
struct ByFieldKey {
    k: String,
    n: u64,
    l: ItemLine,
}

impl Sorted for ByFieldKey {
    type Key = (String, u64);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok((self.k.clone(), self.n))
    }
}

/// Step 4's entries, by item key: the previous delivery's items (in its order), the keys left
/// out for a gone detail page, this delivery's items (in manifest order).
#[derive(Debug, Serialize, Deserialize)]
enum ByKey {
    #[serde(rename = "p")]
    Previous {
        k: String,
        n: u64,
        f: BTreeMap<String, serde_json::Value>,
        e: Vec<FieldError>,
        #[serde(default)]
        i: BTreeMap<String, ImageRef>,
    },
    #[serde(rename = "o")]
    LeftOut { k: String },
    #[serde(rename = "c")]
    Current { n: u64, l: ItemLine },
}

impl Sorted for ByKey {
    type Key = (String, u8, u64);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            ByKey::Previous { k, n, .. } => (k.clone(), 0, *n),
            ByKey::LeftOut { k } => (k.clone(), 1, 0),
            ByKey::Current { n, l } => (l.key.clone(), 2, *n),
        })
    }
}

/// Step 4's images, by URL: those its items name, and those it found named no more (an image
/// removed and named by no item is retired with its bytes, `unnamed_images`).
#[derive(Debug, Serialize, Deserialize)]
enum ImageUse {
    #[serde(rename = "n")]
    Named { u: String },
    #[serde(rename = "r")]
    Removed { u: String },
}

impl Sorted for ImageUse {
    type Key = (String, u8);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            ImageUse::Named { u } => (u.clone(), 0),
            ImageUse::Removed { u } => (u.clone(), 1),
        })
    }
}

/// Step 5's entries: the items with their change (by seq), the gone keys (in key order), the
/// detail pages linked (by their number, once or more each).
#[derive(Debug, Serialize, Deserialize)]
enum Out {
    #[serde(rename = "i")]
    Item {
        n: u64,
        l: Box<ItemLine>,
        c: Option<Change>,
        #[serde(default)]
        r: Vec<ImageRef>,
    },
    #[serde(rename = "g")]
    Gone {
        n: u64,
        k: String,
        r: String,
        #[serde(default)]
        i: Vec<ImageRef>,
    },
    #[serde(rename = "l")]
    Linked { n: u64 },
}

impl Sorted for Out {
    type Key = (u8, u64);

    fn key(&self, _: &str) -> Result<Self::Key, DeliverError> {
        Ok(match self {
            Out::Item { n, .. } => (0, *n),
            Out::Gone { n, .. } => (1, *n),
            Out::Linked { n } => (2, *n),
        })
    }
}

/// The pass's sorters.
struct Sorts {
    by_url: Sorter<ByUrl>,
    by_image: Sorter<ByImage>,
    by_item: Sorter<ByItem>,
    by_field_key: Sorter<ByFieldKey>,
    by_key: Sorter<ByKey>,
    image_uses: Sorter<ImageUse>,
    out: Sorter<Out>,
}

impl Sorts {
    fn new(prefix: &str, entries: usize) -> Self {
        let name = |step: &str| format!("{prefix}{}{RUNS}{step}-", runs::RUNS_PREFIX);
        Self {
            by_url: Sorter::new(name("url"), entries),
            by_image: Sorter::new(name("image"), entries),
            by_item: Sorter::new(name("item"), entries),
            by_field_key: Sorter::new(name("field-key"), entries),
            by_key: Sorter::new(name("key"), entries),
            image_uses: Sorter::new(name("image-use"), entries),
            out: Sorter::new(name("out"), entries),
        }
    }

    fn held(&self) -> usize {
        self.by_url.held()
            + self.by_image.held()
            + self.by_item.held()
            + self.by_field_key.held()
            + self.by_key.held()
            + self.image_uses.held()
            + self.out.held()
    }
}

/// The items pass: fed one manifest segment at a time, then joined and written.
pub(super) struct ItemsPass<'a, B> {
    blobs: &'a B,
    layout: &'a Layout,
    /// What the manifest's object URIs start with (`object_uri`): a segment's key follows.
    uri_base: String,
    crawl_id: &'a CrawlId,
    /// Where the files (and the runs) are written.
    prefix: &'a str,
    extractors: Extractors,
    scope: ScopeMatcher,
    sorts: Sorts,
    /// Listing items read so far (the next one's seq), and detail pages.
    items: u64,
    details: u64,
    /// Image tasks read (the next one's number).
    images: u64,
    /// The image fields of each extractor's delivered items (`Extractors::image_fields`);
    /// empty when none has any.
    image_fields: BTreeMap<String, Vec<String>>,
    summary: ItemsSummary,
    stats: ItemsStats,
}

impl<'a, B: BlobStore> ItemsPass<'a, B> {
    /// A pass writing under `prefix`, its sorters holding `entries` at most each.
    pub fn new(
        blobs: &'a B,
        layout: &'a Layout,
        uri_base: &str,
        crawl_id: &'a CrawlId,
        config: &CrawlConfig,
        prefix: &'a str,
        entries: u64,
    ) -> Result<Self, DeliverError> {
        // The seeder checked both; a stored configuration that does not compile is corrupt.
        let corrupt = |reason: String| DeliverError::CorruptDelivery {
            key: format!("crawl {crawl_id} configuration"),
            reason,
        };
        let entries = usize::try_from(entries).unwrap_or(usize::MAX);
        let extractors = Extractors::new(&config.extract).map_err(|e| corrupt(e.to_string()))?;
        let image_fields = extractors
            .all()
            .map(|e| (e.def.name.clone(), extractors.image_fields(&e.def.name)))
            .filter(|(_, fields)| !fields.is_empty())
            .collect();
        Ok(Self {
            blobs,
            layout,
            uri_base: super::object_uri(uri_base, ""),
            crawl_id,
            prefix,
            extractors,
            scope: ScopeMatcher::new(&config.scope).map_err(|e| corrupt(e.to_string()))?,
            sorts: Sorts::new(prefix, entries),
            items: 0,
            details: 0,
            images: 0,
            image_fields,
            summary: ItemsSummary::default(),
            stats: ItemsStats::default(),
        })
    }

    /// Notes what the sorters hold, beside `merging` (what the merge being read holds).
    fn note_held(&mut self, merging: usize) {
        let held = (self.sorts.held() + merging) as u64;
        self.stats.peak_entries = self.stats.peak_entries.max(held);
    }

    /// Reads the items of every present page of the manifest segment at `key` (step 1), a
    /// batch of lines at a time: the items members of a batch's pages are read together, one
    /// store call per segment (`BlobStore::get_ranges`), then each line is taken in order.
    pub async fn add(&mut self, key: &str, manifest: &[u8]) -> Result<(), DeliverError> {
        let mut lines = lines::<ManifestLine>(key, manifest);
        loop {
            let mut batch = Vec::new();
            let mut bytes = 0;
            while batch.len() < BATCH_LINES && bytes < BATCH_BYTES {
                let Some(line) = lines.next().transpose()? else {
                    break;
                };
                let kind = self.kind_of(&line);
                if let Kind::Items = kind {
                    bytes += self.member_of(&line).map_or(0, |m| m.length);
                }
                batch.push((line, kind));
            }
            if batch.is_empty() {
                return Ok(());
            }
            let mut stored = self.read_members(&batch).await?.into_iter();
            for (line, kind) in batch {
                let member = match kind {
                    Kind::Items => stored.next().flatten(),
                    _ => None,
                };
                self.add_line(key, line, kind, member).await?;
            }
        }
    }

    /// What the pass does with a manifest line.
    fn kind_of(&self, line: &ManifestLine) -> Kind {
        let status = Status::ALL.iter().find(|s| s.name() == line.status);
        // An image task has no items; an image stored as a page (`store_content_types`)
        // joins the images too when items name images.
        let marked = image::is_image_task(line.data.as_ref());
        let typed = line
            .content_type
            .as_deref()
            .is_some_and(image::is_image_type);
        if (marked || typed) && !self.image_fields.is_empty() {
            return Kind::Image(status.copied());
        }
        if marked {
            return Kind::Skip;
        }
        if status == Some(&Status::Gone) {
            return Kind::Gone;
        }
        let present = status.is_some_and(|&s| is_present(s, line.md5.is_some()));
        if !present || line.md5.is_none() || self.extractors.for_url(&line.url).is_none() {
            return Kind::Skip;
        }
        // The items beside a body are those of its HTML: a page served the same bytes
        // under another type since has none.
        if !line.content_type.as_deref().is_some_and(is_html_type) {
            return Kind::NotHtml;
        }
        Kind::Items
    }

    /// Where a page's items are in its segment (None: the page is in no segment). Only their
    /// member when the manifest gives its length; a manifest line without it (written before
    /// lines carried it) has the whole span read and the body inflated.
    fn member_of<'l>(&self, line: &'l ManifestLine) -> Option<Member<'l>> {
        let (Some(object), Some(offset), Some(length)) = (&line.object, line.offset, line.length)
        else {
            return None;
        };
        let key = object.strip_prefix(&self.uri_base).unwrap_or(object);
        Some(match line.items_length {
            Some(items) if items <= length => Member {
                key,
                offset: offset + length - items,
                length: items,
                whole_span: false,
            },
            _ => Member {
                key,
                offset,
                length,
                whole_span: line.items_length.is_none(),
            },
        })
    }

    /// The stored members of the batch's pages with items, in the batch's order (None: its
    /// page is in no segment, or its segment is missing).
    async fn read_members(
        &self,
        batch: &[(ManifestLine, Kind)],
    ) -> Result<Vec<Option<Bytes>>, DeliverError> {
        let members: Vec<Option<Member<'_>>> = batch
            .iter()
            .filter(|(_, kind)| matches!(kind, Kind::Items))
            .map(|(line, _)| self.member_of(line))
            .collect();
        let mut by_segment: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, member) in members.iter().enumerate() {
            if let Some(member) = member {
                by_segment.entry(member.key).or_default().push(i);
            }
        }
        let mut stored = vec![None; members.len()];
        for (key, at) in by_segment {
            let ranges: Vec<(u64, u64)> = at
                .iter()
                .filter_map(|&i| members[i].as_ref().map(|m| (m.offset, m.length)))
                .collect();
            let read = || self.blobs.get_ranges(key, &ranges);
            let Some(read) = super::patiently("read pages' items", &super::READ, read).await?
            else {
                continue;
            };
            for (&i, records) in at.iter().zip(read) {
                let Some(member) = &members[i] else { continue };
                stored[i] = match member.whole_span {
                    false => Some(segment::decode_items(key, &records)?),
                    true => segment::decode(key, &records)?.items,
                };
            }
        }
        Ok(stored)
    }

    /// Takes one manifest line of the kind `kind`; `member` holds its page's items as read
    /// from its segment.
    async fn add_line(
        &mut self,
        key: &str,
        line: ManifestLine,
        kind: Kind,
        member: Option<Bytes>,
    ) -> Result<(), DeliverError> {
        match kind {
            Kind::Image(status) => return self.image_task(&line, status).await,
            Kind::Skip => return Ok(()),
            Kind::Gone => {
                for u in line.final_url.into_iter().chain([line.url]) {
                    self.sorts
                        .by_url
                        .push(self.blobs, ByUrl::Gone { u })
                        .await?;
                }
                self.note_held(0);
                return Ok(());
            }
            Kind::NotHtml => {
                self.summary.pages_without_items += 1;
                return Ok(());
            }
            Kind::Items => {}
        }
        let Some(md5) = line.md5.as_deref() else {
            return Ok(());
        };
        let task_id =
            TaskId::parse(&line.task_id).ok_or_else(|| DeliverError::CorruptDelivery {
                key: key.to_owned(),
                reason: format!("bad task id {:?}", line.task_id),
            })?;
        // Beside the body: in the object layout the items object (which `reextract`
        // rewrites), in segments the page's metadata record — or, once `reextract` made
        // them anew, the items object it wrote beside the segment.
        let beside = Layout::items_key_of(&self.layout.html_key(self.crawl_id, &task_id, md5));
        let mut items = match (&member, self.member_of(&line)) {
            (Some(bytes), Some(at)) => Some(parse_items(at.key, bytes)?),
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
            return Ok(());
        };
        if self.is_current(&items) {
            self.summary.pages_current += 1;
        } else {
            self.summary.pages_older += 1;
        }
        self.found(line, items).await
    }

    /// An image task of the manifest to the images' join, under its URL and final URL.
    async fn image_task(
        &mut self,
        line: &ManifestLine,
        status: Option<Status>,
    ) -> Result<(), DeliverError> {
        let state = image::image_state(status, line.content_type.as_deref(), line.md5.is_some());
        let stored = state == image::ImageState::Stored;
        let i = ImageRef {
            url: line.url.clone(),
            state,
            md5: line.md5.clone().filter(|_| stored),
            content_type: line.content_type.clone(),
            bytes: line.bytes.filter(|_| stored),
            object: line.object.clone().filter(|_| stored),
            offset: line.offset.filter(|_| stored),
            length: line.length.filter(|_| stored),
            error: line
                .last_error
                .as_ref()
                .filter(|_| matches!(state, image::ImageState::Failed | image::ImageState::Gone))
                .map(|e| e.message.clone()),
        };
        let n = self.images;
        self.images += 1;
        for u in line.final_url.iter().chain([&line.url]) {
            let entry = ByImage::Task {
                u: u.clone(),
                n,
                i: i.clone(),
            };
            self.sorts.by_image.push(self.blobs, entry).await?;
        }
        self.note_held(0);
        Ok(())
    }

    /// Whether `items` were made by the crawl's current extractor definitions.
    fn is_current(&self, items: &PageItems) -> bool {
        items.version.as_deref() == Some(self.extractors.version())
    }

    /// A page's items, read: a detail page goes to the join under its URLs; a listing's items
    /// are numbered, and those naming a detail page go to the join, the others on.
    async fn found(&mut self, page: ManifestLine, items: PageItems) -> Result<(), DeliverError> {
        let is_detail = self
            .extractors
            .detail_extractors()
            .any(|name| name == items.extractor);
        if is_detail {
            let n = self.details;
            self.details += 1;
            let detail = Detail {
                page: DetailPage {
                    url: page.url.clone(),
                    task_id: page.task_id.clone(),
                    fetched_at: page.fetched_at.clone().unwrap_or_default(),
                },
                extractor: items.extractor,
                first: items.items.into_iter().next(),
            };
            for u in [page.url].into_iter().chain(page.final_url) {
                let d = detail.clone();
                self.sorts
                    .by_url
                    .push(self.blobs, ByUrl::Detail { u, n, d })
                    .await?;
            }
            self.note_held(0);
            return Ok(());
        }
        let def = self.extractors.named(&items.extractor).map(|e| &e.def);
        let link = def.and_then(|d| d.detail.clone());
        for (position, item) in items.items.into_iter().enumerate() {
            let n = self.items;
            self.items += 1;
            let mut line = item_line(&page, &items.extractor, item);
            line.key = format!("{}#{position}", page.url);
            if let Some(link) = &link {
                let url = line
                    .fields
                    .get(&link.url_field)
                    .and_then(|v| v.as_str())
                    .and_then(|u| CanonicalUrl::parse(u).ok())
                    .map(|u| self.scope.normalise(u).as_str().to_owned());
                match url {
                    Some(u) => {
                        line.key = u.clone();
                        let listed = ByUrl::Listed { u, n, l: line };
                        self.sorts.by_url.push(self.blobs, listed).await?;
                        self.note_held(0);
                        continue;
                    }
                    // Names no page: as if its detail page had no items.
                    None => unlinked(&mut line, &link.url_field),
                }
            }
            self.keyed(n, line).await?;
            self.note_held(0);
        }
        Ok(())
    }

    /// An item whose detail page is joined (or that has none) on to its images' join (step 2b)
    /// when it names some, else on to its key (`key_on`).
    async fn keyed(&mut self, n: u64, line: ItemLine) -> Result<(), DeliverError> {
        let wanted: Vec<(String, String)> = self
            .image_fields
            .get(&line.extractor)
            .into_iter()
            .flatten()
            .filter_map(|f| {
                let url = line.fields.get(f)?.as_str()?;
                let url = CanonicalUrl::parse(url).ok()?;
                Some((f.clone(), self.scope.normalise(url).as_str().to_owned()))
            })
            .collect();
        if wanted.is_empty() {
            return self.key_on(n, line).await;
        }
        for (f, u) in wanted {
            let entry = ByImage::Wanted { u, n, f };
            self.sorts.by_image.push(self.blobs, entry).await?;
        }
        let waiting = ByItem::Waiting { n, l: line };
        self.sorts.by_item.push(self.blobs, waiting).await
    }

    /// An item on to its key: sorted by its `key` fields' key when its extractor has some
    /// (step 3), else by its key (step 4).
    async fn key_on(&mut self, n: u64, mut line: ItemLine) -> Result<(), DeliverError> {
        let key_fields = self.key_fields(&line.extractor);
        if !key_fields.is_empty()
            && let Some(k) = field_key(&mut line, key_fields)
        {
            let entry = ByFieldKey { k, n, l: line };
            return self.sorts.by_field_key.push(self.blobs, entry).await;
        }
        let entry = ByKey::Current { n, l: line };
        self.sorts.by_key.push(self.blobs, entry).await
    }

    fn key_fields(&self, extractor: &str) -> &[String] {
        self.extractors
            .named(extractor)
            .map_or(&[][..], |e| &e.def.key[..])
    }

    /// The columns of `items.csv.gz`.
    fn csv_columns(&self) -> CsvColumns {
        CsvColumns::new(&self.extractors)
    }

    /// Steps 2 to 5 once every manifest segment is read: the files written (`items.jsonl.gz`,
    /// `items-delta.jsonl.gz`, and `items.csv.gz` when `csv`), against `previous`; the counts
    /// and what the pass held. The runs are removed.
    pub async fn finish(
        mut self,
        previous: Option<&PreviousItems>,
        csv: bool,
    ) -> Result<(Vec<IndexedFile>, ItemsSummary, ItemsStats), DeliverError> {
        self.summary.extractors_version = self.extractors.version().to_owned();
        self.summary.from_current_extractors = self.summary.pages_older == 0;
        self.join().await?;
        self.images().await?;
        self.rank().await?;
        if let Some(previous) = previous
            && self.read_previous(previous).await?
        {
            self.summary.delta.previous = Some(previous.delivery_id.clone());
        }
        self.delta().await?;
        let unnamed = self.unnamed_images().await?;
        let files = self.write(csv).await?;
        // Every run of the pass (those of an earlier call cut during it too).
        let runs = format!("{}{}{RUNS}", self.prefix, runs::RUNS_PREFIX);
        runs::remove(self.blobs, &runs).await?;
        self.stats.unnamed_images = unnamed;
        Ok((files, self.summary, self.stats))
    }

    /// Takes a sorter's merge, leaving an empty sorter of the same name.
    async fn merge_of<T: Sorted + Serialize>(
        &mut self,
        sorter: impl Fn(&mut Sorts) -> &mut Sorter<T>,
    ) -> Result<Merge<T>, DeliverError> {
        let taken = sorter(&mut self.sorts).take();
        let merge = taken.merge(self.blobs).await?;
        self.stats.runs += merge.runs() as u64;
        Ok(merge)
    }

    /// Step 2: each listing item with its detail page (or without, or left out for a gone one).
    async fn join(&mut self) -> Result<(), DeliverError> {
        let mut merge = self.merge_of(|s| &mut s.by_url).await?;
        // Bounded: each round takes the entries of one URL.
        while let Some((url, ..)) = merge.peek(self.blobs).await? {
            let mut gone = false;
            let mut detail: Option<(u64, Detail)> = None;
            let mut linked = false;
            while let Some((next, ..)) = merge.peek(self.blobs).await?
                && next == url
            {
                let Some((_, entry)) = merge.next(self.blobs).await? else {
                    break;
                };
                match entry {
                    ByUrl::Gone { .. } => gone = true,
                    // The last one read under the URL.
                    ByUrl::Detail { n, d, .. } => detail = Some((n, d)),
                    ByUrl::Listed { n, l, .. } => {
                        linked |= self
                            .listed(n, l, detail.as_ref().map(|d| &d.1), gone)
                            .await?;
                    }
                }
                self.note_held(merge.held());
            }
            if let (true, Some((n, _))) = (linked, &detail) {
                self.sorts
                    .out
                    .push(self.blobs, Out::Linked { n: *n })
                    .await?;
            }
        }
        Ok(())
    }

    /// A listing item `line` (seq `n`) whose detail page is `detail` (`gone`: its URL is a
    /// gone page's), by `trawl_domain::extract::listed_item`: whether it was merged.
    async fn listed(
        &mut self,
        n: u64,
        mut line: ItemLine,
        detail: Option<&Detail>,
        gone: bool,
    ) -> Result<bool, DeliverError> {
        let state = match (detail, gone) {
            (Some(_), _) => rules::DetailPage::Items,
            (None, true) => rules::DetailPage::Gone,
            (None, false) => rules::DetailPage::Absent,
        };
        let merged = match (rules::listed_item(state), detail) {
            (ListedItem::Merged, Some(detail)) => {
                merge(&mut line, detail);
                true
            }
            (ListedItem::Gone, _) => {
                self.summary.detail_pages_gone += 1;
                let key_fields = self.key_fields(&line.extractor);
                let k = match rules::item_key(&line.extractor, key_fields, &line.fields) {
                    Ok(key) if !key_fields.is_empty() => key,
                    _ => line.key,
                };
                return self
                    .sorts
                    .by_key
                    .push(self.blobs, ByKey::LeftOut { k })
                    .await
                    .map(|()| false);
            }
            _ => {
                let field = self
                    .extractors
                    .named(&line.extractor)
                    .and_then(|e| e.def.detail.as_ref())
                    .map(|d| d.url_field.clone())
                    .unwrap_or_default();
                unlinked(&mut line, &field);
                false
            }
        };
        self.keyed(n, line).await?;
        Ok(merged)
    }

    /// Step 2b: each image field with its image, then each item with its images.
    async fn images(&mut self) -> Result<(), DeliverError> {
        let mut merge = self.merge_of(|s| &mut s.by_image).await?;
        // Bounded: each round takes the entries of one URL.
        while let Some((url, ..)) = merge.peek(self.blobs).await? {
            let mut task: Option<ImageRef> = None;
            while let Some((next, ..)) = merge.peek(self.blobs).await?
                && next == url
            {
                let Some((_, entry)) = merge.next(self.blobs).await? else {
                    break;
                };
                match entry {
                    // The last one read under the URL.
                    ByImage::Task { i, .. } => task = Some(i),
                    ByImage::Wanted { u, n, f } => {
                        let i = task.clone().unwrap_or_else(|| ImageRef::not_fetched(&u));
                        let entry = ByItem::Image { n, f, i };
                        self.sorts.by_item.push(self.blobs, entry).await?;
                    }
                }
                self.note_held(merge.held());
            }
        }
        let mut merge = self.merge_of(|s| &mut s.by_item).await?;
        let mut gathered: BTreeMap<String, ImageRef> = BTreeMap::new();
        // Bounded: an item's images are its image fields.
        while let Some((_, entry)) = merge.next(self.blobs).await? {
            match entry {
                ByItem::Image { f, i, .. } => {
                    gathered.insert(f, i);
                }
                ByItem::Waiting { n, mut l } => {
                    l.images = std::mem::take(&mut gathered);
                    self.key_on(n, l).await?;
                }
            }
            self.note_held(merge.held());
        }
        Ok(())
    }

    /// Step 3: the items of one `key` fields' key, keyed in manifest order.
    async fn rank(&mut self) -> Result<(), DeliverError> {
        let mut merge = self.merge_of(|s| &mut s.by_field_key).await?;
        let mut last: Option<(String, usize)> = None;
        // Bounded: each round takes an item.
        while let Some((_, entry)) = merge.next(self.blobs).await? {
            let ByFieldKey { k, n, mut l } = entry;
            let seen = match &mut last {
                Some((key, seen)) if *key == k => {
                    *seen += 1;
                    *seen
                }
                _ => 1,
            };
            rank(&mut l, &k, seen);
            last = Some((k, seen));
            self.sorts
                .by_key
                .push(self.blobs, ByKey::Current { n, l })
                .await?;
            self.note_held(merge.held());
        }
        Ok(())
    }

    /// The previous delivery's items, a range at a time, to the delta's sort (step 4): false
    /// when its file is not there.
    async fn read_previous(&mut self, previous: &PreviousItems) -> Result<bool, DeliverError> {
        let key = &previous.key;
        let corrupt = |reason: String| DeliverError::CorruptDelivery {
            key: key.clone(),
            reason,
        };
        let mut gunzip = flate2::write::MultiGzDecoder::new(Vec::new());
        let mut offset = 0;
        let mut n = 0;
        // Bounded: each round reads the next range, until the file's end.
        loop {
            let length = PREVIOUS_READ.min(previous.bytes - offset);
            if length == 0 {
                break;
            }
            let read = || self.blobs.get_range(key, offset, length);
            let read = super::patiently("read the previous items", &super::READ, read).await?;
            let Some(bytes) = read else {
                return Ok(false);
            };
            offset += length;
            gunzip
                .write_all(&bytes)
                .map_err(|e| corrupt(e.to_string()))?;
            let text = gunzip.get_mut();
            let Some(end) = text.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let complete: Vec<u8> = text.drain(..=end).collect();
            self.previous_lines(key, &complete, &mut n).await?;
        }
        let rest = gunzip.finish().map_err(|e| corrupt(e.to_string()))?;
        self.previous_lines(key, &rest, &mut n).await?;
        Ok(true)
    }

    /// Lines of the previous delivery's items (`n`: the lines before them).
    async fn previous_lines(
        &mut self,
        key: &str,
        text: &[u8],
        n: &mut u64,
    ) -> Result<(), DeliverError> {
        for line in text.split(|&b| b == b'\n') {
            if line.trim_ascii().is_empty() {
                continue;
            }
            let line: ItemLine =
                serde_json::from_slice(line).map_err(|e| DeliverError::CorruptDelivery {
                    key: key.to_owned(),
                    reason: e.to_string(),
                })?;
            let entry = ByKey::Previous {
                k: line.key,
                n: *n,
                f: line.fields,
                e: line.errors,
                i: line.images,
            };
            *n += 1;
            self.sorts.by_key.push(self.blobs, entry).await?;
            self.note_held(0);
        }
        Ok(())
    }

    /// Step 4: each key's items against the previous delivery's.
    async fn delta(&mut self) -> Result<(), DeliverError> {
        let mut merge = self.merge_of(|s| &mut s.by_key).await?;
        let mut gone = 0;
        // Bounded: each round takes the entries of one key.
        while let Some((key, ..)) = merge.peek(self.blobs).await? {
            // The previous delivery's last item of the key (its fields and errors).
            let mut before = None;
            let mut left_out = false;
            while let Some((next, ..)) = merge.peek(self.blobs).await?
                && next == key
            {
                let Some((_, entry)) = merge.next(self.blobs).await? else {
                    break;
                };
                let counts = &mut self.summary.delta;
                let (n, l, c, r) = match entry {
                    ByKey::Previous { f, e, i, .. } => {
                        before = Some((f, e, i));
                        continue;
                    }
                    ByKey::LeftOut { .. } => {
                        left_out = true;
                        continue;
                    }
                    ByKey::Current { n, l } => match before.take() {
                        None => {
                            counts.new += 1;
                            (n, l, Some(Change::New), Vec::new())
                        }
                        Some((f, e, i)) if f != l.fields || e != l.errors || i != l.images => {
                            counts.changed += 1;
                            let now: Vec<&ImageRef> = l.images.values().collect();
                            let r = image::removed(i.values(), &now);
                            counts.images_removed += r.len() as u64;
                            (n, l, Some(Change::Changed), r)
                        }
                        Some(_) => {
                            counts.unchanged += 1;
                            (n, l, None, Vec::new())
                        }
                    },
                };
                let named = l
                    .images
                    .values()
                    .map(|i| ImageUse::Named { u: i.url.clone() });
                let removed = r.iter().map(|i| ImageUse::Removed { u: i.url.clone() });
                for entry in named.chain(removed) {
                    self.sorts.image_uses.push(self.blobs, entry).await?;
                }
                let entry = Out::Item {
                    n,
                    l: Box::new(l),
                    c,
                    r,
                };
                self.sorts.out.push(self.blobs, entry).await?;
                self.note_held(merge.held());
            }
            if let Some((_, _, images)) = before {
                self.summary.delta.gone += 1;
                let r = if left_out { GONE_DETAIL } else { GONE_UNSEEN };
                let i = image::removed(images.values(), &[]);
                self.summary.delta.images_removed += i.len() as u64;
                for removed in &i {
                    let entry = ImageUse::Removed {
                        u: removed.url.clone(),
                    };
                    self.sorts.image_uses.push(self.blobs, entry).await?;
                }
                let entry = Out::Gone {
                    n: gone,
                    k: key,
                    r: r.to_owned(),
                    i,
                };
                gone += 1;
                self.sorts.out.push(self.blobs, entry).await?;
            }
        }
        Ok(())
    }

    /// Step 4b: the URLs of the images the delta found named no more that no item of this
    /// delivery names: the images to retire with their bytes. Held: as many as the generation
    /// removed (the images of gone and changed items only).
    async fn unnamed_images(&mut self) -> Result<Vec<String>, DeliverError> {
        let mut merge = self.merge_of(|s| &mut s.image_uses).await?;
        let mut unnamed = Vec::new();
        // Bounded: each round takes the entries of one URL.
        while let Some((url, _)) = merge.peek(self.blobs).await? {
            let (mut named, mut removed) = (false, false);
            while let Some((next, _)) = merge.peek(self.blobs).await?
                && next == url
            {
                match merge.next(self.blobs).await? {
                    Some((_, ImageUse::Named { .. })) => named = true,
                    Some((_, ImageUse::Removed { .. })) => removed = true,
                    None => break,
                }
            }
            if removed && !named {
                unnamed.push(url);
            }
        }
        Ok(unnamed)
    }

    /// Step 5: the files, in one read of the items in manifest order.
    async fn write(&mut self, csv: bool) -> Result<Vec<IndexedFile>, DeliverError> {
        let columns = csv.then(|| self.csv_columns());
        let mut merge = self.merge_of(|s| &mut s.out).await?;
        let kinds = [FileKind::Items, FileKind::ItemsDelta, FileKind::ItemsCsv];
        let kinds = &kinds[..if columns.is_some() { 3 } else { 2 }];
        // Outliving the uploads that borrow them.
        let keys: Vec<String> = kinds
            .iter()
            .map(|kind| format!("{}{}", self.prefix, kind.name(0)))
            .collect();
        let mut files = Vec::new();
        for (&kind, key) in kinds.iter().zip(&keys) {
            let upload = self.blobs.upload(key, "application/gzip").await;
            match upload {
                Ok(upload) => files.push((kind, GzipFile::with_level(upload, ITEMS_LEVEL), 0)),
                Err(e) => {
                    for (_, file, _) in files {
                        file.abort().await;
                    }
                    return Err(e.into());
                }
            }
        }
        let written = async {
            if let (Some(columns), Some((_, csv, _))) = (&columns, files.get_mut(2)) {
                csv.write(&columns.header()?).await?;
            }
            let mut linked = 0;
            let mut last_linked = None;
            // Bounded: each round takes an entry.
            while let Some((_, entry)) = merge.next(self.blobs).await? {
                let (line, change, removed_images) = match entry {
                    Out::Item { l, c, r, .. } => (*l, c, r),
                    Out::Gone { k, r, i, .. } => {
                        let line = ItemDeltaLine {
                            change: Change::Gone,
                            key: k,
                            item: None,
                            reason: Some(r),
                            removed_images: i,
                        };
                        write_to(&mut files, 1, &json_line(&line)?).await?;
                        continue;
                    }
                    Out::Linked { n } => {
                        if last_linked != Some(n) {
                            linked += 1;
                            last_linked = Some(n);
                        }
                        continue;
                    }
                };
                count(&mut self.summary, &line);
                let json = json_line(&line)?;
                write_to(&mut files, 0, &json).await?;
                if let Some(columns) = &columns {
                    write_to(&mut files, 2, &columns.row(&line)?).await?;
                }
                if let Some(change) = change {
                    let delta = delta_item_line(change, &line.key, &json, &removed_images)?;
                    write_to(&mut files, 1, &delta).await?;
                }
                self.note_held(merge.held());
            }
            self.summary.detail_pages_unlinked = self.details - linked;
            Ok::<_, DeliverError>(())
        }
        .await;
        if let Err(e) = written {
            for (_, file, _) in files {
                file.abort().await;
            }
            return Err(e);
        }
        let mut indexed = Vec::new();
        for (kind, file, records) in files {
            let file = file.complete().await?;
            indexed.push(IndexedFile {
                name: kind.name(0),
                kind,
                bytes: file.bytes,
                records,
                md5: file.md5,
            });
        }
        Ok(indexed)
    }
}

/// Writes `bytes` as a record of the `n`th file.
async fn write_to<U: crate::blob::BlobUpload>(
    files: &mut [(FileKind, GzipFile<U>, u64)],
    n: usize,
    bytes: &[u8],
) -> Result<(), DeliverError> {
    if let Some((_, file, records)) = files.get_mut(n) {
        file.write(bytes).await?;
        *records += 1;
    }
    Ok(())
}

/// The delta line of an item whose line in `items.jsonl.gz` is `item` (newline ended): the
/// `ItemDeltaLine` serde writes, the item's JSON put in as it is rather than made again (in a
/// first generation every item is in the delta).
fn delta_item_line(
    change: Change,
    key: &str,
    item: &[u8],
    removed_images: &[ImageRef],
) -> Result<Vec<u8>, DeliverError> {
    let encode = |e: serde_json::Error| DeliverError::Encode(e.to_string());
    let item = item.strip_suffix(b"\n").unwrap_or(item);
    let mut line = Vec::with_capacity(item.len() + key.len() + 40);
    line.extend_from_slice(b"{\"change\":");
    serde_json::to_writer(&mut line, &change).map_err(encode)?;
    line.extend_from_slice(b",\"key\":");
    serde_json::to_writer(&mut line, key).map_err(encode)?;
    line.extend_from_slice(b",\"item\":");
    line.extend_from_slice(item);
    if !removed_images.is_empty() {
        line.extend_from_slice(b",\"removed_images\":");
        serde_json::to_writer(&mut line, removed_images).map_err(encode)?;
    }
    line.extend_from_slice(b"}\n");
    Ok(line)
}

fn parse_items(key: &str, body: &[u8]) -> Result<PageItems, DeliverError> {
    serde_json::from_slice(body).map_err(|e| DeliverError::CorruptDelivery {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

fn item_line(page: &ManifestLine, extractor: &str, item: Item) -> ItemLine {
    let valid = item.is_valid();
    ItemLine {
        key: String::new(),
        extractor: extractor.to_owned(),
        page_url: page.url.clone(),
        task_id: page.task_id.clone(),
        fetched_at: page.fetched_at.clone().unwrap_or_default(),
        fields: item.fields,
        detail: None,
        valid,
        errors: item.errors,
        images: BTreeMap::new(),
    }
}

/// Marks a listing item whose detail page has no items in this delivery (`url_field`: the
/// field naming it).
fn unlinked(line: &mut ItemLine, url_field: &str) {
    line.errors.push(FieldError {
        field: url_field.to_owned(),
        error: "its detail page has no items in this delivery".into(),
    });
    line.valid = false;
}

/// The key of `line` by its extractor's `key` fields (`trawl_domain::extract::item_key`). An
/// item without a value for one is marked invalid, and keeps its default key (None).
fn field_key(line: &mut ItemLine, key_fields: &[String]) -> Option<String> {
    match rules::item_key(&line.extractor, key_fields, &line.fields) {
        Ok(key) => Some(key),
        Err(field) => {
            line.errors.push(FieldError {
                field: field.to_owned(),
                error: "no value to key the item on (the extractor's `key`)".into(),
            });
            line.valid = false;
            None
        }
    }
}

/// Keys `line` by `key`, the `seen`th item of this delivery with it: the first one is keyed by
/// it; a later one is delivered invalid under the key and its rank (`KEY#2`), so that the delta
/// still holds every item once.
fn rank(line: &mut ItemLine, key: &str, seen: usize) {
    line.key = match seen {
        1 => key.to_owned(),
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
fn merge(line: &mut ItemLine, detail: &Detail) {
    line.detail = Some(detail.page.clone());
    let Some(item) = &detail.first else {
        line.errors.push(FieldError {
            field: "detail".into(),
            error: format!("no {} item on the detail page", detail.extractor),
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
    for i in line.images.values() {
        let state = serde_json::to_value(i.state).ok();
        let state = state.as_ref().and_then(|s| s.as_str()).unwrap_or("unknown");
        *summary.images.entry(state.to_owned()).or_default() += 1;
    }
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
mod tests;
