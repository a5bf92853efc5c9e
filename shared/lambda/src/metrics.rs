//! CloudWatch metrics in the Embedded Metric Format: each record is one JSON line on stdout,
//! which Lambda sends to the function's log group, where CloudWatch turns it into metrics. No
//! PutMetricData call, no extra latency, no extra permission.
//!
//! Every record is for one function and one crawl (dimensions `Function`, `CrawlId`); counts by
//! kind (a crawler batch's outcomes, a delivery's tasks by status and error kind) are records of
//! their own with a third dimension. The metrics are the [`Metric`] enum, and only those: the
//! dashboard in `infra/template.yaml` names them, and `infra/tests/test_template.py` checks both
//! the dashboard against `infra/metrics/emf-samples.jsonl` and each sample line against the EMF
//! JSON schema (`infra/metrics/emf-schema.json`); a unit test below keeps the samples equal to
//! what this module writes.

use serde_json::{Map, Value, json};
#[cfg(feature = "deliver")]
use std::collections::BTreeMap;
use std::io::Write;
#[cfg(feature = "deliver")]
use trawl_core::deliver::DeliveryReport;
#[cfg(feature = "seed")]
use trawl_core::seed::SeedResponse;
use trawl_core::sweep::SweepReport;
use trawl_domain::task::Millis;

/// The CloudWatch namespace of every trawl metric.
pub const NAMESPACE: &str = "trawl";
/// Dimensions of every record.
pub const FUNCTION: &str = "Function";
pub const CRAWL_ID: &str = "CrawlId";
/// The third dimension of counts by kind (a task's outcome, status or error kind).
pub const OUTCOME: &str = "Outcome";

/// The metrics trawl's functions emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Crawler: pages fetched (stored, unchanged or redirected).
    PagesFetched,
    /// Crawler: body bytes fetched.
    BytesFetched,
    /// Crawler: fetches by HTTP status or `error:KIND` (dimension `Outcome`).
    FetchOutcomes,
    /// Crawler: milliseconds from request to outcome (a sample of each batch's fetches).
    FetchLatency,
    /// Crawler: tasks by outcome (dimension `Outcome`).
    TaskOutcomes,
    /// Crawler: tasks put back because their host was snoozed (429/503, refused connections).
    HostSnoozes,
    /// Crawler: host turns handed back to the queue (retry later, deadline, malformed).
    MessagesHandedBack,
    /// Crawler: one batch, receive to answer.
    BatchDuration,
    /// Sweeper: due retries and lost turns re-issued.
    SweeperRequeues,
    /// Sweeper: tasks rescheduled for a recrawl.
    SweeperRecrawls,
    /// Sweeper: messages it could not send (found again later).
    SweeperEnqueueFailures,
    /// Sweeper: status-index pages, tasks and host records read.
    SweeperReads,
    /// Crawler: soft-404 reference pages their rule no longer recognises (a rule to update).
    Soft404ReferenceMisses,
    /// Seeder: URLs that became new tasks.
    SeedsAccepted,
    /// Seeder: URLs refused (invalid, out of scope).
    SeedsRejected,
    /// Seeder: continuations sent to the seed queue (an unfinished seed).
    SeedContinuations,
    /// Deliverer: writing one delivery.
    DeliveryDuration,
    /// Deliverer: the delivered tasks by status and error kind (dimension `Outcome`).
    DeliveredTasks,
    /// Deliverer: body bytes in the delivery's WARC.
    DeliveredBytes,
}

/// Units, as CloudWatch names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Bytes,
    Milliseconds,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Bytes => "Bytes",
            Unit::Milliseconds => "Milliseconds",
        }
    }
}

