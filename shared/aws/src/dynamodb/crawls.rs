//! Crawl records on DynamoDB: one item per crawl (`items::CrawlItem`), listed by state through
//! the status index (`crawls#{state}`). A write is one conditional UpdateItem built from the
//! domain's update (`expression::crawl`), answering with the item before it (`ALL_OLD`), or, when
//! refused, the item the condition was checked against: no second read. A call report goes to
//! the crawl's report lanes (`reports`), whose calls `read_crawl` counts in. Another add that is
//! a request (`trawl_domain::request`: page slots) is a TransactWriteItems with the request as
//! its token, then a read (`DynamoStore::apply_request`).

use super::errors::{conditional_item, is_refused_transaction, map_err};
use super::expression::Expression;
use super::items::{self, CrawlItem, crawl_pk};
use super::{DynamoStore, Item, s, task_counts};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure as OnFailure;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use std::collections::BTreeMap;
use trawl_core::store::budget::PageBudget;
use trawl_core::store::{Applied, CrawlRecords, StoreError, StoreResult};
use trawl_domain::calls::{Call, CallTally};
use trawl_domain::canonical::CrawlId;
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::request::RequestId;

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
                self.start_report_lanes(&crawl.id).await?;
                Ok((crawl.clone(), true))
            }
            Err(e) => match conditional_item(&e) {
                Some(existing) => Ok((CrawlItem::from_item(existing)?.into_crawl(), false)),
                None => Err(map_err("PutItem", e)),
            },
        }
    }

    /// The crawl item and its report lanes: one BatchGetItem.
    async fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        self.read_crawl_with_lanes(id).await
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
        if let Some(request) = update.request {
            return self.apply_request(id, update, request).await;
        }
        let mut expression = Expression::default();
        let condition = expression.crawl_condition(&update.requires);
        // An add of calls holds this UpdateItem's own call (`CrawlRecords::apply_crawl`), and
        // the task writes this process noted for the crawl (`task_counts`).
        let reported = !update.changes.calls.is_empty();
        let noted = match reported {
            true => self.noted.take(id),
            false => BTreeMap::new(),
        };
        // Counts set are set less what the lanes hold, so that item and lanes add up to them.
        let lanes = match update.changes.task_counts {
            Some(_) => self.lane_notes(id).await?,
            None => BTreeMap::new(),
        };
        let changes = match expression.crawl_update(&update.changes, &noted, &lanes) {
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
        self.delete_report_lanes(id).await?;
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

    /// A call report: one UpdateItem of the process's report lane (`reports`).
    async fn report_calls(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<bool> {
        match update.request {
            Some(request) => self.report_on_lane(id, update, request).await,
            None => Ok(self.apply_crawl(id, update).await?.is_done()),
        }
    }

    /// A call report is one UpdateItem (`report_calls`).
    fn own_calls(&self) -> CallTally {
        CallTally::from([(Call::DynamoUpdateItem, 1)])
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        Some(&self.budget)
    }
}

impl DynamoStore {
    /// An update carrying a request (`trawl_domain::request`): the same conditional update as
    /// `apply_crawl`'s, as the one item of a TransactWriteItems whose `ClientRequestToken` is the
    /// request's id, so that DynamoDB applies it once however often it is tried within ten
    /// minutes (an SDK retry included); then the crawl as it stands, read (a transaction answers
    /// no item). Refused, it answers the item its condition was checked against.
    ///
    /// Cost: twice the units of the UpdateItem it replaces (a transactional write), and one
    /// strongly consistent GetItem (1 read unit; the crawl item is under 4 KB).
    pub(super) async fn apply_request(
        &self,
        id: &CrawlId,
        update: &CrawlUpdate,
        request: RequestId,
    ) -> StoreResult<Applied<Crawl>> {
        let mut expression = Expression::default();
        let condition = expression.crawl_condition(&update.requires);
        // A report's notes (`task_counts`) are bound to its request: each try sends the same.
        let reported = !update.changes.calls.is_empty();
        let noted = match reported {
            true => self.noted.take_for(id, request),
            false => BTreeMap::new(),
        };
        let changes = expression.crawl_update(&update.changes, &noted, &BTreeMap::new())?;
        let (names, values) = expression.placeholders();
        let write = Update::builder()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .condition_expression(condition)
            .set_update_expression(changes)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .return_values_on_condition_check_failure(OnFailure::AllOld)
            .build()
            .map_err(|e| StoreError::backend("TransactWriteItems", e.to_string()).caused_by(e))?;
        if reported {
            self.calls.record_reported(Call::DynamoTransactWriteItems);
        } else {
            self.calls.record(Call::DynamoTransactWriteItems);
        }
        let result = self
            .client
            .transact_write_items()
            .client_request_token(request.token())
            .transact_items(TransactWriteItem::builder().update(write).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(match self.get_crawl_item(id, reported).await? {
                Some(current) => Applied::Landed { current },
                None => Applied::Refused { current: None },
            }),
            Err(e) if is_refused_transaction(&e) => {
                let current = refused_item(&e)
                    .map(|item| CrawlItem::from_item(item).map(CrawlItem::into_crawl))
                    .transpose()?;
                Ok(Applied::Refused { current })
            }
            Err(e) => {
                if reported {
                    // Not added (or not known to be): this call goes with the next report.
                    let own = CallTally::from([(Call::DynamoTransactWriteItems, 1)]);
                    self.calls.restore_unreported(&own);
                }
                Err(map_err("TransactWriteItems", e))
            }
        }
    }

    /// The crawl, read strongly consistent; `reported`: the read is one of a report's own
    /// calls (`own_calls`), counted as reported.
    async fn get_crawl_item(&self, id: &CrawlId, reported: bool) -> StoreResult<Option<Crawl>> {
        if reported {
            self.calls.record_reported(Call::DynamoGetItem);
        } else {
            self.calls.record(Call::DynamoGetItem);
        }
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(crawl_pk(id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err("GetItem", e))?;
        self.meter_get(out.item.as_ref(), true);
        out.item
            .map(|item| CrawlItem::from_item(item).map(CrawlItem::into_crawl))
            .transpose()
    }

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

/// The item a cancelled one-item transaction's condition was checked against
/// (`ReturnValuesOnConditionCheckFailure`), when it exists.
fn refused_item<R>(e: &SdkError<TransactWriteItemsError, R>) -> Option<Item> {
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled
            .cancellation_reasons()
            .iter()
            .find_map(|reason| reason.item().cloned()),
        _ => None,
    }
}
