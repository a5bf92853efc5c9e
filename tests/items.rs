//! Items a user gets through the CLI: a site of paginated listings (10 items each) and detail
//! pages, extracted while crawled, delivered as `items.jsonl.gz` with each listing item merged
//! with its detail page's fields, a changed detail page in the next generation's items delta,
//! invalid items reported; and the extractors' dry run.

use crate::cli::{json_of, temp_dir, trawl};
use crate::site::{Route, Site};
use flate2::read::MultiGzDecoder;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Output;

const LISTINGS: usize = 3;
const PER_PAGE: usize = 10;
/// A listing item without a title: invalid (its title is required).
const UNTITLED: usize = 7;
/// A detail page whose price is no number: its item is invalid.
const UNPRICED: usize = 12;
/// The detail page changed before the second generation.
const CHANGED: usize = 5;

/// The detail page removed before the third generation (gone at its first 404).
const REMOVED: usize = 9;

const CONFIG: &str = r#"{
  "items": {"csv": true},
  "recrawl": {"missing_after": 1},
  "extract": [
    {"name": "listing", "match": "/list/",
     "base": {"css": "ul.items > li"},
     "fields": {
       "title": {"css": "a.title", "processors": ["trim", "required"]},
       "url": {"xpath": ".//a/@href", "processors": ["absolute_url"]},
       "rank": {"xpath": "@data-rank", "processors": ["number"]}
     },
     "detail": {"url_field": "url", "extractor": "article"}},
    {"name": "article", "glob": "*/item/*.html",
     "fields": {
       "price": {"xpath": "//span[@class='price']/text()", "processors": ["number", "required"]},
       "date": {"css": "time", "processors": [{"date": "%d.%m.%Y"}]},
       "tags": {"css": "li.tag", "processors": ["trim", {"join": ", "}]},
       "sku": {"css": "div.sku", "regex": "SKU: (\\w+)"}
     }}
  ]
}"#;

