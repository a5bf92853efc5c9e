//! Task records: one item each (`items::TaskItem`); a transition is one conditional
//! UpdateItem built by `expression` from the domain's update.

use super::errors::{is_conditional_failure, map_err};
use super::expression::Expression;
use super::items::{self, TaskItem};
use super::schema::{LANE_INDEX, ROSTER_INDEX};
use super::{BATCH_GET_KEYS, Cursor, DynamoStore, HOST_INDEX, SEED_PARALLELISM, n, s, task_counts};
use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::future::join_all;
use std::collections::{HashMap, HashSet};
use trawl_core::store::{
    Applied, InTurnClaims, Part, RosterPage, Seeded, StatusCounts, StoreError, StoreResult,
    TaskPage, TaskQuery, TaskRecords, TaskSummary,
};
use trawl_domain::calls::Call;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::roster::Place;
use trawl_domain::task::{Millis, Status, Task};
use trawl_domain::transition::{Change, Insert, Update};

impl DynamoStore {
    /// The task counts kept on the crawl item and its report lanes (`task_counts`, `reports`:
    /// one BatchGetItem), with this process's notes not yet reported; None for a crawl created before them (or gone). A count below zero (a drift, healed at the next delivery) reads as 0.
    async fn kept_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<StatusCounts>> {
        let Some((item, lanes)) = self.crawl_with_lanes(crawl_id).await? else {
            return Ok(None);
        };
        if !item.contains_key(task_counts::COUNTED) {
            return Ok(None);
        }
        let noted = self.noted.peek(crawl_id);
        let count = |status: Status| {
            let kept = item
                .get(&task_counts::attribute(status))
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0);
            let n = kept
                + lanes.tasks.get(&status).copied().unwrap_or(0)
                + noted.get(&status).copied().unwrap_or(0);
            n.max(0) as u64
        };
        Ok(Some(
            Status::ALL.into_iter().map(|st| (st, count(st))).collect(),
        ))
    }
}

impl TaskRecords for DynamoStore {
    /// A turn's claim is one consistent read: the lease is the token as read, and the finish,
    /// fail or release under it is the claim.
    const IN_TURN_CLAIMS: InTurnClaims = InTurnClaims::AsRead;
    const ROSTERS: bool = true;

