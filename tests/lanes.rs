//! Lanes (capability S14): a route puts the pages it matches in a lane of the crawl
//! (`scope.lanes`); a host's turn takes its lanes' due pages in rotation, so that a backlog of
//! detail pages never holds the listing pages back, at the host's one pace. On the embedded
//! backend (the CLI) and through the four functions on moto.

use crate::cli::{json_of, temp_dir, trawl};
use crate::operator::{deploy, functions};
use crate::priorities::{fetch_order, position, site_of};
use crate::site::Site;
use crate::support::{moto, unique};
use seeder::handler::SeederResponse;
use serde_json::{Value, json};
use std::path::Path;
use trawl_domain::task::now_ms;

/// Detail pages a listing links to (a backlog many turns long).
const DETAILS: usize = 30;
/// Pages a turn of the host fetches at most.
const TURN_PAGES: usize = 5;
/// The host's pace: the least time between two request starts.
const DELAY_MS: u64 = 40;

/// A listing linking to `DETAILS` detail pages, then to two more listings.
fn listing_site(site: &Site) -> Vec<String> {
    let details: Vec<String> = (0..DETAILS).map(|i| format!("/item/{i}")).collect();
    let mut paths = vec!["/list/0".to_owned()];
    paths.extend(details.iter().cloned());
    paths.extend(["/list/1".to_owned(), "/list/2".to_owned()]);
    let links: Vec<&str> = paths[1..].iter().map(String::as_str).collect();
    let all: Vec<&str> = paths.iter().map(String::as_str).collect();
    site_of(site, &all, &links);
    paths
}

/// Listings and details in lanes of their own, the details at priority 5 (or, `lanes` false,
/// the same routes without lanes).
fn config(lanes: bool) -> Value {
    let mut config = json!({
        "politeness": {"delay_ms": DELAY_MS, "per_host": 1, "turn_pages": TURN_PAGES},
        "fetch": {"allow_private_networks": true},
        "scope": {"routes": [
            {"glob": "*/list/*", "lane": "listings"},
            {"glob": "*/item/*", "lane": "details", "priority": 5},
        ]},
    });
    if lanes {
        config["scope"]["lanes"] = json!(["listings", "details"]);
    } else {
        for route in config["scope"]["routes"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            route.as_object_mut().map(|r| r.remove("lane"));
        }
    }
    config
}

