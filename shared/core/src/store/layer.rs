//! A store with a layer around each of its calls: what wraps a store (the write meter, fault
//! injection, modelled latency) is a [`Layer`], and [`Layered`] implements the record ports
//! (`CrawlRecords`, `TaskRecords`, `HostStore`) for every layer, here, once.
//!
//! The rule: a new store operation is added to its record port, to [`Call`] and to [`Layered`]
//! here, never to each wrapper; a layer sees calls as data and reads only those it acts on.
//!
//! Each call goes: [`Layer::before`] (an error is answered instead, and the call is not made),
//! the inner store's call, then, when that succeeded, [`Layer::after`] with what it answered
//! (an error replaces the answer: the write landed, its answer was lost). A failed inner call
//! is answered as it failed, without `after`.

use super::budget::PageBudget;
use super::{
    Applied, CrawlRecords, HostCounts, HostPage, HostStore, InTurnClaims, RosterPage, Seeded,
    StatusCounts, StoreResult, TaskPage, TaskQuery, TaskRecords, TaskSummary,
};
use std::future::Future;
use std::sync::Arc;
use trawl_domain::calls::CallTally;
use trawl_domain::canonical::{CrawlId, TaskId};
use trawl_domain::crawl::transition::CrawlUpdate;
use trawl_domain::crawl::{Crawl, CrawlState};
use trawl_domain::host::Host;
use trawl_domain::request::RequestId;
use trawl_domain::roster::Place;
use trawl_domain::task::Task;
use trawl_domain::transition::{Insert, Update};

/// One call to the record ports, with its arguments: a variant per method.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    InsertCrawl {
        crawl: &'a Crawl,
    },
    ReadCrawl {
        id: &'a CrawlId,
    },
    QueryCrawls {
        state: Option<CrawlState>,
    },
    ApplyCrawl {
        id: &'a CrawlId,
        update: &'a CrawlUpdate,
    },
    RemoveCrawl {
        id: &'a CrawlId,
    },
    ReportCalls {
        id: &'a CrawlId,
        update: &'a CrawlUpdate,
    },
    Insert {
        tasks: &'a [Insert],
    },
    Get {
        crawl_id: &'a CrawlId,
        task_id: &'a TaskId,
    },
    Known {
        crawl_id: &'a CrawlId,
        ids: &'a [TaskId],
    },
    Apply {
        crawl_id: &'a CrawlId,
        task_id: &'a TaskId,
        update: &'a Update,
    },
    /// `due_tasks`, or `due_in_lane` of `lane`.
    DueTasks {
        crawl_id: &'a CrawlId,
        host: &'a str,
        lane: Option<&'a str>,
        limit: u32,
    },
    Roster {
        crawl_id: &'a CrawlId,
        host: &'a str,
        limit: u32,
    },
    Query {
        query: &'a TaskQuery,
    },
    Counts {
        crawl_id: &'a CrawlId,
    },
    DeleteTasks {
        crawl_id: &'a CrawlId,
    },
    GetHost {
        crawl_id: &'a CrawlId,
        name: &'a str,
    },
    PutHost {
        crawl_id: &'a CrawlId,
        host: &'a Host,
        counted: HostCounts,
    },
    HostCounts {
        crawl_id: &'a CrawlId,
    },
    HostScan {
        crawl_id: &'a CrawlId,
    },
    SetHostScan {
        crawl_id: &'a CrawlId,
        at: Option<&'a str>,
    },
    AddSeeded {
        crawl_id: &'a CrawlId,
        name: &'a str,
        n: u64,
        request: RequestId,
    },
    ListHosts {
        crawl_id: &'a CrawlId,
        cursor: Option<&'a str>,
        limit: u32,
    },
    DeleteHosts {
        crawl_id: &'a CrawlId,
    },
}

impl Call<'_> {
    /// The operation's name, as errors, faults and meters name it: the store operation a
    /// caller knows (`create_crawl`, `seed`, …); a write of an update by its event
    /// (`finish`, `complete_crawl`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Call::InsertCrawl { .. } => "create_crawl",
            Call::ReadCrawl { .. } => "get_crawl",
            Call::QueryCrawls { .. } => "list_crawls",
            Call::ApplyCrawl { update, .. } => update.event.name(),
            Call::RemoveCrawl { .. } => "delete_crawl",
            Call::ReportCalls { update, .. } => update.event.name(),
            Call::Insert { .. } => "seed",
            Call::Get { .. } => "get",
            Call::Known { .. } => "known",
            Call::Apply { update, .. } => update.event.name(),
            Call::DueTasks { .. } => "due_tasks",
            Call::Roster { .. } => "roster",
            Call::Query { .. } => "query",
            Call::Counts { .. } => "counts",
            Call::DeleteTasks { .. } => "delete_tasks",
            Call::GetHost { .. } => "get_host",
            Call::PutHost { .. } => "put_host",
            Call::HostCounts { .. } => "host_counts",
            Call::HostScan { .. } => "host_scan",
            Call::SetHostScan { .. } => "set_host_scan",
            Call::AddSeeded { .. } => "add_seeded",
            Call::ListHosts { .. } => "list_hosts",
            Call::DeleteHosts { .. } => "delete_hosts",
        }
    }
}

