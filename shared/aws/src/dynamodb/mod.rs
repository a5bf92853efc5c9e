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
mod errors;
mod expression;
mod hosts;
mod items;
pub mod schema;
mod tasks;

use self::errors::{applied, conditional_item, is_conditional_failure, map_err};
use self::items::{CrawlItem, crawl_pk, host_pk, task_pk};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, ReturnValue, Select, WriteRequest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use trawl_core::store::budget::{PageBudget, Taken};
use trawl_core::store::{CrawlStore, StoreError, StoreResult, TaskPage, TaskQuery};
use trawl_domain::calls::{Call, CallCounts, CallTally};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState};
use trawl_domain::task::{Millis, Status};

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

impl CrawlStore for DynamoStore {
    async fn create_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        let item = CrawlItem::from_crawl(crawl).to_item()?;
        self.calls.record(Call::DynamoPutItem);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(OnFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok((crawl.clone(), true)),
            Err(e) => match conditional_item(&e) {
                Some(existing) => Ok((CrawlItem::from_item(existing)?.into_crawl(), false)),
                None => Err(map_err("PutItem", e)),
            },
        }
    }

    async fn get_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        self.calls.record(Call::DynamoGetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        out.item
            .map(|item| CrawlItem::from_item(item).map(CrawlItem::into_crawl))
            .transpose()
    }

    async fn list_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        let states = match state {
            Some(state) => vec![state],
            None => vec![CrawlState::Running, CrawlState::Completed],
        };
        let mut crawls = Vec::new();
        for state in states {
            let mut start = None;
            loop {
                let (items, _, next) = self
                    .query_page(items::crawls_gsi(state), None, None, start, false)
                    .await?;
                for item in items {
                    // The index projects only some attributes: read the crawl itself.
                    let id = items::crawl_id_of(&item)?;
                    if let Some(crawl) = self.get_crawl(&id).await? {
                        crawls.push(crawl);
                    }
                }
                match next {
                    Some(key) => start = Some(key),
                    None => break,
                }
            }
        }
        Ok(crawls)
    }

    async fn complete_crawl(
        &self,
        id: &CrawlId,
        generation: u64,
        completer: &str,
        now: Millis,
    ) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        // The SDK's own retry of a write applied while its answer was lost meets the second
        // branch: the same completer, so still the caller's change.
        let result = self
            .update_crawl(id)
            .update_expression(
                "SET #st = :completed, gsi_pk = :g, updated = :now, completed_by = :by",
            )
            .condition_expression(
                "generation = :gen AND (#st = :running OR (#st = :completed AND completed_by = :by))",
            )
            .expression_attribute_values(":by", s(completer))
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":completed", s(CrawlState::Completed.name()))
            .expression_attribute_values(":running", s(CrawlState::Running.name()))
            .expression_attribute_values(":g", s(items::crawls_gsi(CrawlState::Completed)))
            .expression_attribute_values(":gen", n(generation))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(result)
    }

    async fn update_config(
        &self,
        id: &CrawlId,
        config: &CrawlConfig,
        now: Millis,
    ) -> StoreResult<bool> {
        let config = serde_dynamo::aws_sdk_dynamodb_1::to_attribute_value(config).map_err(|e| {
            StoreError::Backend {
                operation: "UpdateItem",
                message: e.to_string(),
            }
        })?;
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_crawl(id)
            .update_expression("SET config = :config, updated = :now")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":config", config)
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(result)
    }

    async fn set_checkpoint(&self, id: &CrawlId, checkpoint: Option<&str>) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let update = self
            .update_crawl(id)
            .condition_expression("attribute_exists(pk)");
        let update = match checkpoint {
            Some(value) => update
                .update_expression("SET checkpoint = :c")
                .expression_attribute_values(":c", s(value)),
            None => update.update_expression("REMOVE checkpoint"),
        };
        applied(update.send().await)
    }

    async fn add_reference_misses(&self, id: &CrawlId, misses: u64) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let update = self
            .update_crawl(id)
            .condition_expression("attribute_exists(pk)")
            .update_expression("ADD reference_misses :n")
            .expression_attribute_values(":n", n(misses));
        applied(update.send().await)
    }

    async fn claim_delivery(
        &self,
        id: &CrawlId,
        holder: &str,
        until: Millis,
        now: Millis,
    ) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        // `DeliveryLease::refuses`, as a condition: no lease, its own, or an expired one.
        let result = self
            .update_crawl(id)
            .update_expression("SET delivery_holder = :h, delivery_until = :until")
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(delivery_holder) \
                 OR delivery_holder = :h OR delivery_until <= :now)",
            )
            .expression_attribute_values(":h", s(holder))
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(result)
    }

    async fn release_delivery(&self, id: &CrawlId, holder: &str) -> StoreResult<()> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_crawl(id)
            .update_expression("REMOVE delivery_holder, delivery_until")
            .condition_expression("delivery_holder = :h")
            .expression_attribute_values(":h", s(holder))
            .send()
            .await;
        // Refused: the lease was taken over after it expired, or the crawl is gone.
        applied(result).map(|_| ())
    }

    async fn reopen_crawl(&self, id: &CrawlId, now: Millis) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_crawl(id)
            .update_expression(
                "SET #st = :running, gsi_pk = :g, updated = :now ADD generation :one",
            )
            .condition_expression("#st = :completed")
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":completed", s(CrawlState::Completed.name()))
            .expression_attribute_values(":running", s(CrawlState::Running.name()))
            .expression_attribute_values(":g", s(items::crawls_gsi(CrawlState::Running)))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(result)
    }

    async fn reserve_pages(&self, id: &CrawlId, wanted: u64, max: u64) -> StoreResult<u64> {
        self.budget
            .reserve(id, wanted, max, |ask| self.take_pages(id, ask, max))
            .await
    }

    async fn release_pages(&self, id: &CrawlId, count: u64) -> StoreResult<()> {
        if count == 0 || self.budget.release(id, count) {
            return Ok(());
        }
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_crawl(id)
            .update_expression("ADD pages_reserved :minus")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":minus", n(-(count as i64)))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if is_conditional_failure(&e) => Err(StoreError::NoSuchCrawl(id.clone())),
            Err(e) => Err(map_err("UpdateItem", e)),
        }
    }

    async fn add_calls(&self, id: &CrawlId, share: &CallTally) -> StoreResult<CallTally> {
        // This UpdateItem reports itself: it is in the share it adds.
        self.calls.record_reported(Call::DynamoUpdateItem);
        let mut share = share.clone();
        *share.entry(Call::DynamoUpdateItem).or_default() += 1;
        let mut update = self
            .update_crawl(id)
            .condition_expression("attribute_exists(pk)")
            .return_values(ReturnValue::AllNew);
        let mut adds = Vec::with_capacity(share.len());
        for (i, (&call, &count)) in share.iter().enumerate() {
            update = update
                .expression_attribute_names(format!("#c{i}"), items::calls_attribute(call))
                .expression_attribute_values(format!(":c{i}"), n(count));
            adds.push(format!("#c{i} :c{i}"));
        }
        let result = update
            .update_expression(format!("ADD {}", adds.join(", ")))
            .send()
            .await;
        match result {
            Ok(out) => items::calls_of(&out.attributes.unwrap_or_default()),
            // The crawl is gone: its calls, this one included, go with it.
            Err(e) if is_conditional_failure(&e) => Err(StoreError::NoSuchCrawl(id.clone())),
            Err(e) => {
                // Not added: this call goes with the next report.
                self.calls
                    .restore_unreported(&CallTally::from([(Call::DynamoUpdateItem, 1)]));
                Err(map_err("UpdateItem", e))
            }
        }
    }

    async fn delete_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        self.budget.forget(id);
        self.calls.record(Call::DynamoDeleteItem);
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .send()
            .await
            .map_err(|e| map_err("DeleteItem", e))?;
        Ok(())
    }
}

