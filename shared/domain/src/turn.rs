//! A host's turn, decided: which due task starts next, when it starts, when the turn stops
//! starting fetches, and which work the host is handed back with. The crawler (`trawl-core`)
//! reads the store, waits on its clock and fetches; this plan says what to do with what it read.
//!
//! The rules of a turn:
//! - **Pace.** Starts are spaced by the host's delay (robots.txt's Crawl-delay at least), the
//!   delay as it stands when the fetch is admitted (throttling slows it mid-turn). The pace is
//!   kept on the turn's own monotonic time, from 0 at its start.
//! - **Budget.** A turn starts at most its host's `turn_pages` fetches (the crawl's, or its
//!   domain rule's), and each task at most
//!   once: a due task read again before its claim shows is not started twice.
//! - **Time.** No fetch starts that could not end in time: none within a fetch window (the
//!   fetch timeout and 2 s) of the end of the turn's time ([`turn_ms`] from its claim), nor of
//!   the invocation's deadline.
//! - **Hold.** The turn holds its host for [`hold_ms`] (30 s) from its claim, renewed while it
//!   runs ([`TurnPlan::renew_at`]): when half the hold is left, and before a fetch starts that
//!   the hold would not cover to its end (so no other worker fetches the host while this one
//!   does). A holder that dies (a killed process, a crashed or timed-out invocation) costs its
//!   host the rest of its hold at most; one that finds its turn taken over stops. A renewal is
//!   one write of the host record, fenced like the turn's other writes (its token): with the
//!   default fetch timeout, one per 8 s of a turn, none for a turn shorter than that.
//! - **Stop.** A storage error stops the turn; so does host-wide trouble that snoozes the host
//!   or gives it up. Fetches in flight end; none starts after.
//! - **Hand-back.** The host goes back with its soonest due task as its next work.

use crate::canonical::TaskId;
use crate::crawl::CrawlConfig;
use crate::host::{Host, HostPolicy, HostSignal, NextWork, Turn};
use crate::task::Millis;
use std::collections::HashSet;
use std::time::Duration;

/// The time a fetch may take, its timeout and a margin to store its result: none starts that
/// could not end within this of the turn's end or the deadline.
pub fn fetch_window_ms(config: &CrawlConfig) -> u64 {
    config.fetch.timeout_ms.saturating_add(2_000)
}

/// How long a turn may go on starting fetches: the crawl's lease, and at least two fetch
/// windows, so that a turn always has time for a fetch.
pub fn turn_ms(config: &CrawlConfig) -> u64 {
    config
        .lease_ms
        .max(fetch_window_ms(config).saturating_mul(2))
}

/// How long a turn's hold on its host lasts from its claim or its last renewal: what a holder
/// that died costs its host at most.
pub const TURN_HOLD_MS: u64 = 30_000;

/// The least time between two renewals of a hold.
const MIN_RENEWAL_GAP_MS: u64 = 5_000;

/// The hold a turn claims and renews: [`TURN_HOLD_MS`], longer only when a fetch could outlast
/// it (a fetch window and the least gap between renewals).
pub fn hold_ms(config: &CrawlConfig) -> u64 {
    TURN_HOLD_MS.max(fetch_window_ms(config).saturating_add(MIN_RENEWAL_GAP_MS))
}

/// Whether a task read from the host's due list may be claimed at `now` (`claimable_from`:
/// None when it is not due at all).
pub fn due_now(claimable_from: Option<Millis>, now: Millis) -> bool {
    claimable_from.is_some_and(|at| at <= now)
}

/// The host's next work as its turn ends: the soonest of its due tasks (each as
/// `(claimable_from, next_work)`).
pub fn next_work(due: impl IntoIterator<Item = (Millis, Option<NextWork>)>) -> Option<NextWork> {
    due.into_iter()
        .min_by_key(|(at, _)| *at)
        .and_then(|(_, work)| work)
}

/// What became of a task a turn started, as far as the turn's rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    /// Brought to an end (succeeded, unchanged, redirected or given up): the host's `done`.
    Ended,
    /// A page fetched before brought to an end again (a recrawl): the host counted its end
    /// already, so `done` stays a count of the URLs seeded (`Host::backlog`).
    EndedAgain,
    /// Still to do (a retry, a snoozed host's URL) or not this turn's (skipped).
    Open,
    /// Storage failed: the turn stops.
    Failed,
}

/// Whether a due task read from the store is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Start,
    /// Started already in this turn.
    Again,
    /// The turn starts nothing more (its budget spent, or stopped).
    Closed,
}

/// A turn in progress, as its holder decides it.
#[derive(Debug, Clone)]
pub struct TurnPlan {
    host: Host,
    policy: HostPolicy,
    robots_delay_ms: u64,
    pages_left: u32,
    started: HashSet<TaskId>,
    /// The turn's monotonic time (ms from its start) before which no further fetch starts.
    next_start: u64,
    /// No fetch starts after this (the turn's end minus a fetch window).
    last_start: Millis,
    fetch_window: Duration,
    /// When the turn's hold on its host ends (its claim's or its last renewal's).
    held_until: Millis,
    hold_ms: u64,
    stopped: bool,
}

