//! What fixed text every match of a pattern contains: the one analysis behind both the candidate
//! pass, which searches whole chunks for that text (see `scan`), and `rules check` and team-rule
//! validation, which refuse a pattern without it because it would be tried on every line of every
//! log. Because both read the same [`LiteralPlan`], a rule the check accepts is always one the
//! scanner can prefilter, and the check's message states the reason the analysis found.
//!
//! The literals come from the parsed pattern: its prefixes, or a fixed piece inside it (`Target
//! \d+ is out of bounds` requires ` is out of bounds`), or for an alternation one piece per
//! branch, so a pattern need not start with fixed text to be found fast.

use regex_syntax::hir::literal::{ExtractKind, Extractor, Literal, Seq};
use regex_syntax::hir::{Hir, HirKind};

/// Shortest required literal: anything shorter hits noise on most lines.
pub const MIN_REQUIRED: usize = 3;
/// Required literals at least this long are preferred when a pattern offers a choice.
const GOOD_REQUIRED: usize = 6;

/// How the candidate pass finds the lines a pattern may match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiteralPlan {
    /// Every match contains at least one of these literals (sorted, each at least
    /// [`MIN_REQUIRED`] bytes): the pass searches for them.
    Required(Vec<String>),
    /// There is no such set: the pattern joins the slow search of whole patterns that every
    /// line goes through.
    Unfiltered(NoLiterals),
}

/// Why a pattern has no required literals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoLiterals {
    /// The pattern does not parse (compiling it says where).
    Unparsable,
    /// Every match contains fixed text, but none of [`MIN_REQUIRED`] bytes (`ab`, `(a*)*b`).
    TooShort,
    /// No set of fixed text is found in every match: the pattern, or one of its branches, can
    /// match with classes and repetitions alone (`\d+ms`, `boom|\w+`).
    Absent,
}

impl LiteralPlan {
    /// The analysis of one pattern.
    pub fn of(pattern: &str) -> LiteralPlan {
        let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
            return LiteralPlan::Unfiltered(NoLiterals::Unparsable);
        };
        let mut options = covers(&hir);
        options.extend(prefixes(&hir));
        if options.is_empty() {
            return LiteralPlan::Unfiltered(NoLiterals::Absent);
        }
        match best(options) {
            Some(literals) => LiteralPlan::Required(literals),
            None => LiteralPlan::Unfiltered(NoLiterals::TooShort),
        }
    }

    /// The required literals, or `None` for a pattern the pass cannot prefilter.
    pub fn literals(&self) -> Option<&[String]> {
        match self {
            LiteralPlan::Required(literals) => Some(literals),
            LiteralPlan::Unfiltered(_) => None,
        }
    }
}

impl std::fmt::Display for NoLiterals {
    /// What `rules check` and team-rule validation say about a pattern without required
    /// literals. Each message states the condition the analysis found; the shared tail says what
    /// it costs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self {
            NoLiterals::Unparsable => "pattern does not parse, so its fixed text is unknown",
            NoLiterals::TooShort => {
                "pattern does not start with literal text of at least 3 bytes, and the fixed \
                 text every match contains is shorter than that"
            }
            NoLiterals::Absent => {
                "pattern does not start with literal text, and no fixed text of at least 3 \
                 bytes is in every match"
            }
        };
        write!(
            f,
            "{why}, so the prefilter tries it on every line, which slows every log down: start \
             it with the message's fixed words"
        )
    }
}

/// Sets of literals such that every match of `hir` contains one literal of each set.
fn covers(hir: &Hir) -> Vec<Vec<String>> {
    match hir.kind() {
        HirKind::Literal(lit) => match std::str::from_utf8(&lit.0) {
            Ok(text) => vec![vec![text.to_owned()]],
            Err(_) => Vec::new(),
        },
        HirKind::Capture(cap) => covers(&cap.sub),
        HirKind::Repetition(rep) if rep.min >= 1 => covers(&rep.sub),
        HirKind::Concat(parts) => {
            // Any part's literals, or the prefixes of the pattern from any part on (which join
            // adjacent literals and small classes: `[Ee]xpected scalar`). Each part's prefixes
            // are extracted once and crossed from each starting part, as the extractor does
            // with a concatenation, rather than extracted again from every suffix.
            let mut out: Vec<Vec<String>> = parts.iter().flat_map(covers).collect();
            let extractor = extractor();
            let seqs: Vec<Seq> = parts.iter().map(|p| extractor.extract(p)).collect();
            for from in 0..parts.len() {
                // After a literal, the prefixes from that literal on are longer and as many.
                if from > 0 && matches!(parts[from - 1].kind(), HirKind::Literal(_)) {
                    continue;
                }
                let seq = match &seqs[from..] {
                    [one] => one.clone(),
                    several => cross(several),
                };
                out.extend(texts(&seq));
            }
            out
        }
        HirKind::Alternation(branches) => {
            // Every branch must contribute; the union of each branch's best set covers them all.
            let mut union = Vec::new();
            for branch in branches {
                match best(covers(branch)) {
                    Some(set) => union.extend(set),
                    None => return Vec::new(),
                }
            }
            union.sort();
            union.dedup();
            vec![union]
        }
        _ => Vec::new(),
    }
}

/// The literal prefixes every match of `hir` starts with, when there is a finite set of them.
fn prefixes(hir: &Hir) -> Option<Vec<String>> {
    texts(&extractor().extract(hir))
}

