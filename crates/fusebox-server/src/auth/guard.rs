//! The guard in front of every service: finds the call's rule, recognises
//! the caller, checks its role, and hands the [`Caller`] to the handler.
//!
//! It runs before the request body is read, on what the headers and the
//! connection say, and needs no IO: the auth table it reads is the one the
//! node last applied, published on every change ([`PublishedAuth`]), so a
//! revocation takes effect on a node as soon as that node applies it.
//!
//! A caller is recognised, in this order, by:
//! 1. `authorization: Bearer fbx_<id>_<secret>`, judged against the table at
//!    the node's wall clock;
//! 2. `x-fusebox-caller: <name>` from a connection whose certificate names
//!    a current member (a follower forwarding a certificate caller's
//!    request); from anyone else the header is refused;
//! 3. a client certificate naming `fusebox://user/<name>`.
//!
//! Enforcement is on when the node was started with `--auth` or the
//! replicated table says so; without it an unrecognised caller is the
//! anonymous [`Caller::open`].

use super::limits::{CallerLimits, Meter, StreamPermit};
use super::rules::{rule_for, Rule};
use super::{Caller, Via};
use crate::limits::{GRPC_REQUEST_TIMEOUT_MS, WATCH_RECHECK_MS};
use crate::node::incoming::ConnInfo;
use fusebox_core::auth::{AuthTable, PresentedToken, Role};
use fusebox_core::{Namespace, Timestamp};
use futures::future::{ready, Either, Ready};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tonic::Status;
use tower::{Layer, Service};
use tracing::instrument::Instrumented;
use tracing::Instrument;

/// The metadata header a member forwarding a certificate caller's request
/// names that caller in.
pub const FORWARDED_CALLER_HEADER: &str = "x-fusebox-caller";

/// The auth table this node last applied, shared with the guard and with
/// the open watch streams, which wait on its changes ([`Recheck::revoked`]).
#[derive(Clone, Debug)]
pub struct PublishedAuth(Arc<watch::Sender<Arc<AuthTable>>>);

impl Default for PublishedAuth {
    fn default() -> Self {
        PublishedAuth(Arc::new(watch::Sender::new(Arc::default())))
    }
}

impl PublishedAuth {
    /// The table now.
    pub fn current(&self) -> Arc<AuthTable> {
        Arc::clone(&self.0.borrow())
    }

    /// Publishes `table` if it is not the one published, waking whoever
    /// waits on a change. Every change bumps the replicated version, so one
    /// version is one table: the common case (an entry that did not touch
    /// auth) costs a read lock.
    pub fn publish(&self, table: &AuthTable) {
        if self.0.borrow().version() == table.version() {
            return;
        }
        self.0.send_replace(Arc::new(table.clone()));
    }

    /// A receiver that sees every table published from now on.
    fn changes(&self) -> watch::Receiver<Arc<AuthTable>> {
        self.0.subscribe()
    }
}

/// What the guard needs to know of its node.
pub trait Membership: Send + Sync + 'static {
    /// Whether `node` is in the cluster's current membership.
    fn has_member(&self, node: u64) -> bool;
    /// The node's wall clock, Unix ms.
    fn now_ms(&self) -> u64;
}

/// The one RPC that holds a stream open, metered per caller.
const WATCH_PATH: &str = "/fusebox.v1.Breakers/Watch";
/// The ledger's pipeline, whose calls are admitted one by one
/// ([`Readmit`]).
pub const PIPELINE_PATH: &str = "/fusebox.v1.Ledger/Pipeline";

/// Recognises callers, checks their role against the RPC's rule, and
/// meters them ([`Meter`]).
#[derive(Clone)]
pub struct Guard {
    table: PublishedAuth,
    node: Arc<dyn Membership>,
    /// Enforce even before the replicated table does (`serve --auth`).
    required: bool,
    meter: Arc<Meter>,
}

/// What the guard hands a call it admits.
pub struct Admitted {
    /// Who calls.
    pub caller: Caller,
    /// The caller's slot for a watch stream, for `Watch` calls.
    pub stream: Option<StreamPermit>,
    /// How to prove the caller again while its stream lasts.
    pub recheck: Option<Recheck>,
}

/// What a stream's caller proved when it opened, to be proved again while
/// the stream lasts: a token revoked or expired, a principal removed or
/// narrowed, or enforcement switched on ends the stream
/// (`api/watch_stream.rs`).
#[derive(Clone)]
pub struct Recheck {
    table: PublishedAuth,
    node: Arc<dyn Membership>,
    required: bool,
    proof: Proof,
}

