//! When a log line says it was written, so failures in a run's files can be put in time order
//! (issue 41 item 2). The formats these logs print: ISO 8601 and the CI runners' stamps built on
//! it (GitHub's `2026-07-30T03:36:29.7333793Z `, GitLab's, Jenkins' `[2024-...Z] `), Go's
//! `2023/10/19 03:11:54`, syslog and the journal (`Jun 25 13:46:36 host ...`), glog and the
//! PyTorch elastic launcher (`E0625 13:46:36.561234 ...`), c10's `[E429 13:55:49.38 ...]`,
//! vLLM's `INFO 10-11 12:27:29`, `dmesg -T`'s `[Wed Jun 25 13:46:36 2025]`, and dmesg's seconds
//! since boot (`[ 7386.259769] `), which mean a time only once a line carrying both a wall
//! clock and an uptime (the journal's kernel lines) anchors them ([`Clock`]).
//!
//! A stamp without a zone is read as UTC, and one without a year gets the run's year when it is
//! placed ([`Stamp::resolve`]): logs of one run are written within hours of each other, so
//! their order survives that, not their absolute time.

use chrono::NaiveDate;

use crate::time::{civil_from_days, days_from_civil};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// A moment a line states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// Milliseconds since the Unix epoch.
    At(i64),
    /// A wall clock without a year: milliseconds since January 1st 00:00 of a leap year (so
    /// that February 29th has a place).
    NoYear(i64),
    /// Milliseconds since the machine booted (dmesg).
    Uptime(i64),
}

impl Stamp {
    /// Milliseconds since the epoch, a year-less stamp placed in `year`; `None` for an uptime
    /// no wall clock anchored.
    #[must_use]
    pub fn resolve(self, year: i32) -> Option<i64> {
        match self {
            Stamp::At(ms) => Some(ms),
            Stamp::NoYear(offset) => {
                // From March on, a day earlier in a common year than in a leap year.
                let leap = NaiveDate::from_ymd_opt(year, 2, 29).is_some();
                let less = if !leap && offset >= 60 * DAY_MS {
                    DAY_MS
                } else {
                    0
                };
                Some(days_from_civil(year, 1, 1)? * DAY_MS + offset - less)
            }
            Stamp::Uptime(_) => None,
        }
    }

    /// The year an absolute stamp falls in.
    #[must_use]
    pub fn year(self) -> Option<i32> {
        match self {
            Stamp::At(ms) => civil_from_days(ms.div_euclid(DAY_MS)).map(|(year, _, _)| year),
            _ => None,
        }
    }

    fn shifted(self, ms: i64) -> Stamp {
        match self {
            Stamp::At(t) => Stamp::At(t + ms),
            Stamp::NoYear(t) => Stamp::NoYear(t + ms),
            Stamp::Uptime(t) => Stamp::Uptime(t + ms),
        }
    }
}

/// The stamps of one file's lines in order: each line's own, or the last one before it (a
/// traceback's lines carry none, the log line before them does); dmesg uptimes become wall
/// clock times once a line anchors them, before or after.
///
/// Reading a stamp costs more than the rest of a scan, and only a few lines' stamps are ever
/// asked for: [`Clock::note`] keeps the last line that may carry one aside and reads it when
/// [`Clock::now`] asks (and every [`REFRESH`] such lines, so an unreadable last one falls back
/// on a stamp at most that many lines older).
#[derive(Debug, Default)]
pub struct Clock {
    last: Option<Stamp>,
    /// A wall clock and the uptime on the same line.
    anchor: Option<(Stamp, i64)>,
    /// The last line that may carry a stamp, not read yet.
    pending: String,
    /// Lines kept aside since the last read.
    since: usize,
}

/// Lines that may carry a stamp kept aside between two reads, at most.
pub const REFRESH: usize = 64;

impl Clock {
    /// Reads `line` (raw, prefixes and all) and returns the stamp in force at it.
    pub fn line(&mut self, line: &str) -> Option<Stamp> {
        self.note(line);
        self.now()
    }

