//! How crawls and tasks are laid out as DynamoDB items (through `serde_dynamo`).
//! `None` fields are skipped, never written as NULL: a NULL attribute exists, and
//! `attribute_not_exists` conditions would then be false.

use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use trawl_core::store::{HostCounts, StoreError, StoreResult, TaskSummary};
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState, DeliveryLease};
use trawl_domain::estimate::Level;
use trawl_domain::host::{HOST_SHARDS, Host, host_shard};
use trawl_domain::roster;
use trawl_domain::task::{ErrorRecord, FetchRecord, Millis, Priority, Status, Task, UserData};

type Item = HashMap<String, AttributeValue>;

pub(super) fn task_pk(crawl_id: &CrawlId, task_id: &TaskId) -> String {
    format!("{crawl_id}#{task_id}")
}

/// The task id a task's key names (`task_pk`).
pub(super) fn task_id_of_pk(crawl_id: &CrawlId, pk: &str) -> Option<TaskId> {
    TaskId::parse(pk.strip_prefix(crawl_id.as_str())?.strip_prefix('#')?)
}

pub(super) fn crawl_pk(crawl_id: &CrawlId) -> String {
    format!("{crawl_id}#crawl")
}

pub(super) fn status_gsi(crawl_id: &CrawlId, status: Status, shard: u32) -> String {
    format!("{crawl_id}#{}#{shard}", status.code())
}

/// Whether the status index lists tasks in `status`: failed, gone and ignored only. A URL
/// passes through pending on every fetch and is succeeded after most, and an index key written
/// there would be rewritten at each step (a recrawl's finish rewrites the range key: two index
/// writes); those tasks are all in their host's due index instead (`host_due`), where
/// `DynamoStore::query` walks the crawl's hosts for them.
pub(super) fn listed(status: Status) -> bool {
    !matches!(
        status,
        Status::Pending | Status::InProgress | Status::Succeeded
    )
}

/// The host-index `due` of a succeeded page that is never fetched again: after every due time,
/// so that it stays in its host's list (where queries of succeeded tasks find it) without ever
/// being due work (`DynamoStore::due_tasks` reads below it).
pub(super) const NEVER_DUE: Millis = Millis::MAX;

/// A task's host-index `due`: its place (`Task::due_key`: its due time, a pending task's moved by
/// its priority); for a succeeded page never fetched
/// again `NEVER_DUE`; none (out of the sparse index) for the statuses the status index lists.
pub(super) fn host_due(status: Status, due: Option<Millis>) -> Option<Millis> {
    match (status, due) {
        (Status::Succeeded, None) => Some(NEVER_DUE),
        (_, due) => due,
    }
}

/// The status-index key of a task in `status`; None when the status is not listed.
pub(super) fn gsi_pk(crawl_id: &CrawlId, status: Status, shard: u32) -> Option<String> {
    listed(status).then(|| status_gsi(crawl_id, status, shard))
}

/// Whether a write that takes a task to `status` leaves its host-index `due` as it was: a
/// claim keeps the task at its place in its host's due list (an index write saved on every
/// fetch: the index projects no attribute a claim rewrites into its key), where the host's next
/// turn finds it claimable once its lease expires (`Task::due_at`), should its holder die.
pub(super) fn keeps_place(status: Status) -> bool {
    status == Status::InProgress
}

pub(super) fn crawls_gsi(state: CrawlState) -> String {
    format!("crawls#{}", state.name())
}

/// The host-index key of a task: `{crawl_id}#{host}` (`Task::host`), written once at seed.
pub(super) fn host_key(crawl_id: &CrawlId, host: &str) -> String {
    format!("{crawl_id}#{host}")
}

/// The lane-index key of a task created in a lane: `{crawl_id}#{host}#{lane}`, written once
/// at seed.
pub(super) fn lane_key(crawl_id: &CrawlId, host: &str, lane: &str) -> String {
    format!("{crawl_id}#{host}#{lane}")
}

