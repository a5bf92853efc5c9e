//! The command line, as clap sees it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use trawl_domain::crawl::{CheckpointFormat, DeliveredPages, StorageLayout};
use trawl_domain::paging::PageTemplate;
use trawl_domain::task::Priority;

/// trawl: a polite, resumable web crawler. Crawls locally (SQLite + files) by default, or on
/// AWS (DynamoDB + S3 + SQS) with `--backend aws`.
#[derive(Debug, Parser)]
#[command(name = "trawl", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Where crawls live: `local` (SQLite + files under --data-dir) or `aws` (the resources of
    /// --stack, or named by TRAWL_TABLE, TRAWL_BUCKET, TRAWL_QUEUE_URL …).
    #[arg(long, global = true, value_enum, default_value_t = BackendKind::Local, env = "TRAWL_BACKEND")]
    pub backend: BackendKind,
    /// The deployed CloudFormation stack (`make deploy`) whose outputs name the table, bucket
    /// and queues of `--backend aws`; TRAWL_TABLE and the other variables, when set, win.
    #[arg(long, global = true, value_name = "NAME", env = "TRAWL_STACK")]
    pub stack: Option<String>,
    /// The local backend's directory.
    #[arg(
        long,
        global = true,
        default_value = "./trawl-data",
        env = "TRAWL_DATA_DIR"
    )]
    pub data_dir: PathBuf,
    /// Print results as JSON (one object) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// A command run (`sh -c`) each time this process writes a delivery, with TRAWL_CRAWL_ID,
    /// TRAWL_GENERATION, TRAWL_DELIVERY_ID, TRAWL_DELIVERY (its location) and TRAWL_TASKS set;
    /// its output goes to stderr. A failing command fails the command (exit 1), the delivery
    /// staying in place.
    #[arg(long, global = true, value_name = "CMD", env = "TRAWL_ON_DELIVERED")]
    pub on_delivered: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    Local,
    Aws,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Crawl from seed URLs until done, then deliver, with workers in this process (also with
    /// --backend aws: to hand a crawl to the deployed functions, use `submit`). Re-run the same
    /// command to resume.
    Crawl(CrawlArgs),
    /// Serve a small generated site on 127.0.0.1 and crawl it: trawl at work, offline.
    Demo,
    /// Tasks per status, per crawl; with --watch, follows one crawl until it is delivered.
    Status(StatusArgs),
    /// List or inspect tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// The crawl's hosts: backlog, errors, snoozes, and when each will finish at its pace.
    Hosts(HostsArgs),
    /// Make failed or ignored tasks claimable again.
    Retry(RetryArgs),
    /// Write a delivery (manifest, WARC, summary, delta) for a crawl.
    Deliver(CrawlSelector),
    /// Remove deliveries beyond the crawl's retention and compact its segments now (what
    /// follows each delivery of a crawl with `delivery.keep_generations`).
    Compact(CompactArgs),
    /// Delete a crawl's tasks and stored pages (refuses a running crawl unless --force).
    Purge(PurgeArgs),
    /// Create the AWS table, bucket and queues (for moto and development accounts).
    Setup(SetupArgs),
    /// Upgrade a DynamoDB table written before the sparse status index (AWS only): moves every
    /// crawl's pending, in-progress and succeeded tasks to their hosts' due lists. Safe to
    /// re-run; a second run moves nothing.
    Migrate(CrawlSelector),
    /// Start the crawl's next generation now: every page fetched before is fetched again
    /// (conditional GETs: unchanged pages cost no upload), then delivered with its delta.
    Recrawl(RecrawlNowArgs),
    /// Fetch these pages again now, whatever their status or schedule (Scrapy's dont_filter).
    Refetch(RefetchArgs),
    /// Forget every fetch of the crawl, so that everything is fetched again in full and
    /// delivered as new (DeltaFetch's reset).
    Reset(RewindArgs),
    /// Run the crawl's current extractors over every page it stored, without fetching any,
    /// then (unless --detach) deliver its next generation with those items and their delta.
    Reextract(RewindArgs),
    /// Pause a crawl: no turn of it starts, no recrawl wakes and it is not completed, until
    /// `trawl resume`; nothing is purged.
    Pause(CrawlSelector),
    /// Resume a paused crawl: its hosts with work get their turns again (on AWS, from the
    /// sweeper's next runs; locally, `trawl crawl --crawl-id ID` runs it).
    Resume(CrawlSelector),
    /// Show or change a crawl's stored configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Fetch a URL and say what the crawl's rules make of it (its schedule, a soft 404, a
    /// gone page) without writing anything.
    Check(CheckArgs),
    /// Fetch a URL (or read a crawled task's stored page) and print the items the
    /// configuration's extractors take out of it, and which fields failed, without writing
    /// anything.
    Extract(ExtractArgs),
    /// Hand a crawl to the deployed functions (--backend aws): sends the seed requests to the
    /// seed queue and returns at once; follow it with `trawl status --crawl-id ID --watch`.
    Submit(CrawlArgs),
    /// List or download a crawl's deliveries.
    #[command(subcommand)]
    Deliveries(DeliveriesCommand),
}

