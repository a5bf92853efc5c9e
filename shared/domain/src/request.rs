//! Additive writes under retries. A counter's add — page slots reserved against `max_pages`, URLs
//! offered to a host, calls added to a crawl's totals — is not idempotent by itself: a write
//! applied while its answer was lost (a timeout, a reset connection, an SDK retry of a request
//! that landed), then tried again, would add twice.
//!
//! The rule: every such write carries a [`RequestId`], drawn once by its caller and kept across
//! the write's retries, and a store applies a request at most once: a repeat finds it applied,
//! changes nothing and answers as the first try would have (the record as it stands). Ids are
//! random 64-bit numbers, unique with overwhelming odds.
//!
//! How long a store remembers: at least [`REQUEST_WINDOW_MS`] after a request's first try — the
//! window DynamoDB keeps a TransactWriteItems' `ClientRequestToken` (its adapter sends the id as
//! that token for page slots; SQLite and the in-memory store keep the ids they applied for as
//! long). Call reports on DynamoDB are one UpdateItem of a report lane that keeps each
//! process's recent request ids (`crate::report`: exact whoever reports meanwhile; a retry is
//! recognised while fewer than 4 later reports of its process have landed). One exception, for
//! cost: on DynamoDB an offer to a host, the most
//! frequent of these writes, keeps only its host's last offer's id beside the count (one
//! UpdateItem, not a transaction and a read): its own retry changes nothing, but another offer
//! landing between a lost answer and the retry lets the retry add again. Such an over-count of
//! a host's URLs holds no task back; its next turn that finds nothing makes the counts agree. A caller
//! tries a request again only within seconds (`Backoff::BRIEF` in `trawl-core`), far inside
//! the window; past its retries, the outcome is unknown, and the next write is a new request.

use std::fmt;

/// How long after a request's first try a store still recognises a repeat of it.
pub const REQUEST_WINDOW_MS: u64 = 600_000;

/// The id of one additive write, the same on each of its tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl RequestId {
    /// The id as DynamoDB's `ClientRequestToken` (1 to 36 characters).
    pub fn token(self) -> String {
        format!("trawl-{:016x}", self.0)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_within_dynamodbs_length_and_the_same_on_every_try() {
        let id = RequestId(u64::MAX);
        assert!(id.token().len() <= 36);
        assert_eq!(id.token(), RequestId(u64::MAX).token());
        assert_ne!(id.token(), RequestId(1).token());
    }
}