    /// Notes `line`, the next line of the file.
    pub fn note(&mut self, line: &str) {
        let first = line
            .trim_start()
            .as_bytes()
            .first()
            .copied()
            .unwrap_or(b' ');
        if !(first.is_ascii_digit() || first == b'[' || first.is_ascii_uppercase()) {
            return;
        }
        if line.contains("kernel: [") {
            // A journal kernel line may anchor the dmesg uptimes: read it now.
            self.read(line);
            self.pending.clear();
            self.since = 0;
            return;
        }
        self.pending.clear();
        self.pending.push_str(line);
        self.since += 1;
        if self.since >= REFRESH {
            self.now();
        }
    }

    /// The stamp in force at the last line noted.
    pub fn now(&mut self) -> Option<Stamp> {
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            self.read(&pending);
            self.pending = pending;
            self.pending.clear();
            self.since = 0;
        }
        self.last
    }

    fn read(&mut self, line: &str) {
        if let Some((wall, uptime)) = parse_both(line) {
            if let Some(up) = uptime
                && !matches!(wall, Stamp::Uptime(_))
            {
                self.anchor.get_or_insert((wall, up));
            }
            self.last = Some(wall);
        }
    }

    /// `stamp` as a wall clock where this file anchors its uptimes (call after the last line).
    #[must_use]
    pub fn settle(&self, stamp: Stamp) -> Stamp {
        match (stamp, self.anchor) {
            (Stamp::Uptime(up), Some((wall, at))) => wall.shifted(up - at),
            _ => stamp,
        }
    }
}

/// The stamp a line starts with, if any (see the module doc for the formats).
#[must_use]
pub fn parse(line: &str) -> Option<Stamp> {
    parse_both(line).map(|(s, _)| s)
}

/// The line's stamp and, for a journal kernel line, the dmesg uptime inside it too.
fn parse_both(line: &str) -> Option<(Stamp, Option<i64>)> {
    let s = peel(line.trim_start());
    let b = s.as_bytes();
    let first = *b.first()?;
    if first == b'[' {
        let inner = &s[1..s.find(']')?];
        if let Some(up) = uptime(inner) {
            return Some((Stamp::Uptime(up), Some(up)));
        }
        // c10 `[E429 13:55:49.38 file.cpp:12]`, Jenkins `[2024-...Z]`, `dmesg -T`.
        return glog(inner)
            .or_else(|| iso(inner))
            .or_else(|| ctime(inner))
            .map(|s| (s, None));
    }
    if first.is_ascii_digit() {
        return iso(s).map(|s| (s, None));
    }
    if let Some(wall) = glog(s).or_else(|| level_month_day(s)) {
        return Some((wall, None));
    }
    let wall = syslog(s)?;
    // `Jun 25 13:46:36 host kernel: [ 7386.259769] NVRM: ...`
    let up = s
        .find("kernel: [")
        .and_then(|i| s[i + 9..].split_once(']'))
        .and_then(|(inner, _)| uptime(inner));
    Some((wall, up))
}

/// Drops a launcher's rank prefix (`[rank3]:`, `[default0]:`, `3: `) before the stamp.
fn peel(s: &str) -> &str {
    for head in ["[rank", "[default"] {
        if let Some(rest) = s.strip_prefix(head)
            && let Some(close) = rest.find("]:")
            && rest[..close].bytes().all(|c| c.is_ascii_digit())
        {
            return peel(rest[close + 2..].trim_start());
        }
    }
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if (1..=4).contains(&digits) && s[digits..].starts_with(": ") {
        return s[digits + 2..].trim_start();
    }
    s
}

/// `7386.259769` (dmesg seconds since boot, padded or not) in milliseconds.
fn uptime(inner: &str) -> Option<i64> {
    let (secs, frac) = inner.trim().split_once('.')?;
    if secs.is_empty() || frac.len() < 3 || !all_digits(secs) || !all_digits(frac) {
        return None;
    }
    Some(secs.parse::<i64>().ok()? * 1000 + frac[..3].parse::<i64>().ok()?)
}

