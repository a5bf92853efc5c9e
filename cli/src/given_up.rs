//! Why a crawl gave up on tasks: its ignored and gone tasks grouped by reason (the kind of each
//! task's last error), each with an example and what to do about it. A crawl that fetched little
//! or nothing must say why, and one that fetched nothing at all must not look like a success.

use crate::error::CliError;
use crate::output;
use serde_json::json;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;
use trawl_core::fetch::forbidden_class;
use trawl_core::store::{StatusCounts, TaskQuery, TaskStore};
use trawl_domain::canonical::{CanonicalUrl, CrawlId};
use trawl_domain::task::{ErrorKind, Status};

/// Tasks read per status: enough to name the reasons, bounded for crawls that gave up on many
/// (each task is one read).
const EXAMINED_PER_STATUS: u64 = 500;
/// Distinct hosts whose refused addresses are classified.
const CLASSIFIED_HOSTS: usize = 8;
/// How long a host name's resolution may take when classifying it.
const RESOLVE_WAIT: Duration = Duration::from_secs(2);
/// Longest example error shown in the table (the JSON has it whole).
const SHOWN_ERROR_CHARS: usize = 160;

/// The given-up tasks of one status that share a reason.
#[derive(Debug)]
pub struct Reason {
    pub status: Status,
    /// The kind of the tasks' last error; None when none was recorded.
    pub kind: Option<ErrorKind>,
    pub tasks: u64,
    pub example_url: String,
    pub example_error: String,
    /// For the network guard: the classes of the refused addresses (`loopback`, `private` …).
    pub address_classes: BTreeSet<&'static str>,
    /// Hosts of refused tasks, classified once all tasks are read.
    blocked_hosts: BTreeSet<String>,
}

impl Reason {
    pub fn name(&self) -> String {
        self.kind.map_or_else(|| "unknown".to_owned(), kind_name)
    }

    /// What the user can do about it.
    pub fn hint(&self, crawl_id: &CrawlId) -> String {
        let Some(kind) = self.kind else {
            return "no error was recorded: `trawl tasks show URL` shows the task".into();
        };
        match kind {
            ErrorKind::Blocked => {
                let classes = if self.address_classes.is_empty() {
                    "internal".to_owned()
                } else {
                    self.address_classes
                        .iter()
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                // The crawl keeps its settings: the update is asked for, and re-admits the
                // tasks the guard refused.
                format!(
                    "the network guard refuses {classes} addresses: to crawl them, run the same \
                     crawl command with --allow-private-networks --update-config (for --crawl-id \
                     {crawl_id}; the update re-admits them)"
                )
            }
            ErrorKind::RobotsDenied => "robots.txt disallows these URLs, and trawl obeys it".into(),
            ErrorKind::OutOfScope => "they lead off the crawl's domains (a redirect, most often): \
                 the same crawl command with --allow-domain DOMAIN --update-config follows them \
                 (the update re-admits them)"
                .into(),
            ErrorKind::NotFound => "the server answered 404 or 410: check the URLs".into(),
            ErrorKind::ClientError => "the server refused the requests (4xx): check the URLs, \
                 and put a contact URL in --user-agent"
                .into(),
            ErrorKind::HostGivenUp => format!(
                "their host kept failing as a whole (429/503, refused connections): `trawl hosts \
                 --crawl-id {crawl_id} --sort errors` shows which; once it answers again, run \
                 `trawl retry --status ignored --crawl-id {crawl_id}`, then the crawl again"
            ),
            ErrorKind::TooManyRedirects => "redirect loops, or chains of more than 5 hops".into(),
            ErrorKind::TooLarge => "the bodies exceed the crawl's size limit".into(),
            ErrorKind::InvalidContent => "the bodies could not be decoded".into(),
            ErrorKind::Removed => "images no delivered item names any more, removed with their \
                 bytes (they are fetched again when `trawl retry --status ignored` is run)"
                .into(),
            ErrorKind::ServerError
            | ErrorKind::Throttled
            | ErrorKind::Timeout
            | ErrorKind::Connection
            | ErrorKind::RobotsUnavailable
            | ErrorKind::Storage => format!(
                "retries ran out: once the site answers again, run `trawl retry --status {} \
                 --crawl-id {crawl_id}`, then the crawl again",
                self.status
            ),
        }
    }
}

/// The reasons of a crawl's given-up tasks.
#[derive(Debug, Default)]
pub struct GivenUp {
    /// Most tasks first.
    pub reasons: Vec<Reason>,
    /// Given-up tasks beyond the ones examined (not in `reasons`).
    pub unexamined: u64,
}

impl GivenUp {
    /// Reads the crawl's ignored and gone tasks (up to a bound per status) and groups them;
    /// `counts` are the crawl's tasks per status.
    pub async fn read<S: TaskStore>(
        store: &S,
        crawl_id: &CrawlId,
        counts: &StatusCounts,
    ) -> Result<Self, CliError> {
        let mut given_up = GivenUp::default();
        for status in [Status::Ignored, Status::Gone] {
            let examined = given_up.read_status(store, crawl_id, status).await?;
            let total = counts.get(&status).copied().unwrap_or(0);
            given_up.unexamined += total.saturating_sub(examined);
        }
        for reason in &mut given_up.reasons {
            for host in &reason.blocked_hosts {
                if let Some(class) = address_class(host).await {
                    reason.address_classes.insert(class);
                }
            }
        }
        given_up.reasons.sort_by_key(|r| std::cmp::Reverse(r.tasks));
        Ok(given_up)
    }

