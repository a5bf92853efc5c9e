//! A crawl: its id, its configuration and its lifecycle state. What may happen to a stored crawl
//! is decided in [`transition`].

pub mod transition;

use crate::calls::CallTally;
use crate::canonical::CrawlId;
use crate::estimate::{Estimator, Level};
use crate::extract::{Expr, Extractor, ItemsOutput};
use crate::retry::RetryPolicy;
use crate::revisit::{Estimated, Revisit};
use crate::schedule::Schedule;
use crate::task::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Which URLs belong to a crawl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scope {
    /// Hosts or domains whose URLs are followed (`example.com` also admits `www.example.com`).
    /// Empty: the seed URLs' hosts.
    pub allowed_domains: Vec<String>,
    /// Regular expressions; when any are given, a URL must match one.
    pub include: Vec<String>,
    /// Regular expressions; a URL matching one is skipped.
    pub exclude: Vec<String>,
    /// Link depth limit (seeds are depth 0). None: unlimited.
    pub max_depth: Option<u32>,
    /// Most tasks the crawl may ever hold. None: unlimited. Never exceeded, even with many workers.
    pub max_pages: Option<u64>,
    /// Whether links found on pages are crawled.
    pub follow_links: bool,
    /// Query parameters dropped from every URL before it becomes a task: names, or prefixes
    /// ending in `*`. Default: the common tracking parameters (`DEFAULT_DROP_PARAMS`).
    pub drop_params: Vec<String>,
    /// Whether the sitemaps that the seed hosts' robots.txt lists (`Sitemap:` lines) are seeded
    /// with every seed request of URLs or page templates (in a crawl that respects robots.txt).
    pub sitemaps_from_robots: bool,
    /// Whether a page's user data (`Task::data`) is given to the pages it links or redirects to.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inherit_data: bool,
    /// What pages of a kind get (the frontier document's callbacks): the first route whose
    /// pattern matches a task's URL applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The crawl's lanes (`crate::lane`), by name: the kinds of page that share their host's
    /// turns in rotation. Empty: no lanes (a host's due pages are taken in due order alone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<String>,
    /// The most pages of a lane fetched at once by one process (a CLI run, a crawler
    /// container), over all hosts: the lane's own concurrency limit. A lane not listed has none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lane_limits: BTreeMap<String, u32>,
    /// Which images of the pages become tasks (`crate::image`).
    #[serde(skip_serializing_if = "ImageScope::is_default")]
    pub images: ImageScope,
}

/// The images of a crawl (`Scope::images`). An image is fetched from any host unless
/// `allowed_domains` names some (a site's images are on a CDN more often than not), at any
/// depth (an image is part of its page, not a step further); `scope.exclude` applies to it,
/// `scope.allowed_domains`, `include` and `max_depth` do not. It counts in `max_pages`, and
/// robots.txt, the network guard and its host's pace apply as to any page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageScope {
    /// Whether the images of every HTML page (`<img src>`, `srcset`) are fetched and stored
    /// (a route's `images` decides for its pages). Images named by extractor fields marked
    /// `image` are fetched either way.
    pub discover: bool,
    /// Hosts or domains images are fetched from (their subdomains too). Empty: any host.
    pub allowed_domains: Vec<String>,
    /// Store a thumbnail instead of the original (`crate::image::Thumbnail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thumbnail: Option<crate::image::Thumbnail>,
}

impl ImageScope {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// What the pages whose URLs match a pattern get (`Scope::routes`; the pattern as
/// `RecrawlRule`'s: a regular expression, or a glob; exactly one of the two). What a route
/// leaves unset is the crawl's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Whether the page's links are crawled (else `follow_links`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_links: Option<bool>,
    /// Whether the page's body is kept (false: it is read for links and items, its fetch
    /// recorded with its md5, and nothing stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    /// The extractor, by name, that reads the page (else the first whose `url_pattern` matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor: Option<String>,
    /// The priority of the links it matches (`crate::priority`; 0 to 9), and of the seeds that
    /// give none of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::priority::Priority>,
    /// Whether the page's images are fetched and stored (else `images.discover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
    /// The dedup key of the URLs it matches (`crate::chain::KEY_KEY`), from its `match`
    /// pattern's groups: `{1}` is the first group, `{0}` the whole match (`"product-{1}"`).
    /// URLs giving one key are one task. Else a URL is its own key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The lane of the URLs it matches (`crate::lane`; one of `scope.lanes`, or `default`),
    /// fixed when their tasks are created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
}

impl Default for Scope {
    fn default() -> Self {
        Self {
            allowed_domains: Vec::new(),
            include: Vec::new(),
            exclude: Vec::new(),
            max_depth: None,
            max_pages: None,
            follow_links: true,
            drop_params: DEFAULT_DROP_PARAMS.iter().map(|&p| p.to_owned()).collect(),
            sitemaps_from_robots: true,
            inherit_data: false,
            routes: Vec::new(),
            lanes: Vec::new(),
            lane_limits: BTreeMap::new(),
            images: ImageScope::default(),
        }
    }
}

/// Tracking parameters that never change what a page is.
pub const DEFAULT_DROP_PARAMS: &[&str] = &[
    "utm_*", "gclid", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "mc_cid",
    "mc_eid", "igshid", "_ga", "_gl",
];

