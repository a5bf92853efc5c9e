//! robots.txt (RFC 9309): fetched once per origin and user-agent token, cached with a TTL.

use super::request::RequestPlan;
use super::{Fetcher, Hop, read_capped};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use texting_robots::Robot;
use tokio::time::Instant;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::CrawlConfig;
use trawl_domain::retry::Failure;
use trawl_domain::task::ErrorKind;

/// How long fetched rules (or a 4xx "allow all") are trusted.
const ROBOTS_TTL: Duration = Duration::from_secs(3600);
/// How long a 5xx or unreachable robots.txt keeps the origin closed before it is asked again.
const UNAVAILABLE_TTL: Duration = Duration::from_secs(60);
/// RFC 9309 asks crawlers to parse at least 500 KiB; anything after that is ignored.
const MAX_ROBOTS_BYTES: u64 = 500 * 1024;
/// Redirects followed for robots.txt (RFC 9309: at least five).
const MAX_ROBOTS_REDIRECTS: u8 = 5;
/// Origins kept in the cache before idle entries are evicted.
const MAX_ENTRIES: usize = 4096;

/// What an origin's robots.txt says for one user-agent token.
#[derive(Debug)]
pub(crate) enum Rules {
    Parsed(Robot),
    /// No robots.txt (4xx), or one that could not be parsed.
    AllowAll,
    /// 5xx or unreachable: nothing may be fetched until it is asked again.
    Unavailable(String),
}

impl Rules {
    /// Whether `url` may be fetched; `Err` when robots.txt is unavailable.
    pub(crate) fn check(&self, url: &CanonicalUrl) -> Result<(), Failure> {
        match self {
            Rules::Parsed(robot) if !robot.allowed(url.as_str()) => Err(Failure::new(
                ErrorKind::RobotsDenied,
                "disallowed by robots.txt",
            )),
            Rules::Parsed(_) | Rules::AllowAll => Ok(()),
            Rules::Unavailable(why) => Err(Failure::new(
                ErrorKind::RobotsUnavailable,
                format!("robots.txt unavailable: {why}"),
            )),
        }
    }

    /// The Crawl-delay, capped at `max`.
    pub(crate) fn crawl_delay(&self, max: Duration) -> Option<Duration> {
        match self {
            Rules::Parsed(robot) => robot
                .delay
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(|secs| Duration::from_secs_f64(f64::from(secs)).min(max)),
            Rules::AllowAll | Rules::Unavailable(_) => None,
        }
    }
}

struct Entry {
    rules: Arc<Rules>,
    expires_at: Instant,
}

/// One origin's slot: its lock makes concurrent fetches of one origin wait for a single
/// robots.txt request instead of each sending their own.
type Slot = Arc<tokio::sync::Mutex<Option<Entry>>>;

/// The in-memory robots cache, bounded to `MAX_ENTRIES` origins.
#[derive(Default)]
pub(crate) struct RobotsCache {
    slots: Mutex<HashMap<String, Slot>>,
}

impl RobotsCache {
    fn slot(&self, key: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(key) {
            return Arc::clone(slot);
        }
        if slots.len() >= MAX_ENTRIES {
            let now = Instant::now();
            // Drop expired entries, then, if that was not enough, every entry not in use.
            slots.retain(|_, slot| {
                slot.try_lock()
                    .map_or(true, |e| e.as_ref().is_some_and(|e| e.expires_at > now))
            });
            if slots.len() >= MAX_ENTRIES {
                slots.retain(|_, slot| Arc::strong_count(slot) > 1);
            }
        }
        Arc::clone(slots.entry(key.to_owned()).or_default())
    }
}

/// The product token of a User-Agent string (`trawl` for `trawl/0.1 (+https://…)`), which is
/// what robots.txt groups name.
pub(crate) fn product_token(user_agent: &str) -> &str {
    let ua = user_agent.trim();
    let end = ua
        .find(|c: char| c == '/' || c.is_whitespace())
        .unwrap_or(ua.len());
    &ua[..end]
}

