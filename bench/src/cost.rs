//! Section 5: cost per million pages on AWS, from the measured calls per URL (section 2) and
//! the Lambda worker's CPU and wall time per page (section 3).
//!
//! Excluded: S3 storage, CloudWatch Logs, data transfer, the seeder/sweeper/deliverer (per crawl,
//! not per page), and the event source mapping's empty polls (a constant, not per page).

use crate::calls::CallsResult;
use crate::lambda::LambdaResult;
use crate::report::Figure;
use serde_json::json;

const SECTION: &str = "cost per 1M pages";

/// List prices, us-east-1, as of 2026-11 — check current pricing before quoting these.
pub const PRICES_AS_OF: &str = "us-east-1 list prices as of 2026-11, check current pricing";
/// DynamoDB on-demand, $ per write request unit (1 KB) and read request unit (4 KB, strong).
const DYNAMO_WRU: f64 = 0.625 / 1e6;
const DYNAMO_RRU: f64 = 0.125 / 1e6;
/// S3 standard, $ per PUT/COPY/POST/LIST request and per GET request.
const S3_PUT: f64 = 0.005 / 1e3;
const S3_GET: f64 = 0.0004 / 1e3;
/// SQS FIFO, $ per request (each 64 KB chunk; our batches of 10 small messages are one).
const SQS_FIFO: f64 = 0.50 / 1e6;
/// Lambda arm64, $ per GB-second and per request.
const LAMBDA_GB_S: f64 = 0.000_013_333_4;
const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// Lambda gives a function one full vCPU at 1,769 MB, proportionally less below.
const MB_PER_VCPU: f64 = 1769.0;
/// Messages per invocation (the event source mapping's batch size).
const BATCH: f64 = 10.0;
/// An assumed wall time for a batch of 10 fetched concurrently from real sites; loopback
/// fetches take microseconds and would flatter the compute cost.
const ASSUMED_WAN_BATCH_S: f64 = 1.0;
const PAGES: f64 = 1e6;

/// Lambda compute $ per page at `memory_mb`: CPU-bound time scaled to the memory size's CPU
/// share, or the batch's wall time per page when longer.
fn compute_per_page(lambda: &LambdaResult, memory_mb: f64, wall_per_page_s: f64) -> f64 {
    let cpu_bound_s = lambda.cpu_per_page_s * MB_PER_VCPU / memory_mb;
    memory_mb / 1024.0 * cpu_bound_s.max(wall_per_page_s) * LAMBDA_GB_S
}