/// How hard trawl may press one host. Hosts are scheduled as a whole (`crate::host`): one
/// worker at a time holds a host's turn and fetches its due URLs at the host's pace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Politeness {
    /// Requests in flight per host at most (within the host's turn).
    pub per_host: u32,
    /// Pause between the starts of two requests to one host, in milliseconds.
    pub delay_ms: u64,
    /// Longest robots.txt Crawl-delay honoured, in milliseconds.
    pub max_crawl_delay_ms: u64,
    pub respect_robots: bool,
    /// First snooze of a host after a host-wide signal (429, 503, refused or reset connections,
    /// timeouts) without Retry-After; doubled on each further one in a row.
    pub snooze_base_ms: u64,
    /// Longest snooze, and longest Retry-After honoured.
    pub snooze_max_ms: u64,
    /// Host-wide signals in a row after which a host is given up (its tasks end `ignored`).
    pub error_budget: u32,
    /// Most pages one turn of a host fetches before handing the host back.
    pub turn_pages: u32,
    /// Most URLs one host may hold in the crawl (None: no limit). URLs found past it are not
    /// added (counted as deferred): one link pattern (share links, calendars, session ids)
    /// cannot grow a host's backlog without end. A soft limit: concurrent seeders, and the
    /// links of the host's own running turn, may pass it by a batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_host_tasks: Option<u64>,
    /// Per-domain overrides, first match wins: a big site may be given a faster pace.
    pub rules: Vec<HostRule>,
}

impl Default for Politeness {
    fn default() -> Self {
        Self {
            per_host: 1,
            delay_ms: 0,
            max_crawl_delay_ms: 10_000,
            respect_robots: true,
            // 2 s doubling: a dead host is given up after about 4 minutes of trying (8 signals).
            snooze_base_ms: 2_000,
            snooze_max_ms: 3_600_000,
            error_budget: 8,
            turn_pages: 50,
            max_host_tasks: None,
            rules: Vec::new(),
        }
    }
}

/// Politeness for the hosts of one domain (the domain and its subdomains).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    pub domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_host: Option<u32>,
    /// Most pages one turn of the domain's hosts fetches (`Politeness::turn_pages`): a host
    /// paced fast is given longer turns, so that the hand-back between two is a small share of
    /// its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_pages: Option<u32>,
    /// Most URLs one host of the domain may hold (`Politeness::max_host_tasks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_host_tasks: Option<u64>,
}

impl HostRule {
    /// Whether `host` (a host name, with or without `:port`) is the rule's domain or under it.
    pub fn matches(&self, host: &str) -> bool {
        let name = host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        });
        let domain = self.domain.trim_start_matches('.').to_ascii_lowercase();
        let name = name.to_ascii_lowercase();
        name == domain || name.ends_with(&format!(".{domain}"))
    }
}

impl Politeness {
    /// Whether any host of the crawl has a task limit (`max_host_tasks`).
    pub fn caps_hosts(&self) -> bool {
        self.max_host_tasks.is_some() || self.rules.iter().any(|r| r.max_host_tasks.is_some())
    }

    /// Of `n` new URLs for `host`, which holds `seeded` already, how many may be added: all
    /// of them below its limit (`max_host_tasks`, the first matching rule's first), none at it.
    pub fn host_room(&self, host: &str, seeded: u64, n: u64) -> u64 {
        let rule = self.rules.iter().find(|r| r.matches(host));
        match rule.and_then(|r| r.max_host_tasks).or(self.max_host_tasks) {
            Some(max) => n.min(max.saturating_sub(seeded)),
            None => n,
        }
    }

    /// How `host` is paced and when it is given up: the crawl's settings, overridden by the
    /// first rule matching it.
    pub fn host_policy(&self, host: &str) -> crate::host::HostPolicy {
        let rule = self.rules.iter().find(|r| r.matches(host));
        let delay_ms = rule.and_then(|r| r.delay_ms).unwrap_or(self.delay_ms);
        crate::host::HostPolicy {
            delay_ms,
            max_delay_ms: delay_ms.max(60_000),
            snooze_base_ms: self.snooze_base_ms,
            snooze_max_ms: self.snooze_max_ms,
            error_budget: self.error_budget,
            parallel: rule
                .and_then(|r| r.per_host)
                .unwrap_or(self.per_host)
                .max(1),
            turn_pages: rule
                .and_then(|r| r.turn_pages)
                .unwrap_or(self.turn_pages)
                .max(1),
        }
    }
}

/// How each request is made, and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchLimits {
    pub connect_timeout_ms: u64,
    pub timeout_ms: u64,
    /// Largest body stored, after decompression (also the decompression-bomb cap).
    pub max_body_bytes: u64,
    /// Largest image stored (`crate::image`): a larger one fails its task (`too_large`).
    pub max_image_bytes: u64,
    pub max_redirects: u8,
    /// Content types stored besides HTML (e.g. `application/pdf`).
    pub store_content_types: Vec<String>,
    /// Allow loopback and private addresses (intranet crawls, tests). Off by default (SSRF guard).
    pub allow_private_networks: bool,
    /// `ip:port` socket addresses the network guard lets through although they are private
    /// (for tests on 127.0.0.1 and one-off intranet hosts). Honoured for IP-literal URLs only.
    pub guard_exempt: Vec<String>,
    /// Request headers sent with every request, by name. Not for secrets: see `auth`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The Accept-Language header (none by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_language: Option<String>,
    #[serde(skip_serializing_if = "is_get")]
    pub method: HttpMethod,
    /// Sent with POST requests only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<RequestBody>,
    /// Settings for the URLs a rule matches, over the ones above; the first matching rule wins.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<UrlRule>,
    /// Credentials per host, named, never stored: the first entry for a host applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub auth: Vec<HostAuth>,
    #[serde(skip_serializing_if = "Cookies::is_off")]
    pub cookies: Cookies,
    /// Proxies every request goes through (none: direct). A proxy that fails is benched for a
    /// while and the request sent through another one at once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub proxies: Vec<ProxyEntry>,
    /// Which proxy a request takes.
    #[serde(skip_serializing_if = "ProxyRotation::is_per_request")]
    pub proxy_rotation: ProxyRotation,
}

