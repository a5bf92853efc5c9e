//! The operator's paths on moto: a deployed stack found by its CloudFormation outputs
//! (`--stack`), a crawl handed to the functions with `trawl submit`, run by the four handlers as
//! Lambda runs them (this test plays the event source mappings and the schedule), followed with
//! `trawl status --watch`, signalled by EventBridge and fetched with `trawl deliveries get`.

use crate::cli::{json_of, temp_dir, trawl_bin};
use crate::delivering::{gz_lines, read_warc, warc_pages};
use crate::site::{Route, Site};
use crate::support::{self, moto, unique};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;
use trawl_aws::clients::Clients;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::stack::{Stack, create_stack};
use trawl_core::blob::Layout;
use trawl_core::deliver::{self, ManifestLine};
use trawl_core::fetch::Fetcher;
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{Status, now_ms};
use trawl_faults::lambda::on_heap;

const PAGES: usize = 12;
pub(crate) const PREFIX: &str = "pages/";
/// Bounds of the handlers' loop: rounds, and wall time.
const ROUNDS: usize = 300;
const TIME_LIMIT: Duration = Duration::from_secs(90);

/// Resources made by `create_stack`, and a CloudFormation stack whose outputs name them as the
/// template's do (moto creates no Lambda functions from a SAM template, so the stack is a stub
/// with the same outputs).
pub(crate) struct Deployed {
    pub(crate) clients: Clients,
    pub(crate) stack: Stack,
    pub(crate) name: String,
}

pub(crate) async fn deploy(endpoint: &str) -> Deployed {
    let clients = support::clients(endpoint).await;
    let stack = create_stack(&clients, &unique("op")).await.unwrap();
    let name = unique("deployed");
    let outputs = serde_json::json!({
        "TableName": {"Value": stack.table},
        "BucketName": {"Value": stack.bucket},
        "KeyPrefix": {"Value": PREFIX},
        "ShardCount": {"Value": "4"},
        "CrawlQueueUrl": {"Value": stack.queue_url},
        "PriorityCrawlQueueUrl": {"Value": stack.priority_queue_url},
        "PriorityQueueFrom": {"Value": "1"},
        "DeliveryQueueUrl": {"Value": stack.delivery_queue_url},
        "SeedQueueUrl": {"Value": stack.seed_queue_url},
        "SeederFunctionName": {"Value": "not-read"},
    });
    let template = serde_json::json!({
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": outputs,
    });
    let config = trawl_aws::clients::config_loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "trawl-tests",
        ))
        .load()
        .await;
    aws_sdk_cloudformation::Client::new(&config)
        .create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
    Deployed {
        clients,
        stack,
        name,
    }
}

impl Deployed {
    /// `trawl --backend aws ARGS` with only the AWS variables (moto, test credentials) and
    /// `extra`: no TRAWL_* variable unless given.
    fn trawl(&self, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut command = Command::new(trawl_bin());
        command
            .arg("--backend")
            .arg("aws")
            .args(args)
            .kill_on_drop(true)
            .env("AWS_ENDPOINT_URL", &moto::shared().endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1");
        for (name, _) in trawl_aws::stack::OUTPUT_VARIABLES {
            command.env_remove(name);
        }
        command.env_remove(trawl_aws::settings::ENV_STACK);
        command.envs(extra.iter().copied());
        command
    }

    pub(crate) async fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        self.trawl(args, extra).output().await.unwrap()
    }
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn the_stack_option_reads_the_resources_from_the_stack_outputs_and_variables_win() {
    // GIVEN a deployed stack on moto
    let deployed = deploy(&moto::shared().endpoint).await;

    // WHEN trawl is given only the stack's name, by flag or by variable
    let by_flag = deployed
        .run(&["--stack", &deployed.name, "status", "--json"], &[])
        .await;
    let by_variable = deployed
        .run(&["status", "--json"], &[("TRAWL_STACK", &deployed.name)])
        .await;

    // THEN it finds the table (empty: no crawl yet)
    for output in [&by_flag, &by_variable] {
        assert!(output.status.success(), "{}", stderr(output));
        assert_eq!(json_of(output)["crawls"], serde_json::json!([]));
    }

    // AND a variable set beside the stack wins over its output: another table, with a crawl
    let other = create_stack(&deployed.clients, &unique("other"))
        .await
        .unwrap();
    let store = DynamoStore::new(
        deployed.clients.dynamodb.clone(),
        &other.table,
        4,
        Arc::new(CallCounts::default()),
    );
    let crawl_id = CrawlId::parse(&unique("elsewhere")).unwrap();
    store
        .create_crawl(&Crawl::new(
            crawl_id.clone(),
            CrawlConfig::default(),
            now_ms(),
        ))
        .await
        .unwrap();
    let overridden = deployed
        .run(
            &["--stack", &deployed.name, "status", "--json"],
            &[("TRAWL_TABLE", &other.table)],
        )
        .await;
    assert!(overridden.status.success(), "{}", stderr(&overridden));
    assert_eq!(
        json_of(&overridden)["crawls"][0]["crawl_id"],
        crawl_id.as_str()
    );

    // AND a stack that does not exist is one line naming the flag to check
    let missing = deployed
        .run(&["--stack", "no-such-stack", "status"], &[])
        .await;
    assert_eq!(missing.status.code(), Some(2));
    let line = stderr(&missing);
    assert_eq!(line.trim().lines().count(), 1, "{line}");
    assert!(
        line.contains("no CloudFormation stack") && line.contains("--stack"),
        "{line}"
    );
}

/// The site: `PAGES` pages, each linking to the next two and back to the first.
async fn site() -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for i in 0..PAGES {
        site.route(&format!("/p/{i}.html"), Route::html(page_html(i)));
    }
    site
}

