//! Telling a name the cluster knows from a typo.
//!
//! The cluster answers for any well-formed name: a breaker never seen reads
//! as CLOSED at generation 0, a namespace never used lists nothing. That is
//! right for agents (every breaker is closed until evidence arrives) but an
//! operator who mistypes a namespace or tool during an incident must hear
//! so, not see a reassuring "closed". These checks run before the operator
//! commands act or print, and fail with exit code 3 naming what is unknown.
//!
//! A namespace is known when it has a policy, a kill switch that was ever
//! thrown, a tracked breaker or a ledger record. A breaker is known when the
//! cluster tracks it or the policy in force names its server (and tool).

use crate::client::Session;
use crate::failure::{rpc, Failure};
use crate::limits::SERVER_PAGES_MAX;
use fusebox_core::breaker::BreakerKey;
use fusebox_core::policy::{PolicyDocument, PolicyFormat};
use fusebox_proto::v1 as pb;
use tonic::Code;

/// The namespace's current policy version, or `None` when it has none.
pub async fn current_policy(s: &Session, ns: &str) -> anyhow::Result<Option<pb::PolicyVersion>> {
    let request = pb::GetPolicyRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
        version: None,
    };
    match s.policy().get(request).await {
        Ok(reply) => Ok(reply.into_inner().policy),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(Failure::from_status("reading the policy", &status).into()),
    }
}

/// The policy document in force (built-in defaults when there is none),
/// with its version.
pub async fn document_in_force(
    s: &Session,
    ns: &str,
) -> anyhow::Result<(Option<u64>, PolicyDocument)> {
    let Some(policy) = current_policy(s, ns).await? else {
        return Ok((None, PolicyDocument::default()));
    };
    let document = parse_stored(&policy)?;
    Ok((Some(policy.version), document))
}

/// Parses a stored version's document (the server sends canonical TOML).
pub fn parse_stored(policy: &pb::PolicyVersion) -> anyhow::Result<PolicyDocument> {
    let format = match pb::PolicyFormat::try_from(policy.format) {
        Ok(pb::PolicyFormat::Yaml) => PolicyFormat::Yaml,
        _ => PolicyFormat::Toml,
    };
    PolicyDocument::parse(&policy.document, format).map_err(|e| {
        let message = format!(
            "policy v{} of namespace {} as stored does not parse: {e}",
            policy.version, policy.namespace
        );
        Failure::refused(message).into()
    })
}

/// Whether the cluster holds anything for `ns`.
pub async fn namespace_known(s: &Session, ns: &str) -> anyhow::Result<bool> {
    if current_policy(s, ns).await?.is_some() {
        return Ok(true);
    }
    let switch = pb::GetKillSwitchRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
    };
    let switch = rpc(
        "reading the kill switch",
        s.policy().get_kill_switch(switch),
    )
    .await?;
    if switch.kill_switch.is_some_and(|k| k.changed_at_ms > 0) {
        return Ok(true);
    }
    let breakers = pb::ListBreakersRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
        limit: 1,
        ..Default::default()
    };
    let breakers = rpc("listing breakers", s.breakers().list_breakers(breakers)).await?;
    if !breakers.breakers.is_empty() {
        return Ok(true);
    }
    let records = pb::ListRecordsRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
        limit: 1,
        ..Default::default()
    };
    match s.ledger().list(records).await {
        Ok(_) => Ok(true),
        Err(status) if status.code() == Code::NotFound => Ok(false),
        Err(status) => Err(Failure::from_status("listing ledger records", &status).into()),
    }
}

/// The failure for a namespace the cluster holds nothing for.
pub fn unknown_namespace(ns: &str) -> Failure {
    Failure::not_found(format!(
        "namespace {ns:?} is unknown to the cluster: it has no policy, no breakers, no ledger \
         records and its kill switch was never thrown; check the name"
    ))
}

