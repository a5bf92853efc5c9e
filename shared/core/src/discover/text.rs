//! The main text of a page or file (`analysis.text`, Docido's `_analysis` `text`).
//!
//! An HTML page's text is what readability.js's algorithm keeps of it (dom_smoothie, on an
//! html5ever tree of its own): the article, without navigation, header, footer, asides or
//! scripts. A PDF's text is read by lopdf, page after page until the analysis has its fill; a
//! Word document's (OOXML `.docx`) from its `word/document.xml`, its runs' text in order.
//! Both are bounded before they run (elements parsed, pages read, bytes decompressed), and
//! both return errors on bad input: a release build aborts on a panic, so a crate that panics
//! on malformed files (pdf-extract does, by design) is not one the crawler can call.

use dom_smoothie::{Config, Readability, ReadabilityError, TextMode};
use lopdf::{DecompressError, Document, LoadOptions};
use trawl_domain::crawl::Analysis;
use trawl_domain::task::{PageAnalysis, TextError};

/// Elements of an HTML page parsed for its text at most. A long documentation page has a
/// few thousand; a page past this one is skipped as too large (its parse would cost tens of
/// milliseconds for a text cut to 4 KB anyway).
const HTML_ELEMENTS: usize = 30_000;
/// Elements nested deeper than this are not read: browsers' parsers stop nesting at 512
/// levels, and readability's walks recurse and grow faster than the depth (a page of 29,000
/// nested `div`s overflowed a 2 MB stack after a minute of CPU).
const HTML_DEPTH: usize = 512;
/// Elements that never hold others (void), or whose end is implied by the next of their kind:
/// left out of the depth, so that unclosed `<li>`s and `<p>`s do not count as nesting.
const NOT_NESTING: [&str; 28] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param", "keygen", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "rb",
    "rt", "rp", "colgroup",
];
/// Pages of a PDF read at most, and the bytes any one stream may decompress to (a small
/// compressed stream can inflate to gigabytes).
const PDF_PAGES: u32 = 200;
const PDF_DECOMPRESSED: usize = 32 * 1024 * 1024;
/// Bytes a Word document's `word/document.xml` may inflate to: a few KB of zip can inflate to
/// gigabytes.
const DOCX_XML_BYTES: u64 = 32 * 1024 * 1024;

/// The readable main text of `html`, one line per block; None when the page has none (a
/// page without an article-like block: readability.js finds nothing either).
pub fn html_text(html: &[u8]) -> Result<Option<String>, TextError> {
    let config = Config {
        max_elements_to_parse: HTML_ELEMENTS,
        // No JSON-LD metadata: only the text is kept.
        disable_json_ld: true,
        text_mode: TextMode::Formatted,
        ..Config::default()
    };
    if nesting_depth(html) > HTML_DEPTH {
        return Err(TextError::TooLarge);
    }
    let html = String::from_utf8_lossy(html);
    let parsed = Readability::new(html.as_ref(), None, Some(config))
        .and_then(|mut readability| readability.parse());
    match parsed {
        Ok(article) => Ok(Some(article.text_content.to_string())),
        Err(ReadabilityError::GrabFailed) => Ok(None),
        Err(ReadabilityError::TooManyElements(..)) => Err(TextError::TooLarge),
        // Only for a relative document URL, which is never given.
        Err(ReadabilityError::BadDocumentURL) => Err(TextError::Malformed),
    }
}

