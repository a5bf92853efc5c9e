//! The Fetcher and link extraction against the loopback site: what each kind of response and
//! misbehaviour becomes, and what reached the server.

use crate::site::{self, Fixture, Route, Site};
use md5::{Digest, Md5};
use std::time::Duration;
use trawl_core::discover::{OutOfScopeReason, ScopeMatcher, extract_links};
use trawl_core::fetch::{FetchOutcome, FetchRequest, FetchedPage, Fetcher, NotModified};
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::{CrawlConfig, Scope};
use trawl_domain::retry::Failure;
use trawl_domain::task::{ErrorKind, FetchRecord, Sent, now_ms};

/// Guard on, with only the test site's own address exempted; short limits.
fn config(site: &Site) -> CrawlConfig {
    let mut config = CrawlConfig::default();
    config.fetch.guard_exempt = vec![site.addr().to_string()];
    config.fetch.timeout_ms = 3_000;
    config.fetch.connect_timeout_ms = 1_000;
    config.fetch.max_body_bytes = 1024 * 1024;
    config
}

fn any_scope() -> ScopeMatcher {
    ScopeMatcher::new(&Scope::default()).unwrap()
}

fn loopback_scope() -> ScopeMatcher {
    ScopeMatcher::new(&Scope {
        allowed_domains: vec!["127.0.0.1".into()],
        ..Scope::default()
    })
    .unwrap()
}

async fn fetch_with(
    fetcher: &Fetcher,
    url: &str,
    config: &CrawlConfig,
    scope: &ScopeMatcher,
    previous: Option<&FetchRecord>,
) -> FetchOutcome {
    let url = CanonicalUrl::parse(url).unwrap();
    fetcher
        .fetch(FetchRequest {
            url: &url,
            crawl_id: None,
            config,
            previous,
            scope,
            depth: 0,
            now: now_ms(),
            redirects: trawl_core::fetch::Redirects::Follow,
            content_type: None,
            image: false,
            session: None,
            request: None,
        })
        .await
}

async fn fetch(fetcher: &Fetcher, url: &str, config: &CrawlConfig) -> FetchOutcome {
    fetch_with(fetcher, url, config, &any_scope(), None).await
}

fn fetched(outcome: FetchOutcome) -> FetchedPage {
    match outcome {
        FetchOutcome::Fetched(page) => page,
        other => panic!("expected a page, got {other:?}"),
    }
}

