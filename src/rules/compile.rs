//! Compiling and validating a ruleset: every pattern within its limits (SECURITY.md item 7), one
//! combined regex for the streaming pass, and the `rules check` of examples and counter-examples.

use std::collections::{HashMap, HashSet};

use std::sync::OnceLock;

use regex::{Regex, RegexBuilder};

use super::literals::LiteralPlan;
use super::spec::{ContextSpec, RuleFile, RuleSpec};
use super::{Category, Error};

/// Longest accepted pattern, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;
/// Most rules (failure rules plus context extractors) in one ruleset.
pub const MAX_RULES: usize = 2000;
/// Compiled size limit of one rule's regex.
const RULE_SIZE_LIMIT: usize = 1 << 20;

/// One pattern ready to match a cleaned line: its regex, compiled on first use for the (already
/// validated) built-in ruleset so start-up stays fast, and its literal plan, which the candidate
/// pass searches by and `rules check` reports on.
#[derive(Debug)]
pub(super) struct Matcher {
    id: String,
    pattern: String,
    re: OnceLock<Regex>,
    plan: LiteralPlan,
}

impl Matcher {
    fn new(id: &str, pattern: &str, eager: bool) -> Result<Matcher, Error> {
        let re = OnceLock::new();
        if eager {
            let _ = re.set(compile_pattern(id, pattern)?);
        }
        Ok(Matcher {
            id: id.to_owned(),
            pattern: pattern.to_owned(),
            re,
            plan: LiteralPlan::of(pattern),
        })
    }

    /// The compiled regex.
    pub fn regex(&self) -> &Regex {
        self.re.get_or_init(|| {
            compile_pattern(&self.id, &self.pattern).unwrap_or_else(|e| {
                tracing::error!("{e}");
                never_matches()
            })
        })
    }

    /// Whether the pattern has named captures.
    pub fn has_names(&self) -> bool {
        self.regex().capture_names().flatten().next().is_some()
    }
}

fn never_matches() -> Regex {
    #[allow(clippy::expect_used)]
    Regex::new("[^\\s\\S]").expect("a constant, valid pattern")
}

/// A failure rule ready to match.
#[derive(Debug)]
pub(super) struct CompiledRule {
    pub spec: RuleSpec,
    pub m: Matcher,
}

/// A context extractor ready to match.
#[derive(Debug)]
pub(super) struct CompiledContext {
    pub spec: ContextSpec,
    pub m: Matcher,
}

/// Which pattern of a ruleset the candidate pass and the matcher name: a failure rule or a
/// context extractor, each by its index in [`Ruleset`]'s list of that kind. Rules order before
/// contexts, so sorted ids visit rules first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PatternId {
    /// `Ruleset::rules[i]`.
    Rule(usize),
    /// `Ruleset::contexts[i]`.
    Context(usize),
}

/// A compiled ruleset: what the classifier runs.
#[derive(Debug)]
pub struct Ruleset {
    pub(super) rules: Vec<CompiledRule>,
    pub(super) contexts: Vec<CompiledContext>,
    pub(super) advice: HashMap<Category, Vec<String>>,
    /// The required literals of every pattern: finds candidate lines in raw chunks.
    pub(super) candidates: super::scan::Candidates<PatternId>,
    /// The learned fallback for lines no rule names, trained from these rules' examples the
    /// first time a log needs it ([`Ruleset::fallback`]): most logs have a rule for their root
    /// cause, and a one-shot `classify` should not pay for training it does not use.
    fallback: std::sync::OnceLock<super::fallback::Model>,
    /// The frameworks recognised in a log and their advice.
    pub(super) frameworks: super::framework::Catalog,
    /// Finds the failure line of a log no rule matched.
    pub(super) locator: super::locator::Locator,
}

/// One failed check of `rules check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    /// The rule id.
    pub id: String,
    /// What failed.
    pub message: String,
}

impl std::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule {}: {}", self.id, self.message)
    }
}

impl Ruleset {
    /// The shipped ruleset.
    pub fn builtin() -> Result<Ruleset, Error> {
        let file: RuleFile =
            toml::from_str(super::BUILTIN_RULES).map_err(|e| Error::Parse(e.to_string()))?;
        // Validated by the test suite and `rules check`; compile each regex on first use.
        Ruleset::build(file, false)
    }

