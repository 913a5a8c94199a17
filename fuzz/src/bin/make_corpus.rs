//! Writes the seed corpus (`fuzz/corpus/<target>/`) from the examples the
//! tests and docs use: the example policies, a disclosure block with the
//! spec's numbers, a `tools/list`, one request of each RPC, Raft messages
//! and stored values, a snapshot of a state those requests built, and the
//! embedded node config.
//!
//! Run from `fuzz/`: `cargo run --release --bin make_corpus`. Seeds are
//! named by what they hold; running it again rewrites them identically.

use fusebox_api::raft_codec::to_bytes;
use fusebox_api::NodeConfig;
use fusebox_fuzz::{apply, fresh_state, START_MS};
use fusebox_proto::v1 as pb;
use fusebox_raft_store::codec::encode;
use fusebox_raft_store::{
    Entry, LogId, Member, Request, SnapshotMeta, StoredMembership, TypeConfig, Vote,
};
use openraft::entry::RaftEntry;
use openraft::raft::{AppendEntriesRequest, StreamAppendResult, VoteRequest};
use openraft::Membership;
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

const POLICIES: &str = "../examples/policies";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Path::new("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let dir = corpus.join(target);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(name), bytes)
    };

    // Policy documents: every example, as its own format (first byte 0 TOML, 1 YAML).
    let mut policy_toml = String::new();
    let mut names: Vec<_> = fs::read_dir(POLICIES)?.collect::<Result<_, _>>()?;
    names.sort_by_key(|e| e.file_name());
    for entry in names {
        let path = entry.path();
        let text = fs::read_to_string(&path)?;
        let yaml = path.extension().is_some_and(|e| e == "yaml");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        write(
            "policy_document",
            &name,
            &[&[u8::from(yaml)], text.as_bytes()].concat(),
        )?;
        if name == "tax_lookup.toml" {
            policy_toml = text;
        }
    }

    // A disclosure block: the spec's section 3 numbers.
    let block = serde_json::json!({
        "version": "1.0", "observed_at": "2026-11-30T12:00:00Z", "measurement_window_days": 7,
        "sample_size": 12483, "region": "us-east-1", "p50_ms": 180, "p95_ms": 720,
        "p99_ms": 1850, "cold_start_ms": 1200, "timeout_ms": 30000, "idempotent": true,
        "retry_safe": true, "streaming": false, "time_to_first_byte_ms": null,
        "degradation_modes": [{"trigger": "queue_depth>50", "behavior": "queue and serve",
                               "expected_p95_ms": 4500}],
        "methodology_url": "https://example.com/latency-methodology"
    });
    write(
        "latency_disclosure",
        "spec_block.json",
        block.to_string().as_bytes(),
    )?;
    write("latency_disclosure", "date_only.txt", b"2026-04-22")?;

    // A tools/list response: hints, a disclosure, a bare tool.
    let tools_list = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "lookup_rate", "annotations": {"readOnlyHint": true, "openWorldHint": false,
                                                 "latencyDisclosure": block}},
        {"name": "file_return", "annotations": {"destructiveHint": true, "idempotentHint": false}},
        {"name": "bare"}
    ]}});
    write(
        "tools_list",
        "json_rpc_response.json",
        tools_list.to_string().as_bytes(),
    )?;

    // One request of each RPC, framed as grpc_requests reads them.
    let ns = "fleet";
    let meta = || Some(pb::RequestMeta::default());
    let key = |tool: Option<&str>| pb::BreakerKey {
        namespace: ns.into(),
        server: "payments".into(),
        tool: tool.map(Into::into),
        backend: None,
    };
    let outcome = |class: pb::OutcomeClass| pb::Outcome {
        server: "payments".into(),
        tool: "charge".into(),
        class: class as i32,
        duration_ms: 4_000,
        ..Default::default()
    };
    let requests: Vec<(u8, Vec<u8>)> = vec![
        (
            13,
            pb::ApplyPolicyRequest {
                namespace: ns.into(),
                meta: meta(),
                document: policy_toml.clone(),
                format: pb::PolicyFormat::Toml as i32,
                actor: "ops".into(),
                reason: "seed".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            12,
            pb::ImportToolsRequest {
                namespace: ns.into(),
                meta: meta(),
                server: "payments".into(),
                tools: vec![pb::ManifestTool {
                    tool: "charge".into(),
                    destructive_hint: Some(true),
                    idempotent_hint: Some(false),
                    latency_disclosure_json: Some(block.to_string()),
                    ..Default::default()
                }],
                actor: "ops".into(),
            }
            .encode_to_vec(),
        ),
        (
            0,
            pb::ReportOutcomesRequest {
                namespace: ns.into(),
                meta: meta(),
                replica_id: "agent-1".into(),
                batch_seq: 1,
                outcomes: vec![
                    outcome(pb::OutcomeClass::Timeout),
                    outcome(pb::OutcomeClass::Timeout),
                    outcome(pb::OutcomeClass::ToolError),
                    outcome(pb::OutcomeClass::Success),
                ],
            }
            .encode_to_vec(),
        ),
        (
            1,
            pb::AcquireProbeRequest {
                namespace: ns.into(),
                meta: meta(),
                key: Some(key(Some("charge"))),
                replica_id: "agent-2".into(),
                lease_ms: Some(2_000),
            }
            .encode_to_vec(),
        ),
        (
            2,
            pb::ReleaseProbeRequest {
                namespace: ns.into(),
                meta: meta(),
                key: Some(key(Some("charge"))),
                permit_id: "1".into(),
                generation: 1,
                outcome: pb::OutcomeClass::Success as i32,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            3,
            pb::ForceOpenRequest {
                namespace: ns.into(),
                meta: meta(),
                key: Some(key(None)),
                reason: "incident".into(),
                duration_ms: Some(60_000),
                actor: "ops".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            4,
            pb::ResetBreakerRequest {
                namespace: ns.into(),
                meta: meta(),
                key: Some(key(None)),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            7,
            pb::BeginRequest {
                namespace: ns.into(),
                meta: meta(),
                key: "order-17".into(),
                fingerprint: vec![1, 2, 3],
                intent_id: "intent-1".into(),
                server: "payments".into(),
                tool: "charge".into(),
                target: "acct-9".into(),
                effect: pb::Effect::NonIdempotentWrite as i32,
                attempt_id: "a1".into(),
                lease_ms: 30_000,
            }
            .encode_to_vec(),
        ),
        (
            9,
            pb::RenewRequest {
                namespace: ns.into(),
                meta: meta(),
                key: "order-17".into(),
                attempt_id: "a1".into(),
                lease_ms: 30_000,
            }
            .encode_to_vec(),
        ),
        (
            8,
            pb::CompleteRequest {
                namespace: ns.into(),
                meta: meta(),
                key: "order-17".into(),
                attempt_id: "a1".into(),
                outcome: Some(pb::complete_request::Outcome::Ambiguous(Default::default())),
            }
            .encode_to_vec(),
        ),
        (
            23,
            pb::PipelineRequest {
                calls: vec![
                    pb::PipelinedCall {
                        id: 1,
                        timeout_ms: 500,
                        call: Some(pb::pipelined_call::Call::Begin(pb::BeginRequest {
                            namespace: ns.into(),
                            key: "order-18".into(),
                            fingerprint: vec![4],
                            intent_id: "intent-2".into(),
                            server: "payments".into(),
                            tool: "charge".into(),
                            effect: pb::Effect::IdempotentWrite as i32,
                            attempt_id: "a1".into(),
                            lease_ms: 30_000,
                            ..Default::default()
                        })),
                    },
                    pb::PipelinedCall {
                        id: 2,
                        timeout_ms: 0,
                        call: Some(pb::pipelined_call::Call::Complete(pb::CompleteRequest {
                            namespace: ns.into(),
                            key: "order-18".into(),
                            attempt_id: "a1".into(),
                            outcome: Some(pb::complete_request::Outcome::Ambiguous(
                                Default::default(),
                            )),
                            ..Default::default()
                        })),
                    },
                ],
            }
            .encode_to_vec(),
        ),
        (
            10,
            pb::ResolveRequest {
                namespace: ns.into(),
                meta: meta(),
                key: "order-17".into(),
                decision: pb::ResolutionDecision::Done as i32,
                operation_id: Some("op-1".into()),
                actor: "ops".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            11,
            pb::ListRecordsRequest {
                namespace: ns.into(),
                meta: meta(),
                tool: Some("charge".into()),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            15,
            pb::SetKillSwitchRequest {
                namespace: ns.into(),
                meta: meta(),
                writes_blocked: true,
                reason: "incident".into(),
                actor: "ops".into(),
            }
            .encode_to_vec(),
        ),
        (
            14,
            pb::RollbackPolicyRequest {
                namespace: ns.into(),
                meta: meta(),
                version: 1,
                actor: "ops".into(),
                reason: "undo".into(),
            }
            .encode_to_vec(),
        ),
        (
            17,
            pb::IssueTokenRequest {
                meta: meta(),
                name: "fleet-agents".into(),
                role: "agent".into(),
                namespaces: vec![ns.into()],
                ttl_ms: 86_400_000,
            }
            .encode_to_vec(),
        ),
        (
            18,
            pb::GrantRequest {
                meta: meta(),
                name: "oncall".into(),
                role: "operator".into(),
                namespaces: vec!["*".into()],
            }
            .encode_to_vec(),
        ),
        (
            21,
            pb::SetAuthEnabledRequest {
                meta: meta(),
                enabled: true,
            }
            .encode_to_vec(),
        ),
        (
            19,
            pb::RevokeTokenRequest {
                meta: meta(),
                token_id: "0123456789abcdef".into(),
            }
            .encode_to_vec(),
        ),
        (
            20,
            pb::RemovePrincipalRequest {
                meta: meta(),
                name: "oncall".into(),
            }
            .encode_to_vec(),
        ),
        (
            16,
            pb::DeleteNamespaceRequest {
                namespace: "other".into(),
                meta: meta(),
                actor: "ops".into(),
                reason: "gone".into(),
            }
            .encode_to_vec(),
        ),
    ];
    let mut sequence = Vec::new();
    for (rpc, message) in &requests {
        let frame = [
            &[*rpc, 10][..],
            &u16::try_from(message.len())?.to_le_bytes(),
            message,
        ]
        .concat();
        write("grpc_requests", &format!("rpc_{rpc:02}"), &frame)?;
        sequence.extend_from_slice(&frame);
    }
    write("grpc_requests", "every_rpc_in_turn", &sequence)?;
    // The pipeline's bytes read the other way too: replies as a client gets them.
    let replies = pb::PipelineResponse {
        replies: vec![
            pb::PipelinedReply {
                id: 1,
                result: Some(pb::pipelined_reply::Result::Error(pb::CallStatus {
                    code: tonic::Code::FailedPrecondition as i32,
                    message: "stale".into(),
                    details: vec![1, 2],
                })),
                leader_address: String::new(),
            },
            pb::PipelinedReply {
                id: 2,
                result: Some(pb::pipelined_reply::Result::Complete(
                    pb::CompleteResponse::default(),
                )),
                leader_address: "10.0.0.2:7100".into(),
            },
        ],
    }
    .encode_to_vec();
    let frame = [
        &[23, 10][..],
        &u16::try_from(replies.len())?.to_le_bytes(),
        &replies,
    ]
    .concat();
    write("grpc_requests", "pipeline_replies", &frame)?;

    // Log entries carrying commands, and the state they build.
    let log_id = |term, index| openraft::testing::log_id::<TypeConfig>(term, 1, index);
    let membership = Membership::new(
        vec![BTreeSet::from([1, 2, 3])],
        BTreeMap::from([
            (1, Member::new("10.0.0.1:7000", "10.0.0.1:7100")),
            (2, Member::new("10.0.0.2:7000", "10.0.0.2:7100")),
            (3, Member::shared("10.0.0.3:7000")),
        ]),
    )?;
    let mut entries = vec![
        Entry::new_blank(log_id(1, 1)),
        Entry::new_membership(log_id(1, 2), membership.clone()),
    ];
    let mut state = fresh_state();
    let caller = fusebox_api::Caller::open();
    let mut at_ms = START_MS;
    for (rpc, message) in &requests {
        at_ms += 1_000;
        let Some(command) = command(*rpc, message, &caller) else {
            continue;
        };
        apply(&mut state, command.clone(), at_ms);
        let index = entries.len() as u64 + 1;
        entries.push(Entry::new_normal(
            log_id(2, index),
            Request::new(at_ms, command),
        ));
    }
    for (i, entry) in entries.iter().enumerate() {
        write(
            "raft_stored_value",
            &format!("entry_{i:02}"),
            &[&[0][..], &encode("entry", entry)?].concat(),
        )?;
    }
    let vote = Vote::new_committed(2, 1);
    let committed: Option<LogId> = Some(log_id(2, 9));
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(2, 9)),
        last_membership: StoredMembership::new(Some(log_id(1, 2)), membership),
    };
    write(
        "raft_stored_value",
        "vote",
        &[&[1][..], &encode("vote", &vote)?].concat(),
    )?;
    write(
        "raft_stored_value",
        "committed",
        &[&[2][..], &encode("committed", &committed)?].concat(),
    )?;
    write(
        "raft_stored_value",
        "snapshot_meta",
        &[&[3][..], &encode("meta", &meta)?].concat(),
    )?;
    write("snapshot", "seeded_state", &state.snapshot()?)?;
    write("snapshot", "empty_state", &fresh_state().snapshot()?)?;

    // Raft messages, each in its envelope (first byte: which message).
    let header = Some(pb::RaftHeader {
        cluster_id: "fuzz".into(),
        term: 0,
        from_node_id: 2,
        to_node_id: 1,
        codec_version: fusebox_api::raft_codec::CODEC_VERSION,
    });
    let envelope = |which: u8, payload: Vec<u8>| {
        [
            &[which][..],
            &pb::RaftMessage {
                header: header.clone(),
                payload,
            }
            .encode_to_vec(),
        ]
        .concat()
    };
    let append = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        entries,
        leader_commit: committed,
    };
    write(
        "raft_message",
        "append_entries",
        &envelope(0, to_bytes(&append)?),
    )?;
    write(
        "raft_message",
        "vote_request",
        &envelope(
            1,
            to_bytes(&VoteRequest::<TypeConfig>::new(vote, committed))?,
        ),
    )?;
    write(
        "raft_message",
        "snapshot_vote",
        &envelope(3, to_bytes(&vote)?),
    )?;
    write(
        "raft_message",
        "snapshot_meta",
        &envelope(4, to_bytes(&meta)?),
    )?;
    let streamed: StreamAppendResult<TypeConfig> = Ok(committed);
    write(
        "raft_message",
        "stream_append_answer",
        &envelope(6, to_bytes(&streamed)?),
    )?;

    // Node configs: the embedded default, and a three-node member with peers.
    let single = NodeConfig::single_node();
    write(
        "node_config",
        "single_node.toml",
        toml::to_string(&single)?.as_bytes(),
    )?;
    write(
        "node_config",
        "peers.txt",
        b"1=10.0.0.1:7000@10.0.0.1:7100,2=10.0.0.2:7000,3=10.0.0.3:7000",
    )?;
    println!("corpus written to {}", corpus.display());
    Ok(())
}

/// The command a request seed becomes, as `grpc_requests` derives it.
fn command(
    rpc: u8,
    message: &[u8],
    caller: &fusebox_api::Caller,
) -> Option<fusebox_core::machine::Command> {
    use fusebox_api::convert as c;
    use fusebox_core::machine::Command;
    Some(match rpc {
        13 => {
            let req = pb::ApplyPolicyRequest::decode(message).ok()?;
            let format = c::policy::format_from_proto(req.format).ok()?;
            Command::ApplyPolicy {
                namespace: c::namespace(&req.namespace).ok()?,
                document: Box::new(
                    fusebox_core::policy::PolicyDocument::parse(&req.document, format).ok()?,
                ),
                actor: req.actor,
                reason: req.reason,
            }
        }
        7 => {
            let (namespace, request) =
                c::ledger::begin_from_proto(&pb::BeginRequest::decode(message).ok()?).ok()?;
            Command::Begin { namespace, request }
        }
        8 => {
            let (namespace, request) =
                c::ledger::complete_from_proto(&pb::CompleteRequest::decode(message).ok()?).ok()?;
            Command::Complete { namespace, request }
        }
        10 => {
            let (namespace, request) =
                c::ledger::resolve_from_proto(&pb::ResolveRequest::decode(message).ok()?, caller)
                    .ok()?;
            Command::Resolve { namespace, request }
        }
        3 => c::operator::OperatorCommand::force_open(
            &pb::ForceOpenRequest::decode(message).ok()?,
            caller,
        )
        .ok()?
        .command(),
        _ => return None,
    })
}