/// Page `i` of `site()`: a title, a heading and links to the next two pages and the first.
fn page_html(i: usize) -> String {
    let links: String = [i + 1, i + 2, 0]
        .iter()
        .filter(|&&j| j < PAGES)
        .map(|j| format!(r#"<a href="/p/{j}.html">{j}</a> "#))
        .collect();
    format!(r#"<html lang="en"><title>Page {i}</title><h1>page {i}</h1>{links}"#)
}

/// The four functions' handlers, wired as their `main.rs` wires them, on the deployed stack.
pub(crate) struct Functions(trawl_faults::lambda::Functions);

impl std::ops::Deref for Functions {
    type Target = trawl_faults::lambda::Functions;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

pub(crate) fn functions(deployed: &Deployed) -> Functions {
    functions_with(deployed, Arc::new(Fetcher::new("").unwrap()))
}

/// `functions`, fetching with `fetcher` (the crawler function's, with its secret source).
pub(crate) fn functions_with(deployed: &Deployed, fetcher: Arc<Fetcher>) -> Functions {
    Functions(trawl_faults::lambda::Functions::new(
        &deployed.clients,
        &deployed.stack,
        &Layout::new(PREFIX),
        4,
        fetcher,
        Arc::new(CallCounts::default()),
        Arc::new(trawl_core::clock::SystemClock),
    ))
}

/// What an SQS event source mapping hands a function (`trawl_faults::lambda::receive_batch`).
async fn receive_batch(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Option<SqsEvent> {
    trawl_faults::lambda::receive_batch(sqs, queue_url)
        .await
        .unwrap()
}

/// What the mapping does with the function's answer: deletes every record not reported failed.
pub(crate) async fn acknowledge(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    event: &SqsEvent,
    response: &serde_json::Value,
) {
    let failed: BTreeSet<&str> = response["batchItemFailures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["itemIdentifier"].as_str())
        .collect();
    for record in &event.records {
        if failed.contains(record.message_id.as_deref().unwrap_or_default()) {
            continue;
        }
        sqs.delete_message()
            .queue_url(queue_url)
            .receipt_handle(record.receipt_handle.clone().unwrap_or_default())
            .send()
            .await
            .unwrap();
    }
}

impl Functions {
    /// One round of what Lambda would run: each queue's batch to its function, and a sweep. On
    /// the heap, so that the tests holding rounds hold a pointer each, not a round's calls.
    pub(crate) fn round<'a>(
        &'a self,
        deployed: &'a Deployed,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>> {
        on_heap(move || self.round_on_stack(deployed))
    }

    async fn round_on_stack(&self, deployed: &Deployed) {
        let (sqs, stack) = (&deployed.clients.sqs, &deployed.stack);
        if let Some(event) = receive_batch(sqs, &stack.seed_queue_url).await {
            let payload = serde_json::to_value(&event).unwrap();
            let response = on_heap(|| self.seeder.dispatch(payload, None, now_ms()))
                .await
                .unwrap();
            let response = serde_json::to_value(response).unwrap();
            acknowledge(sqs, &stack.seed_queue_url, &event, &response).await;
        }
        // Each crawl queue's mapping: the priority queue's first, as its own consumers would
        // take its turns while the regular queue's are busy.
        for url in [&stack.priority_queue_url, &stack.queue_url] {
            if let Some(event) = receive_batch(sqs, url).await {
                let lambda_event = lambda_runtime::LambdaEvent::new(
                    event.clone(),
                    lambda_runtime::Context::default(),
                );
                let response = on_heap(|| self.crawler.handle(lambda_event)).await.unwrap();
                let response = serde_json::to_value(response).unwrap();
                acknowledge(sqs, url, &event, &response).await;
            }
        }
        let schedule =
            serde_json::from_str(include_str!("../events/sweeper-schedule.json")).unwrap();
        on_heap(|| self.sweeper.sweep(schedule, None, now_ms()))
            .await
            .unwrap();
        if let Some(event) = receive_batch(sqs, &stack.delivery_queue_url).await {
            let payload = serde_json::to_value(&event).unwrap();
            let response = on_heap(|| self.deliverer.deliver(payload, now_ms(), None))
                .await
                .unwrap();
            let response = serde_json::to_value(response).unwrap();
            acknowledge(sqs, &stack.delivery_queue_url, &event, &response).await;
        }
    }
}

#[tokio::test]
async fn a_submitted_crawl_is_run_by_the_functions_followed_and_downloaded() {
    // GIVEN a deployed stack on moto and a site of 12 pages
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let crawl_id = unique("submitted");
    let stack_env = [("TRAWL_STACK", deployed.name.as_str())];
    // AND the README's EventBridge rule routing the stack's delivery signals to a queue
    let signals = crate::delivered::route_delivery_signals(&deployed).await;

    // WHEN `trawl submit` hands the crawl over
    let start = site.url("/p/0.html");
    let submitted = deployed
        .run(
            &[
                "submit",
                &start,
                "--crawl-id",
                &crawl_id,
                "--allow-private-networks",
                "--analyse-pages",
                "--json",
            ],
            &stack_env,
        )
        .await;

    // THEN it returns at once with the crawl id, nothing crawled yet
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    assert_eq!(json_of(&submitted)["crawl_id"], crawl_id.as_str());
    assert_eq!(site.total_hits(), 0);

    // WHEN `status --watch` follows it while the functions run it
    let watch = deployed
        .trawl(
            &[
                "status",
                "--crawl-id",
                &crawl_id,
                "--watch",
                "--interval",
                "300ms",
                "--json",
            ],
            &stack_env,
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let watched = tokio::spawn(watch.wait_with_output());
    let functions = functions(&deployed);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        if watched.is_finished() || started.elapsed() > TIME_LIMIT {
            break;
        }
        functions.round(&deployed).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // THEN the watch ends by itself once the delivery exists, having seen the crawl run
    let watched = tokio::time::timeout(Duration::from_secs(10), watched)
        .await
        .expect("status --watch did not end after the delivery")
        .unwrap()
        .unwrap();
    assert!(watched.status.success(), "{}", stderr(&watched));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&watched.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["state"], "completed");
    assert_eq!(last["counts"]["succeeded"], PAGES as u64);
    assert!(last["delivery"].as_str().unwrap().starts_with("s3://"));
    assert!(
        lines.len() >= 2,
        "one refresh before the delivery: {lines:?}"
    );
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["delivery"].is_null())
    );
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 1));

    // AND the delivery's signal reached the rule's queue, once
    let signalled = crate::delivered::delivery_signals(&deployed, &signals).await;
    let [key] = signalled.as_slice() else {
        panic!("{signalled:?}");
    };
    assert!(
        key.starts_with(&format!("{PREFIX}deliveries/crawl={crawl_id}/"))
            && key.ends_with("/gen-000000/_SUCCESS"),
        "{key}"
    );

    // AND `deliveries list` shows it complete, and `deliveries get` downloads a valid WARC with
    // every page and a manifest with every task
    let listed = deployed
        .run(
            &["deliveries", "list", "--crawl-id", &crawl_id, "--json"],
            &stack_env,
        )
        .await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    let deliveries = json_of(&listed)["deliveries"].as_array().unwrap().clone();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0]["complete"], true);
    let out = temp_dir("deliveries");
    let fetched = deployed
        .run(
            &[
                "deliveries",
                "get",
                "--crawl-id",
                &crawl_id,
                "--out",
                out.to_str().unwrap(),
                "--json",
            ],
            &stack_env,
        )
        .await;
    assert!(fetched.status.success(), "{}", stderr(&fetched));
    let dir = std::path::PathBuf::from(json_of(&fetched)["directory"].as_str().unwrap());
    // The delivery's segments, as downloaded (one of each for 12 pages).
    let segment = |kind: &str| {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(kind))
            .collect();
        names.sort();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::read(dir.join(&names[0])).unwrap()
    };
    let pages = warc_pages(&read_warc(&segment("pages-")));
    assert_eq!(pages.len(), PAGES);
    let manifest: Vec<ManifestLine> = gz_lines(&segment("manifest-"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(manifest.len(), PAGES);
    assert!(manifest.iter().all(|l| l.status == "succeeded"));
    // AND each line gives its page's title and language (`--analyse-pages`)
    for line in &manifest {
        let i = line
            .url
            .trim_end_matches(".html")
            .rsplit('/')
            .next()
            .unwrap();
        let read = (line.title.as_deref(), line.language.as_deref());
        assert_eq!(
            read,
            (Some(format!("Page {i}").as_str()), Some("en")),
            "{line:?}"
        );
    }
    let _ = std::fs::remove_dir_all(out);
}

#[tokio::test]
async fn analysed_text_of_pages_and_pdfs_runs_through_the_handlers_and_a_seed_skips_its_own() {
    // GIVEN a deployed stack on moto, the four handlers, and a site with an article page, a
    // long one, a PDF, a malformed PDF, and a page whose seed line skips its analysis
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = crate::analysis::text_site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("text");

    // WHEN the seeder is invoked with both analyses on and PDFs stored, and the functions run
    // until the delivery
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0},
            "fetch": {
                "allow_private_networks": true,
                "store_content_types": ["application/pdf"],
            },
            "analysis": {"page": true, "text": true},
        },
        "source": {"urls": crate::analysis::text_seeds(&site)},
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;
    assert_eq!(summary["statuses"]["succeeded"], 5, "{summary}");

    // THEN the downloaded manifest gives each page's text, the PDF's, the malformed PDF's
    // error, and no analysis of the skipped page
    let out = temp_dir("text-deliveries");
    let fetched = deployed
        .run(
            &[
                "deliveries",
                "get",
                "--crawl-id",
                &crawl_id,
                "--out",
                out.to_str().unwrap(),
                "--json",
            ],
            &[("TRAWL_STACK", deployed.name.as_str())],
        )
        .await;
    assert!(fetched.status.success(), "{}", stderr(&fetched));
    let dir = std::path::PathBuf::from(json_of(&fetched)["directory"].as_str().unwrap());
    let lines: Vec<serde_json::Value> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("manifest-")
        })
        .flat_map(|p| gz_lines(&std::fs::read(p).unwrap()))
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    crate::analysis::assert_texts(&lines, &site);
    crate::analysis::assert_skipped(&lines, &site);
    let _ = std::fs::remove_dir_all(out);
}

