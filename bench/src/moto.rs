//! A moto server (the AWS API emulator the integration tests use), started from the tests'
//! own launcher script on 127.0.0.1 with an ephemeral port, and a fresh stack on it
//! (`trawl_aws::stack::create_stack`, as `trawl setup` makes one) with every adapter counting its
//! calls.

use crate::error::{BenchResult, Context, check};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use trawl_aws::clients::Clients;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::s3::S3BlobStore;
use trawl_aws::sqs::SqsQueue;
use trawl_aws::stack::create_stack;
use trawl_domain::calls::CallCounts;

const LAUNCHER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/support/moto_server.py"
);
/// Status-index shards, as deployed by default.
pub const SHARDS: u32 = 4;

/// A moto server; stops when dropped (its stdin closes).
pub struct Moto {
    pub endpoint: String,
    child: Child,
}

impl Moto {
    /// `threaded` serves requests in parallel; single-threaded serialises them, which makes
    /// DynamoDB conditional writes atomic as on the real service.
    pub fn start(threaded: bool) -> BenchResult<Moto> {
        let mut child = Command::new("python3")
            .arg(LAUNCHER)
            .arg(if threaded { "threaded" } else { "single" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .step("start moto (python3)")?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out)
                .read_line(&mut line)
                .step("read moto port")?;
        }
        let port: u16 = line.trim().parse().map_err(|_| {
            check(
                "start moto",
                format!("printed {line:?}; install it with: python3 -m pip install 'moto[server]'"),
            )
        })?;
        Ok(Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            child,
        })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// AWS clients for `endpoint` with fixed test credentials (never the developer's own).
pub async fn clients(endpoint: &str) -> Clients {
    let config = trawl_aws::clients::config_loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "trawl-bench",
        ))
        .load()
        .await;
    Clients::new(&config)
}

/// A table, bucket and standard queue of their own, the adapters on them sharing one counter.
pub struct Stack {
    pub store: DynamoStore,
    pub blobs: S3BlobStore,
    pub queue: SqsQueue,
    pub calls: Arc<CallCounts>,
    /// The same table through a counter of its own: the harness's checks are not the crawler's
    /// calls.
    pub probe: DynamoStore,
    pub table: String,
    pub bucket: String,
    pub queue_url: String,
    pub delivery_queue_url: String,
    pub seed_queue_url: String,
}

/// A stack called `name`, made as `trawl setup` makes one (`create_stack`).
pub async fn stack(endpoint: &str, name: &str) -> BenchResult<Stack> {
    let clients = clients(endpoint).await;
    let calls = Arc::new(CallCounts::default());
    let made = create_stack(&clients, name)
        .await
        .map_err(|e| check("create stack", e.to_string()))?;
    Ok(Stack {
        probe: DynamoStore::new(
            clients.dynamodb.clone(),
            &made.table,
            SHARDS,
            Arc::new(CallCounts::default()),
        ),
        store: DynamoStore::new(clients.dynamodb, &made.table, SHARDS, calls.clone()),
        blobs: S3BlobStore::new(clients.s3, &made.bucket, calls.clone()),
        queue: SqsQueue::new(clients.sqs, &made.queue_url, calls.clone()),
        calls,
        table: made.table,
        bucket: made.bucket,
        queue_url: made.queue_url,
        delivery_queue_url: made.delivery_queue_url,
        seed_queue_url: made.seed_queue_url,
    })
}
