//! WARC/1.1 records (ISO 28500), as Heritrix and Common Crawl write them: a `warcinfo` record,
//! then a `request` and a `response` record per page, linked by `WARC-Concurrent-To`, with sha1
//! base32 digests. The HTTP messages are rebuilt from the fetch record (trawl keeps the status,
//! content type, validators and body, not the raw exchange). The request shows what was sent:
//! the crawl's User-Agent and Accept, and the method and headers the fetch record kept
//! (`FetchRecord::sent`: custom headers, Accept-Language, cookies' names, conditional headers,
//! credentials as `[redacted]`); a credential's value is never kept, so never written.
//!
//! A segment (`crate::blob::segment`) keeps each page as a `response` record standing alone; the
//! deliverer's files (feature `deliver`) add the `warcinfo` and `request` records (a segment
//! page's request names no `WARC-Concurrent-To`: its response record's id stays in the segment).

#[cfg(feature = "deliver")]
use sha1::{Digest, Sha1};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};
use trawl_domain::task::Millis;
#[cfg(feature = "deliver")]
use trawl_domain::task::{ACCEPT, Sent};

/// Compression of WARC records: zlib's fastest level. The records carry nearly all of a
/// delivery's bytes, and at the default level (6) compressing them was most of the delivery's
/// CPU; on the fixture pages level 1 makes files a little larger for a fraction of the time
/// (bench/README.md, the profile of `trawl crawl`).
#[cfg(feature = "deliver")]
pub(crate) const LEVEL: flate2::Compression = flate2::Compression::fast();

/// The end of every record: its block is followed by two CRLFs.
pub(crate) const RECORD_END: &[u8] = b"\r\n\r\n";

/// A fresh `<urn:uuid:…>` record id (UUID version 4).
pub(crate) fn record_id() -> String {
    let mut b = [0u8; 16];
    fastrand::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40; // version 4
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    let h = hex::encode(b);
    format!(
        "<urn:uuid:{}-{}-{}-{}-{}>",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// RFC 3339 UTC with seconds, the form WARC-Date uses.
pub(crate) fn rfc3339(at: Millis) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// RFC 3339 UTC with milliseconds: times that are compared, not only shown.
#[cfg(feature = "deliver")]
pub(crate) fn rfc3339_millis(at: Millis) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0));
    humantime::format_rfc3339_millis(at).to_string()
}

/// `sha1:` and the RFC 4648 base32 of the sha1 (the WARC digest convention).
#[cfg(feature = "deliver")]
fn sha1_label(digest: &[u8]) -> String {
    base32_label("sha1", digest)
}

/// `{algorithm}:` and the RFC 4648 base32 of `digest`, padded (a sha1 needs no padding).
fn base32_label(algorithm: &str, digest: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = format!("{algorithm}:");
    let (mut buffer, mut bits) = (0u32, 0u32);
    for &byte in digest {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    while !(out.len() - algorithm.len() - 1).is_multiple_of(8) {
        out.push('=');
    }
    out
}

/// A header value with control characters replaced, so no value can start a new header line.
fn field(value: &str) -> String {
    value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        206 => "Partial Content",
        _ => "",
    }
}

