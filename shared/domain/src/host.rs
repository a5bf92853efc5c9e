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

use crate::task::{Millis, Priority};
use serde::{Deserialize, Serialize};

/// Longest a host's next turn waits as a delayed message (SQS's longest delay). Work due later
/// leaves the host idle with a wake-up time, for the sweeper: a message received early only to
/// be put back would cost requests every 15 minutes of the wait.
pub const LONGEST_QUEUED_WAIT_MS: u64 = 900_000;

/// Host-wide signals in a row after which a host that never answered with HTTP is given up
/// (refused connections, a server that is not HTTP or answers garbage): with the default
/// snooze, its third attempt comes about 30 s after the first.
pub const NEVER_ANSWERED_BUDGET: u32 = 3;

/// A host's soonest remaining work, as its turn ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextWork {
    /// A task to fetch (pending, or a retry) from this time.
    Task(Millis),
    /// A page to fetch again (a recrawl, a check) from this time: left to the sweeper, which
    /// wakes the host then, so that a generation ends when its work is done rather than when the
    /// next recrawl is (unless it is due already: the host's next turn goes on at once).
    Revisit(Millis),
}

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
    /// Requests in flight at once within a turn.
    pub parallel: u32,
    /// Most pages one turn fetches.
    pub turn_pages: u32,
}

impl Default for HostPolicy {
    fn default() -> Self {
        Self {
            delay_ms: 1_000,
            max_delay_ms: 60_000,
            snooze_base_ms: 10_000,
            snooze_max_ms: 3_600_000,
            error_budget: 8,
            parallel: 1,
            turn_pages: 50,
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

/// One host's scheduling state, as stored (one record per crawl and host).
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
    /// Who claimed the running turn (`claim_turn_by`): a claimer whose write was applied while
    /// its answer was lost recognises its own turn when it tries again, instead of waiting it
    /// out as another worker's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimer: Option<u64>,
    /// Generation of the host's work message: every send bumps it and the message carries it,
    /// so a duplicate or superseded message is recognised and dropped (one live chain of turns
    /// per host, whatever the sweeper re-issued).
    #[serde(default)]
    pub epoch: u64,
    /// When the current message becomes visible. None: no message out and no turn running (the
    /// host is idle; the next seed sends one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_for: Option<Millis>,
    /// When the host's next known work is due, while it waits idle for longer than a queue can
    /// hold a message (a recrawl days away): the sweeper wakes it then. None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Millis>,
    /// Tasks created for the host so far. A turn compares it with the value it started with:
    /// a change means new work arrived meanwhile.
    #[serde(default)]
    pub seeded: u64,
    /// Of `seeded`, the URLs other workers offered by atomic adds (`HostStore::add_seeded`),
    /// which never move `version`: a host linked from every page would otherwise see its turn
    /// claims lose to offers. A store keeps them beside the record (`seeded - offered` is what
    /// writes over the version set) and a write never overwrites them; a write that leaves the
    /// host idle must find them as read (`waits_for_offers`), or an offer made meanwhile, which
    /// saw a busy host and woke nobody, would be left without a turn.
    #[serde(default)]
    pub offered: u64,
    /// Tasks the host's turns brought to an end (succeeded, ignored or gone), each once: a
    /// recrawl's end is not counted again, so `seeded - done` is the work not yet seen to an end.
    #[serde(default)]
    pub done: u64,
    /// When URLs were last counted to the host, as far as its writes know: a seed that woke it,
    /// offers a claim found (made since the record's last write: `seen_offers`), seeds counted
    /// during a turn. A count is written before its tasks, and an index may list a task a
    /// moment after it is written: until `settle` after this time, a turn that finds no due task
    /// while the counts say some URL was not seen to an end does not idle the host
    /// (`settling`), or the tasks of that count would wait unseen under an idle host, and its
    /// crawl complete without them. One more turn looks once they settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeded_at: Option<Millis>,
    /// `offered` as the record's last write saw it: a claim that finds more knows offers landed
    /// since (when exactly, it cannot tell: `seeded_at` becomes the claim's time).
    #[serde(default)]
    pub seen_offers: u64,
    /// Pages fetched (any answer) and host-wide signals received, over the host's life.
    #[serde(default)]
    pub fetches: u64,
    #[serde(default)]
    pub signals: u64,
    /// When the host last answered a request without host-wide trouble (None: never, or not
    /// since this field was recorded). A URL throttled again after it is singled out
    /// ([`singled_out`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<Millis>,
    /// Whether the host ever answered with HTTP (a 429 or a 503 included). A host that never did
    /// is not busy but broken, or not a web server: it is given up after
    /// [`NEVER_ANSWERED_BUDGET`] signals instead of its error budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spoke_http: bool,
    /// The highest priority of the host's pending work (`crate::priority`), as its last turn's
    /// hand-back read its due list, raised by the seeds that woke it: what its turn message
    /// carries, for a queue that orders hosts (the local one). 0 when absent.
    #[serde(default, skip_serializing_if = "Priority::is_min")]
    pub priority: Priority,
    /// Where the host's turns stand in their walk of its roster (`crate::roster`), in a store
    /// that keeps rosters.
    #[serde(default, skip_serializing_if = "is_unstarted")]
    pub pass: crate::roster::Pass,
    /// Optimistic-concurrency version: the store bumps it on every write and writes only over
    /// the version the writer read, so concurrent changes are re-decided, never lost.
    #[serde(default)]
    pub version: u64,
}

fn is_unstarted(pass: &crate::roster::Pass) -> bool {
    *pass == crate::roster::Pass::default()
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
            claimer: None,
            epoch: 0,
            queued_for: None,
            wake_at: None,
            seeded: 0,
            offered: 0,
            done: 0,
            seeded_at: None,
            seen_offers: 0,
            fetches: 0,
            signals: 0,
            answered_at: None,
            spoke_http: false,
            priority: Priority::MIN,
            pass: crate::roster::Pass::default(),
            version: 0,
        }
    }

    /// This host with its priority raised to `priority` at least (new work woke it).
    pub fn with_priority_at_least(self, priority: Priority) -> Host {
        Host {
            priority: self.priority.max(priority),
            ..self
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
            claimer: None,
            snoozed_until: None,
            ..self.noting_offers(now)
        };
        Ok((host, turn))
    }

