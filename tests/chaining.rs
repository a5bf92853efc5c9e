//! Chained requests (capabilities D9, D11): a seed line's own POST and body, two bodies to one
//! URL being two tasks; chain rules making the next requests of an API's JSON answers (a cursor
//! to POST on, a list of ids fanned out), each carrying the values it was made of, and stopping
//! with the reason; a given-up request tried again with its `page` changed. On the embedded
//! backend from the CLI, and through the Lambda handlers on moto.

use crate::cli::{json_of, temp_dir, trawl};
use crate::operator::{deploy, functions};
use crate::site::{Route, Site};
use crate::support::{moto, unique};
use serde_json::{Value, json};
use std::path::Path;
use trawl_core::store::TaskRecords;
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::task::{Task, now_ms};

/// An API on the loopback site: a search answered only to a POST, its cursor's next page only
/// to a POST of `{"cursor":"c2"}`, three item pages, and a listing whose page 1 is a bad
/// request and page 2 is fine.
fn api(site: &Site) {
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    let json = |body: Value| Route::content("application/json", body.to_string());
    site.route(
        "/api/search",
        json(json!({"ids": [1, 2], "next": "c2"})).require_method("POST"),
    );
    site.route(
        "/api/page",
        json(json!({"ids": [3], "next": null}))
            .require_method("POST")
            .require_body(r#"{"cursor":"c2"}"#),
    );
    for id in 1..=3 {
        site.route(
            &format!("/item/{id}"),
            Route::html(format!("<h1>item {id}</h1>")),
        );
    }
    site.route("/api/list?page=1", Route::status(400));
    site.route("/api/list?page=2", json(json!({"ids": [], "next": null})));
}

/// The crawl's rules: every API answer's `next` cursor is POSTed to `/api/page`, its `ids` are
/// fetched as `/item/{id}`; a listing page answered 400 is tried again with `page` + 1.
fn config() -> Value {
    json!({
        "politeness": {"delay_ms": 0},
        "fetch": {"store_content_types": ["application/json"]},
        "chains": [
            {"glob": "*/api/*", "fields": {"next": {"json": "/next"}}, "url": "/api/page",
             "method": "POST", "body": {"cursor": "{next}"}, "max_steps": 5},
            {"glob": "*/api/*", "fields": {"id": {"json": "/ids"}}, "url": "/item/{id}",
             "carry": "listing"}
        ],
        "retry_with": [
            {"glob": "*/api/list*", "on_status": [400], "param": "page", "add": 1, "max": 2}
        ]
    })
}

/// The seed lines: two searches POSTed to one URL with different bodies, and the listing.
fn seed_lines(site: &Site) -> Vec<String> {
    let search = site.url("/api/search");
    vec![
        json!({"url": search, "data": {"_method": "POST", "_body": {"q": "shoes"}, "sku": "s1"}})
            .to_string(),
        json!({"url": search, "data": {"_method": "POST", "_body": {"q": "boots"}}}).to_string(),
        site.url("/api/list?page=1"),
    ]
}

/// The id of the task for `url` sent with the request `data` gives.
fn id_of(url: &str, data: Value) -> TaskId {
    let url = CanonicalUrl::parse(url).unwrap();
    trawl_domain::chain::task_id(&url, data.as_object())
}

/// What the site must have seen: each search POSTed once with its own body, the cursor's page
/// POSTed once with the cursor, each item and listing page asked once.
fn check_requests(site: &Site) {
    let mut bodies: Vec<String> = site
        .received("/api/search")
        .iter()
        .map(|r| {
            assert_eq!(r.method, "POST");
            String::from_utf8_lossy(&r.body).into_owned()
        })
        .collect();
    bodies.sort();
    assert_eq!(bodies, [r#"{"q":"boots"}"#, r#"{"q":"shoes"}"#]);
    let page = site.received("/api/page");
    assert_eq!(page.len(), 1);
    assert_eq!(&page[0].body[..], br#"{"cursor":"c2"}"#);
    for id in 1..=3 {
        assert_eq!(site.hits(&format!("/item/{id}")), 1, "item {id}");
    }
    let asked: Vec<Option<String>> = site
        .received("/api/list")
        .iter()
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(asked, [Some("page=1".into()), Some("page=2".into())]);
}

/// What the tasks must say: the cursor's page carries the values it was made of, its request
/// and its step, and says why its chain stopped; an item found on it carries its id under the
/// rule's name; the changed listing request names the given-up one as its parent.
fn check_tasks(site: &Site, task: impl Fn(&TaskId) -> Value) {
    let page = task(&id_of(
        &site.url("/api/page"),
        json!({"_method": "POST", "_body": {"cursor": "c2"}}),
    ));
    assert_eq!(page["status"], "succeeded", "{page}");
    let data = &page["data"];
    assert_eq!(data["prev_result"], json!({"next": "c2"}), "{page}");
    assert_eq!(data["_chain"], 1, "{page}");
    assert_eq!(
        (&data["_method"], &data["_body"]),
        (&json!("POST"), &json!({"cursor": "c2"}))
    );
    assert_eq!(
        page["chain_stop"],
        json!({"reason": "empty", "field": "next"}),
        "{page}"
    );
    let item = task(&id_of(&site.url("/item/3"), json!({})));
    assert_eq!(item["data"]["listing"], json!({"id": 3}), "{item}");
    assert_eq!(item["data"]["_chain"], 2, "{item}");
    assert!(item["data"].get("_method").is_none(), "{item}");
    let first = id_of(&site.url("/api/list?page=1"), json!({}));
    assert_eq!(task(&first)["status"], "ignored");
    let again = task(&id_of(&site.url("/api/list?page=2"), json!({})));
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(again["parent"], first.as_str(), "{again}");
    assert_eq!(again["data"]["_retried"], 1, "{again}");
}

async fn succeeded(args: &[&str], dir: &Path) -> Value {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

#[tokio::test]
async fn an_apis_answers_chain_its_next_requests_with_their_values_and_a_bad_page_is_tried_again_changed()
 {
    // GIVEN the API, two searches POSTed to one URL, the listing's bad first page, and the rules
    let site = Site::start().await;
    api(&site);
    let dir = temp_dir("chaining");
    let data = dir.join("data");
    let (seeds, file) = (dir.join("seeds.txt"), dir.join("config.json"));
    std::fs::write(&seeds, seed_lines(&site).join("\n")).unwrap();
    std::fs::write(&file, config().to_string()).unwrap();
    let data_dir = data.to_str().unwrap();

    // WHEN it is crawled
    let done = succeeded(
        &[
            "crawl",
            "--seeds-file",
            seeds.to_str().unwrap(),
            "--crawl-id",
            "api",
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            data_dir,
            "--allow-private-networks",
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN the two searches are two tasks, each chain made its requests, and the bad page was
    // given up and asked for again with page 2
    assert_eq!(done["counts"]["succeeded"], 7, "{done}");
    assert_eq!(done["counts"]["ignored"], 1, "{done}");
    check_requests(&site);
    // AND the tasks carry what they were made of, and say why their chains stopped
    let mut shown = std::collections::HashMap::new();
    for id in [
        id_of(
            &site.url("/api/page"),
            json!({"_method": "POST", "_body": {"cursor": "c2"}}),
        ),
        id_of(&site.url("/item/3"), json!({})),
        id_of(&site.url("/api/list?page=1"), json!({})),
        id_of(&site.url("/api/list?page=2"), json!({})),
    ] {
        let args = [
            "tasks",
            "show",
            id.as_str(),
            "--crawl-id",
            "api",
            "--data-dir",
            data_dir,
            "--json",
        ];
        shown.insert(id.clone(), succeeded(&args, &dir).await);
    }
    check_tasks(&site, |id| shown[id].clone());
    // AND the delivery counts the pages whose chains stopped, by why: the cursor's page and
    // the listing's second, both without a `next`
    let delivery = Path::new(
        done["delivery"]
            .as_str()
            .unwrap_or_else(|| panic!("{done}")),
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(delivery.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["chain_stops"], json!({"empty": 2}), "{summary}");
    // AND a POSTed task is found by its URL with its method and body too
    let url = site.url("/api/page");
    let args = [
        "tasks",
        "show",
        url.as_str(),
        "--method",
        "POST",
        "--body-json",
        r#"{"cursor": "c2"}"#,
        "--crawl-id",
        "api",
        "--data-dir",
        data_dir,
        "--json",
    ];
    let by_url = succeeded(&args, &dir).await;
    let id = id_of(&url, json!({"_method": "POST", "_body": {"cursor": "c2"}}));
    assert_eq!(by_url["task_id"], id.as_str(), "{by_url}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_template_naming_an_unknown_field_or_a_seeds_bad_request_is_refused_before_anything_runs()
{
    let dir = temp_dir("chaining-refused");
    let data = dir.join("data");
    let seeds = dir.join("seeds.txt");
    let file = dir.join("config.json");
    let mut unknown = config();
    unknown["chains"][0]["url"] = json!("/api/page?c={cursor}");
    let mut get_body = config();
    get_body["chains"][0]["method"] = json!("GET");
    let good_seed = "http://127.0.0.1:9/api/search".to_owned();
    let bad_seed =
        json!({"url": "http://127.0.0.1:9/api/search", "data": {"_body": {"q": 1}}}).to_string();
    for (config, seed, says) in [
        (
            unknown,
            &good_seed,
            r#"names "cursor", which is not one of its fields (next)"#,
        ),
        (get_body, &good_seed, "chains[0]: body needs method POST"),
        (config(), &bad_seed, r#"_body needs _method "POST""#),
    ] {
        std::fs::write(&file, config.to_string()).unwrap();
        std::fs::write(&seeds, seed).unwrap();
        let args = [
            "crawl",
            "--seeds-file",
            seeds.to_str().unwrap(),
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ];
        let output = trawl(&args, &dir).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{says}: {stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn through_the_functions_an_apis_answers_chain_and_a_bad_page_is_tried_again_changed() {
    // GIVEN a deployed stack on moto, the four handlers, the API, and the seeder handed the
    // seed lines with the rules
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = Site::start().await;
    api(&site);
    let functions = functions(&deployed);
    let crawl_id = unique("chain");
    let mut config = config();
    config["fetch"]["allow_private_networks"] = json!(true);
    let request = json!({
        "crawl_id": crawl_id,
        "config": config,
        "source": {"urls": seed_lines(&site)},
    });

    // WHEN the functions run the crawl until it is delivered
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN the site saw what the CLI's crawl sent, and the stored tasks say the same
    assert_eq!(summary["statuses"]["succeeded"], 7, "{summary}");
    assert_eq!(summary["statuses"]["ignored"], 1, "{summary}");
    assert_eq!(summary["chain_stops"], json!({"empty": 2}), "{summary}");
    check_requests(&site);
    let store = trawl_aws::dynamodb::DynamoStore::new(
        deployed.clients.dynamodb.clone(),
        &deployed.stack.table,
        4,
        std::sync::Arc::new(trawl_domain::calls::CallCounts::default()),
    );
    let crawl = CrawlId::parse(&crawl_id).unwrap();
    let mut stored = std::collections::HashMap::new();
    for id in [
        id_of(
            &site.url("/api/page"),
            json!({"_method": "POST", "_body": {"cursor": "c2"}}),
        ),
        id_of(&site.url("/item/3"), json!({})),
        id_of(&site.url("/api/list?page=1"), json!({})),
        id_of(&site.url("/api/list?page=2"), json!({})),
    ] {
        let task = store.get(&crawl, &id).await.unwrap();
        let task = task.unwrap_or_else(|| panic!("no task {id}"));
        stored.insert(id, shown(&task));
    }
    check_tasks(&site, |id| stored[id].clone());
}

/// A stored task as `trawl tasks show` has the fields the checks read.
fn shown(task: &Task) -> Value {
    json!({
        "status": task.status.name(),
        "data": task.data,
        "parent": task.parent.as_ref().map(|p| p.as_str()),
        "chain_stop": task.fetch.as_ref().and_then(|f| f.chain_stop.clone()),
    })
}
