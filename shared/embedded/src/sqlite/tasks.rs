//! Task records in the `tasks` table: each transition read, checked and written in one
//! transaction (`TaskRecords::apply`).

use super::{
    SqliteStore, SummaryRow, code, decode_cursor, encode_cursor, number, saturating_i64,
    select_task, status_of, summary_of, write_task,
};
use rusqlite::{named_params, params};
use trawl_core::store::{
    Applied, InTurnClaims, Seeded, StatusCounts, StoreResult, TaskPage, TaskQuery, TaskRecords,
    TaskSummary,
};
use trawl_domain::calls::Call;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::task::{Millis, Task};
use trawl_domain::transition::{Insert, Update};

/// `TaskId::shard`'s lead in SQL: the task id's first 8 hex digits as a number (task ids are
/// lowercase hex), so that a query's part (`Part`) holds the same tasks as the other stores'.
static TASK_SHARD_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    (0..8)
        .map(|k| {
            format!(
                "(instr('0123456789abcdef', substr(task_id, {}, 1)) - 1) * {}",
                k + 1,
                1u64 << (4 * (7 - k))
            )
        })
        .collect::<Vec<_>>()
        .join(" + ")
});

impl TaskRecords for SqliteStore {
    const IN_TURN_CLAIMS: InTurnClaims = InTurnClaims::AsRead;