/// A host record's key. Never a task's (32 hex digits) nor a crawl's (`crawl`).
pub(super) fn host_pk(crawl_id: &CrawlId, name: &str) -> String {
    format!("{crawl_id}#host#{name}")
}

/// Where a crawl's host records sit in the status index (all under one key, `updated = 0`).
/// The item of one shard of a crawl's host counts (`HostStore::host_counts`): attributes
/// `hosts` and `open`, added to by the host writes that change them; shard 0's also carries
/// `counted`, written with the crawl, which says the crawl's counts were kept from its start.
pub(super) fn host_counts_pk(crawl_id: &CrawlId, shard: u32) -> String {
    format!("{crawl_id}#hostcounts#{shard}")
}

/// The crawl's host counts from its shards' items (absent ones count 0); None without the
/// `counted` mark.
pub(super) fn host_counts_of(
    crawl_id: &CrawlId,
    found: &[Item],
) -> StoreResult<Option<HostCounts>> {
    let first = host_counts_pk(crawl_id, 0);
    let counted = found.iter().any(|item| {
        item.get("pk").and_then(|v| v.as_s().ok()) == Some(&first) && item.contains_key("counted")
    });
    if !counted {
        return Ok(None);
    }
    let mut counts = HostCounts::default();
    for item in found {
        let number = |name: &str| -> StoreResult<i64> {
            item.get(name).map_or(Ok(0), |v| {
                v.as_n()
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| corrupt(item, format!("{name} is not a count")))
            })
        };
        counts.add(HostCounts {
            hosts: number("hosts")?,
            open: number("open")?,
        });
    }
    Ok(Some(counts))
}

/// The status-index key of a crawl's host records of one shard (`host::host_shard`), or, for
/// `shard == HOST_SHARDS`, the one key every host was filed under before the list was sharded
/// (such a record moves to its shard's key at its next write). Listings read them all, in this
/// order ([`HOST_KEYS`]).
pub(super) fn hosts_gsi(crawl_id: &CrawlId, shard: u32) -> String {
    if shard < HOST_SHARDS {
        format!("{crawl_id}#hosts#{shard}")
    } else {
        format!("{crawl_id}#hosts")
    }
}

/// The keys of a crawl's host list: its shards, then the unsharded key of older records.
pub(super) const HOST_KEYS: u32 = HOST_SHARDS + 1;

/// The host of a host record's key, under `crawl_id`.
pub(super) fn host_of_pk<'a>(crawl_id: &CrawlId, pk: &'a str) -> Option<&'a str> {
    pk.strip_prefix(crawl_id.as_str())?.strip_prefix("#host#")
}

fn corrupt(item: &Item, e: impl std::fmt::Display) -> StoreError {
    let key = item
        .get("pk")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    StoreError::Corrupt {
        key,
        reason: e.to_string(),
    }
}

fn encode_item<T: Serialize>(value: &T) -> StoreResult<Item> {
    serde_dynamo::aws_sdk_dynamodb_1::to_item(value)
        .map_err(|e| StoreError::backend("encode", e.to_string()).caused_by(e))
}

