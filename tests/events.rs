//! Bad input on every entry (#18), through the functions' handlers on moto: each kind of event
//! the crawler, the sweeper and the deliverer take, malformed (wrong types, missing fields, 1 MB
//! payloads, unknown kinds), is refused with a typed error — `InvalidEvent`, or inside a queue
//! batch only the bad record reported back — and changes nothing in the table, the bucket or the
//! queues. A bad record among good ones fails alone while the good ones are handled, and it is
//! not retried forever: after the queue's receives (`MAX_RECEIVE_COUNT`) the redrive policy puts
//! it, intact, in the dead-letter queue, where an operator finds it.

use crate::operator::{Deployed, Functions, acknowledge, deploy, functions};
use crate::site::{Route, Site};
use crate::support::{moto, unique};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::QueueAttributeName;
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use trawl_aws::stack::MAX_RECEIVE_COUNT;
use trawl_core::store::{CrawlStore, HostCounts, HostStore, TaskRecords};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::CrawlState;
use trawl_domain::task::{Status, now_ms};

const SCHEDULE: &str = include_str!("../events/sweeper-schedule.json");

fn megabyte() -> String {
    "x".repeat(1 << 20)
}

/// What a handler could change: every item of the table, every key of the bucket, and the
/// messages of every queue (visible, in flight, delayed). The crawl's tally of the calls it
/// cost (`calls:*`) is left out: a refused request naming a crawl is charged the read that
/// refused it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    items: Vec<String>,
    keys: Vec<String>,
    queues: Vec<Vec<Option<String>>>,
}

/// An attribute value, its maps in key order (moto answers them in any order).
fn canonical(value: &AttributeValue) -> String {
    match value {
        AttributeValue::M(map) => {
            let sorted: BTreeMap<_, _> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            format!("{sorted:?}")
        }
        AttributeValue::L(list) => format!("{:?}", list.iter().map(canonical).collect::<Vec<_>>()),
        other => format!("{other:?}"),
    }
}

async fn snapshot(deployed: &Deployed) -> Snapshot {
    let (clients, stack) = (&deployed.clients, &deployed.stack);
    let mut items: Vec<String> = clients
        .dynamodb
        .scan()
        .table_name(&stack.table)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap()
        .iter()
        .map(|item| {
            let kept: BTreeMap<_, _> = item
                .iter()
                // Call accounting is not state: the calls (`calls:…`) and a report's entry on
                // its report lane (`r:…`, the request ids that make it count once).
                .filter(|(name, _)| !name.starts_with("calls:") && !name.starts_with("r:"))
                .map(|(name, value)| (name, canonical(value)))
                .collect();
            format!("{kept:?}")
        })
        .collect();
    items.sort();
    let keys = clients
        .s3
        .list_objects_v2()
        .bucket(&stack.bucket)
        .into_paginator()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap()
        .iter()
        .flat_map(|page| {
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_owned))
        })
        .collect();
    let mut queues = Vec::new();
    for url in [
        &stack.queue_url,
        &stack.crawl_dead_letter_url,
        &stack.delivery_queue_url,
        &stack.delivery_dead_letter_url,
        &stack.seed_queue_url,
        &stack.seed_dead_letter_url,
    ] {
        let attributes = clients
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let counts = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        queues.push(
            counts
                .iter()
                .map(|name| attributes.attributes().and_then(|a| a.get(name)).cloned())
                .collect(),
        );
    }
    Snapshot {
        items,
        keys,
        queues,
    }
}

/// A loopback site of one page (no links), and a stack on moto with a crawl of that page
/// seeded: the crawl, its task and host records in the table, the host's turn in the crawl queue.
async fn seeded() -> (Site, Deployed, Functions, String) {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    )
    .route("/", Route::html("<h1>the one page</h1>"));
    let deployed = deploy(&moto::shared().endpoint).await;
    let functions = functions(&deployed);
    let crawl = unique("bad");
    let request = json!({
        "crawl_id": crawl,
        "config": {"fetch": {"allow_private_networks": true}},
        "source": {"urls": [site.url("/")]},
    });
    functions
        .seeder
        .dispatch(request, None, now_ms())
        .await
        .unwrap();
    (site, deployed, functions, crawl)
}

/// An SQS record as the event source mapping gives it.
fn record(id: &str, body: &str) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("receipt-{id}"),
        "body": body,
        "eventSource": "aws:sqs",
    })
}

/// A batch of one record per body, the record of body `i` named `bad-{i}`.
fn batch_of(bodies: &[(&str, String)]) -> Value {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, (_, body))| record(&format!("bad-{i:02}"), body))
        .collect();
    json!({"Records": records})
}

