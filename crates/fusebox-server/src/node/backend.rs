//! The production [`Backend`]: writes through openraft, reads from the
//! applied state, linearizable reads through the read linearizer.

use super::coalescer::{LedgerCoalescer, ReportCoalescer};
use super::contact::LeaderContact;
use super::env::{Clock, NodeEnv};
use crate::auth::Membership;
use crate::backend::{Backend, BackendError, Consistency};
use crate::limits::{ENTRY_BYTES_MAX, LINEARIZABLE_READ_TIMEOUT_MS, WRITE_TIMEOUT_MS};
use crate::metrics::Metrics;
use crate::watch::{WatchHub, WatchStart};
use fusebox_core::machine::{Applied, Command, LedgerOp, Report, SharedStateMachine};
use fusebox_core::Namespace;
use fusebox_proto::net::Net;
use fusebox_raft_store::{Member, Request, StateStore, TypeConfig};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::{Raft, ReadPolicy};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A Raft node as the gRPC services see it.
#[derive(Clone)]
pub struct RaftBackend {
    /// The openraft handle.
    pub raft: Raft<TypeConfig, StateStore>,
    /// The applied state.
    pub state: StateStore,
    /// Where applied events fan out to watchers.
    pub hub: Arc<WatchHub>,
    /// The node's metrics (writes are counted where they are proposed).
    pub metrics: Arc<Metrics>,
    /// Where outcome reports wait to share a log entry (none: one entry
    /// per report).
    pub reports: Option<ReportCoalescer>,
    /// Where ledger `begin` and `complete` calls wait to share a log entry
    /// (none: one entry per call).
    pub ledger: Option<LedgerCoalescer>,
    /// The node's network and wall clock.
    pub env: NodeEnv,
    /// When this node last heard from a leader it accepted.
    pub contact: Arc<LeaderContact>,
    /// How long a node may go without hearing from its leader (or, leading,
    /// from a quorum) and still vouch for its state, in ms.
    pub contact_max_ms: u64,
}

fn not_leader(f: &ForwardToLeader<TypeConfig>) -> BackendError {
    BackendError::NotLeader {
        leader_id: f.leader_id,
        leader_addr: f.leader_node.as_ref().map(|n: &Member| n.addr.clone()),
    }
}

fn write_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> BackendError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(&f),
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => BackendError::Indeterminate(
            "the leader changed after proposing the write; it may or may not have applied".into(),
        ),
        RaftError::APIError(other) => BackendError::Unavailable(other.to_string()),
        RaftError::Fatal(f) => BackendError::Fatal(f.to_string()),
    }
}

/// Proposes one command through Raft and waits for its answer.
/// The entry is stamped with `clock`, the leader's wall clock.
pub(crate) async fn propose(
    raft: &Raft<TypeConfig, StateStore>,
    metrics: &Metrics,
    clock: &Clock,
    command: Command,
) -> Result<Applied, BackendError> {
    let started = Instant::now();
    let batch = match &command {
        Command::ReportOutcomes { outcomes, .. } => Some(outcomes.len()),
        Command::ReportBatch { reports } => Some(reports.iter().map(|r| r.outcomes.len()).sum()),
        _ => None,
    };
    let request = Request::new(clock(), command);
    check_entry_bytes(&request)?;
    let within = Duration::from_millis(WRITE_TIMEOUT_MS);
    let written = tokio::time::timeout(within, raft.client_write(request))
        .await
        .map_err(|_| {
            BackendError::Indeterminate(format!(
                "not committed within {within:?}; it may still apply"
            ))
        })?
        .map_err(write_error)?;
    let applied = written
        .data
        .applied
        .ok_or_else(|| BackendError::Fatal("applied entry returned no answer".into()))?;
    metrics.observe_write(batch, &applied.answer, started.elapsed().as_secs_f64());
    Ok(applied)
}

/// Refuses a command whose log entry would pass [`ENTRY_BYTES_MAX`]: it
/// would slow every replication batch it rides in, and the caller learns
/// why instead of waiting on a stalled log.
fn check_entry_bytes(request: &Request) -> Result<(), BackendError> {
    let bytes = postcard::experimental::serialized_size(request)
        .map_err(|e| BackendError::Fatal(format!("cannot encode a command: {e}")))?;
    if bytes > ENTRY_BYTES_MAX {
        return Err(BackendError::TooLarge {
            bytes,
            max: ENTRY_BYTES_MAX,
        });
    }
    Ok(())
}

impl RaftBackend {
    /// `NotLeader` naming the leader when this node knows another node
    /// leads: a batched write (a report, a ledger call) then goes there
    /// raw, to be coalesced with the rest, instead of joining a batch here
    /// whose proposal can only fail.
    fn led_elsewhere(&self) -> Option<BackendError> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        let leader = m.current_leader?;
        if leader == m.id {
            return None;
        }
        let addr = m
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone());
        Some(BackendError::NotLeader {
            leader_id: Some(leader),
            leader_addr: addr,
        })
    }
}

