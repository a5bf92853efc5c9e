//! Named secrets from Parameter Store (moto's SSM): the crawler function's secret source on its
//! own, and a crawl run by the Lambda handlers whose Bearer token lives only in a parameter.

use crate::operator::{deploy, functions_with};
use crate::proxy::{Failing, TestProxy};
use crate::site::{Route, Site};
use crate::support::{self, moto, unique};
use aws_sdk_ssm::types::ParameterType;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trawl_aws::ssm::SsmSecrets;
use trawl_core::blob::Layout;
use trawl_core::fetch::{Fetcher, SecretSource};
use trawl_core::store::CrawlStore;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::{CrawlState, SecretRef};
use trawl_domain::task::now_ms;

async fn put_secret(ssm: &aws_sdk_ssm::Client, name: &str, value: &str) {
    ssm.put_parameter()
        .name(name)
        .value(value)
        .r#type(ParameterType::SecureString)
        .overwrite(true)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_parameter_is_read_decrypted_and_cached_and_a_missing_one_named() {
    // GIVEN a SecureString parameter
    let clients = support::clients(&moto::shared().endpoint).await;
    let name = format!("/trawl/{}/token", unique("ssm"));
    put_secret(&clients.ssm, &name, "first-value").await;
    let secrets = SsmSecrets::new(clients.ssm.clone());
    let reference = SecretRef::Ssm(name.clone());

    // WHEN it is resolved, THEN its decrypted value comes back
    let first = secrets.resolve(&reference).await.unwrap();
    assert_eq!(first.expose(), "first-value");

    // WHEN it changes, THEN the source keeps the value it read for its cache time (one read
    // per turn of a host, not per page), and a new source reads the new value
    put_secret(&clients.ssm, &name, "second-value").await;
    assert_eq!(
        secrets.resolve(&reference).await.unwrap().expose(),
        "first-value"
    );
    let fresh = SsmSecrets::new(clients.ssm.clone());
    assert_eq!(
        fresh.resolve(&reference).await.unwrap().expose(),
        "second-value"
    );

    // AND a parameter that does not exist is a permanent error naming it, not a value
    let missing = format!("/trawl/{}/none", unique("ssm"));
    let error = secrets
        .resolve(&SecretRef::Ssm(missing.clone()))
        .await
        .unwrap_err();
    assert!(!error.transient);
    assert_eq!(
        error.to_string(),
        format!("secret ssm:{missing} is not available: no such parameter")
    );

    // AND `env` references are still read from the environment (PATH is always set)
    let path = secrets
        .resolve(&SecretRef::Env("PATH".into()))
        .await
        .unwrap();
    assert_eq!(path.expose(), std::env::var("PATH").unwrap());
}

/// Every log line written on this thread while the guard lives (the test runtime runs every
/// task of the crawl on it).
fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    #[derive(Clone)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let buffer = Buffer(Arc::clone(&lines));
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || buffer.clone())
        .finish();
    (lines, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn a_crawl_run_by_the_functions_takes_its_token_from_parameter_store_and_keeps_it_nowhere() {
    // GIVEN a deployed stack on moto, a token held only in a parameter, and a site of three
    // pages that each require it
    const TOKEN: &str = "ssm-token-5a8f0c2e77";
    let deployed = deploy(&moto::shared().endpoint).await;
    let name = format!("/trawl/{}/api-token", unique("ssm"));
    put_secret(&deployed.clients.ssm, &name, TOKEN).await;
    let site = Site::start().await;
    for i in 0..3 {
        site.route(
            &format!("/p/{i}.html"),
            Route::html(format!(r#"<a href="/p/{}.html">next</a>"#, i + 1))
                .require_header("Authorization", &format!("Bearer {TOKEN}")),
        );
    }
    let (logs, _capture) = capture_logs();

    // WHEN the seeder function is handed a crawl naming the parameter, and the functions run
    // it (as their event sources would) until its delivery is written
    let fetcher = Fetcher::new("")
        .unwrap()
        .with_secrets(Arc::new(SsmSecrets::new(deployed.clients.ssm.clone())));
    let functions = functions_with(&deployed, Arc::new(fetcher));
    let crawl_id = CrawlId::parse(&unique("ssm-crawl")).unwrap();
    let addr = site.addr().to_string();
    let request = serde_json::json!({
        "crawl_id": crawl_id.as_str(),
        "config": {
            "scope": {"allowed_domains": ["127.0.0.1"], "max_pages": 3},
            "fetch": {
                "guard_exempt": [addr],
                "timeout_ms": 3000,
                "auth": [{"host": addr, "bearer": {"ssm": name}}]
            }
        },
        "source": {"urls": [site.url("/p/0.html")]}
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let store = &functions.sweeper.sweeper.store;
    let blobs = &functions.deliverer.deliverer.blobs;
    let deliveries = Layout::new("pages/").deliveries_prefix(&crawl_id);
    let mut delivered = false;
    for _ in 0..200 {
        functions.round(&deployed).await;
        let crawl = store.get_crawl(&crawl_id).await.unwrap().unwrap();
        delivered = crawl.state == CrawlState::Completed
            && !trawl_core::blob::BlobStore::list(blobs, &deliveries)
                .await
                .unwrap()
                .is_empty();
        if delivered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(delivered, "the crawl was not delivered");

    // THEN every page was fetched with the token
    for i in 0..3 {
        assert_eq!(site.hits(&format!("/p/{i}.html")), 1, "page {i}");
    }
    let counts = store.get_crawl(&crawl_id).await.unwrap().unwrap();
    assert_eq!(counts.pages_reserved, 3);

    // AND the token is in no item of the table, no object of the bucket and no log line,
    // while the table names the parameter
    let items = deployed
        .clients
        .dynamodb
        .scan()
        .table_name(&deployed.stack.table)
        .into_paginator()
        .items()
        .send()
        .collect::<Vec<_>>()
        .await;
    let items = format!("{items:?}");
    assert!(
        items.contains(&name),
        "the crawl's config names the parameter"
    );
    assert!(!items.contains(TOKEN), "the token is in the table");
    let objects = deployed
        .clients
        .s3
        .list_objects_v2()
        .bucket(&deployed.stack.bucket)
        .into_paginator()
        .send()
        .collect::<Vec<_>>()
        .await;
    let keys: Vec<String> = objects
        .into_iter()
        .flat_map(|page| page.unwrap().contents.unwrap_or_default())
        .filter_map(|object| object.key)
        .collect();
    assert!(keys.len() > 3, "pages and delivery files: {keys:?}");
    for key in &keys {
        let body = deployed
            .clients
            .s3
            .get_object()
            .bucket(&deployed.stack.bucket)
            .key(key)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes()
            .to_vec();
        let body = if body.starts_with(&[0x1f, 0x8b]) {
            let mut plain = Vec::new();
            flate2::read::MultiGzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .unwrap();
            plain
        } else {
            body
        };
        assert!(
            !body.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "the token is in {key}"
        );
    }
    let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(logged.lines().count() > 10, "debug logs were captured");
    assert!(!logged.contains(TOKEN), "the token was logged");
}

#[tokio::test]
async fn a_crawl_run_by_the_functions_sends_headers_cookies_basic_auth_and_a_post_through_a_proxy()
{
    // GIVEN a site whose pages each want one thing of a real client: the crawl's header, the
    // cookie its login page sets, Basic credentials held in Parameter Store, and a POST of one
    // JSON body; and a forward HTTP proxy in front of it
    let deployed = deploy(&moto::shared().endpoint).await;
    let (user, password) = (
        unique("/trawl/intranet-user"),
        unique("/trawl/intranet-password"),
    );
    put_secret(&deployed.clients.ssm, &user, "alice").await;
    put_secret(&deployed.clients.ssm, &password, "wonder land").await;
    let site = Site::start().await;
    site.route(
        "/login",
        Route::html(r#"<a href="/members.html">m</a> <a href="/private.html">p</a>"#)
            .require_header("X-Client", "trawl-test")
            .header("set-cookie", "session=s3ss10n; Path=/; HttpOnly"),
    )
    .route(
        "/members.html",
        Route::html("<p>welcome back</p>").require_cookie("session", "s3ss10n"),
    )
    .route(
        "/private.html",
        // base64("alice:wonder land")
        Route::html("<p>private</p>")
            .require_header("Authorization", "Basic YWxpY2U6d29uZGVyIGxhbmQ="),
    )
    .route(
        "/api/search",
        Route::content("application/json", r#"{"hits":["trawl"]}"#)
            .require_method("POST")
            .require_body(r#"{"q":"trawl"}"#),
    );
    let proxy = TestProxy::http(Failing::Never, None).await;

    // WHEN the seeder function is handed the crawl, and the functions run it to its delivery
    let fetcher = Fetcher::new("")
        .unwrap()
        .with_secrets(Arc::new(SsmSecrets::new(deployed.clients.ssm.clone())));
    let functions = functions_with(&deployed, Arc::new(fetcher));
    let crawl_id = unique("real-client");
    let addr = site.addr().to_string();
    let request = serde_json::json!({
        "crawl_id": crawl_id,
        "config": {
            "scope": {"allowed_domains": ["127.0.0.1"], "max_pages": 10},
            "fetch": {
                "guard_exempt": [addr],
                "timeout_ms": 3000,
                "store_content_types": ["application/json"],
                "headers": {"X-Client": "trawl-test"},
                "cookies": {"jar": true},
                "proxies": [proxy.url],
                "auth": [{"host": addr,
                          "basic": {"username": {"ssm": user},
                                    "password": {"ssm": password}}}],
                "rules": [{"match": "/api/search$", "method": "POST",
                           "body": {"json": {"q": "trawl"}}}]
            }
        },
        "source": {"urls": [site.url("/login"), site.url("/api/search")]}
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN every page succeeded, each fetched once, and every request went through the proxy
    assert_eq!(summary["statuses"]["succeeded"], 4, "{summary}");
    for path in ["/login", "/members.html", "/private.html", "/api/search"] {
        assert_eq!(site.hits(path), 1, "{path}");
    }
    assert_eq!(proxy.seen.forwarded(), site.total_hits());
}
