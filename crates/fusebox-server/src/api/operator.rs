//! Proposing an operator command on one breaker (force open, reset,
//! disable, metrics only); the four requests' checks are
//! [`fusebox_api::convert::operator`].

use super::convert::breakers::view_to_proto;
use super::gateway::{unexpected, Gateway, Served};
use super::status;
use crate::backend::Backend;
use fusebox_core::machine::Answer;
use fusebox_proto::v1 as pb;
use tonic::Status;

pub use fusebox_api::convert::operator::OperatorCommand;

/// Checks the compare-and-set, proposes, and answers with the breaker as it
/// now is. The check reads this node's state just before proposing: it
/// catches an operator acting on an outdated view, not a race with a change
/// committed in between.
pub async fn run<B: Backend>(
    operator: OperatorCommand,
    gateway: &Gateway<B>,
) -> Result<Served<pb::BreakerChangeResponse>, Status> {
    if let Some(expected) = operator.expected_generation {
        let key = operator.key.clone();
        let current = gateway.read_local(move |s| s.view(&key).generation).await?;
        if current != expected {
            return Err(status::stale(
                "generation",
                expected.to_string(),
                current.to_string(),
            ));
        }
    }
    tracing::info!(breaker = %operator.key, action = ?operator.action, actor = %operator.actor, "operator command");
    let applied = match gateway.write(operator.command()).await? {
        Served::Here(applied) => applied,
        Served::Leader(leader) => return Ok(Served::Leader(leader)),
    };
    let Answer::Breaker(view) = &applied.answer else {
        return Err(unexpected(&applied.answer));
    };
    let revision = applied.revision;
    let view = (**view).clone();
    let breaker = gateway.read_local(move |s| view_to_proto(s, &view)).await?;
    Ok(Served::Here(pb::BreakerChangeResponse {
        breaker: Some(breaker),
        revision,
    }))
}
