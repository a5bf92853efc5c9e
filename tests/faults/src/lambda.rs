//! The four functions' handlers run in-process as Lambda runs them, every AWS call of theirs
//! through the fault proxy, while this module plays Lambda's own part:
//! - the crawl queue's event source mapping (the regular queue's only: the runs' crawls give no
//!   priorities, so nothing goes to the priority queue): batches of up to 10 messages handed to the crawler
//!   as an SQS event, a few invocations at once; the records not reported in
//!   `batchItemFailures` deleted; every record of an invocation that failed (returned an error,
//!   or was cut short as a timeout or a crash cuts it) left for the visibility timeout;
//! - SQS's at-least-once delivery: a seeded share of messages delivered twice, the copy in the
//!   same batch or as a message of its own in a later one (the turn's fencing must make it
//!   harmless);
//! - the sweeper's schedule, and the delivery queue's mapping to the deliverer, each
//!   invocation of it given a short time (a longer delivery goes on through its
//!   continuations).
//!
//! The mapping itself talks to the queues directly, as Lambda's pollers are not the functions'
//! calls. A run is bounded in time; it ends once generation 0 of the crawl is delivered.
//!
//! The functions read the time from one clock of the run's own: the wall clock, or, with
//! [`Plan::idle_skip`], a clock that moves on by that much whenever Lambda has nothing to hand
//! them, so that what they wait for (a cut invocation's lease, a lost message's window, a
//! failed page's next attempt) comes on virtual time. The queues' own timeouts stay real.

use crate::splitmix64;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trawl_aws::app::{AwsPorts, NoBlobs, NoQueue, Wiring};
use trawl_aws::clients::Clients;
use trawl_aws::manifest::S3Manifests;
use trawl_aws::settings::{
    CrawlerSettings, DEFAULT_PER_HOST, DelivererSettings, PriorityQueueSettings, SeederSettings,
    SweeperSettings,
};
use trawl_aws::sqs::{SqsDeliveryTrigger, SqsSeedQueue};
use trawl_aws::stack::Stack;
use trawl_core::blob::{BlobStore, Layout};
use trawl_core::clock::{Clock, SkewedClock};
use trawl_core::crawler::Crawler;
use trawl_core::deliver::{Deliverer, DeliveryLimits, SUCCESS_FILE, delivery_id};
use trawl_core::fetch::Fetcher;
use trawl_core::seed::{SeedDefaults, Seeder};
use trawl_core::sweep::{SweepOptions, Sweeper};
use trawl_domain::calls::CallCounts;
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Millis, now_ms};

/// The schedule's input (the template's, `events/sweeper-schedule.json`).
const SWEEP_EVENT: &str = include_str!("../../../events/sweeper-schedule.json");
/// Crawl hosts handled at once by one crawler invocation (the function's default).
const CRAWLER_CONCURRENCY: usize = 4;
/// Seed invocations tried before the run gives up (a direct invoke is retried by its caller).
const SEED_ATTEMPTS: u32 = 50;
/// The pause of the loop when no queue had anything for it.
const IDLE: Duration = Duration::from_millis(200);
/// How often a failed copy of a duplicate comes back at most.
const DUPLICATE_DELAY_S: i32 = 2;

/// The four handlers, wired as their `main.rs` wire them, on one stack.
pub struct Functions {
    pub seeder: seeder::handler::Handler<AwsPorts, SqsSeedQueue>,
    pub crawler: crawler::handler::Handler<AwsPorts>,
    pub sweeper: sweeper::handler::Handler<NoBlobs>,
    pub deliverer: deliverer::handler::Handler<NoQueue, SqsDeliveryTrigger>,
}