/// A proxy: `http://`, `https://`, `socks5://` (names resolved by trawl) or `socks5h://` (by
/// the proxy) with host and port, never credentials; those are named in `username` and
/// `password` (both or neither). Written as the URL alone when it needs none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ProxyEntryRepr")]
pub struct ProxyEntry {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretRef>,
}

impl ProxyEntry {
    /// A proxy without credentials.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            username: None,
            password: None,
        }
    }
}

/// What `proxies` entries may be written as: a URL, or an object with its credentials.
#[derive(Deserialize)]
#[serde(untagged)]
enum ProxyEntryRepr {
    Url(String),
    Full(ProxyEntryFields),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyEntryFields {
    url: String,
    #[serde(default)]
    username: Option<SecretRef>,
    #[serde(default)]
    password: Option<SecretRef>,
}

impl From<ProxyEntryRepr> for ProxyEntry {
    fn from(repr: ProxyEntryRepr) -> Self {
        match repr {
            ProxyEntryRepr::Url(url) => ProxyEntry::new(url),
            ProxyEntryRepr::Full(f) => ProxyEntry {
                url: f.url,
                username: f.username,
                password: f.password,
            },
        }
    }
}

/// How requests are spread over a crawl's proxies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyRotation {
    /// Each request takes the next proxy (round robin), skipping benched ones.
    #[default]
    PerRequest,
    /// A host always goes through the same proxy (a stable hash of the host), unless that one
    /// is benched: then through the next healthy one.
    Sticky,
}

impl ProxyRotation {
    fn is_per_request(&self) -> bool {
        *self == ProxyRotation::PerRequest
    }
}

/// The HTTP methods a crawl may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    #[default]
    Get,
    /// For API-style seeds; a 301, 302 or 303 answer turns it into a GET without body (as
    /// browsers do), a 307 or 308 keeps it.
    Post,
}

fn is_get(method: &HttpMethod) -> bool {
    *method == HttpMethod::Get
}

/// A request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RequestBody {
    /// Sent as JSON, with `Content-Type: application/json` unless a header names another.
    Json(serde_json::Value),
    /// Sent as is, with `Content-Type: text/plain; charset=utf-8` unless a header names another.
    Text(String),
}

/// Request settings for the URLs matching a pattern (as `RecrawlRule`'s: a regular expression,
/// or a glob where `*` is any run of characters and `?` one; exactly one of the two).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlRule {
    /// A regular expression matched against the task's canonical URL (anywhere in it, unless
    /// anchored). Redirect hops keep the task's settings.
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// A glob matched against the whole canonical URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// Added to the crawl's headers; a header of the same name replaces the crawl's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<HttpMethod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RequestBody>,
}

/// A secret, by name: the configuration never holds the value, which is looked up when a request
/// needs it by the process that sends the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SecretRef {
    /// An environment variable of the fetching process (the CLI, the crawler function).
    Env(String),
    /// An AWS Systems Manager parameter (a `SecureString` is decrypted), by name: read by the
    /// crawler function, which may read only the parameters its deployment names.
    Ssm(String),
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env(name) => write!(f, "env:{name}"),
            SecretRef::Ssm(name) => write!(f, "ssm:{name}"),
        }
    }
}

/// Credentials for one host: exactly one of `bearer` and `basic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostAuth {
    /// `host` (any port) or `host:port`, matched exactly: subdomains and redirects to other
    /// hosts get no credentials.
    pub host: String,
    /// `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicCredentials>,
}

/// `Authorization: Basic …` from a user name and a password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasicCredentials {
    pub username: SecretRef,
    pub password: SecretRef,
}

/// Cookies of a crawl.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cookies {
    /// Keep the cookies responses set (`Set-Cookie`) and send them back, as a browser does.
    pub jar: bool,
    /// Which requests share a jar.
    #[serde(skip_serializing_if = "JarScope::is_crawl")]
    pub scope: JarScope,
    /// Cookies sent from the first request on, by host (a host also covers its subdomains),
    /// then name → value. A cookie of the same name in the jar replaces one listed here.
    pub initial: BTreeMap<String, BTreeMap<String, String>>,
}

/// Which requests of a crawl share a cookie jar.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JarScope {
    /// One jar for the whole crawl: a cookie goes wherever its `Domain` lets it (a login on
    /// `www.example.com` covers `shop.example.com` when the cookie says so).
    #[default]
    Crawl,
    /// One jar per host of the crawl (its host slot): no cookie crosses hosts, as separate
    /// sessions per host would keep them.
    Host,
}

impl JarScope {
    fn is_crawl(&self) -> bool {
        *self == JarScope::Crawl
    }
}

impl Cookies {
    fn is_off(&self) -> bool {
        !self.jar && self.initial.is_empty()
    }
}

impl FetchLimits {
    /// Every secret the crawl names: host credentials and proxy credentials.
    pub fn secret_refs(&self) -> impl Iterator<Item = &SecretRef> {
        let hosts = self.auth.iter().flat_map(|a| {
            let basic = a.basic.iter().flat_map(|b| [&b.username, &b.password]);
            a.bearer.iter().chain(basic)
        });
        let proxies = self
            .proxies
            .iter()
            .flat_map(|p| p.username.iter().chain(p.password.iter()));
        hosts.chain(proxies)
    }
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            timeout_ms: 20_000,
            max_body_bytes: 10 * 1024 * 1024,
            max_image_bytes: 5 * 1024 * 1024,
            max_redirects: 5,
            store_content_types: Vec::new(),
            allow_private_networks: false,
            guard_exempt: Vec::new(),
            headers: BTreeMap::new(),
            accept_language: None,
            method: HttpMethod::Get,
            body: None,
            rules: Vec::new(),
            auth: Vec::new(),
            cookies: Cookies::default(),
            proxies: Vec::new(),
            proxy_rotation: ProxyRotation::PerRequest,
        }
    }
}

