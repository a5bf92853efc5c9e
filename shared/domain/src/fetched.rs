//! The fetch record of an answer: what a task keeps of a redirect, a 304 and a 200, and when
//! the page is fetched again. The crawler stores these records; it decides none of their fields.
//!
//! - A **redirect** is recorded with its target as the final URL (the target is a task of its
//!   own); it counts as a change when the target differs from the previous fetch's.
//! - A **304** keeps the previous record (its body, md5 and key), refreshes the validators the
//!   answer brought, and clears a run of 404s: an unchanged page.
//! - A **200** records the answer; whether the page changed is a new md5, or, for a listing page,
//!   new links on it (its ads change on every fetch, its links do not).
//! - Every record carries when its history began (`first_at`): the previous record's, or, with
//!   none (a first fetch, or the first after a reset), this fetch's time.

use crate::revisit::Revisit;
use crate::task::{FetchRecord, Millis};

/// The record of a redirect to `location` answered with `status` at `now`.
pub fn redirected(
    previous: Option<&FetchRecord>,
    status: u16,
    location: &str,
    revisit: &Revisit,
    now: Millis,
) -> FetchRecord {
    let changed = previous.and_then(|p| p.final_url.as_deref()) != Some(location);
    let (next_fetch_at, pace) = revisit.after_fetch(previous, changed, now);
    FetchRecord {
        http_status: status,
        final_url: Some(location.to_owned()),
        redirects: 1,
        fetched_at: now,
        next_fetch_at,
        pace,
        first_at: first_at(previous, now),
        ..FetchRecord::default()
    }
}

/// When the history of a record made at `now` after `previous` began.
fn first_at(previous: Option<&FetchRecord>, now: Millis) -> Option<Millis> {
    match previous {
        Some(p) => p.first_at,
        None => Some(now),
    }
}

/// The record of a 304 at `now`, with the validators it sent (None: the previous ones stand).
pub fn not_modified(
    previous: Option<&FetchRecord>,
    etag: Option<String>,
    last_modified: Option<String>,
    revisit: &Revisit,
    now: Millis,
) -> FetchRecord {
    let (next_fetch_at, pace) = revisit.after_fetch(previous, false, now);
    let first_at = first_at(previous, now);
    let previous = previous.cloned().unwrap_or_default();
    FetchRecord {
        etag: etag.or(previous.etag.clone()),
        last_modified: last_modified.or(previous.last_modified.clone()),
        fetched_at: now,
        next_fetch_at,
        pace,
        missing: 0,
        first_at,
        ..previous
    }
}

/// What a 200 answered: the fields its record keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Hex md5 of the body (None when the content type is not kept).
    pub md5: Option<String>,
    pub content_type: Option<String>,
    pub content_length: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// The URL after redirects, when it differs from the task's.
    pub final_url: Option<String>,
    pub redirects: u8,
}

/// A 200's record at `now`, not yet scheduled (`scheduled`): whether it changed the page may
/// wait for its links.
pub fn answered(answer: Answer, now: Millis) -> FetchRecord {
    FetchRecord {
        object_key: None,
        md5: answer.md5,
        http_status: answer.status,
        content_type: answer.content_type,
        content_length: answer.content_length,
        etag: answer.etag,
        last_modified: answer.last_modified,
        final_url: answer.final_url,
        redirects: answer.redirects,
        fetched_at: now,
        ..FetchRecord::default()
    }
}

/// Whether `record` carries the body the previous fetch stored (same md5): its links were
/// seeded and its items extracted then.
pub fn same_body(record: &FetchRecord, previous: Option<&FetchRecord>) -> bool {
    record.md5.is_some() && record.md5.as_deref() == previous.and_then(|f| f.md5.as_deref())
}

/// Whether a 200 changed the page: for a listing page, new links on it; else a new body.
pub fn changed(revisit: &Revisit, same_body: bool, new_links: u64) -> bool {
    if revisit.listing {
        new_links > 0
    } else {
        !same_body
    }
}

