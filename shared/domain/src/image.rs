//! Images (Django Dynamic Scraper's `IMAGE` fields and its images pipeline): which URLs of a
//! page are its images, how an image becomes a task, and what a delivered item says of each
//! image it names.
//!
//! An image is a task like a page, so that it is fetched through the same politeness (robots,
//! its host's pace, retries) and stored by md5 in either layout; its user data carries
//! [`IMAGE_KEY`] so that the crawler fetches it as an image (only `image/*` bodies kept, up to
//! `fetch.max_image_bytes`, redirects followed within the fetch, each hop checked against
//! the image scope) and never reads it for links or items. The images of a page are those of
//! `<img src>`, `<img srcset>` and `<picture><source srcset>`; an extractor field marked
//! `image` names one: the largest candidate of a `srcset`, else its value, resolved against
//! the page.
//!
//! The items pass joins each image field to the image's task as the manifest has it, and the
//! item names it with its state ([`ImageState`]); the items delta lists, for an item gone or
//! changed, the images it named that it names no more ([`removed`]).

use crate::task::{Status, UserData};
use serde::{Deserialize, Serialize};

/// The user data key that marks a task as an image (`"_image": true`).
pub const IMAGE_KEY: &str = "_image";

/// Whether a task with user data `data` is an image.
pub fn is_image_task(data: Option<&UserData>) -> bool {
    data.and_then(|d| d.get(IMAGE_KEY))
        .is_some_and(|v| v == &serde_json::Value::Bool(true))
}

/// The user data of an image task found on a page whose tasks start with `inherited`.
pub fn image_data(inherited: Option<UserData>) -> UserData {
    let mut data = inherited.unwrap_or_default();
    data.insert(IMAGE_KEY.to_owned(), serde_json::Value::Bool(true));
    data
}

/// A thumbnail box (`scope.images.thumbnail`, Scrapy's and DDS's `IMAGES_THUMBS`): an image
/// fetched as an image is decoded, scaled down to fit within `width` × `height` (its aspect
/// kept, never enlarged) and stored as a JPEG instead of the original, whose bytes are not
/// kept. Its md5 is the thumbnail's; an unchanged original (304, or the same bytes) gives the
/// same thumbnail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thumbnail {
    pub width: u32,
    pub height: u32,
}

/// The largest side a thumbnail box may have.
pub const MAX_THUMBNAIL_SIDE: u32 = 4096;

impl Thumbnail {
    /// What is wrong with this box, if anything.
    pub fn problem(&self) -> Option<String> {
        let sides = 1..=MAX_THUMBNAIL_SIDE;
        (!sides.contains(&self.width) || !sides.contains(&self.height)).then(|| {
            format!(
                "scope.images.thumbnail: width and height must be 1 to {MAX_THUMBNAIL_SIDE} (got {} x {})",
                self.width, self.height
            )
        })
    }

    /// The size an image of `width` × `height` is scaled to: the largest that fits the box
    /// with the image's aspect (each side at least 1); None when it fits already.
    pub fn fit(&self, width: u32, height: u32) -> Option<(u32, u32)> {
        if width <= self.width && height <= self.height {
            return None;
        }
        let (w, h, bw, bh) = (
            u64::from(width.max(1)),
            u64::from(height.max(1)),
            u64::from(self.width),
            u64::from(self.height),
        );
        // Scale by the tighter side: w/h compared with bw/bh without floating point.
        let (nw, nh) = if w * bh >= h * bw {
            (bw, (h * bw / w).max(1))
        } else {
            ((w * bh / h).max(1), bh)
        };
        Some((nw as u32, nh as u32))
    }
}

/// Whether a `Content-Type` names an image (`image/png; q=1` too).
pub fn is_image_type(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("image/"))
}

/// What a `srcset` candidate says of its size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Descriptor {
    /// `480w`: the image's width in pixels.
    Width(u32),
    /// `2x`: its pixel density.
    Density(f64),
    /// None written (`1x`), or one not understood.
    None,
}

/// One candidate of a `srcset`: a URL as written (unresolved) and its descriptor.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate<'a> {
    pub url: &'a str,
    pub descriptor: Descriptor,
}

