//! Instants and durations as operators read and write them.
//!
//! The cluster speaks Unix milliseconds stamped by the Raft leader; tables
//! show them as UTC (`2025-06-01T12:00:00Z`) with a relative hint ("in
//! 18s", "3m ago") taken against this machine's clock. Durations on the
//! command line are written `500ms`, `2s`, `10m`, `1h30m` or `1d`.

use fusebox_core::disclosure::format_utc;
use fusebox_core::Timestamp;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest duration the CLI accepts, in milliseconds (a year); the server
/// applies its own, tighter bounds.
pub const DURATION_MS_MAX: u64 = 366 * 24 * 3_600_000;

/// This machine's clock in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An instant as UTC; `-` for 0 (never).
pub fn instant(ms: u64) -> String {
    if ms == 0 {
        return "-".to_owned();
    }
    format_utc(Timestamp::from_millis(ms))
}

/// An instant with how far it is from `now` ("... (in 18s)").
pub fn instant_from(ms: u64, now: u64) -> String {
    if ms == 0 {
        return "-".to_owned();
    }
    let hint = if ms >= now {
        format!("in {}", span(ms - now))
    } else {
        format!("{} ago", span(now - ms))
    };
    format!("{} ({hint})", instant(ms))
}

/// A duration, coarsely: `850ms`, `18s`, `4m 10s`, `2h 5m`, `3d 4h`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3_599 => two(s / 60, "m", s % 60, "s"),
        3_600..=86_399 => two(s / 3_600, "h", s / 60 % 60, "m"),
        _ => two(s / 86_400, "d", s / 3_600 % 24, "h"),
    }
}

fn two(major: u64, major_unit: &str, minor: u64, minor_unit: &str) -> String {
    if minor == 0 {
        format!("{major}{major_unit}")
    } else {
        format!("{major}{major_unit} {minor}{minor_unit}")
    }
}

/// Parses `500ms`, `2s`, `10m`, `1h30m`, `1d` into milliseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration; write e.g. 500ms, 30s, 10m, 1h30m or 1d");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
    }
    if total == 0 {
        return Err(format!("{text:?} is zero; a duration must be positive"));
    }
    if total > DURATION_MS_MAX {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit_and_combination() {
        let cases = [
            ("500ms", 500),
            ("2s", 2_000),
            ("10m", 600_000),
            ("1h30m", 5_400_000),
            ("1d", 86_400_000),
            ("1m30s", 90_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn bad_durations_are_refused_with_an_example() {
        for text in ["", "10", "m", "10x", "0s", "-1s", "400d", "1.5h"] {
            let err = parse_duration(text).err();
            assert!(err.is_some(), "{text} accepted");
        }
        let err = parse_duration("10x").err().unwrap_or_default();
        assert!(err.contains("e.g."), "{err}");
    }

    #[test]
    fn spans_read_coarsely() {
        assert_eq!(span(850), "850ms");
        assert_eq!(span(18_000), "18s");
        assert_eq!(span(250_000), "4m 10s");
        assert_eq!(span(7_500_000), "2h 5m");
        assert_eq!(span(3 * 86_400_000), "3d");
    }

    #[test]
    fn instants_are_utc_with_a_relative_hint() {
        assert_eq!(instant(0), "-");
        assert_eq!(instant(1_700_000_000_000), "2023-11-14T22:13:20Z");
        let text = instant_from(1_700_000_018_000, 1_700_000_000_000);
        assert!(text.ends_with("(in 18s)"), "{text}");
        let text = instant_from(1_700_000_000_000, 1_700_000_180_000);
        assert!(text.ends_with("(3m ago)"), "{text}");
    }
}
