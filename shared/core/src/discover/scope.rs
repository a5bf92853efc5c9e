//! A crawl's scope, compiled once and checked for every discovered URL and redirect hop.

use regex::{Regex, RegexSet};
use std::fmt;
use thiserror::Error;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::chain::MAX_KEY_BYTES;
use trawl_domain::crawl::{Route, Scope};

/// A scope that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScopeError {
    #[error("allowed domain {0:?} is not a host name")]
    Domain(String),
    #[error("invalid {list} pattern {message}")]
    Pattern {
        /// `include`, `exclude` or `routes`.
        list: &'static str,
        message: String,
    },
}

/// Why a URL is outside a crawl's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutOfScopeReason {
    /// The host is none of the allowed domains nor their subdomains.
    Domain,
    /// Include patterns are set and none matches.
    NotIncluded,
    /// An exclude pattern matches.
    Excluded {
        pattern: String,
    },
    TooDeep {
        depth: u32,
        max_depth: u32,
    },
}

impl fmt::Display for OutOfScopeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutOfScopeReason::Domain => f.write_str("host not in the allowed domains"),
            OutOfScopeReason::NotIncluded => f.write_str("matches no include pattern"),
            OutOfScopeReason::Excluded { pattern } => write!(f, "excluded by {pattern:?}"),
            OutOfScopeReason::TooDeep { depth, max_depth } => {
                write!(f, "depth {depth} beyond the maximum {max_depth}")
            }
        }
    }
}

/// A compiled [`Scope`]. Patterns are matched against the whole canonical URL.
#[derive(Debug, Clone)]
pub struct ScopeMatcher {
    /// Lower-case hosts (punycode for IDN); empty admits any host.
    domains: Vec<String>,
    include: Option<RegexSet>,
    exclude: Option<RegexSet>,
    max_depth: Option<u32>,
    drop_params: Vec<String>,
    /// The routes and their patterns, in order.
    routes: Vec<Route>,
    route_patterns: Option<RegexSet>,
    /// Each route's pattern and key template, for the routes that give a key.
    route_keys: Vec<Option<(Regex, String)>>,
    /// The hosts images are fetched from (`scope.images.allowed_domains`); empty: any.
    image_domains: Vec<String>,
    /// Whether every page's images are fetched (`scope.images.discover`).
    discover_images: bool,
    /// The lanes the crawl names (`scope.lanes`; empty: no lanes).
    lanes: Vec<String>,
}

