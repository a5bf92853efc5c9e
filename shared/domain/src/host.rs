//! A host of a crawl, scheduled as a whole: how fast it may be asked, when next, whether it is
//! snoozed, and when to give up on it. Pure functions of (host, event, now).
//!
//! The rule: politeness and host-wide trouble belong to the host, not to its URLs.
//! - A host *turn* (fetch up to n due URLs of the host at its pace, then hand it back) is held
//!   by one worker at a time under a fenced lease, like a task: every claim bumps the token and
//!   only the holder of the current token may end the turn.
//! - Host-wide signals (429, 503, refused or reset connections, timeouts) snooze the host for
//!   every worker, exponentially and capped, and slow its pace; the next success clears the
//!   snooze and brings the pace back to the configured one. While snoozed, nothing of the host's
//!   is fetched, so no URL spends a retry on the host's trouble.
//! - A host that stays in trouble past its error budget (signals in a row) is given up: its
//!   remaining tasks end `ignored` with the reason, so the crawl can complete.

use crate::task::Millis;
use serde::{Deserialize, Serialize};

/// How a host is paced and when it is given up. From the crawl's politeness (and its rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostPolicy {
    /// Pause between two requests to the host (1000 = 1 request per second).
    pub delay_ms: u64,
    /// The slowest pace feedback may bring the host to.
    pub max_delay_ms: u64,
    /// First snooze after a host-wide signal without Retry-After; doubled on each further one.
    pub snooze_base_ms: u64,
    /// Longest snooze (and longest Retry-After honoured).
    pub snooze_max_ms: u64,
    /// Host-wide signals in a row after which the host is given up.
    pub error_budget: u32,
}

impl Default for HostPolicy {
    fn default() -> Self {
        Self {
            delay_ms: 1_000,
            max_delay_ms: 60_000,
            snooze_base_ms: 10_000,
            snooze_max_ms: 3_600_000,
            error_budget: 8,
        }
    }
}

/// What a fetch said about its host as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostSignal {
    /// The host answered (any status that is not host-wide trouble, 404 included).
    Answered,
    /// 429, or 503: the host asks us to slow down.
    Throttled {
        retry_after_ms: Option<u64>,
    },
    /// Connection refused or reset: the host is down.
    Unreachable,
    Timeout,
}

/// One host's scheduling state, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    /// The current pause between requests: the policy's, or slower after throttling.
    pub delay_ms: u64,
    /// No request before this time.
    pub next_allowed_at: Millis,
    /// Nothing of the host's is fetched before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Millis>,
    /// Host-wide signals since the last answer.
    pub trouble_in_a_row: u32,
    /// Why the host was given up, once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_up: Option<String>,
    /// Fencing token of the turn: bumped by every claim.
    pub token: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_until: Option<Millis>,
}

/// Why a turn could not be claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnRejection {
    /// Another worker holds a live turn.
    Busy {
        until: Millis,
    },
    /// Snoozed, or its next request is not allowed yet.
    NotYet {
        at: Millis,
    },
    GivenUp,
}

/// A held turn: proof that this worker, and only it, may fetch the host until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub token: u64,
    pub until: Millis,
}

impl Host {
    pub fn new(name: impl Into<String>, policy: &HostPolicy, now: Millis) -> Self {
        Self {
            name: name.into(),
            delay_ms: policy.delay_ms,
            next_allowed_at: now,
            snoozed_until: None,
            trouble_in_a_row: 0,
            given_up: None,
            token: 0,
            turn_until: None,
        }
    }

    /// When the host may next be fetched (its snooze and its pace).
    pub fn due_at(&self) -> Millis {
        self.snoozed_until
            .map_or(self.next_allowed_at, |s| s.max(self.next_allowed_at))
    }

    /// Claims a turn lasting up to `turn_ms`. A turn whose holder died is taken over once it
    /// has expired.
    pub fn claim_turn(&self, now: Millis, turn_ms: u64) -> Result<(Host, Turn), TurnRejection> {
        if self.given_up.is_some() {
            return Err(TurnRejection::GivenUp);
        }
        if let Some(until) = self.turn_until.filter(|&until| until > now) {
            return Err(TurnRejection::Busy { until });
        }
        let due = self.due_at();
        if due > now {
            return Err(TurnRejection::NotYet { at: due });
        }
        let turn = Turn {
            token: self.token + 1,
            until: now + turn_ms as Millis,
        };
        let host = Host {
            token: turn.token,
            turn_until: Some(turn.until),
            snoozed_until: None,
            ..self.clone()
        };
        Ok((host, turn))
    }

    /// Whether `turn` is still the host's current one (a zombie's is not).
    pub fn holds(&self, turn: &Turn) -> bool {
        self.token == turn.token && self.turn_until.is_some()
    }

