//! The write meter: [`Metered`] wraps any store (the in-memory one for the frontier simulation
//! of section 7; the DynamoDB adapter on moto for section 2) in a layer ([`Metering`],
//! `trawl_core::store::layer`) that, around each write, reads the item before and after through
//! a probe (a store on the same data whose reads are not counted), lays both out as the
//! DynamoDB adapter does (`trawl_aws::dynamodb::capacity`) and adds the write's units to a
//! [`WriteMeter`]: per operation, and per table and index key (where the write lands, for
//! partition accounting). Refused conditional writes are charged as DynamoDB charges them.
//! Deletions of whole crawls are not metered (per crawl, not per page). Bench and test code
//! only: no function or CLI meters its writes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use trawl_aws::dynamodb::capacity::{
    crawl_image, host_counts_image, host_image, report_image, task_image, write_units,
};
use trawl_aws::dynamodb::schema::TABLE;
use trawl_core::store::layer::{Call, Layer, Layered, Outcome};
use trawl_core::store::{Applied, HostCounts, HostStore, Seeded, StoreResult, TaskRecords};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::capacity::{Attr, Image, WriteUnits};
use trawl_domain::crawl::Crawl;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::host::Host;
use trawl_domain::task::Task;
use trawl_domain::transition::{Event, Insert, Update};

/// Writes of one kind and the units they consumed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteTally {
    pub writes: u64,
    pub table: u64,
    /// Units per index name.
    pub indexes: BTreeMap<&'static str, u64>,
}

impl WriteTally {
    /// Units on the table and every index together.
    pub fn total(&self) -> u64 {
        self.table + self.indexes.values().sum::<u64>()
    }

    fn add(&mut self, units: &WriteUnits) {
        self.writes += 1;
        self.table += units.table;
        for &(name, n) in &units.indexes {
            *self.indexes.entry(name).or_default() += n;
        }
    }

    pub fn merge(&mut self, other: &WriteTally) {
        self.writes += other.writes;
        self.table += other.table;
        for (name, n) in &other.indexes {
            *self.indexes.entry(name).or_default() += n;
        }
    }
}

/// Where units landed: the table (`TABLE_KEYS`) or an index, and the partition key value.
pub type KeyUnits = BTreeMap<(&'static str, String), u64>;

/// The table's name in [`KeyUnits`].
pub const TABLE_KEYS: &str = "table";

/// Units metered so far, per operation and per key.
#[derive(Debug, Default)]
pub struct WriteMeter {
    by_operation: BTreeMap<&'static str, WriteTally>,
    by_key: KeyUnits,
    /// Host-record writes refused by their version check, per host name: a turn claim
    /// or hand-back that lost to another write of the record and must read and decide again.
    refused_host_writes: BTreeMap<String, u64>,
}

impl WriteMeter {
    fn record(&mut self, operation: &'static str, before: Option<&Image>, after: Option<&Image>) {
        let refused = before == after;
        let units = if refused {
            TABLE.refused_write_units(before)
        } else {
            write_units(before, after)
        };
        self.by_operation.entry(operation).or_default().add(&units);
        if let Some(Attr::S(pk)) = after.or(before).and_then(|i| i.get(TABLE.hash)) {
            *self.by_key.entry((TABLE_KEYS, pk.clone())).or_default() += units.table;
        }
        // An index write lands on the old key's partition (the delete) and the new one's (the
        // put); a delete and a put are sized alike here (entries of one item).
        let keys = |image: Option<&Image>| image.map(|i| TABLE.index_keys(i)).unwrap_or_default();
        let (old, new) = (keys(before), keys(after));
        for &(index, n) in &units.indexes {
            let old = old.iter().find(|(i, _)| *i == index).map(|(_, k)| k);
            let new = new.iter().find(|(i, _)| *i == index).map(|(_, k)| k);
            let mut add = |key: &String, units: u64| {
                if units > 0 {
                    *self.by_key.entry((index, key.clone())).or_default() += units;
                }
            };
            match (old, new) {
                (Some(old), Some(new)) if old != new => {
                    add(old, n / 2);
                    add(new, n - n / 2);
                }
                (_, Some(key)) | (Some(key), None) => add(key, n),
                (None, None) => {}
            }
        }
    }

    /// Units per operation.
    pub fn by_operation(&self) -> &BTreeMap<&'static str, WriteTally> {
        &self.by_operation
    }

    /// Host-record writes refused by their version check, per host name.
    pub fn refused_host_writes(&self) -> &BTreeMap<String, u64> {
        &self.refused_host_writes
    }

    /// Units per key since the last call (the simulator drains this every virtual second).
    pub fn take_keys(&mut self) -> KeyUnits {
        std::mem::take(&mut self.by_key)
    }

    /// Forgets everything metered.
    pub fn reset(&mut self) {
        self.by_operation.clear();
        self.by_key.clear();
        self.refused_host_writes.clear();
    }
}

