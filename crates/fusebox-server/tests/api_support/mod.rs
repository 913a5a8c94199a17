//! Shared by the `api_*` tests: the three services over a backend, each on
//! an ephemeral loopback port, with generated clients; a follower backend
//! that only knows where the leader is; and helpers that keep every await
//! bounded.

#![allow(clippy::unwrap_used, dead_code)]

use fusebox_core::machine::{Applied, Command, SharedStateMachine};
use fusebox_core::Namespace;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::{ErrorCode, FuseboxErrorDetail, RequestMeta};
use fusebox_server::api::Services;
use fusebox_server::backend::local::LocalBackend;
use fusebox_server::backend::{Backend, BackendError, Consistency};
use fusebox_server::watch::WatchStart;
use prost::Message;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};

/// Every await in a test finishes within this, or the test fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Awaits `f`, failing the test if it takes longer than [`STEP_TIMEOUT`].
pub async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(STEP_TIMEOUT, f)
        .await
        .expect("step did not finish within 10 s")
}

/// Serves one generated service on 127.0.0.1:0; returns its address.
macro_rules! serve {
    ($service:expr) => {{
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = TcpListenerStream::new(listener);
        tokio::spawn(Server::builder().serve_with_incoming($service, incoming));
        addr
    }};
}

/// Where one node's three services listen.
#[derive(Clone, Copy, Debug)]
pub struct Addrs {
    /// `fusebox.v1.Breakers`.
    pub breakers: SocketAddr,
    /// `fusebox.v1.Ledger`.
    pub ledger: SocketAddr,
    /// `fusebox.v1.Policy`.
    pub policy: SocketAddr,
}

/// A node under test: its services' addresses and a client for each.
pub struct Node {
    pub addrs: Addrs,
    pub breakers: BreakersClient<Channel>,
    pub ledger: LedgerClient<Channel>,
    pub policy: PolicyClient<Channel>,
}

/// Starts the three services over `backend` and connects clients.
pub async fn start<B: Backend>(backend: B) -> Node {
    let services = Services::new(backend);
    let addrs = Addrs {
        breakers: serve!(services.breakers),
        ledger: serve!(services.ledger),
        policy: serve!(services.policy),
    };
    Node {
        addrs,
        breakers: within(BreakersClient::connect(format!(
            "http://{}",
            addrs.breakers
        )))
        .await
        .unwrap(),
        ledger: within(LedgerClient::connect(format!("http://{}", addrs.ledger)))
            .await
            .unwrap(),
        policy: within(PolicyClient::connect(format!("http://{}", addrs.policy)))
            .await
            .unwrap(),
    }
}

/// A fresh in-process backend and a node serving it.
pub async fn local() -> (LocalBackend, Node) {
    let backend = LocalBackend::new();
    let node = start(backend.clone()).await;
    (backend, node)
}

/// Request metadata naming the test as caller.
pub fn meta() -> Option<RequestMeta> {
    Some(RequestMeta {
        caller: "api-test".into(),
        ..Default::default()
    })
}

/// The detail a status carries; fails the test if it has none.
pub fn detail(status: &Status) -> FuseboxErrorDetail {
    FuseboxErrorDetail::decode(status.details()).expect("status carries a FuseboxErrorDetail")
}

/// Asserts the code, the detail code and that the message mentions `needle`.
pub fn assert_status(status: &Status, code: Code, error: ErrorCode, needle: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(detail(status).code, error as i32, "{status:?}");
    assert!(
        status.message().contains(needle),
        "message {:?} lacks {needle:?}",
        status.message()
    );
}

/// The field an INVALID_ARGUMENT status names.
pub fn invalid_field(status: &Status) -> String {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    match detail(status).detail {
        Some(fusebox_proto::v1::fusebox_error_detail::Detail::InvalidArgument(d)) => {
            d.problem.unwrap().field
        }
        other => panic!("no invalid_argument detail: {other:?}"),
    }
}

/// A node that is not the leader: it refuses writes and linearizable reads
/// with the leader's address, and serves local reads and watches from an
/// empty state of its own.
#[derive(Clone)]
pub struct Follower {
    pub leader_addr: Option<String>,
    pub local: LocalBackend,
}

impl Follower {
    /// A follower that points at `leader_addr`.
    pub fn pointing_at(leader_addr: Option<String>) -> Self {
        Follower {
            leader_addr,
            local: LocalBackend::new(),
        }
    }

    fn not_leader(&self) -> BackendError {
        BackendError::NotLeader {
            leader_id: self.leader_addr.as_ref().map(|_| 1),
            leader_addr: self.leader_addr.clone(),
        }
    }
}

impl Backend for Follower {
    async fn write(&self, _command: Command) -> Result<Applied, BackendError> {
        Err(self.not_leader())
    }

    async fn read<T, F>(&self, consistency: Consistency, f: F) -> Result<T, BackendError>
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static,
    {
        match consistency {
            Consistency::Linearizable => Err(self.not_leader()),
            Consistency::Local => self.local.read(consistency, f).await,
        }
    }

    async fn watch(
        &self,
        namespace: Namespace,
        from_revision: Option<u64>,
    ) -> Result<WatchStart, BackendError> {
        self.local.watch(namespace, from_revision).await
    }

    fn leader(&self) -> Option<(u64, String)> {
        self.leader_addr.clone().map(|a| (1, a))
    }

    fn now_ms(&self) -> u64 {
        self.local.now_ms()
    }

    fn is_member(&self) -> bool {
        true
    }

    fn out_of_touch(&self) -> Option<String> {
        None
    }

    fn net(&self) -> fusebox_proto::net::Net {
        self.local.net()
    }
}