/// `record` with the page's next fetch, after `previous`, `changed` or not, at `now`.
pub fn scheduled(
    mut record: FetchRecord,
    previous: Option<&FetchRecord>,
    changed: bool,
    revisit: &Revisit,
    now: Millis,
) -> FetchRecord {
    (record.next_fetch_at, record.pace) = revisit.after_fetch(previous, changed, now);
    record.first_at = first_at(previous, now);
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Schedule;

    const T0: Millis = 1_800_000_000_000;

    fn daily() -> Revisit {
        Revisit {
            schedule: Some(Schedule::RECRAWL),
            ..Revisit::ONCE
        }
    }

    fn stored() -> FetchRecord {
        FetchRecord {
            object_key: Some("k/abc".into()),
            md5: Some("abc".into()),
            http_status: 200,
            etag: Some("\"v1\"".into()),
            last_modified: Some("Mon, 01 Jan 2024 00:00:00 GMT".into()),
            fetched_at: T0,
            missing: 1,
            ..FetchRecord::default()
        }
    }

    #[test]
    fn a_redirect_records_its_target_and_changes_the_page_when_the_target_moved() {
        let first = redirected(None, 301, "http://b/", &Revisit::ONCE, T0);
        assert_eq!(
            (
                first.http_status,
                first.final_url.as_deref(),
                first.redirects
            ),
            (301, Some("http://b/"), 1)
        );
        assert_eq!((first.fetched_at, first.next_fetch_at), (T0, None));
        let again = redirected(Some(&first), 301, "http://b/", &daily(), T0 + 10);
        let moved = redirected(Some(&first), 301, "http://c/", &daily(), T0 + 10);
        assert_eq!(
            again.next_fetch_at,
            daily().after_fetch(Some(&first), false, T0 + 10).0
        );
        assert_eq!(
            moved.next_fetch_at,
            daily().after_fetch(Some(&first), true, T0 + 10).0
        );
    }

    #[test]
    fn a_304_keeps_the_stored_body_refreshes_its_validators_and_clears_missing() {
        let previous = stored();
        let record = not_modified(
            Some(&previous),
            Some("\"v2\"".into()),
            None,
            &Revisit::ONCE,
            T0 + 5,
        );
        assert_eq!(record.object_key, previous.object_key);
        assert_eq!(record.md5, previous.md5);
        assert_eq!(record.etag.as_deref(), Some("\"v2\""));
        assert_eq!(record.last_modified, previous.last_modified);
        assert_eq!((record.fetched_at, record.missing), (T0 + 5, 0));
    }

    #[test]
    fn a_record_keeps_when_its_history_began_and_one_without_a_previous_begins_it() {
        let first = scheduled(answered(Answer::default(), T0), None, true, &daily(), T0);
        assert_eq!(first.first_at, Some(T0));
        let later = T0 + 10;
        let again = scheduled(
            answered(Answer::default(), later),
            Some(&first),
            true,
            &daily(),
            later,
        );
        let unchanged = not_modified(Some(&first), None, None, &daily(), later);
        let moved = redirected(Some(&first), 301, "http://b/", &daily(), later);
        for record in [again, unchanged, moved] {
            assert_eq!(record.first_at, Some(T0), "{record:?}");
        }
        // A record from before trawl kept the time stays without one; a reset (no previous)
        // begins a new history.
        let old = stored();
        assert_eq!(
            not_modified(Some(&old), None, None, &daily(), later).first_at,
            None
        );
        assert_eq!(
            redirected(None, 301, "http://b/", &daily(), later).first_at,
            Some(later)
        );
    }

    #[test]
    fn a_200_changes_the_page_by_its_body_or_for_a_listing_by_its_new_links() {
        let answer = Answer {
            status: 200,
            md5: Some("abc".into()),
            content_length: 3,
            ..Answer::default()
        };
        let record = answered(answer, T0 + 1);
        assert_eq!((record.object_key, record.fetched_at), (None, T0 + 1));
        let record = answered(
            Answer {
                md5: Some("abc".into()),
                ..Answer::default()
            },
            T0,
        );
        assert!(same_body(&record, Some(&stored())));
        assert!(!same_body(&record, None));
        assert!(!same_body(
            &FetchRecord::default(),
            Some(&FetchRecord::default())
        ));
        let listing = Revisit {
            listing: true,
            ..daily()
        };
        assert!(!changed(&daily(), true, 7) && changed(&daily(), false, 0));
        assert!(changed(&listing, true, 1) && !changed(&listing, false, 0));
        let due = scheduled(record, None, true, &daily(), T0);
        assert_eq!(due.next_fetch_at, daily().after_fetch(None, true, T0).0);
    }
}