    /// Parses and compiles a TOML ruleset.
    pub fn from_toml(text: &str) -> Result<Ruleset, Error> {
        let file: RuleFile = toml::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        Ruleset::compile(file)
    }

    /// Compiles a parsed ruleset, refusing bad ids and patterns with the rule's id.
    pub fn compile(file: RuleFile) -> Result<Ruleset, Error> {
        Ruleset::build(file, true)
    }

    pub(super) fn build(file: RuleFile, eager: bool) -> Result<Ruleset, Error> {
        let count = file.rule.len() + file.context.len();
        if count > MAX_RULES {
            return Err(Error::TooMany {
                count,
                limit: MAX_RULES,
            });
        }
        let mut seen = HashSet::new();
        let mut rules = Vec::with_capacity(file.rule.len());
        for spec in file.rule {
            check_id(&spec.id, &mut seen)?;
            if spec.specificity > 100 {
                return Err(Error::Id {
                    id: spec.id,
                    reason: "specificity must be between 0 and 100".into(),
                });
            }
            let m = Matcher::new(&spec.id, &spec.pattern, eager)?;
            rules.push(CompiledRule { spec, m });
        }
        let mut contexts = Vec::with_capacity(file.context.len());
        for spec in file.context {
            check_id(&spec.id, &mut seen)?;
            let m = Matcher::new(&spec.id, &spec.pattern, eager)?;
            contexts.push(CompiledContext { spec, m });
        }
        let rule_patterns = (rules.iter().enumerate())
            .map(|(i, r)| (PatternId::Rule(i), r.spec.pattern.as_str(), &r.m.plan));
        let context_patterns = (contexts.iter().enumerate())
            .map(|(i, c)| (PatternId::Context(i), c.spec.pattern.as_str(), &c.m.plan));
        let patterns: Vec<_> = rule_patterns.chain(context_patterns).collect();
        let candidates = candidate_regex(&patterns)?;
        let mut advice: HashMap<Category, Vec<String>> = HashMap::new();
        for a in file.advice {
            advice.entry(a.category).or_default().extend(a.steps);
        }
        Ok(Ruleset {
            rules,
            contexts,
            advice,
            candidates,
            fallback: std::sync::OnceLock::new(),
            frameworks: super::framework::Catalog::builtin(),
            locator: super::locator::Locator::builtin(),
        })
    }

    /// The learned fallback, trained from every rule of this set (built-in and a team's: so a
    /// team's rules teach it too, DESIGN.md section 4) on first use. Deterministic: the same
    /// rules give the same model.
    pub(super) fn fallback(&self) -> &super::fallback::Model {
        self.fallback
            .get_or_init(|| super::fallback::Model::train(self.rules.iter().map(|r| &r.spec)))
    }

    /// The matcher of one pattern.
    pub(super) fn matcher(&self, id: PatternId) -> &Matcher {
        match id {
            PatternId::Rule(i) => &self.rules[i].m,
            PatternId::Context(i) => &self.contexts[i].m,
        }
    }

    /// Number of failure rules.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Number of context extractors.
    pub fn context_count(&self) -> usize {
        self.contexts.len()
    }

    /// The specificity (0-100) of the failure rule with this id, if the ruleset has it: how two
    /// classifications' root causes compare (a reproduction's against its report's).
    pub fn specificity(&self, rule_id: &str) -> Option<u8> {
        self.rules
            .iter()
            .find(|r| r.spec.id == rule_id)
            .map(|r| r.spec.specificity)
    }

