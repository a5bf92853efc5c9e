//! Call reports spread over lanes, each applied once per request, whoever reports meanwhile.
//!
//! Every invocation ends with a report of its calls (and, on DynamoDB, of the task counts it
//! changed) to its crawl: `crawl::transition::add_calls`, a request (`crate::request`). On one
//! item these reports are the crawl's hottest key (one per crawler batch: ~440 a second at
//! 1,653 URLs/s when turns are short) and, to be applied once under retries, a transaction
//! (2 write units) and a read. A store that has many writers (DynamoDB) spreads them instead:
//!
//! - **Lanes.** A crawl has [`REPORT_LANES`] report items besides its record. A process reports
//!   to one lane, [`lane`] of its reporter id (drawn at random when the process starts), so a
//!   lane takes 1/32 of the reports; each is one conditional update that adds the report's
//!   counts (1 write unit: a lane holds counts and a few entries, no configuration). The crawl's
//!   totals are its record's plus its lanes' (one batched read of 33 keys).
//! - **Once per request.** A lane keeps one [`Entry`] per reporter slot (a process's slot, see
//!   [`Slots`]): when it was written and the ids of that slot's last [`ENTRY_REQUESTS`] requests
//!   that landed. A report writes its slot's entry with its own id added, on condition that the
//!   entry stored does not hold its id already; refused, the report was applied before (its
//!   answer was lost). Two processes never share an entry, so a retry of A after B landed (on the
//!   same lane or not) still finds A in A's entry: counted once. Within a process, requests in
//!   flight at once take different slots, and a slot's entry carries the ids of its earlier
//!   requests that landed (or may have), so a retry of one of them, after a later request of the
//!   same slot landed, finds it too.
//! - **Bounds.** A retry is recognised while fewer than [`ENTRY_REQUESTS`] later requests of its
//!   slot have landed (a caller retries within seconds; a process reports once per
//!   invocation). An entry not written for twice the request window ([`Entry::stale`]: its
//!   process is gone) is removed by the next report to its lane that saw it, so a lane holds
//!   about one entry per live process that reports to it.

use crate::request::{REQUEST_WINDOW_MS, RequestId};
use crate::task::Millis;
use std::collections::VecDeque;

/// Report items per crawl, besides its record.
pub const REPORT_LANES: u32 = 32;

/// Request ids an entry keeps.
pub const ENTRY_REQUESTS: usize = 4;

/// The request window in this module's time unit.
fn window() -> Millis {
    Millis::try_from(REQUEST_WINDOW_MS).unwrap_or(Millis::MAX)
}

/// The lane a reporter's reports go to.
pub fn lane(reporter: u32) -> u32 {
    reporter % REPORT_LANES
}

/// The short form of a request's id kept in an entry (its low 32 bits: two requests of one
/// slot within a few reports share it with odds of 2⁻³²).
fn short(request: RequestId) -> String {
    format!("{:08x}", request.0 & 0xffff_ffff)
}

/// One reporter slot's entry on its lane: when it was last written, and its recent requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub at: Millis,
    requests: Vec<String>,
}

impl Entry {
    /// The stored form: `{at}:{id}:{id}…`, each id 8 hex digits.
    pub fn encode(&self) -> String {
        let mut text = self.at.to_string();
        for id in &self.requests {
            text.push(':');
            text.push_str(id);
        }
        text
    }

    /// An entry as stored; None when `text` is not one.
    pub fn decode(text: &str) -> Option<Entry> {
        let mut parts = text.split(':');
        let at = parts.next()?.parse().ok()?;
        let requests: Vec<String> = parts.map(str::to_owned).collect();
        requests
            .iter()
            .all(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .then_some(Entry { at, requests })
    }

    /// What a stored entry contains when it holds `request` (a store tests the stored text
    /// for it as a substring: ids are delimited and of one length, and `at` has no ':').
    pub fn needle(request: RequestId) -> String {
        format!(":{}", short(request))
    }

    /// Whether the entry holds `request`.
    pub fn holds(&self, request: RequestId) -> bool {
        self.encode().contains(&Entry::needle(request))
    }

    /// Whether the entry's process is gone: not written for twice the request window, so no
    /// retry of any of its requests can come.
    pub fn stale(&self, now: Millis) -> bool {
        self.at.saturating_add(2 * window()) < now
    }
}

/// A process's reporter slots for one crawl: which slot a try of a request writes, and the
/// entry it writes there.
#[derive(Debug, Default)]
pub struct Slots(Vec<Slot>);

#[derive(Debug, Default)]
struct Slot {
    /// The request whose try's outcome is unknown (its tries go on), and when it began.
    open: Option<(RequestId, Millis)>,
    /// Requests of the slot that landed (or may have), most recent last.
    landed: VecDeque<RequestId>,
}

/// What became of one try of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It landed, or found itself applied.
    Applied,
    /// The store answered without applying it (refused, throttled).
    NotApplied,
    /// No answer: it may have landed.
    Unknown,
}

