//! Host records: one item each (`items::host_item`), written whole over the version read, but
//! for its offers (`offered`), which only atomic adds change and no write of the record sets.

use super::errors::{is_conditional_failure, map_err};
use super::items::{self, host_pk};
use super::{Cursor, DynamoStore, HOST_READ_PARALLELISM, Item, n, s};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use std::collections::HashMap;
use trawl_core::store::{HostPage, HostStore, StoreError, StoreResult};
use trawl_domain::calls::Call;
use trawl_domain::canonical::CrawlId;
use trawl_domain::host::Host;
use trawl_domain::task::Millis;

impl HostStore for DynamoStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        self.read_host(crawl_id, name, true).await
    }

    /// One UpdateItem setting every attribute of the record but its offers (which it leaves
    /// as they stand), over the version read.
    async fn put_host(&self, crawl_id: &CrawlId, host: &Host) -> StoreResult<bool> {
        let mut item = items::host_item(crawl_id, host, host.version + 1)?;
        item.remove("pk");
        item.remove(items::HOST_OFFERED);
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(host_pk(crawl_id, &host.name)))
            .expression_attribute_names("#pk", "pk");
        let mut sets = Vec::with_capacity(item.len());
        for (i, (name, value)) in item.into_iter().enumerate() {
            sets.push(format!("#a{i} = :a{i}"));
            request = request
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
                request = request.expression_attribute_names(format!("#r{i}"), *name);
            }
        }
        let request = request.update_expression(expression);
        let request = if host.version == 0 {
            request.condition_expression("attribute_not_exists(#pk)")
        } else if host.waits_for_offers() {
            // Written idle: an offer made since the read (which woke nobody) refuses it.
            request
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
            request
                .condition_expression("attribute_exists(#pk) AND #v = :v")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(host.version))
        };
        self.calls.record(Call::DynamoUpdateItem);
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) if is_conditional_failure(&e) => Ok(false),
            Err(e) => Err(map_err("UpdateItem", e)),
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
            .update_expression("ADD #offered :n")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#offered", items::HOST_OFFERED)
            .expression_attribute_values(":n", self::n(n))
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
