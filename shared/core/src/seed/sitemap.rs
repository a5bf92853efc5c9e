//! Sitemaps (sitemaps.org): `<urlset>` and `<sitemapindex>`, plain or gzip, and text sitemaps
//! (one URL per line). Fetched through the crawler's `Fetcher`, so robots.txt and the network
//! guard apply to them as to any page, with the protocol's 50 MB cap.

use crate::discover::ScopeMatcher;
use crate::fetch::{FetchOutcome, FetchRequest, Fetcher, Redirects};
use flate2::read::GzDecoder;
use quick_xml::events::Event;
use std::io::Read;
use trawl_domain::canonical::CanonicalUrl;
use trawl_domain::crawl::{CrawlConfig, HttpMethod, Scope};
use trawl_domain::task::Millis;

/// Largest sitemap accepted, compressed or not (the protocol's limit).
pub const MAX_SITEMAP_BYTES: u64 = 50 * 1024 * 1024;
/// Most entries read from one sitemap (the protocol's limit).
pub const MAX_SITEMAP_ENTRIES: usize = 50_000;

/// Body types a sitemap is served as.
const SITEMAP_TYPES: [&str; 8] = [
    "application/xml",
    "text/xml",
    "application/gzip",
    "application/x-gzip",
    "application/octet-stream",
    "text/plain",
    "application/rss+xml",
    "application/atom+xml",
];

/// One `<url>` of a urlset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub loc: String,
    pub lastmod: Option<String>,
}

/// A parsed sitemap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Document {
    UrlSet(Vec<Entry>),
    /// The child sitemaps' locations.
    Index(Vec<String>),
}

/// Fetches and parses the sitemap at `url` under the crawl's fetch rules. Errors are reasons.
pub(crate) async fn fetch(
    fetcher: &Fetcher,
    config: &CrawlConfig,
    url: &CanonicalUrl,
    now: Millis,
) -> Result<(Document, bool), String> {
    let mut config = config.clone();
    config.fetch.max_body_bytes = MAX_SITEMAP_BYTES;
    config.fetch.store_content_types = SITEMAP_TYPES.iter().map(|t| t.to_string()).collect();
    // Sitemaps are read with GET whatever the crawl's pages are fetched with.
    config.fetch.method = HttpMethod::Get;
    config.fetch.body = None;
    for rule in &mut config.fetch.rules {
        rule.method = None;
        rule.body = None;
    }
    // Redirects of a sitemap may leave the crawl's hosts; the guard and robots still apply.
    let scope = ScopeMatcher::new(&Scope::default()).map_err(|e| e.to_string())?;
    let outcome = fetcher
        .fetch(FetchRequest {
            url,
            crawl_id: None,
            config: &config,
            previous: None,
            scope: &scope,
            depth: 0,
            now,
            redirects: Redirects::Follow,
            content_type: None,
            image: false,
            session: None,
            request: None,
        })
        .await;
    let page = match outcome {
        FetchOutcome::Fetched(page) => page,
        FetchOutcome::NotModified(_) => return Err("unexpected 304".into()),
        FetchOutcome::Redirected { .. } => return Err("unexpected redirect".into()),
        FetchOutcome::Failed(f) => {
            return Err(format!("fetch failed ({:?}): {}", f.kind, f.message));
        }
    };
    let body = page.body.ok_or_else(|| {
        format!(
            "content type {:?} is not a sitemap",
            page.content_type.unwrap_or_default()
        )
    })?;
    let bytes = decompress(body.bytes())?;
    parse(&bytes)
}

