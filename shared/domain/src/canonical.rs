//! URL canonicalisation and the identifiers derived from it.
//!
//! Two spellings of one page must become one task, so every URL is canonicalised before it is
//! hashed: scheme and host lower-cased, IDN hosts in punycode, default ports, fragments and dot
//! segments dropped, percent-encoding normalised (unreserved characters decoded, hex digits upper
//! case), query parameters in a stable order (sorted by name; values of a repeated name keep their
//! order) without empty ones. Only `http` and `https` are accepted. Tracking parameters are a
//! crawl's choice (`Scope::drop_params`), applied with [`CanonicalUrl::without_params`].

use md5::{Digest, Md5};
use std::fmt;
use thiserror::Error;

/// Longest URL trawl accepts, in bytes (most servers and CDNs refuse longer request lines).
pub const MAX_URL_BYTES: usize = 2048;
/// Longest host name trawl accepts, in bytes: DNS's limit for a name in text form.
pub const MAX_HOST_BYTES: usize = 253;

/// Why a URL was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UrlRejection {
    #[error("not a valid URL: {0}")]
    Unparseable(String),
    #[error("scheme {0:?} is not http or https")]
    Scheme(String),
    #[error("no host")]
    NoHost,
    #[error("longer than {MAX_URL_BYTES} bytes ({0})")]
    TooLong(usize),
    #[error("credentials in URLs are not accepted")]
    Credentials,
    /// A name no DNS resolves (the URL standard lets `$`, `!`, `{`… through), or one longer
    /// than DNS allows: its host could never be fetched, nor its turns queued.
    #[error("host {0:?} is not a DNS name of at most {MAX_HOST_BYTES} bytes nor an IP address")]
    Host(String),
}

/// A rejected URL, with the URL (shortened for logs) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("rejected URL {url:?}: {reason}")]
pub struct UrlError {
    pub url: String,
    pub reason: UrlRejection,
}

impl UrlError {
    /// The URL is shown without its credentials, redacted before it is cut short.
    fn new(url: &str, reason: UrlRejection) -> Self {
        Self {
            url: truncate(&redact_userinfo(url), 200).to_owned(),
            reason,
        }
    }
}

/// `text` with the user name and password of every URL in it replaced by `***`
/// (`http://bob:pw@host/` becomes `http://***@host/`). Errors quote the URLs they refuse, and no
/// output may show a secret: a URL's authority ends at `/`, `?`, `#`, a quote or a space.
pub fn redact_userinfo(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('@') {
        return text.into();
    }
    let mut redacted = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (head, tail) = rest.split_at(start + 3);
        redacted.push_str(head);
        let authority_end = tail
            .find(|c: char| "/?#\\'\"`".contains(c) || c.is_whitespace())
            .unwrap_or(tail.len());
        rest = match tail[..authority_end].rfind('@') {
            Some(at) => {
                redacted.push_str("***");
                &tail[at..]
            }
            None => tail,
        };
    }
    redacted.push_str(rest);
    redacted.into()
}

/// The politeness unit of a URL: its host, with the port when it is not the scheme's default.
pub fn host_key(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The politeness unit of a stored URL string ("" when it does not parse).
pub fn host_key_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| host_key(&u))
        .unwrap_or_default()
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The most of a reason an error or a log line carries: serde's messages quote the bad value,
/// which may be a megabyte.
pub const MAX_REASON: usize = 500;

/// `reason`, cut to [`MAX_REASON`] bytes (marked with `…`).
pub fn bounded(reason: impl fmt::Display) -> String {
    let reason = reason.to_string();
    if reason.len() <= MAX_REASON {
        return reason;
    }
    format!("{}…", truncate(&reason, MAX_REASON))
}

/// A URL in canonical form; the only kind a task is made from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalUrl(url::Url);

impl CanonicalUrl {
    /// Parses and canonicalises an absolute URL.
    pub fn parse(raw: &str) -> Result<Self, UrlError> {
        let parsed = url::Url::parse(raw.trim())
            .map_err(|e| UrlError::new(raw, UrlRejection::Unparseable(e.to_string())))?;
        Self::from_url(parsed, raw)
    }

    /// Resolves `href` against `base` (a page's URL or its `<base href>`) and canonicalises it.
    pub fn join(base: &url::Url, href: &str) -> Result<Self, UrlError> {
        let joined = base
            .join(href.trim())
            .map_err(|e| UrlError::new(href, UrlRejection::Unparseable(e.to_string())))?;
        Self::from_url(joined, href)
    }