    /// Verifies every example matches its rule and no counter-example does; also that a rule
    /// without examples is reported (rules must be demonstrated on real lines), and one the
    /// candidate pass cannot prefilter, with the reason its literal plan gives.
    pub fn check(&self) -> Vec<CheckFailure> {
        let mut failures = Vec::new();
        let entries = self
            .rules
            .iter()
            .map(|r| (&r.spec.id, &r.m, &r.spec.examples, &r.spec.counter_examples))
            .chain(
                self.contexts
                    .iter()
                    .map(|c| (&c.spec.id, &c.m, &c.spec.examples, &c.spec.counter_examples)),
            );
        for (id, m, examples, counters) in entries {
            if let LiteralPlan::Unfiltered(why) = &m.plan {
                failures.push(CheckFailure {
                    id: id.clone(),
                    message: why.to_string(),
                });
            }
            if examples.is_empty() {
                failures.push(CheckFailure {
                    id: id.clone(),
                    message: "has no examples".into(),
                });
            }
            for ex in examples {
                let line = crate::ingest::normalize::clean_line(ex.as_bytes());
                if !m.regex().is_match(&line) || !self.candidates.is_match(ex.as_bytes()) {
                    failures.push(CheckFailure {
                        id: id.clone(),
                        message: format!("example does not match: {ex:?}"),
                    });
                }
            }
            for ex in counters {
                let line = crate::ingest::normalize::clean_line(ex.as_bytes());
                if m.regex().is_match(&line) {
                    failures.push(CheckFailure {
                        id: id.clone(),
                        message: format!("counter-example matches: {ex:?}"),
                    });
                }
            }
        }
        failures
    }
}

fn whole(reason: String) -> Error {
    Error::Pattern {
        id: "(combined ruleset)".into(),
        reason,
    }
}

/// The candidate pass over every pattern: see `scan`.
fn candidate_regex(
    patterns: &[(PatternId, &str, &LiteralPlan)],
) -> Result<super::scan::Candidates<PatternId>, Error> {
    super::scan::Candidates::new(patterns, strip_names).map_err(whole)
}

pub(super) fn check_id(id: &str, seen: &mut HashSet<String>) -> Result<(), Error> {
    let valid = !id.is_empty()
        && id.len() <= 100
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        return Err(Error::Id {
            id: id.to_owned(),
            reason: "ids are 1-100 characters of letters, digits, '.', '_' and '-'".into(),
        });
    }
    if !seen.insert(id.to_owned()) {
        return Err(Error::Id {
            id: id.to_owned(),
            reason: "duplicate id".into(),
        });
    }
    Ok(())
}

/// Compiles one rule's pattern within the limits.
pub(super) fn compile_pattern(id: &str, pattern: &str) -> Result<Regex, Error> {
    let refuse = |reason: String| Error::Pattern {
        id: id.to_owned(),
        reason,
    };
    if pattern.is_empty() {
        return Err(refuse("pattern is empty".into()));
    }
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(refuse(format!(
            "pattern is {} bytes; at most {MAX_PATTERN_LEN} are allowed",
            pattern.len()
        )));
    }
    if pattern.starts_with('^') {
        return Err(refuse(
            "patterns match anywhere in a line; a leading '^' would miss lines with CI \
             timestamps or rank prefixes"
                .into(),
        ));
    }
    let re = RegexBuilder::new(pattern)
        .size_limit(RULE_SIZE_LIMIT)
        .dfa_size_limit(RULE_SIZE_LIMIT)
        .build()
        .map_err(|e| refuse(first_line(&e.to_string())))?;
    if re.is_match("") {
        return Err(refuse(
            "pattern matches the empty string, so it matches every line".into(),
        ));
    }
    Ok(re)
}

fn first_line(s: &str) -> String {
    let lines: Vec<&str> = s
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join(" ")
}

/// Turns `(?P<name>` and `(?<name>` into `(?:` so patterns can share one alternation (capture
/// names must be unique in a regex). Escaped parentheses and character classes are left alone.
fn strip_names(pattern: &str) -> String {
    let b = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len());
    let mut i = 0;
    let mut in_class = 0usize;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' {
            // Copy the escape and the escaped character verbatim.
            let end = (i + 2).min(b.len());
            let end = next_char_boundary(pattern, end);
            out.push_str(&pattern[i..end]);
            i = end;
            continue;
        }
        if c == b'[' {
            in_class += 1;
        } else if c == b']' && in_class > 0 {
            in_class -= 1;
        } else if c == b'(' && in_class == 0 {
            let rest = &pattern[i..];
            let name_start = if rest.starts_with("(?P<") {
                Some(4)
            } else if rest.starts_with("(?<")
                && !rest.starts_with("(?<=")
                && !rest.starts_with("(?<!")
            {
                Some(3)
            } else {
                None
            };
            if let Some(skip) = name_start
                && let Some(close) = rest[skip..].find('>')
            {
                out.push_str("(?:");
                i += skip + close + 1;
                continue;
            }
        }
        let end = next_char_boundary(pattern, i + 1);
        out.push_str(&pattern[i..end]);
        i = end;
    }
    out
}

