//! A node's TOML config file (`fusebox serve --config`), and the peer list
//! and member addresses its flags take.
//!
//! A file that reads must validate or refuse without a panic, and write back
//! to TOML that reads as the same config.

#![no_main]

use fusebox_api::NodeConfig;
use fusebox_raft_store::Member;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = NodeConfig::parse_peers(text);
    if let Ok(member) = Member::parse(text) {
        assert_eq!(Member::parse(&member.to_string()).ok(), Some(member));
    }
    let Ok(config) = toml::from_str::<NodeConfig>(text) else {
        return;
    };
    if config.validate().is_ok() {
        let _ = config.members();
        let _ = config.advertised();
        let _ = config.exposed_in_clear();
    }
    let written = toml::to_string(&config).expect("a config writes as TOML");
    let again: NodeConfig = match toml::from_str(&written) {
        Ok(again) => again,
        Err(e) => panic!("a config's own TOML does not read: {e}\n{written}"),
    };
    assert_eq!(again, config, "a config changed through TOML\n{written}");
});
