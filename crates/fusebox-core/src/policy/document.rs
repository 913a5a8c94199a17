//! The policy document an operator writes for one namespace (TOML or YAML).
//!
//! Every field is optional: a document says only what differs from the layer
//! below it (tool over server over defaults over the built-in defaults of
//! [`ToolPolicy`](super::ToolPolicy)). Unknown fields are refused, so a typo is an error the
//! operator sees at apply time instead of a setting silently ignored. Maps
//! are `BTreeMap`s so that rendering, diffs and resolution are deterministic.
//!
//! This file holds the shape and parsing; resolution lives in
//! `document_resolve.rs`, validation in `validate.rs`, canonical rendering
//! and diffs in `document_diff.rs`.

use super::classify::ClassifyOverrides;
use super::failover::FailoverGroup;
use super::resolved::{EffectClass, InFlightOnOpen, OnPartition, Scope};
use super::PolicyProblem;
use crate::error::CoreError;
use crate::limits::POLICY_DOCUMENT_BYTES_MAX;
use crate::name::{ServerName, ToolName};
use crate::outcome::OutcomeClass;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// The written form of a document, chosen by the operator's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyFormat {
    /// TOML, the canonical form (history and diffs are rendered in it).
    Toml,
    /// YAML, for operators whose other configuration is YAML.
    Yaml,
}

impl PolicyFormat {
    /// Picks the format from a file extension or a whole path
    /// (`toml`, `.yaml`, `policy.yml`), so the CLI needs no `--format` flag.
    pub fn from_path_extension(path_or_extension: &str) -> Option<Self> {
        let ext = path_or_extension
            .rsplit_once('.')
            .map_or(path_or_extension, |(_, ext)| ext);
        match ext.to_ascii_lowercase().as_str() {
            "toml" => Some(PolicyFormat::Toml),
            "yaml" | "yml" => Some(PolicyFormat::Yaml),
            _ => None,
        }
    }
}

/// One namespace's policy: defaults, the ledger, per-server and per-tool overrides.
///
/// In self-describing formats (TOML, YAML, JSON) it has the shape operators
/// write, with unset fields left out. In compact formats such as postcard,
/// which cannot skip fields, it travels as its canonical TOML text, so a log
/// entry or snapshot that carries a document always decodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyDocument {
    /// Settings for every tool that no server or tool override changes.
    pub defaults: ToolOverrides,
    /// Idempotency-ledger settings for the namespace.
    pub ledger: LedgerSettings,
    /// How the fleet's observed latency is kept for the namespace.
    pub latency: LatencySettings,
    /// Per-server overrides, each with its per-tool overrides.
    pub servers: BTreeMap<ServerName, ServerOverrides>,
    /// Tools that may stand in for one another when a breaker refuses
    /// (none by default: an open circuit is not bypassed).
    pub failover: Vec<FailoverGroup>,
}

/// The document's fields as TOML, YAML and JSON spell them.
#[derive(Serialize, Deserialize)]
#[serde(remote = "PolicyDocument", deny_unknown_fields)]
struct PolicyFields {
    #[serde(default, skip_serializing_if = "ToolOverrides::is_empty")]
    defaults: ToolOverrides,
    #[serde(default, skip_serializing_if = "LedgerSettings::is_empty")]
    ledger: LedgerSettings,
    #[serde(default, skip_serializing_if = "LatencySettings::is_empty")]
    latency: LatencySettings,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    servers: BTreeMap<ServerName, ServerOverrides>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failover: Vec<FailoverGroup>,
}

impl Serialize for PolicyDocument {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return PolicyFields::serialize(self, serializer);
        }
        let text = toml::to_string(self).map_err(S::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for PolicyDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            return PolicyFields::deserialize(deserializer);
        }
        let text = String::deserialize(deserializer)?;
        toml::from_str(&text).map_err(D::Error::custom)
    }
}

/// Optional settings of one layer (defaults, one server or one tool); `None`
/// means "inherit from the layer below".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverrides {
    /// Per-call deadline, so one slow tool cannot stall the whole turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The tool's real effect, which decides retries and the kill switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectClass>,
    /// Whether tool breakers are narrowed by backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// What a replica does when it cannot reach the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_partition: Option<OnPartition>,
    /// What a call still running does when its breaker opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_on_open: Option<InFlightOnOpen>,
    /// How long a call may go unanswered before it counts against its
    /// breakers as a timeout, while it keeps running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_after_ms: Option<u64>,
    /// Shadow mode: decide and count, never reject (staged rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<bool>,
    /// Retry overrides, field by field.
    #[serde(default, skip_serializing_if = "RetryOverrides::is_empty")]
    pub retry: RetryOverrides,
    /// Breaker overrides, field by field.
    #[serde(default, skip_serializing_if = "BreakerOverrides::is_empty")]
    pub breaker: BreakerOverrides,
    /// Answer patterns, list by list (see `classify.rs`).
    #[serde(default, skip_serializing_if = "ClassifyOverrides::is_empty")]
    pub classify: ClassifyOverrides,
}

