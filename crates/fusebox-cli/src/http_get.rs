//! A plain HTTP/1.0 GET of a node's metrics listener (`/metrics`,
//! `/healthz`, `/readyz`), bounded in size, with no HTTP client crate.

use anyhow::Context as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What a GET answered: the status code and the body.
pub(crate) struct Page {
    /// The status line's code (200, 503, ...).
    pub status: u16,
    /// The body, lossily decoded.
    pub body: String,
}

/// GETs `path` from `addr` (`HOST:PORT`), reading at most `max_bytes`.
/// A listener on the unspecified address (`0.0.0.0:7680`, as a container
/// is configured) is asked on loopback.
pub(crate) async fn get(addr: &str, path: &str, max_bytes: usize) -> anyhow::Result<Page> {
    let target = match addr.strip_prefix("0.0.0.0:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => addr.to_owned(),
    };
    let mut stream = tokio::net::TcpStream::connect(&target)
        .await
        .with_context(|| format!("connecting to {target}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream
        .take(max_bytes as u64)
        .read_to_end(&mut raw)
        .await
        .with_context(|| format!("reading {path} from {target}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .with_context(|| format!("{target}{path} did not answer HTTP"))?;
    Ok(Page {
        status,
        body: body.to_owned(),
    })
}
