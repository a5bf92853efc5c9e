//! When a page is fetched again, and when it is taken for gone: what a crawl's recrawl policy
//! decides for one URL (a [`Revisit`]), and the pure decisions made on each of its fetches.
//!
//! - A page whose URL has a schedule is due again at `fetched_at + interval` (DDS's adaptive
//!   scheduler, `schedule.rs`); its pace lives in its fetch record. A due recrawl is a due URL
//!   of its host: it stays `succeeded` (its content current) until its host's turn takes it.
//! - A page that had content and answers 404/410 (or matches a soft-404 rule) is tried again
//!   soon, its content still current, and is `gone` only after `missing_after` such answers in a
//!   row. A gone page is re-checked on the checker schedule: one that comes back is `succeeded`.
//! - A recrawl that fails past its retries keeps the page's previous content (and its place in
//!   the schedule): a host's bad day does not drop pages from the collection.

use crate::schedule::{Pace, Schedule};
use crate::task::{FetchRecord, Millis};

/// What a crawl's configuration decides for one URL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Revisit {
    /// None: fetched once, never again (unless an operator asks).
    pub schedule: Option<Schedule>,
    /// New links on the page count as a change (listing pages), besides a new md5.
    pub listing: bool,
    /// 404/410 answers in a row that make a page that had content gone (at least 1).
    pub missing_after: u32,
    /// How a gone page is re-checked (None: never).
    pub recheck: Option<Schedule>,
}

impl Revisit {
    /// A one-generation crawl's: fetched once, gone on its first 404.
    pub const ONCE: Revisit = Revisit {
        schedule: None,
        listing: false,
        missing_after: 1,
        recheck: None,
    };

    /// The schedule fields of a record made by a fetch at `now` that found content, after
    /// `previous` (None: the first fetch). `changed` is whether the content changed.
    pub fn after_fetch(
        &self,
        previous: Option<&FetchRecord>,
        changed: bool,
        now: Millis,
    ) -> (Option<Millis>, Option<Pace>) {
        // A page coming back from gone starts its schedule afresh.
        let previous = previous.filter(|p| p.missing == 0);
        self.step(self.schedule, previous.and_then(|p| p.pace), changed, now)
    }

    /// The record of a page taken for gone at `now` (its previous record, `missing` answers in
    /// a row): the content stays for the delta's sake, and the page is re-checked on the
    /// checker schedule.
    pub fn gone(&self, previous: &FetchRecord, missing: u32, now: Millis) -> FetchRecord {
        // The first check after going gone starts the checker's pace; each further one that
        // finds it still gone is an "unchanged" check.
        let pace = previous
            .pace
            .filter(|_| previous.missing >= self.missing_after.max(1));
        let (next_fetch_at, pace) = self.step(self.recheck, pace, false, now);
        FetchRecord {
            missing,
            next_fetch_at,
            pace,
            ..previous.clone()
        }
    }

    /// The record of a page whose recrawl failed for good at `now`: its previous content stays
    /// current, due again as if found unchanged.
    pub fn kept(&self, previous: &FetchRecord, now: Millis) -> FetchRecord {
        let schedule = if previous.missing > 0 {
            self.recheck
        } else {
            self.schedule
        };
        let (next_fetch_at, pace) = self.step(schedule, previous.pace, false, now);
        FetchRecord {
            next_fetch_at,
            pace,
            ..previous.clone()
        }
    }

    /// Whether a 404/410 answer that makes `missing` in a row leaves `previous`'s page gone.
    pub fn is_gone(&self, previous: Option<&FetchRecord>, missing: u32) -> bool {
        previous.is_none() || missing >= self.missing_after.max(1)
    }

