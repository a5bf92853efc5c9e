//! The checker's dry run (`trawl check URL`): fetches a page the way the crawler would and says
//! what the crawl's rules make of it — its schedule, a soft 404, a page gone — by running the
//! same transitions on a copy of its task. Nothing is written.
//!
//! Also the re-test of each soft-404 rule's reference page (`ReferenceChecks`), made by the
//! crawler in a turn of the page's host: the process that fetches pages is the one that links an
//! HTTP client, and the host's turn is what paces requests to it.

use crate::discover::ScopeMatcher;
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher, Redirects};
use crate::revisit::{RevisitRules, Soft404Found, soft_404_match};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::crawl::{CrawlConfig, Soft404Rule};
use trawl_domain::retry::Failure;
use trawl_domain::revisit::Revisit;
use trawl_domain::task::{ErrorKind, FetchRecord, Millis, NewTask, Status, Task};
use trawl_domain::transition;

/// What a fetch of the page would do to its task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub url: String,
    /// What the server answered.
    pub answer: String,
    /// The soft-404 rule that recognised the page as gone: its place, its marker (CSS or
    /// XPath) and the text it found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_404: Option<Soft404Found>,
    /// The task's status before (None: the crawl does not know the URL) and after.
    pub status_before: Option<Status>,
    pub status_after: Status,
    /// Whether the stored content would change (a new md5).
    pub changed: bool,
    /// 404s in a row, and how many make the page gone.
    pub missing: u32,
    pub missing_after: u32,
    /// When the page would be fetched again (None: never).
    pub next_fetch_at: Option<Millis>,
}

/// Fetches `url` under `config` at `now`, as the task `known` (None: a new one) would be.
pub async fn check(
    fetcher: &Fetcher,
    config: &CrawlConfig,
    crawl_id: &CrawlId,
    known: Option<&Task>,
    url: &CanonicalUrl,
    now: Millis,
) -> Result<Check, String> {
    let scope = ScopeMatcher::new(&config.scope).map_err(|e| format!("scope: {e}"))?;
    let rules = RevisitRules::new(&config.recrawl)?;
    let revisit = rules.for_url(url.as_str());
    let task = match known {
        Some(task) => task.clone(),
        None => {
            let new = NewTask {
                lane: None,
                priority: Default::default(),
                url: url.clone(),
                depth: 0,
                parent: None,
                data: None,
            };
            transition::seed(crawl_id, &new, now).task
        }
    };
    // The claim a turn would make: the lease the fenced writes build on.
    let claimed = transition::claim(config.lease_ms, now).changes.apply(&task);
    let lease = transition::lease_of(&claimed);
    let previous = task.fetch.as_ref();
    let request = FetchRequest {
        url,
        crawl_id: Some(crawl_id),
        config,
        previous,
        scope: &scope,
        depth: task.depth,
        now,
        redirects: Redirects::Report,
        content_type: None,
        image: false,
        session: None,
        request: None,
    };
    let fail = |failure: &Failure, revisit: &Revisit| {
        transition::fail(&lease, failure, &config.retry, revisit, now)
            .0
            .changes
            .apply(&claimed)
    };
    let record = |changed: bool, base: FetchRecord| {
        let (next_fetch_at, pace) = revisit.after_fetch(previous, changed, now);
        FetchRecord {
            next_fetch_at,
            pace,
            fetched_at: now,
            missing: 0,
            ..base
        }
    };
    let finish = |r: &FetchRecord| transition::finish(&lease, r, now).changes.apply(&claimed);
    let mut soft_404 = None;
    let (answer, changed, after) = match fetcher.fetch(request).await {
        FetchOutcome::Failed(failure) => (failure.message.clone(), false, fail(&failure, &revisit)),
        FetchOutcome::NotModified(_) => {
            let r = record(false, previous.cloned().unwrap_or_default());
            ("304 Not Modified".to_owned(), false, finish(&r))
        }
        FetchOutcome::Redirected { status, location } => {
            let answer = format!("HTTP {status} to {location} (its own task)");
            let moved = previous.and_then(|p| p.final_url.as_deref()) != Some(location.as_str());
            let base = FetchRecord {
                http_status: status,
                final_url: Some(location.as_str().to_owned()),
                ..FetchRecord::default()
            };
            (answer, moved, finish(&record(moved, base)))
        }
        FetchOutcome::Fetched(page) => {
            let answer = format!("HTTP {}", page.status);
            let found = page
                .body
                .as_ref()
                .filter(|_| page.is_html())
                .and_then(|b| rules.soft_404(url.as_str(), b.bytes()));
            match found {
                Some(found) => {
                    let failure = Failure {
                        http_status: Some(page.status),
                        ..Failure::new(ErrorKind::NotFound, found.to_string())
                    };
                    let revisit = revisit.on_marker(found.at_once);
                    soft_404 = Some(found);
                    (answer, false, fail(&failure, &revisit))
                }
                None => {
                    let md5 = page.body.as_ref().map(|b| b.md5_hex());
                    let changed =
                        md5.is_none() || md5.as_deref() != previous.and_then(|p| p.md5.as_deref());
                    let base = FetchRecord {
                        md5,
                        http_status: page.status,
                        ..FetchRecord::default()
                    };
                    (answer, changed, finish(&record(changed, base)))
                }
            }
        }
    };
    Ok(Check {
        url: url.as_str().to_owned(),
        answer,
        soft_404,
        status_before: known.map(|t| t.status),
        status_after: after.status,
        changed,
        missing: after.fetch.as_ref().map_or(0, |f| f.missing),
        missing_after: revisit.missing_after,
        next_fetch_at: after.due_at(),
    })
}

