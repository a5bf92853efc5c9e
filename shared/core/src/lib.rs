//! trawl-core: the ports and the services shared by trawl's Lambda functions and CLI.
//!
//! Ports are small traits (`store::TaskRecords`, `store::CrawlStore`, `blob::BlobStore`,
//! `queue::WorkQueue`, `clock::Clock`); the task operations are written once over the task
//! records (`store::TaskStore`). Their adapters live in their own crates, one folder each:
//! `trawl-aws` (DynamoDB, S3, SQS through the real SDK) and `trawl-embedded` (SQLite, a
//! directory, an in-process queue). `store::memory` is the exception: an in-memory store with no
//! I/O, for tests and simulators. Decisions about a task live in `trawl-domain`. A binary
//! builds its ports once, as an `app::App`, and every service takes it under one type parameter.
//!
//! The services are gated by cargo features so that each function links what it runs: the
//! frontier, the sweep and the ports are always in; `fetch` (the HTTP client), `extract` (the
//! HTML and XPath engines), `crawl`, `seed` and `deliver` add the rest (Cargo.toml says which).

pub mod app;
pub mod backoff;
pub mod blob;
pub mod calls;
pub mod cause;
pub mod chain;
#[cfg(feature = "fetch")]
pub mod check;
pub mod clock;
#[cfg(feature = "seed")]
pub mod continuation;
#[cfg(feature = "crawl")]
pub mod crawler;
#[cfg(feature = "deliver")]
pub mod deliver;
pub mod discover;
#[cfg(feature = "extract")]
pub mod extract;
#[cfg(feature = "fetch")]
pub mod fetch;
pub mod frontier;
mod gz;
#[cfg(feature = "seed")]
pub mod operate;
pub mod problem;
pub mod queue;
#[cfg(feature = "extract")]
pub mod reextract;
#[cfg(feature = "extract")]
pub mod revisit;
#[cfg(feature = "crawl")]
pub mod runner;
pub mod secrets;
#[cfg(feature = "seed")]
pub mod seed;
pub mod store;
pub mod sweep;
pub mod url_rules;
mod warc;
