//! A policy document as `Policy.Apply` and `fusebox policy apply` take it:
//! the first byte picks TOML or YAML, the rest is the text.
//!
//! A document that parses must render to canonical TOML that parses back to
//! the same document and renders to the same text again, and applying it to
//! a state machine must go through the log and the snapshot unchanged.

#![no_main]

use fusebox_core::machine::Command;
use fusebox_core::policy::{PolicyDocument, PolicyFormat};
use fusebox_core::Namespace;
use fusebox_fuzz::{apply, check_snapshot, fresh_state, START_MS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let format = if which & 1 == 0 {
        PolicyFormat::Toml
    } else {
        PolicyFormat::Yaml
    };
    let Ok(document) = PolicyDocument::parse(text, format) else {
        return;
    };
    let canonical = document.to_toml();
    let reparsed = match PolicyDocument::parse(&canonical, PolicyFormat::Toml) {
        Ok(reparsed) => reparsed,
        Err(e) => panic!("canonical TOML does not parse: {e}\n{canonical}"),
    };
    assert_eq!(
        reparsed, document,
        "canonical TOML reads back differently\n{canonical}"
    );
    assert_eq!(
        reparsed.to_toml(),
        canonical,
        "canonical TOML is not stable"
    );

    let mut state = fresh_state();
    let command = Command::ApplyPolicy {
        namespace: Namespace::new("fleet".to_owned()).expect("a valid name"),
        document: Box::new(document),
        actor: "fuzz".to_owned(),
        reason: String::new(),
    };
    apply(&mut state, command, START_MS);
    check_snapshot(&state);
});