/// Header of one record, up to and including the blank line before its block.
fn header(fields: &[(&str, &str)], content_type: &str, length: usize) -> String {
    let mut out = String::from("WARC/1.1\r\n");
    for (name, value) in fields {
        let _ = write!(out, "{name}: {}\r\n", field(value));
    }
    let _ = write!(
        out,
        "Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    );
    out
}

/// The `warcinfo` record that opens the file (header, block and end).
#[cfg(feature = "deliver")]
pub(crate) fn warcinfo(id: &str, date: Millis, filename: &str, info: &[(&str, &str)]) -> Vec<u8> {
    let mut block = String::new();
    for (name, value) in info {
        let _ = write!(block, "{name}: {}\r\n", field(value));
    }
    let date = rfc3339(date);
    let mut record = header(
        &[
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", id),
            ("WARC-Date", &date),
            ("WARC-Filename", filename),
        ],
        "application/warc-fields",
        block.len(),
    )
    .into_bytes();
    record.extend_from_slice(block.as_bytes());
    record.extend_from_slice(RECORD_END);
    record
}

/// One fetched page, as the WARC records describe it.
#[cfg(feature = "deliver")]
pub(crate) struct Exchange<'a> {
    /// The URL that answered (after redirects).
    pub target_uri: &'a str,
    pub fetched_at: Millis,
    pub http_status: u16,
    pub content_type: Option<&'a str>,
    pub etag: Option<&'a str>,
    pub last_modified: Option<&'a str>,
    pub user_agent: &'a str,
    pub sent: Option<&'a Sent>,
    pub warcinfo_id: &'a str,
    pub request_id: &'a str,
    pub response_id: &'a str,
}

/// A page's request, as its `request` record shows it.
#[cfg(feature = "deliver")]
pub(crate) struct Request<'a> {
    pub target_uri: &'a str,
    pub fetched_at: Millis,
    pub user_agent: &'a str,
    pub sent: Option<&'a Sent>,
    pub warcinfo_id: &'a str,
    pub id: &'a str,
    /// The response record it goes with, when its id is known.
    pub response_id: Option<&'a str>,
}

#[cfg(feature = "deliver")]
impl Request<'_> {
    /// The whole `request` record: the request as trawl sent it.
    pub(crate) fn record(&self) -> Vec<u8> {
        let (target, host) = match url::Url::parse(self.target_uri) {
            Ok(url) => {
                let mut target = url.path().to_owned();
                if let Some(query) = url.query() {
                    target.push('?');
                    target.push_str(query);
                }
                let host = match (url.host_str(), url.port()) {
                    (Some(host), Some(port)) => format!("{host}:{port}"),
                    (Some(host), None) => host.to_owned(),
                    (None, _) => String::new(),
                };
                (target, host)
            }
            Err(_) => (self.target_uri.to_owned(), String::new()),
        };
        let method = self.sent.and_then(|s| s.method.as_deref()).unwrap_or("GET");
        let mut block = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: {ACCEPT}\r\n",
            field(method),
            field(&target),
            field(&host),
            field(self.user_agent)
        );
        for (name, value) in self.sent.map(|s| s.headers.as_slice()).unwrap_or_default() {
            let _ = write!(block, "{}: {}\r\n", field(name), field(value));
        }
        block.push_str("\r\n");
        let date = rfc3339(self.fetched_at);
        let digest = sha1_label(&Sha1::digest(block.as_bytes()));
        let mut fields = vec![
            ("WARC-Type", "request"),
            ("WARC-Record-ID", self.id),
            ("WARC-Date", &date),
            ("WARC-Target-URI", self.target_uri),
            ("WARC-Warcinfo-ID", self.warcinfo_id),
        ];
        if let Some(response_id) = self.response_id {
            fields.push(("WARC-Concurrent-To", response_id));
        }
        fields.push(("WARC-Block-Digest", &digest));
        let mut record =
            header(&fields, "application/http; msgtype=request", block.len()).into_bytes();
        record.extend_from_slice(block.as_bytes());
        record.extend_from_slice(RECORD_END);
        record
    }
}

