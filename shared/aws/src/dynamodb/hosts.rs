//! Host records: one item each (`items::host_item`), written whole over the version read, but
//! for its offers (`offered`), which only atomic adds change and no write of the record sets.

use super::errors::{conditional_item, is_conditional_failure, is_refused_transaction, map_err};
use super::items::{self, HOST_KEYS, host_pk};
use super::{BATCH_GET_KEYS, Cursor, DynamoStore, HOST_READ_PARALLELISM, Item, n, s};
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, TransactWriteItem, Update};
use std::collections::{HashMap, HashSet};
use trawl_core::store::{HostCounts, HostPage, HostStore, StoreError, StoreResult};
use trawl_domain::calls::Call;
use trawl_domain::canonical::CrawlId;
use trawl_domain::host::{HOST_SHARDS, Host, host_shard};
use trawl_domain::request::RequestId;
use trawl_domain::task::Millis;

impl HostStore for DynamoStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        self.read_host(crawl_id, name, true).await
    }

    /// One UpdateItem setting every attribute of the record but its offers (which it leaves
    /// as they stand), over the version read; with a change of the crawl's host counts, the
    /// same update and the counts' in one TransactWriteItems.
    async fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        let update = self.host_update(crawl_id, host)?;
        if !counted.is_zero() {
            return self.put_host_counted(crawl_id, host, update, counted).await;
        }
        let request = self
            .client
            .update_item()
            .table_name(update.table_name)
            .set_key(Some(update.key))
            .update_expression(update.update_expression)
            .set_condition_expression(update.condition_expression)
            .set_expression_attribute_names(update.expression_attribute_names)
            .set_expression_attribute_values(update.expression_attribute_values);
        self.calls.record(Call::DynamoUpdateItem);
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(map_err("UpdateItem", e)),
        }
    }

    /// Reads the crawl's host counts: one BatchGetItem of its shards' items. None when the first
    /// shard's item does not say the crawl was created with counts.
    async fn host_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<HostCounts>> {
        let keys = (0..HOST_SHARDS)
            .map(|shard| items::host_counts_pk(crawl_id, shard))
            .collect();
        let found = self.batch_get(keys, true).await?;
        items::host_counts_of(crawl_id, &found)
    }

    /// One UpdateItem (1 write unit) that adds `n` and keeps the request's id beside the count
    /// (`last_offer`), on condition that the id is not the last one applied: a retry of a
    /// request whose answer was lost finds its own id and changes nothing (the record as it
    /// stands is the answer). Exact against its own retries; an offer of another request landing
    /// between a lost answer and its retry lets the retry add again, an over-count that no task
    /// waits on: the host's next turn that finds no work makes its counts agree
    /// (`Host::hand_back`), after one more look once the count settled.
    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> StoreResult<Option<Host>> {
        let send = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(items::host_pk(crawl_id, name)))
            .update_expression("ADD #offered :n SET #last = :request")
            .condition_expression(
                "attribute_exists(#pk) AND (attribute_not_exists(#last) OR #last <> :request)",
            )
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#offered", items::HOST_OFFERED)
            .expression_attribute_names("#last", items::HOST_LAST_OFFER)
            .expression_attribute_values(":n", self::n(n))
            .expression_attribute_values(":request", s(request.token()))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(OnFailure::AllOld);
        self.calls.record(Call::DynamoUpdateItem);
        match send.send().await {
            Ok(out) => out.attributes.map(items::host_from_item).transpose(),
            // No record (None), or this request's add already applied (the record as it is).
            Err(e) if is_conditional_failure(&e) => {
                conditional_item(&e).map(items::host_from_item).transpose()
            }
            Err(e) => Err(map_err("UpdateItem", e)),
        }
    }

    /// The host list's keys one after the other (`items::HOST_KEYS`), one more key than asked
    /// for read ahead so that the last page has no cursor: a full listing costs at least one
    /// Query per key; then the records listed, 100 a BatchGetItem (a page of 100 hosts is a few
    /// Queries and one BatchGetItem, not 100 GetItems).
    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let index_key = |shard: u32, pk: String, updated: Millis| {
            HashMap::from([
                ("pk".to_owned(), s(pk)),
                ("gsi_pk".to_owned(), s(items::hosts_gsi(crawl_id, shard))),
                ("updated".to_owned(), n(updated)),
            ])
        };
        let (mut shard, mut start) = match cursor {
            None => (0, None),
            Some(raw) => {
                let cursor =
                    serde_json::from_str::<Cursor>(&raw).map_err(|_| StoreError::InvalidCursor)?;
                match (cursor.pk, cursor.updated) {
                    (Some(pk), Some(updated)) if cursor.shard < HOST_KEYS => {
                        (cursor.shard, Some(index_key(cursor.shard, pk, updated)))
                    }
                    _ => return Err(StoreError::InvalidCursor),
                }
            }
        };
        let limit = limit.max(1) as usize;
        let mut keys: Vec<(u32, Item)> = Vec::new();
        while shard < HOST_KEYS && keys.len() <= limit {
            let want = i32::try_from(limit + 1 - keys.len()).unwrap_or(i32::MAX);
            let gsi = items::hosts_gsi(crawl_id, shard);
            let (page, _, next) = self
                .query_page(gsi, None, Some(want), start.take(), false)
                .await?;
            keys.extend(page.into_iter().map(|key| (shard, key)));
            match next {
                Some(key) => start = Some(key),
                None => shard += 1,
            }
        }
        let more = keys.len() > limit;
        keys.truncate(limit);
        let listed = keys
            .iter()
            .map(|(shard, key)| {
                let pk = key.get("pk").and_then(|v| v.as_s().ok());
                let name = pk.and_then(|pk| items::host_of_pk(crawl_id, pk));
                let updated = key
                    .get("updated")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<Millis>().ok());
                match (pk, name, updated) {
                    (Some(pk), Some(name), Some(updated)) => {
                        Ok((*shard, pk.clone(), name.to_owned(), updated))
                    }
                    _ => Err(StoreError::Corrupt {
                        key: pk
                            .cloned()
                            .unwrap_or_else(|| items::hosts_gsi(crawl_id, *shard)),
                        reason: "a host index entry without a host key".into(),
                    }),
                }
            })
            .collect::<StoreResult<Vec<(u32, String, String, Millis)>>>()?;
        // The index projects no host fields: read the listed records by key, a BatchGetItem
        // of 100 (a few at once for a longer page), in the listing's order. A record deleted
        // since the index listed it is simply not there; one listed twice (a record moving to
        // another shard while the index catches up) is read once: BatchGetItem refuses a key
        // twice.
        let mut pks: Vec<String> = listed.iter().map(|(_, pk, _, _)| pk.clone()).collect();
        let mut seen = HashSet::new();
        pks.retain(|pk| seen.insert(pk.clone()));
        let batches: Vec<Vec<String>> = pks.chunks(BATCH_GET_KEYS).map(<[_]>::to_vec).collect();
        let mut by_pk: HashMap<String, Item> = HashMap::with_capacity(pks.len());
        for group in batches.chunks(HOST_READ_PARALLELISM) {
            let reads = group.iter().map(|keys| self.batch_get(keys.clone(), false));
            for items in futures_util::future::join_all(reads).await {
                by_pk.extend(
                    items?
                        .into_iter()
                        .filter_map(|item| Some((item.get("pk")?.as_s().ok()?.clone(), item))),
                );
            }
        }
        let hosts = pks
            .iter()
            .filter_map(|pk| by_pk.remove(pk))
            .map(items::host_from_item)
            .collect::<StoreResult<Vec<Host>>>()?;
        let cursor = listed
            .last()
            .filter(|_| more)
            .map(|(shard, pk, _, updated)| {
                serde_json::to_string(&Cursor {
                    shard: *shard,
                    pk: Some(pk.clone()),
                    updated: Some(*updated),
                })
            })
            .transpose()
            .map_err(|e| StoreError::backend("Query", e.to_string()).caused_by(e))?;
        Ok(HostPage { hosts, cursor })
    }

    /// On the first shard's counts item (one strongly consistent GetItem).
    async fn host_scan(&self, crawl_id: &CrawlId) -> StoreResult<Option<String>> {
        self.calls.record(Call::DynamoGetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(items::host_counts_pk(crawl_id, 0)))
            .projection_expression("#scan")
            .expression_attribute_names("#scan", "scan")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        // Priced on what the projection returned: the whole item is billed (a small one).
        self.meter_get(out.item.as_ref(), true);
        Ok(out
            .item
            .and_then(|mut item| item.remove("scan"))
            .and_then(|v| v.as_s().ok().cloned()))
    }

    async fn set_host_scan(&self, crawl_id: &CrawlId, at: Option<&str>) -> StoreResult<()> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(items::host_counts_pk(crawl_id, 0)))
            .expression_attribute_names("#scan", "scan");
        let request = match at {
            Some(at) => request
                .update_expression("SET #scan = :at")
                .expression_attribute_values(":at", s(at)),
            None => request.update_expression("REMOVE #scan"),
        };
        self.calls.record(Call::DynamoUpdateItem);
        request.send().await.map_err(|e| map_err("UpdateItem", e))?;
        Ok(())
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let counts = (0..HOST_SHARDS)
            .map(|shard| s(items::host_counts_pk(crawl_id, shard)))
            .collect::<Vec<_>>();
        for chunk in counts.chunks(25) {
            self.batch_delete(chunk.to_vec()).await?;
        }
        // The list's keys at once, each page by page.
        let shards = (0..HOST_KEYS).map(|shard| self.delete_host_key(crawl_id, shard));
        let mut deleted = 0u64;
        for one in futures_util::future::join_all(shards).await {
            deleted += one?;
        }
        Ok(deleted)
    }
}

