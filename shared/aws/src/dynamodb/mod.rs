//! The status store on DynamoDB, through the real SDK.
//!
//! One table, partition key `pk` only:
//! - a task is `pk = {crawl_id}#{task_id}`;
//! - a crawl is `pk = {crawl_id}#crawl` (a task id is 32 hex digits, so they never collide).
//!
//! The GSI `status-index` (hash `gsi_pk`, range `updated`) answers every "which tasks are in
//! status S" question without a scan: a task's `gsi_pk` is `{crawl_id}#{status code}#{shard}`,
//! the shard a stable hash of the task id (spreading one crawl's hot status over partitions);
//! a crawl's is `crawls#{state}`. Every status change rewrites `gsi_pk` in the same write.

mod errors;
mod items;
pub mod schema;

use self::errors::{applied, conditional_item, is_conditional_failure, map_err};
use self::items::{CrawlItem, TaskItem, crawl_pk, gsi_pk, task_pk};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, ReturnValue, Select, WriteRequest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use trawl_core::store::{
    ClaimOutcome, ClaimRejection, CrawlStore, FailOutcome, FinishOutcome, Seeded, StatusCounts,
    StoreError, StoreResult, TaskPage, TaskQuery, TaskStore,
};
use trawl_domain::calls::{Call, CallCounts};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::retry::{Failure, FailureVerdict, RetryPolicy};
use trawl_domain::task::{
    ErrorKind, ErrorRecord, FetchRecord, Lease, Millis, NewTask, Status, Task, push_error,
};

pub use self::schema::{STATUS_INDEX, create_table};

/// Conditional puts in flight at once while seeding.
const SEED_PARALLELISM: usize = 16;

/// The DynamoDB adapter. Cheap to clone (the SDK client is).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    shards: u32,
    calls: Arc<CallCounts>,
}

