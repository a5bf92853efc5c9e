//! Fetching one URL the way a polite, careful crawler must: robots.txt, the network guard,
//! redirects re-checked hop by hop, conditional GET, timeouts and a hard cap on the body; and as
//! a real client: the crawl's headers, method and body, credentials and cookies ([`request`]),
//! through the crawl's proxies ([`proxy`]).
//!
//! One [`Fetcher`] is built per process and shared; each [`Fetcher::fetch`] takes the crawl's
//! configuration, so crawls with different limits share connections and the robots cache. It
//! keeps the cookie jars too, one per crawl (or per crawl and host) that keeps cookies.

pub mod cookie_file;
mod guard;
mod proxy;
mod request;
mod robots;
mod stats;

pub use crate::discover::is_html_type;
pub use crate::secrets::{EnvSecrets, Secret, SecretError, SecretSource};
pub use guard::{BlockedAddress, forbidden_class, is_forbidden};
pub use proxy::{MAX_PROXIES, NO_PROXY, ProxyStats};
pub use request::MAX_JARS;
pub use request::validate as validate_request_settings;
pub use stats::{FetchStats, LATENCY_SAMPLES};

use crate::discover::{ScopeMatcher, media_type};
use bytes::{Bytes, BytesMut};
use guard::GuardedResolver;
use request::{Jars, RequestPlan, RuleSets};
use reqwest::cookie::{CookieStore, Jar};
use reqwest::header::{self, HeaderMap};
use reqwest::{Client, Method, Response, StatusCode};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, UrlError};
use trawl_domain::crawl::{CrawlConfig, DEFAULT_USER_AGENT};
use trawl_domain::retry::{Failure, parse_retry_after};
use trawl_domain::task::{ACCEPT, ErrorKind, FetchRecord, Millis, Sent};

/// Clients kept per distinct connect timeout (crawls rarely differ; this bounds odd configs).
const MAX_CLIENTS: usize = 8;

/// The HTTP client could not be built (TLS backend initialisation).
#[derive(Debug, Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct FetcherError(#[from] reqwest::Error);

/// What to fetch, and under which crawl's rules.
#[derive(Debug, Clone, Copy)]
pub struct FetchRequest<'a> {
    /// The task's URL.
    pub url: &'a CanonicalUrl,
    /// The crawl whose cookie jar the request uses, when it keeps one (None: no jar, as for a
    /// sitemap read while seeding).
    pub crawl_id: Option<&'a CrawlId>,
    pub config: &'a CrawlConfig,
    /// The task's last successful fetch, for If-None-Match / If-Modified-Since.
    pub previous: Option<&'a FetchRecord>,
    /// Every redirect hop must stay inside this scope.
    pub scope: &'a ScopeMatcher,
    /// The task's link depth (redirect hops keep it).
    pub depth: u32,
    /// The wall clock, for Retry-After dates.
    pub now: Millis,
    /// What a GET's redirect to an in-scope URL ends in.
    pub redirects: Redirects,
    /// The media type the task's data gives its body (`_mime_type`), taken over the
    /// response's Content-Type: what is stored, analysed and recorded.
    pub content_type: Option<&'a str>,
    /// The URL is an image (`trawl_domain::image`): only an `image/*` body is kept, up to
    /// `fetch.max_image_bytes`, and redirect hops are checked against the image scope.
    pub image: bool,
    /// The task's session (`trawl_domain::task::SESSION_KEY`): its own cookie jar, and its
    /// own sticky proxy.
    pub session: Option<&'a str>,
    /// The task's own method and body (`trawl_domain::chain::TaskRequest`), over the crawl's.
    pub request: Option<&'a trawl_domain::chain::TaskRequest>,
}

/// How a GET follows redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Up to `fetch.max_redirects` hops, each checked against scope and guard (sitemaps).
    Follow,
    /// Stop at the first hop and report it (`FetchOutcome::Redirected`): the crawler records it
    /// and makes the target a task of its own, so that a page reached both by a redirect and by
    /// a link is fetched once. Requests other than GET still follow (a 303 turns a POST into
    /// the GET of its result).
    Report,
}

