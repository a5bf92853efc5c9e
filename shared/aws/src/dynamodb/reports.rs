//! Call reports on DynamoDB: each crawl's report lanes (`trawl_domain::report`).
//!
//! A lane is the item `{crawl}#calls#{lane}`, one of `REPORT_LANES`, put when the crawl is
//! created and deleted with it. It holds call counts (`calls:{kind}`, as the crawl item does),
//! task-count notes (`tasks_{status}`, `task_counts`) and one entry per reporter slot
//! (`r:{process}:{slot}`, `Entry::encode`). A report is one UpdateItem of its process's lane
//! (1 write unit; no read): it adds the counts, sets its slot's entry and removes entries it
//! saw stale, on condition that the lane exists and the entry stored does not hold its request.
//! Refused with the lane there, the request was applied before (its answer was lost).
//!
//! A crawl's calls and task counts are its item's plus its lanes' (`read_crawl`, `counts`: one
//! BatchGetItem of 33 keys); a delivery's counts set on the item are set less the lanes' notes.
//! A crawl created before the lanes has none: the first report refused without a lane sends
//! that report, and every later one of the process, to the crawl item as before (a
//! TransactWriteItems with the request as its token, then a read).

use super::errors::{conditional_item, is_conditional_failure, map_err};
use super::expression::Expression;
use super::items::{self, CrawlItem};
use super::task_counts;
use super::{DynamoStore, Item, s};
use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use trawl_core::store::StoreResult;
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::CrawlId;
use trawl_domain::capacity::{Attr, Image};
use trawl_domain::crawl::Crawl;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::report::{ENTRY_REQUESTS, Entry, Outcome, REPORT_LANES, Slots, lane};
use trawl_domain::request::RequestId;
use trawl_domain::task::{Millis, Status};

/// Stale entries one report removes, at most.
const PRUNE_PER_REPORT: usize = 8;

/// The key of one of a crawl's report lanes.
fn lane_pk(crawl_id: &CrawlId, lane: u32) -> String {
    format!("{crawl_id}#calls#{lane}")
}

/// The keys of all of a crawl's report lanes.
pub(super) fn lane_keys(crawl_id: &CrawlId) -> Vec<String> {
    (0..REPORT_LANES).map(|l| lane_pk(crawl_id, l)).collect()
}

const ENTRY_PREFIX: &str = "r:";

fn entry_attribute(process: u32, slot: u32) -> String {
    format!("{ENTRY_PREFIX}{process:08x}:{slot}")
}

/// A lane as the capacity model sizes it (`capacity::report_image`): after reports of
/// `calls` by four processes of one slot each, with full entries, and every task count noted.
pub(super) fn lane_image(crawl_id: &CrawlId, request: u64, calls: &CallTally) -> Image {
    let reporter = u32::try_from(request & 0xffff_ffff).unwrap_or(0);
    let mut image = Image::from([("pk".to_owned(), Attr::S(lane_pk(crawl_id, lane(reporter))))]);
    for (&call, &n) in calls {
        image.insert(items::calls_attribute(call), Attr::N(n.to_string()));
    }
    for status in Status::ALL {
        image.insert(task_counts::attribute(status), Attr::N("-1000".to_owned()));
    }
    let mut slots = Slots::default();
    let mut entry = None;
    for i in 0..ENTRY_REQUESTS as u64 {
        let request = RequestId(u64::MAX - i);
        entry = Some(slots.begin(request, Millis::MAX / 2).1);
        slots.end(request, Outcome::Applied);
    }
    let entry = entry.map(|e| e.encode()).unwrap_or_default();
    for process in 0..4u32 {
        image.insert(
            entry_attribute(reporter.wrapping_add(process * REPORT_LANES), 0),
            Attr::S(entry.clone()),
        );
    }
    image
}

/// This process's reporting state: its reporter id, its slots per crawl, the crawls found
/// without lanes, and the stale entries seen on its lane per crawl.
#[derive(Debug)]
pub(super) struct Reporting {
    process: u32,
    slots: Mutex<HashMap<CrawlId, Slots>>,
    laneless: Mutex<HashSet<CrawlId>>,
    stale: Mutex<HashMap<CrawlId, BTreeSet<String>>>,
}

impl Reporting {
    pub(super) fn new(process: u32) -> Self {
        Self {
            process,
            slots: Mutex::default(),
            laneless: Mutex::default(),
            stale: Mutex::default(),
        }
    }

    fn lane_of(&self, crawl_id: &CrawlId) -> String {
        lane_pk(crawl_id, lane(self.process))
    }

