//! Deployment settings read from the environment (the Lambda functions and `trawl --backend aws`).
//! The SAM template sets exactly these names; `infra/tests` checks both sides agree.

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
/// Number of status-index shards per crawl and status (optional, default 4).
pub const ENV_SHARDS: &str = "TRAWL_SHARDS";
/// Messages processed at once inside one crawler batch (optional, default 10).
pub const ENV_CONCURRENCY: &str = "TRAWL_CONCURRENCY";
/// Default User-Agent for crawls whose seed request names none (optional).
pub const ENV_USER_AGENT: &str = "TRAWL_USER_AGENT";
/// Default per-host parallelism for crawls whose seed request names none (optional, default 1).
pub const ENV_PER_HOST: &str = "TRAWL_PER_HOST";

pub const DEFAULT_SHARDS: u32 = 4;
pub const DEFAULT_CONCURRENCY: usize = 10;

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

/// The AWS resources and tuning a deployment uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSettings {
    pub table: String,
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub delivery_queue_url: Option<String>,
    pub shards: u32,
    pub concurrency: usize,
    pub default_user_agent: Option<String>,
    pub default_per_host: u32,
}

impl AwsSettings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let required = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let number = |name: &'static str, default: u64, max: u64| -> Result<u64, SettingsError> {
            match lookup(name).filter(|v| !v.trim().is_empty()) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if (1..=max).contains(&n) => Ok(n),
                    _ => Err(SettingsError::Invalid {
                        name,
                        value: v,
                        reason: format!("expected a whole number from 1 to {max}"),
                    }),
                },
            }
        };
        Ok(Self {
            table: required(ENV_TABLE)?,
            bucket: required(ENV_BUCKET)?,
            prefix: lookup(ENV_PREFIX).unwrap_or_default(),
            queue_url: required(ENV_QUEUE_URL)?,
            delivery_queue_url: lookup(ENV_DELIVERY_QUEUE_URL).filter(|v| !v.trim().is_empty()),
            shards: number(ENV_SHARDS, u64::from(DEFAULT_SHARDS), 256)? as u32,
            concurrency: number(ENV_CONCURRENCY, DEFAULT_CONCURRENCY as u64, 100)? as usize,
            default_user_agent: lookup(ENV_USER_AGENT).filter(|v| !v.trim().is_empty()),
            default_per_host: number(ENV_PER_HOST, 1, 64)? as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn reads_required_and_optional_settings() {
        let env: HashMap<&str, &str> = [
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_QUEUE_URL, "q"),
            (ENV_SHARDS, "8"),
        ]
        .into();
        let s = AwsSettings::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(
            (s.table.as_str(), s.shards, s.concurrency),
            ("t", 8, DEFAULT_CONCURRENCY)
        );
        let missing = AwsSettings::from_lookup(|_| None).unwrap_err();
        assert_eq!(missing, SettingsError::Missing(ENV_TABLE));
        let bad: HashMap<&str, &str> = [
            (ENV_TABLE, "t"),
            (ENV_BUCKET, "b"),
            (ENV_QUEUE_URL, "q"),
            (ENV_SHARDS, "0"),
        ]
        .into();
        assert!(matches!(
            AwsSettings::from_lookup(|k| bad.get(k).map(|v| v.to_string())),
            Err(SettingsError::Invalid {
                name: ENV_SHARDS,
                ..
            })
        ));
    }
}
