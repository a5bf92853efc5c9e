//! A DynamoDB table written before the sparse status index, read by today's code (moto): its
//! succeeded and pending tasks are listed in the status index and missing from their hosts' due
//! lists, where queries, counts and host turns now look. `trawl migrate` moves them, in bounded
//! batches, and moves nothing the second time. And a crawl whose hosts were filed under 16 host
//! shards, read by today's 32; and one created before the report lanes.

use crate::cli::{json_of, trawl_bin};
use crate::support::{clients, moto, unique};
use aws_sdk_dynamodb::types::AttributeValue;
use std::sync::Arc;
use tokio::process::Command;
use trawl_aws::dynamodb::DynamoStore;
use trawl_aws::stack::create_stack;
use trawl_core::frontier::{seed_tasks, update_host};
use trawl_core::store::CrawlRecords;
use trawl_core::store::{
    ClaimOutcome, CrawlStore, HostCounts, HostStore, TaskQuery, TaskRecords, TaskStore,
};
use trawl_domain::calls::{Call, CallCounts, CallTally};
use trawl_domain::canonical::{CanonicalUrl, CrawlId, TaskId};
use trawl_domain::crawl::transition::add_calls;
use trawl_domain::crawl::{Crawl, CrawlConfig};
use trawl_domain::host::{Host, host_shard};
use trawl_domain::request::RequestId;
use trawl_domain::task::{FetchRecord, Millis, NewTask, Status};

const T0: Millis = 1_700_000_000_000;
const SHARDS: u32 = 4;

/// Rewrites a stored task the way the code before the sparse index laid it out: listed under
/// its status's index key, without a host-index `due` (and, with `before_host_index`, without
/// the host-index key either).
async fn write_the_old_way(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    crawl: &CrawlId,
    id: &TaskId,
    status: Status,
    before_host_index: bool,
) {
    let gsi = format!("{crawl}#{}#{}", status.code(), id.shard(SHARDS));
    // Old items were in no roster; those written after the host index have its hash key.
    let update = if before_host_index {
        "SET gsi_pk = :g REMOVE due, hk, rk, rpos"
    } else {
        "SET gsi_pk = :g, hk = :hk REMOVE due, rk, rpos"
    };
    let mut request = client
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("{crawl}#{id}")))
        .update_expression(update)
        .expression_attribute_values(":g", AttributeValue::S(gsi));
    if !before_host_index {
        request = request
            .expression_attribute_values(":hk", AttributeValue::S(format!("{crawl}#old.test")));
    }
    request.send().await.unwrap();
}

async fn listed(store: &DynamoStore, crawl: &CrawlId, status: Status) -> Vec<TaskId> {
    let page = store
        .query(&TaskQuery {
            crawl_id: crawl.clone(),
            status,
            updated_before: None,
            limit: 100,
            cursor: None,
            part: trawl_core::store::Part::WHOLE,
        })
        .await
        .unwrap();
    page.tasks.into_iter().map(|t| t.task_id).collect()
}

