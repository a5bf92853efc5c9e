//! Call accounting: every adapter counts its backend calls by operation, so tests and benchmarks
//! can report calls (and so cost) per URL, and each invocation can add its calls to the crawl it
//! worked for (`CallCounts::take_unreported`). Plain atomic counters: cheap on the hot path.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! calls {
    ($($variant:ident => $service:literal, $op:literal;)*) => {
        /// One kind of backend call.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(into = "&'static str", try_from = "String")]
        pub enum Call { $($variant),* }

        impl Call {
            pub const ALL: &'static [Call] = &[$(Call::$variant),*];

            /// `service.operation`, e.g. `dynamodb.PutItem`: how stores and reports name it.
            pub fn name(self) -> &'static str {
                match self { $(Call::$variant => concat!($service, ".", $op)),* }
            }

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
    DynamoBatchGetItem => "dynamodb", "BatchGetItem";
    DynamoTransactWriteItems => "dynamodb", "TransactWriteItems";
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
    SqsGetQueueAttributes => "sqs", "GetQueueAttributes";
    SqliteWrite => "sqlite", "write";
    SqliteRead => "sqlite", "read";
    FileWrite => "files", "write";
    FileRead => "files", "read";
    FileDelete => "files", "delete";
    LocalQueueSend => "local-queue", "send";
    LocalQueueReceive => "local-queue", "receive";
}

impl Call {
    pub fn from_name(name: &str) -> Option<Self> {
        Call::ALL.iter().copied().find(|c| c.name() == name)
    }
}

impl From<Call> for &'static str {
    fn from(call: Call) -> Self {
        call.name()
    }
}

impl TryFrom<String> for Call {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        Call::from_name(&name).ok_or_else(|| format!("unknown call {name:?}"))
    }
}

/// Call counts as plain numbers: a crawl's accumulated totals, or a share to add to them.
/// Absent kinds are zero.
pub type CallTally = BTreeMap<Call, u64>;

/// Counters for every `Call`; share one behind an `Arc` between the adapters of a process.
///
/// Besides the totals it keeps how many calls of each kind were already reported (added to a
/// crawl), so that invocations running side by side in one process (the CLI's workers) each
/// report a disjoint share and together every call exactly once.
#[derive(Debug)]
pub struct CallCounts {
    counts: Vec<AtomicU64>,
    reported: Vec<AtomicU64>,
    /// DynamoDB read units the reads consumed, in half units (`capacity::read_half_units`),
    /// as DynamoDB would bill them: a measure for the cost bench, never reported to a crawl.
    read_half_units: AtomicU64,
}

impl Default for CallCounts {
    fn default() -> Self {
        let zeros = || Call::ALL.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            counts: zeros(),
            reported: zeros(),
            read_half_units: AtomicU64::new(0),
        }
    }
}

impl CallCounts {
    pub fn record(&self, call: Call) {
        self.add(call, 1);
    }

