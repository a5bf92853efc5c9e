//! Faults between trawl and AWS: the fault-injecting proxy (`trawl-faults`) in front of moto.
//! Races run on single-threaded moto (conditional writes atomic, as on DynamoDB).

use crate::cli::{json_of, trawl_bin};
use crate::site::{Route, Site};
use crate::support::{clients, clients_retrying_at_once, moto, unique};
use aws_sdk_sqs::types::QueueAttributeName;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::stack::create_stack;
use trawl_core::app::{App, Unwired};
use trawl_core::blob::memory::MemoryBlobStore;
use trawl_core::blob::{BlobError, BlobStore, Body, Layout, ObjectMeta};
use trawl_core::crawler::{Crawler, Disposition, Outcome};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::add_tasks;
use trawl_core::queue::WorkQueue;
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::{CrawlStore, HostStore};
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::task::{NewTask, now_ms};
use trawl_embedded::sqlite::SqliteStore;
use trawl_faults::audit::audit;
use trawl_faults::lambda::{Lambda, Plan, split_stack};
use trawl_faults::local::{DB_FILE, OBJECTS_DIR, crawl_to_delivery};
use trawl_faults::ports::{CrashMode, FaultyStore, PortCounts, PortFault, PortFaults, PortMix};
use trawl_faults::{Fault, FaultProxy, Mix};

fn meta() -> ObjectMeta {
    ObjectMeta {
        content_type: "text/html".into(),
        source_url: "http://127.0.0.1/".into(),
        compress: false,
    }
}

#[tokio::test]
async fn the_proxy_answers_retryable_errors_and_loses_responses_of_applied_writes() {
    // GIVEN a bucket on moto, and the SDK pointed at a proxy in front of it
    let moto = moto::shared();
    let stack = create_stack(&clients(&moto.endpoint).await, &unique("faults"))
        .await
        .unwrap();
    let proxy = FaultProxy::start(
        &moto.endpoint,
        1,
        Mix {
            errors: 1.0,
            lost: 0.0,
        },
    )
    .await
    .unwrap();
    let calls = Arc::new(CallCounts::default());
    let through_proxy = S3BlobStore::new(
        clients_retrying_at_once(proxy.endpoint()).await.s3,
        &stack.bucket,
        calls.clone(),
    );
    let direct = S3BlobStore::new(clients(&moto.endpoint).await.s3, &stack.bucket, calls);

    // WHEN every request meets an error
    let body = Bytes::from_static(b"<p>lost</p>");
    let refused = through_proxy
        .put("a", Body::new(body.clone()), &meta())
        .await;

    // THEN the SDK retried, then the error is typed as retryable, and nothing was written
    assert!(
        matches!(refused, Err(BlobError::Unavailable { .. })),
        "{refused:?}"
    );
    let counts = proxy.counts();
    assert!(counts.requests >= 2, "the SDK retries: {counts:?}");
    assert_eq!(counts.errors(), counts.requests);
    assert_eq!(direct.get("a").await.unwrap(), None);

    // WHEN every response is lost instead
    proxy.set_mix(Mix {
        errors: 0.0,
        lost: 1.0,
    });
    let lost = through_proxy
        .put("b", Body::new(body.clone()), &meta())
        .await;

    // THEN the caller sees a retryable error while the write was applied
    assert!(
        matches!(lost, Err(BlobError::Unavailable { .. })),
        "{lost:?}"
    );
    assert_eq!(direct.get("b").await.unwrap(), Some(body.clone()));
    assert!(proxy.counts().lost() >= 1);

    // AND with faults off, requests pass through unchanged
    proxy.set_mix(Mix::NONE);
    let before = proxy.counts();
    through_proxy
        .put("c", Body::new(body.clone()), &meta())
        .await
        .unwrap();
    assert_eq!(through_proxy.get("c").await.unwrap(), Some(body));
    let after = proxy.counts();
    assert_eq!(after.requests, before.requests + 2);
    assert_eq!(after.injected, before.injected);
    assert!(Fault::ALL.iter().all(|f| after.of(*f) == before.of(*f)));
}