/// How a fetch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// A 2xx response.
    Fetched(FetchedPage),
    /// A 304: the previous content still stands.
    NotModified(NotModified),
    /// A GET's redirect to an in-scope URL (with `Redirects::Report`).
    Redirected {
        status: u16,
        location: CanonicalUrl,
    },
    Failed(Failure),
}

/// A 2xx response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPage {
    pub status: u16,
    /// The URL after redirects (the task's URL when there were none).
    pub final_url: CanonicalUrl,
    pub redirects: u8,
    /// The Content-Type header as sent.
    pub content_type: Option<String>,
    /// Bytes of the body after decompression when it was read; the declared length otherwise.
    pub content_length: Option<u64>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// The body, when its type is stored (HTML or one of `store_content_types`); other types are
    /// recorded without being downloaded.
    pub body: Option<Body>,
    /// What the request that got this answer sent (None: nothing beyond a plain GET).
    pub sent: Option<Sent>,
}

impl FetchedPage {
    /// Whether the content is HTML (and so worth scanning for links).
    pub fn is_html(&self) -> bool {
        self.content_type.as_deref().is_some_and(is_html_type)
    }
}

/// A downloaded body (after decompression) and its md5, computed once, as it is downloaded.
pub use crate::blob::Body;

/// Whether a body of `content_type` is kept for `req`: an image's when it is an image, a page's
/// when it is HTML or one of `fetch.store_content_types`.
fn stores(req: &FetchRequest<'_>, content_type: Option<&str>) -> bool {
    content_type.is_some_and(|ct| {
        let media = media_type(ct);
        match req.image {
            true => trawl_domain::image::is_image_type(&media),
            false => {
                is_html_type(&media)
                    || req
                        .config
                        .fetch
                        .store_content_types
                        .iter()
                        .any(|t| t.trim().eq_ignore_ascii_case(&media))
            }
        }
    })
}

/// The answer for `req` whose content was handed over (`trawl_domain::task::CONTENT_KEY`):
/// nothing is sent; `content` is the body, of the task's given type (else HTML), kept as a
/// fetched body would be.
pub fn pushed(req: &FetchRequest<'_>, content: &str) -> FetchOutcome {
    let content_type = req.content_type.unwrap_or("text/html; charset=utf-8");
    let bytes = content.len() as u64;
    if bytes > req.config.fetch.max_body_bytes {
        return FetchOutcome::Failed(Failure::new(
            ErrorKind::TooLarge,
            format!("content of {bytes} bytes over fetch.max_body_bytes"),
        ));
    }
    let body = stores(req, Some(content_type)).then(|| Body::new(content.to_owned()));
    FetchOutcome::Fetched(FetchedPage {
        status: 200,
        final_url: req.url.clone(),
        redirects: 0,
        content_type: Some(content_type.to_owned()),
        content_length: Some(bytes),
        etag: None,
        last_modified: None,
        body,
        sent: None,
    })
}

/// A 304 answer to a conditional GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotModified {
    pub final_url: CanonicalUrl,
    pub redirects: u8,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// What the conditional request sent.
    pub sent: Option<Sent>,
}

/// The last hop of a redirect chain: its URL, the hops before it, what its request sent.
struct FinalHop {
    url: CanonicalUrl,
    redirects: u8,
    sent: Option<Sent>,
}