/// A task item.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct TaskItem {
    pk: String,
    /// The status-index key (`gsi_pk`): absent while the task is not listed (`listed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gsi_pk: Option<String>,
    updated: Millis,
    crawl_id: CrawlId,
    task_id: TaskId,
    url: String,
    status: Status,
    created: Millis,
    depth: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<TaskId>,
    #[serde(default)]
    token: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until: Option<Millis>,
    #[serde(default)]
    retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_attempt: Option<Millis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    enqueued: Option<Millis>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    errors: Vec<ErrorRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fetch: Option<FetchRecord>,
    /// Copy of `fetch.next_fetch_at` at top level, so the status index can project it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_fetch: Option<Millis>,
    /// md5s of objects left by rejected writers, for the next finisher to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    stale: Vec<String>,
    /// The host-index hash key (`host_key`): written at seed, never changed nor removed.
    /// Empty on a rostered task (`rk` instead: its `due` is then in no index), and on items
    /// written before the index existed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    hk: String,
    /// The roster-index hash key (`host_key`) of a rostered task (`roster::rostered`), and its
    /// range key, its creation time: written at seed, never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rpos: Option<Millis>,
    /// The host-index range key: `host_due`. Absent once the task is ignored, or gone and not
    /// checked again, which takes it out of the (sparse) index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due: Option<Millis>,
    /// The user's data (`Task::data`), written at seed and never updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<UserData>,
    /// The task's priority as the lead it gives a pending task in its host's due list
    /// (`Priority::lead_ms`), written at seed and never updated; absent for priority 0 (no byte
    /// more for a task without one). Kept as the lead, not the level, so that an update that
    /// makes a task pending places it without reading it: `due = :now - if_not_exists(lead, 0)`
    /// (an update expression adds and subtracts, but does not multiply).
    #[serde(default, skip_serializing_if = "is_zero")]
    lead: Millis,
    /// The task's lane (`Task::lane`), written at seed and never updated; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lane: Option<String>,
    /// The lane-index hash key (`lane_key`), written at seed with the lane, never changed: the
    /// lane index shares the host index's range key, `due`, so the writes that move a task in
    /// its host's due list move it in its lane's too, and take it out of both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lk: Option<String>,
}

fn is_zero(n: &Millis) -> bool {
    *n == 0
}

impl TaskItem {
    /// The item of `task` (a new one: later states are written by update expressions).
    pub(super) fn from_task(task: &Task, shards: u32) -> Self {
        let rostered = roster::rostered(task.priority, task.lane.as_deref());
        Self {
            pk: task_pk(&task.crawl_id, &task.task_id),
            gsi_pk: gsi_pk(&task.crawl_id, task.status, task.task_id.shard(shards)),
            updated: task.updated_at,
            crawl_id: task.crawl_id.clone(),
            task_id: task.task_id.clone(),
            url: task.url.clone(),
            status: task.status,
            created: task.created_at,
            depth: task.depth,
            parent: task.parent.clone(),
            token: task.token,
            lease_until: task.lease_expires_at,
            retries: task.retries,
            next_attempt: task.next_attempt_at,
            enqueued: task.enqueued_at,
            errors: task.errors.clone(),
            fetch: task.fetch.clone(),
            next_fetch: task.fetch.as_ref().and_then(|f| f.next_fetch_at),
            stale: task.stale.clone(),
            hk: if rostered {
                String::new()
            } else {
                host_key(&task.crawl_id, &task.host())
            },
            rk: rostered.then(|| host_key(&task.crawl_id, &task.host())),
            rpos: rostered.then_some(task.created_at),
            due: host_due(task.status, task.due_key()),
            data: task.data.clone(),
            lead: task.priority.lead_ms(),
            lane: task.lane.clone(),
            lk: task
                .lane
                .as_deref()
                .map(|lane| lane_key(&task.crawl_id, &task.host(), lane)),
        }
    }

    pub(super) fn to_item(&self) -> StoreResult<Item> {
        encode_item(self)
    }

    pub(super) fn from_item(item: Item) -> StoreResult<Self> {
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone()).map_err(|e| corrupt(&item, e))
    }

    pub(super) fn into_task(self) -> StoreResult<Task> {
        let priority = Priority::of_lead(self.lead).ok_or_else(|| StoreError::Corrupt {
            key: self.pk.clone(),
            reason: format!("lead {} is no priority's", self.lead),
        })?;
        Ok(Task {
            lane: self.lane,
            crawl_id: self.crawl_id,
            task_id: self.task_id,
            url: self.url,
            status: self.status,
            created_at: self.created,
            updated_at: self.updated,
            depth: self.depth,
            parent: self.parent,
            token: self.token,
            lease_expires_at: self.lease_until,
            retries: self.retries,
            next_attempt_at: self.next_attempt,
            enqueued_at: self.enqueued,
            errors: self.errors,
            fetch: self.fetch,
            stale: self.stale,
            data: self.data,
            priority,
        })
    }
}

