//! What a request carries besides its URL and User-Agent, from the crawl's `fetch` settings.
//!
//! - A task's own method and body (its data's `_method` and `_body`) come first.
//! - Headers, Accept-Language, method and body are the crawl's, overridden for a task's URL by
//!   the first rule whose `match` regex or `glob` matches it (a rule's header replaces the
//!   crawl's header of the same name; the others stay). They are chosen once per task: redirect hops keep them,
//!   except that a 301, 302 or 303 turns a POST into a GET without body, as browsers do.
//! - Credentials are per host and matched exactly on every hop, so a redirect to another host
//!   never carries them. Their values are looked up through the fetcher's `SecretSource` when a
//!   request is sent and live only in that request's (sensitive) header.
//! - Cookies: the crawl's initial cookies for the host (a host covers its subdomains), under the
//!   cookies its responses set when the crawl keeps a jar.
//!
//! Headers that carry credentials or that trawl sets itself cannot be configured as plain
//! headers: a secret in `headers` would be stored with the crawl, which `auth` exists to avoid.
//! A configuration is checked by [`validate`] when the crawl is seeded; one that is not valid at
//! fetch time anyway (a crawl stored before a check existed) fails the task, never the process.

use crate::secrets::{Secret, SecretSource, reference_problem};
use bytes::Bytes;
use regex::{Regex, RegexSet};
use reqwest::cookie::{CookieStore, Jar};
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, StatusCode};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, host_key_of};
use trawl_domain::chain::TaskRequest;
use trawl_domain::crawl::{
    Cookies, FetchLimits, HostAuth, HttpMethod, JarScope, RequestBody, SecretRef, UrlRule,
};
use trawl_domain::retry::Failure;
use trawl_domain::task::{ErrorKind, REDACTED, Sent};

/// Most URL rules a crawl may have (each fetch matches its URL against all of them).
pub const MAX_URL_RULES: usize = 100;
/// Compiled rule sets kept, one per distinct list of patterns (so one per crawl in practice).
const MAX_RULE_SETS: usize = 64;

/// Header names a crawl may not configure as plain headers, and what to use instead.
const REFUSED_HEADERS: [(&str, &str); 9] = [
    ("authorization", "use fetch.auth, which names its secrets"),
    (
        "proxy-authorization",
        "secrets are never stored with a crawl",
    ),
    ("cookie", "use fetch.cookies"),
    ("accept-language", "use accept_language"),
    ("user-agent", "use user_agent (robots.txt rules follow it)"),
    ("host", "trawl sets it"),
    ("content-length", "trawl sets it"),
    ("transfer-encoding", "trawl sets it"),
    ("connection", "trawl sets it"),
];

/// A task's request settings, resolved from the crawl's and its rule's.
#[derive(Debug, Clone)]
pub(crate) struct RequestPlan {
    pub(crate) method: Method,
    headers: HeaderMap,
    body: Option<Bytes>,
}

impl RequestPlan {
    /// robots.txt: a GET with the crawl's own headers (rules describe pages, not robots.txt).
    pub(crate) fn for_robots(fetch: &FetchLimits) -> Result<Self, Failure> {
        let headers = headers_of(&fetch.headers, None, fetch.accept_language.as_deref())
            .map_err(configuration)?;
        Ok(Self {
            method: Method::GET,
            headers,
            body: None,
        })
    }

    /// The plan for the next hop after a redirect answered with `status`.
    pub(crate) fn follow(&mut self, status: StatusCode) {
        let keeps_method = matches!(status.as_u16(), 307 | 308);
        if self.method == Method::POST && !keeps_method {
            self.method = Method::GET;
            self.body = None;
            self.headers.remove(header::CONTENT_TYPE);
        }
    }

    /// The builder with the plan's method, headers and body.
    pub(crate) fn apply(&self, request: RequestBuilder) -> RequestBuilder {
        let request = request.headers(self.headers.clone());
        match &self.body {
            Some(body) => request.body(body.clone()),
            None => request,
        }
    }
}

/// Compiled rule sets, cached by their patterns so that a rule's regex is compiled once per
/// process, not once per fetch.
#[derive(Default)]
pub(crate) struct RuleSets {
    sets: Mutex<HashMap<Vec<String>, Arc<RegexSet>>>,
}

