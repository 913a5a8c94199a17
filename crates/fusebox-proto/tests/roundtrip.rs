//! The generated types encode and decode losslessly, the services carry the
//! names other languages will dial, and the embedded descriptor set is whole.

use fusebox_proto::v1::{
    auth_server, begin_response, breakers_server, cluster_server, ledger_server, policy_server,
    raft_server, tools_server, watch_event, BeginRequest, BeginResponse, BeginStarted, BreakerKey,
    BreakerState, BreakerView, Effect, ErrorCode, FuseboxErrorDetail, KillSwitch, NotLeaderDetail,
    RequestMeta, WatchEvent, WatchSnapshot, WindowCounts,
};
use prost::Message;

/// Encodes `message`, decodes it back, and asserts nothing was lost.
fn assert_roundtrip<M: Message + Default + PartialEq + std::fmt::Debug>(message: &M) {
    let bytes = message.encode_to_vec();
    let decoded = M::decode(bytes.as_slice()).expect("decode what was just encoded");
    assert_eq!(&decoded, message);
}

fn tool_key() -> BreakerKey {
    BreakerKey {
        namespace: "fleet-a".into(),
        server: "tax".into(),
        tool: Some("tax_lookup".into()),
        backend: None,
    }
}

#[test]
fn begin_request_roundtrips() {
    let request = BeginRequest {
        namespace: "fleet-a".into(),
        meta: Some(RequestMeta {
            caller: "agent-replica-7".into(),
            attributes: [("trace_id".to_string(), "abc123".to_string())].into(),
            request_id: "req-1".into(),
        }),
        key: "intent-42/refund/order-9".into(),
        fingerprint: vec![0xde, 0xad, 0xbe, 0xef],
        intent_id: "intent-42".into(),
        server: "payments".into(),
        tool: "refund".into(),
        target: "order-9".into(),
        effect: Effect::NonIdempotentWrite as i32,
        attempt_id: "attempt-1".into(),
        lease_ms: 30_000,
    };
    assert_roundtrip(&request);
    assert_eq!(request.effect(), Effect::NonIdempotentWrite);
}

#[test]
fn begin_response_oneof_roundtrips() {
    let response = BeginResponse {
        outcome: Some(begin_response::Outcome::Started(BeginStarted {
            attempt_id: "attempt-1".into(),
            takeover: true,
            lease_until_ms: 1_700_000_030_000,
            lease_clamped: true,
        })),
    };
    assert_roundtrip(&response);
}

#[test]
fn watch_event_snapshot_roundtrips() {
    let view = BreakerView {
        key: Some(tool_key()),
        state: BreakerState::Open as i32,
        generation: 3,
        open_until_ms: Some(1_700_000_018_000),
        live_probes: 0,
        concurrent_probes: 1,
        window: Some(WindowCounts {
            window_ms: 60_000,
            calls: 20,
            failures: 12,
            failure_reporters: 3,
            ..Default::default()
        }),
        changed_at_ms: 1_700_000_000_000,
        ..Default::default()
    };
    let event = WatchEvent {
        revision: 17,
        event: Some(watch_event::Event::Snapshot(WatchSnapshot {
            breakers: vec![view.clone()],
            policy: None,
            kill_switch: Some(KillSwitch {
                writes_blocked: true,
                reason: "incident 81".into(),
                actor: "oncall".into(),
                changed_at_ms: 1_699_999_000_000,
            }),
            disclosures: Vec::new(),
            last_chunk: true,
        })),
    };
    assert_roundtrip(&event);

    let change = WatchEvent {
        revision: 18,
        event: Some(watch_event::Event::Breaker(view)),
    };
    assert_roundtrip(&change);
}

#[test]
fn unset_optional_differs_from_empty() {
    let server_breaker = BreakerKey {
        tool: None,
        ..tool_key()
    };
    let empty_tool = BreakerKey {
        tool: Some(String::new()),
        ..tool_key()
    };
    let decoded_server = BreakerKey::decode(server_breaker.encode_to_vec().as_slice())
        .expect("decode server breaker key");
    let decoded_empty =
        BreakerKey::decode(empty_tool.encode_to_vec().as_slice()).expect("decode empty tool key");
    assert_eq!(decoded_server.tool, None);
    assert_eq!(decoded_empty.tool, Some(String::new()));
}

#[test]
fn error_detail_travels_in_status_details() {
    let detail = FuseboxErrorDetail {
        code: ErrorCode::NotLeader as i32,
        message: "not the leader; try node 2".into(),
        detail: Some(fusebox_proto::v1::fusebox_error_detail::Detail::NotLeader(
            NotLeaderDetail {
                leader_id: Some(2),
                leader_address: Some("10.0.0.2:7400".into()),
            },
        )),
    };
    let status = tonic::Status::with_details(
        tonic::Code::Unavailable,
        detail.message.clone(),
        detail.encode_to_vec().into(),
    );
    let decoded = FuseboxErrorDetail::decode(status.details()).expect("decode status details");
    assert_eq!(decoded, detail);
    assert_eq!(decoded.code(), ErrorCode::NotLeader);
}

#[test]
fn services_have_their_wire_names() {
    assert_eq!(breakers_server::SERVICE_NAME, "fusebox.v1.Breakers");
    assert_eq!(ledger_server::SERVICE_NAME, "fusebox.v1.Ledger");
    assert_eq!(policy_server::SERVICE_NAME, "fusebox.v1.Policy");
    assert_eq!(cluster_server::SERVICE_NAME, "fusebox.v1.Cluster");
    assert_eq!(raft_server::SERVICE_NAME, "fusebox.v1.Raft");
    assert_eq!(tools_server::SERVICE_NAME, "fusebox.v1.Tools");
    assert_eq!(auth_server::SERVICE_NAME, "fusebox.v1.Auth");
}

#[test]
fn descriptor_set_holds_every_file_and_service() {
    let set = prost_types::FileDescriptorSet::decode(fusebox_proto::FILE_DESCRIPTOR_SET)
        .expect("decode embedded descriptor set");
    let mut files: Vec<&str> = set.file.iter().map(|file| file.name()).collect();
    files.sort_unstable();
    assert_eq!(
        files,
        [
            "fusebox/v1/auth.proto",
            "fusebox/v1/breakers.proto",
            "fusebox/v1/cluster.proto",
            "fusebox/v1/common.proto",
            "fusebox/v1/ledger.proto",
            "fusebox/v1/policy.proto",
            "fusebox/v1/raft.proto",
            "fusebox/v1/tools.proto",
        ]
    );
    let mut services: Vec<&str> = set
        .file
        .iter()
        .flat_map(|file| file.service.iter().map(|service| service.name()))
        .collect();
    services.sort_unstable();
    assert_eq!(
        services,
        ["Auth", "Breakers", "Cluster", "Ledger", "Policy", "Raft", "Tools"]
    );
    assert!(
        set.file.iter().all(|file| file.package() == "fusebox.v1"),
        "every file is in package fusebox.v1"
    );
}
