//! Proxies: a crawl's requests go through the proxies its `fetch.proxies` lists, taken in turn
//! (`per_request`) or pinned by host (`sticky`).
//!
//! - Credentials are named, like `fetch.auth`'s: resolved through the fetcher's `SecretSource`
//!   when a request is sent, and put only into the proxy settings of the HTTP client built for
//!   that proxy (rebuilt when the values change). Failures and messages name the reference.
//! - A proxy that fails (it cannot be reached, resets, times out, its tunnel or SOCKS handshake
//!   fails, or it answers 407 or 502 to a request it forwards) is benched: 60 s, doubling with
//!   each failure in a row up to 15 min, cleared by a success. The failure is the proxy's: the
//!   request is sent again at once through the next healthy proxy, each proxy at most once per
//!   request; only when none is left does the fetch fail, with a transient `Connection` error
//!   whose message starts with [`NO_PROXY`] and names the proxies.
//! - The network guard still applies to the target: its host is resolved and checked before a
//!   request goes to a proxy (and `socks5://`, which resolves locally, connects to a checked
//!   address only). The proxy's own address is allowed explicitly, private or not.
//!
//! The proxy resolves `socks5h://` targets and the targets of HTTP proxies itself, so a target
//! whose DNS answer changes between trawl's check and the proxy's lookup is not caught: the
//! guard protects the network trawl runs in, which a proxy elsewhere is not part of.

use super::guard::{self, GuardedResolver, ResolveError};
use crate::secrets::{Secret, SecretSource, reference_problem};
use reqwest::{Client, StatusCode};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::{FetchLimits, ProxyEntry, ProxyRotation, SecretRef};
use trawl_domain::retry::Failure;
use trawl_domain::task::ErrorKind;

/// Most proxies a crawl may list.
pub const MAX_PROXIES: usize = 64;
/// The start of the message of a fetch that found no healthy proxy.
pub const NO_PROXY: &str = "no proxy available";
/// How long a proxy is benched after a first failure; doubled by each failure in a row.
const BENCH_BASE: Duration = Duration::from_secs(60);
const BENCH_MAX: Duration = Duration::from_secs(15 * 60);
/// Proxy clients kept (one per proxy, guard setting and connect timeout).
const MAX_CLIENTS: usize = 64;
/// Proxies whose health is remembered; past this, those not benched are forgotten.
const MAX_TRACKED: usize = 1024;
const SCHEMES: [&str; 4] = ["http", "https", "socks5", "socks5h"];

/// What trawl saw of one proxy since the process started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyStats {
    /// The proxy's URL (which never holds credentials).
    pub url: String,
    /// Requests sent through it.
    pub requests: u64,
    /// Requests it failed.
    pub failures: u64,
    /// Times it was benched.
    pub benched: u64,
    /// Whether it is benched now.
    pub benched_now: bool,
}

#[derive(Debug, Default)]
struct Health {
    requests: u64,
    failures: u64,
    benched: u64,
    /// Failures in a row.
    strikes: u32,
    until: Option<Instant>,
    last_failure: String,
}

struct Cached {
    client: Client,
    credentials: Option<(Secret, Secret)>,
}

/// How a proxy carries a request, which decides whose failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// An HTTP(S) proxy forwarding a plain-HTTP request: it sees the request and answers it.
    Forward,
    /// An HTTP(S) proxy tunnelling (CONNECT) to an HTTPS target.
    Tunnel,
    /// A SOCKS5 proxy.
    Socks,
}

impl Mode {
    pub(crate) fn of(proxy: &str, target: &CanonicalUrl) -> Mode {
        if proxy.starts_with("socks") {
            Mode::Socks
        } else if target.as_url().scheme() == "https" {
            Mode::Tunnel
        } else {
            Mode::Forward
        }
    }
}

/// The proxies' health and clients, shared by every crawl of the process.
#[derive(Default)]
pub(crate) struct ProxyPool {
    health: Mutex<HashMap<String, Health>>,
    cursor: AtomicUsize,
    clients: Mutex<HashMap<(String, bool, u64), Cached>>,
}