fn failed(outcome: FetchOutcome) -> Failure {
    match outcome {
        FetchOutcome::Failed(failure) => failure,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn new_fetcher() -> Fetcher {
    Fetcher::new("").unwrap()
}

#[tokio::test]
async fn an_html_page_is_fetched_with_its_md5_and_its_links_resolved() {
    let Fixture { site, internal } = site::fixture().await;
    let fetcher = new_fetcher();
    let page = fetched(fetch(&fetcher, &site.url("/index.html"), &config(&site)).await);
    assert_eq!(page.status, 200);
    assert_eq!(page.redirects, 0);
    assert_eq!(page.final_url.as_str(), site.url("/index.html"));
    assert!(page.is_html());
    let body = page.body.as_ref().unwrap();
    assert_eq!(page.content_length, Some(body.bytes().len() as u64));
    let expected: [u8; 16] = Md5::digest(body.bytes()).into();
    assert_eq!(body.md5(), expected);
    assert_eq!(body.md5_hex(), hex::encode(expected));
    assert!(
        std::str::from_utf8(body.bytes())
            .unwrap()
            .contains("relative")
    );

    // Relative, absolute and query links resolved; the fragment-only link, the duplicate and the
    // nofollow link dropped; order kept.
    let links = extract_links(page.final_url.as_url(), body.bytes());
    assert!(!links.nofollow_page);
    let urls: Vec<&str> = links.urls.iter().map(|u| u.as_str()).collect();
    assert_eq!(
        urls,
        [
            site.url("/page1.html").as_str(),
            &site.url("/page2.html"),
            // `?b=2&a=1` in the page: query parameters come out in canonical order.
            &site.url("/page2.html?a=1&b=2"),
            "http://offsite.example/away",
            &internal.url("/secret"),
            "http://169.254.169.254/latest/meta-data/",
            &site.url("/private/page.html"),
        ]
    );
    assert_eq!(site.hits("/index.html"), 1);
    assert_eq!(site.hits("/robots.txt"), 1);
    assert_eq!(site.hits("/page1.html"), 0);
}

#[tokio::test]
async fn base_href_applies_and_off_scope_links_are_recognised() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let page = fetched(fetch(&fetcher, &site.url("/base.html"), &config(&site)).await);
    let links = extract_links(page.final_url.as_url(), page.body.unwrap().bytes());
    let urls: Vec<String> = links.urls.iter().map(|u| u.to_string()).collect();
    assert_eq!(urls, [site.url("/docs/a.html"), site.url("/b.html")]);

    let scope = loopback_scope();
    assert_eq!(scope.check(&links.urls[0], 1), Ok(()));
    let offsite = CanonicalUrl::parse("http://offsite.example/away").unwrap();
    assert_eq!(scope.check(&offsite, 1), Err(OutOfScopeReason::Domain));
}

#[tokio::test]
async fn the_guard_refuses_internal_hosts_and_sends_them_nothing() {
    let Fixture { site, internal } = site::fixture().await;
    let fetcher = new_fetcher();
    let config = config(&site);
    for url in [
        internal.url("/secret"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[::ffff:169.254.169.254]/".to_owned(),
    ] {
        let failure = failed(fetch(&fetcher, &url, &config).await);
        assert_eq!(failure.kind, ErrorKind::Blocked, "{url}: {failure:?}");
    }
    assert_eq!(internal.total_hits(), 0);

    // The same internal page is reachable once the crawl allows private networks: the guard,
    // nothing else, kept the crawler out.
    let mut open = config.clone();
    open.fetch.allow_private_networks = true;
    let page = fetched(fetch(&fetcher, &internal.url("/secret"), &open).await);
    assert_eq!(page.body.unwrap().bytes().as_ref(), b"<p>internal</p>");
    assert_eq!(internal.hits("/secret"), 1);
}

#[tokio::test]
async fn redirects_to_internal_hosts_are_refused() {
    let Fixture { site, internal } = site::fixture().await;
    let fetcher = new_fetcher();
    for path in ["/to-internal", "/to-metadata"] {
        let failure = failed(fetch(&fetcher, &site.url(path), &config(&site)).await);
        assert_eq!(failure.kind, ErrorKind::Blocked, "{path}: {failure:?}");
        assert_eq!(site.hits(path), 1);
    }
    assert_eq!(internal.total_hits(), 0);
}

#[tokio::test]
async fn host_names_resolving_to_forbidden_addresses_are_refused() {
    let site = Site::start().await;
    site.route("/page.html", Route::html("<p>hi</p>"));
    let fetcher = new_fetcher();
    // The exemption names the IP literal; `localhost` goes through the guarded resolver.
    let url = format!("http://localhost:{}/page.html", site.addr().port());
    let failure = failed(fetch(&fetcher, &url, &config(&site)).await);
    assert_eq!(failure.kind, ErrorKind::Blocked, "{failure:?}");
    assert_eq!(site.total_hits(), 0);
}

#[tokio::test]
async fn a_redirect_chain_is_followed_to_its_final_url() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let outcome = fetch_with(
        &fetcher,
        &site.url("/redirect/1"),
        &config(&site),
        &loopback_scope(),
        None,
    )
    .await;
    let page = fetched(outcome);
    assert_eq!(page.redirects, 3);
    assert_eq!(page.final_url.as_str(), site.url("/page1.html"));
    assert_eq!(page.body.unwrap().bytes().as_ref(), b"<p>page 1</p>");
    for path in ["/redirect/1", "/redirect/2", "/redirect/3", "/page1.html"] {
        assert_eq!(site.hits(path), 1, "{path}");
    }
}

#[tokio::test]
async fn redirect_loops_and_long_chains_are_cut_short() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let failure = failed(fetch(&fetcher, &site.url("/loop/a"), &config(&site)).await);
    assert_eq!(failure.kind, ErrorKind::TooManyRedirects);
    assert!(failure.message.contains("loop"), "{}", failure.message);
    assert_eq!((site.hits("/loop/a"), site.hits("/loop/b")), (1, 1));

    let mut short = config(&site);
    short.fetch.max_redirects = 2;
    let failure = failed(fetch(&fetcher, &site.url("/redirect/1"), &short).await);
    assert_eq!(failure.kind, ErrorKind::TooManyRedirects);
    assert_eq!(site.hits("/redirect/3"), 1);
    assert_eq!(site.hits("/page1.html"), 0);
}

