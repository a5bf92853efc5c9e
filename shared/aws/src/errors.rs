//! SDK errors classified once, by type: a transport failure, a timeout, a 5xx or 429 answer or
//! one of AWS's throttling error codes may succeed if retried; anything else (access denied, a
//! missing resource, a validation error) will not, and is reported as permanent. Either is
//! described in one line ([`describe`]); the SDK's full error goes to the debug log.

// Every SDK crate re-exports the same smithy types; S3's names serve for all three services.
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

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

/// Longest cause quoted from a transport error.
const MAX_CAUSE: usize = 160;

/// One line for a user: what the service said (code, HTTP status, message) or what happened on
/// the way (timeout, connection, lost response), and what to do for errors that will not pass.
/// The SDK's whole error, with its cause chain, is logged at debug level.
pub fn describe<E>(e: &SdkError<E, HttpResponse>) -> String
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    tracing::debug!(error = %DisplayErrorContext(e), "AWS SDK error");
    match e {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let err = service.err();
            let code = err.code().unwrap_or("error");
            let message = err.message().filter(|m| !m.is_empty());
            let what = match message {
                Some(message) => format!("{code} (HTTP {status}): {}", first_line(message)),
                None => format!("{code} (HTTP {status})"),
            };
            match status {
                401 | 403 => format!("{what}; check the credentials and what their policy allows"),
                400..=499 if !is_retryable(e) => format!(
                    "{what}; check that the resource exists (`trawl setup` creates it) and that \
                     the settings name it"
                ),
                _ => what,
            }
        }
        SdkError::TimeoutError(_) => "timed out".to_owned(),
        SdkError::DispatchFailure(_) => format!("request not delivered: {}", root_cause(e)),
        SdkError::ResponseError(_) => {
            format!("response lost or unreadable: {}", root_cause(e))
        }
        SdkError::ConstructionFailure(_) => format!("request not built: {}", root_cause(e)),
        _ => root_cause(e),
    }
}

/// The innermost cause's own words, on one line and bounded.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    first_line(&cause.to_string())
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(MAX_CAUSE) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}
