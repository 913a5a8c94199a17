//! A sequence of public gRPC requests, each decoded from its protobuf bytes,
//! checked and converted the way the node's handler does, and applied in
//! order to one state machine as the log would apply them.
//!
//! Framing, repeated up to [`REQUESTS_MAX`] times: one byte picks the RPC
//! (`Ledger.Pipeline` among them: a message of calls, each converted as its
//! unary call, and read back as the client reads replies),
//! one byte advances the clock (in 100 ms steps), two bytes (little endian)
//! give the message's length, then the message.
//!
//! Every request either is refused with a status or becomes a command that
//! goes through the log's encoding unchanged and is applied without a panic;
//! after the sequence the state snapshots and restores unchanged.

#![no_main]

use fusebox_api::convert::auth::{
    actor_of, grant_from_proto, issue_from_proto, remove_from_proto, revoke_from_proto,
    set_enabled_from_proto,
};
use fusebox_api::convert::breakers::key_from_proto;
use fusebox_api::convert::ledger::{
    begin_from_proto, complete_from_proto, list_from_proto, renew_from_proto, resolve_from_proto,
};
use fusebox_api::convert::operator::OperatorCommand;
use fusebox_api::convert::outcomes::{batch_from_proto, outcome_class, permit_id, reports};
use fusebox_api::convert::policy::format_from_proto;
use fusebox_api::convert::tools::manifest_from_proto;
use fusebox_api::convert::{actor, bounded, meta, name, namespace, required};
use fusebox_api::{status, Caller};
use fusebox_core::auth::AuthChange;
use fusebox_core::limits::REASON_BYTES_MAX;
use fusebox_core::machine::{Command, SharedStateMachine};
use fusebox_core::policy::PolicyDocument;
use fusebox_core::{ReplicaId, ServerName, Timestamp};
use fusebox_fuzz::{apply, check_snapshot, fresh_state, START_MS};
use fusebox_proto::pipeline::{status_from_proto, CALLS_PER_MESSAGE_MAX};
use fusebox_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use tonic::{Code, Status};

/// Requests in one input, at most.
const REQUESTS_MAX: usize = 32;

/// RPCs the first byte of a request picks from (`rpc % RPCS`): the unary
/// ones in [`command_of`], and [`PIPELINE`].
const RPCS: u8 = 24;

/// The pick for one message of `Ledger.Pipeline` ([`pipelined`]).
const PIPELINE: u8 = 23;

/// The token id and secret a node would draw for `IssueToken`.
const TOKEN_ID: &str = "0123456789abcdef";
const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fuzz_target!(|data: &[u8]| {
    let caller = Caller::open();
    let mut state = fresh_state();
    let mut at_ms = START_MS;
    let mut input = data;
    for _ in 0..REQUESTS_MAX {
        let [rpc, step, len_lo, len_hi, rest @ ..] = input else {
            break;
        };
        at_ms += u64::from(*step) * 100;
        let len = usize::from(u16::from_le_bytes([*len_lo, *len_hi])).min(rest.len());
        let (message, rest) = rest.split_at(len);
        input = rest;
        if rpc % RPCS == PIPELINE {
            for command in pipelined(message) {
                apply(&mut state, command, at_ms);
            }
        } else if let Ok(Some(command)) = command_of(*rpc, message, &caller, &state) {
            apply(&mut state, command, at_ms);
        }
    }
    check_snapshot(&state);
});

