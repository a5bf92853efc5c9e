//! Where an unfinished seed goes on: the deployed seeder sends its own continuation (the same
//! request with the cursor it stopped at) to the seed queue that triggers it, so a manifest of
//! any size seeds itself to the end, one invocation after another, with no caller in the loop.

use super::SeedRequest;
use crate::queue::QueueError;
use std::sync::{Mutex, PoisonError};

/// The seed queue: seed requests for the seeder (`trawl submit`'s, and its own continuations).
pub trait SeedQueue: Send + Sync {
    fn send(&self, request: &SeedRequest) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// Keeps the requests in the process (tests, and callers that follow cursors themselves).
#[derive(Debug, Default)]
pub struct LocalSeedQueue {
    requests: Mutex<Vec<SeedRequest>>,
}

impl LocalSeedQueue {
    /// The requests sent so far, removed from the queue.
    pub fn take(&self) -> Vec<SeedRequest> {
        std::mem::take(&mut *self.requests.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl SeedQueue for LocalSeedQueue {
    async fn send(&self, request: &SeedRequest) -> Result<(), QueueError> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        Ok(())
    }
}