#[derive(Clone)]
enum Proof {
    Token(String),
    Principal(String),
    Open,
}

impl Recheck {
    /// Resolves, with the status to end the stream with, once the caller
    /// may no longer watch `ns`.
    ///
    /// It proves the caller again whenever the node publishes a new auth
    /// table and when the caller's token expires, so an idle stream costs
    /// nothing between changes. A stream opened with an expiring token also
    /// proves it every [`WATCH_RECHECK_MS`], for a wall clock that jumps
    /// past the expiry.
    pub async fn revoked(self, ns: Namespace) -> Status {
        let mut changes = self.table.changes();
        loop {
            let table = self.table.current();
            let now_ms = self.node.now_ms();
            if let Err(status) = self.allowed_by(&table, &ns, now_ms) {
                return status;
            }
            // Only a token's expiry depends on the clock.
            let wait = self
                .token_expiry(&table)
                .map(|at| at.as_millis().saturating_sub(now_ms).min(WATCH_RECHECK_MS));
            let timer = async move {
                match wait {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => {
                    // The stream holds the publisher, so this does not happen
                    // while it lasts; if it did, nothing could be proved.
                    if changed.is_err() {
                        return Status::unavailable(
                            "this node stopped publishing its auth table; watch another node",
                        );
                    }
                }
                () = timer => {}
            }
        }
    }

    /// When the caller's token stops being accepted, if it was proved by
    /// one that expires.
    fn token_expiry(&self, table: &AuthTable) -> Option<Timestamp> {
        let Proof::Token(token) = &self.proof else {
            return None;
        };
        let presented = PresentedToken::parse(token)?;
        table.token(presented.id)?.expires_at
    }

    /// Whether the caller may watch `ns` by `table` at `now_ms`.
    fn allowed_by(&self, table: &AuthTable, ns: &Namespace, now_ms: u64) -> Result<(), Status> {
        let now = Timestamp::from_millis(now_ms);
        let (role, grant) = match &self.proof {
            Proof::Token(token) => match table.authenticate(token, now) {
                Ok((_, p)) => (p.role, p.namespaces.clone()),
                Err(refusal) => {
                    return Err(Status::unauthenticated(format!("token refused: {refusal}")))
                }
            },
            Proof::Principal(name) => match table.principal(name) {
                Some(p) => (p.role, p.namespaces.clone()),
                None => {
                    return Err(Status::unauthenticated(format!(
                        "{name:?} is no longer a principal of this cluster"
                    )))
                }
            },
            Proof::Open if self.required || table.enabled() => {
                return Err(Status::unauthenticated(
                    "this cluster now requires authentication: reconnect with a token",
                ))
            }
            Proof::Open => return Ok(()),
        };
        if !role.covers(Role::Agent) || !grant.allows(ns) {
            return Err(Status::permission_denied(format!(
                "the caller's grant no longer covers watching {ns}"
            )));
        }
        Ok(())
    }
}

/// How the calls of a ledger pipeline are admitted, each on its own, as the
/// unary call it stands for would be: by its path's rule, the stream's
/// credentials judged against the auth table current when the call
/// arrives, and the caller's request rate. A token revoked while its
/// pipeline is open refuses the next call, not only the next stream.
#[derive(Clone)]
pub struct Readmit {
    guard: Arc<Guard>,
    headers: HeaderMap,
    conn: Option<ConnInfo>,
    /// The stream's [`address_key`], worked out once for all its calls.
    address: String,
}

impl Readmit {
    fn new(guard: Arc<Guard>, headers: HeaderMap, conn: Option<ConnInfo>) -> Readmit {
        let address = address_key(conn.as_ref());
        Readmit {
            guard,
            headers,
            conn,
            address,
        }
    }

    /// The caller of one call to `path` carried by the pipeline, or the
    /// status refusing it.
    pub fn admit(&self, path: &str) -> Result<Caller, Status> {
        self.guard
            .admit_from(path, &self.headers, self.conn.as_ref(), &self.address)
            .map(|admitted| admitted.caller)
    }
}

/// The meter's key for a caller known only by its connection: `a:IP`
/// (`a:-` without one).
fn address_key(conn: Option<&ConnInfo>) -> String {
    format!(
        "a:{}",
        conn.map_or_else(|| "-".to_owned(), |c| c.remote.ip().to_string())
    )
}

impl Guard {
    /// A guard reading `table`, asking `node` about members and time,
    /// metering callers within `limits`.
    pub fn new(
        table: PublishedAuth,
        node: Arc<dyn Membership>,
        required: bool,
        limits: CallerLimits,
    ) -> Guard {
        Guard {
            table,
            node,
            required,
            meter: Arc::new(Meter::new(limits)),
        }
    }

