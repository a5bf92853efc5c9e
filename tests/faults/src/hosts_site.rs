//! A site of many hosts on loopback: `127.0.0.1`, `127.0.0.2`, … on one port are distinct hosts
//! to trawl (a host is its name and port), all served by this process. What each host answers
//! is a function of (host index, path); every request is recorded with its host and time, so a
//! run can say how fast each host was fetched.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What a host answers for a path: a body (HTML, or plain text for `/robots.txt`), or None
/// for a 404.
pub type Pages = Arc<dyn Fn(usize, &str) -> Option<String> + Send + Sync>;

/// The site; stops serving when dropped.
pub struct HostsSite {
    pub port: u16,
    pub hosts: usize,
    requests: Arc<Mutex<Vec<(usize, String, Instant)>>>,
    servers: Vec<JoinHandle<()>>,
}

impl HostsSite {
    /// Serves `hosts` hosts (at most 254 × 254) with `pages`.
    pub async fn start(hosts: usize, pages: Pages) -> std::io::Result<HostsSite> {
        let first = TcpListener::bind("127.0.0.1:0").await?;
        let port = first.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let mut servers = Vec::with_capacity(hosts);
        let mut listener = Some(first);
        for host in 0..hosts {
            let listener = match listener.take() {
                Some(first) => first,
                None => TcpListener::bind((ip(host), port)).await?,
            };
            let (pages, requests) = (pages.clone(), requests.clone());
            servers.push(tokio::spawn(async move {
                while let Ok((socket, _)) = listener.accept().await {
                    let (pages, requests) = (pages.clone(), requests.clone());
                    tokio::spawn(answer(socket, host, pages, requests));
                }
            }));
        }
        Ok(HostsSite {
            port,
            hosts,
            requests,
            servers,
        })
    }

    /// The host key of host `i` (as trawl names hosts: address and port).
    pub fn host(&self, i: usize) -> String {
        format!("{}:{}", ip(i), self.port)
    }

    /// The URL of `path` on host `i`.
    pub fn url(&self, i: usize, path: &str) -> String {
        format!("http://{}{path}", self.host(i))
    }

    /// Requests received so far: (host index, path, when).
    pub fn requests(&self) -> Vec<(usize, String, Instant)> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for HostsSite {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
    }
}

/// The loopback address of host `i`: 127.0.0.1, 127.0.0.2, … 127.0.1.1, …
pub fn ip(i: usize) -> std::net::Ipv4Addr {
    let (high, low) = (i / 254, i % 254 + 1);
    std::net::Ipv4Addr::new(127, 0, (high % 256) as u8, low as u8)
}

async fn answer(
    mut socket: tokio::net::TcpStream,
    host: usize,
    pages: Pages,
    requests: Arc<Mutex<Vec<(usize, String, Instant)>>>,
) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let path = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_owned();
    requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((host, path.clone(), Instant::now()));
    let (status, content_type, body) = match pages(host, &path) {
        Some(body) if path == "/robots.txt" => ("200 OK", "text/plain", body),
        Some(body) => ("200 OK", "text/html", body),
        None => ("404 Not Found", "text/plain", "not found".to_owned()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(reply.as_bytes()).await;
    let _ = socket.shutdown().await;
}