#[cfg(feature = "deliver")]
impl Exchange<'_> {
    /// The whole `request` record, linked to the response record.
    pub(crate) fn request_record(&self) -> Vec<u8> {
        Request {
            target_uri: self.target_uri,
            fetched_at: self.fetched_at,
            user_agent: self.user_agent,
            sent: self.sent,
            warcinfo_id: self.warcinfo_id,
            id: self.request_id,
            response_id: Some(self.response_id),
        }
        .record()
    }

    /// The `response` record up to the payload: WARC header and HTTP header. The caller writes
    /// `body` and then `RECORD_END`.
    pub(crate) fn response_head(&self, body: &[u8]) -> Vec<u8> {
        let http = http_head(
            self.http_status,
            self.content_type,
            body.len(),
            self.etag,
            self.last_modified,
        );
        let payload_digest = sha1_label(&Sha1::digest(body));
        let mut block = Sha1::new();
        block.update(http.as_bytes());
        block.update(body);
        let block_digest = sha1_label(&block.finalize());
        let date = rfc3339(self.fetched_at);
        let mut head = header(
            &[
                ("WARC-Type", "response"),
                ("WARC-Record-ID", self.response_id),
                ("WARC-Date", &date),
                ("WARC-Target-URI", self.target_uri),
                ("WARC-Warcinfo-ID", self.warcinfo_id),
                ("WARC-Concurrent-To", self.request_id),
                ("WARC-Block-Digest", &block_digest),
                ("WARC-Payload-Digest", &payload_digest),
            ],
            "application/http; msgtype=response",
            http.len() + body.len(),
        )
        .into_bytes();
        head.extend_from_slice(http.as_bytes());
        head
    }
}

/// The HTTP response header a record shows for a stored body. A 304 kept the previously
/// stored content: the record shows that content as a 200, the way a reader of the archive
/// needs it (the manifest keeps the real status).
fn http_head(
    status: u16,
    content_type: Option<&str>,
    length: usize,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> String {
    let status = if status == 304 { 200 } else { status };
    let mut http = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if let Some(content_type) = content_type {
        let _ = write!(http, "Content-Type: {}\r\n", field(content_type));
    }
    let _ = write!(http, "Content-Length: {length}\r\n");
    if let Some(etag) = etag {
        let _ = write!(http, "ETag: {}\r\n", field(etag));
    }
    if let Some(last_modified) = last_modified {
        let _ = write!(http, "Last-Modified: {}\r\n", field(last_modified));
    }
    http.push_str("\r\n");
    http
}

/// A page as a segment keeps it (`crate::blob::segment`): a `response` record standing alone
/// (no warcinfo, no request), its payload digest the md5 trawl already has (no hashing here).
pub(crate) struct StoredPage<'a> {
    pub target_uri: &'a str,
    pub fetched_at: Millis,
    pub http_status: u16,
    pub content_type: Option<&'a str>,
    pub md5: [u8; 16],
}

impl StoredPage<'_> {
    /// The `response` record up to the payload, with its record id; the caller writes `body`
    /// and `RECORD_END`.
    pub(crate) fn response_head(&self, id: &str, body_len: usize) -> Vec<u8> {
        let http = http_head(self.http_status, self.content_type, body_len, None, None);
        let date = rfc3339(self.fetched_at);
        let digest = base32_label("md5", &self.md5);
        let mut head = header(
            &[
                ("WARC-Type", "response"),
                ("WARC-Record-ID", id),
                ("WARC-Date", &date),
                ("WARC-Target-URI", self.target_uri),
                ("WARC-Payload-Digest", &digest),
            ],
            "application/http; msgtype=response",
            http.len() + body_len,
        )
        .into_bytes();
        head.extend_from_slice(http.as_bytes());
        head
    }

    /// The whole `metadata` record of the items extracted from the page (JSON), referring to
    /// its response record `refers_to`.
    pub(crate) fn items_record(&self, refers_to: &str, items: &[u8]) -> Vec<u8> {
        let date = rfc3339(self.fetched_at);
        let mut record = header(
            &[
                ("WARC-Type", "metadata"),
                ("WARC-Record-ID", &record_id()),
                ("WARC-Date", &date),
                ("WARC-Target-URI", self.target_uri),
                ("WARC-Refers-To", refers_to),
            ],
            "application/json",
            items.len(),
        )
        .into_bytes();
        record.extend_from_slice(items);
        record.extend_from_slice(RECORD_END);
        record
    }
}

