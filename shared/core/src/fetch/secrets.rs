//! Secrets named by a crawl's configuration, looked up when a request needs them.
//!
//! A configuration holds only a [`SecretRef`] (a name), so a secret's value never reaches a
//! stored crawl, a task, a manifest or a log: it lives in the fetching process for the time of
//! one request. Errors name the reference, never a value.

use futures_util::future::BoxFuture;
use std::fmt;
use thiserror::Error;
use trawl_domain::crawl::SecretRef;

/// A secret's value. Its `Debug` hides it, so it cannot slip into a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A secret that could not be had; says which, and why, without any value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("secret {reference} is not available: {reason}")]
pub struct SecretError {
    pub reference: SecretRef,
    pub reason: String,
}

/// Where the values of named secrets come from (the port; asynchronous so that a store such as
/// a parameter service can stand behind it).
pub trait SecretSource: Send + Sync {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>>;
}

/// Secrets from the process environment: what the CLI and the crawler function use.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvSecrets;

impl SecretSource for EnvSecrets {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        let SecretRef::Env(name) = reference;
        let value = std::env::var(name).map(Secret).map_err(|e| SecretError {
            reference: reference.clone(),
            reason: match e {
                std::env::VarError::NotPresent => "not set in the environment".into(),
                std::env::VarError::NotUnicode(_) => "not valid UTF-8".into(),
            },
        });
        Box::pin(std::future::ready(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_its_value() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[tokio::test]
    async fn a_missing_variable_is_named_not_guessed() {
        let reference = SecretRef::Env("TRAWL_TEST_SURELY_UNSET_VARIABLE".into());
        let error = EnvSecrets.resolve(&reference).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "secret env:TRAWL_TEST_SURELY_UNSET_VARIABLE is not available: not set in the environment"
        );
    }

    #[tokio::test]
    async fn a_set_variable_is_read() {
        // PATH is set in every environment tests run in; no test may change the environment.
        let path = EnvSecrets
            .resolve(&SecretRef::Env("PATH".into()))
            .await
            .unwrap();
        assert_eq!(path.expose(), std::env::var("PATH").unwrap());
    }
}