/// Most literals in one set of prefixes, and most bytes kept of each: the extractor's defaults,
/// named because [`cross`] applies them as the extractor would.
const LIMIT_TOTAL: usize = 250;
const LIMIT_LITERAL_LEN: usize = 100;

fn extractor() -> Extractor {
    let mut extractor = Extractor::new();
    extractor
        .kind(ExtractKind::Prefix)
        .limit_total(LIMIT_TOTAL)
        .limit_literal_len(LIMIT_LITERAL_LEN);
    extractor
}

/// The prefixes of a concatenation of two or more parts, from each part's prefixes: what the
/// extractor gives for the concatenation itself.
fn cross(parts: &[Seq]) -> Seq {
    let mut seq = Seq::singleton(Literal::exact(vec![]));
    for part in parts {
        // Once every literal is inexact, crossing adds nothing.
        if seq.is_inexact() {
            break;
        }
        let mut part = part.clone();
        if seq
            .max_cross_len(&part)
            .is_some_and(|len| len > LIMIT_TOTAL)
        {
            part.make_infinite();
        }
        seq.cross_forward(&mut part);
        seq.keep_first_bytes(LIMIT_LITERAL_LEN);
    }
    seq
}

/// A finite, non-empty set of prefixes as sorted, distinct texts.
fn texts(seq: &Seq) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for lit in seq.literals()? {
        out.push(std::str::from_utf8(lit.as_bytes()).ok()?.to_owned());
    }
    out.sort();
    out.dedup();
    (!out.is_empty()).then_some(out)
}

/// The set to search for: no literal too short, preferably none short, then as few literals as
/// possible, then the longest shortest one.
fn best(options: Vec<Vec<String>>) -> Option<Vec<String>> {
    options
        .into_iter()
        .filter(|set| set.iter().all(|l| l.len() >= MIN_REQUIRED))
        .min_by_key(|set| {
            let shortest = set.iter().map(String::len).min().unwrap_or(0);
            (
                shortest < GOOD_REQUIRED,
                set.len(),
                set.iter().any(|l| is_wordy(l)),
                std::cmp::Reverse(shortest),
            )
        })
}

/// A literal of letters and spaces only (` in `, `step`): a short one is on most lines of prose
/// and logs, so among pieces shorter than [`GOOD_REQUIRED`] one with punctuation or other
/// characters (`.py`, `│`) lets the candidate pass skip more lines, even a byte shorter.
fn is_wordy(literal: &str) -> bool {
    literal
        .bytes()
        .all(|b| b.is_ascii_alphabetic() || b == b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required_literals(pattern: &str) -> Option<Vec<String>> {
        LiteralPlan::of(pattern).literals().map(<[String]>::to_vec)
    }

    #[test]
    fn a_short_piece_with_punctuation_is_required_before_a_short_word() {
        // rich's frame line: ` in ` is on most log lines, `│` and `.py` on few.
        let got = required_literals(r"│\s*(?P<f>[\w.-]+\.py):\d+ in (?P<g>\w+)\s*│");
        assert!(
            got.as_ref().is_some_and(|l| l.iter().all(|l| !is_wordy(l))),
            "{got:?}"
        );
    }

    #[test]
    fn required_literals_come_from_prefixes_inner_pieces_and_branches() {
        let cases: &[(&str, Option<&[&str]>)] = &[
            (
                "index out of range in self",
                Some(&["index out of range in self"]),
            ),
            (
                r"Target (?P<t>-?\d+) is out of bounds",
                Some(&[" is out of bounds"]),
            ),
            // One literal beats two: every spelling shares `xpected scalar type`.
            ("[Ee]xpected scalar type", Some(&["xpected scalar type"])),
            ("[Ee]rr[Oo]r", Some(&["rrOr", "rror"])),
            (
                "device-side assert(?:ion)? triggered|cudaErrorAssert",
                Some(&["cudaErrorAssert", "device-side assert"]),
            ),
            (
                r"(?:\[Rank (?P<r>\d+)\] )?Watchdog caught",
                Some(&["Watchdog caught"]),
            ),
            // A branch without fixed text leaves the pattern without required literals.
            (r"boom|\d+ms", None),
            (r"(?:abc)?\d+", None),
            (r"\w+Error", Some(&["Error"])),
            ("ab", None),
        ];
        for (pattern, want) in cases {
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(required_literals(pattern), want, "{pattern}");
        }
    }

    #[test]
    fn case_insensitive_patterns_require_every_spelling() {
        let got = required_literals("(?i)oom").expect("finite");
        assert_eq!(got.len(), 8, "{got:?}");
        assert!(got.contains(&"OoM".to_owned()));
    }

    #[test]
    fn a_pattern_without_required_literals_says_why() {
        let cases = [
            ("(unclosed", NoLiterals::Unparsable),
            ("ab", NoLiterals::TooShort),
            ("(a*)*b", NoLiterals::TooShort),
            (r"\d+ms", NoLiterals::TooShort),
            (r"\d+", NoLiterals::Absent),
            (r"boom|\w+", NoLiterals::Absent),
            (r"(?:abc)?\d+", NoLiterals::Absent),
        ];
        for (pattern, why) in cases {
            assert_eq!(
                LiteralPlan::of(pattern),
                LiteralPlan::Unfiltered(why),
                "{pattern}"
            );
        }
    }
}