impl Functions {
    /// The handlers on `stack` through `clients`, with `shards` status-index shards, keys
    /// under `layout`, fetching with `fetcher`, counting their calls in `calls`, reading the
    /// time from `clock`: each App built from its function's settings, as `main.rs` builds it
    /// from the environment.
    pub fn new(
        clients: &Clients,
        stack: &Stack,
        layout: &Layout,
        shards: u32,
        fetcher: Arc<Fetcher>,
        calls: Arc<CallCounts>,
        clock: Arc<dyn Clock>,
    ) -> Functions {
        let prefix = layout.prefix.clone();
        let priority_queue = Some(PriorityQueueSettings {
            url: stack.priority_queue_url.clone(),
            from: trawl_domain::priority::TurnQueue::FROM_DEFAULT,
        });
        let seeder = SeederSettings {
            table: stack.table.clone(),
            shards,
            bucket: stack.bucket.clone(),
            prefix: prefix.clone(),
            queue_url: stack.queue_url.clone(),
            priority_queue: priority_queue.clone(),
            seed_queue_url: stack.seed_queue_url.clone(),
            default_user_agent: None,
            default_per_host: DEFAULT_PER_HOST,
        };
        let crawler = CrawlerSettings {
            table: stack.table.clone(),
            shards,
            bucket: stack.bucket.clone(),
            prefix: prefix.clone(),
            queue_url: stack.queue_url.clone(),
            priority_queue: priority_queue.clone(),
            concurrency: CRAWLER_CONCURRENCY,
            default_user_agent: None,
        };
        let sweeper = SweeperSettings {
            table: stack.table.clone(),
            shards,
            queue_url: stack.queue_url.clone(),
            priority_queue,
            delivery_queue_url: stack.delivery_queue_url.clone(),
        };
        let deliverer = DelivererSettings {
            table: stack.table.clone(),
            shards,
            bucket: stack.bucket.clone(),
            prefix,
            delivery_queue_url: stack.delivery_queue_url.clone(),
        };
        let delivery_queue = || {
            SqsDeliveryTrigger::new(
                clients.sqs.clone(),
                &stack.delivery_queue_url,
                calls.clone(),
            )
        };
        Functions {
            seeder: seeder::handler::Handler {
                seeder: Seeder::new(
                    Arc::new(seeder.app(clients, calls.clone()).with_clock(clock.clone())),
                    fetcher.clone(),
                    Arc::new(S3Manifests::new(clients.s3.clone(), calls.clone())),
                    SeedDefaults::default(),
                ),
                seeds: SqsSeedQueue::new(clients.sqs.clone(), &stack.seed_queue_url, calls.clone()),
            },
            crawler: crawler::handler::Handler::new(Crawler::new(
                Arc::new(
                    crawler
                        .app(clients, calls.clone())
                        .with_clock(clock.clone()),
                ),
                fetcher,
                crawler.concurrency,
            )),
            sweeper: sweeper::handler::Handler {
                sweeper: Sweeper::new(
                    Arc::new(
                        sweeper
                            .app(clients, calls.clone())
                            .with_clock(clock.clone()),
                    ),
                    Arc::new(delivery_queue()),
                    SweepOptions::new(),
                ),
            },
            deliverer: deliverer::handler::Handler {
                deliverer: Deliverer::new(
                    Arc::new(
                        deliverer
                            .app(clients, calls.clone())
                            .with_clock(clock.clone()),
                    ),
                    format!("s3://{}", stack.bucket),
                    DeliveryLimits::default(),
                ),
                continuation: delivery_queue(),
            },
        }
    }
}

/// One stack over two servers: the table and bucket of `tables`, the queues of `queues` (a
/// single-threaded moto, whose conditional writes are atomic as on DynamoDB, beside a threaded
/// one, where a long poll holds no other request up).
pub fn split_stack(tables: Stack, queues: Stack) -> Stack {
    Stack {
        queue_url: queues.queue_url,
        priority_queue_url: queues.priority_queue_url,
        delivery_queue_url: queues.delivery_queue_url,
        crawl_dead_letter_url: queues.crawl_dead_letter_url,
        delivery_dead_letter_url: queues.delivery_dead_letter_url,
        seed_queue_url: queues.seed_queue_url,
        seed_dead_letter_url: queues.seed_dead_letter_url,
        ..tables
    }
}

