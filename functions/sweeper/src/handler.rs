//! The sweeper's glue: the schedule's input in, a summary or a typed error out.

use lambda_runtime::Diagnostic;
use serde::Deserialize;
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;
use trawl_core::queue::WorkQueue;
use trawl_core::store::{CrawlStore, StoreError, TaskStore};
use trawl_core::sweep::{
    DeliveryTrigger, SweepBudget, SweepError, SweepOptions, SweepSummary, Sweeper,
};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::Millis;

/// The `source` the schedule sends (`events/sweeper-schedule.json`).
pub const EVENT_SOURCE: &str = "trawl.sweeper";
/// Most query pages one invocation may be given.
pub const MAX_PAGES: u32 = 10_000;
/// Time kept back from the Lambda deadline for the writes in flight and the response.
pub const DEADLINE_MARGIN_MS: u64 = 5_000;

/// The sweeper's input: the schedule's, optionally narrowed to one crawl (on-demand sweeps).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepEvent {
    pub source: String,
    /// Status-query pages this invocation may read.
    pub max_pages: u32,
    /// Time this invocation may spend, in milliseconds.
    pub time_budget_ms: u64,
    /// Sweep only this crawl.
    #[serde(default)]
    pub crawl_id: Option<CrawlId>,
    /// Override of the lost-message threshold for pending tasks.
    #[serde(default)]
    pub lost_after_ms: Option<u64>,
}

/// How an invocation failed, as the caller sees it (`error_type`).
#[derive(Debug, Error)]
pub enum SweeperError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    Retryable(String),
    #[error("{0}")]
    Permanent(String),
}

impl SweeperError {
    pub fn error_type(&self) -> &'static str {
        match self {
            SweeperError::InvalidRequest(_) => "InvalidRequest",
            SweeperError::Retryable(_) => "Retryable",
            SweeperError::Permanent(_) => "Permanent",
        }
    }
}

impl From<SweepError> for SweeperError {
    fn from(e: SweepError) -> Self {
        if e.is_retryable() {
            SweeperError::Retryable(e.to_string())
        } else {
            SweeperError::Permanent(e.to_string())
        }
    }
}

impl From<StoreError> for SweeperError {
    fn from(e: StoreError) -> Self {
        SweepError::Store(e).into()
    }
}

impl From<SweeperError> for Diagnostic {
    fn from(e: SweeperError) -> Self {
        Diagnostic {
            error_type: e.error_type().to_owned(),
            error_message: e.to_string(),
        }
    }
}

/// Parses and checks the event.
pub fn parse_event(value: serde_json::Value) -> Result<SweepEvent, SweeperError> {
    let invalid = |m: String| SweeperError::InvalidRequest(format!("invalid sweep event: {m}"));
    let event: SweepEvent = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if event.source != EVENT_SOURCE {
        return Err(invalid(format!("source must be {EVENT_SOURCE:?}")));
    }
    if !(1..=MAX_PAGES).contains(&event.max_pages) {
        return Err(invalid(format!("max_pages must be from 1 to {MAX_PAGES}")));
    }
    if event.time_budget_ms == 0 {
        return Err(invalid("time_budget_ms must be at least 1".into()));
    }
    Ok(event)
}

/// The instant to stop starting queries: the Lambda deadline (epoch ms) minus the margin.
pub fn deadline_from(deadline_ms: u64, now: Millis) -> Option<Instant> {
    if deadline_ms == 0 {
        return None;
    }
    let remaining = deadline_ms
        .saturating_sub(u64::try_from(now).unwrap_or(0))
        .saturating_sub(DEADLINE_MARGIN_MS);
    Instant::now().checked_add(Duration::from_millis(remaining))
}

/// The ports a sweep uses, built once per process.
pub struct Ports<'a, S, Q, D> {
    pub store: &'a S,
    pub queue: &'a Q,
    pub trigger: &'a D,
}

