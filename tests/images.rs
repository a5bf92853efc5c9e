//! Images (issue 31: DDS's `IMAGE` fields and images pipeline): a shop's product pages whose
//! photos are on another host (a CDN), named by extractor fields marked `image`, and a listing
//! whose images a route fetches. Each image is fetched through the usual politeness, stored by
//! md5, and named in its item with its state; an image too large or not an image is a state,
//! not a failure of the crawl; an item gone takes its images out of the delivery, listed as
//! removed in the items delta. On the embedded backend in both layouts, and through the Lambda
//! handlers on moto.

use crate::cli::{json_of, temp_dir, trawl};
use crate::freshness::delivered_lines;
use crate::site::{Route, Site};
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;

/// The largest image stored, in the configuration below.
const MAX_IMAGE_BYTES: usize = 4096;

/// Products read with their photo (`src`) and its zoom (the largest of its `srcset`); the
/// listing's images fetched by its route; images no rule names are never fetched.
const CONFIG: &str = r#"{
  "recrawl": {"missing_after": 1},
  "fetch": {"max_image_bytes": 4096},
  "scope": {"routes": [{"glob": "*/list.html", "images": true}]},
  "extract": [
    {"name": "product", "glob": "*/p/*.html",
     "fields": {
       "title": {"css": "h1", "processors": ["required"]},
       "photo": {"css": "img.photo", "value": "attr(src)", "image": true},
       "zoom": {"css": "img.photo", "value": "attr(srcset)", "image": true}
     }}
  ]
}"#;

/// Bytes that start like a PNG (or a JPEG), different for each `n`.
fn png(n: u8, len: usize) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(n)));
    bytes
}

fn jpeg(n: u8) -> Vec<u8> {
    let mut bytes = b"\xff\xd8\xff\xe0".to_vec();
    bytes.extend((0..700u32).map(|i| (i as u8).wrapping_mul(7).wrapping_add(n)));
    bytes
}

fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(Md5::digest(bytes))
}

/// The shop (pages on 127.0.0.1) and its CDN (images on `localhost`, another host).
struct Shop {
    site: Site,
    cdn: Site,
}

impl Shop {
    fn cdn_url(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.cdn.addr().port())
    }
}

fn product(title: &str, img: &str) -> String {
    format!(r#"<html><body><h1>{title}</h1>{img}<img class="deco" src="/deco.png"></body></html>"#)
}

async fn shop() -> Shop {
    let (site, cdn) = (Site::start().await, Site::start().await);
    let shop = Shop { site, cdn };
    let (site, cdn) = (&shop.site, &shop.cdn);
    site.route(
        "/list.html",
        Route::html(
            r#"<html><body><img src="/banner.jpg" alt="">
               <a href="/p/1.html">1</a> <a href="/p/2.html">2</a> <a href="/p/3.html">3</a>
               </body></html>"#,
        ),
    );
    site.route("/banner.jpg", Route::content("image/jpeg", jpeg(9)));
    site.route("/deco.png", Route::content("image/png", png(8, 100)));
    // One photo with a larger one in its srcset; one too large; one that is no image.
    let photo = format!(
        r#"<img class="photo" src="{}" srcset="{} 1x, //localhost:{}/img/1-big.jpg 2x">"#,
        shop.cdn_url("/img/1.png"),
        shop.cdn_url("/img/1.png"),
        cdn.addr().port()
    );
    site.route("/p/1.html", Route::html(product("One", &photo)));
    let large = format!(
        r#"<img class="photo" src="{}">"#,
        shop.cdn_url("/img/2.png")
    );
    site.route("/p/2.html", Route::html(product("Two", &large)));
    let html = format!(
        r#"<img class="photo" src="{}">"#,
        shop.cdn_url("/img/3.png")
    );
    site.route("/p/3.html", Route::html(product("Three", &html)));
    cdn.route("/img/1.png", Route::content("image/png", png(1, 900)));
    cdn.route("/img/1-big.jpg", Route::content("image/jpeg", jpeg(1)));
    cdn.route(
        "/img/2.png",
        Route::content("image/png", png(2, MAX_IMAGE_BYTES * 2)),
    );
    cdn.route("/img/3.png", Route::html("<html>no image here</html>"));
    shop
}

fn gunzip_lines(path: &Path) -> Vec<Value> {
    let mut text = String::new();
    MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn item<'a>(items: &'a [Value], shop: &Shop, path: &str) -> &'a Value {
    let url = shop.site.url(path);
    items
        .iter()
        .find(|i| i["page_url"] == url)
        .unwrap_or_else(|| panic!("no item of {url}: {items:?}"))
}

