//! The status store on DynamoDB, through the real SDK.
//!
//! One table, partition key `pk` only:
//! - a task is `pk = {crawl_id}#{task_id}`;
//! - a crawl is `pk = {crawl_id}#crawl`;
//! - a host record is `pk = {crawl_id}#host#{name}`;
//! - the crawl's host counts (`HostStore::host_counts`) are `pk = {crawl_id}#hostcounts#{shard}`,
//!   one item per shard of the host list (`host::HOST_SHARDS`), added to by the host writes
//!   that change them, in one TransactWriteItems with the host record;
//! - the crawl's report lanes are `pk = {crawl_id}#calls#{lane}`, 32 items that take the call
//!   reports (`reports`; a task id is 32 hex digits, so none of these keys collide).
//!
//! The GSI `status-index` (hash `gsi_pk`, range `updated`) lists failed, gone and ignored
//! tasks without a scan: a task's `gsi_pk` is `{crawl_id}#{status code}#{shard}`, the shard a
//! stable hash of the task id (spreading one crawl's hot status over partitions), written by the
//! change into a listed status; a crawl's is `crawls#{state}`; a host record's
//! `{crawl_id}#hosts#{shard}` (with `updated = 0`; `items::hosts_gsi`), so a crawl's hosts are
//! listed without a scan, and created and walked over `HOST_SHARDS` partitions.
//! Pending, in-progress and succeeded tasks are not listed (no `gsi_pk`): a URL passes through
//! pending on every fetch and ends most succeeded, and listing them cost index writes at every
//! step (a recrawl's finish rewrites the range key); they are all in their hosts' due lists, and
//! a query or count of them walks the crawl's hosts instead.
//!
//! The GSI `host-index` (hash `hk` = `{crawl_id}#{host}`, range `due`) gives a host's tasks
//! with work left, soonest due first: `hk` is written at seed, `due` (`Task::due_at`) at seed
//! and by every write that changes it (`Changes::due`), but for a claim, which leaves the task
//! at its place (`items::keeps_place`). A succeeded page never fetched again stays listed at
//! `items::NEVER_DUE` (after every due time: never work); other tasks leave the index once
//! failed for good or gone for good (the status index lists them).
//!
//! A host turn claims its tasks without a write (`claim_in_turn`: one consistent read; the
//! turn holds its host's fenced lease): the task stays due as read, and its finish, fail or
//! release is conditioned on its token as read and on its still being claimable, and moves the
//! token. Of two turns racing on one task (one outlived its host lease) the first result lands
//! and the second is refused; a worker that dies leaves the task due for the host's next turn.
//!
//! Host records are written whole, with optimistic concurrency on their `version` attribute.
//!
//! What a task operation does is decided by `trawl_domain::transition`; `expression` turns the
//! transition's condition and changes into one conditional write. Finish, fail and release
//! build on the lease (what the claim returned, fenced by the token); claim, reschedule and the
//! rest are blind conditional writes.

pub mod capacity;
mod crawls;
mod errors;
mod expression;
mod hosts;
mod items;
mod reports;
pub mod schema;
mod task_counts;
mod tasks;

use self::capacity::image_of;
use self::errors::{conditional_item, is_conditional_failure, map_err};
use self::expression::Expression;
use self::items::{crawl_pk, host_pk, task_pk};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, KeysAndAttributes, PutRequest, ReturnValue, Select, WriteRequest,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{
    Applied, Part, StoreError, StoreResult, TaskPage, TaskQuery, TaskRecords, TaskSummary,
};
use trawl_domain::calls::{Call, CallCounts, CallTally};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::capacity::{item_size, read_half_units};
use trawl_domain::roster::Place;
use trawl_domain::task::{Millis, Status};

pub use self::schema::{HOST_INDEX, LANE_INDEX, ROSTER_INDEX, STATUS_INDEX, create_table};

/// How long after a host's URLs are counted their tasks may still be missing from its due
/// list (`App::seeds_settle_ms`): the seeder writes its tasks after the counts, and a global
/// secondary index is eventually consistent (typically under a second behind its table).
pub const DUE_LIST_SETTLE_MS: u64 = 5_000;

