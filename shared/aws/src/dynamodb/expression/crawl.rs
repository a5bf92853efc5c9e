//! The crawl record's rules (`trawl_domain::crawl::transition`) as DynamoDB expressions on a
//! crawl item (`items::CrawlItem`): the condition as a condition expression, the changes as one
//! update expression whose counters are `ADD`s, so that no write needs a read first. A state
//! change moves the crawl's status-index key with it.

use super::{Expression, clauses, encode, n};
use crate::dynamodb::items::{calls_attribute, crawls_gsi};
use crate::dynamodb::task_counts;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::BTreeMap;
use trawl_core::store::StoreResult;
use trawl_domain::crawl::CrawlState;
use trawl_domain::crawl::transition::{CrawlChanges, CrawlCondition, PagesChange};
use trawl_domain::task::Status;
use trawl_domain::transition::Change;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

impl Expression {
    /// `condition` as a condition expression on a crawl item. Every one requires the item to
    /// exist, so that no write creates a crawl.
    pub(crate) fn crawl_condition(&mut self, condition: &CrawlCondition) -> String {
        match condition {
            CrawlCondition::Exists => "attribute_exists(pk)".to_owned(),
            CrawlCondition::Completable {
                generation,
                completer,
            } => {
                let state = self.name("state");
                let by = self.name("completed_by");
                let name = self.name("generation");
                let generation = self.value("c_generation", n(generation));
                let running = self.value("c_running", s(CrawlState::Running.name()));
                let completed = self.value("c_completed", s(CrawlState::Completed.name()));
                let completer = self.value("c_completer", s(completer.as_str()));
                format!(
                    "{name} = {generation} AND ({state} = {running} \
                     OR ({state} = {completed} AND {by} = {completer}))"
                )
            }
            CrawlCondition::Completed => {
                let state = self.name("state");
                let completed = self.value("c_completed", s(CrawlState::Completed.name()));
                format!("{state} = {completed}")
            }
            CrawlCondition::DeliveryFree { holder, now } => {
                // `DeliveryLease::refuses`, negated: no lease, its own, or an expired one.
                let name = self.name("delivery_holder");
                let until = self.name("delivery_until");
                let holder = self.value("c_holder", s(holder.as_str()));
                let now = self.value("c_now", n(now));
                format!(
                    "attribute_exists(pk) AND (attribute_not_exists({name}) \
                     OR {name} = {holder} OR {until} <= {now})"
                )
            }
            CrawlCondition::DeliveryHeldBy { holder } => {
                let name = self.name("delivery_holder");
                let holder = self.value("c_holder", s(holder.as_str()));
                format!("{name} = {holder}")
            }
            CrawlCondition::DeliveringCompleted { holder, generation } => {
                let name = self.name("delivery_holder");
                let state = self.name("state");
                let at = self.name("generation");
                let holder = self.value("c_holder", s(holder.as_str()));
                let completed = self.value("c_completed", s(CrawlState::Completed.name()));
                let generation = self.value("c_generation", n(generation));
                format!("{name} = {holder} AND {state} = {completed} AND {at} = {generation}")
            }
            CrawlCondition::PagesLeft { n: ask, max } => {
                let reserved = self.name("pages_reserved");
                // Negative when more is asked than `max`: then it never holds.
                let limit = i128::from(*max) - i128::from(*ask);
                let limit = self.value("c_limit", n(limit));
                format!("attribute_exists(pk) AND {reserved} <= {limit}")
            }
        }
    }

    /// `changes` as an update expression on a crawl item; None when they change nothing.
    /// `noted` (changes of task counts this process noted, `task_counts`) is added to the
    /// counts; counts set are set less what the crawl's report lanes hold (`lanes`), so that
    /// the item's and the lanes' add up to them.
    pub(crate) fn crawl_update(
        &mut self,
        changes: &CrawlChanges,
        noted: &BTreeMap<Status, i64>,
        lanes: &BTreeMap<Status, i64>,
    ) -> StoreResult<Option<String>> {
        let (set, remove, add) = self.crawl_parts(changes, noted, lanes)?;
        let update = clauses(set, remove, add);
        Ok((!update.is_empty()).then_some(update))
    }

    /// A call report on a report lane (`reports`): the condition and the update. It adds the
    /// report's counts (`changes`, `noted`), sets the reporter's entry (`entry`: attribute and
    /// value) and removes entries seen stale; on condition that the lane exists and the entry
    /// stored does not hold the request (`needle`).
    pub(crate) fn report(
        &mut self,
        changes: &CrawlChanges,
        noted: &BTreeMap<Status, i64>,
        (attribute, entry): (&str, String),
        needle: String,
        stale: &[String],
    ) -> StoreResult<(String, String)> {
        let (mut set, mut remove, add) = self.crawl_parts(changes, noted, &BTreeMap::new())?;
        // Entry names hold ':', which no placeholder may: numbered ones stand for them.
        self.names.insert("#entry".to_owned(), attribute.to_owned());
        let value = self.value("entry", s(entry));
        set.push(format!("#entry = {value}"));
        for (i, name) in stale.iter().enumerate() {
            let placeholder = format!("#stale{i}");
            self.names.insert(placeholder.clone(), name.clone());
            remove.push(placeholder);
        }
        let needle = self.value("needle", s(needle));
        let condition = format!(
            "attribute_exists(pk) AND (attribute_not_exists(#entry) OR NOT contains(#entry, {needle}))"
        );
        Ok((condition, clauses(set, remove, add)))
    }

