//! Host records in the `hosts` table: the record as JSON, written only over the version read;
//! its offers (`$.offered`) added in place, never overwritten by a write of the record.

use super::{SqliteStore, decode, encode, number, record_request, request_applied, saturating_i64};
use rusqlite::{OptionalExtension, params};
use trawl_core::store::{HostCounts, HostPage, HostStore, StoreResult};
use trawl_domain::calls::Call;
use trawl_domain::canonical::CrawlId;
use trawl_domain::host::Host;
use trawl_domain::request::RequestId;

impl HostStore for SqliteStore {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        let (crawl, name) = (crawl_id.as_str().to_owned(), name.to_owned());
        self.run("get_host", Call::SqliteRead, move |conn| {
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, record FROM hosts WHERE crawl_id = ?1 AND name = ?2",
                )?
                .query_row(params![crawl, name], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            Ok(row
                .map(|(version, record)| host_of(&crawl, version, &record))
                .transpose()?)
        })
        .await
    }

    async fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        let crawl = crawl_id.as_str().to_owned();
        // The record's own count; its offers stay as stored (`$.offered`, added atomically).
        let record = encode(
            "host",
            &Host {
                seeded: host.seeded_by_writes(),
                offered: 0,
                ..host.clone()
            },
        )?;
        let (name, version) = (host.name.clone(), saturating_i64(host.version));
        let offers_as_read = host
            .waits_for_offers()
            .then_some(saturating_i64(host.offered));
        self.run("put_host", Call::SqliteWrite, move |conn| {
            // One statement either way: the version check and the write cannot interleave.
            let written = if version == 0 {
                conn.prepare_cached(
                    "INSERT OR IGNORE INTO hosts (crawl_id, name, version, record)
                     VALUES (?1, ?2, 1, ?3)",
                )?
                .execute(params![crawl, name, record])?
            } else {
                conn.prepare_cached(
                    "UPDATE hosts
                     SET version = ?3 + 1,
                         record = json_set(?4, '$.offered',
                                           coalesce(json_extract(record, '$.offered'), 0))
                     WHERE crawl_id = ?1 AND name = ?2 AND version = ?3
                       AND (?5 IS NULL OR coalesce(json_extract(record, '$.offered'), 0) = ?5)",
                )?
                .execute(params![crawl, name, version, record, offers_as_read])?
            };
            // In the write's own transaction (the writer's group): counted with it or not at all.
            if written == 1 && !counted.is_zero() {
                conn.prepare_cached(
                    "UPDATE host_counts SET hosts = hosts + ?2, open = open + ?3
                     WHERE crawl_id = ?1",
                )?
                .execute(params![crawl, counted.hosts, counted.open])?;
            }
            Ok(written == 1)
        })
        .await
    }

    async fn host_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<HostCounts>> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("host_counts", Call::SqliteRead, move |conn| {
            Ok(conn
                .prepare_cached("SELECT hosts, open FROM host_counts WHERE crawl_id = ?1")?
                .query_row(params![crawl], |row| {
                    Ok(HostCounts {
                        hosts: row.get(0)?,
                        open: row.get(1)?,
                    })
                })
                .optional()?)
        })
        .await
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> StoreResult<Option<Host>> {
        let (crawl, name) = (crawl_id.as_str().to_owned(), name.to_owned());
        self.run("add_seeded", Call::SqliteWrite, move |conn| {
            // A repeat of an applied request adds nothing (`trawl_domain::request`).
            let n = match request_applied(conn, &crawl, request)? {
                true => 0,
                false => saturating_i64(n),
            };
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "UPDATE hosts
                     SET record = json_set(record, '$.offered',
                                           coalesce(json_extract(record, '$.offered'), 0) + ?3)
                     WHERE crawl_id = ?1 AND name = ?2
                     RETURNING version, record",
                )?
                .query_row(params![crawl, name, n], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()?;
            if row.is_some() && n > 0 {
                record_request(conn, &crawl, request)?;
            }
            Ok(row
                .map(|(version, record)| host_of(&crawl, version, &record))
                .transpose()?)
        })
        .await
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let crawl = crawl_id.as_str().to_owned();
        let after = cursor.unwrap_or_default();
        let limit = limit.max(1) as usize;
        self.run("list_hosts", Call::SqliteRead, move |conn| {
            let rows: Vec<(i64, String)> = conn
                .prepare_cached(
                    "SELECT version, record FROM hosts WHERE crawl_id = ?1 AND name > ?2
                     ORDER BY name LIMIT ?3",
                )?
                .query_map(
                    params![crawl, after, saturating_i64(limit as u64 + 1)],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?
                .collect::<rusqlite::Result<_>>()?;
            let more = rows.len() > limit;
            let hosts = rows
                .into_iter()
                .take(limit)
                .map(|(version, record)| host_of(&crawl, version, &record))
                .collect::<StoreResult<Vec<_>>>()?;
            let cursor = more.then(|| hosts.last().map(|h| h.name.clone())).flatten();
            Ok(HostPage { hosts, cursor })
        })
        .await
    }

    async fn host_scan(&self, crawl_id: &CrawlId) -> StoreResult<Option<String>> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("host_scan", Call::SqliteRead, move |conn| {
            Ok(conn
                .prepare_cached("SELECT scan FROM host_counts WHERE crawl_id = ?1")?
                .query_row(params![crawl], |row| row.get(0))
                .optional()?
                .flatten())
        })
        .await
    }

    async fn set_host_scan(&self, crawl_id: &CrawlId, at: Option<&str>) -> StoreResult<()> {
        let (crawl, at) = (crawl_id.as_str().to_owned(), at.map(str::to_owned));
        self.run("set_host_scan", Call::SqliteWrite, move |conn| {
            conn.prepare_cached("UPDATE host_counts SET scan = ?2 WHERE crawl_id = ?1")?
                .execute(params![crawl, at])?;
            Ok(())
        })
        .await
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("delete_hosts", Call::SqliteWrite, move |conn| {
            conn.execute(
                "DELETE FROM host_counts WHERE crawl_id = ?1",
                params![crawl],
            )?;
            let deleted = conn.execute("DELETE FROM hosts WHERE crawl_id = ?1", params![crawl])?;
            Ok(deleted as u64)
        })
        .await
    }
}

/// A host record as stored: its JSON, at the row's version.
fn host_of(crawl: &str, version: i64, record: &str) -> StoreResult<Host> {
    let key = format!("{crawl}/host");
    let host: Host = decode(&key, "record", record)?;
    let offered = host.offered;
    Ok(Host {
        version: number(&key, "version", version)?,
        seeded: host.seeded,
        ..host
    }
    .with_offers(offered))
}
