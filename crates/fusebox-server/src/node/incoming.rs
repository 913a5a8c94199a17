//! The gRPC server's incoming connections, from any [`Net`]'s listener.
//!
//! tonic serves a stream of connections that can say who is on the other
//! end; [`Accepted`] wraps a connection of any network with its peer's
//! address so that handlers still see `remote_addr`.
//!
//! [`Net`]: fusebox_proto::net::Net

use fusebox_proto::net::{BoxConn, Listener};
use futures::Stream;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// One accepted connection and its addresses.
pub struct Accepted {
    conn: BoxConn,
    local: Option<SocketAddr>,
    peer: SocketAddr,
}

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.local,
            remote_addr: Some(self.peer),
        }
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

/// Every connection `listener` accepts, as tonic serves them. A failed
/// accept is passed on; tonic logs it and keeps accepting.
pub fn incoming(listener: Box<dyn Listener>) -> impl Stream<Item = io::Result<Accepted>> {
    futures::stream::unfold(listener, |mut listener| async move {
        let local = listener.local_addr().ok();
        let next = listener
            .accept()
            .await
            .map(|(conn, peer)| Accepted { conn, local, peer });
        Some((next, listener))
    })
}