/// Fetches pages; build one per process and share it.
pub struct Fetcher {
    default_user_agent: String,
    /// Keyed by (guarded, connect timeout in ms): reqwest fixes the connect timeout per client.
    clients: Mutex<HashMap<(bool, u64), Client>>,
    robots: robots::RobotsCache,
    rules: RuleSets,
    jars: Jars,
    secrets: Arc<dyn SecretSource>,
    proxies: proxy::ProxyPool,
    stats: Mutex<FetchStats>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("default_user_agent", &self.default_user_agent)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    /// Builds the guarded and unguarded clients. `default_user_agent` serves crawls that name
    /// none (empty: trawl's own).
    pub fn new(default_user_agent: &str) -> Result<Self, FetcherError> {
        let default_user_agent = match default_user_agent.trim() {
            "" => DEFAULT_USER_AGENT.to_owned(),
            ua => ua.to_owned(),
        };
        let connect_ms = trawl_domain::crawl::FetchLimits::default().connect_timeout_ms;
        let mut clients = HashMap::new();
        for guarded in [true, false] {
            clients.insert((guarded, connect_ms), build_client(guarded, connect_ms)?);
        }
        Ok(Self {
            default_user_agent,
            clients: Mutex::new(clients),
            robots: robots::RobotsCache::default(),
            rules: RuleSets::default(),
            jars: Jars::default(),
            secrets: Arc::new(EnvSecrets),
            proxies: proxy::ProxyPool::default(),
            stats: Mutex::default(),
        })
    }

    /// Looks credentials up in `secrets` instead of the process environment.
    pub fn with_secrets(mut self, secrets: Arc<dyn SecretSource>) -> Self {
        self.secrets = secrets;
        self
    }

    /// What this fetcher saw of each proxy it sent requests through (requests, failures, times
    /// benched), by URL.
    pub fn proxy_stats(&self) -> Vec<ProxyStats> {
        self.proxies.stats(Instant::now())
    }

