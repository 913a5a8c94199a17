//! Operator changes to one breaker: force open, close, reset, disable,
//! shadow.
//!
//! Each change checks first that the breaker is one the cluster knows (see
//! `known`), carries the operator's identity and reason into the breaker's
//! audit trail, and answers with the breaker as it now is. `close` is a
//! compare-and-set: it reads the breaker, refuses unless it is open, and
//! resets it only at the generation it read, so it never closes a breaker
//! that changed in between.

use crate::breakers_read::read_view;
use crate::breakers_view::{state_name, view_json};
use crate::client::Session;
use crate::failure::{rpc, Failure};
use crate::known::{ensure_breaker, key_to_proto};
use crate::out::outln;
use crate::time_text::{instant_from, now_ms, span};
use fusebox_core::breaker::BreakerKey;
use fusebox_proto::v1 as pb;
use serde_json::json;

/// What an operator command does, for the request and the confirmation.
#[derive(Clone, Copy)]
pub enum Change {
    /// Force open, for a duration in milliseconds or until closed.
    ForceOpen(Option<u64>),
    /// Close an open breaker.
    Close,
    /// Back to closed with empty counts from any state.
    Reset,
    /// Always allow, never trip, for a duration or until reset.
    Disable(Option<u64>),
    /// Metrics only: decide and count, never reject, for a duration or
    /// until reset.
    Shadow(Option<u64>),
}

/// Refuses to close a breaker that is not open, and says what to do.
fn check_closable(key: &BreakerKey, view: &pb::BreakerView) -> Result<(), Failure> {
    let open = [
        pb::BreakerState::Open,
        pb::BreakerState::HalfOpen,
        pb::BreakerState::ForcedOpen,
    ];
    if open.iter().any(|st| *st as i32 == view.state) {
        return Ok(());
    }
    Err(Failure::refused(format!(
        "breaker {key} is {}, not open: nothing to close (`breakers reset` clears its counts \
         and ends a disabled or shadow state)",
        state_name(view.state)
    )))
}

/// Applies one change to `key` as the session's operator.
pub async fn apply(
    s: &Session,
    key: &BreakerKey,
    change: Change,
    reason: String,
    allow_unknown: bool,
) -> anyhow::Result<()> {
    let actor = s.actor()?;
    if !allow_unknown {
        let hint = match change {
            Change::ForceOpen(_) | Change::Disable(_) | Change::Shadow(_) => {
                ", or pass --allow-unknown to act on it anyway"
            }
            Change::Close | Change::Reset => "",
        };
        ensure_breaker(s, key, hint).await?;
    }
    let expected_generation = if matches!(change, Change::Close) {
        let view = read_view(s, key).await?;
        check_closable(key, &view)?;
        Some(view.generation)
    } else {
        None
    };
    let order = Order {
        key,
        actor: &actor,
        reason: &reason,
        expected_generation,
    };
    let reply = send(s, change, &order).await?;
    let view = reply.breaker.unwrap_or_default();
    if s.json {
        let out = json!({"breaker": view_json(&view), "revision": reply.revision,
                         "actor": actor, "reason": reason});
        outln!("{out}");
    } else {
        outln!("{}", confirmation(key, change, &view, &actor, &reason));
    }
    Ok(())
}

/// Who asks what of which breaker, common to every change.
struct Order<'a> {
    key: &'a BreakerKey,
    actor: &'a str,
    reason: &'a str,
    expected_generation: Option<u64>,
}

