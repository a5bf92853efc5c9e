//! The sweeper's glue: the schedule's input in, a summary or a typed error out.

use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use std::time::Duration;
use tokio::time::Instant;
use trawl_core::app::Ports;
use trawl_core::store::CrawlStore;
use trawl_core::sweep::{SweepBudget, SweepSummary, Sweeper};
use trawl_domain::canonical::CrawlId;
use trawl_domain::task::{Millis, now_ms};
use trawl_lambda::{HandlerError, work_deadline};

/// The `source` the schedule sends (`events/sweeper-schedule.json`).
pub const EVENT_SOURCE: &str = "trawl.sweeper";
/// Most query pages one invocation may be given.
pub const MAX_PAGES: u32 = 10_000;
/// Time kept back from the Lambda deadline for the writes in flight and the response.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(5);

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
    /// Override of the lost-message threshold (how overdue a host's message may be).
    #[serde(default)]
    pub lost_after_ms: Option<u64>,
}

/// Parses and checks the event.
pub fn parse_event(value: serde_json::Value) -> Result<SweepEvent, HandlerError> {
    let invalid = |m: String| HandlerError::invalid(format!("invalid sweep event: {m}"));
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

/// What every invocation uses, built once per cold start: the sweeper, whose state (where its
/// scans of host records stopped) its sweeps share.
pub struct Handler<P: Ports> {
    pub sweeper: Sweeper<P>,
}

impl<P: Ports> Handler<P> {
    pub async fn handle(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> Result<SweepSummary, HandlerError> {
        let deadline = work_deadline(&event.context, DEADLINE_MARGIN);
        // Boxed: the sweep's future is large, and inside the runtime's it overflows rustc's
        // layout depth.
        Box::pin(self.sweep(event.payload, deadline, now_ms())).await
    }

    /// Sweeps what the event names, stopping at `deadline` or the event's own budget.
    pub async fn sweep(
        &self,
        event: serde_json::Value,
        deadline: Option<Instant>,
        now: Millis,
    ) -> Result<SweepSummary, HandlerError> {
        let event = parse_event(event).inspect_err(|e| tracing::warn!(error = %e, "bad event"))?;
        let sweeper = &self.sweeper;
        let mut budget =
            SweepBudget::new(event.max_pages, Duration::from_millis(event.time_budget_ms));
        budget.lost_after_ms = event.lost_after_ms;
        budget.deadline = deadline;
        let summary = match &event.crawl_id {
            Some(id) => {
                let crawl = sweeper
                    .store
                    .get_crawl(id)
                    .await?
                    .ok_or_else(|| HandlerError::invalid(format!("no crawl {id}")))?;
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
                due_retries = r.due_retries,
                lost_messages = r.lost_messages,
                recrawls = r.recrawls,
                enqueue_failed = r.enqueue_failed,
                tasks_read = r.tasks_read,
                unfinished = r.unfinished,
                completed = r.completed,
                "swept"
            );
            trawl_lambda::metrics::sweep(r, now).emit();
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_runtime::{Context, Diagnostic};
    use std::sync::Arc;
    use trawl_core::app::{App, Unwired};
    use trawl_core::frontier::update_host;
    use trawl_core::queue::local::LocalQueue;
    use trawl_core::store::memory::MemoryStore;
    use trawl_core::store::{ClaimOutcome, CrawlStore};
    use trawl_core::store::{HostCounts, HostStore, TaskStore};
    use trawl_core::sweep::{LocalDeliveryTrigger, SweepOptions};
    use trawl_domain::calls::CallCounts;
    use trawl_domain::canonical::{CanonicalUrl, CrawlId};
    use trawl_domain::crawl::{Crawl, CrawlConfig};
    use trawl_domain::host::{Host, HostPolicy};
    use trawl_domain::task::{FetchRecord, NewTask};

    const SCHEDULE: &str = include_str!("../../../events/sweeper-schedule.json");

    fn event() -> serde_json::Value {
        serde_json::from_str(SCHEDULE).unwrap()
    }

    type TestHandler = Handler<(MemoryStore, Unwired, LocalQueue)>;

    /// The handler under test, and the trigger its sweeper sends completion notices to.
    fn handler() -> (TestHandler, Arc<LocalDeliveryTrigger>) {
        let calls = Arc::new(CallCounts::default());
        let queue = LocalQueue::new(Duration::from_secs(60), calls.clone());
        let app = Arc::new(App::new(MemoryStore::new(), Unwired, queue, calls));
        let trigger = Arc::new(LocalDeliveryTrigger::default());
        let sweeper = Sweeper::new(app, trigger.clone(), SweepOptions::new());
        (Handler { sweeper }, trigger)
    }

    /// A crawl "c1" whose one task was claimed at 10, in its host's turn, by a worker that then
    /// died; returns the task's URL and the lease length.
    async fn crawl_with_a_dead_worker(handler: &TestHandler) -> (CanonicalUrl, u64) {
        let id = CrawlId::parse("c1").unwrap();
        let config = CrawlConfig::default();
        let lease_ms = config.lease_ms;
        let store = &handler.sweeper.store;
        store
            .create_crawl(&Crawl::new(id.clone(), config, 0))
            .await
            .unwrap();
        let url = CanonicalUrl::parse("http://example.com/").unwrap();
        let task = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        let host = Host::new(url.host_key(), &HostPolicy::default(), 0);
        let counted = HostCounts::change(None, &host);
        assert!(store.put_host(&id, &host, counted).await.unwrap());
        store.seed(&id, &[task], 0).await.unwrap();
        let crawl = store.get_crawl(&id).await.unwrap().unwrap();
        update_host(store, &crawl, &url.host_key(), 10, |h| {
            (h.claim_turn(10, lease_ms).ok().map(|(next, _)| next), ())
        })
        .await
        .unwrap();
        let ClaimOutcome::Claimed { .. } = store
            .claim(&id, &url.task_id(), lease_ms, 10)
            .await
            .unwrap()
        else {
            panic!("claim refused")
        };
        (url, lease_ms)
    }

    #[test]
    fn the_schedule_event_parses() {
        let e = parse_event(event()).unwrap();
        assert_eq!((e.max_pages, e.time_budget_ms), (500, 50_000));
        assert_eq!(e.crawl_id, None);
    }

    #[tokio::test]
    async fn a_crashed_task_is_requeued_then_the_crawl_completes_once() {
        let (handler, trigger) = handler();
        let (url, lease_ms) = crawl_with_a_dead_worker(&handler).await;
        let (store, queue) = (&handler.sweeper.store, &handler.sweeper.queue);
        let id = CrawlId::parse("c1").unwrap();
        // The worker dies; once its turn is over the sweeper re-issues the host's turn, which
        // takes the task over (its lease expired: due work of the host).
        let now = 10 + lease_ms as Millis + 1;
        let summary = handler.sweep(event(), None, now).await.unwrap();
        assert_eq!(summary.crawls[0].lost_messages, 1);
        assert!(!summary.crawls[0].completed);
        assert_eq!(queue.len(), 1);

        // The re-issued turn runs: a worker takes the host, fetches the page, hands it back.
        let crawl = store.get_crawl(&id).await.unwrap().unwrap();
        let host = url.host_key();
        let turn = update_host(store, &crawl, &host, now + 1, |h| {
            match h.claim_turn(now + 1, lease_ms) {
                Ok((next, turn)) => (Some(next), Some(turn)),
                Err(_) => (None, None),
            }
        })
        .await
        .unwrap()
        .and_then(|(_, turn)| turn)
        .expect("the host's turn");
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
        update_host(store, &crawl, &host, now + 2, |h| {
            let back = h.hand_back(&turn, None, Some(h.seeded), 0, 0, now + 2);
            (back.map(|(next, _)| next), ())
        })
        .await
        .unwrap();
        for later in [now + 3, now + 4] {
            handler.sweep(event(), None, later).await.unwrap();
        }
        let notices = trigger.take();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(
            (notices[0].crawl_id.as_str(), notices[0].generation),
            ("c1", 0)
        );
    }

    #[tokio::test]
    async fn a_short_or_emulated_deadline_still_sweeps() {
        // GIVEN a dead worker's expired lease, a deadline 4 s away (less than the margin), and the
        // fixed, long-past deadline `cargo lambda watch` sends
        let now = u64::try_from(now_ms()).unwrap();
        for deadline in [now + 4_000, 600_000] {
            let (handler, _) = handler();
            crawl_with_a_dead_worker(&handler).await;
            let mut context = Context::default();
            context.deadline = deadline;

            // WHEN the schedule's event arrives
            let summary = handler
                .handle(LambdaEvent::new(event(), context))
                .await
                .unwrap();

            // THEN the crawl is swept, not skipped: the host's turn is back in the queue
            assert_eq!(summary.skipped, 0, "deadline {deadline}");
            assert_eq!(summary.crawls[0].lost_messages, 1, "deadline {deadline}");
            assert_eq!(handler.sweeper.queue.len(), 1, "deadline {deadline}");
        }
    }

    #[tokio::test]
    async fn malformed_events_are_invalid_events() {
        let (handler, _) = handler();
        for bad in [
            r#"{"source": "aws.events", "max_pages": 50, "time_budget_ms": 50000}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 0, "time_budget_ms": 50000}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5, "time_budget_ms": 50000, "x": 1}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5}"#,
            r#"{"source": "trawl.sweeper", "max_pages": 5, "time_budget_ms": 9, "crawl_id": "none"}"#,
        ] {
            let err = handler
                .sweep(serde_json::from_str(bad).unwrap(), None, 0)
                .await
                .unwrap_err();
            assert_eq!(Diagnostic::from(err).error_type, "InvalidEvent", "{bad}");
        }
        assert!(
            handler
                .sweeper
                .store
                .list_crawls(None)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
