//! The Policy service over gRPC: apply, validation that lists every
//! problem and stores nothing, idempotent re-apply, dry runs, history,
//! rollback, and the write kill switch.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{assert_status, detail, invalid_field, local, meta, within};
use fusebox_proto::v1::fusebox_error_detail::Detail;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::*;
use tonic::transport::Channel;
use tonic::Code;

const NS: &str = "fleet-p";

const VALID_TOML: &str =
    "[defaults]\ntimeout_ms = 3000\n\n[defaults.breaker]\nconsecutive_failures = 4\n";
const VALID_YAML: &str = "defaults:\n  timeout_ms: 5000\n";
const THREE_PROBLEMS: &str = "[defaults]\ntimeout_ms = 0\n\n[servers.tax.breaker]\nslow_call_ms = 0\n\n[servers.tax.tools.lookup]\ntimeout_ms = 600001\n";

fn apply(document: &str, format: PolicyFormat) -> ApplyPolicyRequest {
    ApplyPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        document: document.into(),
        format: format as i32,
        actor: "alice".into(),
        reason: "tighten deadlines".into(),
        expected_version: None,
        dry_run: false,
    }
}

async fn current(policy: &mut PolicyClient<Channel>) -> PolicyVersion {
    let request = GetPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        version: None,
    };
    within(policy.get(request))
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap()
}

#[tokio::test]
async fn an_invalid_document_lists_every_problem_and_stores_nothing() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    let first = within(policy.apply(apply(VALID_TOML, PolicyFormat::Toml)))
        .await
        .unwrap();
    let first = first.into_inner().policy.unwrap();
    assert_eq!(first.version, 1);
    assert_eq!(first.digest.len(), 64);

    let refused = within(policy.apply(apply(THREE_PROBLEMS, PolicyFormat::Toml)))
        .await
        .unwrap_err();
    assert_status(
        &refused,
        Code::InvalidArgument,
        ErrorCode::PolicyInvalid,
        "3 problem",
    );
    let Some(Detail::PolicyInvalid(invalid)) = detail(&refused).detail else {
        panic!("policy_invalid detail expected");
    };
    let fields: Vec<&str> = invalid.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "defaults.timeout_ms",
            "servers.tax.breaker.slow_call_ms",
            "servers.tax.tools.lookup.timeout_ms"
        ]
    );
    assert!(invalid
        .problems
        .iter()
        .all(|p| !p.rule.is_empty() && !p.message.is_empty()));
    assert_eq!(current(&mut policy).await.version, 1, "nothing was stored");

    let syntax = within(policy.apply(apply("[defaults\n", PolicyFormat::Toml)))
        .await
        .unwrap_err();
    assert_status(
        &syntax,
        Code::InvalidArgument,
        ErrorCode::PolicyInvalid,
        "problem",
    );
}

#[tokio::test]
async fn a_deeply_nested_document_is_refused_before_it_is_parsed() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    within(policy.apply(apply(VALID_YAML, PolicyFormat::Yaml)))
        .await
        .unwrap();
    // 200 KB nested 100,000 deep: the YAML parser alone spent 40 s on it.
    let deep = format!("defaults: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let indented = format!("defaults:\n{}timeout_ms: 1\n", " ".repeat(200));
    for (document, says) in [(deep, "nests collections"), (indented, "indented")] {
        let refused = within(policy.apply(apply(&document, PolicyFormat::Yaml)))
            .await
            .unwrap_err();
        assert_status(
            &refused,
            Code::InvalidArgument,
            ErrorCode::PolicyInvalid,
            says,
        );
    }
    assert_eq!(
        current(&mut policy).await.version,
        1,
        "the policy in force stays"
    );
}

#[tokio::test]
async fn reapply_is_unchanged_dry_runs_store_nothing_and_stale_versions_are_refused() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    within(policy.apply(apply(VALID_TOML, PolicyFormat::Toml)))
        .await
        .unwrap();
    let again = within(policy.apply(apply(VALID_TOML, PolicyFormat::Toml)))
        .await
        .unwrap();
    let again = again.into_inner();
    assert!(again.unchanged);
    assert_eq!(again.policy.unwrap().version, 1);

    let dry = ApplyPolicyRequest {
        dry_run: true,
        ..apply(VALID_YAML, PolicyFormat::Yaml)
    };
    let draft = within(policy.apply(dry))
        .await
        .unwrap()
        .into_inner()
        .policy
        .unwrap();
    assert_eq!((draft.version, draft.applied_at_ms), (2, 0));
    assert_eq!(current(&mut policy).await.version, 1);

    let stale = ApplyPolicyRequest {
        expected_version: Some(0),
        ..apply(VALID_YAML, PolicyFormat::Yaml)
    };
    let refused = within(policy.apply(stale)).await.unwrap_err();
    assert_status(
        &refused,
        Code::FailedPrecondition,
        ErrorCode::Stale,
        "policy_version",
    );

    let unspecified = apply(VALID_TOML, PolicyFormat::Unspecified);
    let refused = within(policy.apply(unspecified)).await.unwrap_err();
    assert_eq!(invalid_field(&refused), "format");
}

