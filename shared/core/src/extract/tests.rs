use super::*;
use serde_json::json;

const LISTING: &str = r#"<html><body><ul>
  <li class="item"><a href="/item/1">  First
     thing </a><span class="price">1,234.50 €</span><time>03.02.2026</time></li>
  <li class="item"><a href="/item/2">Second</a><span class="price">n/a</span></li>
  <li class="item"><span class="price">7</span></li>
</ul><a class="next" href="?page=2">next</a></body></html>"#;

fn extractors(defs: serde_json::Value) -> Result<Extractors, ExtractConfigError> {
    let defs: Vec<Extractor> = serde_json::from_value(defs).unwrap();
    Extractors::new(&defs)
}

fn listing(base: serde_json::Value, title: serde_json::Value) -> serde_json::Value {
    json!([{
        "name": "news", "match": "/list",
        "base": base,
        "fields": {
            "title": title,
            "url": {"xpath": ".//a/@href", "processors": ["absolute_url"]},
            "price": {"css": "span.price", "processors": ["number"]},
            "date": {"css": "time", "processors": [{"date": "%d.%m.%Y"}, {"default": "unknown"}]},
            "id": {"css": "a", "value": "attr(href)", "regex": "/item/(\\d+)", "processors": ["number"]}
        }
    }])
}

#[test]
fn css_and_xpath_bases_find_the_same_items_with_processed_fields() {
    let page = url::Url::parse("http://shop.test/list?page=1").unwrap();
    let css = extractors(listing(
        json!({"css": "li.item"}),
        json!({"css": "a", "processors": ["trim", "required"]}),
    ))
    .unwrap();
    let xpath = extractors(listing(
        json!({"xpath": "//li[@class='item']"}),
        json!({"xpath": "a/text()", "processors": ["trim", "required"]}),
    ))
    .unwrap();
    for rules in [css, xpath] {
        let extractor = rules.for_url(page.as_str()).unwrap();
        let found = extractor.extract(LISTING.as_bytes(), &page);
        assert_eq!(found.extractor, "news");
        assert_eq!(found.items.len(), 3);
        let first = &found.items[0];
        assert_eq!(first.fields["title"], json!("First thing"));
        assert_eq!(first.fields["url"], json!("http://shop.test/item/1"));
        assert_eq!(first.fields["price"], json!(1234.5));
        assert_eq!(first.fields["date"], json!("2026-02-03"));
        assert_eq!(first.fields["id"], json!(1));
        assert!(first.is_valid());
        // A price that is no number is an error; a missing date takes its default.
        let second = &found.items[1];
        assert_eq!(second.fields["price"], json!(null));
        assert_eq!(second.fields["date"], json!("unknown"));
        assert_eq!(second.errors[0].field, "price");
        // A required title missing makes the item invalid, still kept.
        let third = &found.items[2];
        assert_eq!(third.fields["price"], json!(7));
        assert!(
            third
                .errors
                .iter()
                .any(|e| e.field == "title" && e.error.contains("required")),
            "{third:?}"
        );
    }
    assert!(
        extractors(listing(json!({"css": "li"}), json!({"css": "a"})))
            .unwrap()
            .for_url("http://shop.test/item/1")
            .is_none()
    );
}

#[test]
fn a_page_without_base_is_one_item_and_html_and_join_work() {
    let rules = extractors(json!([{
        "name": "page",
        "fields": {
            "body": {"xpath": "//span[@class='price']", "value": "html", "processors": [{"join": "|"}]},
            "count": {"xpath": "count(//li)", "processors": ["number"]}
        }
    }]))
    .unwrap();
    let page = url::Url::parse("http://shop.test/").unwrap();
    let found = rules
        .for_url("http://shop.test/")
        .unwrap()
        .extract(LISTING.as_bytes(), &page);
    assert_eq!(found.items.len(), 1);
    assert_eq!(
        found.items[0].fields["body"],
        json!(
            "<span class=\"price\">1,234.50 €</span>|<span class=\"price\">n/a</span>|<span class=\"price\">7</span>"
        )
    );
    assert_eq!(found.items[0].fields["count"], json!(3));
}

