//! `Timestamp`: a moment in UTC, to the second, as storage reads it and views and the wire show
//! it (RFC 3339, `2026-11-24T16:52:28Z`). Typed from the database to the template; formatted
//! only where it is shown. Pure, with no dependency: the calendar arithmetic is Howard
//! Hinnant's `days_from_civil`/`civil_from_days`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Seconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The moment `secs` seconds after the Unix epoch.
    #[must_use]
    pub fn from_unix(secs: i64) -> Timestamp {
        Timestamp(secs)
    }

    /// Seconds since the Unix epoch.
    #[must_use]
    pub fn unix(self) -> i64 {
        self.0
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
        let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || min > 59 || sec > 60 {
            return None;
        }
        Some(Timestamp(
            days_from_civil(y, m, d) * 86_400 + h * 3600 + min * 60 + sec,
        ))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `(year, month, day)` of a day counted from 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, secs) = (self.0.div_euclid(86_400), self.0.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 UTC time: {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_and_parse_as_rfc3339_utc() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_795_539_148, "2026-11-24T16:52:28Z"),
            (-1, "1969-12-31T23:59:59Z"),
            (4_107_542_399, "2100-02-28T23:59:59Z"),
        ];
        for (secs, text) in cases {
            assert_eq!(Timestamp::from_unix(secs).to_string(), text);
            assert_eq!(
                Timestamp::parse(text),
                Some(Timestamp::from_unix(secs)),
                "{text}"
            );
        }
        for bad in [
            "2026-11-24 16:52:28Z",
            "2026-13-01T00:00:00Z",
            "x",
            "2026-11-24T16:52:28",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
        let json = serde_json::to_string(&Timestamp::from_unix(0)).unwrap_or_default();
        assert_eq!(json, "\"1970-01-01T00:00:00Z\"");
    }
}
