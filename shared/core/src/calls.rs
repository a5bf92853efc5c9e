//! Per-crawl call accounting, true on Lambda.
//!
//! Every adapter of a process counts its backend calls in one shared `CallCounts`. Each
//! invocation ends by adding what its process counted since the previous report to the crawl it
//! worked for, in one atomic write (`CrawlStore::add_calls`, where its cost is stated): a crawler
//! batch, a seed, the sweep of one crawl, a delivery. A crawl's totals therefore cover every
//! function and every container, and `summary.json` reads them from the crawl record.
//!
//! Calls made for no crawl in particular (listing the crawls, a malformed message) go with the
//! process's next report. A report that fails is given back to the counters and goes with the
//! next one, unless the crawl no longer exists (purged): its share is dropped. Accounting never
//! fails the work it accounts for: errors are logged, not returned.

use crate::store::{CrawlStore, StoreError};
use trawl_domain::calls::{CallCounts, CallTally, split};
use trawl_domain::canonical::CrawlId;

/// Adds the calls counted since the previous report to `crawl_id`. Returns whether anything
/// was added (not when there was nothing to report, or the write failed).
pub async fn report<S: CrawlStore>(store: &S, counts: &CallCounts, crawl_id: &CrawlId) -> bool {
    let share = counts.take_unreported();
    if share.is_empty() {
        return false;
    }
    add(store, counts, crawl_id, share).await
}

/// Like `report`, for work done for several crawls at once (a crawler batch): the calls are
/// split between the crawls in proportion to their weights (messages), one write per crawl.
pub async fn report_shared<S: CrawlStore>(
    store: &S,
    counts: &CallCounts,
    crawls: &[(CrawlId, u64)],
) {
    if crawls.is_empty() {
        return;
    }
    let share = counts.take_unreported();
    if share.is_empty() {
        return;
    }
    let weights: Vec<u64> = crawls.iter().map(|(_, weight)| *weight).collect();
    for ((crawl_id, _), part) in crawls.iter().zip(split(&share, &weights)) {
        if !part.is_empty() {
            add(store, counts, crawl_id, part).await;
        }
    }
}

async fn add<S: CrawlStore>(
    store: &S,
    counts: &CallCounts,
    crawl_id: &CrawlId,
    share: CallTally,
) -> bool {
    match store.add_calls(crawl_id, &share).await {
        Ok(()) => true,
        Err(StoreError::NoSuchCrawl(_)) => {
            tracing::debug!(crawl = %crawl_id, "crawl gone: its calls are not accounted");
            false
        }
        Err(e) => {
            tracing::warn!(crawl = %crawl_id, error = %e, "call counts not added; the next report will");
            counts.restore_unreported(&share);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use trawl_domain::calls::Call;
    use trawl_domain::crawl::{Crawl, CrawlConfig};

    async fn crawl(store: &MemoryStore, id: &str) -> CrawlId {
        let id = CrawlId::parse(id).unwrap();
        let crawl = Crawl::new(id.clone(), CrawlConfig::default(), 0);
        store.create_crawl(&crawl).await.unwrap();
        id
    }

    #[tokio::test]
    async fn reports_add_up_on_the_crawl() {
        let store = MemoryStore::new();
        let counts = CallCounts::default();
        let id = crawl(&store, "a").await;
        assert!(!report(&store, &counts, &id).await);
        counts.add(Call::S3PutObject, 2);
        counts.record(Call::DynamoGetItem);
        assert!(report(&store, &counts, &id).await);
        let totals = || async { store.get_crawl(&id).await.unwrap().unwrap().calls };
        assert_eq!(
            totals().await,
            CallTally::from([(Call::DynamoGetItem, 1), (Call::S3PutObject, 2)])
        );
        counts.record(Call::DynamoGetItem);
        assert!(report(&store, &counts, &id).await);
        assert_eq!(totals().await[&Call::DynamoGetItem], 2);
    }

    #[tokio::test]
    async fn a_batch_of_two_crawls_splits_its_calls() {
        let store = MemoryStore::new();
        let counts = CallCounts::default();
        let (a, b) = (crawl(&store, "a").await, crawl(&store, "b").await);
        counts.add(Call::DynamoUpdateItem, 10);
        report_shared(&store, &counts, &[(a.clone(), 3), (b.clone(), 7)]).await;
        let calls = |c: Crawl| c.calls[&Call::DynamoUpdateItem];
        assert_eq!(calls(store.get_crawl(&a).await.unwrap().unwrap()), 3);
        assert_eq!(calls(store.get_crawl(&b).await.unwrap().unwrap()), 7);
    }

    #[tokio::test]
    async fn a_purged_crawl_drops_its_share() {
        let store = MemoryStore::new();
        let counts = CallCounts::default();
        let gone = CrawlId::parse("gone").unwrap();
        counts.record(Call::S3GetObject);
        assert!(!report(&store, &counts, &gone).await);
        assert!(counts.take_unreported().is_empty());
    }
}