/// One record read back: its type and its block.
pub(crate) struct Record<'a> {
    pub kind: &'a str,
    pub block: &'a [u8],
}

/// The records of `data` (uncompressed WARC), in order; an error names what is wrong.
pub(crate) fn records(mut data: &[u8]) -> Result<Vec<Record<'_>>, String> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let end = find(data, b"\r\n\r\n").ok_or("a record header without its end")?;
        let head = std::str::from_utf8(&data[..end]).map_err(|_| "a record header not UTF-8")?;
        let mut lines = head.split("\r\n");
        if !lines.next().is_some_and(|v| v.starts_with("WARC/")) {
            return Err("not a WARC record".to_owned());
        }
        let (mut kind, mut length) = ("", None);
        for line in lines {
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("WARC-Type") {
                    kind = value.trim();
                } else if name.eq_ignore_ascii_case("Content-Length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let length = length.ok_or("a record without its Content-Length")?;
        let rest = &data[end + 4..];
        let block = rest.get(..length).ok_or("a record cut short")?;
        let after = &rest[length..];
        data = after
            .strip_prefix(RECORD_END)
            .ok_or("a record without its end")?;
        out.push(Record { kind, block });
    }
    Ok(out)
}

/// The payload of a `response` record's block: what follows its HTTP header.
pub(crate) fn http_payload(block: &[u8]) -> Result<&[u8], String> {
    find(block, b"\r\n\r\n")
        .map(|end| &block[end + 4..])
        .ok_or_else(|| "a response without its HTTP header's end".to_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "deliver")]
    fn digests_use_sha1_base32() {
        // The sha1 of "" in base32, as wget and warcio write it.
        assert_eq!(
            sha1_label(&Sha1::digest(b"")),
            "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
        );
    }

    #[test]
    fn record_ids_are_unique_v4_uuids() {
        let (a, b) = (record_id(), record_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), "<urn:uuid:>".len() + 36);
        assert_eq!(&a[24..25], "4", "{a}");
        assert!("89ab".contains(&a[29..30]), "{a}");
    }

    #[test]
    #[cfg(feature = "deliver")]
    fn a_response_record_declares_its_exact_length() {
        let exchange = Exchange {
            target_uri: "http://example.com:8080/a?b=c",
            fetched_at: 1_800_000_000_000,
            http_status: 200,
            content_type: Some("text/html\r\nX-Injected: 1"),
            etag: None,
            last_modified: None,
            user_agent: "trawl",
            sent: Some(&Sent {
                method: Some("POST".into()),
                headers: vec![
                    ("x-client".into(), "a\r\nX-Injected: 2".into()),
                    ("authorization".into(), "[redacted]".into()),
                ],
            }),
            warcinfo_id: "<urn:uuid:i>",
            request_id: "<urn:uuid:q>",
            response_id: "<urn:uuid:r>",
        };
        let body = b"<html>hi</html>";
        let head = String::from_utf8(exchange.response_head(body)).unwrap();
        let (warc, http) = head.split_once("\r\n\r\n").unwrap();
        let length: usize = warc
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, http.len() + body.len());
        assert!(warc.contains("WARC-Date: 2027-01-15T08:00:00Z"), "{warc}");
        assert!(http.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/html  X-Injected: 1\r\n"));
        let request = String::from_utf8(exchange.request_record()).unwrap();
        assert!(request.contains("POST /a?b=c HTTP/1.1\r\nHost: example.com:8080\r\n"));
        assert!(request.contains(&format!("User-Agent: trawl\r\nAccept: {ACCEPT}\r\n")));
        assert!(
            request.contains("x-client: a  X-Injected: 2\r\nauthorization: [redacted]\r\n\r\n")
        );
        assert!(request.contains("WARC-Concurrent-To: <urn:uuid:r>"));
    }
}
