//! Operator commands on one breaker: force open, reset, disable, metrics
//! only. The four requests share their checks, so they share this type; the
//! node proposes it (`fusebox_server::api::operator`).

use super::breakers::key_from_proto;
use super::{actor, bounded, meta, namespace, required};
use crate::caller::Caller;
use crate::status;
use fusebox_core::breaker::BreakerKey;
use fusebox_core::limits::{FORCE_OPEN_MS_MAX, REASON_BYTES_MAX};
use fusebox_core::machine::{Command, OperatorAction};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// A validated operator command, ready to propose.
#[derive(Clone, Debug)]
pub struct OperatorCommand {
    /// The breaker.
    pub key: BreakerKey,
    /// What to do to it.
    pub action: OperatorAction,
    /// Who does it (the audit's actor).
    pub actor: String,
    /// Why.
    pub reason: String,
    /// The generation the operator saw, when it asked for a compare-and-set.
    pub expected_generation: Option<u64>,
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

    /// The command to propose (the generation check is the node's, just
    /// before it proposes).
    pub fn command(&self) -> Command {
        Command::Operate {
            key: self.key.clone(),
            action: self.action.clone(),
            actor: self.actor.clone(),
            reason: self.reason.clone(),
        }
    }
}
