//! One conformance suite, run against every backend: DynamoDB (through the real SDK, on moto),
//! SQLite (the embedded backend) and the in-memory store. Each case is written once, generic
//! over the ports, and checks the whole task against the domain after every transition.
//!
//! Race cases run against a single-threaded moto: threaded moto does not make conditional
//! writes atomic (double claims happen that DynamoDB would reject).

mod budget;
mod cases;
mod item_size;

use crate::support;

macro_rules! on_dynamodb {
    ($server:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (store, _calls) = support::dynamo_store(&$server().endpoint, 4).await;
                cases::$case(&store).await;
            }
        )*
    };
}

macro_rules! on_memory {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let store = trawl_core::store::memory::MemoryStore::new();
                cases::$case(&store).await;
            }
        )*
    };
}

macro_rules! on_sqlite {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
                let store = trawl_embedded::sqlite::SqliteStore::in_memory(calls).unwrap();
                cases::$case(&store).await;
            }
        )*
    };
}

/// Every case, on the in-memory store (one lock serialises every call).
mod memory {
    use super::*;

    on_memory!(
        reseed_is_idempotent,
        user_data_stays_with_its_task_through_every_transition,
        expired_lease_is_reclaimed_and_the_old_holder_is_fenced,
        of_two_turns_holding_one_task_only_the_first_result_lands,
        a_task_whose_turn_died_is_taken_by_the_next_turn,
        transient_failures_back_off_then_give_up,
        permanent_failures_are_terminal,
        a_page_comes_due_again_and_is_gone_only_after_its_second_404,
        error_history_is_bounded,
        query_pages_through_every_shard_in_update_order,
        counts_per_status,
        crawl_lifecycle,
        every_crawl_write_leaves_the_crawl_the_domain_says,
        a_crawl_keeps_the_checkpoint_it_is_given,
        reference_misses_add_up,
        reschedule_moves_a_task_back_to_pending,
        a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_page_due_now,
        stale_objects_are_handed_to_the_next_finisher,
        release_gives_the_task_back,
        concurrent_claimers_exactly_one_wins,
        page_budget_is_never_exceeded,
        completion_happens_exactly_once,
        a_delivery_is_written_by_one_holder_at_a_time,
        call_counts_add_up_atomically,
        due_tasks_are_per_host_in_due_order,
        host_records_are_written_only_over_the_version_read,
        a_zombie_turn_holder_cannot_hand_back_over_a_newer_turn,
    );
}

/// Every case, on the embedded backend (SQLite serialises writers itself).
mod sqlite {
    use super::*;

    on_sqlite!(
        reseed_is_idempotent,
        user_data_stays_with_its_task_through_every_transition,
        expired_lease_is_reclaimed_and_the_old_holder_is_fenced,
        of_two_turns_holding_one_task_only_the_first_result_lands,
        a_task_whose_turn_died_is_taken_by_the_next_turn,
        transient_failures_back_off_then_give_up,
        permanent_failures_are_terminal,
        a_page_comes_due_again_and_is_gone_only_after_its_second_404,
        error_history_is_bounded,
        query_pages_through_every_shard_in_update_order,
        counts_per_status,
        crawl_lifecycle,
        every_crawl_write_leaves_the_crawl_the_domain_says,
        a_crawl_keeps_the_checkpoint_it_is_given,
        reference_misses_add_up,
        request_settings_are_stored_as_given,
        reschedule_moves_a_task_back_to_pending,
        a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_page_due_now,
        stale_objects_are_handed_to_the_next_finisher,
        release_gives_the_task_back,
        concurrent_claimers_exactly_one_wins,
        page_budget_is_never_exceeded,
        completion_happens_exactly_once,
        a_delivery_is_written_by_one_holder_at_a_time,
        call_counts_add_up_atomically,
        due_tasks_are_per_host_in_due_order,
        host_records_are_written_only_over_the_version_read,
        a_zombie_turn_holder_cannot_hand_back_over_a_newer_turn,
    );
}

mod dynamodb {
    use super::*;

    on_dynamodb!(support::moto::shared;
        reseed_is_idempotent,
        user_data_stays_with_its_task_through_every_transition,
        expired_lease_is_reclaimed_and_the_old_holder_is_fenced,
        a_task_whose_turn_died_is_taken_by_the_next_turn,
        transient_failures_back_off_then_give_up,
        permanent_failures_are_terminal,
        a_page_comes_due_again_and_is_gone_only_after_its_second_404,
        error_history_is_bounded,
        query_pages_through_every_shard_in_update_order,
        counts_per_status,
        crawl_lifecycle,
        every_crawl_write_leaves_the_crawl_the_domain_says,
        a_crawl_keeps_the_checkpoint_it_is_given,
        reference_misses_add_up,
        request_settings_are_stored_as_given,
        reschedule_moves_a_task_back_to_pending,
        a_sitemap_lastmod_newer_than_the_last_fetch_makes_a_page_due_now,
        stale_objects_are_handed_to_the_next_finisher,
        release_gives_the_task_back,
        due_tasks_are_per_host_in_due_order,
        host_records_are_written_only_over_the_version_read,
    );

    /// Races: single-threaded moto, where conditional writes are atomic as on DynamoDB.
    mod races {
        use super::*;
        on_dynamodb!(support::moto::single_threaded;
            concurrent_claimers_exactly_one_wins,
            of_two_turns_holding_one_task_only_the_first_result_lands,
            page_budget_is_never_exceeded,
            completion_happens_exactly_once,
            a_delivery_is_written_by_one_holder_at_a_time,
            call_counts_add_up_atomically,
            a_zombie_turn_holder_cannot_hand_back_over_a_newer_turn,
        );
    }
}