/// A store whose writes are metered (see the module docs): [`metered`] makes one.
pub type Metered<S> = Layered<S, Metering<S>>;

/// `inner` with its writes metered: `probe` (the same data, uncounted) reads the images; tasks
/// are laid out with `shards` status shards. The meter is `store.layer.meter()`.
pub fn metered<S>(inner: S, probe: S, shards: u32) -> Metered<S> {
    Layered::new(
        inner,
        Metering {
            probe,
            shards,
            meter: Arc::default(),
        },
    )
}

/// The write meter, as a layer around a store's calls.
#[derive(Debug, Clone)]
pub struct Metering<S> {
    probe: S,
    shards: u32,
    meter: Arc<Mutex<WriteMeter>>,
}

impl<S> Metering<S> {
    /// The meter (shared by clones).
    pub fn meter(&self) -> Arc<Mutex<WriteMeter>> {
        Arc::clone(&self.meter)
    }

    fn record(&self, operation: &'static str, before: Option<&Image>, after: Option<&Image>) {
        self.meter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(operation, before, after);
    }

    /// `times` writes of the same images: a request, say, is a one-item TransactWriteItems,
    /// twice the units of the write.
    fn record_times(
        &self,
        times: u32,
        operation: &'static str,
        before: Option<&Image>,
        after: Option<&Image>,
    ) {
        for _ in 0..times {
            self.record(operation, before, after);
        }
    }

    /// A crawl write, from what it answers: the crawl before it, and the changes made.
    fn crawl_write(&self, update: &CrawlUpdate, applied: &Applied<Crawl>) -> StoreResult<()> {
        let (before, after) = match applied {
            Applied::Done { before } => {
                let after = update.changes.apply(before);
                (Some(crawl_image(before)?), Some(crawl_image(&after)?))
            }
            // DynamoDB does not say which try applied a request: sized from the crawl as it
            // stands (an add changes its size by a few bytes at most).
            Applied::Landed { current } => {
                let after = update.changes.apply(current);
                (Some(crawl_image(current)?), Some(crawl_image(&after)?))
            }
            Applied::Refused { current } => {
                let image = current.as_ref().map(crawl_image).transpose()?;
                (image.clone(), image)
            }
        };
        let writes = if update.request.is_some() { 2 } else { 1 };
        self.record_times(writes, update.event.name(), before.as_ref(), after.as_ref());
        Ok(())
    }

    /// A task write, from what it returned: the task before, and after it the domain's changes
    /// made to it. A claim in a turn is not metered: on DynamoDB it is a read
    /// (`InTurnClaims::AsRead`). An inner store that writes one (the in-memory store of the
    /// simulator) is priced as DynamoDB would be: its in-progress task is not listed and keeps
    /// its host-index place, so the finish after it costs what it costs from the task as read.
    fn task_write(&self, update: &Update, applied: &Applied<Task>) -> StoreResult<()> {
        if update.event == Event::ClaimInTurn {
            return Ok(());
        }
        let (before, after) = match applied {
            Applied::Done { before } => {
                let image = task_image(before, None, self.shards)?;
                let after = task_image(&update.changes.apply(before), Some(&image), self.shards)?;
                (Some(image), Some(after))
            }
            Applied::Refused { current } => {
                let image = current
                    .as_ref()
                    .map(|task| task_image(task, None, self.shards))
                    .transpose()?;
                (image.clone(), image)
            }
            // A repeat of a write that landed: nothing written again.
            Applied::Landed { current } => {
                let image = task_image(current, None, self.shards)?;
                (Some(image.clone()), Some(image))
            }
        };
        self.record(update.event.name(), before.as_ref(), after.as_ref());
        Ok(())
    }
}

