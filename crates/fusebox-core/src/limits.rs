//! Every bound the core keeps, named here with its unit: sizes and counts
//! of what it accepts, and the ranges a policy's values must fall in.
//!
//! Inputs that break a bound are refused with [`crate::CoreError`] before they
//! touch the state, so a hostile or buggy client can neither grow the state
//! without limit nor make two replicas disagree about what was accepted.

/// Longest namespace, server, tool, backend or replica name, in bytes.
pub const NAME_BYTES_MAX: usize = 128;
/// Longest idempotency key, in bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// Longest request fingerprint, in bytes (a hex digest fits easily).
pub const FINGERPRINT_BYTES_MAX: usize = 128;
/// Longest intent id, attempt id, target or backend operation id, in bytes.
pub const ID_BYTES_MAX: usize = 256;
/// Longest operator reason, note or failure description, in bytes.
pub const REASON_BYTES_MAX: usize = 1024;
/// Largest result a ledger record may store for replay, in bytes.
pub const STORED_RESULT_BYTES_MAX: usize = 16 * 1024;
/// Most breakers (server and tool) one namespace may hold.
pub const BREAKERS_PER_NAMESPACE_MAX: usize = 10_000;
/// Most namespaces one cluster may hold.
pub const NAMESPACES_MAX: usize = 1_024;
/// Most ledger records one namespace may hold at once.
pub const LEDGER_RECORDS_PER_NAMESPACE_MAX: usize = 5_000_000;
/// Most outcomes one report batch (and so one log entry) may carry.
pub const BATCH_OUTCOMES_MAX: usize = 4_096;
/// Most replicas' reports one coalesced log entry carries.
pub const REPORTS_PER_BATCH_MAX: usize = 256;
/// Most ledger calls (`begin`, `complete`) one coalesced log entry carries.
pub const LEDGER_BATCH_OPS_MAX: usize = 256;
/// Most transitions kept in one breaker's audit trail; older ones roll off.
pub const AUDIT_ENTRIES_PER_BREAKER_MAX: usize = 64;
/// Most distinct reporters a breaker remembers as evidence.
pub const REPORTERS_TRACKED_MAX: usize = 64;
/// Most policy versions kept per namespace; older ones roll off.
pub const POLICY_VERSIONS_MAX: usize = 256;
/// Largest policy document, in bytes.
pub const POLICY_DOCUMENT_BYTES_MAX: usize = 256 * 1024;
/// Deepest nesting of flow collections (`[`, `{`) a policy document may
/// have; a real one nests a handful deep, and parsers slow down sharply
/// with depth, so this is checked before parsing.
pub const POLICY_NESTING_DEPTH_MAX: usize = 32;
/// Widest indentation a policy document's lines may have, in columns: it
/// bounds how deep YAML block collections can nest.
pub const POLICY_INDENT_COLUMNS_MAX: usize = 128;
/// Most per-server or per-tool overrides one policy may hold.
pub const POLICY_OVERRIDES_MAX: usize = 4_096;
/// Most answer patterns one `classify` list of a policy layer may hold.
pub const CLASSIFY_PATTERNS_MAX: usize = 16;
/// Longest answer pattern in a `classify` list, in bytes.
pub const CLASSIFY_PATTERN_BYTES_MAX: usize = 200;
/// How much of an answer's text its patterns are matched in, in bytes: the
/// words that say what went wrong come first, and a large answer is not
/// copied whole to be judged.
pub const CLASSIFY_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Longest lease a ledger attempt or probe permit may ask for, in milliseconds.
pub const LEASE_MS_MAX: u64 = 10 * 60 * 1000;
/// Furthest one log entry may move the state clock ahead, in milliseconds
/// (see `machine/clock.rs`): a stamp far ahead of the state is followed a
/// step at a time, never at once.
pub const CLOCK_STEP_MS_MAX: u64 = 60_000;
/// How many times as far as its entries' stamps moved the state clock may
/// move: a stamp that jumped ahead is caught up on at ten times real time.
pub const CLOCK_CATCH_UP_RATE: u64 = 10;
/// Most replicas whose last counted report batch is remembered (to drop a
/// resent batch); past it the least recently reporting one is forgotten.
pub const REPORT_MARKS_MAX: usize = 65_536;
/// How long a replica's last batch number is remembered without a new
/// report, in milliseconds (an hour: resends come within seconds).
pub const REPORT_MARK_IDLE_MS: u64 = 3_600_000;
/// Longest an operator may force a breaker open for, in milliseconds (30 days).
pub const FORCE_OPEN_MS_MAX: u64 = 30 * 24 * 3600 * 1000;
/// Most expired timers one `Tick` command processes, in the fleet (breakers,
/// then report marks) and in the ledger (breakers, then its deadlines) each;
/// the rest wait for the next.
pub const TICK_TIMERS_MAX: usize = 4_096;
/// Most records one list query returns.
pub const LIST_LIMIT_MAX: usize = 1_000;
/// Most tools one server's imported manifest may list.
pub const TOOLS_PER_SERVER_MAX: usize = 512;
/// Most imported tools one namespace may hold, across its servers.
pub const TOOLS_PER_NAMESPACE_MAX: usize = 4_096;
/// Largest raw `latencyDisclosure` block one imported tool may carry, in bytes.
pub const DISCLOSURE_BLOCK_BYTES_MAX: usize = 16 * 1024;
/// Most tools whose observed latency the cluster keeps, fleet-wide; outcomes
/// of further tools still count for breakers, not for latency.
pub const OBSERVED_TOOLS_MAX: usize = 2_048;
/// Default width of the rolling window of observed latency, in milliseconds
/// (10 min); a namespace's policy may set another (`latency.window_ms`).
pub const OBSERVED_WINDOW_MS_DEFAULT: u64 = 10 * 60 * 1000;
/// Default time completed ledger records are kept (24 h); a namespace's
/// policy may set another (`ledger.retention_ms`).
pub const LEDGER_RETENTION_MS_DEFAULT: u64 = 24 * 3600 * 1000;
/// Buckets the observed window is split into: samples expire a minute at a time.
pub const OBSERVED_WINDOW_BUCKETS: usize = 10;