/// The summary of one generation's delivery, once it is complete (`_SUCCESS` written).
pub(crate) async fn delivered_summary(
    deployed: &Deployed,
    crawl_id: &str,
    generation: u64,
) -> Option<serde_json::Value> {
    let s3 = &deployed.clients.s3;
    let prefix = Layout::new(PREFIX).deliveries_prefix(&CrawlId::parse(crawl_id).unwrap());
    let listed = s3
        .list_objects_v2()
        .bucket(&deployed.stack.bucket)
        .prefix(&prefix)
        .send()
        .await
        .unwrap();
    let done = format!(
        "/{}/{}",
        deliver::delivery_id(generation),
        deliver::SUCCESS_FILE
    );
    let marker = listed
        .contents()
        .iter()
        .filter_map(|o| o.key())
        .find(|k| k.ends_with(&done))?;
    let summary = marker.replace(deliver::SUCCESS_FILE, deliver::SUMMARY_FILE);
    let body = s3
        .get_object()
        .bucket(&deployed.stack.bucket)
        .key(summary)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    Some(serde_json::from_slice(&body).unwrap())
}

impl Functions {
    /// Runs rounds until `generation` of the crawl is delivered; its summary.
    pub(crate) async fn until_delivered(
        &self,
        deployed: &Deployed,
        crawl_id: &str,
        generation: u64,
    ) -> serde_json::Value {
        let started = Instant::now();
        for _ in 0..ROUNDS {
            if let Some(summary) = delivered_summary(deployed, crawl_id, generation).await {
                return summary;
            }
            assert!(
                started.elapsed() < TIME_LIMIT,
                "generation {generation} not delivered in {TIME_LIMIT:?}"
            );
            self.round(deployed).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("generation {generation} not delivered in {ROUNDS} rounds");
    }
}

#[tokio::test]
async fn status_reads_the_task_counts_in_one_request_and_a_delivery_sets_them_right() {
    // GIVEN a crawl of 12 linked pages seeded through the seeder, whose kept counts then drift
    // (as if a process that wrote 1,000 tasks had died before reporting them)
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("counts");
    let request = serde_json::json!({
        "crawl_id": crawl_id,
        "config": {"politeness": {"delay_ms": 0}, "fetch": {"allow_private_networks": true}},
        "source": {"urls": [site.url("/p/0.html")]},
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    deployed
        .clients
        .dynamodb
        .update_item()
        .table_name(&deployed.stack.table)
        .key("pk", AttributeValue::S(format!("{crawl_id}#crawl")))
        .update_expression("ADD tasks_pending :n")
        .expression_attribute_values(":n", AttributeValue::N("1000".into()))
        .send()
        .await
        .unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(
        deployed.clients.dynamodb.clone(),
        &deployed.stack.table,
        4,
        calls.clone(),
    );
    let id = CrawlId::parse(&crawl_id).unwrap();
    let drifted = store.counts(&id).await.unwrap();
    assert!(drifted[&Status::Pending] >= 1_000, "{drifted:?}");

    // WHEN the functions crawl it to its delivery
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN the counts, read in one request, are what the delivery read task by task
    calls.reset();
    let counts = store.counts(&id).await.unwrap();
    assert_eq!(
        calls.get(Call::DynamoBatchGetItem),
        1,
        "the crawl and its report lanes"
    );
    assert_eq!(calls.snapshot().iter().map(|(_, n)| n).sum::<u64>(), 1);
    let statuses: BTreeMap<String, u64> =
        serde_json::from_value(summary["statuses"].clone()).unwrap();
    for (status, n) in &counts {
        let delivered = statuses.get(status.name()).copied().unwrap_or(0);
        assert_eq!(*n, delivered, "{status:?}: {counts:?} against {statuses:?}");
    }
    assert_eq!(counts[&Status::Succeeded], PAGES as u64);
    assert_eq!(counts[&Status::Pending], 0);
}

#[tokio::test]
async fn generations_run_through_the_four_handlers_recrawl_with_a_delta_then_reset() {
    // GIVEN a deployed stack on moto, a site of 12 linked pages, and the four handlers
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("generations");

    // WHEN the seeder is invoked with a seed request (a page that had content is gone at the
    // second check in a row finding it missing) and the functions run until the first delivery
    let request = serde_json::json!({
        "crawl_id": crawl_id,
        "config": {
            "retry": {"base_delay_ms": 200},
            "recrawl": {"missing_after": 2},
            "politeness": {"delay_ms": 0},
            "fetch": {"allow_private_networks": true},
        },
        "source": {"urls": [site.url("/p/0.html")]},
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let first = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN every page was fetched once and delivered as new
    assert_eq!(first["delta"]["new"], PAGES as u64, "{first}");
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 1));

    // GIVEN 5 pages changed and 3 removed
    let (changed, removed) = ([1, 2, 3, 4, 5], [6, 7, 8]);
    for i in changed {
        site.route(
            &format!("/p/{i}.html"),
            Route::html(format!("<h1>page {i}, edited</h1>")),
        );
    }
    for i in removed {
        site.route(&format!("/p/{i}.html"), Route::status(404));
    }

    // WHEN the seeder is asked for a recrawl (events/seeder-recrawl.json's shape)
    let recrawl = serde_json::json!({"crawl_id": crawl_id, "operation": {"recrawl": {}}});
    let operated = functions
        .seeder
        .dispatch(recrawl.clone(), None, now_ms())
        .await
        .unwrap();
    let operated = serde_json::to_value(operated).unwrap();
    assert_eq!(operated["reopened"], true, "{operated}");
    let second = functions.until_delivered(&deployed, &crawl_id, 1).await;

    // THEN the delta says 5 changed; the removed pages, missing at one check, are kept
    // (unchanged, asked once: no retry seconds later)
    let delta = &second["delta"];
    assert_eq!(
        (&delta["changed"], &delta["gone"], &delta["new"]),
        (&5.into(), &0.into(), &0.into()),
        "{delta}"
    );
    assert_eq!(delta["unchanged"], (PAGES - 5) as u64, "{delta}");
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 2));

    // GIVEN page 8 back as it was
    let (still_removed, back) = ([6, 7], 8);
    site.route(&format!("/p/{back}.html"), Route::html(page_html(back)));

    // WHEN the next generation is asked for
    functions
        .seeder
        .dispatch(recrawl, None, now_ms())
        .await
        .unwrap();
    let third = functions.until_delivered(&deployed, &crawl_id, 2).await;

    // THEN the pages missing at two checks in a row are gone at the second; page 8 never was
    let delta = &third["delta"];
    assert_eq!(
        (&delta["changed"], &delta["gone"], &delta["new"]),
        (&0.into(), &still_removed.len().into(), &0.into()),
        "{delta}"
    );
    assert_eq!(delta["unchanged"], (PAGES - 2) as u64, "{delta}");
    assert_eq!(third["statuses"]["gone"], 2, "{third}");
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 3));

    // WHEN the seeder is asked for a reset, and the functions run again
    let reset = serde_json::json!({"crawl_id": crawl_id, "operation": {"reset": {}}});
    functions
        .seeder
        .dispatch(reset, None, now_ms())
        .await
        .unwrap();
    let fourth = functions.until_delivered(&deployed, &crawl_id, 3).await;

    // THEN every page was fetched again (a removed page once: never fetched since the reset,
    // its 404 makes it gone at once), and every page there is delivered as new
    for i in 0..PAGES {
        assert_eq!(site.hits(&format!("/p/{i}.html")), 4, "page {i}");
    }
    assert_eq!(
        fourth["statuses"]["succeeded"],
        (PAGES - 2) as u64,
        "{fourth}"
    );
    assert_eq!(fourth["statuses"]["gone"], 2, "{fourth}");
    let delta = &fourth["delta"];
    assert_eq!(
        (&delta["new"], &delta["unchanged"], &delta["gone"]),
        (&(PAGES - 2).into(), &0.into(), &0.into()),
        "{delta}"
    );
}