    fn begin(&self, crawl_id: &CrawlId, request: RequestId, now: Millis) -> (u32, Entry) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .entry(crawl_id.clone())
            .or_default()
            .begin(request, now)
    }

    fn end(&self, crawl_id: &CrawlId, request: RequestId, outcome: Outcome) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slots) = slots.get_mut(crawl_id) {
            slots.end(request, outcome);
        }
    }

    fn laneless(&self, crawl_id: &CrawlId) -> bool {
        let laneless = self.laneless.lock().unwrap_or_else(PoisonError::into_inner);
        laneless.contains(crawl_id)
    }

    fn stale_to_remove(&self, crawl_id: &CrawlId) -> Vec<String> {
        let stale = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
        stale
            .get(crawl_id)
            .map(|names| names.iter().take(PRUNE_PER_REPORT).cloned().collect())
            .unwrap_or_default()
    }

    /// Notes the entries of other processes `lane` shows stale at `now`, for this process's
    /// next report to it to remove (and forgets those `removed`).
    fn saw(&self, crawl_id: &CrawlId, lane: &Item, removed: &[String], now: Millis) {
        let mine = format!("{ENTRY_PREFIX}{:08x}:", self.process);
        let mut stale = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
        let names = stale.entry(crawl_id.clone()).or_default();
        for name in removed {
            names.remove(name);
        }
        for (name, value) in lane {
            let old = name.starts_with(ENTRY_PREFIX)
                && !name.starts_with(&mine)
                && value
                    .as_s()
                    .ok()
                    .and_then(|text| Entry::decode(text))
                    .is_some_and(|entry| entry.stale(now));
            if old {
                names.insert(name.clone());
            }
        }
        if names.is_empty() {
            stale.remove(crawl_id);
        }
    }

    /// Forgets a crawl removed.
    pub(super) fn forget(&self, crawl_id: &CrawlId) {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(crawl_id);
        self.stale
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(crawl_id);
        self.laneless
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(crawl_id);
    }
}

/// The wall clock in ms: when an entry was written (entries are judged stale after twice the
/// request window, so the clocks of processes need agree only to within minutes).
fn wall_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| {
            Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
        })
}

/// What a crawl's lanes hold, summed: call counts and task-count notes.
#[derive(Debug, Default)]
pub(super) struct LaneTotals {
    pub(super) calls: CallTally,
    pub(super) tasks: BTreeMap<Status, i64>,
}

impl LaneTotals {
    pub(super) fn of(lanes: &[Item]) -> StoreResult<Self> {
        let mut totals = Self::default();
        for lane in lanes {
            for (call, n) in items::calls_of(lane)? {
                *totals.calls.entry(call).or_default() += n;
            }
            for status in Status::ALL {
                let n = lane
                    .get(&task_counts::attribute(status))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0);
                if n != 0 {
                    *totals.tasks.entry(status).or_default() += n;
                }
            }
        }
        Ok(totals)
    }
}

impl DynamoStore {
    /// Puts a new crawl's report lanes.
    pub(super) async fn start_report_lanes(&self, crawl_id: &CrawlId) -> StoreResult<()> {
        let lanes: Vec<Item> = lane_keys(crawl_id)
            .into_iter()
            .map(|pk| HashMap::from([("pk".to_owned(), s(pk))]))
            .collect();
        self.batch_put(lanes).await
    }

    /// Deletes a crawl's report lanes.
    pub(super) async fn delete_report_lanes(&self, crawl_id: &CrawlId) -> StoreResult<()> {
        self.reporting.forget(crawl_id);
        let keys: Vec<_> = lane_keys(crawl_id).into_iter().map(s).collect();
        for chunk in keys.chunks(25) {
            self.batch_delete(chunk.to_vec()).await?;
        }
        Ok(())
    }

    /// The crawl item and its lanes, in one strongly consistent BatchGetItem; None when the
    /// crawl item is absent.
    pub(super) async fn crawl_with_lanes(
        &self,
        crawl_id: &CrawlId,
    ) -> StoreResult<Option<(Item, LaneTotals)>> {
        let crawl_pk = items::crawl_pk(crawl_id);
        let mut keys = lane_keys(crawl_id);
        keys.push(crawl_pk.clone());
        let found = self.batch_get(keys, true).await?;
        let (crawl, lanes): (Vec<Item>, Vec<Item>) = found
            .into_iter()
            .partition(|item| item.get("pk").and_then(|v| v.as_s().ok()) == Some(&crawl_pk));
        match crawl.into_iter().next() {
            Some(item) => Ok(Some((item, LaneTotals::of(&lanes)?))),
            None => Ok(None),
        }
    }