    /// The caller of a call to `path` and its stream slot, or the status
    /// refusing it.
    pub fn admit(
        &self,
        path: &str,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
    ) -> Result<Admitted, Status> {
        self.admit_from(path, headers, conn, &address_key(conn))
    }

    /// [`Guard::admit`] with the connection's [`address_key`] worked out.
    fn admit_from(
        &self,
        path: &str,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
        address: &str,
    ) -> Result<Admitted, Status> {
        let Some(rule) = rule_for(path) else {
            tracing::warn!(path, "call to an RPC without an access rule refused");
            return Err(Status::permission_denied(format!(
                "{path} has no access rule on this node; refused"
            )));
        };
        let min = match rule {
            // Raft traffic is the members' own, checked by its service.
            Rule::Peer => {
                return Ok(Admitted {
                    caller: Caller::open(),
                    stream: None,
                    recheck: None,
                })
            }
            // Health checks need no credentials, but are metered by address
            // like any anonymous call.
            Rule::Public => {
                self.meter.request(address, Instant::now())?;
                return Ok(Admitted {
                    caller: Caller::open(),
                    stream: None,
                    recheck: None,
                });
            }
            Rule::Role { min, .. } => min,
        };
        let table = self.table.current();
        let caller = match self.recognise(&table, headers, conn) {
            Ok(caller) if caller.role.covers(min) => caller,
            refused => {
                let status = match refused {
                    Ok(caller) => Status::permission_denied(format!(
                        "{caller} may not call {path}: it needs the {min} role"
                    )),
                    Err(status) => status,
                };
                // Refusals are metered by address: a flood of bad tokens is
                // slowed, and logged only while its address has budget left.
                self.meter.request(address, Instant::now())?;
                tracing::warn!(path, remote = %address, code = ?status.code(), reason = %status.message(), "call refused");
                return Err(status);
            }
        };
        // Prefixed so no principal's name can pass for an address.
        let named;
        let key = match &caller.name {
            Some(name) => {
                named = format!("p:{name}");
                named.as_str()
            }
            None => address,
        };
        self.meter.request(key, Instant::now())?;
        if path != WATCH_PATH {
            return Ok(Admitted {
                caller,
                stream: None,
                recheck: None,
            });
        }
        let stream = Some(self.meter.stream(key)?);
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let proof = match (bearer, &caller.name) {
            (Some(token), _) => Proof::Token(token.trim().to_owned()),
            (None, Some(name)) => Proof::Principal(name.clone()),
            (None, None) => Proof::Open,
        };
        let recheck = Some(Recheck {
            table: self.table.clone(),
            node: Arc::clone(&self.node),
            required: self.required,
            proof,
        });
        Ok(Admitted {
            caller,
            stream,
            recheck,
        })
    }

    fn recognise(
        &self,
        table: &AuthTable,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
    ) -> Result<Caller, Status> {
        let enforced = self.required || table.enabled();
        if let Some(value) = headers.get("authorization") {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    Status::unauthenticated("the authorization header must be `Bearer <token>`")
                })?;
            let now = Timestamp::from_millis(self.node.now_ms());
            return match table.authenticate(token.trim(), now) {
                Ok((name, principal)) => Ok(caller(name, principal, Via::Token)),
                Err(refusal) => Err(Status::unauthenticated(format!("token refused: {refusal}"))),
            };
        }
        let identity = conn.and_then(|c| c.identity.as_deref());
        if let Some(value) = headers.get(FORWARDED_CALLER_HEADER) {
            let member = identity
                .and_then(|i| i.node_id())
                .is_some_and(|id| self.node.has_member(id));
            let name = value.to_str().ok().filter(|_| member).ok_or_else(|| {
                Status::unauthenticated(format!(
                    "{FORWARDED_CALLER_HEADER} is accepted only from a member's certificate"
                ))
            })?;
            return known(table, name, Via::Forwarded);
        }
        if let Some(user) = identity.and_then(|i| i.user()) {
            return match known(table, user, Via::Certificate) {
                Ok(caller) => Ok(caller),
                Err(_) if !enforced => Ok(Caller::open()),
                Err(refused) => Err(refused),
            };
        }
        if enforced {
            return Err(Status::unauthenticated(
                "this cluster requires authentication: pass a token (--token or FUSEBOX_TOKEN) \
                 or a client certificate naming a principal",
            ));
        }
        Ok(Caller::open())
    }
}