    /// A fetch made at `now` during `turn` and what it said about the host. The next request
    /// waits the host's pace; trouble snoozes it (Retry-After wins when longer, capped) and
    /// slows the pace, an answer clears both. Past the error budget the host is given up.
    pub fn observe(&self, policy: &HostPolicy, signal: HostSignal, now: Millis) -> Host {
        let mut host = self.clone();
        match signal {
            HostSignal::Answered => {
                host.trouble_in_a_row = 0;
                host.snoozed_until = None;
                host.delay_ms = policy.delay_ms;
            }
            HostSignal::Throttled { .. } | HostSignal::Unreachable | HostSignal::Timeout => {
                host.trouble_in_a_row += 1;
                let doubling = 1u64 << (host.trouble_in_a_row - 1).min(30);
                let backoff = policy.snooze_base_ms.saturating_mul(doubling);
                let asked = match signal {
                    HostSignal::Throttled { retry_after_ms } => retry_after_ms.unwrap_or(0),
                    _ => 0,
                };
                let snooze = backoff.max(asked).min(policy.snooze_max_ms);
                host.snoozed_until = Some(now + snooze as Millis);
                if matches!(signal, HostSignal::Throttled { .. }) {
                    host.delay_ms = host
                        .delay_ms
                        .max(1)
                        .saturating_mul(2)
                        .min(policy.max_delay_ms.max(policy.delay_ms));
                }
                if host.trouble_in_a_row >= policy.error_budget.max(1) {
                    host.given_up = Some(format!(
                        "host gave {} host-wide errors in a row (last: {})",
                        host.trouble_in_a_row,
                        signal.describe()
                    ));
                }
            }
        }
        host.next_allowed_at = now + host.delay_ms as Millis;
        host
    }

    /// Hands the host back at the end of a turn. `None` when `turn` is not the current one.
    pub fn end_turn(&self, turn: &Turn) -> Option<Host> {
        self.holds(turn).then(|| Host {
            turn_until: None,
            ..self.clone()
        })
    }
}

impl HostSignal {
    fn describe(self) -> &'static str {
        match self {
            HostSignal::Answered => "answered",
            HostSignal::Throttled { .. } => "throttled",
            HostSignal::Unreachable => "unreachable",
            HostSignal::Timeout => "timeout",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HostPolicy {
        HostPolicy {
            delay_ms: 1_000,
            max_delay_ms: 8_000,
            snooze_base_ms: 10_000,
            snooze_max_ms: 60_000,
            error_budget: 4,
        }
    }

    #[test]
    fn one_turn_at_a_time_and_a_dead_holders_turn_is_taken_over() {
        let host = Host::new("example.com", &policy(), 0);
        let (held, turn) = host.claim_turn(0, 30_000).unwrap();
        assert_eq!(turn.token, 1);
        assert_eq!(
            held.claim_turn(10_000, 30_000),
            Err(TurnRejection::Busy { until: 30_000 })
        );
        // The holder died: once its turn expired, another worker takes over with a new token.
        let (taken, newer) = held.claim_turn(30_000, 30_000).unwrap();
        assert_eq!(newer.token, 2);
        // The zombie can no longer end (or act on) the turn.
        assert!(taken.end_turn(&turn).is_none());
        let back = taken.end_turn(&newer).unwrap();
        assert_eq!(back.turn_until, None);
    }

    #[test]
    fn answers_pace_the_host_at_its_rate() {
        let p = policy();
        let (host, _) = Host::new("h", &p, 0).claim_turn(0, 30_000).unwrap();
        let host = host.observe(&p, HostSignal::Answered, 500);
        assert_eq!(host.next_allowed_at, 1_500);
        assert_eq!(host.due_at(), 1_500);
    }

    #[test]
    fn trouble_snoozes_exponentially_with_a_cap_and_an_answer_clears_it() {
        let p = policy();
        let host = Host::new("h", &p, 0);
        let once = host.observe(&p, HostSignal::Unreachable, 0);
        assert_eq!(once.snoozed_until, Some(10_000));
        let twice = once.observe(&p, HostSignal::Timeout, 10_000);
        assert_eq!(twice.snoozed_until, Some(30_000));
        let thrice = twice.observe(
            &p,
            HostSignal::Throttled {
                retry_after_ms: Some(3_600_000),
            },
            30_000,
        );
        // Retry-After longer than the backoff wins, up to the cap.
        assert_eq!(thrice.snoozed_until, Some(90_000));
        assert_eq!(thrice.delay_ms, 2_000, "throttling slows the pace");
        assert_eq!(
            thrice.claim_turn(60_000, 1_000),
            Err(TurnRejection::NotYet { at: 90_000 })
        );
        let (held, _) = thrice.claim_turn(90_000, 1_000).unwrap();
        let well = held.observe(&p, HostSignal::Answered, 90_100);
        assert_eq!(
            (well.snoozed_until, well.trouble_in_a_row, well.delay_ms),
            (None, 0, 1_000)
        );
    }

    #[test]
    fn a_host_past_its_error_budget_is_given_up() {
        let p = policy();
        let mut host = Host::new("h", &p, 0);
        for i in 0..4 {
            assert!(host.given_up.is_none(), "given up after {i}");
            host = host.observe(&p, HostSignal::Unreachable, i * 100_000);
        }
        assert!(host.given_up.as_deref().unwrap().contains("unreachable"));
        assert_eq!(
            host.claim_turn(10_000_000, 1_000),
            Err(TurnRejection::GivenUp)
        );
    }
}
