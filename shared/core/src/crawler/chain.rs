//! What a fetched page's answer makes next by the crawl's chain rules, and what a given-up task
//! is tried again as by its retry rules (`trawl_domain::chain`).
//!
//! A chained task always carries its page's data (its request keys dropped, whatever
//! `scope.inherit_data` says: a chain is one sequence of requests, Docido's `prev_result`), and
//! is seeded like a link — after the crawl's scope, at its page's depth — before its page's
//! finish, so a failed seed retries the page and loses nothing. A retry that changes its request
//! is seeded once its task is given up; a task whose page was fetched before (a failed recrawl
//! keeps its content) is not tried again changed.

use super::{CrawlContext, CrawlerError, Held, Outbox, link_priority};
use crate::app::Ports;
use crate::chain::page_values;
use crate::crawler::Crawler;
use crate::extract::PageItems;
use crate::fetch::FetchedPage;
use trawl_domain::canonical::{CanonicalUrl, truncate};
use trawl_domain::chain::{
    ChainRule, ChainStep, ChainStop, chained_data, next_requests, retried, step_of,
};
use trawl_domain::retry::Failure;
use trawl_domain::task::{NewTask, Task};

impl<P: Ports> Crawler<P> {
    /// Seeds the requests the chain rules of `task`'s URL (every one that matches) make of its
    /// fetched `page` and the items found on it. Returns why a rule made none (the first such
    /// rule's reason, recorded on the page's fetch record), None when each made some.
    pub(super) async fn seed_chained(
        &self,
        context: &CrawlContext,
        task: &Task,
        page: &FetchedPage,
        items: Option<&PageItems>,
        outbox: &Outbox,
        held: &Held,
    ) -> Result<Option<ChainStop>, CrawlerError> {
        let mut stopped = None;
        let mut tasks = Vec::new();
        for rule in context.chains.chains_for(&task.url) {
            let (made, stop) = chained_tasks(context, task, rule, page, items);
            tasks.extend(made);
            if let Some(stop) = stop {
                tracing::info!(url = %task.url, ?stop, "a chain stops");
                stopped.get_or_insert(stop);
            }
        }
        if !tasks.is_empty() {
            self.seed_found(context, task, tasks, outbox, held).await?;
        }
        Ok(stopped)
    }

    /// Seeds `task`'s request changed by the crawl's retry rule for its URL, if one applies,
    /// now that the task was given up after `failure`. A seed that fails is logged: the give-up
    /// is recorded already.
    pub(super) async fn retry_changed(
        &self,
        context: &CrawlContext,
        task: &Task,
        failure: &Failure,
        outbox: &Outbox,
        held: &Held,
    ) {
        let Some(rule) = context.chains.retry_for(&task.url) else {
            return;
        };
        if task.fetch.is_some() {
            return;
        }
        let Ok(url) = url::Url::parse(&task.url) else {
            return;
        };
        let next = match retried(rule, &url, task.data.as_ref(), failure.http_status) {
            Ok(next) => next,
            Err(why) => {
                tracing::info!(url = %task.url, %why, "not tried again changed");
                return;
            }
        };
        let url = match CanonicalUrl::parse(&next.url) {
            Ok(url) => context.scope.normalise(url),
            Err(e) => {
                tracing::info!(url = %next.url, error = %e, "the changed request is no URL");
                return;
            }
        };
        if let Err(reason) = context.scope.check(&url, task.depth) {
            tracing::info!(url = %url, %reason, "the changed request is out of scope");
            return;
        }
        let again = NewTask {
            lane: context.scope.lane_of(url.as_str()),
            priority: task.priority,
            url,
            depth: task.depth,
            parent: Some(task.task_id.clone()),
            data: Some(next.data),
        };
        tracing::info!(url = %again.url, "tried again changed");
        if let Err(e) = self
            .seed_found(context, task, vec![again], outbox, held)
            .await
        {
            tracing::warn!(error = %e, "the changed request was not seeded");
        }
    }
}

/// The tasks `rule` makes of `task`'s fetched `page`, and why it made none or fewer than its
/// values asked for.
fn chained_tasks(
    context: &CrawlContext,
    task: &Task,
    rule: &ChainRule,
    page: &FetchedPage,
    items: Option<&PageItems>,
) -> (Vec<NewTask>, Option<ChainStop>) {
    let step = step_of(task.data.as_ref());
    let body = page.body.as_ref().map(|b| &b.bytes()[..]);
    let fields = items.into_iter().flat_map(|i| &i.items).map(|i| &i.fields);
    let values = page_values(rule, body, fields);
    let next = match values.map(|v| next_requests(rule, page.final_url.as_url(), &v, step)) {
        Ok(ChainStep::Next(next)) => next,
        Ok(ChainStep::Stop(stop)) | Err(stop) => return (Vec::new(), Some(stop)),
    };
    let mut stop = None;
    let mut tasks = Vec::with_capacity(next.len());
    for request in next {
        let data = match chained_data(task.data.clone(), rule, &request, step) {
            Ok(data) => data,
            Err(why) => {
                stop = Some(why);
                continue;
            }
        };
        let url = match CanonicalUrl::parse(&request.url) {
            Ok(url) => context.scope.normalise(url),
            Err(e) => {
                stop = Some(invalid(format!("{}: {e}", request.url)));
                continue;
            }
        };
        if let Err(reason) = context.scope.check(&url, task.depth) {
            stop = Some(invalid(format!("{url} is out of scope: {reason}")));
            continue;
        }
        tasks.push(NewTask {
            lane: context.scope.lane_of(url.as_str()),
            priority: link_priority(context, &url, Some(&data)),
            url,
            depth: task.depth,
            parent: Some(task.task_id.clone()),
            data: Some(data),
        });
    }
    (tasks, stop)
}

fn invalid(detail: String) -> ChainStop {
    ChainStop::Invalid {
        detail: truncate(&detail, 200).to_owned(),
    }
}
