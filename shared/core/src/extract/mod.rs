//! The extraction engine: a crawl's extractors (`trawl_domain::extract`) compiled once, and run
//! on a page while it is in memory.
//!
//! A page is parsed once (html5ever, through `scraper`); CSS selectors run on that tree, and the
//! crawler reads the page's links from it too (`read_page`), so an extracted page is parsed
//! once, not once more for its links. When an
//! extractor uses XPath, the tree is copied into an XPath 1.0 document (`sxd-document`) with a
//! map between the two, so a base found by one language can hold fields written in the other.
//! Nothing here panics on a page or a definition: a definition is checked when the crawl is
//! seeded (`Extractors::new`), and a field that fails on a page records its error on the item,
//! which is kept (invalid) rather than dropped.

#[cfg(feature = "fetch")]
mod dry_run;
mod path;
mod process;

#[cfg(feature = "fetch")]
pub use dry_run::{DryRun, FailedField, dry_run, dry_run_stored};

use crate::discover::{Links, Want, links_in_tree, scan_page};
use crate::url_rules::glob_regex;
use path::{Evaluator, Selected, SimpleXpath};
use regex::Regex;
use scraper::{ElementRef, Html, Selector};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use sxd_document::Package;
use sxd_document::dom::Document;
use sxd_xpath::nodeset::Node as XNode;
use sxd_xpath::{Context, Factory, Value as XValue, XPath};
use thiserror::Error;
use trawl_domain::extract::{Expr, Extractor, Field, Processor, Take};
use trawl_domain::image::field_image_url;

/// Most extractors a crawl may have, and fields an extractor may have.
pub const MAX_EXTRACTORS: usize = 64;
pub const MAX_FIELDS: usize = 64;

/// Why a crawl's extractors were refused; `at` names the place (`extract[0].fields.price`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ExtractConfigError {
    #[error("extract: at most {MAX_EXTRACTORS} extractors, each with 1 to {MAX_FIELDS} fields")]
    TooMany,
    #[error("{at}: a name of letters, digits, `_` and `-` is needed")]
    Name { at: String },
    #[error("{at}: the name {name:?} is taken by an earlier extractor")]
    DuplicateName { at: String, name: String },
    #[error("{at}: give at most one of `match` (a regular expression) and `glob`")]
    BothPatterns { at: String },
    #[error("{at}: invalid pattern {pattern:?}: {reason}")]
    Pattern {
        at: String,
        pattern: String,
        reason: String,
    },
    #[error("{at}: give exactly one of `xpath` and `css`")]
    Expression { at: String },
    #[error("{at}: invalid XPath {expr:?}: {reason}")]
    Xpath {
        at: String,
        expr: String,
        reason: String,
    },
    #[error("{at}: invalid CSS selector {expr:?}: {reason}")]
    Css {
        at: String,
        expr: String,
        reason: String,
    },
    #[error("{at}: value must be `text`, `html` or `attr(NAME)`, not {value:?}")]
    Value { at: String, value: String },
    #[error("{at}: invalid regex: {reason}")]
    Regex { at: String, reason: String },
    #[error("{at}: invalid date format {format:?}")]
    DateFormat { at: String, format: String },
    #[error("{at}: {reason}")]
    Detail { at: String, reason: String },
    #[error(
        "{at}: no field {field:?} to key the items on (the extractor's fields, or its detail extractor's)"
    )]
    Key { at: String, field: String },
}

/// One item: its fields' values (null: none) and the errors met making them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub fields: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

impl Item {
    /// An item with errors (a required field without value, a number that is not one) is
    /// invalid: delivered with its errors, and counted.
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    pub field: String,
    pub error: String,
}

/// What one extractor found on one page: the `attr=items` object stored beside the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageItems {
    pub extractor: String,
    pub items: Vec<Item>,
    /// The version of the crawl's extractor definitions they were made with
    /// (`trawl_domain::extract::definitions_version`; None: items stored before versions were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A crawl's extractors, compiled.
#[derive(Debug, Clone, Default)]
pub struct Extractors {
    compiled: Vec<CompiledExtractor>,
    version: String,
}

/// One extractor with its URL pattern, selectors and regular expressions compiled. XPath
/// expressions are checked here but compiled per page (sxd-xpath's are not `Send`).
#[derive(Debug, Clone)]
pub struct CompiledExtractor {
    pub def: Extractor,
    /// The version of the definitions it is one of, given to the items it makes.
    version: String,
    url: Option<Regex>,
    base: Option<Compiled>,
    fields: Vec<CompiledField>,
}