/// Conditional puts in flight at once while seeding.
const SEED_PARALLELISM: usize = 16;
/// BatchGetItem calls at once while listing hosts (a page of more than 100).
const HOST_READ_PARALLELISM: usize = 4;
/// Keys in one BatchGetItem call, at most (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;

/// Rounds of a host walk (a page of one host's list, or the step to the next host) one page of
/// tasks takes at most: about 2 requests each.
const HOST_WALK_ROUNDS: usize = 64;
/// Host keys read in one Query while walking the crawl's hosts.
const HOSTS_PAGE: i32 = 100;

/// The DynamoDB adapter. Cheap to clone (the SDK client is).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    shards: u32,
    calls: Arc<CallCounts>,
    /// This worker's page-budget slots (`max_pages` without a write per page).
    budget: Arc<PageBudget>,
    /// Task writes not yet added to their crawl's counts (`task_counts`).
    noted: Arc<task_counts::Deltas>,
    /// This process's call reports (`reports`).
    reporting: Arc<reports::Reporting>,
    /// Host keys a walk of the hosts reads a Query (`HOSTS_PAGE`).
    hosts_page: i32,
}

type Item = HashMap<String, AttributeValue>;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// Where a paginated status query stands: the shard it is in and DynamoDB's position there.
#[derive(Serialize, Deserialize)]
struct Cursor {
    shard: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated: Option<Millis>,
}

impl DynamoStore {
    pub fn new(
        client: Client,
        table: impl Into<String>,
        shards: u32,
        calls: Arc<CallCounts>,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            shards: shards.max(1),
            calls,
            budget: Arc::default(),
            noted: Arc::default(),
            reporting: Arc::new(reports::Reporting::new(fastrand::u32(..))),
            hosts_page: HOSTS_PAGE,
        }
    }

    /// This store reading `hosts` host keys a Query when it walks the crawl's hosts (at least
    /// 1): tests page through a few hosts as a crawl of many would.
    pub fn hosts_page(mut self, hosts: i32) -> Self {
        self.hosts_page = hosts.max(1);
        self
    }

    /// This store as the process `reporter` (`trawl_domain::report`; drawn at random by
    /// `new`): tests that need two processes on one report lane name them.
    pub fn reporting_as(mut self, reporter: u32) -> Self {
        self.reporting = Arc::new(reports::Reporting::new(reporter));
        self
    }

    /// Status-index shards per status (a task's shard is a stable hash of its id).
    pub fn shards(&self) -> u32 {
        self.shards
    }

    fn task_key(crawl_id: &CrawlId, task_id: &TaskId) -> AttributeValue {
        s(task_pk(crawl_id, task_id))
    }

    /// An UpdateItem on one task.
    fn update_task(&self, crawl_id: &CrawlId, task_id: &TaskId) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", Self::task_key(crawl_id, task_id))
    }

    /// An UpdateItem on one crawl record.
    fn update_crawl(&self, id: &CrawlId) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
    }

    /// Persists a decided update in one conditional UpdateItem: `request` names the record,
    /// `expression` holds the placeholders of `condition` and `changes`. It answers with the
    /// record before it (`ALL_OLD`, which consumes no capacity) or, when refused, the record the
    /// condition was checked against (None: absent), read from the failed condition itself: no
    /// second read. `decode` reads a record from an item. A write whose changes add its own
    /// call to a crawl (`reported`) counts it as reported, and gives it back if it failed.
    async fn apply_update<T>(
        &self,
        request: UpdateItemFluentBuilder,
        expression: Expression,
        (condition, changes): (String, Option<String>),
        reported: bool,
        decode: impl Fn(Item) -> StoreResult<T>,
    ) -> StoreResult<Applied<T>> {
        if reported {
            self.calls.record_reported(Call::DynamoUpdateItem);
        } else {
            self.calls.record(Call::DynamoUpdateItem);
        }
        let request = request
            .condition_expression(condition)
            .set_update_expression(changes)
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(OnFailure::AllOld);
        match expression.bind(request).send().await {
            Ok(out) => Ok(Applied::Done {
                before: decode(out.attributes.unwrap_or_default())?,
            }),
            Err(e) => match conditional_item(&e) {
                Some(item) => Ok(Applied::Refused {
                    current: Some(decode(item)?),
                }),
                None if is_conditional_failure(&e) => Ok(Applied::Refused { current: None }),
                None => {
                    if reported {
                        // Not added: this call goes with the next report.
                        self.calls
                            .restore_unreported(&CallTally::from([(Call::DynamoUpdateItem, 1)]));
                    }
                    Err(map_err("UpdateItem", e))
                }
            },
        }
    }

    async fn query_page(
        &self,
        gsi: String,
        updated_before: Option<Millis>,
        limit: Option<i32>,
        start: Option<Item>,
        count_only: bool,
    ) -> StoreResult<(Vec<Item>, i64, Option<Item>)> {
        let mut key_condition = "#g = :g".to_owned();
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(STATUS_INDEX)
            .expression_attribute_names("#g", "gsi_pk")
            .expression_attribute_values(":g", s(gsi))
            .set_exclusive_start_key(start)
            .set_limit(limit);
        req = updated_at_most(req, &mut key_condition, updated_before);
        self.send_page(req.key_condition_expression(key_condition), count_only)
            .await
    }

    /// Sends one page of a query: its items (none when only counted), count and next key.
    async fn send_page(
        &self,
        mut req: QueryFluentBuilder,
        count_only: bool,
    ) -> StoreResult<(Vec<Item>, i64, Option<Item>)> {
        if count_only {
            req = req.select(Select::Count);
        }
        self.calls.record(Call::DynamoQuery);
        let out = req.send().await.map_err(|e| map_err("Query", e))?;
        let count = i64::from(out.count());
        let items = out.items.unwrap_or_default();
        self.meter_query_reads(&items, out.scanned_count);
        Ok((items, count, out.last_evaluated_key))
    }
}

