//! Section: completion and status at many hosts, on DynamoDB (moto). A crawl of one page per
//! host over 500 and 5,000 hosts (100 and 1,000 with `--quick`) is seeded through the real
//! frontier and every host crawled to idle through the store's operations (claim the turn,
//! claim the task in it, finish, hand back), then:
//! - the completion check a cold sweeper makes (a fresh `Sweeper` with an empty process,
//!   the deployed schedule's budget cut to one page, so its scan of host records cannot be
//!   what completes the crawl): the DynamoDB requests of the whole sweep, which completes it;
//! - the check before host counts (`has_work`'s walk: a small query of pending, in-progress and
//!   failed tasks, on DynamoDB the hosts' due lists host after host): its requests;
//! - `trawl status`'s reads: the task counts per status (`TaskRecords::counts`: the crawl item's
//!   counts, one read) and the host counts (`HostStore::host_counts`).
//!
//! Requests are counted by the adapter (`CallCounts`): sizes ten times apart show what grows.

use crate::error::{BenchResult, Context, check};
use crate::moto::{Moto, clients};
use crate::report::Figure;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use trawl_aws::dynamodb::{DynamoStore, create_table};
use trawl_core::app::{App, Unwired};
use trawl_core::frontier::{seed_tasks, update_host};
use trawl_core::queue::local::LocalQueue;
use trawl_core::store::{
    ClaimOutcome, CrawlStore, HostStore, TaskQuery, TaskRecords, TaskStore, TaskSummary,
};
use trawl_core::sweep::{LocalDeliveryTrigger, SweepBudget, SweepOptions, Sweeper};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::task::{FetchRecord, Millis, NewTask, Status};

const SECTION: &str = "completion at many hosts";
const T0: Millis = 1_800_000_000_000;
/// Hosts crawled at once (moto threaded).
const PARALLEL: usize = 16;

/// DynamoDB requests of one kind of work.
struct Requests {
    total: u64,
    queries: u64,
}

