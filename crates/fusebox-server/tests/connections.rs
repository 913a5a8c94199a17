//! A listener holds a bounded number of connections, per address and in
//! all, and closes one that sends nothing for its idle bound (issue 13,
//! item 8: 500 idle connections used to stay open, adding memory).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fusebox_proto::net::Net;
use fusebox_server::node::incoming::{incoming, Connections};
use futures::StreamExt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn connections_past_the_bound_are_closed_and_silent_ones_reaped() {
    let listener = Net::Tcp.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = Connections::bounded(16, 2, Duration::from_millis(400));
    let mut stream = incoming(listener, None, held.clone());
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(Ok(conn)) = stream.next().await {
            if tx.send(conn).await.is_err() {
                return;
            }
        }
    });

    let mut first = TcpStream::connect(addr).await.unwrap();
    let _second = TcpStream::connect(addr).await.unwrap();
    let mut third = TcpStream::connect(addr).await.unwrap();
    let mut a = rx.recv().await.unwrap();
    let _b = rx.recv().await.unwrap();
    assert_eq!(held.open(), 2);

    // The third, over the per-address bound, is closed at once.
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(2), third.read(&mut byte))
        .await
        .expect("closed, not left hanging");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err(),
        "the third connection was not handed to the server"
    );

    // A connection that speaks stays open past the idle bound...
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        first.write_all(b"x").await.unwrap();
        let n = a.read(&mut byte).await.unwrap();
        assert_eq!(n, 1);
    }
    // ...and one that falls silent is closed after it.
    let started = std::time::Instant::now();
    let reaped = tokio::time::timeout(Duration::from_secs(3), a.read(&mut byte))
        .await
        .expect("reaped within its idle bound");
    assert!(reaped.is_err(), "{reaped:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(a);
    assert_eq!(held.open(), 1, "a closed connection frees its slot");
    let _fourth = TcpStream::connect(addr).await.unwrap();
    let _d = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .expect("a freed slot admits the next connection")
        .unwrap();
}