/// Adds "updated at or before `before`" to `expression` (a key condition or a filter), when
/// given.
fn updated_at_most(
    req: QueryFluentBuilder,
    expression: &mut String,
    before: Option<Millis>,
) -> QueryFluentBuilder {
    match before {
        Some(before) => {
            expression.push_str(" AND #u <= :before");
            req.expression_attribute_names("#u", "updated")
                .expression_attribute_values(":before", n(before))
        }
        None => req,
    }
}

/// Where a query of a status the status index does not list stands: the host being read (its
/// due list, from the start when `pk` is None) and the position in it.
#[derive(Serialize, Deserialize)]
struct HostWalk {
    /// The key of the host list the host is filed under (`items::hosts_gsi`).
    #[serde(default)]
    shard: u32,
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due: Option<Millis>,
    /// In the host's roster (after its due list), after the entry `pk` at `rpos` if given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    roster: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rpos: Option<Millis>,
}

/// Where a walk of one host stands: in its due list (from an index key), or in its roster.
enum HostAt {
    DueList(Option<Item>),
    Roster(Option<Place>),
}

/// The crawl's hosts of one part after a point, in walk order (host list key by key; under a
/// key, by name), read a page of host keys at a time: a walk of the hosts' due lists makes one
/// request per host for its list and one per `HOSTS_PAGE` hosts to find them, not one each.
struct Hosts {
    part: Part,
    /// The key of the host list being read, and where its next page starts (None: the key's
    /// first page, or, once `read` is set, no page left under it).
    shard: u32,
    start: Option<Item>,
    read: bool,
    ahead: VecDeque<String>,
}

impl Hosts {
    /// The hosts of `part` after `after` (a key of the host list and a host filed under it),
    /// or from the part's first.
    fn after(crawl_id: &CrawlId, part: Part, after: Option<(u32, &str)>) -> Self {
        let (shard, start) = match after {
            None => (part.index, None),
            Some((shard, name)) => (
                shard,
                Some(HashMap::from([
                    ("pk".to_owned(), s(host_pk(crawl_id, name))),
                    ("gsi_pk".to_owned(), s(items::hosts_gsi(crawl_id, shard))),
                    ("updated".to_owned(), n(0)),
                ])),
            ),
        };
        Self {
            part,
            shard,
            start,
            read: false,
            ahead: VecDeque::new(),
        }
    }

