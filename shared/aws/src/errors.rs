//! SDK errors classified once, by type: a transport failure, a timeout, a 5xx or 429 answer or
//! one of AWS's throttling error codes may succeed if retried; anything else (access denied, a
//! missing resource, a validation error) will not, and is reported as permanent.

// Every SDK crate re-exports the same smithy types; S3's names serve for all three services.
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// The error codes AWS documents as throttling (the SDKs' own retry classifier uses these).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
];

/// Whether an SDK call may succeed if retried later.
pub fn is_retryable<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status();
            status.is_server_error()
                || status.as_u16() == 429
                || service
                    .err()
                    .code()
                    .is_some_and(|code| THROTTLING_CODES.contains(&code))
        }
        _ => false,
    }
}
