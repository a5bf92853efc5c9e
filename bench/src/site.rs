//! The fixture site: `pages` HTML pages of about 20 KB, generated once in memory and served on
//! 127.0.0.1 by a minimal hyper server running in a child process (so its CPU and memory are
//! not counted as the crawler's).
//!
//! Page `i` is `/p/{i}.html`; it links to pages `2i+1` and `2i+2` (so every page is reachable
//! from `/p/0.html` within log2(pages) hops) and to 8 pseudo-random others. Even pages carry an
//! ETag and answer 304 to a matching If-None-Match; odd pages have none (a recrawl then hits the
//! md5 check). `/fail.html` always answers 500. `/__stats` reports the requests served, and
//! `/__reset` zeroes them.

use crate::error::{BenchResult, Context, check};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::TcpListener;

/// Target size of a page body.
const PAGE_BYTES: usize = 20 * 1024;
/// Random links per page, besides the two tree links.
const RANDOM_LINKS: usize = 8;
/// Seed of the page generator: the site is the same in every run.
const SEED: u64 = 0x5EED_7A4B_0000_0001;
const WORDS: &[&str] = &[
    "trawl",
    "crawler",
    "frontier",
    "lambda",
    "queue",
    "lease",
    "token",
    "shard",
    "status",
    "page",
    "robots",
    "politeness",
    "delay",
    "sitemap",
    "anchor",
    "harbour",
    "net",
    "boat",
    "river",
    "ocean",
    "current",
    "tide",
    "signal",
    "index",
    "vector",
    "record",
    "archive",
    "delivery",
    "manifest",
    "object",
    "bucket",
    "table",
    "stream",
    "batch",
    "retry",
    "backoff",
];

/// The body of page `i` of a site of `pages`.
pub fn page(i: usize, pages: usize) -> Bytes {
    let mut rng = fastrand::Rng::with_seed(SEED ^ i as u64);
    let mut html = String::with_capacity(PAGE_BYTES + 1024);
    html.push_str(&format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Page {i}</title></head>\
         <body><h1>Page {i}</h1><nav>"
    ));
    let mut links: Vec<usize> = [2 * i + 1, 2 * i + 2]
        .into_iter()
        .filter(|&j| j < pages)
        .collect();
    for _ in 0..RANDOM_LINKS {
        links.push(rng.usize(..pages.max(1)));
    }
    for j in links {
        html.push_str(&format!("<a href=\"/p/{j}.html\">Page {j}</a> "));
    }
    html.push_str("</nav>");
    while html.len() < PAGE_BYTES {
        html.push_str("<p>");
        for _ in 0..60 {
            html.push_str(WORDS[rng.usize(..WORDS.len())]);
            html.push(' ');
        }
        html.push_str("</p>\n");
    }
    html.push_str("</body></html>\n");
    Bytes::from(html)
}

/// The server's state: bodies and request counters.
struct Served {
    bodies: Vec<Bytes>,
    hits: Vec<AtomicU32>,
    /// When each page was first requested (Unix ms; 0: not yet).
    first_at: Vec<AtomicU64>,
    /// Every request of a page after its first.
    repeats: Mutex<Vec<Repeat>>,
    requests: AtomicU64,
    /// Bumped by `/__change`: every page's body and ETag differ from the edition before.
    edition: AtomicU32,
}

/// What `/__stats` reports.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct Stats {
    /// Page requests (robots.txt and `/__*` excluded).
    pub requests: u64,
    /// Pages requested at least once.
    pub distinct: u64,
    /// Most requests any one page received.
    pub max_per_page: u64,
    /// Every request of a page after its first, for a chaos run to tell which followed a kill.
    #[serde(default)]
    pub repeats: Vec<Repeat>,
}

/// A page requested again: when first, and when this time (Unix ms).
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct Repeat {
    pub page: usize,
    pub first_ms: u64,
    pub at_ms: u64,
}

impl Served {
    fn stats(&self) -> Stats {
        let mut stats = Stats {
            requests: self.requests.load(Ordering::Relaxed),
            ..Stats::default()
        };
        for h in &self.hits {
            let h = u64::from(h.load(Ordering::Relaxed));
            stats.distinct += u64::from(h > 0);
            stats.max_per_page = stats.max_per_page.max(h);
        }
        stats.repeats = self
            .repeats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        stats
    }