impl DynamoStore {
    /// Deletes the host records filed under one key of the crawl's host list.
    async fn delete_host_key(&self, crawl_id: &CrawlId, shard: u32) -> StoreResult<u64> {
        let mut deleted = 0u64;
        loop {
            // Deleting what the last page returned moves the next page forward.
            let gsi = items::hosts_gsi(crawl_id, shard);
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

    /// A host write that changes the crawl's host counts: the record's conditional put and the
    /// add to its shard's counts in one TransactWriteItems (both or neither; twice a write's
    /// units each, paid only when a host goes open or idle, or is created).
    /// The update that writes `host` over the version read (see `put_host`).
    fn host_update(&self, crawl_id: &CrawlId, host: &Host) -> StoreResult<Update> {
        let mut item = items::host_item(crawl_id, host, host.version + 1)?;
        item.remove("pk");
        item.remove(items::HOST_OFFERED);
        let mut update = Update::builder()
            .table_name(&self.table)
            .key("pk", s(host_pk(crawl_id, &host.name)))
            .expression_attribute_names("#pk", "pk");
        let mut sets = Vec::with_capacity(item.len());
        for (i, (name, value)) in item.into_iter().enumerate() {
            sets.push(format!("#a{i} = :a{i}"));
            update = update
                .expression_attribute_names(format!("#a{i}"), name)
                .expression_attribute_values(format!(":a{i}"), value);
        }
        let mut expression = format!("SET {}", sets.join(", "));
        let absent: Vec<&str> = items::HOST_OPTIONAL
            .iter()
            .copied()
            .filter(|name| !optional_is_set(host, name))
            .collect();
        if !absent.is_empty() {
            let removes: Vec<String> = (0..absent.len()).map(|i| format!("#r{i}")).collect();
            expression.push_str(&format!(" REMOVE {}", removes.join(", ")));
            for (i, name) in absent.iter().enumerate() {
                update = update.expression_attribute_names(format!("#r{i}"), *name);
            }
        }
        let update = update.update_expression(expression);
        let update = if host.version == 0 {
            update.condition_expression("attribute_not_exists(#pk)")
        } else if host.waits_for_offers() {
            // Written idle: an offer made since the read (which woke nobody) refuses it.
            update
                .condition_expression(
                    "attribute_exists(#pk) AND #v = :v \
                     AND (attribute_not_exists(#offered) OR #offered = :offered)",
                )
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(host.version))
                .expression_attribute_names("#offered", items::HOST_OFFERED)
                .expression_attribute_values(":offered", n(host.offered))
        } else {
            // attribute_exists too: a record deleted meanwhile is not silently recreated.
            update
                .condition_expression("attribute_exists(#pk) AND #v = :v")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(host.version))
        };
        update
            .build()
            .map_err(|e| StoreError::backend("UpdateItem", e.to_string()).caused_by(e))
    }