/// Gunzipped when gzip (a body kept compressed, a segment's records).
fn inflated(bytes: Vec<u8>) -> Vec<u8> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        MultiGzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        bytes
    }
}

/// The bytes an image reference (or a manifest line) names on the embedded backend: the
/// object's, or the records' at its offset in its segment.
fn stored_bytes(named: &Value) -> Vec<u8> {
    let path = named["object"]
        .as_str()
        .unwrap_or_else(|| panic!("{named}"));
    let path = path.strip_prefix("file://").unwrap_or(path);
    let all = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    match (named["offset"].as_u64(), named["length"].as_u64()) {
        (Some(offset), Some(length)) => {
            inflated(all[offset as usize..(offset + length) as usize].to_vec())
        }
        _ => inflated(all),
    }
}

/// Whether `stored` holds `served`: equal, or (a segment's WARC records) with it as payload.
fn holds(stored: &[u8], served: &[u8]) -> bool {
    stored == served || stored.windows(served.len()).any(|w| w == served)
}

/// The first generation's delivery: each product item names its images, stored by md5 (their
/// bytes where the item says), too large or not an image as a state.
fn check_first_delivery(shop: &Shop, delivery: &Path, run: Option<&Value>, read_bytes: bool) {
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    assert_eq!(items.len(), 3, "{items:?}");
    let one = item(&items, shop, "/p/1.html");
    assert_eq!(one["fields"]["photo"], json!(shop.cdn_url("/img/1.png")));
    assert_eq!(one["fields"]["zoom"], json!(shop.cdn_url("/img/1-big.jpg")));
    let photo = &one["images"]["photo"];
    assert_eq!(photo["state"], "stored", "{one}");
    assert_eq!(photo["url"], json!(shop.cdn_url("/img/1.png")));
    assert_eq!(photo["md5"], json!(md5_hex(&png(1, 900))));
    assert_eq!(photo["content_type"], "image/png");
    let zoom = &one["images"]["zoom"];
    assert_eq!(zoom["state"], "stored", "{one}");
    assert_eq!(zoom["md5"], json!(md5_hex(&jpeg(1))));
    if read_bytes {
        assert!(holds(&stored_bytes(photo), &png(1, 900)), "{photo}");
        assert!(holds(&stored_bytes(zoom), &jpeg(1)), "{zoom}");
    }
    // AND an image over `fetch.max_image_bytes` failed, one that is no image is not stored:
    // states of their items, which are delivered valid
    let two = item(&items, shop, "/p/2.html");
    assert_eq!(two["images"]["photo"]["state"], "failed", "{two}");
    assert!(
        two["images"]["photo"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("larger than {MAX_IMAGE_BYTES}"))),
        "{two}"
    );
    assert!(two["images"].get("zoom").is_none(), "no srcset, no zoom");
    let three = item(&items, shop, "/p/3.html");
    assert_eq!(three["images"]["photo"]["state"], "not_image", "{three}");
    assert!(three["images"]["photo"]["md5"].is_null());
    assert!(items.iter().all(|i| i["valid"] == true));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(delivery.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(
        summary["items"]["images"],
        json!({"stored": 2, "failed": 1, "not_image": 1})
    );
    // AND the listing's image, fetched by its route, is stored by md5 (its manifest line);
    // the products' other images, named by no rule, were never requested
    if let Some(run) = run {
        let manifest = delivered_lines(run, "manifest-");
        let banner = manifest
            .iter()
            .find(|l| l["url"] == shop.site.url("/banner.jpg"))
            .unwrap_or_else(|| panic!("no banner: {manifest:?}"));
        assert_eq!(banner["md5"], json!(md5_hex(&jpeg(9))));
        if read_bytes {
            assert!(holds(&stored_bytes(banner), &jpeg(9)), "{banner}");
        }
    }
    assert_eq!(shop.site.hits("/deco.png"), 0);
    assert_eq!(shop.cdn.hits("/img/1.png"), 1);
}

