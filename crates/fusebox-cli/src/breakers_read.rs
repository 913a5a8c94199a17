//! What the cluster says about one breaker: its view, and the policy in
//! force for it.
//!
//! `breakers show` prints both; `breakers close` reads the view to refuse a
//! breaker that is not open and to reset it only at the generation it read.
//! The reads live here so the command module and the change module each
//! depend on them rather than on each other.

use crate::breakers_view::PolicyInForce;
use crate::client::Session;
use crate::failure::{rpc, Failure};
use crate::known::{document_in_force, key_to_proto};
use fusebox_core::breaker::BreakerKey;
use fusebox_proto::v1 as pb;

/// Reads one breaker's view.
pub async fn read_view(s: &Session, key: &BreakerKey) -> anyhow::Result<pb::BreakerView> {
    let request = pb::GetBreakerRequest {
        namespace: key.namespace.to_string(),
        meta: s.meta(),
        key: Some(key_to_proto(key)),
    };
    let reply = rpc("breakers show", s.breakers().get_breaker(request)).await?;
    reply
        .breaker
        .ok_or_else(|| Failure::refused(format!("the cluster sent no view of {key}")).into())
}

/// The policy in force for `key`: the version, and the tool and breaker
/// settings it resolves to (built-in defaults when the namespace has none).
pub async fn policy_in_force(s: &Session, key: &BreakerKey) -> anyhow::Result<PolicyInForce> {
    let (version, document) = document_in_force(s, key.namespace.as_str()).await?;
    let (tool, breaker) = match &key.tool {
        Some(tool) => {
            let policy = document.tool_policy(&key.server, tool);
            let breaker = policy.breaker.clone();
            (Some(policy), breaker)
        }
        None => (None, document.server_breaker(&key.server)),
    };
    Ok(PolicyInForce {
        version,
        tool,
        breaker,
    })
}