/// The deepest nesting of elements in `html`, from its tags as written (a scan, not a parse):
/// start tags of elements that hold others open a level, end tags close one. Tags in comments
/// or scripts count too, so it errs deep.
fn nesting_depth(html: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = html;
    while let Some(at) = rest.iter().position(|&b| b == b'<') {
        rest = &rest[at + 1..];
        let closing = rest.first() == Some(&b'/');
        let name_at = usize::from(closing);
        let name_len = rest[name_at..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        let name = &rest[name_at..name_at + name_len];
        let nests = name.first().is_some_and(u8::is_ascii_alphabetic)
            && !NOT_NESTING
                .iter()
                .any(|n| n.as_bytes().eq_ignore_ascii_case(name));
        if !nests {
            continue;
        }
        if closing {
            depth = depth.saturating_sub(1);
        } else {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// The text of the PDF `pdf`, its pages in order, read until there is more than the analysis
/// keeps.
pub fn pdf_text(pdf: &[u8]) -> Result<String, TextError> {
    let options = LoadOptions {
        max_decompressed_size: Some(PDF_DECOMPRESSED),
        ..LoadOptions::default()
    };
    let document = Document::load_mem_with_options(pdf, options).map_err(pdf_error)?;
    let mut text = String::new();
    for &number in document.get_pages().keys().take(PDF_PAGES as usize) {
        let page = document
            .extract_text_with_limit(&[number], PDF_DECOMPRESSED)
            .map_err(pdf_error)?;
        text.push_str(&page);
        text.push('\n');
        if text.len() > PageAnalysis::TEXT_BYTES {
            break;
        }
    }
    Ok(text)
}

/// The text of the Word document `docx`: each paragraph's runs on a line, read until there is
/// more than the analysis keeps.
pub fn docx_text(docx: &[u8]) -> Result<String, TextError> {
    use quick_xml::events::Event;
    use std::io::Read;
    use zip::result::ZipError;
    let zip_error = |error: ZipError| match error {
        ZipError::UnsupportedArchive(ZipError::PASSWORD_REQUIRED) | ZipError::InvalidPassword => {
            TextError::Encrypted
        }
        _ => TextError::Malformed,
    };
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(docx)).map_err(zip_error)?;
    let document = archive.by_name("word/document.xml").map_err(zip_error)?;
    let mut xml = Vec::new();
    document
        .take(DOCX_XML_BYTES + 1)
        .read_to_end(&mut xml)
        .map_err(|_| TextError::Malformed)?;
    if xml.len() as u64 > DOCX_XML_BYTES {
        return Err(TextError::TooLarge);
    }
    let mut reader = quick_xml::Reader::from_reader(xml.as_slice());
    let (mut text, mut in_run_text, mut buf) = (String::new(), false, Vec::new());
    // Bounded: each event consumes input, and the loop ends at its end or at the text's fill.
    while text.len() <= PageAnalysis::TEXT_BYTES {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) if e.local_name().as_ref() == b"t" => in_run_text = true,
            Ok(Event::End(e)) => match e.local_name().as_ref() {
                b"t" => in_run_text = false,
                b"p" => text.push('\n'),
                _ => {}
            },
            Ok(Event::Empty(e)) if e.local_name().as_ref() == b"tab" => text.push('\t'),
            Ok(Event::Text(t)) if in_run_text => {
                text.push_str(&t.unescape().map_err(|_| TextError::Malformed)?);
            }
            Ok(Event::Eof) => break,
            Err(_) => return Err(TextError::Malformed),
            Ok(_) => {}
        }
        buf.clear();
    }
    Ok(text)
}

fn pdf_error(error: lopdf::Error) -> TextError {
    use lopdf::Error as E;
    match error {
        E::Decryption(_) | E::InvalidPassword | E::UnsupportedSecurityHandler(_) => {
            TextError::Encrypted
        }
        E::Decompress(DecompressError::MemoryLimitExceeded { .. })
        | E::ReferenceLimit
        | E::RecursionLimit => TextError::TooLarge,
        _ => TextError::Malformed,
    }
}

/// What the crawl's `wanted` analysis reads from a body of type `content_type`: an HTML
/// page's title, description and language (`page`) and its main text (`text`), a PDF's or a
/// Word document's text (`text`); None for any other body, or when nothing is wanted of it.
pub fn analyse_body(
    wanted: &Analysis,
    body: &[u8],
    content_type: Option<&str>,
) -> Option<PageAnalysis> {
    let kind = match content_type.map(super::media_type).as_deref() {
        Some(PDF_TYPE) => Kind::Pdf,
        Some(DOCX_TYPE) => Kind::Word,
        _ if content_type.is_some_and(super::is_html_type) => Kind::Html,
        _ => return None,
    };
    let analysis = match kind {
        Kind::Html if wanted.page => super::analyse(body),
        _ if wanted.text => PageAnalysis::default(),
        _ => return None,
    };
    Some(if wanted.text {
        with_text(analysis, body, kind)
    } else {
        analysis
    })
}

/// The media types whose text `analysis.text` reads besides HTML's.
const PDF_TYPE: &str = "application/pdf";
const DOCX_TYPE: &str = "application/vnd.openxmlformats-officedocument.wordprocessingml.document";

/// What a body is, as its text is read.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Html,
    Pdf,
    Word,
}