    async fn next(
        &mut self,
        store: &DynamoStore,
        crawl_id: &CrawlId,
    ) -> StoreResult<Option<(u32, String)>> {
        loop {
            if let Some(name) = self.ahead.pop_front() {
                return Ok(Some((self.shard, name)));
            }
            if self.read && self.start.is_none() {
                self.shard += self.part.of.max(1);
                self.read = false;
            }
            if self.shard >= items::HOST_KEYS {
                return Ok(None);
            }
            let gsi = items::hosts_gsi(crawl_id, self.shard);
            let (items, _, next) = store
                .query_page(gsi, None, Some(store.hosts_page), self.start.take(), false)
                .await?;
            self.read = true;
            self.start = next;
            self.ahead.extend(items.iter().filter_map(|item| {
                let pk = item.get("pk")?.as_s().ok()?;
                items::host_of_pk(crawl_id, pk).map(str::to_owned)
            }));
        }
    }
}

impl DynamoStore {
    /// One page of a host's due list: the tasks in `status` (all when None), updated at or
    /// before `updated_before`.
    #[allow(clippy::too_many_arguments)]
    async fn host_page(
        &self,
        crawl_id: &CrawlId,
        status: Option<Status>,
        updated_before: Option<Millis>,
        host: &str,
        start: Option<Item>,
        limit: Option<i32>,
        count_only: bool,
    ) -> StoreResult<(Vec<Item>, i64, Option<Item>)> {
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(HOST_INDEX)
            .expression_attribute_names("#hk", "hk")
            .expression_attribute_values(":hk", s(items::host_key(crawl_id, host)))
            .set_exclusive_start_key(start)
            .set_limit(limit);
        let Some(status) = status else {
            return self
                .send_page(req.key_condition_expression("#hk = :hk"), count_only)
                .await;
        };
        let mut filter = "#st = :st".to_owned();
        req = req
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":st", n(status.code()));
        req = updated_at_most(req, &mut filter, updated_before);
        // Only succeeded pages sit at `NEVER_DUE`: a walk for other work does not read them.
        req = if status == Status::Succeeded {
            req.key_condition_expression("#hk = :hk")
        } else {
            req.key_condition_expression("#hk = :hk AND #due < :never")
                .expression_attribute_names("#due", "due")
                .expression_attribute_values(":never", n(items::NEVER_DUE))
        };
        self.send_page(req.filter_expression(filter), count_only)
            .await
    }

    /// A query of a status the status index does not list (`items::listed`): the crawl's hosts
    /// in name order, each one's due list in due order. Every pending or in-progress task is in
    /// its host's due list, and every host with tasks has a record (hosts are recorded before
    /// their tasks are seeded).
    async fn walk_hosts(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        self.walk(query, Some(query.status)).await
    }

    /// A page of the tasks in the crawl's hosts' due lists, those in `status` or all of them,
    /// from `query`'s cursor.
    pub(super) async fn walk(
        &self,
        query: &TaskQuery,
        status: Option<Status>,
    ) -> StoreResult<TaskPage> {
        let crawl_id = &query.crawl_id;
        let at = match &query.cursor {
            Some(raw) => {
                Some(serde_json::from_str::<HostWalk>(raw).map_err(|_| StoreError::InvalidCursor)?)
            }
            None => None,
        };
        let (mut hosts, mut host, mut start) = match at {
            Some(at) if !query.part.holds(at.shard) => return Err(StoreError::InvalidCursor),
            Some(at) => {
                let start = match (at.roster, at.pk, at.due, at.rpos) {
                    (false, Some(pk), Some(due), _) => HostAt::DueList(Some(HashMap::from([
                        ("pk".to_owned(), s(pk)),
                        ("hk".to_owned(), s(items::host_key(crawl_id, &at.host))),
                        ("due".to_owned(), n(due)),
                    ]))),
                    (false, ..) => HostAt::DueList(None),
                    (true, Some(pk), _, Some(rpos)) => {
                        let task_id =
                            items::task_id_of_pk(crawl_id, &pk).ok_or(StoreError::InvalidCursor)?;
                        HostAt::Roster(Some(Place { at: rpos, task_id }))
                    }
                    (true, ..) => HostAt::Roster(None),
                };
                let hosts = Hosts::after(crawl_id, query.part, Some((at.shard, &at.host)));
                (hosts, Some((at.shard, at.host)), start)
            }
            None => {
                let mut hosts = Hosts::after(crawl_id, query.part, None);
                let first = hosts.next(self, crawl_id).await?;
                (hosts, first, HostAt::DueList(None))
            }
        };
        let limit = query.limit.max(1) as usize;
        let mut tasks = Vec::new();
        // Bounded: each round reads a page of one host's list or roster (and, every
        // `HOSTS_PAGE` hosts, a page of host keys), and a page ends after `HOST_WALK_ROUNDS` of
        // them however few tasks it holds, so that a caller with a deadline (a delivery) checks
        // it between pages: a status most hosts have none of is otherwise one call over every
        // host.
        let mut rounds = 0;
        while let Some((_, name)) = host.clone() {
            if tasks.len() >= limit || rounds >= HOST_WALK_ROUNDS {
                break;
            }
            rounds += 1;
            let want = i32::try_from(limit - tasks.len()).unwrap_or(i32::MAX);
            start = match start {
                HostAt::DueList(from) => {
                    let (items, _, next) = self
                        .host_page(
                            crawl_id,
                            status,
                            query.updated_before,
                            &name,
                            from,
                            Some(want),
                            false,
                        )
                        .await?;
                    for item in items {
                        tasks.push(items::summary_from_item(item)?);
                    }
                    match next {
                        Some(key) => HostAt::DueList(Some(key)),
                        None => HostAt::Roster(None),
                    }
                }
                // The host's rostered tasks, each read (a roster holds keys only).
                HostAt::Roster(after) => {
                    let page = self
                        .roster(crawl_id, &name, after.as_ref(), want.unsigned_abs())
                        .await?;
                    let last = page.entries.last().map(|(place, _)| place.clone());
                    let read = page.entries.iter().map(|(_, task)| TaskSummary::from(task));
                    tasks.extend(read.filter(|t| {
                        status.is_none_or(|st| t.status == st)
                            && query.updated_before.is_none_or(|at| t.updated_at <= at)
                    }));
                    match last {
                        Some(place) if !page.at_end => HostAt::Roster(Some(place)),
                        _ => {
                            host = hosts.next(self, crawl_id).await?;
                            HostAt::DueList(None)
                        }
                    }
                }
            };
        }
        let cursor = host
            .map(|(shard, host)| {
                let walk = match &start {
                    HostAt::DueList(key) => {
                        let key = |name: &str| key.as_ref().and_then(|k| k.get(name));
                        HostWalk {
                            shard,
                            host,
                            pk: key("pk").and_then(|v| v.as_s().ok()).cloned(),
                            due: key("due")
                                .and_then(|v| v.as_n().ok())
                                .and_then(|v| v.parse().ok()),
                            roster: false,
                            rpos: None,
                        }
                    }
                    HostAt::Roster(place) => HostWalk {
                        shard,
                        host,
                        pk: place.as_ref().map(|p| items::task_pk(crawl_id, &p.task_id)),
                        due: None,
                        roster: true,
                        rpos: place.as_ref().map(|p| p.at),
                    },
                };
                serde_json::to_string(&walk)
            })
            .transpose()
            .map_err(|e| StoreError::backend("Query", e.to_string()).caused_by(e))?;
        Ok(TaskPage { tasks, cursor })
    }

    /// Tasks in a status the status index does not list, counted host by host (its due list's
    /// by the index, its roster's read).
    async fn count_on_hosts(&self, crawl_id: &CrawlId, status: Status) -> StoreResult<u64> {
        let mut total = 0u64;
        let mut hosts = Hosts::after(crawl_id, Part::WHOLE, None);
        while let Some((_, name)) = hosts.next(self, crawl_id).await? {
            let mut start = None;
            loop {
                let (_, count, next) = self
                    .host_page(crawl_id, Some(status), None, &name, start, None, true)
                    .await?;
                total += count.max(0) as u64;
                match next {
                    Some(key) => start = Some(key),
                    None => break,
                }
            }
            let mut after = None;
            loop {
                let page = self.roster(crawl_id, &name, after.as_ref(), 100).await?;
                let read = page.entries.iter().filter(|(_, t)| t.status == status);
                total += read.count() as u64;
                after = page.entries.last().map(|(place, _)| place.clone());
                if page.at_end || after.is_none() {
                    break;
                }
            }
        }
        Ok(total)
    }
}