fn next_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i.min(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stripped_for_the_combined_regex() {
        let cases = [
            ("(?P<a>x)(?<b>y)", "(?:x)(?:y)"),
            (r"\(?P<a>", r"\(?P<a>"),
            ("[(?P<a>]", "[(?P<a>]"),
            ("(?<=x)(?<!y)", "(?<=x)(?<!y)"),
            ("é(?P<n>ü)", "é(?:ü)"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_names(input), want);
        }
    }

    #[test]
    fn hostile_and_bad_patterns_are_refused_with_the_rule_id() {
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        let cases = [
            ("(unclosed", "unclosed"),
            (long.as_str(), "at most"),
            ("a{1000}{1000}", "size limit"),
            ("^RuntimeError", "leading '^'"),
            ("x*", "empty string"),
        ];
        for (pattern, want) in cases {
            let err = compile_pattern("team.rule", pattern).err();
            let msg = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.starts_with("rule team.rule: "), "{pattern}: {msg}");
            assert!(msg.contains(want), "{pattern}: {msg}");
        }
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let toml = r#"
            [[rule]]
            id = "a"
            category = "unknown"
            title = "A"
            pattern = "boom"
            [[rule]]
            id = "a"
            category = "unknown"
            title = "B"
            pattern = "bang"
        "#;
        let err = Ruleset::from_toml(toml).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("rule a: duplicate id"));
    }

    #[test]
    fn check_reports_examples_and_counter_examples() {
        let toml = r#"
            [[rule]]
            id = "t.x"
            category = "unknown"
            title = "X"
            pattern = "XError: (?P<what>\\w+)"
            examples = ["XError: yes", "no match here"]
            counter_examples = ["XError: oops"]
        "#;
        let rs = Ruleset::from_toml(toml).expect("compiles");
        let failures: Vec<String> = rs.check().iter().map(ToString::to_string).collect();
        assert_eq!(
            failures,
            vec![
                "rule t.x: example does not match: \"no match here\"".to_owned(),
                "rule t.x: counter-example matches: \"XError: oops\"".to_owned(),
            ]
        );
    }

    #[test]
    fn the_check_and_the_candidate_pass_give_one_verdict_from_one_literal_plan() {
        let ruleset = |pattern: &str, example: &str| {
            let toml = format!(
                "[[rule]]\nid = 't.x'\ncategory = 'unknown'\ntitle = 'X'\n\
                 pattern = '{pattern}'\nexamples = ['{example}']\n"
            );
            Ruleset::from_toml(&toml).expect("compiles")
        };
        let unrelated = b"step 12 loss 0.25".as_slice();
        // No literal start, but every match holds `Error: CUDA error: misaligned address`: the
        // check used to call it slow while the candidate pass searched for that text.
        let fast = ruleset(
            r"\w+Error: CUDA error: misaligned address",
            "RuntimeError: CUDA error: misaligned address",
        );
        assert_eq!(fast.check(), Vec::new());
        assert!(fast.candidates.patterns_for(unrelated).is_empty());
        // No usable literal at all: the pass tries it on every line, and the check says so with
        // the reason the plan gives.
        let slow = ruleset("(a*)*b", "aab");
        let plan = LiteralPlan::of("(a*)*b");
        let LiteralPlan::Unfiltered(why) = &plan else {
            panic!("{plan:?}")
        };
        let messages: Vec<String> = slow.check().into_iter().map(|f| f.message).collect();
        assert_eq!(messages, vec![why.to_string()]);
        assert!(messages[0].contains("does not start with literal text"));
        assert_eq!(
            slow.candidates.patterns_for(unrelated),
            vec![PatternId::Rule(0)]
        );
    }

    #[test]
    fn the_builtin_ruleset_compiles_and_passes_its_own_checks() {
        let rs = Ruleset::builtin().expect("builtin compiles");
        assert!(rs.rule_count() >= 30, "{} rules", rs.rule_count());
        let failures: Vec<String> = rs.check().iter().map(ToString::to_string).collect();
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
