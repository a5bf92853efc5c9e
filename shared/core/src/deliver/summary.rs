//! `summary.json`: what a delivery holds, and what the crawl cost.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trawl_domain::calls::{Call, CallCounts};

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
    pub duration_seconds: f64,
    /// Succeeded tasks per second of the crawl's life.
    pub pages_per_second: f64,
    pub warc: WarcSummary,
    pub delta: DeltaSummary,
    /// Backend calls this process made, by operation (on Lambda: the deliverer's own calls;
    /// in the CLI: the whole run).
    pub calls: Vec<CallCount>,
    pub estimated_cost: CostEstimate,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarcSummary {
    /// `request` + `response` pairs written.
    pub pages: u64,
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

/// An estimate from list prices (below), in US dollars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostEstimate {
    pub dynamodb_usd: f64,
    pub s3_usd: f64,
    pub sqs_usd: f64,
    pub total_usd: f64,
    /// Where the prices come from.
    pub basis: String,
}

// List prices, us-east-1, as published in July 2025 (after DynamoDB's November 2024 on-demand
// price cut). Free tiers are ignored.
/// DynamoDB on-demand: USD per write request unit ($0.625 per million).
const DYNAMODB_WRU_USD: f64 = 0.625 / 1e6;
/// DynamoDB on-demand: USD per read request unit ($0.125 per million).
const DYNAMODB_RRU_USD: f64 = 0.125 / 1e6;
/// S3 Standard: PUT, COPY, POST, LIST requests ($0.005 per 1,000).
const S3_PUT_USD: f64 = 0.005 / 1e3;
/// S3 Standard: GET and other requests ($0.0004 per 1,000).
const S3_GET_USD: f64 = 0.0004 / 1e3;
/// SQS FIFO requests ($0.50 per million; the crawl queue is FIFO, standard queues cost $0.40).
const SQS_REQUEST_USD: f64 = 0.50 / 1e6;

const COST_BASIS: &str = "us-east-1 list prices of July 2025: DynamoDB on-demand $0.625/M WRU and \
$0.125/M RRU; S3 $0.005/1k PUT-class and $0.0004/1k GET; SQS FIFO $0.50/M requests. \
Estimate: each DynamoDB write call = 2 WRU (table + status index), a BatchWriteItem = 25 items, \
each read call = 1 RRU; items under 1 KB; free tiers ignored.";

/// Items in one DynamoDB BatchWriteItem call, at most (the estimate assumes full batches).
const BATCH_WRITE_ITEMS: f64 = 25.0;
/// A write to a task also writes the status index.
const WRITE_UNITS_PER_ITEM: f64 = 2.0;

impl CostEstimate {
    /// Prices `calls`; non-AWS calls (SQLite, files, the local queue) cost nothing.
    pub fn from_calls(calls: &CallCounts) -> Self {
        let n = |call: Call| calls.get(call) as f64;
        let write_units = WRITE_UNITS_PER_ITEM
            * (n(Call::DynamoPutItem)
                + n(Call::DynamoUpdateItem)
                + n(Call::DynamoDeleteItem)
                + BATCH_WRITE_ITEMS * n(Call::DynamoBatchWriteItem));
        let read_units = n(Call::DynamoGetItem) + n(Call::DynamoQuery);
        let dynamodb_usd = write_units * DYNAMODB_WRU_USD + read_units * DYNAMODB_RRU_USD;
        let s3_usd = (n(Call::S3PutObject)
            + n(Call::S3ListObjects)
            + n(Call::S3CreateMultipartUpload)
            + n(Call::S3UploadPart)
            + n(Call::S3CompleteMultipartUpload))
            * S3_PUT_USD
            + n(Call::S3GetObject) * S3_GET_USD;
        let sqs_usd = calls.service_total("sqs") as f64 * SQS_REQUEST_USD;
        Self {
            dynamodb_usd,
            s3_usd,
            sqs_usd,
            total_usd: dynamodb_usd + s3_usd + sqs_usd,
            basis: COST_BASIS.to_owned(),
        }
    }
}

/// The non-zero call counts, by operation.
pub(crate) fn call_counts(calls: &CallCounts) -> Vec<CallCount> {
    calls
        .snapshot()
        .into_iter()
        .map(|(call, count)| CallCount {
            service: call.service().to_owned(),
            operation: call.operation().to_owned(),
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_follows_the_list_prices() {
        let calls = CallCounts::default();
        calls.add(Call::DynamoUpdateItem, 1_000_000);
        calls.add(Call::DynamoGetItem, 2_000_000);
        calls.add(Call::S3PutObject, 1_000);
        calls.add(Call::S3GetObject, 10_000);
        calls.add(Call::SqsSendMessageBatch, 2_000_000);
        calls.add(Call::SqliteWrite, 1_000_000);
        let cost = CostEstimate::from_calls(&calls);
        assert!((cost.dynamodb_usd - (1.25 + 0.25)).abs() < 1e-9, "{cost:?}");
        assert!((cost.s3_usd - (0.005 + 0.004)).abs() < 1e-9, "{cost:?}");
        assert!((cost.sqs_usd - 1.0).abs() < 1e-9, "{cost:?}");
        assert!((cost.total_usd - 2.509).abs() < 1e-9, "{cost:?}");
    }
}