/// Where the functions run: their clients (through the proxy), the mapping's own (straight to
/// the queues), the stack, and how keys are laid out.
pub struct Lambda<'a> {
    /// What the functions call AWS with: the fault proxy's endpoint.
    pub clients: &'a Clients,
    /// What Lambda's pollers receive and delete with: the queues' server itself.
    pub mapping: &'a aws_sdk_sqs::Client,
    pub stack: &'a Stack,
    pub layout: Layout,
    pub shards: u32,
}

/// What Lambda's part does beyond handing each message over once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The seed of the duplicates' and crashes' draws: a run can be replayed.
    pub seed: u64,
    /// Share of received crawl messages delivered twice (half of the copies in the same
    /// batch, half as messages of their own, delayed up to the visibility timeout).
    pub duplicates: f64,
    /// Share of crawler invocations cut short after a random part of `crash_within` (a timeout
    /// or a crash): nothing of theirs is acknowledged, and the next invocation starts cold.
    pub crashes: f64,
    pub crash_within: Duration,
    /// Crawler invocations at once.
    pub concurrency: usize,
    /// How often the schedule invokes the sweeper.
    pub sweep_every: Duration,
    /// Whether `sweep_every` passes on the functions' clock (the idle rounds' virtual time
    /// included, as a deployed schedule's minutes pass while nothing runs) instead of the wall
    /// clock.
    pub sweep_on_functions_clock: bool,
    /// How long a deliverer invocation may run before it stops with a checkpoint and sends its
    /// continuation to the delivery queue.
    pub delivery_time: Duration,
    /// The crawl and delivery queues' visibility timeout, in seconds.
    pub visibility_timeout_s: u32,
    /// The bound of the whole run.
    pub time_limit: Duration,
    /// How far the functions' clock moves on each time Lambda has nothing to hand them (virtual
    /// time for their waits); zero keeps them on the wall clock.
    pub idle_skip: Duration,
    /// Every sweep in a cold container (nothing of an earlier sweep in memory), as when the
    /// schedule's invocations are minutes apart.
    pub cold_sweeps: bool,
}

/// What Lambda saw in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LambdaRun {
    /// Seeder invocations (a failed one is invoked again).
    pub seed_invocations: u64,
    pub crawler_invocations: u64,
    /// Crawler invocations that returned an error (every record left for the timeout).
    pub failed_invocations: u64,
    /// Crawler invocations cut short by [`Plan::crashes`].
    pub crashed_invocations: u64,
    /// When each was cut (Unix ms).
    #[serde(default)]
    pub cut_at_ms: Vec<u64>,
    /// Records handed to the crawler (duplicates included).
    pub records: u64,
    /// Records the crawler reported in `batchItemFailures`.
    pub handed_back: u64,
    /// Copies of messages delivered (in the same batch, or sent again for a later one).
    pub duplicates: u64,
    pub sweeps: u64,
    pub failed_sweeps: u64,
    pub deliverer_invocations: u64,
    pub failed_deliveries: u64,
    /// The most DynamoDB reads (status-index pages, tasks, host records) one sweep of the crawl
    /// made, sweeps whose budget ran out before they saw everything, and the reads of the sweep
    /// that completed the crawl.
    #[serde(default)]
    pub sweep_reads_max: u64,
    #[serde(default)]
    pub sweeps_unfinished: u64,
    #[serde(default)]
    pub completing_sweep_reads: Option<u64>,
    pub wall: Duration,
    /// When (from the start of the run) the seeder's invocation succeeded, the last crawl round
    /// that received messages ended, and the sweep that completed the crawl ended: the phases
    /// of `wall`.
    #[serde(default)]
    pub seeded: Duration,
    #[serde(default)]
    pub crawled: Duration,
    #[serde(default)]
    pub completed: Option<Duration>,
    /// The functions' AWS calls by operation (`dynamodb.Query`, …), all four together.
    #[serde(default)]
    pub calls: std::collections::BTreeMap<String, u64>,
}

impl LambdaRun {
    /// Adds a crawl round's counts.
    fn add(&mut self, round: &LambdaRun) {
        self.crawler_invocations += round.crawler_invocations;
        self.failed_invocations += round.failed_invocations;
        self.crashed_invocations += round.crashed_invocations;
        self.cut_at_ms.extend(&round.cut_at_ms);
        self.records += round.records;
        self.handed_back += round.handed_back;
        self.duplicates += round.duplicates;
    }
}