/// The command the handler of RPC `rpc` would propose for `message`: `None`
/// for an RPC that proposes nothing (a read), an error for bytes that do not
/// decode or a request the checks refuse.
fn command_of(
    rpc: u8,
    message: &[u8],
    caller: &Caller,
    state: &SharedStateMachine,
) -> Result<Option<Command>, Status> {
    let command = match rpc % RPCS {
        0 => {
            let req = decode::<pb::ReportOutcomesRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            let batch = batch_from_proto(&req)?;
            if batch.outcomes.is_empty() {
                return Ok(None);
            }
            Command::ReportOutcomes {
                outcomes: reports(state, &ns, batch.outcomes),
                namespace: ns,
                replica: batch.replica,
                batch_seq: req.batch_seq,
            }
        }
        1 => {
            let req = decode::<pb::AcquireProbeRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            Command::AcquireProbe {
                key: key_from_proto(&ns, req.key.as_ref())?,
                replica: name("replica_id", &req.replica_id, ReplicaId::new)?,
                lease_ms: req.lease_ms,
            }
        }
        2 => {
            let req = decode::<pb::ReleaseProbeRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            let Some(outcome) = outcome_class(req.outcome) else {
                return Err(status::invalid_argument("outcome", "enum", "unknown"));
            };
            Command::ReleaseProbe {
                key: key_from_proto(&ns, req.key.as_ref())?,
                permit_id: permit_id(&req.permit_id)?,
                generation: req.generation,
                outcome,
            }
        }
        3 => OperatorCommand::force_open(&decode(message)?, caller)?.command(),
        4 => OperatorCommand::reset(&decode(message)?, caller)?.command(),
        5 => OperatorCommand::disable(&decode(message)?, caller)?.command(),
        6 => OperatorCommand::metrics_only(&decode(message)?, caller)?.command(),
        7 => {
            let (namespace, request) = begin_from_proto(&decode(message)?)?;
            Command::Begin { namespace, request }
        }
        8 => {
            let (namespace, request) = complete_from_proto(&decode(message)?)?;
            Command::Complete { namespace, request }
        }
        9 => {
            let (namespace, request, _clamped) = renew_from_proto(&decode(message)?)?;
            Command::Renew { namespace, request }
        }
        10 => {
            let (namespace, request) = resolve_from_proto(&decode(message)?, caller)?;
            Command::Resolve { namespace, request }
        }
        11 => {
            // A read: its filter must be checked, nothing is proposed.
            list_from_proto(&decode(message)?)?;
            return Ok(None);
        }
        12 => {
            let req = decode::<pb::ImportToolsRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            Command::ImportTools {
                server: name("server", &req.server, ServerName::new)?,
                actor: actor(caller, &req.actor, req.meta.as_ref())?,
                tools: manifest_from_proto(&req.tools)?,
                namespace: ns,
            }
        }
        13 => {
            let req = decode::<pb::ApplyPolicyRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            let format = format_from_proto(req.format)?;
            let who = actor(caller, &req.actor, req.meta.as_ref())?;
            bounded("reason", &req.reason, REASON_BYTES_MAX)?;
            let document =
                PolicyDocument::parse(&req.document, format).map_err(|e| status::from_core(&e))?;
            Command::ApplyPolicy {
                namespace: ns,
                document: Box::new(document),
                actor: who,
                reason: req.reason,
            }
        }
        14 => {
            let req = decode::<pb::RollbackPolicyRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            if req.version == 0 {
                return Err(status::invalid_argument("version", "range", "0"));
            }
            bounded("reason", &req.reason, REASON_BYTES_MAX)?;
            Command::RollbackPolicy {
                namespace: ns,
                version: req.version,
                actor: actor(caller, &req.actor, req.meta.as_ref())?,
                reason: req.reason,
            }
        }
        15 => {
            let req = decode::<pb::SetKillSwitchRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            if req.writes_blocked {
                required("reason", &req.reason, REASON_BYTES_MAX)?;
            } else {
                bounded("reason", &req.reason, REASON_BYTES_MAX)?;
            }
            Command::SetKillSwitch {
                namespace: ns,
                writes_blocked: req.writes_blocked,
                actor: actor(caller, &req.actor, req.meta.as_ref())?,
                reason: req.reason,
            }
        }
        16 => {
            let req = decode::<pb::DeleteNamespaceRequest>(message)?;
            let ns = namespace(&req.namespace)?;
            meta(req.meta.as_ref())?;
            bounded("reason", &req.reason, REASON_BYTES_MAX)?;
            Command::DeleteNamespace {
                namespace: ns,
                actor: actor(caller, &req.actor, req.meta.as_ref())?,
                reason: req.reason,
            }
        }
        17 => auth(caller, {
            let req = decode::<pb::IssueTokenRequest>(message)?;
            let change =
                issue_from_proto(&req, Timestamp::from_millis(START_MS), TOKEN_ID, SECRET)?;
            (change, req.meta)
        })?,
        18 => auth(caller, {
            let req = decode::<pb::GrantRequest>(message)?;
            (grant_from_proto(&req)?, req.meta)
        })?,
        19 => auth(caller, {
            let req = decode::<pb::RevokeTokenRequest>(message)?;
            (revoke_from_proto(&req), req.meta)
        })?,
        20 => auth(caller, {
            let req = decode::<pb::RemovePrincipalRequest>(message)?;
            (remove_from_proto(&req), req.meta)
        })?,
        21 => auth(caller, {
            let req = decode::<pb::SetAuthEnabledRequest>(message)?;
            (set_enabled_from_proto(&req), req.meta)
        })?,
        _ => Command::Tick,
    };
    Ok(Some(command))
}

/// The commands a node proposes for one `PipelineRequest`: none if the
/// message does not decode or carries more calls than a message may (the
/// node ends the stream), else one per call its unary conversion accepts.
///
/// The same bytes are also read as the `PipelineResponse` a client gets: a
/// failed call's status must never come back as a success.
fn pipelined(message: &[u8]) -> Vec<Command> {
    use pb::pipelined_call::Call;
    use pb::pipelined_reply::Result as Reply;
    if let Ok(response) = decode::<pb::PipelineResponse>(message) {
        for reply in response.replies {
            if let Some(Reply::Error(call)) = reply.result {
                let status = status_from_proto(call);
                assert_ne!(status.code(), Code::Ok, "a failed call read as a success");
            }
        }
    }
    let Ok(request) = decode::<pb::PipelineRequest>(message) else {
        return Vec::new();
    };
    if request.calls.len() > CALLS_PER_MESSAGE_MAX {
        return Vec::new();
    }
    let command = |call: Call| match call {
        Call::Begin(req) => {
            begin_from_proto(&req).map(|(namespace, request)| Command::Begin { namespace, request })
        }
        Call::Complete(req) => complete_from_proto(&req)
            .map(|(namespace, request)| Command::Complete { namespace, request }),
    };
    request
        .calls
        .into_iter()
        .filter_map(|c| command(c.call?).ok())
        .collect()
}

/// An auth change as the Auth service proposes it.
fn auth(
    caller: &Caller,
    (change, request_meta): (AuthChange, Option<pb::RequestMeta>),
) -> Result<Command, Status> {
    meta(request_meta.as_ref())?;
    let actor = actor_of(caller, request_meta.as_ref());
    Ok(Command::Auth { change, actor })
}

fn decode<T: Message + Default>(bytes: &[u8]) -> Result<T, Status> {
    T::decode(bytes).map_err(|e| Status::invalid_argument(e.to_string()))
}
