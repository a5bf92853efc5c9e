//! trawl-core: the domain, ports and adapters shared by trawl's Lambda functions and CLI.
//!
//! Ports are small traits (`store::TaskStore`, `store::CrawlStore`, `blob::BlobStore`,
//! `queue::WorkQueue`); each has an AWS adapter (DynamoDB, S3, SQS through the real SDK) and an
//! embedded one (SQLite, a directory, an in-process queue), in a folder of its own.

pub mod aws;
pub mod blob;
pub mod calls;
pub mod canonical;
pub mod crawl;
pub mod crawler;
pub mod deliver;
pub mod discover;
pub mod fetch;
pub mod frontier;
pub mod logging;
pub mod queue;
pub mod retry;
pub mod runner;
pub mod seed;
pub mod settings;
pub mod store;
pub mod sweep;
pub mod task;
