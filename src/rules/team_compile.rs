//! Team rules: rules a deployment adds in the portal (stored in PostgreSQL, same fields as
//! `builtin.toml`), merged with the shipped ruleset. Built-in rules can be overridden (a team
//! spec with the built-in id replaces it) or disabled by id. Everything here is pure: storage
//! hands in the entries, this module validates them and compiles the merged ruleset.

use std::collections::HashSet;

use super::compile::compile_pattern;
use super::facts::{FactKind, Facts};
use super::literals::LiteralPlan;
use super::spec::{RuleFile, RuleSpec};
use super::{Error, Ruleset};

/// Most team entries (rules and overrides) one deployment may store (SECURITY.md item 7).
pub const MAX_TEAM_RULES: usize = 1000;
/// Most examples plus counter-examples per team rule, and the longest one.
pub const MAX_EXAMPLES: usize = 50;
/// Longest example line, in bytes.
pub const MAX_EXAMPLE_LEN: usize = 4096;
/// Longest title, and longest advice step, in bytes.
pub const MAX_TEXT_LEN: usize = 2000;

/// One stored team entry as the engine sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamEntry {
    /// The rule id (a built-in id makes this an override of that rule).
    pub id: String,
    /// The rule; `None` for a built-in rule disabled without replacing it.
    pub spec: Option<RuleSpec>,
    /// Disabled entries take no part in matching (a disabled override disables the built-in).
    pub enabled: bool,
}

/// The shipped ruleset as data.
pub fn builtin_file() -> Result<RuleFile, Error> {
    toml::from_str(super::BUILTIN_RULES).map_err(|e| Error::Parse(e.to_string()))
}

/// The ids of the shipped failure rules and context extractors.
pub fn builtin_ids(builtin: &RuleFile) -> HashSet<&str> {
    builtin
        .rule
        .iter()
        .map(|r| r.id.as_str())
        .chain(builtin.context.iter().map(|c| c.id.as_str()))
        .collect()
}

/// The effective rule file: built-in rules (overridden or left out as the entries say), then
/// enabled team rules in the given order. Contexts and category advice stay built-in.
pub fn merge(builtin: &RuleFile, team: &[TeamEntry]) -> RuleFile {
    let mut file = RuleFile {
        rule: Vec::with_capacity(builtin.rule.len() + team.len()),
        context: builtin.context.clone(),
        advice: builtin.advice.clone(),
    };
    for rule in &builtin.rule {
        match team.iter().find(|e| e.id == rule.id) {
            Some(e) if !e.enabled => {}
            // An override keeps what the message is, which the portal form does not carry:
            // where it comes from (unless the team names a source) and whether it is another
            // process's consequence.
            Some(TeamEntry {
                spec: Some(spec), ..
            }) => file.rule.push(RuleSpec {
                id: rule.id.clone(),
                source: if spec.source.is_empty() {
                    rule.source.clone()
                } else {
                    spec.source.clone()
                },
                consequence: spec.consequence || rule.consequence,
                kind: None,
                ..spec.clone()
            }),
            _ => file.rule.push(rule.clone()),
        }
    }
    let ids = builtin_ids(builtin);
    for e in team {
        if let (true, Some(spec), false) = (e.enabled, &e.spec, ids.contains(e.id.as_str())) {
            file.rule.push(spec.clone());
        }
    }
    file
}

/// Compiles the built-in ruleset with the team's entries. Every enabled team rule is validated
/// eagerly (pattern limits, examples), so a bad entry is refused with its id; built-in patterns compile
/// on first use as in [`Ruleset::builtin`].
pub fn compile_with_team(builtin: &RuleFile, team: &[TeamEntry]) -> Result<Ruleset, Error> {
    compile_team(builtin, team, true)
}

/// Like [`compile_with_team`], but a team rule only needs its pattern to compile within the
/// limits (its examples may fail): what a dry run measures before the rule is fixed.
pub fn compile_unchecked(builtin: &RuleFile, team: &[TeamEntry]) -> Result<Ruleset, Error> {
    compile_team(builtin, team, false)
}

fn compile_team(builtin: &RuleFile, team: &[TeamEntry], checked: bool) -> Result<Ruleset, Error> {
    if team.len() > MAX_TEAM_RULES {
        return Err(Error::TooMany {
            count: team.len(),
            limit: MAX_TEAM_RULES,
        });
    }
    for e in team {
        if let Some(spec) = &e.spec {
            if spec.id != e.id {
                return Err(Error::Id {
                    id: e.id.clone(),
                    reason: format!("the rule inside is named {:?}", spec.id),
                });
            }
            // Disabled entries take no part in matching, so a stored one that newer limits
            // refuse does not stop the ruleset loading; writes validate them (see `save`).
            if e.enabled && checked {
                validate_rule(spec)?;
            } else if e.enabled {
                check_fields(spec)?;
                compile_pattern(&spec.id, &spec.pattern)?;
            }
        }
    }
    Ruleset::build(merge(builtin, team), false)
}

