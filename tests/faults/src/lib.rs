//! A fault-injecting HTTP proxy between the AWS SDK and moto: point the SDK's endpoint
//! (`AWS_ENDPOINT_URL`) at [`FaultProxy::endpoint`] and a given share of requests is answered
//! with a retryable error without reaching moto, and another share reaches moto (the write is
//! applied) but its response is lost — the connection closed before any answer, or the body cut
//! short. Everything else passes through unchanged.
//!
//! The fate of a request depends only on the seed and the request's number (1st, 2nd, … request
//! the proxy received), so a run with the same seed and the same order of requests meets the
//! same faults. Loopback only; used by the chaos tests and `make bench`, which check the
//! invariants of [`audit`] after each run. For the embedded backend, where no HTTP runs between
//! trawl and its storage, [`ports`] injects faults at the port traits instead, and [`local`]
//! runs a crawl through them. [`lambda`] runs the four Lambda functions' handlers through the
//! proxy, playing Lambda's event source mappings (duplicate deliveries included) and schedule.

// The layout of the crawler's turn futures, nested in these harnesses' own, is deeper than
// the default limit of 128 queries.
#![recursion_limit = "256"]

pub mod audit;
pub mod hosts_site;
pub mod lambda;
pub mod links;
pub mod local;
pub mod meter;
pub mod ports;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The shares of requests that meet a fault (each in 0..=1, their sum at most 1).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mix {
    /// Answered with a retryable error (throttling, throughput exceeded, 500, 503), not forwarded.
    pub errors: f64,
    /// Forwarded (and so applied), then the response lost: dropped or truncated.
    pub lost: f64,
}

impl Mix {
    /// No faults: every request passes through.
    pub const NONE: Mix = Mix {
        errors: 0.0,
        lost: 0.0,
    };
}

/// A fault the proxy injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `ThrottlingException` (S3: `SlowDown`).
    Throttling,
    /// `ProvisionedThroughputExceededException` (S3: `SlowDown`).
    ThroughputExceeded,
    /// A 500 `InternalError` (DynamoDB: `InternalServerError`).
    InternalError,
    /// A 503 `SlowDown` (DynamoDB and SQS: `ServiceUnavailable`).
    SlowDown,
    /// Forwarded, then the connection closed before any response.
    Dropped,
    /// Forwarded, then the response cut after its headers and half its body.
    Truncated,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::Throttling,
        Fault::ThroughputExceeded,
        Fault::InternalError,
        Fault::SlowDown,
        Fault::Dropped,
        Fault::Truncated,
    ];
    const ERRORS: [Fault; 4] = [
        Fault::Throttling,
        Fault::ThroughputExceeded,
        Fault::InternalError,
        Fault::SlowDown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttling => "throttling",
            Fault::ThroughputExceeded => "throughput_exceeded",
            Fault::InternalError => "internal_error",
            Fault::SlowDown => "slow_down",
            Fault::Dropped => "dropped",
            Fault::Truncated => "truncated",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether the request reached moto (and so was applied) before its response was lost.
    pub fn is_lost_response(self) -> bool {
        matches!(self, Fault::Dropped | Fault::Truncated)
    }
}

/// What the proxy has seen so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub requests: u64,
    /// Per fault, in the order of [`Fault::ALL`].
    pub injected: [u64; 6],
}

impl Counts {
    pub fn of(&self, fault: Fault) -> u64 {
        self.injected[fault.index()]
    }

    /// Requests answered with an error.
    pub fn errors(&self) -> u64 {
        Fault::ERRORS.iter().map(|f| self.of(*f)).sum()
    }

    /// Requests applied whose response was lost.
    pub fn lost(&self) -> u64 {
        self.of(Fault::Dropped) + self.of(Fault::Truncated)
    }
}

struct State {
    upstream: String,
    /// Where SQS requests go, when not to `upstream`.
    queue_upstream: Option<String>,
    seed: u64,
    mix: Mutex<Mix>,
    client: reqwest::Client,
    next: AtomicU64,
    injected: [AtomicU64; 6],
}

impl State {
    /// The fate of the `n`th request: a function of the seed, `n` and the mix only.
    fn fate(&self, n: u64) -> Option<Fault> {
        let mix = *self.mix.lock().unwrap_or_else(PoisonError::into_inner);
        let draw = splitmix64(self.seed ^ splitmix64(n));
        let share = (draw >> 11) as f64 / (1u64 << 53) as f64;
        let pick = splitmix64(draw) as usize;
        if share < mix.errors {
            Some(Fault::ERRORS[pick % Fault::ERRORS.len()])
        } else if share < mix.errors + mix.lost {
            Some(if pick.is_multiple_of(2) {
                Fault::Dropped
            } else {
                Fault::Truncated
            })
        } else {
            None
        }
    }
}