impl Fetcher {
    /// The robots rules for `url`'s origin, from the cache or fetched now.
    /// `Err` only when the network guard refuses the origin, its credentials are missing or no
    /// proxy is left to ask through.
    pub(crate) async fn robots_rules(
        &self,
        url: &CanonicalUrl,
        config: &CrawlConfig,
    ) -> Result<Arc<Rules>, Failure> {
        let user_agent = self.user_agent(config);
        let token = product_token(user_agent);
        let origin = url.as_url().origin().ascii_serialization();
        let slot = self
            .robots
            .slot(&format!("{origin} {}", token.to_ascii_lowercase()));
        let mut entry = slot.lock().await;
        if let Some(e) = entry.as_ref()
            && e.expires_at > Instant::now()
        {
            return Ok(Arc::clone(&e.rules));
        }
        let rules = Arc::new(self.fetch_robots(url, config, token).await?);
        let ttl = match *rules {
            Rules::Unavailable(_) => UNAVAILABLE_TTL,
            Rules::Parsed(_) | Rules::AllowAll => ROBOTS_TTL,
        };
        *entry = Some(Entry {
            rules: Arc::clone(&rules),
            expires_at: Instant::now() + ttl,
        });
        Ok(rules)
    }

    async fn fetch_robots(
        &self,
        url: &CanonicalUrl,
        config: &CrawlConfig,
        token: &str,
    ) -> Result<Rules, Failure> {
        let mut robots_url = match CanonicalUrl::join(url.as_url(), "/robots.txt") {
            Ok(u) => u,
            Err(e) => return Ok(Rules::Unavailable(e.to_string())),
        };
        let deadline = Instant::now() + Duration::from_millis(config.fetch.timeout_ms);
        let plan = match RequestPlan::for_robots(&config.fetch) {
            Ok(plan) => plan,
            Err(f) => return Ok(Rules::Unavailable(f.message)),
        };
        for hop in 0..=MAX_ROBOTS_REDIRECTS {
            let response = match self
                .send(&robots_url, config, None, &plan, None, None, deadline)
                .await
            {
                Ok((response, _sent)) => response,
                // The origin itself is forbidden, or the crawl's request settings for it cannot
                // be followed (credentials missing): the page fetch fails for that reason, not
                // as "robots.txt unavailable", which would be retried.
                Err(f)
                    if matches!(f.kind, ErrorKind::Blocked | ErrorKind::ClientError)
                        && hop == 0 =>
                {
                    return Err(f);
                }
                // No proxy to ask through says nothing of the origin's rules: not cached.
                Err(f) if super::proxy::is_exhausted(&f) => return Err(f),
                Err(f) => return Ok(Rules::Unavailable(f.message)),
            };
            let status = response.status();
            match Hop::of(&response, &robots_url) {
                Hop::Redirect(Ok(next)) => {
                    robots_url = next;
                    continue;
                }
                Hop::Redirect(Err(_)) => return Ok(Rules::AllowAll),
                Hop::Final => {}
            }
            if status.is_success() {
                let body = match read_capped(response, MAX_ROBOTS_BYTES, deadline).await {
                    Ok(capped) => capped.bytes,
                    Err(f) => return Ok(Rules::Unavailable(f.message)),
                };
                return Ok(match Robot::new(token, &body) {
                    Ok(robot) => Rules::Parsed(robot),
                    Err(e) => {
                        tracing::warn!(url = %robots_url, error = %e, "unparseable robots.txt: allowing all");
                        Rules::AllowAll
                    }
                });
            }
            // 429 is the server asking for less load, not saying there are no rules.
            if status.is_client_error() && status.as_u16() != 429 {
                return Ok(Rules::AllowAll);
            }
            return Ok(Rules::Unavailable(format!("HTTP {}", status.as_u16())));
        }
        // RFC 9309 2.3.1.2: more redirects than followed count as "unavailable" of the 4xx kind.
        Ok(Rules::AllowAll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_token_is_the_name_before_the_version() {
        assert_eq!(product_token("trawl/0.1 (+https://example.com)"), "trawl");
        assert_eq!(product_token("  MyBot "), "MyBot");
        assert_eq!(product_token("Bot (+x)"), "Bot");
    }

    #[test]
    fn rules_follow_the_token_group_and_cap_the_delay() {
        let txt = b"User-agent: trawl\nDisallow: /private\nCrawl-delay: 30\n\nUser-agent: *\nDisallow: /\n";
        let rules = Rules::Parsed(Robot::new("trawl", txt).unwrap());
        let url = |p: &str| CanonicalUrl::parse(&format!("http://example.com{p}")).unwrap();
        assert!(rules.check(&url("/public")).is_ok());
        assert_eq!(
            rules.check(&url("/private/x")).unwrap_err().kind,
            ErrorKind::RobotsDenied
        );
        assert_eq!(
            rules.crawl_delay(Duration::from_secs(10)),
            Some(Duration::from_secs(10))
        );
        let others = Rules::Parsed(Robot::new("otherbot", txt).unwrap());
        assert!(others.check(&url("/public")).is_err());
    }
}
