//! One conformance suite, run against every backend: DynamoDB (through the real SDK, on moto),
//! SQLite (the embedded backend) and the in-memory store (also through the generic layered
//! store that every store wrapper is). Each case is written once, generic over the ports, and
//! checks the whole task against the domain after every transition.
//!
//! The suite is one list ([`suite!`]), generated per backend: a backend runs every case of it,
//! and one it does not run is written there as skipped on it, with the reason (`cargo test`
//! lists it as ignored). Race cases run against a single-threaded moto: threaded moto does not
//! make conditional writes atomic (double claims happen that DynamoDB would reject).

mod budget;
mod cases;
mod item_size;

use crate::support;

/// What a case asks of the backend's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    /// Callers contend for one record at once: the store must make conditional writes atomic.
    Race,
}

/// Every case, once, and in brackets what a backend must know of it: `race` (a [`Kind::Race`]
/// case) and `skip(backend, "why")` (not run on that backend, for that reason). Calls
/// `$backend!` with the whole list.
macro_rules! suite {
    ($backend:ident) => {
        $backend! {
            reseed_is_idempotent [],
            user_data_stays_with_its_task_through_every_transition [],
            two_posts_to_one_url_with_different_bodies_are_two_tasks [],
            expired_lease_is_reclaimed_and_the_old_holder_is_fenced [],
            a_task_whose_turn_died_is_taken_by_the_next_turn [],
            transient_failures_back_off_then_give_up [],
            permanent_failures_are_terminal [],
            a_page_comes_due_again_and_is_gone_only_at_its_second_check_finding_it_missing [],
            an_estimated_pages_change_history_is_kept_with_its_fetch [],
            error_history_is_bounded [],
            query_pages_through_every_shard_in_update_order [],
            the_parts_of_a_query_hold_every_task_once [],
            a_status_few_hosts_hold_is_listed_whole_over_many_hosts [],
            a_purge_deletes_every_task_over_many_hosts_whatever_its_status [],
            counts_per_status [],
            crawl_lifecycle [],
            every_crawl_write_leaves_the_crawl_the_domain_says [],
            an_add_is_applied_once_however_often_its_request_is_tried [],
            a_call_report_tried_again_after_another_landed_counts_once [],
            a_crawl_keeps_the_checkpoint_it_is_given [],
            a_crawl_keeps_the_water_level_its_sweeper_sets [],
            reference_misses_add_up [],
            request_settings_are_stored_as_given [],
            reschedule_moves_a_task_back_to_pending [],
            a_repoint_lands_on_the_task_as_read_and_fences_a_lease_taken_before [],
            a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_page_due_now [],
            stale_objects_are_handed_to_the_next_finisher [],
            release_gives_the_task_back [],
            due_tasks_are_per_host_in_due_order [],
            a_rostered_task_stays_at_its_place_in_its_hosts_roster_from_seed_to_finish [],
            a_hosts_pending_tasks_are_due_highest_priority_first [],
            a_lanes_due_list_holds_its_own_tasks_and_follows_them_out [],
            host_records_are_written_only_over_the_version_read [],
            a_page_of_hundreds_of_hosts_holds_every_record_as_written [],
            known_tasks_are_told_apart_in_one_batched_read [],
            offers_leave_the_version_alone_and_no_write_overwrites_them [],
            concurrent_claimers_exactly_one_wins [race],
            of_two_turns_holding_one_task_only_the_first_result_lands [race],
            page_budget_is_never_exceeded [race],
            completion_happens_exactly_once [race],
            a_delivery_is_written_by_one_holder_at_a_time [race],
            call_counts_add_up_atomically [race],
            a_zombie_turn_holder_cannot_hand_back_over_a_newer_turn [race],
            host_counts_are_kept_by_the_host_writes_that_land [race],
        }
    };
}

/// The tests of one backend module, whose `store(kind)` makes a fresh store for a case.
macro_rules! memory {
    ($($case:ident [$($flag:tt)*]),* $(,)?) => { $( case!(memory, $case, Plain, [], [$($flag)*]); )* };
}
macro_rules! sqlite {
    ($($case:ident [$($flag:tt)*]),* $(,)?) => { $( case!(sqlite, $case, Plain, [], [$($flag)*]); )* };
}
macro_rules! dynamodb {
    ($($case:ident [$($flag:tt)*]),* $(,)?) => { $( case!(dynamodb, $case, Plain, [], [$($flag)*]); )* };
}
macro_rules! layered {
    ($($case:ident [$($flag:tt)*]),* $(,)?) => { $( case!(layered, $case, Plain, [], [$($flag)*]); )* };
}