fn listing_page(page: usize) -> String {
    let items: String = (0..PER_PAGE)
        .map(|i| {
            let n = page * PER_PAGE + i;
            let title = if n == UNTITLED {
                String::new()
            } else {
                format!(r#"<a class="title" href="/item/{n}.html">  Item {n} </a>"#)
            };
            format!(r#"<li data-rank="{n}">{title}<a href="/item/{n}.html">more</a></li>"#)
        })
        .collect();
    let next = if page + 1 < LISTINGS {
        format!(r#"<a class="next" href="/list/{}.html">next</a>"#, page + 1)
    } else {
        String::new()
    };
    format!("<html><body><ul class=items>{items}</ul>{next}</body></html>")
}

fn detail_page(n: usize, price: &str) -> String {
    format!(
        r#"<html><body><h1>Item {n}</h1><span class="price">{price}</span>
           <time>0{}.03.2026</time><ul><li class="tag"> new </li><li class="tag">item{n}</li></ul>
           <div class="sku">SKU: S{n}X</div></body></html>"#,
        1 + n % 9
    )
}

fn price(n: usize) -> String {
    if n == UNPRICED {
        "call us".to_owned()
    } else {
        format!("{},{:03}.50 €", n, n * 7 % 1000)
    }
}

async fn site() -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for page in 0..LISTINGS {
        site.route(
            &format!("/list/{page}.html"),
            Route::html(listing_page(page)),
        );
    }
    for n in 0..LISTINGS * PER_PAGE {
        site.route(
            &format!("/item/{n}.html"),
            Route::html(detail_page(n, &price(n))),
        );
    }
    site
}

/// The item of listing entry `n` as the delivery must hold it (its fields).
fn expected_fields(site: &Site, n: usize, price_text: &str) -> Value {
    let price: Value = if n == UNPRICED {
        Value::Null
    } else {
        let number: f64 = price_text
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == '.')
            .collect::<String>()
            .parse()
            .unwrap();
        json!(number)
    };
    json!({
        "title": if n == UNTITLED { Value::Null } else { json!(format!("Item {n}")) },
        "url": site.url(&format!("/item/{n}.html")),
        "rank": n,
        "price": price,
        "date": format!("2026-03-0{}", 1 + n % 9),
        "tags": format!("new, item{n}"),
        "sku": format!("S{n}X"),
    })
}

/// `output`, once it is known to be a success (else its stderr is the failure).
fn succeeded(output: Output) -> Output {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `trawl crawl START` with the configuration file `config` and a daily recrawl, into `data`:
/// its JSON summary.
async fn crawl_daily(start: &str, config: &Path, data: &str, dir: &Path) -> Value {
    let args = [
        "crawl",
        start,
        "--allow-private-networks",
        "--recrawl-every",
        "1d",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data,
        "--json",
    ];
    json_of(&succeeded(trawl(&args, dir).await))
}

fn gunzip_lines(path: &Path) -> Vec<Value> {
    let mut text = String::new();
    MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn delivery_of(run: &Value) -> &Path {
    Path::new(
        run["delivery"]
            .as_str()
            .unwrap_or_else(|| panic!("no delivery: {run}")),
    )
}

fn summary_of(delivery: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(delivery.join("summary.json")).unwrap()).unwrap()
}

/// The new price of the changed detail page.
const NEW_PRICE: &str = "99.00 €";

fn change_detail_page(site: &Site) {
    site.route(
        &format!("/item/{CHANGED}.html"),
        Route::html(detail_page(CHANGED, NEW_PRICE)),
    );
}

/// The first delivery (in the directory `delivery`): exactly the 30 listing items, each merged
/// with its detail page, the invalid ones counted with examples.
fn check_first_delivery(site: &Site, delivery: &Path) {
    // THEN the delivery's items are exactly the 30 listing items, each merged with its detail
    // page, keyed by the detail page's URL, with its pages, task ids and fetch times
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    let by_key: BTreeMap<String, &Value> = items
        .iter()
        .map(|i| (i["key"].as_str().unwrap().to_owned(), i))
        .collect();
    assert_eq!(items.len(), LISTINGS * PER_PAGE);
    assert_eq!(by_key.len(), items.len(), "one item per key");
    for n in 0..LISTINGS * PER_PAGE {
        let key = site.url(&format!("/item/{n}.html"));
        let item = by_key[&key];
        assert_eq!(
            item["fields"],
            expected_fields(site, n, &price(n)),
            "{item}"
        );
        assert_eq!(item["extractor"], "listing");
        assert_eq!(
            item["page_url"],
            site.url(&format!("/list/{}.html", n / PER_PAGE))
        );
        assert_eq!(item["detail"]["url"], key);
        assert_eq!(item["task_id"].as_str().unwrap().len(), 32);
        assert!(item["fetched_at"].as_str().unwrap().starts_with("20"));
        assert_eq!(item["valid"], n != UNTITLED && n != UNPRICED, "{item}");
    }

    // AND items.csv.gz holds the same items, a column per field (the listing's, then those its
    // detail pages add) besides the page, task and fetch time
    let mut csv_text = String::new();
    MultiGzDecoder::new(std::fs::File::open(delivery.join("items.csv.gz")).unwrap())
        .read_to_string(&mut csv_text)
        .unwrap();
    assert!(csv_text.ends_with("\r\n"), "RFC 4180 line ends");
    let mut csv = csv::Reader::from_reader(csv_text.as_bytes());
    let header: Vec<String> = csv.headers().unwrap().iter().map(str::to_owned).collect();
    assert_eq!(
        header,
        [
            "key",
            "extractor",
            "page_url",
            "task_id",
            "fetched_at",
            "valid",
            "rank",
            "title",
            "url",
            "date",
            "price",
            "sku",
            "tags",
            "errors"
        ]
    );
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), LISTINGS * PER_PAGE);
    for row in &rows {
        let item = by_key[&row[0]];
        assert_eq!(&row[2], item["page_url"].as_str().unwrap());
        assert_eq!(&row[3], item["task_id"].as_str().unwrap());
        assert_eq!(&row[4], item["fetched_at"].as_str().unwrap());
        // (a comma inside a value, `new, item5`, comes back whole)
        assert_eq!(&row[12], item["fields"]["tags"].as_str().unwrap());
        assert_eq!(&row[7], item["fields"]["title"].as_str().unwrap_or(""));
    }

    // AND the invalid items are counted per extractor with examples, never dropped
    let summary = summary_of(delivery);
    let counted = &summary["items"];
    assert_eq!(counted["items"], LISTINGS * PER_PAGE, "{counted}");
    assert_eq!(counted["invalid"], 2);
    let listing = &counted["by_extractor"]["listing"];
    assert_eq!(listing["invalid"], 2);
    // (in the order the manifest lists their pages, which differs between backends)
    let mut examples: Vec<&str> = listing["invalid_examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["errors"][0]["field"].as_str().unwrap())
        .collect();
    examples.sort_unstable();
    assert_eq!(examples, ["price", "title"]);
    assert_eq!(counted["delta"]["new"], LISTINGS * PER_PAGE);
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(delivery.join("index.json")).unwrap())
            .unwrap();
    assert!(
        index["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "items.jsonl.gz" && f["records"] == LISTINGS * PER_PAGE),
        "{index}"
    );
}

/// The second delivery, after `change_detail_page`: the changed item alone in the items delta.
fn check_second_delivery(site: &Site, delivery: &Path) {
    // THEN its items delta holds exactly that item, changed, with its new price; every other
    // item is unchanged (unchanged pages kept their items)
    let delta = gunzip_lines(&delivery.join("items-delta.jsonl.gz"));
    assert_eq!(delta.len(), 1, "{delta:?}");
    assert_eq!(delta[0]["change"], "changed");
    assert_eq!(delta[0]["key"], site.url(&format!("/item/{CHANGED}.html")));
    assert_eq!(
        delta[0]["item"]["fields"],
        expected_fields(site, CHANGED, NEW_PRICE)
    );
    let counted = &summary_of(delivery)["items"];
    assert_eq!(
        (
            &counted["delta"]["changed"],
            &counted["delta"]["unchanged"],
            &counted["delta"]["new"],
            &counted["delta"]["gone"]
        ),
        (
            &json!(1),
            &json!(LISTINGS * PER_PAGE - 1),
            &json!(0),
            &json!(0)
        ),
        "{counted}"
    );
    assert_eq!(
        gunzip_lines(&delivery.join("items.jsonl.gz")).len(),
        LISTINGS * PER_PAGE
    );
}

/// Removes detail page `REMOVED` (404), still listed.
fn remove_detail_page(site: &Site) {
    site.route(&format!("/item/{REMOVED}.html"), Route::status(404));
}

/// The third delivery, after `remove_detail_page`: the item of the gone detail page is `gone`
/// in the items delta (not changed, not invalid), though its listing still links to it.
fn check_third_delivery(site: &Site, delivery: &Path) {
    let key = site.url(&format!("/item/{REMOVED}.html"));
    let delta = gunzip_lines(&delivery.join("items-delta.jsonl.gz"));
    assert_eq!(
        delta,
        [json!({"change": "gone", "key": key, "reason": "detail page gone"})]
    );
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    assert_eq!(items.len(), LISTINGS * PER_PAGE - 1);
    assert!(items.iter().all(|i| i["key"] != key.as_str()));
    let counted = &summary_of(delivery)["items"];
    assert_eq!(counted["detail_pages_gone"], 1, "{counted}");
    assert_eq!(counted["invalid"], 2, "{counted}");
    assert_eq!(
        (&counted["delta"]["gone"], &counted["delta"]["changed"]),
        (&json!(1), &json!(0)),
        "{counted}"
    );
}

/// `CONFIG` with a field added to the article extractor: each detail page's heading.
fn config_with_heading() -> String {
    let mut config: Value = serde_json::from_str(CONFIG).unwrap();
    config["extract"][1]["fields"]["heading"] = json!({"css": "h1"});
    config.to_string()
}

/// A delivery made after the extractors changed, of pages fetched unchanged: it says its items
/// came from older extractors, and they lack the new field.
fn check_older_items_delivery(delivery: &Path) {
    let counted = &summary_of(delivery)["items"];
    assert_eq!(counted["from_current_extractors"], false, "{counted}");
    assert!(counted["pages_older"].as_u64().unwrap() > 0, "{counted}");
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    assert!(items.iter().all(|i| i["fields"].get("heading").is_none()));
}

/// The delivery after `reextract`: every item carries the new field, from the current
/// extractors, and the items delta says each changed (its fields differ).
fn check_reextracted_delivery(site: &Site, delivery: &Path) {
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    assert_eq!(items.len(), LISTINGS * PER_PAGE - 1);
    for item in &items {
        let key = item["key"].as_str().unwrap();
        let n: usize = key
            .trim_start_matches(&site.url("/item/"))
            .trim_end_matches(".html")
            .parse()
            .unwrap();
        assert_eq!(item["fields"]["heading"], format!("Item {n}"), "{item}");
    }
    let counted = &summary_of(delivery)["items"];
    assert_eq!(counted["from_current_extractors"], true, "{counted}");
    assert_eq!(counted["pages_older"], 0, "{counted}");
    assert_eq!(
        counted["delta"]["changed"],
        LISTINGS * PER_PAGE - 1,
        "{counted}"
    );
}

#[tokio::test]
async fn listings_and_detail_pages_are_delivered_as_merged_items_with_their_delta() {
    // GIVEN 3 paginated listings of 10 items, each linking to its detail page, one listing item
    // without its required title and one detail page whose price is no number
    let site = site().await;
    let dir = temp_dir("items");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, CONFIG).unwrap();

    // WHEN the extractors' dry run looks at the first listing
    let dry = trawl(
        &[
            "extract",
            "--config",
            config.to_str().unwrap(),
            &site.url("/list/0.html"),
            "--allow-private-networks",
            "--json",
        ],
        &dir,
    )
    .await;

    // THEN it prints its 10 items and the field that failed, and writes nothing
    let dry = json_of(&dry);
    assert_eq!(dry["extractor"], "listing", "{dry}");
    assert_eq!(dry["items"].as_array().unwrap().len(), PER_PAGE);
    assert_eq!(dry["items"][3]["fields"]["title"], "Item 3");
    assert_eq!(dry["invalid"], 1);
    assert_eq!(
        (&dry["failed"][0]["item"], &dry["failed"][0]["field"]),
        (&json!(UNTITLED), &json!("title"))
    );
    assert!(!Path::new(data).exists(), "the dry run wrote nothing");

    // WHEN the site is crawled with a daily recrawl
    let first = crawl_daily(&site.url("/list/0.html"), &config, data, &dir).await;
    assert_eq!(first["counts"]["succeeded"], LISTINGS + LISTINGS * PER_PAGE);

    check_first_delivery(&site, delivery_of(&first));

    // WHEN the dry run reads the first listing as the crawl stored it, by its URL (with the
    // crawl's own extractors) and by its task id (with the file's)
    let listing_url = site.url("/list/0.html");
    let task_id = trawl_domain::canonical::CanonicalUrl::parse(&listing_url)
        .unwrap()
        .task_id();
    for extra in [vec![], vec!["--config", config.to_str().unwrap()]] {
        let task = if extra.is_empty() {
            listing_url.clone()
        } else {
            task_id.as_str().to_owned()
        };
        let mut args = vec!["extract", "--task", &task, "--data-dir", data, "--json"];
        args.extend(extra);
        let stored = json_of(&succeeded(trawl(&args, &dir).await));

        // THEN it prints the same items and failed field, without fetching the page again
        assert_eq!(stored["answer"], "stored HTTP 200", "{stored}");
        assert_eq!(stored["items"], dry["items"]);
        assert_eq!(stored["failed"], dry["failed"]);
    }
    assert_eq!(
        site.hits("/list/0.html"),
        2,
        "the dry run and the crawl fetched it, no more"
    );

    // GIVEN one detail page changed
    change_detail_page(&site);

    // WHEN the next generation runs
    let recrawl = succeeded(trawl(&["recrawl", "--json", "--data-dir", data], &dir).await);
    let second = json_of(&recrawl);

    check_second_delivery(&site, delivery_of(&second));

    // GIVEN a detail page removed, its listing unchanged
    remove_detail_page(&site);

    // WHEN the next generation runs (one 404 makes a page gone in this crawl)
    let third = json_of(&succeeded(
        trawl(&["recrawl", "--json", "--data-dir", data], &dir).await,
    ));

    // THEN its item is gone in the items delta
    check_third_delivery(&site, delivery_of(&third));

    // GIVEN a field added to the article extractor (`config set` takes the whole configuration)
    let shown = succeeded(trawl(&["config", "show", "--data-dir", data], &dir).await);
    let mut config: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let wanted: Value = serde_json::from_str(&config_with_heading()).unwrap();
    config["extract"] = wanted["extract"].clone();
    let with_heading = dir.join("config-heading.json");
    std::fs::write(&with_heading, config.to_string()).unwrap();
    let set = ["config", "set", "--file", with_heading.to_str().unwrap()];
    succeeded(trawl(&[&set[..], &["--data-dir", data]].concat(), &dir).await);

    // WHEN the next generation fetches the pages again, unchanged
    let recrawl = succeeded(trawl(&["recrawl", "--data-dir", data], &dir).await);

    // THEN its delivery, and the command, say the items came from older extractors
    let said = String::from_utf8_lossy(&recrawl.stdout);
    assert!(
        said.contains("came from older extractors") && said.contains("trawl reextract"),
        "{said}"
    );
    let newest = |run: &str| {
        let line = run
            .lines()
            .find(|l| l.starts_with("delivered to "))
            .unwrap();
        Path::new(line.trim_start_matches("delivered to ")).to_path_buf()
    };
    check_older_items_delivery(&newest(&said));

    // WHEN the items are made anew from the stored pages
    let hits = site.total_hits();
    let reextract = json_of(&succeeded(
        trawl(&["reextract", "--json", "--data-dir", data], &dir).await,
    ));

    // THEN no page was requested, and the delivery's items carry the field
    assert_eq!(site.total_hits(), hits, "no request to the site");
    assert_eq!(reextract["pages"], 0, "{reextract}");
    assert_eq!(
        reextract["items_from_current_extractors"], true,
        "{reextract}"
    );
    check_reextracted_delivery(&site, delivery_of(&reextract));

    // AND the next generation, its pages fetched unchanged, keeps them (on segments, the
    // items written beside a segment's records outlive the deliveries' orphan clean-up)
    let again = json_of(&succeeded(
        trawl(&["recrawl", "--json", "--data-dir", data], &dir).await,
    ));
    assert_eq!(again["items_from_current_extractors"], true, "{again}");
    let kept = gunzip_lines(&delivery_of(&again).join("items.jsonl.gz"));
    assert!(kept.iter().all(|i| i["fields"]["heading"].is_string()));
    let _ = std::fs::remove_dir_all(dir);
}

