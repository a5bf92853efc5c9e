//! Every edge, table-driven, then a property test over random event sequences.

use super::*;
use crate::calls::Call;
use crate::canonical::CrawlId;
use proptest::prelude::*;

const T0: Millis = 1_800_000_000_000;

fn running() -> Crawl {
    Crawl::new(CrawlId::parse("c").unwrap(), CrawlConfig::default(), T0)
}

fn completed_by(completer: &str) -> Crawl {
    complete(0, completer, T0 + 1).apply(&running()).unwrap()
}

#[test]
fn a_generation_completes_once_and_its_completer_may_repeat() {
    let done = complete(0, "a", T0 + 5).apply(&running()).unwrap();
    assert_eq!(
        (done.state, done.completed_by.as_deref(), done.updated_at),
        (CrawlState::Completed, Some("a"), T0 + 5)
    );
    assert!(complete(0, "a", T0 + 6).requires.holds(&done), "its repeat");
    assert!(!complete(0, "b", T0 + 6).requires.holds(&done), "another");
    assert!(
        !complete(1, "a", T0 + 6).requires.holds(&running()),
        "another generation"
    );
}

#[test]
fn reopen_starts_the_next_generation_of_a_completed_crawl_only() {
    assert_eq!(reopen(T0 + 2).apply(&running()), None);
    let reopened = reopen(T0 + 2).apply(&completed_by("a")).unwrap();
    assert_eq!(
        (reopened.state, reopened.generation, reopened.updated_at),
        (CrawlState::Running, 1, T0 + 2)
    );
    assert!(
        !complete(0, "a", T0 + 3).requires.holds(&reopened),
        "a stale generation, even for its completer"
    );
    assert!(complete(1, "b", T0 + 3).requires.holds(&reopened));
}

#[test]
fn the_delivery_lease_is_one_holders_until_it_expires_or_is_released() {
    let held = claim_delivery("a", T0 + 100, T0).apply(&running()).unwrap();
    assert_eq!(
        held.delivery,
        Some(DeliveryLease {
            holder: "a".into(),
            until: T0 + 100
        })
    );
    assert_eq!(claim_delivery("b", T0 + 200, T0 + 99).apply(&held), None);
    let renewed = claim_delivery("a", T0 + 300, T0 + 99).apply(&held).unwrap();
    assert_eq!(renewed.delivery.as_ref().map(|l| l.until), Some(T0 + 300));
    let taken = claim_delivery("b", T0 + 400, T0 + 300)
        .apply(&renewed)
        .unwrap();
    assert_eq!(
        release_delivery("a").apply(&taken),
        None,
        "not its lease any more"
    );
    let released = release_delivery("b").apply(&taken).unwrap();
    assert_eq!(released.delivery, None);
    assert!(
        claim_delivery("c", T0 + 500, T0 + 301)
            .requires
            .holds(&released)
    );
}

#[test]
fn page_slots_are_taken_all_or_none_within_the_budget() {
    let crawl = running();
    let taken = reserve_pages(7, 10, RequestId(1)).apply(&crawl).unwrap();
    assert_eq!(taken.pages_reserved, 7);
    assert_eq!(reserve_pages(4, 10, RequestId(1)).apply(&taken), None);
    assert_eq!(
        reserve_pages(3, 10, RequestId(1))
            .apply(&taken)
            .unwrap()
            .pages_reserved,
        10
    );
    assert_eq!(release_pages(2).apply(&taken).unwrap().pages_reserved, 5);
    assert_eq!(release_pages(9).apply(&taken).unwrap().pages_reserved, 0);
    assert_eq!(
        reserve_pages(u64::MAX, u64::MAX, RequestId(1)).apply(&taken),
        None
    );
}

#[test]
fn counters_add_and_settings_replace() {
    let share = CallTally::from([(Call::S3PutObject, 2)]);
    let crawl = add_calls(&share, RequestId(1)).apply(&running()).unwrap();
    let crawl = add_calls(&share, RequestId(1)).apply(&crawl).unwrap();
    assert_eq!(crawl.calls[&Call::S3PutObject], 4);
    let crawl = add_reference_misses(3).apply(&crawl).unwrap();
    assert_eq!(crawl.reference_misses, 3);
    let crawl = set_checkpoint(Some("since=1")).apply(&crawl).unwrap();
    assert_eq!(
        (crawl.checkpoint.as_deref(), crawl.updated_at),
        (Some("since=1"), T0)
    );
    let config = CrawlConfig {
        user_agent: "other".into(),
        ..CrawlConfig::default()
    };
    let crawl = update_config(&config, T0 + 9).apply(&crawl).unwrap();
    assert_eq!((crawl.config, crawl.updated_at), (config, T0 + 9));
}

