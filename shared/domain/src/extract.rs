//! Extractors: what data a crawl takes out of its pages (Django Dynamic Scraper's scraped object
//! classes, declared in the crawl configuration). An extractor applies to the pages whose URL
//! its pattern matches (the first extractor matching a page wins, like recrawl rules); it finds
//! its items by a base expression (one item per match) and each field of an item by an
//! expression relative to the item's base element, then runs the field's processors.
//!
//! A listing's extractor may name the field holding each item's detail page (`detail`) and the
//! extractor of those pages: the delivery merges the detail page's fields into the listing
//! item (DDS's "from detail page"). The definitions are pure data; `trawl_core::extract`
//! compiles and runs them.

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of a crawl's extractor definitions: the md5 (hex, first 16 digits) of their JSON.
/// Stored items carry the version they were made with; a delivery compares it with the crawl's
/// current one to say whether its items came from the current extractors. Any change of a
/// definition (its order, a pattern, a field, a processor) is a new version; the JSON is the
/// same for equal definitions (fields are a map in name order).
pub fn definitions_version(extractors: &[Extractor]) -> String {
    let json = serde_json::to_vec(extractors).unwrap_or_default();
    let mut version = hex::encode(Md5::digest(&json));
    version.truncate(16);
    version
}

/// One extractor: a URL pattern, a base element and fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extractor {
    /// The extractor's name: items carry it, and the delivery's summary counts by it.
    pub name: String,
    /// A regular expression matched against the page's canonical URL (anywhere, unless anchored).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// A glob matched against the whole canonical URL (`*` any run of characters, `?` one).
    /// Neither `match` nor `glob`: every page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// The element repeated once per item (a listing's rows); None: the page is one item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Expr>,
    /// The item's fields by name.
    pub fields: BTreeMap<String, Field>,
    /// Where each item's detail page is, whose fields are merged into the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<DetailLink>,
    /// The fields that identify an item from one delivery to the next (a product's id, say):
    /// the items delta keys on their values (`item_key`). Empty: an item is keyed by its page's
    /// URL and position, or by its detail page's URL.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
}

/// A listing item's link to its detail page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailLink {
    /// The field holding the detail page's URL (made absolute by the extractor).
    pub url_field: String,
    /// The extractor of the detail pages: its items are delivered merged into the listing's
    /// items, never on their own.
    pub extractor: String,
}

/// An expression selecting elements (or, in XPath, attributes and text nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Expr {
    /// XPath 1.0.
    Xpath(String),
    /// A CSS selector.
    Css(String),
}

impl Expr {
    pub fn text(&self) -> &str {
        match self {
            Expr::Xpath(s) | Expr::Css(s) => s,
        }
    }

    pub fn is_xpath(&self) -> bool {
        matches!(self, Expr::Xpath(_))
    }
}

/// A field: an expression, what to take of each node it selects, an optional regular
/// expression capture, and processors. Written as `{"css": "h2 a", "value": "attr(href)"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// XPath, relative to the item's base element (`.//a/@href`, `text()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xpath: Option<String>,
    /// A CSS selector matched under the item's base element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub css: Option<String>,
    /// `text` (default), `html` (the element's outer HTML) or `attr(NAME)`. An XPath that
    /// selects attributes or text nodes yields their text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A regular expression applied to each value: its first capture group (or the whole match
    /// when it has none); a value it does not match is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Applied in order to the values (every node selected gives one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<Processor>,
    /// The value names an image (`crate::image`; DDS's `IMAGE` field): the largest candidate
    /// when the field takes a `srcset`, else the value, resolved against the page. The image is
    /// fetched and stored, and the delivered item names it (`images`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub image: bool,
}

impl Field {
    /// The field's expression (`xpath` or `css`; the compiler refuses both or neither).
    pub fn expr(&self) -> Option<Expr> {
        match (&self.xpath, &self.css) {
            (Some(x), None) => Some(Expr::Xpath(x.clone())),
            (None, Some(c)) => Some(Expr::Css(c.clone())),
            _ => None,
        }
    }
}

/// What a field takes of a selected element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    Text,
    Html,
    Attr(String),
}

impl Take {
    /// Reads `text`, `html` or `attr(NAME)`.
    pub fn parse(value: Option<&str>) -> Option<Take> {
        match value.map(str::trim) {
            None | Some("text") => Some(Take::Text),
            Some("html") => Some(Take::Html),
            Some(other) => {
                let name = other.strip_prefix("attr(")?.strip_suffix(')')?.trim();
                (!name.is_empty()).then(|| Take::Attr(name.to_ascii_lowercase()))
            }
        }
    }
}

