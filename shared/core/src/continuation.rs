//! Where unfinished work goes on: the deployed seeder sends its own continuation (the same
//! request with the cursor it stopped at) to the seed queue that triggers it, so a manifest of
//! any size seeds itself to the end, and a re-extraction of any crawl runs to its end, one
//! invocation after another, with no caller in the loop.

use crate::operate::OperationRequest;
use crate::queue::QueueError;
use crate::seed::SeedRequest;
use std::sync::{Mutex, PoisonError};

/// The seed queue: seed requests and operations for the seeder (`trawl submit`'s, and its own
/// continuations).
pub trait SeedQueue: Send + Sync {
    fn send(&self, request: &SeedRequest) -> impl Future<Output = Result<(), QueueError>> + Send;

    /// An operation to run (an unfinished `reextract`, asked again with its cursor).
    fn send_operation(
        &self,
        request: &OperationRequest,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// Keeps the requests in the process (tests, and callers that follow cursors themselves).
#[derive(Debug, Default)]
pub struct LocalSeedQueue {
    requests: Mutex<Vec<SeedRequest>>,
    operations: Mutex<Vec<OperationRequest>>,
}

impl LocalSeedQueue {
    /// The seed requests sent so far, removed from the queue.
    pub fn take(&self) -> Vec<SeedRequest> {
        std::mem::take(&mut *self.requests.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The operations sent so far, removed from the queue.
    pub fn take_operations(&self) -> Vec<OperationRequest> {
        std::mem::take(
            &mut *self
                .operations
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
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

    async fn send_operation(&self, request: &OperationRequest) -> Result<(), QueueError> {
        self.operations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        Ok(())
    }
}
