//! Failover groups in a policy document: parsed, validated, rendered.

use crate::error::CoreError;
use crate::name::{ServerName, ToolName};
use crate::policy::*;

fn problems_of(text: &str) -> Vec<PolicyProblem> {
    match PolicyDocument::parse(text, PolicyFormat::Toml) {
        Err(CoreError::InvalidPolicy(problems)) => problems,
        other => panic!("expected a refused policy, got {other:?}"),
    }
}

const TWO_VENDORS: &str = r#"
[[failover]]
tools = ["geocoder/geocode", "maps-vendor/lookup"]
why = "two vendors on separate infrastructure"
"#;

#[test]
fn a_group_is_parsed_rendered_and_found_by_its_tools() {
    let document = PolicyDocument::parse(TWO_VENDORS, PolicyFormat::Toml).unwrap();
    let geocode = (
        ServerName::new("geocoder").unwrap(),
        ToolName::new("geocode").unwrap(),
    );
    let group = document.failover_group(&geocode.0, &geocode.1).unwrap();
    assert_eq!(group.tools.len(), 2);
    let other = ToolName::new("reverse").unwrap();
    assert!(document.failover_group(&geocode.0, &other).is_none());
    // The canonical text (what the log and snapshots carry) keeps it.
    let again = PolicyDocument::parse(&document.to_toml(), PolicyFormat::Toml).unwrap();
    assert_eq!(again, document);
    // And a diff names it.
    let diff = PolicyDocument::default().diff(&document);
    assert!(diff.iter().any(|l| l.starts_with("failover")), "{diff:?}");
}

#[test]
fn no_group_is_the_default() {
    assert!(PolicyDocument::default().failover.is_empty());
}

#[test]
fn a_group_must_say_why_and_hold_distinct_valid_tools() {
    let problems = problems_of(
        r#"
[[failover]]
tools = ["geocoder/geocode"]

[[failover]]
tools = ["geocoder/geocode", "no-slash", "maps/lookup", "maps/lookup"]
why = "vendors"
"#,
    );
    let rules: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.rule))
        .collect();
    let expect = [
        "failover[0].tools: lists 1 tools",
        "failover[0].why: must say",
        "failover[1].tools: geocoder/geocode is already in failover[0]",
        "failover[1].tools: \"no-slash\" is not `server/tool`",
        "failover[1].tools: maps/lookup is listed twice",
    ];
    for e in expect {
        assert!(
            rules.iter().any(|r| r.starts_with(e)),
            "{e} not in {rules:?}"
        );
    }
    assert_eq!(rules.len(), expect.len(), "{rules:?}");
}
