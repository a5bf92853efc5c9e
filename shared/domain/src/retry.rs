//! Failure classification and retry scheduling.

use crate::canonical::TaskId;
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

/// Where a retry lands inside its backoff window: `Jitter::MIN` at half the delay, `Jitter::MAX`
/// at the full delay. It spreads the retries of tasks that failed together (one host down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jitter(pub u32);

impl Jitter {
    pub const MIN: Jitter = Jitter(0);
    pub const MAX: Jitter = Jitter(u32::MAX);

    /// The jitter of one attempt of one task: a hash of the task id and the claim's token. Pure
    /// (every backend and every test computes the same), yet different for every task and every
    /// attempt, since each claim moves the token.
    pub fn of(task_id: &TaskId, token: u64) -> Self {
        // FNV-1a over the id and the token, then a 64-bit finaliser (murmur3's) to mix the bits.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in task_id.as_str().bytes().chain(token.to_le_bytes()) {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        Jitter((h >> 32) as u32)
    }
}

impl RetryPolicy {
    /// Decides what `failure` does to a task that had `retries` transient failures before it.
    /// Backoff is exponential, placed by `jitter` between half and the full delay; Retry-After
    /// wins when longer.
    pub fn verdict(
        &self,
        failure: &Failure,
        retries: u32,
        jitter: Jitter,
        now: Millis,
    ) -> FailureVerdict {
        if !failure.kind.is_transient() || retries.saturating_add(1) >= self.max_retry.max(1) {
            return FailureVerdict::GiveUp;
        }
        FailureVerdict::Retry {
            next_attempt_at: self.backoff_at(retries, jitter, failure.retry_after_ms, now),
        }
    }

    /// When the attempt after `retries` earlier failures is due: exponential backoff placed by
    /// `jitter` between half and the full delay; a server's Retry-After wins when longer.
    pub fn backoff_at(
        &self,
        retries: u32,
        jitter: Jitter,
        retry_after_ms: Option<u64>,
        now: Millis,
    ) -> Millis {
        let exp = self.base_delay_ms.saturating_mul(1u64 << retries.min(30));
        let delay = exp.min(self.max_delay_ms);
        let half = delay / 2;
        let spread = u128::from(delay - half) * u128::from(jitter.0) / u128::from(u32::MAX);
        let jittered = half + spread as u64;
        let wait = retry_after_ms.map_or(jittered, |ra| ra.min(self.max_delay_ms).max(jittered));
        now.saturating_add(Millis::try_from(wait).unwrap_or(Millis::MAX))
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
    use crate::canonical::CanonicalUrl;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retry: 3,
            base_delay_ms: 1000,
            max_delay_ms: 60_000,
        }
    }

    #[test]
    fn permanent_failures_give_up_at_once() {
        for status in [404, 410, 403, 400] {
            assert_eq!(
                policy().verdict(&Failure::from_http_status(status, None), 0, Jitter::MAX, 0),
                FailureVerdict::GiveUp
            );
        }
    }

    #[test]
    fn transient_failures_back_off_exponentially_within_the_jitter_window_until_max_retry() {
        let failure = Failure::from_http_status(500, None);
        // (retries before, jitter, next attempt): half the delay at MIN, the full delay at MAX.
        let table = [
            (0, Jitter::MIN, 500),
            (0, Jitter::MAX, 1000),
            (0, Jitter(u32::MAX / 2), 749),
            (1, Jitter::MIN, 1000),
            (1, Jitter::MAX, 2000),
        ];
        for (retries, jitter, at) in table {
            assert_eq!(
                policy().verdict(&failure, retries, jitter, 0),
                FailureVerdict::Retry {
                    next_attempt_at: at
                },
                "retries {retries}, {jitter:?}"
            );
        }
        assert_eq!(
            policy().verdict(&failure, 2, Jitter::MIN, 0),
            FailureVerdict::GiveUp
        );
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let throttled = Failure::from_http_status(429, Some(30_000));
        assert_eq!(throttled.kind, ErrorKind::Throttled);
        assert_eq!(
            policy().verdict(&throttled, 0, Jitter::MAX, 0),
            FailureVerdict::Retry {
                next_attempt_at: 30_000
            }
        );
        let greedy = Failure::from_http_status(503, Some(10_000_000));
        assert_eq!(
            policy().verdict(&greedy, 0, Jitter::MIN, 0),
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

    #[test]
    fn jitter_is_stable_per_attempt_and_differs_between_tasks_and_attempts() {
        let ids: Vec<TaskId> = (0..64)
            .map(|i| {
                CanonicalUrl::parse(&format!("http://example.com/{i}"))
                    .unwrap()
                    .task_id()
            })
            .collect();
        assert_eq!(Jitter::of(&ids[0], 1), Jitter::of(&ids[0], 1));
        assert_ne!(Jitter::of(&ids[0], 1), Jitter::of(&ids[0], 2));
        // 64 tasks failing together spread over the window: every quarter gets some.
        let mut quarters = [0; 4];
        for id in &ids {
            quarters[(Jitter::of(id, 1).0 >> 30) as usize] += 1;
        }
        assert!(quarters.iter().all(|&n| n > 4), "{quarters:?}");
    }
}