/// A rewind of a crawl, then (unless --detach) the crawl run until done.
#[derive(Debug, Args)]
pub struct RewindArgs {
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// Only mark the work and give the hosts their turns (deployed functions, or a later
    /// `trawl crawl --crawl-id`, fetch it); do not crawl here.
    #[arg(long)]
    pub detach: bool,
    /// Pages fetched at once while crawling (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 8, allow_negative_numbers = true,
          value_parser = parse_concurrency)]
    pub concurrency: usize,
}

#[derive(Debug, Args)]
pub struct RecrawlNowArgs {
    #[command(flatten)]
    pub rewind: RewindArgs,
    /// Only pages whose URL matches this regular expression.
    #[arg(long, value_name = "REGEX")]
    pub only: Option<String>,
}

#[derive(Debug, Args)]
pub struct RefetchArgs {
    #[command(flatten)]
    pub rewind: RewindArgs,
    /// The pages' URLs.
    pub urls: Vec<String>,
    /// Every page whose URL matches this regular expression.
    #[arg(long = "match", value_name = "REGEX")]
    pub matching: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// The crawl's configuration, as JSON (the form --config and `config set` take).
    Show(CrawlSelector),
    /// Replace the crawl's configuration by a JSON file's (checked as the seeder checks it),
    /// or, as `config set checkpoint VALUE`, its checkpoint (`''` clears it).
    Set {
        #[arg(long)]
        crawl_id: Option<String>,
        /// `checkpoint`: the crawl's incremental position (Docido's `since`), which `{since}`
        /// in its pagination templates reads.
        #[arg(value_parser = ["checkpoint"], requires = "value", conflicts_with = "file")]
        key: Option<String>,
        /// The checkpoint's new value.
        value: Option<String>,
        /// The configuration, as JSON.
        #[arg(long, value_name = "FILE", required_unless_present = "key")]
        file: Option<PathBuf>,
    },
    /// Print a crawl setting kept beside its configuration: `checkpoint`.
    Get {
        #[arg(value_parser = ["checkpoint"])]
        key: String,
        #[arg(long)]
        crawl_id: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The URL to fetch.
    pub url: String,
    /// The crawl whose rules apply (default: the only crawl, else the defaults).
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// Allow loopback and private addresses (as `trawl crawl` does).
    #[arg(long)]
    pub allow_private_networks: bool,
}

#[derive(Debug, Args)]
pub struct ExtractArgs {
    /// The URL to fetch.
    #[arg(required_unless_present = "task")]
    pub url: Option<String>,
    /// A crawl configuration with `extract` rules, as JSON (`trawl config show` prints one);
    /// with --task it defaults to the crawl's own.
    #[arg(long, value_name = "FILE", required_unless_present = "task")]
    pub config: Option<PathBuf>,
    /// Read the page a crawl stored for this task (a task id or its URL) instead of fetching.
    #[arg(long, value_name = "ID", conflicts_with_all = ["url", "allow_private_networks"])]
    pub task: Option<String>,
    /// The crawl of --task (default: the only crawl).
    #[arg(long, requires = "task")]
    pub crawl_id: Option<String>,
    /// Allow loopback and private addresses (as `trawl crawl` does).
    #[arg(long)]
    pub allow_private_networks: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub selector: CrawlSelector,
    /// Follow the crawl (counts, pages/min, errors by kind, ETA) until its delivery exists.
    #[arg(long)]
    pub watch: bool,
    /// Time between refreshes with --watch, e.g. `10s`, `1m`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub interval: std::time::Duration,
}

fn parse_duration(raw: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(raw)
        .map_err(|e| format!("{e}; e.g. 10s, 1m"))
        .and_then(|d| {
            if d.is_zero() {
                Err("must be more than zero".into())
            } else {
                Ok(d)
            }
        })
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// The crawl's deliveries, newest last: id, files, whether complete.
    List(CrawlSelector),
    /// Download a delivery's files (default: the newest complete one) into a directory.
    Get(DeliveriesGetArgs),
}

#[derive(Debug, Args)]
pub struct DeliveriesGetArgs {
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// The delivery (as `trawl deliveries list` names it; default: the newest complete one).
    #[arg(long)]
    pub delivery: Option<String>,
    /// Where the files go: DIR/DELIVERY/… (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

/// Most pages `trawl crawl` fetches at once. Each page in flight holds a connection and up to
/// the body cap in memory (10 MiB by default, `fetch.max_body_bytes`): 256 is at most 2.5 GiB of
/// bodies and 256 sockets, within the usual limit of 1,024 open files, and beyond what one
/// machine needs for a polite crawl (each host paced on its own, 64 requests in flight per host
/// at most). Unbounded, `--concurrency 1000000` made a 30-page crawl peak at 859 MiB.
pub const MAX_CONCURRENCY: u64 = 256;

/// Most requests in flight per host: the bound the seeder checks a crawl's
/// `politeness.per_host` against (`trawl_core::seed::validate_config`).
pub const MAX_PER_HOST: u32 = 64;

#[derive(Debug, Default, Args)]
pub struct CrawlArgs {
    /// Seed URLs.
    pub urls: Vec<String>,
    /// A file of seed URLs, one per line (`#` comments and blank lines skipped); a line may be
    /// a JSON object `{"url": …, "data": {…}}` whose data (at most 4096 bytes) goes with the
    /// task, into `trawl tasks show` and the delivery manifest.
    #[arg(long)]
    pub seeds_file: Option<PathBuf>,
    /// A sitemap (or sitemap index) whose URLs are seeded.
    #[arg(long)]
    pub sitemap: Vec<String>,
    /// A pagination template: a URL with `{page}` (and optionally `{since}`, the crawl's
    /// checkpoint), then its settings as KEY=VALUE words — `start=1 stop=21` (a range, stop
    /// excluded), `values=books,films`, or neither: open-ended, page after page while each
    /// yields something (`while=new_links|items|body`, `max_pages=N`) — or the seed request's
    /// JSON object. Repeatable.
    #[arg(long, value_name = "TEMPLATE [KEY=VALUE ...]", value_parser = parse_pages)]
    pub pages: Vec<PageTemplate>,
    /// The priority of this run's seeds that give none of their own (a seed line's
    /// `"_priority"`): 0 (the default) to 9; a host's pending URLs are fetched highest first.
    #[arg(long, value_name = "N", value_parser = parse_priority)]
    pub priority: Option<Priority>,
    /// Store this as the crawl's checkpoint once this run's seeds are in (Docido's `since`;
    /// `{since}` in a --pages template reads it).
    #[arg(long, value_name = "VALUE")]
    pub checkpoint: Option<String>,
    /// As each generation is delivered, set the checkpoint to the time it started, as
    /// `rfc3339`, `epoch_ms` or `epoch_s`: the next run's `{since}` asks for what changed since
    /// the last complete crawl began. Stored with the crawl (`auto_checkpoint`).
    #[arg(long, value_name = "FORMAT", value_parser = parse_checkpoint_format)]
    pub auto_checkpoint: Option<CheckpointFormat>,
    /// The crawl's id (default: derived from the first seed's host).
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// Stop discovering after this many pages.
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Follow links at most this many levels from the seeds.
    #[arg(long)]
    pub max_depth: Option<u32>,
    /// Also crawl this domain (default scope: the seeds' hosts). Repeatable.
    #[arg(long)]
    pub allow_domain: Vec<String>,
    /// Pages fetched at once (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 8, allow_negative_numbers = true,
          value_parser = parse_concurrency)]
    pub concurrency: usize,
    /// Requests in flight per host at most (1 to 64; default 1).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = parse_per_host)]
    pub per_host: Option<u32>,
    /// User-Agent header (put a contact URL in it).
    #[arg(long)]
    pub user_agent: Option<String>,
    /// Allow loopback and private addresses (intranet crawls, local test sites).
    #[arg(long)]
    pub allow_private_networks: bool,
    /// Keep page bodies gzip-compressed at rest (read back as fetched).
    #[arg(long)]
    pub compress_bodies: bool,
    /// How a new crawl keeps its bodies: `segments` (appended to segment files; the local
    /// default) or `objects` (one file or S3 object each; the default on AWS). Kept for the
    /// crawl's life.
    #[arg(long, value_name = "LAYOUT", value_parser = parse_layout)]
    pub layout: Option<StorageLayout>,
    /// What a delivery holds of the pages: `copy` (each page copied into its
    /// `pages-NNNNN.warc.gz`; the objects layout's default), `reference` (the manifest names
    /// each page's segment, offset and length; the segments layout's default) or `changed`
    /// (referenced, and the pages new or changed since the previous delivery copied into its
    /// `changed-NNNNN.warc.gz`) (`delivery.pages`).
    #[arg(long, value_name = "HOW", value_parser = parse_delivered_pages)]
    pub deliver_pages: Option<DeliveredPages>,
    /// Purge the crawl once it is delivered: its tasks, hosts, page bodies and record go, the
    /// delivery stays (with the bodies it names). Not with a recrawl schedule
    /// (`delivery.purge_after`).
    #[arg(long)]
    pub purge_after_delivery: bool,
    /// Keep the deliveries of the last N generations, removing older ones after each delivery
    /// (`delivery.keep_generations`; default: keep all). Lets compaction free segments.
    #[arg(long, value_name = "N")]
    pub keep_deliveries: Option<u32>,
    /// Rewrite a segment whose live bytes fall below this percentage of its size (with
    /// --keep-deliveries; 0: never; default 50) (`storage.compact_below_percent`).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub compact_below: Option<u8>,
    /// Give a page's user data (from its seed line) to the pages it links to, and so on.
    #[arg(long)]
    pub inherit_data: bool,
    /// Read each HTML page's title, description and language into its manifest line
    /// (`analysis.page`).
    #[arg(long)]
    pub analyse_pages: bool,
    /// Read each HTML page's main text, and each stored PDF's text, into its manifest line
    /// (`analysis.text`).
    #[arg(long)]
    pub analyse_text: bool,
    /// Exact `ip:port` addresses exempted from the network guard (the demo site's own).
    #[arg(skip)]
    pub guard_exempt: Vec<String>,
    /// Boxed: these flags would make every other command's arguments as large.
    #[command(flatten)]
    pub request: Box<RequestArgs>,
    #[command(flatten)]
    pub recrawl: Box<RecrawlArgs>,
    /// The whole crawl configuration as JSON (the seeder's `config`: scope, politeness, retry,
    /// recrawl with its rules and soft-404 checks, fetch …); flags given as well win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Replace the stored configuration of an existing crawl by this run's (without it, a run
    /// whose options differ from the stored ones is refused, and says where they differ).
    #[arg(long)]
    pub update_config: bool,
    /// End this run once N page fetches have started (robots.txt not counted) and the fetches
    /// in flight are done; the same command goes on from there. Not stored with the crawl.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_fetches: Option<u64>,
    /// End this run once it has crawled this long (`90s`, `10m`, `2h`), finishing the fetches
    /// in flight; the same command goes on from there. Not stored with the crawl.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_time: Option<std::time::Duration>,
    /// A development run that saves nothing: this command's crawl (or, given only --crawl-id,
    /// an existing crawl's settings and pending URLs, only read) runs in memory for at most
    /// --max-fetches fetches (10 by default), and each page's outcome is printed.
    #[arg(long)]
    pub dry_run: bool,
}

