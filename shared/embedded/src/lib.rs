//! trawl-embedded: the one-machine adapters of trawl-core's ports: a SQLite store, page bodies in
//! a directory.

pub mod fs;
pub mod sqlite;