#[derive(Debug, Clone)]
enum Event {
    Complete {
        completer: u8,
        generation_behind: bool,
    },
    Reopen,
    ClaimDelivery {
        holder: u8,
        lease_ms: i64,
    },
    ReleaseDelivery {
        holder: u8,
    },
    ReservePages {
        n: u64,
    },
    ReleasePages {
        n: u64,
    },
    AddCalls {
        n: u64,
    },
    AddReferenceMisses {
        n: u64,
    },
    SetCheckpoint {
        value: Option<u8>,
    },
    SetLevel {
        ms: u64,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0u8..4, any::<bool>()).prop_map(|(completer, generation_behind)| Event::Complete {
            completer,
            generation_behind
        }),
        2 => Just(Event::Reopen),
        3 => (0u8..4, 1i64..5_000).prop_map(|(holder, lease_ms)| Event::ClaimDelivery { holder, lease_ms }),
        1 => (0u8..4).prop_map(|holder| Event::ReleaseDelivery { holder }),
        3 => (0u64..8).prop_map(|n| Event::ReservePages { n }),
        1 => (0u64..8).prop_map(|n| Event::ReleasePages { n }),
        1 => (0u64..5).prop_map(|n| Event::AddCalls { n }),
        1 => (0u64..3).prop_map(|n| Event::AddReferenceMisses { n }),
        1 => proptest::option::of(0u8..3).prop_map(|value| Event::SetCheckpoint { value }),
        1 => (1u64..10_000).prop_map(|ms| Event::SetLevel { ms }),
    ]
}

/// Whether `event` may move a crawl from `from` to `to`: the table in the module docs.
fn legal_edge(event: &Event, from: CrawlState, to: CrawlState) -> bool {
    match event {
        Event::Complete { .. } => to == CrawlState::Completed,
        Event::Reopen => from == CrawlState::Completed && to == CrawlState::Running,
        _ => from == to,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_event_sequences_keep_the_crawl_rules(
        events in proptest::collection::vec((0i64..2_000, event()), 1..80),
        max in 0u64..30,
    ) {
        let mut crawl = running();
        let mut now = T0;
        // Who completed each generation, as the completers saw it.
        let mut winners: Vec<Option<String>> = vec![None];
        // Slots taken and not given back, as the takers count them.
        let mut held: u64 = 0;
        for (dt, event) in events {
            now += dt;
            let update = match &event {
                Event::Complete { completer, generation_behind } => {
                    let generation = if *generation_behind {
                        crawl.generation.saturating_sub(1)
                    } else {
                        crawl.generation
                    };
                    complete(generation, &format!("sweeper-{completer}"), now)
                }
                Event::Reopen => reopen(now),
                Event::ClaimDelivery { holder, lease_ms } => {
                    claim_delivery(&format!("h{holder}"), now + lease_ms, now)
                }
                Event::ReleaseDelivery { holder } => release_delivery(&format!("h{holder}")),
                Event::ReservePages { n } => reserve_pages(*n, max, RequestId(1)),
                // A taker gives back only slots it took.
                Event::ReleasePages { n } => release_pages((*n).min(held)),
                Event::AddCalls { n } => add_calls(&CallTally::from([(Call::DynamoUpdateItem, *n)]), RequestId(1)),
                Event::AddReferenceMisses { n } => add_reference_misses(*n),
                Event::SetCheckpoint { value } => set_checkpoint(value.map(|v| v.to_string()).as_deref()),
                Event::SetLevel { ms } => set_level(Level { ms: *ms, at: now }),
            };
            let Some(after) = update.apply(&crawl) else {
                continue;
            };
            let before = std::mem::replace(&mut crawl, after);
            prop_assert!(
                legal_edge(&event, before.state, crawl.state),
                "{:?}: {:?} -> {:?}", event, before.state, crawl.state
            );
            match &event {
                Event::Complete { completer, .. } => {
                    // One completer per generation: a second sees its change only on its repeat.
                    let me = format!("sweeper-{completer}");
                    let winner = &mut winners[usize::try_from(crawl.generation).unwrap()];
                    prop_assert!(winner.as_ref().is_none_or(|w| *w == me), "{:?} after {:?}", me, winner);
                    *winner = Some(me);
                }
                Event::Reopen => {
                    prop_assert_eq!(crawl.generation, before.generation + 1);
                    winners.push(None);
                }
                Event::ClaimDelivery { holder, .. } => {
                    // At most one live holder: the lease taken was free, its own, or expired.
                    let me = format!("h{holder}");
                    prop_assert!(
                        before.delivery.as_ref().is_none_or(|l| l.holder == me || l.until <= now),
                        "{:?} took {:?} at {}", me, before.delivery, now
                    );
                    prop_assert_eq!(crawl.delivery.as_ref().map(|l| &l.holder), Some(&me));
                }
                Event::ReleaseDelivery { .. } => prop_assert_eq!(&crawl.delivery, &None),
                Event::ReservePages { n } => held += n,
                Event::ReleasePages { n } => held -= (*n).min(held),
                _ => {}
            }
            if !matches!(event, Event::Reopen) {
                prop_assert_eq!(crawl.generation, before.generation, "{:?}", event);
            }
            if !matches!(event, Event::ClaimDelivery { .. } | Event::ReleaseDelivery { .. }) {
                prop_assert_eq!(&crawl.delivery, &before.delivery, "{:?}", event);
            }
            prop_assert!(crawl.pages_reserved <= max, "never past the budget");
            prop_assert_eq!(crawl.pages_reserved, held);
            for (call, n) in &before.calls {
                prop_assert!(crawl.calls.get(call).is_some_and(|m| m >= n));
            }
            prop_assert!(crawl.reference_misses >= before.reference_misses);
            // The water level is the sweeper's alone: no other write moves it.
            match &event {
                Event::SetLevel { ms } => prop_assert_eq!(crawl.level, Some(Level { ms: *ms, at: now })),
                _ => prop_assert_eq!(crawl.level, before.level),
            }
            prop_assert!(crawl.updated_at >= before.updated_at);
            prop_assert_eq!((&crawl.id, crawl.created_at), (&before.id, before.created_at));
        }
    }
}