    async fn read_status<S: TaskStore>(
        &mut self,
        store: &S,
        crawl_id: &CrawlId,
        status: Status,
    ) -> Result<u64, CliError> {
        let mut examined = 0;
        let mut cursor = None;
        loop {
            let query = TaskQuery {
                crawl_id: crawl_id.clone(),
                status,
                updated_before: None,
                limit: 100,
                cursor,
                part: trawl_core::store::Part::WHOLE,
            };
            let page = store.query(&query).await?;
            for summary in page.tasks {
                if examined == EXAMINED_PER_STATUS {
                    return Ok(examined);
                }
                examined += 1;
                let last = store
                    .get(crawl_id, &summary.task_id)
                    .await?
                    .and_then(|task| task.errors.last().cloned());
                let kind = last.as_ref().map(|e| e.kind);
                let message = last.map(|e| e.message).unwrap_or_default();
                self.add(status, kind, &summary.url, message);
            }
            cursor = page.cursor;
            if cursor.is_none() {
                return Ok(examined);
            }
        }
    }

    fn add(&mut self, status: Status, kind: Option<ErrorKind>, url: &str, message: String) {
        let index = match self
            .reasons
            .iter()
            .position(|r| r.status == status && r.kind == kind)
        {
            Some(index) => index,
            None => {
                self.reasons.push(Reason {
                    status,
                    kind,
                    tasks: 0,
                    example_url: url.to_owned(),
                    example_error: message,
                    address_classes: BTreeSet::new(),
                    blocked_hosts: BTreeSet::new(),
                });
                self.reasons.len() - 1
            }
        };
        let reason = &mut self.reasons[index];
        reason.tasks += 1;
        if kind == Some(ErrorKind::Blocked)
            && reason.blocked_hosts.len() < CLASSIFIED_HOSTS
            && let Ok(url) = CanonicalUrl::parse(url)
        {
            reason.blocked_hosts.insert(url.host().to_owned());
        }
    }

    pub fn to_json(&self, crawl_id: &CrawlId) -> serde_json::Value {
        let reasons: Vec<_> = self
            .reasons
            .iter()
            .map(|r| {
                json!({
                    "status": r.status.name(),
                    "reason": r.name(),
                    "tasks": r.tasks,
                    "example": {"url": r.example_url, "error": r.example_error},
                    "address_classes": r.address_classes,
                    "hint": r.hint(crawl_id),
                })
            })
            .collect();
        json!({ "reasons": reasons, "unexamined": self.unexamined })
    }

    /// A table of the reasons and one hint line per reason; nothing when no task was given up.
    pub fn print(&self, crawl_id: &CrawlId) {
        if self.reasons.is_empty() {
            return;
        }
        let rows: Vec<Vec<String>> = self
            .reasons
            .iter()
            .map(|r| {
                let example = if r.example_error.is_empty() {
                    r.example_url.clone()
                } else {
                    format!("{} ({})", r.example_url, shorten(&r.example_error))
                };
                vec![
                    r.status.name().to_owned(),
                    r.name(),
                    r.tasks.to_string(),
                    example,
                ]
            })
            .collect();
        output::line("");
        output::table(&["given up", "reason", "tasks", "example"], &rows);
        for reason in &self.reasons {
            output::line(format_args!(
                "hint ({}): {}",
                reason.name(),
                reason.hint(crawl_id)
            ));
        }
        if self.unexamined > 0 {
            output::line(format_args!(
                "{} more given-up task(s) not examined: `trawl tasks list --status ignored` \
                 (or gone) lists them",
                self.unexamined
            ));
        }
    }

