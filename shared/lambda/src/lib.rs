//! trawl-lambda: the glue every trawl function shares, written once: when an invocation stops
//! starting new work (`deadline`), how a failed invocation is reported (`HandlerError`) and the
//! metrics it writes to its log (`metrics`).
//! Each function's `main.rs` builds its settings, clients and handler state once per cold start
//! and lends the state to `lambda_runtime::service_fn`.

pub mod deadline;
mod error;
pub mod metrics;

pub use deadline::work_deadline;
pub use error::{HandlerError, bounded};