    /// `claim_turn` by `claimer`, an id the claiming worker drew for this claim alone (unique
    /// with overwhelming odds), written with the turn.
    pub fn claim_turn_by(
        &self,
        claimer: u64,
        now: Millis,
        turn_ms: u64,
    ) -> Result<(Host, Turn), TurnRejection> {
        let (host, turn) = self.claim_turn(now, turn_ms)?;
        let host = Host {
            claimer: Some(claimer),
            ..host
        };
        Ok((host, turn))
    }

    /// The running turn, when `claimer` claimed it: the claim was applied, its answer lost.
    pub fn turn_of(&self, claimer: u64) -> Option<Turn> {
        let until = self.turn_until?;
        (self.claimer == Some(claimer)).then_some(Turn {
            token: self.token,
            until,
        })
    }

    /// `turn`'s hold renewed until `now + hold_ms` by its live holder (`turn::TurnPlan::renew_at`
    /// says when). None when `turn` is no longer the host's current one (taken over, or re-issued
    /// after its hold ran out): its holder must stop.
    pub fn renew(&self, turn: &Turn, now: Millis, hold_ms: u64) -> Option<Host> {
        self.holds(turn).then(|| Host {
            turn_until: Some(now.saturating_add(hold_ms as Millis)),
            ..self.clone()
        })
    }

    /// Whether `turn` is still the host's current one (a zombie's is not).
    pub fn holds(&self, turn: &Turn) -> bool {
        self.token == turn.token && self.turn_until.is_some()
    }

    /// The record about to be written at `now`, with the offers made since its last write noted
    /// as seeds counted now.
    fn noting_offers(&self, now: Millis) -> Host {
        Host {
            seeded_at: if self.offered != self.seen_offers {
                Some(now)
            } else {
                self.seeded_at
            },
            seen_offers: self.offered,
            ..self.clone()
        }
    }

    /// When the URLs last counted to the host will have settled (their tasks written and
    /// listed), if that is after `now` and some of them were not seen to an end (`backlog`):
    /// until then, finding no due task does not mean none is.
    pub fn settling(&self, now: Millis, settle_ms: u64) -> Option<Millis> {
        self.seeded_at
            .map(|at| at.saturating_add(settle_ms as Millis))
            .filter(|&settled| settled > now && self.backlog() > 0)
    }

    /// Whether the record is `turn`'s own hand-back: no claim since (every claim bumps the
    /// token) and no turn running. The holder whose hand-back write was applied while its answer
    /// was lost sees this when it retries: the write is done, but the next turn's message (for
    /// the stored epoch, at `queued_for`) is still to be sent. Should the sweeper have re-issued
    /// the turn meanwhile, that is a second message of one epoch: the first to start a turn
    /// makes the other stale.
    pub fn handed_back_by(&self, turn: &Turn) -> bool {
        self.token == turn.token && self.turn_until.is_none()
    }