#[derive(Debug, Clone)]
enum Compiled {
    /// An XPath expression, with its simple form when it has one (run on the HTML tree).
    Xpath {
        text: String,
        simple: Option<SimpleXpath>,
    },
    Css {
        selector: Selector,
        /// A selector of element names and descendant combinators alone (`p`, `nav a`), as
        /// written, outermost first: its elements are found by name (`Evaluator::named`).
        names: Option<Vec<String>>,
    },
}

#[derive(Debug, Clone)]
struct CompiledField {
    name: String,
    expr: Compiled,
    take: Take,
    regex: Option<Regex>,
    processors: Vec<Processor>,
    /// Names an image (`Field::image`).
    image: bool,
}

impl Extractors {
    /// Compiles `defs`, refusing the first problem with its place.
    pub fn new(defs: &[Extractor]) -> Result<Self, ExtractConfigError> {
        if defs.len() > MAX_EXTRACTORS {
            return Err(ExtractConfigError::TooMany);
        }
        let version = trawl_domain::extract::definitions_version(defs);
        let mut compiled: Vec<CompiledExtractor> = Vec::with_capacity(defs.len());
        for (i, def) in defs.iter().enumerate() {
            let at = format!("extract[{i}]");
            let name_ok = !def.name.is_empty()
                && def.name.len() <= 64
                && def
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !name_ok {
                return Err(ExtractConfigError::Name { at });
            }
            if compiled.iter().any(|c| c.def.name == def.name) {
                return Err(ExtractConfigError::DuplicateName {
                    at,
                    name: def.name.clone(),
                });
            }
            compiled.push(CompiledExtractor::new(def, &at, &version)?);
        }
        for (i, def) in defs.iter().enumerate() {
            let detail_fields = def
                .detail
                .as_ref()
                .and_then(|d| defs.iter().find(|other| other.name == d.extractor))
                .map(|other| &other.fields);
            if let Some(field) = def.key.iter().find(|f| {
                !def.fields.contains_key(*f) && !detail_fields.is_some_and(|d| d.contains_key(*f))
            }) {
                return Err(ExtractConfigError::Key {
                    at: format!("extract[{i}].key"),
                    field: field.clone(),
                });
            }
            let Some(detail) = &def.detail else { continue };
            let at = format!("extract[{i}].detail");
            if !def.fields.contains_key(&detail.url_field) {
                return Err(ExtractConfigError::Detail {
                    at,
                    reason: format!("no field {:?} to take the URL from", detail.url_field),
                });
            }
            if detail.extractor == def.name || !defs.iter().any(|d| d.name == detail.extractor) {
                return Err(ExtractConfigError::Detail {
                    at,
                    reason: format!("no other extractor named {:?}", detail.extractor),
                });
            }
        }
        Ok(Self { compiled, version })
    }

    /// The version of the definitions (`trawl_domain::extract::definitions_version`).
    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn is_empty(&self) -> bool {
        self.compiled.is_empty()
    }

    /// The extractor for the page at `url`: the first whose pattern matches it.
    pub fn for_url(&self, url: &str) -> Option<&CompiledExtractor> {
        self.compiled
            .iter()
            .find(|c| c.url.as_ref().is_none_or(|r| r.is_match(url)))
    }

    /// The extractors, in the order defined.
    pub fn all(&self) -> impl Iterator<Item = &CompiledExtractor> {
        self.compiled.iter()
    }

    /// The extractor named `name`.
    pub fn named(&self, name: &str) -> Option<&CompiledExtractor> {
        self.compiled.iter().find(|c| c.def.name == name)
    }

    /// The images the items of `found` name: the values of their extractor's image fields,
    /// resolved when extracted (`trawl_domain::image::field_image_url`).
    pub fn image_urls<'a>(&self, found: &'a PageItems) -> Vec<&'a str> {
        let Some(extractor) = self.named(&found.extractor) else {
            return Vec::new();
        };
        let fields: Vec<&str> = extractor
            .fields
            .iter()
            .filter(|f| f.image)
            .map(|f| f.name.as_str())
            .collect();
        found
            .items
            .iter()
            .flat_map(|item| fields.iter().filter_map(|f| item.fields.get(*f)?.as_str()))
            .collect()
    }

    /// The image fields of the items of extractor `name` as delivered: its own, and those its
    /// detail extractor merges in.
    pub fn image_fields(&self, name: &str) -> Vec<String> {
        let Some(extractor) = self.named(name) else {
            return Vec::new();
        };
        let detail = extractor
            .def
            .detail
            .as_ref()
            .and_then(|d| self.named(&d.extractor));
        let mut fields: Vec<String> = Vec::new();
        for e in std::iter::once(extractor).chain(detail) {
            for f in e.fields.iter().filter(|f| f.image) {
                if !fields.contains(&f.name) {
                    fields.push(f.name.clone());
                }
            }
        }
        fields
    }

    /// Names of the extractors whose items are delivered merged into a listing's.
    pub fn detail_extractors(&self) -> impl Iterator<Item = &str> {
        self.compiled
            .iter()
            .filter_map(|c| c.def.detail.as_ref().map(|d| d.extractor.as_str()))
    }
}

