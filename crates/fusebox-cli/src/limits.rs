//! Every bound and timing of the CLI, with its unit in its name.
//!
//! These are the client's own: how long it waits, how much it reads and how
//! much it asks for. The cluster's bounds (identifier lengths, page sizes,
//! policy document sizes and versions) are `fusebox_core::limits`; the CLI
//! uses those where it checks input before sending it, so both sides refuse
//! the same thing.

/// How long connecting to one endpoint may take, in milliseconds; past it
/// the next endpoint in `--endpoints` is tried.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;

/// The deadline of every request the CLI sends, in milliseconds; a request
/// still unanswered then fails as unavailable (exit code 4), to be retried.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;

/// How long asking the endpoint for the leader may take, in milliseconds;
/// past it the endpoint that answered serves, and its reads may lag.
pub const LEADER_LOOKUP_TIMEOUT_MS: u64 = 2_000;

/// Endpoints tried before giving up, so a pasted list cannot stall the CLI.
pub const ENDPOINTS_MAX: usize = 16;

/// Pages of a server's breakers read when looking for one breaker; past
/// them the breaker counts as untracked and the policy decides if it is
/// known.
pub const SERVER_PAGES_MAX: usize = 20;

/// Largest manifest file read, in bytes: the most tools with the largest
/// blocks and generous room for schemas and descriptions.
pub const MANIFEST_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Longest duration the CLI accepts, in milliseconds (a year); the server
/// applies its own, tighter bounds.
pub const DURATION_MS_MAX: u64 = 366 * 24 * 3_600_000;

/// Transitions `breakers history` prints unless `--limit` says otherwise:
/// a screenful, enough to see how an incident unfolded.
pub const HISTORY_TRANSITIONS_DEFAULT: usize = 64;