/// What [`DynamoStore::migrate_unlisted`] did to one crawl.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Items moved from the status index to their host's due list.
    pub moved: u64,
    /// Items listed under an old key but changed since (by a writer that placed them itself).
    pub changed: u64,
    /// Every old key was read to its end: nothing is left to move.
    pub done: bool,
}

impl DynamoStore {
    /// Upgrades a crawl's items written before the status index became sparse: pending,
    /// in-progress and succeeded tasks then carried a status-index key, and a succeeded page
    /// never fetched again had no host-index `due`, so the hosts' due lists, where queries,
    /// counts, the deliverer and the sweeper now look for those statuses, did not hold it. Each
    /// item still under such a key (`{crawl}#{status}#{shard}`) is moved by one conditional
    /// UpdateItem: its status-index key removed, its `due` (and `hk`, for items older than the
    /// host index) set unless present, from the index's projection — only while the item still
    /// has that key (a writer since then placed it itself). Idempotent: a moved item leaves the
    /// old key, so a second run finds nothing. Bounded: at most `limit` items per call, in pages
    /// of 25; call again until `done`.
    pub async fn migrate_unlisted(&self, crawl_id: &CrawlId, limit: u64) -> StoreResult<Migrated> {
        let mut out = Migrated::default();
        let old = Status::ALL
            .into_iter()
            .filter(|&status| !items::listed(status));
        for status in old {
            for shard in 0..self.shards {
                let gsi = items::status_gsi(crawl_id, status, shard);
                let mut start = None;
                loop {
                    let left = limit.saturating_sub(out.moved + out.changed);
                    if left == 0 {
                        return Ok(out);
                    }
                    let want = i32::try_from(left.min(25)).unwrap_or(25);
                    let (page, _, next) = self
                        .query_page(gsi.clone(), None, Some(want), start.take(), false)
                        .await?;
                    for item in page {
                        if self.move_to_due_list(crawl_id, &gsi, item).await? {
                            out.moved += 1;
                        } else {
                            out.changed += 1;
                        }
                    }
                    match next {
                        Some(key) => start = Some(key),
                        None => break,
                    }
                }
            }
        }
        out.done = true;
        Ok(out)
    }

