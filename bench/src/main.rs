//! trawl's benchmark harness. `make bench` (or `cargo run --profile lambda-release -p
//! trawl-bench -- [--json] [--quick]`) prints a table of: local crawl throughput against the raw
//! serving limit, AWS calls per URL on moto, the crawler Lambda's start-up and footprint, each
//! function's binary size and start to ready, the sweeper's cost curve, and cost per million
//! pages. See bench/README.md.

mod calls;
mod capacity;
mod chaos;
mod chaos_lambda;
mod chaos_local;
mod child;
mod compaction;
mod completion;
mod cost;
mod delivery;
mod error;
mod extract;
mod freshness;
mod frontier;
mod handlers;
mod hosts;
mod items_pass;
mod lambda;
mod latency;
mod links;
mod local;
mod machine;
mod moto;
mod pace;
mod report;
mod scrapy;
mod site;
mod storage;
mod sweep;
mod text;

use clap::{Parser, Subcommand, ValueEnum};
use error::{BenchResult, Context};
use report::Report;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "trawl-bench",
    about = "Measures trawl: speed, AWS calls, memory, cost"
)]
struct Args {
    /// Print one JSON record instead of the table.
    #[arg(long)]
    json: bool,
    /// A smaller site and fewer runs (under 3 minutes on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Runs per timed figure (median reported, min–max beside it).
    #[arg(long)]
    runs: Option<usize>,
    /// Pages of the local-crawl fixture site (default 5,000; 500 with --quick).
    #[arg(long)]
    pages: Option<usize>,
    /// Only these sections (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    #[command(subcommand)]
    child: Option<ChildRole>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    Local,
    Calls,
    Lambda,
    /// Each function's binary size and start to ready.
    Functions,
    Sweep,
    /// Completion and status at 500 and 5,000 hosts (moto).
    Completion,
    /// The deliverer's pages/s at 1, 4 and 16 writers (modelled round trips, and moto), and
    /// the delta.
    Delivery,
    /// Only the delta's bytes read per manifest byte (part of `delivery`).
    Delta,
    /// Only one generation delivered by layout, pages copied or referenced (part of
    /// `delivery`).
    DeliveryLayouts,
    /// One compaction pass on SQLite and files at 1,000 and 10,000 tasks: requests and time.
    Compaction,
    /// The delivery's items pass at 10^5 and 10^6 items: time and peak memory, bounded and not.
    Items,
    /// A crawl of 500 and 5,000 hosts through the four Lambda handlers (moto; long: only when
    /// asked for).
    Handlers,
    Frontier,
    Capacity,
    /// Only the capacity simulator's link-following crawl and host-creation burst (part of
    /// `capacity`).
    CapacityLinks,
    /// Link discovery with many crawler containers (moto).
    Links,
    /// A fast host beside slow ones in one batch.
    Pace,
    Freshness,
    /// Only the freshness section's search for DDS's best variant at fixed daily's fetches
    /// (fixed daily, then the search; part of `freshness`).
    FreshnessDds,
    Hosts,
    Storage,
    Extract,
    /// The CPU per page of the main-text analysis (`analysis.text`), on the fixture pages and
    /// on real ones (the toolchain's documentation, the machine's PDFs).
    Text,
    /// The three chaos runs (embedded, the CLI on AWS, the Lambda handlers).
    Chaos,
    /// Only the embedded chaos run.
    ChaosLocal,
    /// Only the chaos run of the CLI on AWS.
    ChaosCli,
    /// Only the chaos run through the Lambda handlers.
    ChaosLambda,
}