/// ISO 8601 (`T` or a space between date and time, `-` or `/` in the date, optional fraction
/// with `.` or `,`, optional `Z` or offset).
fn iso(s: &str) -> Option<Stamp> {
    let b = s.as_bytes();
    if b.len() < 19 || !matches!(b[4], b'-' | b'/') || b[7] != b[4] || !matches!(b[10], b'T' | b' ')
    {
        return None;
    }
    let year: i32 = num(&s[..4])?;
    let (month, day) = (num(&s[5..7])?, num(&s[8..10])?);
    let (ms, rest) = clock(&s[11..])?;
    let zone = match rest.as_bytes().first() {
        Some(b'Z') => 0,
        Some(&sign @ (b'+' | b'-')) if rest.len() >= 6 && rest.as_bytes()[3] == b':' => {
            let minutes = num::<i64>(&rest[1..3])? * 60 + num::<i64>(&rest[4..6])?;
            if sign == b'+' { minutes } else { -minutes }
        }
        _ => 0,
    };
    valid(month, day)?;
    Some(Stamp::At(
        days_from_civil(year, month, day)? * DAY_MS + ms - zone * 60_000,
    ))
}

/// glog/absl and c10: a level letter, `MMDD` (c10 drops a leading zero: `E429`), a space and
/// the time.
fn glog(s: &str) -> Option<Stamp> {
    let b = s.as_bytes();
    if !matches!(b.first()?, b'I' | b'W' | b'E' | b'F') {
        return None;
    }
    let digits = b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    if !(3..=4).contains(&digits) || b.get(1 + digits) != Some(&b' ') {
        return None;
    }
    let md = &s[1..=digits];
    let (month, day) = md.split_at(digits - 2);
    let (ms, _) = clock(&s[digits + 2..])?;
    no_year(num(month)?, num(day)?, ms)
}

/// vLLM's and others' `INFO 10-11 12:27:29 ...`: a level word, `MM-DD`, the time.
fn level_month_day(s: &str) -> Option<Stamp> {
    let (level, rest) = s.split_once(' ')?;
    if !matches!(level, "INFO" | "WARNING" | "ERROR" | "DEBUG" | "CRITICAL") {
        return None;
    }
    let rest = rest.trim_start();
    let b = rest.as_bytes();
    if b.len() < 14 || b[2] != b'-' || b[5] != b' ' {
        return None;
    }
    let (ms, _) = clock(&rest[6..])?;
    no_year(num(&rest[..2])?, num(&rest[3..5])?, ms)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// syslog and the journal's short format: `Jun 25 13:46:36` (day padded with a space or not).
fn syslog(s: &str) -> Option<Stamp> {
    let month = MONTHS.iter().position(|m| s.starts_with(m))? + 1;
    let rest = s.get(3..)?.strip_prefix(' ')?.trim_start();
    let (day, rest) = rest.split_once(' ')?;
    let (ms, _) = clock(rest)?;
    no_year(u32::try_from(month).ok()?, num(day)?, ms)
}

/// `dmesg -T`: `Wed Jun 25 13:46:36 2025`.
fn ctime(inner: &str) -> Option<Stamp> {
    let rest = inner.get(4..)?;
    let Stamp::NoYear(offset) = syslog(rest)? else {
        return None;
    };
    let year: i32 = num(rest.rsplit(' ').next()?)?;
    Stamp::NoYear(offset).resolve(year).map(Stamp::At)
}

/// `HH:MM:SS` with an optional fraction: milliseconds into the day and what follows.
fn clock(s: &str) -> Option<(i64, &str)> {
    let b = s.as_bytes();
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, sec): (i64, i64, i64) = (num(&s[..2])?, num(&s[3..5])?, num(&s[6..8])?);
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let mut ms = (h * 3600 + m * 60 + sec) * 1000;
    let mut rest = &s[8..];
    if let Some(frac) = rest.strip_prefix('.').or_else(|| rest.strip_prefix(',')) {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n > 0 {
            let mut three = frac[..n.min(3)].to_owned();
            while three.len() < 3 {
                three.push('0');
            }
            ms += num::<i64>(&three)?;
        }
        rest = &frac[n..];
    }
    Some((ms, rest))
}

fn no_year(month: u32, day: u32, ms: i64) -> Option<Stamp> {
    valid(month, day)?;
    Some(Stamp::NoYear(
        (days_from_civil(2000, month, day)? - days_from_civil(2000, 1, 1)?) * DAY_MS + ms,
    ))
}

fn valid(month: u32, day: u32) -> Option<()> {
    ((1..=12).contains(&month) && (1..=31).contains(&day)).then_some(())
}