/// `analysis` with the text of `body` added, or why there is none.
fn with_text(analysis: PageAnalysis, body: &[u8], kind: Kind) -> PageAnalysis {
    let read = match kind {
        Kind::Pdf => pdf_text(body).map(Some),
        Kind::Word => docx_text(body).map(Some),
        Kind::Html => html_text(body),
    };
    match read {
        Ok(Some(text)) => analysis.with_text(&text),
        Ok(None) => analysis,
        Err(error) => {
            tracing::info!(%error, "no text read");
            analysis.with_text_error(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-page PDF 1.4 whose page shows `line`s, with a correct cross-reference table.
    fn pdf_of(lines: &[&str]) -> Vec<u8> {
        let mut content = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
        for line in lines {
            content.push_str(&format!("({line}) Tj T*\n"));
        }
        content.push_str("ET");
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
             /Resources << /Font << /F1 5 0 R >> >> >>"
                .to_owned(),
            format!(
                "<< /Length {} >>\nstream\n{content}\nendstream",
                content.len() + 1
            ),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
                .to_owned(),
        ];
        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, object) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", i + 1).as_bytes());
        }
        let xref = pdf.len();
        pdf.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
        );
        for offset in offsets {
            pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
        }
        pdf.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        pdf
    }

    #[test]
    fn a_pages_text_is_its_article_without_navigation_footer_or_scripts() {
        let paragraph = "Lambda functions crawl the web one host turn at a time, and each page \
                         is stored beside its fetch record with its links and items.";
        let html = format!(
            r#"<html><head><title>Guide</title><script>var tracking = 1;</script></head>
            <body><nav><a href="/">Home</a> <a href="/docs">Docs</a></nav>
            <header><div class="banner">Sign up for our newsletter</div></header>
            <article><h1>Crawling</h1><p>{paragraph}</p><p>{paragraph}</p><p>{paragraph}</p>
            </article><footer>Copyright 2026 Example Corp</footer></body></html>"#
        );
        let text = html_text(html.as_bytes()).unwrap().unwrap();
        assert!(text.contains("Lambda functions crawl the web"), "{text}");
        for boilerplate in ["Home", "newsletter", "Copyright", "tracking"] {
            assert!(!text.contains(boilerplate), "{boilerplate} in {text}");
        }
    }

    #[test]
    fn a_page_nested_past_the_depth_bound_is_too_large_and_one_within_it_reads_on_a_small_stack() {
        let nested = |depth: usize| {
            format!(
                "<html><body>{}<p>{}</p>{}<ul><li>a<li>b</ul><br><img src=x></body></html>",
                "<DIV class=x>".repeat(depth),
                "deep words, ".repeat(100),
                "</div>".repeat(depth)
            )
        };
        // html and body are two levels; unclosed items, void elements and `<p>` are none.
        assert_eq!(nesting_depth(nested(10).as_bytes()), 12);
        assert_eq!(
            html_text(nested(29_000).as_bytes()),
            Err(TextError::TooLarge)
        );
        let within = nested(HTML_DEPTH - 3);
        let read = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || html_text(within.as_bytes()))
            .unwrap()
            .join()
            .unwrap();
        assert!(read.unwrap().unwrap().contains("deep words"));
    }

    #[test]
    fn a_pdfs_text_is_read_and_a_malformed_one_is_an_error_not_a_panic() {
        let pdf = pdf_of(&["Annual report 2026", "Revenue grew"]);
        let text = pdf_text(&pdf).unwrap();
        assert!(
            text.contains("Annual report 2026") && text.contains("Revenue grew"),
            "{text:?}"
        );
        // Garbage, empty, and a valid header over nothing: errors.
        for bad in [&b"%PDF-1.7\n1 0 obj << /Type"[..], b"", b"not a pdf at all"] {
            assert_eq!(
                pdf_text(bad),
                Err(TextError::Malformed),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Cut anywhere, or with any byte flipped, it gives an error or what it could repair
        // (lopdf rebuilds a damaged cross-reference table), never a panic.
        for end in 0..pdf.len() {
            let _ = pdf_text(&pdf[..end]);
            let mut flipped = pdf.clone();
            flipped[end] ^= 0xff;
            let _ = pdf_text(&flipped);
        }
        let analysis = with_text(PageAnalysis::default(), b"%PDF-1.4 garbage", Kind::Pdf);
        assert_eq!(analysis.text_error, Some(TextError::Malformed));
    }

    /// A Word document (zip) whose `word/document.xml` is `xml`.
    fn docx_of(xml: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("[Content_Types].xml", options).unwrap();
        zip.write_all(b"<Types/>").unwrap();
        zip.start_file("word/document.xml", options).unwrap();
        zip.write_all(xml).unwrap();
        zip.finish().unwrap().into_inner()
    }

    #[test]
    fn a_word_documents_text_is_read_and_a_malformed_or_huge_one_is_an_error_not_a_panic() {
        let docx = docx_of(
            br#"<?xml version="1.0"?><w:document xmlns:w="w"><w:body>
            <w:p><w:r><w:t>Terms &amp; conditions</w:t></w:r><w:r><w:tab/><w:t>2026</w:t></w:r></w:p>
            <w:p><w:r><w:rPr><w:b/></w:rPr><w:t xml:space="preserve">Second </w:t></w:r><w:r><w:t>paragraph</w:t></w:r></w:p>
            </w:body></w:document>"#,
        );
        assert_eq!(
            docx_text(&docx).unwrap(),
            "Terms & conditions\t2026\nSecond paragraph\n"
        );
        let kind = super::analyse_body(
            &Analysis {
                page: false,
                text: true,
            },
            &docx,
            Some(&format!("{DOCX_TYPE}; charset=binary")),
        );
        assert_eq!(
            kind.and_then(|a| a.text).as_deref(),
            Some("Terms & conditions 2026\nSecond paragraph"),
        );
        // Not a zip, a zip without the document, a document that is not XML: malformed.
        let no_document = {
            use std::io::Write;
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            zip.start_file("a.txt", zip::write::SimpleFileOptions::default())
                .unwrap();
            zip.write_all(b"x").unwrap();
            zip.finish().unwrap().into_inner()
        };
        for bad in [
            b"not a zip".to_vec(),
            no_document,
            docx_of(b"<w:p><w:t>a</w:x>"),
        ] {
            assert_eq!(docx_text(&bad), Err(TextError::Malformed));
        }
        // A document that inflates past the bound: too large, read no further than it.
        let bomb = docx_of(&vec![b' '; DOCX_XML_BYTES as usize + 1]);
        assert!(bomb.len() < 100_000, "{}", bomb.len());
        assert_eq!(docx_text(&bomb), Err(TextError::TooLarge));
        // Cut anywhere, or with any byte flipped: an error or a text, never a panic.
        for end in 0..docx.len() {
            let _ = docx_text(&docx[..end]);
            let mut flipped = docx.clone();
            flipped[end] ^= 0xff;
            let _ = docx_text(&flipped);
        }
    }
}
