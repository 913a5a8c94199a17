//! Shared by the tests that call a real node by raw bytes: a codec that
//! sends and receives bytes as they are, every method the protos declare,
//! and one node on loopback that requires auth, with its admin token.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use bytes::{Buf, BufMut, Bytes};
use fusebox_core::auth::Role;
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::{IssueTokenRequest, WhoAmIRequest};
use fusebox_server::auth::CallerLimits;
use fusebox_server::node::{start, NodeConfig, RunningNode};
use prost::Message;
use std::net::SocketAddr;
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

/// Raw bytes in, raw bytes out.
#[derive(Clone, Copy, Default)]
pub struct RawCodec;

pub struct RawEncoder;
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// One RPC the protos declare.
#[derive(Clone, Debug)]
pub struct Method {
    pub path: String,
    pub client_streaming: bool,
    pub server_streaming: bool,
}

/// Every method of every service in the descriptor set.
pub fn methods() -> Vec<Method> {
    let set = prost_types::FileDescriptorSet::decode(fusebox_proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut found = Vec::new();
    for file in &set.file {
        let package = file.package();
        for service in &file.service {
            for method in &service.method {
                found.push(Method {
                    path: format!("/{package}.{}/{}", service.name(), method.name()),
                    client_streaming: method.client_streaming(),
                    server_streaming: method.server_streaming(),
                });
            }
        }
    }
    assert!(found.len() > 30, "the descriptor set lists the API");
    found
}

pub struct Node {
    pub node: RunningNode,
    pub channel: Channel,
    pub admin: String,
    _dir: tempfile::TempDir,
}

/// One node on loopback that requires auth, with its first admin token.
pub async fn node() -> Node {
    node_with(CallerLimits::default()).await
}

/// [`node`] metering callers within `limits`.
pub async fn node_with(limits: CallerLimits) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::single_node();
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.peers = [(1, "127.0.0.1:0".to_owned())].into();
    config.http = None;
    config.data_dir = dir.path().join("data");
    config.init_auth = Some(dir.path().join("admin.token"));
    config.caller_limits = limits;
    let node = start(config).await.unwrap();
    let channel = Endpoint::from_shared(format!("http://{}", node.grpc_addr))
        .unwrap()
        .connect_lazy();
    let admin = std::fs::read_to_string(dir.path().join("admin.token"))
        .unwrap()
        .trim()
        .to_owned();
    // The leader issues the token once it leads.
    let started = std::time::Instant::now();
    loop {
        let mut request = Request::new(WhoAmIRequest::default());
        bearer(&mut request, &admin);
        if AuthClient::new(channel.clone())
            .who_am_i(request)
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "admin token never took effect"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Node {
        node,
        channel,
        admin,
        _dir: dir,
    }
}

pub fn bearer<T>(request: &mut Request<T>, token: &str) {
    let value: MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
}

pub async fn issue(node: &Node, name: &str, role: Role, namespaces: &[&str]) -> (String, String) {
    let mut request = Request::new(IssueTokenRequest {
        name: name.into(),
        role: role.name().into(),
        namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
        ..Default::default()
    });
    bearer(&mut request, &node.admin);
    let reply = AuthClient::new(node.channel.clone())
        .issue_token(request)
        .await
        .unwrap()
        .into_inner();
    (reply.token, reply.token_id)
}

/// Calls `path` with raw `body` bytes as `token`; the status code, and the
/// message of a refusal.
pub async fn call_raw(
    channel: &Channel,
    method: &Method,
    token: Option<&str>,
    body: Bytes,
) -> (Code, String) {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let mut request = Request::new(body);
    request.set_timeout(Duration::from_secs(10));
    if let Some(token) = token {
        bearer(&mut request, token);
    }
    let path = method.path.parse().unwrap();
    let answer = if method.client_streaming && method.server_streaming {
        // A pipeline answers its calls, or its bad input, on the stream:
        // read it to its end (it ends when the one message sent is done).
        match grpc.server_streaming(request, path, RawCodec).await {
            Ok(response) => {
                let mut replies = response.into_inner();
                loop {
                    match tokio::time::timeout(Duration::from_secs(10), replies.message()).await {
                        Ok(Ok(Some(_))) => continue,
                        Ok(Ok(None)) => break Ok(()),
                        Ok(Err(status)) => break Err(status),
                        Err(_) => panic!("{} still open 10 s after its input ended", method.path),
                    }
                }
            }
            Err(status) => Err(status),
        }
    } else if method.server_streaming {
        grpc.server_streaming(request, path, RawCodec)
            .await
            .map(|_| ())
    } else {
        grpc.unary(request, path, RawCodec).await.map(|_| ())
    };
    match answer {
        Ok(()) => (Code::Ok, String::new()),
        Err(status) => (status.code(), status.message().to_owned()),
    }
}