    /// One item of `migrate_unlisted`, as the status index listed it under `gsi`: true if moved.
    async fn move_to_due_list(
        &self,
        crawl_id: &CrawlId,
        gsi: &str,
        item: Item,
    ) -> StoreResult<bool> {
        let task = items::summary_from_item(item)?;
        let host = trawl_domain::canonical::host_key_of(&task.url);
        // Each of these statuses has a due time (a succeeded page never fetched again:
        // `NEVER_DUE`); were there none, the task would stay out of the host index.
        let due = items::host_due(task.status, task.due_at());
        let set_due = if due.is_some() {
            ", #due = if_not_exists(#due, :due)"
        } else {
            ""
        };
        let mut request = self
            .update_task(crawl_id, &task.task_id)
            .condition_expression("#g = :g")
            .update_expression(format!(
                "REMOVE #g SET #hk = if_not_exists(#hk, :hk){set_due}"
            ))
            .expression_attribute_names("#g", "gsi_pk")
            .expression_attribute_values(":g", s(gsi))
            .expression_attribute_names("#hk", "hk")
            .expression_attribute_values(":hk", s(items::host_key(crawl_id, &host)));
        if let Some(due) = due {
            request = request
                .expression_attribute_names("#due", "due")
                .expression_attribute_values(":due", n(due));
        }
        self.calls.record(Call::DynamoUpdateItem);
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(map_err("UpdateItem", e)),
        }
    }
}

/// An index entry's usual size (keys and a few projected numbers): what an item a Query read
/// without returning it (a filter's, a count's) is taken to weigh when none returned says more.
/// An estimate, for the read meter only.
const UNSEEN_ENTRY_BYTES: u64 = 100;

impl DynamoStore {
    /// Meters what a read by key consumed (a GetItem, a BatchGetItem's keys): each item found
    /// on its own size, each key absent the least a read costs.
    fn meter_key_reads(&self, found: &[Item], absent: usize, consistent: bool) {
        let half = found
            .iter()
            .map(|item| read_half_units(item_size(&image_of(item)), consistent))
            .sum::<u64>()
            + absent as u64 * read_half_units(0, consistent);
        self.calls.add_read_half_units(half);
    }