    /// A fetch made at `now` during `turn` and what it said about the host. The next request
    /// waits the host's pace; trouble snoozes it (Retry-After wins when longer, capped) and
    /// slows the pace, an answer clears both. Past the error budget the host is given up.
    pub fn observe(&self, policy: &HostPolicy, signal: HostSignal, now: Millis) -> Host {
        let mut host = self.clone();
        host.fetches += 1;
        match signal {
            HostSignal::Answered => {
                host.trouble_in_a_row = 0;
                host.snoozed_until = None;
                host.delay_ms = policy.delay_ms;
                host.answered_at = Some(now);
                host.spoke_http = true;
            }
            HostSignal::Throttled { .. } | HostSignal::Unreachable | HostSignal::Timeout => {
                host.signals += 1;
                host.trouble_in_a_row += 1;
                let doubling = 1u64 << (host.trouble_in_a_row - 1).min(30);
                let backoff = policy.snooze_base_ms.saturating_mul(doubling);
                let asked = match signal {
                    HostSignal::Throttled { retry_after_ms } => retry_after_ms.unwrap_or(0),
                    _ => 0,
                };
                let snooze = backoff.max(asked).min(policy.snooze_max_ms);
                // One timeout may be one slow page; timeouts in a row are the host's.
                let lone_timeout = signal == HostSignal::Timeout && host.trouble_in_a_row < 2;
                if !lone_timeout {
                    host.snoozed_until = Some(now + snooze as Millis);
                }
                if matches!(signal, HostSignal::Throttled { .. }) {
                    host.spoke_http = true;
                    host.delay_ms = host
                        .delay_ms
                        .max(1)
                        .saturating_mul(2)
                        .min(policy.max_delay_ms.max(policy.delay_ms));
                }
                if !host.has_spoken_http() && host.trouble_in_a_row >= NEVER_ANSWERED_BUDGET {
                    host.given_up = Some(format!(
                        "host never answered with HTTP: {} attempts in a row failed (last: {})",
                        host.trouble_in_a_row,
                        signal.describe()
                    ));
                } else if host.trouble_in_a_row >= policy.error_budget.max(1) {
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

    /// Whether the host ever answered with HTTP. Records from before `spoke_http` existed
    /// count their answers (every fetch that was not a signal).
    pub fn has_spoken_http(&self) -> bool {
        self.spoke_http || self.fetches > self.signals
    }

    /// Hands the host back at the end of `turn`. `next_work` is its soonest remaining work (None:
    /// none known), `seeded_at_claim` the `seeded` count the turn started from (None: not known,
    /// a claim recognised on retry; one more turn looks),
    /// `seeded_by_turn` the URLs of this host the turn's own pages linked to (counted here),
    /// `settle_ms` how long after a count its tasks may still be unlisted (`seeded_at`).
    /// Returns the host and, when a next turn is needed, when its message should become visible
    /// (the host's own due time at the earliest); the message carries the new `epoch`. With no
    /// work left and no seed counted meanwhile or settling, the host goes idle. `None` when
    /// `turn` is not the current one (a zombie's hand-back changes nothing).
    pub fn hand_back(
        &self,
        turn: &Turn,
        next_work: Option<NextWork>,
        seeded_at_claim: Option<u64>,
        seeded_by_turn: u64,
        settle_ms: u64,
        now: Millis,
    ) -> Option<(Host, Option<Millis>)> {
        if !self.holds(turn) {
            return None;
        }
        let seeded_meanwhile = seeded_at_claim != Some(self.seeded) || seeded_by_turn > 0;
        let mut host = Host {
            turn_until: None,
            claimer: None,
            seeded: self.seeded + seeded_by_turn,
            seeded_at: if seeded_meanwhile {
                Some(now)
            } else {
                self.seeded_at
            },
            seen_offers: self.offered,
            ..self.clone()
        };
        let (next_work, later) = match next_work {
            // Seeds that arrived during the turn (the holder's own links included) may not have
            // been visible to it yet: one more turn looks.
            _ if seeded_meanwhile => (Some(now), None),
            // Work due later than a message can wait: idle, woken by the sweeper when it is due.
            Some(NextWork::Task(at)) if at > now + LONGEST_QUEUED_WAIT_MS as Millis => {
                (None, Some(at))
            }
            Some(NextWork::Task(at)) => (Some(at), None),
            // A page due again already (more than a turn's worth came due): more turns now.
            Some(NextWork::Revisit(at)) if at <= now => (Some(now), None),
            Some(NextWork::Revisit(at)) => (None, Some(at)),
            None => (None, None),
        };
        // Left without a message while seeds counted lately may still be unlisted: one more turn
        // looks once they settled.
        let (next_work, later) = match host.settling(now, settle_ms) {
            Some(settled) if next_work.is_none() => (Some(settled), None),
            _ => (next_work, later),
        };
        let visible_at = next_work.map(|at| at.max(host.due_at()).max(now));
        match visible_at {
            Some(_) => host.epoch += 1,
            // Nothing left now: the counts agree again (seeds count URLs offered, known ones too).
            None => host.done = host.seeded,
        }
        host.queued_for = visible_at;
        host.wake_at = later;
        Some((host, visible_at))
    }

    /// The stored record (seeds may have moved it since the turn was claimed) with what the
    /// turn's holder decided during the turn: pace, snooze, trouble, give-up and counts.
    pub fn merge_turn(&self, holder: &Host) -> Host {
        Host {
            delay_ms: holder.delay_ms,
            next_allowed_at: holder.next_allowed_at,
            snoozed_until: holder.snoozed_until,
            trouble_in_a_row: holder.trouble_in_a_row,
            // The holder's give-up, else the stored one: an operator's drop during the turn
            // (`dropped`) stands.
            given_up: holder.given_up.clone().or_else(|| self.given_up.clone()),
            done: holder.done,
            fetches: holder.fetches,
            signals: holder.signals,
            answered_at: holder.answered_at,
            spoke_http: holder.spoke_http,
            ..self.clone()
        }
    }

    /// A given-up host whose due tasks were all ended: idle until a seed wakes it again (its
    /// turn then ends those too).
    pub fn drained(&self) -> Host {
        Host {
            queued_for: None,
            done: self.seeded,
            ..self.clone()
        }
    }

    /// The host's next turn after its process restarted (the in-process queue is rebuilt): a turn
    /// that seems to run belongs to the dead process, so it is taken over at once rather than
    /// waited out (its holder's token is superseded by the next claim).
    pub fn restart(&self, now: Millis) -> (Host, Millis) {
        Host {
            turn_until: None,
            ..self.clone()
        }
        .requeue(now)
    }

    /// An operator's drop of the host: from its next turn on, its due tasks end `ignored`
    /// without a fetch, as a given-up host's do (links found to it later too), until an
    /// operator's retry revives it.
    pub fn dropped(&self, reason: Option<&str>) -> Host {
        let why = match reason.map(str::trim).filter(|r| !r.is_empty()) {
            Some(reason) => format!("dropped by the operator: {reason}"),
            None => "dropped by the operator".to_owned(),
        };
        Host {
            given_up: Some(why),
            ..self.clone()
        }
    }

    /// An operator's retry of a given-up host: its trouble forgotten, its pace the policy's.
    pub fn revive(&self, policy: &HostPolicy) -> Host {
        Host {
            given_up: None,
            trouble_in_a_row: 0,
            snoozed_until: None,
            delay_ms: policy.delay_ms,
            ..self.clone()
        }
    }

    /// Tasks still to do, as far as the host's counts know (seeded minus ended).
    pub fn backlog(&self) -> u64 {
        self.seeded.saturating_sub(self.done)
    }

    /// `seeded` as written over the version: the URLs counted by writes of the whole record,
    /// offers apart (they live beside the record, added atomically).
    pub fn seeded_by_writes(&self) -> u64 {
        self.seeded.saturating_sub(self.offered)
    }

    /// The record as stored with `offered` URLs offered beside it (a read).
    pub fn with_offers(self, offered: u64) -> Host {
        Host {
            seeded: self.seeded + offered,
            offered,
            ..self
        }
    }

    /// Whether writing this record must find the offers as they were read: a record written
    /// with no turn running and no message out leaves the next offer to wake the host, so an
    /// offer landing between the read and the write (it saw a busy host and woke nobody) must
    /// refuse the write, to be decided again over it. Any other write leaves a turn or a
    /// message to find the offered work.
    pub fn waits_for_offers(&self) -> bool {
        !self.is_open()
    }

    /// Counted as open in its crawl's [`HostCounts`]: a turn recorded (running, or expired and
    /// not yet taken over) or a message out. A host that is not open has no work under way: its
    /// last turn found nothing left, or left what is due later to a wake-up (see `HostCounts`).
    pub fn is_open(&self) -> bool {
        self.queued_for.is_some() || self.turn_until.is_some()
    }

    /// No turn running and no message out: the next seed must wake it.
    pub fn is_idle(&self, now: Millis) -> bool {
        self.queued_for.is_none() && self.turn_until.is_none_or(|until| until <= now)
    }

    /// `n` URLs are being added to the host (some may be known already: the count is written
    /// before the tasks, so that no task can exist without its host knowing of it). Returns the host and, when it was idle, when
    /// the message of its next turn should become visible (the message carries the new epoch).
    /// A host with a turn running or a message out needs nothing: that turn finds the new work.
    pub fn note_seeded(&self, n: u64, now: Millis) -> (Host, Option<Millis>) {
        let mut host = Host {
            seeded: self.seeded + n,
            seeded_at: Some(now),
            seen_offers: self.offered,
            ..self.clone()
        };
        if !self.is_idle(now) {
            return (host, None);
        }
        let visible_at = host.due_at().max(now);
        host.epoch += 1;
        host.queued_for = Some(visible_at);
        host.wake_at = None;
        (host, Some(visible_at))
    }

    /// Whether the host's work message must be presumed lost at `now`: its turn expired without
    /// being handed back (the holder died; its message, should it come back, will be stale); or
    /// its message should have been received more than `lost_after_ms` ago; or it is idle while
    /// it has work (`known_work`: a caller saw a due task of it; or its own counts say so; or
    /// its wake-up time has come).
    pub fn message_lost(&self, now: Millis, lost_after_ms: u64, known_work: bool) -> bool {
        match (self.turn_until, self.queued_for) {
            (Some(until), _) => until <= now,
            (None, Some(at)) => at.saturating_add(lost_after_ms as Millis) <= now,
            (None, None) => {
                known_work || self.backlog() > 0 || self.wake_at.is_some_and(|at| at <= now)
            }
        }
    }

    /// Sends the host's next turn anew (a lost message, or a restart of the in-process queue):
    /// a new epoch supersedes any message still out, and an expired turn is cleared (its holder
    /// is fenced by the next claim's token). Returns the host and when the message becomes
    /// visible.
    /// A given-up host's turn left none of its due tasks: idle, its counts agreeing again
    /// (`drained`), unless seeds counted lately may still be unlisted (`settling`): then one
    /// more turn once they settled. Returns the host and when its message becomes visible.
    pub fn drained_unless_settling(&self, now: Millis, settle_ms: u64) -> (Host, Option<Millis>) {
        let noted = self.noting_offers(now);
        match noted.settling(now, settle_ms) {
            Some(settled) => {
                let (host, visible_at) = noted.requeue(now);
                let visible_at = visible_at.max(settled);
                (
                    Host {
                        queued_for: Some(visible_at),
                        ..host
                    },
                    Some(visible_at),
                )
            }
            None => (noted.drained(), None),
        }
    }

    pub fn requeue(&self, now: Millis) -> (Host, Millis) {
        let turn_until = self.turn_until.filter(|&until| until > now);
        let visible_at = self.due_at().max(turn_until.unwrap_or(now)).max(now);
        let host = Host {
            epoch: self.epoch + 1,
            queued_for: Some(visible_at),
            wake_at: None,
            turn_until,
            ..self.clone()
        };
        (host, visible_at)
    }
}

/// How long a host's message may be overdue before it is presumed lost when the work queue
/// holds no message at all: a message sent at least this long ago would be counted (SQS's
/// counts lag by up to a minute), or received and its turn claimed. So a turn whose message
/// was never sent (an invocation cut between hand-back and send) waits a minute, not the
/// window a busy queue needs, once nothing else is going on.
pub const DRAINED_LOST_AFTER_MS: u64 = 60 * 1000;

/// How long a host's message may be overdue before it is presumed lost while the work queue
/// holds at least as many messages as the crawl has hosts open ([`lost_after_ms`]). Bounded,
/// because another crawl's messages (or stale ones, superseded by a new epoch) can stand in for
/// a lost one in the count: such a message is found within this time.
pub const HELD_LOST_AFTER_MS: u64 = 6 * 3_600 * 1000;

/// How long a host's queued message may be overdue before the sweeper presumes it lost
/// ([`Host::message_lost`]), from the crawl's usual window (`usual_ms`), the work queue's depth
/// (deliverable, in flight and delayed; None: not known) and the crawl's open hosts (its
/// [`HostCounts`]; None: not kept). Every open host has a message out or a turn running, whose
/// message is in flight until the turn ends, so:
/// - a queue holding nothing has lost every overdue message: [`DRAINED_LOST_AFTER_MS`];
/// - a queue holding at least one message per open host is missing none that the count shows:
///   an overdue message is only waiting behind others (seeding 5,000 hosts queues 5,000 turns,
///   many more than 5 minutes' worth), and is held for [`HELD_LOST_AFTER_MS`];
/// - a queue holding fewer has lost some (a send that failed, a message gone to the dead-letter
///   queue): the usual window finds them, and may re-issue some that were only waiting (their
///   old message, when it comes, is stale under the new epoch).
///
/// An expired turn is lost at once whatever the window (`Host::message_lost`).
pub fn lost_after_ms(usual_ms: u64, depth: Option<u64>, open: Option<i64>) -> u64 {
    match (depth, open) {
        (Some(0), _) => usual_ms.min(DRAINED_LOST_AFTER_MS),
        (Some(depth), Some(open)) if i64::try_from(depth).unwrap_or(i64::MAX) >= open => {
            usual_ms.max(HELD_LOST_AFTER_MS)
        }
        _ => usual_ms,
    }
}

/// How recent a host's last answer must be, at a URL's earlier trouble, for that trouble to be
/// the URL's own ([`singled_out`]).
pub const ANSWERING_WINDOW_MS: u64 = 600_000;

/// Whether a URL that draws a host-wide signal is singled out: it drew one before (in its error
/// history) while its host was answering other requests — since, or within
/// [`ANSWERING_WINDOW_MS`] before (the URL may be the last of its host's work, with nothing left
/// to show the host still answers). The trouble is then the URL's: it spends a retry, and ends
/// `ignored` within its retry budget instead of holding its host's turns until the whole host is
/// given up. A URL's first host-wide signal never spends one, nor does trouble on a host that
/// has not answered for longer: the host is snoozed and the URL waits, as the rule above says.
/// However eager, this ends few URLs: the host's signals in a row still give the host up.
pub fn singled_out(host_answered_at: Option<Millis>, errors: &[crate::task::ErrorRecord]) -> bool {
    host_answered_at.is_some_and(|answered| {
        errors
            .iter()
            .any(|e| e.kind.is_host_wide() && answered + ANSWERING_WINDOW_MS as Millis >= e.at)
    })
}

impl HostSignal {
    /// What a failed fetch says about its host: 429 and 503 ask it to slow down (with the
    /// server's Retry-After); refused or reset connections and an unreachable robots.txt say it
    /// is down; a timeout may be the page or the host. Any other failure is an answer.
    pub fn of_failure(failure: &crate::retry::Failure) -> HostSignal {
        use crate::task::ErrorKind;
        match (failure.kind, failure.http_status) {
            (_, Some(429 | 503)) | (ErrorKind::Throttled, _) => HostSignal::Throttled {
                retry_after_ms: failure.retry_after_ms,
            },
            (ErrorKind::Connection | ErrorKind::RobotsUnavailable, _) => HostSignal::Unreachable,
            (ErrorKind::Timeout, _) => HostSignal::Timeout,
            _ => HostSignal::Answered,
        }
    }

    /// Whether the URL that drew this signal spends a retry. The host's trouble is the host's:
    /// a throttled or unreachable host snoozes and its URL goes back untouched. A timeout
    /// counts against the URL too, so that one slow page on a healthy host ends in time.
    pub fn spends_retry(self) -> bool {
        matches!(self, HostSignal::Answered | HostSignal::Timeout)
    }

    fn describe(self) -> &'static str {
        match self {
            HostSignal::Answered => "answered",
            HostSignal::Throttled { .. } => "throttled",
            HostSignal::Unreachable => "unreachable",
            HostSignal::Timeout => "timeout",
        }
    }
}

/// Shards of a crawl's host list and host counts: host records are filed under this many keys
/// (DynamoDB: `{crawl}#hosts#{shard}`), so that creating hosts and walking them is spread over
/// as many partitions (each takes ~1,000 writes a second). A new host costs 2 write units on
/// its shard's list key and on its shard's counts (a TransactWriteItems), so 32 shards take
/// about 15,000 new hosts a second (16 took 7,900: under the 10,000 a broad crawl meets).
///
/// Crawls created under 16 shards need no migration: a host's shard under 32 is its shard under
/// 16 or that plus 16 (the same hash, `% 32` then `% 16`), every listing and count reads all 32
/// keys (and sums the counts, which are additive), and a record moves to its new shard at its
/// next write, like records older than the shards. Nothing is stored per crawl.
pub const HOST_SHARDS: u32 = 32;

/// The shard of a host of a crawl: a stable hash of its name (FNV-1a), the same in every
/// process and release.
pub fn host_shard(name: &str) -> u32 {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % HOST_SHARDS
}

/// A crawl's host counts: host records, and those open (`Host::is_open`).
///
/// The rule: a crawl with no open host and no failed task has no work left. Every task with
/// work left is either in a turn (its host's turn recorded), or due in its host's list, whose
/// host then has a message out (hosts are woken before their tasks are written, and a turn
/// that ends with work left sends its next message), or a retry due later than a queue can
/// hold a message (then a failed task, listed in the status index). So completion reads the
/// counts and one small query of failed tasks, never every host.
///
/// The counts are kept by the host writes themselves: a write of a host record that changes
/// whether it is open (or creates it) adds [`HostCounts::change`] to its shard's counts in the
/// same atomic write (DynamoDB: one TransactWriteItems; SQLite and memory: one transaction).
/// Only those writes count (a host woken, a host gone idle: about two per host and round, not
/// per URL); `add_seeded` changes neither field. So the counts are never left wrong by a crash:
/// a worker that dies between a task's write and its host's hand-back leaves its turn recorded,
/// the host open and counted, until the sweeper re-issues the expired turn and the next turn
/// hands the host back (the host's own `seeded`/`done` agree again then: `Host::hand_back`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCounts {
    pub hosts: i64,
    pub open: i64,
}

impl HostCounts {
    /// What writing `next` over `before` (None: no record yet) adds to the counts.
    pub fn change(before: Option<&Host>, next: &Host) -> HostCounts {
        let open = |h: Option<&Host>| i64::from(h.is_some_and(Host::is_open));
        HostCounts {
            hosts: i64::from(before.is_none()),
            open: open(Some(next)) - open(before),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == HostCounts::default()
    }

    /// No host has work under way (see the rule above).
    pub fn all_idle(&self) -> bool {
        self.open == 0
    }

    pub fn add(&mut self, other: HostCounts) {
        self.hosts += other.hosts;
        self.open += other.open;
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
            parallel: 1,
            turn_pages: 50,
        }
    }

    #[test]
    fn a_host_dropped_during_its_turn_stays_dropped_once_the_turn_hands_it_back() {
        // GIVEN a host whose turn runs
        let (woken, _) = Host::new("example.com", &policy(), 0).note_seeded(3, 0);
        let (held, turn) = woken.claim_turn(0, 30_000).unwrap();

        // WHEN an operator drops it meanwhile, then the turn's holder hands it back
        let stored = held.dropped(Some(" spam trap "));
        let (back, visible_at) = stored
            .merge_turn(&held)
            .hand_back(&turn, Some(NextWork::Task(5)), Some(3), 0, 0, 10)
            .unwrap();

        // THEN the drop stands, with its reason, and the next turn is refused as given up
        assert_eq!(
            back.given_up.as_deref(),
            Some("dropped by the operator: spam trap")
        );
        let at = visible_at.unwrap();
        assert_eq!(
            back.claim_turn(at, 30_000).err(),
            Some(TurnRejection::GivenUp)
        );
        // AND a retry revives it; a drop without a reason says who dropped it
        assert!(back.revive(&policy()).claim_turn(at, 30_000).is_ok());
        assert_eq!(
            woken.dropped(Some("  ")).given_up.as_deref(),
            Some("dropped by the operator")
        );
    }

    #[test]
    fn counts_kept_by_the_writes_that_change_them_agree_with_a_recount() {
        let (mut kept, mut stored) = (HostCounts::default(), None::<Host>);
        let mut write = |next: Host| {
            kept.add(HostCounts::change(stored.as_ref(), &next));
            stored = Some(next);
            kept
        };
        let host = Host::new("example.com", &policy(), 0);
        let (woken, _) = host.note_seeded(3, 0);
        assert_eq!(write(woken.clone()), HostCounts { hosts: 1, open: 1 });
        let (held, turn) = woken.claim_turn(0, 30_000).unwrap();
        write(held.clone());
        let (again, _) = held
            .hand_back(&turn, Some(NextWork::Task(5)), Some(3), 0, 0, 10)
            .unwrap();
        let kept = write(again.clone());
        assert_eq!(
            kept,
            HostCounts { hosts: 1, open: 1 },
            "a next turn is on its way"
        );
        let (held, turn) = again.claim_turn(2_000, 30_000).unwrap();
        write(held.clone());
        let (idle, _) = held.hand_back(&turn, None, Some(3), 0, 0, 2_010).unwrap();
        let kept = write(idle.clone());
        assert!(!idle.is_open());
        assert_eq!(kept, HostCounts { hosts: 1, open: 0 });
        assert!(kept.all_idle());
        // A write that changes neither field changes nothing.
        assert!(HostCounts::change(Some(&idle), &idle.revive(&policy())).is_zero());
    }

    #[test]
    fn a_host_filed_under_16_shards_is_under_its_shard_or_that_plus_16() {
        // The FNV-1a hash modulo 16, as crawls created before 32 shards filed their hosts.
        let old = |name: &str| {
            name.bytes().fold(0x811c_9dc5_u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            }) % 16
        };
        let mut moved = 0;
        for i in 0..500 {
            let name = format!("h{i}.test");
            let (before, now) = (old(&name), host_shard(&name));
            assert!(
                now == before || now == before + 16,
                "{name}: {before} -> {now}"
            );
            moved += usize::from(now != before);
        }
        assert!((200..300).contains(&moved), "about half move: {moved}");
    }

    #[test]
    fn a_host_shard_is_a_stable_hash_of_its_name() {
        assert_eq!(host_shard("example.com"), host_shard("example.com"));
        let shards: std::collections::BTreeSet<u32> = (0..400)
            .map(|i| host_shard(&format!("h{i}.test")))
            .collect();
        assert_eq!(
            shards.len(),
            HOST_SHARDS as usize,
            "400 hosts fill every shard"
        );
    }

    #[test]
    fn a_claimer_recognises_its_own_turn_and_only_while_it_runs() {
        let host = Host::new("example.com", &policy(), 0);
        let (held, turn) = host.claim_turn_by(7, 0, 30_000).unwrap();
        // The claimer's retry (its answer lost) finds its turn; another worker does not.
        assert_eq!(held.turn_of(7), Some(turn));
        assert_eq!(held.turn_of(8), None);
        // A takeover of the expired turn is the new claimer's alone.
        let (taken, newer) = held.claim_turn_by(8, 30_000, 30_000).unwrap();
        assert_eq!((taken.turn_of(7), taken.turn_of(8)), (None, Some(newer)));
        // Handed back, the turn is nobody's.
        let (back, _) = taken
            .hand_back(&newer, None, Some(0), 0, 0, 30_000)
            .unwrap();
        assert_eq!((back.claimer, back.turn_of(8)), (None, None));
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
        assert!(
            taken
                .hand_back(&turn, None, Some(0), 0, 0, 30_000)
                .is_none()
        );
        let (back, next) = taken
            .hand_back(&newer, None, Some(0), 0, 0, 30_000)
            .unwrap();
        assert_eq!((back.turn_until, back.queued_for, next), (None, None, None));
    }

    #[test]
    fn a_live_holder_renews_its_hold_and_one_taken_over_or_requeued_cannot() {
        let host = Host::new("example.com", &policy(), 0);
        let (held, turn) = host.claim_turn(0, 30_000).unwrap();
        // Renewed at 15 s: another worker finds the host busy past the first hold's end.
        let renewed = held.renew(&turn, 15_000, 30_000).unwrap();
        assert_eq!(renewed.token, turn.token);
        assert_eq!(
            renewed.claim_turn(30_000, 30_000),
            Err(TurnRejection::Busy { until: 45_000 })
        );
        // Its hand-back is still its own.
        assert!(
            renewed
                .hand_back(&turn, None, Some(0), 0, 0, 40_000)
                .is_some()
        );
        // Taken over once the hold ran out (the holder died): the old holder cannot renew.
        let (taken, _) = renewed.claim_turn(45_000, 30_000).unwrap();
        assert_eq!(taken.renew(&turn, 46_000, 30_000), None);
        // Its turn re-issued after the hold ran out, unclaimed yet: neither can it.
        let (requeued, _) = held.requeue(31_000);
        assert_eq!(requeued.renew(&turn, 31_000, 30_000), None);
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
    fn a_lone_timeout_paces_timeouts_in_a_row_snooze() {
        let p = policy();
        let host = Host::new("h", &p, 0);
        let once = host.observe(&p, HostSignal::Timeout, 0);
        assert_eq!((once.snoozed_until, once.trouble_in_a_row), (None, 1));
        let twice = once.observe(&p, HostSignal::Timeout, 1_000);
        assert_eq!(twice.snoozed_until, Some(21_000));
        let well = once.observe(&p, HostSignal::Answered, 1_000);
        assert_eq!(well.trouble_in_a_row, 0);
    }

    #[test]
    fn a_host_past_its_error_budget_is_given_up() {
        let p = policy();
        // A host that answered once: its full error budget applies.
        let mut host = Host::new("h", &p, 0).observe(&p, HostSignal::Answered, 0);
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

    #[test]
    fn a_host_that_never_answered_with_http_is_given_up_after_three_attempts() {
        let p = HostPolicy {
            error_budget: 8,
            ..policy()
        };
        let mut dead = Host::new("h", &p, 0);
        for (i, signal) in [HostSignal::Unreachable, HostSignal::Timeout]
            .into_iter()
            .enumerate()
        {
            dead = dead.observe(&p, signal, i as Millis * 10_000);
            assert!(dead.given_up.is_none(), "given up after {}", i + 1);
        }
        let dead = dead.observe(&p, HostSignal::Unreachable, 30_000);
        let why = dead.given_up.as_deref().unwrap();
        assert!(why.contains("never answered with HTTP"), "{why}");
        // A host that throttles every request answers with HTTP: snoozed, not given up early.
        let throttled = HostSignal::Throttled {
            retry_after_ms: None,
        };
        let mut busy = Host::new("h", &p, 0);
        for i in 0..7 {
            busy = busy.observe(&p, throttled, i * 100_000);
        }
        assert!(busy.given_up.is_none(), "{busy:?}");
        assert!(busy.observe(&p, throttled, 900_000).given_up.is_some());
        // Nor is a host that answered before and then went down (its full budget applies).
        let mut down = Host::new("h", &p, 0).observe(&p, HostSignal::Answered, 0);
        for i in 1..8 {
            down = down.observe(&p, HostSignal::Unreachable, i * 100_000);
        }
        assert!(down.given_up.is_none(), "{down:?}");
    }

    #[test]
    fn a_url_is_singled_out_once_its_host_answered_others_after_its_trouble() {
        use crate::task::{ErrorKind, ErrorRecord};
        let at = 1_000_000;
        let throttled = [ErrorRecord::new(ErrorKind::Throttled, "429", at)];
        // Never throttled before, or the host has not answered for long: the host's trouble.
        let long_before = at - ANSWERING_WINDOW_MS as Millis - 1;
        assert!(!singled_out(Some(at + 5_000), &[]));
        assert!(!singled_out(Some(long_before), &throttled));
        assert!(!singled_out(None, &throttled));
        // Throttled while the host answered other requests, since or just before: the URL's.
        assert!(singled_out(Some(at + 5_000), &throttled));
        assert!(singled_out(Some(at - 1_000), &throttled));
        // Errors that are the URL's own never count as host trouble.
        let missing = [ErrorRecord::new(ErrorKind::NotFound, "404", at)];
        assert!(!singled_out(Some(at + 5_000), &missing));
        // The host's answers are recorded.
        let host = Host::new("h", &policy(), 0).observe(&policy(), HostSignal::Answered, 7);
        assert_eq!((host.answered_at, host.has_spoken_http()), (Some(7), true));
        // ... and kept when the turn's holder hands the host back over a newer record.
        let stored = Host::new("h", &policy(), 0).merge_turn(&host);
        assert_eq!((stored.answered_at, stored.spoke_http), (Some(7), true));
    }

    #[test]
    fn one_message_chain_per_host_seeds_wake_an_idle_host_only() {
        let p = policy();
        let idle = Host::new("h", &p, 0);
        // An idle host is woken by its first seeds: one message, a new epoch.
        let (woken, send) = idle.note_seeded(3, 100);
        assert_eq!((send, woken.epoch, woken.seeded), (Some(100), 1, 3));
        // More seeds while the message is out send nothing.
        let (more, again) = woken.note_seeded(2, 150);
        assert_eq!((again, more.epoch, more.seeded), (None, 1, 5));
        // The turn started from seeded = 5; work remains due later: the next message is
        // not visible before the host's pace allows.
        let (held, turn) = more.claim_turn(200, 30_000).unwrap();
        let paced = held.observe(&p, HostSignal::Answered, 300);
        let (back, next) = paced
            .hand_back(&turn, Some(NextWork::Task(250)), Some(5), 0, 0, 400)
            .unwrap();
        assert_eq!(next, Some(1_300), "not before next_allowed_at");
        assert_eq!((back.epoch, back.queued_for), (2, Some(1_300)));
    }

    #[test]
    fn a_turn_without_work_idles_the_host_unless_seeds_arrived_meanwhile() {
        let p = policy();
        let (host, _) = Host::new("h", &p, 0).note_seeded(1, 0);
        let (held, turn) = host.claim_turn(0, 30_000).unwrap();
        let (idle, next) = held.hand_back(&turn, None, Some(1), 0, 0, 10).unwrap();
        assert_eq!((idle.queued_for, next), (None, None));
        // Seeds during the turn (seeded moved from 1 to 2): another turn, at once.
        let (during, none) = held.note_seeded(1, 5);
        assert_eq!(none, None, "a running turn finds new work itself");
        let (busy, next) = during.hand_back(&turn, None, Some(1), 0, 0, 10).unwrap();
        assert_eq!((next, busy.epoch), (Some(10), during.epoch + 1));
    }

    #[test]
    fn a_turn_without_work_leaves_the_host_open_while_counted_seeds_settle() {
        let p = policy();
        // A seed counted at 0 woke the host; its task may not be listed yet.
        let (host, _) = Host::new("h", &p, 0).note_seeded(1, 0);
        assert_eq!(host.seeded_at, Some(0));
        let (held, turn) = host.claim_turn(10, 30_000).unwrap();
        let (open, next) = held.hand_back(&turn, None, Some(1), 0, 1_000, 20).unwrap();
        assert_eq!((next, open.queued_for), (Some(1_000), Some(1_000)));
        assert_eq!(open.done, 0, "the counts are not made to agree yet");
        // Due later but not now: still one more turn once the count settled.
        let (held, turn) = host.claim_turn(10, 30_000).unwrap();
        let revisit = Some(NextWork::Revisit(9_000_000));
        let (open, next) = held
            .hand_back(&turn, revisit, Some(1), 0, 1_000, 20)
            .unwrap();
        assert_eq!((next, open.wake_at), (Some(1_000), None));
        // A turn that saw every counted URL to an end idles the host at once.
        let (held, turn) = host.claim_turn(10, 30_000).unwrap();
        let ended = Host { done: 1, ..held };
        let (idle, next) = ended.hand_back(&turn, None, Some(1), 0, 1_000, 20).unwrap();
        assert_eq!((next, idle.queued_for), (None, None));
        // Once settled, a turn that finds nothing idles the host.
        let (held, turn) = open.claim_turn(1_000, 30_000).unwrap();
        let (idle, next) = held
            .hand_back(&turn, None, Some(1), 0, 1_000, 1_010)
            .unwrap();
        assert_eq!((next, idle.queued_for, idle.done), (None, None, 1));
    }

    #[test]
    fn offers_made_since_the_last_write_are_noted_at_the_claim() {
        let p = policy();
        let (host, _) = Host::new("h", &p, 0).note_seeded(1, 0);
        // Offered while its message was out (atomic adds beside the record, at an unknown time).
        let offered = host.clone().with_offers(2);
        let (held, turn) = offered.claim_turn(50_000, 30_000).unwrap();
        assert_eq!((held.seeded_at, held.seen_offers), (Some(50_000), 2));
        let (open, next) = held
            .hand_back(&turn, None, Some(3), 0, 1_000, 50_010)
            .unwrap();
        assert_eq!((next, open.seen_offers), (Some(51_000), 2));
        // With no offer since, a claim keeps the time it had.
        let (again, _) = open.claim_turn(51_000, 30_000).unwrap();
        assert_eq!(again.seeded_at, Some(50_000));
    }

    #[test]
    fn a_given_up_host_is_drained_only_once_its_seeds_settled() {
        let p = policy();
        let (host, _) = Host::new("h", &p, 0).note_seeded(1, 0);
        let gone = Host {
            given_up: Some("down".into()),
            ..host
        };
        let (open, visible_at) = gone.drained_unless_settling(100, 1_000);
        assert_eq!((visible_at, open.queued_for), (Some(1_000), Some(1_000)));
        assert_eq!(open.epoch, gone.epoch + 1);
        let (idle, visible_at) = gone.drained_unless_settling(1_000, 1_000);
        assert_eq!((visible_at, idle.queued_for, idle.done), (None, None, 1));
    }

    #[test]
    fn a_hand_back_whose_answer_was_lost_is_recognised_on_retry() {
        // GIVEN a turn handed back with more work, the write applied
        let policy = HostPolicy::default();
        let (claimed, turn) = Host::new("h", &policy, 0).claim_turn(0, 1_000).unwrap();
        let (stored, visible_at) = claimed
            .hand_back(&turn, Some(NextWork::Task(5)), Some(0), 0, 0, 10)
            .unwrap();
        // WHEN its holder retries on the stored record
        // THEN it is recognised as this turn's hand-back, still to send its message at the
        // stored epoch; the hand-back itself is not applied twice
        assert!(stored.handed_back_by(&turn));
        assert_eq!(
            (stored.queued_for, stored.epoch),
            (visible_at, claimed.epoch + 1)
        );
        assert_eq!(stored.hand_back(&turn, None, Some(0), 0, 0, 20), None);
        // AND once another turn was claimed, or while one runs, it is not
        assert!(!claimed.handed_back_by(&turn));
        let (next, _) = stored.claim_turn(20, 1_000).unwrap();
        assert!(!next.handed_back_by(&turn));
        let (handed, _) = next
            .hand_back(
                &Turn {
                    token: next.token,
                    until: 1_020,
                },
                None,
                Some(0),
                0,
                0,
                30,
            )
            .unwrap();
        assert!(!handed.handed_back_by(&turn));
    }

    #[test]
    fn a_queue_that_holds_a_message_per_open_host_holds_the_presumption_of_loss() {
        let usual = 300_000;
        // Depth or counts unknown: the usual window.
        assert_eq!(lost_after_ms(usual, None, Some(5)), usual);
        assert_eq!(lost_after_ms(usual, Some(5), None), usual);
        // Nothing queued: every overdue message is lost, after a minute.
        assert_eq!(
            lost_after_ms(usual, Some(0), Some(5)),
            DRAINED_LOST_AFTER_MS
        );
        assert_eq!(lost_after_ms(30_000, Some(0), None), 30_000);
        // A deep queue holding one message per open host (or more: other crawls', stale ones):
        // held, for a bounded time.
        for depth in [5_000, 5_001, 20_000] {
            assert_eq!(
                lost_after_ms(usual, Some(depth), Some(5_000)),
                HELD_LOST_AFTER_MS
            );
        }
        assert_eq!(
            lost_after_ms(2 * HELD_LOST_AFTER_MS, Some(9), Some(9)),
            2 * HELD_LOST_AFTER_MS
        );
        // Fewer messages than open hosts: some are lost; the usual window finds them.
        assert_eq!(lost_after_ms(usual, Some(4_999), Some(5_000)), usual);
        // Through the host's rule: a message overdue by an hour is waiting, not lost, in a
        // queue that holds it; lost when the queue shows it missing.
        let (host, _) = Host::new("h", &policy(), 0).note_seeded(1, 0);
        let hour = 3_600_000;
        assert!(!host.message_lost(hour, lost_after_ms(usual, Some(5_000), Some(5_000)), false));
        assert!(host.message_lost(hour, lost_after_ms(usual, Some(4_999), Some(5_000)), false));
        assert!(host.message_lost(
            HELD_LOST_AFTER_MS as Millis,
            lost_after_ms(usual, Some(5_000), Some(5_000)),
            false
        ));
    }

    #[test]
    fn lost_messages_are_recognised_and_requeued_under_a_new_epoch() {
        let p = policy();
        let (host, _) = Host::new("h", &p, 0).note_seeded(1, 0);
        assert!(
            !host.message_lost(1_000, 5_000, true),
            "message still expected"
        );
        assert!(host.message_lost(5_000, 5_000, false));
        let (held, _) = host.claim_turn(6_000, 30_000).unwrap();
        assert!(
            !held.message_lost(20_000, 5_000, true),
            "a live turn is not lost"
        );
        assert!(
            held.message_lost(36_000, 60_000, false),
            "an expired turn is, at once"
        );
        // An idle host is lost when it has work: known to a caller, or by its counts.
        let turn = Turn {
            token: held.token,
            until: 36_000,
        };
        let (idle, _) = held.hand_back(&turn, None, Some(1), 0, 0, 7_000).unwrap();
        assert_eq!((idle.queued_for, idle.backlog()), (None, 0));
        assert!(!idle.message_lost(7_000, 5_000, false));
        assert!(idle.message_lost(7_000, 5_000, true));
        let (offered, _) = idle.note_seeded(2, 8_000);
        assert_eq!((offered.backlog(), offered.drained().backlog()), (2, 0));
        // The holder died: after its turn expired the host is requeued; the old epoch's
        // messages are superseded.
        let (requeued, at) = held.requeue(40_000);
        assert_eq!((at, requeued.epoch, requeued.turn_until), (40_000, 2, None));
        // Requeued during a live turn: visible when that turn expires.
        let (_, later) = held.requeue(10_000);
        assert_eq!(later, 36_000);
        // After a restart of the process that held it: at once.
        let (restarted, now) = held.restart(10_000);
        assert_eq!((now, restarted.turn_until), (10_000, None));
    }

    #[test]
    fn work_due_later_than_a_message_can_wait_idles_the_host_until_the_sweeper_wakes_it() {
        let policy = policy();
        let host = Host::new("a.test", &policy, 0);
        let (held, turn) = host.claim_turn(0, 60_000).unwrap();
        let day = 86_400_000;
        // A recrawl, even a soon one, is the sweeper's: no message.
        for next in [
            NextWork::Revisit(day),
            NextWork::Revisit(60_000),
            NextWork::Task(day),
        ] {
            let (idle, message) = held
                .hand_back(&turn, Some(next), Some(0), 0, 0, 1_000)
                .unwrap();
            let (NextWork::Revisit(at) | NextWork::Task(at)) = next;
            assert_eq!(
                (message, idle.queued_for, idle.wake_at),
                (None, None, Some(at))
            );
            assert!(idle.is_idle(1_000));
            assert!(
                !idle.message_lost(at - 1, 60_000, false),
                "not before it is due"
            );
            assert!(
                idle.message_lost(at, 60_000, false),
                "due: the sweeper wakes it"
            );
            let (woken, visible) = idle.requeue(at);
            assert_eq!(
                (visible, woken.wake_at, woken.queued_for),
                (at, None, Some(at))
            );
            // A seed wakes it sooner, and the turn finds everything due.
            let (seeded, message) = idle.note_seeded(1, 2_000);
            assert_eq!((message, seeded.wake_at), (Some(2_000), None));
        }
        // Pages due again already (more than one turn's worth): the next turn at once.
        let (more, message) = held
            .hand_back(&turn, Some(NextWork::Revisit(500)), Some(0), 0, 0, 1_000)
            .unwrap();
        assert_eq!((message, more.wake_at), (Some(1_000), None));
        // A retry a few minutes away waits as a delayed message.
        let (queued, message) = held
            .hand_back(&turn, Some(NextWork::Task(120_000)), Some(0), 0, 0, 1_000)
            .unwrap();
        assert_eq!((message, queued.wake_at), (Some(120_000), None));
    }
}