/// One server's overrides: the same settings as [`ToolOverrides`] (whose
/// breaker fields also configure the per-server breaker) plus its tools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerOverrides {
    /// Deadline for this server's tools unless a tool says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Effect of this server's tools unless a tool says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectClass>,
    /// Breaker keying of this server's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// Partition behaviour of this server's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_partition: Option<OnPartition>,
    /// In-flight behaviour of this server's tools when a breaker opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_on_open: Option<InFlightOnOpen>,
    /// When this server's unanswered calls count as timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_after_ms: Option<u64>,
    /// Shadow mode for this server's breaker and tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<bool>,
    /// Retry overrides for this server's tools.
    #[serde(default, skip_serializing_if = "RetryOverrides::is_empty")]
    pub retry: RetryOverrides,
    /// Breaker overrides for the server breaker and this server's tools.
    #[serde(default, skip_serializing_if = "BreakerOverrides::is_empty")]
    pub breaker: BreakerOverrides,
    /// Answer patterns for this server's tools.
    #[serde(default, skip_serializing_if = "ClassifyOverrides::is_empty")]
    pub classify: ClassifyOverrides,
    /// Per-tool overrides, the most specific layer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<ToolName, ToolOverrides>,
}

/// Optional retry settings of one layer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOverrides {
    /// Attempts in all, the first included (1 = never retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Outcome classes worth a retry; only retryable classes are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<Vec<OutcomeClass>>,
    /// First backoff, so retries do not hammer a struggling backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_initial_ms: Option<u64>,
    /// Backoff cap, so retries stay inside the journey budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_max_ms: Option<u64>,
    /// Full jitter, so replicas do not retry in lockstep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<bool>,
}

/// Optional breaker settings of one layer.
///
/// Setting `consecutive_failures` selects the consecutive trip; setting any
/// window field selects the sliding-window trip; setting both in one layer is
/// a problem.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerOverrides {
    /// Failures in a row that open the breaker (consecutive trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<u32>,
    /// Width of the sliding window (window trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
    /// Calls the window needs before it may open the breaker (window trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_calls: Option<u32>,
    /// Failure share that opens the breaker, in (0, 1] (window trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_ratio: Option<f64>,
    /// A call at least this slow counts as slow (window trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_call_ms: Option<u64>,
    /// Slow-call share that opens the breaker, in (0, 1] (window trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_call_ratio: Option<f64>,
    /// Distinct replicas that must report failures before it opens, so one
    /// replica with a broken network cannot open it for the fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reporters: Option<u32>,
    /// How long the breaker stays open after the first trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_ms: Option<u64>,
    /// Growth of the open duration per reopen (1 keeps it fixed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_backoff_multiplier: Option<u32>,
    /// Cap on the grown open duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_ms_max: Option<u64>,
    /// Probe permits granted at once, fleet-wide, in half-open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_probes: Option<u32>,
    /// Probe successes that close a half-open breaker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_successes: Option<u32>,
    /// Lifetime of a probe permit, so a dead holder returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_lease_ms: Option<u64>,
    /// Whether a 429 counts as a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limited_is_failure: Option<bool>,
}

/// The namespace's idempotency-ledger settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerSettings {
    /// How long completed records are kept for replay (default 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_ms: Option<u64>,
}

/// The namespace's observed-latency settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySettings {
    /// Width of the rolling window over which each tool's observed latency
    /// is kept and penalties are judged (default 10 min). Changing it starts
    /// every tool's window afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
}

impl LatencySettings {
    /// Whether the section sets nothing (and so is left out when rendered).
    pub fn is_empty(&self) -> bool {
        *self == LatencySettings::default()
    }
}

impl ToolOverrides {
    /// Whether this layer changes nothing (and so is left out when rendered).
    pub fn is_empty(&self) -> bool {
        *self == ToolOverrides::default()
    }
}

impl ServerOverrides {
    /// This server's own settings as a layer, without its tools.
    pub fn settings(&self) -> ToolOverrides {
        ToolOverrides {
            timeout_ms: self.timeout_ms,
            effect: self.effect,
            scope: self.scope,
            on_partition: self.on_partition,
            in_flight_on_open: self.in_flight_on_open,
            stalled_after_ms: self.stalled_after_ms,
            shadow: self.shadow,
            retry: self.retry.clone(),
            breaker: self.breaker.clone(),
            classify: self.classify.clone(),
        }
    }
}

impl RetryOverrides {
    /// Whether this layer changes no retry setting.
    pub fn is_empty(&self) -> bool {
        *self == RetryOverrides::default()
    }
}

impl BreakerOverrides {
    /// Whether this layer changes no breaker setting.
    pub fn is_empty(&self) -> bool {
        *self == BreakerOverrides::default()
    }

    /// Whether this layer sets any field of the sliding-window trip.
    pub fn sets_window(&self) -> bool {
        self.window_ms.is_some()
            || self.minimum_calls.is_some()
            || self.failure_ratio.is_some()
            || self.slow_call_ms.is_some()
            || self.slow_call_ratio.is_some()
    }

