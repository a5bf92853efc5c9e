//! A crawl's recrawl policy compiled once per crawl: which schedule a URL follows
//! (`trawl_domain::revisit::Revisit`), and whether a page that answered 200 is a soft 404 (a
//! rule's marker, a CSS selector run by lol_html as the page streams, or an XPath run on the
//! page parsed by the extraction engine, `crate::extract::xpath_truth`).

use crate::url_rules::RecrawlRules;
use lol_html::html_content::{Element, TextChunk};
use lol_html::{ElementContentHandlers, HandlerResult, HtmlRewriter, Selector, Settings};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cell::RefCell;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::{RecrawlPolicy, Soft404Rule};
use trawl_domain::estimate::Level;
use trawl_domain::extract::Expr;
use trawl_domain::revisit::Revisit;

/// Most recrawl rules and soft-404 rules a crawl may have (each is tried on every fetch).
pub const MAX_RULES: usize = 64;

/// A recrawl policy with its patterns compiled.
#[derive(Debug, Clone)]
pub struct RevisitRules {
    urls: RecrawlRules,
    soft_404: Vec<(Option<Regex>, Soft404Rule)>,
}

impl RevisitRules {
    /// Compiles `policy`; the error names the rule that does not compile.
    pub fn new(policy: &RecrawlPolicy) -> Result<Self, String> {
        if policy.rules.len() > MAX_RULES || policy.soft_404.len() > MAX_RULES {
            return Err(format!(
                "recrawl: at most {MAX_RULES} rules and {MAX_RULES} soft-404 rules"
            ));
        }
        for estimator in policy.estimators() {
            if estimator.min_ms < 1_000 || estimator.max_ms < estimator.min_ms {
                return Err("recrawl.estimator: 1000 <= min_ms <= max_ms".to_owned());
            }
            if estimator.initial_ms == 0 {
                return Err("recrawl.estimator: initial_ms must be positive".to_owned());
            }
            if estimator.sitemaps_every_ms.is_some_and(|ms| ms < 60_000) {
                return Err("recrawl.estimator: sitemaps_every_ms is at least 60000".to_owned());
            }
        }
        if policy.estimator_budget() == Some(0) {
            return Err("recrawl.estimator: give a budget_per_day (fetches per day)".to_owned());
        }
        let urls = RecrawlRules::new(policy)?;
        let soft_404 = policy
            .soft_404
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let at = format!("recrawl.soft_404[{i}]");
                let pattern = rule
                    .pattern
                    .as_deref()
                    .map(|p| {
                        Regex::new(p).map_err(|e| {
                            format!("{at}: invalid pattern {p:?}: {}", crate::problem::regex(&e))
                        })
                    })
                    .transpose()?;
                match rule.marker() {
                    None => {
                        return Err(format!(
                            "{at}: give one of `selector` (CSS) and `xpath`, not both"
                        ));
                    }
                    Some(Expr::Css(css)) => {
                        css.parse::<Selector>()
                            .map_err(|e| format!("{at}: invalid selector {css:?}: {e}"))?;
                    }
                    Some(Expr::Xpath(xpath)) => crate::extract::check_xpath(&xpath)
                        .map_err(|e| format!("{at}: invalid XPath {xpath:?}: {e}"))?,
                }
                if let Some(reference) = &rule.reference_url {
                    CanonicalUrl::parse(reference)
                        .map_err(|e| format!("{at}.reference_url: {e}"))?;
                }
                Ok((pattern, rule.clone()))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { urls, soft_404 })
    }

    /// The rules at the crawl's water level (`Crawl::level`).
    pub fn at_level(self, level: Option<Level>) -> Self {
        Self {
            urls: self.urls.at_level(level),
            ..self
        }
    }

    /// What the crawl decides for `url`: the first rule that matches it, or the crawl's own.
    pub fn for_url(&self, url: &str) -> Revisit {
        self.urls.for_url(url)
    }

    /// The soft-404 rules that apply to `url`, with their places in `recrawl.soft_404`.
    pub fn soft_404_rules(&self, url: &str) -> impl Iterator<Item = (usize, &Soft404Rule)> {
        self.soft_404
            .iter()
            .enumerate()
            .filter(move |(_, (pattern, _))| pattern.as_ref().is_none_or(|p| p.is_match(url)))
            .map(|(i, (_, rule))| (i, rule))
    }

    /// Whether the page `html` of `url` is a soft 404: what the first matching rule found.
    pub fn soft_404(&self, url: &str, html: &[u8]) -> Option<Soft404Found> {
        self.soft_404_rules(url)
            .find_map(|(i, rule)| soft_404_match(i, rule, html))
    }
}

