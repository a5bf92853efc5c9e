//! A web site on 127.0.0.1 for the integration tests: a route table tests can extend, a count of
//! requests per path, the requests themselves, routes that answer only requests carrying a
//! header, a cookie, a method or a body, and the misbehaviour a crawler must survive (stalls,
//! bombs, loops).

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use futures_util::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::HeaderMap;
use hyper::http::request::Parts;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the site answers on one path.
#[derive(Debug, Clone)]
pub struct Route {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
    /// Send `body`, then hold the connection open without ever finishing the response.
    stall: bool,
    /// Each answer ends with the path's hit count: a refetch never has the same md5.
    volatile: bool,
    /// Answer 304 to a matching If-None-Match.
    etag: Option<String>,
    /// What a request must carry to get this answer; 403 otherwise.
    requires: Vec<Requirement>,
    /// How long the site takes before it answers (a slow site).
    delay: std::time::Duration,
}

/// Something a route demands of a request.
#[derive(Debug, Clone)]
enum Requirement {
    /// This header with exactly this value.
    Header(String, String),
    /// This `name=value` pair in the Cookie header.
    Cookie(String, String),
    Method(String),
    Body(Bytes),
}

impl Requirement {
    fn met_by(&self, parts: &Parts, body: &Bytes) -> bool {
        match self {
            Requirement::Header(name, value) => parts
                .headers
                .get(name.as_str())
                .is_some_and(|v| v.as_bytes() == value.as_bytes()),
            Requirement::Cookie(name, value) => parts
                .headers
                .get_all("cookie")
                .iter()
                .flat_map(|v| v.to_str().unwrap_or_default().split(';'))
                .any(|pair| pair.trim() == format!("{name}={value}")),
            Requirement::Method(method) => parts.method.as_str() == method,
            Requirement::Body(expected) => body == expected,
        }
    }
}