fn compile_expr(expr: &Expr, at: &str) -> Result<Compiled, ExtractConfigError> {
    match expr {
        Expr::Xpath(x) => {
            build_xpath(x).map_err(|reason| ExtractConfigError::Xpath {
                at: at.to_owned(),
                expr: x.clone(),
                reason,
            })?;
            Ok(Compiled::Xpath {
                text: x.clone(),
                simple: SimpleXpath::parse(x),
            })
        }
        Expr::Css(c) => Selector::parse(c)
            .map(|selector| Compiled::Css {
                selector,
                names: descendant_names(c),
            })
            .map_err(|e| ExtractConfigError::Css {
                at: at.to_owned(),
                expr: c.clone(),
                reason: crate::problem::selector(&e),
            }),
    }
}

/// The names of a selector that is element names joined by descendant combinators. Lower case
/// only: a type selector matches an HTML element's name (which html5ever lowers) whatever its
/// case, and any other element's only as written, so a name in lower case matches exactly the
/// elements of that name.
fn descendant_names(css: &str) -> Option<Vec<String>> {
    let is_name = |name: &str| {
        name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let names: Vec<String> = css.split_ascii_whitespace().map(str::to_owned).collect();
    (!names.is_empty() && names.iter().all(|n| is_name(n))).then_some(names)
}

fn build_xpath(expr: &str) -> Result<XPath, String> {
    Factory::new()
        .build(expr)
        .map_err(|e| crate::problem::xpath(&e))?
        .ok_or_else(|| "empty".to_owned())
}

impl CompiledExtractor {
    fn new(def: &Extractor, at: &str, version: &str) -> Result<Self, ExtractConfigError> {
        let url = match (&def.pattern, &def.glob) {
            (None, None) => None,
            (Some(regex), None) => Some(regex.clone()),
            (None, Some(glob)) => Some(glob_regex(glob)),
            (Some(_), Some(_)) => {
                return Err(ExtractConfigError::BothPatterns { at: at.to_owned() });
            }
        }
        .map(|p| {
            Regex::new(&p).map_err(|e| ExtractConfigError::Pattern {
                at: at.to_owned(),
                reason: crate::problem::regex(&e),
                pattern: p,
            })
        })
        .transpose()?;
        let base = def
            .base
            .as_ref()
            .map(|b| compile_expr(b, &format!("{at}.base")))
            .transpose()?;
        if def.fields.is_empty() || def.fields.len() > MAX_FIELDS {
            return Err(ExtractConfigError::TooMany);
        }
        let fields = def
            .fields
            .iter()
            .map(|(name, field)| compile_field(name, field, &format!("{at}.fields.{name}")))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            def: def.clone(),
            version: version.to_owned(),
            url,
            base,
            fields,
        })
    }

    /// The expressions of the extractor: its base's, then its fields'.
    fn exprs(&self) -> impl Iterator<Item = &Compiled> {
        self.base.iter().chain(self.fields.iter().map(|f| &f.expr))
    }

    /// Whether an XPath expression has no simple form, so that the page must be copied into an
    /// XPath document for sxd-xpath.
    fn needs_xml_copy(&self) -> bool {
        self.exprs()
            .any(|c| matches!(c, Compiled::Xpath { simple: None, .. }))
    }

    /// The items of the page `html` fetched from `page_url`.
    pub fn extract(&self, html: &[u8], page_url: &url::Url) -> PageItems {
        self.extract_from(&parse(html), page_url)
    }

    /// The items of the page parsed into `doc` (`parse`), fetched from `page_url`.
    pub fn extract_from(&self, doc: &Html, page_url: &url::Url) -> PageItems {
        let package = Package::new();
        let xml = self
            .needs_xml_copy()
            .then(|| XmlView::build(doc, package.as_document()));
        let page = PageTree {
            html: doc,
            paths: Evaluator::new(doc),
            xml: xml.as_ref(),
        };
        let factory = Factory::new();
        // Compiled once per page: sxd-xpath's expressions cannot be kept across threads.
        let mut xpaths: HashMap<&str, Option<XPath>> = HashMap::new();
        for expr in self.exprs() {
            if let Compiled::Xpath { text, simple: None } = expr {
                xpaths
                    .entry(text.as_str())
                    .or_insert_with(|| factory.build(text).ok().flatten());
            }
        }
        let root = doc.tree.root().id();
        let contexts = match &self.base {
            None => vec![root],
            Some(base) => page.select(base, root, &xpaths),
        };
        let items = contexts
            .into_iter()
            .map(|ctx| {
                let mut item = Item::default();
                for field in &self.fields {
                    let raw = page
                        .values(field, ctx, &xpaths)
                        .filter_map(|v| match &field.regex {
                            Some(re) => capture(re, &v),
                            None => Some(v),
                        });
                    let (mut value, mut errors) = process::first(&field.processors, raw, page_url);
                    if field.image
                        && let serde_json::Value::String(written) = &value
                    {
                        let srcset = field.take == Take::Attr("srcset".to_owned());
                        value = match field_image_url(written, srcset, page_url) {
                            Ok(url) => serde_json::Value::String(url),
                            Err(e) => {
                                errors.push(e);
                                serde_json::Value::Null
                            }
                        };
                    }
                    item.fields.insert(field.name.clone(), value);
                    item.errors
                        .extend(errors.into_iter().map(|error| FieldError {
                            field: field.name.clone(),
                            error,
                        }));
                }
                item
            })
            .collect();
        PageItems {
            extractor: self.def.name.clone(),
            items,
            version: Some(self.version.clone()),
        }
    }
}