impl Metric {
    pub const ALL: [Metric; 19] = [
        Metric::PagesFetched,
        Metric::BytesFetched,
        Metric::FetchOutcomes,
        Metric::FetchLatency,
        Metric::TaskOutcomes,
        Metric::HostSnoozes,
        Metric::MessagesHandedBack,
        Metric::BatchDuration,
        Metric::SweeperRequeues,
        Metric::SweeperRecrawls,
        Metric::SweeperEnqueueFailures,
        Metric::SweeperReads,
        Metric::Soft404ReferenceMisses,
        Metric::SeedsAccepted,
        Metric::SeedsRejected,
        Metric::SeedContinuations,
        Metric::DeliveryDuration,
        Metric::DeliveredTasks,
        Metric::DeliveredBytes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::PagesFetched => "PagesFetched",
            Metric::BytesFetched => "BytesFetched",
            Metric::FetchOutcomes => "FetchOutcomes",
            Metric::FetchLatency => "FetchLatency",
            Metric::TaskOutcomes => "TaskOutcomes",
            Metric::HostSnoozes => "HostSnoozes",
            Metric::MessagesHandedBack => "MessagesHandedBack",
            Metric::BatchDuration => "BatchDuration",
            Metric::SweeperRequeues => "SweeperRequeues",
            Metric::SweeperRecrawls => "SweeperRecrawls",
            Metric::SweeperEnqueueFailures => "SweeperEnqueueFailures",
            Metric::SweeperReads => "SweeperReads",
            Metric::Soft404ReferenceMisses => "Soft404ReferenceMisses",
            Metric::SeedsAccepted => "SeedsAccepted",
            Metric::SeedsRejected => "SeedsRejected",
            Metric::SeedContinuations => "SeedContinuations",
            Metric::DeliveryDuration => "DeliveryDuration",
            Metric::DeliveredTasks => "DeliveredTasks",
            Metric::DeliveredBytes => "DeliveredBytes",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Metric::BytesFetched | Metric::DeliveredBytes => Unit::Bytes,
            Metric::BatchDuration | Metric::DeliveryDuration | Metric::FetchLatency => {
                Unit::Milliseconds
            }
            _ => Unit::Count,
        }
    }
}

/// The metrics of one function for one crawl, at one time, and its counts by kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    function: &'static str,
    crawl_id: String,
    timestamp: Millis,
    values: Vec<(Metric, f64)>,
    /// Metrics given as samples (an EMF value array: CloudWatch computes percentiles).
    samples: Vec<(Metric, Vec<f64>)>,
    /// One EMF line per kind.
    by_kind: Vec<ByKind>,
}

/// Counts of one metric by the kinds of one dimension.
#[derive(Debug, Clone, PartialEq)]
struct ByKind {
    dimension: &'static str,
    metric: Metric,
    counts: Vec<(String, f64)>,
}

impl Record {
    pub fn new(function: &'static str, crawl_id: impl Into<String>, timestamp: Millis) -> Self {
        Self {
            function,
            crawl_id: crawl_id.into(),
            timestamp,
            values: Vec::new(),
            samples: Vec::new(),
            by_kind: Vec::new(),
        }
    }