#[tokio::test]
async fn a_host_dropped_through_the_seeder_is_fetched_no_more_until_a_refetch_takes_it_back() {
    // GIVEN a deployed stack on moto, a site of 12 linked pages, and a crawl seeded by the
    // seeder, its host's first turn on its way
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("dropped");
    let request = json!({
        "crawl_id": crawl_id,
        "config": {"politeness": {"delay_ms": 0}, "fetch": {"allow_private_networks": true}},
        "source": {"urls": [site.url("/p/0.html")]},
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();

    // WHEN the seeder is asked to drop the host (events/seeder-drop-hosts.json's shape), a
    // mistyped one first, then the functions run until the crawl is delivered
    let host = site.addr().to_string();
    let drop = |hosts: Vec<&str>| json!({"crawl_id": crawl_id, "operation": {"drop_hosts": {"hosts": hosts, "reason": "off limits"}}});
    let refused = functions
        .seeder
        .dispatch(drop(vec![&host, "nosuch.example"]), None, now_ms())
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let dropped = functions
        .seeder
        .dispatch(drop(vec![&host]), None, now_ms())
        .await
        .unwrap();
    let dropped = serde_json::to_value(dropped).unwrap();
    assert_eq!(dropped["dropped"], json!([host]), "{dropped}");
    let first = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN no page was fetched: the seed ended ignored, with the operator's reason
    assert_eq!(site.total_hits() - site.hits("/robots.txt"), 0);
    assert_eq!(first["statuses"]["ignored"], 1, "{first}");
    assert_eq!(first["errors"]["host_given_up"], 1, "{first}");
    let seed = site.url("/p/0.html");
    let show = ["tasks", "show", &seed, "--crawl-id", &crawl_id, "--json"];
    let shown = deployed
        .run(&show, &[("TRAWL_STACK", deployed.name.as_str())])
        .await;
    assert!(shown.status.success(), "{}", stderr(&shown));
    let task = json_of(&shown);
    assert_eq!(
        task["errors"][0]["message"], "dropped by the operator: off limits",
        "{task}"
    );

    // WHEN the seeder is asked to refetch every page (which revives the host)
    let refetch = json!({"crawl_id": crawl_id, "operation": {"refetch": {"match": "."}}});
    functions
        .seeder
        .dispatch(refetch, None, now_ms())
        .await
        .unwrap();
    let second = functions.until_delivered(&deployed, &crawl_id, 1).await;

    // THEN the host is crawled again: every page fetched once
    assert_eq!(second["statuses"]["succeeded"], PAGES as u64, "{second}");
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 1));
}