/// Whether `expr` is an XPath 1.0 expression (why not, when it is not).
pub fn check_xpath(expr: &str) -> Result<(), String> {
    build_xpath(expr).map(|_| ())
}

/// The XPath `expr` on the page `html`, when its value is true as XPath's `boolean()` has it: the
/// string values of the nodes it selects (joined by spaces), or its own value as a string. None
/// when it is false (an empty node-set or string, 0, NaN, `false()`) or does not evaluate.
pub fn xpath_truth(html: &[u8], expr: &str) -> Option<String> {
    let xpath = build_xpath(expr).ok()?;
    let doc = parse(html);
    let package = Package::new();
    let xml = XmlView::build(&doc, package.as_document());
    let root = *xml.to_xml.get(&doc.tree.root().id())?;
    match xpath.evaluate(&Context::new(), root).ok()? {
        XValue::Nodeset(nodes) => (nodes.size() > 0).then(|| {
            let values: Vec<String> = nodes
                .document_order()
                .iter()
                .map(|n| n.string_value())
                .collect();
            values.join(" ")
        }),
        XValue::String(s) => (!s.is_empty()).then_some(s),
        XValue::Number(n) => (n != 0.0 && !n.is_nan()).then(|| n.to_string()),
        XValue::Boolean(b) => b.then(|| "true".to_owned()),
    }
}

/// A page parsed for extraction (html5ever, through `scraper`; bytes that are no UTF-8 are
/// replaced).
pub fn parse(html: &[u8]) -> Html {
    // `from_utf8` checks ASCII a word at a time; `from_utf8_lossy` walks byte by byte even
    // when there is nothing to replace (1.4% of the bench's crawl with extraction).
    match std::str::from_utf8(html) {
        Ok(text) => Html::parse_document(text),
        Err(_) => Html::parse_document(&String::from_utf8_lossy(html)),
    }
}

/// What the crawler reads of one fetched HTML page: its links (when it follows them) and its
/// items (when an extractor applies to it).
#[derive(Debug, Default)]
pub struct PageReading {
    pub links: Option<Links>,
    pub items: Option<PageItems>,
}

/// Reads the page `html` fetched from `page_url` for what `want` asks (its links, its images)
/// and its items: parsed once where its items are extracted, the extractor's tree giving the
/// links too; else only lol_html's scan runs. `links` is None when nothing was asked.
pub fn read_page(
    html: &[u8],
    page_url: &url::Url,
    extractor: Option<&CompiledExtractor>,
    want: Want,
) -> PageReading {
    let asked = want.links || want.images;
    let Some(extractor) = extractor else {
        return PageReading {
            links: asked.then(|| scan_page(page_url, html, want)),
            items: None,
        };
    };
    let doc = parse(html);
    PageReading {
        links: asked.then(|| links_in_tree(page_url, &doc, want)),
        items: Some(extractor.extract_from(&doc, page_url)),
    }
}