/// The second generation's, once the first product's page is gone: its item is gone with its
/// two images listed as removed; the other items are unchanged.
fn check_second_delivery(shop: &Shop, delivery: &Path) {
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        items
            .iter()
            .all(|i| i["page_url"] != shop.site.url("/p/1.html"))
    );
    let delta = gunzip_lines(&delivery.join("items-delta.jsonl.gz"));
    assert_eq!(delta.len(), 1, "{delta:?}");
    let gone = &delta[0];
    assert_eq!(gone["change"], "gone");
    assert_eq!(
        gone["key"],
        json!(format!("{}#0", shop.site.url("/p/1.html")))
    );
    let removed: Vec<(&str, &str)> = gone["removed_images"]
        .as_array()
        .unwrap_or_else(|| panic!("{gone}"))
        .iter()
        .map(|i| (i["url"].as_str().unwrap(), i["md5"].as_str().unwrap()))
        .collect();
    let (photo, zoom) = (md5_hex(&png(1, 900)), md5_hex(&jpeg(1)));
    assert_eq!(
        removed,
        [
            (shop.cdn_url("/img/1.png").as_str(), photo.as_str()),
            (shop.cdn_url("/img/1-big.jpg").as_str(), zoom.as_str())
        ]
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(delivery.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["items"]["delta"]["images_removed"], 2);
    // No other item names them: both are deleted with their item.
    assert_eq!(summary["items"]["delta"]["images_deleted"], 2);
    assert_eq!(summary["items"]["delta"]["gone"], 1);
}

/// The photo the first delivery's item of `/p/1.html` names: its object, offset and length.
fn first_photo(shop: &Shop, first: &Path) -> Value {
    let items = gunzip_lines(&first.join("items.jsonl.gz"));
    item(&items, shop, "/p/1.html")["images"]["photo"].clone()
}

/// The removed photo's task, as `trawl tasks show` gives it: given up as removed.
fn check_retired(task: &Value) {
    assert_eq!(task["status"], "ignored", "{task}");
    let errors = task["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{task}"));
    assert_eq!(errors.last().unwrap()["kind"], "removed", "{task}");
}

fn succeeded(output: std::process::Output) -> std::process::Output {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test]
async fn image_fields_and_routed_images_are_stored_by_md5_named_in_items_and_removed_with_them() {
    images_on_the_embedded_backend("objects").await;
}

#[tokio::test]
async fn image_fields_and_routed_images_are_stored_by_md5_in_segments_too() {
    images_on_the_embedded_backend("segments").await;
}

