//! The table definition, as `infra/template.yaml` declares it (checked by `infra/tests`).
//! Created by `stack::create_stack` (`trawl setup`, the tests, the bench); production tables come
//! from the template.

use super::errors::map_err;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use trawl_core::store::{StoreError, StoreResult};
use trawl_domain::capacity::{IndexDef, Projection as Projected, TableDef};

/// The status index: hash `gsi_pk`, range `updated`.
pub const STATUS_INDEX: &str = "status-index";

/// Attributes the status index projects: what the sweeper and the CLI read.
pub const PROJECTED: [&str; 10] = [
    "crawl_id",
    "task_id",
    "url",
    "status",
    "depth",
    "retries",
    "lease_until",
    "next_attempt",
    "next_fetch",
    "enqueued",
];

/// The per-host due index: hash `hk` (`{crawl_id}#{host}`), range `due` (ms). Sparse: a task
/// that reached a terminal status has no `due` and is not in it.
pub const HOST_INDEX: &str = "host-index";

/// The per-lane due index (`trawl_domain::lane`): hash `lk` (`{crawl_id}#{host}#{lane}`), range
/// `due`, the host index's. Sparse: only the tasks created in a lane are in it.
pub const LANE_INDEX: &str = "lane-index";

/// The per-host roster (`trawl_domain::roster`): hash `rk` (`{crawl_id}#{host}`), range `rpos`
/// (the task's creation time), keys only. Written once, when a rostered task is created, and
/// never changed: a finish writes no index entry of it. Sparse: a task with a priority or a lane
/// is in its host's due list instead (`hk`).
pub const ROSTER_INDEX: &str = "roster-index";

/// Attributes the host index projects: the status index's, and `updated` (its key there), so
/// that a task summary is read from either index alike.
pub const HOST_PROJECTED: [&str; 11] = [
    "crawl_id",
    "task_id",
    "url",
    "status",
    "depth",
    "retries",
    "lease_until",
    "next_attempt",
    "next_fetch",
    "enqueued",
    "updated",
];

/// The table's keys and indexes, as `create_table` creates them: what the write-unit model
/// (`trawl_domain::capacity`) reads, so its figures follow the layout.
pub const TABLE: TableDef = TableDef {
    hash: "pk",
    range: None,
    indexes: &[
        IndexDef {
            name: STATUS_INDEX,
            hash: "gsi_pk",
            range: Some("updated"),
            projection: Projected::Include(&PROJECTED),
        },
        IndexDef {
            name: HOST_INDEX,
            hash: "hk",
            range: Some("due"),
            projection: Projected::Include(&HOST_PROJECTED),
        },
        IndexDef {
            name: LANE_INDEX,
            hash: "lk",
            range: Some("due"),
            projection: Projected::Include(&HOST_PROJECTED),
        },
        IndexDef {
            name: ROSTER_INDEX,
            hash: "rk",
            range: Some("rpos"),
            projection: Projected::KeysOnly,
        },
    ],
};

fn build_err(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend("CreateTable", e.to_string()).caused_by(e)
}

/// Creates the table (on-demand) with its status and host indexes, and waits until it is active.
pub async fn create_table(client: &Client, table: &str) -> StoreResult<()> {
    let key = |name: &str, key_type| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(key_type)
            .build()
            .map_err(build_err)
    };
    let attr = |name: &str, t| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(t)
            .build()
            .map_err(build_err)
    };
    let index = |def: &IndexDef| {
        let projection = match def.projection {
            Projected::KeysOnly => Projection::builder().projection_type(ProjectionType::KeysOnly),
            Projected::All => Projection::builder().projection_type(ProjectionType::All),
            Projected::Include(names) => names.iter().fold(
                Projection::builder().projection_type(ProjectionType::Include),
                |p, a| p.non_key_attributes(*a),
            ),
        };
        let mut builder = GlobalSecondaryIndex::builder()
            .index_name(def.name)
            .key_schema(key(def.hash, KeyType::Hash)?);
        if let Some(range) = def.range {
            builder = builder.key_schema(key(range, KeyType::Range)?);
        }
        builder
            .projection(projection.build())
            .build()
            .map_err(build_err)
    };
    let indexes = TABLE
        .indexes
        .iter()
        .map(index)
        .collect::<StoreResult<Vec<_>>>()?;
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("gsi_pk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("updated", ScalarAttributeType::N)?)
        .attribute_definitions(attr("hk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("due", ScalarAttributeType::N)?)
        .attribute_definitions(attr("lk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("rk", ScalarAttributeType::S)?)
        .attribute_definitions(attr("rpos", ScalarAttributeType::N)?)
        .key_schema(key(TABLE.hash, KeyType::Hash)?)
        .set_global_secondary_indexes(Some(indexes))
        .send()
        .await
        .map_err(|e| map_err("CreateTable", e))?;
    for _ in 0..100 {
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| map_err("DescribeTable", e))?;
        let active = out
            .table()
            .and_then(|t| t.table_status())
            .is_some_and(|s| *s == aws_sdk_dynamodb::types::TableStatus::Active);
        if active {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(StoreError::unavailable(
        "CreateTable",
        format!("{table} not active after 10 s"),
    ))
}