impl ProxyPool {
    /// The indices of `fetch.proxies` in the order a request to `host` (in `session`) tries
    /// them: from the next in turn, or from the host's own (the host's session's).
    pub(crate) fn order(
        &self,
        fetch: &FetchLimits,
        host: &str,
        session: Option<&str>,
    ) -> Vec<usize> {
        let n = fetch.proxies.len();
        if n == 0 {
            return Vec::new();
        }
        let start = match fetch.proxy_rotation {
            ProxyRotation::PerRequest => self.cursor.fetch_add(1, Ordering::Relaxed) % n,
            ProxyRotation::Sticky => {
                let pinned = match session {
                    Some(session) => stable_hash(&format!("{host}\n{session}")),
                    None => stable_hash(host),
                };
                usize::try_from(pinned % n as u64).unwrap_or(0)
            }
        };
        (0..n).map(|i| (start + i) % n).collect()
    }

    pub(crate) fn is_benched(&self, url: &str, now: Instant) -> bool {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(url)
            .and_then(|h| h.until)
            .is_some_and(|until| until > now)
    }

    pub(crate) fn record_request(&self, url: &str) {
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        if health.len() >= MAX_TRACKED && !health.contains_key(url) {
            let now = Instant::now();
            health.retain(|_, h| h.until.is_some_and(|until| until > now));
        }
        health.entry(url.to_owned()).or_default().requests += 1;
    }

    /// The proxy carried a request: its run of failures ends.
    pub(crate) fn record_success(&self, url: &str) {
        if let Some(h) = self
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(url)
        {
            h.strikes = 0;
        }
    }

    /// Counts a failure against the proxy and benches it; returns for how long.
    pub(crate) fn record_failure(&self, url: &str, reason: &str, now: Instant) -> Duration {
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        let h = health.entry(url.to_owned()).or_default();
        h.failures += 1;
        h.strikes = h.strikes.saturating_add(1);
        let doublings = h.strikes.saturating_sub(1).min(16);
        let bench = BENCH_BASE.saturating_mul(1 << doublings).min(BENCH_MAX);
        h.benched += 1;
        h.until = Some(now + bench);
        h.last_failure = reason.to_owned();
        bench
    }

    /// Every proxy seen so far, by URL.
    pub(crate) fn stats(&self, now: Instant) -> Vec<ProxyStats> {
        let health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stats: Vec<ProxyStats> = health
            .iter()
            .map(|(url, h)| ProxyStats {
                url: url.clone(),
                requests: h.requests,
                failures: h.failures,
                benched: h.benched,
                benched_now: h.until.is_some_and(|until| until > now),
            })
            .collect();
        stats.sort_by(|a, b| a.url.cmp(&b.url));
        stats
    }

    /// The failure of a fetch for which no proxy was left, naming each with why it is benched.
    pub(crate) fn exhausted(&self, proxies: &[ProxyEntry], now: Instant) -> Failure {
        let health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        let states: Vec<String> = proxies
            .iter()
            .map(|p| match health.get(&p.url) {
                Some(h) if h.until.is_some_and(|until| until > now) => {
                    let left = h
                        .until
                        .map_or(0, |until| (until - now).as_millis().div_ceil(1000));
                    format!("{} benched for {left} s ({})", p.url, h.last_failure)
                }
                _ => format!("{} failed", p.url),
            })
            .collect();
        Failure::new(
            ErrorKind::Connection,
            format!("{NO_PROXY}: {}", states.join("; ")),
        )
    }

    /// The client that sends through `proxy`, with its credentials as they are now; and the
    /// password, to keep it out of messages.
    pub(crate) async fn client(
        &self,
        proxy: &ProxyEntry,
        guarded: bool,
        connect_ms: u64,
        secrets: &dyn SecretSource,
    ) -> Result<(Client, Option<Secret>), Failure> {
        let credentials = match (&proxy.username, &proxy.password) {
            (Some(user), Some(pass)) => Some((
                resolve(secrets, user, proxy).await?,
                resolve(secrets, pass, proxy).await?,
            )),
            (None, None) => None,
            _ => {
                return Err(configuration(format!(
                    "fetch.proxies: {} names only one of username and password",
                    proxy.url
                )));
            }
        };
        let password = credentials.as_ref().map(|(_, p)| p.clone());
        let key = (proxy.url.clone(), guarded, connect_ms);
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = clients.get(&key)
            && cached.credentials == credentials
        {
            return Ok((cached.client.clone(), password));
        }
        let client = build(proxy, credentials.as_ref(), guarded, connect_ms)?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(
            key,
            Cached {
                client: client.clone(),
                credentials,
            },
        );
        Ok((client, password))
    }
}