// What one ledger list call and one snapshot may hold.

/// Most candidates one list call examines.
pub const LIST_SCAN_MAX: usize = 10 * LIST_LIMIT_MAX;
/// Largest fleet encoding a snapshot may carry.
pub const FLEET_BYTES_MAX: usize = 1 << 30;
/// Largest encoded ledger record in a snapshot: its stored result plus
/// generous room for the bounded identifiers and reasons around it.
pub const RECORD_BYTES_MAX: usize = STORED_RESULT_BYTES_MAX + 64 * 1024;

// The ranges a policy document's values must fall in.

/// Longest per-call deadline or slow-call threshold (10 minutes).
pub const TIMEOUT_MS_MAX: u64 = 600_000;
/// Narrowest sliding window (1 s): narrower windows see too few calls.
pub const WINDOW_MS_MIN: u64 = 1_000;
/// Widest sliding window (1 h): wider ones react too late to matter.
pub const WINDOW_MS_MAX: u64 = 3_600_000;
/// Largest count threshold in a policy (failures in a row, probes, probe successes).
pub const COUNT_MAX: u64 = 1_000;
/// Largest `minimum_calls` of a window.
pub const MINIMUM_CALLS_MAX: u64 = 100_000;
/// Longest open duration and open-duration cap (24 h).
pub const OPEN_MS_MAX: u64 = 86_400_000;
/// Largest growth factor of the open duration per reopen.
pub const OPEN_MULTIPLIER_MAX: u64 = 16;
/// Most attempts of one call, the first included.
pub const ATTEMPTS_MAX: u64 = 10;
/// Shortest ledger retention (1 min): replays must survive a client retry.
pub const RETENTION_MS_MIN: u64 = 60_000;
/// Longest ledger retention (30 days), which bounds the ledger's size.
pub const RETENTION_MS_MAX: u64 = 30 * 24 * 3600 * 1000;
/// Narrowest window of observed latency (5 s): a penalty needs
/// [`crate::disclosure::PENALTY_SAMPLES_MIN`] calls inside it.
pub const OBSERVATION_WINDOW_MS_MIN: u64 = 5_000;
/// Widest window of observed latency (24 h).
pub const OBSERVATION_WINDOW_MS_MAX: u64 = 86_400_000;