/// What the status index projects of a task.
#[derive(Debug, Deserialize)]
struct SummaryItem {
    crawl_id: CrawlId,
    task_id: TaskId,
    url: String,
    status: Status,
    updated: Millis,
    #[serde(default)]
    depth: u32,
    #[serde(default)]
    retries: u32,
    lease_until: Option<Millis>,
    next_attempt: Option<Millis>,
    next_fetch: Option<Millis>,
    enqueued: Option<Millis>,
    /// The host-index key (projected there as the index's range key; absent from the status
    /// index's items): what tells a pending task's priority (`Priority::of_place`), the lead
    /// itself not being projected.
    due: Option<Millis>,
    /// Present on a whole item only.
    #[serde(default)]
    lead: Millis,
}

pub(super) fn summary_from_item(item: Item) -> StoreResult<TaskSummary> {
    let s: SummaryItem =
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone()).map_err(|e| corrupt(&item, e))?;
    Ok(TaskSummary {
        crawl_id: s.crawl_id,
        task_id: s.task_id,
        url: s.url,
        status: s.status,
        updated_at: s.updated,
        depth: s.depth,
        retries: s.retries,
        lease_expires_at: s.lease_until,
        next_attempt_at: s.next_attempt,
        next_fetch_at: s.next_fetch,
        enqueued_at: s.enqueued,
        priority: match s.due {
            Some(place) => Priority::of_place(s.status, s.updated, place),
            None => Priority::placing(s.status, Priority::of_lead(s.lead).unwrap_or_default()),
        },
    })
}

/// Names a crawl's count of one call kind: a top-level number attribute per kind, because
/// DynamoDB's `ADD` works on top-level attributes only (never inside a map).
pub(super) fn calls_attribute(call: Call) -> String {
    format!("{CALLS_PREFIX}{}", call.name())
}

const CALLS_PREFIX: &str = "calls:";

/// A crawl item's call counts. Kinds this version does not know (written by a newer one) are
/// skipped rather than failing every read of the crawl.
pub(super) fn calls_of(item: &Item) -> StoreResult<CallTally> {
    let mut calls = CallTally::new();
    for (name, value) in item {
        let Some(call) = name.strip_prefix(CALLS_PREFIX).and_then(Call::from_name) else {
            continue;
        };
        let count = value
            .as_n()
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| corrupt(item, format!("{name} is not a count")))?;
        calls.insert(call, count);
    }
    Ok(calls)
}

/// A host record as an item: the `Host` fields (through `serde_dynamo`: `None` is never a
/// NULL), its key, and `gsi_pk = {crawl_id}#hosts#{shard}` with `updated = 0`, which files the
/// crawl's hosts under `HOST_SHARDS` status-index keys (`hosts_gsi`), so that they are listed
/// without a scan and created at up to that many times one partition's rate. The index does not
/// project the host's own fields: a listing reads each record by its key. `version` is the one
/// the write stores (the writer's + 1). `seeded` is the record's own count
/// (`Host::seeded_by_writes`), its offers `offered` beside it: a write of the record sets every
/// attribute but `offered`, which only offers add to. A few hundred bytes: one write unit.
pub(super) fn host_item(crawl_id: &CrawlId, host: &Host, version: u64) -> StoreResult<Item> {
    let stored = Host {
        version,
        seeded: host.seeded_by_writes(),
        ..host.clone()
    };
    let mut item = encode_item(&stored)?;
    item.insert(
        "pk".into(),
        AttributeValue::S(host_pk(crawl_id, &host.name)),
    );
    let shard = host_shard(&host.name);
    item.insert(
        "gsi_pk".into(),
        AttributeValue::S(hosts_gsi(crawl_id, shard)),
    );
    item.insert("updated".into(), AttributeValue::N("0".into()));
    item.insert("crawl_id".into(), AttributeValue::S(crawl_id.to_string()));
    Ok(item)
}

/// The host record of a host item (the key attributes are ignored): `seeded` counts its offers.
pub(super) fn host_from_item(item: Item) -> StoreResult<Host> {
    let host: Host =
        serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone()).map_err(|e| corrupt(&item, e))?;
    let offered = host.offered;
    Ok(host.with_offers(offered))
}