/// The candidates of a `srcset` attribute, as the HTML standard splits it: a URL is a run of
/// non-whitespace (trailing commas end it), its descriptors run to the next comma outside
/// parentheses. A `data:` URL is left out (nothing to fetch).
pub fn srcset(value: &str) -> Vec<Candidate<'_>> {
    let mut out = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ',');
        if rest.is_empty() {
            return out;
        }
        let end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (mut url, after) = rest.split_at(end);
        rest = after;
        let mut descriptors = "";
        if url.ends_with(',') {
            url = url.trim_end_matches(',');
        } else {
            // Descriptors up to a comma outside parentheses.
            let mut depth = 0u32;
            let stop = rest
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' => {
                        depth = depth.saturating_sub(1);
                        false
                    }
                    ',' => depth == 0,
                    _ => false,
                })
                .map_or(rest.len(), |(i, _)| i);
            descriptors = &rest[..stop];
            rest = &rest[stop..];
        }
        if url.is_empty()
            || url
                .get(..5)
                .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
        {
            continue;
        }
        out.push(Candidate {
            url,
            descriptor: descriptor(descriptors),
        });
    }
}

fn descriptor(text: &str) -> Descriptor {
    let mut found = Descriptor::None;
    for token in text.split_ascii_whitespace() {
        if let Some(w) = token.strip_suffix(['w', 'W'])
            && let Ok(w) = w.parse::<u32>()
        {
            found = Descriptor::Width(w);
        } else if let Some(x) = token.strip_suffix(['x', 'X'])
            && let Ok(x) = x.parse::<f64>()
            && x.is_finite()
            && x > 0.0
        {
            found = Descriptor::Density(x);
        }
    }
    found
}

/// The largest candidate of a `srcset`: by width when any has one, else by density (none
/// written is `1x`); the first of equals.
pub fn largest<'a>(candidates: &[Candidate<'a>]) -> Option<&'a str> {
    let widths = candidates
        .iter()
        .any(|c| matches!(c.descriptor, Descriptor::Width(_)));
    let size = |c: &Candidate<'_>| match c.descriptor {
        Descriptor::Width(w) => f64::from(w),
        Descriptor::Density(x) if !widths => x,
        Descriptor::None if !widths => 1.0,
        _ => -1.0,
    };
    let mut best: Option<&Candidate<'a>> = None;
    for c in candidates {
        if best.is_none_or(|b| size(c) > size(b)) {
            best = Some(c);
        }
    }
    best.map(|c| c.url)
}

/// The URL an image field's value names, resolved against the page at `page`: the largest
/// candidate when the field takes a `srcset`, else the value itself. Err: why it names no
/// http(s) image (the item records it).
pub fn field_image_url(value: &str, is_srcset: bool, page: &url::Url) -> Result<String, String> {
    let written = if is_srcset {
        largest(&srcset(value)).ok_or_else(|| format!("no image in the srcset {value:?}"))?
    } else {
        value.trim()
    };
    let url = page
        .join(written)
        .map_err(|e| format!("not an image URL: {written:?}: {e}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url.into()),
        other => Err(format!("not an http(s) image URL: {other}: {written:?}")),
    }
}

/// What an item's image is in a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageState {
    /// Fetched and stored: its md5 and where its bytes are.
    Stored,
    /// A task not fetched yet (pending, or being fetched).
    Pending,
    /// No task of the crawl has its URL (out of the image scope, over `max_pages`, or found
    /// after the crawl's last fetch).
    NotFetched,
    /// Its fetch failed: retrying, or given up (`error` says why: a 404 once, a body over
    /// `fetch.max_image_bytes`, robots …).
    Failed,
    /// Found missing at its checks (404, 410).
    Gone,
    /// Answered with something that is not an image (`content_type` says what): not stored.
    NotImage,
    /// An image fetched as a page before any page named it an image (a link to it came
    /// first): recorded, not stored.
    NotStored,
}