impl DynamoStore {
    /// Raises the crawl's `pages_reserved` by up to `ask`, never past `max`: one conditional
    /// add, optimistic — when the condition says too few are left, it asks again for what the
    /// failed condition reports as left. Bounded: contention only shrinks the ask.
    async fn take_pages(&self, id: &CrawlId, ask: u64, max: u64) -> StoreResult<Taken> {
        let mut ask = ask.min(max);
        let mut reserved = max;
        for _ in 0..8 {
            if ask == 0 {
                break;
            }
            self.calls.record(Call::DynamoUpdateItem);
            let result = self
                .update_crawl(id)
                .update_expression("ADD pages_reserved :ask")
                .condition_expression("attribute_exists(pk) AND pages_reserved <= :limit")
                .expression_attribute_values(":ask", n(ask))
                .expression_attribute_values(":limit", n(max - ask))
                .return_values(ReturnValue::UpdatedNew)
                .return_values_on_condition_check_failure(OnFailure::AllOld)
                .send()
                .await;
            match result {
                Ok(out) => {
                    let after = out
                        .attributes
                        .as_ref()
                        .and_then(|a| a.get("pages_reserved"))
                        .and_then(|v| v.as_n().ok())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(max);
                    return Ok(Taken {
                        granted: ask,
                        reserved: after,
                    });
                }
                Err(e) => match conditional_item(&e) {
                    Some(item) => {
                        reserved = CrawlItem::from_item(item)?.pages_reserved;
                        ask = ask.min(max.saturating_sub(reserved));
                    }
                    None if is_conditional_failure(&e) => {
                        return Err(StoreError::NoSuchCrawl(id.clone()));
                    }
                    None => return Err(map_err("UpdateItem", e)),
                },
            }
        }
        Ok(Taken {
            granted: 0,
            reserved,
        })
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