impl RuleSets {
    /// The request settings for `url` under `fetch`, the task's own method and body (`own`,
    /// `trawl_domain::chain::TaskRequest`) over the rule's and the crawl's.
    pub(crate) fn plan(
        &self,
        url: &CanonicalUrl,
        fetch: &FetchLimits,
        own: Option<&TaskRequest>,
    ) -> Result<RequestPlan, Failure> {
        let rule = self.first_match(&fetch.rules, url.as_str())?;
        let accept_language = rule
            .and_then(|r| r.accept_language.as_deref())
            .or(fetch.accept_language.as_deref());
        let mut headers = headers_of(&fetch.headers, rule.map(|r| &r.headers), accept_language)
            .map_err(configuration)?;
        let method = own
            .map(|o| o.method)
            .or(rule.and_then(|r| r.method))
            .unwrap_or(fetch.method);
        let body = match method {
            HttpMethod::Get => None,
            HttpMethod::Post => own
                .and_then(|o| o.body.as_ref())
                .or(rule.and_then(|r| r.body.as_ref()))
                .or(fetch.body.as_ref()),
        };
        let body = match body {
            None => None,
            Some(body) => {
                let (bytes, content_type) = encode(body).map_err(configuration)?;
                if !headers.contains_key(header::CONTENT_TYPE) {
                    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                }
                Some(bytes)
            }
        };
        Ok(RequestPlan {
            method: match method {
                HttpMethod::Get => Method::GET,
                HttpMethod::Post => Method::POST,
            },
            headers,
            body,
        })
    }

    fn first_match<'a>(
        &self,
        rules: &'a [UrlRule],
        url: &str,
    ) -> Result<Option<&'a UrlRule>, Failure> {
        if rules.is_empty() {
            return Ok(None);
        }
        let patterns = rules
            .iter()
            .map(rule_pattern)
            .collect::<Result<Vec<String>, _>>()
            .map_err(configuration)?;
        let cached = self
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&patterns)
            .cloned();
        let set = match cached {
            Some(set) => set,
            None => {
                let set = Arc::new(RegexSet::new(&patterns).map_err(|e| {
                    configuration(format!(
                        "fetch.rules: invalid regular expression: {}",
                        crate::problem::regex(&e)
                    ))
                })?);
                let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
                if sets.len() >= MAX_RULE_SETS {
                    sets.clear();
                }
                sets.insert(patterns, Arc::clone(&set));
                set
            }
        };
        // RegexSet reports matches in pattern order: the lowest index is the first rule.
        Ok(set.matches(url).iter().next().map(|i| &rules[i]))
    }
}

fn rule_pattern(rule: &UrlRule) -> Result<String, String> {
    crate::url_rules::url_pattern(rule.pattern.as_deref(), rule.glob.as_deref())
}

/// What `request` sends beyond its URL, User-Agent and Accept, credentials redacted: the
/// values of Authorization, Proxy-Authorization and of every header marked sensitive, and
/// each cookie's value (its name is kept).
pub(crate) fn sent(request: &reqwest::Request) -> Sent {
    let method = (request.method() != Method::GET).then(|| request.method().as_str().to_owned());
    let headers = request
        .headers()
        .iter()
        .filter(|(name, _)| **name != header::USER_AGENT && **name != header::ACCEPT)
        .map(|(name, value)| (name.as_str().to_owned(), redacted(name, value)))
        .collect();
    Sent { method, headers }
}