fn compile_field(name: &str, field: &Field, at: &str) -> Result<CompiledField, ExtractConfigError> {
    let expr = field
        .expr()
        .ok_or_else(|| ExtractConfigError::Expression { at: at.to_owned() })?;
    let expr = compile_expr(&expr, at)?;
    let take = Take::parse(field.value.as_deref()).ok_or_else(|| ExtractConfigError::Value {
        at: at.to_owned(),
        value: field.value.clone().unwrap_or_default(),
    })?;
    let regex = field
        .regex
        .as_deref()
        .map(Regex::new)
        .transpose()
        .map_err(|e| ExtractConfigError::Regex {
            at: at.to_owned(),
            reason: crate::problem::regex(&e),
        })?;
    for p in &field.processors {
        if let Processor::Date(format) = p
            && !process::date_format_ok(format)
        {
            return Err(ExtractConfigError::DateFormat {
                at: at.to_owned(),
                format: format.clone(),
            });
        }
    }
    Ok(CompiledField {
        name: name.to_owned(),
        expr,
        take,
        regex,
        processors: field.processors.clone(),
        image: field.image,
    })
}

/// The first capture group of `re` in `value` (the whole match when it has none).
fn capture(re: &Regex, value: &str) -> Option<String> {
    let caps = re.captures(value)?;
    caps.get(1)
        .or_else(|| caps.get(0))
        .map(|m| m.as_str().to_owned())
}

use ego_tree::NodeId;

/// The page's XPath document and the maps between its elements and the HTML tree's.
#[allow(clippy::mutable_key_type)] // See `XmlView::build`.
struct XmlView<'d> {
    to_xml: HashMap<NodeId, XNode<'d>>,
    to_html: HashMap<XNode<'d>, NodeId>,
}

impl<'d> XmlView<'d> {
    /// Copies the elements, attributes and text of `html` into `doc` (pre-order: a parent is
    /// always copied before its children, so no recursion is needed).
    // sxd nodes hash by the address of their storage, which never moves while the document
    // lives: a node's hash does not change when the document is changed through it.
    #[allow(clippy::mutable_key_type)]
    fn build(html: &Html, doc: Document<'d>) -> Self {
        let root = html.tree.root();
        let mut to_xml: HashMap<NodeId, XNode<'d>> = HashMap::new();
        let mut to_html = HashMap::new();
        to_xml.insert(root.id(), XNode::Root(doc.root()));
        for node in root.descendants().skip(1) {
            let Some(parent) = node.parent().and_then(|p| to_xml.get(&p.id()).copied()) else {
                continue;
            };
            let child = match node.value() {
                scraper::Node::Element(e) => {
                    let el = doc.create_element(e.name());
                    for (name, value) in e.attrs() {
                        el.set_attribute_value(name, value);
                    }
                    XNode::Element(el)
                }
                scraper::Node::Text(t) => XNode::Text(doc.create_text(t)),
                _ => continue,
            };
            match (parent, child) {
                (XNode::Root(r), XNode::Element(el)) => r.append_child(el),
                (XNode::Element(p), XNode::Element(el)) => p.append_child(el),
                (XNode::Element(p), XNode::Text(t)) => p.append_child(t),
                _ => continue,
            }
            if let XNode::Element(_) = child {
                to_xml.insert(node.id(), child);
                to_html.insert(child, node.id());
            }
        }
        Self { to_xml, to_html }
    }
}

/// A parsed page, in the languages its extractor uses.
struct PageTree<'a, 'd> {
    html: &'a Html,
    paths: Evaluator<'a>,
    xml: Option<&'a XmlView<'d>>,
}

