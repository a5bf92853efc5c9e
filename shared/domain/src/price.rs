//! What backend calls cost: one dated price table, the billing units of calls, and what a page
//! costs (`PageCost`), shared by `summary.json` (a crawl's estimated cost) and the benchmark
//! (cost per million pages), so the two never disagree. DynamoDB write units come from
//! `capacity` (DynamoDB's rules on the items as stored) wherever they were metered; `Units::of`
//! prices unmetered write calls with `UNIT_MODEL`'s per-call figures.

use crate::calls::Call;

/// List prices in US dollars. Free tiers are ignored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prices {
    /// When and where the prices were read.
    pub as_of: &'static str,
    /// DynamoDB on-demand, per write request unit (1 KB).
    pub dynamodb_wru: f64,
    /// DynamoDB on-demand, per read request unit (4 KB, strongly consistent).
    pub dynamodb_rru: f64,
    /// S3 Standard, per PUT, COPY, POST or LIST request.
    pub s3_put_class: f64,
    /// S3 Standard, per GET (and other read) request.
    pub s3_get: f64,
    /// SQS standard queue, per request (each 64 KB chunk; trawl's batches of small messages
    /// are one). Every trawl queue is a standard queue.
    pub sqs_request: f64,
    /// Lambda on arm64, per GB-second.
    pub lambda_arm64_gb_s: f64,
    /// Lambda, per request.
    pub lambda_request: f64,
}

/// us-east-1 list prices as AWS published them in July 2025, after DynamoDB's November 2024
/// on-demand price cut. Not re-checked since: check the current pricing pages before quoting
/// (aws.amazon.com/dynamodb/pricing/on-demand, /s3/pricing, /sqs/pricing, /lambda/pricing).
pub const PRICES: Prices = Prices {
    as_of: "us-east-1 list prices of 2025-07 (check current pricing before quoting)",
    dynamodb_wru: 0.625 / 1e6,
    dynamodb_rru: 0.125 / 1e6,
    s3_put_class: 0.005 / 1e3,
    s3_get: 0.0004 / 1e3,
    sqs_request: 0.40 / 1e6,
    lambda_arm64_gb_s: 0.000_013_333_4,
    lambda_request: 0.20 / 1e6,
};

/// How calls become billing units, in words (reported beside every estimate).
pub const UNIT_MODEL: &str = "items under 1 KB; a DynamoDB PutItem = 2 WRU (a new task and its \
entry in its host's roster), an UpdateItem = 1 WRU (a task's finish writes the task alone: its \
roster entry never changes), a DeleteItem = 2 WRU, a BatchWriteItem = 25 such deletes, a \
TransactWriteItems = 4 WRU (a host record and its shard's counts), a GetItem or Query = 1 RRU, \
a BatchGetItem (a page's links, before they are seeded) = 10 RRU (a claim inside a host turn is \
a GetItem, no write); host and crawl records, \
1 WRU a write, are counted at these rates; S3 PUT, LIST and multipart calls are PUT-class, \
GetObject GET-class, deletes free; every SQS call one standard-queue request; SQLite, files and \
the in-process queue free.";

/// Write units of a PutItem: a new task and its entry in its host's roster (or due list).
const PUT_WRU: f64 = 2.0;
/// Write units of an UpdateItem of a task: the item alone (host passes: a rostered task's finish
/// writes no index; a task with a priority or a lane moves its due-list entry too, 2 more).
/// Host- and crawl-record writes take 1 as well.
const UPDATE_WRU: f64 = 1.0;
/// Write units of a DeleteItem: the item and its index entry.
const DELETE_WRU: f64 = 2.0;
/// Read units of a BatchGetItem: a page's links checked before they are seeded, about 20
/// keys of half a read unit each (eventually consistent).
const BATCH_GET_RRU: f64 = 10.0;
/// Write units of a TransactWriteItems: a host record and its shard's host counts, each at
/// twice a write's price (a host going idle or busy, `HostCounts`).
const TRANSACT_WRU: f64 = 4.0;
/// Items in one BatchWriteItem call, at most (the model assumes full batches of deletes).
const BATCH_WRITE_ITEMS: f64 = 25.0;

/// Billing units, possibly fractional (per URL).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    pub dynamodb_wru: f64,
    pub dynamodb_rru: f64,
    pub s3_put_class: f64,
    pub s3_get: f64,
    pub sqs_requests: f64,
}

impl Units {
    /// The units of `calls` (counts, or calls per URL), following `UNIT_MODEL`.
    pub fn of(calls: impl IntoIterator<Item = (Call, f64)>) -> Self {
        let mut units = Units::default();
        for (call, n) in calls {
            match call {
                Call::DynamoPutItem => units.dynamodb_wru += PUT_WRU * n,
                Call::DynamoUpdateItem => units.dynamodb_wru += UPDATE_WRU * n,
                Call::DynamoDeleteItem => units.dynamodb_wru += DELETE_WRU * n,
                Call::DynamoBatchWriteItem => {
                    units.dynamodb_wru += BATCH_WRITE_ITEMS * DELETE_WRU * n
                }
                // Two items of under 1 KB, each at twice a write's price.
                Call::DynamoTransactWriteItems => units.dynamodb_wru += TRANSACT_WRU * n,
                Call::DynamoGetItem | Call::DynamoQuery => units.dynamodb_rru += n,
                Call::DynamoBatchGetItem => units.dynamodb_rru += BATCH_GET_RRU * n,
                Call::S3PutObject
                | Call::S3ListObjects
                | Call::S3CreateMultipartUpload
                | Call::S3UploadPart
                | Call::S3CompleteMultipartUpload => units.s3_put_class += n,
                Call::S3GetObject => units.s3_get += n,
                Call::SqsSendMessageBatch
                | Call::SqsReceiveMessage
                | Call::SqsDeleteMessageBatch
                | Call::SqsChangeMessageVisibility
                | Call::SqsGetQueueAttributes => units.sqs_requests += n,
                Call::S3DeleteObject
                | Call::S3AbortMultipartUpload
                | Call::SqliteWrite
                | Call::SqliteRead
                | Call::FileWrite
                | Call::FileRead
                | Call::FileDelete
                | Call::LocalQueueSend
                | Call::LocalQueueReceive => {}
            }
        }
        units
    }
}

