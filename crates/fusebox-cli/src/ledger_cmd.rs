//! `fusebox ledger lookup|list|resolve`: find an operation by its key,
//! intent, tool, status or backend operation id, and settle an ambiguous one.
//!
//! `resolve` is the operator's answer to "did that write happen?" after an
//! attempt timed out: done (with the backend's operation id), not done (the
//! key is released for a new attempt) or abandoned (the key is spent). Who
//! decided and why is stored on the record and shown by `lookup`.

use crate::client::{ClientArgs, Session};
use crate::failure::rpc;
use crate::out::outln;
use crate::table::{effect_name, or_dash, print_fields, Table};
use crate::time_text::{instant, instant_from, now_ms};
use clap::{Args, Subcommand, ValueEnum};
use fusebox_core::hex::lower;
use fusebox_core::limits::LIST_LIMIT_MAX;
use fusebox_proto::v1 as pb;
use serde_json::{json, Value};

/// `fusebox ledger ...`
#[derive(Args, Debug)]
pub struct LedgerArgs {
    #[command(subcommand)]
    command: LedgerCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum LedgerCommand {
    /// Everything the ledger knows about one idempotency key.
    Lookup {
        /// Namespace the key is scoped to.
        ns: String,
        /// The idempotency key.
        key: String,
    },
    /// Records matching every filter given.
    List {
        /// Namespace to list.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Only records of this agent intent.
        #[arg(long)]
        intent: Option<String>,
        /// Only records of this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only records in this status.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only the record with this backend operation id.
        #[arg(long)]
        operation_id: Option<String>,
        /// Most records to print.
        #[arg(long, default_value_t = LIST_LIMIT_MAX)]
        limit: usize,
    },
    /// Settle an ambiguous record; who and why are stored on it.
    Resolve {
        /// Namespace the key is scoped to.
        ns: String,
        /// The idempotency key.
        key: String,
        /// What the operator found: the operation happened, did not, or
        /// will never be known.
        #[arg(long, value_enum)]
        decision: DecisionArg,
        /// The backend's id of the operation (required with `done`).
        #[arg(long, required_if_eq("decision", "done"))]
        operation_id: Option<String>,
        /// What was checked, kept on the record.
        #[arg(long)]
        note: String,
    },
}

/// A record status to filter on.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum StatusArg {
    InProgress,
    Succeeded,
    Failed,
    Ambiguous,
    Released,
    Abandoned,
}

impl StatusArg {
    fn to_proto(self) -> pb::LedgerStatus {
        match self {
            StatusArg::InProgress => pb::LedgerStatus::InProgress,
            StatusArg::Succeeded => pb::LedgerStatus::Succeeded,
            StatusArg::Failed => pb::LedgerStatus::Failed,
            StatusArg::Ambiguous => pb::LedgerStatus::Ambiguous,
            StatusArg::Released => pb::LedgerStatus::Released,
            StatusArg::Abandoned => pb::LedgerStatus::Abandoned,
        }
    }
}

/// An operator's verdict.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum DecisionArg {
    /// The operation happened: the record becomes succeeded.
    Done,
    /// It did not: the key is released for a new attempt.
    NotDone,
    /// Nobody will find out: the key is spent.
    Abandoned,
}

impl DecisionArg {
    fn to_proto(self) -> pb::ResolutionDecision {
        match self {
            DecisionArg::Done => pb::ResolutionDecision::Done,
            DecisionArg::NotDone => pb::ResolutionDecision::NotDone,
            DecisionArg::Abandoned => pb::ResolutionDecision::Abandoned,
        }
    }
}

fn status_name(status: i32) -> &'static str {
    match pb::LedgerStatus::try_from(status) {
        Ok(pb::LedgerStatus::InProgress) => "in_progress",
        Ok(pb::LedgerStatus::Succeeded) => "succeeded",
        Ok(pb::LedgerStatus::Failed) => "failed",
        Ok(pb::LedgerStatus::Ambiguous) => "ambiguous",
        Ok(pb::LedgerStatus::Released) => "released",
        Ok(pb::LedgerStatus::Abandoned) => "abandoned",
        _ => "unknown",
    }
}