pub fn run(calls: &CallsResult, lambda: &LambdaResult) -> (Vec<Figure>, serde_json::Value) {
    let fresh = &calls.fresh;
    let per_url = |ops: &[&str]| -> f64 {
        ops.iter()
            .map(|op| fresh.calls.get(*op).copied().unwrap_or(0))
            .sum::<u64>() as f64
            / fresh.urls.max(1) as f64
    };
    // Items are under 1 KB (one WRU per write, failed conditions included) and under 4 KB
    // (one RRU per strongly consistent read; a small Query counted as one).
    let writes = per_url(&[
        "dynamodb.PutItem",
        "dynamodb.UpdateItem",
        "dynamodb.DeleteItem",
    ]);
    let reads = per_url(&["dynamodb.GetItem", "dynamodb.Query"]);
    let s3_puts = per_url(&[
        "s3.PutObject",
        "s3.ListObjectsV2",
        "s3.CreateMultipartUpload",
        "s3.UploadPart",
        "s3.CompleteMultipartUpload",
    ]);
    let s3_gets = per_url(&["s3.GetObject"]);
    let sqs = per_url(&[
        "sqs.SendMessageBatch",
        "sqs.ReceiveMessage",
        "sqs.DeleteMessageBatch",
        "sqs.ChangeMessageVisibility",
    ]);
    let dynamo = (writes * DYNAMO_WRU + reads * DYNAMO_RRU) * PAGES;
    let s3 = (s3_puts * S3_PUT + s3_gets * S3_GET) * PAGES;
    let queue = sqs * SQS_FIFO * PAGES;
    let requests = LAMBDA_REQUEST / BATCH * PAGES;
    let wan_wall = ASSUMED_WAN_BATCH_S / BATCH;
    let compute = |mb: f64, wall: f64| compute_per_page(lambda, mb, wall) * PAGES;
    let measured_128 = compute(128.0, lambda.wall_per_page_s);
    let wan_128 = compute(128.0, wan_wall);
    let fixed = dynamo + s3 + queue + requests;
    let figures = vec![
        Figure::single(SECTION, "DynamoDB (on-demand)", "USD", dynamo),
        Figure::single(SECTION, "S3 requests", "USD", s3),
        Figure::single(
            SECTION,
            "SQS FIFO (sends + event source polls/deletes)",
            "USD",
            queue,
        ),
        Figure::single(SECTION, "Lambda requests", "USD", requests),
        Figure::single(
            SECTION,
            "Lambda compute, 128 MB, measured loopback batches",
            "USD",
            measured_128,
        ),
        Figure::single(
            SECTION,
            "Lambda compute, 256 MB, measured loopback batches",
            "USD",
            compute(256.0, lambda.wall_per_page_s),
        ),
        Figure::single(
            SECTION,
            format!("Lambda compute, 128 MB, {ASSUMED_WAN_BATCH_S} s per batch (assumed WAN)"),
            "USD",
            wan_128,
        ),
        Figure::single(
            SECTION,
            format!("Lambda compute, 256 MB, {ASSUMED_WAN_BATCH_S} s per batch (assumed WAN)"),
            "USD",
            compute(256.0, wan_wall),
        ),
        Figure::single(
            SECTION,
            "total, 128 MB, measured",
            "USD",
            fixed + measured_128,
        ),
        Figure::single(
            SECTION,
            format!("total, 128 MB, {ASSUMED_WAN_BATCH_S} s per batch"),
            "USD",
            fixed + wan_128,
        ),
    ];
    let details = json!({
        "prices": PRICES_AS_OF,
        "usd": {
            "dynamodb_per_wru": DYNAMO_WRU, "dynamodb_per_rru": DYNAMO_RRU,
            "s3_per_put": S3_PUT, "s3_per_get": S3_GET, "sqs_fifo_per_request": SQS_FIFO,
            "lambda_arm64_per_gb_s": LAMBDA_GB_S, "lambda_per_request": LAMBDA_REQUEST,
        },
        "units_per_page": {
            "dynamodb_wru": writes, "dynamodb_rru": reads, "s3_put_class": s3_puts,
            "s3_get": s3_gets, "sqs_requests": sqs, "lambda_invocations": 1.0 / BATCH,
            "lambda_cpu_s": lambda.cpu_per_page_s, "lambda_wall_s_loopback": lambda.wall_per_page_s,
        },
        "assumed_wan_batch_s": ASSUMED_WAN_BATCH_S,
        "excluded": "S3 storage, CloudWatch Logs, data transfer, seeder/sweeper/deliverer, empty event-source polls",
    });
    (figures, details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_is_cpu_bound_or_wall_bound() {
        let lambda = LambdaResult {
            cpu_per_page_s: 0.01,
            wall_per_page_s: 0.0,
            peak_rss_mib: 30.0,
        };
        // CPU-bound: the GB-seconds do not depend on the memory size.
        let a = compute_per_page(&lambda, 128.0, 0.0);
        let b = compute_per_page(&lambda, 256.0, 0.0);
        assert!((a - b).abs() < 1e-15 && a > 0.0);
        // Wall-bound: twice the memory, twice the cost.
        let c = compute_per_page(&lambda, 128.0, 10.0);
        let d = compute_per_page(&lambda, 256.0, 10.0);
        assert!((d / c - 2.0).abs() < 1e-9);
    }
}