impl ScopeMatcher {
    /// Compiles `scope`. An empty `allowed_domains` admits any host: whoever creates the crawl
    /// fills it with the seed hosts when the user named none.
    pub fn new(scope: &Scope) -> Result<Self, ScopeError> {
        let domains = scope
            .allowed_domains
            .iter()
            .map(|d| normalise_domain(d))
            .collect::<Result<_, _>>()?;
        let route_patterns = scope
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                crate::url_rules::url_pattern(r.pattern.as_deref(), r.glob.as_deref()).map_err(
                    |message| ScopeError::Pattern {
                        list: "routes",
                        message: format!("[{i}]: {message}"),
                    },
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let route_keys = scope
            .routes
            .iter()
            .zip(&route_patterns)
            .enumerate()
            .map(|(i, (route, pattern))| route_key(i, route, pattern))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            domains,
            route_keys,
            include: compile("include", &scope.include)?,
            exclude: compile("exclude", &scope.exclude)?,
            max_depth: scope.max_depth,
            drop_params: scope.drop_params.clone(),
            routes: scope.routes.clone(),
            route_patterns: compile("routes", &route_patterns)?,
            image_domains: scope
                .images
                .allowed_domains
                .iter()
                .map(|d| normalise_domain(d))
                .collect::<Result<_, _>>()?,
            discover_images: scope.images.discover,
            lanes: scope.lanes.clone(),
        })
    }

    /// Whether the images of the page at `url` are fetched: its route's choice, else the
    /// crawl's (`scope.images.discover`).
    pub fn images_of(&self, url: &str) -> bool {
        self.route(url)
            .and_then(|r| r.images)
            .unwrap_or(self.discover_images)
    }

    /// Whether `url`, found as an image, is fetched (`trawl_domain::crawl::ImageScope`): on a
    /// host of `images.allowed_domains` (any when empty), and excluded by no pattern.
    pub fn check_image(&self, url: &CanonicalUrl) -> Result<(), OutOfScopeReason> {
        if !admits(&self.image_domains, url.host()) {
            return Err(OutOfScopeReason::Domain);
        }
        self.check_excluded(url)
    }

    /// The dedup key of `url` (`trawl_domain::chain::KEY_KEY`): its route's key template filled
    /// from the route pattern's groups. None when its route gives no key, or the key would be
    /// empty or longer than `MAX_KEY_BYTES` (the URL is then its own key).
    pub fn key_of(&self, url: &str) -> Option<String> {
        let (pattern, template) = self.route_keys.get(self.route_index(url)?)?.as_ref()?;
        let groups = pattern.captures(url)?;
        let key = fill_key(template, |n| groups.get(n).map(|m| m.as_str()));
        (!key.is_empty() && key.len() <= MAX_KEY_BYTES).then_some(key)
    }

    /// The lane of a new task for `url` (`trawl_domain::lane::of_task`): its route's, else the
    /// default lane; None in a crawl without lanes.
    pub fn lane_of(&self, url: &str) -> Option<String> {
        trawl_domain::lane::of_task(&self.lanes, self.route(url).and_then(|r| r.lane.as_deref()))
    }

    /// The route of the pages at `url`: the first whose pattern matches.
    pub fn route(&self, url: &str) -> Option<&Route> {
        self.routes.get(self.route_index(url)?)
    }

    /// The index of `url`'s route.
    fn route_index(&self, url: &str) -> Option<usize> {
        // RegexSet reports matches in pattern order: the lowest index is the first route.
        self.route_patterns.as_ref()?.matches(url).iter().next()
    }

    /// `url` as this crawl's task URL: without its `drop_params` (tracking parameters).
    pub fn normalise(&self, url: CanonicalUrl) -> CanonicalUrl {
        url.without_params(&self.drop_params)
    }

    /// Whether `url`, found at link depth `depth`, belongs to the crawl.
    pub fn check(&self, url: &CanonicalUrl, depth: u32) -> Result<(), OutOfScopeReason> {
        if let Some(max_depth) = self.max_depth
            && depth > max_depth
        {
            return Err(OutOfScopeReason::TooDeep { depth, max_depth });
        }
        if !admits(&self.domains, url.host()) {
            return Err(OutOfScopeReason::Domain);
        }
        if let Some(include) = &self.include
            && !include.is_match(url.as_str())
        {
            return Err(OutOfScopeReason::NotIncluded);
        }
        self.check_excluded(url)
    }

    fn check_excluded(&self, url: &CanonicalUrl) -> Result<(), OutOfScopeReason> {
        if let Some(exclude) = &self.exclude
            && let Some(index) = exclude.matches(url.as_str()).iter().next()
        {
            let pattern = exclude.patterns().get(index).cloned().unwrap_or_default();
            return Err(OutOfScopeReason::Excluded { pattern });
        }
        Ok(())
    }
}

/// Whether `host` is one of `domains` or their subdomains (any host when there are none).
fn admits(domains: &[String], host: &str) -> bool {
    domains.is_empty()
        || domains.iter().any(|d| {
            host == d
                || host
                    .strip_suffix(d.as_str())
                    .is_some_and(|sub| sub.ends_with('.'))
        })
}

/// `Example.COM`, `.example.com` and `*.example.com` all mean `example.com`; IDN to punycode.
fn normalise_domain(domain: &str) -> Result<String, ScopeError> {
    let trimmed = domain.trim();
    let bare = trimmed
        .strip_prefix("*.")
        .or_else(|| trimmed.strip_prefix('.'))
        .unwrap_or(trimmed);
    let invalid = || ScopeError::Domain(domain.to_owned());
    if bare.is_empty() || bare.contains(['/', '?', '#', '@', ' ']) {
        return Err(invalid());
    }
    let parsed = url::Url::parse(&format!("http://{bare}/")).map_err(|_| invalid())?;
    match (parsed.host_str(), parsed.port()) {
        (Some(host), None) => Ok(host.to_owned()),
        _ => Err(invalid()),
    }
}