/// When pages are fetched again, and when they are taken for gone (`crate::revisit`).
/// A crawl with no schedule anywhere fetches each page once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecrawlPolicy {
    /// A fixed interval between fetches of a page, in milliseconds (MIN_TIME = MAX_TIME).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// An adaptive schedule (Django Dynamic Scraper's); `{}` takes the document's defaults.
    /// `interval_ms` wins when both are given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The change-rate estimator under a fetch budget (`crate::estimate`), e.g.
    /// `{"budget_per_day": 10000}`; `interval_ms` wins over it, it wins over `schedule`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimator: Option<Estimator>,
    /// Schedules per URL, first match wins; URLs no rule matches take the crawl's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RecrawlRule>,
    /// Checks in a row finding a page that had content missing (404/410, a soft 404) that make
    /// it `gone` (until then its content stays current, delivered unchanged).
    pub missing_after: u32,
    /// How long after a check that found a page missing the next check comes, in milliseconds
    /// (None: the checker's minimum interval, `checker.min_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_recheck_ms: Option<u64>,
    /// How gone pages are re-checked (DDS's checker defaults), in a crawl that recrawls.
    pub checker: Schedule,
    /// Pages that answer 200 but say they are not there (soft 404s), per URL.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub soft_404: Vec<Soft404Rule>,
}

impl Default for RecrawlPolicy {
    fn default() -> Self {
        Self {
            interval_ms: None,
            schedule: None,
            estimator: None,
            rules: Vec::new(),
            missing_after: 2,
            missing_recheck_ms: None,
            checker: Schedule::CHECKER,
            soft_404: Vec::new(),
        }
    }
}

impl RecrawlPolicy {
    /// The crawl's own schedule (for URLs no rule matches), unless the estimator schedules them.
    pub fn crawl_schedule(&self) -> Option<Schedule> {
        self.interval_ms.map(Schedule::fixed).or(self.schedule)
    }

    /// The crawl's own estimator (for URLs no rule matches): unless a fixed interval is given.
    pub fn crawl_estimator(&self) -> Option<Estimator> {
        self.estimator.filter(|_| self.interval_ms.is_none())
    }

    /// Whether any page of the crawl is ever fetched again: then the crawl runs on, generation
    /// after generation, and gone pages are re-checked.
    pub fn is_continuous(&self) -> bool {
        self.crawl_schedule().is_some()
            || self.estimator.is_some()
            || self
                .rules
                .iter()
                .any(|r| r.schedule().is_some() || r.estimator().is_some())
    }

    /// The shortest time after a fetch that any page of the crawl can be due again (a recrawl,
    /// a re-check of a page found missing): None when no page is ever fetched again. What a
    /// host's pass can wait before its next (`crate::roster`), without reading its pages.
    pub fn shortest_revisit_ms(&self) -> Option<u64> {
        if !self.is_continuous() {
            return None;
        }
        let schedules = self
            .crawl_schedule()
            .into_iter()
            .chain(self.rules.iter().filter_map(RecrawlRule::schedule))
            .map(|s| s.min_ms);
        let estimated = self.estimators().map(|e| e.min_ms);
        let checks = [
            self.checker.min_ms,
            self.missing_recheck_ms.unwrap_or(self.checker.min_ms),
        ];
        schedules.chain(estimated).chain(checks).min()
    }

    /// Every estimator setting of the crawl (its own and its rules').
    pub fn estimators(&self) -> impl Iterator<Item = Estimator> + '_ {
        self.crawl_estimator()
            .into_iter()
            .chain(self.rules.iter().filter_map(RecrawlRule::estimator))
    }

    /// The fetches per day the estimator's pages share: the sum of the budgets its settings
    /// name (None: no page is estimated).
    pub fn estimator_budget(&self) -> Option<u64> {
        self.estimators()
            .map(|e| e.budget_per_day)
            .reduce(u64::saturating_add)
    }

    /// What the crawl decides for a URL matched by `rule` (None: no rule matched), at the
    /// crawl's water level `level` (`Crawl::level`).
    pub fn revisit(&self, rule: Option<&RecrawlRule>, level: Option<&Level>) -> Revisit {
        let continuous = self.is_continuous();
        let estimator = match rule {
            Some(rule) => rule.estimator(),
            None => self.crawl_estimator(),
        };
        Revisit {
            schedule: match rule {
                Some(rule) => rule.schedule(),
                None => self.crawl_schedule(),
            }
            .filter(|_| estimator.is_none()),
            estimator: estimator.map(|settings| Estimated {
                settings,
                level_ms: level.map(|l| l.ms),
            }),
            listing: rule.is_some_and(|r| r.listing),
            missing_after: self.missing_after.max(1),
            missing_recheck_ms: self.missing_recheck_ms.unwrap_or(self.checker.min_ms),
            recheck: continuous.then_some(self.checker),
        }
    }
}