fn build(
    proxy: &ProxyEntry,
    credentials: Option<&(Secret, Secret)>,
    guarded: bool,
    connect_ms: u64,
) -> Result<Client, Failure> {
    // Messages name the proxy by its URL, never by what reqwest holds (the credentials).
    let invalid = || configuration(format!("fetch.proxies: {} is not a proxy URL", proxy.url));
    let parsed = url::Url::parse(&proxy.url).map_err(|_| invalid())?;
    let mut settings = reqwest::Proxy::all(parsed.as_str()).map_err(|_| invalid())?;
    if let Some((user, pass)) = credentials {
        settings = settings.basic_auth(user.expose(), pass.expose());
    }
    let builder = super::client_builder(connect_ms).proxy(settings);
    let builder = match (guarded, parsed.host_str()) {
        (true, Some(host)) => builder.dns_resolver(GuardedResolver::exempting(host)),
        (true, None) => builder.dns_resolver(GuardedResolver::default()),
        (false, _) => builder,
    };
    builder.build().map_err(|_| {
        Failure::new(
            ErrorKind::Connection,
            format!("cannot build the HTTP client for proxy {}", proxy.url),
        )
    })
}

async fn resolve(
    secrets: &dyn SecretSource,
    reference: &SecretRef,
    proxy: &ProxyEntry,
) -> Result<Secret, Failure> {
    secrets.resolve(reference).await.map_err(|e| {
        Failure::new(
            e.kind(),
            format!("credentials for proxy {}: {e}", proxy.url),
        )
    })
}

/// Checks the target of a request sent through a proxy, as a direct request would be: its
/// host, resolved now, must have an address the guard allows. IP literals are checked (with
/// their exemptions) before this.
pub(crate) async fn check_target(url: &CanonicalUrl) -> Result<(), Failure> {
    if !matches!(url.as_url().host(), Some(url::Host::Domain(_))) {
        return Ok(());
    }
    let port = url.as_url().port_or_known_default().unwrap_or(80);
    match guard::check_resolved(url.host(), port).await {
        Ok(_) => Ok(()),
        Err(ResolveError::Blocked(blocked)) => {
            Err(Failure::new(ErrorKind::Blocked, blocked.to_string()))
        }
        Err(e @ ResolveError::Lookup(_)) => Err(Failure::new(
            ErrorKind::Connection,
            format!("{}: {e}", url.host()),
        )),
    }
}

/// Whether a transport error (already classified as `failure`) is the proxy's fault.
pub(crate) fn error_is_proxys(error: &reqwest::Error, failure: &Failure, mode: Mode) -> bool {
    if failure.kind == ErrorKind::Blocked {
        return false;
    }
    let connect_timeout = error.is_connect() && error.is_timeout();
    let message = failure.message.as_str();
    match mode {
        // Every byte of the exchange is between trawl and the proxy.
        Mode::Forward => true,
        // Past the tunnel, errors (TLS with the target …) are the target's.
        Mode::Tunnel => connect_timeout || message.contains("tunnel error"),
        Mode::Socks => {
            // The proxy reached out and the target was not there: the target's failure.
            let target_down = [
                "host unreachable",
                "network unreachable",
                "connection refused",
                "ttl expired",
            ]
            .iter()
            .any(|status| message.contains(&format!("SOCKS error: {status}")));
            !target_down && (connect_timeout || message.contains("error connecting to socks proxy"))
        }
    }
}

/// Whether a response is the proxy's own failure rather than the target's answer.
pub(crate) fn status_is_proxys(status: StatusCode, mode: Mode) -> bool {
    mode == Mode::Forward
        && matches!(
            status,
            StatusCode::PROXY_AUTHENTICATION_REQUIRED | StatusCode::BAD_GATEWAY
        )
}

