//! What backend calls cost: one dated price table and one model of the billing units each call
//! uses, shared by `summary.json` (a crawl's estimated cost) and the benchmark (cost per million
//! pages), so the two never disagree.

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
    /// SQS FIFO, per request (each 64 KB chunk; trawl's batches of small messages are one).
    pub sqs_fifo_request: f64,
    /// Lambda on arm64, per GB-second.
    pub lambda_arm64_gb_s: f64,
    /// Lambda, per request.
    pub lambda_request: f64,
}

/// us-east-1 list prices as AWS published them in July 2025, after DynamoDB's November 2024
/// on-demand price cut. Not re-checked since: check the current pricing pages before quoting.
pub const PRICES: Prices = Prices {
    as_of: "us-east-1 list prices of 2025-07 (check current pricing before quoting)",
    dynamodb_wru: 0.625 / 1e6,
    dynamodb_rru: 0.125 / 1e6,
    s3_put_class: 0.005 / 1e3,
    s3_get: 0.0004 / 1e3,
    sqs_fifo_request: 0.50 / 1e6,
    lambda_arm64_gb_s: 0.000_013_333_4,
    lambda_request: 0.20 / 1e6,
};

/// How calls become billing units, in words (reported beside every estimate).
pub const UNIT_MODEL: &str = "items under 1 KB; a DynamoDB PutItem = 2 WRU (the item and its \
status-index entry), an UpdateItem = 3 WRU (a task write changes `updated`, the index's sort key, \
so the index deletes and re-puts the entry), a DeleteItem = 2 WRU, a BatchWriteItem = 25 such \
deletes, a GetItem or Query = 1 RRU; S3 PUT, LIST and multipart calls are PUT-class, GetObject \
GET-class, deletes free; every SQS call one FIFO request; SQLite, files and the in-process queue \
free.";

/// Write units of a PutItem: the item and its status-index entry.
const PUT_WRU: f64 = 2.0;
/// Write units of an UpdateItem of a task: the item, and the index entry moved (delete + put).
/// Crawl-record updates (page reservations, call counts) use fewer; they are a small minority.
const UPDATE_WRU: f64 = 3.0;
/// Write units of a DeleteItem: the item and its index entry.
const DELETE_WRU: f64 = 2.0;
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
                Call::DynamoGetItem | Call::DynamoQuery => units.dynamodb_rru += n,
                Call::S3PutObject
                | Call::S3ListObjects
                | Call::S3CreateMultipartUpload
                | Call::S3UploadPart
                | Call::S3CompleteMultipartUpload => units.s3_put_class += n,
                Call::S3GetObject => units.s3_get += n,
                Call::SqsSendMessageBatch
                | Call::SqsReceiveMessage
                | Call::SqsDeleteMessageBatch
                | Call::SqsChangeMessageVisibility => units.sqs_requests += n,
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
            sqs: units.sqs_requests * self.sqs_fifo_request,
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
        assert_eq!(units.dynamodb_wru, 5_000_000.0);
        assert_eq!(units.dynamodb_rru, 2_000_000.0);
        let cost = PRICES.cost(&units);
        assert!((cost.dynamodb - (3.125 + 0.25)).abs() < 1e-9, "{cost:?}");
        assert!((cost.s3 - (0.005 + 0.004)).abs() < 1e-9, "{cost:?}");
        assert!((cost.sqs - 1.0).abs() < 1e-9, "{cost:?}");
        assert!((cost.total() - 4.384).abs() < 1e-9, "{cost:?}");
    }

    #[test]
    fn per_url_fractions_price_like_counts() {
        let batch = Units::of([(Call::DynamoBatchWriteItem, 0.04)]);
        assert!((batch.dynamodb_wru - 2.0).abs() < 1e-9);
    }
}
