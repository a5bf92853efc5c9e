//! Failure classification and retry scheduling.

use crate::task::{ErrorKind, Millis};
use serde::{Deserialize, Serialize};

/// How failed tasks are retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Transient failures before a task is given up (`ignored`).
    pub max_retry: u32,
    /// First backoff, in milliseconds; doubled on every further failure.
    pub base_delay_ms: u64,
    /// Longest backoff, and longest Retry-After honoured, in milliseconds.
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retry: 3,
            base_delay_ms: 5_000,
            max_delay_ms: 3_600_000,
        }
    }
}

/// A failed attempt, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: ErrorKind,
    pub message: String,
    /// The HTTP status, when there was a response.
    pub http_status: Option<u16>,
    /// A server's Retry-After, in milliseconds from now.
    pub retry_after_ms: Option<u64>,
}

impl Failure {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            http_status: None,
            retry_after_ms: None,
        }
    }

    /// Classifies an HTTP error status (anything but 2xx/304).
    pub fn from_http_status(status: u16, retry_after_ms: Option<u64>) -> Self {
        let kind = match status {
            404 | 410 => ErrorKind::NotFound,
            429 => ErrorKind::Throttled,
            503 if retry_after_ms.is_some() => ErrorKind::Throttled,
            408 => ErrorKind::Timeout,
            500..=599 => ErrorKind::ServerError,
            _ => ErrorKind::ClientError,
        };
        Self {
            kind,
            message: format!("HTTP {status}"),
            http_status: Some(status),
            retry_after_ms,
        }
    }
}

/// What a failure does to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureVerdict {
    /// Try again at `next_attempt_at`.
    Retry { next_attempt_at: Millis },
    /// Give up: status `ignored` (or `gone` for pages that do not exist).
    GiveUp,
}

impl RetryPolicy {
    /// Decides what `failure` does to a task that had `retries` transient failures before it.
    /// Backoff is exponential with jitter (half to full delay); Retry-After wins when longer.
    pub fn verdict(&self, failure: &Failure, retries: u32, now: Millis) -> FailureVerdict {
        if !failure.kind.is_transient() || retries + 1 >= self.max_retry.max(1) {
            return FailureVerdict::GiveUp;
        }
        let exp = self.base_delay_ms.saturating_mul(1u64 << retries.min(30));
        let delay = exp.min(self.max_delay_ms);
        let jittered = delay / 2 + fastrand::u64(0..=delay / 2);
        let wait = failure
            .retry_after_ms
            .map_or(jittered, |ra| ra.min(self.max_delay_ms).max(jittered));
        FailureVerdict::Retry {
            next_attempt_at: now + wait as Millis,
        }
    }
}

/// Parses a Retry-After header value (delta seconds or an HTTP date) into milliseconds from `now`.
pub fn parse_retry_after(value: &str, now: Millis) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    let when_ms = when.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as Millis;
    Some(when_ms.saturating_sub(now).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permanent_failures_give_up_at_once() {
        let policy = RetryPolicy::default();
        for status in [404, 410, 403, 400] {
            assert_eq!(
                policy.verdict(&Failure::from_http_status(status, None), 0, 0),
                FailureVerdict::GiveUp
            );
        }
    }

    #[test]
    fn transient_failures_back_off_exponentially_until_max_retry() {
        let policy = RetryPolicy {
            max_retry: 3,
            base_delay_ms: 1000,
            max_delay_ms: 60_000,
        };
        let failure = Failure::from_http_status(500, None);
        let FailureVerdict::Retry {
            next_attempt_at: first,
        } = policy.verdict(&failure, 0, 0)
        else {
            panic!()
        };
        assert!((500..=1000).contains(&first), "{first}");
        let FailureVerdict::Retry {
            next_attempt_at: second,
        } = policy.verdict(&failure, 1, 0)
        else {
            panic!()
        };
        assert!((1000..=2000).contains(&second), "{second}");
        assert_eq!(policy.verdict(&failure, 2, 0), FailureVerdict::GiveUp);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy {
            max_retry: 3,
            base_delay_ms: 1000,
            max_delay_ms: 60_000,
        };
        let throttled = Failure::from_http_status(429, Some(30_000));
        assert_eq!(throttled.kind, ErrorKind::Throttled);
        assert_eq!(
            policy.verdict(&throttled, 0, 0),
            FailureVerdict::Retry {
                next_attempt_at: 30_000
            }
        );
        let greedy = Failure::from_http_status(503, Some(10_000_000));
        assert_eq!(
            policy.verdict(&greedy, 0, 0),
            FailureVerdict::Retry {
                next_attempt_at: 60_000
            }
        );
        assert_eq!(parse_retry_after("120", 0), Some(120_000));
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", 4_000),
            Some(6_000)
        );
        assert_eq!(parse_retry_after("soon", 0), None);
    }
}