/// The state of an image whose task has status `status` (None: no task), answered with
/// `content_type`, its body stored or not.
pub fn image_state(status: Option<Status>, content_type: Option<&str>, stored: bool) -> ImageState {
    let image = content_type.is_some_and(is_image_type);
    match status {
        None => ImageState::NotFetched,
        Some(Status::Pending | Status::InProgress) => ImageState::Pending,
        Some(Status::Failed | Status::Ignored) => ImageState::Failed,
        Some(Status::Gone) => ImageState::Gone,
        Some(Status::Succeeded) => match (image, stored) {
            (true, true) => ImageState::Stored,
            (true, false) => ImageState::NotStored,
            (false, _) => ImageState::NotImage,
        },
    }
}

/// An image as a delivered item names it (`images` of an item line, by field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// The image's URL (its task's).
    pub url: String,
    pub state: ImageState,
    /// Hex md5 of the stored bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md5: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Where the bytes are, as the manifest says: the object (`s3://bucket/key` or a file),
    /// or on the segment layout the segment, with the offset and length of the image's
    /// records in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// Why it failed (`failed`, `gone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ImageRef {
    /// An image no task of the delivery has.
    pub fn not_fetched(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            state: ImageState::NotFetched,
            md5: None,
            content_type: None,
            bytes: None,
            object: None,
            offset: None,
            length: None,
            error: None,
        }
    }
}