    /// Meters a GetItem: its item, or the least a read costs when there is none.
    fn meter_get(&self, item: Option<&Item>, consistent: bool) {
        match item {
            Some(item) => self.meter_key_reads(std::slice::from_ref(item), 0, consistent),
            None => self.meter_key_reads(&[], 1, consistent),
        }
    }

    /// Meters what a Query of an index consumed (eventually consistent: an index reads no
    /// other way): the items it read, together — those it returned, and those it evaluated
    /// without returning (`evaluated` counts both) at the returned ones' mean size.
    fn meter_query_reads(&self, returned: &[Item], evaluated: i32) {
        let bytes: u64 = returned.iter().map(|item| item_size(&image_of(item))).sum();
        let unseen = u64::try_from(evaluated)
            .unwrap_or(0)
            .saturating_sub(returned.len() as u64);
        let mean = match returned.len() as u64 {
            0 => UNSEEN_ENTRY_BYTES,
            n => bytes / n,
        };
        self.calls
            .add_read_half_units(read_half_units(bytes + unseen * mean, false));
    }

    /// Deletes up to 25 items by key, retrying unprocessed ones (bounded).
    async fn batch_delete(&self, keys: Vec<AttributeValue>) -> StoreResult<()> {
        let requests = keys
            .into_iter()
            .map(|pk| {
                DeleteRequest::builder()
                    .key("pk", pk)
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(|e| StoreError::backend("BatchWriteItem", e.to_string()).caused_by(e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        self.batch_write(requests).await
    }

    /// Puts items, 25 a request, retrying unprocessed ones (bounded).
    async fn batch_put(&self, items: Vec<Item>) -> StoreResult<()> {
        let requests = items
            .into_iter()
            .map(|item| {
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|p| WriteRequest::builder().put_request(p).build())
                    .map_err(|e| StoreError::backend("BatchWriteItem", e.to_string()).caused_by(e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        for chunk in requests.chunks(25) {
            self.batch_write(chunk.to_vec()).await?;
        }
        Ok(())
    }

    /// One BatchWriteItem of up to 25 requests, retrying unprocessed ones (bounded).
    async fn batch_write(&self, mut requests: Vec<WriteRequest>) -> StoreResult<()> {
        for attempt in 0..8u32 {
            if requests.is_empty() {
                return Ok(());
            }
            self.calls.record(Call::DynamoBatchWriteItem);
            let out = self
                .client
                .batch_write_item()
                .request_items(&self.table, requests)
                .send()
                .await
                .map_err(|e| map_err("BatchWriteItem", e))?;
            requests = out
                .unprocessed_items
                .and_then(|mut m| m.remove(&self.table))
                .unwrap_or_default();
            if !requests.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
            }
        }
        Err(StoreError::unavailable(
            "BatchWriteItem",
            "unprocessed items remain",
        ))
    }

    /// The items of up to 100 keys (absent ones are not returned), in one BatchGetItem,
    /// retrying unprocessed keys (bounded).
    async fn batch_get(&self, keys: Vec<String>, consistent: bool) -> StoreResult<Vec<Item>> {
        let keys: Vec<Item> = keys
            .into_iter()
            .map(|pk| HashMap::from([("pk".to_owned(), s(pk))]))
            .collect();
        let mut wanted = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .consistent_read(consistent)
            .build()
            .map_err(|e| StoreError::backend("BatchGetItem", e.to_string()).caused_by(e))?;
        let mut found: Vec<Item> = Vec::new();
        for attempt in 0..8u32 {
            self.calls.record(Call::DynamoBatchGetItem);
            let asked = wanted.keys().len();
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, wanted)
                .send()
                .await
                .map_err(|e| map_err("BatchGetItem", e))?;
            let read = out
                .responses
                .and_then(|mut r| r.remove(&self.table))
                .unwrap_or_default();
            let rest = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table));
            let unprocessed = rest.as_ref().map_or(0, |r| r.keys().len());
            let absent = asked.saturating_sub(read.len() + unprocessed);
            self.meter_key_reads(&read, absent, consistent);
            found.extend(read);
            match rest {
                Some(rest) if !rest.keys().is_empty() => {
                    wanted = rest;
                    tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                }
                _ => return Ok(found),
            }
        }
        Err(StoreError::unavailable(
            "BatchGetItem",
            "unprocessed keys remain",
        ))
    }
}