    /// The crawl with its lanes' calls counted in.
    pub(super) async fn read_crawl_with_lanes(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        let Some((item, lanes)) = self.crawl_with_lanes(id).await? else {
            return Ok(None);
        };
        let mut crawl = CrawlItem::from_item(item)?.into_crawl();
        for (call, n) in lanes.calls {
            *crawl.calls.entry(call).or_default() += n;
        }
        Ok(Some(crawl))
    }

    /// The task-count notes a crawl's lanes hold (one BatchGetItem).
    pub(super) async fn lane_notes(
        &self,
        crawl_id: &CrawlId,
    ) -> StoreResult<BTreeMap<Status, i64>> {
        let found = self.batch_get(lane_keys(crawl_id), true).await?;
        Ok(LaneTotals::of(&found)?.tasks)
    }

    /// A call report (`CrawlRecords::report_calls`) on this process's lane; true once applied,
    /// false when the crawl is gone.
    pub(super) async fn report_on_lane(
        &self,
        id: &CrawlId,
        update: &CrawlUpdate,
        request: RequestId,
    ) -> StoreResult<bool> {
        if self.reporting.laneless(id) {
            return self.report_on_item(id, update, request).await;
        }
        let now = wall_ms();
        let (slot, entry) = self.reporting.begin(id, request, now);
        // A report's notes (`task_counts`) are bound to its request: each try sends the same.
        let noted = self.noted.take_for(id, request);
        let stale = self.reporting.stale_to_remove(id);
        let mut expression = Expression::default();
        let attribute = entry_attribute(self.reporting.process, slot);
        let (condition, changes) = expression.report(
            &update.changes,
            &noted,
            (&attribute, entry.encode()),
            Entry::needle(request),
            &stale,
        )?;
        self.calls.record_reported(Call::DynamoUpdateItem);
        let send = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(self.reporting.lane_of(id)))
            .condition_expression(condition)
            .update_expression(changes)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(OnFailure::AllOld);
        match expression.bind(send).send().await {
            Ok(out) => {
                self.reporting.end(id, request, Outcome::Applied);
                let lane = out.attributes.unwrap_or_default();
                self.reporting.saw(id, &lane, &stale, now);
                Ok(true)
            }
            Err(e) => match conditional_item(&e) {
                // The lane holds the request: applied by an earlier try.
                Some(lane) => {
                    self.reporting.end(id, request, Outcome::Applied);
                    self.reporting.saw(id, &lane, &[], now);
                    Ok(true)
                }
                // No lane: a crawl from before them, or gone. Its item says which.
                None if is_conditional_failure(&e) => {
                    self.reporting.end(id, request, Outcome::NotApplied);
                    self.reporting
                        .laneless
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(id.clone());
                    self.report_on_item(id, update, request).await
                }
                None => {
                    // Answered by the service: not applied; else it may have been.
                    let outcome = match e.as_service_error() {
                        Some(_) => Outcome::NotApplied,
                        None => Outcome::Unknown,
                    };
                    self.reporting.end(id, request, outcome);
                    // Not added (or not known to be): this call goes with the next report.
                    let own = CallTally::from([(Call::DynamoUpdateItem, 1)]);
                    self.calls.restore_unreported(&own);
                    Err(map_err("UpdateItem", e))
                }
            },
        }
    }

    /// A report on the crawl item (a crawl without lanes): its calls beyond the lane write
    /// (`own_calls`) go with the next report.
    async fn report_on_item(
        &self,
        id: &CrawlId,
        update: &CrawlUpdate,
        request: RequestId,
    ) -> StoreResult<bool> {
        let applied = self.apply_request(id, update, request).await?;
        self.calls.restore_unreported(&CallTally::from([
            (Call::DynamoTransactWriteItems, 1),
            (Call::DynamoGetItem, 1),
        ]));
        Ok(applied.is_done())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_name_is_its_process_and_slot() {
        assert_eq!(entry_attribute(0xab, 2), "r:000000ab:2");
        assert_eq!(lane_keys(&CrawlId::parse("c").unwrap()).len(), 32);
    }

    #[test]
    fn lanes_add_up_their_counts_and_notes() {
        let lane = |n: &str| {
            HashMap::from([
                ("pk".to_owned(), s("c#calls#1")),
                (
                    items::calls_attribute(Call::S3PutObject),
                    super::super::n(n),
                ),
                (task_counts::attribute(Status::Pending), super::super::n(n)),
                ("r:00000001:0".to_owned(), s("1:00000001")),
            ])
        };
        let totals = LaneTotals::of(&[lane("2"), lane("3")]).unwrap();
        assert_eq!(totals.calls[&Call::S3PutObject], 5);
        assert_eq!(totals.tasks[&Status::Pending], 5);
    }
}