    fn from_url(mut url: url::Url, raw: &str) -> Result<Self, UrlError> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(UrlError::new(raw, UrlRejection::Scheme(other.to_owned()))),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(UrlError::new(raw, UrlRejection::NoHost));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlError::new(raw, UrlRejection::Credentials));
        }
        if let Some(url::Host::Domain(name)) = url.host() {
            let dns_name = name.len() <= MAX_HOST_BYTES
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_".contains(&b));
            if !dns_name {
                let shown = truncate(name, 200).to_owned();
                return Err(UrlError::new(raw, UrlRejection::Host(shown)));
            }
        }
        url.set_fragment(None);
        let path = normalise_percent(url.path());
        url.set_path(&path);
        match url.query() {
            Some("") => url.set_query(None),
            Some(q) => {
                let q = sort_query(&normalise_percent(q));
                url.set_query((!q.is_empty()).then_some(q.as_str()));
            }
            None => {}
        }
        let len = url.as_str().len();
        if len > MAX_URL_BYTES {
            return Err(UrlError::new(raw, UrlRejection::TooLong(len)));
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_url(&self) -> &url::Url {
        &self.0
    }

    /// This URL without the query parameters `drop` names (a name, or a prefix ending in `*`:
    /// `utm_*`). Matching is on the parameter name as written in the canonical query.
    pub fn without_params(self, drop: &[String]) -> Self {
        let Some(query) = self.0.query() else {
            return self;
        };
        let dropped = |pair: &str| {
            let name = pair.split('=').next().unwrap_or_default();
            drop.iter().any(|d| match d.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == d,
            })
        };
        if !query.split('&').any(dropped) {
            return self;
        }
        let kept: Vec<&str> = query.split('&').filter(|p| !dropped(p)).collect();
        let kept = kept.join("&");
        let mut url = self.0.clone();
        url.set_query((!kept.is_empty()).then_some(kept.as_str()));
        Self(url)
    }

    /// The host, lower case (punycode for IDN hosts, brackets for IPv6).
    pub fn host(&self) -> &str {
        self.0.host_str().unwrap_or_default()
    }

    /// The politeness unit: the host, with its port when it is not the scheme's default
    /// (`example.com`, `127.0.0.1:8080`). Hosts are scheduled by this key.
    pub fn host_key(&self) -> String {
        host_key(&self.0)
    }

    /// The task id: the md5 of the canonical URL, hex (fixed length, whatever the URL's).
    pub fn task_id(&self) -> TaskId {
        TaskId(hex::encode(Md5::digest(self.as_str().as_bytes())))
    }

    /// The id of a request to this URL that is more than a GET (`crate::chain::task_id`): the
    /// md5 of the canonical URL and what the request adds, on a line of its own.
    pub fn task_id_with(&self, request: &str) -> TaskId {
        let mut md5 = Md5::new();
        md5.update(self.as_str().as_bytes());
        md5.update(b"\n");
        md5.update(request.as_bytes());
        TaskId(hex::encode(md5.finalize()))
    }
}

impl fmt::Display for CanonicalUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decodes percent-encoded unreserved characters and upper-cases the hex of the rest.
fn normalise_percent(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_value(bytes[i + 1]), hex_value(bytes[i + 2]))
        {
            {
                let decoded = h * 16 + l;
                if decoded.is_ascii_alphanumeric() || b"-._~".contains(&decoded) {
                    out.push(char::from(decoded));
                } else {
                    out.push('%');
                    out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
                    out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
                }
                i += 3;
                continue;
            }
        }
        // Non-ASCII cannot occur: `url` has already percent-encoded it.
        out.push(char::from(bytes[i]));
        i += 1;
    }
    out
}