fn compile(list: &'static str, patterns: &[String]) -> Result<Option<RegexSet>, ScopeError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    RegexSet::new(patterns).map(Some).map_err(|set_error| {
        // The set's error does not say which pattern: the first that fails alone is named.
        let message = patterns
            .iter()
            .find_map(|p| {
                let e = regex::Regex::new(p).err()?;
                Some(format!("{p:?}: {}", crate::problem::regex(&e)))
            })
            .unwrap_or_else(|| format!("(all together): {}", crate::problem::regex(&set_error)));
        ScopeError::Pattern { list, message }
    })
}

/// Route `i`'s pattern and key template, when it gives a key: refused unless the route has a
/// `match` pattern (a glob has no groups) holding every group the template names.
fn route_key(
    i: usize,
    route: &Route,
    pattern: &str,
) -> Result<Option<(Regex, String)>, ScopeError> {
    let Some(template) = &route.key else {
        return Ok(None);
    };
    let refused = |message: String| ScopeError::Pattern {
        list: "routes",
        message: format!("[{i}]: key {template:?}: {message}"),
    };
    if route.pattern.is_none() {
        return Err(refused(
            "a key needs a `match` pattern (a glob has no groups)".into(),
        ));
    }
    let regex = Regex::new(pattern).map_err(|e| refused(e.to_string()))?;
    let groups = regex.captures_len();
    let mut missing = None;
    fill_key(template, |n| {
        if n >= groups {
            missing.get_or_insert(n);
        }
        Some("")
    });
    if let Some(n) = missing {
        return Err(refused(format!("the pattern has no group {n}")));
    }
    Ok(Some((regex, template.clone())))
}