fn redacted(name: &HeaderName, value: &HeaderValue) -> String {
    let text = String::from_utf8_lossy(value.as_bytes());
    if *name == header::COOKIE {
        return text
            .split(';')
            .filter_map(|pair| {
                let name = pair.split_once('=').map_or(pair, |(name, _)| name).trim();
                (!name.is_empty()).then(|| format!("{name}={REDACTED}"))
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    let credential = value.is_sensitive()
        || *name == header::AUTHORIZATION
        || *name == header::PROXY_AUTHORIZATION;
    if credential {
        REDACTED.to_owned()
    } else {
        text.into_owned()
    }
}

/// Adds the credentials configured for `url`'s host, looked up now.
pub(crate) async fn authorize(
    request: RequestBuilder,
    url: &CanonicalUrl,
    auth: &[HostAuth],
    secrets: &dyn SecretSource,
) -> Result<RequestBuilder, Failure> {
    let port = url.as_url().port_or_known_default();
    let Some(entry) = auth.iter().find(|a| {
        host_and_port(&a.host)
            .is_some_and(|(host, p)| host == url.host() && p.is_none_or(|p| Some(p) == port))
    }) else {
        return Ok(request);
    };
    match (&entry.bearer, &entry.basic) {
        (Some(token), _) => {
            let secret = resolve(secrets, token, entry).await?;
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", secret.expose())).map_err(|_| {
                    Failure::new(
                        ErrorKind::ClientError,
                        format!(
                            "credentials for {}: secret {token} is not a valid header value",
                            entry.host
                        ),
                    )
                })?;
            value.set_sensitive(true);
            Ok(request.header(header::AUTHORIZATION, value))
        }
        (None, Some(basic)) => {
            let username = resolve(secrets, &basic.username, entry).await?;
            let password = resolve(secrets, &basic.password, entry).await?;
            Ok(request.basic_auth(username.expose(), Some(password.expose())))
        }
        (None, None) => Err(configuration(format!(
            "fetch.auth for {} names neither bearer nor basic",
            entry.host
        ))),
    }
}

async fn resolve(
    secrets: &dyn SecretSource,
    reference: &SecretRef,
    entry: &HostAuth,
) -> Result<Secret, Failure> {
    secrets
        .resolve(reference)
        .await
        .map_err(|e| Failure::new(e.kind(), format!("credentials for {}: {e}", entry.host)))
}

/// Most cookie jars a fetcher keeps (one per crawl, or per crawl and host); past that they are
/// all dropped and start empty again, as after a restart.
pub const MAX_JARS: usize = 4096;

/// The cookie jars of the crawls that keep one, in the fetching process's memory: the CLI's
/// crawl, or the crawls a crawler container serves (a container that ends loses them, and a
/// host's next turn may run in another container: a site that needs a session should have its
/// login page among the pages each turn fetches, or its cookie in `initial`).
#[derive(Default)]
pub(crate) struct Jars {
    jars: Mutex<HashMap<JarKey, Arc<Jar>>>,
}

/// A crawl, the host for a crawl whose jars are per host, and the task's session.
type JarKey = (CrawlId, Option<String>, Option<String>);

impl Jars {
    /// The jar a request of `crawl` to `url` in `session` uses; None when the crawl keeps none.
    pub(crate) fn of(
        &self,
        crawl: Option<&CrawlId>,
        url: &CanonicalUrl,
        cookies: &Cookies,
        session: Option<&str>,
    ) -> Option<Arc<Jar>> {
        let crawl = crawl.filter(|_| cookies.jar)?;
        let host = match cookies.scope {
            JarScope::Crawl => None,
            JarScope::Host => Some(host_key_of(url.as_str())),
        };
        let key = (crawl.clone(), host, session.map(str::to_owned));
        let mut jars = self.jars.lock().unwrap_or_else(PoisonError::into_inner);
        if jars.len() >= MAX_JARS && !jars.contains_key(&key) {
            jars.clear();
        }
        Some(Arc::clone(jars.entry(key).or_default()))
    }
}

/// The Cookie header for `url`: the jar's cookies (when the crawl keeps one) and the crawl's
/// initial cookies for the host that the jar does not replace.
pub(crate) fn cookie_header(
    url: &CanonicalUrl,
    cookies: &Cookies,
    jar: Option<&Jar>,
) -> Result<Option<HeaderValue>, Failure> {
    let mut pairs: Vec<String> = Vec::new();
    if let Some(value) = jar.and_then(|jar| jar.cookies(url.as_url())) {
        pairs.extend(
            value
                .to_str()
                .unwrap_or_default()
                .split(';')
                .map(|pair| pair.trim().to_owned())
                .filter(|pair| !pair.is_empty()),
        );
    }
    let in_jar: BTreeSet<String> = pairs
        .iter()
        .map(|pair| pair.split('=').next().unwrap_or_default().to_owned())
        .collect();
    let host = url.host();
    for (domain, initial) in &cookies.initial {
        let domain = domain.trim().trim_start_matches('.').to_ascii_lowercase();
        let covered = host == domain
            || host
                .strip_suffix(domain.as_str())
                .is_some_and(|rest| rest.ends_with('.'));
        if covered {
            pairs.extend(
                initial
                    .iter()
                    .filter(|(name, _)| !in_jar.contains(name.as_str()))
                    .map(|(name, value)| format!("{name}={value}")),
            );
        }
    }
    if pairs.is_empty() {
        return Ok(None);
    }
    let mut value = HeaderValue::from_str(&pairs.join("; "))
        .map_err(|_| configuration("fetch.cookies.initial holds an invalid cookie"))?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// Checks the request settings of a crawl's `fetch` section; returns every problem found.
pub fn validate(fetch: &FetchLimits) -> Vec<String> {
    let mut problems = Vec::new();
    check_headers("fetch.headers", &fetch.headers, &mut problems);
    check_accept_language(
        "fetch.accept_language",
        fetch.accept_language.as_deref(),
        &mut problems,
    );
    if fetch.body.is_some() && fetch.method == HttpMethod::Get {
        problems.push("fetch.body needs fetch.method POST".into());
    }
    if fetch.rules.len() > MAX_URL_RULES {
        problems.push(format!("fetch.rules: at most {MAX_URL_RULES} rules"));
    }
    for (i, rule) in fetch.rules.iter().enumerate() {
        let at = format!("fetch.rules[{i}]");
        match rule_pattern(rule) {
            Err(e) => problems.push(format!("{at}: {e}")),
            Ok(pattern) => {
                if let Err(e) = Regex::new(&pattern) {
                    problems.push(format!(
                        "{at}: not a valid pattern {pattern:?}: {}",
                        crate::problem::regex(&e)
                    ));
                }
            }
        }
        check_headers(&format!("{at}.headers"), &rule.headers, &mut problems);
        check_accept_language(
            &format!("{at}.accept_language"),
            rule.accept_language.as_deref(),
            &mut problems,
        );
        if rule.body.is_some() && rule.method.unwrap_or(fetch.method) == HttpMethod::Get {
            problems.push(format!("{at}.body needs method POST"));
        }
    }
    let mut hosts = BTreeSet::new();
    for (i, auth) in fetch.auth.iter().enumerate() {
        let at = format!("fetch.auth[{i}]");
        match host_and_port(&auth.host) {
            None => problems.push(format!(
                "{at}.host {:?} is not a host or host:port",
                auth.host
            )),
            Some(key) => {
                if !hosts.insert(key) {
                    problems.push(format!("{at}.host {:?} is listed twice", auth.host));
                }
            }
        }
        let references: Vec<&SecretRef> = match (&auth.bearer, &auth.basic) {
            (Some(token), None) => vec![token],
            (None, Some(basic)) => vec![&basic.username, &basic.password],
            _ => {
                problems.push(format!("{at} needs exactly one of bearer and basic"));
                Vec::new()
            }
        };
        problems.extend(
            references
                .into_iter()
                .filter_map(reference_problem)
                .map(|problem| format!("{at}: {problem}")),
        );
    }
    problems.extend(super::proxy::validate(fetch));
    for (domain, cookies) in &fetch.cookies.initial {
        let at = format!("fetch.cookies.initial[{domain:?}]");
        if host_and_port(domain.trim_start_matches('.')).is_none_or(|(_, port)| port.is_some()) {
            problems.push(format!("{at}: not a host name"));
        }
        for (name, value) in cookies {
            let token = |c: char| c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?={}".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                problems.push(format!("{at}: {name:?} is not a cookie name"));
            }
            if !value
                .chars()
                .all(|c| c.is_ascii_graphic() && !"\",;\\".contains(c))
            {
                problems.push(format!("{at}: the value of {name:?} is not a cookie value"));
            }
        }
    }
    problems
}

fn check_headers(at: &str, headers: &BTreeMap<String, String>, problems: &mut Vec<String>) {
    for (name, value) in headers {
        if let Err(e) = header_pair(name, value) {
            problems.push(format!("{at}: {e}"));
        }
    }
}

fn check_accept_language(at: &str, value: Option<&str>, problems: &mut Vec<String>) {
    if value.is_some_and(|v| HeaderValue::from_str(v).is_err()) {
        problems.push(format!("{at} is not a valid header value"));
    }
}

/// A configured header, parsed; errors name the header, not its value.
fn header_pair(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let parsed = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    if let Some((_, instead)) = REFUSED_HEADERS.iter().find(|(n, _)| *n == parsed.as_str()) {
        return Err(format!("header {name:?} cannot be configured: {instead}"));
    }
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| format!("header {name:?} has an invalid value"))?;
    Ok((parsed, value))
}

