//! When a page is fetched again, and when it is taken for gone: what a crawl's recrawl policy
//! decides for one URL (a [`Revisit`]), and the pure decisions made on each of its fetches.
//!
//! - A page whose URL has a schedule is due again at `fetched_at + interval` (DDS's adaptive
//!   scheduler, `schedule.rs`, or the change-rate estimator under the crawl's fetch budget,
//!   `estimate.rs`); its pace lives in its fetch record. A due recrawl is a due URL
//!   of its host: it stays `succeeded` (its content current) until its host's turn takes it.
//! - A page that had content and answers 404/410 (or matches a soft-404 rule) is `gone` only at
//!   the `missing_after`-th *check* in a row that finds it missing ([`Revisit::missing`]): until
//!   then it stays `succeeded`, its content current (delivered unchanged), and is checked again
//!   `missing_recheck_ms` later — not at a retry's backoff, so a page missing for the minutes of
//!   a deploy is not declared gone (Django Dynamic Scraper's checker: two checks in a row, "to
//!   make sure your items aren't deleted accidentally on a 404 response"). A page that comes
//!   back meanwhile never was gone, and keeps its place in its schedule. A gone page is
//!   re-checked on the checker schedule: one that comes back is `succeeded`.
//! - A recrawl that fails past its retries keeps the page's previous content (and its place in
//!   the schedule): a host's bad day does not drop pages from the collection.

use crate::estimate::{ChangeHistory, Check, Estimator, prompted};
use crate::schedule::{Pace, Schedule};
use crate::task::{FetchRecord, Millis};

/// What a check that found a page missing makes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// Gone: the page never had content (None), or this was the `missing_after`-th check in a
    /// row; its record keeps the content for the delta's sake, re-checked on the checker schedule.
    Gone(Option<FetchRecord>),
    /// Missing, not yet confirmed: still `succeeded`, its content current, checked again later.
    Unconfirmed(FetchRecord),
}

/// What a crawl's configuration decides for one URL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Revisit {
    /// None: fetched once, never again (unless an operator asks).
    pub schedule: Option<Schedule>,
    /// The change-rate estimator, which then schedules the page instead of `schedule`.
    pub estimator: Option<Estimated>,
    /// New links on the page count as a change (listing pages), besides a new md5.
    pub listing: bool,
    /// 404/410 answers at checks in a row that make a page that had content gone (at least 1).
    pub missing_after: u32,
    /// How long after a check that found the page missing, unconfirmed, the next check comes.
    pub missing_recheck_ms: u64,
    /// How a gone page is re-checked (None: never).
    pub recheck: Option<Schedule>,
}

impl Revisit {
    /// As `self`, for a page a soft-404 marker recognised: one that marks a page gone
    /// `at_once` (`Soft404Rule::at_once`) confirms it at the first check.
    pub fn on_marker(self, at_once: bool) -> Revisit {
        if at_once {
            Revisit {
                missing_after: 1,
                ..self
            }
        } else {
            self
        }
    }

    /// A one-generation crawl's: fetched once, gone on its first 404.
    pub const ONCE: Revisit = Revisit {
        schedule: None,
        estimator: None,
        listing: false,
        missing_after: 1,
        missing_recheck_ms: Schedule::CHECKER.min_ms,
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
        // A page coming back from gone starts its schedule afresh; one that was missing at a
        // check, unconfirmed, never was gone and keeps its place.
        let previous = previous.filter(|p| !self.confirmed(p));
        if let Some(estimated) = &self.estimator {
            return estimated.after_fetch(previous, changed, now);
        }
        self.step(self.schedule, previous.and_then(|p| p.pace), changed, now)
    }

