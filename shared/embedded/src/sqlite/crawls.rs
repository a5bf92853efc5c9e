//! Crawl records in SQLite: a `crawls` row per crawl, its call counts in `crawl_calls` (one row
//! per call kind). A write (`apply_crawl`) reads the crawl, checks the update's condition and
//! writes the crawl it makes, in one transaction (`trawl_domain::crawl::transition` decides).

use super::{
    DbResult, SqliteStore, corrupt, crawl_id_of, decode, encode, number, record_request,
    request_applied, saturating_i64,
};
use rusqlite::{Connection, OptionalExtension, Row, params};
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{Applied, CrawlRecords, StoreResult};
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlConfig, CrawlState, DeliveryLease};
use trawl_domain::estimate::Level;

const CRAWL_COLUMNS: &str = "id, config, state, created, updated, generation, pages_reserved, \
     checkpoint, reference_misses, completed_by, delivery_holder, delivery_until, level_ms, level_at, \
     generation_started";

/// A `crawls` row as SQLite returns it.
struct CrawlRow {
    id: String,
    config: String,
    state: String,
    created: i64,
    updated: i64,
    generation: i64,
    pages_reserved: i64,
    checkpoint: Option<String>,
    reference_misses: i64,
    completed_by: Option<String>,
    delivery_holder: Option<String>,
    delivery_until: Option<i64>,
    level_ms: Option<i64>,
    level_at: Option<i64>,
    generation_started: Option<i64>,
}

impl CrawlRow {
    fn read(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get(0)?,
            config: row.get(1)?,
            state: row.get(2)?,
            created: row.get(3)?,
            updated: row.get(4)?,
            generation: row.get(5)?,
            pages_reserved: row.get(6)?,
            checkpoint: row.get(7)?,
            reference_misses: row.get(8)?,
            completed_by: row.get(9)?,
            delivery_holder: row.get(10)?,
            delivery_until: row.get(11)?,
            level_ms: row.get(12)?,
            level_at: row.get(13)?,
            generation_started: row.get(14)?,
        })
    }

    fn into_crawl(self) -> StoreResult<Crawl> {
        let key = format!("crawl {}", self.id);
        let key = key.as_str();
        let state = match self.state.as_str() {
            "running" => CrawlState::Running,
            "completed" => CrawlState::Completed,
            other => return Err(corrupt(key, format!("unknown crawl state {other:?}"))),
        };
        Ok(Crawl {
            id: crawl_id_of(key, &self.id)?,
            config: decode::<CrawlConfig>(key, "config", &self.config)?,
            state,
            created_at: self.created,
            updated_at: self.updated,
            generation: number(key, "generation", self.generation)?,
            pages_reserved: number(key, "pages_reserved", self.pages_reserved)?,
            // In a table of their own: `with_calls` reads them.
            calls: CallTally::new(),
            checkpoint: self.checkpoint,
            reference_misses: number(key, "reference_misses", self.reference_misses)?,
            completed_by: self.completed_by,
            delivery: match (self.delivery_holder, self.delivery_until) {
                (Some(holder), Some(until)) => Some(DeliveryLease { holder, until }),
                _ => None,
            },
            level: match (self.level_ms, self.level_at) {
                (Some(ms), Some(at)) => Some(Level {
                    ms: number(key, "level_ms", ms)?,
                    at,
                }),
                _ => None,
            },
            generation_started_at: self.generation_started,
        })
    }
}

fn select_crawl(conn: &Connection, id: &str) -> DbResult<Option<Crawl>> {
    let row = conn
        .prepare_cached(&format!("SELECT {CRAWL_COLUMNS} FROM crawls WHERE id = ?1"))?
        .query_row(params![id], CrawlRow::read)
        .optional()?;
    row.map(|row| with_calls(conn, row)).transpose()
}

/// Writes `crawl`'s row: a new one (`insert`: unless it exists), or the new state of one.
/// Its call counts are not in the row (`add_calls`). True if a row was written.
fn write_crawl(conn: &Connection, crawl: &Crawl, insert: bool) -> DbResult<bool> {
    let sql = if insert {
        format!(
            "INSERT OR IGNORE INTO crawls ({CRAWL_COLUMNS})
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
        )
    } else {
        "UPDATE crawls SET config = ?2, state = ?3, created = ?4, updated = ?5, generation = ?6,
             pages_reserved = ?7, checkpoint = ?8, reference_misses = ?9, completed_by = ?10,
             delivery_holder = ?11, delivery_until = ?12, level_ms = ?13, level_at = ?14,
             generation_started = ?15
         WHERE id = ?1"
            .to_owned()
    };
    let delivery = crawl.delivery.as_ref();
    let written = conn.prepare_cached(&sql)?.execute(params![
        crawl.id.as_str(),
        encode("config", &crawl.config)?,
        crawl.state.name(),
        crawl.created_at,
        crawl.updated_at,
        saturating_i64(crawl.generation),
        saturating_i64(crawl.pages_reserved),
        crawl.checkpoint,
        saturating_i64(crawl.reference_misses),
        crawl.completed_by,
        delivery.map(|l| l.holder.as_str()),
        delivery.map(|l| l.until),
        crawl.level.map(|l| saturating_i64(l.ms)),
        crawl.level.map(|l| l.at),
        crawl.generation_started_at,
    ])?;
    Ok(written == 1)
}

/// The crawl of `row`, with its call counts.
fn with_calls(conn: &Connection, row: CrawlRow) -> DbResult<Crawl> {
    let mut crawl = row.into_crawl()?;
    crawl.calls = select_calls(conn, crawl.id.as_str())?;
    Ok(crawl)
}

