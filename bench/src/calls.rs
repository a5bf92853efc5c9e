//! Section 2: AWS calls per URL through the real SDK against moto: a fresh crawl, an unchanged
//! recrawl, a changed recrawl, a URL that fails until `ignored`, and contention between 16
//! workers: for one host's turn, and for the tasks of one pool. The crawler's store is metered
//! (`crate::meter::Metered`): every write is priced in write units from the
//! items before and after it, table and each index apart.

use crate::error::{BenchResult, Context, check};
use crate::local::fixture_config;
use crate::moto::{Moto, Stack, stack};
use crate::report::Figure;
use crate::site::Site;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::sqs::SqsQueue;
use trawl_core::app::App;
use trawl_core::blob::Layout;
use trawl_core::clock::{Clock, SkewedClock};
use trawl_core::crawler::{Crawler, Disposition, MessageResult, Outcome};
use trawl_core::fetch::Fetcher;
use trawl_core::frontier::{add_tasks, seed_tasks};
use trawl_core::queue::WorkQueue;
use trawl_core::store::{ClaimOutcome, CrawlStore, TaskRecords, TaskStore};
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig, StorageLayout};
use trawl_domain::task::{NewTask, Status, now_ms};
use trawl_faults::meter::{Metered, WriteMeter, WriteTally, metered};

const SECTION: &str = "AWS calls";
/// Concurrent workers in the contention measurement.
const CONTENDERS: usize = 16;
/// Longest any one drain may take.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(240);

type AwsCrawler = Crawler<(Metered<DynamoStore>, S3BlobStore, SqsQueue)>;

/// Calls made by one scenario, by `service.Operation`, and per URL; and the DynamoDB write
/// units its writes consumed, by store operation.
#[derive(Debug, Clone, Serialize)]
pub struct CallProfile {
    pub urls: u64,
    pub calls: BTreeMap<String, u64>,
    pub writes: BTreeMap<&'static str, WriteTally>,
    /// DynamoDB read units, as the adapter metered them from the items read
    /// (`trawl_domain::capacity::read_half_units`).
    pub read_units: f64,
}

impl CallProfile {
    /// What `calls` and `meter` counted since their last reset; resets both.
    fn take(calls: &CallCounts, meter: &Mutex<WriteMeter>, urls: u64) -> Self {
        let mut meter = meter.lock().unwrap_or_else(PoisonError::into_inner);
        let profile = Self {
            urls,
            calls: calls
                .snapshot()
                .into_iter()
                .map(|(c, n)| (format!("{}.{}", c.service(), c.operation()), n))
                .collect(),
            writes: meter.by_operation().clone(),
            read_units: calls.read_units(),
        };
        meter.reset();
        calls.reset();
        profile
    }

    /// Write units of every operation together.
    pub fn write_units(&self) -> WriteTally {
        let mut all = WriteTally::default();
        for tally in self.writes.values() {
            all.merge(tally);
        }
        all
    }

    pub fn get(&self, call: Call) -> u64 {
        self.calls
            .get(&format!("{}.{}", call.service(), call.operation()))
            .copied()
            .unwrap_or(0)
    }

    pub fn per_url(&self, call: Call) -> f64 {
        self.get(call) as f64 / self.urls.max(1) as f64
    }

    /// Calls the crawler function itself makes (the SQS event source mapping's receives and
    /// deletes excluded: the harness makes those in its place).
    pub fn function_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(op, _)| {
                !matches!(op.as_str(), "sqs.ReceiveMessage" | "sqs.DeleteMessageBatch")
            })
            .map(|(_, n)| n)
            .sum()
    }
}

/// Everything section 2 measured, for the cost model.
#[derive(Debug, Clone, Serialize)]
pub struct CallsResult {
    pub fresh_seed: CallProfile,
    pub fresh: CallProfile,
    /// The same fresh crawl on the segment layout (`storage.layout = segments`).
    pub fresh_segments: CallProfile,
    pub recrawl_schedule: CallProfile,
    pub recrawl: CallProfile,
    pub changed_schedule: CallProfile,
    pub changed: CallProfile,
    pub failing: CallProfile,
    pub failing_attempts: u64,
    pub contention: BTreeMap<String, f64>,
}

