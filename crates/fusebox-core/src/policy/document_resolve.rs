//! Resolution: the effective policy of one tool or server, field by field.
//!
//! Layers are searched most specific first (tool, server, defaults) and the
//! first layer that sets a field wins; the built-in defaults of
//! [`ToolPolicy::default`] fill what no layer sets. Nested breaker and retry
//! fields resolve one by one, so a tool that changes only `open_ms` keeps its
//! server's `probe_successes`.
//!
//! Two choices are made as a whole rather than field by field:
//! - the trip kind is chosen by the most specific layer that sets any trip
//!   field (`consecutive_failures` or a window field); the window's own
//!   fields then resolve one by one across all layers;
//! - caps never fall below what they cap: `open_ms_max` is at least
//!   `open_ms` and `backoff_max_ms` at least `backoff_initial_ms`, so an
//!   unset cap follows its base and an engine never sees an inverted pair
//!   (validation reports an explicit inverted pair as a problem).
//!
//! A non-idempotent write that no layer gives `max_attempts` gets one attempt,
//! not the built-in three: it is never retried automatically.

use super::classify::Classification;
use super::document::{PolicyDocument, ToolOverrides};
use super::resolved::{
    BreakerPolicy, EffectClass, OpenBackoff, RetryPolicy, ToolPolicy, Trip, WindowPolicy,
};
use crate::limits::{LEDGER_RETENTION_MS_DEFAULT, OBSERVED_WINDOW_MS_DEFAULT};
use crate::name::{ServerName, ToolName};

impl PolicyDocument {
    /// The effective policy of one tool: tool over server over defaults over
    /// built-in defaults, field by field.
    pub fn tool_policy(&self, server: &ServerName, tool: &ToolName) -> ToolPolicy {
        let server_overrides = self.servers.get(server);
        let server_layer = server_overrides.map(|s| s.settings());
        let tool_layer = server_overrides.and_then(|s| s.tools.get(tool));
        let layers: Vec<&ToolOverrides> = [tool_layer, server_layer.as_ref(), Some(&self.defaults)]
            .into_iter()
            .flatten()
            .collect();
        resolve_tool(&layers)
    }

    /// [`PolicyDocument::tool_policy`] with the effect class `hinted` (what
    /// the tool's manifest hints imply) wherever the document declares none.
    pub fn tool_policy_hinted(
        &self,
        server: &ServerName,
        tool: &ToolName,
        hinted: Option<EffectClass>,
    ) -> ToolPolicy {
        let mut policy = self.tool_policy(server, tool);
        if let Some(effect) = hinted.filter(|_| self.declared_effect(server, tool).is_none()) {
            policy.effect = effect;
        }
        policy
    }

    /// The effect class some layer (tool, server or defaults) sets for a
    /// tool, `None` when the document says nothing and a caller may fall
    /// back to what the tool's manifest hints.
    pub fn declared_effect(&self, server: &ServerName, tool: &ToolName) -> Option<EffectClass> {
        let server_overrides = self.servers.get(server);
        let tool_effect = server_overrides
            .and_then(|s| s.tools.get(tool))
            .and_then(|t| t.effect);
        tool_effect
            .or_else(|| server_overrides.and_then(|s| s.effect))
            .or(self.defaults.effect)
    }

    /// The effective policy of a server's own breaker: server over defaults
    /// over built-in defaults (tool sections do not apply).
    pub fn server_breaker(&self, server: &ServerName) -> BreakerPolicy {
        let server_layer = self.servers.get(server).map(|s| s.settings());
        let layers: Vec<&ToolOverrides> = [server_layer.as_ref(), Some(&self.defaults)]
            .into_iter()
            .flatten()
            .collect();
        resolve_breaker(&layers)
    }

    /// How long the ledger keeps completed records in this namespace.
    pub fn ledger_retention_ms(&self) -> u64 {
        self.ledger
            .retention_ms
            .unwrap_or(LEDGER_RETENTION_MS_DEFAULT)
    }

    /// Width of the rolling window of observed latency in this namespace.
    pub fn observation_window_ms(&self) -> u64 {
        self.latency.window_ms.unwrap_or(OBSERVED_WINDOW_MS_DEFAULT)
    }
}

/// The first value any layer sets, most specific layer first.
pub(crate) fn first<T>(
    layers: &[&ToolOverrides],
    field: impl Fn(&ToolOverrides) -> Option<T>,
) -> Option<T> {
    layers.iter().find_map(|layer| field(layer))
}

