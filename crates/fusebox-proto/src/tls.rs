//! TLS for every connection Fusebox makes or accepts, on rustls (ring, no
//! OpenSSL), over any [`Net`](crate::net::Net).
//!
//! TLS is done here, on the byte streams, rather than by tonic: the same
//! code then serves the machine's TCP and the simulation's network, and
//! certificates can be reloaded without a restart. Each side reads its
//! files once at start ([`TlsAcceptor::load`], [`TlsConnector::load`]) and
//! again whenever one of them changes (checked at most every
//! [`RELOAD_CHECK_INTERVAL`], on the next handshake). A change that does not
//! load (a key that does not match its certificate, a file half-written) is
//! reported and the previous configuration stays in force. Connections
//! already open keep the certificates they were made with.
//!
//! Identity: a verified client certificate's names become a
//! [`PeerIdentity`], which the server hands to every request on that
//! connection. A member's certificate names the node with a URI
//! `fusebox://node/<id>` ([`node_uri`]).

use crate::net::BoxConn;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often a handshake may look at the files for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest certificate, key or CA bundle file read, in bytes.
pub const PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Why TLS could not be set up from the given files.
#[derive(Debug)]
pub struct TlsError(String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn error(what: impl Into<String>) -> TlsError {
    TlsError(what.into())
}

/// The URI a member's certificate carries to say it is node `id`.
pub fn node_uri(id: u64) -> String {
    format!("fusebox://node/{id}")
}

/// Who is on the other end of a connection, as its verified certificate
/// names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The certificate's DNS names.
    pub dns_names: Vec<String>,
    /// The certificate's URI names.
    pub uris: Vec<String>,
}

impl PeerIdentity {
    fn of(leaf: &CertificateDer<'_>) -> PeerIdentity {
        match webpki::EndEntityCert::try_from(leaf) {
            Ok(cert) => PeerIdentity {
                dns_names: cert.valid_dns_names().map(str::to_owned).collect(),
                uris: cert.valid_uri_names().map(str::to_owned).collect(),
            },
            Err(_) => PeerIdentity::default(),
        }
    }

    /// The node id this certificate was issued to (a `fusebox://node/<id>`
    /// URI), if it is a member's.
    pub fn node_id(&self) -> Option<u64> {
        self.uris
            .iter()
            .find_map(|uri| uri.strip_prefix("fusebox://node/")?.parse().ok())
    }

    /// The principal a client certificate names (a `fusebox://user/<name>`
    /// URI), if it names one.
    pub fn user(&self) -> Option<&str> {
        self.uris
            .iter()
            .find_map(|uri| uri.strip_prefix("fusebox://user/"))
            .filter(|name| !name.is_empty())
    }

    /// A short name for logs and audits: the node URI, else the first DNS
    /// name, else the first URI.
    pub fn name(&self) -> Option<&str> {
        self.uris
            .iter()
            .find(|u| u.starts_with("fusebox://node/"))
            .or_else(|| self.dns_names.first())
            .or_else(|| self.uris.first())
            .map(String::as_str)
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| error(format!("{what} {shown}: {e}")))?;
    if meta.len() > PEM_FILE_BYTES_MAX {
        return Err(error(format!(
            "{what} {shown}: {} bytes, at most {PEM_FILE_BYTES_MAX}",
            meta.len()
        )));
    }
    std::fs::read(path).map_err(|e| error(format!("{what} {shown}: {e}")))
}

fn certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(format!("{what} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(error(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(path, "key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| error(format!("key {}: {e}", path.display())))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path, "CA")? {
        roots
            .add(cert)
            .map_err(|e| error(format!("CA {}: {e}", path.display())))?;
    }
    Ok(Arc::new(roots))
}

/// Whether a server asks clients for certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// Clients may present one signed by the CA (it then names them); none
    /// is accepted too.
    Optional,
    /// Clients must present one signed by the CA (peers always do).
    Required,
}

/// A server's certificate, key, and the CA its clients' certificates must
/// be signed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA that signs client certificates (PEM); without one, clients
    /// are not asked for a certificate.
    pub client_ca: Option<PathBuf>,
    /// Whether a client certificate is required (only with `client_ca`).
    pub client_certs: ClientCerts,
}

impl TlsFiles for ServerTlsFiles {
    type Config = ServerConfig;

    fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.cert.clone(), self.key.clone()];
        paths.extend(self.client_ca.clone());
        paths
    }

    fn build(&self) -> Result<ServerConfig, TlsError> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| error(e.to_string()))?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider);
                let verifier = match self.client_certs {
                    ClientCerts::Required => verifier,
                    ClientCerts::Optional => verifier.allow_unauthenticated(),
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| error(format!("CA {}: {e}", ca.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
            None if self.client_certs == ClientCerts::Required => {
                return Err(error("client certificates are required but no CA is given"))
            }
            None => builder.with_no_client_auth(),
        };
        // Refuses a key that does not match the certificate.
        let mut config = builder
            .with_single_cert(certs(&self.cert, "certificate")?, key(&self.key)?)
            .map_err(|e| error(format!("{}: {e}", self.cert.display())))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// A client's trusted CA and, for mutual TLS, its certificate and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// The CA that signed the servers' certificates (PEM).
    pub ca: PathBuf,
    /// This client's certificate chain (PEM), for servers that ask.
    pub cert: Option<PathBuf>,
    /// This client's private key (PEM).
    pub key: Option<PathBuf>,
    /// The name to check the server's certificate against, instead of the
    /// host dialed (for addresses that are IPs or aliases).
    pub server_name: Option<String>,
}

impl TlsFiles for ClientTlsFiles {
    type Config = ClientConfig;

    fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.ca.clone()];
        paths.extend(self.cert.clone());
        paths.extend(self.key.clone());
        paths
    }

    fn build(&self) -> Result<ClientConfig, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| error(e.to_string()))?
            .with_root_certificates(roots(&self.ca)?);
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key_path)) => builder
                .with_client_auth_cert(certs(cert, "certificate")?, key(key_path)?)
                .map_err(|e| error(format!("{}: {e}", cert.display())))?,
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(error(
                    "a client certificate needs its key, and a key its certificate",
                ))
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// Files a TLS configuration is built from.
trait TlsFiles {
    /// What they build.
    type Config;
    /// The files, to watch for changes.
    fn paths(&self) -> Vec<PathBuf>;
    /// Reads the files and builds the configuration.
    fn build(&self) -> Result<Self::Config, TlsError>;
}

/// A configuration built from files, rebuilt when they change.
struct Reloading<F: TlsFiles> {
    files: F,
    state: Mutex<Loaded<F::Config>>,
}

struct Loaded<C> {
    config: Arc<C>,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

impl<F: TlsFiles> Reloading<F> {
    fn load(files: F) -> Result<Arc<Self>, TlsError> {
        let stamps = stamps(&files.paths());
        let config = Arc::new(files.build()?);
        Ok(Arc::new(Reloading {
            files,
            state: Mutex::new(Loaded {
                config,
                stamps,
                checked: Instant::now(),
            }),
        }))
    }

    /// The configuration in force, rebuilt first if a file changed since it
    /// was last looked at (at most every [`RELOAD_CHECK_INTERVAL`]).
    fn current(&self) -> Arc<F::Config> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if state.checked.elapsed() >= RELOAD_CHECK_INTERVAL {
            state.checked = Instant::now();
            let now = stamps(&self.files.paths());
            if now != state.stamps {
                state.stamps = now;
                match self.files.build() {
                    Ok(config) => {
                        state.config = Arc::new(config);
                        tracing::info!("TLS certificates reloaded");
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "TLS files changed but do not load; the previous ones stay in force"
                    ),
                }
            }
        }
        state.config.clone()
    }
}

/// The server side of TLS: handshakes accepted connections with the
/// certificate in force.
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: Arc<Reloading<ServerTlsFiles>>,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TlsAcceptor")
            .field(&self.inner.files)
            .finish()
    }
}

impl TlsAcceptor {
    /// Loads the files; every problem with them is named.
    pub fn load(files: ServerTlsFiles) -> Result<Self, TlsError> {
        Ok(TlsAcceptor {
            inner: Reloading::load(files)?,
        })
    }

    /// Completes the handshake on `conn` within [`HANDSHAKE_TIMEOUT`] and
    /// returns the encrypted stream and, if the client presented a
    /// verified certificate, who it names.
    pub async fn accept(&self, conn: BoxConn) -> io::Result<(BoxConn, Option<PeerIdentity>)> {
        let config = self.inner.current();
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(conn);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        let identity = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(PeerIdentity::of);
        Ok((Box::new(stream), identity))
    }
}

/// The client side of TLS: handshakes dialed connections, checking the
/// server's certificate against the CA in force.
#[derive(Clone)]
pub struct TlsConnector {
    inner: Arc<Reloading<ClientTlsFiles>>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TlsConnector")
            .field(&self.inner.files)
            .finish()
    }
}

impl TlsConnector {
    /// Loads the files; every problem with them is named.
    pub fn load(files: ClientTlsFiles) -> Result<Self, TlsError> {
        Ok(TlsConnector {
            inner: Reloading::load(files)?,
        })
    }

    /// Completes the handshake with `host` over `conn` within
    /// [`HANDSHAKE_TIMEOUT`]. The server's certificate must name
    /// `server_name` if one was given, else `host`.
    pub async fn connect(&self, host: &str, conn: BoxConn) -> io::Result<BoxConn> {
        let config = self.inner.current();
        let name = self.inner.files.server_name.as_deref().unwrap_or(host);
        // `Uri::host` keeps an IPv6 address's brackets.
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let handshake = tokio_rustls::TlsConnector::from(config).connect(name, conn);
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(Box::new(stream))
    }
}