fn all_digits(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_digit())
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !all_digits(s) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-06-25 13:46:36.560 UTC in milliseconds.
    const T: i64 = 1_719_323_196_560;

    #[test]
    fn the_formats_logs_print_are_read() {
        let cases: &[(&str, Option<i64>)] = &[
            ("2024-06-25T13:46:36.56Z RuntimeError: x", Some(T)),
            ("2024-06-25T13:46:36.5600000Z ##[error]x", Some(T)),
            ("2024-06-25 13:46:36,560 - ERROR - x", Some(T)),
            ("2024-06-25T15:46:36.560+02:00 stderr F x", Some(T)),
            ("2024/06/25 13:46:36 x", Some(T - 560)),
            ("[2024-06-25T13:46:36.560Z] x", Some(T)),
            ("E0625 13:46:36.560000 23225 run.py:1] failed", Some(T)),
            (
                "[rank2]:[E625 13:46:36.56 ProcessGroupNCCL.cpp:563] x",
                Some(T),
            ),
            (
                "[E625 13:46:36.560000000 ProcessGroupNCCL.cpp:1595] x",
                Some(T),
            ),
            ("Jun 25 13:46:36 node-7 kernel: NVRM: Xid 79", Some(T - 560)),
            (
                "Jun  5 13:46:36 node-7 sshd[1]: x",
                Some(T - 560 - 20 * DAY_MS),
            ),
            ("ERROR 06-25 13:46:36 engine.py:157] x", Some(T - 560)),
            ("[Tue Jun 25 13:46:36 2024] NVRM: Xid", Some(T - 560)),
            ("3: 2024-06-25T13:46:36.560Z x", Some(T)),
            ("Traceback (most recent call last):", None),
            ("RuntimeError: CUDA error", None),
            ("INFO: nothing", None),
            ("2024-13-25T13:46:36Z bad month", None),
            ("E0625 25:46:36.56 bad hour", None),
        ];
        for (line, want) in cases {
            let got = parse(line).and_then(|s| s.resolve(2024));
            assert_eq!(got, *want, "{line}");
        }
    }

    #[test]
    fn dmesg_uptimes_become_times_once_a_journal_line_anchors_them() {
        let mut clock = Clock::default();
        let first = clock.line("[ 7380.000000] NVRM: GPU at PCI:0000:3b:00: GPU-1");
        assert_eq!(first, Some(Stamp::Uptime(7_380_000)));
        assert_eq!(first.and_then(|s| s.resolve(2024)), None);
        clock.line("Jun 25 13:46:36 node-7 kernel: [ 7386.259769] NVRM: Xid (PCI:0000:3b:00): 79");
        let settled = clock.settle(Stamp::Uptime(7_380_000));
        assert_eq!(settled.resolve(2024), Some(T - 560 - 6_259));
        // Lines without a stamp take the last one before them.
        assert_eq!(
            clock.line("  continuation"),
            parse("Jun 25 13:46:36 node-7 kernel: x")
        );
    }

    #[test]
    fn year_less_stamps_order_within_the_run_year() {
        let jun = parse("Jun 25 13:46:36 h x").and_then(|s| s.resolve(2024));
        let mar = parse("Mar  1 00:00:00 h x").and_then(|s| s.resolve(2024));
        let day = |y, m, d| days_from_civil(y, m, d).map(|days| days * DAY_MS);
        assert_eq!(mar, day(2024, 3, 1));
        let feb29 = parse("Feb 29 12:00:00 h x").expect("a stamp");
        assert_eq!(
            feb29.resolve(2024),
            day(2024, 2, 29).map(|t| t + DAY_MS / 2)
        );
        let dec31 = parse("Dec 31 00:00:00 h x").expect("a stamp");
        assert_eq!(dec31.resolve(2023), day(2023, 12, 31));
        assert_eq!(dec31.resolve(2024), day(2024, 12, 31));
        assert!(mar < jun);
        assert_eq!(
            parse("2024-06-25T13:46:36Z x").and_then(Stamp::year),
            Some(2024)
        );
        assert_eq!(
            parse("1969-01-01T00:00:00Z x").and_then(Stamp::year),
            Some(1969)
        );
    }
}
