//! The gRPC server's incoming connections, from any [`Net`]'s listener,
//! in the clear or over TLS.
//!
//! tonic serves a stream of connections that can say who is on the other
//! end; [`Accepted`] wraps a connection of any network with its peer's
//! address and, over TLS, the identity its verified certificate names
//! ([`ConnInfo`], in every request's extensions).
//!
//! Connections are bounded ([`Connections`]): at most
//! [`CONNECTIONS_MAX`] per listener and [`CONNECTIONS_PER_ADDRESS_MAX`] from
//! one address, counted before any handshake; one more is closed at once.
//! A connection that sends nothing for [`CONNECTION_IDLE_MS`] is closed:
//! the server pings every client every 30 s and a live one answers, so only
//! peers that are dead or never spoke (a bare TCP connection) are reaped.
//!
//! [`Net`]: fusebox_proto::net::Net

use crate::limits::{
    CONNECTIONS_MAX, CONNECTIONS_PER_ADDRESS_MAX, CONNECTION_IDLE_MS, TLS_HANDSHAKES_IN_FLIGHT_MAX,
};
use fusebox_proto::net::{BoxConn, Listener};
use fusebox_proto::tls::{PeerIdentity, TlsAcceptor};
use futures::Stream;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// How long to wait after a failed accept before the next.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// One accepted connection, its addresses and who it is.
pub struct Accepted {
    conn: BoxConn,
    info: ConnInfo,
    /// Its place in the listener's count, freed when tonic drops it.
    slot: ConnSlot,
    /// When it is closed unless it sends something first.
    idle: Pin<Box<Sleep>>,
}

impl Accepted {
    fn new(conn: BoxConn, info: ConnInfo, slot: ConnSlot) -> Accepted {
        let idle = Box::pin(tokio::time::sleep(slot.held.idle));
        Accepted {
            conn,
            info,
            slot,
            idle,
        }
    }
}

/// The connections a listener holds, by address, and its bounds.
#[derive(Clone, Debug)]
pub struct Connections {
    held: Arc<Mutex<Held>>,
    total_max: usize,
    per_address_max: usize,
    idle: Duration,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_address: BTreeMap<IpAddr, usize>,
}

impl Default for Connections {
    /// [`CONNECTIONS_MAX`], [`CONNECTIONS_PER_ADDRESS_MAX`] and
    /// [`CONNECTION_IDLE_MS`].
    fn default() -> Self {
        Connections::bounded(
            CONNECTIONS_MAX,
            CONNECTIONS_PER_ADDRESS_MAX,
            Duration::from_millis(CONNECTION_IDLE_MS),
        )
    }
}

impl Connections {
    /// A count with these bounds (tests use small ones).
    pub fn bounded(total_max: usize, per_address_max: usize, idle: Duration) -> Connections {
        Connections {
            held: Arc::default(),
            total_max,
            per_address_max,
            idle,
        }
    }

    /// A slot for one more connection from `remote`, or `None` when the
    /// listener or that address holds its maximum.
    pub fn admit(&self, remote: SocketAddr) -> Option<ConnSlot> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let from_here = held.by_address.get(&remote.ip()).copied().unwrap_or(0);
        if held.total >= self.total_max || from_here >= self.per_address_max {
            tracing::warn!(%remote, total = held.total, from_address = from_here, "connection refused: too many open");
            return None;
        }
        held.total += 1;
        *held.by_address.entry(remote.ip()).or_insert(0) += 1;
        Some(ConnSlot {
            held: self.clone(),
            ip: remote.ip(),
        })
    }

    /// Connections open now, in all.
    pub fn open(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// One connection's place in its listener's count.
#[derive(Debug)]
pub struct ConnSlot {
    held: Connections,
    ip: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut held = self
            .held
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_address.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_address.remove(&self.ip);
            }
        }
    }
}

/// What a request knows of its connection (`request.extensions()`).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The other end's address.
    pub remote: SocketAddr,
    /// Who a verified client certificate names (TLS with client
    /// certificates only).
    pub identity: Option<Arc<PeerIdentity>>,
}

impl ConnInfo {
    /// The identity of the connection `request` came on, if verified.
    pub fn identity_of<T>(request: &tonic::Request<T>) -> Option<&PeerIdentity> {
        request
            .extensions()
            .get::<ConnInfo>()
            .and_then(|info| info.identity.as_deref())
    }
}

impl Connected for Accepted {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.conn).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    let next = Instant::now() + self.slot.held.idle;
                    self.idle.as_mut().reset(next);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match self.idle.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    tracing::debug!(remote = %self.info.remote, "idle connection closed");
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connection idle too long",
                    )))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.conn).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.conn).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.conn.is_write_vectored()
    }
}

/// Every connection `listener` accepts, as tonic serves them: in the clear
/// without `tls`, else once its handshake completed. Handshakes run
/// concurrently (at most [`TLS_HANDSHAKES_IN_FLIGHT_MAX`] at once, each
/// within its timeout), so a slow or silent client delays no one; a failed
/// one is logged and dropped.
pub fn incoming(
    listener: Box<dyn Listener>,
    tls: Option<TlsAcceptor>,
    held: Connections,
) -> Pin<Box<dyn Stream<Item = io::Result<Accepted>> + Send>> {
    match tls {
        None => Box::pin(futures::stream::unfold(
            (listener, held),
            |(mut listener, held)| async move {
                loop {
                    let next = match listener.accept().await {
                        Ok((conn, remote)) => match held.admit(remote) {
                            // Dropping the connection closes it.
                            None => continue,
                            Some(slot) => {
                                let info = ConnInfo {
                                    remote,
                                    identity: None,
                                };
                                Ok(Accepted::new(conn, info, slot))
                            }
                        },
                        Err(e) => Err(e),
                    };
                    return Some((next, (listener, held)));
                }
            },
        )),
        Some(tls) => {
            let (done, accepted) = mpsc::channel(TLS_HANDSHAKES_IN_FLIGHT_MAX);
            tokio::spawn(handshakes(listener, tls, held, done));
            Box::pin(futures::stream::unfold(
                accepted,
                |mut accepted| async move { accepted.recv().await.map(|next| (Ok(next), accepted)) },
            ))
        }
    }
}

/// Accepts connections and runs their handshakes until the server stops
/// taking them (the receiver is dropped).
async fn handshakes(
    mut listener: Box<dyn Listener>,
    tls: TlsAcceptor,
    held: Connections,
    done: mpsc::Sender<Accepted>,
) {
    let slots = Arc::new(Semaphore::new(TLS_HANDSHAKES_IN_FLIGHT_MAX));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (conn, remote) = tokio::select! {
            () = done.closed() => return,
            next = listener.accept() => match next {
                Ok(next) => next,
                Err(e) => {
                    // Out of descriptors, say: do not spin on it.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let Some(conn_slot) = held.admit(remote) else {
            continue;
        };
        let (tls, done) = (tls.clone(), done.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls.accept(conn).await {
                Ok((conn, identity)) => {
                    let info = ConnInfo {
                        remote,
                        identity: identity.map(Arc::new),
                    };
                    let _ = done.send(Accepted::new(conn, info, conn_slot)).await;
                }
                Err(e) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
            }
        });
    }
}