impl<S: TaskRecords + HostStore> Metering<S> {
    /// The stored task's image, read through the probe.
    async fn task(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Image>> {
        self.probe
            .get(crawl_id, task_id)
            .await?
            .map(|t| task_image(&t, None, self.shards))
            .transpose()
    }

    async fn host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Image>> {
        self.probe
            .get_host(crawl_id, name)
            .await?
            .map(|h| host_image(crawl_id, &h))
            .transpose()
    }

    /// Each task's first time in the batch is one conditional put (as the adapter sends them):
    /// created, or refused by the task already there. Read from the outcome, not from images,
    /// which concurrent seeders of the same URL could interleave.
    async fn seed(&self, tasks: &[Insert], out: &[Seeded]) -> StoreResult<()> {
        let mut seen = std::collections::BTreeSet::new();
        for (insert, outcome) in tasks.iter().zip(out) {
            let (crawl_id, id) = (&insert.task.crawl_id, &insert.task.task_id);
            if !seen.insert(id) {
                continue;
            }
            let stored = self.task(crawl_id, id).await?;
            match outcome {
                Seeded::Created => self.record("seed", None, stored.as_ref()),
                Seeded::AlreadyKnown => self.record("seed", stored.as_ref(), stored.as_ref()),
            }
        }
        Ok(())
    }

    /// A host-record write over the version read: refused, it is priced as a refused
    /// conditional write and counted against its host. With a change of the host counts it is
    /// one TransactWriteItems: the host record and its shard's counts (an item of a few bytes:
    /// 1 unit, in no index), each at twice a write's units.
    async fn host_write(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
        before: Option<Image>,
        written: bool,
    ) -> StoreResult<()> {
        let after = match written {
            true => self.host(crawl_id, &host.name).await?,
            false => before.clone(),
        };
        if counted.is_zero() {
            self.record("put_host", before.as_ref(), after.as_ref());
        } else {
            let counts = host_counts_image(crawl_id, &host.name);
            for _ in 0..2 {
                self.record("put_host_counted", before.as_ref(), after.as_ref());
                self.record("put_host_counted", None, Some(&counts));
            }
        }
        if !written {
            let mut meter = self.meter.lock().unwrap_or_else(PoisonError::into_inner);
            *meter
                .refused_host_writes
                .entry(host.name.clone())
                .or_default() += 1;
        }
        Ok(())
    }
}

/// Writes are metered from what they answer and, for host records and seeds, from the records
/// read through the probe. Reads, and deletions of whole crawls, are not metered; nor is
/// `set_host_scan` (per sweep, not per URL).
impl<S: TaskRecords + HostStore> Layer for Metering<S> {
    /// The host record a host write is over (read through the probe before it).
    type Before = Option<Image>;

    async fn before(&self, call: &Call<'_>) -> StoreResult<Option<Image>> {
        match call {
            Call::PutHost { crawl_id, host, .. } => self.host(crawl_id, &host.name).await,
            Call::AddSeeded { crawl_id, name, .. } => self.host(crawl_id, name).await,
            _ => Ok(None),
        }
    }