/// The crawl's headers, then the rule's (replacing those of the same name), then Accept-Language.
fn headers_of(
    crawl: &BTreeMap<String, String>,
    rule: Option<&BTreeMap<String, String>>,
    accept_language: Option<&str>,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in crawl.iter().chain(rule.into_iter().flatten()) {
        let (name, value) = header_pair(name, value)?;
        headers.insert(name, value);
    }
    if let Some(language) = accept_language {
        let value = HeaderValue::from_str(language.trim())
            .map_err(|_| "accept_language is not a valid header value".to_owned())?;
        headers.insert(header::ACCEPT_LANGUAGE, value);
    }
    Ok(headers)
}

/// A body's bytes and its default content type.
fn encode(body: &RequestBody) -> Result<(Bytes, &'static str), String> {
    match body {
        RequestBody::Json(value) => serde_json::to_vec(value)
            .map(|bytes| (Bytes::from(bytes), "application/json"))
            .map_err(|e| format!("body: {e}")),
        RequestBody::Text(text) => Ok((Bytes::from(text.clone()), "text/plain; charset=utf-8")),
    }
}

/// `host` or `host:port` as the URL parser normalises hosts (lower case, punycode, brackets
/// for IPv6); None when `raw` is anything else (a path, user info, an empty host …).
fn host_and_port(raw: &str) -> Option<(String, Option<u16>)> {
    let raw = raw.trim();
    let (host, port) = match raw.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || host.ends_with(']')) =>
        {
            (host, Some(port.parse::<u16>().ok()?))
        }
        _ => (raw, None),
    };
    let url = url::Url::parse(&format!("http://{host}/")).ok()?;
    let plain = url.port().is_none()
        && url.path() == "/"
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none()
        && url.fragment().is_none();
    let host = url.host_str().filter(|h| plain && !h.is_empty())?;
    Some((host.to_owned(), port))
}

