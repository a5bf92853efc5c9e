//! Discovering: the links of a fetched HTML page, and the crawl scope they must fall in.

#[cfg(feature = "html")]
mod analysis;
#[cfg(feature = "html")]
mod links;
mod scope;
#[cfg(feature = "text")]
mod text;

#[cfg(feature = "html")]
pub use analysis::analyse;
#[cfg(feature = "extract")]
pub use links::links_in_tree;
#[cfg(feature = "html")]
pub use links::{Links, Want, extract_links, scan_page};
pub use scope::{OutOfScopeReason, ScopeError, ScopeMatcher};
#[cfg(feature = "text")]
pub use text::{analyse_body, html_text, pdf_text};

/// Media types stored and parsed for links without being listed in `store_content_types`.
const HTML_TYPES: [&str; 2] = ["text/html", "application/xhtml+xml"];

/// Whether a `Content-Type` names HTML (the pages whose links are followed and whose items are
/// extracted).
pub fn is_html_type(content_type: &str) -> bool {
    HTML_TYPES.contains(&media_type(content_type).as_str())
}

/// `text/html; charset=utf-8` → `text/html`.
pub(crate) fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}
