//! Operator commands on one breaker: force open, reset, disable, metrics
//! only. The four RPCs share validation, the generation compare-and-set and
//! the answer, so they share this type.

use super::convert::breakers::{key_from_proto, view_to_proto};
use super::convert::{actor, bounded, meta, namespace, required};
use super::gateway::{unexpected, Gateway, Served};
use super::status;
use crate::auth::Caller;
use crate::backend::Backend;
use fusebox_core::breaker::BreakerKey;
use fusebox_core::limits::{FORCE_OPEN_MS_MAX, REASON_BYTES_MAX};
use fusebox_core::machine::{Answer, Command, OperatorAction};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// A validated operator command, ready to propose.
#[derive(Clone, Debug)]
pub struct OperatorCommand {
    key: BreakerKey,
    action: OperatorAction,
    actor: String,
    reason: String,
    expected_generation: Option<u64>,
}

/// The fields every operator request has.
struct Common<'a> {
    namespace: &'a str,
    meta: Option<&'a pb::RequestMeta>,
    key: Option<&'a pb::BreakerKey>,
    actor: &'a str,
    caller: &'a Caller,
    reason: &'a str,
    expected_generation: Option<u64>,
}

/// The [`Common`] fields of any of the four operator requests.
macro_rules! common {
    ($req:expr, $caller:expr) => {
        Common {
            namespace: &$req.namespace,
            meta: $req.meta.as_ref(),
            key: $req.key.as_ref(),
            actor: &$req.actor,
            caller: $caller,
            reason: &$req.reason,
            expected_generation: $req.expected_generation,
        }
    };
}

/// An operator's period, when given: 1 ms to [`FORCE_OPEN_MS_MAX`].
fn period(duration_ms: Option<u64>) -> Result<Option<u64>, Status> {
    match duration_ms {
        Some(ms) if ms == 0 || ms > FORCE_OPEN_MS_MAX => {
            let reason = format!("must be 1..={FORCE_OPEN_MS_MAX}, got {ms}");
            Err(status::invalid_field("duration_ms", &reason))
        }
        other => Ok(other),
    }
}

impl OperatorCommand {
    /// `ForceOpen`: a reason is required, a duration is optional but bounded.
    pub fn force_open(req: &pb::ForceOpenRequest, caller: &Caller) -> Result<Self, Status> {
        required("reason", &req.reason, REASON_BYTES_MAX)?;
        let action = OperatorAction::ForceOpen {
            for_ms: period(req.duration_ms)?,
        };
        Self::validated(common!(req, caller), action)
    }

    /// `Reset`.
    pub fn reset(req: &pb::ResetBreakerRequest, caller: &Caller) -> Result<Self, Status> {
        Self::validated(common!(req, caller), OperatorAction::Reset)
    }

    /// `Disable`: a reason is required, a duration is optional but bounded.
    pub fn disable(req: &pb::DisableBreakerRequest, caller: &Caller) -> Result<Self, Status> {
        required("reason", &req.reason, REASON_BYTES_MAX)?;
        let action = OperatorAction::Disable {
            for_ms: period(req.duration_ms)?,
        };
        Self::validated(common!(req, caller), action)
    }

    /// `SetMetricsOnly`: a reason is required, a duration is optional but
    /// bounded.
    pub fn metrics_only(req: &pb::SetMetricsOnlyRequest, caller: &Caller) -> Result<Self, Status> {
        required("reason", &req.reason, REASON_BYTES_MAX)?;
        let action = OperatorAction::MetricsOnly {
            for_ms: period(req.duration_ms)?,
        };
        Self::validated(common!(req, caller), action)
    }

    fn validated(c: Common<'_>, action: OperatorAction) -> Result<Self, Status> {
        meta(c.meta)?;
        let ns = namespace(c.namespace)?;
        let key = key_from_proto(&ns, c.key)?;
        bounded("reason", c.reason, REASON_BYTES_MAX)?;
        Ok(OperatorCommand {
            key,
            action,
            actor: actor(c.caller, c.actor, c.meta)?,
            reason: c.reason.to_owned(),
            expected_generation: c.expected_generation,
        })
    }

    /// Checks the compare-and-set, proposes, and answers with the breaker as
    /// it now is. The check reads this node's state just before proposing:
    /// it catches an operator acting on an outdated view, not a race with a
    /// change committed in between.
    pub async fn run<B: Backend>(
        self,
        gateway: &Gateway<B>,
    ) -> Result<Served<pb::BreakerChangeResponse>, Status> {
        if let Some(expected) = self.expected_generation {
            let key = self.key.clone();
            let current = gateway.read_local(move |s| s.view(&key).generation).await?;
            if current != expected {
                return Err(status::stale(
                    "generation",
                    expected.to_string(),
                    current.to_string(),
                ));
            }
        }
        tracing::info!(breaker = %self.key, action = ?self.action, actor = %self.actor, "operator command");
        let command = Command::Operate {
            key: self.key,
            action: self.action,
            actor: self.actor,
            reason: self.reason,
        };
        let applied = match gateway.write(command).await? {
            Served::Here(applied) => applied,
            Served::Leader(leader) => return Ok(Served::Leader(leader)),
        };
        let Answer::Breaker(view) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        let revision = gateway.revision_after(&applied).await?;
        let view = (**view).clone();
        let breaker = gateway.read_local(move |s| view_to_proto(s, &view)).await?;
        Ok(Served::Here(pb::BreakerChangeResponse {
            breaker: Some(breaker),
            revision,
        }))
    }
}
