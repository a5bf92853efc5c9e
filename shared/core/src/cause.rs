//! Errors keep their cause. A port's error (`StoreError`, `BlobError`, `QueueError`) says what
//! failed in one line for users (its `Display`, unchanged by a cause), and keeps the backend's
//! own error (the SDK's, SQLite's, the file system's) as its `source()` for callers and logs:
//! `DisplayErrorContext`, `{:?}` or a walk of `source()` reach the whole chain.

/// The backend's error behind a port's error.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;
