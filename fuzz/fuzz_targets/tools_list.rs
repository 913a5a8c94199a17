//! A saved MCP `tools/list` as `fusebox tools import` reads it, through the
//! node's manifest check, into the state machine as `Tools.Import` puts it.
//!
//! Whatever the JSON, reading it answers; a manifest the node accepts goes
//! through the log and the snapshot unchanged.

#![no_main]

use fusebox_api::convert::tools::manifest_from_proto;
use fusebox_api::manifest::parse_manifest;
use fusebox_core::machine::Command;
use fusebox_core::{Namespace, ServerName};
use fusebox_fuzz::{apply, check_snapshot, fresh_state, START_MS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(manifest) = parse_manifest(&value) else {
        return;
    };
    let Ok(tools) = manifest_from_proto(&manifest) else {
        return;
    };
    let mut state = fresh_state();
    let command = Command::ImportTools {
        namespace: Namespace::new("fleet".to_owned()).expect("a valid name"),
        server: ServerName::new("upstream".to_owned()).expect("a valid name"),
        tools,
        actor: "fuzz".to_owned(),
    };
    apply(&mut state, command, START_MS);
    check_snapshot(&state);
});
