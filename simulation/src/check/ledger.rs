//! End-of-run ledger checks: the replicas' raw histories are linearizable
//! against the ledger's own rules (which also catches two `started` for one
//! key and a lost acknowledged completion, since every key is read back
//! after the heal), and no non-idempotent write ran twice through the SDK.

use super::ledger_model::{check_ledger, Clocks};
use super::linearizability::{Limits, Verdict};
use crate::world::World;

/// Judges the run's histories at `end_ms`; violations go to the world.
pub fn judge(world: &World, end_ms: u64) {
    let ops = world.ledger_ops.borrow().clone();
    let skew_ms = crate::faults::CLOCK_SKEW_MS_MAX.unsigned_abs();
    match check_ledger(&ops, Clocks { skew_ms }, Limits::default()) {
        Ok(Verdict::Linearizable) => {
            world.log_at(
                end_ms,
                "check",
                format!("ledger: {} operations linearizable", ops.len()),
            );
        }
        Ok(Verdict::Violation(v)) => world.violate(end_ms, "ledger linearizable", v.to_string()),
        Ok(Verdict::Unknown { key, reason }) => {
            world.count("ledger keys undecided");
            world.log_at(
                end_ms,
                "check",
                format!("ledger key {key} undecided: {reason:?}"),
            );
        }
        Err(e) => world.violate(end_ms, "ledger history", e.to_string()),
    }
    for (key, runs) in world.write_runs.borrow().iter() {
        if key.starts_with("ch-") && *runs > 1 {
            world.violate(
                end_ms,
                "non-idempotent write at most once",
                format!("charge {key} ran {runs} times"),
            );
        }
    }
}
