//! Named secrets from AWS Systems Manager Parameter Store: the crawler function's
//! `SecretSource`.
//!
//! - `ssm` references are read with `GetParameter` (a `SecureString` decrypted) when a request
//!   needs them, and kept for [`CACHE_TTL`] so that a host turn of 50 pages makes one call, not
//!   50 (Parameter Store allows 40 reads/s by default); a rotated value is used within that time.
//! - `env` references are read from the environment, as in the CLI.
//! - Errors name the parameter and the error code, never a value. A throttled or unreachable
//!   service is transient (the task is tried again later); a missing parameter or a denied
//!   read is not.

use crate::errors::is_retryable;
use aws_sdk_ssm::error::ProvideErrorMetadata;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use trawl_core::secrets::{EnvSecrets, Secret, SecretError, SecretSource};
use trawl_domain::crawl::SecretRef;

/// How long a parameter's value is reused before it is read again.
pub const CACHE_TTL: Duration = Duration::from_secs(300);

/// Parameters read through one SSM client, cached for [`CACHE_TTL`].
#[derive(Debug)]
pub struct SsmSecrets {
    client: aws_sdk_ssm::Client,
    cache: Mutex<HashMap<String, (Instant, Secret)>>,
}

impl SsmSecrets {
    pub fn new(client: aws_sdk_ssm::Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    async fn parameter(&self, reference: &SecretRef, name: &str) -> Result<Secret, SecretError> {
        let now = Instant::now();
        if let Some((read_at, secret)) = self
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            && now.duration_since(*read_at) < CACHE_TTL
        {
            return Ok(secret.clone());
        }
        let failed = |reason: String, transient: bool| SecretError {
            reference: reference.clone(),
            reason,
            transient,
        };
        let output = self
            .client
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| {
                let not_found = e
                    .as_service_error()
                    .is_some_and(|service| service.is_parameter_not_found());
                if not_found {
                    failed("no such parameter".into(), false)
                } else {
                    let code = e.code().unwrap_or("no answer");
                    failed(
                        format!("the parameter store refused: {code}"),
                        is_retryable(&e),
                    )
                }
            })?;
        let secret = output
            .parameter()
            .and_then(|p| p.value())
            .map(Secret::new)
            .ok_or_else(|| failed("the parameter has no value".into(), false))?;
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), (now, secret.clone()));
        Ok(secret)
    }
}

impl SecretSource for SsmSecrets {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        Box::pin(async move {
            match reference {
                SecretRef::Ssm(name) => self.parameter(reference, name).await,
                SecretRef::Env(_) => EnvSecrets::read(reference),
            }
        })
    }
}
