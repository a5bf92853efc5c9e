//! The continuation cursor: where an unfinished seed stopped, tied to the request it belongs to.
//!
//! Opaque to callers (base64 of a small JSON object). It names the position right after the last
//! URL handed to the frontier, so the follow-up invocation neither repeats nor skips one.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Where a source stands. Per source:
/// - `urls`: `item` = index of the next URL;
/// - `s3`: `offset` = byte offset of the next unread line;
/// - `sitemaps`: `item` = sitemap, `inner` = child of a sitemap index, `offset` = entries done;
/// - `pagination`: `item` = template, `offset` = pages done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Position {
    #[serde(default)]
    pub item: u64,
    #[serde(default)]
    pub inner: u64,
    #[serde(default)]
    pub offset: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Encoded {
    /// The request's fingerprint: a cursor only continues the request that issued it.
    fp: String,
    pos: Position,
    /// The S3 manifest's ETag: offsets are meaningless in a changed object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    /// Sitemaps found in the seed hosts' robots.txt, being seeded once the source was done:
    /// `pos` is then a position among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    robots: Option<Vec<String>>,
}

/// A decoded cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub position: Position,
    pub etag: Option<String>,
    pub robots: Option<Vec<String>>,
}

impl Cursor {
    pub fn encode(&self, fingerprint: &str) -> String {
        let encoded = Encoded {
            fp: fingerprint.to_owned(),
            pos: self.position,
            etag: self.etag.clone(),
            robots: self.robots.clone(),
        };
        // Serialising a struct of strings and integers cannot fail.
        let json = serde_json::to_vec(&encoded).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Decodes `raw`, checking that it was issued for the request with `fingerprint`.
    pub fn decode(raw: &str, fingerprint: &str) -> Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(raw.trim())
            .map_err(|_| "cursor is not one trawl issued".to_owned())?;
        let encoded: Encoded = serde_json::from_slice(&bytes)
            .map_err(|_| "cursor is not one trawl issued".to_owned())?;
        if encoded.fp != fingerprint {
            return Err("cursor belongs to a different seed request".to_owned());
        }
        Ok(Self {
            position: encoded.pos,
            etag: encoded.etag,
            robots: encoded.robots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_only_for_its_own_request() {
        let cursor = Cursor {
            position: Position {
                item: 2,
                inner: 1,
                offset: 500,
            },
            etag: Some("\"abc\"".into()),
            robots: Some(vec!["http://example.com/sitemap.xml".into()]),
        };
        let raw = cursor.encode("fp1");
        assert_eq!(Cursor::decode(&raw, "fp1").unwrap(), cursor);
        assert!(
            Cursor::decode(&raw, "fp2")
                .unwrap_err()
                .contains("different")
        );
        assert!(Cursor::decode("not base64!", "fp1").is_err());
        assert!(Cursor::decode(&URL_SAFE_NO_PAD.encode("{}"), "fp1").is_err());
    }
}
