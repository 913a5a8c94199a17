//! The ledger workload against etcd, for `fusebox bench etcd-ledger`.
//!
//! Per key: a transaction that puts `taken:<attempt>` only if the key was
//! never created (`create_revision == 0`, etcd's put-if-absent), then a put
//! of `done:<attempt>`; two Raft entries per key, as a Fusebox Begin and
//! Complete are. The few etcd v3 messages this needs are declared here (the
//! wire format of `etcdserverpb` in etcd's `rpc.proto`), so no etcd client
//! library or `protoc` is needed.

use crate::bench_cmd::Pair;
use crate::failure::Failure;
use std::time::Duration;
use tonic::client::Grpc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

/// How long one etcd call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// `etcdserverpb.Compare`, with only what a put-if-absent compares.
#[derive(Clone, PartialEq, prost::Message)]
struct Compare {
    /// `CompareResult` (`EQUAL` is 0).
    #[prost(int32, tag = "1")]
    result: i32,
    /// `CompareTarget` (`CREATE` is 1).
    #[prost(int32, tag = "2")]
    target: i32,
    #[prost(bytes = "vec", tag = "3")]
    key: Vec<u8>,
    /// One arm of the `target_union` oneof, so 0 is sent.
    #[prost(int64, optional, tag = "5")]
    create_revision: Option<i64>,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `etcdserverpb.RequestOp`, with its put arm only.
#[derive(Clone, PartialEq, prost::Message)]
struct RequestOp {
    #[prost(message, optional, tag = "2")]
    request_put: Option<PutRequest>,
}

/// `etcdserverpb.TxnRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    success: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse`, with only whether the compare held.
#[derive(Clone, PartialEq, prost::Message)]
struct TxnResponse {
    #[prost(bool, tag = "2")]
    succeeded: bool,
}

/// `etcdserverpb.PutResponse`; nothing in it is read.
#[derive(Clone, PartialEq, prost::Message)]
struct PutResponse {}

const COMPARE_EQUAL: i32 = 0;
const TARGET_CREATE: i32 = 1;

/// One connection to etcd.
#[derive(Clone)]
pub(crate) struct EtcdPair {
    grpc: Grpc<Channel>,
}

/// Opens `connections` connections spread over `endpoints` and returns
/// worker `w`'s pair maker.
pub(crate) async fn pairs(
    endpoints: &[String],
    connections: usize,
) -> anyhow::Result<impl Fn(usize) -> EtcdPair> {
    let mut channels = Vec::with_capacity(connections);
    for c in 0..connections {
        let endpoint = &endpoints[c % endpoints.len()];
        let uri = format!("http://{endpoint}");
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| Failure::bad_input(format!("etcd endpoint {endpoint:?}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .connect()
            .await
            .map_err(|e| {
                Failure::new(
                    crate::failure::ExitKind::Unavailable,
                    format!("etcd at {endpoint}: {e}"),
                )
            })?;
        channels.push(channel);
    }
    Ok(move |w: usize| EtcdPair {
        grpc: Grpc::new(channels[w % channels.len()].clone()),
    })
}

impl EtcdPair {
    async fn call<Req, Resp>(&mut self, path: &'static str, request: Req) -> Result<Resp, String>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc
            .ready()
            .await
            .map_err(|e| format!("{path}: not ready: {e}"))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        self.grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| format!("{path}: {:?}", s.code()))
    }
}

impl Pair for EtcdPair {
    async fn pair(&mut self, key: &str) -> Result<(), String> {
        let attempt = format!("{key}-a");
        let take = TxnRequest {
            compare: vec![Compare {
                result: COMPARE_EQUAL,
                target: TARGET_CREATE,
                key: key.as_bytes().to_vec(),
                create_revision: Some(0),
            }],
            success: vec![RequestOp {
                request_put: Some(PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: format!("taken:{attempt}").into_bytes(),
                }),
            }],
        };
        let taken: TxnResponse = self.call("/etcdserverpb.KV/Txn", take).await?;
        if !taken.succeeded {
            return Err("txn: key existed".into());
        }
        let done = PutRequest {
            key: key.as_bytes().to_vec(),
            value: format!("done:{attempt}").into_bytes(),
        };
        let _: PutResponse = self.call("/etcdserverpb.KV/Put", done).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn a_put_if_absent_sends_a_zero_create_revision() {
        let compare = Compare {
            result: COMPARE_EQUAL,
            target: TARGET_CREATE,
            key: b"k".to_vec(),
            create_revision: Some(0),
        };
        // target = 1 (field 2), key "k" (field 3), create_revision 0
        // (field 5, present because it is one arm of a oneof).
        assert_eq!(
            compare.encode_to_vec(),
            vec![0x10, 0x01, 0x1a, 0x01, b'k', 0x28, 0x00]
        );
    }
}
