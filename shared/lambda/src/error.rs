//! How a failed invocation is reported. Every function answers with one of three stable
//! `errorType`s, which say what the caller (or an operator reading CloudWatch) should do:
//! fix the event, try again, or look at the deployment.

use lambda_runtime::Diagnostic;
use std::fmt::Display;
use thiserror::Error;
#[cfg(feature = "deliver")]
use trawl_core::deliver::DeliverError;
#[cfg(feature = "seed")]
use trawl_core::seed::SeedError;
use trawl_core::store::StoreError;
use trawl_core::sweep::SweepError;
pub use trawl_domain::canonical::bounded;

/// Why an invocation failed as a whole.
#[derive(Debug, Error)]
pub enum HandlerError {
    /// The event cannot be handled as sent (malformed, or naming what does not exist); nothing
    /// was written. Fix it, do not retry it.
    #[error("{0}")]
    InvalidEvent(String),
    /// A backend was unavailable, or the state is not ready yet: the same event (every handler
    /// is idempotent) may succeed later.
    #[error("{0}")]
    Retryable(String),
    /// A backend refused the work (permissions, missing resources …) or the work can never
    /// succeed as asked.
    #[error("{0}")]
    Permanent(String),
}

impl HandlerError {
    pub fn invalid(reason: impl Display) -> Self {
        HandlerError::InvalidEvent(bounded(reason))
    }

    /// Work that failed, classed by whether trying again may succeed.
    pub fn failed(error: impl Display, retryable: bool) -> Self {
        if retryable {
            HandlerError::Retryable(error.to_string())
        } else {
            HandlerError::Permanent(error.to_string())
        }
    }

    /// The `errorType` Lambda reports.
    pub fn error_type(&self) -> &'static str {
        match self {
            HandlerError::InvalidEvent(_) => "InvalidEvent",
            HandlerError::Retryable(_) => "Retryable",
            HandlerError::Permanent(_) => "Permanent",
        }
    }
}

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Self {
        Diagnostic {
            error_type: e.error_type().to_owned(),
            error_message: e.to_string(),
        }
    }
}

impl From<StoreError> for HandlerError {
    fn from(e: StoreError) -> Self {
        let retryable = e.is_retryable();
        HandlerError::failed(e, retryable)
    }
}

#[cfg(feature = "seed")]
impl From<SeedError> for HandlerError {
    fn from(e: SeedError) -> Self {
        match e {
            SeedError::InvalidRequest(_) => HandlerError::invalid(e),
            e => {
                let retryable = e.is_retryable();
                HandlerError::failed(e, retryable)
            }
        }
    }
}

impl From<SweepError> for HandlerError {
    fn from(e: SweepError) -> Self {
        let retryable = e.is_retryable();
        HandlerError::failed(e, retryable)
    }
}

#[cfg(feature = "deliver")]
impl From<DeliverError> for HandlerError {
    fn from(e: DeliverError) -> Self {
        match e {
            DeliverError::NoSuchCrawl(_) | DeliverError::UnknownGeneration { .. } => {
                HandlerError::invalid(e)
            }
            e => {
                let retryable = e.is_retryable();
                HandlerError::failed(e, retryable)
            }
        }
    }
}

// The cases span the seeder's and the deliverer's errors (the crate's default features).
#[cfg(all(test, feature = "seed", feature = "deliver"))]
mod tests {
    use super::*;
    use trawl_domain::canonical::CrawlId;

    fn error_type(e: impl Into<HandlerError>) -> String {
        Diagnostic::from(e.into()).error_type
    }

    fn unavailable() -> StoreError {
        StoreError::unavailable("PutItem", "throttled")
    }

    fn denied() -> StoreError {
        StoreError::backend("PutItem", "AccessDenied")
    }

    #[test]
    fn backend_failures_are_retryable_or_permanent() {
        assert_eq!(error_type(unavailable()), "Retryable");
        assert_eq!(error_type(denied()), "Permanent");
        assert_eq!(error_type(SeedError::Store(unavailable())), "Retryable");
        assert_eq!(error_type(SeedError::Store(denied())), "Permanent");
        assert_eq!(error_type(SweepError::Store(unavailable())), "Retryable");
        assert_eq!(error_type(DeliverError::Store(denied())), "Permanent");
    }

    #[test]
    fn a_request_naming_what_does_not_exist_is_an_invalid_event() {
        let crawl = CrawlId::parse("c1").unwrap();
        assert_eq!(
            error_type(SeedError::InvalidRequest(vec!["bad".into()])),
            "InvalidEvent"
        );
        assert_eq!(
            error_type(DeliverError::NoSuchCrawl(crawl.clone())),
            "InvalidEvent"
        );
        assert_eq!(
            error_type(DeliverError::UnknownGeneration {
                crawl_id: crawl.clone(),
                requested: 2,
                current: 1,
            }),
            "InvalidEvent"
        );
        assert_eq!(
            error_type(DeliverError::NotCompleted {
                crawl_id: crawl,
                generation: 1,
            }),
            "Retryable",
            "completion may still come"
        );
    }

    #[test]
    fn the_message_is_the_cause() {
        let diagnostic = Diagnostic::from(HandlerError::from(denied()));
        assert_eq!(diagnostic.error_message, "PutItem: AccessDenied");
    }
}