#[tokio::test]
async fn a_host_moved_through_the_seeder_is_crawled_by_the_other_crawl_and_ended_in_the_first() {
    // GIVEN a deployed stack on moto, a site of 12 linked pages, a crawl seeded with its first
    // page (its host's first turn on its way), and a second crawl of the same site seeded with
    // its robots.txt only
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let (from, to) = (unique("moved-from"), unique("moved-to"));
    for (crawl_id, seed) in [(&from, "/p/0.html"), (&to, "/robots.txt")] {
        let request = json!({
            "crawl_id": crawl_id,
            "config": {"politeness": {"delay_ms": 0}, "fetch": {"allow_private_networks": true}},
            "source": {"urls": [site.url(seed)]},
        });
        functions
            .seeder
            .dispatch(request, None, now_ms())
            .await
            .unwrap();
    }

    // WHEN the seeder is asked to move the host to the second crawl
    // (events/seeder-move-hosts.json's shape), then the functions run until both are delivered
    let host = site.addr().to_string();
    let moving =
        json!({"crawl_id": from, "operation": {"move_hosts": {"hosts": [host], "to": to}}});
    let moved = functions
        .seeder
        .dispatch(moving, None, now_ms())
        .await
        .unwrap();
    let moved = serde_json::to_value(moved).unwrap();
    assert_eq!(moved["moved"]["added"], 1, "{moved}");
    assert_eq!(moved["dropped"], json!([host]), "{moved}");
    let first = functions.until_delivered(&deployed, &from, 0).await;
    let second = functions.until_delivered(&deployed, &to, 0).await;

    // THEN the first crawl fetched nothing and ended its seed with the reason; the second
    // fetched every page once
    assert_eq!(first["statuses"]["ignored"], 1, "{first}");
    assert_eq!(
        first["statuses"]["succeeded"],
        serde_json::Value::Null,
        "{first}"
    );
    assert_eq!(
        second["statuses"]["succeeded"],
        PAGES as u64 + 1,
        "{second}"
    );
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 1));
}