/// SplitMix64: a tiny, well-mixed hash, enough to spread request numbers over [0, 1).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A running proxy on 127.0.0.1; stops when dropped.
pub struct FaultProxy {
    endpoint: String,
    state: Arc<State>,
    server: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (`http://127.0.0.1:PORT`, moto), with `mix` from
    /// the first request on.
    pub async fn start(upstream: &str, seed: u64, mix: Mix) -> std::io::Result<FaultProxy> {
        Self::start_split(upstream, None, seed, mix).await
    }

    /// As [`FaultProxy::start`], with SQS requests sent to `queue_upstream`: a threaded moto for
    /// the queue beside a single-threaded one for DynamoDB and S3, whose conditional writes are
    /// then atomic while a long poll (which holds a single-threaded server for its whole wait)
    /// stalls nobody.
    pub async fn start_split(
        upstream: &str,
        queue_upstream: Option<&str>,
        seed: u64,
        mix: Mix,
    ) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        // No decompression, no proxy of its own: bytes pass through as they are. One connection
        // per request: a single-threaded moto serves one connection at a time, and would wait
        // on an idle pooled one while the next request queues on another.
        let client = trawl_core::fetch::http_client()
            .pool_max_idle_per_host(0)
            .no_proxy()
            .no_gzip()
            .no_brotli()
            .no_deflate()
            .build()
            .map_err(std::io::Error::other)?;
        let state = Arc::new(State {
            upstream: upstream.trim_end_matches('/').to_owned(),
            queue_upstream: queue_upstream.map(|u| u.trim_end_matches('/').to_owned()),
            seed,
            mix: Mutex::new(mix),
            client,
            next: AtomicU64::new(0),
            injected: Default::default(),
        });
        let server = tokio::spawn(serve(listener, Arc::clone(&state)));
        Ok(FaultProxy {
            endpoint,
            state,
            server,
        })
    }

    /// `http://127.0.0.1:PORT`: the endpoint to give the SDK.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Changes the mix for the requests from now on.
    pub fn set_mix(&self, mix: Mix) {
        *self
            .state
            .mix
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = mix;
    }

    pub fn counts(&self) -> Counts {
        let mut counts = Counts {
            requests: self.state.next.load(Ordering::Relaxed),
            injected: [0; 6],
        };
        for (n, injected) in counts.injected.iter_mut().zip(&self.state.injected) {
            *n = injected.load(Ordering::Relaxed);
        }
        counts
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

type Body = BoxBody<Bytes, std::io::Error>;

async fn serve(listener: TcpListener, state: Arc<State>) {
    while let Ok((stream, _)) = listener.accept().await {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let state = Arc::clone(&state);
                async move { handle(&state, request).await }
            });
            // A dropped response ends the connection with an error: that is the point.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers one request: an injected error, a lost response (an `Err` makes hyper close the
/// connection without answering), or moto's own answer.
async fn handle(
    state: &State,
    request: Request<Incoming>,
) -> Result<Response<Body>, std::io::Error> {
    let n = state.next.fetch_add(1, Ordering::Relaxed);
    let fate = state.fate(n);
    if let Some(fault) = fate {
        state.injected[fault.index()].fetch_add(1, Ordering::Relaxed);
    }
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    if let Some(fault) = fate.filter(|f| !f.is_lost_response()) {
        return Ok(error_response(Service::of(&parts.headers), fault));
    }
    let (status, headers, body) = forward(state, &parts, body).await?;
    match fate {
        Some(Fault::Dropped) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "response dropped by trawl-faults",
        )),
        Some(Fault::Truncated) => Ok(truncated(status, headers, body)),
        _ => Ok(respond(
            status,
            headers,
            Full::new(body).map_err(|e| match e {}).boxed(),
        )),
    }
}