async fn crawl_listings(site: &Site, lanes: bool, dir: &Path) -> Value {
    let data = dir.join(if lanes { "lanes" } else { "plain" });
    let file = dir.join("config.json");
    std::fs::write(&file, config(lanes).to_string()).unwrap();
    let output = trawl(
        &[
            "crawl",
            &site.url("/list/0"),
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--json",
        ],
        dir,
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

/// The times between the starts of the requests of `paths` the site received, in order.
fn gaps_ms(site: &Site, paths: &[String]) -> Vec<u128> {
    let mut at: Vec<std::time::Instant> = paths
        .iter()
        .flat_map(|p| site.received(p))
        .map(|r| r.at)
        .collect();
    at.sort();
    at.windows(2)
        .map(|w| w[1].duration_since(w[0]).as_millis())
        .collect()
}

#[tokio::test]
async fn a_backlog_of_detail_pages_never_holds_the_listings_back_and_the_hosts_pace_is_kept() {
    // GIVEN a listing linking to 30 detail pages (given priority 5 by their route) and then to
    // two more listings, crawled with turns of 5 pages one fetch at a time: once with listings
    // and details in lanes of their own, once without lanes
    let dir = temp_dir("lanes");
    let laned = Site::start().await;
    let paths = listing_site(&laned);
    let plain = Site::start().await;
    listing_site(&plain);

    // WHEN both are crawled
    let with_lanes = crawl_listings(&laned, true, &dir).await;
    let without = crawl_listings(&plain, false, &dir).await;

    // THEN every page is fetched either way
    assert_eq!(with_lanes["counts"]["succeeded"], 33, "{with_lanes}");
    assert_eq!(without["counts"]["succeeded"], 33, "{without}");
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    // AND with lanes, the listings found with the 30 higher-priority details are fetched
    // within the turn that found them, alternating with the details
    let order = fetch_order(&laned, &refs);
    let at = |order: &[String], path| position(order, path) + 1;
    eprintln!(
        "lanes: /list/1 and /list/2 fetched {} and {} of 33",
        at(&order, "/list/1"),
        at(&order, "/list/2")
    );
    assert_eq!(order[0], "/list/0", "{order:?}");
    assert!(position(&order, "/list/1") < TURN_PAGES, "{order:?}");
    assert!(position(&order, "/list/2") < TURN_PAGES, "{order:?}");
    // AND without lanes they wait for the whole backlog, six turns later
    let order = fetch_order(&plain, &refs);
    eprintln!(
        "no lanes: /list/1 and /list/2 fetched {} and {} of 33",
        at(&order, "/list/1"),
        at(&order, "/list/2")
    );
    assert!(position(&order, "/list/1") > DETAILS, "{order:?}");
    assert!(position(&order, "/list/2") > DETAILS, "{order:?}");
    // AND the lanes share the host's one pace: its 33 requests are spread over 32 delays at
    // least, none near another (the times are the site's, on receipt: a few ms of jitter)
    let gaps = gaps_ms(&laned, &paths);
    let delay = u128::from(DELAY_MS);
    assert!(gaps.iter().sum::<u128>() + 10 >= 32 * delay, "{gaps:?}");
    assert!(gaps.iter().all(|&g| g >= delay / 2), "{gaps:?}");
    // AND `config show` tells the lanes and each route's
    let data = dir.join("lanes");
    let shown = json_of(
        &trawl(
            &[
                "config",
                "show",
                "--json",
                "--data-dir",
                data.to_str().unwrap(),
            ],
            &dir,
        )
        .await,
    );
    assert_eq!(
        shown["scope"]["lanes"],
        json!(["listings", "details"]),
        "{shown}"
    );
    assert_eq!(shown["scope"]["routes"][1]["lane"], "details", "{shown}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_unknown_lane_or_a_bad_lane_name_is_refused_before_anything_runs() {
    let dir = temp_dir("lanes-refused");
    let data = dir.join("data");
    for (lanes, routes, says) in [
        (
            json!(["listings"]),
            json!([{"glob": "*/item/*", "lane": "details"}]),
            "no lane named \"details\"",
        ),
        (
            json!([]),
            json!([{"glob": "*/item/*", "lane": "details"}]),
            "no lane named",
        ),
        (json!(["Listings"]), json!([]), "not a lane name"),
        (json!(["a", "a"]), json!([]), "named twice"),
        (
            json!(["a", "b", "c", "d", "e", "f", "g", "h", "i"]),
            json!([]),
            "at most 8",
        ),
    ] {
        let mut config = config(true);
        config["scope"]["lanes"] = lanes;
        config["scope"]["routes"] = routes;
        let file = dir.join("lanes.json");
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
        assert_eq!(output.status.code(), Some(2), "{says}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn through_the_functions_a_backlog_of_detail_pages_never_holds_the_listings_back() {
    // GIVEN a deployed stack on moto, the four handlers, and one host's seeds: 30 detail pages
    // (priority 5) and two listings, in lanes of their own, turns of 5 pages
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = Site::start().await;
    let details: Vec<String> = (0..DETAILS).map(|i| format!("/item/{i}")).collect();
    let mut paths = details.clone();
    paths.extend(["/list/1".to_owned(), "/list/2".to_owned()]);
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    // No page links anywhere: the first path serves an empty listing of links.
    site_of(&site, &refs, &[]);
    let functions = functions(&deployed);
    let crawl_id = unique("lanes");
    let mut config = config(true);
    config["politeness"]["delay_ms"] = json!(0);
    let request = json!({
        "crawl_id": crawl_id,
        "config": config,
        "source": {"urls": paths.iter().map(|p| site.url(p)).collect::<Vec<_>>()},
    });

    // WHEN the seeder is first handed a crawl whose route names a lane it does not have
    let mut unknown = request.clone();
    unknown["crawl_id"] = json!(unique("lanes-unknown"));
    unknown["config"]["scope"]["lanes"] = json!(["listings"]);
    let refused = functions.seeder.dispatch(unknown, None, now_ms()).await;
    // THEN it is refused, naming the lane, and nothing is fetched
    let refused = format!("{:?}", refused.err());
    assert!(refused.contains("no lane named"), "{refused}");
    assert!(site.received("/list/1").is_empty());

    // WHEN the seeder is handed them and the functions run the crawl until it is delivered
    let seeded = functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let SeederResponse::Seeded(seeded) = seeded else {
        panic!("not a seed response")
    };
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN every page is fetched, and the two listings seeded with 30 higher-priority details
    // are fetched in the host's first turn, alternating with the details
    assert_eq!(seeded.accepted, 32, "{seeded:?}");
    assert_eq!(summary["statuses"]["succeeded"], 32, "{summary}");
    let order = fetch_order(&site, &refs);
    eprintln!(
        "through the functions: /list/1 and /list/2 fetched {} and {} of 32",
        position(&order, "/list/1") + 1,
        position(&order, "/list/2") + 1
    );
    assert!(position(&order, "/list/1") < TURN_PAGES, "{order:?}");
    assert!(position(&order, "/list/2") < TURN_PAGES, "{order:?}");
}

/// Detail pages on each of three hosts, slow to answer.
const SLOW_MS: u64 = 150;

/// The least time between two detail requests' arrivals over three hosts, crawled with the
/// details lane limited to `limit` fetches at once (None: no limit).
async fn least_gap_between_details(limit: Option<u32>) -> std::time::Duration {
    let sites = [
        Site::start().await,
        Site::start().await,
        Site::start().await,
    ];
    let mut seeds = Vec::new();
    for site in &sites {
        site.route(
            "/robots.txt",
            crate::site::Route::content("text/plain", "User-agent: *\nAllow: /\n"),
        );
        for i in 0..3 {
            let path = format!("/item/{i}");
            site.route(
                &path,
                crate::site::Route::html("<p>item</p>")
                    .delayed(std::time::Duration::from_millis(SLOW_MS)),
            );
            seeds.push(site.url(&path));
        }
    }
    let dir = temp_dir("lane-limit");
    let mut config = json!({
        "politeness": {"delay_ms": 0},
        "fetch": {"allow_private_networks": true},
        "scope": {"lanes": ["details"], "routes": [{"glob": "*/item/*", "lane": "details"}]},
    });
    if let Some(limit) = limit {
        config["scope"]["lane_limits"] = json!({"details": limit});
    }
    let (file, list) = (dir.join("config.json"), dir.join("seeds.txt"));
    std::fs::write(&file, config.to_string()).unwrap();
    std::fs::write(&list, seeds.join("\n")).unwrap();
    let output = trawl(
        &[
            "crawl",
            "--seeds-file",
            list.to_str().unwrap(),
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            dir.join("data").to_str().unwrap(),
            "--json",
        ],
        &dir,
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut arrivals: Vec<std::time::Instant> = sites
        .iter()
        .flat_map(|s| (0..3).flat_map(move |i| s.received(&format!("/item/{i}"))))
        .map(|r| r.at)
        .collect();
    assert_eq!(arrivals.len(), 9);
    arrivals.sort();
    let _ = std::fs::remove_dir_all(dir);
    arrivals
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_lane_with_a_limit_fetches_no_more_of_its_pages_at_once_over_all_hosts() {
    // GIVEN three hosts of slow detail pages in one lane
    // WHEN they are crawled with the lane limited to one fetch at once, and without a limit
    let limited = least_gap_between_details(Some(1)).await;
    let free = least_gap_between_details(None).await;

    // THEN with the limit each detail request waits for the one before to be answered; without
    // it the hosts' requests overlap
    let answer = std::time::Duration::from_millis(SLOW_MS);
    eprintln!("least gap between detail requests: limited to 1 {limited:?}, unlimited {free:?}");
    assert!(limited >= answer * 9 / 10, "{limited:?}");
    assert!(free < answer / 2, "{free:?}");
}