#[tokio::test]
async fn an_old_table_is_migrated_to_the_hosts_due_lists_once() {
    // GIVEN a stack, and a crawl of 3 pages on one host: one fetched by today's code, one
    // fetched and one pending written the old way (the pending one before the host index)
    let endpoint = &moto::shared().endpoint;
    let clients = clients(endpoint).await;
    let stack = create_stack(&clients, &unique("migrate")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb.clone(), &stack.table, SHARDS, calls);
    let crawl = Crawl::new(CrawlId::parse("old").unwrap(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    // A crawl of that table: made before task counts were kept on its item (they are walked).
    clients
        .dynamodb
        .update_item()
        .table_name(&stack.table)
        .key("pk", AttributeValue::S("old#crawl".into()))
        .update_expression("REMOVE tasks_counted")
        .send()
        .await
        .unwrap();
    let urls: Vec<CanonicalUrl> = (0..3)
        .map(|i| CanonicalUrl::parse(&format!("http://old.test/{i}")).unwrap())
        .collect();
    let tasks = urls.iter().map(|url| NewTask {
        lane: None,
        priority: Default::default(),
        url: url.clone(),
        depth: 0,
        parent: None,
        data: None,
    });
    seed_tasks(&store, &crawl, tasks.collect(), T0)
        .await
        .unwrap();
    let ids: Vec<TaskId> = urls.iter().map(CanonicalUrl::task_id).collect();
    for id in &ids[..2] {
        let ClaimOutcome::Claimed { lease, .. } = store
            .claim_in_turn(&crawl.id, id, 60_000, T0)
            .await
            .unwrap()
        else {
            panic!("{id} not claimed");
        };
        let record = FetchRecord {
            http_status: 200,
            fetched_at: T0,
            ..FetchRecord::default()
        };
        store.finish(&lease, &record, T0).await.unwrap();
    }
    let db = &clients.dynamodb;
    write_the_old_way(
        db,
        &stack.table,
        &crawl.id,
        &ids[1],
        Status::Succeeded,
        false,
    )
    .await;
    write_the_old_way(db, &stack.table, &crawl.id, &ids[2], Status::Pending, true).await;

    // THEN today's code does not see the old items: not counted, not listed, not due
    let counts = store.counts(&crawl.id).await.unwrap();
    assert_eq!(counts.get(&Status::Succeeded), Some(&1));
    assert_eq!(counts.get(&Status::Pending), Some(&0));
    assert_eq!(
        listed(&store, &crawl.id, Status::Succeeded).await,
        [ids[0].clone()]
    );
    let due = store.due_tasks(&crawl.id, "old.test", 10).await.unwrap();
    assert!(due.is_empty(), "{due:?}");

    // WHEN the migration runs a batch of one: it moves one, and says it is not done
    let first = store.migrate_unlisted(&crawl.id, 1).await.unwrap();
    assert_eq!((first.moved, first.changed, first.done), (1, 0, false));

    // AND `trawl migrate` runs on the stack
    let migrate = || {
        let mut command = Command::new(trawl_bin());
        command
            .args(["--backend", "aws", "migrate", "--json"])
            .envs([
                ("AWS_ENDPOINT_URL", endpoint.as_str()),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_REGION", "us-east-1"),
            ])
            .envs(stack.env())
            .kill_on_drop(true);
        async move { command.output().await.unwrap() }
    };
    let output = migrate().await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = json_of(&output);
    assert_eq!(report["crawl_id"], "old");
    assert_eq!(
        (report["moved"].as_u64(), report["done"].as_bool()),
        (Some(1), Some(true))
    );

    // THEN every task is where today's code looks: counted, listed, the pending one due
    let counts = store.counts(&crawl.id).await.unwrap();
    assert_eq!(counts.get(&Status::Succeeded), Some(&2));
    assert_eq!(counts.get(&Status::Pending), Some(&1));
    let mut succeeded = listed(&store, &crawl.id, Status::Succeeded).await;
    succeeded.sort();
    let mut expected = ids[..2].to_vec();
    expected.sort();
    assert_eq!(succeeded, expected);
    let due = store.due_tasks(&crawl.id, "old.test", 10).await.unwrap();
    let due: Vec<&TaskId> = due.iter().map(|t| &t.task_id).collect();
    assert_eq!(due, [&ids[2]]);
    // Out of the status index: the old keys are empty
    for (id, status) in [(&ids[1], Status::Succeeded), (&ids[2], Status::Pending)] {
        let item = db
            .get_item()
            .table_name(&stack.table)
            .key("pk", AttributeValue::S(format!("{}#{id}", crawl.id)))
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        assert!(!item.contains_key("gsi_pk"), "{status:?}: {item:?}");
        assert!(
            item.contains_key("due") && item.contains_key("hk"),
            "{item:?}"
        );
    }

    // AND a second run moves nothing
    let again = migrate().await;
    assert!(again.status.success());
    let report = json_of(&again);
    assert_eq!(
        (report["moved"].as_u64(), report["done"].as_bool()),
        (Some(0), Some(true))
    );
}

/// Files a host record, and its count, the way a crawl created under 16 host shards did:
/// under the shard its name had then (today's shard, or that less 16).
async fn file_under_16_shards(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    crawl: &CrawlId,
    name: &str,
) -> bool {
    let now = host_shard(name);
    if now < 16 {
        return false;
    }
    let then = now - 16;
    client
        .update_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("{crawl}#host#{name}")))
        .update_expression("SET gsi_pk = :g")
        .expression_attribute_values(":g", AttributeValue::S(format!("{crawl}#hosts#{then}")))
        .send()
        .await
        .unwrap();
    for (shard, n) in [(now, "-1"), (then, "1")] {
        client
            .update_item()
            .table_name(table)
            .key(
                "pk",
                AttributeValue::S(format!("{crawl}#hostcounts#{shard}")),
            )
            .update_expression("ADD hosts :n, #open :n")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":n", AttributeValue::N(n.into()))
            .send()
            .await
            .unwrap();
    }
    true
}

