//! Tracing set-up for the Lambda functions: JSON lines (CloudWatch's JSON log format), level
//! from `RUST_LOG` (default `info`), no ANSI colours, no timestamps (Lambda adds its own).

use tracing_subscriber::EnvFilter;

pub fn init_lambda() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second initialisation (tests) is harmless: keep the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_ansi(false)
        .without_time()
        .with_current_span(false)
        .try_init();
}
