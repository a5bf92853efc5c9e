//! Seed manifests in S3: URL lists streamed line by line, never held whole in memory.
//!
//! Two formats: `lines` (one URL per line, or a `{"url": …, "data": {…}}` object; blank lines
//! and `#` comments skipped) and `jsonl` (one JSON object with a `url` field and an optional
//! `data` object per line, other fields ignored, or a bare JSON string).
//! A continuation resumes at a byte offset with a Range GET, fenced on the object's ETag.

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use thiserror::Error;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use trawl_domain::task::{UserData, check_user_data};

/// Longest manifest line read as a URL; longer lines are rejected without being buffered.
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// How a manifest lists its URLs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestFormat {
    #[default]
    Lines,
    Jsonl,
}

/// A manifest opened at some byte offset.
pub type ManifestReader = Pin<Box<dyn AsyncBufRead + Send>>;

/// An opened manifest and the version it is.
pub struct OpenManifest {
    pub reader: ManifestReader,
    pub etag: Option<String>,
}

#[derive(Debug, Error)]
pub enum ManifestError {
    /// Missing object, no access, a changed object or a range past its end: the request is wrong.
    #[error("cannot read s3://{bucket}/{key}: {message}")]
    Unreadable {
        bucket: String,
        key: String,
        message: String,
    },
    /// Throttled, timed out or unreachable: retrying later may succeed.
    #[error("s3://{bucket}/{key} unavailable: {message}")]
    Unavailable {
        bucket: String,
        key: String,
        message: String,
    },
}

impl ManifestError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, ManifestError::Unavailable { .. })
    }
}

/// Where manifests come from (S3 in production; tests may serve them from memory).
pub trait ManifestSource: Send + Sync {
    /// Opens `bucket/key` from byte `offset`; with `if_match`, fails unless the object's ETag
    /// still is that one.
    fn open(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        if_match: Option<&str>,
    ) -> impl Future<Output = Result<OpenManifest, ManifestError>> + Send;
}

/// A [`ManifestSource`] as an object: what a seeder holds, so that its type names only its App's
/// ports. Every source is one.
pub trait OpenManifests: Send + Sync {
    fn open_at<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        offset: u64,
        if_match: Option<&'a str>,
    ) -> BoxFuture<'a, Result<OpenManifest, ManifestError>>;
}

impl<T: ManifestSource> OpenManifests for T {
    fn open_at<'a>(
        &'a self,
        bucket: &'a str,
        key: &'a str,
        offset: u64,
        if_match: Option<&'a str>,
    ) -> BoxFuture<'a, Result<OpenManifest, ManifestError>> {
        Box::pin(self.open(bucket, key, offset, if_match))
    }
}

/// One line read from a manifest.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line {
    /// Bytes consumed, newline included.
    pub consumed: u64,
    /// The line was longer than the cap; `buf` holds only its start.
    pub too_long: bool,
}

/// Reads one line into `buf` (cleared first, newline stripped), keeping at most `cap` bytes of
/// it in memory. None at the end of the stream.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin + ?Sized>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<Line>> {
    buf.clear();
    let mut line = Line {
        consumed: 0,
        too_long: false,
    };
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok((line.consumed > 0).then_some(line));
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let content = chunk.strip_suffix(b"\n").unwrap_or(chunk);
        let room = cap.saturating_sub(buf.len());
        if content.len() > room {
            line.too_long = true;
        }
        buf.extend_from_slice(&content[..content.len().min(room)]);
        let n = chunk.len();
        reader.consume(n);
        line.consumed += n as u64;
        if done {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(line));
        }
    }
}

/// Whether the stream has nothing left.
pub(crate) async fn at_end<R: AsyncBufRead + Unpin + ?Sized>(
    reader: &mut R,
) -> std::io::Result<bool> {
    Ok(reader.fill_buf().await?.is_empty())
}

/// What a manifest line holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Blank line or comment.
    Skip,
    Url(SeedEntry),
    Invalid(String),
}

/// One seed: a URL, and the user data its task carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedEntry {
    pub url: String,
    pub data: Option<UserData>,
}

impl SeedEntry {
    fn of(entry: JsonEntry) -> Result<Self, String> {
        if let Some(data) = &entry.data {
            check_user_data(data)?;
        }
        Ok(Self {
            url: entry.url,
            data: entry.data,
        })
    }
}

/// A seed as written in `source.urls`, a seeds file or a `lines` manifest: a URL, or a JSON
/// object `{"url": …, "data": {…}}` whose `data` (at most `MAX_USER_DATA_BYTES` as JSON)
/// goes with the task.
pub fn seed_entry(raw: &str) -> Result<SeedEntry, String> {
    let text = raw.trim();
    if !text.starts_with('{') {
        return Ok(SeedEntry {
            url: text.to_owned(),
            data: None,
        });
    }
    let entry = serde_json::from_str::<JsonEntry>(text).map_err(|_| NOT_AN_ENTRY.to_owned())?;
    SeedEntry::of(entry)
}