/// When pages are fetched again (the crawl's `recrawl` settings; URL rules in --config).
#[derive(Debug, Clone, Default, Args)]
pub struct RecrawlArgs {
    /// Fetch every page again this long after its last fetch: `90s`, `15m`, `6h`, `7d`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub recrawl_every: Option<u64>,
    /// Fetch pages again on Django Dynamic Scraper's adaptive schedule (15 min to 7 days by
    /// default: sooner for pages that change, later for pages that do not).
    #[arg(long)]
    pub adaptive: bool,
    /// The adaptive schedule's shortest interval (implies --adaptive).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub recrawl_min: Option<u64>,
    /// The adaptive schedule's longest interval (implies --adaptive).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub recrawl_max: Option<u64>,
    /// Fetch pages again as the change-rate estimator decides, spending N fetches a day on the
    /// crawl's pages: each page's change rate is estimated from its fetches, and the budget
    /// goes where it keeps the most pages fresh (over --adaptive).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_per_day: Option<u64>,
    /// Checks in a row finding a page that had content missing (404/410, soft 404) after which
    /// it is gone (default 2); until then it is kept, unchanged.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub missing_after: Option<u32>,
    /// How long after a check that found a page missing the next check comes (default: the
    /// checker's shortest interval, 1 day).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_ms)]
    pub missing_recheck: Option<u64>,
}

