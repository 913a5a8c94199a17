//! A strict RFC 3339 UTC datetime codec for `observed_at`.
//!
//! Only the one shape the spec uses is accepted:
//! `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|+HH:MM|-HH:MM)`, upper-case `T` and `Z`,
//! no leap seconds, nothing before the Unix epoch. Fractions finer than a
//! millisecond are truncated, since [`Timestamp`] counts milliseconds.
//!
//! The work is split in two (docs/decisions/0006-dates-and-durations.md):
//! - **The shape** is read here, byte by byte, because no date crate reads
//!   exactly it: `jiff`'s parser also takes a lower-case `t` or `z`, a space
//!   for the `T`, a comma before the fraction, `+HHMM` and `+HH:MM:SS`
//!   offsets and RFC 9557 `[zone]` suffixes. The reader names the offending
//!   byte, so a publisher can fix it.
//! - **The calendar** is `jiff`'s: days in a month, the distance from the
//!   epoch, and printing. It is built without a time zone database and
//!   nothing here reads the clock; an offset is a fixed number of minutes.

use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

use jiff::civil::{Date, DateTime};
use jiff::SignedDuration;
use thiserror::Error;

use crate::time::Timestamp;

/// The Unix epoch as a UTC wall-clock reading.
const EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// Why a string is not an `observed_at` datetime; the reason names the
/// offending part so a publisher can fix it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{reason}")]
pub struct DatetimeError {
    /// The broken part, in lower-case words without a trailing period.
    pub reason: String,
}

fn fail<T>(reason: impl Into<String>) -> Result<T, DatetimeError> {
    Err(DatetimeError {
        reason: reason.into(),
    })
}

/// A calendar refusal from `jiff`; the range checks before each call leave
/// none to expect.
fn calendar(error: jiff::Error) -> DatetimeError {
    DatetimeError {
        reason: error.to_string(),
    }
}