/// One case on one backend: its flags read one by one (its kind, and the reason it is
/// skipped there, if it is), then the test.
macro_rules! case {
    ($backend:ident, $case:ident, $kind:ident, [], []) => {
        #[tokio::test]
        async fn $case() {
            let store = store(Kind::$kind).await;
            cases::$case(&store).await;
        }
    };
    ($backend:ident, $case:ident, $kind:ident, [$why:literal], []) => {
        #[tokio::test]
        #[ignore = $why]
        async fn $case() {
            let store = store(Kind::$kind).await;
            cases::$case(&store).await;
        }
    };
    ($backend:ident, $case:ident, $kind:ident, $skip:tt, [race $($rest:tt)*]) => {
        case!($backend, $case, Race, $skip, [$($rest)*]);
    };
    (memory, $case:ident, $kind:ident, $skip:tt, [skip(memory, $why:literal) $($rest:tt)*]) => {
        case!(memory, $case, $kind, [$why], [$($rest)*]);
    };
    (sqlite, $case:ident, $kind:ident, $skip:tt, [skip(sqlite, $why:literal) $($rest:tt)*]) => {
        case!(sqlite, $case, $kind, [$why], [$($rest)*]);
    };
    (dynamodb, $case:ident, $kind:ident, $skip:tt, [skip(dynamodb, $why:literal) $($rest:tt)*]) => {
        case!(dynamodb, $case, $kind, [$why], [$($rest)*]);
    };
    (layered, $case:ident, $kind:ident, $skip:tt, [skip(layered, $why:literal) $($rest:tt)*]) => {
        case!(layered, $case, $kind, [$why], [$($rest)*]);
    };
    // Skipped on another backend.
    ($backend:ident, $case:ident, $kind:ident, $skip:tt, [skip($other:ident, $why:literal) $($rest:tt)*]) => {
        case!($backend, $case, $kind, $skip, [$($rest)*]);
    };
}

/// The in-memory store (one lock serialises every call).
mod memory {
    use super::*;
    use trawl_core::store::memory::MemoryStore;

    async fn store(_: Kind) -> MemoryStore {
        MemoryStore::new()
    }

    suite!(memory);
}

/// The in-memory store through a layer that does nothing (`trawl_core::store::layer`): the
/// generic layered store forwards every call, as each wrapper (meter, faults, latency) relies on.
mod layered {
    use super::*;
    use trawl_core::store::layer::{Layered, NoLayer};
    use trawl_core::store::memory::MemoryStore;

    async fn store(_: Kind) -> Layered<MemoryStore, NoLayer> {
        Layered::new(MemoryStore::new(), NoLayer)
    }

    suite!(layered);
}

/// The embedded backend (SQLite serialises writers itself).
mod sqlite {
    use super::*;
    use trawl_embedded::sqlite::SqliteStore;

    async fn store(_: Kind) -> SqliteStore {
        let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
        SqliteStore::in_memory(calls).unwrap()
    }

    suite!(sqlite);
}

/// DynamoDB on moto; races on the single-threaded moto, where conditional writes are atomic as
/// on DynamoDB.
mod dynamodb {
    use super::*;
    use trawl_aws::dynamodb::DynamoStore;

    async fn store(kind: Kind) -> DynamoStore {
        let moto = match kind {
            Kind::Plain => support::moto::shared(),
            Kind::Race => support::moto::single_threaded(),
        };
        // Two host keys a Query, so that walks of the hosts (listings of the statuses the
        // status index leaves out, counts, purges) page through host keys as at scale.
        support::dynamo_store(&moto.endpoint, 4)
            .await
            .0
            .hosts_page(2)
    }

    suite!(dynamodb);

    /// Two processes on one report lane (`trawl_domain::report`), each with its own entry, on
    /// single-threaded moto (conditional writes atomic as on DynamoDB).
    #[tokio::test]
    async fn two_processes_reporting_on_one_lane_are_each_counted_once_however_retried() {
        use trawl_core::store::{CrawlRecords, CrawlStore};
        use trawl_domain::calls::{Call, CallTally};
        use trawl_domain::crawl::transition::add_calls;
        use trawl_domain::crawl::{Crawl, CrawlConfig};
        use trawl_domain::request::RequestId;

        // GIVEN a crawl, and two processes whose reports go to the same lane (5 and 37: 32
        // lanes)
        let store = store(Kind::Race).await;
        let (one, two) = (store.clone().reporting_as(5), store.reporting_as(37));
        let id = trawl_domain::canonical::CrawlId::parse(&support::unique("lane")).unwrap();
        let crawl = Crawl::new(id.clone(), CrawlConfig::default(), 0);
        one.create_crawl(&crawl).await.unwrap();
        let put = Call::S3PutObject;
        let report = |n: u64, r: u64| add_calls(&CallTally::from([(put, n)]), RequestId(r));

        // WHEN A of the first lands, B of the second lands, then each is tried again, A first
        let (a, b) = (report(2, 0xa), report(5, 0xb));
        assert!(one.report_calls(&id, &a).await.unwrap());
        assert!(two.report_calls(&id, &b).await.unwrap());
        assert!(one.report_calls(&id, &a).await.unwrap());
        assert!(two.report_calls(&id, &b).await.unwrap());

        // THEN both are counted, each once, and either process reads the totals
        for process in [&one, &two] {
            let crawl = process.get_crawl(&id).await.unwrap().unwrap();
            assert_eq!(crawl.calls[&put], 7);
        }

        // WHEN A of the first is tried again by a process that knows nothing of it (its entry
        // is the first's alone), THEN it is another report
        assert!(two.report_calls(&id, &a).await.unwrap());
        assert_eq!(one.get_crawl(&id).await.unwrap().unwrap().calls[&put], 9);

        // WHEN the crawl is removed, THEN its lanes go with it: a report finds no crawl
        one.delete_crawl(&id).await.unwrap();
        assert!(!two.report_calls(&id, &report(1, 0xc)).await.unwrap());
        assert!(one.read_crawl(&id).await.unwrap().is_none());
    }
}