/// How one example or counter-example fared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleResult {
    /// The line.
    pub line: String,
    /// Whether the rule should match it (example) or not (counter-example).
    pub should_match: bool,
    /// Whether the rule, run through the whole engine, found it.
    pub matched: bool,
    /// The rule's named captures on the line, in the order the engine records them (empty
    /// when it does not match).
    pub captures: Vec<Captured>,
    /// The typed facts a classification records from the line (sizes in bytes, dtypes and
    /// devices normalized), as the report page would show them.
    pub facts: Facts,
}

/// One named capture of an example line, and the fact it feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The group's name as the pattern spells it (`device_2`).
    pub name: String,
    /// The text it captured.
    pub value: String,
    /// The typed fact it feeds; `None` when it only fills advice placeholders (`{code}`).
    pub fact: Option<FactKind>,
}

impl ExampleResult {
    /// The example behaved as declared.
    pub fn ok(&self) -> bool {
        self.should_match == self.matched
    }
}

/// A rule checked on its own: the first refusal (pattern, id, limits), or its examples' results
/// and the `rules check` failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCheck {
    /// Examples then counter-examples, each run through the engine.
    pub examples: Vec<ExampleResult>,
    /// What `rules check` says is wrong (empty when the rule may be saved).
    pub problems: Vec<String>,
    /// The pattern's named groups, in pattern order, and the fact each feeds (`None`: it only
    /// fills advice placeholders).
    pub groups: Vec<(String, Option<FactKind>)>,
}

/// Checks one rule: fields within limits, the pattern compiles within the size limits, has
/// fixed text the streaming prefilter can search for (the candidate pass's own [`LiteralPlan`]),
/// has examples, every example matches and no counter-example does.
pub fn check_rule(spec: &RuleSpec) -> Result<RuleCheck, Error> {
    check_fields(spec)?;
    let groups = compile_pattern(&spec.id, &spec.pattern)?
        .capture_names()
        .flatten()
        .map(|name| (name.to_owned(), FactKind::of_capture(name)))
        .collect();
    if let LiteralPlan::Unfiltered(why) = LiteralPlan::of(&spec.pattern) {
        // Without required literals the pattern joins the slow search every log line goes
        // through: one such rule costs every upload, so it is refused like an oversize one.
        return Err(Error::Pattern {
            id: spec.id.clone(),
            reason: why.to_string(),
        });
    }
    let alone = Ruleset::compile(RuleFile {
        rule: vec![spec.clone()],
        ..RuleFile::default()
    })?;
    let problems = alone.check().into_iter().map(|f| f.message).collect();
    let run = |line: &String, should_match: bool| {
        let classified = alone.classify_bytes("-", line.as_bytes());
        let matched = classified.findings.iter().any(|f| f.rule == spec.id);
        let captures = if matched {
            alone.line_captures(&spec.id, line).unwrap_or_default()
        } else {
            Vec::new()
        };
        ExampleResult {
            line: line.clone(),
            should_match,
            matched,
            captures: captures
                .into_iter()
                .map(|(name, value)| Captured {
                    fact: FactKind::of_capture(&name),
                    name,
                    value,
                })
                .collect(),
            facts: if matched {
                classified.facts
            } else {
                Facts::default()
            },
        }
    };
    let examples = spec
        .examples
        .iter()
        .map(|l| run(l, true))
        .chain(spec.counter_examples.iter().map(|l| run(l, false)))
        .collect();
    Ok(RuleCheck {
        examples,
        problems,
        groups,
    })
}

/// [`check_rule`], with any problem turned into an error naming the rule.
pub fn validate_rule(spec: &RuleSpec) -> Result<(), Error> {
    let check = check_rule(spec)?;
    match check.problems.first() {
        None => Ok(()),
        Some(p) => Err(Error::Check {
            id: spec.id.clone(),
            reason: p.clone(),
        }),
    }
}

