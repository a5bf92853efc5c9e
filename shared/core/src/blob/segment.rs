//! The segment layout (`storage.layout = segments`): page bodies appended to segment files
//! instead of one object each.
//!
//! A page is a `response` record (WARC/1.1, its HTTP header rebuilt from the fetch record, its
//! payload digest the body's md5) in a gzip member of its own, followed, when an extractor took
//! items out of it, by a `metadata` record holding them (JSON) in a second member, stored
//! uncompressed (`gz::stored_member`: a KB or two, cheaper to copy than to compress). Its fetch
//! record names the segment (`object_key`) and the members' place in it (`span`): the span is
//! valid WARC by itself, so a delivery can copy it as it is and a reader can fetch one page
//! with one ranged read, like Common Crawl's (file, offset, length).
//!
//! The rule that keeps pointers whole: the span is appended and made durable
//! (`BlobStore::append` returns once it is) before the fenced finish that records it. A crash
//! between the two, a failed append or a rejected finish leaves bytes nothing points at —
//! garbage in its segment, never a task pointing at nothing. An unchanged page (same md5) is
//! not appended again: its new record keeps the old span.

use super::{BlobError, BlobResult, BlobStore, Body};
use crate::warc::{self, StoredPage};
use bytes::Bytes;
use flate2::read::MultiGzDecoder;
use std::io::Read;
use trawl_domain::task::FetchRecord;

/// A page to append.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The URL that answered (after redirects).
    pub target_uri: &'a str,
    pub fetched_at: trawl_domain::task::Millis,
    pub http_status: u16,
    pub content_type: Option<&'a str>,
    pub body: &'a Body,
    /// The items extracted from the body (JSON).
    pub items: Option<&'a [u8]>,
}

/// A page's gzip members, ready to append.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub records: Bytes,
    /// The length of the last member, the items' (0: none).
    pub items: u64,
}

/// The gzip members of `page`: its response record, then its items' metadata record.
pub fn encode(page: &Page<'_>) -> BlobResult<Encoded> {
    let stored = StoredPage {
        target_uri: page.target_uri,
        fetched_at: page.fetched_at,
        http_status: page.http_status,
        content_type: page.content_type,
        md5: page.body.md5(),
    };
    let body = page.body.bytes();
    let id = warc::record_id();
    let head = stored.response_head(&id, body.len());
    let failed = |e: std::io::Error| {
        BlobError::backend("encode", page.target_uri, format!("gzip: {e}")).caused_by(e)
    };
    // Room for the record at deflate's worst, so that the buffer never grows while it is
    // written; what is left over is given back before the records wait for their append.
    let mut out = Vec::with_capacity(head.len() + body.len() + body.len() / 8 + 1024);
    crate::gz::fast_member(&[&head, body, warc::RECORD_END], &mut out).map_err(failed)?;
    let response = out.len();
    if let Some(items) = page.items {
        crate::gz::stored_member(&stored.items_record(&id, items), &mut out);
    }
    out.shrink_to_fit();
    Ok(Encoded {
        items: (out.len() - response) as u64,
        records: Bytes::from(out),
    })
}

/// A page read back from its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub body: Bytes,
    pub items: Option<Bytes>,
}

/// The page in `stored` (a span read from the segment at `key`).
pub fn decode(key: &str, stored: &[u8]) -> BlobResult<Decoded> {
    let corrupt = |message: String| BlobError::backend("decode", key, message);
    let mut data = Vec::with_capacity(stored.len() * 4);
    MultiGzDecoder::new(stored)
        .read_to_end(&mut data)
        .map_err(|e| corrupt(format!("span not gzip: {e}")).caused_by(e))?;
    let records = warc::records(&data).map_err(corrupt)?;
    let mut body = None;
    let mut items = None;
    for record in records {
        match record.kind {
            "response" if body.is_none() => {
                let payload = warc::http_payload(record.block).map_err(corrupt)?;
                body = Some(Bytes::copy_from_slice(payload));
            }
            "metadata" if items.is_none() => items = Some(Bytes::copy_from_slice(record.block)),
            other => return Err(corrupt(format!("unexpected {other:?} record in a span"))),
        }
    }
    let body = body.ok_or_else(|| corrupt("a span without its response record".to_owned()))?;
    Ok(Decoded { body, items })
}