fn configuration(problem: impl Into<String>) -> Failure {
    Failure::new(
        ErrorKind::ClientError,
        format!("crawl configuration: {}", problem.into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::crawl::BasicCredentials;

    fn url(raw: &str) -> CanonicalUrl {
        CanonicalUrl::parse(raw).unwrap()
    }

    fn fetch_with(value: serde_json::Value) -> FetchLimits {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_first_matching_rule_overrides_the_crawls_settings() {
        let fetch = fetch_with(serde_json::json!({
            "headers": {"X-Crawl": "c", "X-Both": "crawl"},
            "accept_language": "en",
            "rules": [
                {"match": "/api/", "headers": {"X-Both": "rule"}, "method": "POST",
                 "body": {"json": {"q": 1}}},
                {"match": "/api/search", "accept_language": "de"},
                {"match": "/fr/", "accept_language": "fr"},
                {"glob": "http://h/*.json", "headers": {"Accept": "application/json"}}
            ]
        }));
        let rules = RuleSets::default();

        let api = rules
            .plan(&url("http://h/api/search"), &fetch, None)
            .unwrap();
        assert_eq!(api.method, Method::POST);
        assert_eq!(api.headers["x-crawl"], "c");
        assert_eq!(api.headers["x-both"], "rule");
        assert_eq!(api.headers["accept-language"], "en");
        assert_eq!(api.headers["content-type"], "application/json");
        assert_eq!(api.body.as_deref(), Some(&br#"{"q":1}"#[..]));

        let french = rules.plan(&url("http://h/fr/page"), &fetch, None).unwrap();
        assert_eq!(french.method, Method::GET);
        assert_eq!(french.headers["accept-language"], "fr");
        assert_eq!(french.headers["x-both"], "crawl");
        assert!(french.body.is_none());

        let plain = rules.plan(&url("http://h/other"), &fetch, None).unwrap();
        assert_eq!(plain.headers["accept-language"], "en");
        assert!(!plain.headers.contains_key(header::ACCEPT));

        // A glob covers the whole URL: anchored at both ends, `.` literal.
        let json = rules
            .plan(&url("http://h/data/a.json"), &fetch, None)
            .unwrap();
        assert_eq!(json.headers["accept"], "application/json");
        let not_json = rules
            .plan(&url("http://h/data/a.json5"), &fetch, None)
            .unwrap();
        assert!(!not_json.headers.contains_key(header::ACCEPT));
    }

    #[test]
    fn a_post_becomes_a_get_on_303_and_stays_a_post_on_307() {
        let fetch = fetch_with(serde_json::json!({"method": "POST", "body": {"text": "a=1"}}));
        let plan = RuleSets::default()
            .plan(&url("http://h/"), &fetch, None)
            .unwrap();
        assert_eq!(plan.headers["content-type"], "text/plain; charset=utf-8");
        let mut kept = plan.clone();
        kept.follow(StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(kept.method, Method::POST);
        assert!(kept.body.is_some());
        let mut switched = plan;
        switched.follow(StatusCode::SEE_OTHER);
        assert_eq!(switched.method, Method::GET);
        assert!(switched.body.is_none());
        assert!(!switched.headers.contains_key(header::CONTENT_TYPE));
    }

    #[test]
    fn a_tasks_own_method_and_body_come_before_the_rules_and_the_crawls() {
        let fetch = fetch_with(serde_json::json!({
            "method": "POST", "body": {"text": "crawl"},
            "rules": [{"glob": "*/api/*", "body": {"json": {"rule": 1}}}],
        }));
        let rules = RuleSets::default();
        let own = |method, body| TaskRequest { method, body };
        let posted = own(
            HttpMethod::Post,
            Some(RequestBody::Json(serde_json::json!({"q": "shoes"}))),
        );
        let plan = rules
            .plan(&url("http://h/api/x"), &fetch, Some(&posted))
            .unwrap();
        assert_eq!(plan.body.as_deref(), Some(&br#"{"q":"shoes"}"#[..]));
        assert_eq!(plan.headers["content-type"], "application/json");
        // A task's POST without a body of its own takes the rule's; its GET sends none.
        let bare = own(HttpMethod::Post, None);
        let plan = rules
            .plan(&url("http://h/api/x"), &fetch, Some(&bare))
            .unwrap();
        assert_eq!(plan.body.as_deref(), Some(&br#"{"rule":1}"#[..]));
        let get = own(HttpMethod::Get, None);
        let plan = rules.plan(&url("http://h/p"), &fetch, Some(&get)).unwrap();
        assert_eq!((plan.method, plan.body), (Method::GET, None));
    }

    #[test]
    fn an_invalid_stored_rule_fails_the_fetch_instead_of_panicking() {
        let fetch = fetch_with(serde_json::json!({"rules": [{"match": "("}, {"glob": "*"}]}));
        let failure = RuleSets::default()
            .plan(&url("http://h/"), &fetch, None)
            .unwrap_err();
        assert_eq!(failure.kind, ErrorKind::ClientError);
        assert!(
            failure
                .message
                .starts_with("crawl configuration: fetch.rules")
        );
    }

    #[test]
    fn hosts_and_ports_are_normalised_and_anything_else_refused() {
        assert_eq!(
            host_and_port("API.Example.com"),
            Some(("api.example.com".into(), None))
        );
        assert_eq!(
            host_and_port("127.0.0.1:8080"),
            Some(("127.0.0.1".into(), Some(8080)))
        );
        assert_eq!(host_and_port("[::1]:80"), Some(("[::1]".into(), Some(80))));
        assert_eq!(host_and_port("[::1]"), Some(("[::1]".into(), None)));
        for bad in ["", "h/path", "user@h", "h:99999", "h?q", "http://h"] {
            assert_eq!(host_and_port(bad), None, "{bad}");
        }
    }

    #[test]
    fn initial_cookies_cover_subdomains_and_give_way_to_the_jar() {
        let cookies = Cookies {
            jar: true,
            scope: JarScope::Crawl,
            initial: BTreeMap::from([(
                "example.com".into(),
                BTreeMap::from([
                    ("consent".into(), "yes".into()),
                    ("session".into(), "old".into()),
                ]),
            )]),
        };
        let jar = Jar::default();
        let page = url("http://www.example.com/");
        jar.add_cookie_str("session=new", page.as_url());
        let header = cookie_header(&page, &cookies, Some(&jar)).unwrap().unwrap();
        assert!(header.is_sensitive());
        assert_eq!(header.to_str().unwrap(), "session=new; consent=yes");
        assert_eq!(
            cookie_header(&url("http://notexample.com/"), &cookies, Some(&jar)).unwrap(),
            None
        );
        assert_eq!(
            cookie_header(&page, &cookies, None)
                .unwrap()
                .unwrap()
                .to_str()
                .unwrap(),
            "consent=yes; session=old"
        );
    }

    #[test]
    fn jars_are_kept_per_crawl_or_per_crawl_and_host_and_per_session() {
        let jars = Jars::default();
        let (a, b) = (CrawlId::parse("a").unwrap(), CrawlId::parse("b").unwrap());
        let (www, shop) = (
            url("http://www.example.com/"),
            url("http://shop.example.com/"),
        );
        let mut cookies = Cookies {
            jar: true,
            ..Cookies::default()
        };
        let same = |x: Option<Arc<Jar>>, y: Option<Arc<Jar>>| Arc::ptr_eq(&x.unwrap(), &y.unwrap());
        assert!(same(
            jars.of(Some(&a), &www, &cookies, None),
            jars.of(Some(&a), &shop, &cookies, None)
        ));
        assert!(!same(
            jars.of(Some(&a), &www, &cookies, None),
            jars.of(Some(&b), &www, &cookies, None)
        ));
        cookies.scope = JarScope::Host;
        assert!(!same(
            jars.of(Some(&a), &www, &cookies, None),
            jars.of(Some(&a), &shop, &cookies, None)
        ));
        assert!(same(
            jars.of(Some(&a), &www, &cookies, None),
            jars.of(Some(&a), &www, &cookies, None)
        ));
        // A session has a jar of its own, on the crawl's or host's.
        assert!(!same(
            jars.of(Some(&a), &www, &cookies, Some("s1")),
            jars.of(Some(&a), &www, &cookies, Some("s2"))
        ));
        assert!(!same(
            jars.of(Some(&a), &www, &cookies, Some("s1")),
            jars.of(Some(&a), &www, &cookies, None)
        ));
        assert!(same(
            jars.of(Some(&a), &www, &cookies, Some("s1")),
            jars.of(Some(&a), &www, &cookies, Some("s1"))
        ));
        assert!(
            jars.of(None, &www, &cookies, None).is_none(),
            "no crawl, no jar"
        );
        cookies.jar = false;
        assert!(jars.of(Some(&a), &www, &cookies, None).is_none());
    }

    #[test]
    fn every_problem_of_a_configuration_is_named() {
        let mut fetch = fetch_with(serde_json::json!({
            "headers": {"Authorization": "Bearer x", "bad name": "v", "X-Ok": "line\nbreak"},
            "body": {"text": "orphan"},
            "rules": [{"match": "(", "body": {"json": null}}, {"match": "a", "glob": "b"}],
            "auth": [
                {"host": "a.example", "bearer": {"env": "TOKEN"}},
                {"host": "A.example", "bearer": {"env": "1BAD"}},
                {"host": "b.example/path"}
            ],
            "cookies": {"initial": {"c.example:80": {"bad name": "v", "ok": "semi;colon"}}}
        }));
        fetch.auth.push(HostAuth {
            host: "d.example".into(),
            bearer: Some(SecretRef::Env("T".into())),
            basic: Some(BasicCredentials {
                username: SecretRef::Env("U".into()),
                password: SecretRef::Env("P".into()),
            }),
        });
        let problems = validate(&fetch);
        let expected = [
            "fetch.headers: header \"Authorization\" cannot be configured",
            "fetch.headers: \"bad name\" is not a header name",
            "fetch.headers: header \"X-Ok\" has an invalid value",
            "fetch.body needs fetch.method POST",
            "fetch.rules[0]: not a valid pattern",
            "fetch.rules[0].body needs method POST",
            "fetch.rules[1]: give one of `match` (a regular expression) or `glob`",
            "fetch.auth[1].host \"A.example\" is listed twice",
            "fetch.auth[1]: \"1BAD\" is not an environment variable name",
            "fetch.auth[2].host \"b.example/path\" is not a host",
            "fetch.auth[2] needs exactly one of bearer and basic",
            "fetch.auth[3] needs exactly one of bearer and basic",
            "fetch.cookies.initial[\"c.example:80\"]: not a host name",
            "is not a cookie name",
            "the value of \"ok\" is not a cookie value",
        ];
        for want in expected {
            assert!(
                problems.iter().any(|p| p.contains(want)),
                "{want} not in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        assert!(validate(&FetchLimits::default()).is_empty());
    }
}
