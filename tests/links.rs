//! Link discovery with several crawler containers, small (`trawl_faults::links`; the bench's
//! section `links` runs it bigger, against the target of 6 write units per fresh URL): offers
//! never refuse a write of the most-linked host's record, and a URL's writes stay bounded. On the
//! single-threaded moto: its conditional writes are atomic as DynamoDB's, so a refusal that
//! DynamoDB would make is made here too.

use crate::support;
use std::time::Duration;
use trawl_faults::links::{LinkPlan, LinkStack, run_links};

#[tokio::test]
async fn links_found_by_many_containers_never_refuse_a_turn_of_the_most_linked_host() {
    // GIVEN 4 hosts of 6 pages linking across hosts, with template links on every page, and
    // 3 crawler containers taking turns off one queue
    let moto = support::moto::single_threaded();
    let stack = support::aws_stack(&moto.endpoint).await;
    let plan = LinkPlan {
        hosts: 4,
        pages_per_host: 6,
        containers: 3,
        concurrency: 10,
        turn_pages: 10,
        cold: false,
        timeout: Duration::from_secs(120),
    };

    // WHEN they crawl the site from its first host's home page
    let run = run_links(
        LinkStack {
            probe: stack.store.clone(),
            store: stack.store,
            blobs: stack.blobs,
            queue: stack.queue,
            calls: stack.calls,
        },
        plan,
        &support::unique("links"),
    )
    .await
    .unwrap();

    // THEN every page is stored, and no write of the most-linked host's record was refused:
    // offers leave its version alone
    assert_eq!(run.pages, 24);
    assert_eq!(run.refused_on_most_linked, 0, "{:?}", run.writes);
    // AND a page costs its seed, its finish and its share of link discovery, turns and call
    // reports: within 9 units at this size, where 4 host records, turns of 2 or 3 pages and
    // each host going open or idle (a transaction with its shard's host counts, 4 units more
    // than a host write) weigh more than in the bench's larger runs (measured against the
    // target of 6 there); known links are read, not put again. Offers to hosts and call
    // reports are idempotent transactions (`trawl_domain::request`), twice a write's units:
    // about 0.8 of a page's units here (7.5 before they were)
    let per_url = run.units_per_url();
    assert!(per_url <= 9.0, "{per_url:.2} WRU/URL: {:?}", run.writes);
}