#[tokio::test]
async fn history_and_rollback_append_versions() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    within(policy.apply(apply(VALID_TOML, PolicyFormat::Toml)))
        .await
        .unwrap();
    within(policy.apply(apply(VALID_YAML, PolicyFormat::Yaml)))
        .await
        .unwrap();
    let rolled = within(policy.rollback(RollbackPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        version: 1,
        actor: "bob".into(),
        reason: "yaml change broke lookups".into(),
    }))
    .await
    .unwrap()
    .into_inner()
    .policy
    .unwrap();
    assert_eq!((rolled.version, rolled.rollback_of), (3, Some(1)));

    let history = within(policy.history(PolicyHistoryRequest {
        namespace: NS.into(),
        meta: meta(),
        include_documents: false,
        page_token: String::new(),
        limit: 2,
    }))
    .await
    .unwrap()
    .into_inner();
    let versions: Vec<u64> = history.versions.iter().map(|v| v.version).collect();
    assert_eq!(versions, vec![3, 2]);
    assert!(history.versions.iter().all(|v| v.document.is_empty()));
    assert_eq!(
        history.versions[0].digest,
        current(&mut policy).await.digest
    );
    assert_eq!(history.next_page_token, "2");

    let old = within(policy.get(GetPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        version: Some(1),
    }))
    .await
    .unwrap()
    .into_inner()
    .policy
    .unwrap();
    assert_eq!(
        old.digest, rolled.digest,
        "a rollback copies the old document"
    );

    let missing = within(policy.rollback(RollbackPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        version: 99,
        actor: "bob".into(),
        reason: String::new(),
    }))
    .await
    .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
}

#[tokio::test]
async fn reads_of_a_namespace_without_policy_say_so() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    let none = within(policy.get(GetPolicyRequest {
        namespace: "fresh".into(),
        meta: meta(),
        version: None,
    }))
    .await
    .unwrap_err();
    assert_status(
        &none,
        Code::NotFound,
        ErrorCode::NotFound,
        "namespace fresh has no policy",
    );

    within(policy.apply(apply(VALID_TOML, PolicyFormat::Toml)))
        .await
        .unwrap();
    let gone = within(policy.get(GetPolicyRequest {
        namespace: NS.into(),
        meta: meta(),
        version: Some(7),
    }))
    .await
    .unwrap_err();
    assert_status(
        &gone,
        Code::NotFound,
        ErrorCode::NotFound,
        "policy version 7",
    );
}

#[tokio::test]
async fn the_kill_switch_is_set_and_read_back() {
    let (_, node) = local().await;
    let mut policy = node.policy;
    let get = || GetKillSwitchRequest {
        namespace: NS.into(),
        meta: meta(),
    };
    let never = within(policy.get_kill_switch(get()))
        .await
        .unwrap()
        .into_inner();
    let never = never.kill_switch.unwrap();
    assert!(!never.writes_blocked && never.changed_at_ms == 0);

    let no_reason = SetKillSwitchRequest {
        namespace: NS.into(),
        meta: meta(),
        writes_blocked: true,
        reason: String::new(),
        actor: "oncall".into(),
    };
    let refused = within(policy.set_kill_switch(no_reason.clone()))
        .await
        .unwrap_err();
    assert_eq!(invalid_field(&refused), "reason");

    let thrown = SetKillSwitchRequest {
        reason: "bad deploy".into(),
        ..no_reason
    };
    within(policy.set_kill_switch(thrown)).await.unwrap();
    let read = within(policy.get_kill_switch(get()))
        .await
        .unwrap()
        .into_inner();
    let read = read.kill_switch.unwrap();
    assert!(read.writes_blocked);
    assert_eq!(
        (read.actor.as_str(), read.reason.as_str()),
        ("oncall", "bad deploy")
    );
    assert!(read.changed_at_ms > 0);
}