/// The images of `previous` (an item's, by field, in the last delivery) that `current` (the
/// same item's now; empty when it is gone) names no more, by URL and md5: a field whose image
/// changed bytes or URL has its old one removed. In field order, each image once.
pub fn removed<'a>(
    previous: impl IntoIterator<Item = &'a ImageRef>,
    current: &[&ImageRef],
) -> Vec<ImageRef> {
    let mut out: Vec<ImageRef> = Vec::new();
    for old in previous {
        let kept = current
            .iter()
            .any(|now| now.url == old.url && now.md5 == old.md5);
        let listed = out.iter().any(|o| o.url == old.url && o.md5 == old.md5);
        if !kept && !listed {
            out.push(old.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_thumbnail_fits_its_box_keeping_the_aspect_and_never_enlarges() {
        let small = Thumbnail {
            width: 100,
            height: 100,
        };
        assert_eq!(small.fit(400, 200), Some((100, 50)));
        assert_eq!(small.fit(200, 400), Some((50, 100)));
        assert_eq!(small.fit(1000, 1), Some((100, 1)));
        assert_eq!(small.fit(100, 100), None);
        assert_eq!(small.fit(40, 30), None);
        let wide = Thumbnail {
            width: 300,
            height: 100,
        };
        assert_eq!(wide.fit(600, 600), Some((100, 100)));
        assert_eq!(wide.fit(900, 200), Some((300, 66)));
        assert_eq!(small.problem(), None);
        let zero = Thumbnail {
            width: 0,
            height: 10,
        };
        assert!(zero.problem().is_some_and(|p| p.contains("1 to 4096")));
    }

    use super::*;

    fn urls<'a>(c: &[Candidate<'a>]) -> Vec<&'a str> {
        c.iter().map(|c| c.url).collect()
    }

    #[test]
    fn a_srcset_splits_into_its_candidates_as_the_standard_has_it() {
        let c = srcset("a.png 480w, b.png 800w,c.png 2x , d,e.png 1200w");
        assert_eq!(urls(&c), ["a.png", "b.png", "c.png", "d,e.png"]);
        assert_eq!(c[0].descriptor, Descriptor::Width(480));
        assert_eq!(c[2].descriptor, Descriptor::Density(2.0));
        assert_eq!(c[3].descriptor, Descriptor::Width(1200));
        // Trailing commas end a URL; a URL alone is 1x; data: URLs are nothing to fetch.
        let c = srcset("  x.png,, y.jpg, data:image/png;base64,AAAA 2x, z.webp 1.5x");
        assert_eq!(urls(&c), ["x.png", "y.jpg", "z.webp"]);
        assert_eq!(c[0].descriptor, Descriptor::None);
        // Parentheses keep a comma in the descriptors; junk descriptors are none.
        let c = srcset("p.png (a, b) 3x, q.png huge");
        assert_eq!(urls(&c), ["p.png", "q.png"]);
        assert_eq!(c[0].descriptor, Descriptor::Density(3.0));
        assert_eq!(c[1].descriptor, Descriptor::None);
        assert!(srcset(" , ,").is_empty());
    }

    #[test]
    fn the_largest_candidate_is_the_widest_else_the_densest() {
        assert_eq!(
            largest(&srcset("a.png 480w, b.png 1200w, c.png 800w")),
            Some("b.png")
        );
        assert_eq!(
            largest(&srcset("a.png, b.png 2x, c.png 1.5x")),
            Some("b.png")
        );
        // Widths win over densities written beside them; the first of equals.
        assert_eq!(largest(&srcset("a.png 3x, b.png 10w")), Some("b.png"));
        assert_eq!(largest(&srcset("a.png, b.png 1x")), Some("a.png"));
        assert_eq!(largest(&[]), None);
    }

    #[test]
    fn an_image_fields_value_is_resolved_against_its_page() {
        let page = url::Url::parse("http://shop.example/p/1.html").unwrap();
        assert_eq!(
            field_image_url(" img/a.png ", false, &page),
            Ok("http://shop.example/p/img/a.png".to_owned())
        );
        assert_eq!(
            field_image_url("//cdn.example/a.png", false, &page),
            Ok("http://cdn.example/a.png".to_owned())
        );
        assert_eq!(
            field_image_url("/s.png 1x, /l.png 2x", true, &page),
            Ok("http://shop.example/l.png".to_owned())
        );
        assert!(field_image_url("", true, &page).is_err());
        assert!(field_image_url("javascript:x()", false, &page).is_err());
        assert!(field_image_url("http://[::1", false, &page).is_err());
    }

    #[test]
    fn image_tasks_are_marked_by_their_data_and_types_read_by_their_media_type() {
        let data = image_data(None);
        assert!(is_image_task(Some(&data)));
        assert!(!is_image_task(None));
        let mut inherited = UserData::new();
        inherited.insert("shop".into(), "a".into());
        let data = image_data(Some(inherited));
        assert_eq!(data.len(), 2);
        assert!(is_image_task(Some(&data)));
        let mut other = UserData::new();
        other.insert(IMAGE_KEY.into(), "yes".into());
        assert!(!is_image_task(Some(&other)));
        assert!(is_image_type("image/png"));
        assert!(is_image_type(" IMAGE/svg+xml; charset=utf-8"));
        assert!(!is_image_type("text/html"));
        assert!(!is_image_type("imag"));
    }

    #[test]
    fn an_images_state_follows_its_tasks_status_and_answer() {
        use ImageState as S;
        let png = Some("image/png");
        assert_eq!(image_state(None, None, false), S::NotFetched);
        assert_eq!(image_state(Some(Status::Pending), None, false), S::Pending);
        assert_eq!(
            image_state(Some(Status::InProgress), None, false),
            S::Pending
        );
        assert_eq!(image_state(Some(Status::Failed), None, false), S::Failed);
        assert_eq!(image_state(Some(Status::Ignored), None, false), S::Failed);
        assert_eq!(image_state(Some(Status::Gone), png, true), S::Gone);
        assert_eq!(image_state(Some(Status::Succeeded), png, true), S::Stored);
        assert_eq!(
            image_state(Some(Status::Succeeded), png, false),
            S::NotStored
        );
        assert_eq!(
            image_state(Some(Status::Succeeded), Some("text/html"), true),
            S::NotImage
        );
        assert_eq!(
            image_state(Some(Status::Succeeded), None, false),
            S::NotImage
        );
    }

    #[test]
    fn images_named_no_more_are_removed_once_each() {
        let image = |url: &str, md5: &str| ImageRef {
            md5: Some(md5.to_owned()),
            state: ImageState::Stored,
            ..ImageRef::not_fetched(url)
        };
        let (a, b, c) = (image("a", "1"), image("b", "2"), image("c", "3"));
        let a2 = image("a", "9");
        // Gone: everything it named, once.
        assert_eq!(removed([&a, &b, &a], &[]), vec![a.clone(), b.clone()]);
        // Changed: the old bytes of a field and an image no field names.
        assert_eq!(
            removed([&a, &b, &c], &[&a2, &c]),
            vec![a.clone(), b.clone()]
        );
        assert!(removed([&a], &[&a]).is_empty());
    }
}
