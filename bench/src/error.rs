//! The harness's one error type: what failed, and why, in one line.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    /// A step of a measurement that could not be done (setup, a child process, a backend call).
    #[error("{step}: {message}")]
    Step { step: String, message: String },
    /// A measurement that ran but whose result is wrong (pages missing, a bound exceeded).
    #[error("{step}: unexpected result: {message}")]
    Check { step: String, message: String },
}

pub type BenchResult<T> = Result<T, BenchError>;

/// Wraps any displayable error with the step it interrupted.
pub trait Context<T> {
    fn step(self, step: &str) -> BenchResult<T>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn step(self, step: &str) -> BenchResult<T> {
        self.map_err(|e| BenchError::Step {
            step: step.to_owned(),
            message: e.to_string(),
        })
    }
}

/// A failed check, as an error.
pub fn check(step: &str, message: impl Into<String>) -> BenchError {
    BenchError::Check {
        step: step.to_owned(),
        message: message.into(),
    }
}