/// What a call answered, for a layer to read.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// `insert_crawl`: the stored crawl, and whether it was created.
    CrawlInserted(&'a Crawl, bool),
    /// `apply_crawl`.
    Crawl(&'a Applied<Crawl>),
    /// `insert`: per task, in input order.
    Seeded(&'a [Seeded]),
    /// `apply`.
    Task(&'a Applied<Task>),
    /// `put_host`: whether it was written.
    Written(bool),
    /// `get_host`, `add_seeded`.
    Host(Option<&'a Host>),
    /// `list_hosts`.
    Hosts(&'a HostPage),
    /// The answers no layer reads: the other reads, queries, counts and deletions.
    Other,
}

/// What a [`Layered`] store does around each call (see the module docs).
pub trait Layer: Send + Sync {
    /// What `before` hands to `after` of the same call.
    type Before: Send;

    /// Before the call: an error is answered instead of making it.
    fn before(&self, call: &Call<'_>) -> impl Future<Output = StoreResult<Self::Before>> + Send;

    /// After a call that succeeded, with what it answered: an error replaces the answer.
    fn after(
        &self,
        call: &Call<'_>,
        before: Self::Before,
        outcome: Outcome<'_>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// A layer that does nothing: the store as it is (the conformance suite runs through it, to
/// check that [`Layered`] forwards every call).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLayer;

impl Layer for NoLayer {
    type Before = ();

    async fn before(&self, _: &Call<'_>) -> StoreResult<()> {
        Ok(())
    }

    async fn after(&self, _: &Call<'_>, (): (), _: Outcome<'_>) -> StoreResult<()> {
        Ok(())
    }
}

/// A layer shared with others (faults shared by a store and its blobs, say).
impl<L: Layer> Layer for Arc<L> {
    type Before = L::Before;

    fn before(&self, call: &Call<'_>) -> impl Future<Output = StoreResult<L::Before>> + Send {
        L::before(self, call)
    }

    fn after(
        &self,
        call: &Call<'_>,
        before: L::Before,
        outcome: Outcome<'_>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        L::after(self, call, before, outcome)
    }
}

/// `inner` with `layer` around each of its calls.
#[derive(Debug, Clone, Default)]
pub struct Layered<S, L> {
    pub inner: S,
    pub layer: L,
}

impl<S, L> Layered<S, L> {
    pub fn new(inner: S, layer: L) -> Self {
        Self { inner, layer }
    }
}

impl<S, L: Layer> Layered<S, L> {
    /// `call` made by `inner`, with the layer around it; `outcome` shows the answer to `after`.
    /// `inner` is a closure: the call must not start (an adapter may start work when the call
    /// is made, before its future is polled) unless `before` lets it through.
    async fn around<T, F: Future<Output = StoreResult<T>>>(
        &self,
        call: Call<'_>,
        inner: impl FnOnce() -> F,
        outcome: fn(&T) -> Outcome<'_>,
    ) -> StoreResult<T> {
        let before = self.layer.before(&call).await?;
        let answer = inner().await?;
        self.layer.after(&call, before, outcome(&answer)).await?;
        Ok(answer)
    }
}

/// The outcome of a call whose answer no layer reads.
fn other<T>(_: &T) -> Outcome<'_> {
    Outcome::Other
}

impl<S: CrawlRecords, L: Layer> CrawlRecords for Layered<S, L> {
    async fn insert_crawl(&self, crawl: &Crawl) -> StoreResult<(Crawl, bool)> {
        self.around(
            Call::InsertCrawl { crawl },
            || self.inner.insert_crawl(crawl),
            |(stored, created)| Outcome::CrawlInserted(stored, *created),
        )
        .await
    }

    async fn read_crawl(&self, id: &CrawlId) -> StoreResult<Option<Crawl>> {
        let call = Call::ReadCrawl { id };
        self.around(call, || self.inner.read_crawl(id), other).await
    }

    async fn query_crawls(&self, state: Option<CrawlState>) -> StoreResult<Vec<Crawl>> {
        let call = Call::QueryCrawls { state };
        self.around(call, || self.inner.query_crawls(state), other)
            .await
    }

    async fn apply_crawl(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<Applied<Crawl>> {
        let call = Call::ApplyCrawl { id, update };
        let write = || self.inner.apply_crawl(id, update);
        self.around(call, write, |applied| Outcome::Crawl(applied))
            .await
    }

    async fn remove_crawl(&self, id: &CrawlId) -> StoreResult<()> {
        let call = Call::RemoveCrawl { id };
        self.around(call, || self.inner.remove_crawl(id), other)
            .await
    }

    async fn report_calls(&self, id: &CrawlId, update: &CrawlUpdate) -> StoreResult<bool> {
        let call = Call::ReportCalls { id, update };
        let write = || self.inner.report_calls(id, update);
        self.around(call, write, |applied| Outcome::Written(*applied))
            .await
    }

    fn own_calls(&self) -> CallTally {
        self.inner.own_calls()
    }

    fn page_budget(&self) -> Option<&PageBudget> {
        self.inner.page_budget()
    }
}

impl<S: TaskRecords, L: Layer> TaskRecords for Layered<S, L> {
    const IN_TURN_CLAIMS: InTurnClaims = S::IN_TURN_CLAIMS;
    const ROSTERS: bool = S::ROSTERS;

    async fn insert(&self, tasks: &[Insert]) -> StoreResult<Vec<Seeded>> {
        let call = Call::Insert { tasks };
        self.around(
            call,
            || self.inner.insert(tasks),
            |out| Outcome::Seeded(out),
        )
        .await
    }

    async fn get(&self, crawl_id: &CrawlId, task_id: &TaskId) -> StoreResult<Option<Task>> {
        let call = Call::Get { crawl_id, task_id };
        self.around(call, || self.inner.get(crawl_id, task_id), other)
            .await
    }

    async fn known(&self, crawl_id: &CrawlId, ids: &[TaskId]) -> StoreResult<Vec<bool>> {
        let call = Call::Known { crawl_id, ids };
        self.around(call, || self.inner.known(crawl_id, ids), other)
            .await
    }

    async fn apply(
        &self,
        crawl_id: &CrawlId,
        task_id: &TaskId,
        update: &Update,
    ) -> StoreResult<Applied<Task>> {
        let call = Call::Apply {
            crawl_id,
            task_id,
            update,
        };
        let write = || self.inner.apply(crawl_id, task_id, update);
        self.around(call, write, |applied| Outcome::Task(applied))
            .await
    }

    async fn due_tasks(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let call = Call::DueTasks {
            crawl_id,
            host,
            lane: None,
            limit,
        };
        let read = || self.inner.due_tasks(crawl_id, host, limit);
        self.around(call, read, other).await
    }

    async fn roster(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        after: Option<&Place>,
        limit: u32,
    ) -> StoreResult<RosterPage> {
        let call = Call::Roster {
            crawl_id,
            host,
            limit,
        };
        let read = || self.inner.roster(crawl_id, host, after, limit);
        self.around(call, read, other).await
    }

    async fn due_in_lane(
        &self,
        crawl_id: &CrawlId,
        host: &str,
        lane: &str,
        limit: u32,
    ) -> StoreResult<Vec<TaskSummary>> {
        let call = Call::DueTasks {
            crawl_id,
            host,
            lane: Some(lane),
            limit,
        };
        let read = || self.inner.due_in_lane(crawl_id, host, lane, limit);
        self.around(call, read, other).await
    }

    async fn query(&self, query: &TaskQuery) -> StoreResult<TaskPage> {
        let call = Call::Query { query };
        self.around(call, || self.inner.query(query), other).await
    }

    async fn counts(&self, crawl_id: &CrawlId) -> StoreResult<StatusCounts> {
        let call = Call::Counts { crawl_id };
        self.around(call, || self.inner.counts(crawl_id), other)
            .await
    }

    async fn delete_tasks(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let call = Call::DeleteTasks { crawl_id };
        self.around(call, || self.inner.delete_tasks(crawl_id), other)
            .await
    }
}

impl<S: HostStore, L: Layer> HostStore for Layered<S, L> {
    async fn get_host(&self, crawl_id: &CrawlId, name: &str) -> StoreResult<Option<Host>> {
        let call = Call::GetHost { crawl_id, name };
        let read = || self.inner.get_host(crawl_id, name);
        self.around(call, read, |host| Outcome::Host(host.as_ref()))
            .await
    }

    async fn put_host(
        &self,
        crawl_id: &CrawlId,
        host: &Host,
        counted: HostCounts,
    ) -> StoreResult<bool> {
        let call = Call::PutHost {
            crawl_id,
            host,
            counted,
        };
        let write = || self.inner.put_host(crawl_id, host, counted);
        self.around(call, write, |written| Outcome::Written(*written))
            .await
    }

    async fn host_counts(&self, crawl_id: &CrawlId) -> StoreResult<Option<HostCounts>> {
        let call = Call::HostCounts { crawl_id };
        self.around(call, || self.inner.host_counts(crawl_id), other)
            .await
    }

    async fn add_seeded(
        &self,
        crawl_id: &CrawlId,
        name: &str,
        n: u64,
        request: RequestId,
    ) -> StoreResult<Option<Host>> {
        let call = Call::AddSeeded {
            crawl_id,
            name,
            n,
            request,
        };
        let write = || self.inner.add_seeded(crawl_id, name, n, request);
        self.around(call, write, |host| Outcome::Host(host.as_ref()))
            .await
    }

    async fn list_hosts(
        &self,
        crawl_id: &CrawlId,
        cursor: Option<String>,
        limit: u32,
    ) -> StoreResult<HostPage> {
        let call = Call::ListHosts {
            crawl_id,
            cursor: cursor.as_deref(),
            limit,
        };
        let read = || self.inner.list_hosts(crawl_id, cursor.clone(), limit);
        self.around(call, read, |page| Outcome::Hosts(page)).await
    }

    async fn host_scan(&self, crawl_id: &CrawlId) -> StoreResult<Option<String>> {
        let call = Call::HostScan { crawl_id };
        self.around(call, || self.inner.host_scan(crawl_id), other)
            .await
    }

    async fn set_host_scan(&self, crawl_id: &CrawlId, at: Option<&str>) -> StoreResult<()> {
        let call = Call::SetHostScan { crawl_id, at };
        let write = || self.inner.set_host_scan(crawl_id, at);
        self.around(call, write, other).await
    }

    async fn delete_hosts(&self, crawl_id: &CrawlId) -> StoreResult<u64> {
        let call = Call::DeleteHosts { crawl_id };
        self.around(call, || self.inner.delete_hosts(crawl_id), other)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::{CrawlStore, StoreError};
    use std::sync::Mutex;
    use trawl_domain::crawl::CrawlConfig;
    use trawl_domain::task::Status;

    /// Refuses the calls named `refuse`, loses the answers of those named `lose`, and notes
    /// every `after` it sees with what its `before` handed it.
    struct Script {
        refuse: &'static str,
        lose: &'static str,
        seen: Mutex<Vec<(&'static str, &'static str)>>,
    }

    impl Layer for Script {
        type Before = &'static str;

        async fn before(&self, call: &Call<'_>) -> StoreResult<&'static str> {
            match call.name() {
                name if name == self.refuse => Err(StoreError::unavailable(name, "refused")),
                name => Ok(name),
            }
        }

        async fn after(
            &self,
            call: &Call<'_>,
            before: &'static str,
            _: Outcome<'_>,
        ) -> StoreResult<()> {
            self.seen.lock().unwrap().push((call.name(), before));
            match call.name() {
                name if name == self.lose => Err(StoreError::unavailable(name, "lost")),
                _ => Ok(()),
            }
        }
    }

    #[tokio::test]
    async fn a_refused_call_is_not_made_a_lost_answer_was_applied_and_a_failed_call_is_not_seen_after()
     {
        // GIVEN a store whose layer refuses listings and loses the answer of a crawl's creation
        let store = Layered::new(
            MemoryStore::new(),
            Script {
                refuse: "list_crawls",
                lose: "create_crawl",
                seen: Mutex::default(),
            },
        );
        let crawl = Crawl::new(CrawlId::parse("c1").unwrap(), CrawlConfig::default(), 1);

        // WHEN a crawl is created, crawls listed, and a query made with a cursor the store
        // never issued
        let created = store.create_crawl(&crawl).await;
        let listed = store.list_crawls(None).await;
        let queried = store
            .query(&TaskQuery {
                crawl_id: crawl.id.clone(),
                status: Status::Pending,
                updated_before: None,
                limit: 10,
                cursor: Some("not-a-cursor".to_owned()),
                part: crate::store::Part::WHOLE,
            })
            .await;

        // THEN the creation answered an error but is applied; the listing was answered by the
        // layer alone; the failed query is answered as it failed; `after` saw only the
        // creation, with what `before` handed it for that call
        assert!(
            matches!(created, Err(StoreError::Unavailable { .. })),
            "{created:?}"
        );
        assert!(store.inner.get_crawl(&crawl.id).await.unwrap().is_some());
        assert!(
            matches!(listed, Err(StoreError::Unavailable { .. })),
            "{listed:?}"
        );
        assert!(
            matches!(queried, Err(StoreError::InvalidCursor)),
            "{queried:?}"
        );
        let seen = store.layer.seen.lock().unwrap().clone();
        assert_eq!(seen, [("create_crawl", "create_crawl")]);
    }
}