const NOT_AN_ENTRY: &str = "not a JSON object with a \"url\" string (and a \"data\" object)";

#[derive(Deserialize)]
struct JsonEntry {
    url: String,
    #[serde(default)]
    data: Option<UserData>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonLine {
    Object(JsonEntry),
    Bare(String),
}

/// Reads one manifest line in `format`.
pub(crate) fn parse_line(line: &[u8], too_long: bool, format: ManifestFormat) -> Entry {
    if too_long {
        return Entry::Invalid(format!("line longer than {MAX_LINE_BYTES} bytes"));
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Entry::Invalid("line is not UTF-8".into());
    };
    let text = text.trim().trim_start_matches('\u{feff}');
    if text.is_empty() {
        return Entry::Skip;
    }
    match format {
        ManifestFormat::Lines if text.starts_with('#') => Entry::Skip,
        ManifestFormat::Lines => match seed_entry(text) {
            Ok(entry) => Entry::Url(entry),
            Err(reason) => Entry::Invalid(reason),
        },
        ManifestFormat::Jsonl => match serde_json::from_str::<JsonLine>(text) {
            Ok(JsonLine::Object(entry)) => match SeedEntry::of(entry) {
                Ok(entry) => Entry::Url(entry),
                Err(reason) => Entry::Invalid(reason),
            },
            Ok(JsonLine::Bare(url)) => Entry::Url(SeedEntry { url, data: None }),
            Err(_) => Entry::Invalid(NOT_AN_ENTRY.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], cap: usize) -> Vec<(String, u64, bool)> {
        let mut reader = input;
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut reader, &mut buf, cap).await.unwrap() {
            out.push((
                String::from_utf8(buf.clone()).unwrap(),
                line.consumed,
                line.too_long,
            ));
        }
        out
    }

    #[tokio::test]
    async fn lines_are_read_with_their_byte_counts_and_capped() {
        let got = lines(b"http://a/\r\n\nhttp://b/very-long\nlast", 10).await;
        assert_eq!(
            got,
            [
                ("http://a/".into(), 11, false),
                ("".into(), 1, false),
                ("http://b/v".into(), 19, true),
                ("last".into(), 4, false),
            ]
        );
        assert!(lines(b"", 10).await.is_empty());
    }

    #[tokio::test]
    async fn a_small_buffer_reader_gives_the_same_lines() {
        // BufReader with a 3-byte buffer: every line spans several fill_buf calls.
        let data: &[u8] = b"http://x/1\nhttp://x/22\n";
        let mut reader = tokio::io::BufReader::with_capacity(3, data);
        let mut buf = Vec::new();
        let first = read_line(&mut reader, &mut buf, 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((buf.as_slice(), first.consumed), (&b"http://x/1"[..], 11));
        read_line(&mut reader, &mut buf, 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(buf, b"http://x/22");
        assert!(at_end(&mut reader).await.unwrap());
    }

    #[test]
    fn manifest_lines_parse_per_format() {
        use ManifestFormat::*;
        assert_eq!(parse_line(b"  # c", false, Lines), Entry::Skip);
        assert_eq!(parse_line(b" ", false, Jsonl), Entry::Skip);
        let url = |u: &str| {
            Entry::Url(SeedEntry {
                url: u.into(),
                data: None,
            })
        };
        assert_eq!(parse_line(b"http://a/", false, Lines), url("http://a/"));
        assert_eq!(
            parse_line(br#"{"url":"http://a/","x":1}"#, false, Jsonl),
            url("http://a/")
        );
        assert_eq!(
            parse_line(br#""http://b/""#, false, Jsonl),
            url("http://b/")
        );
        let with_data = Entry::Url(SeedEntry {
            url: "http://c/".into(),
            data: serde_json::json!({"sku": 7}).as_object().cloned(),
        });
        for format in [Lines, Jsonl] {
            let line = br#"{"url": "http://c/", "data": {"sku": 7}}"#;
            assert_eq!(parse_line(line, false, format), with_data);
            let not_object = br#"{"url": "http://c/", "data": [1]}"#;
            assert!(matches!(
                parse_line(not_object, false, format),
                Entry::Invalid(_)
            ));
            let big = format!(
                r#"{{"url": "http://c/", "data": {{"x": "{}"}}}}"#,
                "a".repeat(trawl_domain::task::MAX_USER_DATA_BYTES)
            );
            let Entry::Invalid(reason) = parse_line(big.as_bytes(), false, format) else {
                panic!("{format:?}: data over the limit taken");
            };
            assert!(reason.contains("at most 4096"), "{reason}");
        }
        assert!(matches!(
            parse_line(br#"{"href":"x"}"#, false, Jsonl),
            Entry::Invalid(_)
        ));
        assert!(matches!(
            parse_line(b"\xff", false, Lines),
            Entry::Invalid(_)
        ));
        assert!(matches!(parse_line(b"x", true, Lines), Entry::Invalid(_)));
    }
}