#[tokio::test]
async fn routes_decide_through_the_functions_which_pages_are_kept_and_whose_links_are_followed() {
    // GIVEN a deployed stack on moto, the site of 12 linked pages, and a crawl whose first page
    // is read for its links only and whose other pages' links are not followed
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("routed");
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0},
            "fetch": {"allow_private_networks": true},
            "scope": {"routes": [
                {"glob": "*/p/0.html", "store": false},
                {"glob": "*/p/*", "follow_links": false}
            ]}
        },
        "source": {"urls": [site.url("/p/0.html")]},
    });

    // WHEN the seeder is handed the crawl and the functions run it until it is delivered
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN the first page and the two it links to are fetched, nothing further; the first
    // page's body is not kept, so the delivery's WARC holds the other two
    assert_eq!(summary["statuses"]["succeeded"], 3, "{summary}");
    assert!((0..3).all(|i| site.hits(&format!("/p/{i}.html")) == 1));
    assert_eq!(site.hits("/p/3.html"), 0);
    assert_eq!(summary["warc"]["pages"], 2, "{summary}");
}

#[tokio::test]
async fn a_segments_crawl_run_by_the_functions_is_delivered_by_reference_into_its_s3_segments() {
    // GIVEN a deployed stack on moto, the site of 12 linked pages, and a crawl whose bodies are
    // appended to segments
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("referenced");
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0},
            "fetch": {"allow_private_networks": true},
            "storage": {"layout": "segments"}
        },
        "source": {"urls": [site.url("/p/0.html")]},
    });

    // WHEN the functions run it until it is delivered
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;

    // THEN the delivery copied no page and wrote no WARC of its own
    assert_eq!(summary["warc"]["referenced"], PAGES as u64, "{summary}");
    assert_eq!(summary["warc"]["pages"], 0, "{summary}");
    let s3 = &deployed.clients.s3;
    let bucket = &deployed.stack.bucket;
    let get = |key: String, range: Option<String>| async move {
        s3.get_object()
            .bucket(bucket)
            .key(key)
            .set_range(range)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes()
    };
    let prefix = Layout::new(PREFIX).deliveries_prefix(&CrawlId::parse(&crawl_id).unwrap());
    let listed = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(&prefix)
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert!(!keys.iter().any(|k| k.contains("/pages-")), "{keys:?}");
    let manifest = keys.iter().find(|k| k.contains("/manifest-")).unwrap();
    let lines: Vec<ManifestLine> = gz_lines(&get(manifest.to_string(), None).await)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), PAGES);
    // AND each manifest line's segment, offset and length open its own page's response record
    // in S3, its payload the md5 the line gives
    let bucket_uri = format!("s3://{bucket}/");
    for line in &lines {
        let object = line.object.as_deref().unwrap();
        let key = object.strip_prefix(&bucket_uri).unwrap_or(object);
        let (offset, length) = (line.offset.unwrap(), line.length.unwrap());
        let range = format!("bytes={offset}-{}", offset + length - 1);
        let records = read_warc(&get(key.to_owned(), Some(range)).await);
        let [response] = &records[..] else {
            panic!("{line:?}: {records:?}")
        };
        assert_eq!(response.field("WARC-Type"), "response");
        assert_eq!(response.field("WARC-Target-URI"), line.url);
        let head = response.block.windows(4).position(|w| w == b"\r\n\r\n");
        let payload = &response.block[head.unwrap() + 4..];
        let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(payload));
        assert_eq!(Some(md5.as_str()), line.md5.as_deref(), "{line:?}");
    }
}

