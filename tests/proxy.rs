//! Crawling through proxies: a small HTTP forward proxy and a small SOCKS5 proxy, written here on
//! tokio, count what passes through them (and fail when told to); the crawls go through the
//! core crawler on the embedded backend (`client`'s harness) and through the `trawl` binary.

use crate::client::{Run, assert_status, config};
use crate::site::{Route, Site};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use trawl_core::discover::ScopeMatcher;
use trawl_core::fetch::{FetchOutcome, FetchRequest, Fetcher, ProxyStats};
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::task::{ErrorKind, Status};

/// When a test proxy fails a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failing {
    Never,
    /// The 2nd, 4th, 6th … request (an HTTP proxy answers 502, a SOCKS proxy hangs up in the
    /// handshake).
    EveryOther,
    Always,
}

/// What a test proxy saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Requests (HTTP) or connections (SOCKS) received.
    received: AtomicU64,
    /// Those it failed on purpose, or refused for bad credentials.
    failed: AtomicU64,
    refused: AtomicU64,
    /// Requests (HTTP) or tunnels (SOCKS) passed on, by target `host:port`.
    forwarded: Mutex<BTreeMap<String, u64>>,
}

impl Seen {
    pub(crate) fn forwarded(&self) -> u64 {
        self.forwarded.lock().unwrap().values().sum()
    }

    fn targets(&self) -> BTreeSet<String> {
        self.forwarded.lock().unwrap().keys().cloned().collect()
    }
}

/// A proxy on 127.0.0.1 that stops when dropped.
pub(crate) struct TestProxy {
    pub(crate) url: String,
    pub(crate) seen: Arc<Seen>,
    server: JoinHandle<()>,
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl TestProxy {
    /// A forward HTTP proxy (plain-HTTP targets, one request per connection); with
    /// `credentials`, it wants `Proxy-Authorization: Basic <credentials>`, which it does not
    /// pass on.
    pub(crate) async fn http(failing: Failing, credentials: Option<&str>) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let expected = credentials.map(|c| format!("basic {c}"));
        let state = Arc::clone(&seen);
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = state.received.fetch_add(1, Ordering::SeqCst) + 1;
                let (state, expected) = (Arc::clone(&state), expected.clone());
                tokio::spawn(async move {
                    let _ = forward(stream, n, failing, expected.as_deref(), &state).await;
                });
            }
        });
        TestProxy { url, seen, server }
    }

    /// A SOCKS5 proxy (CONNECT by IPv4 address or by name); with `credentials` (user,
    /// password) it wants username/password authentication.
    async fn socks5(
        scheme: &str,
        failing: Failing,
        credentials: Option<(&str, &str)>,
    ) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let credentials = credentials.map(|(u, p)| (u.to_owned(), p.to_owned()));
        let state = Arc::clone(&seen);
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = state.received.fetch_add(1, Ordering::SeqCst) + 1;
                let (state, credentials) = (Arc::clone(&state), credentials.clone());
                tokio::spawn(async move {
                    let _ = socks(stream, n, failing, credentials, &state).await;
                });
            }
        });
        TestProxy { url, seen, server }
    }
}

fn fails(failing: Failing, n: u64) -> bool {
    match failing {
        Failing::Never => false,
        Failing::EveryOther => n.is_multiple_of(2),
        Failing::Always => true,
    }
}