    async fn after(
        &self,
        call: &Call<'_>,
        before: Option<Image>,
        outcome: Outcome<'_>,
    ) -> StoreResult<()> {
        match (call, outcome) {
            (Call::InsertCrawl { .. }, Outcome::CrawlInserted(stored, created)) => {
                let image = crawl_image(stored)?;
                let before = (!created).then(|| image.clone());
                self.record(call.name(), before.as_ref(), Some(&image));
            }
            (Call::ApplyCrawl { update, .. }, Outcome::Crawl(applied)) => {
                self.crawl_write(update, applied)?;
            }
            (Call::Insert { tasks }, Outcome::Seeded(out)) => self.seed(tasks, out).await?,
            (Call::Apply { update, .. }, Outcome::Task(applied)) => {
                self.task_write(update, applied)?;
            }
            (
                Call::PutHost {
                    crawl_id,
                    host,
                    counted,
                },
                Outcome::Written(written),
            ) => {
                self.host_write(crawl_id, host, *counted, before, written)
                    .await?;
            }
            // One UpdateItem on DynamoDB (`ADD offered`, the request's id kept beside it).
            (Call::AddSeeded { crawl_id, name, .. }, _) => {
                let after = self.host(crawl_id, name).await?;
                self.record(call.name(), before.as_ref(), after.as_ref());
            }
            // One UpdateItem of a report lane (`report_image`), whatever the inner store does.
            (Call::ReportCalls { id, update }, _) => {
                let image = report_image(id, update);
                self.record(call.name(), Some(&image), Some(&image));
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_core::store::CrawlStore;
    use trawl_core::store::memory::MemoryStore;
    use trawl_core::store::{ClaimOutcome, TaskStore};
    use trawl_domain::canonical::CanonicalUrl;
    use trawl_domain::crawl::CrawlConfig;
    use trawl_domain::task::{FetchRecord, Millis, NewTask};

    fn record(md5: &str, now: Millis) -> FetchRecord {
        FetchRecord {
            md5: Some(md5.to_owned()),
            http_status: 200,
            fetched_at: now,
            ..FetchRecord::default()
        }
    }

    #[tokio::test]
    async fn a_fresh_task_costs_its_seed_and_its_finish_and_its_claim_in_a_turn_nothing() {
        let store = MemoryStore::new();
        let metered = metered(store.clone(), store, 4);
        let crawl = Crawl::new(CrawlId::parse("c1").unwrap(), CrawlConfig::default(), 1);
        metered.create_crawl(&crawl).await.unwrap();
        let url = CanonicalUrl::parse("http://a.test/x").unwrap();
        let task = NewTask {
            lane: None,
            priority: Default::default(),
            url: url.clone(),
            depth: 0,
            parent: None,
            data: None,
        };
        metered
            .seed(&crawl.id, std::slice::from_ref(&task), 10)
            .await
            .unwrap();
        // The same URL again: a refused conditional put, charged on the table only.
        metered.seed(&crawl.id, &[task], 11).await.unwrap();
        let ClaimOutcome::Claimed { lease, .. } = metered
            .claim_in_turn(&crawl.id, &url.task_id(), 60_000, 20)
            .await
            .unwrap()
        else {
            panic!("not claimed");
        };
        metered.finish(&lease, &record("ab", 30), 30).await.unwrap();
        let meter = metered.layer.meter();
        let meter = meter.lock().unwrap();
        let ops = meter.by_operation();
        let units = |op: &str, index: &str| ops[op].indexes.get(index).copied().unwrap_or(0);
        let seed = &ops["seed"];
        // Insert (1) + refused (1) on the table; the task enters its host's roster (1), and
        // neither the host index (a task placed by time alone is not in it) nor the status
        // index (not listed while pending).
        assert_eq!((seed.writes, seed.table), (2, 2));
        assert_eq!(
            (
                units("seed", "status-index"),
                units("seed", "host-index"),
                units("seed", "roster-index")
            ),
            (0, 0, 1)
        );
        // A claim in a turn is a read on DynamoDB: no write.
        assert!(!ops.contains_key("claim"), "{ops:?}");
        // The finish writes the task alone: not listed as succeeded, and its roster entry
        // never changes (host passes).
        assert_eq!(ops["finish"].table, 1);
        assert_eq!(
            (
                units("finish", "status-index"),
                units("finish", "host-index"),
                units("finish", "roster-index")
            ),
            (0, 0, 0)
        );
    }
}
