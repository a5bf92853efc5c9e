//! The rules of delivery retention and segment compaction (`storage.layout = segments`).
//!
//! Deliveries point into segments (a manifest line names a page's segment, offset and length),
//! so a segment may be deleted only once no retained delivery and no task points into it.
//! Retention (`delivery.keep_generations`) bounds the deliveries; compaction copies the live
//! records of a segment that is mostly garbage to a new segment, moves its tasks there, and
//! deletes the old segment once nothing points into it any more.

use crate::task::Millis;

/// The live percentage under which a segment is rewritten, unless the crawl says otherwise:
/// at most half of a rewritten segment is copied, so a pass frees at least as much as it writes.
pub const DEFAULT_COMPACT_BELOW_PERCENT: u8 = 50;

/// The oldest generation whose delivery is kept, given the generations delivered (complete
/// ones) and `keep` (None: all are kept, and so is everything older: None is returned).
/// Deliveries of generations below the cutoff are removed.
pub fn retention_cutoff(
    delivered: impl IntoIterator<Item = u64>,
    keep: Option<u32>,
) -> Option<u64> {
    let keep = usize::try_from(keep?).ok()?.max(1);
    let mut generations: Vec<u64> = delivered.into_iter().collect();
    generations.sort_unstable_by(|a, b| b.cmp(a));
    generations.dedup();
    generations.get(keep - 1).copied()
}

/// Whether a segment of `bytes` of which `live` are pointed at is worth rewriting under the
/// threshold `below_percent` (0: never; above 100 counts as 100).
pub fn worth_compacting(bytes: u64, live: u64, below_percent: u8) -> bool {
    let below = u128::from(below_percent.min(100));
    bytes > 0 && u128::from(live) * 100 < u128::from(bytes) * below
}

/// Slack for the two clocks `segment_settled` compares: the time a blob store lists a segment
/// by (S3's `LastModified`, whole seconds in a listing, on S3's clock; a file's mtime, on the
/// writer's machine) against the deliverer's clock that dated its task read. One second covers
/// the truncation, the other a skew between NTP-synced hosts.
pub const CLOCK_MARGIN_MS: u64 = 2_000;

/// Whether a segment that no task was seen pointing into, and no kept delivery names, may be
/// deleted: it was last written (`modified`) more than a lease (`lease_ms`) and the clocks'
/// margin before `read_from`, the moment the newest kept delivery began reading its tasks.
///
/// Why: a task points into a segment from a write that follows its record's append (a finish,
/// within its lease of the claim that came before the append, the bound the pass's young
/// segments and orphan removal rest on too; a repoint, right after the copy's append), and
/// keeps that pointer until it is moved elsewhere; nothing points back into a segment once
/// moved away (a repoint fences the lease that read the old place). So a pointer into a segment written that long before the
/// delivery's read already existed when the delivery read its task, and that delivery's
/// `summary.json` names the segment, which is then held. A task the pass's own scan missed
/// (it changed status mid-scan) therefore never costs its segment. Without a delivery that
/// dates its read (`read_from` None), nothing is deleted. `lease_ms` None: the caller is the
/// store's only writer, no task changes while it scans, and its scan alone decides.
pub fn segment_settled(modified: Millis, lease_ms: Option<u64>, read_from: Option<Millis>) -> bool {
    let Some(lease_ms) = lease_ms else {
        return true;
    };
    let Some(read_from) = read_from else {
        return false;
    };
    let settle = i128::from(lease_ms) + i128::from(CLOCK_MARGIN_MS);
    i128::from(modified) + settle < i128::from(read_from)
}

/// A segment as a compaction pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentUse {
    pub key: String,
    pub bytes: u64,
    /// Bytes the crawl's tasks point at.
    pub live: u64,
}

