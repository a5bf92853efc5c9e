//! Deployment settings read from the environment: one struct per reader (each Lambda function and
//! `trawl --backend aws`), each requiring exactly what its code uses. The `ENV_*` constants are
//! the one list of names; each struct's `VARIABLES` says which of them it reads (a test below
//! checks that against what it really reads), and `infra/tests/test_template.py` checks that the
//! SAM template gives every function exactly its `VARIABLES`.

use thiserror::Error;

/// DynamoDB table holding crawls and tasks.
pub const ENV_TABLE: &str = "TRAWL_TABLE";
/// S3 bucket for page bodies and deliveries.
pub const ENV_BUCKET: &str = "TRAWL_BUCKET";
/// Key prefix inside the bucket (optional).
pub const ENV_PREFIX: &str = "TRAWL_PREFIX";
/// URL of the crawl queue (FIFO or standard).
pub const ENV_QUEUE_URL: &str = "TRAWL_QUEUE_URL";
/// URL of the queue that triggers the deliverer when a crawl completes.
pub const ENV_DELIVERY_QUEUE_URL: &str = "TRAWL_DELIVERY_QUEUE_URL";
/// URL of the queue that triggers the seeder (seed requests and their continuations).
pub const ENV_SEED_QUEUE_URL: &str = "TRAWL_SEED_QUEUE_URL";
/// URL of the priority crawl queue (optional): the turns of hosts whose due work has a priority of
/// at least `TRAWL_PRIORITY_FROM` go to it (`trawl_domain::priority::TurnQueue`). Unset: every turn
/// goes to the crawl queue.
pub const ENV_PRIORITY_QUEUE_URL: &str = "TRAWL_PRIORITY_QUEUE_URL";
/// The lowest priority (1 to 9) whose turns go to the priority crawl queue (optional, default 1).
pub const ENV_PRIORITY_FROM: &str = "TRAWL_PRIORITY_FROM";
/// CloudFormation stack whose outputs name the resources `trawl --backend aws` uses (optional;
/// the variables above, when set, take precedence over its outputs).
pub const ENV_STACK: &str = "TRAWL_STACK";
/// Number of status-index shards per crawl and status (optional, default 4).
pub const ENV_SHARDS: &str = "TRAWL_SHARDS";
/// Messages processed at once inside one crawler batch (optional, default 10).
pub const ENV_CONCURRENCY: &str = "TRAWL_CONCURRENCY";
/// Default User-Agent for crawls whose seed request names none (optional).
pub const ENV_USER_AGENT: &str = "TRAWL_USER_AGENT";
/// Default per-host parallelism for crawls whose seed request names none (optional, default 1).
pub const ENV_PER_HOST: &str = "TRAWL_PER_HOST";

pub const DEFAULT_SHARDS: u32 = 4;
/// The template's `BatchConcurrency` default: a full batch (`BatchSize`) of turns at once.
pub const DEFAULT_CONCURRENCY: usize = 50;
pub const DEFAULT_PER_HOST: u32 = 1;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid ({value:?}): {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
}

/// Settings read from environment variables.
pub trait FromEnv: Sized {
    /// Every variable `read` looks at, required or not.
    const VARIABLES: &'static [&'static str];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError>;

    /// Reads the settings through `lookup` (a map in tests).
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        Self::read(&Env(&lookup))
    }

    /// Reads the settings from the process environment.
    fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}

/// Variables looked up by name; an empty or blank value counts as unset.
pub struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

/// The priority crawl queue and its threshold (`ENV_PRIORITY_QUEUE_URL`, `ENV_PRIORITY_FROM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityQueueSettings {
    pub url: String,
    pub from: trawl_domain::priority::Priority,
}

