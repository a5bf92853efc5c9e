//! `scope.routes`: what pages of a kind get (the frontier document's per-callback routing):
//! links followed or not, the body kept or not, the extractor that reads them.

use crate::cli::{json_of, temp_dir, trawl};
use crate::freshness::delivered_lines;
use crate::operator::{deploy, functions};
use crate::site::{Route, Site};
use crate::support::{moto, unique};
use serde_json::{Value, json};
use trawl_domain::task::now_ms;

/// Two listing pages, each linking to the other and to two items; each item links to a
/// "related" page that only an item's links reach.
async fn shop() -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for list in 0..2 {
        let items: String = (0..2)
            .map(|i| format!(r#"<a href="/item/{}">item</a>"#, list * 2 + i))
            .collect();
        site.route(
            &format!("/list/{list}"),
            Route::html(format!(
                r#"<title>List {list}</title><a href="/list/{}">other</a>{items}"#,
                1 - list
            )),
        );
    }
    for item in 0..4 {
        site.route(
            &format!("/item/{item}"),
            Route::html(format!(
                r#"<title>Shop</title><h1>Item {item}</h1><a href="/related/{item}">related</a>"#
            )),
        );
        site.route(&format!("/related/{item}"), Route::html("<p>related"));
    }
    site
}

/// The crawl's configuration: listings read for their links only, items read by the `item`
/// extractor (not the generic one listed first) and their links not followed.
fn config() -> Value {
    json!({
        "scope": {"routes": [
            {"glob": "*/item/*", "follow_links": false, "extractor": "item"},
            {"glob": "*/list/*", "store": false}
        ]},
        "extract": [
            {"name": "generic", "fields": {"title": {"css": "title"}}},
            {"name": "item", "match": "/item/", "fields": {"name": {"css": "h1"}}}
        ]
    })
}

#[tokio::test]
async fn routes_keep_listings_for_their_links_only_and_stop_at_items_read_by_their_extractor() {
    // GIVEN the shop, and a configuration with a route for listings and one for items
    let site = shop().await;
    let dir = temp_dir("routing");
    let data = dir.join("data");
    let file = dir.join("routes.json");
    std::fs::write(&file, config().to_string()).unwrap();
    let home = site.url("/list/0");
    let args = [
        "crawl",
        home.as_str(),
        "--config",
        file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--allow-private-networks",
        "--json",
    ];

    // WHEN it is crawled
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done = json_of(&output);

    // THEN every listing and item is fetched once, and no item's link is followed
    assert_eq!(done["counts"]["succeeded"], 6, "{done}");
    for path in ["/list/0", "/list/1", "/item/0", "/item/3"] {
        assert_eq!(site.hits(path), 1, "{path}");
    }
    assert_eq!(
        (0..4)
            .map(|i| site.hits(&format!("/related/{i}")))
            .sum::<u64>(),
        0
    );
    // AND a listing's line names no stored body (its md5 only), an item's does
    let lines = delivered_lines(&done, "manifest-");
    let line = |path: &str| {
        let url = site.url(path);
        lines
            .iter()
            .find(|l| l["url"] == url.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{url}: {lines:?}"))
    };
    let listing = line("/list/1");
    assert!(listing["object"].is_null(), "{listing}");
    assert!(listing["md5"].is_string(), "{listing}");
    assert!(line("/item/2")["object"].is_string());
    // AND the items are the `item` extractor's, one an item page, none from a listing
    let items = delivered_lines(&done, "items.jsonl");
    assert_eq!(items.len(), 4, "{items:?}");
    assert!(
        items
            .iter()
            .all(|i| i["extractor"] == "item" && i["fields"]["name"].is_string()),
        "{items:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_route_naming_no_extractor_there_is_or_a_bad_pattern_is_refused_before_anything_runs() {
    let dir = temp_dir("routing-refused");
    let data = dir.join("data");
    for (routes, names) in [
        (json!([{"glob": "*/x/*", "extractor": "nosuch"}]), "nosuch"),
        (json!([{"match": "(", "follow_links": false}]), "routes"),
        (
            json!([{"glob": "*", "store": false, "extractor": "item"}]),
            "store false",
        ),
    ] {
        let mut config = config();
        config["scope"]["routes"] = routes;
        let file = dir.join("routes.json");
        std::fs::write(&file, config.to_string()).unwrap();
        let args = [
            "crawl",
            "http://127.0.0.1:9/",
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ];
        let output = trawl(&args, &dir).await;
        assert_eq!(output.status.code(), Some(2), "{names}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(names), "{names}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A listing linking to one product under two paths and to another product, and two pages
/// a seed line gives one key.
async fn keyed_site() -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    site.route(
        "/list",
        Route::html(r#"<a href="/item/1">a</a><a href="/goods/1">b</a><a href="/item/2">c</a>"#),
    );
    for path in ["/item/1", "/goods/1", "/item/2", "/a/7", "/b/7"] {
        site.route(path, Route::html(format!("<title>{path}</title>")));
    }
    site
}

/// A route keying products by their number.
fn keyed_config() -> Value {
    let route = json!({"match": "/(?:item|goods)/(\\d+)$", "key": "product-{1}"});
    json!({"scope": {"routes": [route]}})
}

/// The listing, and two seed lines naming one key.
fn keyed_seed_lines(site: &Site) -> Vec<String> {
    [
        json!({"url": site.url("/list")}),
        json!({"url": site.url("/a/7"), "data": {"_key": "sku-7"}}),
        json!({"url": site.url("/b/7"), "data": {"_key": "sku-7"}}),
    ]
    .iter()
    .map(Value::to_string)
    .collect()
}

/// Each key fetched once, under the first URL that gave it.
fn check_keyed_hits(site: &Site) {
    assert_eq!((site.hits("/item/1"), site.hits("/goods/1")), (1, 0));
    assert_eq!(site.hits("/item/2"), 1);
    assert_eq!((site.hits("/a/7"), site.hits("/b/7")), (1, 0));
}

#[tokio::test]
async fn urls_giving_one_dedup_key_by_a_route_or_a_seed_line_are_fetched_once() {
    // GIVEN the keyed site, its route and seed lines
    let site = keyed_site().await;
    let dir = temp_dir("routing-keys");
    let data = dir.join("data");
    let config = dir.join("keys.json");
    std::fs::write(&config, keyed_config().to_string()).unwrap();
    let seeds = dir.join("seeds.jsonl");
    std::fs::write(&seeds, keyed_seed_lines(&site).join("\n")).unwrap();
    let args = [
        "crawl",
        "--seeds-file",
        seeds.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--allow-private-networks",
        "--json",
    ];

    // WHEN it is crawled
    let output = trawl(&args, &dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done = json_of(&output);

    // THEN each key is one task, fetched once under the first URL that gave it
    assert_eq!(done["counts"]["succeeded"], 4, "{done}");
    check_keyed_hits(&site);
    // AND the delivered lines name the key each task was known by
    let manifest = delivered_lines(&done, "manifest-");
    let key_of = |path: &str| {
        manifest
            .iter()
            .find(|l| l["url"] == site.url(path).as_str())
            .map(|l| l["data"]["_key"].clone())
    };
    assert_eq!(key_of("/item/1"), Some(json!("product-1")), "{manifest:?}");
    assert_eq!(key_of("/a/7"), Some(json!("sku-7")));

    // AND `tasks show` finds a keyed task by any URL its route keys alike, and a seed line's
    // by its URL and key
    let show = |url: String, extra: &'static [&'static str]| {
        let (dir, data) = (dir.clone(), data.clone());
        async move {
            let mut args = vec!["tasks", "show", url.as_str(), "--json", "--data-dir"];
            args.push(data.to_str().unwrap());
            args.extend_from_slice(extra);
            trawl(&args, &dir).await
        }
    };
    let shown = json_of(&show(site.url("/goods/1"), &[]).await);
    assert_eq!(shown["url"], site.url("/item/1").as_str(), "{shown}");
    let shown = json_of(&show(site.url("/b/7"), &["--key", "sku-7"]).await);
    assert_eq!(shown["url"], site.url("/a/7").as_str(), "{shown}");
    let unkeyed = show(site.url("/b/7"), &[]).await;
    assert_eq!(unkeyed.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unkeyed.stderr).contains("--key"),
        "{}",
        String::from_utf8_lossy(&unkeyed.stderr)
    );

    // AND a seed line whose key is not a string is refused before anything runs, naming it
    std::fs::write(
        &seeds,
        json!({"url": site.url("/a/7"), "data": {"_key": 7}}).to_string(),
    )
    .unwrap();
    let refused = trawl(&args, &dir).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("_key"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn through_the_functions_urls_giving_one_dedup_key_are_fetched_once() {
    // GIVEN a deployed stack on moto, the four handlers, the keyed site, and the seeder handed
    // its seed lines, a bad key among them, with the keying route
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = keyed_site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("keys");
    let mut config = keyed_config();
    config["fetch"] = json!({"allow_private_networks": true});
    let mut lines = keyed_seed_lines(&site);
    lines.push(json!({"url": site.url("/c/7"), "data": {"_key": ""}}).to_string());
    let request = json!({"crawl_id": crawl_id, "config": config, "source": {"urls": lines}});

    // WHEN the functions run the crawl until it is delivered
    let seeded = functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let seeded = serde_json::to_value(seeded).unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN the bad key is rejected with its reason, and each key is fetched once
    assert_eq!(seeded["rejected"], 1, "{seeded}");
    assert!(seeded.to_string().contains("_key"), "{seeded}");
    assert_eq!(summary["statuses"]["succeeded"], 4, "{summary}");
    check_keyed_hits(&site);
}
