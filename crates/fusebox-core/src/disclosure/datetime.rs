//! A strict ISO-8601 / RFC 3339 UTC datetime codec for `observed_at`.
//!
//! Only the one shape the spec uses is accepted:
//! `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|+HH:MM|-HH:MM)`, upper-case `T` and `Z`,
//! no leap seconds, nothing before the Unix epoch. Fractions finer than a
//! millisecond are truncated, since [`Timestamp`] counts milliseconds. The
//! calendar arithmetic is Howard Hinnant's days-from-civil algorithm, so no
//! date crate is needed and the result never depends on a time zone database.

use crate::time::Timestamp;
use thiserror::Error;

use super::DAY_MS;

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

/// A cursor over the datetime's bytes that reads fixed-width fields.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, width: usize, what: &str) -> Result<i64, DatetimeError> {
        let end = self.at + width;
        let Some(field) = self.bytes.get(self.at..end) else {
            return fail(format!("{what} needs {width} digits at byte {}", self.at));
        };
        if !field.iter().all(u8::is_ascii_digit) {
            return fail(format!("{what} needs {width} digits at byte {}", self.at));
        }
        self.at = end;
        Ok(field
            .iter()
            .fold(0, |acc, d| acc * 10 + i64::from(d - b'0')))
    }

    fn expect(&mut self, byte: u8) -> Result<(), DatetimeError> {
        if self.bytes.get(self.at) != Some(&byte) {
            return fail(format!("expected '{}' at byte {}", byte as char, self.at));
        }
        self.at += 1;
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Reads `.f{1,9}` if present and returns the milliseconds it holds.
    fn fraction_ms(&mut self) -> Result<i64, DatetimeError> {
        if self.peek() != Some(b'.') {
            return Ok(0);
        }
        self.at += 1;
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = &self.bytes[start..self.at];
        if digits.is_empty() || digits.len() > 9 {
            return fail(format!(
                "fraction at byte {start} needs 1 to 9 digits, has {}",
                digits.len()
            ));
        }
        let ms = digits
            .iter()
            .chain([b'0', b'0'].iter())
            .take(3)
            .fold(0, |acc, d| acc * 10 + i64::from(d - b'0'));
        Ok(ms)
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
        let hours = self.digits(2, "offset hour")?;
        self.expect(b':')?;
        let minutes = self.digits(2, "offset minute")?;
        check_range("offset hour", hours, 0, 23)?;
        check_range("offset minute", minutes, 0, 59)?;
        Ok(sign * (hours * 60 + minutes))
    }
}

fn check_range(what: &str, value: i64, min: i64, max: i64) -> Result<(), DatetimeError> {
    if value < min || value > max {
        return fail(format!("{what} {value} is outside {min:02}..={max:02}"));
    }
    Ok(())
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)` into a UTC [`Timestamp`].
///
/// Strict on purpose: a disclosure's freshness hangs on this value, and a
/// lenient parser would guess at what a malformed one meant.
pub fn parse_utc(text: &str) -> Result<Timestamp, DatetimeError> {
    let mut c = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
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
    let ms = c.fraction_ms()?;
    let offset = c.offset_minutes()?;
    if c.at != c.bytes.len() {
        return fail(format!("unexpected characters after byte {}", c.at));
    }
    check_range("month", month, 1, 12)?;
    check_range("day", day, 1, days_in_month(year, month))?;
    check_range("hour", hour, 0, 23)?;
    check_range("minute", minute, 0, 59)?;
    check_range("second", second, 0, 59)?;
    let local_s = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    let utc_ms = (local_s - offset * 60) * 1000 + ms;
    match u64::try_from(utc_ms) {
        Ok(ms) => Ok(Timestamp::from_millis(ms)),
        Err(_) => fail("datetime is before 1970-01-01T00:00:00Z"),
    }
}

/// Formats a [`Timestamp`] as `YYYY-MM-DDTHH:MM:SS[.fff]Z`, the form
/// [`parse_utc`] reads back to the same value (for years up to 9999).
///
/// Milliseconds are written only when non-zero, so whole-second instants
/// look like the spec's example.
pub fn format_utc(at: Timestamp) -> String {
    let ms_total = at.as_millis();
    // u64::MAX / DAY_MS is far below i64::MAX, so the cast cannot wrap.
    let days = (ms_total / DAY_MS) as i64;
    let ms_of_day = ms_total % DAY_MS;
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, ms) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    let date_time = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}");
    if ms == 0 {
        format!("{date_time}Z")
    } else {
        format!("{date_time}.{ms:03}Z")
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
        ];
        for (text, reason) in cases {
            let got = parse_utc(text).map_err(|e| e.reason);
            assert_eq!(got, Err(reason.to_string()), "input {text:?}");
        }
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