/// A duration: a number with a unit (`ms`, `s`, `m`, `h`, `d`), in milliseconds.
pub fn parse_duration_ms(raw: &str) -> Result<u64, String> {
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (number, unit) = raw.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{raw:?} is not a duration: give e.g. 90s, 15m, 6h, 7d"))?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{raw:?}: the unit is one of ms, s, m, h, d")),
    };
    number
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{raw:?} is too long"))
}

/// How `trawl crawl` makes its requests (the crawl's `fetch` settings).
#[derive(Debug, Clone, Default, Args)]
pub struct RequestArgs {
    /// Also store bodies of this content type besides HTML (e.g. `application/pdf`). Repeatable.
    #[arg(long, value_name = "TYPE")]
    pub store_content_type: Vec<String>,
    /// A request header sent with every request, as `Name: value`. Repeatable. Not for secrets
    /// (they would be stored with the crawl): use --bearer-env or --basic-env.
    #[arg(long, value_name = "NAME: VALUE", value_parser = parse_header)]
    pub header: Vec<(String, String)>,
    /// The Accept-Language header, e.g. `fr-CH, fr;q=0.9`.
    #[arg(long, value_name = "LANGUAGES")]
    pub accept_language: Option<String>,
    /// Send `Authorization: Bearer <token>` to HOST (or HOST:PORT), the token read from the
    /// environment variable VAR when requests are sent; only the name is stored. Repeatable.
    #[arg(long, value_name = "HOST=VAR", value_parser = parse_bearer)]
    pub bearer_env: Vec<BearerEnv>,
    /// Send HTTP Basic credentials to HOST (or HOST:PORT), user name and password read from the
    /// environment variables USERVAR and PASSVAR; only the names are stored. Repeatable.
    #[arg(long, value_name = "HOST=USERVAR:PASSVAR", value_parser = parse_basic)]
    pub basic_env: Vec<BasicEnv>,
    /// Keep the cookies responses set (Set-Cookie) and send them back, as a browser does.
    #[arg(long)]
    pub keep_cookies: bool,
    /// Keep one cookie jar per host instead of one per crawl (implies --keep-cookies): no
    /// cookie crosses hosts.
    #[arg(long)]
    pub cookies_per_host: bool,
    /// Cookies sent from the first request on, from a Netscape cookies.txt (as curl, wget and
    /// browser extensions export them; expired ones skipped) or a JSON map
    /// `{"host": {"name": "value"}}`. Stored with the crawl: not for secrets you would not store.
    #[arg(long, value_name = "FILE")]
    pub cookies: Option<PathBuf>,
    /// Send every request through this proxy: `http://`, `https://`, `socks5://` or
    /// `socks5h://` (the proxy resolves names) with host and port. Repeatable: requests are
    /// spread over the proxies and a failing one is benched for a while.
    #[arg(long, value_name = "URL", value_parser = parse_proxy)]
    pub proxy: Vec<String>,
    /// Credentials for the proxy at HOST:PORT (one given with --proxy), user name and password
    /// read from the environment variables USERVAR and PASSVAR; only the names are stored.
    #[arg(long, value_name = "HOST:PORT=USERVAR:PASSVAR", value_parser = parse_proxy_basic)]
    pub proxy_basic_env: Vec<BasicEnv>,
    /// How requests pick a proxy: `per-request` (in turn, the default) or `sticky` (one per
    /// host).
    #[arg(long, value_enum)]
    pub proxy_rotation: Option<ProxyRotationArg>,
}

