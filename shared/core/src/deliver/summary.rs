//! `summary.json`: what a delivery holds, and what the crawl cost.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trawl_domain::calls::CallTally;
use trawl_domain::paging::{ChainEnd, PagePattern, chain_end};
use trawl_domain::price::{PRICES, UNIT_MODEL, Units};
use trawl_domain::task::{Millis, Task};

/// The delivery's summary, as written to `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub crawl_id: String,
    pub generation: u64,
    pub delivery_id: String,
    /// Tasks in the manifest.
    pub tasks: u64,
    /// Tasks per status name.
    pub statuses: BTreeMap<String, u64>,
    /// Tasks that ended failed, ignored or gone, by the kind of their last error
    /// (`unknown` when they have none).
    pub errors: BTreeMap<String, u64>,
    /// Body bytes of the pages in the WARC.
    pub page_bytes: u64,
    /// Compressed size of each file of the delivery.
    pub files: BTreeMap<String, u64>,
    /// The crawl's creation, RFC 3339.
    pub started_at: String,
    /// This delivery, RFC 3339.
    pub finished_at: String,
    /// When this delivery began reading its tasks (ms since the epoch, the deliverer's clock):
    /// a pointer into a segment that existed then is in `segments`, which compaction relies on
    /// (`trawl_domain::compaction::segment_settled`). Absent from deliveries written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_read_from_ms: Option<Millis>,
    pub duration_seconds: f64,
    /// Succeeded tasks per second of the crawl's life.
    pub pages_per_second: f64,
    pub warc: WarcSummary,
    pub delta: DeltaSummary,
    /// Sweeps, since the crawl was created, whose re-test of a soft-404 rule's reference page
    /// found the rule no longer recognising it (the sweeper logs each as an error).
    #[serde(default)]
    pub soft_404_reference_misses: u64,
    /// Backend calls made for the crawl since it was created, by operation: every function and
    /// container adds its own to the crawl record (`trawl_core::calls`). Not included: writing
    /// this summary and `_SUCCESS`, and anything a worker adds after the summary was written
    /// (those are on the crawl's totals; the next generation's summary counts them).
    pub calls: Vec<CallCount>,
    pub estimated_cost: CostEstimate,
    /// Objects under the crawl's prefix that no task pointed at, removed by this generation's
    /// clean-up (`deliver::orphans`: the rule).
    #[serde(default)]
    pub orphans_removed: u64,
    /// On the segment layout: each segment's size and the bytes the generation's pages point
    /// at; the rest is garbage (replaced pages, appends never finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsSummary>,
    /// The items extracted (a crawl with extractors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<ItemsSummary>,
    /// Each chain of an open-ended pagination template (one per template and `since`): its
    /// pages, its last one, and why it ended there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paging: Vec<ChainSummary>,
    /// Pages at which a rule of `chains` made no next request, by why (`empty`, `cap`,
    /// `not_json`, `invalid`: each page's `chain_stop`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chain_stops: BTreeMap<String, u64>,
}

/// One chain of an open-ended pagination template, as `summary.json` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainSummary {
    pub template: String,
    /// The `{since}` its pages carry (as in their URLs; empty without one).
    pub since: String,
    /// Its pages in the delivery.
    pub pages: u64,
    /// Its last page's URL, and why the chain ended there.
    pub last_page: String,
    pub stopped: ChainEnd,
}

/// The chains met so far by the task pass (kept in the delivery's checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagingTally(BTreeMap<String, ChainTally>);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ChainTally {
    template: String,
    since: String,
    pages: u64,
    last_index: u64,
    last_page: String,
    stopped: ChainEnd,
}

impl PagingTally {
    /// Counts `task` if it is a page of one of `patterns`; `error` is the kind of its last
    /// error.
    pub fn note(&mut self, patterns: &[PagePattern], task: &Task, error: Option<String>) {
        let Some((pattern, at)) = patterns
            .iter()
            .find_map(|p| p.page_of(&task.url).map(|at| (p, at)))
        else {
            return;
        };
        let template = &pattern.template().template;
        let stopped = chain_end(
            task.status.name(),
            task.fetch.as_ref().and_then(|f| f.paging_stop),
            error,
        );
        let chain = self
            .0
            .entry(format!("{template}\u{0}{}", at.since))
            .or_insert_with(|| ChainTally {
                template: template.clone(),
                since: at.since.clone(),
                pages: 0,
                last_index: at.index,
                last_page: task.url.clone(),
                stopped: stopped.clone(),
            });
        chain.pages += 1;
        if at.index >= chain.last_index {
            chain.last_index = at.index;
            chain.last_page = task.url.clone();
            chain.stopped = stopped;
        }
    }