impl Env<'_> {
    pub fn optional(&self, name: &'static str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    pub fn required(&self, name: &'static str) -> Result<String, SettingsError> {
        self.optional(name).ok_or(SettingsError::Missing(name))
    }

    /// A whole number from 1 to `max`, `default` when unset.
    pub fn number(&self, name: &'static str, default: u64, max: u64) -> Result<u64, SettingsError> {
        let Some(value) = self.optional(name) else {
            return Ok(default);
        };
        match value.trim().parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(SettingsError::Invalid {
                name,
                value,
                reason: format!("expected a whole number from 1 to {max}"),
            }),
        }
    }

    fn shards(&self) -> Result<u32, SettingsError> {
        Ok(self.number(ENV_SHARDS, u64::from(DEFAULT_SHARDS), 256)? as u32)
    }

    /// The priority crawl queue, when one is named; its threshold is checked either way, so
    /// that a wrong one is refused before anything runs.
    fn priority_queue(&self) -> Result<Option<PriorityQueueSettings>, SettingsError> {
        use trawl_domain::priority::{Priority, TurnQueue};
        let default = u64::from(TurnQueue::FROM_DEFAULT.get());
        let max = u64::from(Priority::MAX.get());
        let from = self.number(ENV_PRIORITY_FROM, default, max)?;
        let from = Priority::new(from as i64).map_err(|e| SettingsError::Invalid {
            name: ENV_PRIORITY_FROM,
            value: from.to_string(),
            reason: e.to_string(),
        })?;
        Ok(self
            .optional(ENV_PRIORITY_QUEUE_URL)
            .map(|url| PriorityQueueSettings { url, from }))
    }
}

/// The seeder: writes crawls and tasks, sends their messages, fetches sitemaps. Manifests are
/// read from the bucket each request names; the crawls' bucket is where its `reextract`
/// operation reads stored pages and writes their items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeederSettings {
    pub table: String,
    pub shards: u32,
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub priority_queue: Option<PriorityQueueSettings>,
    /// The seed queue that triggers it, where an unfinished seed sends its continuation.
    pub seed_queue_url: String,
    pub default_user_agent: Option<String>,
    pub default_per_host: u32,
}

impl FromEnv for SeederSettings {
    const VARIABLES: &'static [&'static str] = &[
        ENV_TABLE,
        ENV_SHARDS,
        ENV_BUCKET,
        ENV_PREFIX,
        ENV_QUEUE_URL,
        ENV_PRIORITY_QUEUE_URL,
        ENV_PRIORITY_FROM,
        ENV_SEED_QUEUE_URL,
        ENV_USER_AGENT,
        ENV_PER_HOST,
    ];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError> {
        Ok(Self {
            table: env.required(ENV_TABLE)?,
            shards: env.shards()?,
            bucket: env.required(ENV_BUCKET)?,
            prefix: env.optional(ENV_PREFIX).unwrap_or_default(),
            queue_url: env.required(ENV_QUEUE_URL)?,
            priority_queue: env.priority_queue()?,
            seed_queue_url: env.required(ENV_SEED_QUEUE_URL)?,
            default_user_agent: env.optional(ENV_USER_AGENT),
            default_per_host: env.number(ENV_PER_HOST, u64::from(DEFAULT_PER_HOST), 64)? as u32,
        })
    }
}

/// The crawler: claims tasks, stores pages, enqueues the links it finds. The per-host
/// parallelism is each crawl's own (set when it was seeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrawlerSettings {
    pub table: String,
    pub shards: u32,
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub priority_queue: Option<PriorityQueueSettings>,
    pub concurrency: usize,
    /// The HTTP client's User-Agent for crawls that name none.
    pub default_user_agent: Option<String>,
}

impl FromEnv for CrawlerSettings {
    const VARIABLES: &'static [&'static str] = &[
        ENV_TABLE,
        ENV_SHARDS,
        ENV_BUCKET,
        ENV_PREFIX,
        ENV_QUEUE_URL,
        ENV_PRIORITY_QUEUE_URL,
        ENV_PRIORITY_FROM,
        ENV_CONCURRENCY,
        ENV_USER_AGENT,
    ];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError> {
        Ok(Self {
            table: env.required(ENV_TABLE)?,
            shards: env.shards()?,
            bucket: env.required(ENV_BUCKET)?,
            prefix: env.optional(ENV_PREFIX).unwrap_or_default(),
            queue_url: env.required(ENV_QUEUE_URL)?,
            priority_queue: env.priority_queue()?,
            concurrency: env.number(ENV_CONCURRENCY, DEFAULT_CONCURRENCY as u64, 100)? as usize,
            default_user_agent: env.optional(ENV_USER_AGENT),
        })
    }
}

