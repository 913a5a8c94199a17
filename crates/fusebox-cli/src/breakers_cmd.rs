//! `fusebox breakers list|show|open|close|reset|disable|shadow|history`.
//!
//! Breakers are named `NS/SERVER[/TOOL[/BACKEND]]`. Reads refuse names the
//! cluster does not know (see `known`), so a typo never reads as a healthy
//! CLOSED breaker. Every change carries the operator's identity and reason
//! into the breaker's audit trail (see `breakers_change`). This module
//! parses the command line and runs the reads (list, show, history); it
//! depends on `breakers_change`, `breakers_read` and `breakers_view`, and
//! none of them on it.

use crate::breakers_change::{apply, Change};
use crate::breakers_read::{policy_in_force, read_view};
use crate::breakers_view::{history_table, list_table, transition_json, view_fields, view_json};
use crate::client::{ClientArgs, Session};
use crate::failure::rpc;
use crate::known::{ensure_breaker, ensure_namespace, key_to_proto};
use crate::limits::HISTORY_TRANSITIONS_DEFAULT;
use crate::out::outln;
use crate::table::print_fields;
use crate::time_text::{now_ms, parse_duration};
use clap::{Args, Subcommand, ValueEnum};
use fusebox_core::breaker::BreakerKey;
use fusebox_core::limits::LIST_LIMIT_MAX;
use fusebox_proto::v1 as pb;
use serde_json::json;

/// `fusebox breakers ...`
#[derive(Args, Debug)]
pub struct BreakersArgs {
    #[command(subcommand)]
    command: BreakersCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum BreakersCommand {
    /// Breakers of a namespace that are not untouched CLOSED ones, with
    /// counts, probes and (for shadow breakers) what they would have rejected.
    List {
        /// Namespace to list.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Only breakers in these states (repeat or comma-separate).
        #[arg(long, value_enum, value_delimiter = ',')]
        state: Vec<StateArg>,
        /// Only breakers of this tool server.
        #[arg(long)]
        server: Option<String>,
        /// Only breakers in shadow (deciding without rejecting).
        #[arg(long)]
        shadow: bool,
        /// Most breakers to print.
        #[arg(long, default_value_t = LIST_LIMIT_MAX)]
        limit: usize,
    },
    /// One breaker: state, generation, counts, reporters, open-until, probe
    /// permits and the policy in force.
    Show {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
    },
    /// Force a breaker open: every call is refused until it expires or is
    /// closed.
    Open {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Why; shown to every agent that is refused, and kept in the audit.
        #[arg(long)]
        reason: String,
        /// Close again by itself after this long (`90s`, `10m`, `2h`);
        /// without it, until `breakers close`.
        #[arg(long = "for", value_parser = parse_duration)]
        for_ms: Option<u64>,
        /// Act even if no outcome was ever reported for it and the policy
        /// does not name it.
        #[arg(long)]
        allow_unknown: bool,
    },
    /// Close an open, half-open or forced-open breaker now (refused when it
    /// is not open; it changed meanwhile).
    Close {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Why, kept in the audit.
        #[arg(long)]
        reason: String,
    },
    /// Return a breaker to CLOSED with empty counts from any state, ending
    /// disabled and shadow states.
    Reset {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Why, kept in the audit.
        #[arg(long)]
        reason: String,
    },
    /// Switch a breaker off: always allow, never trip (until reset, or for
    /// `--for`).
    Disable {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Why, kept in the audit.
        #[arg(long)]
        reason: String,
        /// Return to its own evidence by itself after this long (`90s`,
        /// `10m`, `2h`); without it, until `breakers reset`.
        #[arg(long = "for", value_parser = parse_duration)]
        for_ms: Option<u64>,
        /// Act even if the breaker is unknown to the cluster and the policy.
        #[arg(long)]
        allow_unknown: bool,
    },
    /// Put one breaker in shadow (metrics only: decide and count, never
    /// reject) until reset, or for `--for`. For whole tools or namespaces,
    /// set `shadow` in the policy instead.
    Shadow {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Why, kept in the audit.
        #[arg(long)]
        reason: String,
        /// Enforce its verdict again by itself after this long (`90s`,
        /// `10m`, `2h`); without it, until `breakers reset`.
        #[arg(long = "for", value_parser = parse_duration)]
        for_ms: Option<u64>,
        /// Act even if the breaker is unknown to the cluster and the policy.
        #[arg(long)]
        allow_unknown: bool,
    },
    /// The audit of a breaker's transitions, newest first: who or what
    /// moved it, why, and the evidence (counts, reporters).
    History {
        /// `NS/SERVER[/TOOL[/BACKEND]]`.
        #[arg(value_parser = parse_key)]
        key: BreakerKey,
        /// Most transitions to print.
        #[arg(long, default_value_t = HISTORY_TRANSITIONS_DEFAULT)]
        limit: usize,
    },
}

/// A state to filter on.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    Closed,
    Open,
    HalfOpen,
    ForcedOpen,
    Disabled,
    MetricsOnly,
}

