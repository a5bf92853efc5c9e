//! The built-in analysis of an HTML page (`CrawlConfig::analysis`): its title, description and
//! language, read in one streaming pass (the page is not parsed into a tree for it).

use super::links::decode_entities;
use lol_html::{HtmlRewriter, Settings, element, text};
use std::cell::RefCell;
use trawl_domain::task::PageAnalysis;

/// The raw values, before `PageAnalysis::new` tidies them.
#[derive(Default)]
struct Raw {
    /// The first `<title>`'s text, and whether it ended (an SVG's titles come later).
    title: Option<String>,
    title_done: bool,
    description: Option<String>,
    html_lang: Option<String>,
    declared_language: Option<String>,
}

/// Bytes of a title's text gathered at most: the analysis keeps fewer.
const TITLE_GATHERED: usize = 4 * PageAnalysis::TITLE_BYTES;

/// The analysis of `html`. Markup too broken to parse gives what was read before it.
pub fn analyse(html: &[u8]) -> PageAnalysis {
    let raw = RefCell::new(Raw::default());
    let mut rewriter = HtmlRewriter::new(
        Settings {
            element_content_handlers: vec![
                element!("html[lang]", |el| {
                    raw.borrow_mut().html_lang = el.get_attribute("lang");
                    Ok(())
                }),
                text!("title", |chunk| {
                    let mut raw = raw.borrow_mut();
                    if !raw.title_done {
                        let title = raw.title.get_or_insert_with(String::new);
                        if title.len() < TITLE_GATHERED {
                            title.push_str(chunk.as_str());
                        }
                        raw.title_done = chunk.last_in_text_node();
                    }
                    Ok(())
                }),
                element!("meta[content]", |el| {
                    let content = el.get_attribute("content");
                    let named = |attr: &str, value: &str| {
                        el.get_attribute(attr)
                            .is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
                    };
                    let mut raw = raw.borrow_mut();
                    if named("name", "description") || named("property", "og:description") {
                        raw.description = raw.description.take().or(content);
                    } else if named("http-equiv", "content-language") {
                        raw.declared_language = raw.declared_language.take().or(content);
                    }
                    Ok(())
                }),
            ],
            ..Settings::new()
        },
        |_: &[u8]| {},
    );
    if let Err(e) = rewriter.write(html).and_then(|()| rewriter.end()) {
        tracing::debug!(error = %e, "HTML analysis stopped early");
    }
    // lol_html gives text and attributes as written: character references are decoded here.
    let raw = raw.into_inner();
    let decoded = |value: Option<String>| value.map(|v| decode_entities(&v));
    let (title, description) = (decoded(raw.title), decoded(raw.description));
    PageAnalysis::new(
        title.as_deref(),
        description.as_deref(),
        raw.html_lang.as_deref(),
        raw.declared_language.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_gives_its_title_description_and_language() {
        let page = br#"<!doctype html><html lang="fr-CA"><head>
            <meta charset="utf-8"><meta name="Description" content="Des  chaussures &amp; des bottes">
            <title>Chaussures
              &amp; bottes</title></head>
            <body><svg><title>an icon</title></svg><p>texte</p></body></html>"#;
        let analysis = analyse(page);
        assert_eq!(analysis.title.as_deref(), Some("Chaussures & bottes"));
        assert_eq!(
            analysis.description.as_deref(),
            Some("Des chaussures & des bottes")
        );
        assert_eq!(analysis.language.as_deref(), Some("fr-CA"));
    }

    #[test]
    fn a_page_without_them_gives_none_and_a_declared_language_stands_in() {
        let bare = analyse(b"<p>no head at all");
        assert_eq!(bare, PageAnalysis::default());
        let declared = analyse(
            br#"<html><head><meta http-equiv="Content-Language" content="nl, en">
            <meta property="og:description" content="Open Graph"></head></html>"#,
        );
        assert_eq!(declared.language.as_deref(), Some("nl"));
        assert_eq!(declared.description.as_deref(), Some("Open Graph"));
    }
}