async fn images_on_the_embedded_backend(layout: &str) {
    // GIVEN a shop whose product photos are on a CDN, crawled with image fields and a route
    // fetching the listing's images
    let shop = shop().await;
    let dir = temp_dir(&format!("images-{layout}"));
    let data = dir.join("data");
    let config = dir.join("config.json");
    std::fs::write(&config, CONFIG).unwrap();
    let crawl = succeeded(
        trawl(
            &[
                "crawl",
                &shop.site.url("/list.html"),
                "--allow-private-networks",
                "--recrawl-every",
                "1d",
                "--layout",
                layout,
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--json",
            ],
            &dir,
        )
        .await,
    );
    let run = json_of(&crawl);
    let first = Path::new(run["delivery"].as_str().unwrap()).to_path_buf();
    check_first_delivery(&shop, &first, Some(&run), true);

    // WHEN the first product's page is removed and the next generation runs
    shop.site.route("/p/1.html", Route::status(404));
    let recrawl = succeeded(
        trawl(
            &["recrawl", "--json", "--data-dir", data.to_str().unwrap()],
            &dir,
        )
        .await,
    );
    let second = json_of(&recrawl);
    // THEN its item is gone, its images removed with it in the items delta
    check_second_delivery(&shop, Path::new(second["delivery"].as_str().unwrap()));
    // AND the photo's task is given up with its bytes: on the objects layout its file is
    // deleted, on segments its records are no task's
    let photo = first_photo(&shop, &first);
    let shown = trawl(
        &[
            "tasks",
            "show",
            &shop.cdn_url("/img/1.png"),
            "--json",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &dir,
    )
    .await;
    check_retired(&json_of(&succeeded(shown)));
    let object = Path::new(
        photo["object"]
            .as_str()
            .unwrap_or_else(|| panic!("{photo}")),
    );
    assert_eq!(object.exists(), layout == "segments", "{photo}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_lambda_handlers_store_the_images_items_name_and_remove_them_with_their_item() {
    // GIVEN a deployed stack on moto and the shop's crawl submitted with image fields
    let deployed = crate::operator::deploy(&crate::support::moto::shared().endpoint).await;
    let shop = shop().await;
    let dir = temp_dir("images-moto");
    let config = dir.join("config.json");
    std::fs::write(&config, CONFIG).unwrap();
    let crawl_id = crate::support::unique("images");
    let env = [("TRAWL_STACK", deployed.name.as_str())];
    succeeded(
        deployed
            .run(
                &[
                    "submit",
                    &shop.site.url("/list.html"),
                    "--crawl-id",
                    &crawl_id,
                    "--allow-private-networks",
                    "--recrawl-every",
                    "1d",
                    "--config",
                    config.to_str().unwrap(),
                    "--json",
                ],
                &env,
            )
            .await,
    );

    // WHEN the seeder, crawler, sweeper and deliverer handlers run it to its delivery
    let functions = crate::operator::functions(&deployed);
    crate::items::run_functions_until_delivered(&deployed, &functions, &crawl_id, 0).await;

    // THEN its items name their images, stored by md5 in the bucket
    let first = crate::items::download(&deployed, &env, &crawl_id, &dir.join("gen0")).await;
    check_first_delivery(&shop, &first, None, false);
    let items = gunzip_lines(&first.join("items.jsonl.gz"));
    let photo = &item(&items, &shop, "/p/1.html")["images"]["photo"];
    let object = photo["object"]
        .as_str()
        .unwrap_or_else(|| panic!("{photo}"));
    let key = object
        .strip_prefix(&format!("s3://{}/", deployed.stack.bucket))
        .unwrap_or_else(|| panic!("{object}"));
    let calls = std::sync::Arc::new(trawl_domain::calls::CallCounts::default());
    let blobs =
        trawl_aws::s3::S3BlobStore::new(deployed.clients.s3.clone(), &deployed.stack.bucket, calls);
    let stored = match (photo["offset"].as_u64(), photo["length"].as_u64()) {
        (Some(offset), Some(length)) => {
            trawl_core::blob::BlobStore::get_range(&blobs, key, offset, length).await
        }
        _ => trawl_core::blob::BlobStore::get(&blobs, key).await,
    }
    .unwrap()
    .unwrap_or_else(|| panic!("no object {key}"));
    assert!(holds(&inflated(stored.to_vec()), &png(1, 900)), "{photo}");

    // WHEN the first product's page is removed and the next generation is run by the handlers
    shop.site.route("/p/1.html", Route::status(404));
    succeeded(
        deployed
            .run(
                &["recrawl", "--crawl-id", &crawl_id, "--detach", "--json"],
                &env,
            )
            .await,
    );
    crate::items::run_functions_until_delivered(&deployed, &functions, &crawl_id, 1).await;

    // THEN its item is gone, its images removed with it in the items delta
    let second = crate::items::download(&deployed, &env, &crawl_id, &dir.join("gen1")).await;
    check_second_delivery(&shop, &second);
    // AND the photo's task is given up and its object deleted from the bucket
    let shown = deployed
        .run(
            &[
                "tasks",
                "show",
                &shop.cdn_url("/img/1.png"),
                "--crawl-id",
                &crawl_id,
                "--json",
            ],
            &env,
        )
        .await;
    check_retired(&json_of(&succeeded(shown)));
    let left = trawl_core::blob::BlobStore::get(&blobs, key).await.unwrap();
    assert!(left.is_none(), "{key} kept");
    let _ = std::fs::remove_dir_all(dir);
}

/// A real PNG of `width` × `height`, one colour.
fn real_png(width: u32, height: u32) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(width, height, image::Rgb([30, 60, 200]))
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

#[tokio::test]
async fn with_a_thumbnail_box_an_image_is_stored_as_a_jpeg_thumbnail_instead_of_the_original() {
    // GIVEN products whose photos are a 400 x 200 PNG and bytes that only start like a PNG,
    // crawled with a 100 x 100 thumbnail box
    let site = Site::start().await;
    site.route(
        "/p/1.html",
        Route::html(product("One", r#"<img class="photo" src="/img/1.png">"#)),
    );
    site.route(
        "/p/2.html",
        Route::html(product("Two", r#"<img class="photo" src="/img/2.png">"#)),
    );
    site.route(
        "/img/1.png",
        Route::content("image/png", real_png(400, 200)),
    );
    site.route("/img/2.png", Route::content("image/png", png(2, 900)));
    site.route(
        "/",
        Route::html(r#"<a href="/p/1.html">1</a> <a href="/p/2.html">2</a>"#),
    );
    let dir = temp_dir("images-thumbnails");
    let data = dir.join("data");
    let config = dir.join("config.json");
    let mut with_box: Value = serde_json::from_str(CONFIG).unwrap();
    with_box["scope"]["images"] = json!({"thumbnail": {"width": 100, "height": 100}});
    std::fs::write(&config, with_box.to_string()).unwrap();
    let crawl = succeeded(
        trawl(
            &[
                "crawl",
                &site.url("/"),
                "--allow-private-networks",
                "--layout",
                "objects",
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--json",
            ],
            &dir,
        )
        .await,
    );
    let run = json_of(&crawl);
    let delivery = Path::new(run["delivery"].as_str().unwrap());
    let items = gunzip_lines(&delivery.join("items.jsonl.gz"));
    let named = |path: &str| {
        items
            .iter()
            .find(|i| i["page_url"] == site.url(path))
            .unwrap_or_else(|| panic!("no item of {path}: {items:?}"))["images"]["photo"]
            .clone()
    };
    // THEN the item names a JPEG that fits the box with the photo's aspect, stored by its md5
    let photo = named("/p/1.html");
    assert_eq!(photo["state"], "stored", "{photo}");
    assert_eq!(photo["content_type"], "image/jpeg", "{photo}");
    let stored = stored_bytes(&photo);
    assert_eq!(photo["md5"], json!(md5_hex(&stored)));
    let thumbnail = image::load_from_memory_with_format(&stored, image::ImageFormat::Jpeg).unwrap();
    assert_eq!((thumbnail.width(), thumbnail.height()), (100, 50));
    // AND the original's bytes are stored nowhere
    let original = real_png(400, 200);
    let kept = walk(&data)
        .into_iter()
        .any(|file| holds(&inflated(std::fs::read(&file).unwrap()), &original));
    assert!(!kept, "the original PNG is stored under {}", data.display());
    // AND bytes that do not decode are the image's failed state, their item still delivered
    let broken = named("/p/2.html");
    assert_eq!(broken["state"], "failed", "{broken}");
    assert!(
        broken["error"]
            .as_str()
            .is_some_and(|e| e.contains("no thumbnail")),
        "{broken}"
    );
    // AND a box of 0 is refused before anything runs
    with_box["scope"]["images"]["thumbnail"]["width"] = json!(0);
    std::fs::write(&config, with_box.to_string()).unwrap();
    let refused = trawl(
        &[
            "crawl",
            &site.url("/"),
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            dir.join("refused").to_str().unwrap(),
        ],
        &dir,
    )
    .await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("scope.images.thumbnail"));
    let _ = std::fs::remove_dir_all(dir);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