/// A crawler on `stack`, its crawl, its call counter, and an uncounted store for checks.
struct Harness {
    crawler: AwsCrawler,
    /// The crawler's clock: set forward a day for a recrawl to come due.
    clock: SkewedClock,
    crawl: Crawl,
    calls: Arc<CallCounts>,
    meter: Arc<Mutex<WriteMeter>>,
    probe: DynamoStore,
}

async fn new_crawler(stack: Stack, id: &str, config: CrawlConfig) -> BenchResult<Harness> {
    let crawl = Crawl::new(CrawlId::parse(id).step("crawl id")?, config, now_ms());
    stack
        .store
        .create_crawl(&crawl)
        .await
        .step("create crawl")?;
    let calls = stack.calls.clone();
    let probe = stack.probe;
    let store = metered(stack.store, probe.clone(), probe.shards());
    let meter = store.layer.meter();
    let clock = SkewedClock::default();
    let crawler = Crawler::new(
        Arc::new(
            App::new(store, stack.blobs, stack.queue, calls.clone())
                .with_layout(Layout::new("pages"))
                .with_clock(Arc::new(clock.clone())),
        ),
        Arc::new(Fetcher::new("").step("fetcher")?),
        10,
    );
    Ok(Harness {
        crawler,
        clock,
        crawl,
        calls,
        meter,
        probe,
    })
}

/// Settles a batch's results as Lambda's event source mapping would: one DeleteMessageBatch
/// for the handled ones, a visibility change for each retry.
async fn settle(crawler: &AwsCrawler, results: &[MessageResult]) -> BenchResult<()> {
    let mut done = Vec::new();
    for r in results {
        match &r.disposition {
            Disposition::Done => done.push(r.receipt.clone()),
            Disposition::RetryAfter(ms) => crawler
                .queue()
                .retry_later(&r.receipt, *ms)
                .await
                .step("retry_later")?,
            Disposition::Reject(why) => return Err(check("crawl", why.clone())),
        }
    }
    if !done.is_empty() {
        crawler.queue().ack(&done).await.step("ack")?;
    }
    Ok(())
}

/// Tasks of `crawl` still to do (pending, in progress or failed), read through the probe.
async fn open_tasks(probe: &DynamoStore, crawl: &Crawl) -> BenchResult<u64> {
    let counts = probe.counts(&crawl.id).await.step("counts")?;
    Ok([Status::Pending, Status::InProgress, Status::Failed]
        .iter()
        .map(|s| counts.get(s).copied().unwrap_or(0))
        .sum())
}

/// One worker drains the queue until a receive finds it empty and the crawl has no task left to
/// do (a host's next turn may be delayed: then the next receive waits for it).
async fn drain(crawler: &AwsCrawler, probe: &DynamoStore, crawl: &Crawl) -> BenchResult<()> {
    let started = Instant::now();
    let mut wait_ms = 0;
    while started.elapsed() < DRAIN_TIMEOUT {
        let batch = crawler.queue().receive(10, wait_ms).await.step("receive")?;
        if batch.is_empty() {
            if open_tasks(probe, crawl).await? == 0 {
                return Ok(());
            }
            wait_ms = 1_000;
            continue;
        }
        wait_ms = 0;
        let results = crawler.process_batch(batch, None).await;
        settle(crawler, &results).await?;
    }
    Err(check("drain", "timed out"))
}

/// What a batch's turns did to their tasks, flattened.
fn outcomes(results: &[MessageResult]) -> impl Iterator<Item = Outcome> + '_ {
    results.iter().flat_map(|r| r.outcomes.iter().copied())
}

async fn status_of(probe: &DynamoStore, crawl: &Crawl, status: Status) -> BenchResult<u64> {
    let counts = probe.counts(&crawl.id).await.step("counts")?;
    Ok(counts.get(&status).copied().unwrap_or(0))
}

