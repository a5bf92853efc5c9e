//! Pagination from the CLI and through the Lambda handlers: range and list templates,
//! open-ended paging (page after page while each yields, the stop and its reason in the
//! delivery's summary), the crawl's checkpoint as `{since}`, and malformed templates refused.

use crate::cli::{json_of, temp_dir, trawl};
use crate::operator::{Deployed, acknowledge, deploy, functions};
use crate::site::{Route, Site};
use crate::support::{moto, unique};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Status, now_ms};

/// A listing of `pages` pages at `/list?page=N`, each with 3 items of its own and, like a real
/// pager, links to every listing page up to `pages + 3` (so link discovery alone would go past
/// the end); the pages past the end list only the first page's items. `/list?page=0` is never
/// asked for.
fn listing(site: &Site, pages: usize) {
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    let pager: String = (1..=pages + 3)
        .map(|n| format!(r#"<a href="/list?page={n}">{n}</a> "#))
        .collect();
    for n in 1..=pages + 3 {
        let of = if n <= pages { n } else { 1 };
        let items: String = (0..3)
            .map(|k| format!(r#"<a href="/item/{of}-{k}.html">item</a> "#))
            .collect();
        site.route(
            &format!("/list?page={n}"),
            Route::html(format!("<h1>listing {n}</h1>{items}<nav>{pager}</nav>")),
        );
        for k in 0..3 {
            site.route(
                &format!("/item/{n}-{k}.html"),
                Route::html(format!("<h1>item {n}-{k}</h1>")),
            );
        }
    }
}

/// The `page` values of the requests `/list` received, in order.
fn pages_asked(site: &Site, path: &str) -> Vec<String> {
    site.received(path)
        .iter()
        .map(|r| {
            let query = r.query.clone().unwrap_or_default();
            query
                .split('&')
                .find_map(|p| p.strip_prefix("page="))
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn success(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(output)
}

fn summary_of(report: &Value) -> Value {
    let delivery = Path::new(report["delivery"].as_str().unwrap()).join("summary.json");
    serde_json::from_slice(&std::fs::read(delivery).unwrap()).unwrap()
}

#[tokio::test]
async fn an_open_ended_template_pages_one_by_one_until_a_page_yields_no_new_links() {
    // GIVEN a listing of 5 pages whose pager links to 8, the pages past the 5th listing only
    // items already known
    let site = Site::start().await;
    listing(&site, 5);
    let dir = temp_dir("paging-open");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let template = site.url("/list?page={page}");
    let args = [
        "crawl",
        "--pages",
        &template,
        "--allow-private-networks",
        "--data-dir",
        data,
        "--json",
    ];

    // WHEN it is crawled with an open-ended template (no stop)
    let report = success(&trawl(&args, &dir).await);

    // THEN the pages were asked one after the other, each once, up to the first that yielded
    // no new link (the 6th): the pager's links to 7 and 8 were not followed
    assert_eq!(pages_asked(&site, "/list"), ["1", "2", "3", "4", "5", "6"]);
    assert_eq!(report["counts"]["succeeded"], 6 + 15, "{report}");
    // AND the delivery's summary says where the chain ended and why
    let paging = &summary_of(&report)["paging"];
    assert_eq!(paging.as_array().map(Vec::len), Some(1), "{paging}");
    assert_eq!(paging[0]["template"], template.as_str());
    assert_eq!(paging[0]["pages"], 6);
    assert!(
        paging[0]["last_page"]
            .as_str()
            .unwrap()
            .ends_with("/list?page=6")
    );
    assert_eq!(
        paging[0]["stopped"],
        json!({"reason": "nothing_yielded", "rule": "new_links"})
    );
    assert_eq!(report["paging"], *paging);

    // WHEN the same command runs again
    let again = success(&trawl(&args, &dir).await);

    // THEN nothing is asked again: the seed is known, the chain seeded nothing twice
    assert_eq!(pages_asked(&site, "/list").len(), 6);
    assert_eq!(again["counts"]["succeeded"], 21, "{again}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn ranges_lists_and_a_capped_template_reading_the_checkpoint_as_since() {
    // GIVEN an API answering every page with one result, and range and list pages
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    )
    .route(
        "/api",
        Route::content("application/json", r#"{"results": [{"id": 1}]}"#),
    );
    for page in ["/r/1.html", "/r/3.html", "/c/books/", "/c/films/"] {
        site.route(page, Route::html("<p>x</p>"));
    }
    let dir = temp_dir("paging-since");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let api = format!(
        "{} max_pages=3 while=body",
        site.url("/api?since={since}&page={page}")
    );
    let range = format!("{} start=1 stop=5 step=2", site.url("/r/{page}.html"));
    let list = format!("{} values=books,films", site.url("/c/{page}/"));
    let crawl = |checkpoint: &'static str| {
        let (api, range, list) = (api.clone(), range.clone(), list.clone());
        let dir = dir.clone();
        async move {
            let args = [
                "crawl",
                "--crawl-id",
                "api",
                "--pages",
                &api,
                "--pages",
                &range,
                "--pages",
                &list,
                "--store-content-type",
                "application/json",
                "--checkpoint",
                checkpoint,
                "--allow-private-networks",
                "--data-dir",
                data,
                "--json",
            ];
            success(&trawl(&args, &dir).await)
        }
    };

    // WHEN the crawl runs a first time, storing a checkpoint as it ends its seeding
    let first = crawl("2026-11-27T10:00:00Z").await;

    // THEN the range and the list were seeded whole, the API template paged to its cap with an
    // empty since (the crawl had no checkpoint when it was seeded), and the checkpoint is kept
    for page in ["/r/1.html", "/r/3.html", "/c/books/", "/c/films/"] {
        assert_eq!(site.hits(page), 1, "{page}");
    }
    let sent: Vec<String> = site
        .received("/api")
        .iter()
        .map(|r| r.query.clone().unwrap())
        .collect();
    assert_eq!(sent, ["page=1&since=", "page=2&since=", "page=3&since="]);
    let paging = &summary_of(&first)["paging"];
    assert_eq!(paging[0]["pages"], 3, "{paging}");
    assert_eq!(
        paging[0]["stopped"],
        json!({"reason": "cap", "max_pages": 3})
    );
    let get = trawl(
        &["config", "get", "checkpoint", "--data-dir", data, "--json"],
        &dir,
    )
    .await;
    assert_eq!(success(&get)["checkpoint"], "2026-11-27T10:00:00Z");

    // WHEN it runs again with the next checkpoint
    let second = crawl("2026-11-28T10:00:00Z").await;

    // THEN the new chain's pages sent the stored checkpoint as since, and the summary tells the
    // two chains apart
    let sent: Vec<String> = site
        .received("/api")
        .iter()
        .skip(3)
        .map(|r| r.query.clone().unwrap())
        .collect();
    let since = "since=2026-11-27T10%3A00%3A00Z";
    assert_eq!(
        sent,
        [1, 2, 3].map(|n| format!("page={n}&{since}")),
        "{sent:?}"
    );
    let paging = summary_of(&second)["paging"].clone();
    let sinces: Vec<&str> = paging
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["since"].as_str().unwrap())
        .collect();
    assert_eq!(sinces, ["", "2026-11-27T10%3A00%3A00Z"], "{paging}");

    // AND `config set checkpoint` replaces it, `''` clears it
    let set = trawl(
        &["config", "set", "checkpoint", "v3", "--data-dir", data],
        &dir,
    )
    .await;
    assert!(set.status.success());
    let get = trawl(&["config", "get", "checkpoint", "--data-dir", data], &dir).await;
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "v3");
    let clear = trawl(
        &["config", "set", "checkpoint", "", "--data-dir", data],
        &dir,
    )
    .await;
    assert!(clear.status.success());
    let get = trawl(
        &["config", "get", "checkpoint", "--data-dir", data, "--json"],
        &dir,
    )
    .await;
    assert_eq!(success(&get)["checkpoint"], Value::Null);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn malformed_templates_are_usage_errors_that_say_what_is_wrong() {
    let dir = temp_dir("paging-usage");
    for (template, said) in [
        ("http://x.example/list", "has no {page}"),
        ("http://{page}.example/", "placeholder in its host"),
        ("http://x.example/{page} stop=3", "give start and stop"),
        (
            "http://x.example/{page} start=1 stop=5 max_pages=3",
            "for open-ended templates",
        ),
        (
            "http://x.example/{page} start=one",
            "expected a whole number",
        ),
        (
            "http://x.example/{page} until=items",
            "unknown field `until`",
        ),
        ("http://x.example/{page} while=forever", "unknown variant"),
        (r#"{"template": 5}"#, "not a pagination template"),
    ] {
        // WHEN a crawl is given the template
        let output = trawl(&["crawl", "--pages", template, "--data-dir", "data"], &dir).await;

        // THEN it is refused as bad usage, in one line saying why, and nothing is created
        assert_eq!(output.status.code(), Some(2), "{template}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{template}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!dir.join("data").exists());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The listing's pages and items as tasks of the crawl, by status.
async fn tasks_of(deployed: &Deployed, crawl_id: &str) -> (u64, u64) {
    let store = trawl_aws::dynamodb::DynamoStore::new(
        deployed.clients.dynamodb.clone(),
        &deployed.stack.table,
        4,
        std::sync::Arc::new(trawl_domain::calls::CallCounts::default()),
    );
    let id = CrawlId::parse(crawl_id).unwrap();
    let counts = store.counts(&id).await.unwrap();
    let crawl = store.get_crawl(&id).await.unwrap().unwrap();
    assert_eq!(
        crawl.config.paging.len(),
        1,
        "the template joined the crawl"
    );
    // Its first generation, delivered, began with the crawl: its checkpoint says so.
    assert_eq!(crawl.checkpoint, Some(crawl.created_at.to_string()));
    (
        counts.get(&Status::Succeeded).copied().unwrap_or(0),
        counts.values().sum(),
    )
}

#[tokio::test]
async fn the_handlers_page_an_open_ended_template_once_even_when_turns_are_delivered_twice() {
    // GIVEN a deployed stack on moto and a listing of 4 pages
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = Site::start().await;
    listing(&site, 4);
    let functions = functions(&deployed);
    let crawl_id = unique("paged");

    // WHEN the seeder is handed an open-ended template, and every crawler batch is delivered
    // twice (SQS's at-least-once), the sweeper and deliverer running as scheduled
    let request = json!({
        "crawl_id": crawl_id,
        "config": {"fetch": {"allow_private_networks": true}, "auto_checkpoint": "epoch_ms"},
        "source": {"pagination": [
            {"template": site.url("/list?page={page}"), "start": 1, "max_pages": 50}
        ]},
    });
    let seeded = functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let seeded = serde_json::to_value(seeded).unwrap();
    assert_eq!(seeded["accepted"], 1, "only the first page: {seeded}");
    let (sqs, stack) = (&deployed.clients.sqs, &deployed.stack);
    let mut summary = None;
    for _ in 0..300 {
        if let Some(event) = trawl_faults::lambda::receive_batch(sqs, &stack.queue_url)
            .await
            .unwrap()
        {
            for _ in 0..2 {
                let lambda_event = lambda_runtime::LambdaEvent::new(
                    event.clone(),
                    lambda_runtime::Context::default(),
                );
                let response = functions.crawler.handle(lambda_event).await.unwrap();
                let response = serde_json::to_value(response).unwrap();
                acknowledge(sqs, &stack.queue_url, &event, &response).await;
            }
        }
        let schedule =
            serde_json::from_str(include_str!("../events/sweeper-schedule.json")).unwrap();
        functions
            .sweeper
            .sweep(schedule, None, now_ms())
            .await
            .unwrap();
        if let Some(event) = trawl_faults::lambda::receive_batch(sqs, &stack.delivery_queue_url)
            .await
            .unwrap()
        {
            let payload = serde_json::to_value(&event).unwrap();
            let response = functions
                .deliverer
                .deliver(payload, now_ms(), None)
                .await
                .unwrap();
            let response = serde_json::to_value(response).unwrap();
            acknowledge(sqs, &stack.delivery_queue_url, &event, &response).await;
        }
        summary = crate::operator::delivered_summary(&deployed, &crawl_id, 0).await;
        if summary.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // THEN the pages were asked in order, each once, to the first yielding no new link
    assert_eq!(pages_asked(&site, "/list"), ["1", "2", "3", "4", "5"]);
    // AND each was seeded once: 5 listing pages and 12 items, all succeeded (and the
    // delivery set the checkpoint to its generation's start)
    assert_eq!(tasks_of(&deployed, &crawl_id).await, (17, 17));
    // AND the delivery's summary gives the chain's end
    let summary = summary.expect("the crawl was delivered");
    assert_eq!(summary["paging"][0]["pages"], 5, "{summary}");
    assert_eq!(
        summary["paging"][0]["stopped"],
        json!({"reason": "nothing_yielded", "rule": "new_links"})
    );
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn auto_checkpoint_makes_since_the_start_of_the_last_delivered_generation() {
    // GIVEN an API answering every page, and a crawl whose checkpoint is set automatically
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    )
    .route(
        "/changes",
        Route::content("application/json", r#"{"results": [{"id": 1}]}"#),
    );
    let dir = temp_dir("paging-auto");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let template = format!(
        "{} max_pages=2 while=body",
        site.url("/changes?since={since}&page={page}")
    );
    let args = [
        "crawl",
        "--crawl-id",
        "changes",
        "--pages",
        &template,
        "--store-content-type",
        "application/json",
        "--auto-checkpoint",
        "epoch_ms",
        "--allow-private-networks",
        "--data-dir",
        data,
        "--json",
    ];
    let checkpoint = || async {
        let get = trawl(
            &["config", "get", "checkpoint", "--data-dir", data, "--json"],
            &dir,
        )
        .await;
        success(&get)["checkpoint"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let sinces = |skip: usize| -> Vec<String> {
        site.received("/changes")
            .iter()
            .skip(skip)
            .map(|r| r.query.clone().unwrap())
            .collect()
    };

    // WHEN it runs a first time
    let before = epoch_ms();
    success(&trawl(&args, &dir).await);
    let after = epoch_ms();

    // THEN its pages asked with an empty since, and once delivered its checkpoint is the time
    // its first generation started (the crawl's creation)
    assert_eq!(sinces(0), ["page=1&since=", "page=2&since="]);
    let first = checkpoint().await;
    assert!(
        (before..=after).contains(&first),
        "{before} {first} {after}"
    );

    // WHEN it runs again
    let before = epoch_ms();
    success(&trawl(&args, &dir).await);
    let after = epoch_ms();

    // THEN its new pages sent that checkpoint as since, and the checkpoint moved to the start
    // of the generation they made (opened by their seed in this run)
    assert_eq!(
        sinces(2),
        [1, 2].map(|n| format!("page={n}&since={first}")),
        "{:?}",
        sinces(0)
    );
    let second = checkpoint().await;
    assert!(
        (before..=after).contains(&second),
        "{before} {second} {after}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
