//! Every fixed bound and timing of a node, in one place, each with its unit
//! in its name.
//!
//! What an operator tunes per cluster (Raft heartbeat and election timeouts,
//! snapshot spacing, the tick period) is a field of
//! [`Timing`](crate::node::Timing) instead, with its default there. Bounds
//! of the replicated state itself (key lengths, records per namespace, batch
//! sizes) belong to the core: [`fusebox_core::limits`].

// The public API (`api/`). The bounds its request checks use live in
// `fusebox_api::limits`.
pub use fusebox_api::limits::{
    LIST_LIMIT_DEFAULT, META_ATTRIBUTES_MAX, META_ATTRIBUTE_BYTES_MAX, PAGE_BYTES_MAX,
};

/// Longest member address `Cluster.AddMember` accepts, in bytes: it is
/// stored in the membership on every node.
pub const MEMBER_ADDRESS_BYTES_MAX: usize = 256;

// Watch streams (`watch.rs`, `api/watch_stream.rs`).

/// Watch events buffered per stream before the sender waits for the client,
/// so a slow client holds a bounded queue.
pub const WATCH_BUFFER_EVENTS: usize = 256;
/// Breakers per snapshot chunk on a watch stream, so one message stays
/// small however many breakers a namespace holds.
pub const WATCH_SNAPSHOT_CHUNK_BREAKERS: usize = 512;
/// Quiet time after which a watch stream sends a heartbeat, so a client
/// can tell a quiet namespace from a dead stream (the SDK's staleness bound
/// must exceed it).
pub const WATCH_HEARTBEAT_MS: u64 = 5_000;
/// Events the hub keeps so a reconnecting watcher resumes from its last
/// revision; one older than these gets a fresh snapshot instead.
pub const WATCH_HISTORY_EVENTS_MAX: usize = 16_384;
/// Applied entries with events of one namespace buffered per subscriber
/// before it lags and must resync, so a stuck subscriber never holds back
/// the apply path. An entry's events of a namespace are one message, however
/// many. Each watched namespace has a channel of this many slots, allocated
/// up front (about 32 bytes each: 32 KiB a channel).
pub const WATCH_CHANNEL_ENTRIES_MAX: usize = 1_024;
/// Namespaces one node serves watch streams of at once (one channel each);
/// a stream of one more is refused. As many as a cluster may hold
/// (`fusebox_core::limits::NAMESPACES_MAX`); a stream may watch a namespace
/// before it exists.
pub const WATCHED_NAMESPACES_MAX: usize = fusebox_core::limits::NAMESPACES_MAX;

// Leader forwarding (`api/forward.rs`).

/// Deadline of a forwarded call when the caller set none, in milliseconds.
pub const FORWARD_TIMEOUT_DEFAULT_MS: u64 = 5_000;
/// Longest deadline a forwarded call may get, in milliseconds, whatever
/// the caller asked for: a hop never holds a request open for long.
pub const FORWARD_TIMEOUT_MAX_MS: u64 = 60_000;
/// Longest wait to connect to the leader when forwarding, in milliseconds.
pub const FORWARD_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Most leader addresses whose channels are kept for forwarding; leaders
/// change rarely, so a full cache holds stale addresses and is cleared.
pub const FORWARD_CHANNELS_MAX: usize = 64;

// Writes, reads and membership (`node/`).

/// How long a write may wait to be committed and applied before its caller
/// is told the outcome is unknown.
pub const WRITE_TIMEOUT_MS: u64 = 5_000;
/// How long a linearizable read may wait for the leader's confirmation.
pub const LINEARIZABLE_READ_TIMEOUT_MS: u64 = 5_000;
/// Deadline of a membership change or a leader transfer, forwarded or not
/// (also the default deadline of its forwarded hop): adding a member waits
/// for it to catch up, which may take a snapshot.
pub const MEMBERSHIP_CHANGE_TIMEOUT_MS: u64 = 30_000;
/// How long a liveness question to the Raft core may take; a core too busy
/// to answer in time counts as running.
pub const RAFT_ALIVE_TIMEOUT_MS: u64 = 1_000;
/// How often a running node asks its Raft core whether it still runs, so
/// a node whose core stopped exits instead of lingering.
pub const RAFT_ALIVE_CHECK_PERIOD_MS: u64 = 1_000;
/// Outcome reports waiting for a batch; beyond this, callers are refused at
/// once rather than made to wait (the SDK drops and counts them).
pub const REPORT_QUEUE_REPORTS_MAX: usize = 4_096;
/// Report batches proposed and not yet applied at once: enough to keep the
/// log busy, few enough that reports pile up into the next batch.
pub const REPORT_BATCHES_IN_FLIGHT_MAX: usize = 4;
/// Ledger calls waiting for a batch; beyond this a caller waits for room
/// (within its deadline).
pub const LEDGER_QUEUE_CALLS_MAX: usize = 4_096;
/// Ledger batches proposed and not yet applied at once. Eight rather than
/// four: with more appends queued, one log fsync covers more of them (at 64
/// pipelined clients, 0.16 instead of 0.19 WAL syncs per key summed over
/// three nodes, and 2–12% more keys/s in seven paired runs; 11–14% more in
/// two at 256 clients); 16 and 32 measured no better (bench/README.md,
/// "Eight ledger batches in flight").
pub const LEDGER_BATCHES_IN_FLIGHT_MAX: usize = 8;
/// Most encoded bytes of ledger calls in one batch: well under
/// [`ENTRY_BYTES_MAX`], so a batch of the largest calls still fits an entry.
pub const LEDGER_BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