/// Fails unless `ns` is known.
pub async fn ensure_namespace(s: &Session, ns: &str) -> anyhow::Result<()> {
    if namespace_known(s, ns).await? {
        Ok(())
    } else {
        Err(unknown_namespace(ns).into())
    }
}

/// A wire key as the operators' notation `NS/SERVER[/TOOL[/BACKEND]]`.
pub fn key_text(key: &pb::BreakerKey) -> String {
    let mut text = format!("{}/{}", key.namespace, key.server);
    for part in [&key.tool, &key.backend].into_iter().flatten() {
        text.push('/');
        text.push_str(part);
    }
    text
}

/// A core key on the wire: the server's own conversion.
pub use fusebox_server::api::convert::breakers::key_to_proto;

/// Whether the cluster tracks `key` (lists it among its server's breakers).
async fn tracked(s: &Session, key: &BreakerKey) -> anyhow::Result<bool> {
    let wanted = key.to_string();
    let mut page_token = String::new();
    for _ in 0..SERVER_PAGES_MAX {
        let request = pb::ListBreakersRequest {
            namespace: key.namespace.to_string(),
            meta: s.meta(),
            server: Some(key.server.to_string()),
            page_token: page_token.clone(),
            ..Default::default()
        };
        let page = rpc("listing breakers", s.breakers().list_breakers(request)).await?;
        let found = page
            .breakers
            .iter()
            .filter_map(|v| v.key.as_ref())
            .any(|k| key_text(k) == wanted);
        if found {
            return Ok(true);
        }
        if page.next_page_token.is_empty() {
            return Ok(false);
        }
        page_token = page.next_page_token;
    }
    Ok(false)
}

/// Whether the policy document names the key's server, and its tool when
/// the key has one.
fn policy_names(document: &PolicyDocument, key: &BreakerKey) -> bool {
    let Some(server) = document.servers.get(&key.server) else {
        return false;
    };
    key.tool
        .as_ref()
        .is_none_or(|t| server.tools.contains_key(t))
}

/// Fails with exit code 3 unless the cluster tracks `key` or the policy in
/// force names it; `hint` is appended to the message (e.g. how to act on an
/// unknown breaker anyway).
pub async fn ensure_breaker(s: &Session, key: &BreakerKey, hint: &str) -> anyhow::Result<()> {
    if tracked(s, key).await? {
        return Ok(());
    }
    let ns = key.namespace.as_str();
    let (_, document) = document_in_force(s, ns).await?;
    if policy_names(&document, key) {
        return Ok(());
    }
    if !namespace_known(s, ns).await? {
        return Err(unknown_namespace(ns).into());
    }
    let what = match &key.tool {
        Some(tool) => format!("tool {tool} on server {}", key.server),
        None => format!("server {}", key.server),
    };
    Err(Failure::not_found(format!(
        "breaker {key} is unknown: no outcome was ever reported for it and the policy of \
         namespace {ns} names no {what}; check the spelling{hint}"
    ))
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> BreakerKey {
        BreakerKey::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn the_policy_names_servers_and_their_tools() {
        let text = "[servers.deployments.tools.restart]\neffect = \"non_idempotent_write\"\n";
        let document = PolicyDocument::parse(text, PolicyFormat::Toml)
            .unwrap_or_else(|e| panic!("valid policy: {e}"));
        assert!(policy_names(&document, &key("ns/deployments")));
        assert!(policy_names(&document, &key("ns/deployments/restart")));
        assert!(policy_names(
            &document,
            &key("ns/deployments/restart/job-1")
        ));
        assert!(!policy_names(&document, &key("ns/deployments/restrat")));
        assert!(!policy_names(&document, &key("ns/deploy")));
    }

    #[test]
    fn wire_keys_read_in_operator_notation() {
        let k = key("ns/srv/tool/b1");
        assert_eq!(key_text(&key_to_proto(&k)), "ns/srv/tool/b1");
        assert_eq!(key_text(&key_to_proto(&key("ns/srv"))), "ns/srv");
    }
}
