//! turmoil's simulated TCP as a [`Network`] for Fusebox's channels and
//! listeners: every node and replica of a run talks over it, so partitions,
//! loss and latency apply to all of their traffic.

use fusebox_proto::net::{BoxConn, BoxFuture, Listener, Network};
use std::io;
use std::net::SocketAddr;

/// The simulated network (stateless: turmoil keeps the world).
#[derive(Clone, Copy, Debug, Default)]
pub struct SimNet;

struct SimListener(turmoil::net::TcpListener);

impl Listener for SimListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(BoxConn, SocketAddr)>> {
        Box::pin(async move {
            let (stream, peer) = self.0.accept().await?;
            Ok((Box::new(stream) as BoxConn, peer))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Network for SimNet {
    fn connect(&self, host: String, port: u16) -> BoxFuture<'static, io::Result<BoxConn>> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(format!("{host}:{port}")).await?;
            Ok(Box::new(stream) as BoxConn)
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = turmoil::net::TcpListener::bind(addr).await?;
            Ok(Box::new(SimListener(listener)) as Box<dyn Listener>)
        })
    }
}

/// The simulation's wall clock in Unix ms, offset by `skew_ms` (a node's or
/// replica's clock error); 0 outside a simulation.
pub fn sim_clock_ms(skew_ms: i64) -> u64 {
    let now = turmoil::since_epoch().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    now.saturating_add_signed(skew_ms)
}