impl TurnPlan {
    /// The plan of `turn` on `host`, claimed at `claimed_at`, which robots.txt asks to wait
    /// `robots_delay` between requests.
    pub fn new(
        host: Host,
        config: &CrawlConfig,
        turn: &Turn,
        claimed_at: Millis,
        robots_delay: Duration,
    ) -> Self {
        let fetch_window = fetch_window_ms(config);
        let policy = config.politeness.host_policy(&host.name);
        let ends = claimed_at.saturating_add(turn_ms(config) as Millis);
        Self {
            pages_left: policy.turn_pages,
            policy,
            host,
            robots_delay_ms: u64::try_from(robots_delay.as_millis()).unwrap_or(u64::MAX),
            started: HashSet::new(),
            next_start: 0,
            last_start: ends.saturating_sub(fetch_window as Millis),
            fetch_window: Duration::from_millis(fetch_window),
            held_until: turn.until,
            hold_ms: hold_ms(config),
            stopped: false,
        }
    }

    /// When the turn's hold on its host must be renewed (`Host::renew`): once half of it is
    /// left, or less than a fetch window (a fetch started later could outlast it). Before a
    /// fetch starts and while the turn waits, the holder renews from this time on.
    pub fn renew_at(&self) -> Millis {
        let keep = (self.hold_ms / 2).max(self.fetch_window.as_millis() as u64);
        self.held_until.saturating_sub(keep as Millis)
    }

    /// The hold renewed at `now`: it lasts until `now` and the hold.
    pub fn renewed(&mut self, now: Millis) {
        self.held_until = now.saturating_add(self.hold_ms as Millis);
    }

    /// How long the turn's hold lasts from a renewal.
    pub fn hold_ms(&self) -> u64 {
        self.hold_ms
    }

    /// The host as the turn now sees it (what it hands back).
    pub fn host(&self) -> &Host {
        &self.host
    }

    pub fn into_host(self) -> Host {
        self.host
    }

    /// Fetches in flight at once.
    pub fn parallel(&self) -> usize {
        self.policy.parallel.max(1) as usize
    }

    pub fn pages_left(&self) -> u32 {
        self.pages_left
    }

    /// Whether the turn was stopped (trouble, a storage error, its time): nothing more is read
    /// or started.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Whether the turn starts nothing more (stopped, or its page budget spent).
    pub fn closed(&self) -> bool {
        self.stopped || self.pages_left == 0
    }

    /// The turn can go on no more (its due tasks could not be read).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether a task read from the due list is one this turn has not started yet.
    pub fn is_new(&self, task: &TaskId) -> bool {
        !self.started.contains(task)
    }

    /// Takes a due task into the turn, spending a page of its budget.
    pub fn admit(&mut self, task: &TaskId) -> Admit {
        if self.closed() {
            return Admit::Closed;
        }
        if !self.started.insert(task.clone()) {
            return Admit::Again;
        }
        self.pages_left -= 1;
        Admit::Start
    }

    /// When (the turn's monotonic ms) an admitted fetch starts, at `elapsed` ms into the turn:
    /// the host's pace from the previous start, and reserves the slot.
    pub fn start_at(&mut self, elapsed: u64) -> u64 {
        let pause = self.host.delay_ms.max(self.robots_delay_ms);
        let at = self.next_start.max(elapsed);
        self.next_start = at.saturating_add(pause);
        at
    }

    /// Whether a fetch whose start has come may go at `now`, `time_left` before the
    /// invocation's deadline (None: no deadline). Once one may not, none may.
    pub fn may_start(&mut self, now: Millis, time_left: Option<Duration>) -> bool {
        let late = time_left.is_some_and(|left| left < self.fetch_window);
        if late || now > self.last_start {
            self.stopped = true;
        }
        !self.stopped
    }

    /// A started task ended at `now`, and what its fetch said about the host (None: no request
    /// reached it).
    pub fn finished(&mut self, end: TaskEnd, signal: Option<HostSignal>, now: Millis) {
        match end {
            TaskEnd::Ended => self.host.done += 1,
            TaskEnd::Failed => self.stopped = true,
            TaskEnd::EndedAgain | TaskEnd::Open => {}
        }
        if let Some(signal) = signal {
            self.host = self.host.observe(&self.policy, signal, now);
            // robots.txt's Crawl-delay paces the host too: the next turn (its message visible
            // at the host's next allowed time) must not fetch sooner.
            self.host.next_allowed_at = self
                .host
                .next_allowed_at
                .max(now.saturating_add(self.robots_delay_ms as Millis));
            if self.host.snoozed_until.is_some() || self.host.given_up.is_some() {
                self.stopped = true;
            }
        }
    }
}

#[cfg(test)]
mod tests;