    /// The host's update and its shard's host counts, in one transaction.
    async fn put_host_counted(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        update: Update,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        let add = Update::builder()
            .table_name(&self.table)
            .key(
                "pk",
                s(items::host_counts_pk(crawl_id, host_shard(&host.name))),
            )
            .update_expression("ADD #hosts :hosts, #open :open")
            .expression_attribute_names("#hosts", "hosts")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":hosts", n(counted.hosts))
            .expression_attribute_values(":open", n(counted.open))
            .build()
            .map_err(|e| StoreError::backend("TransactWriteItems", e.to_string()).caused_by(e))?;
        self.calls.record(Call::DynamoTransactWriteItems);
        let result = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().update(add).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if is_refused_transaction(&e) => Ok(false),
            Err(e) => Err(map_err("TransactWriteItems", e)),
        }
    }

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
        self.meter_get(out.item.as_ref(), consistent);
        out.item.map(items::host_from_item).transpose()
    }
}

/// Whether the optional attribute `name` (`items::HOST_OPTIONAL`) has a value in `host`.
fn optional_is_set(host: &Host, name: &str) -> bool {
    match name {
        "snoozed_until" => host.snoozed_until.is_some(),
        "given_up" => host.given_up.is_some(),
        "turn_until" => host.turn_until.is_some(),
        "claimer" => host.claimer.is_some(),
        "queued_for" => host.queued_for.is_some(),
        "wake_at" => host.wake_at.is_some(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::host::HostPolicy;

    #[test]
    fn the_optional_attributes_are_exactly_those_a_host_may_leave_out() {
        let bare = Host::new("h", &HostPolicy::default(), 0);
        let full = Host {
            snoozed_until: Some(1),
            given_up: Some("why".into()),
            turn_until: Some(2),
            claimer: Some(3),
            queued_for: Some(4),
            wake_at: Some(5),
            ..bare.clone()
        };
        let crawl = CrawlId::parse("c").unwrap();
        let names = |h: &Host| -> std::collections::BTreeSet<String> {
            items::host_item(&crawl, h, 1)
                .unwrap()
                .into_keys()
                .collect()
        };
        let optional: std::collections::BTreeSet<String> =
            names(&full).difference(&names(&bare)).cloned().collect();
        let listed = items::HOST_OPTIONAL.iter().map(|s| s.to_string()).collect();
        assert_eq!(optional, listed);
        assert!(
            items::HOST_OPTIONAL
                .iter()
                .all(|n| optional_is_set(&full, n))
        );
        assert!(
            !items::HOST_OPTIONAL
                .iter()
                .any(|n| optional_is_set(&bare, n))
        );
    }
}