/// `--proxy-rotation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ProxyRotationArg {
    #[default]
    PerRequest,
    Sticky,
}

/// `--proxy URL`: a proxy URL as the crawl stores it (`scheme://host:port`), checked now. Errors
/// never echo the URL, which might carry a password.
fn parse_proxy(raw: &str) -> Result<String, String> {
    let url = url::Url::parse(raw.trim()).map_err(|_| "not a URL".to_owned())?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "a proxy URL may not hold credentials (they would be stored with the crawl): \
             use --proxy-basic-env HOST:PORT=USERVAR:PASSVAR"
                .into(),
        );
    }
    if !["http", "https", "socks5", "socks5h"].contains(&url.scheme()) {
        return Err("the scheme must be http, https, socks5 or socks5h".into());
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err("expected scheme://host:port".into());
    };
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err("expected scheme://host:port, without a path".into());
    }
    Ok(format!("{}://{host}:{port}", url.scheme()))
}

fn parse_proxy_basic(raw: &str) -> Result<BasicEnv, String> {
    parse_basic(raw)
}

/// `--bearer-env HOST=VAR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerEnv {
    pub host: String,
    pub token_var: String,
}

/// `--basic-env HOST=USERVAR:PASSVAR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicEnv {
    pub host: String,
    pub username_var: String,
    pub password_var: String,
}

