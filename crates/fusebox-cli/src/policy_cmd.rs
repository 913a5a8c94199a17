//! `fusebox policy apply|show|history|diff|rollback`: versioned policy
//! documents per namespace.
//!
//! `apply` sends the file as written; the cluster validates it before
//! anything is stored and refuses it as a whole with every problem listed
//! (exit code 2), leaving the version in force in force. Versions come back
//! as canonical TOML, so `diff` parses two of them here and compares them
//! field by field with the core's own diff. A rollback appends a new
//! version that copies an old one: history never loses a step.

use crate::client::{ClientArgs, Session};
use crate::failure::{rpc, Failure};
use crate::known::parse_stored;
use crate::out::outln;
use crate::table::{or_dash, print_fields, Table};
use crate::time_text::{instant, instant_from, now_ms};
use clap::{Args, Subcommand, ValueEnum};
use fusebox_core::limits::{POLICY_DOCUMENT_BYTES_MAX, POLICY_VERSIONS_MAX};
use fusebox_core::policy::PolicyFormat;
use fusebox_proto::v1 as pb;
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};

/// `fusebox policy ...`
#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum PolicyCommand {
    /// Validate a document and store it as the namespace's next version;
    /// prints the new version, or every problem with its field.
    Apply {
        /// The policy file (`.toml`, `.yaml` or `.yml`).
        file: PathBuf,
        /// Namespace whose policy is replaced.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// The file's syntax, when its extension does not say.
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// Why, sent with the change.
        #[arg(long, default_value = "")]
        reason: String,
        /// Apply only if this is still the version in force (0: none yet).
        #[arg(long)]
        expected_version: Option<u64>,
        /// Validate only; store nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The version in force, or the one named, with its document.
    Show {
        /// Namespace to read.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// A stored version instead of the one in force.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Every stored version, newest first, with who made it.
    History {
        /// Namespace to read.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Most versions to print.
        #[arg(long, default_value_t = POLICY_VERSIONS_MAX)]
        limit: usize,
    },
    /// The fields that differ from version V1 to version V2.
    Diff {
        /// The older version.
        v1: u64,
        /// The newer version.
        v2: u64,
        /// Namespace to read.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
    },
    /// Make version V current again, as a new version that copies it.
    Rollback {
        /// The version to bring back.
        version: u64,
        /// Namespace to roll back.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Why, kept with the new version.
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// A document syntax.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Toml,
    Yaml,
}

fn format_name(format: i32) -> &'static str {
    match pb::PolicyFormat::try_from(format) {
        Ok(pb::PolicyFormat::Yaml) => "yaml",
        _ => "toml",
    }
}

/// A version's origin: applied, or a rollback to an older one.
fn origin(v: &pb::PolicyVersion) -> String {
    v.rollback_of
        .map_or_else(|| "apply".to_owned(), |old| format!("rollback to v{old}"))
}

fn version_json(v: &pb::PolicyVersion) -> Value {
    let document = (!v.document.is_empty()).then_some(&v.document);
    json!({
        "namespace": v.namespace, "version": v.version, "digest": v.digest,
        "format": format_name(v.format), "actor": v.actor, "reason": v.reason,
        "applied_at_ms": v.applied_at_ms, "rollback_of": v.rollback_of, "document": document,
    })
}

/// Runs a policy command.
pub async fn run(args: PolicyArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    match args.command {
        PolicyCommand::Apply {
            file,
            ns,
            format,
            reason,
            expected_version,
            dry_run,
        } => {
            let (document, format) = read_document(&file, format)?;
            let request = pb::ApplyPolicyRequest {
                namespace: ns,
                meta: s.meta(),
                document,
                format: format as i32,
                actor: s.actor()?,
                reason,
                expected_version,
                dry_run,
            };
            apply(&s, request).await
        }
        PolicyCommand::Show { ns, version } => show(&s, &ns, version).await,
        PolicyCommand::History { ns, limit } => history(&s, &ns, limit).await,
        PolicyCommand::Diff { v1, v2, ns } => diff(&s, &ns, v1, v2).await,
        PolicyCommand::Rollback {
            version,
            ns,
            reason,
        } => {
            let request = pb::RollbackPolicyRequest {
                namespace: ns,
                meta: s.meta(),
                version,
                actor: s.actor()?,
                reason,
            };
            rollback(&s, request).await
        }
    }
}

/// Reads a policy file, bounded, and picks its syntax.
fn read_document(
    file: &Path,
    format: Option<FormatArg>,
) -> Result<(String, pb::PolicyFormat), Failure> {
    let format = syntax_of(file, format)?;
    let shown = file.display();
    let cannot_read = |e: std::io::Error| Failure::bad_input(format!("cannot read {shown}: {e}"));
    // Read at most one byte past the bound, whatever the file claims to be
    // (`/dev/zero` has no length and never ends).
    let limit = POLICY_DOCUMENT_BYTES_MAX as u64 + 1;
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(limit).read_to_end(&mut bytes))
        .map_err(cannot_read)?;
    if bytes.len() > POLICY_DOCUMENT_BYTES_MAX {
        let message = format!("{shown} is larger than {POLICY_DOCUMENT_BYTES_MAX} bytes");
        return Err(Failure::bad_input(message));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::bad_input(format!("{shown} is not UTF-8 text")))?;
    Ok((text, format))
}

