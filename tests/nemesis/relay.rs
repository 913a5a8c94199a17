//! A delaying TCP relay: the kernel here has no `tc netem`, so delay is
//! added by a relay in front of each node. Every node advertises its
//! relay's address, so all traffic to it (Raft from its peers, requests
//! from clients and forwarded by followers) goes through the relay, which
//! holds each chunk of bytes, either way, for the delay set when it
//! arrived. The relay runs in the node's namespace, so the iptables faults
//! there still see each peer's own address.
//!
//! The delay comes from a file holding milliseconds, re-read every 100 ms.
//! The relay exits by itself once the test process that started it is gone.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

/// Most connections relayed at once; more wait to be accepted.
const CONNECTIONS_MAX: usize = 512;
/// Largest chunk read at once.
const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks held per direction of a connection (at most 8 MiB in flight).
const CHUNKS_HELD_MAX: usize = 128;
/// The longest delay taken from the file.
pub const DELAY_MS_MAX: u64 = 10_000;
/// How long dialing the node may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Where a relay listens, where it forwards, and what it watches.
#[derive(Clone, Debug)]
pub struct RelaySpec {
    /// The advertised address.
    pub listen: SocketAddr,
    /// The node's own listener.
    pub to: SocketAddr,
    /// Holds the delay in ms, each way.
    pub delay_file: PathBuf,
    /// The relay exits once this process is gone.
    pub parent: Option<u32>,
}

/// The delay a file holds; missing or malformed is none.
fn delay_in(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map_or(0, |ms| ms.min(DELAY_MS_MAX))
}

/// Runs the relay until its parent is gone.
pub async fn serve(spec: RelaySpec) -> Result<()> {
    let listener = TcpListener::bind(spec.listen)
        .await
        .with_context(|| format!("binding {}", spec.listen))?;
    let delay = Arc::new(AtomicU64::new(delay_in(&spec.delay_file)));
    let watched = delay.clone();
    let (file, parent) = (spec.delay_file.clone(), spec.parent);
    tokio::spawn(async move {
        loop {
            watched.store(delay_in(&file), Ordering::Relaxed);
            if parent.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                std::process::exit(0);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    accept_loop(listener, spec.to, delay).await
}

/// Relays every connection `listener` accepts to `to`.
pub async fn accept_loop(
    listener: TcpListener,
    to: SocketAddr,
    delay: Arc<AtomicU64>,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = slots.clone().acquire_owned().await?;
        let (inbound, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let delay = delay.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(Ok(outbound)) = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(to)).await
            else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            let there = pipe(in_read, out_write, delay.clone());
            let back = pipe(out_read, in_write, delay);
            // Either side closing ends the connection both ways.
            tokio::select! {
                () = there => {}
                () = back => {}
            }
        });
    }
}

/// Copies `from` to `to`, each chunk held for the delay set when it was read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Arc<AtomicU64>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_HELD_MAX);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let due = Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
            let chunk = buf.get(..n).map(<[u8]>::to_vec).unwrap_or_default();
            if tx.send((due, chunk)).await.is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    // The writer drains what the reader queued before the reader ended.
    let (_, ()) = tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip(client: &mut TcpStream) -> Duration {
        let started = std::time::Instant::now();
        client.write_all(b"ping").await.expect("write");
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping");
        started.elapsed()
    }

    #[tokio::test]
    async fn holds_bytes_for_the_delay_each_way() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        let echo_addr = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let relay = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let relay_addr = relay.local_addr().expect("addr");
        let delay = Arc::new(AtomicU64::new(0));
        tokio::spawn(accept_loop(relay, echo_addr, delay.clone()));

        let mut client = TcpStream::connect(relay_addr).await.expect("connect");
        let fast = round_trip(&mut client).await;
        delay.store(150, Ordering::Relaxed);
        let slow = round_trip(&mut client).await;
        // Held 150 ms there and 150 ms back.
        assert!(slow >= Duration::from_millis(300), "{slow:?}");
        assert!(fast < Duration::from_millis(300), "{fast:?}");
    }

    #[test]
    fn the_delay_file_is_bounded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("delay");
        assert_eq!(delay_in(&file), 0);
        std::fs::write(&file, "250\n").expect("write");
        assert_eq!(delay_in(&file), 250);
        std::fs::write(&file, "999999999").expect("write");
        assert_eq!(delay_in(&file), DELAY_MS_MAX);
        std::fs::write(&file, "-5").expect("write");
        assert_eq!(delay_in(&file), 0);
    }
}
