//! The domain's transitions as DynamoDB expressions: a `Condition` becomes a condition
//! expression, `Changes` an update expression (the token through `ADD`, so a blind claim needs
//! no read); the crawl record's in `crawl`. Every attribute name goes through a `#name` placeholder: several (`status`,
//! `token`, `fetch`) are reserved words, and AWS, unlike moto, rejects them bare.

mod crawl;

use super::items::{gsi_pk, host_due, keeps_place};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use std::collections::HashMap;
use trawl_core::store::{StoreError, StoreResult};
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::task::{Millis, Status};
use trawl_domain::transition::{Change, Changes, Condition, StaleChange, TokenChange};

type Item = HashMap<String, AttributeValue>;

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn encode<T: Serialize>(value: &T) -> StoreResult<AttributeValue> {
    serde_dynamo::aws_sdk_dynamodb_1::to_attribute_value(value)
        .map_err(|e| StoreError::backend("encode", e.to_string()).caused_by(e))
}

/// An update expression of its SET, REMOVE and ADD parts (empty when all are).
fn clauses(set: Vec<String>, remove: Vec<String>, add: Vec<String>) -> String {
    let clauses: Vec<String> = [("SET", set), ("REMOVE", remove), ("ADD", add)]
        .into_iter()
        .filter(|(_, parts)| !parts.is_empty())
        .map(|(verb, parts)| format!("{verb} {}", parts.join(", ")))
        .collect();
    clauses.join(" ")
}

/// An expression under construction, with its placeholders.
#[derive(Debug, Default)]
pub(super) struct Expression {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expression {
    /// The placeholder of attribute `attr`.
    fn name(&mut self, attr: &str) -> String {
        let placeholder = format!("#{attr}");
        self.names.insert(placeholder.clone(), attr.to_owned());
        placeholder
    }

