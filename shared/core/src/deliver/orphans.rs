//! The orphan clean-up, once per generation: after the delivery's task pass, the page bodies
//! (and items) under the crawl's prefix that no task points at are deleted, and counted in
//! `summary.json` (`orphans_removed`).
//!
//! Orphans arise where the no-orphan rule of `crawler::record` cannot act: a worker killed
//! between its PUT and its finish, a PUT applied while its answer was lost by a writer that died
//! before recording the md5 as stale, a refetch of a volatile page that then wrote other content.
//!
//! The rule: an object `{prefix}crawl={crawl}/pk={task}/attr={html|items}/md5={md5}` is deleted
//! when both hold:
//! 1. its task does not point at it: the task is gone, has no object, or its object has another
//!    key (an items object belongs to the task's body of the same md5, in either layout: on
//!    segments, `reextract` writes one beside the segment's records). An md5 the task lists as stale
//!    is not pointed at either: the stale list waits for the task's next finish, which a
//!    terminal task may never see; deleting the object first is harmless (the finisher's delete
//!    of a missing key is no error);
//! 2. it was last written more than the crawl's lease (`lease_ms`) ago. A worker writes a body
//!    while it holds the task's lease and finishes within it, so a younger object may be about
//!    to be pointed at (its writer's finish on its way); an older one's writer has finished,
//!    been fenced out, or died. Writing the same key again (the same content) makes it young.
//!    A delivery whose caller is the store's only writer, with no crawl running
//!    (`Deliverer::sole_writer`: the CLI on its locked data directory), has no finish on its
//!    way: no object is too young. So a local crawl killed between a PUT
//!    and its finish, then resumed to completion, is left with no orphan.
//!
//! The task is read after its objects are listed, so a pointer set meanwhile is seen. Keys that
//! do not follow the layout are never touched. Cost: one listing call per `PAGE` objects, one
//! task read per task with objects (the task pass reads each task once as well), one delete per
//! orphan; the pass is checkpointed after each page like the rest of the delivery.

use super::{DeliverError, patiently};
use crate::backoff::Backoff;
use crate::blob::{BlobStore, Layout, Listed};
use crate::store::TaskStore;
use futures_util::future::try_join_all;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::task::{Millis, Task};

/// Objects listed at once (S3's largest page).
pub(crate) const PAGE: u32 = 1_000;
/// Tasks read, and objects deleted, at once.
const PARALLEL: usize = 16;

/// The task an object belongs to, when its key follows the layout under `crawl_prefix`.
pub fn task_of(crawl_prefix: &str, key: &str) -> Option<TaskId> {
    let rest = key.strip_prefix(crawl_prefix)?;
    let [pk, attr, md5] = rest.split('/').collect::<Vec<_>>()[..] else {
        return None;
    };
    let task = TaskId::parse(pk.strip_prefix("pk=")?)?;
    (matches!(attr, "attr=html" | "attr=items") && md5.starts_with("md5=")).then_some(task)
}

/// Whether `object` (of a task whose state is `task`) is an orphan to delete at `now`: rules 1
/// and 2 above, an object younger than `min_age_ms` (the crawl's lease) being spared; with no
/// age (None: the store's sole writer), none is.
pub fn is_orphan(
    object: &Listed,
    task: Option<&Task>,
    min_age_ms: Option<u64>,
    now: Millis,
) -> bool {
    let fetch = task.and_then(|t| t.fetch.as_ref());
    let body = fetch.and_then(|f| f.object_key.as_deref());
    let items_of_body = object.key.contains("/attr=items/")
        && fetch
            .and_then(|f| f.md5.as_deref())
            .is_some_and(|md5| Layout::md5_of_key(&object.key) == Some(md5));
    let pointed = body
        .is_some_and(|key| key == object.key || Layout::items_key_of(key) == object.key)
        || items_of_body;
    let old = min_age_ms.is_none_or(|age| {
        object
            .modified
            .saturating_add(i64::try_from(age).unwrap_or(i64::MAX))
            < now
    });
    !pointed && old
}

/// What one page of the pass did.
#[derive(Debug, Default)]
pub(crate) struct Cleaned {
    /// Where the next page starts (None: the pass is done).
    pub next: Option<String>,
    pub removed: u64,
    /// The segments listed on the page (`blob::segment`), with their sizes: never orphans,
    /// their garbage is accounted instead (`Summary::segments`).
    pub segments: Vec<(String, u64)>,
}