#[test]
fn bad_definitions_are_refused_with_their_place() {
    let cases = [
        (
            listing(json!({"xpath": "//li["}), json!({"css": "a"})),
            "extract[0].base",
        ),
        (
            listing(json!({"css": "li"}), json!({"css": "a["})),
            "extract[0].fields.title",
        ),
        (
            listing(json!({"css": "li"}), json!({"css": "a", "xpath": "a"})),
            "extract[0].fields.title",
        ),
        (
            listing(json!({"css": "li"}), json!({"css": "a", "value": "attr()"})),
            "extract[0].fields.title",
        ),
        (
            listing(json!({"css": "li"}), json!({"css": "a", "regex": "("})),
            "extract[0].fields.title",
        ),
        (
            listing(
                json!({"css": "li"}),
                json!({"css": "a", "processors": [{"date": "%Q"}]}),
            ),
            "extract[0].fields.title",
        ),
        (
            json!([{"name": "a", "match": "(", "fields": {"x": {"css": "a"}}}]),
            "extract[0]",
        ),
        (
            json!([{"name": "a", "fields": {"x": {"css": "a"}},
                    "detail": {"url_field": "x", "extractor": "nope"}}]),
            "extract[0].detail",
        ),
        (
            json!([{"name": "a", "fields": {"x": {"css": "a"}}},
                   {"name": "a", "fields": {"x": {"css": "a"}}}]),
            "extract[1]",
        ),
        (
            json!([{"name": "a", "fields": {"x": {"css": "a"}}, "key": ["x", "y"]}]),
            "extract[0].key",
        ),
    ];
    // A key field may be the detail extractor's.
    let keyed_by_detail = json!([
        {"name": "a", "fields": {"x": {"css": "a"}}, "key": ["sku"],
         "detail": {"url_field": "x", "extractor": "b"}},
        {"name": "b", "fields": {"sku": {"css": "b"}}}
    ]);
    assert!(extractors(keyed_by_detail).is_ok());
    for (defs, at) in cases {
        let e = extractors(defs.clone()).unwrap_err();
        assert!(e.to_string().starts_with(at), "{defs}: {e}");
    }
    let typo = json!([{"name": "a", "fields": {"x": {"css": "a", "proccessors": []}}}]);
    assert!(serde_json::from_value::<Vec<Extractor>>(typo).is_err());
}

/// A page with what trips XPath up: nesting of the same element, comments, text directly in
/// elements with children, attributes, positions, whitespace text.
const TRICKY: &str = r#"<!doctype html><html><head><title> T </title></head><body>
  <div class="a" id="x"><p>one <b>bold</b> tail</p><!-- c --><p class="k">two</p>
    <div class="a"><p>three</p><p>four</p><span data-n="1">s</span></div></div>
  <nav><a href="/1">1</a> <a href="/2" class="k">2</a><a>3</a></nav>
  <p>five</p></body></html>"#;

/// Markup the tree builder rearranges: a paragraph fostered out of a table, paragraphs closed
/// by others and by a `div`, formatting elements reopened, an element left open.
const MALFORMED: &str = r#"<title>M</title><table><p>foster</p><tr><td>x<p>a<p>b</table>
  <p>c<div class="a"><p>d</div></p><b><p>e</b>f</p><div><p>g<p>h<span>i"#;

impl CompiledExtractor {
    /// The same extractor with `change` made to each of its expressions.
    fn with_each_expr(&self, change: impl Fn(&mut Compiled)) -> Self {
        let mut copy = self.clone();
        let exprs = copy
            .base
            .iter_mut()
            .chain(copy.fields.iter_mut().map(|f| &mut f.expr));
        exprs.for_each(change);
        copy
    }

    /// The same extractor with every XPath expression run by sxd-xpath on the copy.
    fn sxd_only(&self) -> Self {
        self.with_each_expr(|expr| {
            if let Compiled::Xpath { simple, .. } = expr {
                *simple = None;
            }
        })
    }

    /// The same extractor with every CSS selector run by scraper's matching alone.
    fn scraper_only(&self) -> Self {
        self.with_each_expr(|expr| {
            if let Compiled::Css { names, .. } = expr {
                *names = None;
            }
        })
    }
}

