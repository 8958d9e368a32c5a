//! `Timestamp`: a moment in UTC, to the second, as storage reads it and views and the wire show
//! it (RFC 3339, `2026-11-24T16:52:28Z`). Typed from the database (sqlx decodes a `timestamptz`
//! into chrono's `DateTime<Utc>`, `storage::types` keeps its whole seconds) to the template;
//! formatted only where it is shown. The calendar is chrono's, here and for every date the
//! code reads or prints (`days_from_civil`, `civil_from_days`).

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
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

    /// The whole second `at` falls in (a time before 1970 rounds down, as the epoch's floor).
    #[must_use]
    pub fn of(at: DateTime<Utc>) -> Timestamp {
        Timestamp(at.timestamp())
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ`, the one spelling this type prints.
    #[must_use]
    pub fn parse(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() != 20 || b[10] != b'T' || b[19] != b'Z' {
            return None;
        }
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|at| Timestamp::of(at.to_utc()))
    }
}

/// 1970-01-01, day 0 of the day numbers below.
const EPOCH: NaiveDate = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a real date");

/// Days since 1970-01-01 of the date `y-m-d`, or `None` when it is no calendar day.
pub(crate) fn days_from_civil(y: i32, m: u32, d: u32) -> Option<i64> {
    NaiveDate::from_ymd_opt(y, m, d).map(|date| (date - EPOCH).num_days())
}

/// The date `(year, month, day)` of a day counted from 1970-01-01 (`None` past chrono's
/// range, some 262,000 years away).
pub(crate) fn civil_from_days(days: i64) -> Option<(i32, u32, u32)> {
    let date = EPOCH.checked_add_signed(chrono::TimeDelta::try_days(days)?)?;
    Some((date.year(), date.month(), date.day()))
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match DateTime::from_timestamp(self.0, 0) {
            Some(at) => write!(f, "{}", at.format("%Y-%m-%dT%H:%M:%SZ")),
            // Past chrono's range: no stored `timestamptz` is.
            None => write!(f, "@{}", self.0),
        }
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
            "2026-02-30T00:00:00Z",
            "2026-11-24T16:52:28+00:00",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
        assert_eq!(days_from_civil(2000, 2, 29), Some(11_016));
        assert_eq!(days_from_civil(2001, 2, 29), None);
        assert_eq!(civil_from_days(11_016), Some((2000, 2, 29)));
        assert_eq!(civil_from_days(-1), Some((1969, 12, 31)));
        let json = serde_json::to_string(&Timestamp::from_unix(0)).unwrap_or_default();
        assert_eq!(json, "\"1970-01-01T00:00:00Z\"");
    }
}