/// The sweeper: reads the status index, re-enqueues tasks, announces completed crawls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweeperSettings {
    pub table: String,
    pub shards: u32,
    pub queue_url: String,
    pub priority_queue: Option<PriorityQueueSettings>,
    pub delivery_queue_url: String,
}

impl FromEnv for SweeperSettings {
    const VARIABLES: &'static [&'static str] = &[
        ENV_TABLE,
        ENV_SHARDS,
        ENV_QUEUE_URL,
        ENV_PRIORITY_QUEUE_URL,
        ENV_PRIORITY_FROM,
        ENV_DELIVERY_QUEUE_URL,
    ];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError> {
        Ok(Self {
            table: env.required(ENV_TABLE)?,
            shards: env.shards()?,
            queue_url: env.required(ENV_QUEUE_URL)?,
            priority_queue: env.priority_queue()?,
            delivery_queue_url: env.required(ENV_DELIVERY_QUEUE_URL)?,
        })
    }
}

/// The deliverer: reads a completed crawl, writes its delivery to the bucket. The delivery queue
/// is its trigger, and where it sends the continuation of a delivery longer than an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelivererSettings {
    pub table: String,
    pub shards: u32,
    pub bucket: String,
    pub prefix: String,
    pub delivery_queue_url: String,
}

impl FromEnv for DelivererSettings {
    const VARIABLES: &'static [&'static str] = &[
        ENV_TABLE,
        ENV_SHARDS,
        ENV_BUCKET,
        ENV_PREFIX,
        ENV_DELIVERY_QUEUE_URL,
    ];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError> {
        Ok(Self {
            table: env.required(ENV_TABLE)?,
            shards: env.shards()?,
            bucket: env.required(ENV_BUCKET)?,
            prefix: env.optional(ENV_PREFIX).unwrap_or_default(),
            delivery_queue_url: env.required(ENV_DELIVERY_QUEUE_URL)?,
        })
    }
}

/// `trawl --backend aws`: the table, the bucket and the crawl queue (it delivers in-process;
/// crawl defaults come from its command line), and the seed queue for `trawl submit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliSettings {
    pub table: String,
    pub shards: u32,
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub priority_queue: Option<PriorityQueueSettings>,
    /// Only `trawl submit` sends to it; it says so when it is missing.
    pub seed_queue_url: Option<String>,
}

