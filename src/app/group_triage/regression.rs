//! When a report reopens a group: the rules, pure. A resolution may name the commit or
//! version that fixed the failure; a report may say which build it comes from (`meta.commit`,
//! `meta.version`). A report from a build that should contain the fix means the fix did not
//! hold (regressed); one from an older build is only recorded. An ignore may last until the
//! failure happens again or until N more reports ([`after_ignore`]): the last of them reopens
//! the group. Kept apart from the database so that every branch of the rules is a plain unit
//! test.

use std::cmp::Ordering;

/// A release version: dot-separated numbers compared as numbers (`1.10` > `1.9`, `2` = `2.0`),
/// an optional leading `v`, an optional pre-release suffix (`rc1`, `-beta.2`, `.dev3`) that sorts
/// before the release itself, and an ignored local part (`+cu121`).
#[derive(Clone, Debug)]
pub struct Version {
    release: Vec<u64>,
    pre: Option<String>,
}

/// The longest version text accepted.
pub const MAX_VERSION_LEN: usize = 100;

impl Version {
    /// Parses `s` (trimmed); `None` unless it is a version as described on [`Version`].
    #[must_use]
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim();
        if s.is_empty() || s.len() > MAX_VERSION_LEN {
            return None;
        }
        let s = s.strip_prefix(['v', 'V']).unwrap_or(s);
        let (public, local) = s.split_once('+').unwrap_or((s, ""));
        let ok_text = |t: &str| {
            t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        };
        if !ok_text(local) || (s.contains('+') && local.is_empty()) {
            return None;
        }
        let mut release = Vec::new();
        let mut rest = public;
        loop {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || digits > 18 || release.len() == 8 {
                return None;
            }
            release.push(rest[..digits].parse().ok()?);
            rest = &rest[digits..];
            match rest.strip_prefix('.') {
                Some(after) if after.starts_with(|c: char| c.is_ascii_digit()) => rest = after,
                _ => break,
            }
        }
        // A suffix is a letter-led tag (`rc1`, `-beta.2`, `.dev3`), compared without its
        // separators.
        let pre = rest.trim_start_matches(['.', '-', '_']);
        let suffix_ok = pre.starts_with(|c: char| c.is_ascii_alphabetic()) && ok_text(pre);
        if !rest.is_empty() && !suffix_ok {
            return None;
        }
        while release.len() > 1 && release.last() == Some(&0) {
            release.pop();
        }
        let pre: String = (pre.chars())
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        Some(Version {
            release,
            pre: (!pre.is_empty()).then_some(pre),
        })
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.release
            .cmp(&other.release)
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => natural_cmp(a, b),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

/// Compares pre-release tags (ASCII letters and digits) with their numbers as numbers
/// (`rc2` < `rc10`).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn runs(s: &str) -> Vec<&str> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut start = 0;
        for i in 1..=b.len() {
            if i == b.len() || b[i].is_ascii_digit() != b[i - 1].is_ascii_digit() {
                out.push(&s[start..i]);
                start = i;
            }
        }
        out
    }
    let (ra, rb) = (runs(a), runs(b));
    for (x, y) in ra.iter().zip(&rb) {
        let numeric = x.starts_with(|c: char| c.is_ascii_digit())
            && y.starts_with(|c: char| c.is_ascii_digit());
        let order = if numeric {
            let (m, n) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
            m.len().cmp(&n.len()).then_with(|| m.cmp(n))
        } else {
            x.cmp(y)
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    ra.len().cmp(&rb.len())
}

/// A commit hash as the rule compares it: 7-40 hex digits, lowercase; `None` for anything else.
#[must_use]
pub fn commit_of(s: &str) -> Option<String> {
    let s = s.trim();
    ((7..=40).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| s.to_ascii_lowercase())
}

/// What a resolution says fixed the failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FixedIn {
    /// Nothing named.
    Unnamed,
    Version(Version),
    /// A commit hash, lowercase.
    Commit(String),
}

