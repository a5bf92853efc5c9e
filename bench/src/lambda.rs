//! Section 3: the crawler Lambda's release binary, run as Lambda runs it. A minimal Lambda
//! Runtime API on 127.0.0.1 hands it SQS events, each the current turn message of the fixture
//! site's one host, whose turns fetch 10 pages (`politeness.turn_pages`); the function talks to
//! moto, fetches the site, and queues the host's next turn on the SQS queue, from which the
//! harness takes the next event (as the event source mapping would). Ready = the first
//! `GET /invocation/next` after spawn.

use crate::error::{BenchResult, Context, check};
use crate::local::fixture_config;
use crate::machine;
use crate::moto::{Moto, stack};
use crate::report::Figure;
use crate::site::Site;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use trawl_aws::sqs::SqsQueue;
use trawl_core::frontier::seed_tasks;
use trawl_core::queue::{WorkMessage, WorkQueue};
use trawl_core::store::{CrawlStore, TaskRecords};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::Crawl;
use trawl_domain::task::{NewTask, Status, now_ms};
use trawl_faults::hosts_site::HostsSite;

const SECTION: &str = "Lambda worker";
/// Each function's binary, as deployed: built on its own (its own features), started cold.
const FUNCTIONS: &str = "Functions";
/// Each binary's size before issue 27 (commit 98fcedb), in MB as recorded then: every function
/// linked all of trawl-core (the HTML and XPath engines, the HTTP client), built in one
/// workspace build with `release` = thin LTO, one codegen unit. Printed beside today's; an old
/// commit is not rebuilt here. Start to ready was not measured then.
const BEFORE_MB: [(&str, f64); 5] = [
    ("seeder", 18.4),
    ("crawler", 20.6),
    ("sweeper", 16.5),
    ("deliverer", 17.2),
    ("trawl", 26.5),
];
const API: &str = "/2018-06-01/runtime";
/// Pages per invocation: one turn of the host, `politeness.turn_pages`.
const BATCH: usize = 10;
/// Host turns in one wide invocation: a full batch as the template deploys the crawler
/// (`BatchSize` and `BatchConcurrency`, `infra/template.yaml`), each host its own loopback
/// address.
const WIDE_TURNS: usize = 50;
/// Requests timed for the SDK's own CPU per request (10 ms clock ticks: about 100 of them).
const SDK_REQUESTS: usize = 1_000;
/// Memory size the function is told it has (it only reports it).
const MEMORY_MB: &str = "128";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for the host's next turn message to show up on the queue.
const NEXT_TURN_TIMEOUT: Duration = Duration::from_secs(20);

/// An invocation's answer: request id and body (`error` set for an error report).
struct Answer {
    id: String,
    body: Bytes,
    error: bool,
}

/// The fake Runtime API's state.
struct RuntimeApi {
    events: Mutex<mpsc::Receiver<(String, String)>>,
    answers: mpsc::Sender<Answer>,
    first_next: OnceLock<Instant>,
}

impl RuntimeApi {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        let reply = |status: StatusCode, body: Bytes| {
            let mut r = Response::new(Full::new(body));
            *r.status_mut() = status;
            r
        };
        if path == format!("{API}/invocation/next") {
            let _ = self.first_next.set(Instant::now());
            // Long poll, as Lambda does, until the harness has an event.
            let Some((id, event)) = self.events.lock().await.recv().await else {
                return reply(StatusCode::GONE, Bytes::new());
            };
            let deadline = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
                + 60_000;
            let mut response = reply(StatusCode::OK, Bytes::from(event));
            let headers = [
                ("lambda-runtime-aws-request-id", id),
                ("lambda-runtime-deadline-ms", deadline.to_string()),
                (
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:123456789012:function:trawl-crawler".to_owned(),
                ),
                ("content-type", "application/json".to_owned()),
            ];
            for (name, value) in headers {
                if let Ok(v) = value.parse() {
                    response.headers_mut().insert(name, v);
                }
            }
            return response;
        }
        let Some(rest) = path.strip_prefix(&format!("{API}/invocation/")) else {
            // Init errors and anything else: record as an error answer.
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let _ = self
                .answers
                .send(Answer {
                    id: String::new(),
                    body,
                    error: true,
                })
                .await;
            return reply(StatusCode::ACCEPTED, Bytes::new());
        };
        let (id, kind) = rest.split_once('/').unwrap_or((rest, ""));
        let id = id.to_owned();
        let error = kind != "response";
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let _ = self.answers.send(Answer { id, body, error }).await;
        reply(StatusCode::ACCEPTED, Bytes::new())
    }
}

