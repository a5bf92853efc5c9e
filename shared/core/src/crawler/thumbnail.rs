//! Thumbnails instead of the originals (`scope.images.thumbnail`,
//! `trawl_domain::image::Thumbnail`): an image's body, once fetched, is decoded, scaled down to
//! fit the crawl's box and stored as a JPEG. A body that does not decode (a format not served
//! here, a truncated or hostile file, one larger than the decoder's limits) fails its task as
//! invalid content: a state of the image in its item, never a crash or an unbounded allocation.

use crate::blob::Body;
use crate::fetch::FetchOutcome;
use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, ImageReader, Limits, RgbImage};
use std::io::Cursor;
use trawl_domain::image::Thumbnail;
use trawl_domain::retry::Failure;
use trawl_domain::task::ErrorKind;

/// The widest and tallest image decoded: a small file declaring a huge canvas (a decompression
/// bomb) is refused before its pixels are allocated.
const MAX_SIDE: u32 = 16_384;
/// What the decoder may allocate at once, the decoded pixels included.
const MAX_DECODED_BYTES: u64 = 256 << 20;
/// JPEG quality of a thumbnail (PIL's default, as Scrapy's thumbnails are made).
const QUALITY: u8 = 75;

/// `answered` with its image body replaced by its thumbnail (decoded off the async threads), or
/// failed as invalid content when the body is no decodable image. Other answers pass as they are.
pub(super) async fn of(answered: FetchOutcome, fit: Thumbnail) -> FetchOutcome {
    let FetchOutcome::Fetched(mut page) = answered else {
        return answered;
    };
    let Some(body) = page.body.take() else {
        return FetchOutcome::Fetched(page);
    };
    let original = body.into_bytes();
    let made = tokio::task::spawn_blocking(move || scaled(&original, fit)).await;
    match made {
        Ok(Ok(jpeg)) => {
            page.content_type = Some("image/jpeg".to_owned());
            page.content_length = Some(jpeg.len() as u64);
            page.body = Some(Body::new(jpeg));
            FetchOutcome::Fetched(page)
        }
        Ok(Err(why)) => FetchOutcome::Failed(Failure::new(
            ErrorKind::InvalidContent,
            format!("no thumbnail: {why}"),
        )),
        Err(stopped) => FetchOutcome::Failed(Failure::new(
            ErrorKind::InvalidContent,
            format!("no thumbnail: the scaling stopped ({stopped})"),
        )),
    }
}

/// The JPEG thumbnail of the image in `bytes`, fitted to `fit`.
fn scaled(bytes: &[u8], fit: Thumbnail) -> Result<Vec<u8>, String> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODED_BYTES);
    reader.limits(limits);
    let image = reader.decode().map_err(|e| e.to_string())?;
    let image = match fit.fit(image.width(), image.height()) {
        Some((width, height)) => image.resize_exact(width, height, FilterType::Triangle),
        None => image,
    };
    let mut out = Vec::new();
    DynamicImage::ImageRgb8(on_white(&image))
        .write_with_encoder(JpegEncoder::new_with_quality(&mut out, QUALITY))
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The image's pixels on a white background: JPEG has no transparency, and a transparent
/// pixel's colour is often black.
fn on_white(image: &DynamicImage) -> RgbImage {
    if !image.color().has_alpha() {
        return image.to_rgb8();
    }
    let rgba = image.to_rgba8();
    RgbImage::from_fn(rgba.width(), rgba.height(), |x, y| {
        let [r, g, b, a] = rgba.get_pixel(x, y).0;
        let over = |c: u8| ((u16::from(c) * u16::from(a) + 255 * (255 - u16::from(a))) / 255) as u8;
        image::Rgb([over(r), over(g), over(b)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageFormat, Rgba, RgbaImage};

    fn png(width: u32, height: u32, pixel: Rgba<u8>) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        RgbaImage::from_pixel(width, height, pixel)
            .write_to(&mut out, ImageFormat::Png)
            .expect("a png");
        out.into_inner()
    }

    fn decoded(jpeg: &[u8]) -> DynamicImage {
        assert!(jpeg.starts_with(&[0xff, 0xd8]), "a JPEG");
        image::load_from_memory_with_format(jpeg, ImageFormat::Jpeg).expect("decodes")
    }

    const BOX: Thumbnail = Thumbnail {
        width: 100,
        height: 100,
    };

    #[test]
    fn a_large_image_is_scaled_into_the_box_and_a_small_one_is_only_converted() {
        let large = decoded(&scaled(&png(400, 200, Rgba([200, 10, 10, 255])), BOX).unwrap());
        assert_eq!((large.width(), large.height()), (100, 50));
        let small = decoded(&scaled(&png(40, 30, Rgba([10, 200, 10, 255])), BOX).unwrap());
        assert_eq!((small.width(), small.height()), (40, 30));
        // Its colour survives the conversion (JPEG is lossy: near, not equal).
        let [r, g, b] = small.to_rgb8().get_pixel(20, 15).0;
        assert!(r < 40 && g > 170 && b < 40, "{r} {g} {b}");
    }

    #[test]
    fn transparency_becomes_white() {
        let clear = decoded(&scaled(&png(10, 10, Rgba([0, 0, 0, 0])), BOX).unwrap());
        let [r, g, b] = clear.to_rgb8().get_pixel(5, 5).0;
        assert!(r > 240 && g > 240 && b > 240, "{r} {g} {b}");
    }

    #[test]
    fn what_does_not_decode_is_an_error_not_a_panic() {
        // Not an image; a PNG cut short.
        assert!(scaled(b"<html>no image</html>", BOX).is_err());
        let whole = png(50, 50, Rgba([1, 2, 3, 255]));
        assert!(scaled(&whole[..whole.len() / 2], BOX).is_err());
    }

    #[test]
    fn a_canvas_past_the_limits_is_refused_before_it_is_decoded() {
        // A few KB of PNG may declare a canvas of gigabytes: the side limit refuses it.
        let widest = png(MAX_SIDE, 1, Rgba([1, 2, 3, 255]));
        assert!(scaled(&widest, BOX).is_ok());
        let wider = png(MAX_SIDE + 1, 1, Rgba([1, 2, 3, 255]));
        assert!(wider.len() < 100_000, "{} bytes", wider.len());
        let refused = scaled(&wider, BOX).unwrap_err();
        assert!(refused.to_lowercase().contains("limit"), "{refused}");
    }
}