/// Which soft-404 rule recognised a page as gone, by which marker, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Soft404Found {
    /// The rule's index in `recrawl.soft_404`.
    pub rule: usize,
    /// Its marker: `css "h1.title"` or `xpath "//h1[@class='title']"`.
    pub marker: String,
    /// The text the rule asks for, found in what the marker selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The rule makes the page gone at this check (`Soft404Rule::at_once`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_once: bool,
}

impl std::fmt::Display for Soft404Found {
    /// What the page's error says: `soft 404 (recrawl.soft_404[0], css "h1"): says "gone"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "soft 404 (recrawl.soft_404[{}], {})",
            self.rule, self.marker
        )?;
        match &self.text {
            Some(text) => write!(f, ": says {text:?}"),
            None => write!(f, ": matched"),
        }
    }
}

/// Whether `rule` (the `index`-th) recognises the page `html` as gone: its marker is found
/// (and, when the rule gives a text, what it selected contains it, whatever the case). A marker
/// that does not compile, which `RevisitRules::new` refuses, recognises nothing.
pub fn soft_404_match(index: usize, rule: &Soft404Rule, html: &[u8]) -> Option<Soft404Found> {
    let marker = rule.marker()?;
    let found = match &marker {
        Expr::Css(css) => css_text(css, html)?,
        Expr::Xpath(xpath) => crate::extract::xpath_truth(html, xpath)?,
    };
    if let Some(text) = &rule.text
        && !found.to_lowercase().contains(&text.to_lowercase())
    {
        return None;
    }
    let kind = if marker.is_xpath() { "xpath" } else { "css" };
    Some(Soft404Found {
        rule: index,
        marker: format!("{kind} {:?}", marker.text()),
        text: rule.text.clone(),
        at_once: rule.at_once,
    })
}

