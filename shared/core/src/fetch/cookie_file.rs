//! A crawl's initial cookies read from a file a browser or a tool exported: a Netscape
//! `cookies.txt` (curl's, wget's, browser extensions') or a JSON map `{"host": {"name": "value"}}`
//! (the shape of `fetch.cookies.initial`).
//!
//! A `cookies.txt` line is `domain TAB subdomains TAB path TAB secure TAB expires TAB name TAB
//! value`; `#` lines are comments except `#HttpOnly_` (curl's mark of an HttpOnly cookie).
//! Path, secure and the subdomain flag are dropped: initial cookies go to the host and its
//! subdomains on every path. A cookie that has expired by `now` is skipped. The values are not
//! checked here; seeding checks them with the rest of the crawl's settings.

use std::collections::BTreeMap;
use thiserror::Error;
use trawl_domain::task::Millis;

/// Initial cookies by host, then name.
pub type InitialCookies = BTreeMap<String, BTreeMap<String, String>>;

/// Why a cookie file cannot be read; names the line, never a cookie's value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CookieFileError {
    #[error(
        "line {line}: expected 7 tab-separated fields (domain, subdomains, path, secure, expires, name, value)"
    )]
    Fields { line: usize },
    #[error("line {line}: the expiry is not a number of seconds")]
    Expiry { line: usize },
    #[error("line {line}: no domain")]
    Domain { line: usize },
    #[error("not a JSON map of host to name to value: {0}")]
    Json(String),
}

/// The cookies of `text` (JSON when it starts with `{`, else `cookies.txt`), those expired by
/// `now` left out.
pub fn parse(text: &str, now: Millis) -> Result<InitialCookies, CookieFileError> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map_err(|e| CookieFileError::Json(e.to_string()));
    }
    let mut cookies = InitialCookies::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim_end_matches('\r');
        let raw = raw.strip_prefix("#HttpOnly_").unwrap_or(raw);
        if raw.trim().is_empty() || raw.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = raw.split('\t').collect();
        // An empty value is written as nothing after the last tab, or left out by some tools.
        let [
            domain,
            _subdomains,
            _path,
            _secure,
            expires,
            name,
            value @ ..,
        ] = fields.as_slice()
        else {
            return Err(CookieFileError::Fields { line });
        };
        let value = match value {
            [] => "",
            [value] => value,
            _ => return Err(CookieFileError::Fields { line }),
        };
        let expires: i64 = expires
            .trim()
            .parse()
            .map_err(|_| CookieFileError::Expiry { line })?;
        // Seconds since the epoch; 0 is a session cookie.
        if expires != 0 && expires.saturating_mul(1_000) <= now {
            continue;
        }
        let domain = domain.trim().trim_start_matches('.').to_ascii_lowercase();
        if domain.is_empty() {
            return Err(CookieFileError::Domain { line });
        }
        cookies
            .entry(domain)
            .or_default()
            .insert((*name).to_owned(), value.to_owned());
    }
    Ok(cookies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netscape_file_gives_the_live_cookies_by_host() {
        let text = "# Netscape HTTP Cookie File\n\
                    \n\
                    .example.com\tTRUE\t/\tFALSE\t0\tconsent\tyes\n\
                    #HttpOnly_www.example.com\tFALSE\t/app\tTRUE\t4102444800\tsession\tabc123\n\
                    old.example\tFALSE\t/\tFALSE\t1000\tgone\tx\n\
                    Example.com\tTRUE\t/\tFALSE\t0\tempty\t\r\n";
        let cookies = parse(text, 2_000_000).unwrap();
        let expected = InitialCookies::from([
            (
                "example.com".to_owned(),
                BTreeMap::from([
                    ("consent".to_owned(), "yes".to_owned()),
                    ("empty".to_owned(), String::new()),
                ]),
            ),
            (
                "www.example.com".to_owned(),
                BTreeMap::from([("session".to_owned(), "abc123".to_owned())]),
            ),
        ]);
        assert_eq!(cookies, expected);
    }

    #[test]
    fn a_json_map_is_read_as_is() {
        let cookies = parse(r#" {"example.com": {"consent": "yes"}}"#, 0).unwrap();
        assert_eq!(cookies["example.com"]["consent"], "yes");
        assert!(matches!(
            parse(r#"{"example.com": ["x"]}"#, 0),
            Err(CookieFileError::Json(_))
        ));
    }

    #[test]
    fn a_broken_line_is_named_without_its_value() {
        let text = "example.com\tTRUE\t/\tFALSE\t0\tonly-name-secret\n";
        assert_eq!(
            parse(text, 0),
            Ok(InitialCookies::from([(
                "example.com".to_owned(),
                BTreeMap::from([("only-name-secret".to_owned(), String::new())]),
            )]))
        );
        let short = "example.com\tTRUE\t/\tsecret-value\n";
        let error = parse(short, 0).unwrap_err();
        assert_eq!(error, CookieFileError::Fields { line: 1 });
        assert!(!error.to_string().contains("secret-value"));
        let expiry = "# c\nexample.com\tTRUE\t/\tFALSE\tsoon\tn\tv\n";
        assert_eq!(parse(expiry, 0), Err(CookieFileError::Expiry { line: 2 }));
        let domain = "\tTRUE\t/\tFALSE\t0\tn\tv\n";
        assert_eq!(parse(domain, 0), Err(CookieFileError::Domain { line: 1 }));
    }
}
