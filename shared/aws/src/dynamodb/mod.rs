//! The status store on DynamoDB, through the real SDK.
//!
//! One table, partition key `pk` only:
//! - a task is `pk = {crawl_id}#{task_id}`;
//! - a crawl is `pk = {crawl_id}#crawl`;
//! - a host record is `pk = {crawl_id}#host#{name}` (a task id is 32 hex digits, so none of
//!   them collide).
//!
//! The GSI `status-index` (hash `gsi_pk`, range `updated`) lists failed, gone and ignored
//! tasks without a scan: a task's `gsi_pk` is `{crawl_id}#{status code}#{shard}`, the shard a
//! stable hash of the task id (spreading one crawl's hot status over partitions), written by the
//! change into a listed status; a crawl's is `crawls#{state}`; a host record's
//! `{crawl_id}#hosts` (with `updated = 0`), so a crawl's hosts are listed without a scan.
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
mod items;
pub mod schema;

use self::errors::{conditional_item, is_conditional_failure, map_err};
use self::expression::Expression;
use self::items::{TaskItem, crawl_pk, host_pk, task_pk};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, ReturnValue, Select, WriteRequest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{
    ClaimOutcome, ClaimRejection, FailOutcome, FinishOutcome, HostPage, HostStore, Seeded,
    StatusCounts, StoreError, StoreResult, TaskPage, TaskQuery, TaskStore, TaskSummary,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::host::Host;
use trawl_domain::retry::{Failure, RetryPolicy};
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{FetchRecord, Lease, Millis, NewTask, Status, Task};
use trawl_domain::transition::{self, Update};

pub use self::schema::{HOST_INDEX, STATUS_INDEX, create_table};

/// Conditional puts in flight at once while seeding.
const SEED_PARALLELISM: usize = 16;
/// Host records read at once while listing hosts.
const HOST_READ_PARALLELISM: usize = 16;

/// The DynamoDB adapter. Cheap to clone (the SDK client is).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    shards: u32,
    calls: Arc<CallCounts>,
    /// This worker's page-budget slots (`max_pages` without a write per page).
    budget: Arc<PageBudget>,
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
        }
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

    /// One transition of one task as one conditional UpdateItem. Ok(the attributes asked for
    /// by `returning`) when applied; Err(the task the condition refused, None if there is none)
    /// otherwise, read from the failed condition itself.
    async fn write(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
        returning: ReturnValue,
    ) -> StoreResult<Result<Item, Option<Task>>> {
        let mut expression = Expression::default();
        let Some(condition) = expression.condition(&update.requires) else {
            return Ok(Err(None));
        };
        let changes = expression.update(&update.changes, crawl_id, task_id, self.shards)?;
        self.calls.record(Call::DynamoUpdateItem);
        let request = self
            .update_task(crawl_id, task_id)
            .condition_expression(condition)
            .update_expression(changes)
            .return_values(returning)
            .return_values_on_condition_check_failure(OnFailure::AllOld);
        match expression.bind(request).send().await {
            Ok(out) => Ok(Ok(out.attributes.unwrap_or_default())),
            Err(e) => match conditional_item(&e) {
                Some(item) => Ok(Err(Some(TaskItem::from_item(item)?.into_task()?))),
                None if is_conditional_failure(&e) => Ok(Err(None)),
                None => Err(map_err("UpdateItem", e)),
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
        Ok((out.items.unwrap_or_default(), count, out.last_evaluated_key))
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
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due: Option<Millis>,
}

impl DynamoStore {
    /// The crawl's first host after `after` (by name), from the hosts' status-index key.
    async fn host_after(
        &self,
        crawl_id: &CrawlId,
        after: Option<&str>,
    ) -> StoreResult<Option<String>> {
        let gsi = items::hosts_gsi(crawl_id);
        let start = after.map(|name| {
            HashMap::from([
                ("pk".to_owned(), s(host_pk(crawl_id, name))),
                ("gsi_pk".to_owned(), s(gsi.clone())),
                ("updated".to_owned(), n(0)),
            ])
        });
        let (items, _, _) = self.query_page(gsi, None, Some(1), start, false).await?;
        let prefix = format!("{crawl_id}#host#");
        Ok(items.first().and_then(|item| {
            let pk = item.get("pk")?.as_s().ok()?;
            pk.strip_prefix(&prefix).map(str::to_owned)
        }))
    }

    /// One page of a host's due list, only the tasks `query` asks for (its status, updated at
    /// or before its bound).
    async fn host_page(
        &self,
        query: &TaskQuery,
        host: &str,
        start: Option<Item>,
        limit: Option<i32>,
        count_only: bool,
    ) -> StoreResult<(Vec<Item>, i64, Option<Item>)> {
        let (crawl_id, status) = (&query.crawl_id, query.status);
        let mut filter = "#st = :st".to_owned();
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(HOST_INDEX)
            .expression_attribute_names("#hk", "hk")
            .expression_attribute_values(":hk", s(items::host_key(crawl_id, host)))
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":st", n(status.code()))
            .set_exclusive_start_key(start)
            .set_limit(limit);
        req = updated_at_most(req, &mut filter, query.updated_before);
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
        let crawl_id = &query.crawl_id;
        let at = match &query.cursor {
            Some(raw) => {
                Some(serde_json::from_str::<HostWalk>(raw).map_err(|_| StoreError::InvalidCursor)?)
            }
            None => None,
        };
        let (mut host, mut start) = match at {
            Some(at) => {
                let start = match (at.pk, at.due) {
                    (Some(pk), Some(due)) => Some(HashMap::from([
                        ("pk".to_owned(), s(pk)),
                        ("hk".to_owned(), s(items::host_key(crawl_id, &at.host))),
                        ("due".to_owned(), n(due)),
                    ])),
                    _ => None,
                };
                (Some(at.host), start)
            }
            None => (self.host_after(crawl_id, None).await?, None),
        };
        let limit = query.limit.max(1) as usize;
        let mut tasks = Vec::new();
        // Bounded: each round reads a page of one host's list or moves to the next host.
        while let Some(name) = host.clone() {
            if tasks.len() >= limit {
                break;
            }
            let want = i32::try_from(limit - tasks.len()).unwrap_or(i32::MAX);
            let (items, _, next) = self
                .host_page(query, &name, start.take(), Some(want), false)
                .await?;
            for item in items {
                tasks.push(items::summary_from_item(item)?);
            }
            match next {
                Some(key) => start = Some(key),
                None => host = self.host_after(crawl_id, Some(&name)).await?,
            }
        }
        let cursor = host
            .map(|host| {
                let key = |name: &str| start.as_ref().and_then(|k| k.get(name));
                serde_json::to_string(&HostWalk {
                    host,
                    pk: key("pk").and_then(|v| v.as_s().ok()).cloned(),
                    due: key("due")
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse().ok()),
                })
            })
            .transpose()
            .map_err(|e| StoreError::Backend {
                operation: "Query",
                message: e.to_string(),
            })?;
        Ok(TaskPage { tasks, cursor })
    }

    /// Tasks in a status the status index does not list, counted host by host.
    async fn count_on_hosts(&self, crawl_id: &CrawlId, status: Status) -> StoreResult<u64> {
        let query = TaskQuery {
            crawl_id: crawl_id.clone(),
            status,
            updated_before: None,
            limit: 0,
            cursor: None,
        };
        let mut total = 0u64;
        let mut host = self.host_after(crawl_id, None).await?;
        while let Some(name) = host {
            let mut start = None;
            loop {
                let (_, count, next) = self.host_page(&query, &name, start, None, true).await?;
                total += count.max(0) as u64;
                match next {
                    Some(key) => start = Some(key),
                    None => break,
                }
            }
            host = self.host_after(crawl_id, Some(&name)).await?;
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

impl TaskStore for DynamoStore {
    async fn seed(
        &self,
        crawl_id: &CrawlId,
        tasks: &[NewTask],
        now: Millis,
    ) -> StoreResult<Vec<Seeded>> {
        // Bounded parallelism, results in input order. A URL repeated in the batch is put once
        // (its first time): concurrent puts of one key would race for which one "created" it.
        let mut first = std::collections::HashMap::new();
        let unique: Vec<&NewTask> = tasks
            .iter()
            .enumerate()
            .filter(|(i, t)| *first.entry(t.url.task_id()).or_insert(*i) == *i)
            .map(|(_, t)| t)
            .collect();
        let mut created = std::collections::HashMap::new();
        for chunk in unique.chunks(SEED_PARALLELISM) {
            let puts = chunk.iter().map(|task| self.seed_one(crawl_id, task, now));
            for (task, outcome) in chunk.iter().zip(futures_util::future::join_all(puts).await) {
                created.insert(task.url.task_id(), outcome?);
            }
        }
        Ok(tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let id = t.url.task_id();
                match created.get(&id) {
                    Some(&seeded) if first.get(&id) == Some(&i) => seeded,
                    _ => Seeded::AlreadyKnown,
                }
            })
            .collect())
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        self.calls.record(Call::DynamoGetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", Self::task_key(crawl_id, task_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        out.item
            .map(|item| TaskItem::from_item(item)?.into_task())
            .transpose()
    }

    async fn claim(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> StoreResult<ClaimOutcome> {
        let update = transition::claim(lease_ms, now);
        match self
            .write(crawl_id, task_id, &update, ReturnValue::AllNew)
            .await?
        {
            Ok(item) => {
                let task = TaskItem::from_item(item)?.into_task()?;
                Ok(ClaimOutcome::Claimed {
                    lease: transition::lease_of(&task),
                    task: Box::new(task),
                })
            }
            Err(current) => match transition::claimable(current.as_ref(), now) {
                Err(why) => Ok(ClaimOutcome::Rejected(why)),
                Ok(()) => Err(StoreError::Backend {
                    operation: "UpdateItem",
                    message: format!("claim of {task_id} refused although the task is claimable"),
                }),
            },
        }
    }

    /// No write: one consistent read. The turn's lease on the task is its token as read
    /// (`LeaseKind::InTurn`); the finish, fail or release under it is the claim.
    async fn claim_in_turn(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        lease_ms: u64,
        now: Millis,
    ) -> StoreResult<ClaimOutcome> {
        let Some(task) = self.get(crawl_id, task_id).await? else {
            return Ok(ClaimOutcome::Rejected(ClaimRejection::Missing));
        };
        Ok(match transition::claim_in_turn(&task, lease_ms, now) {
            Ok(lease) => ClaimOutcome::Claimed {
                lease,
                task: Box::new(task),
            },
            Err(why) => ClaimOutcome::Rejected(why),
        })
    }

    async fn finish(
        &self,
        lease: &Lease,
        record: &FetchRecord,
        now: Millis,
    ) -> StoreResult<FinishOutcome> {
        let update = transition::finish(lease, record, now);
        match self
            .write(
                &lease.crawl_id,
                &lease.task_id,
                &update,
                ReturnValue::AllOld,
            )
            .await?
        {
            Ok(item) => {
                let before = TaskItem::from_item(item)?.into_task()?;
                Ok(FinishOutcome::Finished {
                    replaced: before.fetch,
                    stale: before.stale,
                })
            }
            Err(current) => Ok(FinishOutcome::Rejected {
                current: current.map(Box::new),
            }),
        }
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        revisit: &Revisit,
        now: Millis,
    ) -> StoreResult<FailOutcome> {
        let (update, failed) = transition::fail(lease, failure, policy, revisit, now);
        let written = self
            .write(&lease.crawl_id, &lease.task_id, &update, ReturnValue::None)
            .await?;
        Ok(match written {
            Ok(_) => failed.into(),
            Err(_) => FailOutcome::Rejected,
        })
    }

    async fn release(&self, lease: &Lease, now: Millis) -> StoreResult<bool> {
        let Some(update) = transition::release(lease, now) else {
            return Ok(true);
        };
        let written = self
            .write(&lease.crawl_id, &lease.task_id, &update, ReturnValue::None)
            .await?;
        Ok(written.is_ok())
    }

    async fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> StoreResult<bool> {
        let update = transition::add_stale(md5);
        let written = self
            .write(crawl_id, task_id, &update, ReturnValue::None)
            .await?;
        Ok(written.is_ok())
    }

    async fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> StoreResult<bool> {
        let update = transition::reschedule(from, now);
        let written = self
            .write(crawl_id, task_id, &update, ReturnValue::None)
            .await?;
        Ok(written.is_ok())
    }

    async fn reset(&self, task: &Task, now: Millis) -> StoreResult<bool> {
        let update = transition::reset(task, now);
        let written = self
            .write(&task.crawl_id, &task.task_id, &update, ReturnValue::None)
            .await?;
        Ok(written.is_ok())
    }

    async fn refresh(&self, task: &Task, lastmod: Millis, now: Millis) -> StoreResult<bool> {
        let Some(update) = transition::refresh(task, lastmod, now) else {
            return Ok(false);
        };
        let written = self
            .write(&task.crawl_id, &task.task_id, &update, ReturnValue::None)
            .await?;
        Ok(written.is_ok())
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        if !items::listed(query.status) {
            return self.walk_hosts(query).await;
        }
        let mut cursor = match &query.cursor {
            Some(raw) => {
                serde_json::from_str::<Cursor>(raw).map_err(|_| StoreError::InvalidCursor)?
            }
            None => Cursor {
                shard: 0,
                pk: None,
                updated: None,
            },
        };
        if cursor.shard >= self.shards {
            return Err(StoreError::InvalidCursor);
        }
        let limit = query.limit.max(1) as usize;
        let mut tasks = Vec::new();
        while cursor.shard < self.shards {
            let gsi = items::status_gsi(&query.crawl_id, query.status, cursor.shard);
            let start = match (&cursor.pk, cursor.updated) {
                (Some(pk), Some(updated)) => Some(HashMap::from([
                    ("pk".to_owned(), s(pk.clone())),
                    ("gsi_pk".to_owned(), s(gsi.clone())),
                    ("updated".to_owned(), n(updated)),
                ])),
                _ => None,
            };
            let want = (limit - tasks.len()) as i32;
            let (items, _, next) = self
                .query_page(gsi, query.updated_before, Some(want), start, false)
                .await?;
            for item in items {
                tasks.push(items::summary_from_item(item)?);
            }
            match next {
                Some(key) => {
                    cursor.pk = key.get("pk").and_then(|v| v.as_s().ok()).cloned();
                    cursor.updated = key
                        .get("updated")
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse().ok());
                }
                None => {
                    cursor = Cursor {
                        shard: cursor.shard + 1,
                        pk: None,
                        updated: None,
                    }
                }
            }
            if tasks.len() >= limit {
                break;
            }
        }
        let cursor = (cursor.shard < self.shards)
            .then(|| serde_json::to_string(&cursor))
            .transpose()
            .map_err(|e| StoreError::Backend {
                operation: "Query",
                message: e.to_string(),
            })?;
        Ok(TaskPage { tasks, cursor })
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let limit = limit.max(1) as usize;
        let mut tasks = Vec::with_capacity(limit.min(1000));
        let mut start = None;
        // A page can come back short (1 MB): go on until `limit` or the end of the host.
        loop {
            self.calls.record(Call::DynamoQuery);
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(HOST_INDEX)
                // Succeeded pages never fetched again sit after every due time: not work.
                .key_condition_expression("#hk = :hk AND #due < :never")
                .expression_attribute_names("#hk", "hk")
                .expression_attribute_values(":hk", s(items::host_key(crawl_id, host)))
                .expression_attribute_names("#due", "due")
                .expression_attribute_values(":never", n(items::NEVER_DUE))
                .scan_index_forward(true)
                .limit(i32::try_from(limit - tasks.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| map_err("Query", e))?;
            for item in out.items.unwrap_or_default() {
                tasks.push(items::summary_from_item(item)?);
            }
            match out.last_evaluated_key {
                Some(key) if tasks.len() < limit => start = Some(key),
                _ => break,
            }
        }
        // The index orders by due time only; ties in task id order, as the other stores.
        tasks.sort_by(|a, b| (a.due_at(), &a.task_id).cmp(&(b.due_at(), &b.task_id)));
        Ok(tasks)
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        let mut counts = StatusCounts::new();
        for status in Status::ALL {
            if !items::listed(status) {
                counts.insert(status, self.count_on_hosts(crawl_id, status).await?);
                continue;
            }
            let mut total = 0u64;
            for shard in 0..self.shards {
                let mut start = None;
                loop {
                    let gsi = items::status_gsi(crawl_id, status, shard);
                    let (_, count, next) = self.query_page(gsi, None, None, start, true).await?;
                    total += count.max(0) as u64;
                    match next {
                        Some(key) => start = Some(key),
                        None => break,
                    }
                }
            }
            counts.insert(status, total);
        }
        Ok(counts)
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let mut deleted = 0u64;
        for status in Status::ALL {
            if !items::listed(status) {
                // Through the hosts' due lists, page after page (a deleted task's key still
                // places the next page).
                let mut cursor = None;
                loop {
                    let page = self
                        .walk_hosts(&TaskQuery {
                            crawl_id: crawl_id.clone(),
                            status,
                            updated_before: None,
                            limit: 25,
                            cursor,
                        })
                        .await?;
                    let keys: Vec<AttributeValue> = page
                        .tasks
                        .iter()
                        .map(|t| Self::task_key(crawl_id, &t.task_id))
                        .collect();
                    deleted += keys.len() as u64;
                    if !keys.is_empty() {
                        self.batch_delete(keys).await?;
                    }
                    match page.cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                continue;
            }
            for shard in 0..self.shards {
                loop {
                    // Deleting what the last page returned moves the next page forward.
                    let gsi = items::status_gsi(crawl_id, status, shard);
                    let (items, _, _) = self.query_page(gsi, None, Some(25), None, false).await?;
                    if items.is_empty() {
                        break;
                    }
                    let keys: Vec<AttributeValue> = items
                        .into_iter()
                        .filter_map(|mut item| item.remove("pk"))
                        .collect();
                    deleted += keys.len() as u64;
                    self.batch_delete(keys).await?;
                }
            }
        }
        Ok(deleted)
    }
}

impl HostStore for DynamoStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        self.read_host(crawl_id, name, true).await
    }

    async fn put_host(&self, crawl_id: &CrawlId, host: &Host) -> StoreResult<bool> {
        let item = items::host_item(crawl_id, host, host.version + 1)?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .expression_attribute_names("#pk", "pk");
        let request = if host.version == 0 {
            request.condition_expression("attribute_not_exists(#pk)")
        } else {
            // attribute_exists too: a record deleted meanwhile is not silently recreated.
            request
                .condition_expression("attribute_exists(#pk) AND #v = :v")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(host.version))
        };
        self.calls.record(Call::DynamoPutItem);
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(map_err("PutItem", e)),
        }
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
    ) -> StoreResult<Option<Host>> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(items::host_pk(crawl_id, name)))
            .update_expression("ADD #seeded :n, #v :one")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#seeded", "seeded")
            .expression_attribute_names("#v", "version")
            .expression_attribute_values(":n", self::n(n))
            .expression_attribute_values(":one", self::n(1))
            .return_values(ReturnValue::AllNew);
        self.calls.record(Call::DynamoUpdateItem);
        match request.send().await {
            Ok(out) => out.attributes.map(items::host_from_item).transpose(),
            Err(e) if is_conditional_failure(&e) => Ok(None),
            Err(e) => Err(map_err("UpdateItem", e)),
        }
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let gsi = items::hosts_gsi(crawl_id);
        let index_key = |pk: String, updated: Millis| {
            HashMap::from([
                ("pk".to_owned(), s(pk)),
                ("gsi_pk".to_owned(), s(gsi.clone())),
                ("updated".to_owned(), n(updated)),
            ])
        };
        let mut start = match cursor {
            None => None,
            Some(raw) => {
                let cursor =
                    serde_json::from_str::<Cursor>(&raw).map_err(|_| StoreError::InvalidCursor)?;
                match (cursor.shard, cursor.pk, cursor.updated) {
                    (0, Some(pk), Some(updated)) => Some(index_key(pk, updated)),
                    _ => return Err(StoreError::InvalidCursor),
                }
            }
        };
        let limit = limit.max(1) as usize;
        // One key more than asked for tells whether there is a next page, so the last page
        // has no cursor (as on the other stores).
        let mut keys: Vec<Item> = Vec::new();
        loop {
            let want = i32::try_from(limit + 1 - keys.len()).unwrap_or(i32::MAX);
            let (page, _, next) = self
                .query_page(gsi.clone(), None, Some(want), start, false)
                .await?;
            keys.extend(page);
            match next {
                Some(key) if keys.len() <= limit => start = Some(key),
                _ => break,
            }
        }
        let more = keys.len() > limit;
        keys.truncate(limit);
        let prefix = format!("{crawl_id}#host#");
        let listed = keys
            .iter()
            .map(|key| {
                let pk = key.get("pk").and_then(|v| v.as_s().ok());
                let name = pk.and_then(|pk| pk.strip_prefix(&prefix));
                let updated = key
                    .get("updated")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<Millis>().ok());
                match (pk, name, updated) {
                    (Some(pk), Some(name), Some(updated)) => {
                        Ok((pk.clone(), name.to_owned(), updated))
                    }
                    _ => Err(StoreError::Corrupt {
                        key: pk.cloned().unwrap_or_else(|| gsi.clone()),
                        reason: "a host index entry without a host key".into(),
                    }),
                }
            })
            .collect::<StoreResult<Vec<(String, String, Millis)>>>()?;
        // The status index projects no host fields: read each listed record by its key.
        let mut hosts = Vec::with_capacity(listed.len());
        for chunk in listed.chunks(HOST_READ_PARALLELISM) {
            let reads = chunk
                .iter()
                .map(|(_, name, _)| self.read_host(crawl_id, name, false));
            for host in futures_util::future::join_all(reads).await {
                // A record deleted since the index listed it is simply not there.
                hosts.extend(host?);
            }
        }
        hosts.sort_by(|a, b| a.name.cmp(&b.name));
        let cursor = listed
            .last()
            .filter(|_| more)
            .map(|(pk, _, updated)| {
                serde_json::to_string(&Cursor {
                    shard: 0,
                    pk: Some(pk.clone()),
                    updated: Some(*updated),
                })
            })
            .transpose()
            .map_err(|e| StoreError::Backend {
                operation: "Query",
                message: e.to_string(),
            })?;
        Ok(HostPage { hosts, cursor })
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let mut deleted = 0u64;
        loop {
            // Deleting what the last page returned moves the next page forward.
            let gsi = items::hosts_gsi(crawl_id);
            let (items, _, _) = self.query_page(gsi, None, Some(25), None, false).await?;
            if items.is_empty() {
                return Ok(deleted);
            }
            let keys: Vec<AttributeValue> = items
                .into_iter()
                .filter_map(|mut item| item.remove("pk"))
                .collect();
            deleted += keys.len() as u64;
            self.batch_delete(keys).await?;
        }
    }
}