    /// Adds `value` to `metric` (so a batch's messages of one crawl add up).
    pub fn add(&mut self, metric: Metric, value: f64) -> &mut Self {
        match self.values.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, total)) => *total += value,
            None => self.values.push((metric, value)),
        }
        self
    }

    /// Adds `values` to the samples of `metric` (EMF takes at most 100 values per line: the
    /// caller samples).
    pub fn add_samples(&mut self, metric: Metric, values: &[f64]) -> &mut Self {
        match self.samples.iter_mut().find(|(m, _)| *m == metric) {
            Some((_, kept)) => kept.extend_from_slice(values),
            None => self.samples.push((metric, values.to_vec())),
        }
        self
    }

    /// Adds `count` to `metric` for `kind` of `dimension` (e.g. `Outcome` = `retrying`).
    pub fn add_kind(
        &mut self,
        dimension: &'static str,
        metric: Metric,
        kind: &str,
        count: f64,
    ) -> &mut Self {
        let position = self
            .by_kind
            .iter()
            .position(|b| b.dimension == dimension && b.metric == metric);
        let index = position.unwrap_or_else(|| {
            self.by_kind.push(ByKind {
                dimension,
                metric,
                counts: Vec::new(),
            });
            self.by_kind.len() - 1
        });
        let kinds = &mut self.by_kind[index].counts;
        match kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, total)) => *total += count,
            None => kinds.push((kind.to_owned(), count)),
        }
        self
    }

    pub fn crawl_id(&self) -> &str {
        &self.crawl_id
    }

    /// The record as EMF lines: one with the plain metrics (if any), one per kind.
    pub fn lines(&self) -> Vec<Value> {
        let mut lines = Vec::new();
        let plain: Vec<(Metric, Value)> = self
            .values
            .iter()
            .map(|(m, v)| (*m, json!(v)))
            .chain(
                self.samples
                    .iter()
                    .filter(|(_, values)| !values.is_empty())
                    .map(|(m, values)| (*m, json!(values))),
            )
            .collect();
        if !plain.is_empty() {
            lines.push(self.line(&[], &plain));
        }
        for by_kind in &self.by_kind {
            for (kind, count) in &by_kind.counts {
                let value = [(by_kind.metric, json!(count))];
                lines.push(self.line(&[(by_kind.dimension, kind)], &value));
            }
        }
        lines
    }

    fn line(&self, extra: &[(&str, &str)], values: &[(Metric, Value)]) -> Value {
        let mut dimensions = vec![FUNCTION, CRAWL_ID];
        dimensions.extend(extra.iter().map(|(d, _)| *d));
        let definitions: Vec<Value> = values
            .iter()
            .map(|(m, _)| json!({"Name": m.name(), "Unit": m.unit().name()}))
            .collect();
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": self.timestamp,
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": [dimensions],
                    "Metrics": definitions,
                }],
            }),
        );
        root.insert(FUNCTION.into(), json!(self.function));
        root.insert(CRAWL_ID.into(), json!(self.crawl_id));
        for (dimension, value) in extra {
            root.insert((*dimension).into(), json!(value));
        }
        for (metric, value) in values {
            root.insert(metric.name().into(), value.clone());
        }
        Value::Object(root)
    }

    /// Writes the record's lines to stdout, where Lambda takes them to CloudWatch Logs. A failed
    /// write loses a metric, never the invocation's work.
    pub fn emit(&self) {
        let mut out = std::io::stdout().lock();
        for line in self.lines() {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// A sweep's metrics for one crawl: what it put back to work and what it read.
pub fn sweep(report: &SweepReport, now: Millis) -> Record {
    let mut record = Record::new("sweeper", report.crawl_id.as_str(), now);
    record
        .add(
            Metric::SweeperRequeues,
            (report.due_retries + report.hosts_requeued) as f64,
        )
        .add(Metric::SweeperRecrawls, report.recrawls as f64)
        .add(Metric::SweeperEnqueueFailures, report.enqueue_failed as f64)
        .add(
            Metric::SweeperReads,
            (report.pages_read + report.tasks_read + report.hosts_read) as f64,
        );
    record
}

/// A seed invocation's metrics: URLs accepted and rejected.
#[cfg(feature = "seed")]
pub fn seed(response: &SeedResponse, now: Millis) -> Record {
    let mut record = Record::new("seeder", response.crawl_id.as_str(), now);
    record
        .add(Metric::SeedsAccepted, response.accepted as f64)
        .add(Metric::SeedsRejected, response.rejected as f64);
    record
}

/// An unfinished seed of `crawl_id` sent its continuation to the seed queue.
pub fn seed_continued(crawl_id: &str, now: Millis) -> Record {
    let mut record = Record::new("seeder", crawl_id, now);
    record.add(Metric::SeedContinuations, 1.0);
    record
}

/// A delivery's metrics: how long it took, its bytes, its tasks by status and by the kind of
/// their last error (`error:KIND`). A delivery that already existed wrote nothing: no record.
#[cfg(feature = "deliver")]
pub fn delivery(report: &DeliveryReport, elapsed_ms: f64, now: Millis) -> Option<Record> {
    if report.already_delivered {
        return None;
    }
    let summary = &report.summary;
    Some(delivered(
        report.crawl_id.as_str(),
        (&summary.statuses, &summary.errors),
        summary.page_bytes,
        elapsed_ms,
        now,
    ))
}

/// The record of a delivery of `crawl_id`, from its summary's (statuses, errors) counts.
#[cfg(feature = "deliver")]
fn delivered(
    crawl_id: &str,
    (statuses, errors): (&BTreeMap<String, u64>, &BTreeMap<String, u64>),
    page_bytes: u64,
    elapsed_ms: f64,
    now: Millis,
) -> Record {
    let mut record = Record::new("deliverer", crawl_id, now);
    record
        .add(Metric::DeliveryDuration, elapsed_ms)
        .add(Metric::DeliveredBytes, page_bytes as f64);
    for (status, tasks) in statuses {
        record.add_kind(OUTCOME, Metric::DeliveredTasks, status, *tasks as f64);
    }
    for (kind, tasks) in errors {
        let kind = format!("error:{kind}");
        record.add_kind(OUTCOME, Metric::DeliveredTasks, &kind, *tasks as f64);
    }
    record
}

// The samples span the seeder's and the deliverer's records (the crate's default features).
#[cfg(all(test, feature = "seed", feature = "deliver"))]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const SAMPLES: &str = include_str!("../../../infra/metrics/emf-samples.jsonl");
    const T0: Millis = 1_800_000_000_000;

    /// One record per function with every metric it emits: the sample file's source.
    fn samples() -> Vec<Value> {
        let mut crawler = Record::new("crawler", "news", T0);
        crawler
            .add(Metric::PagesFetched, 9.0)
            .add(Metric::BytesFetched, 120_000.0)
            .add(Metric::HostSnoozes, 1.0)
            .add(Metric::MessagesHandedBack, 1.0)
            .add(Metric::BatchDuration, 2_350.0)
            .add(Metric::Soft404ReferenceMisses, 1.0)
            .add_samples(Metric::FetchLatency, &[120.0, 85.5, 310.0])
            .add_kind(OUTCOME, Metric::FetchOutcomes, "200", 9.0)
            .add_kind(OUTCOME, Metric::FetchOutcomes, "error:timeout", 1.0)
            .add_kind(OUTCOME, Metric::TaskOutcomes, "succeeded", 8.0)
            .add_kind(OUTCOME, Metric::TaskOutcomes, "retrying", 1.0);
        let swept = SweepReport {
            crawl_id: "news".into(),
            due_retries: 1,
            hosts_requeued: 2,
            pages_read: 2,
            tasks_read: 8,
            hosts_read: 2,
            ..SweepReport::default()
        };
        let sweeper = sweep(&swept, T0);
        let seeded = SeedResponse {
            crawl_id: "news".into(),
            accepted: 500,
            rejected: 2,
            ..SeedResponse::default()
        };
        let seeder = seed(&seeded, T0);
        let continued = seed_continued("news", T0);
        let statuses = BTreeMap::from([("gone".to_owned(), 20), ("succeeded".to_owned(), 980)]);
        let errors = BTreeMap::from([("not_found".to_owned(), 20)]);
        let deliverer = delivered("news", (&statuses, &errors), 1_048_576, 4_100.0, T0);
        [crawler, sweeper, seeder, continued, deliverer]
            .iter()
            .flat_map(Record::lines)
            .collect()
    }

    #[test]
    fn the_sample_file_is_what_the_functions_write() {
        let written: Vec<Value> = samples();
        let committed: Vec<Value> = SAMPLES
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            written,
            committed,
            "regenerate infra/metrics/emf-samples.jsonl from samples():\n{}",
            written
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn every_line_declares_what_it_carries_and_carries_what_it_declares() {
        let mut named = BTreeSet::new();
        for line in samples() {
            let root = line.as_object().unwrap();
            let aws = &root["_aws"];
            assert!(aws["Timestamp"].is_u64());
            let directives = aws["CloudWatchMetrics"].as_array().unwrap();
            assert_eq!(directives.len(), 1);
            let directive = &directives[0];
            assert_eq!(directive["Namespace"], NAMESPACE);
            for dimension in directive["Dimensions"][0].as_array().unwrap() {
                let name = dimension.as_str().unwrap();
                assert!(root[name].is_string(), "dimension {name} missing: {line}");
            }
            for metric in directive["Metrics"].as_array().unwrap() {
                let name = metric["Name"].as_str().unwrap();
                let value = &root[name];
                let numbers = value.as_array().map_or(value.is_number(), |values| {
                    values.len() <= 100 && values.iter().all(Value::is_number)
                });
                assert!(numbers, "metric {name} missing: {line}");
                named.insert(name.to_owned());
            }
            // Nothing at the root that is neither declared nor `_aws`.
            assert_eq!(
                root.len(),
                1 + directive["Dimensions"][0].as_array().unwrap().len()
                    + directive["Metrics"].as_array().unwrap().len()
            );
        }
        let all: BTreeSet<String> = Metric::ALL.iter().map(|m| m.name().to_owned()).collect();
        assert_eq!(named, all, "the samples show every metric");
    }

    #[test]
    fn values_of_one_crawl_add_up() {
        let mut record = Record::new("crawler", "c", T0);
        record
            .add(Metric::PagesFetched, 2.0)
            .add(Metric::PagesFetched, 3.0)
            .add_kind(OUTCOME, Metric::TaskOutcomes, "gave_up", 1.0)
            .add_kind(OUTCOME, Metric::TaskOutcomes, "gave_up", 1.0);
        let lines = record.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["PagesFetched"], 5.0);
        assert_eq!(lines[1]["TaskOutcomes"], 2.0);
        assert_eq!(lines[1]["Outcome"], "gave_up");
        assert!(Record::new("crawler", "c", T0).lines().is_empty());
    }
}