fn check_fields(spec: &RuleSpec) -> Result<(), Error> {
    let refuse = |reason: String| Error::Check {
        id: spec.id.clone(),
        reason,
    };
    super::compile::check_id(&spec.id, &mut HashSet::new())?;
    if spec.title.trim().is_empty() || spec.title.len() > MAX_TEXT_LEN {
        return Err(refuse(format!(
            "the title must be 1 to {MAX_TEXT_LEN} bytes"
        )));
    }
    if spec.specificity > 100 {
        return Err(refuse("specificity must be between 0 and 100".into()));
    }
    if spec.advice.len() > 20 || spec.advice.iter().any(|a| a.len() > MAX_TEXT_LEN) {
        return Err(refuse(format!(
            "at most 20 advice steps of at most {MAX_TEXT_LEN} bytes each"
        )));
    }
    let lines = spec.examples.iter().chain(&spec.counter_examples);
    if spec.examples.len() + spec.counter_examples.len() > MAX_EXAMPLES
        || lines.clone().any(|l| l.len() > MAX_EXAMPLE_LEN)
    {
        return Err(refuse(format!(
            "at most {MAX_EXAMPLES} examples and counter-examples of at most \
             {MAX_EXAMPLE_LEN} bytes each"
        )));
    }
    if lines.clone().any(|l| l.contains('\n')) {
        return Err(refuse("examples are single lines".into()));
    }
    // PostgreSQL refuses NUL in text, and no message needs a control character spelled raw (a
    // pattern says `\x00` or `\t` instead).
    let texts = [&spec.title, &spec.source, &spec.pattern]
        .into_iter()
        .chain(&spec.advice)
        .chain(lines);
    for text in texts {
        if text.chars().any(|c| c.is_control() && c != '\t') {
            return Err(refuse(
                "text fields must not contain a control character (NUL, bell, escape...): \
                 write it as a regex escape such as \\x00 in the pattern"
                    .into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Category;

    fn spec(id: &str, pattern: &str, examples: &[&str]) -> RuleSpec {
        RuleSpec {
            id: id.into(),
            category: Category::LibraryError,
            title: "My kernel failed".into(),
            source: String::new(),
            pattern: pattern.into(),
            specificity: 90,
            consequence: false,
            kind: None,
            advice: vec!["Check code {code}.".into()],
            examples: examples.iter().map(|s| (*s).to_owned()).collect(),
            counter_examples: vec!["MyKernel started".into()],
        }
    }

    fn entry(s: RuleSpec) -> TeamEntry {
        TeamEntry {
            id: s.id.clone(),
            spec: Some(s),
            enabled: true,
        }
    }

    #[test]
    fn a_team_rule_classifies_what_the_builtin_set_does_not_know() {
        let builtin = builtin_file().expect("builtin parses");
        let log = "step 1\nMyKernel failed: code 77\n";
        let plain = Ruleset::builtin()
            .expect("builtin")
            .classify_bytes("-", log.as_bytes());
        assert_eq!(plain.category, Category::Unknown);
        let team = [entry(spec(
            "team.mykernel",
            r"MyKernel failed: code (?P<code>\d+)",
            &["MyKernel failed: code 3"],
        ))];
        let rs = compile_with_team(&builtin, &team).expect("compiles");
        let c = rs.classify_bytes("-", log.as_bytes());
        assert_eq!(c.category, Category::LibraryError);
        assert_eq!(
            c.root_cause.map(|r| r.rule).as_deref(),
            Some("team.mykernel")
        );
        assert!(c.next_steps.contains(&"Check code 77.".to_owned()));
    }

    #[test]
    fn builtin_rules_are_overridden_or_disabled_by_id() {
        let builtin = builtin_file().expect("builtin parses");
        let log = b"RuntimeError: CUDA error: an illegal memory access was encountered\n";
        let base = Ruleset::builtin()
            .expect("builtin")
            .classify_bytes("-", log);
        let id = base.root_cause.expect("builtin hit").rule;
        let original = builtin
            .rule
            .iter()
            .find(|r| r.id == id)
            .expect("rule")
            .clone();
        let overridden = TeamEntry {
            id: id.clone(),
            spec: Some(RuleSpec {
                category: Category::DriverIssue,
                ..original.clone()
            }),
            enabled: true,
        };
        let rs = compile_with_team(&builtin, &[overridden]).expect("compiles");
        let c = rs.classify_bytes("-", log);
        assert_eq!(c.category, Category::DriverIssue);
        assert_eq!(rs.rule_count(), builtin.rule.len());
        let disabled = TeamEntry {
            id: id.clone(),
            spec: None,
            enabled: false,
        };
        let rs = compile_with_team(&builtin, &[disabled]).expect("compiles");
        assert_eq!(rs.rule_count(), builtin.rule.len() - 1);
        let c = rs.classify_bytes("-", log);
        assert!(c.findings.iter().all(|f| f.rule != id), "{:?}", c.findings);
    }

    #[test]
    fn an_override_from_a_form_keeps_the_builtin_source_and_consequence() {
        let builtin = builtin_file().expect("builtin parses");
        let original = builtin
            .rule
            .iter()
            .find(|r| r.consequence)
            .expect("a consequence rule")
            .clone();
        // What the portal form writes: no source, no consequence flag.
        let from_form = TeamEntry {
            id: original.id.clone(),
            spec: Some(RuleSpec {
                title: "Our cluster's collective timeout".into(),
                source: String::new(),
                consequence: false,
                kind: None,
                ..original.clone()
            }),
            enabled: true,
        };
        let merged = merge(&builtin, &[from_form]);
        let rule = merged
            .rule
            .iter()
            .find(|r| r.id == original.id)
            .expect("kept");
        assert_eq!(rule.title, "Our cluster's collective timeout");
        assert_eq!(rule.source, original.source);
        assert!(rule.consequence);
    }

    #[test]
    fn bad_team_rules_are_refused_with_the_reason() {
        let long = format!("MyKernel {}", "a".repeat(100 << 10));
        let cases: &[(&str, &[&str], &str)] = &[
            ("(a*)*b", &["aab"], "literal text"),
            (&long, &["x"], "at most 1024"),
            ("a{1000}{1000}", &["a"], "size limit"),
            ("(unclosed", &["x"], "unclosed"),
            ("MyKernel failed", &[], "no examples"),
            (
                "MyKernel failed",
                &["MyKernel ok"],
                "example does not match",
            ),
            ("MyKernel", &["MyKernel failed"], "counter-example matches"),
        ];
        for (pattern, examples, want) in cases {
            let err = validate_rule(&spec("team.bad", pattern, examples))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.starts_with("rule team.bad: "), "{pattern}: {err}");
            assert!(err.contains(want), "{pattern}: want {want:?}, got {err}");
        }
    }

    #[test]
    fn a_rule_the_prefilter_can_search_is_accepted_without_a_literal_start() {
        // Every match holds `Error: MyKernel failed`, which the candidate pass searches for.
        let s = spec(
            "team.any_error",
            r"\w+Error: MyKernel failed",
            &["RuntimeError: MyKernel failed"],
        );
        assert!(validate_rule(&s).is_ok(), "{:?}", validate_rule(&s));
    }

    #[test]
    fn example_results_say_which_lines_matched() {
        let s = spec(
            "team.k",
            r"MyKernel failed: code (?P<code>\d+)",
            &["MyKernel failed: code 1", "MyKernel failed badly"],
        );
        let check = check_rule(&s).expect("compiles");
        let got: Vec<(bool, bool)> = check
            .examples
            .iter()
            .map(|e| (e.should_match, e.matched))
            .collect();
        assert_eq!(got, vec![(true, true), (true, false), (false, false)]);
        assert_eq!(check.problems.len(), 1, "{:?}", check.problems);
    }

    #[test]
    fn example_results_carry_the_captures_and_the_typed_facts_they_give() {
        let s = spec(
            "team.oom",
            r"MyAlloc failed: (?P<requested>[\d.]+ [KMG]iB) on (?P<device>cuda:\d+) \(code (?P<code>\d+)\)",
            &["[rank3]: MyAlloc failed: 86.00 MiB on cuda:1 (code 7)"],
        );
        let check = check_rule(&s).expect("compiles");
        let e = &check.examples[0];
        assert!(e.matched, "{e:?}");
        let got: Vec<(&str, &str, Option<FactKind>)> = e
            .captures
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_str(), c.fact))
            .collect();
        assert_eq!(
            got,
            vec![
                ("requested", "86.00 MiB", Some(FactKind::Requested)),
                ("device", "cuda:1", Some(FactKind::Device)),
                ("code", "7", None),
            ]
        );
        assert_eq!(e.facts.memory.requested_bytes, Some(90_177_536));
        assert_eq!(e.facts.devices, ["cuda:1"]);
        assert_eq!(
            check.groups,
            vec![
                ("requested".to_owned(), Some(FactKind::Requested)),
                ("device".to_owned(), Some(FactKind::Device)),
                ("code".to_owned(), None),
            ]
        );
        // A counter-example that does not match captures nothing.
        let s = spec(
            "team.k",
            r"MyKernel failed: code (?P<code>\d+)",
            &["MyKernel failed: code 1"],
        );
        let check = check_rule(&s).expect("compiles");
        assert!(
            check
                .examples
                .iter()
                .all(|e| e.matched != e.captures.is_empty())
        );
    }

    #[test]
    fn too_many_team_rules_are_refused() {
        let builtin = builtin_file().expect("builtin parses");
        let team: Vec<TeamEntry> = (0..=MAX_TEAM_RULES)
            .map(|i| TeamEntry {
                id: format!("t.{i}"),
                spec: None,
                enabled: false,
            })
            .collect();
        let err = compile_with_team(&builtin, &team)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("ruleset has 1001 rules; at most 1000 are allowed")
        );
    }
}