/// `--pages`: a template with its settings as words, or the seed request's JSON object; either
/// way read as the seed request's `source.pagination` entry and checked as the seeder checks
/// it.
pub fn parse_pages(raw: &str) -> Result<PageTemplate, String> {
    let raw = raw.trim();
    let value = if raw.starts_with('{') {
        serde_json::from_str(raw).map_err(|e| format!("not a pagination template: {e}"))?
    } else {
        let mut words = raw.split_whitespace();
        let mut object = serde_json::Map::new();
        object.insert("template".into(), words.next().unwrap_or_default().into());
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("{word:?}: expected KEY=VALUE after the template"))?;
            let value: serde_json::Value = match key {
                "values" => value.split(',').collect::<Vec<_>>().into(),
                "start" | "stop" | "step" | "max_pages" => value
                    .parse::<i64>()
                    .map_err(|_| format!("{key}={value}: expected a whole number"))?
                    .into(),
                _ => value.into(),
            };
            object.insert(key.to_owned(), value);
        }
        serde_json::Value::Object(object)
    };
    let template: PageTemplate = serde_json::from_value(value).map_err(|e| {
        format!(
            "not a pagination template: {e} (keys: start, stop, step, values, max_pages, while)"
        )
    })?;
    template.validate().map_err(|e| e.to_string())?;
    Ok(template)
}

/// A count from 1 to `max`; the refusal names the range (negative numbers included: they are
/// values here, not flags).
fn count_up_to(raw: &str, max: u64) -> Result<u64, String> {
    raw.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("expected a whole number in 1..={max}"))
}

fn parse_concurrency(raw: &str) -> Result<usize, String> {
    usize::try_from(count_up_to(raw, MAX_CONCURRENCY)?).map_err(|e| e.to_string())
}