/// A Runtime API on 127.0.0.1 for one function process: events go in, answers come out; it
/// stops when dropped.
struct LocalRuntime {
    addr: std::net::SocketAddr,
    api: Arc<RuntimeApi>,
    events: mpsc::Sender<(String, String)>,
    answers: mpsc::Receiver<Answer>,
    server: tokio::task::JoinHandle<()>,
}

impl LocalRuntime {
    async fn start() -> BenchResult<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .step("bind runtime api")?;
        let addr = listener.local_addr().step("runtime api address")?;
        let (events, event_rx) = mpsc::channel(1);
        let (answer_tx, answers) = mpsc::channel(4);
        let api = Arc::new(RuntimeApi {
            events: Mutex::new(event_rx),
            answers: answer_tx,
            first_next: OnceLock::new(),
        });
        let server = tokio::spawn(serve(listener, Arc::clone(&api)));
        Ok(Self {
            addr,
            api,
            events,
            answers,
            server,
        })
    }
}

impl Drop for LocalRuntime {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(listener: TcpListener, api: Arc<RuntimeApi>) {
    while let Ok((stream, _)) = listener.accept().await {
        let api = Arc::clone(&api);
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let api = Arc::clone(&api);
                async move { Ok::<_, std::convert::Infallible>(api.handle(req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[derive(Serialize)]
struct SqsRecord {
    #[serde(rename = "messageId")]
    message_id: String,
    #[serde(rename = "receiptHandle")]
    receipt_handle: String,
    body: String,
    attributes: serde_json::Value,
    #[serde(rename = "messageAttributes")]
    message_attributes: serde_json::Value,
    #[serde(rename = "eventSource")]
    event_source: &'static str,
    #[serde(rename = "eventSourceARN")]
    event_source_arn: &'static str,
    #[serde(rename = "awsRegion")]
    aws_region: &'static str,
}

/// An SQS event of the given work messages.
fn event(messages: &[WorkMessage], batch: usize) -> BenchResult<String> {
    let records = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Ok(SqsRecord {
                message_id: format!("bench-{batch}-{i}"),
                receipt_handle: format!("bench-receipt-{batch}-{i}"),
                body: serde_json::to_string(m).step("encode message")?,
                attributes: serde_json::json!({ "ApproximateReceiveCount": "1" }),
                message_attributes: serde_json::json!({}),
                event_source: "aws:sqs",
                event_source_arn: "arn:aws:sqs:us-east-1:123456789012:trawl-crawl",
                aws_region: "us-east-1",
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;
    serde_json::to_string(&serde_json::json!({ "Records": records })).step("encode event")
}

/// One cold start of the function and `batches` invocations.
struct Spawn {
    init_cpu_ms: f64,
    cpu_per_batch_ms: f64,
    wall_per_batch_ms: f64,
    peak_rss_mib: f64,
}

#[allow(clippy::too_many_arguments)]
async fn spawn_once(
    binary: &Path,
    moto: &Moto,
    stack: &crate::moto::Stack,
    site: &Site,
    run: usize,
    batches: usize,
) -> BenchResult<Spawn> {
    // A crawl of its own with the first batches × 10 pages seeded, turns of 10 pages. The
    // host's first turn message is not sent: the first event carries it.
    if batches * BATCH > site.pages {
        return Err(check(
            "lambda worker",
            format!("{batches} turns of {BATCH} pages need a site of that many pages"),
        ));
    }
    let mut config = fixture_config();
    config.politeness.turn_pages = BATCH as u32;
    let crawl = Crawl::new(
        CrawlId::parse(&format!("lambda-{run}")).step("crawl id")?,
        config,
        now_ms(),
    );
    stack
        .probe
        .create_crawl(&crawl)
        .await
        .step("create crawl")?;
    let urls: Vec<CanonicalUrl> = (0..batches * BATCH)
        .map(|i| CanonicalUrl::parse(&site.page_url(i)))
        .collect::<Result<_, _>>()
        .step("page urls")?;
    let tasks: Vec<NewTask> = urls
        .iter()
        .map(|u| NewTask {
            lane: None,
            priority: Default::default(),
            url: u.clone(),
            depth: 0,
            parent: None,
            data: None,
        })
        .collect();
    let (seeded, turns) = seed_tasks(&stack.probe, &crawl, tasks, now_ms())
        .await
        .step("seed")?;
    let first = match turns.as_slice() {
        [first] if seeded.accepted == (batches * BATCH) as u64 => first.clone(),
        _ => {
            return Err(check(
                "lambda seed",
                format!("{seeded:?}, {} turn messages", turns.len()),
            ));
        }
    };

    let mut runtime = LocalRuntime::start().await?;
    let spawned = Instant::now();
    let child = start(binary, "crawler", runtime.addr, moto, stack, 1)?;
    let pid = child.id().to_string();
    let result = drive(
        &runtime.api,
        &runtime.events,
        &mut runtime.answers,
        Turns {
            queue: &stack.queue,
            crawl: &crawl.id,
            first,
        },
        &pid,
        spawned,
        batches,
    )
    .await;
    ended(child, result, stack, &crawl, batches * BATCH).await
}

/// One cold start of the function and one invocation of `WIDE_TURNS` host turns of `BATCH`
/// pages each, all run at once: a full batch as deployed, its CPU, wall time and peak memory.
async fn wide_once(
    binary: &Path,
    moto: &Moto,
    stack: &crate::moto::Stack,
    run: usize,
) -> BenchResult<Spawn> {
    let pages: trawl_faults::hosts_site::Pages = Arc::new(|_, path: &str| {
        let i: usize = path
            .strip_prefix("/p/")?
            .strip_suffix(".html")?
            .parse()
            .ok()?;
        (i < BATCH).then(|| String::from_utf8_lossy(&crate::site::page(i, BATCH)).into_owned())
    });
    let site = HostsSite::start(WIDE_TURNS, pages)
        .await
        .step("start the hosts site")?;
    let mut config = fixture_config();
    config.scope.allowed_domains = (0..WIDE_TURNS)
        .map(|i| trawl_faults::hosts_site::ip(i).to_string())
        .collect();
    config.politeness.turn_pages = BATCH as u32;
    let crawl = Crawl::new(
        CrawlId::parse(&format!("lambda-wide-{run}")).step("crawl id")?,
        config,
        now_ms(),
    );
    stack
        .probe
        .create_crawl(&crawl)
        .await
        .step("create crawl")?;
    let tasks = (0..WIDE_TURNS)
        .flat_map(|h| (0..BATCH).map(move |i| (h, i)))
        .map(|(h, i)| {
            Ok(NewTask {
                lane: None,
                priority: Default::default(),
                url: CanonicalUrl::parse(&site.url(h, &format!("/p/{i}.html"))).step("page url")?,
                depth: 0,
                parent: None,
                data: None,
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;
    let (seeded, turns) = seed_tasks(&stack.probe, &crawl, tasks, now_ms())
        .await
        .step("seed")?;
    if seeded.accepted != (WIDE_TURNS * BATCH) as u64 || turns.len() != WIDE_TURNS {
        return Err(check(
            "lambda wide seed",
            format!("{seeded:?}, {} turn messages", turns.len()),
        ));
    }

    let mut runtime = LocalRuntime::start().await?;
    let spawned = Instant::now();
    let child = start(binary, "crawler", runtime.addr, moto, stack, WIDE_TURNS)?;
    let pid = child.id().to_string();
    let result = async {
        wait_ready(&runtime.api, &mut runtime.answers, spawned, "crawler").await?;
        let init_cpu = machine::cpu_seconds(&pid)?;
        let id = "bench-wide".to_owned();
        let started = Instant::now();
        runtime
            .events
            .send((id.clone(), event(&turns, 0)?))
            .await
            .step("hand over event")?;
        let answer = tokio::time::timeout(INVOCATION_TIMEOUT, runtime.answers.recv())
            .await
            .step("invocation")?
            .ok_or_else(|| check("invocation", "runtime api closed"))?;
        let wall = started.elapsed().as_secs_f64();
        let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let failures = response["batchItemFailures"].as_array().map_or(0, Vec::len);
        if answer.error || answer.id != id || failures > 0 {
            return Err(check(
                "wide invocation",
                format!("{}: {}", answer.id, String::from_utf8_lossy(&answer.body)),
            ));
        }
        Ok(Spawn {
            init_cpu_ms: init_cpu * 1000.0,
            cpu_per_batch_ms: (machine::cpu_seconds(&pid)? - init_cpu) * 1000.0,
            wall_per_batch_ms: wall * 1000.0,
            peak_rss_mib: machine::peak_rss_mib(&pid).unwrap_or(f64::NAN),
        })
    }
    .await;
    ended(child, result, stack, &crawl, WIDE_TURNS * BATCH).await
}

/// Stops the function (ours, by its own handle: it never exits by itself) and hands back what
/// its run measured, once `pages` of the crawl succeeded.
async fn ended(
    mut child: std::process::Child,
    result: BenchResult<Spawn>,
    stack: &crate::moto::Stack,
    crawl: &Crawl,
    pages: usize,
) -> BenchResult<Spawn> {
    let _ = child.kill();
    let _ = child.wait();
    let spawn = result?;
    let counts = stack.probe.counts(&crawl.id).await.step("counts")?;
    let succeeded = counts.get(&Status::Succeeded).copied().unwrap_or(0);
    if succeeded < pages as u64 {
        return Err(check(
            "lambda worker",
            format!("{succeeded} of {pages} pages succeeded: {counts:?}"),
        ));
    }
    Ok(spawn)
}

/// Starts function `name`'s binary as Lambda would, against the Runtime API at `addr`, with the
/// variables its settings require (`trawl_aws::settings`) pointing at the moto stack.
fn start(
    binary: &Path,
    name: &str,
    addr: std::net::SocketAddr,
    moto: &Moto,
    stack: &crate::moto::Stack,
    concurrency: usize,
) -> BenchResult<std::process::Child> {
    use trawl_aws::settings::{
        ENV_BUCKET, ENV_CONCURRENCY, ENV_DELIVERY_QUEUE_URL, ENV_QUEUE_URL, ENV_SEED_QUEUE_URL,
        ENV_TABLE,
    };
    Command::new(binary)
        .env_clear()
        .envs([
            ("AWS_LAMBDA_RUNTIME_API", addr.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", format!("trawl-{name}")),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", MEMORY_MB.to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
            ("AWS_ENDPOINT_URL", moto.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "test".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("AWS_CONFIG_FILE", "/dev/null".to_owned()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_owned()),
            (ENV_TABLE, stack.table.clone()),
            (ENV_BUCKET, stack.bucket.clone()),
            (ENV_QUEUE_URL, stack.queue_url.clone()),
            (ENV_DELIVERY_QUEUE_URL, stack.delivery_queue_url.clone()),
            (ENV_SEED_QUEUE_URL, stack.seed_queue_url.clone()),
            ("RUST_LOG", "warn".to_owned()),
            (ENV_CONCURRENCY, concurrency.to_string()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .step(&format!("start the {name} binary"))
}

/// Spawn to the first `GET /invocation/next` of function `name`, then killed.
async fn ready_once(
    binary: &Path,
    name: &str,
    moto: &Moto,
    stack: &crate::moto::Stack,
) -> BenchResult<f64> {
    let mut runtime = LocalRuntime::start().await?;
    let spawned = Instant::now();
    let mut child = start(binary, name, runtime.addr, moto, stack, 1)?;
    let ready = wait_ready(&runtime.api, &mut runtime.answers, spawned, name).await;
    let _ = child.kill();
    let _ = child.wait();
    ready
}

/// Milliseconds from `spawned` to the function's first `GET /invocation/next`.
async fn wait_ready(
    api: &RuntimeApi,
    answers: &mut mpsc::Receiver<Answer>,
    spawned: Instant,
    name: &str,
) -> BenchResult<f64> {
    loop {
        if let Some(at) = api.first_next.get() {
            return Ok((*at - spawned).as_secs_f64() * 1000.0);
        }
        if let Ok(answer) = answers.try_recv() {
            return Err(check(
                &format!("{name} init"),
                String::from_utf8_lossy(&answer.body).into_owned(),
            ));
        }
        if spawned.elapsed() > READY_TIMEOUT {
            return Err(check(name, "never asked for an invocation"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Binary size and start to ready of each function, `runs` cold starts each (section
/// `functions`; `make bench` builds each function alone with the `lambda-release` profile, as
/// it is deployed, so the size is that of what it links), each size beside its `BEFORE_MB`;
/// `cli` (the trawl binary, when built) is sized too.
pub async fn functions(
    binaries: &[(&str, PathBuf)],
    cli: Option<&Path>,
    runs: usize,
) -> BenchResult<Vec<Figure>> {
    let moto = Moto::start(true)?;
    let stack = stack(&moto.endpoint, "bench-functions").await?;
    let mut figures = Vec::new();
    for (name, binary) in binaries {
        figures.extend(sizes(name, binary)?);
        let mut ready = Vec::new();
        for _ in 0..runs {
            ready.push(ready_once(binary, name, &moto, &stack).await?);
        }
        figures.push(
            Figure::of(FUNCTIONS, format!("{name}: start to ready"), "ms", &ready).at_most(50.0),
        );
    }
    if let Some(cli) = cli {
        figures.extend(sizes("trawl", cli)?);
    }
    Ok(figures)
}

/// The size of `binary` (stripped), after the one recorded before issue 27.
fn sizes(name: &str, binary: &Path) -> BenchResult<Vec<Figure>> {
    let bytes = std::fs::metadata(binary)
        .step(&format!("{name} binary"))?
        .len() as f64;
    let before = BEFORE_MB.iter().find(|(n, _)| *n == name).map(|&(_, mb)| {
        Figure::single(
            FUNCTIONS,
            format!("{name}: binary size before (98fcedb)"),
            "MB",
            mb,
        )
    });
    let now = Figure::single(FUNCTIONS, format!("{name}: binary size"), "MB", bytes / 1e6);
    Ok(before.into_iter().chain([now]).collect())
}

/// Where the invocations' turn messages come from: the first one, then the queue.
struct Turns<'a> {
    queue: &'a SqsQueue,
    crawl: &'a CrawlId,
    first: WorkMessage,
}

impl Turns<'_> {
    /// The host's next turn, queued by the last invocation: received from the queue and deleted
    /// (the event source mapping's part). Messages of other crawls (an earlier run's last turn)
    /// are deleted on the way.
    async fn next(&self) -> BenchResult<WorkMessage> {
        let started = Instant::now();
        while started.elapsed() < NEXT_TURN_TIMEOUT {
            let received = self.queue.receive(10, 1_000).await.step("receive turn")?;
            if received.is_empty() {
                continue;
            }
            let receipts: Vec<String> = received.iter().map(|r| r.receipt.clone()).collect();
            self.queue.ack(&receipts).await.step("delete turn")?;
            let mut ours = Vec::new();
            for r in &received {
                let message: WorkMessage = serde_json::from_str(&r.body).step("turn message")?;
                if message.crawl_id == *self.crawl {
                    ours.push(message);
                }
            }
            if let Some(next) = ours.into_iter().max_by_key(|m| m.epoch) {
                return Ok(next);
            }
        }
        Err(check(
            "lambda worker",
            "the host's next turn was never queued",
        ))
    }
}

async fn drive(
    api: &RuntimeApi,
    events: &mpsc::Sender<(String, String)>,
    answers: &mut mpsc::Receiver<Answer>,
    turns: Turns<'_>,
    pid: &str,
    spawned: Instant,
    batches: usize,
) -> BenchResult<Spawn> {
    wait_ready(api, answers, spawned, "crawler").await?;
    let init_cpu = machine::cpu_seconds(pid)?;
    // Wall time of the invocations alone (the harness's receive of the next turn excluded).
    let mut wall = 0.0;
    let mut turn = turns.first.clone();
    for n in 0..batches {
        if n > 0 {
            turn = turns.next().await?;
        }
        let id = format!("bench-invocation-{n}");
        let event = event(std::slice::from_ref(&turn), n)?;
        let started = Instant::now();
        events
            .send((id.clone(), event))
            .await
            .step("hand over event")?;
        let answer = tokio::time::timeout(INVOCATION_TIMEOUT, answers.recv())
            .await
            .step("invocation")?
            .ok_or_else(|| check("invocation", "runtime api closed"))?;
        wall += started.elapsed().as_secs_f64();
        let response: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let failures = response["batchItemFailures"].as_array().map_or(0, Vec::len);
        if answer.error || answer.id != id || failures > 0 {
            return Err(check(
                "invocation",
                format!("{}: {}", answer.id, String::from_utf8_lossy(&answer.body)),
            ));
        }
    }
    let cpu = machine::cpu_seconds(pid)? - init_cpu;
    Ok(Spawn {
        init_cpu_ms: init_cpu * 1000.0,
        cpu_per_batch_ms: cpu / batches as f64 * 1000.0,
        wall_per_batch_ms: wall / batches as f64 * 1000.0,
        peak_rss_mib: machine::peak_rss_mib(pid).unwrap_or(f64::NAN),
    })
}

/// CPU this process spends per AWS request made through the SDK and the DynamoDB adapter (a
/// GetItem answered "no such item" by moto, over a kept-alive connection): the floor under the
/// crawler's CPU per page, since a fresh page takes about three requests.
async fn sdk_request_cpu<S: CrawlStore>(store: &S, requests: usize) -> BenchResult<f64> {
    let crawl = CrawlId::parse("bench-sdk").step("crawl id")?;
    store.get_crawl(&crawl).await.step("warm-up GetItem")?;
    let before = machine::cpu_seconds("self")?;
    for _ in 0..requests {
        store.get_crawl(&crawl).await.step("GetItem")?;
    }
    Ok((machine::cpu_seconds("self")? - before) / requests as f64 * 1_000.0)
}

/// What the cost model needs from section 3.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LambdaResult {
    pub cpu_per_page_s: f64,
    pub wall_per_page_s: f64,
    pub peak_rss_mib: f64,
}

pub async fn run(
    binary: &Path,
    site: &Site,
    runs: usize,
    batches: usize,
) -> BenchResult<(Vec<Figure>, LambdaResult)> {
    let moto = Moto::start(true)?;
    let stack = stack(&moto.endpoint, "bench-lambda").await?;
    let mut spawns = Vec::new();
    for run in 0..runs {
        eprintln!(
            "  Lambda worker: cold start {}/{runs}, {batches} turns of {BATCH} pages",
            run + 1
        );
        spawns.push(spawn_once(binary, &moto, &stack, site, run, batches).await?);
    }
    let mut wide = Vec::new();
    for run in 0..runs {
        eprintln!(
            "  Lambda worker: cold start {}/{runs}, one invocation of {WIDE_TURNS} turns of {BATCH} pages",
            run + 1
        );
        wide.push(wide_once(binary, &moto, &stack, run).await?);
    }
    let mut sdk = Vec::new();
    for _ in 0..runs {
        sdk.push(sdk_request_cpu(&stack.store, SDK_REQUESTS).await?);
    }
    let of = |f: fn(&Spawn) -> f64| spawns.iter().map(f).collect::<Vec<_>>();
    let cpu = of(|s| s.cpu_per_batch_ms);
    let wall = of(|s| s.wall_per_batch_ms);
    let rss = of(|s| s.peak_rss_mib);
    let mut figures = vec![
        Figure::of(
            SECTION,
            "CPU to ready (10 ms clock ticks)",
            "ms",
            &of(|s| s.init_cpu_ms),
        ),
        Figure::of(
            SECTION,
            format!("CPU per invocation: a turn of {BATCH} pages (loopback site, moto)"),
            "ms",
            &cpu,
        ),
        Figure::of(
            SECTION,
            format!("wall time per invocation ({BATCH} pages)"),
            "ms",
            &wall,
        ),
        Figure::of(
            SECTION,
            format!("peak RSS after {batches} invocations"),
            "MiB",
            &rss,
        )
        .at_most(64.0),
        Figure::of(
            SECTION,
            "AWS SDK CPU per request (a GetItem on moto, from this process)",
            "ms",
            &sdk,
        ),
    ];
    let wide_of = |f: fn(&Spawn) -> f64| wide.iter().map(f).collect::<Vec<_>>();
    let wide_cpu_per_page = wide_of(|s| s.cpu_per_batch_ms / (WIDE_TURNS * BATCH) as f64);
    figures.extend([
        Figure::of(
            SECTION,
            format!("a full batch: CPU of one invocation of {WIDE_TURNS} turns of {BATCH} pages ({WIDE_TURNS} hosts)"),
            "ms",
            &wide_of(|s| s.cpu_per_batch_ms),
        ),
        Figure::of(SECTION, "… CPU per page", "ms", &wide_cpu_per_page),
        Figure::of(
            SECTION,
            "… wall time (loopback pages, no politeness delay)",
            "ms",
            &wide_of(|s| s.wall_per_batch_ms),
        ),
        Figure::of(
            SECTION,
            "… peak RSS (the template gives the crawler 512 MB)",
            "MiB",
            &wide_of(|s| s.peak_rss_mib),
        )
        .at_most(256.0),
    ]);
    let median = |v: &[f64]| Figure::of(SECTION, "", "", v).median;
    Ok((
        figures,
        LambdaResult {
            // The cost model prices a full batch: its CPU per page, not a lone turn's.
            cpu_per_page_s: median(&wide_cpu_per_page) / 1000.0,
            wall_per_page_s: median(&wall) / 1000.0 / BATCH as f64,
            peak_rss_mib: median(&rss),
        },
    ))
}
