//! Bodies at rest: what `storage.compress_bodies` saves on the fixture site's pages, through the
//! very function the object stores use (`trawl_core::blob::compress`).

use crate::report::Figure;
use crate::site;

const SECTION: &str = "storage";

pub fn run(pages: usize) -> Vec<Figure> {
    let (mut original, mut stored) = (0u64, 0u64);
    for i in 0..pages {
        let body = site::page(i, pages);
        match trawl_core::blob::compress("bench", "page", &body) {
            Ok(gz) => {
                original += body.len() as u64;
                stored += gz.len() as u64;
            }
            Err(e) => {
                eprintln!("trawl-bench: storage: {e}");
                return Vec::new();
            }
        }
    }
    let ratio = stored as f64 / original.max(1) as f64;
    vec![
        Figure::single(
            SECTION,
            format!("compressed bodies: stored / original bytes ({pages} fixture pages)"),
            "ratio",
            ratio,
        ),
        Figure::single(
            SECTION,
            "compressed bodies: mean stored page",
            "KiB",
            stored as f64 / pages.max(1) as f64 / 1024.0,
        ),
    ]
}
