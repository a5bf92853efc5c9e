//! Pagination templates (Django Dynamic Scraper's, and Docido's open-ended paging): a URL with
//! `{page}` and the values it takes, and the rule that decides, page by page, whether an
//! open-ended template goes on.
//!
//! A template is one of:
//! - a range: `start`/`stop`/`step` (Python's `range`: `stop` excluded, `step` default 1, may be
//!   negative), all its pages seeded at once;
//! - a free list: `values`, all seeded at once;
//! - open-ended: no `stop` and no `values`. Only its first page (`start`, default 1) is seeded;
//!   each page once fetched decides the next ([`next_page`]): it goes on while the page yields
//!   something by the template's rule (`while`: new links, the default; items; or a body) and
//!   stops at the first page that yields nothing, or at its cap (`max_pages`, default
//!   [`DEFAULT_OPEN_PAGES`]). The next page is seeded by the worker that fetched the page, before
//!   that page's fenced finish, with the idempotent seed of links: a retried or duplicated turn
//!   finds it already known and seeds nothing twice.
//!
//! A template may also hold `{since}`: the crawl's checkpoint as the seed found it
//! (percent-encoded; empty when the crawl has none), Docido's `since`. An open-ended template's
//! later pages carry the `since` of its first.

use crate::canonical::CanonicalUrl;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The placeholder every template holds (in its path or query: never in the host).
pub const PAGE: &str = "{page}";
/// The placeholder of the crawl's checkpoint (optional).
pub const SINCE: &str = "{since}";
/// Most pages one template may expand to (a range or a list), or its cap (open-ended).
pub const MAX_PAGES_PER_TEMPLATE: u64 = 1_000_000;
/// The cap of an open-ended template that names none.
pub const DEFAULT_OPEN_PAGES: u64 = 1_000;

/// A URL template and the values its `{page}` takes (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageTemplate {
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// Open-ended only: the most pages it goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pages: Option<u64>,
    /// Open-ended only: what a page must yield for the next one to be fetched.
    #[serde(rename = "while", default, skip_serializing_if = "Option::is_none")]
    pub yields: Option<Yield>,
}

/// What an open-ended template's page must yield for the next page to be fetched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Yield {
    /// Links in the crawl's scope that it did not know yet (pages of the template itself not
    /// counted).
    #[default]
    NewLinks,
    /// Items of the crawl's extractors.
    Items,
    /// A body by [`body_yields`]: not blank, and for JSON not empty.
    Body,
}

impl Yield {
    pub fn name(self) -> &'static str {
        match self {
            Yield::NewLinks => "new_links",
            Yield::Items => "items",
            Yield::Body => "body",
        }
    }
}

/// A template that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error("template {0:?} has no {PAGE}")]
    NoPlaceholder(String),
    #[error("template {0:?} is not an absolute http(s) URL")]
    NotAbsolute(String),
    #[error("template {0:?} has a placeholder in its host")]
    PlaceholderInHost(String),
    #[error("template {0:?}: {PAGE} and {SINCE} must be apart (something between them)")]
    Adjacent(String),
    #[error("template {0:?}: step must not be 0")]
    ZeroStep(String),
    #[error(
        "template {0:?}: give start and stop (and optionally step), or values, or neither stop \
         nor values for open-ended paging (start, max_pages, while)"
    )]
    Shape(String),
    #[error(
        "template {0:?}: max_pages and while are for open-ended templates (without stop or values)"
    )]
    OpenOnly(String),
    #[error("template {0:?} expands to no page")]
    Empty(String),
    #[error("template {template:?} expands to {count} pages (at most {MAX_PAGES_PER_TEMPLATE})")]
    TooMany { template: String, count: u64 },
}