/// A day on, every page's recrawl is due: the sweeper wakes its host (from the host records:
/// the wake-up time its last turn left), then the host's turn crawls it again. The profiles of
/// the scheduling (the sweep) and of the crawl. Every page must succeed again.
async fn crawl_again(
    harness: &Harness,
    probe: &DynamoStore,
    pages: u64,
) -> BenchResult<(CallProfile, CallProfile)> {
    let Harness {
        crawler,
        clock,
        crawl,
        calls,
        meter,
        ..
    } = harness;
    clock.skip(RECRAWL_MS as i64 + 1_000);
    let sweeper = Sweeper::new(
        crawler.app().clone(),
        Arc::new(LocalDeliveryTrigger::default()),
        SweepOptions::new(),
    );
    let report = sweeper
        .sweep_crawl(
            crawl,
            clock.now_ms(),
            &mut SweepBudget::new(50, Duration::from_secs(60)),
        )
        .await
        .step("sweep")?;
    if report.recrawls == 0 {
        return Err(check("recrawl", format!("no host woken: {report:?}")));
    }
    let schedule = CallProfile::take(calls, meter, pages);
    drain(crawler, probe, crawl).await?;
    let again = status_of(probe, crawl, Status::Succeeded).await?;
    if again != pages {
        return Err(check(
            "recrawl",
            format!("{again} of {pages} pages succeeded"),
        ));
    }
    Ok((schedule, CallProfile::take(calls, meter, pages)))
}

/// The fixture crawl's recrawl interval: a day.
const RECRAWL_MS: u64 = 86_400_000;

/// Fresh crawl, unchanged recrawl, changed recrawl and a failing URL, on the threaded moto.
async fn profiles(moto: &Moto, site: &Site, client: &reqwest::Client) -> BenchResult<CallsResult> {
    let pages = site.pages as u64;
    let mut config = fixture_config();
    config.recrawl.interval_ms = Some(RECRAWL_MS);
    let harness = new_crawler(stack(&moto.endpoint, "bench-fresh").await?, "fresh", config).await?;
    let Harness {
        crawler,
        crawl,
        calls,
        meter,
        probe,
        ..
    } = &harness;

    // Fresh: the seed write of the start page apart, then the crawl.
    CallProfile::take(calls, meter, 0);
    let start = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&site.page_url(0)).step("start url")?,
        depth: 0,
        parent: None,
        data: None,
    };
    add_tasks(
        crawler.store(),
        crawler.queue(),
        crawl,
        vec![start],
        now_ms(),
    )
    .await
    .step("seed")?;
    let fresh_seed = CallProfile::take(calls, meter, 1);
    site.reset(client).await?;
    drain(crawler, probe, crawl).await?;
    let succeeded = status_of(probe, crawl, Status::Succeeded).await?;
    if succeeded != pages {
        return Err(check(
            "fresh crawl",
            format!("{succeeded} of {pages} pages succeeded"),
        ));
    }
    let fresh = CallProfile::take(calls, meter, pages);

    // Unchanged recrawl: even pages answer 304, odd ones the same body (an md5 hit).
    let (recrawl_schedule, recrawl) = crawl_again(&harness, probe, pages).await?;
    // Changed recrawl: every page a new edition (new body, new ETag).
    site.change(client).await?;
    let (changed_schedule, changed) = crawl_again(&harness, probe, pages).await?;

    // A URL that always answers 500, crawled until it is given up.
    let mut failing_config = fixture_config();
    failing_config.retry.base_delay_ms = 50;
    failing_config.retry.max_delay_ms = 200;
    let Harness {
        crawler,
        crawl,
        calls,
        meter,
        probe,
        ..
    } = new_crawler(
        stack(&moto.endpoint, "bench-fail").await?,
        "failing",
        failing_config,
    )
    .await?;
    let url = CanonicalUrl::parse(&site.url("/fail.html")).step("fail url")?;
    add_tasks(
        crawler.store(),
        crawler.queue(),
        &crawl,
        vec![NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        }],
        now_ms(),
    )
    .await
    .step("seed failing url")?;
    CallProfile::take(&calls, &meter, 0);
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        let task = probe.get(&crawl.id, &url.task_id()).await.step("get")?;
        if task.is_some_and(|t| t.status == Status::Ignored) {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) || attempts > 20 {
            return Err(check("failing url", "never ignored"));
        }
        // A retry is a due time: the turn ends and the host's next turn is sent with a delay
        // (rounded up to whole seconds), so wait for it.
        let batch = crawler.queue().receive(10, 2_000).await.step("receive")?;
        if batch.is_empty() {
            continue;
        }
        let results = crawler.process_batch(batch, None).await;
        attempts += outcomes(&results)
            .filter(|o| matches!(o, Outcome::Retrying { .. } | Outcome::GaveUp))
            .count() as u64;
        settle(&crawler, &results).await?;
    }
    let failing = CallProfile::take(&calls, &meter, 1);
    // Last: it resets the site the recrawls above count on.
    let fresh_segments = fresh_on_segments(moto, site, client).await?;
    Ok(CallsResult {
        fresh_seed,
        fresh,
        fresh_segments,
        recrawl_schedule,
        recrawl,
        changed_schedule,
        changed,
        failing,
        failing_attempts: attempts,
        contention: BTreeMap::new(),
    })
}