fn dynamo_requests(calls: &CallCounts) -> Requests {
    let snapshot = calls.snapshot();
    let of = |c: Call| {
        snapshot
            .iter()
            .filter(|(call, _)| *call == c)
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    Requests {
        total: snapshot
            .iter()
            .filter(|(call, _)| call.service() == "dynamodb")
            .map(|(_, n)| n)
            .sum(),
        queries: of(Call::DynamoQuery),
    }
}

pub async fn run(quick: bool) -> BenchResult<Vec<Figure>> {
    let sizes: &[usize] = if quick { &[100, 1_000] } else { &[500, 5_000] };
    let moto = Moto::start(true)?;
    let client = clients(&moto.endpoint).await.dynamodb;
    create_table(&client, "bench-completion")
        .await
        .step("create table")?;
    let mut figures = Vec::new();
    for &hosts in sizes {
        let calls = Arc::new(CallCounts::default());
        let store = DynamoStore::new(
            client.clone(),
            "bench-completion",
            crate::moto::SHARDS,
            calls.clone(),
        );
        let crawl = crawled(&store, hosts).await?;

        // The check before host counts: has_work's three small queries.
        calls.reset();
        for status in [Status::Pending, Status::InProgress, Status::Failed] {
            let page = store
                .query(&TaskQuery {
                    crawl_id: crawl.id.clone(),
                    status,
                    updated_before: None,
                    limit: 1,
                    cursor: None,
                    part: trawl_core::store::Part::WHOLE,
                })
                .await
                .step("has_work query")?;
            if !page.tasks.is_empty() {
                return Err(check("completion", format!("{status:?} work left")));
            }
        }
        let walk = dynamo_requests(&calls);

        // `trawl status`: the task counts, and the host counts.
        calls.reset();
        let counts = store.counts(&crawl.id).await.step("counts")?;
        let status = dynamo_requests(&calls);
        calls.reset();
        let host_counts = store
            .host_counts(&crawl.id)
            .await
            .step("host counts")?
            .ok_or_else(|| check("host counts", "none kept"))?;
        let host_reads = dynamo_requests(&calls);
        let succeeded = counts.get(&Status::Succeeded).copied().unwrap_or(0);
        if succeeded != hosts as u64 || host_counts.hosts != hosts as i64 || host_counts.open != 0 {
            return Err(check(
                "completion",
                format!("{succeeded} succeeded, host counts {host_counts:?}"),
            ));
        }

        // A cold sweeper completes it, its scan of host records cut to one page.
        calls.reset();
        let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
        let sweeper = Sweeper::new(
            Arc::new(App::new(store.clone(), Unwired, queue, calls.clone())),
            Arc::new(LocalDeliveryTrigger::default()),
            SweepOptions::new(),
        );
        let mut budget = SweepBudget::new(1, Duration::from_secs(60));
        let report = sweeper
            .sweep_crawl(&crawl, T0 + 60_000, &mut budget)
            .await
            .step("sweep")?;
        if !report.completed {
            return Err(check("completion", format!("not completed: {report:?}")));
        }
        let sweep = dynamo_requests(&calls);

        // A delivery's read of the pages: every succeeded task, page by page.
        calls.reset();
        let (mut read, mut cursor) = (0usize, None);
        loop {
            let page = store
                .query(&TaskQuery {
                    crawl_id: crawl.id.clone(),
                    status: Status::Succeeded,
                    updated_before: None,
                    limit: 1_000,
                    cursor,
                    part: trawl_core::store::Part::WHOLE,
                })
                .await
                .step("succeeded query")?;
            read += page.tasks.len();
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let delivery_read = dynamo_requests(&calls);

        // `trawl purge`'s deletion of the tasks.
        calls.reset();
        let deleted = store.delete_tasks(&crawl.id).await.step("delete tasks")?;
        let purge = dynamo_requests(&calls);
        if read != hosts || deleted != hosts as u64 {
            return Err(check(
                "completion",
                format!("{read} succeeded read, {deleted} deleted of {hosts}"),
            ));
        }
        figures.extend([
            Figure::single(
                SECTION,
                format!(
                    "{hosts} hosts: a delivery's read of every page (the hosts' due lists): requests ({} queries)",
                    delivery_read.queries
                ),
                "requests",
                delivery_read.total as f64,
            ),
            Figure::single(
                SECTION,
                format!("{hosts} hosts: `trawl purge` of the tasks: requests ({} queries)", purge.queries),
                "requests",
                purge.total as f64,
            ),
            Figure::single(
                SECTION,
                format!(
                    "{hosts} hosts: DynamoDB requests of the sweep that completes (cold, 1 page)"
                ),
                "requests",
                sweep.total as f64,
            ),
            Figure::single(
                SECTION,
                format!("{hosts} hosts: completion check before host counts (walk): requests"),
                "requests",
                walk.total as f64,
            ),
            Figure::single(
                SECTION,
                format!("{hosts} hosts: host counts (status, completion): requests"),
                "requests",
                host_reads.total as f64,
            ),
            Figure::single(
                SECTION,
                format!(
                    "{hosts} hosts: task counts per status (`trawl status`): requests ({} queries)",
                    status.queries
                ),
                "requests",
                status.total as f64,
            ),
        ]);
    }
    Ok(figures)
}

/// A crawl of one page on each of `hosts` hosts, seeded and crawled to idle.
async fn crawled(store: &DynamoStore, hosts: usize) -> BenchResult<Crawl> {
    let id = CrawlId::parse(&format!("completion-{hosts}")).step("crawl id")?;
    let crawl = Crawl::new(id, CrawlConfig::default(), T0);
    let started = std::time::Instant::now();
    store.create_crawl(&crawl).await.step("create crawl")?;
    let urls: Vec<CanonicalUrl> = (0..hosts)
        .map(|i| CanonicalUrl::parse(&format!("http://h{i}.completion.invalid/")))
        .collect::<Result<_, _>>()
        .step("host urls")?;
    for chunk in urls.chunks(500) {
        let tasks = chunk
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
        seed_tasks(store, &crawl, tasks, T0).await.step("seed")?;
    }
    eprintln!("  {hosts} hosts seeded in {:.0?}", started.elapsed());
    let crawls = futures_util::stream::iter(&urls)
        .map(|url| crawl_host(store, &crawl, url))
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    for one in crawls {
        one?;
    }
    eprintln!("  {hosts} hosts crawled in {:.0?}", started.elapsed());
    Ok(crawl)
}

/// One turn of `url`'s host: claimed, its page fetched, the host handed back idle.
async fn crawl_host(store: &DynamoStore, crawl: &Crawl, url: &CanonicalUrl) -> BenchResult<()> {
    let (name, at) = (url.host_key(), T0 + 1_000);
    let claim = |h: &trawl_domain::host::Host| match h.claim_turn(at, 60_000) {
        Ok((next, turn)) => (Some(next), Some(turn)),
        Err(_) => (None, None),
    };
    let turn = update_host(store, crawl, &name, at, claim)
        .await
        .step("claim turn")?
        .and_then(|(_, turn)| turn)
        .ok_or_else(|| check("claim turn", name.clone()))?;
    let ClaimOutcome::Claimed { lease, .. } = store
        .claim_in_turn(&crawl.id, &url.task_id(), 60_000, at)
        .await
        .step("claim task")?
    else {
        return Err(check("claim task", url.as_str()));
    };
    let record = FetchRecord {
        http_status: 200,
        fetched_at: at,
        ..FetchRecord::default()
    };
    store.finish(&lease, &record, at).await.step("finish")?;
    let due = store
        .host_tasks(&crawl.id, &name, 1)
        .await
        .step("due tasks")?;
    let next_work = due.first().and_then(TaskSummary::next_work);
    update_host(store, crawl, &name, at, |h| {
        (
            h.hand_back(&turn, next_work, Some(h.seeded), 0, 0, at)
                .map(|(next, _)| next),
            (),
        )
    })
    .await
    .step("hand back")?;
    Ok(())
}