/// Asserts that `response` (a batch response) reports every record of `batch_of(bodies)` failed.
fn assert_all_failed(response: &Value, bodies: &[(&str, String)]) {
    let expected: Vec<String> = (0..bodies.len()).map(|i| format!("bad-{i:02}")).collect();
    let cases: Vec<&str> = bodies.iter().map(|(case, _)| *case).collect();
    assert_eq!(failures(response), expected, "{cases:?}");
}

fn failures(response: &Value) -> Vec<String> {
    let mut ids: Vec<String> = response["batchItemFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Asserts a refused event's diagnostic: `InvalidEvent`, in one short message.
fn assert_invalid(case: &str, error: impl Into<Diagnostic>) {
    let diagnostic = error.into();
    assert_eq!(diagnostic.error_type, "InvalidEvent", "{case}");
    assert!(
        !diagnostic.error_message.is_empty() && diagnostic.error_message.len() < 1_000,
        "{case}: a message of {} bytes",
        diagnostic.error_message.len()
    );
}

/// Bodies that are no message of `crawl`'s queues: each a case name and a body.
fn malformed_bodies(crawl: &str, host: &str) -> Vec<(&'static str, String)> {
    let mb = megabyte();
    vec![
        ("an empty body", String::new()),
        ("not JSON", "{not json".to_owned()),
        ("no fields", "{}".to_owned()),
        ("a list", "[1, 2]".to_owned()),
        (
            "a crawl id of the wrong type",
            json!({"crawl_id": 7, "host": host, "epoch": 1, "generation": 0}).to_string(),
        ),
        (
            "a crawl id that is none",
            json!({"crawl_id": "bad id!", "host": host, "epoch": 1}).to_string(),
        ),
        (
            "a 1 MB crawl id",
            json!({"crawl_id": mb, "host": host, "epoch": 1}).to_string(),
        ),
        ("a 1 MB body", mb.clone()),
        (
            "a seed request (another queue's kind)",
            json!({"crawl_id": crawl, "source": {"urls": ["http://example.com/"]}}).to_string(),
        ),
        (
            "an unknown field of 1 MB",
            json!({"crawl_id": crawl, "host": host, "epoch": 1, "generation": 0, "padding": mb})
                .to_string(),
        ),
    ]
}

/// Sends `bodies` to the queue at `url`.
async fn send_all(deployed: &Deployed, url: &str, bodies: &[String]) {
    for body in bodies {
        deployed
            .clients
            .sqs
            .send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
}

/// The bodies of the messages in the queue at `url` (received and left there).
async fn bodies_in(deployed: &Deployed, url: &str) -> Vec<String> {
    let received = deployed
        .clients
        .sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let mut bodies: Vec<String> = received
        .messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect();
    bodies.sort();
    bodies
}

/// Asserts that the dead-letter queue at `url` holds `sent`, as sent.
async fn assert_dead_lettered(deployed: &Deployed, url: &str, sent: &[String]) {
    let mut expected = sent.to_vec();
    expected.sort();
    assert_eq!(bodies_in(deployed, url).await, expected);
}

/// Which function a queue's batches go to.
#[derive(Clone, Copy)]
enum Consumer {
    Crawler,
    Deliverer,
}

/// What the event source mapping does until the queue at `url` is empty (bounded): hands each
/// batch to the function, deletes what it did not report failed; a record reported failed is
/// visible again at once (as if its visibility timeout had passed), so each round is a receive.
async fn drain(deployed: &Deployed, functions: &Functions, url: &str, consumer: Consumer) {
    let sqs = &deployed.clients.sqs;
    for _ in 0..3 * MAX_RECEIVE_COUNT {
        let received = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
        if received.messages().is_empty() {
            return;
        }
        let mut event = SqsEvent::default();
        for m in received.messages() {
            let mut record = SqsMessage::default();
            record.message_id = m.message_id().map(str::to_owned);
            record.receipt_handle = m.receipt_handle().map(str::to_owned);
            record.body = m.body().map(str::to_owned);
            event.records.push(record);
        }
        let payload = serde_json::to_value(&event).unwrap();
        let response = match consumer {
            Consumer::Crawler => serde_json::to_value(
                functions
                    .crawler
                    .handle_payload(LambdaEvent::new(payload, Context::default()))
                    .await
                    .unwrap(),
            ),
            Consumer::Deliverer => serde_json::to_value(
                functions
                    .deliverer
                    .deliver(payload, now_ms(), None)
                    .await
                    .unwrap(),
            ),
        }
        .unwrap();
        acknowledge(sqs, url, &event, &response).await;
    }
    panic!(
        "the queue was not drained in {} receives",
        3 * MAX_RECEIVE_COUNT
    );
}

#[tokio::test]
async fn malformed_crawler_events_are_refused_and_change_nothing() {
    // GIVEN a stack with a crawl seeded
    let (site, deployed, functions, crawl) = seeded().await;
    let host = CanonicalUrl::parse(&site.url("/")).unwrap().host_key();
    let before = snapshot(&deployed).await;
    let hits = site.total_hits();
    let crawler = |event: Value| {
        functions
            .crawler
            .handle_payload(LambdaEvent::new(event, Context::default()))
    };

    // WHEN events that are no SQS batch arrive
    let mb = megabyte();
    let not_batches = [
        ("null", Value::Null),
        ("a list", json!([1, 2])),
        ("no Records", json!({})),
        ("Records not a list", json!({"Records": "x"})),
        ("a record of the wrong type", json!({"Records": [5]})),
        (
            "a message id of the wrong type",
            json!({"Records": [{"messageId": 5, "receiptHandle": "r", "body": "{}"}]}),
        ),
        (
            "a record without its message id",
            json!({"Records": [{"receiptHandle": "r", "body": "{}"}]}),
        ),
        (
            "the sweeper's schedule",
            serde_json::from_str(SCHEDULE).unwrap(),
        ),
        ("a delivery request", json!({"crawl_id": crawl})),
        ("1 MB of Records", json!({"Records": mb})),
    ];
    for (case, event) in not_batches {
        // THEN each is an InvalidEvent
        let Err(e) = crawler(event).await else {
            panic!("{case}: accepted");
        };
        assert_invalid(case, e);
    }

    // WHEN a batch of malformed turn messages arrives
    let mut bodies = malformed_bodies(&crawl, &host);
    bodies.extend([
        (
            "no epoch",
            json!({"crawl_id": crawl, "host": host}).to_string(),
        ),
        (
            "an epoch of the wrong type",
            json!({"crawl_id": crawl, "host": host, "epoch": "1"}).to_string(),
        ),
        (
            "a negative epoch",
            json!({"crawl_id": crawl, "host": host, "epoch": -1}).to_string(),
        ),
        (
            "a host that is no host key",
            json!({"crawl_id": crawl, "host": "a b/c", "epoch": 1}).to_string(),
        ),
        (
            "a 1 MB host",
            json!({"crawl_id": crawl, "host": mb, "epoch": 1}).to_string(),
        ),
    ]);
    let response = crawler(batch_of(&bodies)).await.unwrap();

    // THEN every one of them is reported back (to come again, then go to the dead-letter queue)
    assert_all_failed(&serde_json::to_value(response).unwrap(), &bodies);

    // AND nothing changed in the table, the bucket or the queues; the site saw no request
    assert_eq!(snapshot(&deployed).await, before);
    assert_eq!(site.total_hits(), hits);
}

#[tokio::test]
async fn a_malformed_turn_among_good_ones_fails_alone_and_ends_in_the_dead_letter_queue() {
    // GIVEN the crawl queue holding the seeded host's turn and two malformed messages
    let (site, deployed, functions, crawl) = seeded().await;
    let stack = &deployed.stack;
    let poison = vec![
        "{not json".to_owned(),
        json!({"crawl_id": crawl, "host": "", "epoch": 1}).to_string(),
    ];
    send_all(&deployed, &stack.queue_url, &poison).await;

    // WHEN the crawler takes the queue's batches until the queue is empty (bounded)
    drain(&deployed, &functions, &stack.queue_url, Consumer::Crawler).await;

    // THEN the good turn was handled: its page fetched once and stored
    assert_eq!(site.hits("/"), 1);
    let id = CrawlId::parse(&crawl).unwrap();
    let task_id = CanonicalUrl::parse(&site.url("/")).unwrap().task_id();
    let store = functions.crawler.crawler.store();
    let task = store.get(&id, &task_id).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Succeeded);

    // AND the malformed ones were not retried forever, nor dropped: they are in the dead-letter
    // queue, as sent
    assert_dead_lettered(&deployed, &stack.crawl_dead_letter_url, &poison).await;
    assert!(bodies_in(&deployed, &stack.queue_url).await.is_empty());
}

#[tokio::test]
async fn a_turn_handed_back_on_every_receive_is_sent_anew_and_never_dead_lettered() {
    // GIVEN the seeded host's turn message, its host held by another worker's turn that is
    // renewed before each receive is handled (so the crawler hands the message back each time,
    // about a second later)
    let (site, deployed, functions, crawl) = seeded().await;
    let (sqs, stack) = (&deployed.clients.sqs, &deployed.stack);
    let id = CrawlId::parse(&crawl).unwrap();
    let host = CanonicalUrl::parse(&site.url("/")).unwrap().host_key();
    let store = functions.crawler.crawler.store();
    let hold = || async {
        let stored = store.get_host(&id, &host).await.unwrap().unwrap();
        let (held, _) = stored.claim_turn_by(7, now_ms(), 1_000).unwrap();
        let change = HostCounts::change(Some(&stored), &held);
        assert!(store.put_host(&id, &held, change).await.unwrap());
    };

    // WHEN the crawler is handed it twice as many times as the queue's maxReceiveCount (bounded
    // in time, and in receives: each empty one waits 250 ms, and a loaded moto answers slowly)
    let started = std::time::Instant::now();
    let mut handled = 0;
    for _ in 0..100 * MAX_RECEIVE_COUNT {
        if handled == 2 * MAX_RECEIVE_COUNT || started.elapsed() > Duration::from_secs(120) {
            break;
        }
        let Some(event) = trawl_faults::lambda::receive_batch(sqs, &stack.queue_url)
            .await
            .unwrap()
        else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        hold().await;
        let payload = serde_json::to_value(&event).unwrap();
        let response = functions
            .crawler
            .handle_payload(LambdaEvent::new(payload, Context::default()))
            .await
            .unwrap();
        acknowledge(
            sqs,
            &stack.queue_url,
            &event,
            &serde_json::to_value(response).unwrap(),
        )
        .await;
        handled += 1;
    }
    assert_eq!(
        handled,
        2 * MAX_RECEIVE_COUNT,
        "the turn stopped coming back"
    );

    // THEN the turn never went to the dead-letter queue: it is still in the crawl queue, once
    assert!(
        bodies_in(&deployed, &stack.crawl_dead_letter_url)
            .await
            .is_empty()
    );
    assert_eq!(site.hits("/"), 0);

    // AND once the other turn ends, the crawler takes it and fetches the page, once
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    drain(&deployed, &functions, &stack.queue_url, Consumer::Crawler).await;
    assert_eq!(site.hits("/"), 1);
    let task_id = CanonicalUrl::parse(&site.url("/")).unwrap().task_id();
    let task = store.get(&id, &task_id).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Succeeded);
    assert!(
        bodies_in(&deployed, &stack.crawl_dead_letter_url)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn malformed_sweeper_events_are_invalid_and_change_nothing() {
    // GIVEN a stack with a crawl seeded
    let (site, deployed, functions, crawl) = seeded().await;
    let before = snapshot(&deployed).await;
    let hits = site.total_hits();
    let schedule: Value = serde_json::from_str(SCHEDULE).unwrap();
    let with = |field: &str, value: Value| {
        let mut event = schedule.clone();
        event[field] = value;
        event
    };
    let without = |field: &str| {
        let mut event = schedule.clone();
        event.as_object_mut().unwrap().remove(field);
        event
    };
    let mb = megabyte();
    let bad = [
        ("null", Value::Null),
        ("a list", json!([1])),
        ("a string", json!("sweep")),
        ("no fields", json!({})),
        ("no source", without("source")),
        ("no max_pages", without("max_pages")),
        ("no time budget", without("time_budget_ms")),
        ("another source", with("source", "aws.events".into())),
        ("a source of the wrong type", with("source", 5.into())),
        ("max_pages as a string", with("max_pages", "50".into())),
        ("max_pages negative", with("max_pages", (-1).into())),
        ("max_pages 0", with("max_pages", 0.into())),
        ("max_pages too many", with("max_pages", 1_000_000.into())),
        ("a time budget of 0", with("time_budget_ms", 0.into())),
        (
            "a time budget of the wrong type",
            with("time_budget_ms", json!([1])),
        ),
        (
            "a crawl id that is none",
            with("crawl_id", "bad id!".into()),
        ),
        (
            "a crawl that does not exist",
            with("crawl_id", "nobody".into()),
        ),
        (
            "lost_after_ms as a string",
            with("lost_after_ms", "soon".into()),
        ),
        ("an unknown field", with("shard", 3.into())),
        ("a 1 MB source", with("source", mb.clone().into())),
        ("a 1 MB crawl id", with("crawl_id", mb.clone().into())),
        ("a 1 MB max_pages", with("max_pages", mb.clone().into())),
        ("a 1 MB unknown field", with("padding", mb.clone().into())),
        (
            "an SQS batch (another function's kind)",
            json!({"Records": [record("m", "{}")]}),
        ),
        ("a delivery request", json!({"crawl_id": crawl})),
    ];

    for (case, event) in bad {
        // WHEN a malformed schedule event arrives
        let result = functions.sweeper.sweep(event, None, now_ms()).await;

        // THEN it is an InvalidEvent
        let Err(e) = result else {
            panic!("{case}: accepted");
        };
        assert_invalid(case, e);
    }

    // AND nothing changed in the table, the bucket or the queues
    assert_eq!(snapshot(&deployed).await, before);
    assert_eq!(site.total_hits(), hits);
}

#[tokio::test]
async fn malformed_deliverer_events_are_refused_and_a_bad_record_fails_alone() {
    // GIVEN a stack with a crawl of one page run to completion, its completion notice on the
    // delivery queue, nothing delivered yet
    let (site, deployed, functions, crawl) = seeded().await;
    let stack = &deployed.stack;
    let id = CrawlId::parse(&crawl).unwrap();
    let schedule: Value = serde_json::from_str(SCHEDULE).unwrap();
    for round in 0.. {
        let state = functions
            .sweeper
            .sweeper
            .store
            .get_crawl(&id)
            .await
            .unwrap();
        if state.is_some_and(|c| c.state == CrawlState::Completed) {
            break;
        }
        assert!(round < 50, "the crawl did not complete");
        drain(&deployed, &functions, &stack.queue_url, Consumer::Crawler).await;
        functions
            .sweeper
            .sweep(schedule.clone(), None, now_ms())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = snapshot(&deployed).await;
    let hits = site.total_hits();

    // WHEN direct events that are no delivery request arrive
    let mb = megabyte();
    let direct = [
        ("null", Value::Null),
        ("a list", json!([1, 2])),
        ("no fields", json!({})),
        ("a crawl id of the wrong type", json!({"crawl_id": 5})),
        ("a crawl id that is none", json!({"crawl_id": "bad id!"})),
        (
            "a generation of the wrong type",
            json!({"crawl_id": crawl, "generation": "zero"}),
        ),
        (
            "a negative generation",
            json!({"crawl_id": crawl, "generation": -1}),
        ),
        (
            "a generation not reached",
            json!({"crawl_id": crawl, "generation": 99}),
        ),
        ("a crawl that does not exist", json!({"crawl_id": "nobody"})),
        (
            "an unknown field",
            json!({"crawl_id": crawl, "force": true}),
        ),
        ("a 1 MB crawl id", json!({"crawl_id": mb})),
        (
            "a 1 MB unknown field",
            json!({"crawl_id": crawl, "padding": mb}),
        ),
        ("Records not a list", json!({"Records": "x"})),
        ("a record of the wrong type", json!({"Records": [5]})),
        (
            "the sweeper's schedule",
            serde_json::from_str(SCHEDULE).unwrap(),
        ),
    ];
    for (case, event) in direct {
        // THEN each is an InvalidEvent
        let Err(e) = functions.deliverer.deliver(event, now_ms(), None).await else {
            panic!("{case}: accepted");
        };
        assert_invalid(case, e);
    }

    // WHEN a batch of malformed delivery messages arrives
    let mut bodies = malformed_bodies(&crawl, "");
    bodies.push((
        "a generation of the wrong type",
        json!({"crawl_id": crawl, "generation": "0"}).to_string(),
    ));
    let response = functions
        .deliverer
        .deliver(batch_of(&bodies), now_ms(), None)
        .await
        .unwrap();

    // THEN every one is reported back, and nothing changed in the table, the bucket or the queues
    assert_all_failed(&serde_json::to_value(response).unwrap(), &bodies);
    assert_eq!(snapshot(&deployed).await, before);
    assert_eq!(site.total_hits(), hits);

    // WHEN two malformed messages join the completion notice on the delivery queue, and the
    // deliverer takes its batches until it is empty
    let poison = vec![
        "{not json".to_owned(),
        json!({"crawl_id": "nobody"}).to_string(),
    ];
    send_all(&deployed, &stack.delivery_queue_url, &poison).await;
    drain(
        &deployed,
        &functions,
        &stack.delivery_queue_url,
        Consumer::Deliverer,
    )
    .await;

    // THEN the crawl was delivered, and the malformed messages are in the dead-letter queue
    let keys = snapshot(&deployed).await.keys;
    assert!(
        keys.iter()
            .any(|k| k.contains(&format!("crawl={crawl}/")) && k.ends_with("/_SUCCESS")),
        "{keys:?}"
    );
    assert_dead_lettered(&deployed, &stack.delivery_dead_letter_url, &poison).await;
}
