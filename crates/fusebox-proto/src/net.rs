//! How Fusebox's gRPC traffic reaches the network: real TCP, or a network
//! supplied by the embedder (the deterministic simulation runs every node
//! and replica over turmoil's simulated TCP).
//!
//! Every channel the server and the SDK open goes through [`Net::channel`],
//! and every listener through [`Net::bind`], so one value decides where all
//! of a process's connections go. Production uses [`Net::Tcp`].

use crate::tls::TlsConnector;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Channel, Endpoint, Uri};

/// How often an HTTP/2 connection is pinged.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long an unanswered ping may wait before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// One byte stream, in either direction.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// A connection of any network.
pub type BoxConn = Box<dyn Conn>;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A bound listener of any network.
pub trait Listener: Send + 'static {
    /// The next incoming connection and its peer's address.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>>;
    /// The address it is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// A network other than the machine's TCP stack.
pub trait Network: Send + Sync + 'static {
    /// Connects to `host:port`.
    fn connect(&self, host: String, port: u16) -> BoxFuture<'static, io::Result<BoxConn>>;
    /// Binds a listener on `addr`.
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>>;
}

/// Where connections go.
#[derive(Clone, Default)]
pub enum Net {
    /// The machine's TCP stack.
    #[default]
    Tcp,
    /// A network the embedder supplies.
    Custom(Arc<dyn Network>),
}

impl fmt::Debug for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Net::Tcp => f.write_str("Tcp"),
            Net::Custom(_) => f.write_str("Custom"),
        }
    }
}

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            // Small RPCs (votes, heartbeats, admissions) must not wait on
            // Nagle's algorithm.
            stream.set_nodelay(true)?;
            Ok((Box::new(stream) as BoxConn, peer))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// Pings every [`KEEPALIVE_INTERVAL`], gives up after [`KEEPALIVE_TIMEOUT`].
fn with_keepalive(endpoint: Endpoint) -> Endpoint {
    endpoint
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
}

/// An embedder's network must not let the wall clock in. h2 remembers a
/// stream it reset (a cancelled or timed-out call) for one second of
/// *wall-clock* time and drops late frames for it in silence; after that
/// second it answers each with a reset frame. Under a simulated network
/// that second is a different amount of simulated time on every run, so the
/// extra frames (and every latency drawn after them) made one seed play out
/// differently from run to run. Remembering none makes the answer the same
/// on every run: always a reset frame, which costs one small frame.
fn forget_reset_streams(endpoint: Endpoint) -> Endpoint {
    endpoint.http2_max_concurrent_reset_streams(0)
}

impl Net {
    /// A lazily connected channel to `endpoint`: nothing is dialed until the
    /// first call, and a broken connection is re-dialed on the next one.
    ///
    /// The connection is pinged every [`KEEPALIVE_INTERVAL`] (idle or not)
    /// and dropped when a ping goes unanswered for [`KEEPALIVE_TIMEOUT`]: a
    /// connection that silently stopped delivering (a half-open TCP
    /// connection, a peer that vanished) would otherwise hold every later
    /// call on it, and the channel would never dial again.
    pub fn channel(&self, endpoint: Endpoint) -> Channel {
        self.channel_tls(endpoint, None)
    }

    /// [`Net::channel`], speaking TLS when `tls` is given: the server's
    /// certificate is checked against `tls`'s CA, and `tls`'s own
    /// certificate is presented if the server asks.
    pub fn channel_tls(&self, endpoint: Endpoint, tls: Option<&TlsConnector>) -> Channel {
        let endpoint = self.tuned(endpoint);
        if let (Net::Tcp, None) = (self, tls) {
            return endpoint.tcp_nodelay(true).connect_lazy();
        }
        endpoint.connect_with_connector_lazy(self.connector(tls))
    }

    /// [`Net::channel_tls`], connected now: fails if the node cannot be
    /// reached or the handshake fails.
    pub async fn connect_tls(
        &self,
        endpoint: Endpoint,
        tls: Option<&TlsConnector>,
    ) -> Result<Channel, tonic::transport::Error> {
        let endpoint = self.tuned(endpoint);
        if let (Net::Tcp, None) = (self, tls) {
            return endpoint.tcp_nodelay(true).connect().await;
        }
        endpoint.connect_with_connector(self.connector(tls)).await
    }

    /// Dials over this network, then speaks TLS if `tls` is given.
    fn connector(
        &self,
        tls: Option<&TlsConnector>,
    ) -> impl tower::Service<
        Uri,
        Response = hyper_util::rt::TokioIo<BoxConn>,
        Error = io::Error,
        Future = impl Future<Output = io::Result<hyper_util::rt::TokioIo<BoxConn>>> + Send,
    > + Clone
           + Send
           + 'static {
        let (net, tls) = (self.clone(), tls.cloned());
        tower::service_fn(move |uri: Uri| {
            let (net, tls) = (net.clone(), tls.clone());
            async move {
                let host = uri.host().unwrap_or_default().to_owned();
                let default_port = if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                };
                let port = uri.port_u16().unwrap_or(default_port);
                let conn = net.dial(host.clone(), port).await?;
                let conn = match tls {
                    Some(tls) => tls.connect(&host, conn).await?,
                    None => conn,
                };
                Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(conn))
            }
        })
    }

    /// `endpoint` with this network's HTTP/2 settings.
    fn tuned(&self, endpoint: Endpoint) -> Endpoint {
        let endpoint = with_keepalive(endpoint);
        match self {
            Net::Tcp => endpoint,
            Net::Custom(_) => forget_reset_streams(endpoint),
        }
    }

    /// Opens one connection to `host:port`.
    async fn dial(&self, host: String, port: u16) -> io::Result<BoxConn> {
        match self {
            Net::Tcp => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let stream = tokio::net::TcpStream::connect((host, port)).await?;
                stream.set_nodelay(true)?;
                Ok(Box::new(stream))
            }
            Net::Custom(network) => network.connect(host, port).await,
        }
    }

    /// Binds a listener on `addr`.
    pub async fn bind(&self, addr: SocketAddr) -> io::Result<Box<dyn Listener>> {
        match self {
            Net::Tcp => {
                let listener = tokio::net::TcpListener::bind(addr).await?;
                Ok(Box::new(TcpListener(listener)))
            }
            Net::Custom(network) => network.bind(addr).await,
        }
    }
}
