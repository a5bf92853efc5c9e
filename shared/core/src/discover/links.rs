//! The links of a fetched HTML page (the functions that fetch or extract link this; the sweeper
//! does not).

use lol_html::{HtmlRewriter, Settings, element};
use std::cell::RefCell;
use std::collections::HashSet;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::image::srcset;

/// The links found on one page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    /// Canonical http(s) URLs, first occurrence order, without duplicates or the page itself.
    pub urls: Vec<CanonicalUrl>,
    /// The page asked robots not to follow its links (`<meta name=robots content=nofollow>`);
    /// `urls` is then empty.
    pub nofollow_page: bool,
    /// Its images, when asked for (`Want::images`): every candidate of `<img src>`, `<img
    /// srcset>` and `<source srcset>`, canonical, in the same order and manner as `urls` (a
    /// robots `nofollow` is about links: a page's images are part of it).
    pub images: Vec<CanonicalUrl>,
}

/// What a page is read for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Want {
    pub links: bool,
    pub images: bool,
}

/// What the parser collects before anything is resolved (a `<base>` applies to every link,
/// even those before it).
#[derive(Default)]
struct Raw {
    base: Option<String>,
    hrefs: Vec<String>,
    nofollow_page: bool,
    /// `src` values, and `srcset` values (true).
    images: Vec<(String, bool)>,
}

/// Extracts the links of an HTML page fetched from `page_url`: `<a href>` and `<area href>`,
/// resolved against the first `<base href>` (or the page URL), skipping `rel=nofollow` links,
/// fragment-only links and anything that is not http(s). A robots `nofollow` meta tag yields no
/// links at all.
pub fn extract_links(page_url: &url::Url, html: &[u8]) -> Links {
    scan_page(
        page_url,
        html,
        Want {
            links: true,
            images: false,
        },
    )
}

/// The links (`extract_links`) and images of a page, as `want` asks, in one scan.
pub fn scan_page(page_url: &url::Url, html: &[u8], want: Want) -> Links {
    let raw = RefCell::new(Raw::default());
    let mut rewriter = HtmlRewriter::new(
        Settings {
            element_content_handlers: vec![
                element!("base[href]", |el| {
                    let mut raw = raw.borrow_mut();
                    if raw.base.is_none() {
                        raw.base = el.get_attribute("href").map(|h| decode_entities(&h));
                    }
                    Ok(())
                }),
                element!("a[href], area[href]", |el| {
                    let nofollow = is_nofollow(el.get_attribute("rel").as_deref());
                    if let Some(href) = el.get_attribute("href").filter(|_| !nofollow) {
                        raw.borrow_mut().hrefs.push(decode_entities(&href));
                    }
                    Ok(())
                }),
                element!("meta[name][content]", |el| {
                    if let (Some(name), Some(content)) =
                        (el.get_attribute("name"), el.get_attribute("content"))
                        && is_robots_nofollow(&name, &content)
                    {
                        raw.borrow_mut().nofollow_page = true;
                    }
                    Ok(())
                }),
                element!("img[src], img[srcset], source[srcset]", |el| {
                    if want.images {
                        let mut raw = raw.borrow_mut();
                        if el.tag_name().eq_ignore_ascii_case("img")
                            && let Some(src) = el.get_attribute("src")
                        {
                            raw.images.push((decode_entities(&src), false));
                        }
                        if let Some(set) = el.get_attribute("srcset") {
                            raw.images.push((decode_entities(&set), true));
                        }
                    }
                    Ok(())
                }),
            ],
            ..Settings::new()
        },
        |_: &[u8]| {},
    );
    // A parser error (only the memory limit, on absurd markup) keeps the links found before it.
    if let Err(e) = rewriter.write(html).and_then(|()| rewriter.end()) {
        tracing::warn!(url = %page_url, error = %e, "HTML parsing stopped early");
    }
    resolve(page_url, raw.into_inner(), want)
}