/// Roles the harness runs itself in as a child process.
#[derive(Debug, Subcommand)]
enum ChildRole {
    /// Serve the fixture site on 127.0.0.1 (prints the port; stops when stdin closes).
    #[command(hide = true)]
    ServeSite {
        #[arg(long)]
        pages: usize,
    },
    /// Crawl the site once with the core Crawler on the embedded backend (prints JSON).
    #[command(hide = true)]
    CrawlOnce {
        #[arg(long)]
        start: String,
        #[arg(long)]
        dir: PathBuf,
        /// Extract items with the extraction section's 10-field extractor.
        #[arg(long)]
        extract: bool,
        /// `objects` or `segments`.
        #[arg(long, default_value = "objects", value_parser = parse_layout)]
        layout: trawl_domain::crawl::StorageLayout,
    },
    /// One run of the embedded chaos crawl through port faults (prints JSON when delivered).
    #[command(hide = true)]
    ChaosRun {
        #[arg(long)]
        start: String,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        run: u64,
        /// The share of crash-point calls that abort the process.
        #[arg(long)]
        crash: f64,
    },
    /// The chaos run through the Lambda handlers (writes its measures to --out: the handlers
    /// print their metrics on stdout).
    #[command(hide = true)]
    ChaosLambda {
        #[arg(long)]
        pages: usize,
        #[arg(long)]
        out: PathBuf,
    },
    /// The second generation's items pass of the `items` section (writes its measures to --out).
    #[command(hide = true)]
    ItemsPass {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        entries: u64,
        #[arg(long)]
        previous_bytes: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// One crawl of many hosts through the Lambda handlers (writes its measures to --out).
    #[command(hide = true)]
    HandlersRun {
        #[arg(long)]
        hosts: usize,
        #[arg(long)]
        recrawl: bool,
        #[arg(long)]
        out: PathBuf,
    },
}

fn parse_layout(raw: &str) -> Result<trawl_domain::crawl::StorageLayout, String> {
    trawl_domain::crawl::StorageLayout::parse(raw)
        .ok_or_else(|| "expected `objects` or `segments`".to_owned())
}

/// Pages of the site the AWS sections crawl (moto is slow: keep it small).
const AWS_PAGES: usize = 100;

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match &args.child {
        Some(ChildRole::ServeSite { pages }) => site::serve_main(*pages),
        Some(ChildRole::CrawlOnce {
            start,
            dir,
            extract,
            layout,
        }) => local::crawl_once_main(start, dir, *extract, *layout),
        Some(ChildRole::ChaosRun {
            start,
            dir,
            run,
            crash,
        }) => chaos_local::chaos_run_main(start, dir, *run, *crash),
        Some(ChildRole::ChaosLambda { pages, out }) => chaos_lambda::chaos_lambda_main(*pages, out),
        Some(ChildRole::HandlersRun {
            hosts,
            recrawl,
            out,
        }) => handlers::handlers_main(*hosts, *recrawl, out),
        Some(ChildRole::ItemsPass {
            dir,
            entries,
            previous_bytes,
            out,
        }) => items_pass::items_pass_main(dir, *entries, *previous_bytes, out),
        None => bench(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("trawl-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A sibling binary of this one in the same target directory, if built.
fn sibling(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.join(name);
    path.is_file().then_some(path)
}

fn bench(args: &Args) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .step("runtime")?;
    let report = runtime.block_on(measure(args));
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).step("encode report")?
        );
    } else {
        print!("{}", report.table());
    }
    if report.skipped.iter().any(|s| s.contains("FAILED")) {
        return Err(error::check("benchmark", "a section failed (see above)"));
    }
    Ok(())
}