/// A `<lastmod>` (W3C datetime: `YYYY`, `YYYY-MM`, `YYYY-MM-DD`, or a date with
/// `Thh:mm[:ss[.s]]` and a zone, `Z` or `±hh:mm`; no zone is read as UTC) in ms since the epoch.
/// None when it is not one.
pub(crate) fn lastmod_ms(text: &str) -> Option<Millis> {
    let text = text.trim();
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, Some(time)),
        None => (text, None),
    };
    let mut fields = date.split('-');
    let year = number(fields.next()?, 4, 0..=9999)?;
    let month = fields.next().map_or(Some(1), |m| number(m, 2, 1..=12))?;
    let day = fields.next().map_or(Some(1), |d| number(d, 2, 1..=31))?;
    if fields.next().is_some() {
        return None;
    }
    let mut ms = days_from_civil(year, month, day) * 86_400_000;
    if let Some(time) = time {
        let (clock, offset_min) = match time.strip_suffix(['Z', 'z']) {
            Some(clock) => (clock, 0),
            None => match time.rfind(['+', '-']) {
                Some(i) => {
                    let (clock, zone) = time.split_at(i);
                    let sign = if zone.starts_with('-') { -1 } else { 1 };
                    let (h, m) = zone[1..].split_once(':')?;
                    (
                        clock,
                        sign * (number(h, 2, 0..=23)? * 60 + number(m, 2, 0..=59)?),
                    )
                }
                None => (time, 0),
            },
        };
        let mut parts = clock.split(':');
        let hours = number(parts.next()?, 2, 0..=23)?;
        let minutes = number(parts.next()?, 2, 0..=59)?;
        let (seconds, fraction) = match parts.next() {
            Some(s) => s.split_once('.').unwrap_or((s, "")),
            None => ("00", ""),
        };
        let seconds = number(seconds, 2, 0..=60)?;
        if parts.next().is_some() || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let millis: i64 = format!("{fraction:0<3}")[..3].parse().ok()?;
        ms += ((hours * 60 + minutes - offset_min) * 60 + seconds) * 1000 + millis;
    }
    Some(ms)
}

/// A field of exactly `digits` ASCII digits within `range`.
fn number(text: &str, digits: usize, range: std::ops::RangeInclusive<i64>) -> Option<i64> {
    if text.len() != digits || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|n| range.contains(n))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Gunzips `bytes` when they start with the gzip magic (a `.gz` sitemap served as is), capped.
fn decompress(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    let mut out = Vec::new();
    GzDecoder::new(bytes)
        .take(MAX_SITEMAP_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("gzip: {e}"))?;
    if out.len() as u64 > MAX_SITEMAP_BYTES {
        return Err(format!(
            "larger than {MAX_SITEMAP_BYTES} bytes once decompressed"
        ));
    }
    Ok(std::borrow::Cow::Owned(out))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    None,
    Loc,
    Lastmod,
}