#[tokio::test]
async fn a_crawl_that_asks_for_it_is_purged_by_the_deliverer_once_delivered() {
    // GIVEN a deployed stack on moto, the site of 12 linked pages, and a crawl on segments
    // that asks to be purged after its delivery (Scrapy Cloud's `cleanTask`)
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let functions = functions(&deployed);
    let crawl_id = unique("purged");
    let request = json!({
        "crawl_id": crawl_id,
        "config": {
            "politeness": {"delay_ms": 0},
            "fetch": {"allow_private_networks": true},
            "storage": {"layout": "segments"},
            "delivery": {"purge_after": true}
        },
        "source": {"urls": [site.url("/p/0.html")]},
    });

    // WHEN the functions run it until it is delivered
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;
    assert_eq!(summary["warc"]["referenced"], PAGES as u64, "{summary}");

    // THEN the crawl's record and tasks are gone from the table
    let id = CrawlId::parse(&crawl_id).unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(
        deployed.clients.dynamodb.clone(),
        &deployed.stack.table,
        4,
        calls,
    );
    assert!(store.get_crawl(&id).await.unwrap().is_none());
    let task = trawl_domain::canonical::CanonicalUrl::parse(&site.url("/p/0.html"))
        .unwrap()
        .task_id();
    assert!(store.get(&id, &task).await.unwrap().is_none());
    // AND of its bodies only the segments its delivery points into are left in the bucket,
    // each manifest line's segment among them
    let s3 = &deployed.clients.s3;
    let bucket = &deployed.stack.bucket;
    let layout = Layout::new(PREFIX);
    let list = |prefix: String| async move {
        let listed = s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        let keys: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        keys
    };
    let left = list(layout.crawl_prefix(&id)).await;
    let segments = layout.segments_prefix(&id);
    assert!(!left.is_empty(), "the segments are kept");
    assert!(left.iter().all(|k| k.starts_with(&segments)), "{left:?}");
    let delivered = list(layout.deliveries_prefix(&id)).await;
    let manifest = delivered.iter().find(|k| k.contains("/manifest-")).unwrap();
    let bytes = s3
        .get_object()
        .bucket(bucket)
        .key(manifest)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    let bucket_uri = format!("s3://{bucket}/");
    for line in gz_lines(&bytes) {
        let line: ManifestLine = serde_json::from_str(&line).unwrap();
        let object = line.object.unwrap();
        let key = object.strip_prefix(&bucket_uri).unwrap_or(&object);
        assert!(left.iter().any(|k| k == key), "{key} was purged");
    }
}