    fn step(
        &self,
        schedule: Option<Schedule>,
        pace: Option<Pace>,
        changed: bool,
        now: Millis,
    ) -> (Option<Millis>, Option<Pace>) {
        let Some(schedule) = schedule else {
            return (None, None);
        };
        let pace = match pace {
            Some(pace) => schedule.after_fetch(&pace, changed),
            None => schedule.start(),
        };
        let interval = Millis::try_from(schedule.interval_ms(&pace)).unwrap_or(Millis::MAX);
        (Some(now.saturating_add(interval)), Some(pace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;

    fn adaptive() -> Revisit {
        Revisit {
            schedule: Some(Schedule::RECRAWL),
            listing: false,
            missing_after: 2,
            recheck: Some(Schedule::CHECKER),
        }
    }

    fn fetched(
        revisit: &Revisit,
        previous: Option<&FetchRecord>,
        changed: bool,
        now: Millis,
    ) -> FetchRecord {
        let (next_fetch_at, pace) = revisit.after_fetch(previous, changed, now);
        FetchRecord {
            md5: Some("m".into()),
            http_status: 200,
            fetched_at: now,
            next_fetch_at,
            pace,
            ..FetchRecord::default()
        }
    }

    #[test]
    fn a_page_follows_the_documents_sequence_on_a_virtual_clock() {
        let r = adaptive();
        let first = fetched(&r, None, true, 0);
        assert_eq!(
            first.next_fetch_at,
            Some(150 * MIN),
            "a first fetch starts the pace"
        );
        let changed = fetched(&r, Some(&first), true, first.next_fetch_at.unwrap());
        let interval = changed.next_fetch_at.unwrap() - changed.fetched_at;
        assert_eq!((interval as f64 / MIN as f64).round(), 115.0);
        let mut record = first.clone();
        for _ in 0..21 {
            let at = record.next_fetch_at.unwrap();
            record = fetched(&r, Some(&record), false, at);
        }
        assert_eq!(record.next_fetch_at.unwrap() - record.fetched_at, 195 * MIN);
    }

    #[test]
    fn a_page_is_gone_after_its_second_404_and_rechecked_on_the_checker_schedule() {
        let r = adaptive();
        let page = fetched(&r, None, true, 0);
        assert!(
            !r.is_gone(Some(&page), 1),
            "one 404 keeps the content current"
        );
        assert!(r.is_gone(Some(&page), 2));
        assert!(r.is_gone(None, 1), "nothing to keep: gone at once");
        let gone = r.gone(&page, 2, 1_000);
        assert_eq!(gone.md5, page.md5, "the content stays for the delta");
        assert_eq!(gone.next_fetch_at, Some(1_000 + 1_440 * MIN));
        // Still gone at each check: a day for the first 6, then ×1.3.
        let mut record = gone;
        let mut days = Vec::new();
        for _ in 0..7 {
            let at = record.next_fetch_at.unwrap();
            record = r.gone(&record, record.missing + 1, at);
            days.push((record.next_fetch_at.unwrap() - at) / MIN);
        }
        assert_eq!(days, [1440, 1440, 1440, 1440, 1440, 1872, 1872]);
        let returned = fetched(&r, Some(&record), true, 0);
        assert_eq!(
            returned.next_fetch_at,
            Some(150 * MIN),
            "a page back from gone starts afresh"
        );
    }

    #[test]
    fn a_failed_recrawl_keeps_the_page_and_its_place() {
        let r = adaptive();
        let page = fetched(&r, None, true, 0);
        let kept = r.kept(&page, 10_000);
        assert_eq!(kept.md5, page.md5);
        assert_eq!(
            kept.fetched_at, page.fetched_at,
            "no new fetch was recorded"
        );
        assert_eq!(kept.next_fetch_at, Some(10_000 + 150 * MIN));
    }

    #[test]
    fn once_never_comes_back() {
        let page = fetched(&Revisit::ONCE, None, true, 0);
        assert_eq!((page.next_fetch_at, page.pace), (None, None));
        assert!(Revisit::ONCE.is_gone(Some(&page), 1));
        assert_eq!(Revisit::ONCE.gone(&page, 1, 5).next_fetch_at, None);
    }
}