    /// The placeholder of a value (`key` must be unique within the request).
    fn value(&mut self, key: &str, value: AttributeValue) -> String {
        let placeholder = format!(":{key}");
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// `condition` as a condition expression on a task item; None when it can never hold
    /// (an empty status set), so that no request need be sent.
    pub(super) fn condition(&mut self, condition: &Condition) -> Option<String> {
        Some(match condition {
            Condition::Absent => "attribute_not_exists(pk)".to_owned(),
            Condition::Claimable { now } => {
                let status = self.name("status");
                let lease = self.name("lease_until");
                let next = self.name("next_attempt");
                let now = self.value("c_now", n(now));
                let pending = self.value("c_pending", n(Status::Pending.code()));
                let failed = self.value("c_failed", n(Status::Failed.code()));
                let held = self.value("c_in_progress", n(Status::InProgress.code()));
                let due = self.name("due");
                let succeeded = self.value("c_succeeded", n(Status::Succeeded.code()));
                let gone = self.value("c_gone", n(Status::Gone.code()));
                // A missing time counts as due, as in `transition::claimable`; a succeeded or
                // gone page is due again at its `due` (its next fetch), never without one.
                format!(
                    "attribute_exists(pk) AND ({status} = {pending} \
                     OR ({status} = {failed} AND (attribute_not_exists({next}) OR {next} <= {now})) \
                     OR ({status} = {held} AND (attribute_not_exists({lease}) OR {lease} <= {now})) \
                     OR (({status} = {succeeded} OR {status} = {gone}) AND {due} <= {now}))"
                )
            }
            Condition::Unclaimed { token, now } => {
                let claimable = self.condition(&Condition::Claimable { now: *now })?;
                let name = self.name("token");
                let token = self.value("c_token", n(token));
                format!("{name} = {token} AND {claimable}")
            }
            Condition::Leased { token } => {
                let status = self.name("status");
                let name = self.name("token");
                let token = self.value("c_token", n(token));
                let held = self.value("c_in_progress", n(Status::InProgress.code()));
                format!("{name} = {token} AND {status} = {held}")
            }
            Condition::StatusIn(statuses) => {
                if statuses.is_empty() {
                    return None;
                }
                let status = self.name("status");
                let codes: Vec<String> = statuses
                    .iter()
                    .enumerate()
                    .map(|(i, s)| self.value(&format!("c_status{i}"), n(s.code())))
                    .collect();
                format!("{status} IN ({})", codes.join(", "))
            }
            Condition::Settled { token } => {
                let status = self.name("status");
                let name = self.name("token");
                let token = self.value("c_token", n(token));
                let held = self.value("c_in_progress", n(Status::InProgress.code()));
                format!("attribute_exists(pk) AND {name} = {token} AND {status} <> {held}")
            }
            Condition::Unrecorded { md5 } => {
                let fetch = self.name("fetch");
                let md5_attr = self.name("md5");
                let stale = self.name("stale");
                let md5 = self.value("c_md5", AttributeValue::S(md5.clone()));
                format!(
                    "attribute_exists(pk) \
                     AND (attribute_not_exists({fetch}.{md5_attr}) OR {fetch}.{md5_attr} <> {md5}) \
                     AND NOT contains({stale}, {md5})"
                )
            }
        })
    }

    /// `changes` as an update expression on the task `task_id` of `crawl_id`. A status change
    /// rewrites the status index key too, a fetch record its top-level `next_fetch` copy, and a
    /// change of the due time (`Changes::due`) the host index's `due`.
    pub(super) fn update(
        &mut self,
        changes: &Changes,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        shards: u32,
    ) -> StoreResult<String> {
        let mut set: Vec<String> = Vec::new();
        let mut remove: Vec<String> = Vec::new();
        let mut add: Vec<String> = Vec::new();
        if let Change::Set(status) = changes.status {
            set.push(format!(
                "{} = {}",
                self.name("status"),
                self.value("status", n(status.code()))
            ));
            match gsi_pk(crawl_id, status, task_id.shard(shards)) {
                Some(gsi) => set.push(format!(
                    "{} = {}",
                    self.name("gsi_pk"),
                    self.value("gsi_pk", AttributeValue::S(gsi))
                )),
                None => remove.push(self.name("gsi_pk")),
            }
        }
        if let Change::Set(retries) = changes.retries {
            set.push(format!(
                "{} = {}",
                self.name("retries"),
                self.value("retries", n(retries))
            ));
        }
        if let Change::Set(errors) = &changes.errors {
            // An empty list is not stored (as when the item was written whole).
            if errors.is_empty() {
                remove.push(self.name("errors"));
            } else {
                set.push(format!(
                    "{} = {}",
                    self.name("errors"),
                    self.value("errors", encode(errors)?)
                ));
            }
        }
        self.optional_time(
            &mut set,
            &mut remove,
            "next_attempt",
            &changes.next_attempt_at,
        );
        self.optional_time(
            &mut set,
            &mut remove,
            "lease_until",
            &changes.lease_expires_at,
        );
        if changes.token == TokenChange::Increment {
            add.push(format!(
                "{} {}",
                self.name("token"),
                self.value("one", n(1))
            ));
        }
        if let Change::Set(fetch) = &changes.fetch {
            match fetch {
                Some(record) => set.push(format!(
                    "{} = {}",
                    self.name("fetch"),
                    self.value("fetch", encode(record)?)
                )),
                None => remove.push(self.name("fetch")),
            }
            let next_fetch = fetch.as_ref().and_then(|f| f.next_fetch_at);
            self.optional_time(
                &mut set,
                &mut remove,
                "next_fetch",
                &Change::Set(next_fetch),
            );
        }
        self.optional_time(&mut set, &mut remove, "enqueued", &changes.enqueued_at);
        // The host-index range key follows the task's place (`host_due`); a task the status
        // index lists once done loses it and leaves the (sparse) index; a claimed one keeps its
        // place (`keeps_place`). `hk`, its hash key, was written at seed and stays.
        let due = match (&changes.status, changes.due()) {
            (Change::Set(status), _) if keeps_place(*status) => Change::Keep,
            (Change::Set(status), Change::Set(due)) => Change::Set(host_due(*status, due)),
            (_, due) => due,
        };
        match (&changes.status, due) {
            // A pending task sits its priority's lead earlier (`trawl_domain::priority::due_key`),
            // the lead read from the item by the write itself.
            (Change::Set(Status::Pending), Change::Set(Some(at))) => {
                let due = self.name("due");
                let lead = self.name("lead");
                let at = self.value("due", n(at));
                let zero = self.value("no_lead", n(0));
                set.push(format!("{due} = {at} - if_not_exists({lead}, {zero})"));
            }
            (_, due) => self.optional_time(&mut set, &mut remove, "due", &due),
        }
        if let Change::Set(updated) = changes.updated_at {
            set.push(format!(
                "{} = {}",
                self.name("updated"),
                self.value("updated", n(updated))
            ));
        }
        match &changes.stale {
            StaleChange::Keep => {}
            StaleChange::Add(md5) => {
                let stale = self.name("stale");
                let empty = self.value("empty", AttributeValue::L(Vec::new()));
                let md5s = self.value(
                    "md5s",
                    AttributeValue::L(vec![AttributeValue::S(md5.clone())]),
                );
                set.push(format!(
                    "{stale} = list_append(if_not_exists({stale}, {empty}), {md5s})"
                ));
            }
            StaleChange::Clear => remove.push(self.name("stale")),
        }
        Ok(clauses(set, remove, add))
    }

    fn optional_time(
        &mut self,
        set: &mut Vec<String>,
        remove: &mut Vec<String>,
        attr: &str,
        change: &Change<Option<Millis>>,
    ) {
        self.optional(set, remove, attr, change, |at| n(at));
    }

    /// An optional attribute's change: set to `value` of it, or removed (never a NULL).
    fn optional<T>(
        &mut self,
        set: &mut Vec<String>,
        remove: &mut Vec<String>,
        attr: &str,
        change: &Change<Option<T>>,
        value: impl FnOnce(&T) -> AttributeValue,
    ) {
        match change {
            Change::Keep => {}
            Change::Set(Some(v)) => set.push(format!(
                "{} = {}",
                self.name(attr),
                self.value(attr, value(v))
            )),
            Change::Set(None) => remove.push(self.name(attr)),
        }
    }

    /// Hands the placeholders to an UpdateItem.
    pub(super) fn bind(self, request: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
        let (names, values) = self.placeholders();
        request
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
    }

    /// The placeholders, each map None when empty (DynamoDB refuses empty maps).
    pub(super) fn placeholders(self) -> (Option<HashMap<String, String>>, Option<Item>) {
        (
            (!self.names.is_empty()).then_some(self.names),
            (!self.values.is_empty()).then_some(self.values),
        )
    }
}