/// The document's syntax: the flag's, else the file name's extension.
fn syntax_of(file: &Path, format: Option<FormatArg>) -> Result<pb::PolicyFormat, Failure> {
    match format {
        Some(FormatArg::Toml) => Ok(pb::PolicyFormat::Toml),
        Some(FormatArg::Yaml) => Ok(pb::PolicyFormat::Yaml),
        None => match PolicyFormat::from_path_extension(&file.to_string_lossy()) {
            Some(PolicyFormat::Toml) => Ok(pb::PolicyFormat::Toml),
            Some(PolicyFormat::Yaml) => Ok(pb::PolicyFormat::Yaml),
            None => Err(Failure::bad_input(format!(
                "cannot tell the syntax of {} from its extension; name it .toml, .yaml \
                 or .yml, or pass --format toml|yaml",
                file.display()
            ))),
        },
    }
}

async fn apply(s: &Session, request: pb::ApplyPolicyRequest) -> anyhow::Result<()> {
    let (ns, dry_run) = (request.namespace.clone(), request.dry_run);
    let reply = rpc("policy apply", s.policy().apply(request)).await?;
    let policy = reply.policy.unwrap_or_default();
    if s.json {
        let warnings: Vec<_> = reply
            .warnings
            .iter()
            .map(|p| json!({"field": p.field, "rule": p.rule, "message": p.message}))
            .collect();
        let out = json!({"namespace": ns, "version": policy.version, "digest": policy.digest,
                         "unchanged": reply.unchanged, "dry_run": dry_run, "warnings": warnings});
        outln!("{out}");
        return Ok(());
    }
    let digest: String = policy.digest.chars().take(12).collect();
    if reply.unchanged {
        outln!(
            "policy unchanged: v{} in force in namespace {ns} already has this content (digest {digest})",
            policy.version
        );
    } else if dry_run {
        outln!(
            "policy valid: it would become v{} of namespace {ns} (dry run, nothing stored)",
            policy.version
        );
    } else {
        outln!(
            "applied policy v{} to namespace {ns} (digest {digest})",
            policy.version
        );
    }
    for w in &reply.warnings {
        outln!("warning: {}: {} [{}]", w.field, w.message, w.rule);
    }
    Ok(())
}

async fn fetch(s: &Session, ns: &str, version: Option<u64>) -> anyhow::Result<pb::PolicyVersion> {
    let request = pb::GetPolicyRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
        version,
    };
    let reply = rpc("policy show", s.policy().get(request)).await?;
    reply
        .policy
        .ok_or_else(|| Failure::refused("the cluster sent no policy version").into())
}

async fn show(s: &Session, ns: &str, version: Option<u64>) -> anyhow::Result<()> {
    let policy = fetch(s, ns, version).await?;
    if s.json {
        outln!("{}", version_json(&policy));
        return Ok(());
    }
    print_fields(&[
        ("namespace", policy.namespace.clone()),
        ("version", policy.version.to_string()),
        ("origin", origin(&policy)),
        ("applied", instant_from(policy.applied_at_ms, now_ms())),
        ("by", policy.actor.clone()),
        ("digest", policy.digest.clone()),
    ]);
    outln!();
    crate::out::write(format_args!("{}", policy.document));
    if !policy.document.ends_with('\n') {
        outln!();
    }
    Ok(())
}