fn decision_name(decision: i32) -> &'static str {
    match pb::ResolutionDecision::try_from(decision) {
        Ok(pb::ResolutionDecision::Done) => "done",
        Ok(pb::ResolutionDecision::NotDone) => "not_done",
        Ok(pb::ResolutionDecision::Abandoned) => "abandoned",
        _ => "unknown",
    }
}

/// A record as JSON; a stored result that is UTF-8 is shown as text,
/// anything else as hex.
fn record_json(r: &pb::LedgerRecord) -> Value {
    let resolution = r.resolution.as_ref().map(|res| {
        json!({"actor": res.actor, "note": res.note,
               "decision": decision_name(res.decision), "at_ms": res.at_ms})
    });
    let result = r
        .result
        .as_ref()
        .map(|bytes| match std::str::from_utf8(bytes) {
            Ok(text) => json!({"text": text}),
            Err(_) => json!({"hex": lower(bytes)}),
        });
    json!({
        "namespace": r.namespace, "key": r.key, "fingerprint": lower(&r.fingerprint),
        "intent_id": r.intent_id, "server": r.server, "tool": r.tool, "target": r.target,
        "effect": effect_name(r.effect), "status": status_name(r.status),
        "attempt_id": r.attempt_id, "attempts": r.attempts,
        "lease_until_ms": r.lease_until_ms, "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms, "completed_at_ms": r.completed_at_ms,
        "result": result, "operation_id": r.operation_id, "resolution": resolution,
        "ambiguity_reason": r.ambiguity_reason, "failure_reason": r.failure_reason,
        "expires_at_ms": r.expires_at_ms,
    })
}

fn tool_of(r: &pb::LedgerRecord) -> String {
    if r.server.is_empty() {
        r.tool.clone()
    } else {
        format!("{}/{}", r.server, r.tool)
    }
}

/// A record as labelled lines for `lookup` and `resolve`.
fn record_fields(r: &pb::LedgerRecord, now: u64) -> Vec<(&'static str, String)> {
    let at = |ms: Option<u64>| ms.map_or_else(|| "-".to_owned(), |ms| instant_from(ms, now));
    let mut fields = vec![
        ("key", r.key.clone()),
        ("namespace", r.namespace.clone()),
        ("status", status_name(r.status).to_owned()),
        ("tool", tool_of(r)),
        ("effect", effect_name(r.effect).to_owned()),
        ("target", r.target.clone()),
        ("intent", r.intent_id.clone()),
        (
            "attempt",
            format!("{} ({} attempt(s) in all)", r.attempt_id, r.attempts),
        ),
        ("operation id", or_dash(r.operation_id.clone())),
        ("created", instant_from(r.created_at_ms, now)),
        ("updated", instant_from(r.updated_at_ms, now)),
        ("completed", at(r.completed_at_ms)),
        ("lease until", at(r.lease_until_ms)),
        ("expires", at(r.expires_at_ms)),
    ];
    if let Some(reason) = &r.ambiguity_reason {
        fields.push(("ambiguous because", reason.clone()));
    }
    if let Some(reason) = &r.failure_reason {
        fields.push(("failed because", reason.clone()));
    }
    if let Some(res) = &r.resolution {
        let text = format!(
            "{} by {} at {}: {}",
            decision_name(res.decision),
            res.actor,
            instant(res.at_ms),
            res.note
        );
        fields.push(("resolution", text));
    }
    if let Some(bytes) = &r.result {
        let text = std::str::from_utf8(bytes)
            .map_or_else(|_| format!("0x{}", lower(bytes)), str::to_owned);
        fields.push(("result", text));
    }
    fields
}

fn records_table(records: &[pb::LedgerRecord]) -> Table {
    let mut table = Table::new(&[
        "KEY",
        "STATUS",
        "TOOL",
        "TARGET",
        "INTENT",
        "ATTEMPTS",
        "OPERATION",
        "UPDATED",
    ]);
    for r in records {
        table.row(vec![
            r.key.clone(),
            status_name(r.status).to_owned(),
            tool_of(r),
            r.target.clone(),
            r.intent_id.clone(),
            r.attempts.to_string(),
            or_dash(r.operation_id.clone()),
            instant(r.updated_at_ms),
        ]);
    }
    table
}