#[tokio::test]
async fn a_redirect_out_of_scope_is_not_followed() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let outcome = fetch_with(
        &fetcher,
        &site.url("/to-offsite"),
        &config(&site),
        &loopback_scope(),
        None,
    )
    .await;
    let failure = failed(outcome);
    assert_eq!(failure.kind, ErrorKind::OutOfScope);
    assert_eq!(failure.http_status, Some(301));
}

#[tokio::test]
async fn error_statuses_are_classified_with_retry_after() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let cases = [
        ("/missing", ErrorKind::NotFound, 404, None),
        ("/gone", ErrorKind::NotFound, 410, None),
        ("/error", ErrorKind::ServerError, 500, None),
        ("/unavailable", ErrorKind::Throttled, 503, Some(120_000)),
        ("/throttled", ErrorKind::Throttled, 429, Some(30_000)),
    ];
    for (path, kind, status, retry_after) in cases {
        let failure = failed(fetch(&fetcher, &site.url(path), &config(&site)).await);
        assert_eq!(failure.kind, kind, "{path}");
        assert_eq!(failure.http_status, Some(status), "{path}");
        assert_eq!(failure.retry_after_ms, retry_after, "{path}");
        assert_eq!(site.hits(path), 1, "{path}");
    }
}

#[tokio::test]
async fn a_server_stalling_mid_body_times_out() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let mut config = config(&site);
    config.fetch.timeout_ms = 500;
    let failure = failed(fetch(&fetcher, &site.url("/stall.html"), &config).await);
    assert_eq!(failure.kind, ErrorKind::Timeout, "{failure:?}");
    assert_eq!(site.hits("/stall.html"), 1);
}

#[tokio::test]
async fn bodies_over_the_cap_are_refused_even_when_compressed() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let mut config = config(&site);
    config.fetch.max_body_bytes = 64 * 1024;
    // The bomb is smaller than the cap on the wire: only the decompressed count can refuse it.
    assert!(site::gzip_bomb().len() < 64 * 1024);
    for path in ["/big.html", "/bomb.html"] {
        let failure = failed(fetch(&fetcher, &site.url(path), &config).await);
        assert_eq!(failure.kind, ErrorKind::TooLarge, "{path}: {failure:?}");
    }
    // Under the cap, compressed pages arrive decompressed.
    let page = fetched(fetch(&fetcher, &site.url("/small-gzip.html"), &config).await);
    assert_eq!(
        page.body.unwrap().bytes().as_ref(),
        b"<p>compressed page</p>"
    );
    // The cap is what refused the big page.
    config.fetch.max_body_bytes = site::BIG_BYTES as u64;
    let page = fetched(fetch(&fetcher, &site.url("/big.html"), &config).await);
    assert_eq!(page.content_length, Some(site::BIG_BYTES as u64));
}

#[tokio::test]
async fn non_html_content_is_recorded_and_stored_only_when_listed() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let mut config = config(&site);
    let pdf = fetched(fetch(&fetcher, &site.url("/doc.pdf"), &config).await);
    assert_eq!(pdf.status, 200);
    assert_eq!(pdf.content_type.as_deref(), Some("application/pdf"));
    assert_eq!(pdf.content_length, Some(13));
    assert!(pdf.body.is_none());
    assert!(!pdf.is_html());

    config.fetch.store_content_types = vec!["Application/PDF".into()];
    let pdf = fetched(fetch(&fetcher, &site.url("/doc.pdf"), &config).await);
    assert_eq!(pdf.body.unwrap().bytes().as_ref(), b"%PDF-1.4 tiny");
    let png = fetched(fetch(&fetcher, &site.url("/image.png"), &config).await);
    assert_eq!(png.content_type.as_deref(), Some("image/png"));
    assert!(png.body.is_none());
}