/// A schedule for the URLs matching a pattern (a regular expression, or a glob where `*` is
/// any run of characters and `?` one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecrawlRule {
    /// A regular expression matched against the canonical URL (anywhere, unless anchored).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// A glob matched against the whole canonical URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// A fixed interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// An adaptive schedule (`{}`: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// The change-rate estimator, its budget added to the crawl's (`RecrawlPolicy::estimator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimator: Option<Estimator>,
    /// Never fetched again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never: bool,
    /// A listing page: new links on it count as a change, as a new md5 does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub listing: bool,
}

impl RecrawlRule {
    /// The rule's estimator: unless the rule says never or names a fixed interval.
    pub fn estimator(&self) -> Option<Estimator> {
        self.estimator
            .filter(|_| !self.never && self.interval_ms.is_none())
    }

    /// The rule's schedule: never, fixed, or adaptive (the defaults when it names none).
    pub fn schedule(&self) -> Option<Schedule> {
        if self.never || self.estimator().is_some() {
            return None;
        }
        Some(
            self.interval_ms
                .map(Schedule::fixed)
                .or(self.schedule)
                .unwrap_or_default(),
        )
    }
}

/// A soft-404 check: a page of the matching URLs that answers 200 yet has its marker — an
/// element matching the CSS `selector`, or an XPath expression whose value is true — (whose
/// text contains `text`, when given) is taken for gone, as a 404 would be (Django Dynamic
/// Scraper's `404_OR_X_PATH` checker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Soft404Rule {
    /// A regular expression the URL must match (none: every URL).
    #[serde(rename = "match", default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// A CSS selector (give this or `xpath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// An XPath 1.0 expression (give this or `selector`): true as XPath's `boolean()` has it —
    /// a non-empty node-set, a non-empty string, a number other than 0, `true()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xpath: Option<String>,
    /// Text the matched element must contain (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A page known to be gone: every sweep checks that the rule still recognises it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_url: Option<String>,
    /// The marker makes a page gone at the check that finds it (Django Dynamic Scraper's
    /// `404_OR_X_PATH`: a page that says it is gone is believed), not after
    /// `recrawl.missing_after` checks as a 404 is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_once: bool,
}

impl Soft404Rule {
    /// The rule's marker: its CSS selector or its XPath (None: neither, or both).
    pub fn marker(&self) -> Option<Expr> {
        match (&self.selector, &self.xpath) {
            (Some(css), None) => Some(Expr::Css(css.clone())),
            (None, Some(xpath)) => Some(Expr::Xpath(xpath.clone())),
            _ => None,
        }
    }
}

/// Default User-Agent; deployments should set their own with a contact URL.
pub const DEFAULT_USER_AGENT: &str = "trawl/0.1 (+https://github.com/trawl-crawler/trawl)";

/// Everything a crawl is configured with; carried by the seed request and stored on the crawl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlConfig {
    pub scope: Scope,
    pub politeness: Politeness,
    pub retry: RetryPolicy,
    pub recrawl: RecrawlPolicy,
    pub fetch: FetchLimits,
    pub user_agent: String,
    /// How long a claim holds a task before another worker may take it over, in milliseconds.
    pub lease_ms: u64,
    pub storage: Storage,
    /// What data is taken out of pages (`crate::extract`); the first extractor matching a
    /// page's URL applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extract: Vec<Extractor>,
    /// How the extracted items are delivered besides `items.jsonl.gz`.
    #[serde(skip_serializing_if = "ItemsOutput::is_default")]
    pub items: ItemsOutput,
    /// The open-ended pagination templates of the crawl's seeds (`crate::paging`): a fetched
    /// page of one of them decides whether its next page is fetched. Added by the seeds that
    /// name them; their pages are seeded by the chain only, never as links.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paging: Vec<crate::paging::PageTemplate>,
    /// What the answers of pages make next (`crate::chain`): every rule matching a fetched
    /// page's URL fills its templates with the page's values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<crate::chain::ChainRule>,
    /// Requests tried again changed when their task is given up (`crate::chain`): the first
    /// rule matching the task's URL applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retry_with: Vec<crate::chain::RetryWith>,
    /// Set the crawl's checkpoint, as each generation is delivered, to the time that
    /// generation started, in this form: the next seed's `{since}` asks for what changed since
    /// the last complete crawl began (Docido's `set_kv('since', crawl_start)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_checkpoint: Option<CheckpointFormat>,
    /// Paused (`trawl pause`, the seeder's `pause`): no turn of the crawl starts and the sweeper
    /// leaves it alone (no turn re-sent, no recrawl woken, no completion) until it is resumed;
    /// its tasks, pages and deliveries stay as they are. Set by the pause and resume operations
    /// only: a configuration written over the crawl's keeps the stored value.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The built-in analysis of each HTML page fetched (Docido's `_analysis`).
    #[serde(skip_serializing_if = "Analysis::is_off")]
    pub analysis: Analysis,
    /// What a delivery holds of the pages besides their manifest lines.
    #[serde(skip_serializing_if = "DeliveryOutput::is_default")]
    pub delivery: DeliveryOutput,
}

impl CrawlConfig {
    /// Whether a delivery copies its pages into WARC files of its own or points at where they
    /// are stored: as asked, else by the layout (`DeliveredPages::default_for`).
    pub fn delivered_pages(&self) -> DeliveredPages {
        self.delivery
            .pages
            .unwrap_or_else(|| DeliveredPages::default_for(self.storage.layout))
    }
}

