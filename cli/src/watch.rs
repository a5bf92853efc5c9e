//! `trawl status --crawl-id ID --watch`: follows one crawl, wherever its workers run (the
//! deployed functions after `trawl submit`, or another process), refreshing its counts, pages per
//! minute, given-up tasks by error kind and an estimated time left, until its delivery exists.
//! With --json, one object per refresh (one per line); the last has the delivery.

use crate::args::StatusArgs;
use crate::backend::Backend;
use crate::deliveries;
use crate::error::CliError;
use crate::given_up::GivenUp;
use crate::output;
use serde_json::json;
use std::time::{Duration, Instant};
use trawl_core::app::Ports;
use trawl_core::deliver::delivery_id;
use trawl_core::store::{CrawlStore, StatusCounts, TaskRecords};
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::CrawlState;
use trawl_domain::task::Status;

/// One refresh: what the crawl looks like now.
struct Snapshot {
    state: &'static str,
    /// `trawl pause`d: nothing moves until it is resumed.
    paused: bool,
    generation: u64,
    counts: StatusCounts,
    /// Pages fetched per minute since the previous refresh (None on the first).
    pages_per_minute: Option<f64>,
    /// Given-up tasks by error kind.
    errors: Vec<(String, u64)>,
    /// Where the delivery is, once it exists.
    delivery: Option<String>,
}

impl Snapshot {
    fn count(&self, status: Status) -> u64 {
        self.counts.get(&status).copied().unwrap_or(0)
    }

    /// Tasks with work left: waiting, being fetched, or waiting for a retry.
    fn left(&self) -> u64 {
        self.count(Status::Pending) + self.count(Status::InProgress) + self.count(Status::Failed)
    }

    /// Time left at the current pace (None: no pace yet, or nothing left).
    fn eta(&self) -> Option<Duration> {
        let rate = self.pages_per_minute.filter(|r| *r > 0.0)?;
        let left = self.left();
        (left > 0).then(|| Duration::from_secs_f64(left as f64 / rate * 60.0))
    }

    fn print(&self, crawl_id: &CrawlId, json: bool) {
        if json {
            let counts: serde_json::Map<_, _> = Status::ALL
                .iter()
                .map(|s| (s.name().to_owned(), json!(self.count(*s))))
                .collect();
            let errors: serde_json::Map<_, _> = self
                .errors
                .iter()
                .map(|(k, n)| (k.clone(), json!(n)))
                .collect();
            output::json(&json!({
                "crawl_id": crawl_id.as_str(),
                "state": self.state,
                "paused": self.paused,
                "generation": self.generation,
                "counts": counts,
                "pages_per_minute": self.pages_per_minute.map(|r| (r * 10.0).round() / 10.0),
                "errors": errors,
                "eta_seconds": self.eta().map(|d| d.as_secs()),
                "delivery": self.delivery,
            }));
            return;
        }
        let pace = self.pages_per_minute.map_or_else(
            || "pace: measuring".to_owned(),
            |r| format!("{r:.1} pages/min"),
        );
        let eta = self.eta().map_or_else(String::new, |d| {
            let rounded = Duration::from_secs(d.as_secs());
            format!(", about {} left", humantime::format_duration(rounded))
        });
        let errors = if self.errors.is_empty() {
            String::new()
        } else {
            let listed: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            format!("; given up: {}", listed.join(", "))
        };
        output::line(format_args!(
            "crawl {crawl_id} {}{} (gen {}): {} succeeded, {} left ({} in progress, {} to retry); \
             {pace}{eta}{errors}",
            self.state,
            if self.paused { ", paused" } else { "" },
            self.generation,
            self.count(Status::Succeeded),
            self.left(),
            self.count(Status::InProgress),
            self.count(Status::Failed),
        ));
        if let Some(delivery) = &self.delivery {
            output::line(format_args!("delivered to {delivery}"));
        }
    }
}

/// Refreshes every `args.interval` until the crawl's current generation is delivered.
pub async fn run<P: Ports>(
    backend: &Backend<P>,
    args: &StatusArgs,
    json: bool,
) -> Result<(), CliError> {
    let Some(raw) = &args.selector.crawl_id else {
        return Err(CliError::Usage(
            "--watch follows one crawl: pass --crawl-id ID".into(),
        ));
    };
    let crawl_id = CrawlId::parse(raw).map_err(|e| CliError::Usage(e.to_string()))?;
    let mut previous: Option<(Instant, u64)> = None;
    loop {
        let observed = Instant::now();
        match snapshot(backend, &crawl_id, previous, observed).await? {
            None if !json => output::line(format_args!(
                "crawl {crawl_id}: not seeded yet (the seeder has not run, or the crawl id is not \
                 the one submitted)"
            )),
            None => output::json(&json!({"crawl_id": crawl_id.as_str(), "state": "not_seeded"})),
            Some(now) => {
                now.print(&crawl_id, json);
                if now.delivery.is_some() {
                    return Ok(());
                }
                previous = Some((observed, now.count(Status::Succeeded)));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

async fn snapshot<P: Ports>(
    backend: &Backend<P>,
    crawl_id: &CrawlId,
    previous: Option<(Instant, u64)>,
    observed: Instant,
) -> Result<Option<Snapshot>, CliError> {
    let Some(crawl) = backend.store.get_crawl(crawl_id).await? else {
        return Ok(None);
    };
    let counts = backend.store.counts(crawl_id).await?;
    let succeeded = counts.get(&Status::Succeeded).copied().unwrap_or(0);
    let pages_per_minute = previous.map(|(at, before)| {
        let minutes = observed.duration_since(at).as_secs_f64() / 60.0;
        succeeded.saturating_sub(before) as f64 / minutes.max(f64::EPSILON)
    });
    let given_up = GivenUp::read(&backend.store, crawl_id, &counts).await?;
    let errors = given_up
        .reasons
        .iter()
        .map(|r| (r.name(), r.tasks))
        .collect();
    let delivery = if crawl.state == CrawlState::Completed {
        let wanted = delivery_id(crawl.generation);
        deliveries::list(&backend.blobs, &backend.layout, &crawl)
            .await?
            .into_iter()
            .find(|d| d.id == wanted && d.complete())
            .map(|d| deliveries::location(&backend.uri_base, &backend.layout, &crawl, &d.id))
    } else {
        None
    };
    Ok(Some(Snapshot {
        state: crawl.state.name(),
        paused: crawl.config.paused,
        generation: crawl.generation,
        counts,
        pages_per_minute,
        errors,
        delivery,
    }))
}