/// One invocation of the sweeper by the schedule at `now`, its reads noted in `run`; whether it
/// succeeded.
async fn sweep(
    sweeper: &sweeper::handler::Handler<NoBlobs>,
    event: &serde_json::Value,
    now: Millis,
    run: &mut LambdaRun,
) -> bool {
    match sweeper.sweep(event.clone(), None, now).await {
        Ok(summary) => {
            for report in &summary.crawls {
                let reads = report.pages_read + report.tasks_read + report.hosts_read;
                run.sweep_reads_max = run.sweep_reads_max.max(reads);
                run.sweeps_unfinished += u64::from(report.unfinished);
                if report.completed {
                    run.completing_sweep_reads = Some(reads);
                }
            }
            true
        }
        Err(e) => {
            tracing::info!(error = %e, "sweeper invocation failed");
            false
        }
    }
}

/// A seeded stream of draws in [0, 1).
struct Dice {
    seed: u64,
    n: u64,
}

impl Dice {
    fn draw(&mut self) -> f64 {
        self.n += 1;
        (splitmix64(self.seed ^ splitmix64(self.n)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What became of one crawler invocation.
enum Invocation {
    Answered(SqsBatchResponse),
    Failed,
    /// Cut short at this time (Unix ms).
    Crashed(u64),
}

/// A record's copy delivered in the same batch: an id and a receipt of its own, which delete
/// nothing (the original carries the message).
const COPY_SUFFIX: &str = "#copy";

impl Lambda<'_> {
    fn functions(&self, calls: &Arc<CallCounts>, clock: &SkewedClock) -> Result<Functions, String> {
        let fetcher = Fetcher::new("").map_err(|e| e.to_string())?;
        Ok(Functions::new(
            self.clients,
            self.stack,
            &self.layout,
            self.shards,
            Arc::new(fetcher),
            calls.clone(),
            Arc::new(clock.clone()),
        ))
    }

    /// Seeds the crawl with `request` (the seeder's direct request), then runs the functions
    /// until generation 0 of `crawl_id` is delivered; `bucket` reads the bucket directly (to
    /// see the delivery's `_SUCCESS`).
    pub async fn run_to_delivery<B: BlobStore>(
        &self,
        request: serde_json::Value,
        crawl_id: &CrawlId,
        bucket: &B,
        plan: &Plan,
    ) -> Result<LambdaRun, String> {
        let started = Instant::now();
        let calls = Arc::new(CallCounts::default());
        let clock = SkewedClock::default();
        let mut functions = self.functions(&calls, &clock)?;
        let mut run = LambdaRun::default();
        let mut dice = Dice {
            seed: plan.seed,
            n: 0,
        };
        for url in [&self.stack.queue_url, &self.stack.delivery_queue_url] {
            self.mapping
                .set_queue_attributes()
                .queue_url(url)
                .attributes(
                    aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
                    plan.visibility_timeout_s.to_string(),
                )
                .send()
                .await
                .map_err(|e| format!("set the visibility timeout: {e}"))?;
        }
        self.seed(&functions, request, &clock, &mut run).await?;
        run.seeded = started.elapsed();
        tracing::info!(elapsed = ?run.seeded, calls = ?calls.snapshot(), "seeded");
        let sweep_event: serde_json::Value =
            serde_json::from_str(SWEEP_EVENT).map_err(|e| e.to_string())?;
        let sweep_clock = || match plan.sweep_on_functions_clock {
            true => clock.now_ms(),
            false => Millis::try_from(started.elapsed().as_millis()).unwrap_or(Millis::MAX),
        };
        let sweep_every = Millis::try_from(plan.sweep_every.as_millis()).unwrap_or(Millis::MAX);
        let mut last_sweep: Option<Millis> = None;
        let done = format!("/{}/{SUCCESS_FILE}", delivery_id(0));
        let deliveries = self.layout.deliveries_prefix(crawl_id);
        let mut delivering = false;
        loop {
            if started.elapsed() > plan.time_limit {
                return Err(format!(
                    "not delivered within {:?}: {run:?}",
                    plan.time_limit
                ));
            }
            // Only a deliverer invocation that succeeded may have completed the delivery.
            if delivering {
                let listed = bucket.list(&deliveries).await.map_err(|e| e.to_string())?;
                if listed.iter().any(|k| k.ends_with(&done)) {
                    break;
                }
                delivering = false;
            }
            // The schedule, the crawl queue's mapping and the delivery queue's run at once.
            let sweep_due =
                last_sweep.is_none_or(|at| sweep_clock().saturating_sub(at) >= sweep_every);
            if sweep_due {
                last_sweep = Some(sweep_clock());
            }
            let mut crawled = LambdaRun::default();
            let mut sweeps = LambdaRun::default();
            let cold = match sweep_due && plan.cold_sweeps {
                true => Some(self.functions(&calls, &clock)?.sweeper),
                false => None,
            };
            let sweeper = cold.as_ref().unwrap_or(&functions.sweeper);
            let (swept, crawl, delivered) = tokio::join!(
                on_heap(|| async {
                    if sweep_due {
                        Some(sweep(sweeper, &sweep_event, clock.now_ms(), &mut sweeps).await)
                    } else {
                        None
                    }
                }),
                on_heap(|| self.crawl_round(
                    &functions,
                    &mut dice,
                    plan,
                    run.duplicates == 0,
                    &mut crawled
                )),
                on_heap(|| self.deliver_round(&functions, &clock, plan.delivery_time)),
            );
            let (received, cold_start) = crawl?;
            let delivered = delivered?;
            run.add(&crawled);
            run.sweep_reads_max = run.sweep_reads_max.max(sweeps.sweep_reads_max);
            run.sweeps_unfinished += sweeps.sweeps_unfinished;
            if run.completing_sweep_reads.is_none() && sweeps.completing_sweep_reads.is_some() {
                run.completing_sweep_reads = sweeps.completing_sweep_reads;
                run.completed = Some(started.elapsed());
            }
            if received {
                run.crawled = started.elapsed();
            }
            if let Some(ok) = swept {
                tracing::info!(elapsed = ?started.elapsed(), ok, reads = sweeps.sweep_reads_max,
                    unfinished = sweeps.sweeps_unfinished, completed = sweeps.completing_sweep_reads.is_some(),
                    invocations = run.crawler_invocations, records = run.records, "swept");
                run.sweeps += 1;
                run.failed_sweeps += u64::from(!ok);
            }
            if let Some(ok) = delivered {
                tracing::info!(elapsed = ?started.elapsed(), ok, calls = ?calls.snapshot(), "deliverer invoked");
                run.deliverer_invocations += 1;
                run.failed_deliveries += u64::from(!ok);
                delivering = ok;
            }
            if cold_start {
                // The container of a cut invocation is gone with what it had in memory.
                functions = self.functions(&calls, &clock)?;
            }
            if !received && delivered.is_none() {
                // Nothing runs: the functions' time passes (virtual time), and the queues'.
                clock.skip(Millis::try_from(plan.idle_skip.as_millis()).unwrap_or(Millis::MAX));
                tokio::time::sleep(IDLE).await;
            }
        }
        run.wall = started.elapsed();
        run.calls = calls
            .snapshot()
            .into_iter()
            .map(|(call, n)| (call.name().to_owned(), n))
            .collect();
        Ok(run)
    }

    /// Invokes the seeder with `request` until an invocation succeeds (seeding is idempotent).
    async fn seed(
        &self,
        functions: &Functions,
        request: serde_json::Value,
        clock: &SkewedClock,
        run: &mut LambdaRun,
    ) -> Result<(), String> {
        for attempt in 1..=SEED_ATTEMPTS {
            run.seed_invocations += 1;
            match functions
                .seeder
                .dispatch(request.clone(), None, clock.now_ms())
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if attempt == SEED_ATTEMPTS => {
                    return Err(format!("seeding failed {SEED_ATTEMPTS} times: {e}"));
                }
                Err(e) => {
                    tracing::info!(error = %e, "seeder invocation failed; invoked again");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
        Ok(())
    }

    /// One round of the crawl queue's mapping: up to `plan.concurrency` batches, each to an
    /// invocation of its own, all at once. Returns whether any message was received, and
    /// whether an invocation was cut short (the next ones start cold). While `no_duplicate_yet`,
    /// the first record is duplicated whatever the dice say: a run with duplicates planned meets
    /// at least one, however few records its timing made.
    async fn crawl_round(
        &self,
        functions: &Functions,
        dice: &mut Dice,
        plan: &Plan,
        mut no_duplicate_yet: bool,
        run: &mut LambdaRun,
    ) -> Result<(bool, bool), String> {
        let mut batches = Vec::new();
        for _ in 0..plan.concurrency.max(1) {
            let Some(mut event) = self.receive(&self.stack.queue_url).await? else {
                break;
            };
            let mut copies = Vec::new();
            for record in &event.records {
                let owed = std::mem::take(&mut no_duplicate_yet) && plan.duplicates > 0.0;
                if !owed && dice.draw() >= plan.duplicates {
                    continue;
                }
                run.duplicates += 1;
                if dice.draw() < 0.5 {
                    copies.push(copy_of(record));
                } else {
                    let delay = (dice.draw() * f64::from(plan.visibility_timeout_s)) as i32;
                    self.send_again(record, delay).await?;
                }
            }
            event.records.extend(copies);
            let cut = (dice.draw() < plan.crashes).then(|| plan.crash_within.mul_f64(dice.draw()));
            batches.push((event, cut));
        }
        if batches.is_empty() {
            return Ok((false, false));
        }
        let invocations = batches.iter().map(|(event, cut)| {
            let event =
                lambda_runtime::LambdaEvent::new(event.clone(), lambda_runtime::Context::default());
            let handler = &functions.crawler;
            async move {
                let handled = on_heap(|| handler.handle(event));
                match cut {
                    Some(cut) => match tokio::time::timeout(*cut, handled).await {
                        Ok(answer) => answer,
                        Err(_) => return Invocation::Crashed(u64::try_from(now_ms()).unwrap_or(0)),
                    },
                    None => handled.await,
                }
                .map_or_else(
                    |e| {
                        tracing::info!(error = %e, "crawler invocation failed");
                        Invocation::Failed
                    },
                    Invocation::Answered,
                )
            }
        });
        let answers = futures_util::future::join_all(invocations).await;
        let mut cold_start = false;
        for ((event, _), answer) in batches.iter().zip(answers) {
            run.crawler_invocations += 1;
            run.records += event.records.len() as u64;
            match answer {
                Invocation::Answered(response) => {
                    run.handed_back += response.batch_item_failures.len() as u64;
                    self.acknowledge(&self.stack.queue_url, event, &response)
                        .await?;
                }
                Invocation::Failed => run.failed_invocations += 1,
                Invocation::Crashed(at) => {
                    run.crashed_invocations += 1;
                    run.cut_at_ms.push(at);
                    cold_start = true;
                }
            }
        }
        Ok((true, cold_start))
    }

    /// One look at the delivery queue: its batch to the deliverer. Returns None when no
    /// message was received, else whether the invocation succeeded.
    async fn deliver_round(
        &self,
        functions: &Functions,
        clock: &SkewedClock,
        time: Duration,
    ) -> Result<Option<bool>, String> {
        let url = &self.stack.delivery_queue_url;
        let Some(event) = self.receive(url).await? else {
            return Ok(None);
        };
        let payload = serde_json::to_value(&event).map_err(|e| e.to_string())?;
        let deadline = clock.instant() + time;
        match functions
            .deliverer
            .deliver(payload, clock.now_ms(), Some(deadline))
            .await
        {
            Ok(deliverer::handler::DelivererResponse::Batch(response)) => {
                self.acknowledge(url, &event, &response).await?;
                Ok(Some(true))
            }
            Ok(other) => Err(format!("a queue batch answered with {other:?}")),
            Err(e) => {
                tracing::info!(error = %e, "deliverer invocation failed");
                Ok(Some(false))
            }
        }
    }

    async fn receive(&self, queue_url: &str) -> Result<Option<SqsEvent>, String> {
        receive_batch(self.mapping, queue_url).await
    }

    /// Deletes every record of `event` the function did not report failed; a failed copy comes
    /// back as a message of its own.
    async fn acknowledge(
        &self,
        queue_url: &str,
        event: &SqsEvent,
        response: &SqsBatchResponse,
    ) -> Result<(), String> {
        let failed: BTreeSet<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let mut done = Vec::new();
        for record in &event.records {
            let id = record.message_id.as_deref().unwrap_or_default();
            let is_copy = id.ends_with(COPY_SUFFIX);
            match (failed.contains(id), is_copy) {
                (true, true) => self.send_again(record, DUPLICATE_DELAY_S).await?,
                (true, false) | (false, true) => {}
                (false, false) => done.push(record),
            }
        }
        // As the mapping deletes them: a batch request (an event holds at most 10 messages).
        for chunk in done.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, record)| {
                    aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(record.receipt_handle.clone().unwrap_or_default())
                        .build()
                        .map_err(|e| format!("DeleteMessageBatch entry: {e}"))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let deleted = self
                .mapping
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| format!("DeleteMessageBatch: {e}"))?;
            if let Some(failure) = deleted.failed().first() {
                return Err(format!("DeleteMessageBatch: {failure:?}"));
            }
        }
        Ok(())
    }

    /// Sends `record`'s body to the crawl queue again, visible after `delay_s` seconds: a
    /// duplicate delivered in a later batch.
    async fn send_again(&self, record: &SqsMessage, delay_s: i32) -> Result<(), String> {
        self.mapping
            .send_message()
            .queue_url(&self.stack.queue_url)
            .message_body(record.body.clone().unwrap_or_default())
            .delay_seconds(delay_s)
            .send()
            .await
            .map_err(|e| format!("SendMessage: {e}"))?;
        Ok(())
    }
}

/// A copy of `record` for the same batch: its own id, and a receipt that names no message.
fn copy_of(record: &SqsMessage) -> SqsMessage {
    let mut copy = record.clone();
    let id = record.message_id.as_deref().unwrap_or_default();
    copy.message_id = Some(format!("{id}{COPY_SUFFIX}"));
    copy.receipt_handle = Some(format!("copy-of-{id}"));
    copy
}

/// What an SQS event source mapping hands a function: a batch of up to 10 messages received
/// from `queue_url` (no long poll), as an SQS event; None when none is visible.
pub async fn receive_batch(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<Option<SqsEvent>, String> {
    let received = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .map_err(|e| format!("ReceiveMessage: {e}"))?;
    let messages = received.messages();
    if messages.is_empty() {
        return Ok(None);
    }
    let mut event = SqsEvent::default();
    for m in messages {
        let mut record = SqsMessage::default();
        record.message_id = m.message_id().map(str::to_owned);
        record.receipt_handle = m.receipt_handle().map(str::to_owned);
        record.body = m.body().map(str::to_owned);
        record.event_source_arn = Some(queue_arn(queue_url));
        // As the event source mapping passes them: the system attributes by name.
        record.attributes = m
            .attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
            .collect();
        event.records.push(record);
    }
    Ok(Some(event))
}

/// The ARN of the queue at `url` (`…/{account}/{name}`), as an event source mapping names the
/// queue its records come from.
pub fn queue_arn(url: &str) -> String {
    let mut segments = url.rsplit('/');
    let name = segments.next().unwrap_or_default();
    let account = segments.next().unwrap_or_default();
    format!("arn:aws:sqs:us-east-1:{account}:{name}")
}

/// The future `make` makes, on the heap, made in a frame of its own: a debug build reserves room
/// for every future an async fn makes in the frame of each of its polls, and the handlers'
/// futures are large (a test thread's stack is 2 MiB).
pub fn on_heap<'a, T, F: std::future::Future<Output = T> + 'a>(
    make: impl FnOnce() -> F,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>> {
    Box::pin(make())
}