#[tokio::test]
async fn a_paused_crawl_runs_no_turn_until_resumed_then_completes_with_every_page_once() {
    // GIVEN a deployed stack on moto, a site of 12 pages, and a crawl submitted and seeded,
    // then paused (`trawl --backend aws pause`) before any turn ran
    let deployed = deploy(&moto::shared().endpoint).await;
    let site = site().await;
    let crawl_id = unique("paused");
    let stack_env = [("TRAWL_STACK", deployed.name.as_str())];
    let start = site.url("/p/0.html");
    let submit = [
        "submit",
        &start,
        "--crawl-id",
        &crawl_id,
        "--allow-private-networks",
        "--json",
    ];
    let submitted = deployed.run(&submit, &stack_env).await;
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    let functions = functions(&deployed);
    let (sqs, stack) = (&deployed.clients.sqs, &deployed.stack);
    let event = receive_batch(sqs, &stack.seed_queue_url)
        .await
        .expect("the seed request");
    let payload = serde_json::to_value(&event).unwrap();
    let seeded = functions.seeder.dispatch(payload, None, now_ms()).await;
    acknowledge(
        sqs,
        &stack.seed_queue_url,
        &event,
        &serde_json::to_value(seeded.unwrap()).unwrap(),
    )
    .await;
    let operate = async |verb: &str| {
        let output = deployed
            .run(&[verb, "--crawl-id", &crawl_id, "--json"], &stack_env)
            .await;
        assert!(output.status.success(), "{verb}: {}", stderr(&output));
        json_of(&output)
    };
    assert_eq!(operate("pause").await["paused"], true);

    // WHEN the functions run 20 rounds
    for _ in 0..20 {
        functions.round(&deployed).await;
    }

    // THEN no page was fetched, and the crawl is still running, paused, not delivered
    let pages = || {
        (0..PAGES)
            .map(|i| site.hits(&format!("/p/{i}.html")))
            .sum::<u64>()
    };
    assert_eq!(pages(), 0);
    let status = deployed
        .run(&["status", "--crawl-id", &crawl_id, "--json"], &stack_env)
        .await;
    let status = &json_of(&status)["crawls"][0];
    assert_eq!(
        (&status["state"], &status["paused"]),
        (&json!("running"), &json!(true)),
        "{status}"
    );
    assert!(delivered_summary(&deployed, &crawl_id, 0).await.is_none());

    // WHEN it is resumed, and the sweeper looks for lost turns at once (`lost_after_ms` 0: the
    // test's stand-in for its lost-turn window of minutes)
    assert_eq!(operate("resume").await["paused"], false);
    let at_once = json!({"source": "trawl.sweeper", "max_pages": 500, "time_budget_ms": 50_000, "lost_after_ms": 0});
    functions
        .sweeper
        .sweep(at_once, None, now_ms())
        .await
        .unwrap();

    // THEN the functions complete and deliver it, every page fetched once
    let summary = functions.until_delivered(&deployed, &crawl_id, 0).await;
    assert_eq!(summary["tasks"], PAGES as u64, "{summary}");
    assert!((0..PAGES).all(|i| site.hits(&format!("/p/{i}.html")) == 1));
}