#[test]
fn simple_xpaths_on_the_html_tree_give_what_sxd_xpath_gives() {
    let simple = [
        "//p",
        "//p[2]",
        "//div//p",
        "//div/p[1]/text()",
        "/html/body/div/div/p[2]",
        "//p/..",
        "//*[@class='k']",
        "//*[@class]",
        "//a[@href][2]/@href",
        "//a[@class=\"k\"]",
        "//nav/a[1]/@href",
        "//nav/node()",
        "//text()",
        "count(//p)",
        "count(//div[@class='a'])",
        "p",
        "./p",
        ".//p",
        "p[1]/b",
        "@id",
        ".",
        "*",
        "span/@data-n",
        "//title/text()",
        "//li[@class='item']/a",
        "//span[@class='price']/text()",
        // Positions after `//` count among a node's children (`//` and its step are one walk).
        "//p[@class='k'][1]",
        "//p[1][@class='k']",
        "//div[@class='a']//p[2]",
        "//*[2]",
        "//node()[2]",
        "//text()[1]",
        ".//p[2]",
        "//div//node()[3]",
        "//a[@href][1][@class='k']",
        "count(//div//p[1])",
    ];
    for expr in simple {
        assert!(SimpleXpath::parse(expr).is_some(), "{expr} is simple");
    }
    for expr in [
        "//a[contains(@href, '1')]",
        "//p[last()]",
        "following-sibling::p",
        "//a | //p",
        "string(//title)",
        "//p[@class!='k']",
        "//a/@*",
        "//p[text()='five']",
    ] {
        assert!(
            SimpleXpath::parse(expr).is_none(),
            "{expr} goes to sxd-xpath"
        );
    }
    let page = url::Url::parse("http://shop.test/list").unwrap();
    // Two fields an expression: an extractor holds `MAX_FIELDS` at most.
    for (chunk, exprs) in simple.chunks(MAX_FIELDS / 2).enumerate() {
        let fields: serde_json::Map<String, serde_json::Value> = exprs
            .iter()
            .enumerate()
            .flat_map(|(i, expr)| {
                [
                    (
                        format!("f{i:02}"),
                        json!({"xpath": expr, "processors": [{"join": "|"}]}),
                    ),
                    (
                        format!("h{i:02}"),
                        json!({"xpath": expr, "value": "html", "processors": [{"join": "|"}]}),
                    ),
                ]
            })
            .collect();
        for base in [
            None,
            Some(json!({"xpath": "//div"})),
            Some(json!({"css": "div, li, nav"})),
            Some(json!({"xpath": "//li[@class='item']"})),
        ] {
            let mut def = json!({"name": "x", "fields": fields});
            if let Some(base) = &base {
                def["base"] = base.clone();
            }
            let rules = extractors(json!([def])).unwrap();
            let extractor = rules.for_url(page.as_str()).unwrap();
            for html in [TRICKY, LISTING, MALFORMED] {
                let on_tree = extractor.extract(html.as_bytes(), &page);
                let on_copy = extractor.sxd_only().extract(html.as_bytes(), &page);
                assert!(!on_tree.items.is_empty() || base.is_some());
                assert_eq!(on_tree, on_copy, "chunk {chunk}, base {base:?} on {html}");
            }
        }
    }
}

#[test]
fn selectors_of_names_found_by_name_give_what_scraper_gives() {
    let by_name = [
        "p",
        "a",
        "title",
        "nav a",
        "div p",
        "div  div p",
        "html body p",
        "table p",
        "td p",
        "b p",
        "div span",
        "nope",
        "div nope",
        "custom-el",
        "svg title",
    ];
    for css in by_name {
        assert!(descendant_names(css).is_some(), "{css} is found by name");
    }
    for css in [
        "P",
        "div > p",
        "p.k",
        "a[href]",
        "div, p",
        "*",
        "nav a:first-child",
        "",
    ] {
        assert!(descendant_names(css).is_none(), "{css} goes to scraper");
    }
    let svg = r#"<html><head><title>page</title></head><body><custom-el>c</custom-el>
        <svg><title>icon</title><a href="/s">s</a><foreignObject><p>in</p></foreignObject></svg>
        <div><svg><title>nested</title></svg></div></body></html>"#;
    let page = url::Url::parse("http://shop.test/list").unwrap();
    let fields: serde_json::Map<String, serde_json::Value> = by_name
        .iter()
        .enumerate()
        .map(|(i, css)| {
            let field = json!({"css": css, "value": "html", "processors": [{"join": "|"}]});
            (format!("f{i:02}"), field)
        })
        .collect();
    let rules = extractors(json!([{"name": "x", "fields": fields}])).unwrap();
    let extractor = rules.for_url(page.as_str()).unwrap();
    for html in [TRICKY, LISTING, MALFORMED, svg] {
        let by_name = extractor.extract(html.as_bytes(), &page);
        let by_scraper = extractor.scraper_only().extract(html.as_bytes(), &page);
        assert_eq!(by_name, by_scraper, "on {html}");
        assert!(by_name.items[0].fields.values().any(|v| v != &json!(null)));
    }
}

