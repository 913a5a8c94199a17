//! The public gRPC API: `fusebox.v1.Breakers`, `Ledger`, `Policy` and `Tools`.
//!
//! Each service is a thin adapter between the wire and the [`Backend`]: it
//! validates every request field at the boundary (names, sizes, enums,
//! namespaces inside keys), turns the request into one core
//! [`Command`](fusebox_core::machine::Command) or one read, and turns the
//! typed answer back into a response. No decision is made here that the
//! core could make; what the core refuses comes back as a status chosen on
//! purpose ([`status`]).
//!
//! Invariants this layer keeps:
//! - **Writes go through the log.** Outcome reports, probe permits, operator
//!   commands, ledger writes and policy changes are all commands; a node that
//!   is not the leader forwards the same request to the leader once
//!   ([`forward`]), marked so that it is never forwarded twice.
//! - **Normal answers are bodies.** The five `Ledger.Begin` answers, a stale
//!   outcome report and a denied probe are OK responses; only failures carry
//!   a status, always with a [`FuseboxErrorDetail`](fusebox_proto::v1::FuseboxErrorDetail).
//! - **Everything is bounded.** Page sizes, watch buffers and snapshot
//!   chunks, request metadata, forwarding deadlines and the forwarding
//!   channel cache each have a named limit in [`crate::limits`].
//! - **Reads are local, lookups are linearizable.** Listings and the watch
//!   stream carry revisions, so staleness is visible; a ledger lookup after
//!   an ambiguous timeout must see every acknowledged write.
//!
//! [`Backend`]: crate::backend::Backend

/// Returns the value of `$served` when this node served it; otherwise
/// forwards `$request` to the leader's `$client::$method` and returns that
/// answer from the enclosing RPC.
macro_rules! here_or_forward {
    ($self:ident, $request:ident, $served:expr, $client:ident :: $method:ident) => {
        match $served {
            Served::Here(value) => value,
            Served::Leader(leader) => {
                return $self
                    .gateway
                    .forward($request, leader, |channel, request| async move {
                        $client::new(channel).$method(request).await
                    })
                    .await;
            }
        }
    };
}

pub mod auth;
pub mod breakers;
pub mod convert;
pub mod forward;
pub mod gateway;
pub mod ledger;
pub mod ledger_pipeline;
pub mod operator;
pub mod policy;
pub mod status;
pub mod tools;
pub mod watch_stream;

pub use auth::AuthService;
pub use breakers::BreakersService;
pub use forward::Forwarder;
pub use gateway::Gateway;
pub use ledger::LedgerService;
pub use policy::PolicyService;
pub use tools::ToolsService;

use crate::limits::IMPORT_MESSAGE_BYTES_MAX;
use fusebox_proto::v1::breakers_server::BreakersServer;
use fusebox_proto::v1::ledger_server::LedgerServer;
use fusebox_proto::v1::policy_server::PolicyServer;
use fusebox_proto::v1::tools_server::ToolsServer;

/// The public services over one backend, ready for a tonic server.
pub struct Services<B> {
    /// `fusebox.v1.Breakers`.
    pub breakers: BreakersServer<BreakersService<B>>,
    /// `fusebox.v1.Ledger`.
    pub ledger: LedgerServer<LedgerService<B>>,
    /// `fusebox.v1.Policy`.
    pub policy: PolicyServer<PolicyService<B>>,
    /// `fusebox.v1.Tools`.
    pub tools: ToolsServer<ToolsService<B>>,
}

impl<B: crate::backend::Backend> Services<B> {
    /// The services over `backend`, sharing one forwarder.
    pub fn new(backend: B) -> Self {
        Services::with_gateway(Gateway::new(backend))
    }

    /// The services over a gateway (to share its forwarder with others).
    pub fn with_gateway(gateway: Gateway<B>) -> Self {
        Services {
            breakers: BreakersServer::new(BreakersService::new(gateway.clone())),
            ledger: LedgerServer::new(LedgerService::new(gateway.clone())),
            policy: PolicyServer::new(PolicyService::new(gateway.clone())),
            tools: ToolsServer::new(ToolsService::new(gateway))
                .max_decoding_message_size(IMPORT_MESSAGE_BYTES_MAX),
        }
    }
}