/// The fresh crawl again, on the segment layout: the bodies go to segment objects, one PUT per
/// host turn (its pages gathered, then finished after it: `trawl_core::crawler`).
async fn fresh_on_segments(
    moto: &Moto,
    site: &Site,
    client: &reqwest::Client,
) -> BenchResult<CallProfile> {
    let pages = site.pages as u64;
    let mut config = fixture_config();
    config.storage.layout = StorageLayout::Segments;
    let Harness {
        crawler,
        crawl,
        calls,
        meter,
        probe,
        ..
    } = new_crawler(
        stack(&moto.endpoint, "bench-segments").await?,
        "fresh-segments",
        config,
    )
    .await?;
    let start = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&site.page_url(0)).step("start url")?,
        depth: 0,
        parent: None,
        data: None,
    };
    add_tasks(
        crawler.store(),
        crawler.queue(),
        &crawl,
        vec![start],
        now_ms(),
    )
    .await
    .step("seed")?;
    CallProfile::take(&calls, &meter, 0);
    site.reset(client).await?;
    drain(&crawler, &probe, &crawl).await?;
    let succeeded = status_of(&probe, &crawl, Status::Succeeded).await?;
    if succeeded != pages {
        return Err(check(
            "fresh crawl on segments",
            format!("{succeeded} of {pages} pages succeeded"),
        ));
    }
    Ok(CallProfile::take(&calls, &meter, pages))
}

