//! The gRPC server's incoming connections, from any [`Net`]'s listener,
//! in the clear or over TLS.
//!
//! tonic serves a stream of connections that can say who is on the other
//! end; [`Accepted`] wraps a connection of any network with its peer's
//! address and, over TLS, the identity its verified certificate names
//! ([`ConnInfo`], in every request's extensions).
//!
//! [`Net`]: fusebox_proto::net::Net

use crate::limits::TLS_HANDSHAKES_IN_FLIGHT_MAX;
use fusebox_proto::net::{BoxConn, Listener};
use fusebox_proto::tls::{PeerIdentity, TlsAcceptor};
use futures::Stream;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, Semaphore};
use tonic::transport::server::Connected;

/// How long to wait after a failed accept before the next.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// One accepted connection, its addresses and who it is.
pub struct Accepted {
    conn: BoxConn,
    info: ConnInfo,
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
        Pin::new(&mut self.conn).poll_read(cx, buf)
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
) -> Pin<Box<dyn Stream<Item = io::Result<Accepted>> + Send>> {
    match tls {
        None => Box::pin(futures::stream::unfold(
            listener,
            |mut listener| async move {
                let next = listener.accept().await.map(|(conn, remote)| Accepted {
                    conn,
                    info: ConnInfo {
                        remote,
                        identity: None,
                    },
                });
                Some((next, listener))
            },
        )),
        Some(tls) => {
            let (done, accepted) = mpsc::channel(TLS_HANDSHAKES_IN_FLIGHT_MAX);
            tokio::spawn(handshakes(listener, tls, done));
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
        let (tls, done) = (tls.clone(), done.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls.accept(conn).await {
                Ok((conn, identity)) => {
                    let info = ConnInfo {
                        remote,
                        identity: identity.map(Arc::new),
                    };
                    let _ = done.send(Accepted { conn, info }).await;
                }
                Err(e) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
            }
        });
    }
}