#[tokio::test]
async fn hosts_filed_under_16_shards_are_listed_counted_and_moved_at_their_next_write() {
    // GIVEN a crawl of 40 hosts, each woken by a seed, whose records and counts are filed the
    // way a crawl created under 16 host shards filed them
    let endpoint = &moto::shared().endpoint;
    let clients = clients(endpoint).await;
    let stack = create_stack(&clients, &unique("shards")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb.clone(), &stack.table, SHARDS, calls);
    let crawl = Crawl::new(
        CrawlId::parse("sixteen").unwrap(),
        CrawlConfig::default(),
        T0,
    );
    store.create_crawl(&crawl).await.unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("h{i}.old.test")).collect();
    for name in &names {
        update_host(&store, &crawl, name, T0, |h| {
            (Some(h.note_seeded(1, T0).0), ())
        })
        .await
        .unwrap();
    }
    let mut moved = Vec::new();
    for name in &names {
        if file_under_16_shards(&clients.dynamodb, &stack.table, &crawl.id, name).await {
            moved.push(name.clone());
        }
    }
    assert!(
        moved.len() >= 5,
        "some hosts sit under a shard of 16: {moved:?}"
    );

    // THEN today's code lists each host once and counts every one
    let listed = || async {
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.list_hosts(&crawl.id, cursor, 7).await.unwrap();
            all.extend(page.hosts.into_iter().map(|h| h.name));
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break all,
            }
        }
    };
    let mut all = listed().await;
    all.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(all, expected);
    let open = HostCounts {
        hosts: 40,
        open: 40,
    };
    assert_eq!(store.host_counts(&crawl.id).await.unwrap(), Some(open));

    // WHEN a host filed the old way goes idle (a write of its record and its count)
    let name = &moved[0];
    let stored = store.get_host(&crawl.id, name).await.unwrap().unwrap();
    let idle = Host {
        queued_for: None,
        done: stored.seeded,
        ..stored.clone()
    };
    let change = HostCounts::change(Some(&stored), &idle);
    assert!(store.put_host(&crawl.id, &idle, change).await.unwrap());

    // THEN it is filed under today's shard, still listed once, and the counts stay right
    let item = clients
        .dynamodb
        .get_item()
        .table_name(&stack.table)
        .key("pk", AttributeValue::S(format!("{}#host#{name}", crawl.id)))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let filed = format!("{}#hosts#{}", crawl.id, host_shard(name));
    assert_eq!(item["gsi_pk"], AttributeValue::S(filed));
    let mut all = listed().await;
    all.sort();
    assert_eq!(all, expected);
    assert_eq!(
        store.host_counts(&crawl.id).await.unwrap(),
        Some(HostCounts {
            hosts: 40,
            open: 39
        })
    );
}

#[tokio::test]
async fn a_crawl_created_before_the_report_lanes_takes_its_reports_on_its_item() {
    // GIVEN a crawl whose report lanes do not exist (created before them)
    let endpoint = &moto::shared().endpoint;
    let clients = clients(endpoint).await;
    let stack = create_stack(&clients, &unique("lanes")).await.unwrap();
    let calls = Arc::new(CallCounts::default());
    let store = DynamoStore::new(clients.dynamodb.clone(), &stack.table, SHARDS, calls);
    let crawl = Crawl::new(CrawlId::parse("lanes").unwrap(), CrawlConfig::default(), T0);
    store.create_crawl(&crawl).await.unwrap();
    for lane in 0..trawl_domain::report::REPORT_LANES {
        clients
            .dynamodb
            .delete_item()
            .table_name(&stack.table)
            .key("pk", AttributeValue::S(format!("lanes#calls#{lane}")))
            .send()
            .await
            .unwrap();
    }

    // WHEN a report is made, tried again, and another made
    let put = Call::S3PutObject;
    let report = |n: u64, r: u64| add_calls(&CallTally::from([(put, n)]), RequestId(r));
    let first = report(2, 1);
    for update in [&first, &first, &report(3, 2)] {
        assert!(store.report_calls(&crawl.id, update).await.unwrap());
    }

    // THEN the crawl item holds them, each once, and no lane was created
    let stored = store.get_crawl(&crawl.id).await.unwrap().unwrap();
    assert_eq!(stored.calls[&put], 5);
    let lane = clients
        .dynamodb
        .get_item()
        .table_name(&stack.table)
        .key("pk", AttributeValue::S("lanes#calls#0".into()))
        .send()
        .await
        .unwrap();
    assert!(lane.item.is_none());
}
