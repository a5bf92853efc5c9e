//! trawl-embedded: the one-machine adapters of trawl-core's ports: a SQLite store, page bodies in
//! a directory, and an in-process queue.

pub mod fs;
pub mod local_queue;
pub mod sqlite;