/// The segments to rewrite in one pass, in the order to rewrite them: those worth it, the
/// least live first (they free the most for what they copy), as long as the live bytes copied
/// stay within `budget` (the first with live bytes is taken even past it, so that every pass
/// progresses; one with none copies nothing and is always taken).
pub fn pick(segments: &[SegmentUse], below_percent: u8, budget: u64) -> Vec<&SegmentUse> {
    let mut worth: Vec<&SegmentUse> = segments
        .iter()
        .filter(|s| worth_compacting(s.bytes, s.live, below_percent))
        .collect();
    // live / bytes ascending, compared without division.
    worth.sort_by(|a, b| {
        (u128::from(a.live) * u128::from(b.bytes))
            .cmp(&(u128::from(b.live) * u128::from(a.bytes)))
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut copied: Option<u64> = None;
    worth
        .into_iter()
        .take_while(|s| {
            // One with nothing live copies nothing: it never counts as the first.
            if s.live == 0 {
                return true;
            }
            let total = copied.map_or(s.live, |c| c.saturating_add(s.live));
            let first = copied.is_none();
            copied = Some(total);
            first || total <= budget
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_last_generations_delivered() {
        assert_eq!(retention_cutoff([0, 1, 2, 3], None), None);
        assert_eq!(retention_cutoff([0, 1, 2, 3], Some(2)), Some(2));
        assert_eq!(retention_cutoff([3, 0, 2, 1], Some(1)), Some(3));
        // 0 keeps the newest anyway: a delivery just written is never removed
        assert_eq!(retention_cutoff([0, 1], Some(0)), Some(1));
        // fewer deliveries than kept: nothing below the oldest goes
        assert_eq!(retention_cutoff([4, 5], Some(3)), None);
        // a gap (a generation never delivered) counts deliveries, not generations
        assert_eq!(retention_cutoff([1, 5, 9], Some(2)), Some(5));
    }

    #[test]
    fn segments_below_the_live_threshold_are_worth_rewriting() {
        assert!(worth_compacting(100, 49, 50));
        assert!(!worth_compacting(100, 50, 50));
        assert!(worth_compacting(100, 0, 50));
        assert!(!worth_compacting(0, 0, 50));
        assert!(!worth_compacting(100, 0, 0));
        assert!(worth_compacting(100, 99, 200));
        assert!(worth_compacting(u64::MAX, u64::MAX - 1, 100));
    }

    #[test]
    fn a_pass_takes_the_least_live_first_within_its_budget() {
        let seg = |key: &str, bytes, live| SegmentUse {
            key: key.to_owned(),
            bytes,
            live,
        };
        let segments = [
            seg("a", 100, 40),
            seg("b", 100, 10),
            seg("c", 100, 90),
            seg("d", 1000, 0),
            seg("e", 100, 30),
        ];
        let keys =
            |picked: Vec<&SegmentUse>| picked.iter().map(|s| s.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(pick(&segments, 50, 1_000)), ["d", "b", "e", "a"]);
        assert_eq!(keys(pick(&segments, 50, 40)), ["d", "b", "e"]);
        // the first is taken past the budget, and only the first
        assert_eq!(keys(pick(&segments[..1], 50, 1)), ["a"]);
        assert_eq!(
            keys(pick(&[seg("x", 10, 1), seg("y", 10, 1)], 50, 0)),
            ["x"]
        );
        assert!(pick(&segments, 0, 1_000).is_empty());
    }

    #[test]
    fn a_segment_is_settled_only_when_written_a_lease_and_a_margin_before_the_delivery_read() {
        let lease = 60_000;
        let read = 1_800_000_000_000;
        let edge = read - i64::try_from(lease + CLOCK_MARGIN_MS).unwrap();
        // strictly before the edge only: at it, a finish may have landed as the read began
        assert!(segment_settled(edge - 1, Some(lease), Some(read)));
        assert!(!segment_settled(edge, Some(lease), Some(read)));
        assert!(!segment_settled(read - 1, Some(lease), Some(read)));
        // written after the delivery read: a task it holds may point there, unseen
        assert!(!segment_settled(read + 1, Some(lease), Some(read)));
        // no kept delivery dates its read: nothing is proven
        assert!(!segment_settled(0, Some(lease), None));
        assert!(!segment_settled(i64::MIN, Some(0), None));
        // the only writer: its scan is exact, the rule does not apply
        assert!(segment_settled(read + 1, None, None));
        assert!(segment_settled(read, None, Some(read)));
        // a lease of 0 still keeps the clocks' margin
        assert!(!segment_settled(read - 1, Some(0), Some(read)));
        // no overflow at the ends
        assert!(!segment_settled(i64::MAX, Some(u64::MAX), Some(i64::MAX)));
        assert!(segment_settled(i64::MIN, Some(lease), Some(i64::MAX)));
    }
}
