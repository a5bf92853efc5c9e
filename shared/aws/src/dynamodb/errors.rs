//! DynamoDB errors, matched by type: conditional-check failures become outcomes; the rest is
//! classified by `crate::errors` (retryable → `StoreError::Unavailable`, else `Backend`).

use crate::errors::{describe, is_retryable};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use trawl_core::store::StoreError;

type Item = HashMap<String, AttributeValue>;

/// The operation errors that can carry a failed condition (and the item it was checked against).
pub(super) trait ConditionalError {
    /// `Some(item or None)` when the error is a conditional-check failure.
    fn failed_condition(&self) -> Option<Option<&Item>>;
}

impl ConditionalError for PutItemError {
    fn failed_condition(&self) -> Option<Option<&Item>> {
        match self {
            PutItemError::ConditionalCheckFailedException(e) => Some(e.item()),
            _ => None,
        }
    }
}

impl ConditionalError for UpdateItemError {
    fn failed_condition(&self) -> Option<Option<&Item>> {
        match self {
            UpdateItemError::ConditionalCheckFailedException(e) => Some(e.item()),
            _ => None,
        }
    }
}

impl ConditionalError for DeleteItemError {
    fn failed_condition(&self) -> Option<Option<&Item>> {
        match self {
            DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item()),
            _ => None,
        }
    }
}

pub(super) fn is_conditional_failure<E: ConditionalError, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error()
        .and_then(ConditionalError::failed_condition)
        .is_some()
}

/// Whether a TransactWriteItems was cancelled because a condition of one of its items failed
/// (the cancellation reasons are the exception's own fields; any other reason, a conflict with
/// another transaction or throttling, is an error to classify).
pub(super) fn is_refused_transaction<R>(e: &SdkError<TransactWriteItemsError, R>) -> bool {
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled
            .cancellation_reasons()
            .iter()
            .any(|reason| reason.code() == Some("ConditionalCheckFailed")),
        _ => false,
    }
}

/// The item a failed condition was checked against (`ReturnValuesOnConditionCheckFailure`).
pub(super) fn conditional_item<E: ConditionalError, R>(e: &SdkError<E, R>) -> Option<Item> {
    e.as_service_error()
        .and_then(ConditionalError::failed_condition)
        .flatten()
        .cloned()
}

/// Maps an SDK error to a `StoreError` by its type (`crate::errors`).
pub(super) fn map_err<E>(operation: &'static str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let message = describe(&e);
    let error = if is_retryable(&e) {
        StoreError::unavailable(operation, message)
    } else {
        StoreError::backend(operation, message)
    };
    error.caused_by(e)
}
