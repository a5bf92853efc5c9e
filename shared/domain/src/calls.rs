//! Call accounting: every adapter counts its backend calls by operation, so tests and benchmarks
//! can report calls (and so cost) per URL. Plain atomic counters: cheap on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! calls {
    ($($variant:ident => $service:literal, $op:literal;)*) => {
        /// One kind of backend call.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Call { $($variant),* }

        impl Call {
            pub const ALL: &'static [Call] = &[$(Call::$variant),*];

            pub fn service(self) -> &'static str {
                match self { $(Call::$variant => $service),* }
            }

            pub fn operation(self) -> &'static str {
                match self { $(Call::$variant => $op),* }
            }
        }
    };
}

calls! {
    DynamoPutItem => "dynamodb", "PutItem";
    DynamoUpdateItem => "dynamodb", "UpdateItem";
    DynamoGetItem => "dynamodb", "GetItem";
    DynamoQuery => "dynamodb", "Query";
    DynamoDeleteItem => "dynamodb", "DeleteItem";
    DynamoBatchWriteItem => "dynamodb", "BatchWriteItem";
    S3PutObject => "s3", "PutObject";
    S3GetObject => "s3", "GetObject";
    S3DeleteObject => "s3", "DeleteObject";
    S3ListObjects => "s3", "ListObjectsV2";
    S3CreateMultipartUpload => "s3", "CreateMultipartUpload";
    S3UploadPart => "s3", "UploadPart";
    S3CompleteMultipartUpload => "s3", "CompleteMultipartUpload";
    S3AbortMultipartUpload => "s3", "AbortMultipartUpload";
    SqsSendMessageBatch => "sqs", "SendMessageBatch";
    SqsReceiveMessage => "sqs", "ReceiveMessage";
    SqsDeleteMessageBatch => "sqs", "DeleteMessageBatch";
    SqsChangeMessageVisibility => "sqs", "ChangeMessageVisibility";
    SqliteWrite => "sqlite", "write";
    SqliteRead => "sqlite", "read";
    FileWrite => "files", "write";
    FileRead => "files", "read";
    FileDelete => "files", "delete";
    LocalQueueSend => "local-queue", "send";
    LocalQueueReceive => "local-queue", "receive";
}

/// Counters for every `Call`; share one behind an `Arc` between the adapters of a process.
#[derive(Debug)]
pub struct CallCounts {
    counts: Vec<AtomicU64>,
}

impl Default for CallCounts {
    fn default() -> Self {
        Self {
            counts: Call::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl CallCounts {
    pub fn record(&self, call: Call) {
        self.add(call, 1);
    }

    pub fn add(&self, call: Call, n: u64) {
        if let Some(counter) = self.counts.get(call as usize) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self, call: Call) -> u64 {
        self.counts
            .get(call as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Non-zero counts, in `Call::ALL` order.
    pub fn snapshot(&self) -> Vec<(Call, u64)> {
        Call::ALL
            .iter()
            .map(|&c| (c, self.get(c)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Sum of the calls to one service (`dynamodb`, `s3`, `sqs` …).
    pub fn service_total(&self, service: &str) -> u64 {
        Call::ALL
            .iter()
            .filter(|c| c.service() == service)
            .map(|&c| self.get(c))
            .sum()
    }

    pub fn reset(&self) {
        for c in &self.counts {
            c.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_operation_and_service() {
        let counts = CallCounts::default();
        counts.record(Call::DynamoUpdateItem);
        counts.add(Call::DynamoUpdateItem, 2);
        counts.record(Call::S3PutObject);
        assert_eq!(counts.get(Call::DynamoUpdateItem), 3);
        assert_eq!(counts.service_total("dynamodb"), 3);
        assert_eq!(
            counts.snapshot(),
            vec![(Call::DynamoUpdateItem, 3), (Call::S3PutObject, 1)]
        );
        counts.reset();
        assert!(counts.snapshot().is_empty());
    }
}
