//! Every RPC × every role × own and foreign namespace, against a real node
//! with auth enforced (issue 14): each call is admitted or refused exactly
//! as the rule table says, and an RPC added to the protos without a rule
//! fails here.
//!
//! Calls go out as raw protobuf bytes built from the descriptor set, so the
//! table covers every method the protos declare, not a list kept by hand:
//! a namespaced request carries its namespace in field 1 (the API's
//! convention), every other field is left empty. A call that is admitted
//! may still fail validation; what is asserted is only whether the guard
//! and the handler's namespace check let it through.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod node_support;

use bytes::Bytes;
use fusebox_core::auth::Role;
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::pipelined_call::Call;
use fusebox_proto::v1::pipelined_reply::Result as Reply;
use fusebox_proto::v1::{
    BeginRequest, Effect, IssueTokenRequest, PipelineRequest, PipelinedCall, PipelinedReply,
    RevokeTokenRequest, WatchEvent, WatchRequest, WhoAmIRequest,
};
use fusebox_server::api::status::detail_of;
use fusebox_server::auth::rules::{Rule, RULES};
use fusebox_server::auth::{CallerLimits, PIPELINE_PATH};
use node_support::{bearer, call_raw, issue, methods, node, node_with, Method};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Request, Streaming};

fn rule(path: &str) -> Option<Rule> {
    RULES.iter().find(|(p, _)| *p == path).map(|(_, r)| *r)
}

#[test]
fn every_rpc_the_protos_declare_has_an_access_rule() {
    let missing: Vec<String> = methods()
        .into_iter()
        .filter(|m| rule(&m.path).is_none())
        .map(|m| m.path)
        .collect();
    assert!(
        missing.is_empty(),
        "RPCs without a rule in fusebox_server::auth::rules (the guard refuses them): {missing:?}"
    );
    let declared: Vec<String> = methods().into_iter().map(|m| m.path).collect();
    let stale: Vec<&str> = RULES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !p.starts_with("/grpc.health.") && !declared.iter().any(|d| d == p))
        .collect();
    assert!(
        stale.is_empty(),
        "rules for RPCs no proto declares: {stale:?}"
    );
}

/// A request body: field 1 holds the namespace when the RPC is namespaced;
/// `SetEnabled` asks to switch enforcement on (off would change the table
/// under the test).
fn body(path: &str, namespace: Option<&str>) -> Bytes {
    let mut out = Vec::new();
    if let Some(ns) = namespace {
        out.push(0x0a);
        out.push(u8::try_from(ns.len()).unwrap());
        out.extend_from_slice(ns.as_bytes());
    }
    if path == "/fusebox.v1.Auth/SetEnabled" {
        out.extend_from_slice(&[0x18, 0x01]);
    }
    Bytes::from(out)
}

/// Calls `method` with `token`; the code it was answered with.
async fn call(channel: &Channel, method: &Method, token: Option<&str>, ns: Option<&str>) -> Code {
    call_raw(channel, method, token, body(&method.path, ns))
        .await
        .0
}

const OWN: &str = "own";
const FOREIGN: &str = "foreign";