impl FixedIn {
    /// Reads a `resolved_in` value: empty names nothing; text with a dot or a leading `v` is a
    /// version; 7-40 hex digits are a commit; a short number (up to 6 digits) is a version.
    pub fn parse(s: &str) -> Result<FixedIn, String> {
        let s = s.trim();
        let looks_versioned = s.contains('.')
            || s.starts_with(['v', 'V']) && s[1..].starts_with(|c: char| c.is_ascii_digit());
        if s.is_empty() {
            Ok(FixedIn::Unnamed)
        } else if !looks_versioned && let Some(commit) = commit_of(s) {
            Ok(FixedIn::Commit(commit))
        } else if let Some(v) = Version::parse(s).filter(|_| looks_versioned || s.len() <= 6) {
            Ok(FixedIn::Version(v))
        } else {
            Err(format!(
                "resolved_in must be a commit (7-40 hex digits) or a version such as 2.1 or \
                 v2.1.0, got {:?}",
                s.chars().take(60).collect::<String>()
            ))
        }
    }
}

/// The resolution of a group, as the rule reads it.
#[derive(Clone, Debug)]
pub struct Resolution {
    pub fixed_in: FixedIn,
    /// When the group was resolved (microseconds since the epoch).
    pub resolved_at: i64,
}

/// The build a new report comes from.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub version: Option<Version>,
    pub commit: Option<String>,
    /// When the report was stored (microseconds since the epoch).
    pub created_at: i64,
}

/// What a report in a resolved group means; the text says why, for the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The fix did not hold: the group becomes regressed.
    Regressed(String),
    /// The report comes from a build older than the fix: the group stays resolved.
    OlderBuild(String),
}

/// The rule's first step: a verdict, or the two commits whose order decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Decided(Verdict),
    /// Different commits: decided by when the project first saw each ([`by_commit_order`]).
    CommitOrder {
        fix: String,
        report: String,
    },
}

/// The rule, as far as the resolution and the report alone can tell:
/// - a version fix and a report version: regressed iff the report's version is not older;
/// - a commit fix and a report commit: the same commit (one a prefix of the other) regressed,
///   otherwise the commits' order decides ([`Step::CommitOrder`]);
/// - anything else (nothing named, or the report carries nothing comparable): regressed iff
///   the report was stored after the resolution.
#[must_use]
pub fn first_step(resolution: &Resolution, report: &Incoming) -> Step {
    match (&resolution.fixed_in, &report.version, &report.commit) {
        (FixedIn::Version(fix), Some(v), _) => Step::Decided(if v >= fix {
            Verdict::Regressed(format!(
                "version {} is not older than the fix ({})",
                show(v),
                show(fix)
            ))
        } else {
            Verdict::OlderBuild(format!(
                "version {} is older than the fix ({})",
                show(v),
                show(fix)
            ))
        }),
        (FixedIn::Commit(fix), _, Some(c)) if fix.starts_with(c) || c.starts_with(fix) => {
            Step::Decided(Verdict::Regressed(format!(
                "built from the fix commit {}",
                short(c)
            )))
        }
        (FixedIn::Commit(fix), _, Some(c)) => Step::CommitOrder {
            fix: fix.clone(),
            report: c.clone(),
        },
        _ => Step::Decided(if report.created_at > resolution.resolved_at {
            Verdict::Regressed("reported after the group was resolved".into())
        } else {
            Verdict::OlderBuild("reported before the group was resolved".into())
        }),
    }
}

/// When the project first saw each commit (microseconds; `None`: never, not counting the new
/// report).
#[derive(Clone, Copy, Debug, Default)]
pub struct FirstSeen {
    pub fix: Option<i64>,
    pub report: Option<i64>,
}

