//! A worker's memory of links it has already seeded, so that a link found on page after page
//! costs one conditional put per worker, not one per page (most links of a site point at pages
//! it already has). A hint only: forgetting (the set is cleared when full) just costs a put.

use std::collections::HashSet;
use std::sync::Mutex;
use trawl_domain::canonical::TaskId;
use trawl_domain::task::Millis;

/// Links remembered at most (16 bytes each).
const CAPACITY: usize = 200_000;

#[derive(Debug, Default)]
pub(super) struct SeenLinks {
    keys: Mutex<HashSet<u128>>,
}

/// A link's key: its task id within one incarnation of a crawl (a purged and re-created crawl
/// of the same id has another `created_at`, so nothing it lacks is taken as known).
fn key(crawl_created_at: Millis, crawl_id: &str, task_id: &TaskId) -> u128 {
    let task = u128::from_str_radix(task_id.as_str(), 16).unwrap_or(0);
    let crawl = crawl_id.bytes().fold(crawl_created_at as u64, |h, b| {
        h.rotate_left(5) ^ u64::from(b)
    });
    task ^ (u128::from(crawl) << 64)
}

impl SeenLinks {
    /// Remembers `ids`, telling for each whether it was new. A link is taken by the first
    /// seeding that meets it: concurrent fetches of one worker finding the same links do not
    /// both put them.
    pub(super) fn insert_new(
        &self,
        created_at: Millis,
        crawl_id: &str,
        ids: &[TaskId],
    ) -> Vec<bool> {
        match self.keys.lock() {
            Ok(mut keys) => ids
                .iter()
                .map(|id| {
                    if keys.len() >= CAPACITY {
                        keys.clear();
                    }
                    keys.insert(key(created_at, crawl_id, id))
                })
                .collect(),
            Err(_) => vec![true; ids.len()],
        }
    }

    /// Forgets `ids`: their seeding failed or was cut short, and a later fetch must seed them.
    pub(super) fn forget(&self, created_at: Millis, crawl_id: &str, ids: &[TaskId]) {
        if let Ok(mut keys) = self.keys.lock() {
            for id in ids {
                keys.remove(&key(created_at, crawl_id, id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::canonical::CanonicalUrl;

    #[test]
    fn remembers_per_crawl_incarnation_and_forgets_on_demand() {
        let seen = SeenLinks::default();
        let id = CanonicalUrl::parse("http://example.com/a")
            .unwrap()
            .task_id();
        let ids = std::slice::from_ref(&id);
        assert_eq!(seen.insert_new(1, "c", ids), [true]);
        assert_eq!(seen.insert_new(1, "c", ids), [false], "taken once");
        assert_eq!(
            seen.insert_new(2, "c", ids),
            [true],
            "a re-created crawl knows nothing yet"
        );
        assert_eq!(seen.insert_new(1, "d", ids), [true]);
        seen.forget(1, "c", ids);
        assert_eq!(seen.insert_new(1, "c", ids), [true], "forgotten");
    }
}
