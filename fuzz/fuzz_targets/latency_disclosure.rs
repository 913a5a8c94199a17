//! A latency disclosure block as tools publish it (JSON), read by
//! `Tools.Import`, `fusebox tools import` and the gateway.
//!
//! A block that reads must write back to JSON that reads as the same block,
//! and judging it (bounds, freshness at any time) must answer, not panic.

#![no_main]

use fusebox_core::disclosure::{assess, format_utc, parse_utc, LatencyDisclosure};
use fusebox_core::Timestamp;
use fusebox_fuzz::START_MS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The block's timestamps: any text that reads as a time writes back as
    // a time that reads the same.
    if let Ok(at) = parse_utc(text) {
        let written = format_utc(at);
        assert_eq!(
            parse_utc(&written).ok(),
            Some(at),
            "{text:?} -> {written:?}"
        );
    }
    let Ok(block) = LatencyDisclosure::from_json_text(text) else {
        return;
    };
    let written = block.to_json();
    match LatencyDisclosure::from_json(&written) {
        Ok(again) => assert_eq!(again, block, "a block changed through JSON: {written}"),
        Err(problems) => panic!("a block's own JSON does not read: {problems:?}\n{written}"),
    }
    let _ = block.bound_problems();
    if let Ok(observed) = block.observed_at_time() {
        let _ = assess(&block, observed);
    }
    let _ = assess(&block, Timestamp::from_millis(START_MS));
});