/// `template` with each `{n}` (n a digit) replaced by `group(n)` (nothing when None).
fn fill_key<'a>(template: &str, mut group: impl FnMut(usize) -> Option<&'a str>) -> String {
    let mut key = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        key.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let digit = after.chars().next().and_then(|c| c.to_digit(10));
        match (digit, after.get(1..2)) {
            (Some(n), Some("}")) => {
                key.push_str(group(n as usize).unwrap_or_default());
                rest = &after[2..];
            }
            _ => {
                key.push('{');
                rest = after;
            }
        }
    }
    key.push_str(rest);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> CanonicalUrl {
        CanonicalUrl::parse(s).unwrap()
    }

    #[test]
    fn domains_admit_their_subdomains_only() {
        let scope = Scope {
            allowed_domains: vec!["Example.com".into(), "*.bücher.example".into()],
            ..Scope::default()
        };
        let m = ScopeMatcher::new(&scope).unwrap();
        assert!(m.check(&url("http://example.com/"), 0).is_ok());
        assert!(m.check(&url("https://www.example.com:8443/x"), 0).is_ok());
        assert!(
            m.check(&url("http://shop.xn--bcher-kva.example/"), 0)
                .is_ok()
        );
        assert_eq!(
            m.check(&url("http://notexample.com/"), 0),
            Err(OutOfScopeReason::Domain)
        );
        assert_eq!(
            m.check(&url("http://example.com.evil.net/"), 0),
            Err(OutOfScopeReason::Domain)
        );
        let any = ScopeMatcher::new(&Scope::default()).unwrap();
        assert!(any.check(&url("http://anything.example/"), 99).is_ok());
    }

    #[test]
    fn include_exclude_and_depth_are_enforced() {
        let scope = Scope {
            include: vec!["/docs/".into(), r"\.html$".into()],
            exclude: vec!["/docs/private".into()],
            max_depth: Some(2),
            ..Scope::default()
        };
        let m = ScopeMatcher::new(&scope).unwrap();
        assert!(m.check(&url("http://e.com/docs/a"), 2).is_ok());
        assert!(m.check(&url("http://e.com/x/a.html"), 0).is_ok());
        assert_eq!(
            m.check(&url("http://e.com/blog/a"), 0),
            Err(OutOfScopeReason::NotIncluded)
        );
        assert_eq!(
            m.check(&url("http://e.com/docs/private/a"), 0),
            Err(OutOfScopeReason::Excluded {
                pattern: "/docs/private".into()
            })
        );
        assert_eq!(
            m.check(&url("http://e.com/docs/a"), 3),
            Err(OutOfScopeReason::TooDeep {
                depth: 3,
                max_depth: 2
            })
        );
    }

    #[test]
    fn images_come_from_any_host_or_the_image_domains_at_any_depth_unless_excluded() {
        let mut scope: Scope = serde_json::from_value(serde_json::json!({
            "allowed_domains": ["shop.example"],
            "include": ["/p/"],
            "exclude": [r"\.gif$"],
            "max_depth": 1,
            "routes": [{"glob": "*/gallery/*", "images": true}, {"glob": "*/plain/*"}]
        }))
        .unwrap();
        let m = ScopeMatcher::new(&scope).unwrap();
        assert!(m.check_image(&url("http://cdn.example/a.png")).is_ok());
        assert!(m.check(&url("http://cdn.example/a.png"), 0).is_err());
        assert!(
            m.check_image(&url("http://cdn.example/a.gif"))
                .is_err_and(|r| matches!(r, OutOfScopeReason::Excluded { .. }))
        );
        assert!(m.images_of("http://shop.example/gallery/1"));
        assert!(!m.images_of("http://shop.example/plain/1"));
        scope.images.discover = true;
        scope.images.allowed_domains = vec!["img.example".into()];
        let m = ScopeMatcher::new(&scope).unwrap();
        assert!(m.images_of("http://shop.example/plain/1"));
        assert!(m.check_image(&url("http://a.img.example/x.png")).is_ok());
        assert_eq!(
            m.check_image(&url("http://cdn.example/x.png")),
            Err(OutOfScopeReason::Domain)
        );
        scope.images.allowed_domains = vec!["http://x/".into()];
        assert!(matches!(
            ScopeMatcher::new(&scope),
            Err(ScopeError::Domain(_))
        ));
    }

    #[test]
    fn a_routes_key_is_filled_from_its_patterns_groups_and_a_bad_one_is_refused() {
        let scope = |routes: serde_json::Value| Scope {
            routes: serde_json::from_value(routes).unwrap(),
            ..Scope::default()
        };
        let matcher = ScopeMatcher::new(&scope(serde_json::json!([
            {"match": "^https?://([^/]+)/p/(\\d+)", "key": "{1}:product-{2} {x}"},
            {"match": "/list/"}
        ])))
        .unwrap();
        assert_eq!(
            matcher.key_of("http://shop.example/p/12?ref=a").as_deref(),
            Some("shop.example:product-12 {x}")
        );
        assert_eq!(matcher.key_of("http://shop.example/list/1"), None);
        assert_eq!(matcher.key_of("http://shop.example/other"), None);
        for bad in [
            serde_json::json!([{"glob": "**/p/*", "key": "{0}"}]),
            serde_json::json!([{"match": "/p/(\\d+)", "key": "p{2}"}]),
            serde_json::json!([{"match": "(", "key": "p"}]),
        ] {
            assert!(
                matches!(
                    ScopeMatcher::new(&scope(bad.clone())),
                    Err(ScopeError::Pattern { list: "routes", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_scopes_are_typed_errors() {
        let bad_regex = Scope {
            exclude: vec!["(".into()],
            ..Scope::default()
        };
        assert!(matches!(
            ScopeMatcher::new(&bad_regex),
            Err(ScopeError::Pattern {
                list: "exclude",
                ..
            })
        ));
        for domain in ["", "http://example.com/", "example.com:80x", "a b"] {
            let scope = Scope {
                allowed_domains: vec![domain.into()],
                ..Scope::default()
            };
            assert!(
                matches!(ScopeMatcher::new(&scope), Err(ScopeError::Domain(_))),
                "{domain:?}"
            );
        }
    }
}