fn parse_priority(raw: &str) -> Result<Priority, String> {
    Priority::parse(raw).map_err(|e| e.to_string())
}

fn parse_checkpoint_format(raw: &str) -> Result<CheckpointFormat, String> {
    CheckpointFormat::parse(raw).ok_or_else(|| "expected rfc3339, epoch_ms or epoch_s".to_owned())
}

fn parse_delivered_pages(raw: &str) -> Result<DeliveredPages, String> {
    DeliveredPages::parse(raw).ok_or_else(|| "expected `copy`, `reference` or `changed`".to_owned())
}

fn parse_layout(raw: &str) -> Result<StorageLayout, String> {
    StorageLayout::parse(raw).ok_or_else(|| "expected `objects` or `segments`".to_owned())
}

fn parse_per_host(raw: &str) -> Result<u32, String> {
    u32::try_from(count_up_to(raw, u64::from(MAX_PER_HOST))?).map_err(|e| e.to_string())
}

fn parse_header(raw: &str) -> Result<(String, String), String> {
    match raw.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err("expected `Name: value`".into()),
    }
}

/// `HOST=REST`, checking that every variable REST names is set: a crawl whose credentials are
/// missing would otherwise fail each of the host's pages.
fn host_and_vars(raw: &str, vars: usize) -> Result<(String, Vec<String>), String> {
    let (host, rest) = raw
        .split_once('=')
        .filter(|(host, _)| !host.trim().is_empty())
        .ok_or("expected HOST=…")?;
    let names: Vec<String> = rest.split(':').map(|v| v.trim().to_owned()).collect();
    if names.len() != vars || names.iter().any(String::is_empty) {
        return Err(format!("expected {vars} variable name(s) after `=`"));
    }
    for name in &names {
        if std::env::var_os(name).is_none() {
            return Err(format!("the environment variable {name} is not set"));
        }
    }
    Ok((host.trim().to_owned(), names))
}

fn parse_bearer(raw: &str) -> Result<BearerEnv, String> {
    let (host, mut vars) = host_and_vars(raw, 1)?;
    Ok(BearerEnv {
        host,
        token_var: vars.remove(0),
    })
}

fn parse_basic(raw: &str) -> Result<BasicEnv, String> {
    let (host, mut vars) = host_and_vars(raw, 2)?;
    let password_var = vars.remove(1);
    Ok(BasicEnv {
        host,
        username_var: vars.remove(0),
        password_var,
    })
}