/// What a crawl's deliveries hold besides their manifests (the configuration's `delivery`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliveryOutput {
    /// Copied or referenced pages; None: the layout's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<DeliveredPages>,
    /// Purge the crawl once a delivery of it is written (the frontier clean-up that follows
    /// the delivery in Scrapy Cloud's workflow, `cleanTask`): its tasks, hosts, page bodies
    /// and record go, its deliveries (and the segments they point into) stay. For a crawl
    /// that does not recrawl: the next generation would need its tasks.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub purge_after: bool,
    /// Keep the deliveries of the last N generations of the run and remove older ones (their
    /// files), after each delivery (`crate::compaction::retention_cutoff`). None: keep all.
    /// What lets compaction delete a segment that older deliveries point into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_generations: Option<u32>,
}

impl DeliveryOutput {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// How a delivery gives its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveredPages {
    /// Each stored page copied, with its request, into the delivery's `pages-NNNNN.warc.gz`:
    /// a delivery that holds everything, read page by page from storage.
    Copy,
    /// No page copied: each manifest line names where its page is stored (a segment, offset
    /// and length: valid WARC as they are, like a CDX index's), and no page is read.
    Reference,
    /// Referenced like `Reference`, and the pages the delta calls new or changed copied into
    /// the delivery's `changed-NNNNN.warc.gz`: a delivery that holds what is new, read only
    /// for what changed.
    Changed,
}

impl DeliveredPages {
    /// Objects are copied: one object per page is no WARC. Segments are referenced: their bytes
    /// are WARC already, and copying them would read and write every page of every generation
    /// again (on S3, a GET per page and the bytes a second time).
    pub fn default_for(layout: StorageLayout) -> Self {
        match layout {
            StorageLayout::Objects => DeliveredPages::Copy,
            StorageLayout::Segments => DeliveredPages::Reference,
        }
    }

    /// The name configurations use.
    pub fn name(self) -> &'static str {
        match self {
            DeliveredPages::Copy => "copy",
            DeliveredPages::Reference => "reference",
            DeliveredPages::Changed => "changed",
        }
    }

    /// The choice a name gives.
    pub fn parse(name: &str) -> Option<Self> {
        [
            DeliveredPages::Copy,
            DeliveredPages::Reference,
            DeliveredPages::Changed,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

/// What the crawler reads from every HTML page it fetches, besides links and items.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Analysis {
    /// Each page's title, description and language (`trawl_domain::task::PageAnalysis`), kept
    /// with its fetch record and written to its manifest line.
    pub page: bool,
    /// Each page's main text, and each stored PDF's text (`PageAnalysis::text`), kept the same
    /// way: it costs a parse of the page.
    pub text: bool,
}

impl Analysis {
    /// The user data key that skips the analysis of one URL (Docido's `_analysis: False`).
    pub const SKIP_KEY: &str = "_analysis";

    pub fn is_off(&self) -> bool {
        !self.page && !self.text
    }

    /// The analysis of a task with user data `data`: none when its data says
    /// `"_analysis": false` (given on its seed line, or inherited with `scope.inherit_data`),
    /// else the crawl's.
    pub fn for_task(&self, data: Option<&crate::task::UserData>) -> Analysis {
        let skipped = data
            .and_then(|d| d.get(Self::SKIP_KEY))
            .is_some_and(|v| v == &serde_json::Value::Bool(false));
        if skipped {
            Analysis::default()
        } else {
            self.clone()
        }
    }
}

/// How a time is written as a checkpoint (`CrawlConfig::auto_checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointFormat {
    /// RFC 3339, UTC, with milliseconds: `2026-11-27T10:00:00.000Z`.
    Rfc3339,
    /// Milliseconds since the Unix epoch.
    EpochMs,
    /// Seconds since the Unix epoch.
    EpochS,
}

impl CheckpointFormat {
    /// The format a name gives (`rfc3339`, `epoch_ms`, `epoch_s`).
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
    }
}

/// How page bodies are kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Storage {
    /// Keep bodies gzip-compressed at rest (S3: `Content-Encoding: gzip`). Readers see the
    /// page's own bytes either way, and the md5 in the key is theirs. Off by default.
    pub compress_bodies: bool,
    /// Where bodies go: one object per page, or appended to segments. Kept for the crawl's
    /// life: a crawl stored before the choice existed has `objects`.
    pub layout: StorageLayout,
    /// On segments: a segment whose live bytes (those its tasks point at) are below this
    /// percentage of its size is rewritten by compaction (`crate::compaction`); 0: never.
    /// Effective only with `delivery.keep_generations`: deliveries point into segments.
    pub compact_below_percent: u8,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            compress_bodies: false,
            layout: StorageLayout::default(),
            compact_below_percent: crate::compaction::DEFAULT_COMPACT_BELOW_PERCENT,
        }
    }
}

/// How a crawl's page bodies are laid out in the blob store (`trawl_core::blob`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageLayout {
    /// One object per page body, keyed by its task and md5 (and one for its items).
    #[default]
    Objects,
    /// Each body appended as a WARC record (its items as a second one) to a segment file;
    /// the fetch record locates it (segment, offset, length).
    Segments,
}

impl StorageLayout {
    /// The name configurations use.
    pub fn name(self) -> &'static str {
        match self {
            StorageLayout::Objects => "objects",
            StorageLayout::Segments => "segments",
        }
    }

    /// The layout a name gives.
    pub fn parse(name: &str) -> Option<Self> {
        [StorageLayout::Objects, StorageLayout::Segments]
            .into_iter()
            .find(|l| l.name() == name)
    }
}

impl Default for CrawlConfig {
    fn default() -> Self {
        Self {
            scope: Scope {
                follow_links: true,
                ..Scope::default()
            },
            politeness: Politeness::default(),
            retry: RetryPolicy::default(),
            recrawl: RecrawlPolicy::default(),
            fetch: FetchLimits::default(),
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            lease_ms: 120_000,
            storage: Storage::default(),
            extract: Vec::new(),
            items: ItemsOutput::default(),
            paging: Vec::new(),
            chains: Vec::new(),
            retry_with: Vec::new(),
            auto_checkpoint: None,
            paused: false,
            analysis: Analysis::default(),
            delivery: DeliveryOutput::default(),
        }
    }
}

