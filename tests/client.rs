//! Crawling like a real client, through the core crawler on the embedded backend: sites that
//! answer only requests carrying a header, a cookie their login page set, Basic or Bearer
//! credentials, or a POST body; and secrets that never reach a stored crawl, task or error.

use crate::site::{Route, Site};
use crate::support::unique;
use futures_util::future::BoxFuture;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use trawl_core::app::App;
use trawl_core::blob::{BlobStore, Layout};
use trawl_core::clock::{Clock, SystemClock};
use trawl_core::crawler::Crawler;
use trawl_core::fetch::{Fetcher, Secret, SecretError, SecretSource};
use trawl_core::queue::local::LocalQueue;
use trawl_core::runner::{RunEnd, RunStats, run_crawl};
use trawl_core::seed::{
    ManifestError, ManifestSource, OpenManifest, SeedBudget, SeedDefaults, SeedError, SeedRequest,
    SeedSource, Seeder,
};
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{CrawlConfig, SecretRef};
use trawl_domain::task::{ErrorKind, Status, Task};
use trawl_embedded::fs::FsBlobStore;
use trawl_embedded::sqlite::SqliteStore;

/// Secrets held by the test instead of the process environment (which tests must not change).
pub(crate) struct TestSecrets(pub(crate) HashMap<String, String>);

impl SecretSource for TestSecrets {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        let (SecretRef::Env(name) | SecretRef::Ssm(name)) = reference;
        let found = self
            .0
            .get(name)
            .map(Secret::new)
            .ok_or_else(|| SecretError {
                reference: reference.clone(),
                reason: "not among the test's secrets".into(),
                transient: false,
            });
        Box::pin(std::future::ready(found))
    }
}

/// Seeds here are inline URLs only.
struct NoManifests;

impl ManifestSource for NoManifests {
    async fn open(
        &self,
        bucket: &str,
        key: &str,
        _: u64,
        _: Option<&str>,
    ) -> Result<OpenManifest, ManifestError> {
        Err(ManifestError::Unreadable {
            bucket: bucket.into(),
            key: key.into(),
            message: "no manifests in these tests".into(),
        })
    }
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type EmbeddedCrawler = Crawler<(SqliteStore, FsBlobStore, LocalQueue)>;

/// A crawl on the embedded backend with its own fetcher (and so its own cookie jar).
pub(crate) struct Run {
    pub(crate) crawler: EmbeddedCrawler,
    pub(crate) fetcher: Arc<Fetcher>,
    pub(crate) crawl_id: CrawlId,
    _scratch: Scratch,
}

impl Run {
    pub(crate) fn new(secrets: &[(&str, &str)]) -> Run {
        Run::on_clock(secrets, Arc::new(SystemClock))
    }

    /// A run whose services read the time from `clock`.
    pub(crate) fn on_clock(secrets: &[(&str, &str)], clock: Arc<dyn Clock>) -> Run {
        let calls = Arc::new(CallCounts::default());
        let scratch = Scratch(std::env::temp_dir().join(unique("client")));
        let secrets = secrets
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fetcher = Arc::new(
            Fetcher::new("")
                .unwrap()
                .with_secrets(Arc::new(TestSecrets(secrets))),
        );
        let crawler = Crawler::new(
            Arc::new(
                App::new(
                    SqliteStore::in_memory(calls.clone()).unwrap(),
                    FsBlobStore::new(scratch.0.clone(), calls.clone()),
                    LocalQueue::new(Duration::from_secs(60), calls.clone()),
                    calls.clone(),
                )
                .with_layout(Layout::new("pages"))
                .with_clock(clock),
            ),
            Arc::clone(&fetcher),
            2,
        );
        Run {
            crawler,
            fetcher,
            crawl_id: CrawlId::parse(&unique("client")).unwrap(),
            _scratch: scratch,
        }
    }

    /// Seeds `urls` under `config` as the seeder function and the CLI do (so it is checked).
    pub(crate) async fn seed(&self, config: CrawlConfig, urls: &[String]) -> Result<(), SeedError> {
        let seeder = Seeder::new(
            self.crawler.app().clone(),
            self.fetcher.clone(),
            Arc::new(NoManifests),
            SeedDefaults::default(),
        );
        let request = SeedRequest {
            crawl_id: self.crawl_id.clone(),
            config: Some(config),
            source: SeedSource::Urls(urls.to_vec()),
            cursor: None,
            update_config: false,
            checkpoint: None,
            priority: None,
        };
        let response = seeder
            .seed(
                request,
                SeedBudget::default(),
                self.crawler.clock().now_ms(),
            )
            .await?;
        assert_eq!(response.rejected, 0, "{response:?}");
        Ok(())
    }