/// 16 workers on one single-threaded moto: (a) crawling the site, one host, whose first turn
/// message is delivered to all 16 at once (a standard queue delivers at least once, and the
/// duplicates stand for that): the host's fenced turn lets one worker in, every other delivery
/// must be refused (busy: handed back with RetryAfter, or dropped as superseded), no task claim
/// lost, and every page fetched exactly once; (b) racing to claim every task of one pool with no
/// queue in between (each task must be won exactly once).
async fn contention(
    site: &Site,
    client: &reqwest::Client,
    pool: usize,
) -> BenchResult<BTreeMap<String, f64>> {
    let moto = Moto::start(false)?;
    let Harness {
        crawler,
        crawl,
        probe,
        ..
    } = new_crawler(
        stack(&moto.endpoint, "bench-race").await?,
        "race",
        fixture_config(),
    )
    .await?;
    site.reset(client).await?;
    let start = NewTask {
        lane: None,
        priority: Default::default(),
        url: CanonicalUrl::parse(&site.page_url(0)).step("start url")?,
        depth: 0,
        parent: None,
        data: None,
    };
    let (_, turns) = seed_tasks(crawler.store(), &crawl, vec![start], now_ms())
        .await
        .step("seed")?;
    let first = turns.first().ok_or_else(|| {
        check(
            "contention seed",
            "no turn message for the start page's host",
        )
    })?;
    let duplicates = vec![first.clone(); CONTENDERS];
    let sent = crawler
        .queue()
        .send(&duplicates)
        .await
        .step("send duplicate turns")?;
    if sent.sent != CONTENDERS {
        return Err(check("contention seed", format!("{sent:?}")));
    }
    let finished = AtomicBool::new(false);
    let refused = AtomicU64::new(0);
    let claims_rejected = AtomicU64::new(0);
    let stored = AtomicU64::new(0);
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    // The workers run concurrently in one task (a turn's future is not `Send`).
    let worker = || async {
        while !finished.load(Ordering::Relaxed) {
            if Instant::now() > deadline {
                return Err(check("contention crawl", "timed out"));
            }
            let batch = crawler.queue().receive(1, 0).await.step("receive")?;
            if batch.is_empty() {
                if open_tasks(&probe, &crawl).await? == 0 {
                    finished.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let results = crawler.process_batch(batch, None).await;
            for r in &results {
                // Refused: handed back untouched (busy, not due yet), or dropped as superseded.
                // A turn that found nothing due (no outcome, done) is not a refusal.
                let busy = r.outcomes.is_empty() && r.disposition != Disposition::Done;
                if busy || r.outcomes == [Outcome::Skipped] {
                    refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                for o in &r.outcomes {
                    match o {
                        Outcome::Skipped => claims_rejected.fetch_add(1, Ordering::Relaxed),
                        Outcome::Succeeded { .. } => stored.fetch_add(1, Ordering::Relaxed),
                        _ => 0,
                    };
                }
            }
            settle(&crawler, &results).await?;
        }
        Ok(())
    };
    for done in futures_util::future::join_all((0..CONTENDERS).map(|_| worker())).await {
        done?;
    }
    let stats = site.stats(client).await?;
    let stored = stored.load(Ordering::Relaxed);
    let refused = refused.load(Ordering::Relaxed);
    if stored != site.pages as u64 || stats.max_per_page != 1 || refused < CONTENDERS as u64 - 1 {
        return Err(check(
            "contention crawl",
            format!("{stored} stored, {refused} turns refused, site saw {stats:?}"),
        ));
    }
    let extra = (CONTENDERS - 1) as f64;
    let mut out = BTreeMap::new();
    out.insert("duplicate_turns".to_owned(), extra);
    out.insert("turns_refused".to_owned(), refused as f64);
    out.insert(
        "turns_refused_per_duplicate".to_owned(),
        refused as f64 / extra,
    );
    out.insert(
        "task_claims_rejected_per_success".to_owned(),
        claims_rejected.load(Ordering::Relaxed) as f64 / stored as f64,
    );
    let crawler = Arc::new(crawler);

    // The pool race: every worker tries every task, in its own random order.
    let ids: Vec<_> = (0..pool)
        .map(|i| CanonicalUrl::parse(&format!("http://race.invalid/{i}")))
        .collect::<Result<_, _>>()
        .step("pool urls")?;
    let tasks: Vec<NewTask> = ids
        .iter()
        .map(|url| NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        })
        .collect();
    crawler
        .store()
        .seed(&crawl.id, &tasks, now_ms())
        .await
        .step("seed pool")?;
    let won = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let mut racers = Vec::new();
    for _ in 0..CONTENDERS {
        let (crawler, crawl, won, lost) =
            (crawler.clone(), crawl.clone(), won.clone(), lost.clone());
        let mut order: Vec<_> = ids.iter().map(|u| u.task_id()).collect();
        fastrand::shuffle(&mut order);
        racers.push(tokio::spawn(async move {
            for id in order {
                match crawler
                    .store()
                    .claim(&crawl.id, &id, 600_000, now_ms())
                    .await
                    .step("claim")?
                {
                    ClaimOutcome::Claimed { .. } => won.fetch_add(1, Ordering::Relaxed),
                    ClaimOutcome::Rejected(_) => lost.fetch_add(1, Ordering::Relaxed),
                };
            }
            Ok::<_, crate::error::BenchError>(())
        }));
    }
    for r in racers {
        r.await.step("racer")??;
    }
    let won = won.load(Ordering::Relaxed);
    if won != pool as u64 {
        return Err(check(
            "pool race",
            format!("{won} claims won for {pool} tasks"),
        ));
    }
    out.insert(
        "pool_rejected_per_success".to_owned(),
        lost.load(Ordering::Relaxed) as f64 / won as f64,
    );
    Ok(out)
}

pub async fn run(site: &Site, pool: usize) -> BenchResult<(Vec<Figure>, CallsResult)> {
    let client = trawl_core::fetch::http_client()
        .build()
        .step("http client")?;
    let moto = Moto::start(true)?;
    eprintln!(
        "  AWS calls: fresh crawl, unchanged and changed recrawls, failing URL ({} pages)",
        site.pages
    );
    let mut result = profiles(&moto, site, &client).await?;
    eprintln!("  AWS calls: {CONTENDERS} concurrent workers (single-threaded moto)");
    result.contention = contention(site, &client, pool).await?;
    let fresh = &result.fresh;
    let excluding_puts =
        (fresh.function_calls() - fresh.get(Call::DynamoPutItem)) as f64 / fresh.urls as f64;
    let figures = vec![
        Figure::single(
            SECTION,
            "fresh URL: calls excl. seed writes (PutItem)",
            "calls/URL",
            excluding_puts,
        )
        .at_most(3.3),
        Figure::single(
            SECTION,
            "fresh URL: link-seed PutItems (conditional, known links too)",
            "calls/URL",
            fresh.per_url(Call::DynamoPutItem),
        ),
        Figure::single(
            SECTION,
            "fresh URL: all crawler calls",
            "calls/URL",
            fresh.function_calls() as f64 / fresh.urls as f64,
        ),
        Figure::single(
            SECTION,
            "fresh URL: S3 PUTs, objects layout",
            "PUTs/URL",
            fresh.per_url(Call::S3PutObject),
        ),
        Figure::single(
            SECTION,
            "fresh URL: S3 PUTs, segments layout (one PUT per host turn)",
            "PUTs/URL",
            result.fresh_segments.per_url(Call::S3PutObject),
        ),
        Figure::single(
            SECTION,
            "unchanged recrawl: crawler calls",
            "calls/URL",
            result.recrawl.function_calls() as f64 / result.recrawl.urls as f64,
        ),
        Figure::single(
            SECTION,
            "unchanged recrawl: S3 PUTs",
            "PUTs",
            result.recrawl.get(Call::S3PutObject) as f64,
        )
        .at_most(0.0),
        Figure::single(
            SECTION,
            "unchanged recrawl: scheduling (the sweep that wakes the host)",
            "calls/URL",
            result.recrawl_schedule.function_calls() as f64 / result.recrawl_schedule.urls as f64,
        ),
        Figure::single(
            SECTION,
            format!(
                "failing URL (500) until ignored, {} attempts",
                result.failing_attempts
            ),
            "calls/URL",
            result.failing.function_calls() as f64,
        ),
        Figure::single(
            SECTION,
            format!(
                "{CONTENDERS} workers, one host, its turn delivered {CONTENDERS}×: turns refused"
            ),
            "per duplicate",
            result
                .contention
                .get("turns_refused_per_duplicate")
                .copied()
                .unwrap_or(f64::NAN),
        ),
        Figure::single(
            SECTION,
            "… task claims rejected within turns",
            "per success",
            result
                .contention
                .get("task_claims_rejected_per_success")
                .copied()
                .unwrap_or(f64::NAN),
        ),
        Figure::single(
            SECTION,
            format!("{CONTENDERS} workers racing over {pool} tasks, no queue"),
            "per success",
            result
                .contention
                .get("pool_rejected_per_success")
                .copied()
                .unwrap_or(f64::NAN),
        ),
    ];
    Ok((figures, result))
}
