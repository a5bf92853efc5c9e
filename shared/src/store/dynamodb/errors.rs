//! SDK errors, matched by type: conditional-check failures become outcomes, throttling and
//! transport failures become `StoreError::Unavailable`, the rest `StoreError::Backend`.

use crate::store::{StoreError, StoreResult};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

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

/// The item a failed condition was checked against (`ReturnValuesOnConditionCheckFailure`).
pub(super) fn conditional_item<E: ConditionalError, R>(e: &SdkError<E, R>) -> Option<Item> {
    e.as_service_error()
        .and_then(ConditionalError::failed_condition)
        .flatten()
        .cloned()
}

/// Maps an SDK error to a `StoreError` by its type.
pub(super) fn map_err<E, R>(operation: &'static str, e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
    aws_sdk_dynamodb::Error: From<SdkError<E, R>>,
{
    let message = DisplayErrorContext(&e).to_string();
    if matches!(
        e,
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_)
    ) {
        return StoreError::Unavailable { operation, message };
    }
    match aws_sdk_dynamodb::Error::from(e) {
        aws_sdk_dynamodb::Error::ProvisionedThroughputExceededException(_)
        | aws_sdk_dynamodb::Error::RequestLimitExceeded(_)
        | aws_sdk_dynamodb::Error::ThrottlingException(_)
        | aws_sdk_dynamodb::Error::InternalServerError(_) => {
            StoreError::Unavailable { operation, message }
        }
        _ => StoreError::Backend { operation, message },
    }
}

/// The outcome of a conditional UpdateItem: true if applied, false if its condition failed.
pub(super) fn applied<O>(
    result: Result<O, SdkError<UpdateItemError, HttpResponse>>,
) -> StoreResult<bool> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_conditional_failure(&e) => Ok(false),
        Err(e) => Err(map_err("UpdateItem", e)),
    }
}