/// The links and images of a page already parsed into a tree (where the page's items are
/// extracted, the extractor's tree serves both): the rules of `scan_page`, read from the tree's
/// elements in document order. The tree's attribute values are decoded already.
#[cfg(feature = "extract")]
pub fn links_in_tree(page_url: &url::Url, tree: &scraper::Html, want: Want) -> Links {
    let mut raw = Raw::default();
    for node in tree.tree.root().descendants() {
        let scraper::Node::Element(el) = node.value() else {
            continue;
        };
        match el.name() {
            "base" if raw.base.is_none() => raw.base = el.attr("href").map(str::to_owned),
            "a" | "area" => {
                if let Some(href) = el.attr("href").filter(|_| !is_nofollow(el.attr("rel"))) {
                    raw.hrefs.push(href.to_owned());
                }
            }
            "meta" => {
                if let (Some(name), Some(content)) = (el.attr("name"), el.attr("content")) {
                    raw.nofollow_page |= is_robots_nofollow(name, content);
                }
            }
            "img" | "source" if want.images => {
                if let Some(src) = el.attr("src").filter(|_| el.name() == "img") {
                    raw.images.push((src.to_owned(), false));
                }
                if let Some(set) = el.attr("srcset") {
                    raw.images.push((set.to_owned(), true));
                }
            }
            _ => {}
        }
    }
    resolve(page_url, raw, want)
}

/// Whether a link's `rel` asks robots not to follow it.
fn is_nofollow(rel: Option<&str>) -> bool {
    rel.is_some_and(|rel| {
        rel.split_ascii_whitespace()
            .any(|t| t.eq_ignore_ascii_case("nofollow"))
    })
}

/// Whether `<meta name content>` asks robots not to follow the page's links.
fn is_robots_nofollow(name: &str, content: &str) -> bool {
    name.trim().eq_ignore_ascii_case("robots")
        && content.split(',').any(|d| {
            let d = d.trim();
            d.eq_ignore_ascii_case("nofollow") || d.eq_ignore_ascii_case("none")
        })
}

fn resolve(page_url: &url::Url, raw: Raw, want: Want) -> Links {
    let base = raw
        .base
        .as_ref()
        .and_then(|href| CanonicalUrl::join(page_url, href).ok())
        .map_or_else(|| page_url.clone(), |b| b.as_url().clone());
    let own = CanonicalUrl::join(page_url, "").ok();
    let resolved = |written: &mut dyn Iterator<Item = &str>| -> Vec<CanonicalUrl> {
        let mut seen = HashSet::new();
        written
            .filter(|href| !href.trim_start().starts_with('#'))
            .filter_map(|href| CanonicalUrl::join(&base, href).ok())
            .filter(|url| own.as_ref() != Some(url))
            .filter(|url| seen.insert(url.clone()))
            .collect()
    };
    let images =
        match want.images {
            true => resolved(&mut raw.images.iter().flat_map(
                |(value, is_srcset)| match is_srcset {
                    true => srcset(value).into_iter().map(|c| c.url).collect(),
                    false => vec![value.as_str()],
                },
            )),
            false => Vec::new(),
        };
    let urls = match (want.links, raw.nofollow_page) {
        (true, false) => resolved(&mut raw.hrefs.iter().map(String::as_str)),
        _ => Vec::new(),
    };
    Links {
        urls,
        nofollow_page: raw.nofollow_page,
        images,
    }
}