impl StateArg {
    fn to_proto(self) -> pb::BreakerState {
        match self {
            StateArg::Closed => pb::BreakerState::Closed,
            StateArg::Open => pb::BreakerState::Open,
            StateArg::HalfOpen => pb::BreakerState::HalfOpen,
            StateArg::ForcedOpen => pb::BreakerState::ForcedOpen,
            StateArg::Disabled => pb::BreakerState::Disabled,
            StateArg::MetricsOnly => pb::BreakerState::MetricsOnly,
        }
    }
}

fn parse_key(text: &str) -> Result<BreakerKey, String> {
    BreakerKey::parse(text).map_err(|e| e.to_string())
}

/// Runs a breakers command.
pub async fn run(args: BreakersArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    match args.command {
        BreakersCommand::List {
            ns,
            state,
            server,
            shadow,
            limit,
        } => list(&s, &ns, &state, server, shadow, limit).await,
        BreakersCommand::Show { key } => show(&s, &key).await,
        BreakersCommand::Open {
            key,
            reason,
            for_ms,
            allow_unknown,
        } => apply(&s, &key, Change::ForceOpen(for_ms), reason, allow_unknown).await,
        BreakersCommand::Close { key, reason } => {
            apply(&s, &key, Change::Close, reason, false).await
        }
        BreakersCommand::Reset { key, reason } => {
            apply(&s, &key, Change::Reset, reason, false).await
        }
        BreakersCommand::Disable {
            key,
            reason,
            for_ms,
            allow_unknown,
        } => apply(&s, &key, Change::Disable(for_ms), reason, allow_unknown).await,
        BreakersCommand::Shadow {
            key,
            reason,
            for_ms,
            allow_unknown,
        } => apply(&s, &key, Change::Shadow(for_ms), reason, allow_unknown).await,
        BreakersCommand::History { key, limit } => history(&s, &key, limit).await,
    }
}

async fn list(
    s: &Session,
    ns: &str,
    states: &[StateArg],
    server: Option<String>,
    shadow_only: bool,
    limit: usize,
) -> anyhow::Result<()> {
    let states: Vec<i32> = states.iter().map(|st| st.to_proto() as i32).collect();
    let mut views = Vec::new();
    let mut page_token = String::new();
    let mut revision = 0;
    while views.len() < limit {
        let request = pb::ListBreakersRequest {
            namespace: ns.to_owned(),
            meta: s.meta(),
            states: states.clone(),
            server: server.clone(),
            page_token,
            limit: u32::try_from(limit - views.len()).unwrap_or(u32::MAX),
        };
        let page = rpc("breakers list", s.breakers().list_breakers(request)).await?;
        revision = page.revision;
        views.extend(
            page.breakers
                .into_iter()
                .filter(|v| !shadow_only || v.shadow),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    views.truncate(limit);
    if views.is_empty() {
        ensure_namespace(s, ns).await?;
    }
    if s.json {
        let breakers: Vec<_> = views.iter().map(view_json).collect();
        outln!(
            "{}",
            json!({"namespace": ns, "revision": revision, "breakers": breakers})
        );
    } else if views.is_empty() {
        outln!(
            "no breakers match in namespace {ns} (a breaker never tripped or reported is closed)"
        );
    } else {
        list_table(&views, now_ms()).print();
    }
    Ok(())
}

async fn show(s: &Session, key: &BreakerKey) -> anyhow::Result<()> {
    ensure_breaker(s, key, "").await?;
    let view = read_view(s, key).await?;
    let policy = policy_in_force(s, key).await?;
    if s.json {
        let mut out = view_json(&view);
        out["policy"] = policy.to_json();
        outln!("{out}");
    } else {
        let mut fields = view_fields(&view, now_ms());
        fields.extend(policy.fields());
        print_fields(&fields);
    }
    Ok(())
}

async fn history(s: &Session, key: &BreakerKey, limit: usize) -> anyhow::Result<()> {
    ensure_breaker(s, key, "").await?;
    let mut transitions = Vec::new();
    let mut page_token = String::new();
    while transitions.len() < limit {
        let request = pb::BreakerHistoryRequest {
            namespace: key.namespace.to_string(),
            meta: s.meta(),
            key: Some(key_to_proto(key)),
            page_token,
            limit: u32::try_from(limit - transitions.len()).unwrap_or(u32::MAX),
        };
        let page = rpc("breakers history", s.breakers().breaker_history(request)).await?;
        transitions.extend(page.transitions);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    transitions.truncate(limit);
    if s.json {
        let list: Vec<_> = transitions.iter().map(transition_json).collect();
        outln!("{}", json!({"key": key.to_string(), "transitions": list}));
    } else if transitions.is_empty() {
        outln!("breaker {key} never changed state");
    } else {
        history_table(&transitions).print();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_parsed_in_operator_notation() {
        assert!(parse_key("ns/srv/tool/backend").is_ok());
        let err = parse_key("just-a-name").err().unwrap();
        assert!(err.contains("NS/SERVER"), "{err}");
    }
}
