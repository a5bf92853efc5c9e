//! Section 5: cost per million pages on AWS, fresh (objects and segments layouts), unchanged
//! recrawl and changed recrawl, from what section 2 measured on moto — calls per URL and the
//! DynamoDB write units its metered store priced from the items themselves
//! (`trawl_aws::dynamodb::capacity`) — and the Lambda worker's CPU per page (section 3), priced
//! by `trawl_domain::price` (as `summary.json`).
//!
//! Reads are metered too: the adapter prices each read from the items it returned, as DynamoDB
//! bills them (`trawl_domain::capacity::read_half_units`: 4 KB blocks, half for an eventually
//! consistent read, an absent key at the least).
//! Excluded: S3 storage, CloudWatch Logs, data transfer, the seeder, sweeper and deliverer's own
//! invocations (per crawl, not per page), and the event source mapping's empty polls.

use crate::calls::{CallProfile, CallsResult};
use crate::lambda::LambdaResult;
use crate::report::Figure;
use serde_json::json;
use trawl_domain::calls::Call;
use trawl_domain::price::{LambdaModel, PRICES, PageCost, Units};

const SECTION: &str = "cost per 1M pages";
const WRITES: &str = "DynamoDB write units";
const READS: &str = "DynamoDB read units";
const PAGES: f64 = 1e6;

/// The Lambda the figures assume: the crawler function as the template deploys it (512 MB,
/// `CrawlerFunction.MemorySize`, and a full batch of `BatchSize` host turns run at once, in
/// `infra/template.yaml`; `infra/tests/test_template.py` keeps them equal), pages from real
/// sites answering in 0.5 s, 1 request per second per host, turns of 50 pages.
const LAMBDA: LambdaModel = LambdaModel {
    memory_mb: 512.0,
    fetch_latency_s: 0.5,
    host_delay_s: 1.0,
    turns: 50.0,
    pages_per_turn: 50.0,
};

/// One scenario: its profiles (scheduling and crawl) added up, per page.
struct Scenario<'a> {
    name: &'static str,
    parts: [&'a CallProfile; 2],
}