    /// Fetches `req.url`: robots.txt first (when the crawl respects it), then the page, following
    /// redirects itself so that every hop is canonicalised and checked against the scope, the
    /// network guard and robots.txt. Never panics and never returns early without an outcome.
    pub async fn fetch(&self, req: FetchRequest<'_>) -> FetchOutcome {
        let started = Instant::now();
        let outcome = match self.fetch_inner(&req).await {
            Ok(outcome) => outcome,
            Err(failure) => FetchOutcome::Failed(failure),
        };
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&outcome, started.elapsed());
        outcome
    }

    /// What the fetches since the last call came to (by status or error kind, latencies).
    pub fn take_stats(&self) -> FetchStats {
        std::mem::take(&mut *self.stats.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The robots.txt Crawl-delay for `url`'s origin, capped at the crawl's
    /// `max_crawl_delay_ms` (None when robots.txt is not respected, has none, or is unavailable).
    /// Cached: after a fetch of the same origin this costs no request.
    pub async fn crawl_delay(&self, url: &CanonicalUrl, config: &CrawlConfig) -> Option<Duration> {
        if !config.politeness.respect_robots {
            return None;
        }
        let max = Duration::from_millis(config.politeness.max_crawl_delay_ms);
        self.robots_rules(url, config)
            .await
            .ok()
            .and_then(|rules| rules.crawl_delay(max))
    }

    /// The sitemaps the `Sitemap:` lines of `url`'s robots.txt name (none when it has none or
    /// is unavailable). Cached as `crawl_delay` is.
    pub async fn robots_sitemaps(&self, url: &CanonicalUrl, config: &CrawlConfig) -> Vec<String> {
        match self.robots_rules(url, config).await.as_deref() {
            Ok(robots::Rules::Parsed(robot)) => robot.sitemaps.clone(),
            _ => Vec::new(),
        }
    }

    async fn fetch_inner(&self, req: &FetchRequest<'_>) -> Result<FetchOutcome, Failure> {
        let limits = &req.config.fetch;
        let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
        // The conditional headers belong to the URL the previous fetch ended at.
        let conditional_url = req
            .previous
            .and_then(|p| p.final_url.as_deref())
            .unwrap_or(req.url.as_str());
        let mut url = req.url.clone();
        // Chosen for the task's URL before anything is sent: a bad configuration fails first.
        let mut plan = self.rules.plan(&url, limits, req.request)?;
        let mut visited = HashSet::from([url.clone()]);
        let mut redirects: u8 = 0;
        loop {
            if req.config.politeness.respect_robots {
                // The guard is checked before robots.txt too, so a forbidden host sees nothing.
                self.check_guard(&url, req.config)?;
                self.robots_rules(&url, req.config).await?.check(&url)?;
            }
            let previous = req
                .previous
                .filter(|_| url.as_str() == conditional_url && plan.method == Method::GET);
            let jar = self
                .jars
                .of(req.crawl_id, &url, &limits.cookies, req.session);
            let (response, sent) = self
                .send(
                    &url,
                    req.config,
                    req.session,
                    &plan,
                    previous,
                    jar.as_deref(),
                    deadline,
                )
                .await?;
            let status = response.status();
            let next = match Hop::of(&response, &url) {
                Hop::Final => {
                    let hop = FinalHop {
                        url,
                        redirects,
                        sent: sent.kept(),
                    };
                    break self.finish(response, hop, req, deadline).await;
                }
                Hop::Redirect(next) => next.map_err(|e| {
                    with_status(
                        Failure::new(
                            ErrorKind::InvalidContent,
                            format!("bad redirect location: {e}"),
                        ),
                        status,
                    )
                })?,
            };
            if redirects >= limits.max_redirects {
                return Err(with_status(
                    Failure::new(
                        ErrorKind::TooManyRedirects,
                        format!("more than {} redirects", limits.max_redirects),
                    ),
                    status,
                ));
            }
            if !visited.insert(next.clone()) {
                return Err(with_status(
                    Failure::new(
                        ErrorKind::TooManyRedirects,
                        format!("redirect loop at {next}"),
                    ),
                    status,
                ));
            }
            let in_scope = match req.image {
                true => req.scope.check_image(&next),
                false => req.scope.check(&next, req.depth),
            };
            if let Err(reason) = in_scope {
                return Err(with_status(
                    Failure::new(
                        ErrorKind::OutOfScope,
                        format!("redirect to {next}: {reason}"),
                    ),
                    status,
                ));
            }
            if req.redirects == Redirects::Report && plan.method == Method::GET {
                return Ok(FetchOutcome::Redirected {
                    status: status.as_u16(),
                    location: next,
                });
            }
            redirects += 1;
            plan.follow(status);
            url = next;
        }
    }

    /// Turns the last response of a redirect chain into the outcome.
    async fn finish(
        &self,
        response: Response,
        hop: FinalHop,
        req: &FetchRequest<'_>,
        deadline: Instant,
    ) -> Result<FetchOutcome, Failure> {
        let FinalHop {
            url: final_url,
            redirects,
            sent,
        } = hop;
        let status = response.status();
        let headers = response.headers();
        let etag = header_string(headers, header::ETAG);
        let last_modified = header_string(headers, header::LAST_MODIFIED);
        if status == StatusCode::NOT_MODIFIED {
            return Ok(FetchOutcome::NotModified(NotModified {
                final_url,
                redirects,
                etag,
                last_modified,
                sent,
            }));
        }
        if !status.is_success() {
            let retry_after = match status {
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                    header_string(headers, header::RETRY_AFTER)
                        .and_then(|v| parse_retry_after(&v, req.now))
                }
                _ => None,
            };
            return Err(Failure::from_http_status(status.as_u16(), retry_after));
        }
        let content_type = match req.content_type {
            Some(given) => Some(given.to_owned()),
            None => header_string(headers, header::CONTENT_TYPE),
        };
        let declared_length = response.content_length();
        let limits = &req.config.fetch;
        let stored = stores(req, content_type.as_deref());
        let max_bytes = match req.image {
            true => limits.max_image_bytes,
            false => limits.max_body_bytes,
        };
        let mut page = FetchedPage {
            status: status.as_u16(),
            final_url,
            redirects,
            content_type,
            content_length: declared_length,
            etag,
            last_modified,
            body: None,
            sent,
        };
        if !stored {
            return Ok(FetchOutcome::Fetched(page));
        }
        let too_large = || {
            Failure::new(
                ErrorKind::TooLarge,
                format!("body larger than {max_bytes} bytes"),
            )
        };
        // Without Content-Encoding reqwest reports the declared length: refuse before reading.
        if declared_length.is_some_and(|len| len > max_bytes) {
            return Err(too_large());
        }
        let capped = read_capped(response, max_bytes, deadline).await?;
        if capped.exceeded {
            return Err(too_large());
        }
        page.content_length = Some(capped.bytes.len() as u64);
        page.body = Some(Body::new(capped.bytes));
        Ok(FetchOutcome::Fetched(page))
    }

    fn check_guard(&self, url: &CanonicalUrl, config: &CrawlConfig) -> Result<(), Failure> {
        if config.fetch.allow_private_networks {
            return Ok(());
        }
        guard::check_literal(url.as_url(), &config.fetch.guard_exempt)
            .map_err(|e| Failure::new(ErrorKind::Blocked, e.to_string()))
    }

    /// Sends one request (no redirect following), directly or through the crawl's proxies,
    /// after checking the target against the network guard; keeps the cookies it sets in `jar`
    /// (the crawl's, when it keeps one). Answers what the request sent too.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        url: &CanonicalUrl,
        config: &CrawlConfig,
        session: Option<&str>,
        plan: &RequestPlan,
        previous: Option<&FetchRecord>,
        jar: Option<&Jar>,
        deadline: Instant,
    ) -> Result<(Response, Sent), Failure> {
        self.check_guard(url, config)?;
        let guarded = !config.fetch.allow_private_networks;
        let connect_ms = config.fetch.connect_timeout_ms;
        let (response, sent) = if config.fetch.proxies.is_empty() {
            let client = self.client(guarded, connect_ms)?;
            let request = self
                .prepare(&client, url, config, plan, previous, jar)
                .await?;
            let sent = request::sent(&request);
            match tokio::time::timeout_at(deadline, client.execute(request)).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => return Err(classify(&e)),
                Ok(Ok(response)) => (response, sent),
            }
        } else {
            self.send_through_proxies(url, config, session, plan, previous, jar, deadline)
                .await?
        };
        if let Some(jar) = jar {
            let mut set = response.headers().get_all(header::SET_COOKIE).iter();
            jar.set_cookies(&mut set, url.as_url());
        }
        Ok((response, sent))
    }

    /// Sends through the first healthy proxy in the crawl's rotation order; a proxy that fails
    /// is benched and the next one tried at once (each at most once).
    #[allow(clippy::too_many_arguments)]
    async fn send_through_proxies(
        &self,
        url: &CanonicalUrl,
        config: &CrawlConfig,
        session: Option<&str>,
        plan: &RequestPlan,
        previous: Option<&FetchRecord>,
        jar: Option<&Jar>,
        deadline: Instant,
    ) -> Result<(Response, Sent), Failure> {
        let fetch = &config.fetch;
        let guarded = !fetch.allow_private_networks;
        if guarded {
            // The proxy connects to the target: trawl checks where it would go first.
            tokio::time::timeout_at(deadline, proxy::check_target(url))
                .await
                .map_err(|_| timed_out())??;
        }
        for index in self.proxies.order(fetch, url.host(), session) {
            let Some(entry) = fetch.proxies.get(index) else {
                continue;
            };
            if self.proxies.is_benched(&entry.url, Instant::now()) {
                continue;
            }
            let (client, password) = self
                .proxies
                .client(entry, guarded, fetch.connect_timeout_ms, &*self.secrets)
                .await?;
            let request = self
                .prepare(&client, url, config, plan, previous, jar)
                .await?;
            let mode = proxy::Mode::of(&entry.url, url);
            self.proxies.record_request(&entry.url);
            let sent = request::sent(&request);
            let fault = match tokio::time::timeout_at(deadline, client.execute(request)).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => {
                    let mut failure = classify(&e);
                    failure.message = proxy::scrub(&failure.message, password.as_ref());
                    if !proxy::error_is_proxys(&e, &failure, mode) {
                        return Err(failure);
                    }
                    failure.message
                }
                Ok(Ok(response)) => {
                    let status = response.status();
                    if !proxy::status_is_proxys(status, mode) {
                        self.proxies.record_success(&entry.url);
                        return Ok((response, sent));
                    }
                    format!("HTTP {} from the proxy", status.as_u16())
                }
            };
            let benched = self
                .proxies
                .record_failure(&entry.url, &fault, Instant::now());
            tracing::warn!(proxy = %entry.url, url = %url, error = %fault, benched_s = benched.as_secs(), "proxy failed: benched, trying the next one");
        }
        Err(self.proxies.exhausted(&fetch.proxies, Instant::now()))
    }

    /// The request to `url` on `client`, with everything the crawl sends: User-Agent, the
    /// plan's method, headers and body, credentials, cookies and conditional headers. Built
    /// here, so that what it sends is known before it is sent.
    async fn prepare(
        &self,
        client: &Client,
        url: &CanonicalUrl,
        config: &CrawlConfig,
        plan: &RequestPlan,
        previous: Option<&FetchRecord>,
        jar: Option<&Jar>,
    ) -> Result<reqwest::Request, Failure> {
        let request = client
            .request(plan.method.clone(), url.as_str())
            .header(header::USER_AGENT, self.user_agent(config))
            .header(header::ACCEPT, ACCEPT);
        let mut request = plan.apply(request);
        request = request::authorize(request, url, &config.fetch.auth, &*self.secrets).await?;
        if let Some(cookies) = request::cookie_header(url, &config.fetch.cookies, jar)? {
            request = request.header(header::COOKIE, cookies);
        }
        if let Some(prev) = previous {
            if let Some(etag) = &prev.etag {
                request = request.header(header::IF_NONE_MATCH, etag);
            }
            if let Some(lm) = &prev.last_modified {
                request = request.header(header::IF_MODIFIED_SINCE, lm);
            }
        }
        request.build().map_err(|e| classify(&e))
    }

    fn user_agent<'a>(&'a self, config: &'a CrawlConfig) -> &'a str {
        match config.user_agent.trim() {
            "" => &self.default_user_agent,
            ua => ua,
        }
    }

    fn client(&self, guarded: bool, connect_ms: u64) -> Result<Client, Failure> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let wanted = (guarded, connect_ms);
        let key = if clients.contains_key(&wanted) || clients.len() < MAX_CLIENTS {
            wanted
        } else {
            (
                guarded,
                trawl_domain::crawl::FetchLimits::default().connect_timeout_ms,
            )
        };
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(key.0, key.1)
            .map_err(|e| Failure::new(ErrorKind::Connection, e.to_string()))?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// A client builder with TLS ready: ring installed as the process's rustls provider first (the