/// The commit step: the fix commit existed when the group was resolved at the latest, so it
/// counts as seen then unless a report showed it earlier; a report commit first seen before
/// that is an older build, one first seen later (or first seen with this report) is not.
#[must_use]
pub fn by_commit_order(
    fix: &str,
    report: &str,
    seen: FirstSeen,
    resolution: &Resolution,
    incoming: &Incoming,
) -> Verdict {
    let fix_seen = seen
        .fix
        .map_or(resolution.resolved_at, |t| t.min(resolution.resolved_at));
    let report_seen = seen.report.unwrap_or(incoming.created_at);
    if report_seen < fix_seen {
        Verdict::OlderBuild(format!(
            "commit {} was first seen before the fix commit {}",
            short(report),
            short(fix)
        ))
    } else {
        Verdict::Regressed(format!(
            "commit {} was first seen after the fix commit {}",
            short(report),
            short(fix)
        ))
    }
}

/// What a new report does to a group ignored until `left` more reports arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreStep {
    /// Still ignored, this many reports to come.
    Wait(i32),
    /// The last awaited report: the group reopens (as open: it was never resolved), and the
    /// text says why, for the history.
    Reopen(String),
}

/// The ignore's countdown on a new report: one fewer to come, or, with the last of them, a
/// reopened group.
#[must_use]
pub fn after_ignore(left: i32) -> IgnoreStep {
    if left > 1 {
        IgnoreStep::Wait(left - 1)
    } else {
        IgnoreStep::Reopen("it happened again after it was ignored until this report".into())
    }
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

fn show(v: &Version) -> String {
    let release: Vec<String> = v.release.iter().map(u64::to_string).collect();
    let mut out = release.join(".");
    if release.len() == 1 {
        out.push_str(".0");
    }
    if let Some(pre) = &v.pre {
        out.push_str(pre);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn versions_compare_numerically_with_pre_releases_first() {
        let ascending = [
            "0.9", "1.2", "1.9", "1.10", "v1.10.1", "2.0rc1", "2.0rc2", "2.0rc10", "2", "2.0.1",
            "2.1.0a1", "2.1.0b1", "2.1", "10.0",
        ];
        for pair in ascending.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        for (a, b) in [
            ("2", "2.0.0"),
            ("v2.1", "2.1"),
            ("2.3.1+cu121", "2.3.1"),
            ("2.0-RC1", "2.0rc1"),
            ("2.1.0-beta.2", "2.1beta2"),
        ] {
            assert_eq!(v(a), v(b), "{a} = {b}");
        }
    }

    #[test]
    fn what_is_not_a_version_is_refused() {
        for bad in [
            "",
            "  ",
            "v",
            "latest",
            "1..2",
            "1.2.-",
            ".1",
            "1.",
            "2.0 rc1",
            "1.2+",
            "1+a b",
            "<b>1</b>",
            "1.2.3.4.5.6.7.8.9",
            "9999999999999999999.1",
        ] {
            assert!(Version::parse(bad).is_none(), "{bad:?}");
        }
        assert!(Version::parse(&"1.".repeat(60)).is_none());
    }

    #[test]
    fn resolved_in_is_a_commit_or_a_version() {
        let cases = [
            ("", Some(FixedIn::Unnamed)),
            ("2.1", Some(FixedIn::Version(v("2.1")))),
            ("v3", Some(FixedIn::Version(v("3")))),
            ("12", Some(FixedIn::Version(v("12")))),
            ("ABCDEF1", Some(FixedIn::Commit("abcdef1".into()))),
            (
                " 0123456789abcdef0123456789abcdef01234567 ",
                Some(FixedIn::Commit(
                    "0123456789abcdef0123456789abcdef01234567".into(),
                )),
            ),
            ("1234567", Some(FixedIn::Commit("1234567".into()))),
            ("abc12", None),
            ("release-2024", None),
            ("0123456789abcdef0123456789abcdef012345678", None),
        ];
        for (text, want) in cases {
            assert_eq!(FixedIn::parse(text).ok(), want, "{text:?}");
        }
        let err = FixedIn::parse("next week").err().unwrap_or_default();
        assert!(
            err.contains("commit (7-40 hex digits) or a version"),
            "{err}"
        );
    }

    fn resolution(fixed: &str) -> Resolution {
        Resolution {
            fixed_in: FixedIn::parse(fixed).unwrap_or(FixedIn::Unnamed),
            resolved_at: 1_000,
        }
    }

    fn incoming(version: &str, commit: &str, created_at: i64) -> Incoming {
        Incoming {
            version: Version::parse(version),
            commit: commit_of(commit),
            created_at,
        }
    }

    fn regressed(step: &Step) -> Option<bool> {
        match step {
            Step::Decided(Verdict::Regressed(_)) => Some(true),
            Step::Decided(Verdict::OlderBuild(_)) => Some(false),
            Step::CommitOrder { .. } => None,
        }
    }

    #[test]
    fn the_first_step_uses_versions_then_commits_then_time() {
        // (resolved in, report version, report commit, created at) -> regressed?
        let cases: &[(&str, &str, &str, i64, Option<bool>)] = &[
            ("2.0", "1.9", "", 2_000, Some(false)),
            ("2.0", "2.0", "", 2_000, Some(true)),
            ("2.0", "2.1", "", 2_000, Some(true)),
            ("1.9", "1.10", "", 2_000, Some(true)),
            ("2.0", "2.0rc1", "", 2_000, Some(false)),
            // A version fix, a report with only a commit: time decides.
            ("2.0", "", "abcdef1234", 2_000, Some(true)),
            ("2.0", "", "abcdef1234", 500, Some(false)),
            ("abcdef1", "", "ABCDEF1234567", 2_000, Some(true)),
            ("abcdef1234567", "", "abcdef1", 2_000, Some(true)),
            ("abcdef1", "", "1234567", 2_000, None),
            // A commit fix, a report with only a version: time decides.
            ("abcdef1", "3.0", "", 500, Some(false)),
            ("", "1.0", "abcdef1", 2_000, Some(true)),
            ("", "", "", 1_000, Some(false)),
            ("", "", "", 1_001, Some(true)),
            ("", "", "not-a-sha", 1_001, Some(true)),
        ];
        for (fixed, version, commit, at, want) in cases {
            let step = first_step(&resolution(fixed), &incoming(version, commit, *at));
            assert_eq!(
                regressed(&step),
                *want,
                "{fixed} {version} {commit} {at}: {step:?}"
            );
        }
    }

    #[test]
    fn an_ignore_counts_down_and_reopens_with_its_last_report() {
        assert_eq!(after_ignore(3), IgnoreStep::Wait(2));
        assert_eq!(after_ignore(2), IgnoreStep::Wait(1));
        assert!(matches!(after_ignore(1), IgnoreStep::Reopen(_)));
        // A count the schema forbids still reopens rather than waiting forever.
        assert!(matches!(after_ignore(0), IgnoreStep::Reopen(_)));
    }

    #[test]
    fn different_commits_are_ordered_by_when_the_project_first_saw_them() {
        let res = resolution("abcdef1");
        let inc = incoming("", "1234567", 5_000);
        // (fix first seen, report commit first seen) -> regressed?
        let cases = [
            (None, None, true),
            (None, Some(900), false),
            (None, Some(1_200), true),
            (Some(400), Some(600), true),
            (Some(400), Some(300), false),
            (Some(3_000), Some(1_200), true),
        ];
        for (fix, report, want) in cases {
            let verdict =
                by_commit_order("abcdef1", "1234567", FirstSeen { fix, report }, &res, &inc);
            assert_eq!(
                matches!(verdict, Verdict::Regressed(_)),
                want,
                "{fix:?} {report:?}: {verdict:?}"
            );
        }
        let older = by_commit_order(
            "abcdef1",
            "1234567",
            FirstSeen {
                fix: None,
                report: Some(1),
            },
            &res,
            &inc,
        );
        assert_eq!(
            older,
            Verdict::OlderBuild(
                "commit 1234567 was first seen before the fix commit abcdef1".into()
            )
        );
    }
}