/// Resolves a tool from its layers, most specific first.
pub(crate) fn resolve_tool(layers: &[&ToolOverrides]) -> ToolPolicy {
    let built_in = ToolPolicy::default();
    let effect = first(layers, |l| l.effect).unwrap_or(built_in.effect);
    ToolPolicy {
        timeout_ms: first(layers, |l| l.timeout_ms).unwrap_or(built_in.timeout_ms),
        effect,
        retry: resolve_retry(layers, effect),
        breaker: resolve_breaker(layers),
        scope: first(layers, |l| l.scope).unwrap_or(built_in.scope),
        on_partition: first(layers, |l| l.on_partition).unwrap_or(built_in.on_partition),
        in_flight_on_open: first(layers, |l| l.in_flight_on_open)
            .unwrap_or(built_in.in_flight_on_open),
        stalled_after_ms: first(layers, |l| l.stalled_after_ms).or(built_in.stalled_after_ms),
        classify: Classification::resolve(layers.iter().map(|l| &l.classify)),
    }
}

fn resolve_retry(layers: &[&ToolOverrides], effect: EffectClass) -> RetryPolicy {
    let built_in = RetryPolicy::default();
    let default_attempts = if effect == EffectClass::NonIdempotentWrite {
        1
    } else {
        built_in.max_attempts
    };
    let backoff_initial_ms =
        first(layers, |l| l.retry.backoff_initial_ms).unwrap_or(built_in.backoff_initial_ms);
    let backoff_max_ms = first(layers, |l| l.retry.backoff_max_ms)
        .unwrap_or(built_in.backoff_max_ms)
        .max(backoff_initial_ms);
    RetryPolicy {
        max_attempts: first(layers, |l| l.retry.max_attempts).unwrap_or(default_attempts),
        retry_on: first(layers, |l| l.retry.retry_on.clone()).unwrap_or(built_in.retry_on),
        backoff_initial_ms,
        backoff_max_ms,
        jitter: first(layers, |l| l.retry.jitter).unwrap_or(built_in.jitter),
    }
}

/// Resolves a breaker from its layers, most specific first.
pub(crate) fn resolve_breaker(layers: &[&ToolOverrides]) -> BreakerPolicy {
    let built_in = BreakerPolicy::default();
    let open_ms = first(layers, |l| l.breaker.open_ms).unwrap_or(built_in.open.open_ms);
    let open = OpenBackoff {
        open_ms,
        multiplier: first(layers, |l| l.breaker.open_backoff_multiplier)
            .unwrap_or(built_in.open.multiplier),
        open_ms_max: first(layers, |l| l.breaker.open_ms_max)
            .unwrap_or(built_in.open.open_ms_max)
            .max(open_ms),
    };
    BreakerPolicy {
        trip: resolve_trip(layers).unwrap_or(built_in.trip),
        min_reporters: first(layers, |l| l.breaker.min_reporters).unwrap_or(built_in.min_reporters),
        open,
        concurrent_probes: first(layers, |l| l.breaker.concurrent_probes)
            .unwrap_or(built_in.concurrent_probes),
        probe_successes: first(layers, |l| l.breaker.probe_successes)
            .unwrap_or(built_in.probe_successes),
        probe_lease_ms: first(layers, |l| l.breaker.probe_lease_ms)
            .unwrap_or(built_in.probe_lease_ms),
        rate_limited_is_failure: first(layers, |l| l.breaker.rate_limited_is_failure)
            .unwrap_or(built_in.rate_limited_is_failure),
        shadow: first(layers, |l| l.shadow).unwrap_or(built_in.shadow),
    }
}

/// The trip chosen by the most specific layer that sets any trip field, or
/// `None` when no layer does.
fn resolve_trip(layers: &[&ToolOverrides]) -> Option<Trip> {
    let chooser = layers.iter().find(|l| l.breaker.sets_trip())?;
    if !chooser.breaker.sets_window() {
        let failures = chooser.breaker.consecutive_failures?;
        return Some(Trip::ConsecutiveFailures { failures });
    }
    let built_in = WindowPolicy::default();
    Some(Trip::SlidingWindow(WindowPolicy {
        window_ms: first(layers, |l| l.breaker.window_ms).unwrap_or(built_in.window_ms),
        minimum_calls: first(layers, |l| l.breaker.minimum_calls).unwrap_or(built_in.minimum_calls),
        failure_ratio: first(layers, |l| l.breaker.failure_ratio).unwrap_or(built_in.failure_ratio),
        slow_call_ms: first(layers, |l| l.breaker.slow_call_ms).or(built_in.slow_call_ms),
        slow_call_ratio: first(layers, |l| l.breaker.slow_call_ratio)
            .unwrap_or(built_in.slow_call_ratio),
    }))
}