/// workspace builds reqwest without one; installing again, or after another provider, is a no-op).
/// Every HTTP client of the workspace starts here.
pub fn http_client() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
}

/// The settings every client shares: no redirects followed (`fetch` checks every hop), no
/// proxy from the environment (a proxy would resolve names past the guard; the crawl's own
/// proxies are set by [`proxy`]), the connect timeout.
fn client_builder(connect_ms: u64) -> reqwest::ClientBuilder {
    http_client()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(Duration::from_millis(connect_ms))
        .pool_idle_timeout(Duration::from_secs(30))
}

fn build_client(guarded: bool, connect_ms: u64) -> Result<Client, FetcherError> {
    let builder = client_builder(connect_ms);
    let builder = if guarded {
        builder.dns_resolver(GuardedResolver::default())
    } else {
        builder
    };
    Ok(builder.build()?)
}

fn timed_out() -> Failure {
    Failure::new(ErrorKind::Timeout, "no response in time")
}

/// Where a response leads.
enum Hop {
    /// Not a redirect: this response is the answer.
    Final,
    /// A redirect (301, 302, 303, 307, 308 with a Location), resolved and canonicalised.
    Redirect(Result<CanonicalUrl, UrlError>),
}

impl Hop {
    fn of(response: &Response, url: &CanonicalUrl) -> Hop {
        let status = response.status();
        let is_redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
        match response.headers().get(header::LOCATION) {
            Some(location) if is_redirect => {
                let location = String::from_utf8_lossy(location.as_bytes());
                Hop::Redirect(CanonicalUrl::join(url.as_url(), &location))
            }
            _ => Hop::Final,
        }
    }
}

