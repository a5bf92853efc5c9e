//! Secrets named by a crawl's configuration, looked up when a request needs them.
//!
//! A configuration holds only a [`SecretRef`] (a name), so a secret's value never reaches a
//! stored crawl, a task, a manifest or a log: it lives in the fetching process for the time of
//! one request. Errors name the reference, never a value.

use futures_util::future::BoxFuture;
use std::fmt;
use thiserror::Error;
use trawl_domain::crawl::SecretRef;
use trawl_domain::task::ErrorKind;

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
    /// The source could not be asked now (a parameter service throttling or down): the task is
    /// tried again later rather than failed for good.
    pub transient: bool,
}

impl SecretError {
    /// How a task whose request needed the secret fails.
    pub fn kind(&self) -> ErrorKind {
        if self.transient {
            ErrorKind::Storage
        } else {
            ErrorKind::ClientError
        }
    }
}

/// Where the values of named secrets come from (the port; asynchronous so that a store such as
/// a parameter service can stand behind it).
pub trait SecretSource: Send + Sync {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>>;
}

/// Secrets from the process environment: what the CLI uses (and the crawler function, for
/// `env` references; its parameter-store source adds `ssm` ones).
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvSecrets;

impl EnvSecrets {
    /// The value of an `env` reference; any other kind is not this source's to read.
    pub fn read(reference: &SecretRef) -> Result<Secret, SecretError> {
        let unavailable = |reason: &str| SecretError {
            reference: reference.clone(),
            reason: reason.into(),
            transient: false,
        };
        let SecretRef::Env(name) = reference else {
            return Err(unavailable(
                "parameter store secrets are read by the crawler function on AWS only",
            ));
        };
        std::env::var(name).map(Secret).map_err(|e| match e {
            std::env::VarError::NotPresent => unavailable("not set in the environment"),
            std::env::VarError::NotUnicode(_) => unavailable("not valid UTF-8"),
        })
    }
}

impl SecretSource for EnvSecrets {
    fn resolve<'a>(
        &'a self,
        reference: &'a SecretRef,
    ) -> BoxFuture<'a, Result<Secret, SecretError>> {
        Box::pin(std::future::ready(Self::read(reference)))
    }
}

/// What is wrong with a reference's name, if anything (checked when a crawl is seeded).
pub fn reference_problem(reference: &SecretRef) -> Option<String> {
    match reference {
        SecretRef::Env(name) => {
            let valid = !name.is_empty()
                && name.len() <= 255
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            (!valid).then(|| {
                format!("{name:?} is not an environment variable name (letters, digits, _)")
            })
        }
        SecretRef::Ssm(name) => {
            // Parameter Store's rule: up to 2048 characters of letters, digits and `_.-/`.
            let valid = !name.is_empty()
                && name.len() <= 2048
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c));
            (!valid).then(|| format!("{name:?} is not a parameter name (letters, digits, _ . - /)"))
        }
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

    #[test]
    fn reference_names_are_checked_by_kind() {
        assert_eq!(reference_problem(&SecretRef::Env("API_TOKEN".into())), None);
        assert_eq!(
            reference_problem(&SecretRef::Ssm("/trawl/api-token".into())),
            None
        );
        assert!(reference_problem(&SecretRef::Env("1BAD".into())).is_some());
        assert!(reference_problem(&SecretRef::Ssm("a b".into())).is_some());
        assert!(reference_problem(&SecretRef::Ssm(String::new())).is_some());
    }

    #[tokio::test]
    async fn the_environment_does_not_pretend_to_hold_parameters() {
        let reference = SecretRef::Ssm("/trawl/token".into());
        let error = EnvSecrets.resolve(&reference).await.unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("secret ssm:/trawl/token is not available")
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