/// Percent-encodes a value put in a URL (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl PageTemplate {
    /// An open-ended template from `start` (1 if None), with the defaults.
    pub fn open(template: impl Into<String>, start: Option<i64>) -> Self {
        Self {
            template: template.into(),
            start,
            stop: None,
            step: None,
            values: None,
            max_pages: None,
            yields: None,
        }
    }

    /// Whether only its first page is seeded, the next ones decided page by page.
    pub fn is_open(&self) -> bool {
        self.stop.is_none() && self.values.is_none()
    }

    fn step(&self) -> i64 {
        self.step.unwrap_or(1)
    }

    fn first(&self) -> i64 {
        self.start.unwrap_or(1)
    }

    /// The rule of an open-ended template.
    pub fn rule(&self) -> Yield {
        self.yields.unwrap_or_default()
    }

    /// The pages an open-ended template goes to at most.
    pub fn cap(&self) -> u64 {
        self.max_pages.unwrap_or(DEFAULT_OPEN_PAGES)
    }

    /// Checks the template; returns how many pages it expands to (open-ended: its cap).
    pub fn validate(&self) -> Result<u64, TemplateError> {
        let name = || self.template.clone();
        let Some(at) = self.template.find(PAGE) else {
            return Err(TemplateError::NoPlaceholder(name()));
        };
        // The placeholders must come after the authority: a host never varies per page.
        let authority_end = self
            .template
            .find("://")
            .map(|s| {
                let rest = &self.template[s + 3..];
                s + 3 + rest.find(['/', '?', '#']).unwrap_or(rest.len())
            })
            .ok_or_else(|| TemplateError::NotAbsolute(name()))?;
        let since_at = self.template.find(SINCE);
        if at < authority_end || since_at.is_some_and(|s| s < authority_end) {
            return Err(TemplateError::PlaceholderInHost(name()));
        }
        if self.template.contains(&format!("{PAGE}{SINCE}"))
            || self.template.contains(&format!("{SINCE}{PAGE}"))
        {
            return Err(TemplateError::Adjacent(name()));
        }
        if self.step == Some(0) {
            return Err(TemplateError::ZeroStep(name()));
        }
        let open_settings = self.max_pages.is_some() || self.yields.is_some();
        let closed = |count: u64| {
            if open_settings {
                Err(TemplateError::OpenOnly(name()))
            } else {
                Ok(count)
            }
        };
        let count = match (&self.values, self.start, self.stop) {
            (Some(values), None, None) if self.step.is_none() => closed(values.len() as u64)?,
            (None, Some(start), Some(stop)) => closed(range_len(start, stop, self.step()))?,
            (None, _, None) => self.cap(),
            _ => return Err(TemplateError::Shape(name())),
        };
        if count == 0 {
            return Err(TemplateError::Empty(name()));
        }
        if count > MAX_PAGES_PER_TEMPLATE {
            return Err(TemplateError::TooMany {
                template: name(),
                count,
            });
        }
        // Every page must be a URL: the first one stands for them all.
        if self
            .page(0, None)
            .is_none_or(|url| CanonicalUrl::parse(&url).is_err())
        {
            return Err(TemplateError::NotAbsolute(name()));
        }
        Ok(count)
    }

    /// How many pages a seed of the template seeds: all of a range or a list, the first of an
    /// open-ended one.
    pub fn seeded_pages(&self) -> u64 {
        if self.is_open() {
            1
        } else {
            self.validate().unwrap_or(0)
        }
    }

    /// The `{page}` value of the `index`-th page (None past the end, or the cap).
    fn value(&self, index: u64) -> Option<String> {
        if let Some(values) = &self.values {
            return values.get(usize::try_from(index).ok()?).cloned();
        }
        let len = match self.stop {
            Some(stop) => range_len(self.first(), stop, self.step()),
            None => self.cap(),
        };
        if index >= len {
            return None;
        }
        let v = i128::from(self.first()) + i128::from(index) * i128::from(self.step());
        Some(v.to_string())
    }

    /// The URL of the `index`-th page with `since` (the crawl's checkpoint) in `{since}`; None
    /// past the end.
    pub fn page(&self, index: u64, since: Option<&str>) -> Option<String> {
        let value = self.value(index)?;
        let since = encode(since.unwrap_or_default());
        Some(self.template.replace(PAGE, &value).replace(SINCE, &since))
    }
}

/// Length of Python's `range(start, stop, step)` (step ≠ 0).
fn range_len(start: i64, stop: i64, step: i64) -> u64 {
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    let len = if step > 0 {
        (stop - start + step - 1) / step
    } else {
        (start - stop - step - 1) / -step
    };
    u64::try_from(len.max(0)).unwrap_or(u64::MAX)
}