    /// Notes when page `i` was requested: its first time, or a repeat.
    fn note_request(&self, i: usize) {
        let Some(first) = self.first_at.get(i) else {
            return;
        };
        let now = u64::try_from(trawl_domain::task::now_ms()).unwrap_or(0);
        if let Err(first_ms) = first.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
        {
            let repeat = Repeat {
                page: i,
                first_ms,
                at_ms: now,
            };
            self.repeats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(repeat);
        }
    }

    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        let reply = |status: StatusCode, content_type: &str, body: Bytes| {
            let mut response = Response::new(Full::new(body));
            *response.status_mut() = status;
            if let Ok(v) = content_type.parse() {
                response.headers_mut().insert("content-type", v);
            }
            response
        };
        let page = path
            .strip_prefix("/p/")
            .and_then(|p| p.strip_suffix(".html"))
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|i| self.bodies.get(i).map(|b| (i, b)));
        match (path, page) {
            (_, Some((i, body))) => {
                self.requests.fetch_add(1, Ordering::Relaxed);
                let edition = self.edition.load(Ordering::Relaxed);
                let body = if edition == 0 {
                    body.clone()
                } else {
                    let mut changed = body.to_vec();
                    changed.extend_from_slice(format!("<!-- edition {edition} -->\n").as_bytes());
                    Bytes::from(changed)
                };
                if let Some(h) = self.hits.get(i) {
                    h.fetch_add(1, Ordering::Relaxed);
                }
                self.note_request(i);
                let html = "text/html; charset=utf-8";
                if i % 2 == 1 {
                    return reply(StatusCode::OK, html, body);
                }
                let etag = format!("\"p{i}e{edition}\"");
                let fresh = req
                    .headers()
                    .get("if-none-match")
                    .is_some_and(|v| v.as_bytes() == etag.as_bytes());
                let mut response = if fresh {
                    reply(StatusCode::NOT_MODIFIED, html, Bytes::new())
                } else {
                    reply(StatusCode::OK, html, body)
                };
                if let Ok(v) = etag.parse() {
                    response.headers_mut().insert("etag", v);
                }
                response
            }
            ("/robots.txt", _) => reply(
                StatusCode::OK,
                "text/plain",
                Bytes::from_static(b"User-agent: *\nAllow: /\n"),
            ),
            ("/fail.html", _) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                Bytes::from_static(b"always failing"),
            ),
            ("/__stats", _) => {
                let body = serde_json::to_vec(&self.stats()).unwrap_or_default();
                reply(StatusCode::OK, "application/json", Bytes::from(body))
            }
            ("/__change", _) => {
                self.edition.fetch_add(1, Ordering::Relaxed);
                reply(StatusCode::OK, "text/plain", Bytes::new())
            }
            ("/__reset", _) => {
                self.requests.store(0, Ordering::Relaxed);
                for h in &self.hits {
                    h.store(0, Ordering::Relaxed);
                }
                for first in &self.first_at {
                    first.store(0, Ordering::Relaxed);
                }
                self.repeats
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                reply(StatusCode::OK, "text/plain", Bytes::new())
            }
            _ => reply(StatusCode::NOT_FOUND, "text/plain", Bytes::new()),
        }
    }
}

/// Entry point of the `serve-site` child: generates the site, prints the port, serves until
/// stdin closes (the parent exited or dropped its handle).
pub fn serve_main(pages: usize) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .step("site runtime")?;
    runtime.block_on(async move {
        let served = Arc::new(Served {
            bodies: (0..pages).map(|i| page(i, pages)).collect(),
            hits: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            first_at: (0..pages).map(|_| AtomicU64::new(0)).collect(),
            repeats: Mutex::new(Vec::new()),
            requests: AtomicU64::new(0),
            edition: AtomicU32::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.step("bind site")?;
        let port = listener.local_addr().step("site address")?.port();
        println!("{port}");
        // Parent gone (stdin closed): stop.
        std::thread::spawn(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        loop {
            // A failed accept (no memory, too many open files: a busy machine) costs one
            // connection, which its client tries again, not the site.
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let served = Arc::clone(&served);
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let response = served.respond(&req);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// A fixture site served by a child process; stops when dropped.
pub struct Site {
    pub pages: usize,
    pub base: String,
    child: Child,
}

impl Site {
    /// Starts `trawl-bench serve-site --pages N` and waits for its port.
    pub fn start(pages: usize) -> BenchResult<Site> {
        let exe = std::env::current_exe().step("locate trawl-bench")?;
        let mut child = Command::new(exe)
            .args(["serve-site", "--pages", &pages.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .step("start the fixture site")?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out)
                .read_line(&mut line)
                .step("read site port")?;
        }
        let port: u16 = line
            .trim()
            .parse()
            .map_err(|_| check("start the fixture site", format!("printed {line:?}")))?;
        Ok(Site {
            pages,
            base: format!("http://127.0.0.1:{port}"),
            child,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn page_url(&self, i: usize) -> String {
        self.url(&format!("/p/{i}.html"))
    }

    pub async fn stats(&self, client: &reqwest::Client) -> BenchResult<Stats> {
        let body = client
            .get(self.url("/__stats"))
            .send()
            .await
            .step("site stats")?
            .bytes()
            .await
            .step("site stats")?;
        serde_json::from_slice(&body).step("site stats")
    }

    /// Changes every page (a new edition: new bodies, new ETags), for a changed recrawl.
    pub async fn change(&self, client: &reqwest::Client) -> BenchResult<()> {
        client
            .get(self.url("/__change"))
            .send()
            .await
            .step("site change")?;
        Ok(())
    }

    pub async fn reset(&self, client: &reqwest::Client) -> BenchResult<()> {
        client
            .get(self.url("/__reset"))
            .send()
            .await
            .step("site reset")?;
        Ok(())
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        // Closing stdin stops it; kill in case it is stuck, then reap it.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_about_20_kb_with_ten_links_and_reachable() {
        let pages = 500;
        let body = page(7, pages);
        let text = std::str::from_utf8(&body).unwrap();
        assert!((PAGE_BYTES..PAGE_BYTES + 2048).contains(&body.len()));
        assert_eq!(text.matches("<a href=").count(), 10);
        assert!(text.contains("href=\"/p/15.html\"") && text.contains("href=\"/p/16.html\""));
        assert_eq!(page(7, pages), body, "deterministic");
        assert_ne!(page(8, pages), body);
    }
}
