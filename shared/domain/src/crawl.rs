//! A crawl: its id, its configuration and its lifecycle state.

use crate::calls::CallTally;
use crate::canonical::CrawlId;
use crate::retry::RetryPolicy;
use crate::task::Millis;
use serde::{Deserialize, Serialize};

/// Which URLs belong to a crawl.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scope {
    /// Hosts or domains whose URLs are followed (`example.com` also admits `www.example.com`).
    /// Empty: the seed URLs' hosts.
    pub allowed_domains: Vec<String>,
    /// Regular expressions; when any are given, a URL must match one.
    pub include: Vec<String>,
    /// Regular expressions; a URL matching one is skipped.
    pub exclude: Vec<String>,
    /// Link depth limit (seeds are depth 0). None: unlimited.
    pub max_depth: Option<u32>,
    /// Most tasks the crawl may ever hold. None: unlimited. Never exceeded, even with many workers.
    pub max_pages: Option<u64>,
    /// Whether links found on pages are crawled.
    pub follow_links: bool,
}

/// How hard trawl may press one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Politeness {
    /// Requests in flight per host at most (the number of SQS message-group slots per host).
    pub per_host: u32,
    /// Pause between two requests of one host slot, in milliseconds.
    pub delay_ms: u64,
    /// Longest robots.txt Crawl-delay honoured, in milliseconds.
    pub max_crawl_delay_ms: u64,
    pub respect_robots: bool,
}

impl Default for Politeness {
    fn default() -> Self {
        Self {
            per_host: 1,
            delay_ms: 0,
            max_crawl_delay_ms: 10_000,
            respect_robots: true,
        }
    }
}

/// Limits on each fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchLimits {
    pub connect_timeout_ms: u64,
    pub timeout_ms: u64,
    /// Largest body stored, after decompression (also the decompression-bomb cap).
    pub max_body_bytes: u64,
    pub max_redirects: u8,
    /// Content types stored besides HTML (e.g. `application/pdf`).
    pub store_content_types: Vec<String>,
    /// Allow loopback and private addresses (intranet crawls, tests). Off by default (SSRF guard).
    pub allow_private_networks: bool,
    /// `ip:port` socket addresses the network guard lets through although they are private
    /// (for tests on 127.0.0.1 and one-off intranet hosts). Honoured for IP-literal URLs only.
    pub guard_exempt: Vec<String>,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            timeout_ms: 20_000,
            max_body_bytes: 10 * 1024 * 1024,
            max_redirects: 5,
            store_content_types: Vec::new(),
            allow_private_networks: false,
            guard_exempt: Vec::new(),
        }
    }
}

/// When succeeded pages are fetched again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecrawlPolicy {
    /// Interval between fetches of a page, in milliseconds. None: never recrawl.
    pub interval_ms: Option<u64>,
}

/// Default User-Agent; deployments should set their own with a contact URL.
pub const DEFAULT_USER_AGENT: &str = "trawl/0.1 (+https://github.com/trawl-crawler/trawl)";

/// Everything a crawl is configured with; carried by the seed request and stored on the crawl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlConfig {
    pub scope: Scope,
    pub politeness: Politeness,
    pub retry: RetryPolicy,
    pub recrawl: RecrawlPolicy,
    pub fetch: FetchLimits,
    pub user_agent: String,
    /// How long a claim holds a task before another worker may take it over, in milliseconds.
    pub lease_ms: u64,
}

impl Default for CrawlConfig {
    fn default() -> Self {
        Self {
            scope: Scope {
                follow_links: true,
                ..Scope::default()
            },
            politeness: Politeness::default(),
            retry: RetryPolicy::default(),
            recrawl: RecrawlPolicy::default(),
            fetch: FetchLimits::default(),
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            lease_ms: 120_000,
        }
    }
}

/// Where a crawl is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrawlState {
    Running,
    /// No task left to do; set exactly once per generation, and it triggers a delivery.
    Completed,
}

impl CrawlState {
    pub fn name(self) -> &'static str {
        match self {
            CrawlState::Running => "running",
            CrawlState::Completed => "completed",
        }
    }
}

/// A crawl as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crawl {
    pub id: CrawlId,
    pub config: CrawlConfig,
    pub state: CrawlState,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Counts completions: each recrawl round that completes is a new generation (and delivery).
    pub generation: u64,
    /// Task slots taken from `scope.max_pages`.
    pub pages_reserved: u64,
    /// Backend calls made for the crawl since it was created, by every function and container:
    /// each invocation adds its own (`CrawlStore::add_calls`).
    #[serde(default)]
    pub calls: CallTally,
}

impl Crawl {
    pub fn new(id: CrawlId, config: CrawlConfig, now: Millis) -> Self {
        Self {
            id,
            config,
            state: CrawlState::Running,
            created_at: now,
            updated_at: now,
            generation: 0,
            pages_reserved: 0,
            calls: CallTally::new(),
        }
    }
}