/// The attribute offers add to, which no write of a whole host record sets.
pub(super) const HOST_OFFERED: &str = "offered";
/// The id of the last offer applied to a host (`add_seeded`), beside its count.
pub(super) const HOST_LAST_OFFER: &str = "last_offer";

/// The host attributes that are absent when their value is None (`serde_dynamo` never writes a
/// NULL): a write of the record removes those it does not set.
pub(super) const HOST_OPTIONAL: [&str; 6] = [
    "snoozed_until",
    "given_up",
    "turn_until",
    "claimer",
    "queued_for",
    "wake_at",
];

/// A crawl item. Its call counts are attributes of their own (`calls_attribute`), outside serde.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct CrawlItem {
    pk: String,
    gsi_pk: String,
    updated: Millis,
    crawl_id: CrawlId,
    config: CrawlConfig,
    state: CrawlState,
    created: Millis,
    #[serde(default)]
    generation: u64,
    #[serde(default)]
    pub(super) pages_reserved: u64,
    #[serde(skip)]
    calls: CallTally,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
    #[serde(default)]
    reference_misses: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    completed_by: Option<String>,
    /// The delivery lease (`DeliveryLease`), as two attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delivery_holder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delivery_until: Option<Millis>,
    /// The estimator's water level (`Level`), as two attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    level_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    level_at: Option<Millis>,
    /// `Crawl::generation_started_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation_started: Option<Millis>,
}

impl CrawlItem {
    pub(super) fn from_crawl(c: &Crawl) -> Self {
        Self {
            pk: crawl_pk(&c.id),
            gsi_pk: crawls_gsi(c.state),
            updated: c.updated_at,
            crawl_id: c.id.clone(),
            config: c.config.clone(),
            state: c.state,
            created: c.created_at,
            generation: c.generation,
            pages_reserved: c.pages_reserved,
            calls: c.calls.clone(),
            checkpoint: c.checkpoint.clone(),
            reference_misses: c.reference_misses,
            completed_by: c.completed_by.clone(),
            delivery_holder: c.delivery.as_ref().map(|l| l.holder.clone()),
            delivery_until: c.delivery.as_ref().map(|l| l.until),
            level_ms: c.level.map(|l| l.ms),
            level_at: c.level.map(|l| l.at),
            generation_started: c.generation_started_at,
        }
    }

    pub(super) fn to_item(&self) -> StoreResult<Item> {
        let mut item = encode_item(self)?;
        for (&call, count) in &self.calls {
            item.insert(calls_attribute(call), AttributeValue::N(count.to_string()));
        }
        Ok(item)
    }

    pub(super) fn from_item(item: Item) -> StoreResult<Self> {
        let calls = calls_of(&item)?;
        let crawl: Self = serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone())
            .map_err(|e| corrupt(&item, e))?;
        Ok(Self { calls, ..crawl })
    }

    pub(super) fn into_crawl(self) -> Crawl {
        Crawl {
            id: self.crawl_id,
            config: self.config,
            state: self.state,
            created_at: self.created,
            updated_at: self.updated,
            generation: self.generation,
            pages_reserved: self.pages_reserved,
            calls: self.calls,
            checkpoint: self.checkpoint,
            reference_misses: self.reference_misses,
            completed_by: self.completed_by,
            delivery: match (self.delivery_holder, self.delivery_until) {
                (Some(holder), Some(until)) => Some(DeliveryLease { holder, until }),
                _ => None,
            },
            level: match (self.level_ms, self.level_at) {
                (Some(ms), Some(at)) => Some(Level { ms, at }),
                _ => None,
            },
            generation_started_at: self.generation_started,
        }
    }
}

/// The crawl id of a crawl item returned by the index.
pub(super) fn crawl_id_of(item: &Item) -> StoreResult<CrawlId> {
    let raw = item
        .get("crawl_id")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| corrupt(item, "no crawl_id"))?;
    CrawlId::parse(raw).map_err(|e| corrupt(item, e))
}
