//! The bounds the request checks apply (a node's other bounds are in
//! `fusebox_server::limits`, the replicated state's in
//! [`fusebox_core::limits`]).

/// Entries per page when a list request leaves `limit` at 0 (a limit the
/// caller sets is capped by the core's `LIST_LIMIT_MAX`).
pub const LIST_LIMIT_DEFAULT: usize = 100;

/// Most attributes one request's `RequestMeta` may carry, so a caller
/// cannot make a node log or hold an unbounded map.
pub const META_ATTRIBUTES_MAX: usize = 32;

/// Longest key or value of one `RequestMeta` attribute, in bytes, for the
/// same reason.
pub const META_ATTRIBUTE_BYTES_MAX: usize = 256;

/// Bytes of entries one page of a list answer carries at most (ledger
/// records, policy versions with documents, tools); a page is cut short,
/// with a token to continue, rather than exceed the 4 MiB every client
/// decodes. At least one entry is always sent.
pub const PAGE_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Largest Raft message payload accepted or sent, in bytes.
pub const RAFT_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;
