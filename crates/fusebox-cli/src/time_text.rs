//! Instants and durations as operators read and write them.
//!
//! The cluster speaks Unix milliseconds stamped by the Raft leader; tables
//! show them as UTC (`2025-06-01T12:00:00Z`) with a relative hint ("in
//! 18s", "3m ago") taken against this machine's clock. Durations on the
//! command line are whole numbers in `humantime`'s notation: `500ms`, `2s`,
//! `10m`, `1h30m`, `1d` (also `1h 30m`, `2days`). Printing instants is the
//! core's `format_utc`, printing spans `jiff`'s friendly format
//! (docs/decisions/0006-dates-and-durations.md).

use crate::limits::DURATION_MS_MAX;
use fusebox_core::disclosure::format_utc;
use fusebox_core::Timestamp;
use jiff::fmt::friendly::SpanPrinter;
use jiff::{RoundMode, Span, SpanRound, Unit};
use std::fmt::Display;
use std::time::{SystemTime, UNIX_EPOCH};

/// Spans in the coarse two-unit form `span` prints; zero reads `0ms`.
static SPAN_PRINTER: SpanPrinter = SpanPrinter::new().zero_unit(Unit::Millisecond);

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
///
/// The two largest units are kept and the rest is cut off, except that
/// under a minute only whole seconds show.
pub fn span(ms: u64) -> String {
    let smallest = match ms / 1000 {
        0 => Unit::Millisecond,
        1..=3_599 => Unit::Second,
        3_600..=86_399 => Unit::Minute,
        _ => Unit::Hour,
    };
    let coarse = SpanRound::new()
        .largest(Unit::Day)
        .smallest(smallest)
        .mode(RoundMode::Trunc)
        .days_are_24_hours();
    let rounded = i64::try_from(ms)
        .ok()
        .and_then(|ms| Span::new().try_milliseconds(ms).ok())
        .and_then(|span| span.round(coarse).ok());
    match rounded {
        Some(span) => SPAN_PRINTER.span_to_string(&span),
        // Beyond what a span holds (some twenty thousand years).
        None => format!("{ms}ms"),
    }
}

/// Parses a whole duration (`500ms`, `2s`, `10m`, `1h30m`, `1d`) into
/// milliseconds: positive, at most [`DURATION_MS_MAX`].
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = |why: &dyn Display| {
        format!("{text:?} is not a duration ({why}); write e.g. 500ms, 30s, 10m, 1h30m or 1d")
    };
    // humantime also reads fractions (`1.5h`); a duration here is whole.
    if text.contains('.') {
        return Err(bad(&"fractions are not taken"));
    }
    let duration = humantime::parse_duration(text.trim()).map_err(|e| bad(&e))?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(bad(&"finer than a millisecond"));
    }
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return Err(format!("{text:?} is zero; a duration must be positive"));
    }
    if ms > DURATION_MS_MAX {
        return Err(format!("{text:?} is longer than a year"));
    }
    Ok(ms)
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
            ("1h 30m", 5_400_000),
            ("2days", 172_800_000),
            ("1000us", 1),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn bad_durations_are_refused_with_an_example() {
        let bad = [
            "", "10", "m", "10x", "0s", "-1s", "400d", "1.5h", "1500us", "2y",
        ];
        for text in bad {
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
        assert_eq!(span(3 * 86_400_000 + 4 * 3_600_000 + 59_999), "3d 4h");
        assert_eq!(span(59_999), "59s");
        assert_eq!(span(0), "0ms");
        assert_eq!(span(u64::MAX), format!("{}ms", u64::MAX));
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