    async fn insert(&self, tasks: &[Insert]) -> StoreResult<Vec<Seeded>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let inserts: Vec<Task> = tasks.iter().map(|insert| insert.task.clone()).collect();
        self.run("seed", Call::SqliteWrite, move |conn| {
            let mut results = Vec::with_capacity(inserts.len());
            for task in &inserts {
                // INSERT OR IGNORE: the insert's condition, no such task.
                results.push(if write_task(conn, task, true)? == 1 {
                    Seeded::Created
                } else {
                    Seeded::AlreadyKnown
                });
            }
            Ok(results)
        })
        .await
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        self.run("get", Call::SqliteRead, move |conn| {
            select_task(conn, &crawl, &task)
        })
        .await
    }

    /// One `SELECT task_id … IN (…)` per 500 ids (under SQLite's bound on parameters).
    async fn known(&self, crawl_id: &CrawlId, ids: &[TaskId]) -> StoreResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let crawl = crawl_id.as_str().to_owned();
        let wanted: Vec<String> = ids.iter().map(|id| id.as_str().to_owned()).collect();
        self.run("known", Call::SqliteRead, move |conn| {
            let mut found = std::collections::HashSet::new();
            for chunk in wanted.chunks(500) {
                let marks = vec!["?"; chunk.len()].join(", ");
                let sql = format!(
                    "SELECT task_id FROM tasks WHERE crawl_id = ? AND task_id IN ({marks})"
                );
                let mut statement = conn.prepare_cached(&sql)?;
                let params = std::iter::once(&crawl).chain(chunk.iter());
                let rows = statement.query_map(rusqlite::params_from_iter(params), |row| {
                    row.get::<_, String>(0)
                })?;
                for row in rows {
                    found.insert(row?);
                }
            }
            Ok(wanted.iter().map(|id| found.contains(id)).collect())
        })
        .await
    }

    /// Reads the task, and if it meets the update's condition, writes its new state, in one
    /// transaction.
    async fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> StoreResult<Applied<Task>> {
        let (crawl, task) = (crawl_id.as_str().to_owned(), task_id.as_str().to_owned());
        let update = update.clone();
        self.run(update.event.name(), Call::SqliteWrite, move |conn| {
            let Some(current) = select_task(conn, &crawl, &task)? else {
                return Ok(Applied::Refused { current: None });
            };
            let Some(next) = update.apply(&current) else {
                return Ok(Applied::Refused {
                    current: Some(current),
                });
            };
            write_task(conn, &next, false)?;
            Ok(Applied::Done { before: current })
        })
        .await
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        let (after_updated, after_task) = match &query.cursor {
            Some(cursor) => decode_cursor(cursor)?,
            None => (Millis::MIN, String::new()),
        };
        let crawl = query.crawl_id.as_str().to_owned();
        let status = code(query.status);
        let before = query.updated_before.unwrap_or(Millis::MAX);
        let limit = query.limit.max(1) as usize;
        let part = query.part;
        self.run("query", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT crawl_id, task_id, url, status, updated, depth, retries, lease_until,
                        next_attempt, next_fetch, enqueued, priority
                 FROM tasks
                 WHERE crawl_id = :crawl AND status = :status AND updated <= :before
                   AND (updated, task_id) > (:after_updated, :after_task)
                   AND ({shard}) % :parts = :part
                 ORDER BY updated, task_id
                 LIMIT :fetch",
                shard = TASK_SHARD_SQL.as_str(),
            ))?;
            // One row more than the page tells whether another page follows.
            let rows = stmt
                .query_map(
                    named_params! {
                        ":crawl": crawl,
                        ":status": status,
                        ":before": before,
                        ":after_updated": after_updated,
                        ":after_task": after_task,
                        ":fetch": saturating_i64(limit as u64 + 1),
                        ":parts": part.of.max(1),
                        ":part": part.index,
                    },
                    summary_of,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let more = rows.len() > limit;
            let tasks = rows
                .into_iter()
                .take(limit)
                .map(SummaryRow::into_summary)
                .collect::<StoreResult<Vec<_>>>()?;
            let cursor = match tasks.last() {
                Some(last) if more => Some(encode_cursor(last.updated_at, last.task_id.as_str())),
                _ => None,
            };
            Ok(TaskPage { tasks, cursor })
        })
        .await
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("counts", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT status, COUNT(*) FROM tasks WHERE crawl_id = ?1 GROUP BY status",
            )?;
            let rows = stmt
                .query_map(params![crawl], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut counts = StatusCounts::new();
            for (status, n) in rows {
                counts.insert(status_of(&crawl, status)?, number(&crawl, "count", n)?);
            }
            Ok(counts)
        })
        .await
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let crawl = crawl_id.as_str().to_owned();
        let host = host.to_owned();
        self.run("due_tasks", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT crawl_id, task_id, url, status, updated, depth, retries, lease_until,
                        next_attempt, next_fetch, enqueued, priority
                 FROM tasks INDEXED BY tasks_by_host_due
                 WHERE crawl_id = ?1 AND host = ?2 AND due IS NOT NULL
                 ORDER BY due, task_id
                 LIMIT ?3",
            )?;
            let rows = stmt
                .query_map(params![crawl, host, limit.max(1)], summary_of)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows
                .into_iter()
                .map(SummaryRow::into_summary)
                .collect::<StoreResult<Vec<_>>>()?)
        })
        .await
    }

    async fn due_in_lane(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        lane: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let crawl = crawl_id.as_str().to_owned();
        let host = host.to_owned();
        let lane = lane.to_owned();
        self.run("due_tasks", Call::SqliteRead, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT crawl_id, task_id, url, status, updated, depth, retries, lease_until,
                        next_attempt, next_fetch, enqueued, priority
                 FROM tasks INDEXED BY tasks_by_lane_due
                 WHERE crawl_id = ?1 AND host = ?2 AND lane = ?3 AND due IS NOT NULL
                 ORDER BY due, task_id
                 LIMIT ?4",
            )?;
            let rows = stmt
                .query_map(params![crawl, host, lane, limit.max(1)], summary_of)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows
                .into_iter()
                .map(SummaryRow::into_summary)
                .collect::<StoreResult<Vec<_>>>()?)
        })
        .await
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let crawl = crawl_id.as_str().to_owned();
        self.run("delete_tasks", Call::SqliteWrite, move |conn| {
            let deleted = conn.execute("DELETE FROM tasks WHERE crawl_id = ?1", params![crawl])?;
            Ok(deleted as u64)
        })
        .await
    }
}