/// One node a field's expression selected.
enum Found<'a, 'd> {
    Element(ElementRef<'a>),
    Xml(XNode<'d>),
    Text(String),
}

impl<'a, 'd> PageTree<'a, 'd> {
    fn element(&self, id: NodeId) -> Option<ElementRef<'a>> {
        self.html.tree.get(id).and_then(ElementRef::wrap)
    }

    /// The nodes `expr` selects under `ctx`.
    fn find(
        &self,
        expr: &Compiled,
        ctx: NodeId,
        xpaths: &HashMap<&str, Option<XPath>>,
    ) -> Vec<Found<'a, 'd>> {
        match expr {
            Compiled::Css { selector, names } => match (self.element(ctx), names) {
                (Some(el), _) => el.select(selector).map(Found::Element).collect(),
                (None, Some(names)) => self.named(names),
                (None, None) => self.html.select(selector).map(Found::Element).collect(),
            },
            Compiled::Xpath {
                simple: Some(SimpleXpath::Count(path)),
                ..
            } => {
                let count = self.paths.select(path, ctx).len() as f64;
                vec![Found::Text(count.to_string())]
            }
            Compiled::Xpath {
                simple: Some(SimpleXpath::Nodes(path)),
                ..
            } => self
                .paths
                .select(path, ctx)
                .into_iter()
                .filter_map(|selected| match selected {
                    Selected::Node(id) => match self.element(id) {
                        Some(el) => Some(Found::Element(el)),
                        None => self.paths.text_of(&selected).map(Found::Text),
                    },
                    Selected::Attribute(..) => self.paths.text_of(&selected).map(Found::Text),
                })
                .collect(),
            Compiled::Xpath { text, simple: None } => {
                let (Some(xml), Some(Some(xpath))) = (self.xml, xpaths.get(text.as_str())) else {
                    return Vec::new();
                };
                let Some(&node) = xml.to_xml.get(&ctx) else {
                    return Vec::new();
                };
                match xpath.evaluate(&Context::new(), node) {
                    Ok(XValue::Nodeset(nodes)) => {
                        nodes.document_order().into_iter().map(Found::Xml).collect()
                    }
                    Ok(XValue::String(s)) => vec![Found::Text(s)],
                    Ok(XValue::Number(n)) => vec![Found::Text(n.to_string())],
                    Ok(XValue::Boolean(b)) => vec![Found::Text(b.to_string())],
                    Err(_) => Vec::new(),
                }
            }
        }
    }

    /// The elements named by the last of `names` under elements named by the ones before
    /// (each nearest first: for descendant combinators alone, the nearest match is as good as
    /// any), in document order.
    fn named(&self, names: &[String]) -> Vec<Found<'a, 'd>> {
        let Some((last, outer)) = names.split_last() else {
            return Vec::new();
        };
        self.paths
            .named(last)
            .iter()
            .filter_map(|&id| self.element(id))
            .filter(|el| {
                let mut wanted = outer.iter().rev().peekable();
                for ancestor in el.ancestors() {
                    let Some(name) = wanted.peek() else { break };
                    if ancestor
                        .value()
                        .as_element()
                        .is_some_and(|e| e.name() == name.as_str())
                    {
                        wanted.next();
                    }
                }
                wanted.peek().is_none()
            })
            .map(Found::Element)
            .collect()
    }

    /// The elements a base expression selects: the items' contexts, in document order.
    fn select(
        &self,
        expr: &Compiled,
        ctx: NodeId,
        xpaths: &HashMap<&str, Option<XPath>>,
    ) -> Vec<NodeId> {
        self.find(expr, ctx, xpaths)
            .into_iter()
            .filter_map(|found| match found {
                Found::Element(el) => Some(el.id()),
                Found::Xml(node) => self.xml.and_then(|x| x.to_html.get(&node).copied()),
                Found::Text(_) => None,
            })
            .collect()
    }

    /// What `field` takes of each node it selects under `ctx`, made as it is read (a field
    /// without `join` reads only as far as its first kept value).
    fn values<'f>(
        &'f self,
        field: &'f CompiledField,
        ctx: NodeId,
        xpaths: &HashMap<&str, Option<XPath>>,
    ) -> impl Iterator<Item = String> + 'f {
        let take_element = move |el: ElementRef<'a>| match &field.take {
            Take::Text => Some(el.text().collect::<String>()),
            Take::Html => Some(el.html()),
            Take::Attr(name) => el.value().attr(name).map(str::to_owned),
        };
        self.find(&field.expr, ctx, xpaths)
            .into_iter()
            .filter_map(move |found| match found {
                Found::Element(el) => take_element(el),
                Found::Text(s) => Some(s),
                Found::Xml(node) => match node {
                    XNode::Element(_) => self
                        .xml
                        .and_then(|x| x.to_html.get(&node))
                        .and_then(|&id| self.element(id))
                        .and_then(take_element),
                    XNode::Attribute(a) => Some(a.value().to_owned()),
                    XNode::Text(t) => Some(t.text().to_owned()),
                    other => Some(other.string_value()),
                },
            })
    }
}

#[cfg(test)]
mod tests;