/// Parses a sitemap document. The bool says whether entries past `MAX_SITEMAP_ENTRIES` were
/// dropped.
pub(crate) fn parse(bytes: &[u8]) -> Result<(Document, bool), String> {
    let text_start = bytes
        .strip_prefix(b"\xef\xbb\xbf")
        .unwrap_or(bytes)
        .iter()
        .find(|b| !b.is_ascii_whitespace());
    if text_start.is_some_and(|&b| b != b'<') {
        return Ok(parse_text(bytes));
    }
    let mut reader = quick_xml::Reader::from_reader(bytes);
    reader.config_mut().trim_text(true);
    let mut buf = Vec::new();
    let mut index: Option<bool> = None;
    let mut entries = Vec::new();
    let mut children = Vec::new();
    let mut truncated = false;
    let mut field = Field::None;
    let mut loc = String::new();
    let mut lastmod = String::new();
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("XML error at byte {}: {e}", reader.error_position()))?;
        match event {
            Event::Start(e) => match e.local_name().as_ref() {
                b"urlset" if index.is_none() => index = Some(false),
                b"sitemapindex" if index.is_none() => index = Some(true),
                b"url" | b"sitemap" => {
                    loc.clear();
                    lastmod.clear();
                }
                b"loc" => field = Field::Loc,
                b"lastmod" => field = Field::Lastmod,
                other if index.is_none() => {
                    return Err(format!(
                        "not a sitemap (root element <{}>)",
                        String::from_utf8_lossy(other)
                    ));
                }
                _ => field = Field::None,
            },
            Event::Text(t) if field != Field::None => {
                let text = t.unescape().map_err(|e| format!("XML text: {e}"))?;
                push_field(field, &text, &mut loc, &mut lastmod);
            }
            Event::CData(c) if field != Field::None => {
                push_field(field, &String::from_utf8_lossy(&c), &mut loc, &mut lastmod);
            }
            Event::End(e) => match e.local_name().as_ref() {
                b"loc" | b"lastmod" => field = Field::None,
                b"url" | b"sitemap" if !loc.trim().is_empty() => {
                    if entries.len() + children.len() >= MAX_SITEMAP_ENTRIES {
                        truncated = true;
                        break;
                    }
                    let loc = loc.trim().to_owned();
                    if index == Some(true) {
                        children.push(loc);
                    } else {
                        let lastmod = Some(lastmod.trim().to_owned()).filter(|l| !l.is_empty());
                        entries.push(Entry { loc, lastmod });
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    match index {
        Some(true) => Ok((Document::Index(children), truncated)),
        Some(false) => Ok((Document::UrlSet(entries), truncated)),
        None => Err("not a sitemap (no <urlset> or <sitemapindex>)".into()),
    }
}

fn push_field(field: Field, text: &str, loc: &mut String, lastmod: &mut String) {
    match field {
        Field::Loc => loc.push_str(text),
        Field::Lastmod => lastmod.push_str(text),
        Field::None => {}
    }
}

/// A text sitemap: one URL per line.
fn parse_text(bytes: &[u8]) -> (Document, bool) {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let entries: Vec<Entry> = lines
        .by_ref()
        .take(MAX_SITEMAP_ENTRIES)
        .map(|l| Entry {
            loc: l.trim_start_matches('\u{feff}').to_owned(),
            lastmod: None,
        })
        .collect();
    let truncated = lines.next().is_some();
    (Document::UrlSet(entries), truncated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const URLSET: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>http://example.com/a?x=1&amp;y=2</loc><lastmod>2024-05-01</lastmod></url>
  <url><loc><![CDATA[http://example.com/b]]></loc></url>
  <url><priority>0.5</priority></url>
</urlset>"#;

    #[test]
    fn a_urlset_gives_its_locations_and_lastmods() {
        let (doc, truncated) = parse(URLSET.as_bytes()).unwrap();
        assert!(!truncated);
        assert_eq!(
            doc,
            Document::UrlSet(vec![
                Entry {
                    loc: "http://example.com/a?x=1&y=2".into(),
                    lastmod: Some("2024-05-01".into()),
                },
                Entry {
                    loc: "http://example.com/b".into(),
                    lastmod: None,
                },
            ])
        );
    }

    #[test]
    fn an_index_gives_its_children_and_gzip_is_detected_by_magic() {
        let index = r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
          <sitemap><loc>http://example.com/s1.xml.gz</loc><lastmod>2024-01-01</lastmod></sitemap>
          <sitemap><loc> http://example.com/s2.xml </loc></sitemap></sitemapindex>"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(index.as_bytes()).unwrap();
        let compressed = gz.finish().unwrap();
        let (doc, _) = parse(&decompress(&compressed).unwrap()).unwrap();
        assert_eq!(
            doc,
            Document::Index(vec![
                "http://example.com/s1.xml.gz".into(),
                "http://example.com/s2.xml".into()
            ])
        );
    }

    #[test]
    fn lastmods_are_read_in_every_w3c_precision_and_zone() {
        let may_first = 1_714_521_600_000; // 2024-05-01T00:00:00Z
        assert_eq!(lastmod_ms("2024-05-01"), Some(may_first));
        assert_eq!(lastmod_ms(" 2024-05 "), Some(may_first));
        assert_eq!(lastmod_ms("2024-04"), Some(may_first - 30 * 86_400_000));
        assert_eq!(lastmod_ms("1970"), Some(0));
        assert_eq!(
            lastmod_ms("2024-05-01T12:30Z"),
            Some(may_first + 45_000_000)
        );
        assert_eq!(
            lastmod_ms("2024-05-01T12:30:15.5+02:00"),
            Some(may_first + 37_800_000 + 15_500)
        );
        assert_eq!(
            lastmod_ms("2024-05-01T00:00:00-00:30"),
            Some(may_first + 1_800_000)
        );
        assert_eq!(
            lastmod_ms("2024-05-01 12:30:00"),
            Some(may_first + 45_000_000)
        );
        assert_eq!(lastmod_ms("2000-03-01"), Some(951_868_800_000));
        for junk in [
            "",
            "yesterday",
            "2024-13-01",
            "2024-05-32",
            "24-05-01",
            "2024-05-01T25:00Z",
            "2024-05-01T12Z",
            "2024-05-01T12:30+2",
            "2024-05-01-01",
            "2024-05-01T12:30:00.x1Z",
        ] {
            assert_eq!(lastmod_ms(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn text_sitemaps_and_junk() {
        let (doc, _) = parse(b"http://example.com/1\n\n http://example.com/2 \n").unwrap();
        assert!(matches!(doc, Document::UrlSet(ref e) if e.len() == 2));
        assert!(
            parse(b"<html><body>hi</body></html>")
                .unwrap_err()
                .contains("root element <html>")
        );
        assert!(parse(b"<urlset><url><loc>x</loc></urlset>").is_err());
        assert!(decompress(&[0x1f, 0x8b, 0, 1, 2]).is_err());
    }
}