/// The items in `stored`, the member of a span that holds its `metadata` record alone (the
/// span's last `Span::items` bytes).
pub fn decode_items(key: &str, stored: &[u8]) -> BlobResult<Bytes> {
    let corrupt = |message: String| BlobError::backend("decode", key, message);
    let mut data = Vec::with_capacity(stored.len() * 4);
    MultiGzDecoder::new(stored)
        .read_to_end(&mut data)
        .map_err(|e| corrupt(format!("items member not gzip: {e}")).caused_by(e))?;
    match warc::records(&data).map_err(corrupt)?.as_slice() {
        [record] if record.kind == "metadata" => Ok(Bytes::copy_from_slice(record.block)),
        _ => Err(corrupt(
            "not one metadata record where the items are".to_owned(),
        )),
    }
}

/// The stored page a fetch record points at, in either layout: None when it points at
/// nothing or its bytes are missing. Items come with a page of a segment only (the object
/// layout keeps them in an object of their own).
pub async fn read_page<B: BlobStore>(
    blobs: &B,
    fetch: &FetchRecord,
) -> BlobResult<Option<Decoded>> {
    let Some(key) = fetch.object_key.as_deref() else {
        return Ok(None);
    };
    match fetch.span {
        Some(span) => match blobs.get_range(key, span.offset, span.length).await? {
            Some(stored) => decode(key, &stored).map(Some),
            None => Ok(None),
        },
        None => Ok(blobs
            .get(key)
            .await?
            .map(|body| Decoded { body, items: None })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page<'a>(body: &'a Body, items: Option<&'a [u8]>) -> Page<'a> {
        Page {
            target_uri: "http://example.com/a",
            fetched_at: 1_800_000_000_000,
            http_status: 200,
            content_type: Some("text/html"),
            body,
            items,
        }
    }

    #[test]
    fn a_page_and_its_items_read_back_from_their_members() {
        // GIVEN two pages encoded one after the other, the second with items
        let a = Body::new(&b"<html>a\r\n\r\nstill a</html>"[..]);
        let b = Body::new(&b"<html>b</html>"[..]);
        let first = encode(&page(&a, None)).unwrap().records;
        let encoded = encode(&page(&b, Some(br#"{"items":[]}"#))).unwrap();
        let second = encoded.records.clone();
        let segment = [first.clone(), second.clone()].concat();

        // WHEN each span is decoded alone
        let span_a = &segment[..first.len()];
        let span_b = &segment[first.len()..];

        // THEN each gives back its body (a blank line in it included) and items
        let decoded_a = decode("k", span_a).unwrap();
        let decoded_b = decode("k", span_b).unwrap();
        assert_eq!(decoded_a.body, a.bytes());
        assert_eq!(decoded_a.items, None);
        assert_eq!(decoded_b.body, b.bytes());
        assert_eq!(decoded_b.items.as_deref(), Some(&br#"{"items":[]}"#[..]));
        // AND a span cut short is an error, not a page
        assert!(decode("k", &span_b[..span_b.len() - 9]).is_err());
        assert!(decode("k", b"not gzip").is_err());
        // AND the response alone is its span without the items' member
        let cut = span_b.len() - encoded.items as usize;
        assert_eq!(decode("k", &span_b[..cut]).unwrap().items, None);
        // AND the items' member alone gives the items, and a response is not items
        assert_eq!(
            decode_items("k", &span_b[cut..]).unwrap(),
            &br#"{"items":[]}"#[..]
        );
        assert!(decode_items("k", &span_b[..cut]).is_err());
        assert!(decode_items("k", span_a).is_err());
    }

    #[test]
    fn the_response_record_names_the_page_and_its_md5() {
        let body = Body::new(&b"<p>x</p>"[..]);
        let mut text = String::new();
        MultiGzDecoder::new(&encode(&page(&body, None)).unwrap().records[..])
            .read_to_string(&mut text)
            .unwrap();
        assert!(
            text.starts_with("WARC/1.1\r\nWARC-Type: response\r\n"),
            "{text}"
        );
        assert!(text.contains("WARC-Target-URI: http://example.com/a\r\n"));
        assert!(text.contains("WARC-Payload-Digest: md5:"));
        assert!(text.contains("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 8\r\n\r\n<p>x</p>\r\n\r\n"));
    }
}