    /// Counts a call that reports itself: the write that adds a share to a crawl includes its
    /// own call in that share, so it is counted here as already reported.
    pub fn record_reported(&self, call: Call) {
        // Reported first: a concurrent `take_unreported` in between then reports one call of
        // this kind late (at the next take), never twice.
        if let Some(reported) = self.reported.get(call as usize) {
            reported.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(counter) = self.counts.get(call as usize) {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The calls counted since the previous take, now marked reported. Concurrent callers get
    /// disjoint shares.
    pub fn take_unreported(&self) -> CallTally {
        let mut share = CallTally::new();
        for (&call, (counter, reported)) in Call::ALL
            .iter()
            .zip(self.counts.iter().zip(self.reported.iter()))
        {
            let total = counter.load(Ordering::SeqCst);
            let before = reported.fetch_max(total, Ordering::SeqCst);
            let n = total.saturating_sub(before);
            if n > 0 {
                share.insert(call, n);
            }
        }
        share
    }

    /// Gives back a share whose report failed: the next take reports it again.
    pub fn restore_unreported(&self, share: &CallTally) {
        for (&call, &n) in share {
            if let Some(reported) = self.reported.get(call as usize) {
                // Saturating: a `reset` in between must not wrap the counter.
                let _ = reported.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                    Some(r.saturating_sub(n))
                });
            }
        }
    }

    pub fn add(&self, call: Call, n: u64) {
        if let Some(counter) = self.counts.get(call as usize) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds the half read units of a DynamoDB read.
    pub fn add_read_half_units(&self, half_units: u64) {
        self.read_half_units
            .fetch_add(half_units, Ordering::Relaxed);
    }

    /// DynamoDB read units consumed since the last reset.
    pub fn read_units(&self) -> f64 {
        self.read_half_units.load(Ordering::Relaxed) as f64 / 2.0
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
        for c in self
            .counts
            .iter()
            .chain(&self.reported)
            .chain([&self.read_half_units])
        {
            c.store(0, Ordering::SeqCst);
        }
    }
}

/// Splits `share` between several recipients in proportion to `weights` (e.g. the crawls of one
/// batch, weighted by their messages): every call goes to exactly one recipient, the rounding
/// remainders to the heaviest. Result in the order of `weights`.
pub fn split(share: &CallTally, weights: &[u64]) -> Vec<CallTally> {
    let mut parts = vec![CallTally::new(); weights.len()];
    let total: u64 = weights.iter().sum();
    let heaviest = (0..weights.len()).max_by_key(|&i| (weights[i], std::cmp::Reverse(i)));
    let (Some(heaviest), true) = (heaviest, total > 0) else {
        return parts;
    };
    for (&call, &n) in share {
        let mut given = 0;
        for (part, &weight) in parts.iter_mut().zip(weights) {
            let portion = (u128::from(n) * u128::from(weight) / u128::from(total)) as u64;
            if portion > 0 {
                part.insert(call, portion);
            }
            given += portion;
        }
        if n > given {
            *parts[heaviest].entry(call).or_default() += n - given;
        }
    }
    parts
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

    #[test]
    fn each_call_is_reported_once() {
        let counts = CallCounts::default();
        counts.add(Call::DynamoGetItem, 3);
        counts.record(Call::S3PutObject);
        let first = counts.take_unreported();
        assert_eq!(
            first,
            CallTally::from([(Call::DynamoGetItem, 3), (Call::S3PutObject, 1)])
        );
        assert!(counts.take_unreported().is_empty());
        // A failed report is given back; the self-reporting write is never reported again.
        counts.record(Call::DynamoGetItem);
        let second = counts.take_unreported();
        counts.restore_unreported(&second);
        counts.record_reported(Call::DynamoUpdateItem);
        assert_eq!(
            counts.take_unreported(),
            CallTally::from([(Call::DynamoGetItem, 1)])
        );
        // The totals still count everything.
        assert_eq!(counts.get(Call::DynamoGetItem), 4);
        assert_eq!(counts.get(Call::DynamoUpdateItem), 1);
    }

    #[test]
    fn concurrent_takes_share_the_calls_without_overlap() {
        let counts = std::sync::Arc::new(CallCounts::default());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let counts = counts.clone();
                std::thread::spawn(move || {
                    let mut taken = 0;
                    for i in 0..1_000 {
                        counts.record(Call::SqsSendMessageBatch);
                        if i % 7 == 0 {
                            counts.record_reported(Call::SqsSendMessageBatch);
                            taken += 1;
                        }
                        if i % 10 == 0 {
                            taken += counts.take_unreported().values().sum::<u64>();
                        }
                    }
                    taken
                })
            })
            .collect();
        let taken: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let rest: u64 = counts.take_unreported().values().sum();
        assert_eq!(taken + rest, counts.get(Call::SqsSendMessageBatch));
    }

    #[test]
    fn splits_keep_every_call() {
        let share = CallTally::from([(Call::DynamoUpdateItem, 10), (Call::S3PutObject, 1)]);
        let parts = split(&share, &[1, 2]);
        assert_eq!(parts[0], CallTally::from([(Call::DynamoUpdateItem, 3)]));
        assert_eq!(
            parts[1],
            CallTally::from([(Call::DynamoUpdateItem, 7), (Call::S3PutObject, 1)])
        );
        assert_eq!(split(&share, &[5]), vec![share.clone()]);
        assert_eq!(split(&share, &[0, 0]), vec![CallTally::new(); 2]);
    }

    #[test]
    fn calls_are_named_service_dot_operation() {
        assert_eq!(Call::DynamoPutItem.name(), "dynamodb.PutItem");
        assert_eq!(
            Call::from_name("s3.ListObjectsV2"),
            Some(Call::S3ListObjects)
        );
        assert_eq!(Call::from_name("s3.Nope"), None);
        let tally = CallTally::from([(Call::SqsReceiveMessage, 2)]);
        let json = serde_json::to_string(&tally).unwrap();
        assert_eq!(json, r#"{"sqs.ReceiveMessage":2}"#);
        assert_eq!(serde_json::from_str::<CallTally>(&json).unwrap(), tally);
    }
}