/// Handler rounds until the delivery of `generation` exists (bounded in rounds and time).
pub(crate) async fn run_functions_until_delivered(
    deployed: &crate::operator::Deployed,
    functions: &crate::operator::Functions,
    crawl_id: &str,
    generation: u64,
) {
    let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
    let blobs =
        trawl_aws::s3::S3BlobStore::new(deployed.clients.s3.clone(), &deployed.stack.bucket, calls);
    let prefix = format!("{}deliveries/crawl={crawl_id}/", crate::operator::PREFIX);
    let marker = format!("/gen-{generation:06}/_SUCCESS");
    let started = std::time::Instant::now();
    for _ in 0..MOTO_ROUNDS {
        functions.round(deployed).await;
        let keys = trawl_core::blob::BlobStore::list(&blobs, &prefix)
            .await
            .unwrap();
        if keys.iter().any(|k| k.ends_with(&marker)) {
            return;
        }
        assert!(started.elapsed() < MOTO_TIME_LIMIT, "out of time");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("generation {generation} was not delivered in {MOTO_ROUNDS} rounds");
}

/// Bounds of the handlers' loop on moto.
const MOTO_ROUNDS: usize = 400;
const MOTO_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// `trawl deliveries get` of the crawl's newest complete delivery: its directory.
pub(crate) async fn download(
    deployed: &crate::operator::Deployed,
    env: &[(&str, &str)],
    crawl_id: &str,
    out: &Path,
) -> std::path::PathBuf {
    let fetched = succeeded(
        deployed
            .run(
                &[
                    "deliveries",
                    "get",
                    "--crawl-id",
                    crawl_id,
                    "--out",
                    out.to_str().unwrap(),
                    "--json",
                ],
                env,
            )
            .await,
    );
    std::path::PathBuf::from(json_of(&fetched)["directory"].as_str().unwrap())
}

#[tokio::test]
async fn the_lambda_handlers_on_moto_deliver_the_same_items_and_delta() {
    // GIVEN a deployed stack on moto, the same site, and the crawl submitted with extractors
    let deployed = crate::operator::deploy(&crate::support::moto::shared().endpoint).await;
    let site = site().await;
    let dir = temp_dir("items-moto");
    let config = dir.join("config.json");
    std::fs::write(&config, CONFIG).unwrap();
    let crawl_id = crate::support::unique("items");
    let env = [("TRAWL_STACK", deployed.name.as_str())];
    succeeded(
        deployed
            .run(
                &[
                    "submit",
                    &site.url("/list/0.html"),
                    "--crawl-id",
                    &crawl_id,
                    "--allow-private-networks",
                    "--recrawl-every",
                    "1d",
                    "--config",
                    config.to_str().unwrap(),
                    "--json",
                ],
                &env,
            )
            .await,
    );

    // WHEN the seeder, crawler, sweeper and deliverer handlers run it to its delivery
    let functions = crate::operator::functions(&deployed);
    run_functions_until_delivered(&deployed, &functions, &crawl_id, 0).await;

    // THEN the delivery holds the same merged items, invalid ones counted
    let first = download(&deployed, &env, &crawl_id, &dir.join("gen0")).await;
    check_first_delivery(&site, &first);

    // WHEN a detail page changes and the next generation is started and run by the handlers
    change_detail_page(&site);
    succeeded(
        deployed
            .run(
                &["recrawl", "--crawl-id", &crawl_id, "--detach", "--json"],
                &env,
            )
            .await,
    );
    run_functions_until_delivered(&deployed, &functions, &crawl_id, 1).await;

    // THEN its items delta holds that item alone
    let second = download(&deployed, &env, &crawl_id, &dir.join("gen1")).await;
    check_second_delivery(&site, &second);

    // WHEN a detail page is removed and the next generation is run by the handlers
    remove_detail_page(&site);
    succeeded(
        deployed
            .run(
                &["recrawl", "--crawl-id", &crawl_id, "--detach", "--json"],
                &env,
            )
            .await,
    );
    run_functions_until_delivered(&deployed, &functions, &crawl_id, 2).await;

    // THEN its item is gone in the items delta
    let third = download(&deployed, &env, &crawl_id, &dir.join("gen2")).await;
    check_third_delivery(&site, &third);

    // WHEN a field is added to the article extractor (the seeder's `config` operation), and
    // the seeder's `reextract` operation is invoked, stopping at once past its deadline, then
    // sent with its cursor to the seed queue, where each record stops past its deadline too
    // and sends itself on
    let config: Value = serde_json::from_str(&config_with_heading()).unwrap();
    let mut stored: Value = serde_json::to_value(
        trawl_core::store::CrawlStore::get_crawl(
            &functions.seeder.seeder.store,
            &trawl_domain::canonical::CrawlId::parse(&crawl_id).unwrap(),
        )
        .await
        .unwrap()
        .unwrap()
        .config,
    )
    .unwrap();
    stored["extract"] = config["extract"].clone();
    let set = json!({"crawl_id": crawl_id, "operation": {"config": {"config": stored}}});
    functions
        .seeder
        .dispatch(set, None, trawl_domain::task::now_ms())
        .await
        .unwrap();
    let hits = site.total_hits();
    let op = json!({"crawl_id": crawl_id, "operation": {"reextract": {}}});
    let past = || Some(tokio::time::Instant::now());
    let now = trawl_domain::task::now_ms;
    let answer = functions.seeder.dispatch(op, past(), now()).await.unwrap();
    let answer = serde_json::to_value(answer).unwrap();
    let cursor = answer["reextracted"]["cursor"].clone();
    assert!(!cursor.is_null(), "unfinished at its deadline: {answer}");
    let mut op = json!({"crawl_id": crawl_id, "operation": {"reextract": {}}});
    op["operation"]["reextract"]["cursor"] = cursor;
    let (sqs, seeds) = (&deployed.clients.sqs, &deployed.stack.seed_queue_url);
    sqs.send_message()
        .queue_url(seeds)
        .message_body(op.to_string())
        .send()
        .await
        .unwrap();
    let mut records = 0;
    while let Some(event) = trawl_faults::lambda::receive_batch(sqs, seeds)
        .await
        .unwrap()
    {
        records += event.records.len();
        assert!(records < 20, "bounded: {records} records");
        let payload = serde_json::to_value(&event).unwrap();
        let response = functions.seeder.dispatch(payload, past(), now()).await;
        let response = serde_json::to_value(response.unwrap()).unwrap();
        assert_eq!(response["batchItemFailures"], json!([]), "{response}");
        crate::operator::acknowledge(sqs, seeds, &event, &response).await;
    }
    assert!(
        records > 1,
        "the queue's records went on by themselves: {records}"
    );
    let crawl = trawl_core::store::CrawlStore::get_crawl(
        &functions.seeder.seeder.store,
        &trawl_domain::canonical::CrawlId::parse(&crawl_id).unwrap(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (crawl.state, crawl.generation),
        (trawl_domain::crawl::CrawlState::Running, 3),
        "reopened once re-extracted"
    );
    run_functions_until_delivered(&deployed, &functions, &crawl_id, 3).await;

    // THEN no page was requested, and the delivery's items carry the field
    assert_eq!(site.total_hits(), hits, "no request to the site");
    let fourth = download(&deployed, &env, &crawl_id, &dir.join("gen3")).await;
    check_reextracted_delivery(&site, &fourth);
    let _ = std::fs::remove_dir_all(dir);
}

/// A listing of `per_page` titled items linking to the listings `links`.
fn small_listing(page: usize, per_page: usize, links: &[usize]) -> String {
    let items: String = (0..per_page)
        .map(|i| format!(r#"<li><a class="title" href="/x/{page}-{i}">T{page}-{i}</a></li>"#))
        .collect();
    let links: String = links
        .iter()
        .map(|l| format!(r#"<a href="/list/{l}.html">{l}</a>"#))
        .collect();
    format!("<html><body><ul class=items>{items}</ul>{links}</body></html>")
}

/// The `attr=items` objects under the data directory `dir` whose task is `task_id`.
fn items_objects(dir: &Path, task_id: &str) -> usize {
    let mut found = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let shown = path.to_string_lossy();
            if path.is_dir() {
                pending.push(path);
            } else if shown.contains("/attr=items/") && shown.contains(task_id) {
                found += 1;
            }
        }
    }
    found
}

#[tokio::test]
async fn a_page_that_stops_having_items_leaves_none_behind() {
    stops_having_items("objects").await;
}

#[tokio::test]
async fn a_page_that_stops_having_items_leaves_none_behind_in_segments() {
    stops_having_items("segments").await;
}

/// On the object layout, the items objects are checked too; in segments, items travel in
/// their page's records, so the new record's are the page's.
async fn stops_having_items(layout: &str) {
    let objects = layout == "objects";
    // GIVEN four listings of 5 items, crawled with their items delivered (PDFs stored too)
    const ITEMS: usize = 5;
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    site.route(
        "/list/0.html",
        Route::html(small_listing(0, ITEMS, &[1, 2, 3])),
    );
    for page in 1..4 {
        site.route(
            &format!("/list/{page}.html"),
            Route::html(small_listing(page, ITEMS, &[])),
        );
    }
    let dir = temp_dir(&format!("items-orphans-{layout}"));
    let data = dir.join("data");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"fetch": {"store_content_types": ["application/pdf"]},
            "extract": [{"name": "listing", "match": "/list/", "base": {"css": "ul.items > li"},
                         "fields": {"title": {"css": "a.title", "processors": ["required"]}}}]}"#,
    )
    .unwrap();
    let crawl = succeeded(
        trawl(
            &[
                "crawl",
                &site.url("/list/0.html"),
                "--allow-private-networks",
                "--recrawl-every",
                "1d",
                "--layout",
                layout,
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--json",
            ],
            &dir,
        )
        .await,
    );
    let first = delivery_of(&json_of(&crawl)).to_path_buf();
    assert_eq!(gunzip_lines(&first.join("items.jsonl.gz")).len(), 4 * ITEMS);
    let task = |page: usize| {
        trawl_domain::canonical::CanonicalUrl::parse(&site.url(&format!("/list/{page}.html")))
            .unwrap()
            .task_id()
            .as_str()
            .to_owned()
    };
    assert!(!objects || (1..4).all(|page| items_objects(&data, &task(page)) == 1));

    // WHEN one listing turns into a stored PDF, one into a page that is not stored (text),
    // one into HTML without items, and the next generation runs
    site.route(
        "/list/1.html",
        Route::content("application/pdf", "%PDF-1.4"),
    );
    site.route("/list/2.html", Route::content("text/plain", "moved"));
    site.route(
        "/list/3.html",
        Route::html("<html><body>empty</body></html>"),
    );
    let recrawl = succeeded(
        trawl(
            &["recrawl", "--json", "--data-dir", data.to_str().unwrap()],
            &dir,
        )
        .await,
    );
    let second = delivery_of(&json_of(&recrawl)).to_path_buf();

    // THEN the delivery holds only the unchanged listing's items, the others gone in the delta
    let items = gunzip_lines(&second.join("items.jsonl.gz"));
    assert_eq!(items.len(), ITEMS, "{items:?}");
    assert!(
        items
            .iter()
            .all(|i| i["page_url"] == site.url("/list/0.html"))
    );
    let delta = gunzip_lines(&second.join("items-delta.jsonl.gz"));
    assert_eq!(delta.len(), 3 * ITEMS, "{delta:?}");
    assert!(delta.iter().all(|d| d["change"] == "gone"));
    // AND the old items objects went with their bodies: none is left for the PDF and the text
    // page, the empty page has its (empty) items
    if objects {
        assert_eq!(items_objects(&data, &task(1)), 0);
        assert_eq!(items_objects(&data, &task(2)), 0);
        assert_eq!(items_objects(&data, &task(3)), 1);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A listing of `skus`, in that order, each item with its SKU.
fn sku_listing(skus: &[&str]) -> String {
    let items: String = skus
        .iter()
        .map(|sku| format!(r#"<li data-sku="{sku}"><b>Product {sku}</b></li>"#))
        .collect();
    format!("<html><body><ul class=items>{items}</ul></body></html>")
}

#[tokio::test]
async fn items_keyed_by_a_field_are_unchanged_when_a_new_one_is_listed_above_them() {
    // GIVEN a listing of three products, and an extractor that keys its items on their SKU
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    site.route("/shop.html", Route::html(sku_listing(&["A1", "B2", "C3"])));
    let dir = temp_dir("item-keys");
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let config = dir.join("config.json");
    let extract = json!({"extract": [{
        "name": "shop", "base": {"css": "ul.items > li"}, "key": ["sku"],
        "fields": {"sku": {"xpath": "@data-sku"}, "title": {"css": "b"}}
    }]});
    std::fs::write(&config, extract.to_string()).unwrap();
    let first = crawl_daily(&site.url("/shop.html"), &config, data, &dir).await;
    let items = gunzip_lines(&delivery_of(&first).join("items.jsonl.gz"));
    let keys: Vec<&Value> = items.iter().map(|i| &i["key"]).collect();
    assert_eq!(
        keys,
        [r#"shop:["A1"]"#, r#"shop:["B2"]"#, r#"shop:["C3"]"#],
        "{items:?}"
    );

    // WHEN a new product is listed first, one is dropped, and the next generation runs
    site.route("/shop.html", Route::html(sku_listing(&["N0", "A1", "B2"])));
    let second = json_of(&succeeded(
        trawl(&["recrawl", "--json", "--data-dir", data], &dir).await,
    ));

    // THEN the delta holds the new product and the dropped one, and the two that moved down a
    // place are unchanged (keyed by position, all three places would have changed)
    let delivery = delivery_of(&second);
    let mut delta: Vec<(String, String)> = gunzip_lines(&delivery.join("items-delta.jsonl.gz"))
        .iter()
        .map(|d| {
            (
                d["key"].as_str().unwrap().to_owned(),
                d["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    delta.sort();
    assert_eq!(
        delta,
        [
            (r#"shop:["C3"]"#.to_owned(), "gone".to_owned()),
            (r#"shop:["N0"]"#.to_owned(), "new".to_owned()),
        ]
    );
    let counted = &summary_of(delivery)["items"]["delta"];
    assert_eq!(counted["unchanged"], 2, "{counted}");
    let _ = std::fs::remove_dir_all(dir);
}