impl Scenario<'_> {
    fn pages(&self) -> f64 {
        self.parts[1].urls.max(1) as f64
    }

    fn calls_per_page(&self, call: Call) -> f64 {
        self.parts.iter().map(|p| p.get(call) as f64).sum::<f64>() / self.pages()
    }

    /// Write units per page: (table, per index).
    fn writes_per_page(&self) -> (f64, Vec<(&'static str, f64)>) {
        let mut table = 0.0;
        let mut indexes: Vec<(&'static str, f64)> = Vec::new();
        for part in self.parts {
            let all = part.write_units();
            table += all.table as f64;
            for (&name, &n) in &all.indexes {
                match indexes.iter_mut().find(|(i, _)| *i == name) {
                    Some((_, sum)) => *sum += n as f64,
                    None => indexes.push((name, n as f64)),
                }
            }
        }
        let pages = self.pages();
        (
            table / pages,
            indexes.into_iter().map(|(i, n)| (i, n / pages)).collect(),
        )
    }

    /// Read units per page, as metered.
    fn reads_per_page(&self) -> f64 {
        self.parts.iter().map(|p| p.read_units).sum::<f64>() / self.pages()
    }

    /// Billing units per page: calls as `Units::of` counts them, the DynamoDB units as metered.
    fn units(&self) -> Units {
        let (table, indexes) = self.writes_per_page();
        let mut units = Units::of(Call::ALL.iter().map(|&c| (c, self.calls_per_page(c))));
        units.dynamodb_wru = table + indexes.iter().map(|(_, n)| n).sum::<f64>();
        units.dynamodb_rru = self.reads_per_page();
        units
    }
}

pub fn run(calls: &CallsResult, lambda: &LambdaResult) -> (Vec<Figure>, serde_json::Value) {
    let scenarios = [
        Scenario {
            name: "fresh",
            parts: [&calls.fresh_seed, &calls.fresh],
        },
        // The same fresh crawl with its bodies in segments (issue 29's goal: <= $3/M).
        Scenario {
            name: "fresh, segments layout",
            parts: [&calls.fresh_seed, &calls.fresh_segments],
        },
        Scenario {
            name: "unchanged recrawl",
            parts: [&calls.recrawl_schedule, &calls.recrawl],
        },
        Scenario {
            name: "changed recrawl",
            parts: [&calls.changed_schedule, &calls.changed],
        },
    ];
    let mut figures = Vec::new();
    let mut details = serde_json::Map::new();
    for scenario in &scenarios {
        let (table, indexes) = scenario.writes_per_page();
        let units = scenario.units();
        let wru = Figure::single(
            WRITES,
            format!("{}: WRU per URL (table + indexes)", scenario.name),
            "WRU",
            units.dynamodb_wru,
        );
        figures.push(match scenario.name {
            "fresh" => wru.at_most(5.5),
            "unchanged recrawl" => wru.at_most(4.0),
            _ => wru,
        });
        // `summary.json` prices write calls with `UNIT_MODEL`'s per-call units (it has no
        // images): how far that is from the metered units shows when those need updating.
        let per_call = Units::of(Call::ALL.iter().map(|&c| (c, scenario.calls_per_page(c))));
        figures.push(Figure::single(
            WRITES,
            format!(
                "{}: summary.json's per-call estimate ÷ metered",
                scenario.name
            ),
            "ratio",
            per_call.dynamodb_wru / units.dynamodb_wru.max(f64::MIN_POSITIVE),
        ));
        figures.push(Figure::single(
            READS,
            format!("{}: RRU per URL (metered)", scenario.name),
            "RRU",
            units.dynamodb_rru,
        ));
        figures.push(Figure::single(
            READS,
            format!(
                "{}: summary.json's per-call estimate ÷ metered",
                scenario.name
            ),
            "ratio",
            per_call.dynamodb_rru / units.dynamodb_rru.max(f64::MIN_POSITIVE),
        ));
        figures.push(Figure::single(
            WRITES,
            format!("{}: … on the table", scenario.name),
            "WRU",
            table,
        ));
        for (index, n) in &indexes {
            figures.push(Figure::single(
                WRITES,
                format!("{}: … on {index}", scenario.name),
                "WRU",
                *n,
            ));
        }
        let page: PageCost = PRICES.page(&units, &LAMBDA, lambda.cpu_per_page_s);
        let per_million = |usd: f64| usd * PAGES;
        for (what, usd) in [
            ("DynamoDB", page.cost.dynamodb),
            ("S3 requests", page.cost.s3),
            ("SQS", page.cost.sqs),
            ("Lambda", page.lambda),
        ] {
            figures.push(Figure::single(
                SECTION,
                format!("{}: {what}", scenario.name),
                "USD",
                per_million(usd),
            ));
        }
        let total = Figure::single(
            SECTION,
            format!("{}: total", scenario.name),
            "USD",
            per_million(page.total()),
        );
        figures.push(match scenario.name {
            "fresh" => total.at_most(9.0),
            "fresh, segments layout" => total.at_most(3.0),
            "unchanged recrawl" => total.at_most(2.0),
            _ => total,
        });
        let by_operation: serde_json::Map<String, serde_json::Value> = scenario
            .parts
            .iter()
            .flat_map(|p| p.writes.iter())
            .map(|(op, tally)| {
                (
                    (*op).to_owned(),
                    json!({"writes": tally.writes, "table": tally.table, "indexes": tally.indexes}),
                )
            })
            .collect();
        details.insert(
            scenario.name.to_owned(),
            json!({
                "units_per_page": {
                    "dynamodb_wru": units.dynamodb_wru, "dynamodb_wru_table": table,
                    "dynamodb_wru_indexes": indexes.iter().map(|(i, n)| json!({*i: n})).collect::<Vec<_>>(),
                    "dynamodb_rru": units.dynamodb_rru,
                    "s3_put_class": units.s3_put_class, "s3_get": units.s3_get,
                    "sqs_requests": units.sqs_requests,
                    "lambda_gb_s": LAMBDA.gb_s_per_page(lambda.cpu_per_page_s),
                    "lambda_invocations": LAMBDA.invocations_per_page(),
                },
                "usd_per_million": {
                    "dynamodb": per_million(page.cost.dynamodb), "s3": per_million(page.cost.s3),
                    "sqs": per_million(page.cost.sqs), "lambda": per_million(page.lambda),
                    "total": per_million(page.total()),
                },
                "writes_by_operation": by_operation,
            }),
        );
    }
    details.insert(
        "basis".to_owned(),
        json!({
            "prices": PRICES.as_of,
            "usd": {
                "dynamodb_per_wru": PRICES.dynamodb_wru, "dynamodb_per_rru": PRICES.dynamodb_rru,
                "s3_per_put": PRICES.s3_put_class, "s3_per_get": PRICES.s3_get,
                "sqs_per_request": PRICES.sqs_request,
                "lambda_arm64_per_gb_s": PRICES.lambda_arm64_gb_s,
                "lambda_per_request": PRICES.lambda_request,
            },
            "lambda": {
                "memory_mb": LAMBDA.memory_mb, "fetch_latency_s": LAMBDA.fetch_latency_s,
                "host_delay_s": LAMBDA.host_delay_s, "turns_per_invocation": LAMBDA.turns,
                "pages_per_turn": LAMBDA.pages_per_turn,
                "cpu_s_per_page_measured": lambda.cpu_per_page_s,
            },
            "reads": "1 RRU per GetItem or Query",
            "excluded": "S3 storage, CloudWatch Logs, data transfer, seeder/sweeper/deliverer invocations, empty event-source polls",
        }),
    );
    (figures, serde_json::Value::Object(details))
}
