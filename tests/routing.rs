//! `scope.routes`: what pages of a kind get (the frontier document's per-callback routing):
//! links followed or not, the body kept or not, the extractor that reads them.

use crate::cli::{json_of, temp_dir, trawl};
use crate::freshness::delivered_lines;
use crate::site::{Route, Site};
use serde_json::{Value, json};

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