/// Whether a failure is a fetch that found no proxy to go through.
pub(crate) fn is_exhausted(failure: &Failure) -> bool {
    failure.kind == ErrorKind::Connection && failure.message.starts_with(NO_PROXY)
}

/// `text` with every occurrence of `secret` replaced (a guard: messages are built from errors
/// that should never hold it).
pub(crate) fn scrub(text: &str, secret: Option<&Secret>) -> String {
    match secret.map(Secret::expose).filter(|s| !s.is_empty()) {
        Some(value) => text.replace(value, "<redacted>"),
        None => text.to_owned(),
    }
}

/// FNV-1a: the same host picks the same proxy in every process and version.
fn stable_hash(host: &str) -> u64 {
    host.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Checks `fetch.proxies`; returns every problem found. Messages name a proxy by its index, as
/// a URL with credentials written into it would otherwise be echoed.
pub(crate) fn validate(fetch: &FetchLimits) -> Vec<String> {
    let mut problems = Vec::new();
    if fetch.proxies.len() > MAX_PROXIES {
        problems.push(format!("fetch.proxies: at most {MAX_PROXIES} proxies"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, proxy) in fetch.proxies.iter().enumerate() {
        let at = format!("fetch.proxies[{i}]");
        match url::Url::parse(proxy.url.trim()) {
            Err(_) => problems.push(format!("{at} is not a URL")),
            Ok(url) => {
                if !url.username().is_empty() || url.password().is_some() {
                    problems.push(format!(
                        "{at}: the URL may not hold credentials; name them in username and password"
                    ));
                } else if !seen.insert(url.as_str().to_owned()) {
                    problems.push(format!("{at} is listed twice"));
                }
                if !SCHEMES.contains(&url.scheme()) {
                    problems.push(format!(
                        "{at}: the scheme must be http, https, socks5 or socks5h"
                    ));
                }
                if url.host_str().is_none_or(str::is_empty) {
                    problems.push(format!("{at}: the URL has no host"));
                }
                if (url.path() != "/" && !url.path().is_empty())
                    || url.query().is_some()
                    || url.fragment().is_some()
                {
                    problems.push(format!("{at}: the URL must be scheme://host:port only"));
                }
            }
        }
        match (&proxy.username, &proxy.password) {
            (Some(user), Some(pass)) => {
                problems.extend(
                    [user, pass]
                        .into_iter()
                        .filter_map(reference_problem)
                        .map(|problem| format!("{at}: {problem}")),
                );
            }
            (None, None) => {}
            _ => problems.push(format!("{at} needs both username and password, or neither")),
        }
    }
    problems
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

    fn fetch_with(value: serde_json::Value) -> FetchLimits {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn per_request_rotation_takes_the_proxies_in_turn() {
        let fetch =
            fetch_with(serde_json::json!({"proxies": ["http://a:1", "http://b:1", "http://c:1"]}));
        let pool = ProxyPool::default();
        let firsts: Vec<usize> = (0..6).map(|_| pool.order(&fetch, "h", None)[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
        assert_eq!(pool.order(&fetch, "h", None), [0, 1, 2]);
    }

    #[test]
    fn sticky_rotation_pins_a_host_or_its_session_and_spreads_them() {
        let fetch = fetch_with(serde_json::json!({
            "proxies": ["http://a:1", "http://b:1", "http://c:1"],
            "proxy_rotation": "sticky"
        }));
        let pool = ProxyPool::default();
        let host = |h: &str| pool.order(&fetch, h, None)[0];
        for h in ["example.com", "127.0.0.1", "a.b.c"] {
            let first = host(h);
            assert!((0..5).all(|_| host(h) == first), "{h}");
        }
        let used: std::collections::BTreeSet<usize> =
            (0..30).map(|i| host(&format!("host{i}.example"))).collect();
        assert_eq!(used.len(), 3);
        // A host's sessions are pinned each, and spread too.
        let session = |s: &str| pool.order(&fetch, "example.com", Some(s))[0];
        assert!((0..5).all(|_| session("s1") == session("s1")));
        let used: std::collections::BTreeSet<usize> =
            (0..30).map(|i| session(&format!("s{i}"))).collect();
        assert_eq!(used.len(), 3);
        // Stable across processes and versions: FNV-1a of the host.
        assert_eq!(stable_hash("example.com"), 0x5768_4663_4e27_14c6);
    }

    #[test]
    fn a_failing_proxy_is_benched_longer_each_time_until_it_carries_a_request() {
        let pool = ProxyPool::default();
        let now = Instant::now();
        let url = "http://a:1";
        pool.record_request(url);
        assert!(!pool.is_benched(url, now));
        assert_eq!(pool.record_failure(url, "x", now), Duration::from_secs(60));
        assert!(pool.is_benched(url, now + Duration::from_secs(59)));
        assert!(!pool.is_benched(url, now + Duration::from_secs(60)));
        assert_eq!(pool.record_failure(url, "x", now), Duration::from_secs(120));
        for _ in 0..10 {
            pool.record_failure(url, "x", now);
        }
        assert_eq!(pool.record_failure(url, "x", now), BENCH_MAX);
        pool.record_success(url);
        assert_eq!(pool.record_failure(url, "x", now), Duration::from_secs(60));
        let stats = pool.stats(now);
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].requests, stats[0].failures), (1, 14));
        assert_eq!(stats[0].benched, 14);
        assert!(stats[0].benched_now);
    }

    #[test]
    fn no_proxy_left_is_a_transient_failure_naming_the_proxies() {
        let pool = ProxyPool::default();
        let now = Instant::now();
        let proxies = [
            ProxyEntry::new("http://a:1"),
            ProxyEntry::new("socks5://b:2"),
        ];
        pool.record_failure("http://a:1", "HTTP 502 from the proxy", now);
        let failure = pool.exhausted(&proxies, now);
        assert!(failure.kind.is_transient());
        assert!(is_exhausted(&failure));
        assert_eq!(
            failure.message,
            "no proxy available: http://a:1 benched for 60 s (HTTP 502 from the proxy); socks5://b:2 failed"
        );
    }

    #[test]
    fn only_what_a_forwarding_proxy_answers_itself_is_its_failure() {
        assert!(status_is_proxys(StatusCode::BAD_GATEWAY, Mode::Forward));
        assert!(status_is_proxys(
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            Mode::Forward
        ));
        assert!(!status_is_proxys(StatusCode::BAD_GATEWAY, Mode::Socks));
        assert!(!status_is_proxys(StatusCode::BAD_GATEWAY, Mode::Tunnel));
        assert!(!status_is_proxys(StatusCode::NOT_FOUND, Mode::Forward));
        let https = CanonicalUrl::parse("https://example.com/").unwrap();
        let http = CanonicalUrl::parse("http://example.com/").unwrap();
        assert_eq!(Mode::of("http://p:1", &https), Mode::Tunnel);
        assert_eq!(Mode::of("https://p:1", &http), Mode::Forward);
        assert_eq!(Mode::of("socks5h://p:1", &http), Mode::Socks);
    }

    #[test]
    fn proxy_settings_are_checked_without_echoing_credentials() {
        let fetch = fetch_with(serde_json::json!({"proxies": [
            "http://user:hunter2@p:1",
            "ftp://p:2",
            "http://p:3/path",
            {"url": "socks5://p:4", "username": {"env": "U"}},
            {"url": "socks5h://p:5", "username": {"env": "U"}, "password": {"env": "1P"}},
            "not a url",
            "http://p:7",
            "HTTP://P:7/"
        ]}));
        let problems = validate(&fetch);
        let expected = [
            "fetch.proxies[0]: the URL may not hold credentials",
            "fetch.proxies[1]: the scheme must be",
            "fetch.proxies[2]: the URL must be scheme://host:port only",
            "fetch.proxies[3] needs both username and password",
            "fetch.proxies[4]: \"1P\" is not an environment variable name",
            "fetch.proxies[5] is not a URL",
            "fetch.proxies[7] is listed twice",
        ];
        for want in expected {
            assert!(
                problems.iter().any(|p| p.contains(want)),
                "{want} not in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        assert!(!format!("{problems:?}").contains("hunter2"));
    }

    #[test]
    fn scrubbing_removes_a_secret() {
        let secret = Secret::new("s3cret");
        assert_eq!(scrub("a s3cret b", Some(&secret)), "a <redacted> b");
        assert_eq!(scrub("a b", None), "a b");
    }
}