    fn crawl_parts(
        &mut self,
        changes: &CrawlChanges,
        noted: &BTreeMap<Status, i64>,
        lanes: &BTreeMap<Status, i64>,
    ) -> StoreResult<(Vec<String>, Vec<String>, Vec<String>)> {
        let mut set: Vec<String> = Vec::new();
        let mut remove: Vec<String> = Vec::new();
        let mut add: Vec<String> = Vec::new();
        if let Change::Set(state) = changes.state {
            set.push(format!(
                "{} = {}",
                self.name("state"),
                self.value("state", s(state.name()))
            ));
            set.push(format!(
                "{} = {}",
                self.name("gsi_pk"),
                self.value("gsi_pk", s(crawls_gsi(state)))
            ));
        }
        if changes.generation > 0 {
            add.push(format!(
                "{} {}",
                self.name("generation"),
                self.value("generation", n(changes.generation))
            ));
        }
        self.optional_time(
            &mut set,
            &mut remove,
            "generation_started",
            &changes.generation_started_at,
        );
        let string = |v: &String| s(v.as_str());
        self.optional(
            &mut set,
            &mut remove,
            "completed_by",
            &changes.completed_by,
            string,
        );
        match &changes.delivery {
            Change::Keep => {}
            Change::Set(Some(lease)) => {
                set.push(format!(
                    "{} = {}",
                    self.name("delivery_holder"),
                    self.value("delivery_holder", s(lease.holder.as_str()))
                ));
                set.push(format!(
                    "{} = {}",
                    self.name("delivery_until"),
                    self.value("delivery_until", n(lease.until))
                ));
            }
            Change::Set(None) => {
                remove.push(self.name("delivery_holder"));
                remove.push(self.name("delivery_until"));
            }
        }
        if let Change::Set(config) = &changes.config {
            set.push(format!(
                "{} = {}",
                self.name("config"),
                self.value("config", encode(config)?)
            ));
        }
        self.optional(
            &mut set,
            &mut remove,
            "checkpoint",
            &changes.checkpoint,
            string,
        );
        match &changes.level {
            Change::Keep => {}
            Change::Set(Some(level)) => {
                set.push(format!(
                    "{} = {}",
                    self.name("level_ms"),
                    self.value("level_ms", n(level.ms))
                ));
                set.push(format!(
                    "{} = {}",
                    self.name("level_at"),
                    self.value("level_at", n(level.at))
                ));
            }
            Change::Set(None) => {
                remove.push(self.name("level_ms"));
                remove.push(self.name("level_at"));
            }
        }
        if let Change::Set(updated) = changes.updated_at {
            set.push(format!(
                "{} = {}",
                self.name("updated"),
                self.value("updated", n(updated))
            ));
        }
        let pages = match changes.pages_reserved {
            PagesChange::Keep => None,
            PagesChange::Take(count) => Some(i128::from(count)),
            PagesChange::GiveBack(count) => Some(-i128::from(count)),
        };
        if let Some(pages) = pages {
            add.push(format!(
                "{} {}",
                self.name("pages_reserved"),
                self.value("pages_reserved", n(pages))
            ));
        }
        if changes.reference_misses > 0 {
            add.push(format!(
                "{} {}",
                self.name("reference_misses"),
                self.value("reference_misses", n(changes.reference_misses))
            ));
        }
        // One top-level attribute per call kind (`calls_attribute`), whose names are no
        // placeholder keys: numbered ones stand for them.
        for (i, (&call, &count)) in changes.calls.iter().enumerate() {
            let name = format!("#calls{i}");
            self.names.insert(name.clone(), calls_attribute(call));
            add.push(format!(
                "{name} {}",
                self.value(&format!("calls{i}"), n(count))
            ));
        }
        if let Some(counts) = &changes.task_counts {
            for status in Status::ALL {
                let name = task_counts::attribute(status);
                let count = i64::try_from(counts.get(&status).copied().unwrap_or(0))
                    .unwrap_or(i64::MAX)
                    .saturating_sub(lanes.get(&status).copied().unwrap_or(0));
                set.push(format!(
                    "{} = {}",
                    self.name(&name),
                    self.value(&name, n(count))
                ));
            }
        }
        for (&status, &delta) in noted {
            let name = task_counts::attribute(status);
            add.push(format!(
                "{} {}",
                self.name(&name),
                self.value(&name, n(delta))
            ));
        }
        Ok((set, remove, add))
    }
}
