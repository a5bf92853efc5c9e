//! Host records: one item each (`items::host_item`), written whole over the version read.

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
}