// Raft (`node/start.rs`, `raft/`).

/// openraft's `install_snapshot_timeout`, in milliseconds. openraft only
/// passes it to the transport, which bounds a snapshot by its progress
/// instead ([`SNAPSHOT_STALL_MS`], [`SNAPSHOT_INSTALL_BASE_MS`]): a total
/// deadline would cap the snapshot's size.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 60_000;
/// Fewest applied entries openraft purges from the log at once, so purges
/// come in batches rather than one entry at a time.
pub const PURGE_BATCH_ENTRIES: u64 = 256;
/// How often the node checks whether a snapshot is due.
pub const SNAPSHOT_CHECK_PERIOD_MS: u64 = 1_000;
/// A snapshot is due after at least ledger records / this many applied
/// entries (or `Timing::snapshot_every_entries`, if more): it copies the
/// whole ledger, so spacing snapshots by a fraction of its size keeps that
/// copying a constant cost per applied entry.
pub const SNAPSHOT_SPACING_LEDGER_DIVISOR: u64 = 4;
/// Bytes per snapshot chunk on the wire, well under
/// [`RAFT_PAYLOAD_BYTES_MAX`].
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Longest wait, in milliseconds, for a snapshot stream to move: for the
/// receiver to take the next chunk (the sender's side) or for the next
/// chunk to arrive (the receiver's). A snapshot has no size bound short of
/// the disk, so no total deadline fits it; a stalled stream ends instead.
pub const SNAPSHOT_STALL_MS: u64 = 30_000;
/// After its last chunk, a snapshot's receiver has this long, in
/// milliseconds, plus one second per [`SNAPSHOT_INSTALL_BYTES_PER_SEC`] of
/// snapshot, to check and install it and answer.
pub const SNAPSHOT_INSTALL_BASE_MS: u64 = 60_000;
/// The slowest install rate the sender's deadline allows for, in bytes per
/// second (well below what a disk writes: the receiver reads the snapshot
/// twice, to check it, then to install it).
pub const SNAPSHOT_INSTALL_BYTES_PER_SEC: u64 = 8 * 1024 * 1024;
/// Snapshots one node receives at once, at most; more are refused with
/// `RESOURCE_EXHAUSTED` (each one takes its size in disk while it arrives).
pub const SNAPSHOT_RECEIVES_MAX: usize = 2;
/// Largest Raft message payload (defined with the Raft codec).
pub use fusebox_api::limits::RAFT_PAYLOAD_BYTES_MAX;
/// Largest replication batch one AppendEntries carries, in encoded bytes;
/// the network sends the rest in the next batch. Well under
/// [`RAFT_PAYLOAD_BYTES_MAX`], so a full batch always fits the transport.
pub const REPLICATION_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The slowest rate a follower may take in a replication batch, in bytes
/// per second. A batch must be answered within openraft's deadline for one
/// request (`soft_ttl`: 150 ms at the default 200 ms heartbeat) plus its
/// size at this rate: 4 s more for a full batch
/// ([`REPLICATION_BATCH_BYTES_MAX`]), nothing noticeable for a small one.
/// Without it, a follower that receives and syncs big entries slower than
/// the heartbeat never answers them in time, and each retry sends them
/// again (seen: four 4 MB imports at once, on a loaded debug build, left
/// no follower caught up for 5 s).
pub const REPLICATION_BYTES_PER_SEC_MIN: u64 = 4 * 1024 * 1024;
/// Largest log entry a node proposes, in encoded bytes: a command that
/// would make a bigger entry is refused with `entry_bytes_max` before it
/// reaches the log. Below [`REPLICATION_BATCH_BYTES_MAX`], so one entry
/// always fits a batch by itself.
pub const ENTRY_BYTES_MAX: usize = 12 * 1024 * 1024;
/// How long connecting to a peer's Raft service may take, in milliseconds.
pub const RAFT_CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Replication batches a leader sends on one `StreamAppend` stream before
/// the first of them is answered, at most; it then waits. The follower's
/// openraft takes as many into its own pipeline.
pub const RAFT_STREAM_BATCHES_IN_FLIGHT_MAX: usize = 64;
/// How long a leader replicates unary to a peer that answered
/// `StreamAppend` with UNIMPLEMENTED before it tries a stream again, in
/// milliseconds (the peer may have been upgraded meanwhile).
pub const RAFT_STREAM_UNARY_MS: u64 = 60_000;
/// `StreamAppend` streams one node receives at once, at most, counted from
/// their first message (which proves the sender a member); more are refused
/// with `RESOURCE_EXHAUSTED`. A leader holds one per follower, plus one for
/// each heartbeat in flight; the rest is room for streams of leaders cut
/// off by a partition, which stay until the connection's keepalive gives up
/// on them ([`SERVER_PING_INTERVAL_MS`] plus [`SERVER_PING_TIMEOUT_MS`] on
/// the receiving side).
pub const RAFT_APPEND_STREAMS_MAX: usize = 64;
/// How long a `StreamAppend` stream may stay open before its first message,
/// in milliseconds; a stream that has not said who sent it by then is ended
/// with `DEADLINE_EXCEEDED`.
pub const RAFT_STREAM_FIRST_MESSAGE_MS: u64 = 10_000;