/// A crawl's call counts. Kinds this version does not know (written by a newer one) are
/// skipped rather than failing every read of the crawl.
fn select_calls(conn: &Connection, id: &str) -> DbResult<CallTally> {
    let mut stmt =
        conn.prepare_cached("SELECT call, count FROM crawl_calls WHERE crawl_id = ?1")?;
    let rows = stmt
        .query_map(params![id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let key = format!("crawl {id}");
    let mut calls = CallTally::new();
    for (name, count) in rows {
        if let Some(call) = Call::from_name(&name) {
            calls.insert(call, number(&key, &name, count)?);
        }
    }
    Ok(calls)
}

/// Adds `share` to a crawl's call counts (inside the caller's transaction).
fn add_calls(conn: &Connection, id: &str, share: &CallTally) -> DbResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO crawl_calls (crawl_id, call, count) VALUES (?1, ?2, ?3)
         ON CONFLICT (crawl_id, call) DO UPDATE SET count = count + excluded.count",
    )?;
    for (call, &count) in share {
        stmt.execute(params![id, call.name(), saturating_i64(count)])?;
    }
    Ok(())
}

impl CrawlRecords for SqliteStore {
    async fn insert_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        let crawl = crawl.clone();
        self.run("create_crawl", Call::SqliteWrite, move |conn| {
            let id = crawl.id.as_str();
            let created = write_crawl(conn, &crawl, true)?;
            if created {
                add_calls(conn, id, &crawl.calls)?;
                conn.prepare_cached(
                    "INSERT OR IGNORE INTO host_counts (crawl_id, hosts, open) VALUES (?1, 0, 0)",
                )?
                .execute(params![id])?;
            }
            let stored = select_crawl(conn, id)?
                .ok_or_else(|| corrupt(id, "crawl vanished inside its own transaction"))?;
            Ok((stored, created))
        })
        .await
    }

    async fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        let id = id.as_str().to_owned();
        self.run("get_crawl", Call::SqliteRead, move |conn| {
            select_crawl(conn, &id)
        })
        .await
    }

    async fn query_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        self.run("list_crawls", Call::SqliteRead, move |conn| {
            let rows = match state {
                Some(state) => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {CRAWL_COLUMNS} FROM crawls WHERE state = ?1 ORDER BY id"
                    ))?;
                    stmt.query_map(params![state.name()], CrawlRow::read)?
                        .collect::<rusqlite::Result<Vec<_>>>()?
                }
                None => {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT {CRAWL_COLUMNS} FROM crawls ORDER BY id"
                    ))?;
                    stmt.query_map([], CrawlRow::read)?
                        .collect::<rusqlite::Result<Vec<_>>>()?
                }
            };
            rows.into_iter()
                .map(|row| with_calls(conn, row))
                .collect::<DbResult<Vec<_>>>()
        })
        .await
    }

    async fn apply_crawl(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<Applied<Crawl>> {
        // An add of calls holds this write's own call (`CrawlRecords::apply_crawl`).
        let reports = !update.changes.calls.is_empty();
        if reports {
            self.calls.record_reported(Call::SqliteWrite);
        } else {
            self.calls.record(Call::SqliteWrite);
        }
        let id = id.as_str().to_owned();
        let update = update.clone();
        let applied = self
            .writer
            .run(update.event.name(), true, move |conn| {
                let Some(before) = select_crawl(conn, &id)? else {
                    return Ok(Applied::Refused { current: None });
                };
                if let Some(request) = update.request
                    && request_applied(conn, &id, request)?
                {
                    return Ok(Applied::Landed { current: before });
                }
                let Some(after) = update.apply(&before) else {
                    return Ok(Applied::Refused {
                        current: Some(before),
                    });
                };
                write_crawl(conn, &after, false)?;
                add_calls(conn, &id, &update.changes.calls)?;
                if let Some(request) = update.request {
                    record_request(conn, &id, request)?;
                }
                Ok(Applied::Done { before })
            })
            .await;
        if reports && applied.is_err() {
            // Not added: this call goes with the next report.
            self.calls
                .restore_unreported(&CallTally::from([(Call::SqliteWrite, 1)]));
        }
        applied
    }

    async fn remove_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        let id = id.as_str().to_owned();
        self.run("delete_crawl", Call::SqliteWrite, move |conn| {
            conn.execute("DELETE FROM crawl_calls WHERE crawl_id = ?1", params![id])?;
            conn.execute("DELETE FROM crawls WHERE id = ?1", params![id])?;
            Ok(())
        })
        .await
    }

    fn own_calls(&self) -> CallTally {
        CallTally::from([(Call::SqliteWrite, 1)])
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        Some(&self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use trawl_core::store::CrawlStore;
    use trawl_domain::calls::CallCounts;

    #[tokio::test]
    async fn a_delivery_lease_and_a_completer_are_stored_with_their_crawl() {
        // GIVEN a crawl
        let store = SqliteStore::in_memory(Arc::new(CallCounts::default())).unwrap();
        let id = CrawlId::parse("c").unwrap();
        let crawl = Crawl::new(id.clone(), CrawlConfig::default(), 1);
        store.create_crawl(&crawl).await.unwrap();

        // WHEN it completes and its delivery is claimed
        assert!(store.complete_crawl(&id, 0, "sweeper", 2).await.unwrap());
        assert!(
            store
                .claim_delivery(&id, "deliverer", 100, 3)
                .await
                .unwrap()
        );

        // THEN both read back as written, through a read and through the listing
        let stored = store.get_crawl(&id).await.unwrap().unwrap();
        assert_eq!(stored.completed_by.as_deref(), Some("sweeper"));
        assert_eq!(
            stored.delivery,
            Some(DeliveryLease {
                holder: "deliverer".into(),
                until: 100
            })
        );
        assert_eq!(store.list_crawls(None).await.unwrap(), vec![stored]);
    }
}