/// Query parameters sorted by name (stable: a repeated name keeps its values' order), empty
/// ones dropped, so that `?b=2&a=1` and `?a=1&b=2` are one page.
fn sort_query(query: &str) -> String {
    let mut pairs: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    pairs.sort_by_key(|p| p.split('=').next().unwrap_or_default());
    pairs.join("&")
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A task's id: 32 hex characters, the md5 of its canonical URL.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// Accepts only what `CanonicalUrl::task_id` produces.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 32
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(s.to_owned()))
    }

    /// The id of the task a dedup key names (`crate::chain::KEY_KEY`): the md5 of the key
    /// after a prefix no canonical URL starts with, so that no URL's id is a key's.
    pub fn of_key(key: &str) -> TaskId {
        let mut md5 = Md5::new();
        md5.update(b"key\n");
        md5.update(key.as_bytes());
        TaskId(hex::encode(md5.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Stable shard in `0..shards`, from the id's leading bytes (the same on every process).
    pub fn shard(&self, shards: u32) -> u32 {
        let lead = u32::from_str_radix(&self.0[..8], 16).unwrap_or(0);
        lead % shards.max(1)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a crawl id was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid crawl id {0:?}: use 1 to 64 characters of A-Z a-z 0-9 . _ -")]
pub struct CrawlIdError(pub String);

/// A crawl's id: 1 to 64 characters of `[A-Za-z0-9._-]` (it is part of keys and S3 paths).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct CrawlId(String);

impl CrawlId {
    pub fn parse(s: &str) -> Result<Self, CrawlIdError> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(CrawlIdError(truncate(s, 80).to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CrawlId {
    type Error = CrawlIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<CrawlId> for String {
    fn from(id: CrawlId) -> String {
        id.0
    }
}

impl fmt::Display for CrawlId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_url_is_quoted_without_its_credentials() {
        // GIVEN URLs holding a password, one too long to be quoted whole
        let long = format!("http://bob:hunter2@example.com/{}", "a".repeat(300));
        for raw in [
            "http://bob:hunter2@example.com/",
            "ftp://bob:hunter2@x/",
            &long,
        ] {
            // WHEN they are refused, THEN the error shows the URL without them
            let shown = CanonicalUrl::parse(raw).unwrap_err().to_string();
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("://***@"), "{shown}");
        }
        // Text quoting several URLs: each one's user info goes, the rest stays.
        assert_eq!(
            redact_userinfo("'http://a:b@h:1/x?m=u@v' and socks5://c@d, mail@example.com"),
            "'http://***@h:1/x?m=u@v' and socks5://***@d, mail@example.com"
        );
        assert_eq!(redact_userinfo("http://h/p@q"), "http://h/p@q");
    }

    fn canon(s: &str) -> String {
        CanonicalUrl::parse(s).unwrap().as_str().to_owned()
    }

    #[test]
    fn canonical_forms_collapse_spellings_of_one_page() {
        assert_eq!(
            canon("HTTP://Example.COM:80/a/./b/../c#frag"),
            "http://example.com/a/c"
        );
        assert_eq!(canon("https://example.com:443"), "https://example.com/");
        assert_eq!(
            canon("http://example.com/%7euser/%2f%41?q=%3d%61"),
            "http://example.com/~user/%2FA?q=%3Da"
        );
        assert_eq!(canon("http://example.com/?"), "http://example.com/");
        assert_eq!(
            canon("http://bücher.example/"),
            "http://xn--bcher-kva.example/"
        );
        assert_eq!(
            canon("http://example.com:8080/x"),
            "http://example.com:8080/x"
        );
    }

    #[test]
    fn query_order_and_empty_parameters_do_not_make_a_new_page() {
        assert_eq!(
            canon("http://example.com/p?b=2&a=1"),
            canon("http://example.com/p?a=1&b=2")
        );
        assert_eq!(
            canon("http://example.com/p?a=1&&b=2&"),
            "http://example.com/p?a=1&b=2"
        );
        // Values of one name keep their order: `?t=x&t=y` may mean something else than `?t=y&t=x`.
        assert_eq!(
            canon("http://example.com/p?t=y&s=1&t=x"),
            "http://example.com/p?s=1&t=y&t=x"
        );
        assert_eq!(canon("http://example.com/p?&&"), "http://example.com/p");
    }

    #[test]
    fn tracking_parameters_are_dropped_by_name_or_prefix() {
        let drop = ["utm_*".to_owned(), "gclid".to_owned()];
        let url = CanonicalUrl::parse("http://example.com/p?utm_source=x&id=7&gclid=1&utm=keep")
            .unwrap()
            .without_params(&drop);
        assert_eq!(url.as_str(), "http://example.com/p?id=7&utm=keep");
        let only = CanonicalUrl::parse("http://example.com/p?utm_medium=a")
            .unwrap()
            .without_params(&drop);
        assert_eq!(only.as_str(), "http://example.com/p");
        // Nothing to drop: the same URL back.
        let same = CanonicalUrl::parse("http://example.com/p?q=1").unwrap();
        assert_eq!(same.clone().without_params(&drop), same);
    }

    #[test]
    fn bad_urls_are_typed_errors_naming_the_url() {
        let err = CanonicalUrl::parse("ftp://example.com/").unwrap_err();
        assert_eq!(err.reason, UrlRejection::Scheme("ftp".into()));
        assert_eq!(err.url, "ftp://example.com/");
        assert!(matches!(
            CanonicalUrl::parse("not a url").unwrap_err().reason,
            UrlRejection::Unparseable(_)
        ));
        assert_eq!(
            CanonicalUrl::parse("http://u:p@example.com/")
                .unwrap_err()
                .reason,
            UrlRejection::Credentials
        );
        let long = format!("http://example.com/{}", "a".repeat(3000));
        assert!(matches!(
            CanonicalUrl::parse(&long).unwrap_err().reason,
            UrlRejection::TooLong(_)
        ));
    }

    #[test]
    fn task_ids_are_stable_and_fixed_length() {
        let a = CanonicalUrl::parse("http://example.com/a")
            .unwrap()
            .task_id();
        let b = CanonicalUrl::parse("HTTP://EXAMPLE.com/a#x")
            .unwrap()
            .task_id();
        assert_eq!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert_eq!(a.as_str(), "3e27a17e84f5f8486fbc14488e12e6ff");
        assert_eq!(a.shard(8), a.shard(8));
        assert!(a.shard(8) < 8);
        assert!(TaskId::parse(a.as_str()).is_some());
        assert!(TaskId::parse("../etc").is_none());
    }

    #[test]
    fn crawl_ids_are_safe_for_keys() {
        assert!(CrawlId::parse("news-2026.11").is_ok());
        assert!(CrawlId::parse("a#b").is_err());
        assert!(CrawlId::parse("").is_err());
        assert!(CrawlId::parse(&"x".repeat(65)).is_err());
    }

    /// Hostile and unusual URLs from #18's bad-input list: each is refused with its reason, or
    /// accepted in one canonical form (an IDN as punycode, an IPv6 literal bracketed).
    #[test]
    fn hostile_urls_are_refused_with_their_reason_or_canonicalised() {
        let long = format!("http://example.com/{}", "a".repeat(100 * 1024));
        let long_host = format!("http://{}.example/", vec!["a".repeat(60); 6].join("."));
        type Expected = fn(&UrlRejection) -> bool;
        let refused: [(&str, &str, Expected); 11] = [
            (
                "javascript",
                "javascript:alert(1)",
                |r| matches!(r, UrlRejection::Scheme(s) if s == "javascript"),
            ),
            (
                "data",
                "data:text/html,<script>x</script>",
                |r| matches!(r, UrlRejection::Scheme(s) if s == "data"),
            ),
            (
                "file",
                "file:///etc/passwd",
                |r| matches!(r, UrlRejection::Scheme(s) if s == "file"),
            ),
            ("100 KB", &long, |r| matches!(r, UrlRejection::TooLong(_))),
            ("NUL in the host", "http://exa\0mple.com/", |r| {
                matches!(r, UrlRejection::Unparseable(_))
            }),
            ("credentials", "http://user:pw@example.com/", |r| {
                matches!(r, UrlRejection::Credentials)
            }),
            ("an unclosed IPv6 literal", "http://[::1/", |r| {
                matches!(r, UrlRejection::Unparseable(_))
            }),
            ("no host", "http://", |r| {
                matches!(r, UrlRejection::Unparseable(_) | UrlRejection::NoHost)
            }),
            // The URL standard lets these through; no DNS name has them.
            (
                "a $ in the host",
                "http://a$b.com/",
                |r| matches!(r, UrlRejection::Host(h) if h == "a$b.com"),
            ),
            ("braces in the host", "http://a{b}.com/", |r| {
                matches!(r, UrlRejection::Host(_))
            }),
            ("a 373-byte host", &long_host, |r| {
                matches!(r, UrlRejection::Host(_))
            }),
        ];
        for (case, raw, expected) in refused {
            match CanonicalUrl::parse(raw) {
                Err(e) => {
                    assert!(expected(&e.reason), "{case}: {e}");
                    assert!(
                        e.url.len() <= 200,
                        "{case}: the error quotes the URL in full"
                    );
                }
                Ok(url) => panic!("{case}: accepted as {url}"),
            }
        }
        let accepted = [
            (
                "NUL in the path",
                "http://example.com/a\0b",
                "http://example.com/a%00b",
            ),
            (
                "IDN",
                "http://bücher.example/ü",
                "http://xn--bcher-kva.example/%C3%BC",
            ),
            (
                "IPv6 loopback",
                "http://[::1]:8080/x",
                "http://[::1]:8080/x",
            ),
            (
                "IPv6 long form",
                "http://[2001:DB8:0:0:0:0:0:1]/",
                "http://[2001:db8::1]/",
            ),
            (
                "IPv4-mapped IPv6",
                "http://[::ffff:127.0.0.1]/",
                "http://[::ffff:7f00:1]/",
            ),
        ];
        for (case, raw, canonical) in accepted {
            let url = CanonicalUrl::parse(raw).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(url.as_str(), canonical, "{case}");
        }
    }
}