    /// Adds the chains another tally counted (another writer's): pages add up, the last page
    /// is the one of higher index.
    pub fn absorb(&mut self, other: PagingTally) {
        for (key, theirs) in other.0 {
            match self.0.get_mut(&key) {
                None => {
                    self.0.insert(key, theirs);
                }
                Some(mine) => {
                    mine.pages += theirs.pages;
                    if theirs.last_index >= mine.last_index {
                        mine.last_index = theirs.last_index;
                        mine.last_page = theirs.last_page;
                        mine.stopped = theirs.stopped;
                    }
                }
            }
        }
    }

    pub fn summary(self) -> Vec<ChainSummary> {
        self.0
            .into_values()
            .map(|c| ChainSummary {
                template: c.template,
                since: c.since,
                pages: c.pages,
                last_page: c.last_page,
                stopped: c.stopped,
            })
            .collect()
    }
}

/// What `items.jsonl.gz` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemsSummary {
    /// Items delivered, and those of them invalid (delivered with their errors).
    pub items: u64,
    pub invalid: u64,
    /// Per extractor, with the first invalid items.
    pub by_extractor: BTreeMap<String, ExtractorItems>,
    /// Pages an extractor applies to that have no items (not HTML).
    pub pages_without_items: u64,
    /// The version of the crawl's extractor definitions (`trawl_domain::extract::
    /// definitions_version`), and whether every page's items were made by them: pages whose
    /// items came from them, and from older ones (a page fetched unchanged since the
    /// definitions changed keeps its items; so do items stored before they carried a version;
    /// `trawl reextract` renews them without a fetch).
    #[serde(default)]
    pub extractors_version: String,
    #[serde(default)]
    pub from_current_extractors: bool,
    #[serde(default)]
    pub pages_current: u64,
    #[serde(default)]
    pub pages_older: u64,
    /// Detail pages with items that no listing item links to (their items are not delivered).
    pub detail_pages_unlinked: u64,
    /// Listing items not delivered because their detail pages are `gone` (`gone` in the items
    /// delta when the previous delivery had them).
    #[serde(default)]
    pub detail_pages_gone: u64,
    /// The images the delivered items name (`trawl_domain::image`), by state (`stored`,
    /// `pending`, `failed` …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, u64>,
    pub delta: ItemsDelta,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractorItems {
    pub items: u64,
    pub invalid: u64,
    pub invalid_examples: Vec<InvalidItem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidItem {
    pub key: String,
    pub page_url: String,
    pub errors: Vec<crate::extract::FieldError>,
}

/// `items-delta.jsonl.gz`'s counts, by item key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemsDelta {
    /// The delivery compared with (None: none with items).
    pub previous: Option<String>,
    pub new: u64,
    pub changed: u64,
    pub gone: u64,
    pub unchanged: u64,
    /// Images that items gone or changed name no more (`removed_images` in the delta).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub images_removed: u64,
    /// Of those, images no item names any more: given up with their stored bytes (status
    /// `ignored`, error `removed`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub images_deleted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarcSummary {
    /// `request` + `response` pairs written: every stored page's (`DeliveredPages::Copy`), or
    /// the new and changed pages' (`DeliveredPages::Changed`, in `changed-NNNNN.warc.gz`).
    pub pages: u64,
    /// Stored pages named by their manifest lines where they are stored, not copied by the
    /// task pass (`DeliveredPages::Reference` and `Changed`).
    #[serde(default)]
    pub referenced: u64,
    /// Stored pages left out of the WARC: body missing or not matching the task's md5.
    pub problems: u64,
    /// The first problems, for a human to look at.
    pub problem_samples: Vec<PageProblem>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageProblem {
    pub url: String,
    pub key: String,
    /// `missing` or `md5 mismatch: got …`.
    pub problem: String,
}

/// How many problems are named in the summary (all are counted).
pub(crate) const PROBLEM_SAMPLES: usize = 100;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaSummary {
    /// The delivery compared with (None: this is the first).
    pub previous: Option<String>,
    pub new: u64,
    pub changed: u64,
    pub gone: u64,
    pub unchanged: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCount {
    pub service: String,
    pub operation: String,
    pub count: u64,
}

/// An estimate from list prices (`trawl_domain::price`, the benchmark's too), in US dollars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    pub dynamodb_usd: f64,
    pub s3_usd: f64,
    pub sqs_usd: f64,
    pub total_usd: f64,
    /// Where the prices come from, and how calls become billing units.
    pub basis: String,
}

impl CostEstimate {
    /// Prices `calls`; non-AWS calls (SQLite, files, the local queue) cost nothing.
    pub fn from_calls(calls: &CallTally) -> Self {
        let units = Units::of(calls.iter().map(|(&call, &n)| (call, n as f64)));
        let cost = PRICES.cost(&units);
        Self {
            dynamodb_usd: cost.dynamodb,
            s3_usd: cost.s3,
            sqs_usd: cost.sqs,
            total_usd: cost.total(),
            basis: format!("{}; {}", PRICES.as_of, UNIT_MODEL),
        }
    }
}

/// The non-zero call counts, by operation.
pub(crate) fn call_counts(calls: &CallTally) -> Vec<CallCount> {
    calls
        .iter()
        .filter(|&(_, &count)| count > 0)
        .map(|(call, &count)| CallCount {
            service: call.service().to_owned(),
            operation: call.operation().to_owned(),
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::calls::Call;

    #[test]
    fn the_summary_prices_with_the_shared_table() {
        let calls = CallTally::from([
            (Call::DynamoUpdateItem, 1_000_000),
            (Call::S3GetObject, 10_000),
            (Call::SqsSendMessageBatch, 2_000_000),
            (Call::SqliteWrite, 1_000_000),
        ]);
        let cost = CostEstimate::from_calls(&calls);
        let expected = PRICES.cost(&Units::of([
            (Call::DynamoUpdateItem, 1e6),
            (Call::S3GetObject, 1e4),
            (Call::SqsSendMessageBatch, 2e6),
        ]));
        assert_eq!(cost.dynamodb_usd, expected.dynamodb);
        assert_eq!(cost.s3_usd, expected.s3);
        assert_eq!(cost.sqs_usd, expected.sqs);
        assert!(
            (cost.total_usd - (0.625 + 0.004 + 0.8)).abs() < 1e-9,
            "{cost:?}"
        );
        assert!(cost.basis.contains(PRICES.as_of));
        let names: Vec<_> = call_counts(&calls)
            .into_iter()
            .map(|c| format!("{}.{}={}", c.service, c.operation, c.count))
            .collect();
        assert_eq!(
            names,
            [
                "dynamodb.UpdateItem=1000000",
                "s3.GetObject=10000",
                "sqs.SendMessageBatch=2000000",
                "sqlite.write=1000000"
            ]
        );
    }
}

/// One segment's bytes: its size and those the pages point at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentUse {
    pub bytes: u64,
    pub live: u64,
}

/// The crawl's segments as the delivery found them: garbage accounted per segment, so that a
/// compaction can pick those whose live fraction is low.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentsSummary {
    pub count: u64,
    pub bytes: u64,
    pub live_bytes: u64,
    pub garbage_bytes: u64,
    /// Each segment by key.
    pub per_segment: BTreeMap<String, SegmentUse>,
}

impl SegmentsSummary {
    /// None when the crawl has no segment.
    pub fn of(per_segment: BTreeMap<String, SegmentUse>) -> Option<Self> {
        if per_segment.is_empty() {
            return None;
        }
        let bytes = per_segment.values().map(|s| s.bytes).sum();
        let live_bytes = per_segment.values().map(|s| s.live).sum();
        Some(Self {
            count: per_segment.len() as u64,
            bytes,
            live_bytes,
            garbage_bytes: per_segment
                .values()
                .map(|s| s.bytes.saturating_sub(s.live))
                .sum(),
            per_segment,
        })
    }
}