/// A body read up to a cap.
struct Capped {
    bytes: Bytes,
    /// The body went on past the cap (`bytes` holds the first `cap` bytes).
    exceeded: bool,
}

/// Streams the (decompressed) body, keeping at most `cap` bytes and stopping as soon as it goes
/// past them, so a decompression bomb costs no more than the cap.
async fn read_capped(
    mut response: Response,
    cap: u64,
    deadline: Instant,
) -> Result<Capped, Failure> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let initial = response
        .content_length()
        .and_then(|len| usize::try_from(len).ok())
        .unwrap_or(0)
        .min(cap)
        .min(1024 * 1024);
    let mut buf = BytesMut::with_capacity(initial);
    loop {
        let chunk = match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => {
                return Err(Failure::new(
                    ErrorKind::Timeout,
                    "body not received in time",
                ));
            }
            Ok(Err(e)) => return Err(classify(&e)),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        let room = cap - buf.len();
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            return Ok(Capped {
                bytes: buf.freeze(),
                exceeded: true,
            });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Capped {
        bytes: buf.freeze(),
        exceeded: false,
    })
}

/// Classifies a reqwest error, naming its causes (reqwest's own message rarely says why).
fn classify(error: &reqwest::Error) -> Failure {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    let mut blocked = false;
    while let Some(cause) = source {
        blocked |= cause.downcast_ref::<BlockedAddress>().is_some();
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    let kind = if blocked {
        ErrorKind::Blocked
    } else if error.is_timeout() {
        ErrorKind::Timeout
    } else if error.is_decode() {
        ErrorKind::InvalidContent
    } else {
        ErrorKind::Connection
    };
    Failure::new(kind, message)
}

fn with_status(mut failure: Failure, status: StatusCode) -> Failure {
    failure.http_status = Some(status.as_u16());
    failure
}

fn header_string(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's reqwest has no TLS provider of its own: a client built here must still
    /// speak TLS (a handshake that fails on the peer, not a panic for want of a provider).
    #[tokio::test]
    async fn a_client_speaks_tls_with_the_provider_installed_here() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            drop(socket);
        });
        let client = http_client().build().unwrap();
        let error = client
            .get(format!("https://{addr}/"))
            .send()
            .await
            .unwrap_err();
        assert!(error.is_connect(), "{error:?}");
        server.await.unwrap();
    }

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn the_fetcher_can_be_shared_across_tasks() {
        assert_send_sync::<Fetcher>();
        let fetcher = Fetcher::new("").unwrap();
        let config = CrawlConfig::default();
        let scope = ScopeMatcher::new(&config.scope).unwrap();
        let url = CanonicalUrl::parse("http://example.com/").unwrap();
        let fetch = fetcher.fetch(FetchRequest {
            url: &url,
            crawl_id: None,
            config: &config,
            previous: None,
            scope: &scope,
            depth: 0,
            now: 0,
            redirects: Redirects::Report,
            content_type: None,
            image: false,
            session: None,
            request: None,
        });
        assert_send(&fetch);
        let delay = fetcher.crawl_delay(&url, &config);
        assert_send(&delay);
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        assert_eq!(media_type("Text/HTML; charset=UTF-8"), "text/html");
        assert_eq!(media_type("application/pdf"), "application/pdf");
    }
}
