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
    /// Both readings of `html` (links and images), as the crawler gets them: lol_html's scan
    /// and the extractor's tree.
    #[cfg(feature = "extract")]
    fn both(page: &url::Url, html: &str) -> (Links, Links) {
        let want = Want {
            links: true,
            images: true,
        };
        let stream = scan_page(page, html.as_bytes(), want);
        let tree = links_in_tree(page, &crate::extract::parse(html.as_bytes()), want);
        (stream, tree)
    }

    #[cfg(feature = "extract")]
    fn urls(found: &[CanonicalUrl]) -> Vec<&str> {
        found.iter().map(CanonicalUrl::as_str).collect()
    }

    /// The integration tests' fixture pages (`tests/site.rs`), a page of the bench's site, and
    /// markup that is broken in the ways pages are: both readings agree, link for link.
    #[cfg(feature = "extract")]
    #[test]
    fn the_tree_and_the_stream_read_the_same_links_and_images() {
        let page = url::Url::parse("http://127.0.0.1:8080/index.html").unwrap();
        let bench_page = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Page 7</title></head>\
             <body><h1>Page 7</h1><nav>{}</nav>{}</body></html>\n",
            [15, 16, 3, 4091, 12]
                .map(|j| format!("<a href=\"/p/{j}.html\">Page {j}</a> "))
                .concat(),
            "<p>lambda queue crawler frontier </p>\n".repeat(40),
        );
        let pages = [
            // tests/site.rs: the fixture's index, its base page, its stalled and tiny pages
            r##"<!doctype html><html><head><title>index</title></head><body>
            <a href="page1.html">relative</a>
            <a href="http://127.0.0.1:8080/page2.html">absolute</a>
            <a href="#section">fragment only</a>
            <a href="page1.html#part">duplicate with fragment</a>
            <a href="/page2.html?b=2&amp;a=1">query</a>
            <a href="http://offsite.example/away">off scope</a>
            <a href="http://127.0.0.1:8081/secret">internal host</a>
            <a href="http://169.254.169.254/latest/meta-data/">metadata</a>
            <a href="/private/page.html">robots-disallowed</a>
            <a href="/page3.html" rel="nofollow">nofollow</a>
            </body></html>"##,
            r#"<head><base href="/docs/"></head><a href="a.html">a</a><a href="../b.html">b</a>"#,
            "<html><body><p>the rest never comes",
            "<p>page 1</p>",
            "",
            &bench_page,
            // Unclosed, misnested and stray markup
            r#"<a href="/1"><p>para</a> <a href="/2">2<a href="/3">3</a>"#,
            r#"<p><a href="/1">one<table><tr><td><a href="/2">2</td></tr></table>"#,
            r#"<table><a href="/1">fostered</a><tr><td><a href="/2">2</a></td></tr></table>"#,
            r#"<a href="/1">x</a></body></html><a href="/2">after the end</a>"#,
            r#"<b><i><a href="/1">x</b></i><div><a href="/2"></div>"#,
            r#"<ul><li><a href=/1>one<li><a href=/2>two</ul><dl><dt><a href=/3></dl>"#,
            // Tags cut off, attributes written every way
            r#"<a href="/1"<a href="/2">x</a><a href="/3"#,
            r#"<A HREF=/1>u</A><a href='/2'>q</a><a href=/3 >v</a><a href=/4/>w</a><a  href = "/5" >s</a>"#,
            r#"<a href="/1" href="/2">dup</a><a rel=nofollow href=/3 rel=follow>n</a><a rel="NOFOLLOW" href=/4>"#,
            "<a href=\"\t/1\n\">ws</a><a href=\" /2 \">sp</a><a href=\"\">empty</a><a href>bare</a>",
            // Where a tag is text: comments, raw text and RCDATA, foreign content
            r#"<a href="/1">x<!-- <a href="/2"> --><![CDATA[<a href="/3">]]><?php <a href="/4"> ?></a>"#,
            r#"<textarea><a href="/1"></textarea><title><a href="/2"></title><style><a href="/3"></style><script><a href="/4"></script><xmp><a href="/5"></xmp><iframe><a href="/6"></iframe><noembed><a href="/7"></noembed><noframes><a href="/8"></noframes><a href="/9">"#,
            r#"<script><!--<script></script><a href="/1"></script><a href="/2">x</a>"#,
            r#"<a href="/1">x</a><plaintext><a href="/2">y</a>"#,
            r#"<a href="/1">x</a><noscript><a href="/2">n</a></noscript>"#,
            r#"<template><a href="/1">t</a></template><select><option><a href="/2">s</a></select>"#,
            r#"<svg><a href="/1">s</a><a xlink:href="/2">x</a></svg><math><a href="/3">m</a></math>"#,
            // Base, robots and images in odd places
            r#"<a href="x">e</a><body><base href="/d/"><base href="/e/"><a href="y">y</a>"#,
            r#"<body><a href="/1">x</a><META NAME="ROBOTS" CONTENT="noindex,nofollow"></body>"#,
            r#"<img src="a.png" srcset="a.png 1x, b.png 2x"><picture><source srcset="c.webp"><img src=d.jpg></picture><img>"#,
            // Character references the stream's decoding knows
            r#"<a href="/p?a=1&amp;b=2&#38;c=3&#x26;d">r</a><a href="/caf&#233;">e</a><a href="/&lt;&gt;&quot;&apos;">n</a>"#,
        ];
        for html in pages {
            let (stream, tree) = both(&page, html);
            assert_eq!(stream, tree, "{html}");
        }
        let (found, _) = both(&page, pages[0]);
        assert_eq!(found.urls.len(), 7, "the fixture's index gives its links");
        let (found, _) = both(&page, &bench_page);
        assert_eq!(found.urls.len(), 5, "the bench's page gives its links");
    }

    /// Where the two readings part: markup that the HTML tree builder rearranges or reads as a
    /// browser does, and the stream cannot. The crawler reads an extracted page's links from
    /// its tree, so on such a page they are a browser's links; any other page's are the
    /// stream's.
    #[cfg(feature = "extract")]
    #[test]
    fn the_tree_reads_broken_markup_as_a_browser_does() {
        let page = url::Url::parse("http://example.com/a/b.html").unwrap();
        // A link the table builder fosters out of the table comes before the table's links.
        let (stream, tree) = both(
            &page,
            r#"<table><tr><td><a href="/1">1</a></td></tr><a href="/2">2</a></table>"#,
        );
        assert_eq!(
            urls(&stream.urls),
            ["http://example.com/1", "http://example.com/2"]
        );
        assert_eq!(
            urls(&tree.urls),
            ["http://example.com/2", "http://example.com/1"]
        );
        // The tree decodes every character reference as HTML has it (named ones without their
        // `;`, numeric ones mapped or replaced); the stream decodes the few hrefs use.
        let (stream, tree) = both(
            &page,
            r#"<a href="/caf&eacute;">e</a><a href="/?b&amp">a</a><a href="/&#x80;">c</a><a href="/&#0;">z</a>"#,
        );
        assert_eq!(
            urls(&stream.urls),
            [
                "http://example.com/caf&eacute;",
                "http://example.com/?amp&b",
                "http://example.com/%C2%80",
                "http://example.com/"
            ]
        );
        assert_eq!(
            urls(&tree.urls),
            [
                "http://example.com/caf%C3%A9",
                "http://example.com/?b",
                "http://example.com/%E2%82%AC",
                "http://example.com/%EF%BF%BD"
            ]
        );
        // A NUL in a value is U+FFFD in the tree.
        let (stream, tree) = both(&page, "<a href=\"/1\0x\">n</a>");
        assert_eq!(urls(&stream.urls), ["http://example.com/1%00x"]);
        assert_eq!(urls(&tree.urls), ["http://example.com/1%EF%BF%BDx"]);
        // A frameset page has no body: what follows it is dropped.
        let (stream, tree) = both(
            &page,
            r#"<frameset><frame src="/1"></frameset><a href="/2">x</a>"#,
        );
        assert_eq!(urls(&stream.urls), ["http://example.com/2"]);
        assert!(tree.urls.is_empty());
        // `<image>` is an `<img>`.
        let (stream, tree) = both(&page, r#"<image src="/i.png"><img src="/c.png">"#);
        assert_eq!(urls(&stream.images), ["http://example.com/c.png"]);
        assert_eq!(
            urls(&tree.images),
            ["http://example.com/i.png", "http://example.com/c.png"]
        );
    }
}
