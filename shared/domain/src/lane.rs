//! Lanes (capability S14): the kinds of page of a crawl (listings, details…) that share their
//! host's turns fairly, so that one kind's backlog never starves another's.
//!
//! A crawl names its lanes (`scope.lanes`); a route (`scope.routes[].lane`) puts the URLs it
//! matches, seeds and links alike, in one of them; a URL no route places is in the
//! [`DEFAULT`] lane. A task's lane is fixed when it is created ([`of_task`]). A crawl that names
//! no lanes has none: its tasks carry no lane and its turns run as before lanes existed.
//!
//! What a lane guarantees: a host's turn takes its due pages from its lanes in rotation
//! ([`rotate`]): one due page of each lane that has one, then the next of each, each lane's in
//! its own due order (priority first). With `k` lanes holding due work, each gets at least
//! `⌊turn_pages / k⌋` of the turn's fetches (all its due pages when it has fewer), whatever
//! the backlog of the others: a host with 1,000 due detail pages still fetches its due listing
//! pages within its next turn. Politeness is per host, never per lane: the lanes of a host share
//! its one turn, its lease, its pace and its requests in flight (`politeness.per_host`).
//!
//! What it does not: a lane is not a queue of its own nor a concurrency limit; hosts are still
//! scheduled as a whole (a host's turn comes as it did). Across lanes, rotation comes before
//! priority (a priority-9 page of one lane alternates with the other lanes' due pages).

use crate::crawl::Route;
use std::collections::{BTreeMap, HashSet};

/// The lane of the URLs no route places, in a crawl with lanes. It may be named in
/// `scope.lanes` (or by a route), and is there whether named or not.
pub const DEFAULT: &str = "default";

/// The most lanes a crawl may name (each is a read of the host's due list per refill of a
/// turn).
pub const MAX_LANES: usize = 8;

/// The longest lane name.
pub const MAX_NAME_LEN: usize = 32;

/// Why a crawl's lanes are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("scope.lanes: {0:?} is not a lane name (1 to {MAX_NAME_LEN} of a-z, 0-9, '-' and '_')")]
    BadName(String),
    #[error("scope.lanes: {0:?} is named twice")]
    Duplicate(String),
    #[error("scope.lanes: {0} lanes; at most {MAX_LANES}")]
    TooMany(usize),
    #[error("scope.routes[{route}]: no lane named {lane:?} in scope.lanes")]
    Unknown { route: usize, lane: String },
    #[error("scope.lane_limits: no lane named {0:?} in scope.lanes")]
    UnknownLimited(String),
    #[error("scope.lane_limits: {lane:?} at {limit}; a limit is 1 to {MAX_LIMIT}")]
    BadLimit { lane: String, limit: u32 },
}

/// The largest concurrency limit of a lane (`Scope::lane_limits`).
pub const MAX_LIMIT: u32 = 1_000;

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// What is wrong with a crawl's lanes, their limits and its routes' lanes (nothing: an empty
/// list).
pub fn problems(
    lanes: &[String],
    limits: &BTreeMap<String, u32>,
    routes: &[Route],
) -> Vec<LaneError> {
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for name in lanes {
        if !valid_name(name) {
            problems.push(LaneError::BadName(name.clone()));
        } else if !seen.insert(name.as_str()) {
            problems.push(LaneError::Duplicate(name.clone()));
        }
    }
    let count = lanes_of(lanes).len();
    if count > MAX_LANES {
        problems.push(LaneError::TooMany(count));
    }
    let known = lanes_of(lanes);
    for (lane, &limit) in limits {
        if !known.contains(lane) {
            problems.push(LaneError::UnknownLimited(lane.clone()));
        } else if !(1..=MAX_LIMIT).contains(&limit) {
            problems.push(LaneError::BadLimit {
                lane: lane.clone(),
                limit,
            });
        }
    }
    for (route, r) in routes.iter().enumerate() {
        if let Some(lane) = &r.lane
            && lane != DEFAULT
            && !lanes.contains(lane)
        {
            problems.push(LaneError::Unknown {
                route,
                lane: lane.clone(),
            });
        }
    }
    problems
}

/// The lanes of a crawl naming `named`: those, and [`DEFAULT`] (last unless named); none for a
/// crawl that names none.
pub fn lanes_of(named: &[String]) -> Vec<String> {
    if named.is_empty() {
        return Vec::new();
    }
    let mut lanes = named.to_vec();
    if !lanes.iter().any(|l| l == DEFAULT) {
        lanes.push(DEFAULT.to_owned());
    }
    lanes
}

/// The lane of a new task of a crawl naming `named`, whose route gives `route`: the route's,
/// else [`DEFAULT`]; None in a crawl without lanes.
pub fn of_task(named: &[String], route: Option<&str>) -> Option<String> {
    if named.is_empty() {
        return None;
    }
    Some(route.unwrap_or(DEFAULT).to_owned())
}

