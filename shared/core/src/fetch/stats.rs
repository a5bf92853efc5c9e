//! What a fetcher's requests came to since they were last taken: pages by HTTP status or error
//! kind, and a sample of their latencies. The Lambda crawler takes them after each batch for its
//! metrics (`trawl_lambda::metrics`); memory stays bounded whatever the number of fetches.

use super::FetchOutcome;
use std::collections::BTreeMap;
use std::time::Duration;

/// Latencies kept per taking: a uniform sample beyond this (an EMF value array holds 100).
pub const LATENCY_SAMPLES: usize = 100;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FetchStats {
    /// Fetches by outcome: the HTTP status (`200`, `304`, `301` …) or, for a failure, `error:KIND`.
    pub outcomes: BTreeMap<String, u64>,
    /// Milliseconds from request to outcome, a uniform sample of at most [`LATENCY_SAMPLES`].
    pub latencies_ms: Vec<f64>,
    /// Fetches recorded (the latency sample's population).
    pub fetches: u64,
}

impl FetchStats {
    pub(super) fn record(&mut self, outcome: &FetchOutcome, took: Duration) {
        let key = match outcome {
            FetchOutcome::Fetched(page) => page.status.to_string(),
            FetchOutcome::NotModified(_) => "304".to_owned(),
            FetchOutcome::Redirected { status, .. } => status.to_string(),
            FetchOutcome::Failed(failure) => {
                let kind = serde_json::to_value(failure.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("{:?}", failure.kind));
                format!("error:{kind}")
            }
        };
        *self.outcomes.entry(key).or_default() += 1;
        self.fetches += 1;
        let ms = took.as_secs_f64() * 1000.0;
        // Reservoir sampling: every fetch has the same chance of being in the sample.
        if self.latencies_ms.len() < LATENCY_SAMPLES {
            self.latencies_ms.push(ms);
        } else {
            let slot = fastrand::u64(0..self.fetches) as usize;
            if let Some(kept) = self.latencies_ms.get_mut(slot) {
                *kept = ms;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trawl_domain::retry::Failure;
    use trawl_domain::task::ErrorKind;

    #[test]
    fn outcomes_are_counted_by_status_or_error_kind_and_the_latency_sample_stays_bounded() {
        let mut stats = FetchStats::default();
        let timeout = FetchOutcome::Failed(Failure::new(ErrorKind::Timeout, "slow"));
        for i in 0..250 {
            stats.record(&timeout, Duration::from_millis(i));
        }
        stats.record(
            &FetchOutcome::Redirected {
                status: 301,
                location: trawl_domain::canonical::CanonicalUrl::parse("http://a/").unwrap(),
            },
            Duration::from_millis(5),
        );
        assert_eq!(stats.outcomes["error:timeout"], 250);
        assert_eq!(stats.outcomes["301"], 1);
        assert_eq!(stats.fetches, 251);
        assert_eq!(stats.latencies_ms.len(), LATENCY_SAMPLES);
        assert!(stats.latencies_ms.iter().all(|ms| *ms < 250.0));
    }
}
