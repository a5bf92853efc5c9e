//! The sweeper's event glue, a library so that the integration tests drive the very handler the
//! Lambda runtime calls (`main.rs` only wires it).

pub mod handler;
