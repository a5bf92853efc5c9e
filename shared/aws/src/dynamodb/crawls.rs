//! Crawl records on DynamoDB: one item per crawl (`items::CrawlItem`), listed by state through
//! the status index (`crawls#{state}`). A write is one conditional UpdateItem built from the
//! domain's update (`expression::crawl`), answering with the item before it (`ALL_OLD`), or, when
//! refused, the item the condition was checked against: no second read.

use super::errors::{conditional_item, map_err};
use super::expression::Expression;
use super::items::{self, CrawlItem, crawl_pk};
use super::{DynamoStore, s, task_counts};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use std::collections::BTreeMap;
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{Applied, CrawlRecords, StoreResult};
use trawl_domain::calls::Call;
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};

impl CrawlRecords for DynamoStore {
    async fn insert_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        let mut item = CrawlItem::from_crawl(crawl).to_item()?;
        item.insert(task_counts::COUNTED.to_owned(), AttributeValue::Bool(true));
        self.calls.record(Call::DynamoPutItem);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(OnFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => {
                self.start_host_counts(&crawl.id).await?;
                Ok((crawl.clone(), true))
            }
            Err(e) => match conditional_item(&e) {
                Some(existing) => Ok((CrawlItem::from_item(existing)?.into_crawl(), false)),
                None => Err(map_err("PutItem", e)),
            },
        }
    }

    async fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        self.calls.record(Call::DynamoGetItem);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        out.item
            .map(|item| CrawlItem::from_item(item).map(CrawlItem::into_crawl))
            .transpose()
    }

    async fn query_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        let states = match state {
            Some(state) => vec![state],
            None => vec![CrawlState::Running, CrawlState::Completed],
        };
        let mut crawls = Vec::new();
        for state in states {
            let mut start = None;
            loop {
                let (items, _, next) = self
                    .query_page(items::crawls_gsi(state), None, None, start, false)
                    .await?;
                for item in items {
                    // The index projects only some attributes: read the crawl itself.
                    let id = items::crawl_id_of(&item)?;
                    if let Some(crawl) = self.read_crawl(&id).await? {
                        crawls.push(crawl);
                    }
                }
                match next {
                    Some(key) => start = Some(key),
                    None => break,
                }
            }
        }
        Ok(crawls)
    }

    async fn apply_crawl(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<Applied<Crawl>> {
        let mut expression = Expression::default();
        let condition = expression.crawl_condition(&update.requires);
        // An add of calls holds this UpdateItem's own call (`CrawlRecords::apply_crawl`), and
        // the task writes this process noted for the crawl (`task_counts`).
        let reported = !update.changes.calls.is_empty();
        let noted = match reported {
            true => self.noted.take(id),
            false => BTreeMap::new(),
        };
        let changes = match expression.crawl_update(&update.changes, &noted) {
            Ok(changes) => changes,
            Err(e) => {
                self.noted.restore(id, noted);
                return Err(e);
            }
        };
        let request = self.update_crawl(id);
        let applied = self
            .apply_update(
                request,
                expression,
                (condition, changes),
                reported,
                |item| Ok(CrawlItem::from_item(item)?.into_crawl()),
            )
            .await;
        // Refused, the crawl is gone (`add_calls` requires it): its notes go with it.
        if applied.is_err() {
            self.noted.restore(id, noted);
        }
        applied
    }

    async fn remove_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        // Notes of a crawl removed go with it.
        self.noted.take(id);
        self.calls.record(Call::DynamoDeleteItem);
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .send()
            .await
            .map_err(|e| map_err("DeleteItem", e))?;
        Ok(())
    }

    fn own_call(&self) -> Option<Call> {
        Some(Call::DynamoUpdateItem)
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        Some(&self.budget)
    }
}

impl DynamoStore {
    /// Marks the new crawl's host counts as kept from its start (`items::host_counts_pk`). A
    /// crash before this write leaves a crawl without counts: it is walked, as older ones are.
    async fn start_host_counts(&self, id: &CrawlId) -> StoreResult<()> {
        self.calls.record(Call::DynamoUpdateItem);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(items::host_counts_pk(id, 0)))
            .update_expression("SET #counted = :yes")
            .expression_attribute_names("#counted", "counted")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .send()
            .await
            .map_err(|e| map_err("UpdateItem", e))?;
        Ok(())
    }
}
