//! Priorities (capability S15): a seed line's `_priority`, `--priority`, a route's `priority`;
//! a host's due URLs taken highest priority first, as the loopback site sees them fetched; the
//! hosts with priority work served first, by the local queue and, on AWS, by a crawl queue of
//! their own.

use crate::cli::{json_of, temp_dir, trawl};
use crate::operator::{deploy, functions};
use crate::site::{Route, Site};
use crate::support::{moto, unique};
use seeder::handler::SeederResponse;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use trawl_aws::sqs::SqsQueue;
use trawl_aws::stack::create_stack;
use trawl_core::queue::{WorkMessage, WorkQueue};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_domain::priority::Priority;
use trawl_domain::task::now_ms;

/// A site that serves `paths` as small pages (the first linking to `links`) and allows robots.
pub(crate) fn site_of(site: &Site, paths: &[&str], links: &[&str]) {
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for (i, path) in paths.iter().enumerate() {
        let body = if i == 0 {
            links
                .iter()
                .map(|l| format!(r#"<a href="{l}">{l}</a>"#))
                .collect::<String>()
        } else {
            format!("<p>{path}</p>")
        };
        site.route(path, Route::html(body));
    }
}

/// `paths` in the order the site received them (each once: the first request).
pub(crate) fn fetch_order(site: &Site, paths: &[&str]) -> Vec<String> {
    let mut seen: Vec<(std::time::Instant, String)> = paths
        .iter()
        .filter_map(|p| Some((site.received(p).first()?.at, (*p).to_owned())))
        .collect();
    seen.sort();
    seen.into_iter().map(|(_, p)| p).collect()
}

pub(crate) fn position(order: &[String], path: &str) -> usize {
    order
        .iter()
        .position(|p| p == path)
        .unwrap_or_else(|| panic!("{path} never fetched: {order:?}"))
}

async fn crawl(args: &[&str], dir: &Path) -> serde_json::Value {
    let output = trawl(args, dir).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    json_of(&output)
}

#[tokio::test]
async fn a_hosts_seeds_are_fetched_highest_priority_first_and_tasks_show_tells_the_priority() {
    // GIVEN one host's seeds, the low ones listed first, two given priorities on their lines and
    // the rest by `--priority` or not at all
    let site = Site::start().await;
    let low = ["/low/0", "/low/1", "/low/2", "/low/3"];
    let paths = ["/low/0", "/low/1", "/low/2", "/low/3", "/urgent", "/high"];
    site_of(&site, &paths, &[]);
    let dir = temp_dir("priorities");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let seeds = dir.join("seeds.txt");
    let mut lines: Vec<String> = low.iter().map(|p| site.url(p)).collect();
    lines.push(json!({"url": site.url("/urgent"), "data": {"_priority": 9}}).to_string());
    lines.push(json!({"url": site.url("/high"), "data": {"_priority": 4}}).to_string());
    std::fs::write(&seeds, lines.join("\n")).unwrap();

    // WHEN they are crawled one fetch at a time
    let done = crawl(
        &[
            "crawl",
            "--seeds-file",
            seeds.to_str().unwrap(),
            "--allow-private-networks",
            "--per-host",
            "1",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN the site sees the priority-9 seed first, then the priority-4 one, then the others
    assert_eq!(done["counts"]["succeeded"], 6, "{done}");
    let order = fetch_order(&site, &paths);
    assert_eq!(order[..2], ["/urgent", "/high"], "{order:?}");
    // AND `tasks show` tells each task's priority
    let show = |path: &str| {
        let url = site.url(path);
        let dir = dir.clone();
        async move { crawl(&["tasks", "show", &url, "--json", "--data-dir", data], &dir).await }
    };
    assert_eq!(show("/urgent").await["priority"], 9);
    assert_eq!(show("/low/2").await["priority"], 0);

    // WHEN more seeds are given `--priority 6`, one line keeping its own, and one line gives a
    // priority out of range
    let later = ["/later/0", "/later/1", "/later/own"];
    for path in later {
        site.route(path, Route::html("<p>later</p>"));
    }
    let more = dir.join("more.txt");
    let bad = dir.join("bad.txt");
    std::fs::write(
        &more,
        [
            site.url("/later/0"),
            json!({"url": site.url("/later/own"), "data": {"_priority": 2}}).to_string(),
            site.url("/later/1"),
        ]
        .join("\n"),
    )
    .unwrap();
    std::fs::write(
        &bad,
        json!({"url": site.url("/bad"), "data": {"_priority": 12}}).to_string(),
    )
    .unwrap();
    let refused = trawl(
        &[
            "crawl",
            "--seeds-file",
            bad.to_str().unwrap(),
            "--allow-private-networks",
            "--data-dir",
            data,
        ],
        &dir,
    )
    .await;
    let added = crawl(
        &[
            "crawl",
            "--seeds-file",
            more.to_str().unwrap(),
            "--priority",
            "6",
            "--allow-private-networks",
            "--per-host",
            "1",
            "--data-dir",
            data,
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN the bad line is refused, naming its line and the range, and nothing of it is fetched
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("line 1") && stderr.contains("_priority") && stderr.contains("0 to 9"),
        "{stderr}"
    );
    assert_eq!(site.hits("/bad"), 0);
    // AND the others are fetched, the two without a priority of their own at 6 before the one
    // whose line says 2
    assert_eq!(added["counts"]["succeeded"], 9, "{added}");
    let order = fetch_order(&site, &later);
    assert_eq!(
        order.last().map(String::as_str),
        Some("/later/own"),
        "{order:?}"
    );
    assert_eq!(show("/later/1").await["priority"], 6);
    assert_eq!(show("/later/own").await["priority"], 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_route_gives_detail_pages_priority_over_the_listings_found_beside_them() {
    // GIVEN a listing that links to two more listings first, then to two detail pages, and a
    // route giving detail pages priority 5
    let site = Site::start().await;
    let paths = ["/list/0", "/list/1", "/list/2", "/item/0", "/item/1"];
    site_of(&site, &paths, &["/list/1", "/list/2", "/item/0", "/item/1"]);
    let dir = temp_dir("priorities-route");
    let data = dir.join("data");
    let config = dir.join("config.json");
    let routes = json!({"scope": {"routes": [{"glob": "*/item/*", "priority": 5}]}});
    std::fs::write(&config, routes.to_string()).unwrap();

    // WHEN the listing is crawled one fetch at a time
    let home = site.url("/list/0");
    let done = crawl(
        &[
            "crawl",
            &home,
            "--config",
            config.to_str().unwrap(),
            "--allow-private-networks",
            "--per-host",
            "1",
            "--data-dir",
            data.to_str().unwrap(),
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN both detail pages are fetched before either listing found beside them
    assert_eq!(done["counts"]["succeeded"], 5, "{done}");
    let order = fetch_order(&site, &paths);
    let last_item = position(&order, "/item/0").max(position(&order, "/item/1"));
    let first_list = position(&order, "/list/1").min(position(&order, "/list/2"));
    assert!(last_item < first_list, "{order:?}");

    // AND a priority out of range in a route is refused with the configuration
    let bad = json!({"scope": {"routes": [{"glob": "*/item/*", "priority": 10}]}});
    std::fs::write(&config, bad.to_string()).unwrap();
    let refused = trawl(
        &[
            "crawl",
            &site.url("/item/0"),
            "--config",
            config.to_str().unwrap(),
            "--crawl-id",
            "other",
            "--allow-private-networks",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &dir,
    )
    .await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("out of range"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn of_two_hosts_the_one_with_higher_priority_work_gets_its_turn_first() {
    // GIVEN two hosts' seeds, the first host's without a priority and listed first, the second's
    // at priority 3
    let (first, second) = (Site::start().await, Site::start().await);
    let paths = ["/0", "/1", "/2"];
    site_of(&first, &paths, &[]);
    site_of(&second, &paths, &[]);
    let dir = temp_dir("priorities-hosts");
    let data = dir.join("data");
    let seeds = dir.join("seeds.txt");
    let mut lines: Vec<String> = paths.iter().map(|p| first.url(p)).collect();
    lines.extend(
        paths
            .iter()
            .map(|p| json!({"url": second.url(p), "data": {"_priority": 3}}).to_string()),
    );
    std::fs::write(&seeds, lines.join("\n")).unwrap();

    // WHEN they are crawled one page at a time
    let done = crawl(
        &[
            "crawl",
            "--seeds-file",
            seeds.to_str().unwrap(),
            "--allow-private-networks",
            "--concurrency",
            "1",
            "--crawl-id",
            "two-hosts",
            "--data-dir",
            data.to_str().unwrap(),
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN the second host's pages are all fetched before the first host's
    assert_eq!(done["counts"]["succeeded"], 6, "{done}");
    let last_of_second = paths
        .iter()
        .filter_map(|p| Some(second.received(p).first()?.at))
        .max()
        .unwrap();
    let first_of_first = paths
        .iter()
        .filter_map(|p| Some(first.received(p).first()?.at))
        .min()
        .unwrap();
    assert!(last_of_second < first_of_first);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_moved_hosts_pending_urls_keep_their_priority_in_the_other_crawl() {
    // GIVEN a crawl stopped after one fetch, two of its host's URLs pending, one at priority 8,
    // and another crawl
    let (site, elsewhere) = (Site::start().await, Site::start().await);
    let paths = ["/first", "/kept", "/plain"];
    site_of(&site, &paths, &[]);
    site_of(&elsewhere, &["/"], &[]);
    let dir = temp_dir("priorities-move");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let seeds = dir.join("seeds.txt");
    let lines = [
        json!({"url": site.url("/first"), "data": {"_priority": 9}}).to_string(),
        json!({"url": site.url("/kept"), "data": {"_priority": 8}}).to_string(),
        site.url("/plain"),
    ];
    std::fs::write(&seeds, lines.join("\n")).unwrap();
    let base = ["--data-dir", data, "--json"];
    let run = |args: Vec<&str>| {
        let dir = dir.clone();
        let args: Vec<String> = args.iter().chain(&base).map(|a| (*a).to_owned()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crawl(&args, &dir).await
        }
    };
    let seeds = seeds.to_str().unwrap();
    run(vec![
        "crawl",
        "--seeds-file",
        seeds,
        "--crawl-id",
        "one",
        "--max-fetches",
        "1",
        "--allow-private-networks",
    ])
    .await;
    let home = elsewhere.url("/");
    run(vec![
        "crawl",
        &home,
        "--crawl-id",
        "two",
        "--allow-private-networks",
    ])
    .await;
    assert_eq!(site.hits("/first"), 1);
    assert_eq!(site.hits("/kept"), 0);

    // WHEN the host is moved to the other crawl
    let host = site.addr().to_string();
    run(vec![
        "hosts",
        "move",
        &host,
        "--to",
        "two",
        "--crawl-id",
        "one",
    ])
    .await;

    // THEN its pending URLs are there with their priorities
    let kept = site.url("/kept");
    let plain = site.url("/plain");
    let show = run(vec!["tasks", "show", &kept, "--crawl-id", "two"]).await;
    assert_eq!(
        (show["status"].as_str(), show["priority"].as_u64()),
        (Some("pending"), Some(8))
    );
    let show = run(vec!["tasks", "show", &plain, "--crawl-id", "two"]).await;
    assert_eq!(show["priority"], 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn through_the_functions_a_hosts_seeds_are_fetched_highest_priority_first() {
    // GIVEN a deployed stack on moto, the four handlers, and one host's seeds: four without a
    // priority listed first, one whose line gives 9, one a route gives 5, and one whose line
    // gives a priority out of range
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = Site::start().await;
    let paths = ["/low/0", "/low/1", "/low/2", "/low/3", "/urgent", "/item/0"];
    site_of(&site, &paths, &[]);
    let functions = functions(&deployed);
    let crawl_id = unique("prio");
    let mut urls: Vec<String> = paths[..4].iter().map(|p| site.url(p)).collect();
    urls.push(json!({"url": site.url("/urgent"), "data": {"_priority": 9}}).to_string());
    urls.push(site.url("/item/0"));
    urls.push(json!({"url": site.url("/bad"), "data": {"_priority": -1}}).to_string());
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0, "per_host": 1},
            "fetch": {"allow_private_networks": true},
            "scope": {"routes": [{"glob": "*/item/*", "priority": 5}]},
        },
        "source": {"urls": urls},
    });

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

    // THEN the bad line is rejected with its reason, the others seeded
    assert_eq!((seeded.accepted, seeded.rejected), (6, 1), "{seeded:?}");
    assert!(
        seeded.rejections[0]
            .reason
            .contains("_priority: priority -1 is out of range"),
        "{seeded:?}"
    );
    // AND the site sees the priority-9 seed first, then the route's priority-5 one
    assert_eq!(summary["statuses"]["succeeded"], 6, "{summary}");
    let order = fetch_order(&site, &paths);
    assert_eq!(order[..2], ["/urgent", "/item/0"], "{order:?}");
    assert_eq!(site.hits("/bad"), 0);
}

/// The place (1 = first) at which the turn of `host` comes out of `queue`, receiving batches of
/// 10 until it does (the others received before it deleted), and its receipt.
async fn rank_of(queue: &SqsQueue, host: &str) -> (usize, String) {
    let mut rank = 0;
    for _ in 0..20 {
        let batch = queue.receive(10, 0).await.unwrap();
        for received in &batch {
            rank += 1;
            if WorkMessage::parse(&received.body).unwrap().host == host {
                return (rank, received.receipt.clone());
            }
        }
        let receipts: Vec<String> = batch.iter().map(|r| r.receipt.clone()).collect();
        queue.ack(&receipts).await.unwrap();
    }
    panic!("the turn of {host} never came out");
}

#[tokio::test]
async fn on_sqs_the_turn_of_a_host_with_priority_work_comes_before_a_backlog_and_goes_back_where_it_came_from()
 {
    // GIVEN a stack on moto: its crawl queue with its priority queue (from priority 3 up), and
    // the same crawl queue alone, as before the priority queue
    let endpoint = &moto::shared().endpoint;
    let clients = crate::support::clients(endpoint).await;
    let stack = create_stack(&clients, &unique("prio-q")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let p = |n| Priority::new(n).unwrap();
    let queue = SqsQueue::new(clients.sqs.clone(), &stack.queue_url, calls.clone())
        .with_priority_queue(&stack.priority_queue_url, p(3));
    let alone = SqsQueue::new(clients.sqs.clone(), &stack.queue_url, calls.clone());
    let crawl = CrawlId::parse("c1").unwrap();
    let turn = |host: String, priority| {
        WorkMessage::new(crawl.clone(), host, 1, 0).with_priority(priority)
    };
    // 30 turns of hosts without priority work, one of priority 2 (below the threshold), then
    // one of priority 7
    let mut backlog: Vec<WorkMessage> = (0..30).map(|i| turn(format!("h{i}"), p(0))).collect();
    backlog.push(turn("low".into(), p(2)));

    // WHEN the backlog and then the urgent turn are sent through each
    let urgent = turn("urgent".into(), p(7));
    for q in [&queue, &alone] {
        let mut all = backlog.clone();
        all.push(urgent.clone());
        assert_eq!(q.send(&all).await.unwrap().sent, 32);
    }
    let depth = queue.depth().await.unwrap();
    let (with_priority_queue, receipt) = rank_of(&queue, "urgent").await;

    // THEN through the priority queue the urgent turn is received first, its receipt marked as
    // the priority queue's
    println!("rank of the urgent turn: {with_priority_queue} with the priority queue");
    assert_eq!(with_priority_queue, 1);
    assert!(receipt.starts_with(trawl_aws::sqs::PRIORITY_RECEIPT));
    assert_eq!(depth, Some(64), "both queues counted");

    // AND a hand-back returns it to the priority queue after its delay (0 s: at once), where
    // the next receive finds it first again, its priority in its body (for a resend)
    queue.retry_later(&receipt, 0).await.unwrap();
    let after = queue.receive(1, 0).await.unwrap();
    let body = WorkMessage::parse(&after[0].body).unwrap();
    assert_eq!((body.host.as_str(), body.priority), ("urgent", p(7)));
    // AND a receipt handed over by an event source mapping of the priority queue is recognised
    // by the queue's ARN (the regular queue's is left as it is), and its ack deletes the
    // message there: the priority queue is then empty, the priority-2 turn never was in it
    let bare = after[0]
        .receipt
        .strip_prefix(trawl_aws::sqs::PRIORITY_RECEIPT)
        .unwrap()
        .to_owned();
    let arn = trawl_faults::lambda::queue_arn(&stack.priority_queue_url);
    let from_mapping = queue.receipt_from(Some(&arn), bare.clone());
    assert_eq!(from_mapping, after[0].receipt);
    let regular_arn = trawl_faults::lambda::queue_arn(&stack.queue_url);
    assert_eq!(queue.receipt_from(Some(&regular_arn), bare.clone()), bare);
    queue.ack(&[from_mapping]).await.unwrap();
    let priority_only = SqsQueue::new(clients.sqs.clone(), &stack.priority_queue_url, calls);
    assert_eq!(priority_only.depth().await.unwrap(), Some(0));

    // AND through the crawl queue alone (the regular queue now holds the second copies: the
    // first's were all received above or are in flight) it waits behind the backlog
    let (without, _) = rank_of(&alone, "urgent").await;
    println!("rank of the urgent turn: {without} without it (SQS order, moto)");
    assert!(without > 10, "{without}");
}

#[tokio::test]
async fn through_the_functions_a_host_with_priority_work_gets_its_turn_before_a_backlog_of_other_hosts()
 {
    // GIVEN a deployed stack on moto with its priority crawl queue, the four handlers, and
    // twelve hosts' seeds without a priority listed before one host's at priority 5
    let deployed = deploy(&moto::shared().endpoint).await;
    let functions = functions(&deployed);
    let mut sites = Vec::new();
    for _ in 0..13 {
        let site = Site::start().await;
        site_of(&site, &["/"], &[]);
        sites.push(site);
    }
    let crawl_id = unique("prio-hosts");
    let mut urls: Vec<String> = sites[..12].iter().map(|s| s.url("/")).collect();
    urls.push(json!({"url": sites[12].url("/"), "data": {"_priority": 5}}).to_string());
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0},
            "fetch": {"allow_private_networks": true},
        },
        "source": {"urls": urls},
    });

    // WHEN the seeder is handed them and the functions run the crawl until it is delivered,
    // each round a batch of each crawl queue's mapping (up to 10 turns)
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN every host is crawled, and the priority host's page is the first fetched: its turn
    // went to the priority queue, not behind the twelve turns sent before it (through one
    // queue, ten of them would come first)
    assert_eq!(summary["statuses"]["succeeded"], 13, "{summary}");
    let mut fetched: Vec<(std::time::Instant, usize)> = sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.received("/").first().unwrap().at, i))
        .collect();
    fetched.sort();
    let rank = fetched.iter().position(|&(_, i)| i == 12).unwrap() + 1;
    println!("the priority host's page was fetched {rank} of 13");
    assert_eq!(rank, 1, "{fetched:?}");
}

#[tokio::test]
async fn the_aws_backends_crawl_takes_the_priority_queues_turns_first() {
    // GIVEN a deployed stack on moto (found by its outputs, the priority crawl queue among them)
    // and two hosts' seeds, the first host's without a priority and listed first, the second's
    // at priority 3
    let deployed = deploy(&moto::shared().endpoint).await;
    let (first, second) = (Site::start().await, Site::start().await);
    let paths = ["/0", "/1", "/2"];
    site_of(&first, &paths, &[]);
    site_of(&second, &paths, &[]);
    let dir = temp_dir("priorities-aws");
    let seeds = dir.join("seeds.txt");
    let mut lines: Vec<String> = paths.iter().map(|p| first.url(p)).collect();
    lines.extend(
        paths
            .iter()
            .map(|p| json!({"url": second.url(p), "data": {"_priority": 3}}).to_string()),
    );
    std::fs::write(&seeds, lines.join("\n")).unwrap();

    // WHEN `trawl --backend aws crawl` crawls them one host at a time
    let crawl_id = unique("prio-aws");
    let output = deployed
        .run(
            &[
                "crawl",
                "--seeds-file",
                seeds.to_str().unwrap(),
                "--allow-private-networks",
                "--concurrency",
                "1",
                "--crawl-id",
                &crawl_id,
                "--json",
            ],
            &[("TRAWL_STACK", deployed.name.as_str())],
        )
        .await;

    // THEN the second host's pages are all fetched before the first host's: its turn was sent to
    // the priority queue, received first, and deleted from there (the crawl ends)
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json_of(&output)["counts"]["succeeded"], 6);
    let last_of_second = paths
        .iter()
        .filter_map(|p| Some(second.received(p).first()?.at))
        .max()
        .unwrap();
    let first_of_first = paths
        .iter()
        .filter_map(|p| Some(first.received(p).first()?.at))
        .min()
        .unwrap();
    assert!(last_of_second < first_of_first);
    let _ = std::fs::remove_dir_all(dir);
}