#[tokio::test]
async fn every_rpc_admits_exactly_the_roles_and_namespaces_its_rule_names() {
    let node = node().await;
    let mut tokens = Vec::new();
    for role in Role::ALL {
        let namespaces: &[&str] = if role == Role::Admin { &["*"] } else { &[OWN] };
        let (token, _) = issue(&node, &format!("{role}-1"), role, namespaces).await;
        tokens.push((role, token));
    }
    let mut wrong = Vec::new();
    for method in methods() {
        let pipeline = method.path == PIPELINE_PATH;
        if method.client_streaming && !pipeline {
            // Raft's InstallSnapshot streams in: a peer RPC, checked
            // against member certificates in tests/security.rs.
            assert_eq!(rule(&method.path), Some(Rule::Peer), "{}", method.path);
            continue;
        }
        let (min, namespaced) = match rule(&method.path) {
            Some(Rule::Role { min, namespaced }) => (min, namespaced),
            _ => continue,
        };
        // A pipeline opens on its role alone (its rule names no
        // namespace); each call in it is judged by its own rule and
        // namespace (`a_pipelined_call_is_admitted_on_its_own`).
        // Nobody unauthenticated, nobody with a forged token.
        for (what, token) in [("no token", None), ("a forged token", Some("fbx_00000000000000aa_0000000000000000000000000000000000000000000000000000000000000000"))] {
            let ns = namespaced.then_some(OWN);
            let code = call(&node.channel, &method, token, ns).await;
            if code != Code::Unauthenticated {
                wrong.push(format!("{} with {what}: {code:?}", method.path));
            }
        }
        for (role, token) in &tokens {
            for ns in [OWN, FOREIGN] {
                let allowed =
                    role.covers(min) && (!namespaced || ns == OWN || *role == Role::Admin);
                let code = call(
                    &node.channel,
                    &method,
                    Some(token),
                    namespaced.then_some(ns),
                )
                .await;
                let refused = matches!(code, Code::PermissionDenied | Code::Unauthenticated);
                if allowed == refused || (!allowed && code != Code::PermissionDenied) {
                    wrong.push(format!(
                        "{} as {role} in {ns}: {code:?}, expected {}",
                        method.path,
                        if allowed {
                            "admitted"
                        } else {
                            "PERMISSION_DENIED"
                        }
                    ));
                }
                if !namespaced {
                    break;
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "calls judged against their rule:\n{}",
        wrong.join("\n")
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn a_revoked_or_expired_token_is_refused_at_once() {
    let node = node().await;
    let (token, token_id) = issue(&node, "agent-7", Role::Agent, &[OWN]).await;
    let whoami = |token: String| {
        let channel = node.channel.clone();
        async move {
            let mut request = Request::new(WhoAmIRequest::default());
            bearer(&mut request, &token);
            AuthClient::new(channel).who_am_i(request).await
        }
    };
    let me = whoami(token.clone()).await.unwrap().into_inner();
    assert_eq!(
        (me.name.as_str(), me.role.as_str(), me.via.as_str()),
        ("agent-7", "agent", "token")
    );
    revoke(&node, token_id).await;
    let refused = whoami(token).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    let mut short = Request::new(IssueTokenRequest {
        name: "agent-8".into(),
        role: "agent".into(),
        namespaces: vec![OWN.into()],
        ttl_ms: 300,
        ..Default::default()
    });
    bearer(&mut short, &node.admin);
    let short = AuthClient::new(node.channel.clone())
        .issue_token(short)
        .await
        .unwrap()
        .into_inner();
    assert!(whoami(short.token.clone()).await.is_ok());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let expired = whoami(short.token).await.unwrap_err();
    assert_eq!(expired.code(), Code::Unauthenticated);
    assert!(
        expired.message().contains("expired"),
        "{}",
        expired.message()
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn the_admin_token_cannot_be_used_to_lock_everyone_out() {
    let node = node().await;
    let mut remove = Request::new(fusebox_proto::v1::RemovePrincipalRequest {
        name: "admin".into(),
        ..Default::default()
    });
    bearer(&mut remove, &node.admin);
    let refused = AuthClient::new(node.channel.clone())
        .remove_principal(remove)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    node.node.shutdown().await;
}

fn lookup(token: &str) -> Request<fusebox_proto::v1::LookupRequest> {
    let mut request = Request::new(fusebox_proto::v1::LookupRequest {
        namespace: OWN.into(),
        key: "k".into(),
        ..Default::default()
    });
    bearer(&mut request, token);
    request
}

/// A node that lets each caller make 5 requests a second, in bursts of 5.
async fn slow_node() -> node_support::Node {
    node_with(CallerLimits {
        requests_per_second: 5,
        burst: 5,
        watch_streams: 16,
    })
    .await
}

#[tokio::test]
async fn a_caller_over_its_rate_is_told_when_to_retry_and_others_are_not_slowed() {
    let node = slow_node().await;
    let (agent, _) = issue(&node, "busy-agent", Role::Agent, &[OWN]).await;
    let (other, _) = issue(&node, "quiet-agent", Role::Agent, &[OWN]).await;
    let mut ledger = fusebox_proto::v1::ledger_client::LedgerClient::new(node.channel.clone());
    let mut refused = None;
    for _ in 0..20 {
        if let Err(status) = ledger.lookup(lookup(&agent)).await {
            if status.code() == Code::ResourceExhausted {
                refused = Some(status);
                break;
            }
        }
    }
    let refused = refused.expect("20 calls at once exceed a burst of 5");
    let detail = detail_of(&refused).expect("a Fusebox error detail");
    assert_eq!(detail.code(), fusebox_proto::v1::ErrorCode::RateLimited);
    let Some(fusebox_proto::v1::fusebox_error_detail::Detail::RateLimited(limit)) = detail.detail
    else {
        panic!("no rate-limited detail: {detail:?}");
    };
    assert_eq!(limit.limit, "caller_requests_per_second");
    assert!((1..=1_000).contains(&limit.retry_after_ms), "{limit:?}");
    // Another caller has its own bucket.
    let code = ledger
        .lookup(lookup(&other))
        .await
        .map_or_else(|s| s.code(), |_| Code::Ok);
    assert_ne!(code, Code::ResourceExhausted);
    // After the wait it names, the busy caller is served again.
    tokio::time::sleep(Duration::from_millis(limit.retry_after_ms + 50)).await;
    let code = ledger
        .lookup(lookup(&agent))
        .await
        .map_or_else(|s| s.code(), |_| Code::Ok);
    assert_ne!(code, Code::ResourceExhausted);
    node.node.shutdown().await;
}

#[tokio::test]
async fn a_caller_holds_at_most_its_watch_streams_and_a_closed_one_frees_its_slot() {
    let node = node_with(CallerLimits {
        watch_streams: 2,
        ..CallerLimits::default()
    })
    .await;
    let (agent, _) = issue(&node, "watcher", Role::Agent, &[OWN]).await;
    let watch = || {
        let mut request = Request::new(fusebox_proto::v1::WatchRequest {
            namespace: OWN.into(),
            ..Default::default()
        });
        bearer(&mut request, &agent);
        let mut client =
            fusebox_proto::v1::breakers_client::BreakersClient::new(node.channel.clone());
        async move { client.watch(request).await }
    };
    let first = watch().await.expect("first stream");
    let _second = watch().await.expect("second stream");
    let third = watch().await.unwrap_err();
    assert_eq!(third.code(), Code::ResourceExhausted, "{third:?}");
    assert!(
        third.message().contains("watch streams"),
        "{}",
        third.message()
    );
    drop(first);
    // The node notices the closed stream when its pump next looks.
    let started = std::time::Instant::now();
    loop {
        match watch().await {
            Ok(_) => break,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the slot was never freed"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    node.node.shutdown().await;
}

/// Revokes the token `token_id` as the admin.
async fn revoke(node: &node_support::Node, token_id: String) {
    let mut revoke = Request::new(RevokeTokenRequest {
        token_id,
        ..Default::default()
    });
    bearer(&mut revoke, &node.admin);
    AuthClient::new(node.channel.clone())
        .revoke_token(revoke)
        .await
        .unwrap();
}

/// A begin of a fresh key in `ns`, as pipelined call `id`.
fn pipelined_begin(id: u64, ns: &str) -> PipelineRequest {
    let key = format!("key-{id}");
    PipelineRequest {
        calls: vec![PipelinedCall {
            id,
            timeout_ms: 5_000,
            call: Some(Call::Begin(BeginRequest {
                namespace: ns.into(),
                key: key.clone(),
                fingerprint: key.clone().into_bytes(),
                intent_id: key.clone(),
                server: "payments".into(),
                tool: "refund".into(),
                effect: Effect::NonIdempotentWrite as i32,
                attempt_id: format!("{key}-a"),
                lease_ms: 30_000,
                ..Default::default()
            })),
        }],
    }
}

/// Opens a ledger pipeline on `node` as `token`, sending `messages`; the
/// replies.
async fn open_pipeline(
    node: &node_support::Node,
    token: &str,
    messages: impl tokio_stream::Stream<Item = PipelineRequest> + Send + 'static,
) -> Streaming<fusebox_proto::v1::PipelineResponse> {
    let mut open = Request::new(messages);
    bearer(&mut open, token);
    LedgerClient::new(node.channel.clone())
        .pipeline(open)
        .await
        .unwrap()
        .into_inner()
}

/// Sends `message` on a pipeline and reads the one reply it gets.
async fn one_reply(
    calls: &tokio::sync::mpsc::Sender<PipelineRequest>,
    replies: &mut Streaming<fusebox_proto::v1::PipelineResponse>,
    message: PipelineRequest,
) -> PipelinedReply {
    calls.send(message).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), replies.message())
        .await
        .expect("a reply within 10 s")
        .expect("the pipeline stays open")
        .expect("a reply, not the end");
    assert_eq!(got.replies.len(), 1, "{got:?}");
    got.replies.into_iter().next().unwrap()
}

/// The status code a pipelined reply carries, OK for an answer.
fn code_of(reply: &PipelinedReply) -> Code {
    match reply.result.as_ref().expect("a result") {
        Reply::Error(status) => Code::from_i32(status.code),
        _ => Code::Ok,
    }
}

#[tokio::test]
async fn a_pipelined_call_is_admitted_on_its_own() {
    let node = node().await;
    let (token, token_id) = issue(&node, "agent-3", Role::Agent, &[OWN]).await;
    let (calls, sent) = tokio::sync::mpsc::channel(4);
    let sent = tokio_stream::wrappers::ReceiverStream::new(sent);
    let mut replies = open_pipeline(&node, &token, sent).await;

    let own = one_reply(&calls, &mut replies, pipelined_begin(1, OWN)).await;
    assert_eq!((own.id, code_of(&own)), (1, Code::Ok), "{own:?}");
    assert!(matches!(own.result, Some(Reply::Begin(_))), "{own:?}");
    // The stream's token holds no grant for FOREIGN: that call alone is
    // refused, and the pipeline goes on.
    let foreign = one_reply(&calls, &mut replies, pipelined_begin(2, FOREIGN)).await;
    assert_eq!(
        (foreign.id, code_of(&foreign)),
        (2, Code::PermissionDenied),
        "{foreign:?}"
    );
    let again = one_reply(&calls, &mut replies, pipelined_begin(3, OWN)).await;
    assert_eq!(code_of(&again), Code::Ok, "{again:?}");

    // Revoked while the pipeline is open: the next call is refused.
    revoke(&node, token_id).await;
    let revoked = one_reply(&calls, &mut replies, pipelined_begin(4, OWN)).await;
    assert_eq!(
        (revoked.id, code_of(&revoked)),
        (4, Code::Unauthenticated),
        "{revoked:?}"
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn empty_pipeline_messages_count_against_the_callers_rate() {
    let node = slow_node().await;
    let (token, _) = issue(&node, "idle-agent", Role::Agent, &[OWN]).await;
    let empties = (0..20).map(|_| PipelineRequest::default());
    let mut replies = open_pipeline(&node, &token, tokio_stream::iter(empties)).await;
    let ended = match tokio::time::timeout(Duration::from_secs(10), replies.message()).await {
        Ok(Ok(Some(reply))) => panic!("empty messages get no reply: {reply:?}"),
        Ok(Ok(None)) => panic!("20 empty messages at once fit a burst of 5"),
        Ok(Err(status)) => status,
        Err(_) => panic!("the pipeline neither ended nor answered"),
    };
    assert_eq!(ended.code(), Code::ResourceExhausted, "{ended:?}");
    node.node.shutdown().await;
}

#[tokio::test]
async fn pipelined_calls_count_one_by_one_against_their_callers_rate() {
    let node = slow_node().await;
    let (busy, _) = issue(&node, "busy-piper", Role::Agent, &[OWN]).await;
    let (quiet, _) = issue(&node, "quiet-piper", Role::Agent, &[OWN]).await;
    let (calls, sent) = tokio::sync::mpsc::channel(4);
    let mut replies = open_pipeline(
        &node,
        &busy,
        tokio_stream::wrappers::ReceiverStream::new(sent),
    )
    .await;
    // A burst of 5, one of it spent opening the stream: one call of the
    // first 12, sent one after another within milliseconds, must be refused.
    let mut refused = None;
    for id in 1..=12 {
        let reply = one_reply(&calls, &mut replies, pipelined_begin(id, OWN)).await;
        if code_of(&reply) == Code::ResourceExhausted {
            refused = Some(reply);
            break;
        }
        assert_eq!(code_of(&reply), Code::Ok, "{reply:?}");
    }
    let refused = refused.expect("12 calls in a row exceed a burst of 5");
    let Some(Reply::Error(status)) = refused.result else {
        panic!("no error: {refused:?}");
    };
    let status = fusebox_proto::pipeline::status_from_proto(status);
    let detail = detail_of(&status).expect("a Fusebox error detail");
    assert_eq!(detail.code(), fusebox_proto::v1::ErrorCode::RateLimited);
    // Another principal's pipeline has its own bucket.
    let (calls, sent) = tokio::sync::mpsc::channel(4);
    let mut replies = open_pipeline(
        &node,
        &quiet,
        tokio_stream::wrappers::ReceiverStream::new(sent),
    )
    .await;
    let other = one_reply(&calls, &mut replies, pipelined_begin(100, OWN)).await;
    assert_eq!(code_of(&other), Code::Ok, "{other:?}");
    node.node.shutdown().await;
}

/// A watch stream of `OWN` opened with `token`.
async fn watch_with(channel: &Channel, token: &str) -> Streaming<WatchEvent> {
    let mut watch = Request::new(WatchRequest {
        namespace: OWN.into(),
        ..Default::default()
    });
    bearer(&mut watch, token);
    BreakersClient::new(channel.clone())
        .watch(watch)
        .await
        .unwrap()
        .into_inner()
}

/// The status `stream` ends with, read through its events; fails the test
/// if it is still open `within` after its last event, because `why`.
async fn end_of(stream: &mut Streaming<WatchEvent>, within: Duration, why: &str) -> tonic::Status {
    loop {
        match tokio::time::timeout(within, stream.message()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) => panic!("the stream ended without saying why"),
            Ok(Err(status)) => return status,
            Err(_) => panic!("the stream outlived {why} by {within:?}"),
        }
    }
}

#[tokio::test]
async fn revoking_a_token_ends_the_watch_streams_it_opened() {
    let node = node().await;
    let (token, token_id) = issue(&node, "watcher-r", Role::Agent, &[OWN]).await;
    let mut stream = watch_with(&node.channel, &token).await;
    let first = stream.message().await.unwrap();
    assert!(first.is_some(), "the snapshot arrives");

    revoke(&node, token_id).await;
    let revoked_at = std::time::Instant::now();
    let ended = end_of(
        &mut stream,
        Duration::from_secs(3),
        "its token's revocation",
    )
    .await;
    assert_eq!(ended.code(), Code::Unauthenticated, "{ended:?}");
    assert!(
        revoked_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        revoked_at.elapsed()
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn a_watch_stream_ends_when_its_token_expires() {
    let node = node().await;
    let ttl = Duration::from_millis(1_000);
    let mut short = Request::new(IssueTokenRequest {
        name: "watcher-e".into(),
        role: "agent".into(),
        namespaces: vec![OWN.into()],
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap(),
        ..Default::default()
    });
    bearer(&mut short, &node.admin);
    // The node sets the expiry while it handles the call, so it falls
    // between these two instants plus the token's life.
    let asked = std::time::Instant::now();
    let token = AuthClient::new(node.channel.clone())
        .issue_token(short)
        .await
        .unwrap()
        .into_inner()
        .token;
    let answered = std::time::Instant::now();
    let mut stream = watch_with(&node.channel, &token).await;
    let ended = end_of(&mut stream, Duration::from_secs(10), "its token").await;
    assert_eq!(ended.code(), Code::Unauthenticated, "{ended:?}");
    assert!(ended.message().contains("expired"), "{ended:?}");
    // At the expiry, not at the periodic recheck (WATCH_RECHECK_MS, 5 s
    // after the stream opened): nothing else changes the auth table.
    // Wall clock against monotonic: a few ms of slack.
    let (since_asked, since_answered) = (asked.elapsed(), answered.elapsed());
    assert!(
        since_asked + Duration::from_millis(20) >= ttl,
        "the stream ended {since_asked:?} after the token was asked for, on a token of {ttl:?}"
    );
    assert!(
        since_answered < ttl + Duration::from_millis(2_500),
        "the stream lasted {since_answered:?} on a token of {ttl:?}"
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn a_flood_of_bad_tokens_is_slowed_by_address() {
    let node = slow_node().await;
    let forged =
        "fbx_00000000000000aa_0000000000000000000000000000000000000000000000000000000000000000";
    let mut codes = Vec::new();
    for _ in 0..12 {
        let mut request = Request::new(WhoAmIRequest::default());
        bearer(&mut request, forged);
        let code = AuthClient::new(node.channel.clone())
            .who_am_i(request)
            .await
            .map_or_else(|s| s.code(), |_| Code::Ok);
        codes.push(code);
    }
    assert!(
        codes
            .iter()
            .all(|c| matches!(c, Code::Unauthenticated | Code::ResourceExhausted)),
        "{codes:?}"
    );
    assert!(
        codes.contains(&Code::ResourceExhausted),
        "refusals are metered: {codes:?}"
    );
    node.node.shutdown().await;
}

#[tokio::test]
async fn health_is_checked_without_credentials_but_never_watched() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let n = node().await;
    let mut health = HealthClient::new(n.channel.clone());
    let checked = health.check(HealthCheckRequest::default()).await;
    assert!(checked.is_ok(), "{checked:?}");
    // An open stream anyone could hold without credentials: refused.
    let watched = health.watch(HealthCheckRequest::default()).await;
    assert_eq!(watched.unwrap_err().code(), Code::PermissionDenied);
}