/// One page of the clean-up of `crawl_id`'s objects, after `start_after`: an object younger
/// than `min_age_ms` is spared (rule 2; None: none is).
pub(crate) async fn clean_page<S: TaskStore, B: BlobStore>(
    store: &S,
    blobs: &B,
    layout: &Layout,
    crawl_id: &CrawlId,
    min_age_ms: Option<u64>,
    start_after: Option<&str>,
    now: Millis,
) -> Result<Cleaned, DeliverError> {
    let prefix = layout.crawl_prefix(crawl_id);
    let page = patiently("list the crawl's objects", &Backoff::BRIEF, || {
        blobs.list_page(&prefix, start_after, PAGE)
    })
    .await?;
    // Keys sort by task: each task's objects are consecutive.
    let mut by_task: Vec<(TaskId, Vec<&Listed>)> = Vec::new();
    for object in &page.objects {
        let Some(task) = task_of(&prefix, &object.key) else {
            continue;
        };
        match by_task.last_mut() {
            Some((last, objects)) if *last == task => objects.push(object),
            _ => by_task.push((task, vec![object])),
        }
    }
    let mut orphans = Vec::new();
    for chunk in by_task.chunks(PARALLEL) {
        let read = |id| {
            patiently("read a task", &Backoff::BRIEF, move || {
                store.get(crawl_id, id)
            })
        };
        let tasks = try_join_all(chunk.iter().map(|(id, _)| read(id))).await?;
        for ((_, objects), task) in chunk.iter().zip(&tasks) {
            orphans.extend(
                objects
                    .iter()
                    .filter(|o| is_orphan(o, task.as_ref(), min_age_ms, now))
                    .map(|o| o.key.as_str()),
            );
        }
    }
    for chunk in orphans.chunks(PARALLEL) {
        let delete = |key| {
            patiently("delete an orphan", &Backoff::BRIEF, move || {
                blobs.delete(key)
            })
        };
        try_join_all(chunk.iter().map(|key| delete(key))).await?;
    }
    if !orphans.is_empty() {
        tracing::info!(crawl = %crawl_id, removed = orphans.len(), "orphan objects removed");
    }
    let segments = layout.segments_prefix(crawl_id);
    Ok(Cleaned {
        removed: orphans.len() as u64,
        segments: page
            .objects
            .iter()
            .filter(|o| o.key.starts_with(&segments))
            .map(|o| (o.key.clone(), o.bytes))
            .collect(),
        next: page.next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::task::{FetchRecord, Status};

    const LEASE: u64 = 60_000;
    const NOW: Millis = 1_800_000_000_000;

    fn task_with(object_key: Option<&str>) -> Task {
        let url = CanonicalUrl::parse("http://example.com/a").unwrap();
        Task {
            lane: None,
            crawl_id: CrawlId::parse("c").unwrap(),
            task_id: url.task_id(),
            url: url.to_string(),
            status: Status::Succeeded,
            created_at: 0,
            updated_at: 0,
            depth: 0,
            parent: None,
            token: 1,
            lease_expires_at: None,
            retries: 0,
            next_attempt_at: None,
            enqueued_at: None,
            errors: Vec::new(),
            fetch: object_key.map(|key| FetchRecord {
                object_key: Some(key.to_owned()),
                ..FetchRecord::default()
            }),
            stale: vec!["bb".to_owned()],
            data: None,
            priority: Default::default(),
        }
    }

    fn listed(key: &str, age: Millis) -> Listed {
        Listed {
            key: key.to_owned(),
            modified: NOW - age,
            bytes: 1,
        }
    }

    #[test]
    fn only_old_objects_no_task_points_at_are_orphans() {
        let task_id = CanonicalUrl::parse("http://example.com/a")
            .unwrap()
            .task_id();
        let prefix = "p/crawl=c/";
        let key = |attr: &str, md5: &str| format!("{prefix}pk={task_id}/attr={attr}/md5={md5}");
        let (body, items, other) = (key("html", "aa"), key("items", "aa"), key("html", "bb"));
        let pointing = task_with(Some(&body));
        let mut in_segment = task_with(Some(&format!("{prefix}segments/s-1")));
        if let Some(fetch) = in_segment.fetch.as_mut() {
            fetch.md5 = Some("aa".to_owned());
        }
        let old = LEASE as Millis + 1;
        let cases: [(&str, &str, Option<&Task>, Millis, bool); 10] = [
            (
                "items beside a segment's page",
                &items,
                Some(&in_segment),
                old,
                false,
            ),
            (
                "items of another md5 beside a segment's page",
                &key("items", "bb"),
                Some(&in_segment),
                old,
                true,
            ),
            ("the body pointed at", &body, Some(&pointing), old, false),
            ("its items", &items, Some(&pointing), old, false),
            (
                "another md5, listed stale, old",
                &other,
                Some(&pointing),
                old,
                true,
            ),
            ("another md5, young", &other, Some(&pointing), 1_000, false),
            (
                "another md5, exactly a lease old",
                &other,
                Some(&pointing),
                LEASE as Millis,
                false,
            ),
            (
                "items of another md5",
                &key("items", "bb"),
                Some(&pointing),
                old,
                true,
            ),
            (
                "a task without object",
                &body,
                Some(&task_with(None)),
                old,
                true,
            ),
            ("no task", &body, None, old, true),
        ];
        for (case, key, task, age, orphan) in cases {
            assert_eq!(task_of(prefix, key), Some(task_id.clone()), "{case}");
            assert_eq!(
                is_orphan(&listed(key, age), task, Some(LEASE), NOW),
                orphan,
                "{case}"
            );
        }
    }

    #[test]
    fn keys_off_the_layout_belong_to_no_task() {
        let task_id = "0123456789abcdef0123456789abcdef";
        let prefix = "crawl=c/";
        for key in [
            format!("crawl=c/pk={task_id}/attr=html"),
            format!("crawl=c/pk={task_id}/attr=warc/md5=aa"),
            format!("crawl=c/pk={task_id}/attr=html/md5=aa/x"),
            "crawl=c/pk=nothex/attr=html/md5=aa".to_owned(),
            format!("crawl=cd/pk={task_id}/attr=html/md5=aa"),
            "crawl=c/notes.txt".to_owned(),
        ] {
            assert_eq!(task_of(prefix, &key), None, "{key}");
        }
        assert!(task_of(prefix, &format!("crawl=c/pk={task_id}/attr=html/md5=aa")).is_some());
    }
}
