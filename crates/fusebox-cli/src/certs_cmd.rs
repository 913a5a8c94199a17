//! `fusebox certs dev`: a development CA and the certificates a TLS
//! cluster needs, so the quickstart with TLS is three commands.
//!
//! Every node certificate names the node (`fusebox://node/<id>`, which the
//! peer transport checks) and the hosts it is reached at, and serves both
//! as server and as client certificate (members dial each other). The
//! client certificate names a user (`fusebox://user/<name>`). The CA's key
//! stays in the directory: these are for development and tests, not for a
//! fleet (docs/security.md says how to issue real ones).

use crate::failure::Failure;
use crate::out::outln;
use anyhow::Context;
use clap::{Args, Subcommand};
use fusebox_proto::tls::node_uri;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::path::{Path, PathBuf};

/// Most node certificates one run writes.
const NODES_MAX: u64 = 64;

/// `fusebox certs`.
#[derive(Args, Debug)]
pub struct CertsArgs {
    #[command(subcommand)]
    command: CertsCommand,
}

#[derive(Subcommand, Debug)]
enum CertsCommand {
    /// Write a development CA, node certificates and a client certificate.
    Dev(DevArgs),
}

#[derive(Args, Debug)]
struct DevArgs {
    /// The directory to write into (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// How many node certificates to write (node-1 ... node-N).
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// The host names and IP addresses the nodes are reached at.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    hosts: Vec<String>,
    /// The user the client certificate names.
    #[arg(long, default_value = "admin")]
    client: String,
    /// Replace files that already exist.
    #[arg(long)]
    force: bool,
}

/// Runs `fusebox certs`.
pub async fn run(args: CertsArgs) -> anyhow::Result<()> {
    match args.command {
        CertsCommand::Dev(dev) => write_dev(&dev),
    }
}

fn write_dev(args: &DevArgs) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > NODES_MAX {
        return Err(Failure::bad_input(format!("--nodes must be 1 to {NODES_MAX}")).into());
    }
    if args.hosts.iter().all(|h| h.trim().is_empty()) {
        return Err(Failure::bad_input("--hosts needs at least one name or address").into());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut files = vec!["ca.pem".to_owned(), "ca-key.pem".to_owned()];
    for id in 1..=args.nodes {
        files.push(format!("node-{id}.pem"));
        files.push(format!("node-{id}-key.pem"));
    }
    files.push("client.pem".to_owned());
    files.push("client-key.pem".to_owned());
    if !args.force {
        if let Some(existing) = files.iter().find(|f| args.out.join(f).exists()) {
            let message = format!(
                "{} exists; pass --force to replace the certificates in {}",
                args.out.join(existing).display(),
                args.out.display()
            );
            return Err(Failure::bad_input(message).into());
        }
    }
    let (ca_pem, ca_key, issuer) = ca().context("making the CA")?;
    write(&args.out, "ca.pem", &ca_pem, false)?;
    write(&args.out, "ca-key.pem", &ca_key, true)?;
    let hosts: Vec<String> = args
        .hosts
        .iter()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .collect();
    for id in 1..=args.nodes {
        let (cert, key) = leaf(
            &issuer,
            &format!("fusebox node {id}"),
            &hosts,
            &node_uri(id),
        )
        .with_context(|| format!("making node {id}'s certificate"))?;
        write(&args.out, &format!("node-{id}.pem"), &cert, false)?;
        write(&args.out, &format!("node-{id}-key.pem"), &key, true)?;
    }
    let user = format!("fusebox://user/{}", args.client);
    let (cert, key) =
        leaf(&issuer, &args.client, &[], &user).context("making the client certificate")?;
    write(&args.out, "client.pem", &cert, false)?;
    write(&args.out, "client-key.pem", &key, true)?;
    outln!(
        "wrote a development CA, {} node certificates and a client certificate ({user}) to {}",
        args.nodes,
        args.out.display()
    );
    Ok(())
}

fn ca() -> Result<(String, String, Issuer<'static, KeyPair>), rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "fusebox development CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), key_pem, Issuer::new(params, key)))
}

/// A certificate for `names` (DNS names or IP addresses) and `uri`, good
/// as both server and client certificate.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    names: &[String],
    uri: &str,
) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(names.to_vec())?;
    params.subject_alt_names.push(SanType::URI(uri.try_into()?));
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write(dir: &Path, name: &str, pem: &str, secret: bool) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    Ok(())
}