/// A piece of a template in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Page,
    Since,
}

/// Markers standing for the placeholders while a template is canonicalised: lower-case
/// letters, which canonicalisation keeps as they are.
const PAGE_MARK: &str = "trawlpagemark";
const SINCE_MARK: &str = "trawlsincemark";

/// An open-ended template as the canonical URLs of its pages read: which task URL is its page,
/// and the URL of the page after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePattern {
    template: PageTemplate,
    pieces: Vec<Piece>,
}

/// A task URL recognised as the `index`-th page of a template, with the `since` it carries (as
/// in the URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageOf {
    pub index: u64,
    pub since: String,
}

impl PagePattern {
    /// The pattern of `template` (open-ended, valid), whose URLs `normalise` turns into task
    /// URLs (the crawl's scope drops parameters).
    pub fn new(
        template: &PageTemplate,
        normalise: impl Fn(CanonicalUrl) -> CanonicalUrl,
    ) -> Result<Self, TemplateError> {
        template.validate()?;
        let marked = template
            .template
            .replace(PAGE, PAGE_MARK)
            .replace(SINCE, SINCE_MARK);
        let canonical = CanonicalUrl::parse(&marked)
            .map(normalise)
            .map_err(|_| TemplateError::NotAbsolute(template.template.clone()))?;
        let mut pieces = Vec::new();
        let mut rest = canonical.as_str();
        loop {
            let next = [(PAGE_MARK, Piece::Page), (SINCE_MARK, Piece::Since)]
                .into_iter()
                .filter_map(|(mark, piece)| rest.find(mark).map(|at| (at, mark, piece)))
                .min_by_key(|(at, _, _)| *at);
            let Some((at, mark, piece)) = next else {
                if !rest.is_empty() {
                    pieces.push(Piece::Literal(rest.to_owned()));
                }
                break;
            };
            if at > 0 {
                pieces.push(Piece::Literal(rest[..at].to_owned()));
            }
            pieces.push(piece);
            rest = &rest[at + mark.len()..];
        }
        if !pieces.contains(&Piece::Page) {
            // Dropped by the scope's parameter rules: no task URL can be a page of it.
            return Err(TemplateError::NoPlaceholder(template.template.clone()));
        }
        Ok(Self {
            template: template.clone(),
            pieces,
        })
    }

    pub fn template(&self) -> &PageTemplate {
        &self.template
    }

    /// Which page of the template `url` (a task URL) is, if it is one.
    pub fn page_of(&self, url: &str) -> Option<PageOf> {
        let mut rest = url;
        let mut page = None;
        let mut since = String::new();
        for (i, piece) in self.pieces.iter().enumerate() {
            match piece {
                Piece::Literal(literal) => rest = rest.strip_prefix(literal.as_str())?,
                Piece::Page => {
                    let sign = usize::from(rest.starts_with('-'));
                    let digits = rest[sign..]
                        .find(|c: char| !c.is_ascii_digit())
                        .unwrap_or(rest.len() - sign);
                    if digits == 0 {
                        return None;
                    }
                    page = Some(rest[..sign + digits].parse::<i64>().ok()?);
                    rest = &rest[sign + digits..];
                }
                Piece::Since => {
                    let end = match self.pieces.get(i + 1) {
                        Some(Piece::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    // A since is percent-encoded: a separator ends it.
                    if rest[..end].contains(['&', '?', '#', '/']) {
                        return None;
                    }
                    since = rest[..end].to_owned();
                    rest = &rest[end..];
                }
            }
        }
        if !rest.is_empty() {
            return None;
        }
        let offset = i128::from(page?) - i128::from(self.template.first());
        let step = i128::from(self.template.step());
        if offset % step != 0 {
            return None;
        }
        let index = u64::try_from(offset / step).ok()?;
        (index < self.template.cap()).then_some(PageOf { index, since })
    }

    /// The URL of the `index`-th page carrying `since` as it stands in the URLs.
    fn url(&self, index: u64, since: &str) -> Option<String> {
        let value = self.template.value(index)?;
        Some(
            self.pieces
                .iter()
                .map(|piece| match piece {
                    Piece::Literal(literal) => literal.as_str(),
                    Piece::Page => value.as_str(),
                    Piece::Since => since,
                })
                .collect(),
        )
    }
}

/// What a fetched page of an open-ended template yielded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageYield {
    /// In-scope links it had that the crawl did not know (the template's own pages apart).
    pub new_links: u64,
    /// Items its extractor took out of it.
    pub items: u64,
    /// Whether its body yields (`body_yields`).
    pub body: bool,
}

/// Why an open-ended template stopped at a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum PagingStop {
    /// The page yielded nothing by the template's rule.
    NothingYielded { rule: Yield },
    /// The page was the template's last allowed one.
    Cap { max_pages: u64 },
}