fn caller(name: &str, principal: &fusebox_core::auth::Principal, via: Via) -> Caller {
    Caller {
        name: Some(name.to_owned()),
        role: principal.role,
        namespaces: principal.namespaces.clone(),
        via,
    }
}

/// The principal `name` names, or UNAUTHENTICATED.
fn known(table: &AuthTable, name: &str, via: Via) -> Result<Caller, Status> {
    match table.principal(name) {
        Some(principal) => Ok(caller(name, principal, via)),
        None => Err(Status::unauthenticated(format!(
            "{name:?} is not a principal of this cluster (fusebox auth grant)"
        ))),
    }
}

/// Puts a [`Guard`] in front of a tonic router.
#[derive(Clone)]
pub struct GuardLayer {
    guard: Arc<Guard>,
}

impl GuardLayer {
    /// A layer admitting calls with `guard`.
    pub fn new(guard: Guard) -> GuardLayer {
        GuardLayer {
            guard: Arc::new(guard),
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: Arc::clone(&self.guard),
            inner,
        }
    }
}

/// A service behind a [`Guard`].
#[derive(Clone)]
pub struct Guarded<S> {
    guard: Arc<Guard>,
    inner: S,
}

/// The one call the server's deadline does not bound: a snapshot of any
/// size streams in under deadlines of its own (`raft/service.rs`).
const INSTALL_SNAPSHOT_PATH: &str = "/fusebox.v1.Raft/InstallSnapshot";

/// A guarded call: refused at once, or handled within a deadline.
type GuardedFuture<F, E> = Either<Ready<Result<Response<Body>, E>>, Deadline<Instrumented<F>>>;

impl<S> Service<Request<Body>> for Guarded<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = GuardedFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let admitted = self.guard.admit(
            &path,
            request.headers(),
            request.extensions().get::<ConnInfo>(),
        );
        match admitted {
            Ok(Admitted {
                caller,
                stream,
                recheck,
            }) => {
                let span = match &caller.name {
                    Some(name) => tracing::info_span!("call", caller = %name, role = %caller.role),
                    None => tracing::Span::none(),
                };
                request.extensions_mut().insert(caller);
                if let Some(stream) = stream {
                    request.extensions_mut().insert(stream);
                }
                if let Some(recheck) = recheck {
                    request.extensions_mut().insert(recheck);
                }
                if path == PIPELINE_PATH {
                    let readmit = Readmit::new(
                        Arc::clone(&self.guard),
                        request.headers().clone(),
                        request.extensions().get::<ConnInfo>().cloned(),
                    );
                    request.extensions_mut().insert(readmit);
                }
                // The server's deadline on every handler (shorter if the
                // client's `grpc-timeout` says so, which tonic applies).
                let limit = (path != INSTALL_SNAPSHOT_PATH)
                    .then(|| Duration::from_millis(GRPC_REQUEST_TIMEOUT_MS));
                Either::Right(Deadline {
                    inner: Box::pin(self.inner.call(request).instrument(span)),
                    sleep: limit.map(|limit| Box::pin(tokio::time::sleep(limit))),
                })
            }
            Err(status) => Either::Left(ready(Ok(status.into_http()))),
        }
    }
}

/// A handler's future with the server's deadline: past it, the call ends
/// with `DEADLINE_EXCEEDED` and the handler is dropped.
pub struct Deadline<F> {
    inner: Pin<Box<F>>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<F, E> Future for Deadline<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(out) = this.inner.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        let expired = match &mut this.sleep {
            Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
            None => false,
        };
        if !expired {
            return Poll::Pending;
        }
        let status = Status::deadline_exceeded(format!(
            "the server's deadline of {GRPC_REQUEST_TIMEOUT_MS} ms for one call passed"
        ));
        Poll::Ready(Ok(status.into_http()))
    }
}

/// Whether `role` may call `path`, by the table alone (for docs and tests).
pub fn role_may_call(role: Role, path: &str) -> Option<bool> {
    match rule_for(path)? {
        Rule::Public | Rule::Peer => Some(true),
        Rule::Role { min, .. } => Some(role.covers(min)),
    }
}