#[tokio::test]
async fn robots_txt_is_honoured_fetched_once_and_reports_the_crawl_delay() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let mut config = config(&site);
    let failure = failed(fetch(&fetcher, &site.url("/private/page.html"), &config).await);
    assert_eq!(failure.kind, ErrorKind::RobotsDenied);
    assert_eq!(site.hits("/private/page.html"), 0);
    // Redirect targets are checked too.
    let failure = failed(fetch(&fetcher, &site.url("/to-private"), &config).await);
    assert_eq!(failure.kind, ErrorKind::RobotsDenied);
    assert_eq!(site.hits("/to-private"), 1);
    assert_eq!(site.hits("/private/page.html"), 0);
    fetched(fetch(&fetcher, &site.url("/page1.html"), &config).await);
    fetched(fetch(&fetcher, &site.url("/page2.html"), &config).await);
    assert_eq!(site.hits("/robots.txt"), 1);

    let url = CanonicalUrl::parse(&site.url("/page1.html")).unwrap();
    assert_eq!(
        fetcher.crawl_delay(&url, &config).await,
        Some(Duration::from_secs(2))
    );
    config.politeness.max_crawl_delay_ms = 500;
    assert_eq!(
        fetcher.crawl_delay(&url, &config).await,
        Some(Duration::from_millis(500))
    );
    assert_eq!(site.hits("/robots.txt"), 1);

    // Another product token falls into the `*` group, which disallows everything.
    let mut other_bot = config.clone();
    other_bot.user_agent = "OtherBot/2.0 (+https://example.com/bot)".into();
    let failure = failed(fetch(&fetcher, &site.url("/page1.html"), &other_bot).await);
    assert_eq!(failure.kind, ErrorKind::RobotsDenied);

    // A crawl that does not respect robots.txt neither asks for it nor obeys it.
    let rude = Fetcher::new("").unwrap();
    config.politeness.respect_robots = false;
    fetched(fetch(&rude, &site.url("/private/page.html"), &config).await);
    assert_eq!(site.hits("/private/page.html"), 1);
    assert_eq!(site.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn robots_txt_errors_close_the_site_and_a_missing_one_opens_it() {
    let broken = Site::start().await;
    broken
        .route("/robots.txt", Route::status(500))
        .route("/page.html", Route::html("<p>hi</p>"));
    let fetcher = new_fetcher();
    for _ in 0..2 {
        let failure = failed(fetch(&fetcher, &broken.url("/page.html"), &config(&broken)).await);
        assert_eq!(failure.kind, ErrorKind::RobotsUnavailable, "{failure:?}");
        assert!(failure.kind.is_transient());
    }
    assert_eq!(broken.hits("/page.html"), 0);
    // The unavailable answer is cached for a while too: the host is not asked again at once.
    assert_eq!(broken.hits("/robots.txt"), 1);

    let open = Site::start().await;
    open.route("/page.html", Route::html("<p>hi</p>"));
    let page = fetched(fetch(&fetcher, &open.url("/page.html"), &config(&open)).await);
    assert_eq!(page.status, 200);
    assert_eq!(open.hits("/robots.txt"), 1);
    assert_eq!(
        fetcher.crawl_delay(&page.final_url, &config(&open)).await,
        None
    );
}

#[tokio::test]
async fn conditional_get_turns_an_unchanged_page_into_not_modified() {
    let Fixture { site, .. } = site::fixture().await;
    let fetcher = new_fetcher();
    let config = config(&site);
    let first = fetched(fetch(&fetcher, &site.url("/etag.html"), &config).await);
    assert_eq!(first.etag.as_deref(), Some("\"v1\""));
    let previous = FetchRecord {
        etag: first.etag.clone(),
        http_status: 200,
        ..FetchRecord::default()
    };
    let outcome = fetch_with(
        &fetcher,
        &site.url("/etag.html"),
        &config,
        &any_scope(),
        Some(&previous),
    )
    .await;
    assert_eq!(
        outcome,
        FetchOutcome::NotModified(NotModified {
            final_url: first.final_url.clone(),
            redirects: 0,
            etag: Some("\"v1\"".into()),
            last_modified: None,
            // The request sent its validator (kept for the WARC's request record).
            sent: Some(Sent {
                method: None,
                headers: vec![("if-none-match".into(), "\"v1\"".into())],
            }),
        })
    );
    // A stale validator gets the full page again.
    let stale = FetchRecord {
        etag: Some("\"v0\"".into()),
        ..previous
    };
    let outcome = fetch_with(
        &fetcher,
        &site.url("/etag.html"),
        &config,
        &any_scope(),
        Some(&stale),
    )
    .await;
    assert_eq!(fetched(outcome).body, first.body);
    assert_eq!(site.hits("/etag.html"), 3);
}