    /// A completed crawl that fetched no page at all is an error, explained by its main reason.
    pub fn check_fetched(&self, crawl_id: &CrawlId, counts: &StatusCounts) -> Result<(), CliError> {
        if counts.get(&Status::Succeeded).copied().unwrap_or(0) > 0 {
            return Ok(());
        }
        let total: u64 = counts.values().sum();
        let (reason, next) = match self.reasons.first() {
            Some(top) => {
                let mut by_reason: Vec<String> = self
                    .reasons
                    .iter()
                    .map(|r| format!("{} {}", r.tasks, r.name()))
                    .collect();
                if self.unexamined > 0 {
                    by_reason.push(format!("{} not examined", self.unexamined));
                }
                (
                    format!(
                        "all {total} task(s) were given up ({})",
                        by_reason.join(", ")
                    ),
                    top.hint(crawl_id),
                )
            }
            None => (
                "no task was seeded".to_owned(),
                "check the seeds (and the warnings above)".to_owned(),
            ),
        };
        Err(CliError::NothingFetched {
            crawl_id: crawl_id.to_string(),
            reason,
            next,
        })
    }
}

/// `blocked`, `not_found` …: the names `trawl tasks show` and the delivery summary use.
fn kind_name(kind: ErrorKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{kind:?}"))
}

fn shorten(message: &str) -> String {
    match message.char_indices().nth(SHOWN_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_owned(),
    }
}

/// The class of address the network guard refuses `host` as: from the address itself, or for a
/// name from what it resolves to now.
async fn address_class(host: &str) -> Option<&'static str> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return forbidden_class(ip);
    }
    let resolved = tokio::time::timeout(RESOLVE_WAIT, tokio::net::lookup_host((bare, 0)))
        .await
        .ok()?
        .ok()?;
    resolved.into_iter().find_map(|a| forbidden_class(a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crawl() -> CrawlId {
        CrawlId::parse("c1").unwrap()
    }

    #[tokio::test]
    async fn refused_addresses_are_named_by_class() {
        assert_eq!(address_class("127.0.0.1").await, Some("loopback"));
        assert_eq!(address_class("[::1]").await, Some("loopback"));
        assert_eq!(address_class("10.0.0.7").await, Some("private"));
        assert_eq!(address_class("169.254.169.254").await, Some("link-local"));
        assert_eq!(address_class("8.8.8.8").await, None);
    }

    #[test]
    fn tasks_are_grouped_by_status_and_reason_with_a_hint_each() {
        let mut given_up = GivenUp::default();
        let blocked = Some(ErrorKind::Blocked);
        given_up.add(
            Status::Ignored,
            blocked,
            "http://127.0.0.1/",
            "refused".into(),
        );
        given_up.add(
            Status::Ignored,
            blocked,
            "http://127.0.0.1/a",
            "refused".into(),
        );
        given_up.add(
            Status::Gone,
            Some(ErrorKind::NotFound),
            "http://x.test/",
            "404".into(),
        );
        given_up.add(Status::Ignored, None, "http://x.test/b", String::new());

        let reasons: Vec<(Status, String, u64)> = given_up
            .reasons
            .iter()
            .map(|r| (r.status, r.name(), r.tasks))
            .collect();
        assert_eq!(
            reasons,
            [
                (Status::Ignored, "blocked".to_owned(), 2),
                (Status::Gone, "not_found".to_owned(), 1),
                (Status::Ignored, "unknown".to_owned(), 1),
            ]
        );
        assert!(
            given_up.reasons[0]
                .hint(&crawl())
                .contains("--allow-private-networks")
        );
        assert!(given_up.reasons[0].blocked_hosts.contains("127.0.0.1"));
    }

    #[test]
    fn a_crawl_without_a_fetched_page_is_an_error_naming_its_main_reason() {
        let mut given_up = GivenUp::default();
        given_up.add(
            Status::Ignored,
            Some(ErrorKind::RobotsDenied),
            "http://x.test/",
            "no".into(),
        );
        let counts: StatusCounts = [(Status::Ignored, 1)].into_iter().collect();
        let error = given_up.check_fetched(&crawl(), &counts).unwrap_err();
        assert_eq!(error.exit_code(), 3);
        let line = error.to_string();
        assert!(
            line.contains("1 robots_denied") && line.contains("robots.txt"),
            "{line}"
        );

        let fetched: StatusCounts = [(Status::Ignored, 1), (Status::Succeeded, 1)]
            .into_iter()
            .collect();
        assert!(given_up.check_fetched(&crawl(), &fetched).is_ok());
        let nothing = GivenUp::default().check_fetched(&crawl(), &StatusCounts::new());
        assert!(
            nothing
                .unwrap_err()
                .to_string()
                .contains("no task was seeded")
        );
    }
}