async fn forward(
    mut client: TcpStream,
    n: u64,
    failing: Failing,
    expected: Option<&str>,
    seen: &Seen,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        if client.read(&mut byte).await? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if fails(failing, n) {
        seen.failed.fetch_add(1, Ordering::SeqCst);
        return client
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
    }
    let mut authorized = expected.is_none();
    let mut headers = String::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name = name.trim().to_ascii_lowercase();
        if name == "proxy-authorization" {
            authorized |= expected.is_some_and(|e| value.trim().eq_ignore_ascii_case(e));
        } else if !matches!(
            name.as_str(),
            "connection" | "proxy-connection" | "keep-alive"
        ) {
            headers.push_str(line);
            headers.push_str("\r\n");
        }
    }
    if !authorized {
        seen.refused.fetch_add(1, Ordering::SeqCst);
        return client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic realm=\"test\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut upstream = TcpStream::connect(authority).await?;
    *seen
        .forwarded
        .lock()
        .unwrap()
        .entry(authority.to_owned())
        .or_default() += 1;
    upstream
        .write_all(
            format!("{method} {path} HTTP/1.1\r\n{headers}connection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

async fn socks(
    mut client: TcpStream,
    n: u64,
    failing: Failing,
    credentials: Option<(String, String)>,
    seen: &Seen,
) -> std::io::Result<()> {
    let mut greeting = [0u8; 2];
    client.read_exact(&mut greeting).await?;
    let mut methods = vec![0u8; usize::from(greeting[1])];
    client.read_exact(&mut methods).await?;
    if fails(failing, n) {
        // Hang up in the middle of the handshake.
        seen.failed.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    }
    match &credentials {
        None => client.write_all(&[5, 0]).await?,
        Some((user, password)) => {
            client.write_all(&[5, 2]).await?;
            let mut version_len = [0u8; 2];
            client.read_exact(&mut version_len).await?;
            let mut got_user = vec![0u8; usize::from(version_len[1])];
            client.read_exact(&mut got_user).await?;
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut got_password = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut got_password).await?;
            if got_user != user.as_bytes() || got_password != password.as_bytes() {
                seen.refused.fetch_add(1, Ordering::SeqCst);
                return client.write_all(&[1, 1]).await;
            }
            client.write_all(&[1, 0]).await?;
        }
    }
    let mut request = [0u8; 4];
    client.read_exact(&mut request).await?;
    let host = match request[3] {
        1 => {
            let mut ip = [0u8; 4];
            client.read_exact(&mut ip).await?;
            IpAddr::from(ip).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return client.write_all(&[5, 8, 0, 1, 0, 0, 0, 0, 0, 0]).await,
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    let authority = format!("{host}:{}", u16::from_be_bytes(port));
    let Ok(mut upstream) = TcpStream::connect(&authority).await else {
        return client.write_all(&[5, 4, 0, 1, 0, 0, 0, 0, 0, 0]).await;
    };
    *seen.forwarded.lock().unwrap().entry(authority).or_default() += 1;
    client.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Another loopback address (`127.0.0.N`) for `site`: a TCP relay, so that one site can be
/// reached under several hosts.
async fn alias(ip: &str, site: &Site) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind(format!("{ip}:0")).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let target = site.addr();
    let relay = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, relay)
}

/// A site of `n` pages, each linking to the next (and a robots.txt allowing everything).
async fn chain_site(n: usize) -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for i in 0..n {
        let next = if i + 1 < n {
            format!(r#"<a href="/p/{}.html">next</a>"#, i + 1)
        } else {
            String::new()
        };
        site.route(
            &format!("/p/{i}.html"),
            Route::html(format!("<p>{i}</p>{next}")),
        );
    }
    site
}

fn stats_of(fetcher: &Fetcher, proxy: &TestProxy) -> ProxyStats {
    fetcher
        .proxy_stats()
        .into_iter()
        .find(|s| s.url == proxy.url)
        .unwrap_or_else(|| panic!("no stats for {}", proxy.url))
}

async fn assert_all_succeeded(run: &Run, site: &Site, n: usize) {
    for i in 0..n {
        let task = run.task(&site.url(&format!("/p/{i}.html"))).await;
        assert_status(&task, Status::Succeeded);
        assert!(task.errors.is_empty(), "{:?}", task.errors);
    }
}

#[tokio::test]
async fn an_http_proxy_carries_every_page_and_requests_take_the_proxies_in_turn() {
    // GIVEN a site of 8 pages and two forward HTTP proxies, the second wanting a password
    const PASSWORD: &str = "proxy-pass-9c1e";
    let site = chain_site(8).await;
    let a = TestProxy::http(Failing::Never, None).await;
    let b = TestProxy::http(Failing::Never, Some("Ym9iOnByb3h5LXBhc3MtOWMxZQ==")).await;
    let fetch = json!({"proxies": [
        a.url,
        {"url": b.url, "username": {"env": "PROXY_USER"}, "password": {"env": "PROXY_PASS"}}
    ]});

    // WHEN it is crawled through them, one request each in turn
    let run = Run::new(&[("PROXY_USER", "bob"), ("PROXY_PASS", PASSWORD)]);
    run.crawl(config(&[&site], fetch), &[site.url("/p/0.html")])
        .await;

    // THEN every page succeeded, every request the site got came through a proxy, and the
    // proxies took turns
    assert_all_succeeded(&run, &site, 8).await;
    let (via_a, via_b) = (a.seen.forwarded(), b.seen.forwarded());
    assert_eq!(site.total_hits(), via_a + via_b);
    assert_eq!(site.total_hits(), 9, "8 pages and robots.txt");
    assert!(via_a.abs_diff(via_b) <= 1, "{via_a} / {via_b}");
    assert_eq!(b.seen.refused.load(Ordering::SeqCst), 0);
    // AND the fetcher counted the same
    for (proxy, via) in [(&a, via_a), (&b, via_b)] {
        let stats = stats_of(&run.fetcher, proxy);
        assert_eq!((stats.requests, stats.failures, stats.benched), (via, 0, 0));
    }
}

#[tokio::test]
async fn socks5_proxies_carry_every_page_whoever_resolves_the_names() {
    // GIVEN a site of 6 pages, a socks5 proxy (trawl resolves) and a socks5h one (the proxy
    // resolves) wanting a user name and password
    let site = chain_site(6).await;
    let local = TestProxy::socks5("socks5", Failing::Never, None).await;
    let remote =
        TestProxy::socks5("socks5h", Failing::Never, Some(("bob", "socks-pass-77a0"))).await;
    let fetch = json!({"proxies": [
        local.url,
        {"url": remote.url, "username": {"env": "U"}, "password": {"env": "P"}}
    ]});

    // WHEN it is crawled through them
    let run = Run::new(&[("U", "bob"), ("P", "socks-pass-77a0")]);
    run.crawl(config(&[&site], fetch), &[site.url("/p/0.html")])
        .await;

    // THEN every page succeeded through both proxies, which reached only the site
    assert_all_succeeded(&run, &site, 6).await;
    let target = BTreeSet::from([site.addr().to_string()]);
    for proxy in [&local, &remote] {
        assert_eq!(proxy.seen.targets(), target);
        assert_eq!(proxy.seen.refused.load(Ordering::SeqCst), 0);
        let stats = stats_of(&run.fetcher, proxy);
        assert!(stats.requests >= 3, "{stats:?}");
        assert_eq!(stats.failures, 0);
    }
    let (l, r) = (
        stats_of(&run.fetcher, &local).requests,
        stats_of(&run.fetcher, &remote).requests,
    );
    assert_eq!(l + r, 7, "6 pages and robots.txt");
    assert!(l.abs_diff(r) <= 1, "{l} / {r}");
}

#[tokio::test]
async fn sticky_rotation_sends_each_host_through_one_proxy() {
    // GIVEN one site reached under six loopback hosts, two pages each, and three proxies
    let site = Site::start().await;
    site.route("/a.html", Route::html(r#"<a href="/b.html">b</a>"#))
        .route("/b.html", Route::html("<p>b</p>"));
    let mut hosts = Vec::new();
    for i in 1..=6 {
        hosts.push(alias(&format!("127.0.0.{i}"), &site).await);
    }
    let proxies = [
        TestProxy::http(Failing::Never, None).await,
        TestProxy::http(Failing::Never, None).await,
        TestProxy::http(Failing::Never, None).await,
    ];
    let fetch = json!({
        "proxies": proxies.iter().map(|p| p.url.clone()).collect::<Vec<_>>(),
        "proxy_rotation": "sticky"
    });
    let mut config = config(&[], fetch);
    config.politeness.respect_robots = false;
    config.fetch.guard_exempt = hosts.iter().map(|(a, _)| a.to_string()).collect();
    config.scope.allowed_domains = hosts.iter().map(|(a, _)| a.ip().to_string()).collect();
    let seeds: Vec<String> = hosts
        .iter()
        .map(|(a, _)| format!("http://{a}/a.html"))
        .collect();

    // WHEN the six hosts are crawled
    let run = Run::new(&[]);
    run.crawl(config, &seeds).await;

    // THEN all 12 pages succeeded; each host went through exactly one proxy, for both its
    // pages; and the hosts were spread over more than one proxy
    for (addr, _) in &hosts {
        for page in ["a", "b"] {
            assert_status(
                &run.task(&format!("http://{addr}/{page}.html")).await,
                Status::Succeeded,
            );
        }
    }
    assert_eq!(site.total_hits(), 12);
    let mut used = 0;
    for (addr, _) in &hosts {
        let through: Vec<u64> = proxies
            .iter()
            .filter_map(|p| {
                p.seen
                    .forwarded
                    .lock()
                    .unwrap()
                    .get(&addr.to_string())
                    .copied()
            })
            .collect();
        assert_eq!(through, [2], "{addr} went through {through:?}");
    }
    for proxy in &proxies {
        used += u64::from(proxy.seen.forwarded() > 0);
    }
    assert!(used >= 2, "all six hosts hashed to one proxy");
}

#[tokio::test]
async fn a_proxy_failing_half_its_requests_is_benched_and_every_page_still_succeeds() {
    // GIVEN a site of 10 pages, a forward proxy that fails every other request (502) and a
    // healthy SOCKS5 proxy
    let site = chain_site(10).await;
    let flaky = TestProxy::http(Failing::EveryOther, None).await;
    let healthy = TestProxy::socks5("socks5h", Failing::Never, None).await;
    let fetch = json!({"proxies": [flaky.url, healthy.url]});

    // WHEN it is crawled through them, in turn
    let run = Run::new(&[]);
    run.crawl(config(&[&site], fetch), &[site.url("/p/0.html")])
        .await;

    // THEN every page succeeded at its first attempt: the failure was the proxy's, not the page's
    assert_all_succeeded(&run, &site, 10).await;
    for i in 0..10 {
        let task = run.task(&site.url(&format!("/p/{i}.html"))).await;
        assert_eq!(task.retries, 0, "{task:?}");
    }
    // AND the flaky proxy failed once, was benched at once, and was asked nothing more
    let failed = flaky.seen.failed.load(Ordering::SeqCst);
    let stats = stats_of(&run.fetcher, &flaky);
    assert_eq!(failed, 1);
    assert_eq!(
        stats.requests, 2,
        "one carried, one failed, then benched: {stats:?}"
    );
    assert_eq!((stats.failures, stats.benched), (1, 1));
    assert!(stats.benched_now);
    // AND the site saw each page once: the failed request never reached it
    assert_eq!(site.total_hits(), 11, "10 pages and robots.txt");
    let healthy = stats_of(&run.fetcher, &healthy);
    assert_eq!((healthy.requests, healthy.failures), (10, 0), "{healthy:?}");
}

fn fetch_config(site: &Site, fetch: serde_json::Value) -> CrawlConfig {
    let mut config = config(&[site], fetch);
    config.fetch.connect_timeout_ms = 2_000;
    config
}

async fn fetch_once(fetcher: &Fetcher, config: &CrawlConfig, url: &str) -> FetchOutcome {
    let scope = ScopeMatcher::new(&config.scope).unwrap();
    let url = CanonicalUrl::parse(url).unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        fetcher.fetch(FetchRequest {
            url: &url,
            crawl_id: None,
            config,
            previous: None,
            scope: &scope,
            depth: 0,
            now: trawl_domain::task::now_ms(),
            redirects: trawl_core::fetch::Redirects::Follow,
            content_type: None,
            image: false,
            session: None,
            request: None,
        }),
    )
    .await
    .expect("the fetch ends")
}

#[tokio::test]
async fn with_every_proxy_down_a_fetch_fails_transiently_naming_the_proxies() {
    // GIVEN a proxy nobody listens on and a SOCKS5 proxy that hangs up every handshake
    let site = chain_site(1).await;
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let broken = TestProxy::socks5("socks5", Failing::Always, None).await;
    let config = fetch_config(&site, json!({"proxies": [closed_url, broken.url]}));
    let fetcher = Fetcher::new("").unwrap();

    // WHEN a page is fetched, twice
    let first = fetch_once(&fetcher, &config, &site.url("/p/0.html")).await;
    let second = fetch_once(&fetcher, &config, &site.url("/p/0.html")).await;

    // THEN each fails with a transient error of its own naming both proxies …
    for outcome in [&first, &second] {
        let FetchOutcome::Failed(failure) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(failure.kind, ErrorKind::Connection);
        assert!(failure.kind.is_transient());
        assert!(
            failure.message.starts_with("no proxy available: "),
            "{}",
            failure.message
        );
        assert!(failure.message.contains(&closed_url), "{}", failure.message);
        assert!(failure.message.contains(&broken.url), "{}", failure.message);
        assert!(
            failure.message.contains("benched for 60 s"),
            "{}",
            failure.message
        );
    }
    // … the second without asking either proxy again (both benched), and the site saw nothing
    assert_eq!(broken.seen.received.load(Ordering::SeqCst), 1);
    let stats = fetcher.proxy_stats();
    assert_eq!(stats.len(), 2);
    assert!(
        stats
            .iter()
            .all(|s| s.requests == 1 && s.failures == 1 && s.benched_now),
        "{stats:?}"
    );
    assert_eq!(site.total_hits(), 0);
}

#[tokio::test]
async fn the_network_guard_still_applies_to_the_target_behind_a_proxy() {
    // GIVEN a loopback site that is not exempted, and a loopback proxy (allowed as the proxy)
    let site = chain_site(1).await;
    let proxy = TestProxy::http(Failing::Never, None).await;
    let mut config = fetch_config(&site, json!({"proxies": [proxy.url]}));
    config.fetch.guard_exempt.clear();
    let fetcher = Fetcher::new("").unwrap();

    // WHEN the site is fetched through the proxy by address and by a name resolving to it
    let port = site.addr().port();
    for url in [
        site.url("/p/0.html"),
        format!("http://localhost:{port}/p/0.html"),
    ] {
        let outcome = fetch_once(&fetcher, &config, &url).await;

        // THEN it is refused before the proxy is asked
        let FetchOutcome::Failed(failure) = &outcome else {
            panic!("{url}: {outcome:?}");
        };
        assert_eq!(failure.kind, ErrorKind::Blocked, "{url}: {failure:?}");
        assert!(failure.message.contains("loopback"), "{}", failure.message);
    }
    assert_eq!(proxy.seen.received.load(Ordering::SeqCst), 0);
    assert_eq!(site.total_hits(), 0);

    // AND with the site exempted, the same proxy carries it
    config.fetch.guard_exempt = vec![site.addr().to_string()];
    let outcome = fetch_once(&fetcher, &config, &site.url("/p/0.html")).await;
    assert!(matches!(outcome, FetchOutcome::Fetched(_)), "{outcome:?}");
    assert_eq!(proxy.seen.forwarded(), 2, "robots.txt and the page");
}

#[tokio::test]
async fn a_proxy_password_reaches_no_stored_item_no_object_and_no_log() {
    // GIVEN a site behind a forward proxy that wants a password, and a second proxy whose
    // password is wrong
    const PASSWORD: &str = "proxy-pass-9c1e";
    const BASIC: &str = "Ym9iOnByb3h5LXBhc3MtOWMxZQ==";
    let site = chain_site(4).await;
    let good = TestProxy::http(Failing::Never, Some(BASIC)).await;
    let wrong = TestProxy::http(Failing::Never, Some("c29tZW9uZTplbHNl")).await;
    let dir = crate::cli::temp_dir("proxy-secret");
    let data = dir.join("data");
    let authority = |p: &TestProxy| p.url.trim_start_matches("http://").to_owned();

    // WHEN the binary crawls it through both, with debug logs on
    let output = tokio::process::Command::new(crate::cli::trawl_bin())
        .args([
            "crawl",
            &site.url("/p/0.html"),
            "--allow-private-networks",
            "--proxy",
            &good.url,
            "--proxy",
            &wrong.url,
            "--proxy-basic-env",
            &format!(
                "{}=TRAWL_TEST_PROXY_USER:TRAWL_TEST_PROXY_PASS",
                authority(&good)
            ),
            "--proxy-basic-env",
            &format!(
                "{}=TRAWL_TEST_PROXY_USER:TRAWL_TEST_PROXY_PASS",
                authority(&wrong)
            ),
            "--data-dir",
            data.to_str().unwrap(),
            "--json",
        ])
        .env("TRAWL_TEST_PROXY_USER", "bob")
        .env("TRAWL_TEST_PROXY_PASS", PASSWORD)
        .env("RUST_LOG", "debug")
        .current_dir(&dir)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();

    // THEN every page succeeded through the proxy that took the password; the other answered
    // 407 once and was benched
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let summary = crate::cli::json_of(&output);
    assert_eq!(summary["counts"]["succeeded"], 4, "{summary}");
    assert_eq!(good.seen.forwarded(), 5, "4 pages and robots.txt");
    assert_eq!(wrong.seen.refused.load(Ordering::SeqCst), 1);
    assert!(stderr.contains("HTTP 407 from the proxy"), "{stderr}");

    // AND neither the password nor its encoding is in any file of the data directory (the
    // crawl, the tasks, the bodies, the delivery) nor in anything trawl printed or logged
    let printed = format!("{}{stderr}", String::from_utf8_lossy(&output.stdout));
    let files = crate::cli::files_under(&data);
    assert!(files.len() > 4, "{files:?}");
    for secret in [PASSWORD, BASIC] {
        assert!(!printed.contains(secret), "{secret} printed");
        for file in &files {
            let bytes = std::fs::read(file).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} in {}",
                file.display()
            );
        }
    }
    // (the stored crawl names the variables instead)
    assert!(files.iter().any(|f| {
        std::fs::read(f)
            .unwrap()
            .windows(21)
            .any(|w| w == b"TRAWL_TEST_PROXY_PASS")
    }));
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