// The node's servers and background loops (`node/start.rs`).

/// Deadline the gRPC server puts on every call it serves, in milliseconds
/// (the guard applies it: `auth/guard.rs`): no request holds a
/// connection's resources forever. Raft's `InstallSnapshot` is bounded by
/// [`SNAPSHOT_STALL_MS`] instead.
pub const GRPC_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Largest request the Tools service decodes, in bytes: a whole manifest at
/// its documented bounds (512 tools with 16 KiB disclosure blocks, about
/// 8.2 MiB) with room for names and hints. Other services keep tonic's
/// 4 MiB. The entry it makes stays under [`ENTRY_BYTES_MAX`].
pub const IMPORT_MESSAGE_BYTES_MAX: usize = 10 * 1024 * 1024;
/// Longest a policy document may take to parse, in milliseconds; the
/// parse runs on the blocking pool, and a document past this is refused.
pub const POLICY_PARSE_TIMEOUT_MS: u64 = 2_000;
/// How often the Raft metrics are copied into the Prometheus gauges and
/// readiness, in milliseconds.
pub const METRICS_REFRESH_PERIOD_MS: u64 = 500;
/// How often breakers and open ledger records are counted for the gauges
/// `fusebox_breakers` and `fusebox_ledger_records`, in milliseconds.
pub const CENSUS_PERIOD_MS: u64 = 5_000;
/// Most ledger records of one status the census counts (summed over the
/// namespaces); past it the gauge shows this cap.
pub const LEDGER_CENSUS_MAX: usize = 10_000;
/// How long shutdown waits for each background task to finish, in
/// milliseconds, so a stuck task cannot keep the process alive.
pub const SHUTDOWN_TASK_WAIT_MS: u64 = 5_000;

/// Most TLS handshakes one listener runs at once; further connections wait
/// to be accepted.
pub const TLS_HANDSHAKES_IN_FLIGHT_MAX: usize = 256;

/// How many longest election timeouts a node may go without hearing from
/// its leader (leading: from a quorum) and still send watch heartbeats:
/// past it, its state may be behind and its watch streams end. Three
/// election timeouts outlast any normal election.
pub const LEADER_CONTACT_ELECTIONS: u64 = 3;

/// How often a node given `--init-auth` checks whether it leads and the
/// cluster still lacks an admin, in ms.
pub const INIT_AUTH_RETRY_MS: u64 = 500;

/// Concurrent HTTP/2 streams (calls in flight) on one client connection;
/// more are refused by the transport (REFUSED_STREAM) until one ends.
pub const CONNECTION_STREAMS_MAX: u32 = 1_024;

/// Pipelined ledger calls (`Ledger.Pipeline`) one node runs at once, over
/// all its pipelines; each pipeline runs at most
/// `fusebox_proto::pipeline::CALLS_IN_FLIGHT_MAX` of them. One more is
/// answered RESOURCE_EXHAUSTED (`LimitReached`, `pipelined_calls_max`).
pub const PIPELINED_CALLS_MAX: usize = 16_384;

/// Connections one listener holds open at most; one more is closed at once.
pub const CONNECTIONS_MAX: usize = 8_192;

/// Connections one address may hold open on one listener at most.
pub const CONNECTIONS_PER_ADDRESS_MAX: usize = 1_024;

/// How long a connection may send nothing before it is closed, in ms. The
/// server pings every client every [`SERVER_PING_INTERVAL_MS`], and a live
/// one answers, so this reaps only peers that are dead or never spoke.
pub const CONNECTION_IDLE_MS: u64 = 120_000;

/// How often the server pings each client connection (HTTP/2 PING), in ms.
pub const SERVER_PING_INTERVAL_MS: u64 = 30_000;

/// How long a ping may go unanswered before the connection is closed, in ms.
pub const SERVER_PING_TIMEOUT_MS: u64 = 10_000;

/// Bytes of disclosures one watch snapshot chunk carries at most (breakers
/// are chunked by count, [`WATCH_SNAPSHOT_CHUNK_BREAKERS`]); with the policy
/// document in the first chunk, every chunk stays well under the 4 MiB a
/// client decodes.
pub const WATCH_CHUNK_BYTES_MAX: usize = 1024 * 1024;

/// The longest a watch stream opened with an expiring token goes without
/// proving its caller again, in ms, for a wall clock that jumps past the
/// expiry. Every stream proves its caller at once whenever the node applies
/// a change to the auth table, and when its token expires.
pub const WATCH_RECHECK_MS: u64 = 5_000;