/// Decodes the character references found in attribute values and text (`&amp;` above all,
/// numeric ones, and the few other named ones seen in hrefs and titles); lol_html hands them
/// over undecoded.
/// Anything unrecognised is kept as written, as browsers do.
pub(super) fn decode_entities(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest.find(';').filter(|&end| end <= 12).and_then(|end| {
            let name = &rest[1..end];
            let c = match name {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some('\u{a0}'),
                _ => {
                    let number = name.strip_prefix('#')?;
                    let code = match number.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok(),
                        None => number.parse().ok(),
                    };
                    code.and_then(char::from_u32)
                }
            };
            c.map(|c| (c, end + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page's links, checked to be the same read by lol_html and from the extractor's tree.
    fn links(page: &str, html: &str) -> Vec<String> {
        let page = url::Url::parse(page).unwrap();
        let found = extract_links(&page, html.as_bytes());
        #[cfg(feature = "extract")]
        assert_eq!(
            found,
            links_in_tree(
                &page,
                &scraper::Html::parse_document(html),
                Want {
                    links: true,
                    images: false
                }
            ),
            "both parsers find the same links"
        );
        found.urls.iter().map(|u| u.as_str().to_owned()).collect()
    }

    /// The page's images, checked to be the same read by lol_html and from the extractor's
    /// tree, and read without its links.
    fn images(page: &str, html: &str) -> Vec<String> {
        let page = url::Url::parse(page).unwrap();
        let want = Want {
            links: false,
            images: true,
        };
        let found = scan_page(&page, html.as_bytes(), want);
        assert!(found.urls.is_empty());
        #[cfg(feature = "extract")]
        assert_eq!(
            found,
            links_in_tree(&page, &scraper::Html::parse_document(html), want),
            "both parsers find the same images"
        );
        found.images.iter().map(|u| u.as_str().to_owned()).collect()
    }

    #[test]
    fn images_are_every_src_and_srcset_candidate_resolved_and_deduplicated() {
        let html = r#"<html><head><base href="/shop/"><meta name="robots" content="nofollow"></head><body>
            <img src="a.png" srcset="a.png 1x, a@2x.png 2x"> <img src="//cdn.example/b.jpg?x=1&amp;y=2">
            <picture><source srcset="c.webp 480w, c-big.webp 960w" type="image/webp"><img src="c.jpg"></picture>
            <img src="data:image/png;base64,AAAA"> <img alt="none"> <img src="ftp://x/y.png">
            <video><source src="v.mp4"></video> <a href="page.html">a link</a>
        </body></html>"#;
        assert_eq!(
            images("http://shop.example/p/1", html),
            [
                "http://shop.example/shop/a.png",
                "http://shop.example/shop/a@2x.png",
                "http://cdn.example/b.jpg?x=1&y=2",
                "http://shop.example/shop/c.webp",
                "http://shop.example/shop/c-big.webp",
                "http://shop.example/shop/c.jpg",
            ]
        );
        // Links alone read no image; a robots nofollow takes the links, not the images.
        let page = url::Url::parse("http://shop.example/p/1").unwrap();
        assert!(extract_links(&page, html.as_bytes()).images.is_empty());
        let both = Want {
            links: true,
            images: true,
        };
        let found = scan_page(&page, html.as_bytes(), both);
        assert!(found.nofollow_page && found.urls.is_empty());
        assert_eq!(found.images.len(), 6);
    }

    #[test]
    fn links_are_resolved_canonical_and_deduplicated() {
        let html = r##"<html><body>
            <a href="b.html">rel</a> <a href="/c?x=1#frag">abs path</a>
            <a href="HTTP://Other.example:80/d">abs</a> <a href="b.html#again">dup</a>
            <a href="#top">fragment</a> <a href="">self</a> <a href="mailto:x@example.com">m</a>
            <a href="javascript:void(0)">js</a> <a href="http://[::1">bad</a>
            <map><area href="e.html"></map> <a>no href</a>
            <a href="f.html" rel="external NoFollow">nf</a>
        </body></html>"##;
        assert_eq!(
            links("http://example.com/a/index.html", html),
            [
                "http://example.com/a/b.html",
                "http://example.com/c?x=1",
                "http://other.example/d",
                "http://example.com/a/e.html",
            ]
        );
    }

    #[test]
    fn character_references_in_hrefs_are_decoded() {
        assert_eq!(
            decode_entities("/p?a=1&amp;b=2&#38;c=3&#x26;d"),
            "/p?a=1&b=2&c=3&d"
        );
        assert_eq!(decode_entities("/a&b&unknown;&amp"), "/a&b&unknown;&amp");
        assert_eq!(decode_entities("/caf&#233;"), "/café");
        let html = r#"<base href="/x/?q=1&amp;r=2"><a href="y?a=1&amp;b=2">y</a>"#;
        assert_eq!(
            links("http://example.com/", html),
            ["http://example.com/x/y?a=1&b=2"]
        );
    }

    #[test]
    fn the_first_base_applies_to_every_link() {
        let html = r#"<a href="early.html">e</a><head><base href="/docs/"><base href="/ignored/"></head>
            <a href="x.html">x</a>"#;
        assert_eq!(
            links("http://example.com/a/b", html),
            [
                "http://example.com/docs/early.html",
                "http://example.com/docs/x.html"
            ]
        );
    }

    #[test]
    fn robots_meta_nofollow_yields_no_links() {
        let page = url::Url::parse("http://example.com/").unwrap();
        for content in ["noindex, NOFOLLOW", "none"] {
            let html = format!(r#"<meta name="Robots" content="{content}"><a href="/x">x</a>"#);
            let found = extract_links(&page, html.as_bytes());
            assert!(found.nofollow_page, "{content}");
            assert!(found.urls.is_empty());
            #[cfg(feature = "extract")]
            assert_eq!(
                links_in_tree(
                    &page,
                    &scraper::Html::parse_document(&html),
                    Want {
                        links: true,
                        images: false
                    }
                ),
                found
            );
        }
        let html = r#"<meta name="robots" content="noindex"><a href="/x">x</a>"#;
        assert_eq!(links(page.as_str(), html).len(), 1);
    }
}