/// Where a crawl is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrawlState {
    Running,
    /// No task left to do; set exactly once per generation, and it triggers a delivery.
    Completed,
}

impl CrawlState {
    pub fn name(self) -> &'static str {
        match self {
            CrawlState::Running => "running",
            CrawlState::Completed => "completed",
        }
    }
}

/// A crawl as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crawl {
    pub id: CrawlId,
    pub config: CrawlConfig,
    pub state: CrawlState,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Counts completions: each recrawl round that completes is a new generation (and delivery).
    pub generation: u64,
    /// Task slots taken from `scope.max_pages`.
    pub pages_reserved: u64,
    /// Backend calls made for the crawl since it was created, by every function and container:
    /// each invocation adds its own (`CrawlStore::add_calls`).
    #[serde(default)]
    pub calls: CallTally,
    /// A source's own incremental position (Docido's `since`): an opaque string, read and
    /// written through seed requests, that trawl only keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Sweeps whose re-test of a soft-404 rule's `reference_url` found the rule no longer
    /// recognising its page (the site's "not found" page changed: the rule needs updating).
    #[serde(default)]
    pub reference_misses: u64,
    /// Who completed the current generation (`transition::complete`): its repeat, after an
    /// answer lost, is still its change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<String>,
    /// Who writes the crawl's delivery, until when (`transition::claim_delivery`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryLease>,
    /// The change-rate estimator's water level (`crate::estimate`), set by the sweeper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
    /// When the current generation began (`transition::reopen`); None for the first
    /// generation, which began with the crawl (`generation_start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_started_at: Option<Millis>,
}

impl Crawl {
    pub fn new(id: CrawlId, config: CrawlConfig, now: Millis) -> Self {
        Self {
            id,
            config,
            state: CrawlState::Running,
            created_at: now,
            updated_at: now,
            generation: 0,
            pages_reserved: 0,
            calls: CallTally::new(),
            checkpoint: None,
            reference_misses: 0,
            completed_by: None,
            delivery: None,
            level: None,
            generation_started_at: None,
        }
    }

    /// When the current generation began.
    pub fn generation_start(&self) -> Millis {
        self.generation_started_at.unwrap_or(self.created_at)
    }
}

/// Who writes a crawl's delivery, until when (`transition::claim_delivery`): one writer at a
/// time, so that two deliverer invocations of one generation (a duplicated notice, an operator's
/// `trawl deliver` beside the Lambda) never write the same segments at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryLease {
    pub holder: String,
    pub until: Millis,
}

impl DeliveryLease {
    /// Whether this lease keeps `holder` from writing at `now`: only another holder's, and only
    /// until it expires (a holder that died is waited out, never forever).
    pub fn refuses(&self, holder: &str, now: Millis) -> bool {
        self.holder != holder && self.until > now
    }
}