    /// Crawls until the crawl completes.
    pub(crate) async fn crawl(&self, config: CrawlConfig, urls: &[String]) {
        self.seed(config, urls).await.unwrap();
        let end = self.run().await;
        assert!(matches!(end, RunEnd::Completed { .. }), "{end:?}");
    }

    /// Runs the crawl as `trawl crawl --crawl-id` does, until it ends.
    pub(crate) async fn run(&self) -> RunEnd {
        tokio::time::timeout(
            Duration::from_secs(30),
            run_crawl(
                &self.crawler,
                &self.crawl_id,
                2,
                &RunStats::default(),
                &AtomicBool::new(false),
            ),
        )
        .await
        .expect("the crawl ends")
        .unwrap()
    }

    pub(crate) async fn task(&self, url: &str) -> Task {
        let id = CanonicalUrl::parse(url).unwrap().task_id();
        self.crawler
            .store()
            .get(&self.crawl_id, &id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no task for {url}"))
    }

    async fn body(&self, url: &str) -> Vec<u8> {
        let task = self.task(url).await;
        let key = task
            .fetch
            .and_then(|f| f.object_key)
            .expect("a stored body");
        self.crawler
            .blobs()
            .get(&key)
            .await
            .unwrap()
            .unwrap()
            .to_vec()
    }
}

/// Guard on (only the sites' addresses exempt), any loopback port in scope, links followed,
/// and the `fetch` settings under test.
pub(crate) fn config(sites: &[&Site], fetch: serde_json::Value) -> CrawlConfig {
    let mut config = CrawlConfig {
        fetch: serde_json::from_value(fetch).unwrap(),
        ..CrawlConfig::default()
    };
    config.fetch.guard_exempt = sites.iter().map(|s| s.addr().to_string()).collect();
    config.fetch.timeout_ms = 3_000;
    config.scope.allowed_domains = vec!["127.0.0.1".into()];
    config.scope.follow_links = true;
    config
}

pub(crate) fn assert_status(task: &Task, status: Status) {
    assert_eq!(
        task.status, status,
        "{} ended {:?}: {:?}",
        task.url, task.status, task.errors
    );
}

#[tokio::test]
async fn headers_and_accept_language_are_sent_per_crawl_and_per_url_rule() {
    // GIVEN a site whose pages answer only with the crawl's header and language, and whose
    // French section also wants its own header and language
    let site = Site::start().await;
    site.route(
        "/index.html",
        Route::html(r#"<a href="/fr/page.html">fr</a> <a href="/plain.html">plain</a>"#)
            .require_header("X-Client", "trawl-test")
            .require_header("Accept-Language", "en"),
    )
    .route(
        "/fr/page.html",
        Route::html("<p>bonjour</p>")
            .require_header("X-Client", "trawl-test")
            .require_header("X-Section", "fr")
            .require_header("Accept-Language", "fr-CH, fr;q=0.9"),
    )
    .route(
        "/plain.html",
        Route::html("<p>plain</p>").require_header("X-Section", "fr"),
    );
    let config = config(
        &[&site],
        json!({
            "headers": {"X-Client": "trawl-test"},
            "accept_language": "en",
            "rules": [{"match": "/fr/", "headers": {"X-Section": "fr"},
                       "accept_language": "fr-CH, fr;q=0.9"}]
        }),
    );

    // WHEN it is crawled from the index
    let run = Run::new(&[]);
    run.crawl(config, &[site.url("/index.html")]).await;

    // THEN the index and the French page are fetched; the rule's header went to its URLs only
    assert_status(&run.task(&site.url("/index.html")).await, Status::Succeeded);
    assert_status(
        &run.task(&site.url("/fr/page.html")).await,
        Status::Succeeded,
    );
    let plain = run.task(&site.url("/plain.html")).await;
    assert_status(&plain, Status::Ignored);
    assert_eq!(plain.errors.last().unwrap().message, "HTTP 403");
    let sent = &site.received("/plain.html")[0].headers;
    assert_eq!(sent["x-client"], "trawl-test");
    assert!(sent.get("x-section").is_none());
}

#[tokio::test]
async fn a_cookie_set_by_the_login_page_is_sent_back_when_the_crawl_keeps_a_jar() {
    // GIVEN a login page that sets a session cookie and links to a members' page that wants it
    // back, and a page that wants a consent cookie nobody sets
    let site = Site::start().await;
    site.route(
        "/login",
        Route::html(r#"<a href="/members.html">members</a> <a href="/consent.html">c</a>"#)
            .header("set-cookie", "session=s3ss10n; Path=/; HttpOnly"),
    )
    .route(
        "/members.html",
        Route::html("<p>welcome back</p>").require_cookie("session", "s3ss10n"),
    )
    .route(
        "/consent.html",
        Route::html("<p>thanks</p>").require_cookie("consent", "yes"),
    );
    let fetch = json!({"cookies": {"jar": true, "initial": {"127.0.0.1": {"consent": "yes"}}}});

    // WHEN it is crawled from the login page, keeping cookies and starting with the consent one
    let run = Run::new(&[]);
    run.crawl(config(&[&site], fetch), &[site.url("/login")])
        .await;

    // THEN the members' page got the session back, and the consent page its initial cookie
    assert_status(
        &run.task(&site.url("/members.html")).await,
        Status::Succeeded,
    );
    assert_status(
        &run.task(&site.url("/consent.html")).await,
        Status::Succeeded,
    );

    // WHEN the same site is crawled by a crawl that keeps no jar
    let forgetful = Run::new(&[]);
    forgetful
        .crawl(config(&[&site], json!({})), &[site.url("/login")])
        .await;

    // THEN the members' page refuses it
    let members = forgetful.task(&site.url("/members.html")).await;
    assert_status(&members, Status::Ignored);
    assert_eq!(members.errors.last().unwrap().message, "HTTP 403");
}

/// Runs `trawl crawl` over seed `lines` (with `extra` flags) in `dir`, private addresses
/// allowed: its `--json` report, the run having succeeded.
async fn crawl_seed_lines(
    dir: &std::path::Path,
    lines: &[serde_json::Value],
    extra: &[&str],
) -> serde_json::Value {
    let seeds = dir.join("seeds.jsonl");
    let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
    std::fs::write(&seeds, text.join("\n")).unwrap();
    let data = dir.join("data");
    let mut args = vec![
        "crawl",
        "--seeds-file",
        seeds.to_str().unwrap(),
        "--allow-private-networks",
        "--data-dir",
        data.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let output = crate::cli::trawl(&args, dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    crate::cli::json_of(&output)
}

/// The Cookie header `site` received for `path` (None: it got none).
fn cookie_sent(site: &Site, path: &str) -> Option<String> {
    let received = site.received(path);
    let request = received.last().expect("the page was requested");
    request
        .headers
        .get("cookie")
        .map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_jar_per_host_keeps_a_hosts_cookie_from_the_other_hosts_of_the_crawl() {
    // GIVEN a login page that sets a host-only cookie and links to a page of another host on
    // the same address (another port: cookies do not tell ports apart, host slots do)
    let (login, other) = (Site::start().await, Site::start().await);
    login.route(
        "/login",
        Route::html(format!(
            r#"<a href="{}">other</a>"#,
            other.url("/page.html")
        ))
        .header("set-cookie", "session=s1; Path=/"),
    );
    other.route("/page.html", Route::html("<p>other</p>"));
    let crawl = |scope: &str| {
        config(
            &[&login, &other],
            json!({"cookies": {"jar": true, "scope": scope}}),
        )
    };

    // WHEN it is crawled with one jar for the crawl
    Run::new(&[])
        .crawl(crawl("crawl"), &[login.url("/login")])
        .await;
    // THEN the other host got the cookie, as a browser would send it
    assert_eq!(
        cookie_sent(&other, "/page.html").as_deref(),
        Some("session=s1")
    );

    // WHEN it is crawled with one jar per host
    Run::new(&[])
        .crawl(crawl("host"), &[login.url("/login")])
        .await;
    // THEN the other host got none
    assert_eq!(cookie_sent(&other, "/page.html"), None);
}

#[tokio::test]
async fn each_session_of_a_host_keeps_its_own_cookies_and_the_pages_found_in_it_stay_in_it() {
    // GIVEN two logins to one site, each setting its own session cookie and linking to the
    // account page, seeded in two sessions
    let site = Site::start().await;
    for who in ["a", "b"] {
        site.route(
            &format!("/login/{who}"),
            Route::html(format!(r#"<a href="/me/{who}">me</a>"#))
                .header("set-cookie", &format!("sid={who}; Path=/")),
        );
        site.route(&format!("/me/{who}"), Route::html("<p>me</p>"));
    }
    let dir = crate::cli::temp_dir("sessions");
    let lines = ["a", "b"]
        .map(|who| json!({"url": site.url(&format!("/login/{who}")), "data": {"_session": who}}));

    // WHEN the CLI crawls them keeping a cookie jar per host
    crawl_seed_lines(&dir, &lines, &["--cookies-per-host"]).await;

    // THEN each account page was asked for with its own session's cookie, not the last set
    assert_eq!(cookie_sent(&site, "/me/a").as_deref(), Some("sid=a"));
    assert_eq!(cookie_sent(&site, "/me/b").as_deref(), Some("sid=b"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn content_handed_over_in_a_seed_line_is_stored_read_for_links_and_never_fetched() {
    // GIVEN a seed line handing over a page's content (which links to a real page of the site),
    // one handing over content that is not text, and a site that serves neither
    let site = Site::start().await;
    site.route("/real", Route::html("<p>real</p>"));
    let pushed = format!(
        r#"<html><body><a href="{}">real</a></body></html>"#,
        site.url("/real")
    );
    let dir = crate::cli::temp_dir("pushed");
    let lines = [
        json!({"url": site.url("/pushed"), "data": {"_content": pushed}}),
        json!({"url": site.url("/too-big"), "data": {"_content": 42}}),
    ];

    // WHEN the CLI crawls them
    let run = crawl_seed_lines(&dir, &lines, &[]).await;

    // THEN the handed-over page is stored by the md5 of its content without a request, its
    // link fetched; the other is given up naming why, unfetched too
    assert_eq!((site.hits("/pushed"), site.hits("/too-big")), (0, 0));
    assert_eq!(site.hits("/real"), 1);
    let manifest = crate::freshness::delivered_lines(&run, "manifest-");
    let line = |path: &str| {
        manifest
            .iter()
            .find(|l| l["url"] == site.url(path).as_str())
            .unwrap_or_else(|| panic!("{path}: {manifest:?}"))
            .clone()
    };
    let page = line("/pushed");
    assert_eq!(page["status"], "succeeded", "{page}");
    let md5: String = <md5::Md5 as md5::Digest>::digest(pushed.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(page["md5"], md5.as_str(), "{page}");
    // AND the content is delivered once, as the page's body, not again in its line's data
    assert!(page.get("data").is_none(), "{page}");
    let big = line("/too-big");
    assert_eq!(big["status"], "ignored", "{big}");
    let error = big["last_error"]["message"].as_str().unwrap_or_default();
    assert!(error.contains("_content"), "{big}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_cli_seeds_its_cookies_from_a_netscape_cookies_file() {
    // GIVEN a page that wants a session cookie, and a cookies.txt holding it (and an expired
    // cookie that must not be sent)
    let site = Site::start().await;
    site.route(
        "/members.html",
        Route::html("<p>members</p>").require_cookie("session", "from-file"),
    );
    let dir = crate::cli::temp_dir("cookies-file");
    let file = dir.join("cookies.txt");
    std::fs::write(
        &file,
        "# Netscape HTTP Cookie File\n\
         #HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tfrom-file\n\
         127.0.0.1\tFALSE\t/\tFALSE\t1000\texpired\tlong-ago\n",
    )
    .unwrap();

    // WHEN the binary crawls it with --cookies and a jar per host
    let output = tokio::process::Command::new(crate::cli::trawl_bin())
        .args([
            "crawl",
            &site.url("/members.html"),
            "--allow-private-networks",
            "--cookies",
            file.to_str().unwrap(),
            "--cookies-per-host",
            "--data-dir",
            dir.join("data").to_str().unwrap(),
            "--json",
        ])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();

    // THEN the page got the file's live cookie only, and succeeded
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(crate::cli::json_of(&output)["counts"]["succeeded"], 1);
    assert_eq!(
        cookie_sent(&site, "/members.html").as_deref(),
        Some("session=from-file")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_local_crawl_naming_a_parameter_store_secret_is_refused_before_any_fetch() {
    // GIVEN a configuration whose Bearer token lives in Parameter Store, which only the crawler
    // function reads
    let site = Site::start().await;
    site.route("/index.html", Route::html("<p>index</p>"));
    let dir = crate::cli::temp_dir("ssm-local");
    let config = dir.join("config.json");
    let auth = json!({"fetch": {"auth": [
        {"host": site.addr().to_string(), "bearer": {"ssm": "/trawl/api-token"}}
    ]}});
    std::fs::write(&config, auth.to_string()).unwrap();

    // WHEN the binary is asked to crawl with it here
    let output = tokio::process::Command::new(crate::cli::trawl_bin())
        .args([
            "crawl",
            &site.url("/index.html"),
            "--allow-private-networks",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            dir.join("data").to_str().unwrap(),
        ])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();

    // THEN it is refused as a usage error naming the parameter and what to do, and nothing was
    // fetched
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/trawl/api-token") && stderr.contains("trawl submit"),
        "{stderr}"
    );
    assert_eq!(site.total_hits(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn basic_and_bearer_credentials_go_to_their_own_host_only() {
    // GIVEN an API that wants a Bearer token and links to an intranet that wants Basic
    // credentials and to a third host that must see none
    let api = Site::start().await;
    let intranet = Site::start().await;
    let other = Site::start().await;
    const TOKEN: &str = "tok-9f8e7d";
    api.route(
        "/index.html",
        Route::html(format!(
            r#"<a href="{}">intranet</a> <a href="{}">other</a>"#,
            intranet.url("/private.html"),
            other.url("/public.html"),
        ))
        .require_header("Authorization", &format!("Bearer {TOKEN}")),
    );
    // base64("alice:wonder land")
    intranet.route(
        "/private.html",
        Route::html("<p>private</p>")
            .require_header("Authorization", "Basic YWxpY2U6d29uZGVyIGxhbmQ="),
    );
    other.route("/public.html", Route::html("<p>public</p>"));
    let fetch = json!({"auth": [
        {"host": api.addr().to_string(), "bearer": {"env": "API_TOKEN"}},
        {"host": intranet.addr().to_string(),
         "basic": {"username": {"env": "INTRA_USER"}, "password": {"env": "INTRA_PASS"}}}
    ]});

    // WHEN the API is crawled with the three secrets at hand
    let run = Run::new(&[
        ("API_TOKEN", TOKEN),
        ("INTRA_USER", "alice"),
        ("INTRA_PASS", "wonder land"),
    ]);
    run.crawl(
        config(&[&api, &intranet, &other], fetch),
        &[api.url("/index.html")],
    )
    .await;

    // THEN both protected pages are fetched and the third host saw no Authorization header
    assert_status(&run.task(&api.url("/index.html")).await, Status::Succeeded);
    assert_status(
        &run.task(&intranet.url("/private.html")).await,
        Status::Succeeded,
    );
    assert_status(
        &run.task(&other.url("/public.html")).await,
        Status::Succeeded,
    );
    for request in other.received("/public.html") {
        assert!(request.headers.get("authorization").is_none());
    }
}

#[tokio::test]
async fn an_api_seed_is_posted_with_its_json_body_and_a_303_turns_into_a_get() {
    // GIVEN a search API that answers only a POST of one JSON body, and a form endpoint that
    // answers its POST with a 303 to a result only a GET may read
    let site = Site::start().await;
    site.route(
        "/api/search",
        Route::content("application/json", r#"{"hits":["trawl"]}"#)
            .require_method("POST")
            .require_header("Content-Type", "application/json")
            // Object keys go out in sorted order (as the configuration is stored).
            .require_body(r#"{"page":1,"q":"trawl"}"#),
    )
    .route(
        "/api/submit",
        Route::redirect(303, "/api/result")
            .require_method("POST")
            .require_body("name=trawl"),
    )
    .route(
        "/api/result",
        Route::content("application/json", r#"{"ok":true}"#).require_method("GET"),
    );
    let fetch = json!({
        "store_content_types": ["application/json"],
        "rules": [
            {"match": "/api/search$", "method": "POST", "body": {"json": {"q": "trawl", "page": 1}}},
            {"match": "/api/submit$", "method": "POST", "body": {"text": "name=trawl"},
             "headers": {"Content-Type": "application/x-www-form-urlencoded"}}
        ]
    });

    // WHEN both are seeded
    let run = Run::new(&[]);
    run.crawl(
        config(&[&site], fetch),
        &[site.url("/api/search"), site.url("/api/submit")],
    )
    .await;

    // THEN the search answer is stored, and the form's result was read with a GET
    assert_status(&run.task(&site.url("/api/search")).await, Status::Succeeded);
    assert_eq!(
        run.body(&site.url("/api/search")).await,
        br#"{"hits":["trawl"]}"#
    );
    let submit = run.task(&site.url("/api/submit")).await;
    assert_status(&submit, Status::Succeeded);
    assert_eq!(
        submit.fetch.unwrap().final_url,
        Some(site.url("/api/result"))
    );
    assert_eq!(site.received("/api/result")[0].method, "GET");
    assert!(site.received("/api/result")[0].body.is_empty());
}

#[tokio::test]
async fn a_secret_reaches_no_stored_crawl_no_task_and_no_error() {
    // GIVEN an API wanting a Bearer token, whose index links to a page that refuses it, and a
    // host whose token is held as a value no header can carry
    const TOKEN: &str = "tok-secret-31415926";
    const BROKEN: &str = "broken\ntok-secret-27182818";
    let api = Site::start().await;
    let broken = Site::start().await;
    api.route(
        "/index.html",
        Route::html(format!(
            r#"<a href="/denied.html">denied</a> <a href="{}">broken</a>"#,
            broken.url("/page.html")
        ))
        .require_header("Authorization", &format!("Bearer {TOKEN}")),
    )
    .route("/denied.html", Route::status(401));
    broken.route("/page.html", Route::html("<p>never</p>"));
    let fetch = json!({"auth": [
        {"host": api.addr().to_string(), "bearer": {"env": "API_TOKEN"}},
        {"host": broken.addr().to_string(), "bearer": {"env": "BROKEN_TOKEN"}}
    ]});

    // WHEN it is crawled
    let run = Run::new(&[("API_TOKEN", TOKEN), ("BROKEN_TOKEN", BROKEN)]);
    run.crawl(config(&[&api, &broken], fetch), &[api.url("/index.html")])
        .await;

    // THEN the token did its work …
    assert_status(&run.task(&api.url("/index.html")).await, Status::Succeeded);
    let denied = run.task(&api.url("/denied.html")).await;
    assert_status(&denied, Status::Ignored);
    let unusable = run.task(&broken.url("/page.html")).await;
    assert_status(&unusable, Status::Ignored);
    assert_eq!(unusable.errors.last().unwrap().kind, ErrorKind::ClientError);
    assert!(
        unusable
            .errors
            .last()
            .unwrap()
            .message
            .contains("secret env:BROKEN_TOKEN is not a valid header value"),
        "{:?}",
        unusable.errors
    );
    assert_eq!(broken.total_hits(), 0);

    // … and neither secret is in the stored crawl, any stored task or any error
    let crawl = run
        .crawler
        .store()
        .get_crawl(&run.crawl_id)
        .await
        .unwrap()
        .unwrap();
    let mut stored = format!("{crawl:?}");
    for path in ["/index.html", "/denied.html"] {
        stored.push_str(&format!("{:?}", run.task(&api.url(path)).await));
    }
    stored.push_str(&format!("{unusable:?}"));
    assert!(stored.contains("API_TOKEN") && stored.contains("HTTP 401"));
    for secret in ["tok-secret-31415926", "tok-secret-27182818"] {
        assert!(!stored.contains(secret), "{secret} stored: {stored}");
    }
}

#[tokio::test]
async fn a_missing_secret_fails_its_host_by_name() {
    // GIVEN a crawl naming a token that the fetching process does not have
    let site = Site::start().await;
    site.route("/index.html", Route::html("<p>hi</p>"));
    let fetch = json!({"auth": [{"host": site.addr().to_string(), "bearer": {"env": "NOT_HERE"}}]});

    // WHEN it is crawled
    let run = Run::new(&[]);
    run.crawl(config(&[&site], fetch), &[site.url("/index.html")])
        .await;

    // THEN the page is given up with a reason that names the secret, before any request
    let task = run.task(&site.url("/index.html")).await;
    assert_status(&task, Status::Ignored);
    let error = task.errors.last().unwrap();
    assert_eq!(error.kind, ErrorKind::ClientError);
    assert_eq!(
        error.message,
        format!(
            "credentials for {}: secret env:NOT_HERE is not available: not among the test's secrets",
            site.addr()
        )
    );
    assert_eq!(site.hits("/index.html"), 0);
}

#[tokio::test]
async fn a_configuration_that_cannot_be_followed_is_refused_at_seed_time() {
    // GIVEN request settings with a bad regex, a bad header name, a header that would carry a
    // secret, and credentials for no host
    let site = Site::start().await;
    let fetch = json!({
        "headers": {"bad header": "x", "Authorization": "Bearer inline-secret"},
        "rules": [{"match": "([unclosed"}],
        "auth": [{"host": "", "bearer": {"env": "T"}}]
    });

    // WHEN it is seeded
    let run = Run::new(&[]);
    let error = run
        .seed(config(&[&site], fetch), &[site.url("/")])
        .await
        .unwrap_err();

    // THEN the seed is refused with every problem named (and the secret not echoed), and
    // nothing is written
    let SeedError::InvalidRequest(problems) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(!error.to_string().contains("inline-secret"), "{error}");
    assert!(
        run.crawler
            .store()
            .get_crawl(&run.crawl_id)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn seed_lines_carry_user_data_to_the_task_its_links_and_the_delivery_manifest() {
    // GIVEN a page linking to another, and a seeds file whose first line carries user data
    let site = Site::start().await;
    site.route("/p/0.html", Route::html(r#"<a href="/p/1.html">next</a>"#))
        .route("/p/1.html", Route::html("<p>end</p>"))
        .route("/other.html", Route::html("<p>plain</p>"));
    let dir = crate::cli::temp_dir("user-data");
    let data_dir = dir.join("data");
    let seeds = dir.join("seeds.txt");
    std::fs::write(
        &seeds,
        format!(
            "{{\"url\": \"{}\", \"data\": {{\"campaign\": \"spring\", \"n\": 1}}}}\n{}\n",
            site.url("/p/0.html"),
            site.url("/other.html")
        ),
    )
    .unwrap();
    let trawl = |args: &[&str]| {
        tokio::process::Command::new(crate::cli::trawl_bin())
            .args(args)
            .args(["--data-dir", data_dir.to_str().unwrap(), "--json"])
            .kill_on_drop(true)
            .output()
    };

    // WHEN the binary crawls it, the linked pages inheriting their page's data
    let crawled = trawl(&[
        "crawl",
        "--seeds-file",
        seeds.to_str().unwrap(),
        "--allow-private-networks",
        "--inherit-data",
    ])
    .await
    .unwrap();
    assert!(
        crawled.status.success(),
        "{}",
        String::from_utf8_lossy(&crawled.stderr)
    );
    assert_eq!(crate::cli::json_of(&crawled)["counts"]["succeeded"], 3);

    // THEN `tasks show` gives the seed's data on the seed and on the page it links to, and
    // none on the plain seed
    let data = json!({"campaign": "spring", "n": 1});
    for (path, expected) in [
        ("/p/0.html", &data),
        ("/p/1.html", &data),
        ("/other.html", &serde_json::Value::Null),
    ] {
        let shown = trawl(&["tasks", "show", &site.url(path)]).await.unwrap();
        assert!(shown.status.success(), "{path}");
        assert_eq!(&crate::cli::json_of(&shown)["data"], expected, "{path}");
    }

    // AND the delivery manifest carries it
    let lines: Vec<serde_json::Value> = crate::cli::files_under(&data_dir)
        .into_iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("manifest-"))
        })
        .flat_map(|f| crate::delivering::gz_lines(&std::fs::read(f).unwrap()))
        .map(|line| serde_json::from_str(&line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        let inherited = !line["url"].as_str().unwrap().ends_with("/other.html");
        assert_eq!(line.get("data").is_some(), inherited, "{line}");
        if inherited {
            assert_eq!(line["data"], data);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