/// What the re-test of a soft-404 rule's reference page (a page known to be gone) found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum ReferenceOutcome {
    /// The rule still recognises the page.
    Recognised,
    /// The server now answers 404 or 410: gone either way, nothing for the rule to do.
    Missing,
    /// The page answers, and the rule no longer recognises it: the site's "not found" page
    /// changed, and the crawl would keep soft 404s as pages.
    NotRecognised { answer: String },
    /// The page could not be fetched (network, server error): nothing learnt this time.
    Unreachable { error: String },
}

/// One rule's reference re-test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferenceCheck {
    /// The rule's index in `recrawl.soft_404`.
    pub rule: usize,
    pub url: String,
    #[serde(flatten)]
    pub outcome: ReferenceOutcome,
}

/// A process's re-tests of soft-404 reference pages: each rule's page is fetched again in a
/// turn of its own host, at most once per `interval` per crawl and host in the process (a warm
/// Lambda container, or the CLI's run). A rule that no longer recognises its page is an error the
/// operator must see: its soft 404s would be kept as pages.
#[derive(Debug)]
pub struct ReferenceChecks {
    interval_ms: Millis,
    last: Mutex<HashMap<(CrawlId, String), Millis>>,
}

impl Default for ReferenceChecks {
    fn default() -> Self {
        Self::new(Self::DEFAULT_INTERVAL)
    }
}

impl ReferenceChecks {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(4 * 60);

    pub fn new(interval: Duration) -> Self {
        Self {
            interval_ms: Millis::try_from(interval.as_millis()).unwrap_or(Millis::MAX),
            last: Mutex::default(),
        }
    }

    /// Re-tests, when due at `now`, the reference pages of `config`'s rules that live on `host`
    /// (a host key); none when nothing is due.
    pub async fn run(
        &self,
        fetcher: &Fetcher,
        crawl_id: &CrawlId,
        config: &CrawlConfig,
        host: &str,
        now: Millis,
    ) -> Vec<ReferenceCheck> {
        let on_host = |rule: &Soft404Rule| {
            rule.reference_url
                .as_deref()
                .is_some_and(|url| trawl_domain::canonical::host_key_of(url) == host)
        };
        if !config.recrawl.soft_404.iter().any(on_host) || !self.take_due(crawl_id, host, now) {
            return Vec::new();
        }
        let mut checks = Vec::new();
        for (rule, soft_404) in config.recrawl.soft_404.iter().enumerate() {
            let Some(url) = soft_404
                .reference_url
                .as_deref()
                .filter(|_| on_host(soft_404))
            else {
                continue;
            };
            let outcome = match CanonicalUrl::parse(url) {
                Ok(canonical) => {
                    reference_outcome(fetcher, crawl_id, config, (rule, soft_404), &canonical, now)
                        .await
                }
                Err(e) => ReferenceOutcome::Unreachable {
                    error: e.to_string(),
                },
            };
            checks.push(ReferenceCheck {
                rule,
                url: url.to_owned(),
                outcome,
            });
        }
        checks
    }

    /// Whether `crawl`'s references on `host` are due a re-test at `now` (and, if so, marks
    /// them done).
    fn take_due(&self, crawl: &CrawlId, host: &str, now: Millis) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (crawl.clone(), host.to_owned());
        match last.get(&key) {
            Some(&at) if now.saturating_sub(at) < self.interval_ms => false,
            _ => {
                last.insert(key, now);
                true
            }
        }
    }
}

async fn reference_outcome(
    fetcher: &Fetcher,
    crawl_id: &CrawlId,
    config: &CrawlConfig,
    (index, rule): (usize, &Soft404Rule),
    url: &CanonicalUrl,
    now: Millis,
) -> ReferenceOutcome {
    let scope = match ScopeMatcher::new(&config.scope) {
        Ok(scope) => scope,
        Err(e) => {
            return ReferenceOutcome::Unreachable {
                error: format!("scope: {e}"),
            };
        }
    };
    let request = FetchRequest {
        crawl_id: Some(crawl_id),
        url,
        config,
        previous: None,
        scope: &scope,
        depth: 0,
        now,
        redirects: Redirects::Report,
        content_type: None,
        image: false,
        session: None,
        request: None,
    };
    match fetcher.fetch(request).await {
        FetchOutcome::Failed(failure) if failure.kind == ErrorKind::NotFound => {
            ReferenceOutcome::Missing
        }
        FetchOutcome::Failed(failure) => ReferenceOutcome::Unreachable {
            error: failure.message,
        },
        FetchOutcome::Fetched(page) => {
            let recognised = page
                .body
                .as_ref()
                .filter(|_| page.is_html())
                .and_then(|b| soft_404_match(index, rule, b.bytes()));
            match recognised {
                Some(_) => ReferenceOutcome::Recognised,
                None => ReferenceOutcome::NotRecognised {
                    answer: format!("HTTP {}", page.status),
                },
            }
        }
        FetchOutcome::NotModified(_) => ReferenceOutcome::NotRecognised {
            answer: "304 Not Modified".into(),
        },
        FetchOutcome::Redirected { status, location } => ReferenceOutcome::NotRecognised {
            answer: format!("HTTP {status} to {location}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_pages_are_re_tested_at_most_once_per_interval_per_crawl_and_host() {
        let checks = ReferenceChecks::new(Duration::from_secs(60));
        let (a, b) = (CrawlId::parse("a").unwrap(), CrawlId::parse("b").unwrap());
        assert!(checks.take_due(&a, "x.test", 1_000));
        assert!(
            !checks.take_due(&a, "x.test", 60_999),
            "within the interval"
        );
        assert!(
            checks.take_due(&a, "y.test", 2_000),
            "another host has its own"
        );
        assert!(
            checks.take_due(&b, "x.test", 2_000),
            "another crawl has its own"
        );
        assert!(checks.take_due(&a, "x.test", 61_000));
    }
}
