//! trawl-domain: what a crawl, a task and a URL are, and every decision about them, as pure
//! functions of (state, event, now). No I/O: the services in `trawl-core` call these and the
//! adapters only persist the results.

pub mod calls;
pub mod canonical;
pub mod capacity;
pub mod chain;
pub mod compaction;
pub mod crawl;
pub mod estimate;
pub mod extract;
pub mod fetched;
pub mod host;
pub mod image;
pub mod lane;
pub mod paging;
pub mod price;
pub mod priority;
pub mod report;
pub mod request;
pub mod retry;
pub mod revisit;
pub mod roster;
pub mod schedule;
pub mod task;
pub mod transition;
pub mod turn;
