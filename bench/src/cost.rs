//! Section 5: cost per million pages on AWS, from the measured calls per URL (section 2) and
//! the Lambda worker's CPU and wall time per page (section 3).
//!
//! Excluded: S3 storage, CloudWatch Logs, data transfer, the seeder/sweeper/deliverer (per crawl,
//! not per page), and the event source mapping's empty polls (a constant, not per page).

use crate::calls::CallsResult;
use crate::lambda::LambdaResult;
use crate::report::Figure;
use serde_json::json;
use trawl_domain::calls::Call;
use trawl_domain::price::{PRICES, UNIT_MODEL, Units};

const SECTION: &str = "cost per 1M pages";

/// Lambda gives a function one full vCPU at 1,769 MB, proportionally less below.
const MB_PER_VCPU: f64 = 1769.0;
/// Pages per invocation, as measured in section 3: one host turn of 10 pages. (An invocation
/// may carry up to 10 turns of up to `turn_pages` each: requests per page can only be fewer.)
const BATCH: f64 = 10.0;
/// An assumed wall time for an invocation of 10 pages fetched from real sites; loopback
/// fetches take microseconds and would flatter the compute cost.
const ASSUMED_WAN_BATCH_S: f64 = 1.0;
const PAGES: f64 = 1e6;

/// Lambda compute $ per page at `memory_mb`: CPU-bound time scaled to the memory size's CPU
/// share, or the batch's wall time per page when longer.
fn compute_per_page(lambda: &LambdaResult, memory_mb: f64, wall_per_page_s: f64) -> f64 {
    let cpu_bound_s = lambda.cpu_per_page_s * MB_PER_VCPU / memory_mb;
    memory_mb / 1024.0 * cpu_bound_s.max(wall_per_page_s) * PRICES.lambda_arm64_gb_s
}

pub fn run(calls: &CallsResult, lambda: &LambdaResult) -> (Vec<Figure>, serde_json::Value) {
    let fresh = &calls.fresh;
    // The same prices and unit model as `summary.json`.
    let units = Units::of(Call::ALL.iter().map(|&call| (call, fresh.per_url(call))));
    let per_page = PRICES.cost(&units);
    let dynamo = per_page.dynamodb * PAGES;
    let s3 = per_page.s3 * PAGES;
    let queue = per_page.sqs * PAGES;
    let requests = PRICES.lambda_request / BATCH * PAGES;
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
            "SQS (turn sends + event source polls/deletes)",
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
        "prices": PRICES.as_of,
        "unit_model": UNIT_MODEL,
        "usd": {
            "dynamodb_per_wru": PRICES.dynamodb_wru, "dynamodb_per_rru": PRICES.dynamodb_rru,
            "s3_per_put": PRICES.s3_put_class, "s3_per_get": PRICES.s3_get,
            "sqs_fifo_per_request": PRICES.sqs_fifo_request,
            "lambda_arm64_per_gb_s": PRICES.lambda_arm64_gb_s,
            "lambda_per_request": PRICES.lambda_request,
        },
        "units_per_page": {
            "dynamodb_wru": units.dynamodb_wru, "dynamodb_rru": units.dynamodb_rru,
            "s3_put_class": units.s3_put_class, "s3_get": units.s3_get,
            "sqs_requests": units.sqs_requests, "lambda_invocations": 1.0 / BATCH,
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