/// What follows a fetched page of an open-ended template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageStep {
    /// Fetch this page next (its URL, in canonical form).
    Next(String),
    Stop(PagingStop),
}

/// The rule: after the page `at` of `pattern`'s template, which yielded `yielded`, the next
/// page, or why there is none. The cap comes first: a page at the cap ends the template
/// whatever it yielded.
pub fn next_page(pattern: &PagePattern, at: &PageOf, yielded: PageYield) -> PageStep {
    let template = &pattern.template;
    let rule = template.rule();
    let yields = match rule {
        Yield::NewLinks => yielded.new_links > 0,
        Yield::Items => yielded.items > 0,
        Yield::Body => yielded.body,
    };
    let next = at.index.saturating_add(1);
    match pattern.url(next, &at.since) {
        None => PageStep::Stop(PagingStop::Cap {
            max_pages: template.cap(),
        }),
        Some(_) if !yields => PageStep::Stop(PagingStop::NothingYielded { rule }),
        Some(url) => PageStep::Next(url),
    }
}

/// Whether a body yields something: not blank, and when it is JSON, not `null`, `[]` or `{}`,
/// nor an object whose arrays are all empty (`{"results": [], "page": 21}`); a JSON object
/// without any array yields when it has a field.
pub fn body_yields(body: &[u8]) -> bool {
    if body.iter().all(u8::is_ascii_whitespace) {
        return false;
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Err(_) => true,
        Ok(serde_json::Value::Null) => false,
        Ok(serde_json::Value::Array(a)) => !a.is_empty(),
        Ok(serde_json::Value::Object(o)) => {
            let arrays: Vec<bool> = o
                .values()
                .filter_map(|v| v.as_array().map(|a| !a.is_empty()))
                .collect();
            if arrays.is_empty() {
                !o.is_empty()
            } else {
                arrays.into_iter().any(|full| full)
            }
        }
        Ok(_) => true,
    }
}

/// How a chain of an open-ended template ended, read from its last page's task: what its
/// fetch recorded, or its failure (a 404 past the end is the source saying "no more"), or,
/// when it went on, a next page the crawl did not take (its page budget, its scope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ChainEnd {
    NothingYielded {
        rule: Yield,
    },
    Cap {
        max_pages: u64,
    },
    /// The last page was given up or gone: `status` and the kind of its last error.
    Failed {
        status: String,
        error: Option<String>,
    },
    /// The last page asked for a next one that is not a task of the crawl.
    NotSeeded,
    /// The last page is not done yet (a delivery of a crawl still running).
    Unfinished,
}

/// The end of a chain whose last page has `status` (its name), the `stop` its fetch recorded
/// and `error`, the kind of its last error.
pub fn chain_end(status: &str, stop: Option<PagingStop>, error: Option<String>) -> ChainEnd {
    match (status, stop) {
        ("ignored" | "gone", _) => ChainEnd::Failed {
            status: status.to_owned(),
            error,
        },
        (_, Some(PagingStop::NothingYielded { rule })) => ChainEnd::NothingYielded { rule },
        (_, Some(PagingStop::Cap { max_pages })) => ChainEnd::Cap { max_pages },
        ("succeeded", None) => ChainEnd::NotSeeded,
        _ => ChainEnd::Unfinished,
    }
}

#[cfg(test)]
mod tests;