/// Runs a ledger command.
pub async fn run(args: LedgerArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    match args.command {
        LedgerCommand::Lookup { ns, key } => lookup(&s, ns, key).await,
        LedgerCommand::List {
            ns,
            intent,
            tool,
            status,
            operation_id,
            limit,
        } => {
            let filter = pb::ListRecordsRequest {
                namespace: ns,
                meta: s.meta(),
                intent_id: intent,
                tool,
                status: status.map(|st| st.to_proto() as i32),
                operation_id,
                ..Default::default()
            };
            list(&s, filter, limit).await
        }
        LedgerCommand::Resolve {
            ns,
            key,
            decision,
            operation_id,
            note,
        } => {
            let request = pb::ResolveRequest {
                namespace: ns,
                meta: s.meta(),
                key,
                decision: decision.to_proto() as i32,
                operation_id,
                actor: s.actor()?,
                note,
            };
            resolve(&s, request).await
        }
    }
}

fn print_record(s: &Session, record: Option<&pb::LedgerRecord>) {
    let record = record.cloned().unwrap_or_default();
    if s.json {
        outln!("{}", record_json(&record));
    } else {
        print_fields(&record_fields(&record, now_ms()));
    }
}

async fn lookup(s: &Session, ns: String, key: String) -> anyhow::Result<()> {
    let request = pb::LookupRequest {
        namespace: ns,
        meta: s.meta(),
        key,
    };
    let reply = rpc("ledger lookup", s.ledger().lookup(request)).await?;
    print_record(s, reply.record.as_ref());
    Ok(())
}

async fn list(s: &Session, filter: pb::ListRecordsRequest, limit: usize) -> anyhow::Result<()> {
    let mut records = Vec::new();
    let mut page_token = String::new();
    while records.len() < limit {
        let request = pb::ListRecordsRequest {
            page_token,
            limit: u32::try_from(limit - records.len()).unwrap_or(u32::MAX),
            ..filter.clone()
        };
        let page = rpc("ledger list", s.ledger().list(request)).await?;
        records.extend(page.records);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    records.truncate(limit);
    if s.json {
        let list: Vec<_> = records.iter().map(record_json).collect();
        outln!(
            "{}",
            json!({"namespace": filter.namespace, "records": list})
        );
    } else if records.is_empty() {
        outln!("no ledger records match in namespace {}", filter.namespace);
    } else {
        records_table(&records).print();
    }
    Ok(())
}

async fn resolve(s: &Session, request: pb::ResolveRequest) -> anyhow::Result<()> {
    let reply = rpc("ledger resolve", s.ledger().resolve(request)).await?;
    if !s.json {
        outln!("resolved; the record now reads:");
    }
    print_record(s, reply.record.as_ref());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved() -> pb::LedgerRecord {
        pb::LedgerRecord {
            namespace: "ops".into(),
            key: "k1".into(),
            server: "deployments".into(),
            tool: "restart".into(),
            status: pb::LedgerStatus::Succeeded as i32,
            operation_id: Some("op-77".into()),
            resolution: Some(pb::Resolution {
                actor: "alice".into(),
                note: "checked the backend".into(),
                decision: pb::ResolutionDecision::Done as i32,
                at_ms: 1_700_000_000_000,
            }),
            result: Some(vec![0xff, 0x01]),
            ..Default::default()
        }
    }

    #[test]
    fn a_resolution_shows_who_what_and_why() {
        let fields = record_fields(&resolved(), 1_700_000_000_000);
        let resolution = fields.iter().find(|(l, _)| *l == "resolution");
        let text = resolution.map(|(_, v)| v.as_str()).unwrap_or_default();
        assert_eq!(
            text,
            "done by alice at 2023-11-14T22:13:20Z: checked the backend"
        );
        let json = record_json(&resolved());
        assert_eq!(json["resolution"]["decision"], "done");
        assert_eq!(json["status"], "succeeded");
        assert_eq!(json["result"]["hex"], "ff01");
    }

    #[test]
    fn the_table_names_the_tool_with_its_server() {
        let text = records_table(&[resolved()]).render();
        assert!(
            text.contains("k1   succeeded  deployments/restart"),
            "{text}"
        );
    }
}