    /// Whether this layer chooses a trip kind at all.
    pub fn sets_trip(&self) -> bool {
        self.consecutive_failures.is_some() || self.sets_window()
    }
}

impl LedgerSettings {
    /// Whether the ledger section changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == LedgerSettings::default()
    }
}

impl PolicyDocument {
    /// Parses and validates a document; any problem refuses it whole, with
    /// every problem listed, so the version in force stays in force.
    pub fn parse(text: &str, format: PolicyFormat) -> Result<PolicyDocument, CoreError> {
        if text.len() > POLICY_DOCUMENT_BYTES_MAX {
            return Err(CoreError::InvalidPolicy(vec![PolicyProblem {
                field: "document".into(),
                rule: format!(
                    "is {} bytes, at most {POLICY_DOCUMENT_BYTES_MAX} allowed",
                    text.len()
                ),
            }]));
        }
        if let Some(rule) = super::nesting::nesting_problem(text) {
            let problem = PolicyProblem {
                field: "document".into(),
                rule,
            };
            return Err(CoreError::InvalidPolicy(vec![problem]));
        }
        let document = match format {
            PolicyFormat::Toml => parse_toml(text),
            PolicyFormat::Yaml => parse_yaml(text),
        }
        .map_err(|problem| CoreError::InvalidPolicy(vec![problem]))?;
        let problems = document.validate();
        if problems.is_empty() {
            Ok(document)
        } else {
            Err(CoreError::InvalidPolicy(problems))
        }
    }

    /// Every `(server, tool)` with its own override section, in name order.
    pub fn tools_declared(&self) -> impl Iterator<Item = (ServerName, ToolName)> + '_ {
        self.servers.iter().flat_map(|(server, overrides)| {
            overrides
                .tools
                .keys()
                .map(move |tool| (server.clone(), tool.clone()))
        })
    }
}

fn parse_toml(text: &str) -> Result<PolicyDocument, PolicyProblem> {
    toml::from_str(text).map_err(|e| {
        let span = e.span();
        let field = span
            .as_ref()
            .map_or_else(|| "document".to_string(), |s| toml_path_at(text, s.start));
        let line = span.map(|s| line_of(text, s.start));
        syntax_problem(field, e.message().trim(), line)
    })
}

fn parse_yaml(text: &str) -> Result<PolicyDocument, PolicyProblem> {
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(PolicyDocument::default());
    }
    serde_norway::from_str(text).map_err(|e| {
        let shown = e.to_string();
        // serde_norway prefixes the message with the path of the map it was in.
        let (path, rest) = match shown.split_once(": ") {
            Some((p, rest)) if !p.is_empty() && !p.contains(char::is_whitespace) => (p, rest),
            _ => ("document", shown.as_str()),
        };
        let message = rest.split(" at line ").next().unwrap_or(rest);
        let line = e.location().map(|l| l.line());
        syntax_problem(path.to_string(), message, line)
    })
}

/// One problem for a document that could not be read, naming the unknown
/// or repeated key in the path when the parser reported one.
fn syntax_problem(mut field: String, message: &str, line: Option<usize>) -> PolicyProblem {
    if let Some(key) = named_field(message) {
        if field == "document" {
            field = key.to_string();
        } else if !field.ends_with(key) {
            field = format!("{field}.{key}");
        }
    }
    let rule = match line {
        Some(line) => format!("{message} (line {line})"),
        None => message.to_string(),
    };
    PolicyProblem { field, rule }
}

/// The key a serde message names (`unknown field `x`` or `duplicate field `x``).
fn named_field(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("duplicate field `"))?;
    rest.split_once('`').map(|(key, _)| key)
}

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The dotted path of the key at `offset`: the last `[table]` header above it
/// plus the key of its line (best effort; used for error messages only).
fn toml_path_at(text: &str, offset: usize) -> String {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    if let Some(header) = table_header(line) {
        return normalize_dotted(header);
    }
    let table = before[..line_start].lines().rev().find_map(table_header);
    let key = line.split_once('=').map_or("", |(key, _)| key.trim());
    let path: Vec<&str> = table
        .into_iter()
        .chain([key])
        .filter(|p| !p.is_empty())
        .collect();
    if path.is_empty() {
        "document".into()
    } else {
        normalize_dotted(&path.join("."))
    }
}

/// The dotted key of a `[table]` or `[[array]]` header line.
fn table_header(line: &str) -> Option<&str> {
    let line = line.trim();
    line.starts_with('[')
        .then(|| line.trim_matches(|c| c == '[' || c == ']').trim())
}

/// Removes spaces around the dots of a dotted TOML key (`a . b` → `a.b`);
/// a key with quoted parts is kept as written.
fn normalize_dotted(key: &str) -> String {
    if key.contains(['"', '\'']) {
        return key.trim().to_string();
    }
    key.split('.').map(str::trim).collect::<Vec<_>>().join(".")
}

/// A map key as it appears in a field path: bare when TOML allows it bare,
/// quoted otherwise (`servers."api.prod:443"`), so paths stay unambiguous.
pub(crate) fn path_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
    }
}