/// Handles one sweep event.
pub async fn handle<S, Q, D>(
    ports: &Ports<'_, S, Q, D>,
    event: serde_json::Value,
    deadline: Option<Instant>,
    now: Millis,
) -> Result<SweepSummary, SweeperError>
where
    S: TaskStore + CrawlStore,
    Q: WorkQueue,
    D: DeliveryTrigger,
{
    let event = parse_event(event).inspect_err(|e| tracing::warn!(error = %e, "bad event"))?;
    let sweeper = Sweeper {
        store: ports.store,
        queue: ports.queue,
        trigger: ports.trigger,
        options: SweepOptions {
            lost_after_ms: event.lost_after_ms,
            ..SweepOptions::default()
        },
    };
    let mut budget = SweepBudget::new(event.max_pages, Duration::from_millis(event.time_budget_ms));
    if let Some(deadline) = deadline {
        budget.deadline = Some(budget.deadline.map_or(deadline, |d| d.min(deadline)));
    }
    let summary = match &event.crawl_id {
        Some(id) => {
            let crawl = ports
                .store
                .get_crawl(id)
                .await?
                .ok_or_else(|| SweeperError::InvalidRequest(format!("no crawl {id}")))?;
            SweepSummary {
                crawls: vec![sweeper.sweep_crawl(&crawl, now, &mut budget).await?],
                ..SweepSummary::default()
            }
        }
        None => sweeper.sweep_all(now, &mut budget).await?,
    };
    for r in &summary.crawls {
        tracing::info!(
            crawl_id = r.crawl_id,
            expired_leases = r.expired_leases,
            due_retries = r.due_retries,
            lost_messages = r.lost_messages,
            recrawls = r.recrawls,
            enqueue_failed = r.enqueue_failed,
            tasks_read = r.tasks_read,
            unfinished = r.unfinished,
            completed = r.completed,
            "swept"
        );
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use trawl_core::store::ClaimOutcome;
    use trawl_core::sweep::LocalDeliveryTrigger;
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::crawl::{Crawl, CrawlConfig};
    use trawl_domain::task::{FetchRecord, NewTask};
    use trawl_embedded::local_queue::LocalQueue;
    use trawl_embedded::sqlite::SqliteStore;

    const SCHEDULE: &str = include_str!("../../../events/sweeper-schedule.json");

    fn event() -> serde_json::Value {
        serde_json::from_str(SCHEDULE).unwrap()
    }

    #[test]
    fn the_schedule_event_parses() {
        let e = parse_event(event()).unwrap();
        assert_eq!((e.max_pages, e.time_budget_ms), (50, 50_000));
        assert_eq!(e.crawl_id, None);
    }

    #[tokio::test]
    async fn a_crashed_task_is_requeued_then_the_crawl_completes_once() {
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::in_memory(calls.clone()).unwrap();
        let queue = LocalQueue::new(Duration::from_secs(60), calls);
        let trigger = LocalDeliveryTrigger::default();
        let ports = Ports {
            store: &store,
            queue: &queue,
            trigger: &trigger,
        };
        let id = trawl_domain::canonical::CrawlId::parse("c1").unwrap();
        let config = CrawlConfig::default();
        let lease_ms = config.lease_ms;
        store
            .create_crawl(&Crawl::new(id.clone(), config, 0))
            .await
            .unwrap();
        let url = CanonicalUrl::parse("http://example.com/").unwrap();
        let task = NewTask {
            url: url.clone(),
            depth: 0,
            parent: None,
        };
        store.seed(&id, &[task], 0).await.unwrap();
        let ClaimOutcome::Claimed { .. } = store
            .claim(&id, &url.task_id(), lease_ms, 10)
            .await
            .unwrap()
        else {
            panic!("claim refused")
        };
        // The worker dies; once its lease is over the sweeper re-enqueues the task.
        let now = 10 + lease_ms as Millis + 1;
        let summary = handle(&ports, event(), None, now).await.unwrap();
        assert_eq!(summary.crawls[0].expired_leases, 1);
        assert!(!summary.crawls[0].completed);
        assert_eq!(queue.len(), 1);

        let ClaimOutcome::Claimed { lease, .. } = store
            .claim(&id, &url.task_id(), lease_ms, now + 1)
            .await
            .unwrap()
        else {
            panic!("claim refused")
        };
        let record = FetchRecord {
            http_status: 200,
            fetched_at: now + 2,
            ..FetchRecord::default()
        };
        store.finish(&lease, &record, now + 2).await.unwrap();
        for later in [now + 3, now + 4] {
            handle(&ports, event(), None, later).await.unwrap();
        }
        let notices = trigger.take();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(
            (notices[0].crawl_id.as_str(), notices[0].generation),
            ("c1", 0)
        );
    }

    #[tokio::test]
    async fn malformed_events_are_invalid_requests() {
        let calls = Arc::new(CallCounts::default());
        let store = SqliteStore::in_memory(calls.clone()).unwrap();
        let queue = LocalQueue::new(Duration::from_secs(60), calls);
        let trigger = LocalDeliveryTrigger::default();
        let ports = Ports {
            store: &store,
            queue: &queue,
            trigger: &trigger,
        };
        for bad in [
            r#"{"source": "aws.events", "max_pages": 50, "time_budget_ms": 50000}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 0, "time_budget_ms": 50000}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5, "time_budget_ms": 50000, "x": 1}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5, "time_budget_ms": 9, "crawl_id": "none"}"#,
        ] {
            let err = handle(&ports, serde_json::from_str(bad).unwrap(), None, 0)
                .await
                .unwrap_err();
            assert_eq!(Diagnostic::from(err).error_type, "InvalidRequest", "{bad}");
        }
        assert!(store.list_crawls(None).await.unwrap().is_empty());
    }
}