    /// The record of a page taken for gone at `now` (its previous record, `missing` answers in
    /// a row): the content stays for the delta's sake, and the page is re-checked on the
    /// checker schedule.
    fn gone(&self, previous: &FetchRecord, missing: u32, now: Millis) -> FetchRecord {
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
    /// current, due again as if found unchanged (a gone page at its next check; one missing,
    /// unconfirmed, at its next check too: this one did not happen).
    pub fn kept(&self, previous: &FetchRecord, now: Millis) -> FetchRecord {
        if previous.missing > 0 && !self.confirmed(previous) {
            return self.unconfirmed(previous, previous.missing, now);
        }
        if let Some(estimated) = self.estimator.filter(|_| previous.missing == 0) {
            // No check happened: the history stays as it was.
            let history = previous.pace.and_then(|p| p.history).unwrap_or_default();
            let (next_fetch_at, pace) = estimated.next(history, now);
            return FetchRecord {
                next_fetch_at,
                pace,
                ..previous.clone()
            };
        }
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

    /// What a check at `now` that found the page missing (404/410, a soft 404) makes of it,
    /// after `previous` (None: never fetched with content).
    pub fn missing(&self, previous: Option<&FetchRecord>, now: Millis) -> Missing {
        let Some(previous) = previous else {
            return Missing::Gone(None);
        };
        let missing = previous.missing.saturating_add(1);
        if missing >= self.missing_after.max(1) {
            Missing::Gone(Some(self.gone(previous, missing, now)))
        } else {
            Missing::Unconfirmed(self.unconfirmed(previous, missing, now))
        }
    }

    /// Whether `record` is of a page taken for gone (missing at `missing_after` checks in a row).
    pub fn confirmed(&self, record: &FetchRecord) -> bool {
        record.missing >= self.missing_after.max(1)
    }

    /// `previous`'s page missing at `missing` checks in a row, not yet gone: its content and its
    /// place in its schedule stay, and the next check comes `missing_recheck_ms` after `now`.
    fn unconfirmed(&self, previous: &FetchRecord, missing: u32, now: Millis) -> FetchRecord {
        let recheck = Millis::try_from(self.missing_recheck_ms).unwrap_or(Millis::MAX);
        FetchRecord {
            missing,
            next_fetch_at: Some(now.saturating_add(recheck)),
            ..previous.clone()
        }
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

/// The change-rate estimator as a URL follows it: its settings and the crawl's water level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimated {
    pub settings: Estimator,
    /// The crawl's water level (`crate::estimate`); None until the sweeper has computed one.
    pub level_ms: Option<u64>,
}

impl Estimated {
    /// When a page fetched at `now` after `previous` (None: its first fetch) is due again, and
    /// its pace: the fetch is a check of the interval since the previous one (a prompted one
    /// only when it found a change, `crate::estimate`), and the next interval explores
    /// (`Estimator::explore`).
    fn after_fetch(
        &self,
        previous: Option<&FetchRecord>,
        changed: bool,
        now: Millis,
    ) -> (Option<Millis>, Option<Pace>) {
        let Some(p) = previous else {
            let history = ChangeHistory::default();
            return self.at(history, self.explore(&history, None), now);
        };
        let mut history = p.pace.and_then(|pace| pace.history).unwrap_or_default();
        let early = prompted(p.fetched_at, p.next_fetch_at, now);
        if early {
            history = history.prompted(changed);
        }
        let interval_ms = u64::try_from(now.saturating_sub(p.fetched_at)).unwrap_or(0);
        let check = (changed || !early).then_some(Check {
            interval_ms,
            changed,
        });
        if let Some(check) = check {
            history = history.observe(check.interval_ms, check.changed);
        }
        // A prompted fetch that found nothing was no check: no exploring on it either.
        let interval = match check {
            Some(check) => self.explore(&history, Some(check)),
            None => self.allocated(&history),
        };
        self.at(history, interval, now)
    }

    /// The interval a page with `history` is given by its estimate (and its sitemap's reading,
    /// when it counts) and the water level.
    fn allocated(&self, history: &ChangeHistory) -> u64 {
        self.settings.allocated_ms(history, self.level_ms)
    }

    fn explore(&self, history: &ChangeHistory, check: Option<Check>) -> u64 {
        self.settings
            .explore(self.allocated(history), check, history)
    }

    /// When a page with `history` is due after `now`, on its estimate alone (no check made).
    fn next(&self, history: ChangeHistory, now: Millis) -> (Option<Millis>, Option<Pace>) {
        self.at(history, self.allocated(&history), now)
    }

    fn at(
        &self,
        history: ChangeHistory,
        interval_ms: u64,
        now: Millis,
    ) -> (Option<Millis>, Option<Pace>) {
        let interval = Millis::try_from(interval_ms).unwrap_or(Millis::MAX);
        (
            Some(now.saturating_add(interval)),
            Some(Pace::estimated(history)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;

    fn adaptive() -> Revisit {
        Revisit {
            schedule: Some(Schedule::RECRAWL),
            estimator: None,
            listing: false,
            missing_after: 2,
            missing_recheck_ms: Schedule::CHECKER.min_ms,
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
    fn a_page_missing_at_one_check_that_comes_back_was_never_gone_and_keeps_its_pace() {
        let r = adaptive();
        let mut page = fetched(&r, None, true, 0);
        for _ in 0..3 {
            let at = page.next_fetch_at.unwrap();
            page = fetched(&r, Some(&page), false, at);
        }
        let Missing::Unconfirmed(once) = r.missing(Some(&page), 1) else {
            panic!("gone at its first 404")
        };
        let back = fetched(&r, Some(&once), false, 2);
        assert_eq!(back.missing, 0);
        assert_eq!(back.pace, fetched(&r, Some(&page), false, 2).pace);
        // A failed check meanwhile is no check: still missing once, checked again later.
        let kept = r.kept(&once, 3);
        assert_eq!(kept.missing, 1);
        assert_eq!(kept.next_fetch_at, Some(3 + r.missing_recheck_ms as Millis));
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
    fn a_page_is_gone_at_its_second_check_in_a_row_and_rechecked_on_the_checker_schedule() {
        let r = Revisit {
            missing_recheck_ms: 30 * MIN as u64,
            ..adaptive()
        };
        let page = fetched(&r, None, true, 0);
        assert_eq!(r.missing(None, 5), Missing::Gone(None), "nothing to keep");
        // The first check that finds it missing: content current, the next check spaced.
        let Missing::Unconfirmed(once) = r.missing(Some(&page), 1_000) else {
            panic!("gone at its first 404")
        };
        assert_eq!((once.md5.clone(), once.missing), (page.md5.clone(), 1));
        assert_eq!(once.next_fetch_at, Some(1_000 + 30 * MIN));
        assert_eq!((once.pace, once.fetched_at), (page.pace, page.fetched_at));
        // The second: gone, the content kept for the delta.
        let Missing::Gone(Some(gone)) = r.missing(Some(&once), 1_000 + 30 * MIN) else {
            panic!("not gone at its second check")
        };
        assert!(r.confirmed(&gone) && !r.confirmed(&once));
        assert_eq!(gone.md5, page.md5, "the content stays for the delta");
        assert_eq!(gone.next_fetch_at, Some(1_000 + 30 * MIN + 1_440 * MIN));
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
        let Missing::Gone(Some(gone)) = Revisit::ONCE.missing(Some(&page), 5) else {
            panic!("a one-generation crawl's page is gone at its first 404")
        };
        assert_eq!(gone.next_fetch_at, None);
    }

    fn estimated(level_ms: Option<u64>) -> Revisit {
        Revisit {
            schedule: None,
            estimator: Some(Estimated {
                settings: Estimator {
                    budget_per_day: 100,
                    ..Estimator::default()
                },
                level_ms,
            }),
            ..adaptive()
        }
    }

    #[test]
    fn an_estimated_page_counts_its_checks_and_a_failed_one_is_no_check() {
        let r = estimated(Some(60 * MIN as u64));
        let first = fetched(&r, None, true, 0);
        let history = |record: &FetchRecord| record.pace.and_then(|p| p.history).unwrap();
        assert_eq!(
            history(&first),
            ChangeHistory::default(),
            "nothing checked yet"
        );
        let at = first.next_fetch_at.unwrap();
        let unchanged = fetched(&r, Some(&first), false, at);
        let due = unchanged.next_fetch_at.unwrap();
        let changed = fetched(&r, Some(&unchanged), true, due);
        let seen = history(&changed);
        assert_eq!((seen.checks, seen.changes), (2, 1));
        assert_eq!(seen.unchanged_ms, at as u64);
        assert_eq!(seen.changed_ms, (due - at) as u64);
        // A change seen brings the next fetch nearer than no change would have.
        let quiet = fetched(&r, Some(&unchanged), false, due);
        assert!(changed.next_fetch_at < quiet.next_fetch_at);
        // A fetch long before its time (a sitemap's lastmod made it due) is counted apart; one
        // that found a change is a check as well, one that found none is not.
        let counts = |h: ChangeHistory| (h.checks, h.changes, h.prompted, h.prompted_changed);
        let early = fetched(&r, Some(&unchanged), true, at + 10 * MIN);
        assert_eq!(counts(history(&early)), (2, 1, 1, 1));
        let lied = fetched(&r, Some(&unchanged), false, at + 10 * MIN);
        assert_eq!(counts(history(&lied)), (1, 0, 1, 0));
        // A recrawl that failed for good checked nothing.
        let kept = r.kept(&changed, due + 20 * MIN);
        assert_eq!(history(&kept), seen);
        // Without a level yet, a page is fetched at the initial interval once a check found it
        // unchanged.
        let unlevelled = fetched(&estimated(None), Some(&first), false, at);
        assert_eq!(unlevelled.next_fetch_at, Some(at + 1_440 * MIN));
    }

    #[test]
    fn an_estimated_page_is_checked_soon_after_its_first_fetch_and_sooner_while_always_changed() {
        // GIVEN a crawl without a water level yet (every page allocated the initial day)
        let r = estimated(None);
        // WHEN a page is first fetched, THEN its first check comes after a quarter of that day
        let first = fetched(&r, None, true, 0);
        assert_eq!(first.next_fetch_at, Some(360 * MIN));
        // AND while every check finds a change, each next check comes after half the interval
        // the last one covered, down to the shortest interval
        let mut page = first;
        let mut intervals = Vec::new();
        for _ in 0..6 {
            let at = page.next_fetch_at.unwrap();
            page = fetched(&r, Some(&page), true, at);
            intervals.push((page.next_fetch_at.unwrap() - at) / MIN);
        }
        assert_eq!(intervals, [180, 90, 45, 22, 15, 15]);
        // AND once a check found no change, the estimate alone decides, changed or not
        let at = page.next_fetch_at.unwrap();
        let quiet = fetched(&r, Some(&page), false, at);
        let at = quiet.next_fetch_at.unwrap();
        assert_eq!(at - quiet.fetched_at, 1_440 * MIN);
        let changed = fetched(&r, Some(&quiet), true, at);
        assert_eq!(changed.next_fetch_at, Some(at + 1_440 * MIN));
    }
}