    async fn insert(&self, tasks: &[Insert]) -> StoreResult<Vec<Seeded>> {
        // Bounded parallelism, results in input order. A task repeated in the batch is put
        // once (its first time): concurrent puts of one key would race for which one
        // "created" it.
        let mut first = HashMap::new();
        let unique: Vec<&Insert> = tasks
            .iter()
            .enumerate()
            .filter(|(i, t)| *first.entry(&t.task.task_id).or_insert(*i) == *i)
            .map(|(_, t)| t)
            .collect();
        let mut created = HashMap::new();
        for chunk in unique.chunks(SEED_PARALLELISM) {
            let puts = chunk.iter().map(|insert| self.insert_one(insert));
            for (insert, outcome) in chunk.iter().zip(join_all(puts).await) {
                let outcome = outcome?;
                if outcome == Seeded::Created {
                    let task = &insert.task;
                    self.noted.created(&task.crawl_id, task.status, 1);
                }
                created.insert(&insert.task.task_id, outcome);
            }
        }
        Ok(tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let id = &t.task.task_id;
                match created.get(id) {
                    Some(&seeded) if first.get(id) == Some(&i) => seeded,
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
        self.meter_get(out.item.as_ref(), true);
        out.item
            .map(|item| TaskItem::from_item(item)?.into_task())
            .transpose()
    }

    /// BatchGetItem of the keys, 100 a call, eventually consistent: half a read unit a key,
    /// where a put of a known task would be a refused write unit.
    async fn known(&self, crawl_id: &CrawlId, ids: &[TaskId]) -> StoreResult<Vec<bool>> {
        let mut unique: Vec<String> = ids.iter().map(|id| items::task_pk(crawl_id, id)).collect();
        unique.sort();
        unique.dedup();
        let mut found = HashSet::new();
        for chunk in unique.chunks(BATCH_GET_KEYS) {
            // Eventually consistent: half a read unit a key (a projection would not make it less).
            for item in self.batch_get(chunk.to_vec(), false).await? {
                if let Some(AttributeValue::S(pk)) = item.get("pk") {
                    found.insert(pk.clone());
                }
            }
        }
        Ok(ids
            .iter()
            .map(|id| found.contains(&items::task_pk(crawl_id, id)))
            .collect())
    }

    /// One conditional UpdateItem. It returns the item as it was (`ALL_OLD`, which consumes
    /// no capacity), and a refused one the item it was checked against, read from the failed
    /// condition itself.
    async fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> StoreResult<Applied<Task>> {
        let mut expression = Expression::default();
        let Some(condition) = expression.condition(&update.requires) else {
            return Ok(Applied::Refused { current: None });
        };
        let changes = expression.update(&update.changes, crawl_id, task_id, self.shards)?;
        let request = self.update_task(crawl_id, task_id);
        let applied = self
            .apply_update(
                request,
                expression,
                (condition, Some(changes)),
                false,
                |item| TaskItem::from_item(item)?.into_task(),
            )
            .await?;
        if let (Applied::Done { before }, Change::Set(status)) = (&applied, &update.changes.status)
        {
            self.noted.moved(crawl_id, before.status, *status);
        }
        Ok(applied)
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        if !items::listed(query.status) {
            return self.walk_hosts(query).await;
        }
        let mut cursor = match &query.cursor {
            Some(raw) => {
                serde_json::from_str::<Cursor>(raw).map_err(|_| StoreError::InvalidCursor)?
            }
            // A part holds the status shards `k` with `part.holds(k)`.
            None => Cursor {
                shard: query.part.index,
                pk: None,
                updated: None,
            },
        };
        if query.part.index >= self.shards {
            // More parts than shards: this one holds none.
            return Ok(TaskPage {
                tasks: Vec::new(),
                cursor: None,
            });
        }
        if cursor.shard >= self.shards || !query.part.holds(cursor.shard) {
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
                        shard: cursor.shard + query.part.of.max(1),
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
            .map_err(|e| StoreError::backend("Query", e.to_string()).caused_by(e))?;
        Ok(TaskPage { tasks, cursor })
    }

    /// One Query of the roster index (keys only, from `after`), then the tasks it names in one
    /// BatchGetItem, consistent (a read unit a task): a turn's claim takes a task as read there,
    /// where it would read it again (`InTurnClaims::AsRead`).
    async fn roster(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        after: Option<&Place>,
        limit: u32,
    ) -> StoreResult<RosterPage> {
        let key = items::host_key(crawl_id, host);
        let limit = limit.clamp(1, BATCH_GET_KEYS as u32);
        let start = after.map(|place| {
            HashMap::from([
                ("pk".to_owned(), Self::task_key(crawl_id, &place.task_id)),
                ("rk".to_owned(), s(key.clone())),
                ("rpos".to_owned(), n(place.at)),
            ])
        });
        self.calls.record(Call::DynamoQuery);
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(ROSTER_INDEX)
            .key_condition_expression("#rk = :rk")
            .expression_attribute_names("#rk", "rk")
            .expression_attribute_values(":rk", s(key))
            .scan_index_forward(true)
            .limit(limit as i32)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| map_err("Query", e))?;
        let at_end = out.last_evaluated_key.is_none();
        let entries = out.items.unwrap_or_default();
        self.meter_query_reads(&entries, out.scanned_count);
        let mut places = Vec::new();
        for item in entries {
            let place = match (item.get("rpos"), item.get("pk")) {
                (Some(AttributeValue::N(at)), Some(AttributeValue::S(pk))) => at
                    .parse::<Millis>()
                    .ok()
                    .zip(items::task_id_of_pk(crawl_id, pk)),
                _ => None,
            };
            let Some((at, task_id)) = place else {
                return Err(StoreError::Corrupt {
                    key: format!("{item:?}"),
                    reason: "roster entry without its place".into(),
                });
            };
            places.push(Place { at, task_id });
        }
        let ids: Vec<TaskId> = places.iter().map(|p| p.task_id.clone()).collect();
        let mut tasks = self.batch_get_tasks(crawl_id, &ids).await?;
        // A task deleted since the index listed it (a purge under way) is no entry.
        let entries = places
            .into_iter()
            .filter_map(|place| {
                let task = tasks.remove(&place.task_id)?;
                Some((place, task))
            })
            .collect();
        Ok(RosterPage { entries, at_end })
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let key = items::host_key(crawl_id, host);
        self.due_in(HOST_INDEX, "hk", key, limit).await
    }

    async fn due_in_lane(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        lane: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let key = items::lane_key(crawl_id, host, lane);
        self.due_in(LANE_INDEX, "lk", key, limit).await
    }

    /// The crawl item's counts (`task_counts`: one read) for a crawl created with them, else
    /// a count of each status: a small query per status shard, and for the statuses the status
    /// index does not list a walk of the hosts' due lists.
    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        if let Some(counts) = self.kept_counts(crawl_id).await? {
            return Ok(counts);
        }
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
        // The statuses the status index does not list, in one walk of the hosts' due lists,
        // page after page (a deleted task's key still places the next page). A listed task
        // met there is left to its status index below, which would otherwise count it twice.
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                crawl_id: crawl_id.clone(),
                status: Status::Pending,
                updated_before: None,
                limit: 25,
                cursor,
                part: Part::WHOLE,
            };
            let page = self.walk(&query, None).await?;
            let keys: Vec<AttributeValue> = page
                .tasks
                .iter()
                .filter(|t| !items::listed(t.status))
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
        for status in Status::ALL.into_iter().filter(|s| items::listed(*s)) {
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
    /// The tasks of `ids` (at most `BATCH_GET_KEYS`), by id, in one consistent BatchGetItem (and
    /// its unprocessed keys again); a task that does not exist is absent.
    async fn batch_get_tasks(
        &self,
        crawl_id: &CrawlId,
        ids: &[TaskId],
    ) -> StoreResult<HashMap<TaskId, Task>> {
        let mut found = HashMap::with_capacity(ids.len());
        if ids.is_empty() {
            return Ok(found);
        }
        let keys: Vec<String> = ids.iter().map(|id| items::task_pk(crawl_id, id)).collect();
        for item in self.batch_get(keys, true).await? {
            let task = TaskItem::from_item(item)?.into_task()?;
            found.insert(task.task_id.clone(), task);
        }
        Ok(found)
    }

    /// One conditional put: creates the task unless it exists.
    async fn insert_one(&self, insert: &Insert) -> StoreResult<Seeded> {
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
}

impl DynamoStore {
    /// The due list under `key` of `index` (the host index, or a lane's): tasks with work left,
    /// soonest due first, at most `limit`.
    async fn due_in(
        &self,
        index: &str,
        hash: &str,
        key: String,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let limit = limit.max(1) as usize;
        let mut tasks = Vec::with_capacity(limit.min(1000));
        let mut start = None;
        // A page can come back short (1 MB): go on until `limit` or the end of the list.
        loop {
            self.calls.record(Call::DynamoQuery);
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(index)
                // Succeeded pages never fetched again sit after every due time: not work.
                .key_condition_expression("#hk = :hk AND #due < :never")
                .expression_attribute_names("#hk", hash)
                .expression_attribute_values(":hk", s(key.clone()))
                .expression_attribute_names("#due", "due")
                .expression_attribute_values(":never", n(items::NEVER_DUE))
                .scan_index_forward(true)
                .limit(i32::try_from(limit - tasks.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| map_err("Query", e))?;
            let read = out.items.unwrap_or_default();
            self.meter_query_reads(&read, out.scanned_count);
            for item in read {
                tasks.push(items::summary_from_item(item)?);
            }
            match out.last_evaluated_key {
                Some(key) if tasks.len() < limit => start = Some(key),
                _ => break,
            }
        }
        // The index orders by place only; ties in task id order, as the other stores.
        tasks.sort_by(|a, b| (a.due_key(), &a.task_id).cmp(&(b.due_key(), &b.task_id)));
        Ok(tasks)
    }
}
