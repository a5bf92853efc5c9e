//! Section `links`: link discovery with many crawler containers on moto
//! (`trawl_faults::links`): write units per fresh URL, link discovery included, and the
//! most-linked host's record writes refused by their version check. Single-threaded moto, so
//! that conditional writes are atomic as on DynamoDB (a refusal counted is a refusal DynamoDB
//! would make). Two sizes ten times apart.

use crate::error::{BenchResult, check};
use crate::moto::{Moto, stack};
use crate::report::Figure;
use std::time::Duration;
use trawl_faults::links::{LinkPlan, LinkRun, LinkStack, run_links};

const SECTION: &str = "links, many containers";

pub async fn run(quick: bool) -> BenchResult<(Vec<Figure>, serde_json::Value)> {
    // (hosts, pages per host, cold containers)
    let sizes: &[(usize, usize, bool)] = if quick {
        &[(8, 16, false), (8, 16, true)]
    } else {
        &[(10, 40, false), (10, 40, true), (20, 100, false)]
    };
    let moto = Moto::start(false)?;
    let mut figures = Vec::new();
    let mut details = serde_json::Map::new();
    for (n, &(hosts, pages_per_host, cold)) in sizes.iter().enumerate() {
        let made = stack(&moto.endpoint, &format!("bench-links-{n}")).await?;
        let plan = LinkPlan {
            hosts,
            pages_per_host,
            containers: 4,
            concurrency: 10,
            turn_pages: 10,
            cold,
            timeout: Duration::from_secs(900),
        };
        let run = run_links(
            LinkStack {
                store: made.store,
                probe: made.probe,
                blobs: made.blobs,
                queue: made.queue,
                calls: made.calls,
            },
            plan,
            &format!("links-{n}"),
        )
        .await
        .map_err(|e| check("link run", e))?;
        let label = format!(
            "{} pages over {hosts} hosts, {} containers{}",
            run.pages,
            plan.containers,
            if cold { ", cold" } else { "" }
        );
        eprintln!("  {label}: {}", summary(&run));
        figures.push(
            Figure::of(
                SECTION,
                format!("write units per fresh URL, links included ({label})"),
                "WRU",
                &[run.units_per_url()],
            )
            .at_most(6.0),
        );
        figures.push(
            Figure::of(
                SECTION,
                format!(
                    "refused writes of the most-linked host's record ({label}; {} on every host)",
                    run.refused_host_writes
                ),
                "writes",
                &[run.refused_on_most_linked as f64],
            )
            .at_most(0.0),
        );
        details.insert(label, detail(&run));
    }
    Ok((figures, serde_json::Value::Object(details)))
}

fn summary(run: &LinkRun) -> String {
    let per_url = |op: &str| {
        run.writes
            .get(op)
            .map_or(0.0, |t| t.total() as f64 / run.pages.max(1) as f64)
    };
    format!(
        "{:.2} WRU/URL (seed {:.2}, finish {:.2}, host records {:.2}, offers {:.2}), {} refused host writes ({} on {}), {} fetches, {:.0} s",
        run.units_per_url(),
        per_url("seed"),
        per_url("finish"),
        per_url("put_host"),
        per_url("add_seeded"),
        run.refused_host_writes,
        run.refused_on_most_linked,
        run.most_linked,
        run.fetches,
        run.seconds
    )
}

fn detail(run: &LinkRun) -> serde_json::Value {
    let writes: serde_json::Map<String, serde_json::Value> = run
        .writes
        .iter()
        .map(|(op, t)| {
            (
                (*op).to_owned(),
                serde_json::json!({"writes": t.writes, "units": t.total()}),
            )
        })
        .collect();
    serde_json::json!({
        "pages": run.pages,
        "fetches": run.fetches,
        "write_units_per_url": run.units_per_url(),
        "writes": writes,
        "refused_on_most_linked": run.refused_on_most_linked,
        "refused_host_writes": run.refused_host_writes,
        "calls": run.calls,
        "seconds": run.seconds,
    })
}