/// The lanes' due lists as one, in the order a turn takes them: the first of each list, then
/// the second of each, and so on (a list keeps its own order).
pub fn rotate<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let total = lists.iter().map(Vec::len).sum();
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for it in &mut iters {
            if let Some(t) = it.next() {
                out.push(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn route(lane: Option<&str>) -> Route {
        serde_json::from_value(serde_json::json!({ "glob": "*", "lane": lane })).expect("a route")
    }

    proptest! {
        /// Whatever the lanes' backlogs, the first `budget` pages of the rotation hold at least
        /// `min(len, budget / k)` of each of the `k` lanes with due work, each lane's in its own
        /// order, and every page once.
        #[test]
        fn no_lanes_backlog_starves_another_within_a_turn(
            lens in proptest::collection::vec(0usize..300, 1..=MAX_LANES),
            budget in 1usize..200,
        ) {
            let lists: Vec<Vec<(usize, usize)>> = lens
                .iter()
                .enumerate()
                .map(|(lane, &n)| (0..n).map(|i| (lane, i)).collect())
                .collect();
            let merged = rotate(lists);
            prop_assert_eq!(merged.len(), lens.iter().sum::<usize>());
            let busy = lens.iter().filter(|&&n| n > 0).count().max(1);
            let turn = &merged[..budget.min(merged.len())];
            for (lane, &n) in lens.iter().enumerate() {
                let taken: Vec<usize> =
                    turn.iter().filter(|(l, _)| *l == lane).map(|(_, i)| *i).collect();
                prop_assert!(taken.len() >= n.min(budget / busy), "lane {} got {:?}", lane, &taken);
                let expected: Vec<usize> = (0..taken.len()).collect();
                prop_assert_eq!(taken, expected);
            }
        }
    }

    #[test]
    fn a_crawl_without_lanes_has_none_and_one_with_lanes_places_every_task() {
        assert!(lanes_of(&[]).is_empty());
        assert_eq!(of_task(&[], Some("x")), None);
        let named = vec!["listings".to_owned(), "details".to_owned()];
        assert_eq!(lanes_of(&named), ["listings", "details", "default"]);
        assert_eq!(of_task(&named, Some("details")).as_deref(), Some("details"));
        assert_eq!(of_task(&named, None).as_deref(), Some(DEFAULT));
        let with_default = vec!["default".to_owned(), "a".to_owned()];
        assert_eq!(lanes_of(&with_default), ["default", "a"]);
    }

    #[test]
    fn bad_names_duplicates_too_many_and_unknown_lanes_are_refused_with_their_reason() {
        let named = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(
            problems(
                &named(&["listings", "details"]),
                &BTreeMap::new(),
                &[route(Some("details"))]
            )
            .is_empty()
        );
        assert!(
            problems(
                &named(&["a"]),
                &BTreeMap::new(),
                &[route(Some("default")), route(None)]
            )
            .is_empty()
        );
        assert_eq!(
            problems(&named(&["Listings", "", "a b"]), &BTreeMap::new(), &[]),
            [
                LaneError::BadName("Listings".into()),
                LaneError::BadName("".into()),
                LaneError::BadName("a b".into()),
            ]
        );
        assert_eq!(
            problems(&named(&["a", "a"]), &BTreeMap::new(), &[]),
            [LaneError::Duplicate("a".into())]
        );
        let nine: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
        assert_eq!(
            problems(&nine, &BTreeMap::new(), &[]),
            [LaneError::TooMany(10)]
        );
        assert_eq!(
            problems(
                &named(&["a"]),
                &BTreeMap::new(),
                &[route(None), route(Some("b"))]
            ),
            [LaneError::Unknown {
                route: 1,
                lane: "b".into()
            }]
        );
        // A route's lane in a crawl naming none is unknown too.
        assert_eq!(
            problems(&[], &BTreeMap::new(), &[route(Some("a"))])[0].to_string(),
            "scope.routes[0]: no lane named \"a\" in scope.lanes"
        );
        // A limit is for a lane the crawl has (the default one too), from 1 to MAX_LIMIT.
        let limits = |v: &[(&str, u32)]| {
            v.iter()
                .map(|(l, n)| ((*l).to_owned(), *n))
                .collect::<BTreeMap<_, _>>()
        };
        let ok = limits(&[("a", 2), ("default", MAX_LIMIT)]);
        assert!(problems(&named(&["a"]), &ok, &[]).is_empty());
        assert_eq!(
            problems(&named(&["a"]), &limits(&[("b", 1), ("a", 0)]), &[]),
            [
                LaneError::BadLimit {
                    lane: "a".into(),
                    limit: 0
                },
                LaneError::UnknownLimited("b".into()),
            ]
        );
    }
}