/// A step applied to a field's values. Written as a name (`"trim"`) or a one-key object
/// (`{"join": ", "}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Processor {
    /// Whitespace runs become one space; leading and trailing whitespace goes; values left
    /// empty are dropped.
    Trim,
    /// All values joined into one with this separator (without it, a field is the first value
    /// its processors keep).
    Join(String),
    /// Each value made an absolute URL against the page's URL.
    AbsoluteUrl,
    /// Each value read as a number: everything but digits, `-` and `.` is dropped (so `,` is a
    /// thousands separator); a value without digits is an error.
    Number,
    /// Each value read as a date (or date and time) by a strftime format (`%d.%m.%Y`) and
    /// written as ISO 8601; a value that does not fit is an error.
    Date(String),
    /// The value when there is none.
    Default(String),
    /// No value makes the item invalid (it is still delivered, with its error).
    Required,
}

/// Where a listing item's detail page stands in a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailPage {
    /// Present, with items.
    Items,
    /// `gone`: found missing (404, 410, a soft 404) at `recrawl.missing_after` checks in a row.
    Gone,
    /// Neither: not fetched (yet), no items on it, not HTML, or the item names no URL.
    Absent,
}

/// What becomes of a listing item in a delivery, by its detail page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedItem {
    /// Delivered with the detail page's fields merged in.
    Merged,
    /// Delivered invalid: its detail page has no items to merge.
    Invalid,
    /// Not delivered (`gone` in the items delta): its detail page is gone, whatever the
    /// listing still shows — the item the detail page described is no more.
    Gone,
}

/// The rule for a listing item whose extractor names a detail page.
pub fn listed_item(detail: DetailPage) -> ListedItem {
    match detail {
        DetailPage::Items => ListedItem::Merged,
        DetailPage::Gone => ListedItem::Gone,
        DetailPage::Absent => ListedItem::Invalid,
    }
}

/// An item's key by its extractor's `key` fields: the extractor's name and the fields' values,
/// written as JSON (`article:["S12X"]`), so that no two different values make the same key. The
/// fields are taken from the item as delivered (a detail page's merged in). Err: the first key
/// field without a value (null or absent), whose item cannot be keyed by it.
pub fn item_key<'a>(
    extractor: &str,
    key_fields: &'a [String],
    fields: &BTreeMap<String, serde_json::Value>,
) -> Result<String, &'a str> {
    let mut values = Vec::with_capacity(key_fields.len());
    for name in key_fields {
        match fields.get(name) {
            Some(value) if !value.is_null() => values.push(value),
            _ => return Err(name),
        }
    }
    Ok(format!(
        "{extractor}:{}",
        serde_json::to_string(&values).unwrap_or_default()
    ))
}

/// How a crawl's items are delivered besides `items.jsonl.gz` (the configuration's `items`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ItemsOutput {
    /// Also `items.csv.gz`: one row per item, with a column per field of the extractors whose
    /// items are delivered, and the item's page URL, task id and fetch time.
    pub csv: bool,
}

impl ItemsOutput {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_key_is_its_extractor_and_key_values_and_needs_every_key_field() {
        let key = vec!["sku".to_owned(), "size".to_owned()];
        let fields: BTreeMap<String, serde_json::Value> = serde_json::from_value(
            serde_json::json!({"sku": "S1", "size": 2, "title": "A", "note": null}),
        )
        .unwrap();
        assert_eq!(
            item_key("shop", &key, &fields),
            Ok(r#"shop:["S1",2]"#.to_owned())
        );
        // Values that would join alike stay apart.
        let split: BTreeMap<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({"sku": "S1\",2", "size": ""})).unwrap();
        assert_ne!(
            item_key("shop", &key, &split),
            item_key("shop", &key, &fields)
        );
        let no_size = vec!["sku".to_owned(), "note".to_owned()];
        assert_eq!(item_key("shop", &no_size, &fields), Err("note"));
        assert_eq!(
            item_key("shop", &["missing".to_owned()], &fields),
            Err("missing")
        );
    }

    fn extractor(field: &str) -> Extractor {
        serde_json::from_value(serde_json::json!({
            "name": "article", "fields": {field: {"css": "h1"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_changed_definition_is_a_new_version_and_an_equal_one_the_same() {
        let one = definitions_version(&[extractor("title")]);
        assert_eq!(one.len(), 16);
        assert_eq!(one, definitions_version(&[extractor("title")]));
        assert_ne!(one, definitions_version(&[extractor("heading")]));
        assert_ne!(one, definitions_version(&[]));
        assert_eq!(listed_item(DetailPage::Gone), ListedItem::Gone);
        assert_eq!(listed_item(DetailPage::Absent), ListedItem::Invalid);
    }
}