impl Backend for RaftBackend {
    async fn write(&self, command: Command) -> Result<Applied, BackendError> {
        let batched = matches!(
            command,
            Command::Begin { .. } | Command::Complete { .. } | Command::ReportOutcomes { .. }
        );
        if batched {
            if let Some(elsewhere) = self.led_elsewhere() {
                return Err(elsewhere);
            }
        }
        let command = match (command, &self.ledger) {
            (Command::Begin { namespace, request }, Some(ledger)) => {
                return ledger.submit(LedgerOp::Begin { namespace, request }).await
            }
            (Command::Complete { namespace, request }, Some(ledger)) => {
                return ledger
                    .submit(LedgerOp::Complete { namespace, request })
                    .await
            }
            (command, _) => command,
        };
        match (command, &self.reports) {
            (
                Command::ReportOutcomes {
                    namespace,
                    replica,
                    batch_seq,
                    outcomes,
                },
                Some(coalescer),
            ) => {
                let report = Report {
                    namespace,
                    replica,
                    batch_seq,
                    outcomes,
                };
                coalescer.submit(report).await
            }
            // Boxed: openraft's proposal future is large, and inline it
            // would make every ledger call's and report's future as large.
            (command, _) => {
                Box::pin(propose(&self.raft, &self.metrics, &self.env.clock, command)).await
            }
        }
    }

    async fn read<T, F>(&self, consistency: Consistency, f: F) -> Result<T, BackendError>
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static,
    {
        if consistency == Consistency::Linearizable && !self.env.bugs.skip_read_linearizer {
            let linearized = tokio::time::timeout(
                Duration::from_millis(LINEARIZABLE_READ_TIMEOUT_MS),
                self.raft.ensure_linearizable(ReadPolicy::ReadIndex),
            )
            .await
            .map_err(|_| BackendError::Unavailable("read not confirmed in time".into()))?;
            if let Err(e) = linearized {
                if let Some(f) = e.forward_to_leader() {
                    return Err(not_leader(f));
                }
                return Err(BackendError::Unavailable(e.to_string()));
            }
        }
        // Ledger reads touch RocksDB: off the runtime's worker threads.
        let state = self.state.clone();
        fusebox_raft_store::blocking(move || Ok(state.with_state(f)))
            .await
            .map_err(|e| BackendError::Fatal(format!("read task failed: {e}")))
    }

    async fn watch(
        &self,
        namespace: Namespace,
        from_revision: Option<u64>,
    ) -> Result<WatchStart, BackendError> {
        let hub = self.hub.clone();
        self.state
            .with_state(move |state| hub.subscribe(state, &namespace, from_revision))
    }

    fn leader(&self) -> Option<(u64, String)> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let id = metrics.current_leader?;
        let node = metrics
            .membership_config
            .membership()
            .get_node(&id)?
            .clone();
        Some((id, node.addr))
    }

    fn now_ms(&self) -> u64 {
        self.env.now_ms()
    }

    fn is_member(&self) -> bool {
        let m = self.raft.metrics().borrow_watched().clone();
        m.membership_config.membership().get_node(&m.id).is_some()
    }

    fn out_of_touch(&self) -> Option<String> {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        if membership.get_node(&m.id).is_none() {
            return Some(
                "this node is not a member of the cluster (removed, or not yet added)".into(),
            );
        }
        let max = self.contact_max_ms;
        if m.current_leader == Some(m.id) {
            let voters: Vec<u64> = membership.voter_ids().collect();
            let now = self.env.now_ms();
            return (!self.contact.quorum_within(&voters, m.id, now, max)).then(|| {
                format!("this leader has had no quorum acknowledge it for over {max} ms")
            });
        }
        let silent = self.contact.silent_for_ms(self.env.now_ms());
        (silent > max).then(|| format!("this node has not heard from a leader for {silent} ms"))
    }

    fn net(&self) -> Net {
        self.env.net.clone()
    }
}

impl Membership for RaftBackend {
    fn has_member(&self, node: u64) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        m.membership_config.membership().get_node(&node).is_some()
    }

    fn now_ms(&self) -> u64 {
        self.env.now_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::disclosure::McpHints;
    use fusebox_core::tools::ToolImport;
    use fusebox_core::{Namespace, ServerName, ToolName};

    fn import(tools: usize, block_bytes: usize) -> Request {
        let tools = (0..tools)
            .map(|i| ToolImport {
                tool: ToolName::new(format!("t{i}")).unwrap(),
                hints: McpHints::default(),
                disclosure_json: Some("x".repeat(block_bytes)),
            })
            .collect();
        let command = Command::ImportTools {
            namespace: Namespace::new("ns").unwrap(),
            server: ServerName::new("s").unwrap(),
            tools,
            actor: "ops".into(),
        };
        Request::new(1, command)
    }

    #[test]
    fn an_entry_past_its_bound_is_refused_before_the_log() {
        assert!(check_entry_bytes(&import(250, 16 * 1024)).is_ok());
        match check_entry_bytes(&import(1_000, 16 * 1024)) {
            Err(BackendError::TooLarge { bytes, max }) => {
                assert_eq!(max, ENTRY_BYTES_MAX);
                assert!(bytes > ENTRY_BYTES_MAX, "{bytes}");
            }
            other => panic!("a 16 MB entry was not refused: {other:?}"),
        }
    }
}