async fn history(s: &Session, ns: &str, limit: usize) -> anyhow::Result<()> {
    let mut versions = Vec::new();
    let mut page_token = String::new();
    while versions.len() < limit {
        let request = pb::PolicyHistoryRequest {
            namespace: ns.to_owned(),
            meta: s.meta(),
            include_documents: false,
            page_token,
            limit: u32::try_from(limit - versions.len()).unwrap_or(u32::MAX),
        };
        let page = rpc("policy history", s.policy().history(request)).await?;
        versions.extend(page.versions);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    versions.truncate(limit);
    if s.json {
        let list: Vec<_> = versions.iter().map(version_json).collect();
        outln!("{}", json!({"namespace": ns, "versions": list}));
        return Ok(());
    }
    let mut table = Table::new(&["VERSION", "APPLIED", "BY", "ORIGIN", "DIGEST", "REASON"]);
    for (i, v) in versions.iter().enumerate() {
        let version = if i == 0 {
            format!("v{} (in force)", v.version)
        } else {
            format!("v{}", v.version)
        };
        table.row(vec![
            version,
            instant(v.applied_at_ms),
            v.actor.clone(),
            origin(v),
            v.digest.chars().take(12).collect(),
            or_dash((!v.reason.is_empty()).then_some(&v.reason)),
        ]);
    }
    table.print();
    Ok(())
}

/// One changed field of a diff line `path: old -> new`.
fn change_json(line: &str) -> Value {
    let parsed = line
        .split_once(": ")
        .and_then(|(field, rest)| rest.split_once(" -> ").map(|(from, to)| (field, from, to)));
    match parsed {
        Some((field, from, to)) => json!({"field": field, "from": from, "to": to}),
        None => json!({"field": line, "from": null, "to": null}),
    }
}

async fn diff(s: &Session, ns: &str, v1: u64, v2: u64) -> anyhow::Result<()> {
    let (old, new) = (fetch(s, ns, Some(v1)).await?, fetch(s, ns, Some(v2)).await?);
    let changes = parse_stored(&old)?.diff(&parse_stored(&new)?);
    if s.json {
        let list: Vec<_> = changes.iter().map(|c| change_json(c)).collect();
        let out = json!({"namespace": ns, "from": v1, "to": v2,
                         "identical": changes.is_empty(), "changes": list});
        outln!("{out}");
    } else if changes.is_empty() {
        outln!("policy v{v1} and v{v2} of namespace {ns} are identical");
    } else {
        outln!(
            "policy of namespace {ns}, v{v1} -> v{v2}: {} field(s) differ",
            changes.len()
        );
        for change in &changes {
            outln!("  {change}");
        }
    }
    Ok(())
}

async fn rollback(s: &Session, request: pb::RollbackPolicyRequest) -> anyhow::Result<()> {
    let (ns, to) = (request.namespace.clone(), request.version);
    let reply = rpc("policy rollback", s.policy().rollback(request)).await?;
    let policy = reply.policy.unwrap_or_default();
    if s.json {
        outln!("{}", version_json(&policy));
    } else {
        outln!(
            "rolled namespace {ns} back to the content of v{to}: now in force as v{} (by {})",
            policy.version,
            policy.actor
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lines_become_fields_with_old_and_new_values() {
        let change = change_json("defaults.timeout_ms: 3000 -> 5000");
        assert_eq!(change["field"], "defaults.timeout_ms");
        assert_eq!(change["from"], "3000");
        assert_eq!(change["to"], "5000");
        let change = change_json("servers.a.shadow: (unset) -> true");
        assert_eq!(change["from"], "(unset)");
    }

    #[test]
    fn the_syntax_comes_from_the_extension_or_the_flag() {
        let format = syntax_of(Path::new("p.yml"), None).unwrap();
        assert_eq!(format, pb::PolicyFormat::Yaml);
        let bare = Path::new("policy");
        let err = syntax_of(bare, None).err().unwrap().to_string();
        assert!(err.contains("--format"), "{err}");
        let format = syntax_of(bare, Some(FormatArg::Toml)).unwrap();
        assert_eq!(format, pb::PolicyFormat::Toml);
    }

    #[test]
    fn a_rollback_says_which_version_it_copies() {
        let v = pb::PolicyVersion {
            version: 4,
            rollback_of: Some(1),
            ..Default::default()
        };
        assert_eq!(origin(&v), "rollback to v1");
        assert_eq!(version_json(&v)["document"], Value::Null);
    }
}