/// Sends the request on to moto as it came, and reads the whole answer.
async fn forward(
    state: &State,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Result<(StatusCode, HeaderMap, Bytes), std::io::Error> {
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let mut headers = parts.headers.clone();
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    headers.remove(CONTENT_LENGTH);
    let upstream = match (&state.queue_upstream, Service::of(&parts.headers)) {
        (Some(queue), Service::Sqs) => queue,
        _ => &state.upstream,
    };
    let response = state
        .client
        .request(parts.method.clone(), format!("{upstream}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await
        .map_err(std::io::Error::other)?;
    let status = response.status();
    let mut headers = response.headers().clone();
    headers.remove(CONNECTION);
    headers.remove(CONTENT_LENGTH);
    headers.remove(hyper::header::TRANSFER_ENCODING);
    let body = response.bytes().await.map_err(std::io::Error::other)?;
    Ok((status, headers, body))
}

fn respond(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// The full length announced, half the body sent, then the connection cut.
fn truncated(status: StatusCode, mut headers: HeaderMap, body: Bytes) -> Response<Body> {
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len().max(1)));
    let half = body.slice(..body.len() / 2);
    let frames = stream::iter([
        Ok(Frame::data(half)),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "response truncated by trawl-faults",
        )),
    ]);
    respond(status, headers, StreamBody::new(frames).boxed())
}

/// Which AWS API a request is for, by its protocol: DynamoDB and SQS name their operation in
/// `x-amz-target` (JSON protocols); S3 is everything else (REST-XML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    DynamoDb,
    Sqs,
    S3,
}

impl Service {
    fn of(headers: &HeaderMap) -> Service {
        let target = headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if target.starts_with("DynamoDB") {
            Service::DynamoDb
        } else if target.starts_with("AmazonSQS") {
            Service::Sqs
        } else {
            Service::S3
        }
    }
}

/// The error each service sends for `fault`, in its own protocol.
fn error_response(service: Service, fault: Fault) -> Response<Body> {
    let (status, code) = match (service, fault) {
        (Service::S3, Fault::InternalError) => (500, "InternalError"),
        (Service::S3, _) => (503, "SlowDown"),
        (_, Fault::Throttling) => (400, "ThrottlingException"),
        (_, Fault::ThroughputExceeded) => (400, "ProvisionedThroughputExceededException"),
        (Service::DynamoDb, Fault::InternalError) => (500, "InternalServerError"),
        (_, Fault::InternalError) => (500, "InternalError"),
        (_, _) => (503, "ServiceUnavailable"),
    };
    let message = "injected by trawl-faults";
    let mut headers = HeaderMap::new();
    let body = match service {
        Service::S3 => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
                 <Message>{message}</Message><RequestId>trawl-faults</RequestId></Error>"
            )
        }
        Service::DynamoDb | Service::Sqs => {
            let namespace = if service == Service::Sqs {
                "com.amazonaws.sqs"
            } else {
                "com.amazonaws.dynamodb.v20120810"
            };
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-amz-json-1.0"),
            );
            if let Ok(value) = HeaderValue::from_str(&format!("{code};Sender")) {
                headers.insert("x-amzn-query-error", value);
            }
            format!(r#"{{"__type":"{namespace}#{code}","message":"{message}"}}"#)
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    respond(
        status,
        headers,
        Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(seed: u64, mix: Mix) -> State {
        State {
            upstream: String::new(),
            queue_upstream: None,
            seed,
            mix: Mutex::new(mix),
            client: trawl_core::fetch::http_client().build().unwrap(),
            next: AtomicU64::new(0),
            injected: Default::default(),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_faults_and_the_shares_hold() {
        let mix = Mix {
            errors: 0.10,
            lost: 0.05,
        };
        let (a, b) = (state(7, mix), state(7, mix));
        let fates: Vec<_> = (0..10_000).map(|n| a.fate(n)).collect();
        assert_eq!(fates, (0..10_000).map(|n| b.fate(n)).collect::<Vec<_>>());
        let errors = fates
            .iter()
            .flatten()
            .filter(|f| !f.is_lost_response())
            .count();
        let lost = fates
            .iter()
            .flatten()
            .filter(|f| f.is_lost_response())
            .count();
        assert!((900..1100).contains(&errors), "{errors}");
        assert!((400..600).contains(&lost), "{lost}");
        for fault in Fault::ALL {
            assert!(fates.contains(&Some(fault)), "{fault:?} never drawn");
        }
        let other = state(8, mix);
        assert_ne!(
            fates,
            (0..10_000).map(|n| other.fate(n)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn no_mix_no_faults() {
        let s = state(1, Mix::NONE);
        assert!((0..1_000).all(|n| s.fate(n).is_none()));
    }
}
