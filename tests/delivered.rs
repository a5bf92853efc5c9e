//! A signal when a delivery lands: `--on-delivered CMD` runs once per delivery the process
//! writes, with the delivery in its environment (locally); the deployed bucket sends S3's
//! "Object Created" event for each delivery's `_SUCCESS` marker to EventBridge (on moto, routed
//! to a queue by a rule as the README shows).

use crate::cli::{assert_one_error_line, json_of, linked_site, temp_dir, trawl, warcio_check};
use crate::delivering::gz_lines;
use crate::operator::Deployed;
use crate::support::{moto, unique};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{Value, json};
use std::path::Path;

const README: &str = include_str!("../README.md");

/// The event pattern of the README's "When a delivery lands", for `bucket`.
fn readme_delivery_pattern(bucket: &str) -> String {
    let section = README
        .split("### When a delivery lands")
        .nth(1)
        .expect("the README's section");
    let pattern = section
        .split("```json")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("its event pattern");
    pattern.replace("YOUR-TRAWL-BUCKET", bucket)
}

/// Routes the deployed bucket's delivery signals to a new queue with the README's rule, as a
/// user would (EventBridge's JSON API on moto: the workspace links no EventBridge SDK); returns
/// the queue's URL.
pub(crate) async fn route_delivery_signals(deployed: &Deployed) -> String {
    let sqs = &deployed.clients.sqs;
    let queue = sqs
        .create_queue()
        .queue_name(unique("signals"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .remove(&QueueAttributeName::QueueArn)
        .unwrap();
    let rule = unique("trawl-delivered");
    let calls = [
        (
            "AWSEvents.PutRule",
            json!({"Name": rule, "EventPattern": readme_delivery_pattern(&deployed.stack.bucket)}),
        ),
        (
            "AWSEvents.PutTargets",
            json!({"Rule": rule, "Targets": [{"Id": "1", "Arn": arn}]}),
        ),
    ];
    let http = trawl_core::fetch::http_client().build().unwrap();
    for (target, body) in calls {
        let answer = http
            .post(&moto::shared().endpoint)
            .header("X-Amz-Target", target)
            .header("Content-Type", "application/x-amz-json-1.1")
            .header(
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/events/aws4_request",
            )
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{target}: {answer:?}");
    }
    queue
}

/// The object keys of the delivery signals that reached `queue`.
pub(crate) async fn delivery_signals(deployed: &Deployed, queue: &str) -> Vec<String> {
    let received = deployed
        .clients
        .sqs
        .receive_message()
        .queue_url(queue)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    received
        .messages()
        .iter()
        .map(|m| {
            let event: Value = serde_json::from_str(m.body().unwrap_or_default()).unwrap();
            event["detail"]["object"]["key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The hook of these tests: one line per delivery in `log`, and some output of its own, which
/// must not reach stdout.
fn hook(log: &Path) -> String {
    format!(
        r#"echo "hook output"; printf '%s %s %s %s %s\n' "$TRAWL_CRAWL_ID" "$TRAWL_GENERATION" "$TRAWL_DELIVERY_ID" "$TRAWL_DELIVERY" "$TRAWL_TASKS" >> '{}'"#,
        log.display()
    )
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `trawl ARGS` on crawl `signal` in `dir`'s data directory, with `--on-delivered hook`; it
/// must succeed unless `hook` fails.
async fn signal(dir: &Path, args: &[&str], hook: &str) -> std::process::Output {
    let mut full = args.to_vec();
    full.extend([
        "--crawl-id",
        "signal",
        "--data-dir",
        "data",
        "--on-delivered",
        hook,
    ]);
    let output = trawl(&full, dir).await;
    assert!(
        output.status.success() || hook == FAILING,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

const FAILING: &str = "exit 7";

#[tokio::test]
async fn the_on_delivered_command_runs_once_per_delivery_written_with_the_delivery_in_its_environment()
 {
    // GIVEN a site of 5 pages and a hook that logs the delivery it is run for
    let site = linked_site(5).await;
    let dir = temp_dir("delivered");
    let log = dir.join("deliveries.log");
    let hook = hook(&log);
    let url = site.url("/p/0.html");

    // WHEN the site is crawled to its delivery, with --json
    let crawl = ["crawl", url.as_str(), "--allow-private-networks", "--json"];
    let crawled = signal(&dir, &crawl, &hook).await;

    // THEN the hook ran once, told the crawl, generation, delivery id, location and task count,
    // and its output stayed off stdout (which is one JSON object)
    let location = json_of(&crawled)["delivery"].as_str().unwrap().to_owned();
    assert_eq!(lines(&log), [format!("signal 0 gen-000000 {location} 5")]);
    assert!(String::from_utf8_lossy(&crawled.stderr).contains("hook output"));

    // WHEN the delivery is asked for again: it exists, so nothing is written or signalled
    signal(&dir, &["deliver"], &hook).await;
    assert_eq!(lines(&log).len(), 1);

    // WHEN the next generation is crawled and delivered
    signal(&dir, &["recrawl"], &hook).await;

    // THEN the hook ran for it
    let logged = lines(&log);
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(logged[1].starts_with("signal 1 gen-000001 "), "{logged:?}");

    // WHEN a hook fails
    let failing = signal(&dir, &["recrawl"], FAILING).await;

    // THEN the command fails and says so, and the delivery it ran for is in place
    assert_eq!(failing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&failing.stderr);
    assert!(
        stderr.contains("but the --on-delivered command failed: it exited with 7"),
        "{stderr}"
    );
    let listed = json_of(&signal(&dir, &["deliveries", "list", "--json"], &hook).await);
    assert!(listed.to_string().contains("gen-000002"), "{listed}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_crawl_purged_after_its_delivery_keeps_the_delivery_whole_and_a_recrawling_one_is_refused()
 {
    for (layout, pages) in [
        ("objects", "copy"),
        ("segments", "reference"),
        ("objects", "reference"),
    ] {
        // GIVEN a site of 10 linked pages
        let site = linked_site(10).await;
        let dir = temp_dir(&format!("purge-after-{layout}-{pages}"));
        let data = dir.join("data");
        let data = data.to_str().unwrap();
        let start = site.url("/p/0.html");

        // WHEN it is crawled, to be purged after its delivery
        let mut args = vec!["crawl", &start, "--allow-private-networks", "--json"];
        args.extend(["--layout", layout, "--deliver-pages", pages]);
        args.extend(["--purge-after-delivery", "--data-dir", data]);
        let crawled = trawl(&args, &dir).await;
        assert!(
            crawled.status.success(),
            "{}",
            String::from_utf8_lossy(&crawled.stderr)
        );

        // THEN the run says what the purge removed, and the crawl is gone
        let run = json_of(&crawled);
        assert_eq!(run["purged"]["tasks_deleted"], 10, "{run}");
        assert_eq!(run["purged"]["crawl_deleted"], true, "{run}");
        let crawl_id = run["crawl_id"].as_str().unwrap();
        let shown = trawl(&["tasks", "show", &start, "--data-dir", data], &dir).await;
        assert!(!shown.status.success(), "{shown:?}");
        let status = json_of(&trawl(&["status", "--json", "--data-dir", data], &dir).await);
        assert!(!status.to_string().contains(crawl_id), "{status}");
        // AND its delivery is whole: pages copied into it, or still where the manifest says
        // (kept by the purge), warcio reading each
        let delivery = Path::new(run["delivery"].as_str().unwrap()).to_path_buf();
        let read = warcio_check(&delivery).await;
        let copied = if pages == "copy" { 10 } else { 0 };
        let offsets = if layout == "segments" { 10 } else { 0 };
        assert_eq!(read["responses"], copied, "{read}");
        assert_eq!(read["manifest_offsets"], offsets, "{read}");
        if pages == "reference" {
            let manifest = std::fs::read(delivery.join("manifest-00000.jsonl.gz")).unwrap();
            for line in gz_lines(&manifest) {
                let line: Value = serde_json::from_str(&line).unwrap();
                let object = line["object"].as_str().unwrap();
                assert!(Path::new(object).exists(), "{object} was purged");
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    // WHEN a crawl that recrawls asks for it
    let dir = temp_dir("purge-after-recrawl");
    let data = dir.join("data");
    let args = [
        "crawl",
        "http://127.0.0.1:9/",
        "--recrawl-every",
        "1d",
        "--purge-after-delivery",
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let refused = trawl(&args, &dir).await;

    // THEN it is refused before anything runs, saying why
    assert_one_error_line(&args, &refused, 2, "purge_after", "recrawl");
    let _ = std::fs::remove_dir_all(dir);
}