/// What some units cost, in US dollars, by service.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    pub dynamodb: f64,
    pub s3: f64,
    pub sqs: f64,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.dynamodb + self.s3 + self.sqs
    }
}

impl Prices {
    pub fn cost(&self, units: &Units) -> Cost {
        Cost {
            dynamodb: units.dynamodb_wru * self.dynamodb_wru
                + units.dynamodb_rru * self.dynamodb_rru,
            s3: units.s3_put_class * self.s3_put_class + units.s3_get * self.s3_get,
            sqs: units.sqs_requests * self.sqs_request,
        }
    }
}

/// Lambda gives a function one full vCPU at 1,769 MB, proportionally less below
/// (docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
pub const MB_PER_VCPU: f64 = 1769.0;

/// What a crawler invocation is billed for, per page: its memory size times its duration,
/// shared by the pages it fetched. An invocation runs `turns` host turns at once; a turn
/// fetches one page per `max(fetch latency, host delay)` (one request in flight per host, the
/// default), so an invocation's wall time per page is that over `turns` — unless the CPU time
/// (scaled to the memory size's share of a vCPU) is longer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LambdaModel {
    pub memory_mb: f64,
    pub fetch_latency_s: f64,
    pub host_delay_s: f64,
    /// Host turns an invocation runs at once (messages per batch).
    pub turns: f64,
    /// Pages per turn.
    pub pages_per_turn: f64,
}

impl LambdaModel {
    /// GB-seconds per page, given the CPU seconds a page takes on one vCPU.
    pub fn gb_s_per_page(&self, cpu_s_per_page: f64) -> f64 {
        let wall = self.fetch_latency_s.max(self.host_delay_s) / self.turns.max(1.0);
        let cpu = cpu_s_per_page * MB_PER_VCPU / self.memory_mb;
        self.memory_mb / 1024.0 * wall.max(cpu)
    }

    /// Invocations per page.
    pub fn invocations_per_page(&self) -> f64 {
        1.0 / (self.turns * self.pages_per_turn).max(1.0)
    }
}

/// What one page costs, by service, in US dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PageCost {
    pub cost: Cost,
    pub lambda: f64,
}

impl PageCost {
    pub fn total(&self) -> f64 {
        self.cost.total() + self.lambda
    }
}

impl Prices {
    /// A page's cost: its backend `units` and its share of Lambda (`model`, `cpu_s_per_page`).
    pub fn page(&self, units: &Units, model: &LambdaModel, cpu_s_per_page: f64) -> PageCost {
        PageCost {
            cost: self.cost(units),
            lambda: model.gb_s_per_page(cpu_s_per_page) * self.lambda_arm64_gb_s
                + model.invocations_per_page() * self.lambda_request,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_follows_the_unit_model_and_the_list_prices() {
        let units = Units::of([
            (Call::DynamoUpdateItem, 1_000_000.0),
            (Call::DynamoPutItem, 1_000_000.0),
            (Call::DynamoGetItem, 2_000_000.0),
            (Call::S3PutObject, 1_000.0),
            (Call::S3GetObject, 10_000.0),
            (Call::S3DeleteObject, 10_000.0),
            (Call::SqsSendMessageBatch, 2_000_000.0),
            (Call::SqliteWrite, 1_000_000.0),
        ]);
        assert_eq!(units.dynamodb_wru, 3_000_000.0);
        assert_eq!(units.dynamodb_rru, 2_000_000.0);
        let cost = PRICES.cost(&units);
        assert!((cost.dynamodb - (1.875 + 0.25)).abs() < 1e-9, "{cost:?}");
        assert!((cost.s3 - (0.005 + 0.004)).abs() < 1e-9, "{cost:?}");
        assert!((cost.sqs - 0.8).abs() < 1e-9, "{cost:?}");
        assert!((cost.total() - 2.934).abs() < 1e-9, "{cost:?}");
    }

    #[test]
    fn lambda_is_billed_for_wall_time_shared_by_the_turns_in_flight() {
        let model = LambdaModel {
            memory_mb: 256.0,
            fetch_latency_s: 0.5,
            host_delay_s: 1.0,
            turns: 10.0,
            pages_per_turn: 50.0,
        };
        // Ten turns at one page per second each: 0.1 s of a 0.25 GB function per page.
        assert!((model.gb_s_per_page(0.001) - 0.025).abs() < 1e-12);
        // CPU-bound when a page's CPU time (at 256 MB's share of a vCPU) is longer.
        let cpu = 0.05 * MB_PER_VCPU / 256.0;
        assert!((model.gb_s_per_page(0.05) - 0.25 * cpu).abs() < 1e-12);
        assert!((model.invocations_per_page() - 1.0 / 500.0).abs() < 1e-12);
        let page = PRICES.page(&Units::default(), &model, 0.001);
        let expected = 0.025 * PRICES.lambda_arm64_gb_s + PRICES.lambda_request / 500.0;
        assert!((page.total() - expected).abs() < 1e-15);
    }

    #[test]
    fn per_url_fractions_price_like_counts() {
        let batch = Units::of([(Call::DynamoBatchWriteItem, 0.04)]);
        assert!((batch.dynamodb_wru - 2.0).abs() < 1e-9);
    }
}