/// A request as the site received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    /// The query string, as sent (None without one).
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Route {
    /// A 200 with a body of the given type.
    pub fn content(content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            stall: false,
            volatile: false,
            etag: None,
            requires: Vec::new(),
            delay: std::time::Duration::ZERO,
        }
    }

    pub fn html(body: impl Into<String>) -> Self {
        Self::content("text/html; charset=utf-8", body.into())
    }

    /// A bare status with a short text body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            ..Self::content("text/plain", format!("status {status}"))
        }
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        Self::status(status).header("location", location)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn etag(self, etag: &str) -> Self {
        Self {
            etag: Some(etag.into()),
            ..self.header("etag", etag)
        }
    }

    /// Answers only requests with header `name` set to exactly `value` (403 otherwise).
    pub fn require_header(mut self, name: &str, value: &str) -> Self {
        self.requires
            .push(Requirement::Header(name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Answers only requests sending the cookie `name=value` (403 otherwise).
    pub fn require_cookie(mut self, name: &str, value: &str) -> Self {
        self.requires
            .push(Requirement::Cookie(name.into(), value.into()));
        self
    }

    /// Answers only requests of this method (403 otherwise).
    pub fn require_method(mut self, method: &str) -> Self {
        self.requires.push(Requirement::Method(method.into()));
        self
    }

    /// Answers only requests with exactly this body (403 otherwise).
    pub fn require_body(mut self, body: impl Into<Bytes>) -> Self {
        self.requires.push(Requirement::Body(body.into()));
        self
    }

    pub fn stall_after_body(self) -> Self {
        Self {
            stall: true,
            ..self
        }
    }

    /// Answered `delay` after the request arrived (its hit is counted on arrival).
    pub fn delayed(self, delay: std::time::Duration) -> Self {
        Self { delay, ..self }
    }

    /// Different bytes on every request (the hit count appended), as a page with a clock.
    pub fn volatile(self) -> Self {
        Self {
            volatile: true,
            ..self
        }
    }

    /// `body` gzip-compressed, sent with `Content-Encoding: gzip`.
    pub fn gzip(content_type: &str, body: &[u8]) -> Self {
        Self::gzipped(content_type, gzip(body))
    }

    /// An already gzip-compressed body, sent with `Content-Encoding: gzip`.
    pub fn gzipped(content_type: &str, compressed: Bytes) -> Self {
        Self::content(content_type, compressed).header("content-encoding", "gzip")
    }
}

type Body = BoxBody<Bytes, Infallible>;

#[derive(Default)]
struct State {
    routes: Mutex<HashMap<String, Route>>,
    hits: Mutex<HashMap<String, u64>>,
    received: Mutex<HashMap<String, Vec<Received>>>,
}

impl State {
    /// The answer to a request, and how long to wait before sending it.
    fn respond(&self, req: &Parts, body: Bytes) -> (std::time::Duration, Response<Body>) {
        let path = req.uri.path().to_owned();
        let hit = {
            let mut hits = self.hits.lock().unwrap();
            let hit = hits.entry(path.clone()).or_default();
            *hit += 1;
            *hit
        };
        // A route registered with its query string (`/list?page=2`) wins over the bare path.
        let route = {
            let routes = self.routes.lock().unwrap();
            let with_query = req.uri.path_and_query().map(|pq| pq.as_str());
            with_query
                .and_then(|pq| routes.get(pq))
                .or_else(|| routes.get(&path))
                .cloned()
        };
        let met = route
            .as_ref()
            .is_none_or(|r| r.requires.iter().all(|need| need.met_by(req, &body)));
        self.received
            .lock()
            .unwrap()
            .entry(path)
            .or_default()
            .push(Received {
                method: req.method.to_string(),
                query: req.uri.query().map(str::to_owned),
                headers: req.headers.clone(),
                body,
                at: std::time::Instant::now(),
            });
        let mut route = match route {
            Some(_) if !met => Route::status(403),
            Some(route) => route,
            None => Route::status(404),
        };
        if route.volatile {
            route.body = [route.body, Bytes::from(format!("<!-- {hit} -->"))]
                .concat()
                .into();
        }
        let not_modified = route.etag.as_deref().is_some_and(|etag| {
            req.headers
                .get("if-none-match")
                .is_some_and(|v| v.as_bytes() == etag.as_bytes())
        });
        let (status, body) = if not_modified {
            (304, Full::new(Bytes::new()).boxed())
        } else if route.stall {
            let first = futures_util::stream::iter([Ok(Frame::data(route.body.clone()))]);
            let body = StreamBody::new(first.chain(futures_util::stream::pending()));
            (route.status, BodyExt::boxed(body))
        } else {
            (route.status, Full::new(route.body.clone()).boxed())
        };
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in &route.headers {
            response.headers_mut().append(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        (route.delay, response)
    }
}

/// A running site; stops when dropped.
pub struct Site {
    addr: SocketAddr,
    state: Arc<State>,
    server: JoinHandle<()>,
}

impl Site {
    /// Starts an empty site (every path 404) on 127.0.0.1 and a free port.
    pub async fn start() -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let server = tokio::spawn(serve(listener, Arc::clone(&state)));
        Site {
            addr,
            state,
            server,
        }
    }

    /// Serves `route` on `path`, which may carry a query string to tell apart pages that share
    /// a path (`/list?page=2`).
    pub fn route(&self, path: &str, route: Route) -> &Self {
        self.state
            .routes
            .lock()
            .unwrap()
            .insert(path.to_owned(), route);
        self
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests received for `path` (query strings ignored).
    pub fn hits(&self, path: &str) -> u64 {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub fn total_hits(&self) -> u64 {
        self.state.hits.lock().unwrap().values().sum()
    }

    /// The requests received for `path` (query strings ignored), oldest first.
    pub fn received(&self, path: &str) -> Vec<Received> {
        self.state
            .received
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve(listener: TcpListener, state: Arc<State>) {
    while let Ok((stream, _)) = listener.accept().await {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let state = Arc::clone(&state);
                async move {
                    let (parts, body) = req.into_parts();
                    // A body cut short is recorded as what arrived (nothing).
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let (delay, response) = state.respond(&parts, body);
                    tokio::time::sleep(delay).await;
                    Ok::<_, Infallible>(response)
                }
            });
            // Clients hanging up mid-response is part of the tests; nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn gzip(body: &[u8]) -> Bytes {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder.write_all(body).unwrap();
    encoder.finish().unwrap().into()
}

/// A gzip bomb: `BOMB_BYTES` of spaces in a few KiB (compressed once per test binary).
pub fn gzip_bomb() -> Bytes {
    static BOMB: OnceLock<Bytes> = OnceLock::new();
    BOMB.get_or_init(|| gzip(&vec![b' '; BOMB_BYTES])).clone()
}

/// Decompressed size of the gzip bomb: far past the caps the tests configure.
pub const BOMB_BYTES: usize = 16 * 1024 * 1024;
/// Body size of `/big.html`.
pub const BIG_BYTES: usize = 256 * 1024;

/// The standard site of the fetching tests, and a second site standing for an internal host
/// that the network guard must keep the crawler away from.
pub struct Fixture {
    pub site: Site,
    pub internal: Site,
}

pub const ROBOTS_TXT: &str =
    "User-agent: trawl\nDisallow: /private\nCrawl-delay: 2\n\nUser-agent: *\nDisallow: /\n";

pub async fn fixture() -> Fixture {
    let site = Site::start().await;
    let internal = Site::start().await;
    internal.route("/secret", Route::html("<p>internal</p>"));
    let other = internal.url("/secret");
    let metadata = "http://169.254.169.254/latest/meta-data/";
    site.route(
        "/index.html",
        Route::html(format!(
            r##"<!doctype html><html><head><title>index</title></head><body>
            <a href="page1.html">relative</a>
            <a href="{abs}">absolute</a>
            <a href="#section">fragment only</a>
            <a href="page1.html#part">duplicate with fragment</a>
            <a href="/page2.html?b=2&amp;a=1">query</a>
            <a href="http://offsite.example/away">off scope</a>
            <a href="{other}">internal host</a>
            <a href="{metadata}">metadata</a>
            <a href="/private/page.html">robots-disallowed</a>
            <a href="/page3.html" rel="nofollow">nofollow</a>
            </body></html>"##,
            abs = site.url("/page2.html"),
        )),
    )
    .route(
        "/base.html",
        Route::html(
            r#"<head><base href="/docs/"></head><a href="a.html">a</a><a href="../b.html">b</a>"#,
        ),
    )
    .route("/page1.html", Route::html("<p>page 1</p>"))
    .route("/page2.html", Route::html("<p>page 2</p>"))
    .route("/private/page.html", Route::html("<p>private</p>"))
    .route("/robots.txt", Route::content("text/plain", ROBOTS_TXT))
    .route("/redirect/1", Route::redirect(301, "/redirect/2"))
    .route("/redirect/2", Route::redirect(302, "3"))
    .route(
        "/redirect/3",
        Route::redirect(307, &site.url("/page1.html")),
    )
    .route("/to-private", Route::redirect(302, "/private/page.html"))
    .route("/loop/a", Route::redirect(302, "/loop/b"))
    .route("/loop/b", Route::redirect(302, "/loop/a"))
    .route("/to-internal", Route::redirect(302, &other))
    .route("/to-metadata", Route::redirect(302, metadata))
    .route(
        "/to-offsite",
        Route::redirect(301, "http://offsite.example/"),
    )
    .route("/missing", Route::status(404))
    .route("/gone", Route::status(410))
    .route("/error", Route::status(500))
    .route(
        "/unavailable",
        Route::status(503).header("retry-after", "120"),
    )
    .route("/throttled", Route::status(429).header("retry-after", "30"))
    .route(
        "/stall.html",
        Route::html("<html><body><p>the rest never comes").stall_after_body(),
    )
    .route("/big.html", Route::html("x".repeat(BIG_BYTES)))
    .route("/bomb.html", Route::gzipped("text/html", gzip_bomb()))
    .route(
        "/small-gzip.html",
        Route::gzip("text/html", b"<p>compressed page</p>"),
    )
    .route(
        "/doc.pdf",
        Route::content("application/pdf", &b"%PDF-1.4 tiny"[..]),
    )
    .route(
        "/image.png",
        Route::content("image/png", &b"\x89PNG\r\n\x1a\nfake"[..]),
    )
    .route("/etag.html", Route::html("<p>versioned</p>").etag("\"v1\""));
    Fixture { site, internal }
}