impl DynamoStore {
    /// One host record by key; `consistent` for a read that a conditional write will follow.
    async fn read_host(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        consistent: bool,
    ) -> StoreResult<Option<Host>> {
        self.calls.record(Call::DynamoGetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(host_pk(crawl_id, name)))
            .consistent_read(consistent)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        out.item.map(items::host_from_item).transpose()
    }

    /// One conditional put: creates the task unless it exists.
    async fn seed_one(
        &self,
        crawl_id: &CrawlId,
        task: &NewTask,
        now: Millis,
    ) -> StoreResult<Seeded> {
        let insert = transition::seed(crawl_id, task, now);
        let item = TaskItem::from_task(&insert.task, self.shards).to_item()?;
        let mut expression = Expression::default();
        let condition = expression.condition(&insert.requires);
        let (names, values) = expression.placeholders();
        self.calls.record(Call::DynamoPutItem);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .set_condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Seeded::Created),
            Err(e) if is_conditional_failure(&e) => Ok(Seeded::AlreadyKnown),
            Err(e) => Err(map_err("PutItem", e)),
        }
    }

    /// Deletes up to 25 items by key, retrying unprocessed ones (bounded).
    async fn batch_delete(&self, keys: Vec<AttributeValue>) -> StoreResult<()> {
        let mut requests = keys
            .into_iter()
            .map(|pk| {
                DeleteRequest::builder()
                    .key("pk", pk)
                    .build()
                    .map(|d| WriteRequest::builder().delete_request(d).build())
                    .map_err(|e| StoreError::Backend {
                        operation: "BatchWriteItem",
                        message: e.to_string(),
                    })
            })
            .collect::<StoreResult<Vec<_>>>()?;
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
        Err(StoreError::Unavailable {
            operation: "BatchWriteItem",
            message: "unprocessed items remain".into(),
        })
    }
}