/// The text of the elements matching `css` in `html` (None: no element matches), streamed.
fn css_text(css: &str, html: &[u8]) -> Option<String> {
    let selector = css.parse::<Selector>().ok()?;
    let matched = RefCell::new(false);
    let found = RefCell::new(String::new());
    let on_element = |_: &mut Element<'_, '_>| -> HandlerResult {
        *matched.borrow_mut() = true;
        Ok(())
    };
    let on_text = |t: &mut TextChunk<'_>| -> HandlerResult {
        // Bounded: the expected text is short, and a page may be megabytes.
        let mut found = found.borrow_mut();
        if found.len() < 64 * 1024 {
            found.push_str(t.as_str());
        }
        Ok(())
    };
    let handlers = ElementContentHandlers::default()
        .element(on_element)
        .text(on_text);
    let mut rewriter = HtmlRewriter::new(
        Settings {
            element_content_handlers: vec![(Cow::Owned(selector), handlers)],
            ..Settings::new()
        },
        |_: &[u8]| {},
    );
    // A parser error (only the memory limit, on absurd markup) decides on what was read.
    let _ = rewriter.write(html).and_then(|()| rewriter.end());
    let text = found.borrow().clone();
    matched.borrow().then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::schedule::Schedule;

    fn policy() -> RecrawlPolicy {
        serde_json::from_str(
            r#"{
                "schedule": {},
                "rules": [
                    {"match": "/list/", "interval_ms": 3600000, "listing": true},
                    {"glob": "*.pdf", "never": true}
                ],
                "soft_404": [
                    {"match": "/article/", "selector": "h1.title", "text": "Not Found"}
                ]
            }"#,
        )
        .unwrap()
    }

    #[test]
    fn listing_hourly_articles_adaptive_pdfs_never_is_one_configuration() {
        let rules = RevisitRules::new(&policy()).unwrap();
        let listing = rules.for_url("http://a.test/list/2");
        assert_eq!(listing.schedule, Some(Schedule::fixed(3_600_000)));
        assert!(listing.listing);
        let article = rules.for_url("http://a.test/article/7");
        assert_eq!(article.schedule, Some(Schedule::RECRAWL));
        assert!(!article.listing);
        assert_eq!(rules.for_url("http://a.test/doc.pdf").schedule, None);
        assert_eq!(
            rules.for_url("http://a.test/doc.pdf?x").schedule,
            Some(Schedule::RECRAWL)
        );
        assert_eq!(article.missing_after, 2);
        assert_eq!(article.recheck, Some(Schedule::CHECKER));
    }

    #[test]
    fn soft_404_needs_the_selector_and_its_text_on_matching_urls() {
        let rules = RevisitRules::new(&policy()).unwrap();
        let gone = b"<html><h1 class=title>Page <b>not found</b></h1></html>";
        let fine = b"<html><h1 class=title>Hello</h1></html>";
        assert!(rules.soft_404("http://a.test/article/1", gone).is_some());
        assert_eq!(rules.soft_404("http://a.test/article/1", fine), None);
        assert_eq!(
            rules.soft_404("http://a.test/other", gone),
            None,
            "not its URLs"
        );
    }

    #[test]
    fn an_xpath_marker_is_true_as_xpath_says_and_the_match_names_its_rule() {
        let policy: RecrawlPolicy = serde_json::from_value(serde_json::json!({
            "soft_404": [
                {"match": "/article/", "selector": "h1.title", "text": "not found"},
                {"xpath": "//div[@id='status']/@data-state", "text": "REMOVED"},
                {"match": "/count/", "xpath": "count(//li) = 0"},
                {"match": "/empty/", "xpath": "string(//p[@class='gone'])"}
            ]
        }))
        .unwrap();
        let rules = RevisitRules::new(&policy).unwrap();
        let removed = br#"<html><div id=status data-state="removed">x</div></html>"#;
        let found = rules.soft_404("http://a.test/article/1", removed).unwrap();
        // (the CSS rule applies to the URL first, and its selector is not there)
        assert_eq!(found.rule, 1);
        assert_eq!(found.marker, r#"xpath "//div[@id='status']/@data-state""#);
        assert_eq!(
            found.to_string(),
            r#"soft 404 (recrawl.soft_404[1], xpath "//div[@id='status']/@data-state"): says "REMOVED""#
        );
        let live = br#"<html><div id=status data-state="live">x</div></html>"#;
        assert_eq!(rules.soft_404("http://a.test/article/1", live), None);
        // A boolean: true only without list items.
        let found = rules
            .soft_404("http://a.test/count/1", b"<ul></ul>")
            .unwrap();
        assert_eq!((found.rule, found.text), (2, None));
        assert_eq!(
            rules.soft_404("http://a.test/count/1", b"<ul><li>a</li></ul>"),
            None
        );
        // A string: true when not empty.
        let gone = b"<p class=gone>This item was withdrawn</p>";
        assert_eq!(
            rules.soft_404("http://a.test/empty/1", gone).unwrap().rule,
            3
        );
        assert_eq!(
            rules.soft_404("http://a.test/empty/1", b"<p>here</p>"),
            None
        );
        // The CSS rule still wins on its pages.
        let css = b"<h1 class=title>Not Found</h1>";
        let found = rules.soft_404("http://a.test/article/2", css).unwrap();
        assert_eq!(
            (found.rule, found.marker.as_str()),
            (0, r#"css "h1.title""#)
        );
    }

    #[test]
    fn bad_rules_are_refused_with_their_place() {
        let mut bad = policy();
        bad.rules[1].glob = None;
        let e = RevisitRules::new(&bad).unwrap_err();
        assert!(e.contains("recrawl.rules[1]"), "{e}");
        let mut bad = policy();
        bad.soft_404[0].selector = Some("h1[".into());
        let e = RevisitRules::new(&bad).unwrap_err();
        assert!(e.contains("recrawl.soft_404[0]"), "{e}");
        let mut bad = policy();
        bad.soft_404[0].xpath = Some("//h1".into());
        let e = RevisitRules::new(&bad).unwrap_err();
        assert!(e.contains("recrawl.soft_404[0]: give one of"), "{e}");
        let mut bad = policy();
        bad.soft_404[0].selector = None;
        bad.soft_404[0].xpath = Some("//h1[".into());
        let e = RevisitRules::new(&bad).unwrap_err();
        assert!(e.contains("recrawl.soft_404[0]: invalid XPath"), "{e}");
        let mut bad = policy();
        bad.estimator = Some(trawl_domain::estimate::Estimator {
            budget_per_day: 10,
            sitemaps_every_ms: Some(1_000),
            ..Default::default()
        });
        let e = RevisitRules::new(&bad).unwrap_err();
        assert!(e.contains("sitemaps_every_ms"), "{e}");
    }
}
