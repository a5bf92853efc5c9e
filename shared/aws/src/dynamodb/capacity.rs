//! Write units as this adapter's writes consume them: the items exactly as `items` lays them
//! out, and the table's keys and indexes as `schema::TABLE` defines them, priced by
//! `trawl_domain::capacity`'s rules. The bench's write meter (`tests/faults/src/meter.rs`) prices each
//! write from these images; the conformance tests check them against the items DynamoDB holds.

use super::items::{CrawlItem, TaskItem, host_counts_pk, host_item, keeps_place};
use super::reports;
use super::schema::TABLE;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use trawl_core::store::StoreResult;
use trawl_domain::canonical::CrawlId;
use trawl_domain::capacity::{Attr, Image, WriteUnits};
use trawl_domain::crawl::Crawl;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::host::{Host, host_shard};
use trawl_domain::task::Task;

/// A DynamoDB item as the capacity model reads it.
pub fn image_of(item: &HashMap<String, AttributeValue>) -> Image {
    item.iter().map(|(k, v)| (k.clone(), attr(v))).collect()
}

fn attr(value: &AttributeValue) -> Attr {
    match value {
        AttributeValue::S(s) => Attr::S(s.clone()),
        AttributeValue::N(n) => Attr::N(n.clone()),
        AttributeValue::B(b) => Attr::B(b.as_ref().to_vec()),
        AttributeValue::Bool(b) => Attr::Bool(*b),
        AttributeValue::L(l) => Attr::L(l.iter().map(attr).collect()),
        AttributeValue::M(m) => Attr::M(m.iter().map(|(k, v)| (k.clone(), attr(v))).collect()),
        AttributeValue::Ss(s) => Attr::Ss(s.clone()),
        AttributeValue::Ns(n) => Attr::Ns(n.clone()),
        AttributeValue::Bs(b) => Attr::Bs(b.iter().map(|x| x.as_ref().to_vec()).collect()),
        _ => Attr::Null,
    }
}

/// The item of `task` as this adapter stores it with `shards` status shards, after a write
/// over `before` (the item as it was, when known): a task in progress keeps the host-index
/// place it had (`items::keeps_place`). Without `before`, an in-progress task is placed at its
/// lease's end: the same index entry, priced alike.
pub fn task_image(task: &Task, before: Option<&Image>, shards: u32) -> StoreResult<Image> {
    let mut image = image_of(&TaskItem::from_task(task, shards).to_item()?);
    if let Some(before) = before.filter(|_| keeps_place(task.status)) {
        match before.get("due") {
            Some(due) => image.insert("due".to_owned(), due.clone()),
            None => image.remove("due"),
        };
    }
    Ok(image)
}

/// The item of a stored host record (its `version` is the stored one).
pub fn host_image(crawl_id: &CrawlId, host: &Host) -> StoreResult<Image> {
    Ok(image_of(&host_item(crawl_id, host, host.version)?))
}

/// The item of the shard of a crawl's host counts that `name` is counted in.
pub fn host_counts_image(crawl_id: &CrawlId, name: &str) -> Image {
    let pk = host_counts_pk(crawl_id, host_shard(name));
    Image::from([
        ("pk".to_owned(), Attr::S(pk)),
        ("hosts".to_owned(), Attr::N("1".to_owned())),
        ("open".to_owned(), Attr::N("1".to_owned())),
    ])
}

/// The item of a crawl record.
pub fn crawl_image(crawl: &Crawl) -> StoreResult<Image> {
    Ok(image_of(&CrawlItem::from_crawl(crawl).to_item()?))
}

/// Write units of writing `before` → `after` on this table.
pub fn write_units(before: Option<&Image>, after: Option<&Image>) -> WriteUnits {
    TABLE.write_units(before, after)
}

/// The item of the report lane a call report (`transition::add_calls`) is written to, as it
/// stands after the report: its calls and task-count notes, and the entries of the few
/// processes that share a lane (`reports`; one per 32 processes reporting to the crawl, so 4
/// entries stand for a fleet of ~130), each of its slot's last requests. A process's lane is
/// drawn at random: here, the request's.
pub fn report_image(crawl_id: &CrawlId, update: &CrawlUpdate) -> Image {
    let request = update.request.map_or(0, |r| r.0);
    reports::lane_image(crawl_id, request, &update.changes.calls)
}