impl Slots {
    /// The slot a try of `request` at `now` writes and the entry it writes: a retry goes to the
    /// slot of its first try; a new request to the lowest slot with no request open (one open
    /// for longer than the request window is given up). The entry holds the slot's recent
    /// requests that landed and this one.
    pub fn begin(&mut self, request: RequestId, now: Millis) -> (u32, Entry) {
        for slot in &mut self.0 {
            if slot
                .open
                .is_some_and(|(_, at)| at.saturating_add(window()) < now)
            {
                slot.open = None;
            }
        }
        let known = self.0.iter().position(|slot| {
            slot.open.is_some_and(|(open, _)| open == request) || slot.landed.contains(&request)
        });
        let index = match known {
            Some(index) => index,
            None => {
                let free = self.0.iter().position(|slot| slot.open.is_none());
                let index = free.unwrap_or(self.0.len());
                if index == self.0.len() {
                    self.0.push(Slot::default());
                }
                index
            }
        };
        let slot = &mut self.0[index];
        if !slot.landed.contains(&request) {
            slot.open = Some((request, now));
        }
        let mut requests: Vec<RequestId> = slot
            .landed
            .iter()
            .copied()
            .filter(|&r| r != request)
            .collect();
        let keep = requests.len().saturating_sub(ENTRY_REQUESTS - 1);
        requests.drain(..keep);
        requests.push(request);
        let entry = Entry {
            at: now,
            requests: requests.into_iter().map(short).collect(),
        };
        (u32::try_from(index).unwrap_or(u32::MAX), entry)
    }

    /// Notes how a try of `request` ended. Applied (or possibly applied, once given up), it
    /// joins its slot's recent requests; not applied, it leaves no trace and its next try starts
    /// again.
    pub fn end(&mut self, request: RequestId, outcome: Outcome) {
        let Some(slot) = self
            .0
            .iter_mut()
            .find(|slot| slot.open.is_some_and(|(open, _)| open == request))
        else {
            return;
        };
        match outcome {
            Outcome::Unknown => {}
            Outcome::NotApplied => slot.open = None,
            Outcome::Applied => {
                slot.open = None;
                slot.landed.push_back(request);
                while slot.landed.len() > ENTRY_REQUESTS {
                    slot.landed.pop_front();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_700_000_000_000;

    #[test]
    fn an_entry_is_read_back_as_written_and_holds_only_its_requests() {
        let mut slots = Slots::default();
        let (slot, entry) = slots.begin(RequestId(0xdead_beef_0000_0001), T0);
        assert_eq!(slot, 0);
        assert_eq!(entry.encode(), format!("{T0}:00000001"));
        assert_eq!(Entry::decode(&entry.encode()), Some(entry.clone()));
        assert!(entry.holds(RequestId(1)));
        assert!(!entry.holds(RequestId(0x10)));
        assert_eq!(Entry::decode("12:xyz"), None);
        assert_eq!(Entry::decode("nope"), None);
    }

    #[test]
    fn a_retry_after_a_later_request_of_its_slot_landed_finds_itself_in_the_entry() {
        // GIVEN request A landed (its answer then lost above the store), then B landed
        let mut slots = Slots::default();
        let (a, b) = (RequestId(1), RequestId(2));
        slots.begin(a, T0);
        slots.end(a, Outcome::Applied);
        let (slot_b, entry_b) = slots.begin(b, T0 + 1);
        slots.end(b, Outcome::Applied);
        // THEN B's entry, the one stored, holds A: A's retry is refused as applied
        assert!(entry_b.holds(a) && entry_b.holds(b));
        let (slot_a, entry_a) = slots.begin(a, T0 + 2);
        assert_eq!(slot_a, slot_b);
        assert!(entry_a.holds(a));
    }

    #[test]
    fn requests_in_flight_at_once_take_their_own_slots() {
        let mut slots = Slots::default();
        let (a, b, c) = (RequestId(1), RequestId(2), RequestId(3));
        assert_eq!(slots.begin(a, T0).0, 0);
        // A's outcome unknown: B may not write A's slot (A's retry would not find A there)
        slots.end(a, Outcome::Unknown);
        assert_eq!(slots.begin(b, T0).0, 1);
        // A's retry goes to its own slot
        assert_eq!(slots.begin(a, T0 + 1).0, 0);
        slots.end(a, Outcome::NotApplied);
        // A was not applied: its slot is free and its id not kept
        let (slot, entry) = slots.begin(c, T0 + 2);
        assert_eq!(slot, 0);
        assert!(!entry.holds(a));
        // A slot whose request stayed open past the window is free again
        slots.end(b, Outcome::Unknown);
        slots.end(c, Outcome::Unknown);
        let late = T0 + window() + 10;
        assert_eq!(slots.begin(RequestId(4), late).0, 0);
    }

    #[test]
    fn an_entry_keeps_its_slots_last_requests_and_goes_stale_with_its_process() {
        let mut slots = Slots::default();
        let mut last = None;
        for i in 1..=10 {
            let (_, entry) = slots.begin(RequestId(i), T0);
            slots.end(RequestId(i), Outcome::Applied);
            last = Some(entry);
        }
        let entry = last.unwrap();
        assert!((7..=10).all(|i| entry.holds(RequestId(i))));
        assert!(!entry.holds(RequestId(6)), "{}", entry.encode());
        assert!(!entry.stale(T0 + 2 * window()));
        assert!(entry.stale(T0 + 2 * window() + 1));
    }

    #[test]
    fn reporters_spread_over_every_lane() {
        let lanes: std::collections::BTreeSet<u32> = (0..64).map(lane).collect();
        assert_eq!(lanes.len(), REPORT_LANES as usize);
    }
}