/// Whether a crawl whose config went from `old` to `new` should look again at a task it
/// ignored with `refused` (its last error): the setting that refused it was loosened. A
/// network-guard refusal is re-admitted when the guard's settings changed, a robots.txt one when
/// robots.txt is no longer obeyed, an off-scope one when the scope changed (its URL is then
/// checked against the new scope by the caller). The re-admitted fetch decides again.
pub fn readmits(old: &CrawlConfig, new: &CrawlConfig, refused: crate::task::ErrorKind) -> bool {
    use crate::task::ErrorKind;
    match refused {
        ErrorKind::Blocked => {
            (old.fetch.allow_private_networks, &old.fetch.guard_exempt)
                != (new.fetch.allow_private_networks, &new.fetch.guard_exempt)
        }
        ErrorKind::RobotsDenied => old.politeness.respect_robots && !new.politeness.respect_robots,
        ErrorKind::OutOfScope => old.scope != new.scope,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_whose_data_says_analysis_false_is_not_analysed_and_any_other_is() {
        let crawl = Analysis {
            page: true,
            text: true,
        };
        let data = |v: serde_json::Value| v.as_object().cloned();
        let skip = data(serde_json::json!({"_analysis": false, "campaign": "x"}));
        assert!(crawl.for_task(skip.as_ref()).is_off());
        // Only `false` itself skips: no data, other keys, `true`, or a string keep the crawl's.
        for kept in [
            None,
            data(serde_json::json!({"campaign": "x"})),
            data(serde_json::json!({"_analysis": true})),
            data(serde_json::json!({"_analysis": "false"})),
        ] {
            assert_eq!(crawl.for_task(kept.as_ref()), crawl, "{kept:?}");
        }
    }

    #[test]
    fn a_hosts_room_is_what_its_limit_leaves_a_rule_first() {
        let mut politeness = Politeness::default();
        assert!(!politeness.caps_hosts());
        assert_eq!(politeness.host_room("a.example", 1_000_000, 7), 7);
        politeness.max_host_tasks = Some(10);
        politeness.rules = vec![HostRule {
            domain: "big.example".into(),
            delay_ms: None,
            per_host: None,
            turn_pages: None,
            max_host_tasks: Some(100),
        }];
        assert!(politeness.caps_hosts());
        assert_eq!(politeness.host_room("a.example", 8, 7), 2);
        assert_eq!(politeness.host_room("a.example", 12, 7), 0);
        assert_eq!(politeness.host_room("www.big.example:8080", 12, 7), 7);
        assert_eq!(politeness.host_room("big.example", 98, 7), 2);
    }

    #[test]
    fn an_update_readmits_what_the_loosened_setting_refused_and_nothing_else() {
        use crate::task::ErrorKind;
        let old = CrawlConfig::default();
        let mut open = old.clone();
        open.fetch.allow_private_networks = true;
        assert!(readmits(&old, &open, ErrorKind::Blocked));
        assert!(!readmits(&old, &open, ErrorKind::RobotsDenied));
        assert!(!readmits(&old, &open, ErrorKind::NotFound));
        assert!(!readmits(&old, &old, ErrorKind::Blocked), "nothing changed");
        let mut wider = old.clone();
        wider.scope.allowed_domains.push("example.org".into());
        assert!(readmits(&old, &wider, ErrorKind::OutOfScope));
        let mut rude = old.clone();
        rude.politeness.respect_robots = false;
        assert!(readmits(&old, &rude, ErrorKind::RobotsDenied));
        assert!(!readmits(&rude, &old, ErrorKind::RobotsDenied), "tightened");
    }

    #[test]
    fn a_segment_layouts_pages_are_delivered_by_reference_unless_copies_are_asked_for() {
        let mut config = CrawlConfig::default();
        assert_eq!(config.delivered_pages(), DeliveredPages::Copy);
        config.storage.layout = StorageLayout::Segments;
        assert_eq!(config.delivered_pages(), DeliveredPages::Reference);
        let asked: CrawlConfig = serde_json::from_value(serde_json::json!({
            "storage": {"layout": "segments"},
            "delivery": {"pages": "copy"}
        }))
        .unwrap();
        assert_eq!(asked.delivered_pages(), DeliveredPages::Copy);
        // The default is not written out: a stored crawl follows its layout's.
        let written = serde_json::to_value(&config).unwrap();
        assert!(written.get("delivery").is_none(), "{written}");
        assert!(
            serde_json::from_value::<CrawlConfig>(serde_json::json!({
                "delivery": {"pages": "some"}
            }))
            .is_err()
        );
    }

    #[test]
    fn a_delivery_lease_refuses_only_another_holder_until_it_expires() {
        let lease = DeliveryLease {
            holder: "a".into(),
            until: 100,
        };
        assert!(lease.refuses("b", 99));
        assert!(!lease.refuses("b", 100), "expired: taken over");
        assert!(!lease.refuses("a", 99), "its own holder renews it");
    }

    #[test]
    fn request_settings_read_as_documented_and_stay_out_of_default_configs() {
        let fetch: FetchLimits = serde_json::from_value(serde_json::json!({
            "headers": {"X-Client": "trawl"},
            "accept_language": "fr-CH, fr;q=0.9",
            "rules": [{"match": "/api/search$", "method": "POST", "body": {"json": {"q": "rust"}}}],
            "auth": [
                {"host": "api.example.com", "bearer": {"env": "API_TOKEN"}},
                {"host": "intranet:8080", "basic": {"username": {"env": "U"}, "password": {"env": "P"}}}
            ],
            "cookies": {"jar": true, "initial": {"example.com": {"consent": "yes"}}}
        }))
        .unwrap();
        assert_eq!(fetch.rules[0].method, Some(HttpMethod::Post));
        assert_eq!(
            fetch.auth[0].bearer,
            Some(SecretRef::Env("API_TOKEN".into()))
        );
        assert_eq!(SecretRef::Env("P".into()).to_string(), "env:P");
        assert!(fetch.cookies.jar);

        let default = serde_json::to_value(FetchLimits::default()).unwrap();
        for key in [
            "headers",
            "accept_language",
            "method",
            "body",
            "rules",
            "auth",
            "cookies",
            "proxies",
            "proxy_rotation",
        ] {
            assert!(default.get(key).is_none(), "{key} in {default}");
        }
    }

    #[test]
    fn proxies_read_as_urls_or_with_named_credentials() {
        let fetch: FetchLimits = serde_json::from_value(serde_json::json!({
            "proxies": [
                "http://proxy-a:3128",
                {"url": "socks5h://proxy-b:1080",
                 "username": {"env": "PROXY_USER"}, "password": {"env": "PROXY_PASS"}}
            ],
            "proxy_rotation": "sticky"
        }))
        .unwrap();
        assert_eq!(fetch.proxies[0], ProxyEntry::new("http://proxy-a:3128"));
        assert_eq!(
            fetch.proxies[1].password,
            Some(SecretRef::Env("PROXY_PASS".into()))
        );
        assert_eq!(fetch.proxy_rotation, ProxyRotation::Sticky);
        // Stored as objects, read back the same.
        let stored = serde_json::to_value(&fetch).unwrap();
        assert_eq!(
            stored["proxies"][0],
            serde_json::json!({"url": "http://proxy-a:3128"})
        );
        assert_eq!(
            serde_json::from_value::<FetchLimits>(stored).unwrap(),
            fetch
        );
        let typo = serde_json::json!({"proxies": [{"url": "http://p:1", "pasword": {"env": "P"}}]});
        assert!(serde_json::from_value::<FetchLimits>(typo).is_err());
        let rotation = serde_json::json!({"proxy_rotation": "random"});
        assert!(serde_json::from_value::<FetchLimits>(rotation).is_err());
    }

    #[test]
    fn unknown_request_fields_are_refused() {
        let typo = serde_json::json!({"auth": [{"host": "h", "bearer_token": "x"}]});
        assert!(serde_json::from_value::<FetchLimits>(typo).is_err());
        let method = serde_json::json!({"method": "DELETE"});
        assert!(serde_json::from_value::<FetchLimits>(method).is_err());
    }
}
