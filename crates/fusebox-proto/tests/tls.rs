//! TLS on real sockets and files: mutual TLS names the client, a missing
//! client certificate is refused, certificates rotate without a restart, and
//! bad files are refused by name.

#![allow(clippy::unwrap_used)]

use fusebox_proto::tls::{
    node_uri, ClientCerts, ClientTlsFiles, PeerIdentity, ServerTlsFiles, TlsAcceptor, TlsConnector,
    RELOAD_CHECK_INTERVAL,
};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
};
use std::io;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA's PEM and its issuer.
fn ca() -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate for `localhost` naming node `id`, and its key.
fn leaf(issuer: &Issuer<'_, KeyPair>, id: u64) -> (String, String) {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::URI(node_uri(id).as_str().try_into().unwrap()));
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, pem: &str) {
        std::fs::write(self.path(name), pem).unwrap();
    }
}

/// One handshake between `acceptor` and `connector` over loopback TCP;
/// the identity the server saw, or why it failed.
async fn handshake(
    acceptor: &TlsAcceptor,
    connector: &TlsConnector,
) -> Result<Option<PeerIdentity>, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = acceptor.clone();
    let server = tokio::spawn(async move {
        let (conn, _) = listener.accept().await.unwrap();
        let (mut conn, identity) = acceptor.accept(Box::new(conn)).await?;
        conn.write_all(b"ok").await?;
        conn.flush().await?;
        Ok::<_, io::Error>(identity)
    });
    let conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client = async {
        let mut conn = connector.connect("localhost", Box::new(conn)).await?;
        let mut buf = [0u8; 2];
        conn.read_exact(&mut buf).await?;
        Ok::<_, io::Error>(())
    };
    let (client, server) = tokio::join!(client, server);
    let identity = server.unwrap().map_err(|e| format!("server: {e}"))?;
    client.map_err(|e| format!("client: {e}"))?;
    Ok(identity)
}

fn client(files: &Files, ca: &str, cert: Option<&str>) -> TlsConnector {
    TlsConnector::load(ClientTlsFiles {
        ca: files.path(ca),
        cert: cert.map(|c| files.path(&format!("{c}.pem"))),
        key: cert.map(|c| files.path(&format!("{c}-key.pem"))),
        server_name: None,
    })
    .unwrap()
}

#[tokio::test]
async fn mutual_tls_names_the_client_and_refuses_a_missing_certificate() {
    let files = Files {
        dir: tempfile::tempdir().unwrap(),
    };
    let (ca_pem, issuer) = ca();
    files.write("ca.pem", &ca_pem);
    for (name, id) in [("server", 1), ("node-7", 7)] {
        let (cert, key) = leaf(&issuer, id);
        files.write(&format!("{name}.pem"), &cert);
        files.write(&format!("{name}-key.pem"), &key);
    }
    let acceptor = TlsAcceptor::load(ServerTlsFiles {
        cert: files.path("server.pem"),
        key: files.path("server-key.pem"),
        client_ca: Some(files.path("ca.pem")),
        client_certs: ClientCerts::Required,
    })
    .unwrap();
    let member = client(&files, "ca.pem", Some("node-7"));
    let identity = handshake(&acceptor, &member).await.unwrap().unwrap();
    assert_eq!(identity.node_id(), Some(7));
    assert_eq!(identity.name(), Some("fusebox://node/7"));
    let anonymous = client(&files, "ca.pem", None);
    assert!(handshake(&acceptor, &anonymous).await.is_err());
}

#[tokio::test]
async fn certificates_are_reloaded_when_their_files_change() {
    let files = Files {
        dir: tempfile::tempdir().unwrap(),
    };
    let (old_ca, old_issuer) = ca();
    let (new_ca, new_issuer) = ca();
    files.write("old-ca.pem", &old_ca);
    files.write("new-ca.pem", &new_ca);
    let (cert, key) = leaf(&old_issuer, 1);
    files.write("server.pem", &cert);
    files.write("server-key.pem", &key);
    let acceptor = TlsAcceptor::load(ServerTlsFiles {
        cert: files.path("server.pem"),
        key: files.path("server-key.pem"),
        client_ca: None,
        client_certs: ClientCerts::Optional,
    })
    .unwrap();
    let (trusts_old, trusts_new) = (
        client(&files, "old-ca.pem", None),
        client(&files, "new-ca.pem", None),
    );
    handshake(&acceptor, &trusts_old).await.unwrap();
    assert!(handshake(&acceptor, &trusts_new).await.is_err());

    // The server's certificate is replaced by one of the new CA: new
    // handshakes use it once the change is noticed, without a restart.
    let (cert, key) = leaf(&new_issuer, 1);
    files.write("server-key.pem", &key);
    files.write("server.pem", &cert);
    tokio::time::sleep(RELOAD_CHECK_INTERVAL + Duration::from_millis(100)).await;
    handshake(&acceptor, &trusts_new).await.unwrap();
    assert!(handshake(&acceptor, &trusts_old).await.is_err());

    // A change that does not load (a truncated key) leaves the
    // certificate in force.
    files.write("server-key.pem", "-----BEGIN PRIVATE KEY-----\n");
    tokio::time::sleep(RELOAD_CHECK_INTERVAL + Duration::from_millis(100)).await;
    handshake(&acceptor, &trusts_new).await.unwrap();
}

#[test]
fn bad_files_are_refused_by_name() {
    let files = Files {
        dir: tempfile::tempdir().unwrap(),
    };
    files.write("empty.pem", "");
    let missing = TlsConnector::load(ClientTlsFiles {
        ca: files.path("absent.pem"),
        cert: None,
        key: None,
        server_name: None,
    })
    .unwrap_err();
    assert!(missing.to_string().contains("absent.pem"), "{missing}");
    let empty = TlsConnector::load(ClientTlsFiles {
        ca: files.path("empty.pem"),
        cert: None,
        key: None,
        server_name: None,
    })
    .unwrap_err();
    assert!(empty.to_string().contains("no PEM certificate"), "{empty}");
}