type Item = HashMap<String, AttributeValue>;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn encode<T: Serialize>(value: &T) -> StoreResult<AttributeValue> {
    serde_dynamo::aws_sdk_dynamodb_1::to_attribute_value(value).map_err(|e| StoreError::Backend {
        operation: "encode",
        message: e.to_string(),
    })
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
        }
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    fn gsi(&self, crawl_id: &CrawlId, task_id: &TaskId, status: Status) -> AttributeValue {
        s(gsi_pk(crawl_id, status, task_id.shard(self.shards)))
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

    /// An UpdateItem on a task, fenced on the lease: token unchanged and still `in_progress`.
    fn fenced_update(&self, lease: &Lease) -> UpdateItemFluentBuilder {
        self.update_task(&lease.crawl_id, &lease.task_id)
            .condition_expression("#tok = :token AND #s = :in_progress")
            .expression_attribute_names("#tok", "token")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":token", n(lease.token))
            .expression_attribute_values(":in_progress", n(Status::InProgress.code()))
            .return_values_on_condition_check_failure(OnFailure::AllOld)
    }

    async fn query_page(
        &self,
        gsi: String,
        updated_before: Option<Millis>,
        limit: Option<i32>,
        start: Option<Item>,
        count_only: bool,
    ) -> StoreResult<(Vec<Item>, i64, Option<Item>)> {
        let mut key_condition = "gsi_pk = :g".to_owned();
        let mut req = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(STATUS_INDEX)
            .expression_attribute_values(":g", s(gsi))
            .set_exclusive_start_key(start)
            .set_limit(limit);
        if let Some(before) = updated_before {
            key_condition.push_str(" AND updated <= :before");
            req = req.expression_attribute_values(":before", n(before));
        }
        if count_only {
            req = req.select(Select::Count);
        }
        self.calls.record(Call::DynamoQuery);
        let out = req
            .key_condition_expression(key_condition)
            .send()
            .await
            .map_err(|e| map_err("Query", e))?;
        let count = i64::from(out.count());
        Ok((out.items.unwrap_or_default(), count, out.last_evaluated_key))
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
        now: Millis,
    ) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_crawl(id)
            .update_expression("SET #st = :completed, gsi_pk = :g, updated = :now")
            .condition_expression("#st = :running AND generation = :gen")
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
        // Optimistic: ask for everything; when the condition says too few are left, ask for
        // what the failed condition reports as left. Bounded: contention only shrinks the ask.
        let mut ask = wanted.min(max);
        for _ in 0..8 {
            if ask == 0 {
                return Ok(0);
            }
            self.calls.record(Call::DynamoUpdateItem);
            let result = self
                .update_crawl(id)
                .update_expression("ADD pages_reserved :ask")
                .condition_expression("attribute_exists(pk) AND pages_reserved <= :limit")
                .expression_attribute_values(":ask", n(ask))
                .expression_attribute_values(":limit", n(max - ask))
                .return_values_on_condition_check_failure(OnFailure::AllOld)
                .send()
                .await;
            match result {
                Ok(_) => return Ok(ask),
                Err(e) => match conditional_item(&e) {
                    Some(item) => {
                        let reserved = CrawlItem::from_item(item)?.pages_reserved;
                        ask = ask.min(max.saturating_sub(reserved));
                    }
                    None if is_conditional_failure(&e) => {
                        return Err(StoreError::NoSuchCrawl(id.clone()));
                    }
                    None => return Err(map_err("UpdateItem", e)),
                },
            }
        }
        Ok(0)
    }

    async fn release_pages(&self, id: &CrawlId, count: u64) -> StoreResult<()> {
        if count == 0 {
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

    async fn delete_crawl(&self, id: &CrawlId) -> StoreResult<()> {
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

impl TaskStore for DynamoStore {
    async fn seed(
        &self,
        crawl_id: &CrawlId,
        tasks: &[NewTask],
        now: Millis,
    ) -> StoreResult<Vec<Seeded>> {
        // Bounded parallelism, results in input order.
        let mut results = Vec::with_capacity(tasks.len());
        for chunk in tasks.chunks(SEED_PARALLELISM) {
            let mut puts = Vec::with_capacity(chunk.len());
            for task in chunk {
                puts.push(self.seed_one(crawl_id, task, now));
            }
            for outcome in futures_util::future::join_all(puts).await {
                results.push(outcome?);
            }
        }
        Ok(results)
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
        let expires_at = now + lease_ms as Millis;
        self.calls.record(Call::DynamoUpdateItem);
        let result = self.update_task(crawl_id, task_id)
            .update_expression(
                "SET #s = :in_progress, gsi_pk = :g, updated = :now, lease_until = :exp ADD #tok :one",
            )
            .condition_expression(
                "attribute_exists(pk) AND (#s = :pending \
                 OR (#s = :failed AND next_attempt <= :now) \
                 OR (#s = :in_progress AND lease_until <= :now))",
            )
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#tok", "token")
            .expression_attribute_values(":in_progress", n(Status::InProgress.code()))
            .expression_attribute_values(":pending", n(Status::Pending.code()))
            .expression_attribute_values(":failed", n(Status::Failed.code()))
            .expression_attribute_values(":g", self.gsi(crawl_id, task_id, Status::InProgress))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":exp", n(expires_at))
            .expression_attribute_values(":one", n(1))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(OnFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let task = TaskItem::from_item(out.attributes.unwrap_or_default())?.into_task()?;
                let lease = Lease {
                    crawl_id: crawl_id.clone(),
                    task_id: task_id.clone(),
                    token: task.token,
                    expires_at,
                    retries: task.retries,
                    errors: task.errors.clone(),
                };
                Ok(ClaimOutcome::Claimed {
                    task: Box::new(task),
                    lease,
                })
            }
            Err(e) => match conditional_item(&e) {
                Some(item) => {
                    let current = TaskItem::from_item(item)?.into_task()?;
                    Ok(ClaimOutcome::Rejected(rejection_reason(&current)))
                }
                None if is_conditional_failure(&e) => {
                    Ok(ClaimOutcome::Rejected(ClaimRejection::Missing))
                }
                None => Err(map_err("UpdateItem", e)),
            },
        }
    }

    async fn finish(
        &self,
        lease: &Lease,
        record: &FetchRecord,
        now: Millis,
    ) -> StoreResult<FinishOutcome> {
        let mut update =
            "SET #s = :succeeded, gsi_pk = :g, updated = :now, #f = :f, retries = :zero".to_owned();
        let mut req = self
            .fenced_update(lease)
            .expression_attribute_names("#f", "fetch")
            .expression_attribute_values(":succeeded", n(Status::Succeeded.code()))
            .expression_attribute_values(
                ":g",
                self.gsi(&lease.crawl_id, &lease.task_id, Status::Succeeded),
            )
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":f", encode(record)?)
            .expression_attribute_values(":zero", n(0));
        let mut remove = vec!["lease_until", "next_attempt", "stale"];
        match record.next_fetch_at {
            Some(next) => {
                update.push_str(", next_fetch = :nf");
                req = req.expression_attribute_values(":nf", n(next));
            }
            None => remove.push("next_fetch"),
        }
        update.push_str(" REMOVE ");
        update.push_str(&remove.join(", "));
        self.calls.record(Call::DynamoUpdateItem);
        let result = req
            .update_expression(update)
            .return_values(ReturnValue::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let old = TaskItem::from_item(out.attributes.unwrap_or_default())?;
                Ok(FinishOutcome::Finished {
                    replaced: old.fetch,
                    stale: old.stale,
                })
            }
            Err(e) => rejected_current(e).map(|current| FinishOutcome::Rejected { current }),
        }
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &Failure,
        policy: &RetryPolicy,
        now: Millis,
    ) -> StoreResult<FailOutcome> {
        let mut errors = lease.errors.clone();
        push_error(
            &mut errors,
            ErrorRecord::new(failure.kind, &failure.message, now),
        );
        let verdict = policy.verdict(failure, lease.retries, now);
        let status = match verdict {
            FailureVerdict::Retry { .. } => Status::Failed,
            FailureVerdict::GiveUp if failure.kind == ErrorKind::NotFound => Status::Gone,
            FailureVerdict::GiveUp => Status::Ignored,
        };
        let mut req = self
            .fenced_update(lease)
            .expression_attribute_values(":st", n(status.code()))
            .expression_attribute_values(":g", self.gsi(&lease.crawl_id, &lease.task_id, status))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":errs", encode(&errors)?);
        let update = match verdict {
            FailureVerdict::Retry { next_attempt_at } => {
                req = req
                    .expression_attribute_values(":r", n(lease.retries + 1))
                    .expression_attribute_values(":na", n(next_attempt_at));
                "SET #s = :st, gsi_pk = :g, updated = :now, errors = :errs, retries = :r, \
                 next_attempt = :na REMOVE lease_until"
            }
            FailureVerdict::GiveUp => {
                "SET #s = :st, gsi_pk = :g, updated = :now, errors = :errs \
                 REMOVE lease_until, next_attempt"
            }
        };
        self.calls.record(Call::DynamoUpdateItem);
        match req.update_expression(update).send().await {
            Ok(_) => Ok(match verdict {
                FailureVerdict::Retry { next_attempt_at } => {
                    FailOutcome::Retrying { next_attempt_at }
                }
                FailureVerdict::GiveUp => FailOutcome::GaveUp { status },
            }),
            Err(e) => rejected_current(e).map(|_| FailOutcome::Rejected),
        }
    }

    async fn release(&self, lease: &Lease, now: Millis) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .fenced_update(lease)
            .update_expression("SET #s = :pending, gsi_pk = :g, updated = :now REMOVE lease_until")
            .expression_attribute_values(":pending", n(Status::Pending.code()))
            .expression_attribute_values(
                ":g",
                self.gsi(&lease.crawl_id, &lease.task_id, Status::Pending),
            )
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => rejected_current(e).map(|_| false),
        }
    }

    async fn add_stale(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        md5: &str,
    ) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_task(crawl_id, task_id)
            .update_expression("SET stale = list_append(if_not_exists(stale, :empty), :md5s)")
            .condition_expression(
                "attribute_exists(pk) AND (attribute_not_exists(#f.md5) OR #f.md5 <> :md5)",
            )
            .expression_attribute_names("#f", "fetch")
            .expression_attribute_values(":empty", AttributeValue::L(Vec::new()))
            .expression_attribute_values(":md5s", AttributeValue::L(vec![s(md5)]))
            .expression_attribute_values(":md5", s(md5))
            .send()
            .await;
        applied(result)
    }

    async fn reschedule(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        from: &[Status],
        now: Millis,
    ) -> StoreResult<bool> {
        if from.is_empty() {
            return Ok(false);
        }
        let placeholders: Vec<String> = (0..from.len()).map(|i| format!(":from{i}")).collect();
        let mut req = self
            .update_task(crawl_id, task_id)
            .update_expression(
                "SET #s = :pending, gsi_pk = :g, updated = :now, retries = :zero \
                 REMOVE lease_until, next_attempt",
            )
            .condition_expression(format!("#s IN ({})", placeholders.join(", ")))
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":pending", n(Status::Pending.code()))
            .expression_attribute_values(":g", self.gsi(crawl_id, task_id, Status::Pending))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":zero", n(0));
        for (placeholder, status) in placeholders.iter().zip(from) {
            req = req.expression_attribute_values(placeholder, n(status.code()));
        }
        self.calls.record(Call::DynamoUpdateItem);
        applied(req.send().await)
    }

    async fn mark_enqueued(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        status: Status,
        now: Millis,
    ) -> StoreResult<bool> {
        self.calls.record(Call::DynamoUpdateItem);
        let result = self
            .update_task(crawl_id, task_id)
            .update_expression("SET enqueued = :now, updated = :now")
            .condition_expression("#s = :st")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":st", n(status.code()))
            .expression_attribute_values(":now", n(now))
            .send()
            .await;
        applied(result)
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
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

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        let mut counts = StatusCounts::new();
        for status in Status::ALL {
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

impl DynamoStore {
    /// One conditional put: creates the task unless it exists.
    async fn seed_one(
        &self,
        crawl_id: &CrawlId,
        task: &NewTask,
        now: Millis,
    ) -> StoreResult<Seeded> {
        let item = TaskItem::new(crawl_id, task, self.shards, now).to_item()?;
        self.calls.record(Call::DynamoPutItem);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
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

/// Why a task could not be claimed, from the item the failed condition returned.
fn rejection_reason(current: &Task) -> ClaimRejection {
    match current.status {
        Status::InProgress => ClaimRejection::Leased {
            until: current.lease_expires_at.unwrap_or_default(),
        },
        Status::Failed => ClaimRejection::NotDue {
            at: current.next_attempt_at.unwrap_or_default(),
        },
        status => ClaimRejection::Done(status),
    }
}

/// A fenced write that failed: Ok(current task) when the condition failed, Err otherwise.
fn rejected_current(
    e: aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::update_item::UpdateItemError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> StoreResult<Option<Task>> {
    match conditional_item(&e) {
        Some(item) => Ok(Some(TaskItem::from_item(item)?.into_task()?)),
        None if is_conditional_failure(&e) => Ok(None),
        None => Err(map_err("UpdateItem", e)),
    }
}