async fn measure(args: &Args) -> Report {
    let wanted = |s: Section| args.only.is_empty() || args.only.contains(&s);
    let runs = args.runs.unwrap_or(3).max(1);
    let pages = args.pages.unwrap_or(if args.quick { 500 } else { 5_000 });
    let mut command = "cargo run --profile lambda-release -p trawl-bench --".to_owned();
    for a in std::env::args().skip(1) {
        command.push(' ');
        command.push_str(&a);
    }
    let mut report = Report {
        machine: machine::Machine::describe(),
        command,
        quick: args.quick,
        runs,
        figures: Vec::new(),
        skipped: Vec::new(),
        details: serde_json::Map::new(),
    };
    if cfg!(debug_assertions) {
        report
            .skipped
            .push("representative figures (this is a debug build: run with --release)".to_owned());
    }
    let failed = |report: &mut Report, section: &str, e: error::BenchError| {
        eprintln!("trawl-bench: {section}: {e}");
        report.skipped.push(format!("{section}: FAILED: {e}"));
    };

    if wanted(Section::Local) {
        eprintln!("local crawl …");
        let cli = sibling("trawl");
        if cli.is_none() {
            report.skipped.push(
                "`trawl crawl` (the CLI binary is not built in this target directory)".to_owned(),
            );
        }
        let scrapy = match scrapy::python() {
            Ok(python) => Some(python),
            Err(e) => {
                report
                    .skipped
                    .push(format!("Scrapy beside `trawl crawl` (no Scrapy: {e})"));
                None
            }
        };
        match local::run(pages, runs, cli.as_deref(), scrapy.as_deref()).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "local crawl", e),
        }
    }

    let needs_site = wanted(Section::Calls) || wanted(Section::Lambda);
    let aws_site = if needs_site {
        match site::Site::start(AWS_PAGES) {
            Ok(site) => Some(site),
            Err(e) => {
                failed(&mut report, "fixture site", e);
                None
            }
        }
    } else {
        None
    };
    let mut calls_result = None;
    if let (true, Some(site)) = (wanted(Section::Calls), &aws_site) {
        eprintln!("AWS calls per URL (moto) …");
        match calls::run(site, if args.quick { 50 } else { 100 }).await {
            Ok((figures, result)) => {
                report.figures.extend(figures);
                if let Ok(v) = serde_json::to_value(&result) {
                    report.details.insert("calls".to_owned(), v);
                }
                calls_result = Some(result);
            }
            Err(e) => failed(&mut report, "AWS calls", e),
        }
    }
    let mut lambda_result = None;
    if let (true, Some(site)) = (wanted(Section::Lambda), &aws_site) {
        eprintln!("Lambda worker …");
        match sibling("crawler") {
            None => report.skipped.push(
                "Lambda worker (build it first: cargo build --release -p crawler)".to_owned(),
            ),
            Some(binary) => {
                let batches = if args.quick { 5 } else { 10 };
                match lambda::run(Path::new(&binary), site, runs, batches).await {
                    Ok((figures, result)) => {
                        report.figures.extend(figures);
                        lambda_result = Some(result);
                    }
                    Err(e) => failed(&mut report, "Lambda worker", e),
                }
            }
        }
    }
    if wanted(Section::Functions) {
        eprintln!("functions: sizes and start to ready …");
        let names = ["seeder", "crawler", "sweeper", "deliverer"];
        let binaries: Vec<(&str, PathBuf)> = names
            .iter()
            .filter_map(|&name| Some((name, sibling(name)?)))
            .collect();
        if binaries.len() < names.len() {
            report.skipped.push(
                "function sizes and start times (build them first, each on its own as `make bench` does: cargo build --profile lambda-release -p seeder, then -p crawler, -p sweeper, -p deliverer)"
                    .to_owned(),
            );
        } else {
            let cli = sibling("trawl");
            match lambda::functions(&binaries, cli.as_deref(), runs).await {
                Ok(figures) => report.figures.extend(figures),
                Err(e) => failed(&mut report, "function start times", e),
            }
        }
    }
    if wanted(Section::Sweep) {
        eprintln!("sweeper cost curve …");
        match sweep::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "sweeper", e),
        }
    }
    if wanted(Section::Delivery) {
        eprintln!("deliveries at 1, 4 and 16 writers …");
        match delivery::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "deliveries", e),
        }
    } else {
        if args.only.contains(&Section::Delta) {
            eprintln!("the delta at 10^5 and 10^6 lines …");
            match delivery::run_delta(args.quick).await {
                Ok(figures) => report.figures.extend(figures),
                Err(e) => failed(&mut report, "delta", e),
            }
        }
        if args.only.contains(&Section::DeliveryLayouts) {
            eprintln!("one generation delivered by layout …");
            match delivery::run_layouts(args.quick).await {
                Ok(figures) => report.figures.extend(figures),
                Err(e) => failed(&mut report, "delivery by layout", e),
            }
        }
    }
    if wanted(Section::Compaction) {
        eprintln!("a compaction pass at two sizes …");
        match compaction::run().await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "compaction", e),
        }
    }
    if wanted(Section::Items) {
        eprintln!("the items pass at two sizes …");
        match items_pass::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "items pass", e),
        }
    }
    if wanted(Section::Completion) {
        eprintln!("completion at many hosts …");
        match completion::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "completion at many hosts", e),
        }
    }
    // An hour or more at full size: only when asked for (`--only handlers`).
    if args.only.contains(&Section::Handlers) {
        eprintln!("many hosts through the handlers …");
        match handlers::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "many hosts through the handlers", e),
        }
    }
    if wanted(Section::Hosts) {
        eprintln!("hosts view …");
        match sibling("trawl") {
            Some(cli) => match hosts::run(args.quick, runs, &cli).await {
                Ok(figures) => report.figures.extend(figures),
                Err(e) => failed(&mut report, "hosts view", e),
            },
            None => report.skipped.push(
                "`trawl hosts` (the CLI binary is not built in this target directory)".to_owned(),
            ),
        }
    }
    if wanted(Section::Frontier) {
        eprintln!("frontier simulation …");
        report.figures.extend(frontier::run(args.quick));
    }
    if wanted(Section::Capacity) {
        eprintln!("capacity simulation …");
        match capacity::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "capacity simulation", e),
        }
    } else if args.only.contains(&Section::CapacityLinks) {
        eprintln!("capacity simulation, following links …");
        match capacity::run_links(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "capacity simulation", e),
        }
    }
    if wanted(Section::Links) {
        eprintln!("link discovery, many containers (moto) …");
        match links::run(args.quick).await {
            Ok((figures, details)) => {
                report.figures.extend(figures);
                report.details.insert("links".to_owned(), details);
            }
            Err(e) => failed(&mut report, "links", e),
        }
    }
    if wanted(Section::Pace) {
        eprintln!("each host at its own pace …");
        match pace::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "pace", e),
        }
    }
    if wanted(Section::Freshness) {
        eprintln!("freshness simulation …");
        match freshness::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "freshness simulation", e),
        }
    } else if args.only.contains(&Section::FreshnessDds) {
        eprintln!("freshness simulation: DDS's search at fixed daily's fetches …");
        match freshness::run_dds(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "freshness simulation", e),
        }
    }
    // Minutes long: only when asked for (`--only chaos`, `make chaos`, or one run alone:
    // `--only chaos-local|chaos-cli|chaos-lambda`).
    let chaos = |s: Section| args.only.contains(&Section::Chaos) || args.only.contains(&s);
    if chaos(Section::ChaosLocal) {
        eprintln!("chaos run (embedded, port faults and crashes) …");
        match chaos_local::run(args.quick).await {
            Ok(figures) => {
                // As they come: the AWS run after it takes many minutes more.
                for f in &figures {
                    eprintln!("  {}: {} {}", f.name, f.median, f.unit);
                }
                report.figures.extend(figures)
            }
            Err(e) => failed(&mut report, "embedded chaos run", e),
        }
    }
    if chaos(Section::ChaosCli) {
        eprintln!("chaos run (AWS faults) …");
        match sibling("trawl") {
            Some(cli) => match chaos::run(args.quick, &cli).await {
                Ok(figures) => report.figures.extend(figures),
                Err(e) => failed(&mut report, "chaos run", e),
            },
            None => report.skipped.push(
                "chaos run (the CLI binary is not built in this target directory)".to_owned(),
            ),
        }
    }
    if chaos(Section::ChaosLambda) {
        eprintln!("chaos run (Lambda handlers, AWS faults, duplicate deliveries) …");
        match chaos_lambda::run(args.quick).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "Lambda chaos run", e),
        }
    }
    if wanted(Section::Storage) {
        eprintln!("bodies at rest …");
        report.figures.extend(storage::run(pages));
    }
    if wanted(Section::Extract) {
        eprintln!("extraction …");
        match extract::run(pages, runs).await {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "extraction", e),
        }
    }
    if wanted(Section::Text) {
        eprintln!("page text …");
        match text::run(pages, runs) {
            Ok(figures) => report.figures.extend(figures),
            Err(e) => failed(&mut report, "page text", e),
        }
    }
    match (&calls_result, &lambda_result) {
        (Some(calls), Some(lambda)) => {
            let (figures, details) = cost::run(calls, lambda);
            report.figures.extend(figures);
            report.details.insert("cost".to_owned(), details);
        }
        _ => report
            .skipped
            .push("cost per million pages (needs the AWS calls and Lambda sections)".to_owned()),
    }
    report
}