#[test]
fn a_field_without_join_is_its_first_kept_value_and_reads_no_further() {
    let page = url::Url::parse("http://shop.test/").unwrap();
    let values = || ["n/a", "12", "later"].into_iter().map(str::to_owned);
    let number: Vec<Processor> = serde_json::from_value(json!(["number", "required"])).unwrap();
    // The first kept value; the refused one before it is an error, the one after is not read.
    let mut read = 0;
    let counted = values().inspect(|_| read += 1);
    let (value, errors) = process::first(&number, counted, &page);
    assert_eq!((value, read), (json!(12), 2));
    assert_eq!(errors.len(), 1, "{errors:?}");
    // None kept: every value's error, and the list processors act (a default, a required).
    let bad = || ["a", "b"].into_iter().map(str::to_owned);
    let (value, errors) = process::first(&number, bad(), &page);
    assert_eq!(value, json!(null));
    assert_eq!(
        errors.len(),
        3,
        "two refusals and the missing required value"
    );
    let with_default: Vec<Processor> =
        serde_json::from_value(json!(["number", {"default": "0"}, "number"])).unwrap();
    assert_eq!(process::first(&with_default, bad(), &page).0, json!(0));
    // A join reads them all.
    let joined: Vec<Processor> = serde_json::from_value(json!(["trim", {"join": "+"}])).unwrap();
    assert_eq!(
        process::first(&joined, values(), &page).0,
        json!("n/a+12+later")
    );
}

#[test]
fn image_fields_name_their_resolved_url_or_the_largest_of_a_srcset_and_a_bad_one_is_an_error() {
    let page = url::Url::parse("http://shop.test/p/1.html").unwrap();
    let rules = extractors(json!([{
        "name": "product", "base": {"css": "div.p"},
        "fields": {
            "photo": {"css": "img.main", "value": "attr(src)", "image": true},
            "zoom": {"css": "img.main", "value": "attr(srcset)", "image": true},
            "logo": {"css": "img.logo", "value": "attr(src)", "image": true, "processors": ["required"]}
        }
    }]))
    .unwrap();
    let html = r#"<div class="p"><img class="main" src="a.png" srcset="a.png 400w, a-1200.png 1200w, a-800.png 800w"><img class="logo" src="//cdn.test/l.svg"></div>
        <div class="p"><img class="main" src="javascript:void(0)"></div>"#;
    let extractor = rules.for_url(page.as_str()).unwrap();
    let found = extractor.extract(html.as_bytes(), &page);
    let first = &found.items[0];
    assert_eq!(first.fields["photo"], json!("http://shop.test/p/a.png"));
    assert_eq!(first.fields["zoom"], json!("http://shop.test/p/a-1200.png"));
    assert_eq!(first.fields["logo"], json!("http://cdn.test/l.svg"));
    assert!(first.is_valid());
    // The images the page's items name, for the crawler to fetch.
    assert_eq!(
        rules.image_urls(&found),
        [
            "http://cdn.test/l.svg",
            "http://shop.test/p/a.png",
            "http://shop.test/p/a-1200.png"
        ]
    );
    assert_eq!(rules.image_fields("product"), ["logo", "photo", "zoom"]);
    // A value naming no http(s) image is null with its error, never a panic.
    let second = &found.items[1];
    assert_eq!(second.fields["photo"], json!(null));
    assert!(second.errors.iter().any(|e| e.field == "photo"));
    assert!(second.errors.iter().any(|e| e.field == "logo"));
}