/// Pages of the chaos site; seed 0 links to pages 1..=FANOUT, page i to FANOUT·i+1..=FANOUT·i+FANOUT.
/// 30 here (a 100-page run outlasted 10 minutes beside the whole suite on a busy 2-core
/// machine); `make chaos` runs 500.
const PAGES: usize = 30;
const FANOUT: usize = 10;
/// The seed of the proxy's faults: a failing run is replayed with the same faults.
const SEED: u64 = 18;
/// The issue's mix: 10% of AWS requests answered with retryable errors, 5% applied with their
/// response lost.
const AWS_MIX: Mix = Mix {
    errors: 0.10,
    lost: 0.05,
};
/// The bound of the whole run.
const RUN_LIMIT: Duration = Duration::from_secs(900);

/// A site of `n` pages, each different on every request (a refetch has another md5).
async fn volatile_tree(n: usize) -> Site {
    let site = Site::start().await;
    site.route(
        "/robots.txt",
        Route::content("text/plain", "User-agent: *\nAllow: /\n"),
    );
    for i in 0..n {
        let links: String = (FANOUT * i + 1..=FANOUT * i + FANOUT)
            .filter(|j| *j < n)
            .map(|j| format!(r#"<a href="/p/{j}.html">{j}</a> "#))
            .collect();
        site.route(
            &format!("/p/{i}.html"),
            Route::html(format!("<h1>page {i}</h1>{links}")).volatile(),
        );
    }
    site
}

#[tokio::test]
async fn a_cli_crawl_through_aws_faults_completes_with_nothing_lost_and_no_orphan() {
    cli_crawl_through_aws_faults("objects").await;
}

/// The same on the segment layout: a page's body is in a segment object its PUT shares with
/// the pages appended beside it; the audit reads every finished page's records back.
#[tokio::test]
async fn a_cli_crawl_on_segments_through_aws_faults_leaves_no_task_naming_missing_bytes() {
    cli_crawl_through_aws_faults("segments").await;
}

async fn cli_crawl_through_aws_faults(layout: &str) {
    // GIVEN a 500-page site whose pages change on every fetch; the table and bucket on
    // single-threaded moto (conditional writes atomic, as on DynamoDB: the CLI's workers race on
    // them), the queue on the threaded one (a long poll would hold a single-threaded server);
    // and between trawl and moto a proxy that answers 10% of requests with retryable errors and
    // applies 5% but loses their response
    let site = volatile_tree(PAGES).await;
    let moto = moto::single_threaded();
    let queues = moto::shared();
    let stack = create_stack(&clients(&moto.endpoint).await, &unique("chaos"))
        .await
        .unwrap();
    let queue_clients = clients(&queues.endpoint).await;
    let queue = create_stack(&queue_clients, &unique("chaos"))
        .await
        .unwrap();
    // A lost ReceiveMessage answer hides its turns for the visibility timeout: 10 s, not the
    // stack's 30 s, keeps the run short (a turn seen twice meanwhile is fenced by its lease).
    queue_clients
        .sqs
        .set_queue_attributes()
        .queue_url(&queue.queue_url)
        .attributes(QueueAttributeName::VisibilityTimeout, "10")
        .send()
        .await
        .unwrap();
    let proxy = FaultProxy::start_split(&moto.endpoint, Some(&queues.endpoint), SEED, AWS_MIX)
        .await
        .unwrap();
    let crawl_id = unique("chaos");

    // WHEN `trawl --backend aws crawl` runs through the proxy
    let run = Command::new(trawl_bin())
        .args([
            "--backend",
            "aws",
            "crawl",
            &site.url("/p/0.html"),
            "--crawl-id",
            &crawl_id,
            "--per-host",
            "4",
            "--layout",
            layout,
            "--allow-private-networks",
            "--json",
        ])
        .env("AWS_ENDPOINT_URL", proxy.endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("TRAWL_TABLE", &stack.table)
        .env("TRAWL_BUCKET", &stack.bucket)
        .env("TRAWL_QUEUE_URL", &queue.queue_url)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .expect("the chaos run outlasted its bound")
        .unwrap();

    // THEN the run completed (exit 0) although faults outlived the SDK's retries
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary = json_of(&output);
    assert_eq!(summary["counts"]["succeeded"], PAGES, "{summary}");
    let counts = proxy.counts();
    assert!(counts.errors() > 0 && counts.lost() > 0, "{counts:?}");

    // AND, read straight from moto: every task terminal, one manifest line each, no dangling
    // pointer, no orphan, every body's md5 its key's and its task's
    let clients = clients(&moto.endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb, &stack.table, 4, calls.clone());
    let blobs = S3BlobStore::new(clients.s3, &stack.bucket, calls);
    let crawl = CrawlId::parse(&crawl_id).unwrap();
    let audit = audit(&store, &blobs, &Layout::default(), &crawl)
        .await
        .unwrap();
    assert_eq!(audit.tasks, PAGES as u64, "{audit:?}");
    assert!(
        audit.holds(),
        "{audit:?} after {counts:?} in {}s",
        summary["elapsed_seconds"]
    );
    // AND the crawl kept the layout it was created with
    let config = store.get_crawl(&crawl).await.unwrap().unwrap().config;
    assert_eq!(config.storage.layout.name(), layout);
}

#[tokio::test]
async fn a_local_storage_error_that_persists_ends_the_run_in_one_line_and_nothing_is_lost() {
    // GIVEN a site, and a data directory where the crawl's bodies cannot be written (a file
    // stands where their directory goes: a persistent error even for root, like a full disk)
    let site = crate::cli::linked_site(20).await;
    let dir = crate::cli::temp_dir("storage");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let blocker = data.join("crawl=stuck");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let start = site.url("/p/0.html");
    let args = [
        "crawl",
        &start,
        "--crawl-id",
        "stuck",
        "--allow-private-networks",
        "--data-dir",
        data.to_str().unwrap(),
    ];

    // WHEN the crawl runs
    let failed = tokio::time::timeout(Duration::from_secs(120), crate::cli::trawl(&args, &dir))
        .await
        .expect("a persistent storage error must end the run");

    // THEN it ends with exit 1 and one line saying what to do, not a retry loop
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("storage keeps failing") && last.contains("run the same command again"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // AND once the storage is fixed, the same command completes the crawl: nothing was lost
    std::fs::remove_file(&blocker).unwrap();
    let resumed = crate::cli::trawl(&args, &dir).await;
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let status = crate::cli::trawl(
        &["status", "--json", "--data-dir", data.to_str().unwrap()],
        &dir,
    )
    .await;
    let status = json_of(&status);
    assert_eq!(status["crawls"][0]["counts"]["succeeded"], 20, "{status}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Pages of the embedded chaos crawl (`make chaos` runs 10,000).
const LOCAL_PAGES: usize = 200;
/// Runs a crash may end; the runs after them meet errors and latency only.
const CRASHING_RUNS: u64 = 3;

#[tokio::test]
async fn an_embedded_crawl_through_port_faults_and_crashes_completes_with_nothing_lost() {
    // GIVEN a site whose pages change on every fetch, and SQLite + files behind port faults:
    // 2% of calls answer a retryable error, 5% are slowed, and the first runs crash (drop
    // everything, as a process that dies) after a claim, after a body PUT or before a finish
    let site = volatile_tree(LOCAL_PAGES).await;
    let dir = crate::cli::temp_dir("port-chaos");
    let crawl = CrawlId::parse("port-chaos").unwrap();
    let mut config = trawl_domain::crawl::CrawlConfig::default();
    config.fetch.allow_private_networks = true;
    config.politeness.delay_ms = 0;
    config.politeness.per_host = 4;
    // A short lease: the objects crashes leave behind are old enough for the clean-up.
    config.lease_ms = 2_000;

    // WHEN the crawl is run, and run again after each crash, until it is delivered
    let start = site.url("/p/0.html");
    let mut counts = PortCounts::default();
    let mut crashes = 0;
    let mut delivered = None;
    for run in 0..CRASHING_RUNS + 3 {
        let mix = PortMix {
            errors: 0.02,
            latency: 0.05,
            crash: if run < CRASHING_RUNS { 0.01 } else { 0.0 },
        };
        let faults = Arc::new(PortFaults::new(SEED + run, mix, CrashMode::Halt));
        let crawled = crawl_to_delivery(&dir, &crawl, &start, config.clone(), faults.clone(), 4);
        let ended = tokio::select! {
            ended = crawled => Some(ended),
            () = faults.crashed() => None,
        };
        counts.add(&faults.counts());
        match ended {
            Some(ended) => {
                delivered = Some(ended.unwrap());
                break;
            }
            None => crashes += 1,
        }
    }

    // THEN it was delivered after the crashes, every page once
    let (report, _) = delivered.expect("no run delivered");
    let crash_points = PortFault::ALL[2..]
        .iter()
        .map(|f| counts.of(*f))
        .sum::<u64>();
    // Every crashed run met a crash point; concurrent workers may meet two before the run is
    // dropped.
    assert!(crash_points >= crashes, "{crashes} crashes, {counts:?}");
    assert!(crashes > 0 && counts.of(PortFault::Error) > 0, "{counts:?}");
    assert_eq!(report.summary.tasks, LOCAL_PAGES as u64);
    // AND, read without faults: every task terminal and succeeded, one manifest line each, no
    // dangling pointer, no orphan older than the lease, summary = table, every md5 right
    let calls = Arc::new(CallCounts::default());
    let store =
        trawl_embedded::sqlite::SqliteStore::open(dir.join(DB_FILE), calls.clone()).unwrap();
    let blobs = trawl_embedded::fs::FsBlobStore::new(dir.join(OBJECTS_DIR), calls);
    let audit = audit(&store, &blobs, &Layout::default(), &crawl)
        .await
        .unwrap();
    assert_eq!(audit.succeeded, LOCAL_PAGES as u64, "{audit:?}");
    assert!(audit.holds(), "{audit:?} after {counts:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Pages of the crawl through the Lambda handlers (`make chaos` runs 1,000), and its bound.
const LAMBDA_PAGES: usize = 60;
const LAMBDA_RUN_LIMIT: Duration = Duration::from_secs(420);

#[tokio::test]
async fn a_crawl_through_the_lambda_handlers_under_aws_faults_and_duplicate_deliveries_loses_nothing()
 {
    // GIVEN a site whose pages change on every fetch; the table and bucket on single-threaded
    // moto, the queues on the threaded one; the four handlers calling AWS through a proxy that
    // answers 10% of requests with retryable errors and applies 5% but loses their response;
    // and a batch loop playing Lambda that delivers 30% of the messages twice and cuts 10% of
    // the crawler's invocations short (one cut between a turn's hand-back and the send of its
    // next message leaves the host without a message: the sweeper re-issues it a minute later,
    // once the queue is empty); the functions on virtual time (`Plan::idle_skip`)
    let site = volatile_tree(LAMBDA_PAGES).await;
    let moto = moto::single_threaded();
    let queues = moto::shared();
    let tables = create_stack(&clients(&moto.endpoint).await, &unique("lchaos"))
        .await
        .unwrap();
    let queue_clients = clients(&queues.endpoint).await;
    let queued = create_stack(&queue_clients, &unique("lchaos"))
        .await
        .unwrap();
    let stack = split_stack(tables, queued);
    let proxy = FaultProxy::start_split(&moto.endpoint, Some(&queues.endpoint), SEED, AWS_MIX)
        .await
        .unwrap();
    let through_proxy = clients_retrying_at_once(proxy.endpoint()).await;
    let lambda = Lambda {
        clients: &through_proxy,
        mapping: &queue_clients.sqs,
        stack: &stack,
        layout: Layout::default(),
        shards: 4,
    };
    let direct = clients(&moto.endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(direct.dynamodb, &stack.table, 4, calls.clone());
    let blobs = S3BlobStore::new(direct.s3, &stack.bucket, calls);
    let crawl_id = unique("lchaos");
    let crawl = CrawlId::parse(&crawl_id).unwrap();
    let request = serde_json::json!({
        "crawl_id": crawl_id,
        // A short lease (and fetch timeout, which bounds a turn from below): what a cut
        // invocation held is taken over within seconds. Short turns: the one host's work
        // goes through many messages (and so many invocations) instead of a few.
        "config": {
            "lease_ms": 10_000,
            "politeness": {"delay_ms": 0, "per_host": 4, "turn_pages": 5},
            "fetch": {"allow_private_networks": true, "timeout_ms": 3_000},
        },
        "source": {"urls": [site.url("/p/0.html")]},
    });
    let plan = Plan {
        seed: SEED,
        duplicates: 0.30,
        crashes: 0.10,
        crash_within: Duration::from_secs(3),
        concurrency: 2,
        sweep_every: Duration::from_secs(2),
        sweep_on_functions_clock: false,
        delivery_time: Duration::from_secs(5),
        visibility_timeout_s: 5,
        time_limit: LAMBDA_RUN_LIMIT,
        // Virtual time while nothing runs: the lease of a cut invocation (10 s) and the minute
        // after which the sweeper re-issues a turn whose message was never sent pass in a
        // few idle rounds instead of in real time.
        idle_skip: Duration::from_secs(5),
        cold_sweeps: false,
    };

    // WHEN the seeder is invoked and the functions run until the crawl is delivered
    let run = lambda
        .run_to_delivery(request, &crawl, &blobs, &plan)
        .await
        .unwrap();

    // THEN faults and duplicates were met
    let counts = proxy.counts();
    assert!(counts.errors() > 0 && counts.lost() > 0, "{counts:?}");
    assert!(run.duplicates > 0, "{run:?}");
    // AND, read straight from moto: every page succeeded, one manifest line each, no dangling
    // pointer, no orphan, summary = table, every body's md5 its key's and its task's
    let audit = audit(&store, &blobs, &Layout::default(), &crawl)
        .await
        .unwrap();
    assert_eq!(
        audit.succeeded, LAMBDA_PAGES as u64,
        "{audit:?} after {run:?}"
    );
    assert!(audit.holds(), "{audit:?} after {run:?} and {counts:?}");
}

#[tokio::test]
async fn a_turn_claim_whose_answer_was_lost_is_recognised_and_the_turn_runs_at_once() {
    // GIVEN three pages of one host seeded on SQLite, whose next host-record write (the turn's
    // claim) is applied but answers an error, as a write whose response was lost
    let site = volatile_tree(3).await;
    let calls = Arc::new(CallCounts::default());
    let faults = Arc::new(PortFaults::new(SEED, PortMix::default(), CrashMode::Halt));
    let store = FaultyStore::new(
        SqliteStore::in_memory(calls.clone()).unwrap(),
        faults.clone(),
    );
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let mut config = trawl_domain::crawl::CrawlConfig::default();
    config.fetch.allow_private_networks = true;
    config.politeness.delay_ms = 0;
    let crawl = Crawl::new(CrawlId::parse("lost-claim").unwrap(), config, now_ms());
    store.create_crawl(&crawl).await.unwrap();
    let tasks = (0..3)
        .map(|i| NewTask {
            lane: None,
            priority: Default::default(),
            url: CanonicalUrl::parse(&site.url(&format!("/p/{i}.html"))).unwrap(),
            depth: 0,
            parent: None,
            data: None,
        })
        .collect();
    add_tasks(&store, &queue, &crawl, tasks, now_ms())
        .await
        .unwrap();
    let crawler = Crawler::new(
        Arc::new(App::new(store, MemoryBlobStore::new(), queue, calls)),
        Arc::new(Fetcher::new("").unwrap()),
        1,
    );
    faults.lose_answers("put_host", 1);

    // WHEN the host's turn message is processed
    let batch = crawler.queue().receive(10, 0).await.unwrap();
    assert_eq!(batch.len(), 1);
    let results = crawler.process_batch(batch, None).await;

    // THEN the claim's retry recognised the applied claim as its own (by the claimer id it
    // wrote) and the turn ran now, rather than the message waiting out a turn it took for
    // another worker's: every page fetched once, the host handed back
    let fetched = results[0]
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Succeeded { .. }))
        .count();
    assert_eq!(fetched, 3, "{results:?}");
    assert_eq!(results[0].disposition, Disposition::Done);
    assert_eq!(site.total_hits(), 4, "3 pages and robots.txt, each once");
    let host = site.addr().to_string();
    let stored = crawler.store().get_host(&crawl.id, &host).await.unwrap();
    let stored = stored.unwrap();
    assert_eq!((stored.token, stored.turn_until), (1, None), "{stored:?}");
}

#[tokio::test]
async fn a_completion_whose_answer_was_lost_still_sends_its_delivery_notice() {
    // GIVEN a crawl with nothing left to do, on SQLite whose completion write is applied but
    // answers an error, as a write whose response was lost
    let calls = Arc::new(CallCounts::default());
    let faults = Arc::new(PortFaults::new(SEED, PortMix::default(), CrashMode::Halt));
    let store = FaultyStore::new(
        SqliteStore::in_memory(calls.clone()).unwrap(),
        faults.clone(),
    );
    let crawl = Crawl::new(
        CrawlId::parse("lost-completion").unwrap(),
        trawl_domain::crawl::CrawlConfig::default(),
        now_ms(),
    );
    store.create_crawl(&crawl).await.unwrap();
    faults.lose_answers("complete_crawl", 1);
    let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
    let trigger = Arc::new(LocalDeliveryTrigger::default());
    let app = App::new(store, Unwired, queue, calls);
    let sweeper = Sweeper::new(Arc::new(app), trigger.clone(), SweepOptions::new());
    let store = &sweeper.store;
    let budget = || SweepBudget::new(50, Duration::from_secs(60));

    // WHEN the sweeper finds it done
    let report = sweeper
        .sweep_crawl(&crawl, now_ms(), &mut budget())
        .await
        .unwrap();

    // THEN it recognised the applied completion as its own and sent the notice (else the
    // crawl would stay completed and never delivered)
    assert!(report.completed, "{report:?}");
    let notices = trigger.take();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].crawl_id, crawl.id);
    let stored = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    assert_eq!(stored.state, CrawlState::Completed);

    // AND the next sweep, finding it completed, sends none
    let again = sweeper
        .sweep_crawl(&stored, now_ms(), &mut budget())
        .await
        .unwrap();
    assert!(!again.completed);
    assert!(trigger.take().is_empty());
}

/// The three adds that a lost answer and its retry could count twice (`trawl_domain::request`):
/// a page reservation, a report of calls, an offer to a host. Each write of them is applied,
/// then answers an error, as a write whose response was lost; the operation tries it again.
async fn a_lost_answer_then_a_retry_counts_once<S: trawl_core::app::Store>(inner: S) {
    // GIVEN a crawl limited to 10 pages, one URL of a host seeded, on a store that loses the
    // answer of the next write of each add
    let faults = Arc::new(PortFaults::new(SEED, PortMix::default(), CrashMode::Halt));
    let store = FaultyStore::new(inner, faults.clone());
    let mut config = trawl_domain::crawl::CrawlConfig::default();
    config.scope.max_pages = Some(10);
    let crawl = Crawl::new(CrawlId::parse(&unique("lost")).unwrap(), config, now_ms());
    store.create_crawl(&crawl).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let queue = LocalQueue::new(Duration::from_secs(60), calls);
    let task = |path: &str| NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&format!("http://lost.example{path}")).unwrap(),
        depth: 0,
        parent: None,
        data: None,
    };
    add_tasks(&store, &queue, &crawl, vec![task("/a")], now_ms())
        .await
        .unwrap();
    let before = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    for operation in ["reserve_pages", "add_seeded", "add_calls"] {
        faults.lose_answers(operation, 1);
    }

    // WHEN a second URL of the host is added (a page slot reserved, the host offered it) and
    // calls are reported, each write's answer lost once
    let report = add_tasks(&store, &queue, &crawl, vec![task("/b")], now_ms())
        .await
        .unwrap();
    let share = trawl_domain::calls::CallTally::from([(trawl_domain::calls::Call::S3PutObject, 2)]);
    store.add_calls(&crawl.id, &share).await.unwrap();

    // THEN each counted once: one slot more, one URL more offered, the calls once
    assert_eq!(report.accepted, 1, "{report:?}");
    let after = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    assert_eq!(after.pages_reserved, before.pages_reserved + 1);
    let host = store.get_host(&crawl.id, "lost.example").await.unwrap();
    assert_eq!(host.map(|h| (h.seeded, h.offered)), Some((2, 1)));
    let put = trawl_domain::calls::Call::S3PutObject;
    assert_eq!(after.calls[&put], 2);
}

#[tokio::test]
async fn a_lost_answer_then_a_retry_counts_once_in_memory() {
    a_lost_answer_then_a_retry_counts_once(trawl_core::store::memory::MemoryStore::new()).await;
}

#[tokio::test]
async fn a_lost_answer_then_a_retry_counts_once_on_sqlite() {
    let calls = Arc::new(CallCounts::default());
    a_lost_answer_then_a_retry_counts_once(SqliteStore::in_memory(calls).unwrap()).await;
}

/// On moto, through the real SDK: DynamoDB's idempotent transactions (moto honours their
/// token as DynamoDB does once `tests/support/moto_server.py` patched it).
#[tokio::test]
async fn a_lost_answer_then_a_retry_counts_once_on_dynamodb() {
    let moto = moto::shared();
    let (store, _) = crate::support::dynamo_store(&moto.endpoint, 4).await;
    a_lost_answer_then_a_retry_counts_once(store).await;
}
