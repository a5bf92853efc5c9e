//! `trawl demo`: serves a small generated site on 127.0.0.1 (an ephemeral port) and crawls it
//! with the embedded backend — trawl at work without touching anyone's server.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Pages of the demo site.
pub const DEMO_PAGES: usize = 200;
/// Longest request head read from a client.
const MAX_REQUEST: usize = 8 * 1024;

/// Page `i` (1-based) links to its neighbours and a few pages further away, so the crawl finds
/// every page from the index by following links.
fn page(i: usize) -> String {
    let links: String = [i + 1, i * 2, (i * 7) % DEMO_PAGES + 1, 1]
        .iter()
        .filter(|&&n| (1..=DEMO_PAGES).contains(&n) && n != i)
        .map(|n| format!(r#"<li><a href="/page/{n}.html">page {n}</a></li>"#))
        .collect();
    format!(
        "<!doctype html><html><head><title>demo page {i}</title></head><body><h1>Demo page {i}</h1>\
         <p>{}</p><ul>{links}</ul></body></html>",
        "trawl fetched this page politely, stored it, and followed its links. ".repeat(8)
    )
}

fn route(path: &str) -> Option<(&'static str, String)> {
    match path {
        "/" => Some((
            "text/html",
            r#"<a href="/page/1.html">start</a>"#.to_owned(),
        )),
        "/robots.txt" => Some(("text/plain", "User-agent: *\nAllow: /\n".to_owned())),
        _ => {
            let n: usize = path
                .strip_prefix("/page/")?
                .strip_suffix(".html")?
                .parse()
                .ok()?;
            (1..=DEMO_PAGES)
                .contains(&n)
                .then(|| ("text/html", page(n)))
        }
    }
}

async fn serve_one(mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let response = match route(path) {
        Some((content_type, body)) => format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
        None => {
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
        }
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Starts the demo site; returns its base URL. It serves until the process exits.
pub async fn start_site() -> std::io::Result<String> {
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").await?);
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Err(e) = serve_one(stream).await {
                    tracing::debug!(error = %e, "demo site connection");
                }
            });
        }
    });
    Ok(format!("http://{addr}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_is_reachable_from_the_index() {
        let mut seen = vec![false; DEMO_PAGES + 1];
        let mut todo = vec![1usize];
        while let Some(i) = todo.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            let html = page(i);
            for part in html.split("/page/").skip(1) {
                let n: usize = part.split('.').next().unwrap().parse().unwrap();
                todo.push(n);
            }
        }
        assert!(seen[1..].iter().all(|&s| s));
        assert!(route("/page/0.html").is_none());
        assert!(route(&format!("/page/{}.html", DEMO_PAGES + 1)).is_none());
    }
}