/// Sends one change as its RPC.
async fn send(
    s: &Session,
    change: Change,
    o: &Order<'_>,
) -> anyhow::Result<pb::BreakerChangeResponse> {
    let (namespace, meta, key) = (
        o.key.namespace.to_string(),
        s.meta(),
        Some(key_to_proto(o.key)),
    );
    let (actor, reason, expected_generation) = (
        o.actor.to_owned(),
        o.reason.to_owned(),
        o.expected_generation,
    );
    let mut client = s.breakers();
    let reply = match change {
        Change::ForceOpen(duration_ms) => {
            let request = pb::ForceOpenRequest {
                namespace,
                meta,
                key,
                reason,
                duration_ms,
                actor,
                expected_generation,
            };
            rpc("breakers open", client.force_open(request)).await?
        }
        Change::Close | Change::Reset => {
            let request = pb::ResetBreakerRequest {
                namespace,
                meta,
                key,
                actor,
                reason,
                expected_generation,
            };
            rpc("breakers reset", client.reset(request)).await?
        }
        Change::Disable(duration_ms) => {
            let request = pb::DisableBreakerRequest {
                namespace,
                meta,
                key,
                actor,
                reason,
                expected_generation,
                duration_ms,
            };
            rpc("breakers disable", client.disable(request)).await?
        }
        Change::Shadow(duration_ms) => {
            let request = pb::SetMetricsOnlyRequest {
                namespace,
                meta,
                key,
                actor,
                reason,
                expected_generation,
                duration_ms,
            };
            rpc("breakers shadow", client.set_metrics_only(request)).await?
        }
    };
    Ok(reply)
}

/// How long an operator's hold lasts, as a confirmation says it.
fn held_until(view: &pb::BreakerView, ms: Option<u64>) -> String {
    match ms {
        None => " until `breakers reset`".to_owned(),
        Some(ms) => {
            let until = view
                .operator
                .as_ref()
                .and_then(|o| o.expires_at_ms)
                .map_or_else(|| span(ms), |at| instant_from(at, now_ms()));
            format!(" for {}, until {until}", span(ms))
        }
    }
}

fn confirmation(
    key: &BreakerKey,
    change: Change,
    view: &pb::BreakerView,
    actor: &str,
    reason: &str,
) -> String {
    let what = match change {
        Change::ForceOpen(Some(ms)) => {
            let until = view
                .forced
                .as_ref()
                .and_then(|f| f.expires_at_ms)
                .map_or_else(|| span(ms), |at| instant_from(at, now_ms()));
            format!("forced open for {}, until {until}", span(ms))
        }
        Change::ForceOpen(None) => "forced open until `breakers close`".to_owned(),
        Change::Close => "closed".to_owned(),
        Change::Reset => "reset to closed with empty counts".to_owned(),
        Change::Disable(ms) => format!(
            "disabled (always allows, never trips){}",
            held_until(view, ms)
        ),
        Change::Shadow(ms) => format!(
            "in shadow (decides and counts, never rejects){}",
            held_until(view, ms)
        ),
    };
    format!(
        "breaker {key} {what}; now {} at generation {}, by {actor}: {reason}",
        state_name(view.state),
        view.generation
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> BreakerKey {
        BreakerKey::parse(text).unwrap()
    }

    #[test]
    fn only_open_breakers_can_be_closed() {
        let open = pb::BreakerView {
            state: pb::BreakerState::ForcedOpen as i32,
            ..Default::default()
        };
        assert!(check_closable(&key("ns/srv/tool"), &open).is_ok());
        let disabled = pb::BreakerView {
            state: pb::BreakerState::Disabled as i32,
            ..Default::default()
        };
        let refusal = check_closable(&key("ns/srv/tool"), &disabled)
            .err()
            .unwrap()
            .to_string();
        assert!(refusal.contains("is disabled, not open"), "{refusal}");
    }

    #[test]
    fn a_timed_force_says_until_when() {
        let view = pb::BreakerView {
            state: pb::BreakerState::ForcedOpen as i32,
            generation: 4,
            ..Default::default()
        };
        let change = Change::ForceOpen(Some(120_000));
        let text = confirmation(&key("ns/srv/tool"), change, &view, "bob", "freeze");
        assert!(
            text.starts_with("breaker ns/srv/tool forced open for 2m"),
            "{text}"
        );
        assert!(
            text.ends_with("forced_open at generation 4, by bob: freeze"),
            "{text}"
        );
    }
}