#[derive(Debug, Args)]
pub struct CrawlSelector {
    /// Only this crawl (default: every crawl for `status`, the only crawl otherwise).
    #[arg(long)]
    pub crawl_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct HostsArgs {
    #[command(subcommand)]
    pub show: Option<HostsCommand>,
    #[arg(long, global = true)]
    pub crawl_id: Option<String>,
    /// Order: most pending first, most host-wide errors first, or latest estimated finish first.
    #[arg(long, value_enum, default_value_t = HostSort::Pending)]
    pub sort: HostSort,
    /// Hosts shown at most.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostSort {
    Pending,
    Errors,
    Eta,
}

#[derive(Debug, Subcommand)]
pub enum HostsCommand {
    /// One host's record and its next due tasks.
    Show {
        /// The host (`example.com`, or `host:port` for a port that is not the default).
        host: String,
    },
    /// Crawl these hosts no more: from their next turns, their due tasks (and links found to
    /// them later) end `ignored` without a fetch. `trawl retry --status ignored --host HOST`
    /// takes one back.
    Drop {
        /// The hosts (`example.com`, or `host:port`), as `trawl hosts` lists them.
        #[arg(required = true)]
        hosts: Vec<String>,
        /// Why, kept in each of their tasks' last error.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Move these hosts' remaining work (pending, failed and in-progress tasks, with their
    /// depth and data) to another crawl, then drop them from this one (`moved to crawl TO`).
    Move {
        /// The hosts (`example.com`, or `host:port`), as `trawl hosts` lists them.
        #[arg(required = true)]
        hosts: Vec<String>,
        /// The crawl that takes their work over (it must exist).
        #[arg(long, value_name = "CRAWL_ID")]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Tasks in one status, oldest update first.
    List(TasksListArgs),
    /// One task, by URL or task id.
    Show(TasksShowArgs),
}

#[derive(Debug, Args)]
pub struct TasksListArgs {
    #[arg(long)]
    pub status: String,
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    #[arg(long)]
    pub crawl_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct TasksShowArgs {
    /// A URL or a task id.
    pub task: String,
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// The task's method, when it is not a GET (part of its identity, as a seed line's
    /// `_method`).
    #[arg(long, value_name = "METHOD")]
    pub method: Option<String>,
    /// The task's request body, as text (a seed line's `_body` string).
    #[arg(long, value_name = "TEXT", conflicts_with = "body_json")]
    pub body: Option<String>,
    /// The task's request body, as JSON (a seed line's `_body` object).
    #[arg(long, value_name = "JSON")]
    pub body_json: Option<String>,
    /// The task's dedup key (a seed line's `_key`); a URL the crawl's routes give a key is
    /// found by it without this.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// `failed` or `ignored`.
    #[arg(long)]
    pub status: String,
    #[arg(long)]
    pub crawl_id: Option<String>,
    /// Only this host's tasks (`example.com`, or `host:port`; `trawl hosts` lists them).
    #[arg(long)]
    pub host: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    #[command(flatten)]
    pub selector: CrawlSelector,
    /// Live bytes copied at most in this pass (default 1 GiB); a later pass goes on.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    #[arg(long)]
    pub crawl_id: String,
    /// Purge even a running crawl.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// Name prefix for the table, bucket and queues.
    #[arg(long, default_value = "trawl")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::seed::validate_config;
    use trawl_domain::crawl::CrawlConfig;

    #[test]
    fn the_per_host_bound_is_the_one_the_seeder_checks() {
        // GIVEN crawl configurations at the CLI's bound and one past it
        let with = |per_host| {
            let mut config = CrawlConfig::default();
            config.politeness.per_host = per_host;
            validate_config(&config)
        };

        // WHEN the seeder checks them, THEN the bound passes and one more does not
        assert_eq!(with(MAX_PER_HOST), Vec::<String>::new());
        assert_eq!(with(MAX_PER_HOST + 1).len(), 1);
        assert_eq!(parse_per_host(&MAX_PER_HOST.to_string()), Ok(MAX_PER_HOST));
        assert!(parse_per_host(&(MAX_PER_HOST + 1).to_string()).is_err());
    }

    #[test]
    fn proxy_urls_are_checked_and_stored_with_their_port() {
        assert_eq!(
            parse_proxy("http://Proxy.example:3128/").unwrap(),
            "http://proxy.example:3128"
        );
        assert_eq!(
            parse_proxy("socks5h://127.0.0.1:1080").unwrap(),
            "socks5h://127.0.0.1:1080"
        );
        assert_eq!(
            parse_proxy("https://proxy.example").unwrap(),
            "https://proxy.example:443"
        );
        for bad in [
            "proxy:3128",
            "ftp://proxy:21",
            "http://proxy:3128/path",
            "not a url",
        ] {
            assert!(parse_proxy(bad).is_err(), "{bad}");
        }
        let with_password = parse_proxy("http://bob:hunter2@proxy:3128").unwrap_err();
        assert!(with_password.contains("--proxy-basic-env"));
        assert!(!with_password.contains("hunter2"));
    }

    #[test]
    fn proxy_flags_parse() {
        let cli = Cli::try_parse_from([
            "trawl",
            "crawl",
            "http://example.com/",
            "--proxy",
            "http://a:1",
            "--proxy",
            "socks5://b:2",
            "--proxy-rotation",
            "sticky",
        ])
        .unwrap();
        let Command::Crawl(args) = cli.command else {
            panic!("not a crawl");
        };
        assert_eq!(args.request.proxy, ["http://a:1", "socks5://b:2"]);
        assert_eq!(args.request.proxy_rotation, Some(ProxyRotationArg::Sticky));
        assert!(Cli::try_parse_from(["trawl", "crawl", "--proxy-rotation", "random"]).is_err());
    }
}
