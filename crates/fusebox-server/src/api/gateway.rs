//! What every service does with the backend: propose, read, forward.
//!
//! [`Gateway::write`] proposes one command and sorts the result three ways:
//! applied (the caller reads the typed answer), refused by the core (a
//! status chosen by [`status::from_core`]), or "ask the leader" (the caller
//! forwards the original request). Keeping that in one place means every
//! RPC maps the same failure to the same status.

use super::convert;
use super::forward::Forwarder;
use super::status;
use crate::auth::Caller;
use crate::backend::{Backend, BackendError, Consistency};
use fusebox_core::machine::{Answer, Applied, Command, SharedStateMachine};
use fusebox_core::Namespace;
use std::future::Future;
use std::sync::Arc;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

/// Where the leader is, when this node is not it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's node id, if known.
    pub id: Option<u64>,
    /// The leader's gRPC address, if known.
    pub addr: Option<String>,
}

/// The result of a proposal or a read this node may not serve itself.
#[derive(Debug)]
pub enum Served<T> {
    /// This node served it.
    Here(T),
    /// Only the leader can; forward the request there.
    Leader(Leader),
}

/// A backend with the forwarding and error mapping the services share.
pub struct Gateway<B> {
    backend: B,
    forwarder: Arc<Forwarder>,
    /// Whether every request must carry a [`Caller`] from the guard (a
    /// node's services); without it, a request with none is the anonymous
    /// open caller (the API layer's own tests).
    guarded: bool,
    /// Turns true when the node stops, for the streams that must end then
    /// (ledger pipelines): a stream keeps its connection open through a
    /// graceful shutdown, and its client would stay on a stopped node.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
}

impl<B: Clone> Clone for Gateway<B> {
    fn clone(&self) -> Self {
        Gateway {
            backend: self.backend.clone(),
            forwarder: Arc::clone(&self.forwarder),
            guarded: self.guarded,
            stop: self.stop.clone(),
        }
    }
}

impl<B: Backend> Gateway<B> {
    /// A gateway with its own forwarder.
    pub fn new(backend: B) -> Self {
        let forwarder = Arc::new(Forwarder::new(backend.net(), None));
        Gateway::with_forwarder(backend, forwarder)
    }

    /// A gateway sharing a forwarder (and its channel cache) with others.
    pub fn with_forwarder(backend: B, forwarder: Arc<Forwarder>) -> Self {
        Gateway {
            backend,
            forwarder,
            guarded: false,
            stop: None,
        }
    }

    /// The same gateway, refusing any request the guard did not admit.
    pub fn guarded(mut self) -> Self {
        self.guarded = true;
        self
    }

    /// The same gateway, ending its streams when `stop` turns true.
    pub fn stopped_by(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Resolves once the node stops; never, without a stop signal.
    pub async fn stopping(&self) {
        match self.stop.clone() {
            Some(mut stop) => {
                // A dropped sender is a stopped node too.
                let _ = stop.wait_for(|stopped| *stopped).await;
            }
            None => std::future::pending().await,
        }
    }

    /// Who sent `request`, as the guard recognised it.
    pub fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        self.recognised(Caller::of(request))
    }

    /// `caller`, as the guard recognised it (`None`: it did not, which only
    /// an unguarded server allows).
    pub fn recognised(&self, caller: Option<&Caller>) -> Result<Caller, Status> {
        match caller {
            Some(caller) => Ok(caller.clone()),
            None if !self.guarded => Ok(Caller::open()),
            None => {
                tracing::error!("a request reached a service without passing the guard");
                Err(Status::internal("request not admitted by the guard"))
            }
        }
    }

    /// The caller of a namespaced request and the namespace, validated;
    /// PERMISSION_DENIED if the caller holds no grant for it. Every
    /// namespaced RPC calls this before reading anything else.
    pub fn admit<T>(
        &self,
        request: &Request<T>,
        namespace: &str,
    ) -> Result<(Caller, Namespace), Status> {
        let caller = self.caller(request)?;
        let ns = self.admit_caller(&caller, namespace)?;
        Ok((caller, ns))
    }

    /// [`Gateway::admit`] for a caller already recognised.
    pub fn admit_caller(&self, caller: &Caller, namespace: &str) -> Result<Namespace, Status> {
        let ns = convert::namespace(namespace)?;
        caller.require(&ns)?;
        Ok(ns)
    }

    /// The backend, for watch subscriptions.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Proposes a command; a core refusal becomes its status. The core's
    /// rules ([`Command::validate`]) are checked first, so a command every
    /// replica would refuse never costs a log entry.
    pub async fn write(&self, command: Command) -> Result<Served<Applied>, Status> {
        command.validate().map_err(|e| status::from_core(&e))?;
        match self.backend.write(command).await {
            Ok(Applied {
                answer: Answer::Rejected(error),
                ..
            }) => {
                tracing::debug!(error = %error, "command refused by the core");
                Err(status::from_core(&error))
            }
            Ok(applied) => Ok(Served::Here(applied)),
            Err(error) => leader_or_status(error),
        }
    }

    /// Reads at a consistency this node may not provide (linearizable on a
    /// follower): the caller then forwards.
    pub async fn read<T, F>(&self, consistency: Consistency, f: F) -> Result<Served<T>, Status>
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.backend.read(consistency, f).await {
            Ok(value) => Ok(Served::Here(value)),
            Err(error) => leader_or_status(error),
        }
    }

    /// Reads this node's applied state.
    pub async fn read_local<T, F>(&self, f: F) -> Result<T, Status>
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.backend
            .read(Consistency::Local, f)
            .await
            .map_err(|e| status::from_backend(&e))
    }

    /// Sends `request` to the leader with `call`, once.
    pub async fn forward<Req, Resp, F, Fut>(
        &self,
        request: Request<Req>,
        leader: Leader,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        self.forwarder
            .forward(request, leader.id, leader.addr, call)
            .await
    }
}

fn leader_or_status<T>(error: BackendError) -> Result<Served<T>, Status> {
    match error {
        BackendError::NotLeader {
            leader_id,
            leader_addr,
        } => Ok(Served::Leader(Leader {
            id: leader_id,
            addr: leader_addr,
        })),
        other => {
            tracing::warn!(error = %other, "backend could not serve the request");
            Err(status::from_backend(&other))
        }
    }
}

/// INTERNAL for an answer of the wrong kind: a bug between the services and
/// the core, never a caller's fault.
pub fn unexpected(answer: &Answer) -> Status {
    tracing::error!(answer = ?answer, "core answered a command with the wrong kind of answer");
    Status::new(
        Code::Internal,
        "the state machine answered with an unexpected kind of answer",
    )
}