/// A cursor over the datetime's bytes that reads fixed-width fields.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    /// Reads exactly `width` ASCII digits as a number.
    fn digits<T: FromStr>(&mut self, width: usize, what: &str) -> Result<T, DatetimeError> {
        let end = self.at + width;
        let field = self
            .text
            .get(self.at..end)
            .filter(|f| f.bytes().all(|b| b.is_ascii_digit()));
        let Some(value) = field.and_then(|f| f.parse().ok()) else {
            return fail(format!("{what} needs {width} digits at byte {}", self.at));
        };
        self.at = end;
        Ok(value)
    }

    fn expect(&mut self, byte: u8) -> Result<(), DatetimeError> {
        if self.peek() != Some(byte) {
            return fail(format!("expected '{}' at byte {}", byte as char, self.at));
        }
        self.at += 1;
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Reads `.f{1,9}` if present and returns the nanoseconds it holds.
    fn fraction_ns(&mut self) -> Result<i32, DatetimeError> {
        if self.peek() != Some(b'.') {
            return Ok(0);
        }
        self.at += 1;
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let width = self.at - start;
        if !(1..=9).contains(&width) {
            return fail(format!(
                "fraction at byte {start} needs 1 to 9 digits, has {width}"
            ));
        }
        self.at = start;
        let digits: i32 = self.digits(width, "fraction")?;
        // 1 to 9 digits, so the scale is 10^0..=10^8 and the product < 10^9.
        Ok(digits * 10_i32.pow(9 - width as u32))
    }

    /// Reads `Z` or `±HH:MM` and returns the offset east of UTC in minutes.
    fn offset_minutes(&mut self) -> Result<i64, DatetimeError> {
        let sign = match self.peek() {
            Some(b'Z') => {
                self.at += 1;
                return Ok(0);
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => {
                return fail(format!(
                    "expected 'Z' or a ±HH:MM offset at byte {}",
                    self.at
                ))
            }
        };
        self.at += 1;
        let hours: i64 = self.digits(2, "offset hour")?;
        self.expect(b':')?;
        let minutes: i64 = self.digits(2, "offset minute")?;
        check_range("offset hour", hours, 0, 23)?;
        check_range("offset minute", minutes, 0, 59)?;
        Ok(sign * (hours * 60 + minutes))
    }
}

fn check_range<T: PartialOrd + Display>(
    what: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), DatetimeError> {
    if value < min || value > max {
        return fail(format!("{what} {value} is outside {min:02}..={max:02}"));
    }
    Ok(())
}

/// A datetime's fields as the shape lays them out, read but not yet checked
/// against the calendar.
struct Fields {
    year: i16,
    month: i8,
    day: i8,
    hour: i8,
    minute: i8,
    second: i8,
    nanosecond: i32,
    offset_minutes: i64,
}

impl Fields {
    /// Reads the shape, refusing anything else with the byte where it
    /// breaks; the calendar is not consulted yet.
    fn read(text: &str) -> Result<Fields, DatetimeError> {
        let mut c = Cursor { text, at: 0 };
        let year = c.digits(4, "year")?;
        c.expect(b'-')?;
        let month = c.digits(2, "month")?;
        c.expect(b'-')?;
        let day = c.digits(2, "day")?;
        c.expect(b'T')?;
        let hour = c.digits(2, "hour")?;
        c.expect(b':')?;
        let minute = c.digits(2, "minute")?;
        c.expect(b':')?;
        let second = c.digits(2, "second")?;
        let nanosecond = c.fraction_ns()?;
        let offset_minutes = c.offset_minutes()?;
        if c.at != text.len() {
            return fail(format!("unexpected characters after byte {}", c.at));
        }
        Ok(Fields {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanosecond,
            offset_minutes,
        })
    }

    /// The wall-clock reading, once every field is within the calendar
    /// (leap years and month lengths are `jiff`'s; leap seconds are out).
    fn civil(&self) -> Result<DateTime, DatetimeError> {
        check_range("month", self.month, 1, 12)?;
        let month = Date::new(self.year, self.month, 1).map_err(calendar)?;
        check_range("day", self.day, 1, month.days_in_month())?;
        check_range("hour", self.hour, 0, 23)?;
        check_range("minute", self.minute, 0, 59)?;
        check_range("second", self.second, 0, 59)?;
        DateTime::new(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanosecond,
        )
        .map_err(calendar)
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` into a UTC [`Timestamp`].
///
/// Strict on purpose: a disclosure's freshness hangs on this value, and a
/// lenient parser would guess at what a malformed one meant.
pub fn parse_utc(text: &str) -> Result<Timestamp, DatetimeError> {
    let fields = Fields::read(text)?;
    let local = fields.civil()?;
    // Both terms lie within ten thousand years, far from overflowing.
    let since_epoch =
        local.duration_since(EPOCH) - SignedDuration::from_mins(fields.offset_minutes);
    if since_epoch.is_negative() {
        return fail("datetime is before 1970-01-01T00:00:00Z");
    }
    match u64::try_from(since_epoch.as_millis()) {
        Ok(ms) => Ok(Timestamp::from_millis(ms)),
        Err(_) => fail("datetime is too far from 1970-01-01T00:00:00Z"),
    }
}

/// Formats a [`Timestamp`] as `YYYY-MM-DDTHH:MM:SS[.fff]Z`, the form
/// [`parse_utc`] reads back to the same value.
///
/// Milliseconds are written only when non-zero, so whole-second instants
/// look like the spec's example. RFC 3339 years have four digits: an
/// instant past 9999 prints as that year's last millisecond.
pub fn format_utc(at: Timestamp) -> String {
    let utc = EPOCH.saturating_add(Duration::from_millis(at.as_millis()));
    if utc.subsec_nanosecond() == 0 {
        format!("{utc}Z")
    } else {
        format!("{utc:.3}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(text: &str) -> u64 {
        parse_utc(text)
            .map(Timestamp::as_millis)
            .unwrap_or(u64::MAX)
    }

    #[test]
    fn parses_the_accepted_shapes() {
        assert_eq!(ms("1970-01-01T00:00:00Z"), 0);
        assert_eq!(ms("2026-04-22T00:00:00Z"), 1_776_816_000_000);
        assert_eq!(ms("2026-04-22T00:00:00.5Z"), 1_776_816_000_500);
        assert_eq!(ms("2026-04-22T00:00:00.123456789Z"), 1_776_816_000_123);
        assert_eq!(ms("2026-04-22T02:00:00+02:00"), 1_776_816_000_000);
        assert_eq!(ms("2026-04-21T19:30:00-04:30"), 1_776_816_000_000);
        assert_eq!(ms("2024-02-29T00:00:00Z"), 1_709_164_800_000);
    }

    #[test]
    fn refuses_everything_else_with_a_reason() {
        let cases = [
            ("2026-04-22", "expected 'T' at byte 10"),
            ("2026-04-22 00:00:00Z", "expected 'T' at byte 10"),
            ("2026-04-22t00:00:00Z", "expected 'T' at byte 10"),
            (
                "2026-04-22T00:00:00",
                "expected 'Z' or a ±HH:MM offset at byte 19",
            ),
            (
                "2026-04-22T00:00:00z",
                "expected 'Z' or a ±HH:MM offset at byte 19",
            ),
            (
                "2026-04-22T00:00:00ZZ",
                "unexpected characters after byte 20",
            ),
            ("2026-13-01T00:00:00Z", "month 13 is outside 01..=12"),
            ("2026-04-31T00:00:00Z", "day 31 is outside 01..=30"),
            ("2025-02-29T00:00:00Z", "day 29 is outside 01..=28"),
            ("2026-04-22T24:00:00Z", "hour 24 is outside 00..=23"),
            ("2026-04-22T00:00:60Z", "second 60 is outside 00..=59"),
            (
                "2026-04-22T00:00:00.Z",
                "fraction at byte 20 needs 1 to 9 digits, has 0",
            ),
            ("2026-04-22T00:00:00+0200", "expected ':' at byte 22"),
            (
                "1969-12-31T23:59:59Z",
                "datetime is before 1970-01-01T00:00:00Z",
            ),
            ("26-04-22T00:00:00Z", "year needs 4 digits at byte 0"),
            ("", "year needs 4 digits at byte 0"),
            ("+002026-04-22T00:00:00Z", "year needs 4 digits at byte 0"),
            ("20260422T000000Z", "expected '-' at byte 4"),
            ("2026-04-22T00:00Z", "expected ':' at byte 16"),
            (
                "2026-04-22T00:00:00,5Z",
                "expected 'Z' or a ±HH:MM offset at byte 19",
            ),
            (
                "2026-04-22T00:00:00.1234567890Z",
                "fraction at byte 20 needs 1 to 9 digits, has 10",
            ),
            ("2026-04-22T00:00:00+02", "expected ':' at byte 22"),
            (
                "2026-04-22T00:00:00+24:00",
                "offset hour 24 is outside 00..=23",
            ),
            (
                "2026-04-22T00:00:00+02:00:00",
                "unexpected characters after byte 25",
            ),
            (
                "2026-04-22T00:00:00Z[UTC]",
                "unexpected characters after byte 20",
            ),
            (
                "2026-04-22T02:00:00+02:00[Europe/Paris]",
                "unexpected characters after byte 25",
            ),
            ("2016-12-31T23:59:60Z", "second 60 is outside 00..=59"),
        ];
        for (text, reason) in cases {
            let got = parse_utc(text).map_err(|e| e.reason);
            assert_eq!(got, Err(reason.to_string()), "input {text:?}");
        }
    }

    /// The shape is read here because `jiff`'s own RFC 3339 parser is
    /// lenient: it takes every one of these, which the spec's shape refuses.
    #[test]
    fn refuses_what_a_lenient_rfc_3339_parser_takes() {
        let lenient = [
            "2026-04-22t00:00:00Z",
            "2026-04-22 00:00:00Z",
            "2026-04-22T00:00:00z",
            "2026-04-22T00:00:00,5Z",
            "2026-04-22T02:00:00+0200",
            "2026-04-22T02:00:00+02",
            "2026-04-22T02:00:00+02:00:00",
            "2026-04-22T00:00:00Z[UTC]",
            "2026-04-22T02:00:00+02:00[Europe/Paris]",
            "2016-12-31T23:59:60Z",
        ];
        for text in lenient {
            assert!(text.parse::<jiff::Timestamp>().is_ok(), "jiff takes {text}");
            assert!(parse_utc(text).is_err(), "input {text:?}");
        }
    }

    #[test]
    fn the_last_four_digit_year_reads_and_prints() {
        assert_eq!(ms("9999-12-31T23:59:59.999Z"), 253_402_300_799_999);
        assert_eq!(ms("9999-12-31T23:59:59-23:59"), 253_402_387_139_000);
        let last = Timestamp::from_millis(253_402_300_799_999);
        assert_eq!(format_utc(last), "9999-12-31T23:59:59.999Z");
        assert_eq!(
            format_utc(Timestamp::from_millis(u64::MAX)),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn formats_like_the_spec_example() {
        let at = Timestamp::from_millis(1_776_816_000_000);
        assert_eq!(format_utc(at), "2026-04-22T00:00:00Z");
        assert_eq!(format_utc(at.plus_ms(7)), "2026-04-22T00:00:00.007Z");
        assert_eq!(format_utc(Timestamp::ZERO), "1970-01-01T00:00:00Z");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(ms in 0u64..253_402_300_800_000) {
            let at = Timestamp::from_millis(ms);
            prop_assert_eq!(parse_utc(&format_utc(at)), Ok(at));
        }
    }
}