impl FromEnv for CliSettings {
    const VARIABLES: &'static [&'static str] = &[
        ENV_TABLE,
        ENV_SHARDS,
        ENV_BUCKET,
        ENV_PREFIX,
        ENV_QUEUE_URL,
        ENV_PRIORITY_QUEUE_URL,
        ENV_PRIORITY_FROM,
        ENV_SEED_QUEUE_URL,
    ];

    fn read(env: &Env<'_>) -> Result<Self, SettingsError> {
        Ok(Self {
            table: env.required(ENV_TABLE)?,
            shards: env.shards()?,
            bucket: env.required(ENV_BUCKET)?,
            prefix: env.optional(ENV_PREFIX).unwrap_or_default(),
            queue_url: env.required(ENV_QUEUE_URL)?,
            priority_queue: env.priority_queue()?,
            seed_queue_url: env.optional(ENV_SEED_QUEUE_URL),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{BTreeSet, HashMap};

    fn lookup(env: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| env.get(name).cloned()
    }

    /// The names `T::read` looks up, with every variable set to a valid value.
    fn names_read<T: FromEnv>() -> BTreeSet<String> {
        let seen = RefCell::new(BTreeSet::new());
        T::from_lookup(|name| {
            seen.borrow_mut().insert(name.to_owned());
            Some("1".into())
        })
        .unwrap();
        seen.into_inner()
    }

    fn listed<T: FromEnv>() -> BTreeSet<String> {
        T::VARIABLES.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn each_reader_lists_exactly_the_variables_it_reads() {
        assert_eq!(names_read::<SeederSettings>(), listed::<SeederSettings>());
        assert_eq!(names_read::<CrawlerSettings>(), listed::<CrawlerSettings>());
        assert_eq!(names_read::<SweeperSettings>(), listed::<SweeperSettings>());
        assert_eq!(
            names_read::<DelivererSettings>(),
            listed::<DelivererSettings>()
        );
        assert_eq!(names_read::<CliSettings>(), listed::<CliSettings>());
    }

    #[test]
    fn the_deliverer_needs_no_crawl_queue_and_the_crawler_no_per_host() {
        let deliverer = DelivererSettings::from_lookup(lookup(&[
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_DELIVERY_QUEUE_URL, "d"),
        ]))
        .unwrap();
        assert_eq!(
            (deliverer.table.as_str(), deliverer.bucket.as_str()),
            ("t", "b")
        );
        assert!(!CrawlerSettings::VARIABLES.contains(&ENV_PER_HOST));
    }

    #[test]
    fn reads_required_and_optional_settings() {
        let s = CrawlerSettings::from_lookup(lookup(&[
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_QUEUE_URL, "q"),
            (ENV_SHARDS, "8"),
            (ENV_USER_AGENT, " "),
        ]))
        .unwrap();
        assert_eq!(
            (s.table.as_str(), s.shards, s.concurrency, s.prefix.as_str()),
            ("t", 8, DEFAULT_CONCURRENCY, "")
        );
        assert_eq!(s.default_user_agent, None, "a blank value is unset");
        let missing = CrawlerSettings::from_lookup(|_| None).unwrap_err();
        assert_eq!(missing, SettingsError::Missing(ENV_TABLE));
        let no_delivery_queue =
            SweeperSettings::from_lookup(lookup(&[(ENV_TABLE, "t"), (ENV_QUEUE_URL, "q")]))
                .unwrap_err();
        assert_eq!(
            no_delivery_queue,
            SettingsError::Missing(ENV_DELIVERY_QUEUE_URL)
        );
        let bad = SeederSettings::from_lookup(lookup(&[
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_QUEUE_URL, "q"),
            (ENV_SEED_QUEUE_URL, "s"),
            (ENV_PER_HOST, "65"),
        ]));
        assert!(matches!(
            bad,
            Err(SettingsError::Invalid {
                name: ENV_PER_HOST,
                ..
            })
        ));
    }

    #[test]
    fn a_priority_queue_is_read_with_its_threshold_and_a_threshold_out_of_1_to_9_is_refused() {
        let base = [(ENV_TABLE, "t"), (ENV_BUCKET, "b"), (ENV_QUEUE_URL, "q")];
        let with = |extra: &[(&str, &str)]| {
            let env: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
            CrawlerSettings::from_lookup(lookup(&env))
        };
        assert_eq!(with(&[]).unwrap().priority_queue, None);
        let default = with(&[(ENV_PRIORITY_QUEUE_URL, "p")]).unwrap();
        let queue = default.priority_queue.unwrap();
        assert_eq!((queue.url.as_str(), queue.from.get()), ("p", 1));
        let set = with(&[(ENV_PRIORITY_QUEUE_URL, "p"), (ENV_PRIORITY_FROM, "5")]).unwrap();
        assert_eq!(set.priority_queue.unwrap().from.get(), 5);
        for bad in ["0", "10", "high"] {
            let refused = with(&[(ENV_PRIORITY_QUEUE_URL, "p"), (ENV_PRIORITY_FROM, bad)]);
            assert!(
                matches!(
                    refused,
                    Err(SettingsError::Invalid {
                        name: ENV_PRIORITY_FROM,
                        ..
                    })
                ),
                "{bad}: {refused:?}"
            );
        }
    }
}
