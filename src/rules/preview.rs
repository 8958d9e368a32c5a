//! The dry run of a rule before it is saved: the same logs classified by the current ruleset
//! and by the ruleset with the candidate rule, and what changes. Pure: callers feed the logs
//! (stored reports, labelled corpus cases) and read the tallies.

use serde::Serialize;

use super::{Category, Classification, Ruleset};

/// One log classified before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// Category with the current rules.
    pub before: Category,
    /// Category with the candidate rule.
    pub after: Category,
    /// The candidate's id is among the findings with the current rules (an edited rule).
    pub hit_before: bool,
    /// The candidate's id is among the findings with the candidate rule.
    pub hit_after: bool,
    /// The candidate rule names the root cause.
    pub root_after: bool,
    /// The candidate's pattern matches a line of the log, whether or not it takes part in the
    /// classification (a line keeps only its most specific rule's finding).
    pub text_hit: bool,
}

/// What a dry run compares: the ruleset in use, the same with the candidate rule, and the
/// candidate alone (to see where its pattern matches even when other rules outrank it).
#[derive(Clone, Copy)]
pub struct Candidate<'a> {
    pub before: &'a Ruleset,
    pub after: &'a Ruleset,
    pub alone: &'a Ruleset,
    pub rule_id: &'a str,
}

impl Candidate<'_> {
    /// Classifies `log` with each ruleset and compares what the candidate does.
    pub fn compare(&self, log: &[u8]) -> Comparison {
        let b = self.before.classify_bytes("-", log);
        let a = self.after.classify_bytes("-", log);
        let hit_after = names(&a, self.rule_id);
        Comparison {
            before: b.category,
            after: a.category,
            hit_before: names(&b, self.rule_id),
            hit_after,
            root_after: a
                .root_cause
                .as_ref()
                .is_some_and(|r| r.rule == self.rule_id),
            text_hit: hit_after || names(&self.alone.classify_bytes("-", log), self.rule_id),
        }
    }
}

fn names(c: &Classification, rule_id: &str) -> bool {
    c.findings.iter().any(|f| f.rule == rule_id)
}

/// Splits `(id, size)` items, in order, into runs whose sizes add up to at most `budget`
/// (an item larger than the budget goes alone), so a dry run holds one batch of logs at a time.
pub fn batches_by_size(items: &[(i64, i64)], budget: i64) -> Vec<Vec<i64>> {
    let mut out: Vec<Vec<i64>> = Vec::new();
    let mut used = 0i64;
    for &(id, size) in items {
        match out.last_mut() {
            Some(batch) if used.saturating_add(size) <= budget => {
                batch.push(id);
                used = used.saturating_add(size);
            }
            _ => {
                out.push(vec![id]);
                used = size;
            }
        }
    }
    out
}

/// The dry run over stored reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReportsDryRun {
    /// Reports classified (at most the scan cap, newest first).
    pub scanned: usize,
    /// Reports stored in all.
    pub stored: i64,
    /// Reports the rule matches with the candidate and did not before.
    pub newly_matched: usize,
    /// Reports the rule matches with the candidate (new or not).
    pub matched: usize,
    /// Reports the rule names now and would not with the candidate (an edit that narrows it,
    /// or the rule disabled).
    pub no_longer_matched: usize,
    /// Reports whose category would change.
    pub category_changed: usize,
    /// Reports where the pattern matches a line that more specific rules already name, so the
    /// rule changes nothing there.
    pub shadowed: usize,
    /// Up to [`MAX_SAMPLES`] changed reports: (report id, before, after).
    pub changed: Vec<(i64, Category, Category)>,
}

/// Changed reports listed by id in a dry run.
pub const MAX_SAMPLES: usize = 20;

impl ReportsDryRun {
    /// Adds one report's comparison.
    pub fn add(&mut self, report_id: i64, c: &Comparison) {
        self.scanned += 1;
        if c.hit_after {
            self.matched += 1;
            if !c.hit_before {
                self.newly_matched += 1;
            }
        } else if c.text_hit {
            self.shadowed += 1;
        }
        if c.hit_before && !c.hit_after {
            self.no_longer_matched += 1;
        }
        if c.before != c.after {
            self.category_changed += 1;
            if self.changed.len() < MAX_SAMPLES {
                self.changed.push((report_id, c.before, c.after));
            }
        }
    }

    /// Not every stored report was scanned.
    pub fn capped(&self) -> bool {
        (self.scanned as i64) < self.stored
    }
}

/// The dry run over a labelled corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CorpusDryRun {
    /// Cases classified.
    pub cases: usize,
    /// Cases classified right with the current rules.
    pub correct_before: usize,
    /// Cases classified right with the candidate rule.
    pub correct_after: usize,
    /// Cases the candidate rule matches anywhere.
    pub rule_matched: usize,
    /// Cases where the candidate names the root cause.
    pub rule_root: usize,
    /// Of those, cases labelled with the rule's category.
    pub rule_root_correct: usize,
}

impl CorpusDryRun {
    /// Adds one labelled case's comparison; `category` is the candidate rule's category.
    pub fn add(&mut self, label: Category, category: Category, c: &Comparison) {
        self.cases += 1;
        self.correct_before += usize::from(c.before == label);
        self.correct_after += usize::from(c.after == label);
        self.rule_matched += usize::from(c.hit_after);
        if c.root_after {
            self.rule_root += 1;
            self.rule_root_correct += usize::from(label == category);
        }
    }

    /// Precision of the rule as a root cause, in percent (`None` when it never is one).
    pub fn precision(&self) -> Option<f64> {
        (self.rule_root > 0).then(|| pct(self.rule_root_correct, self.rule_root))
    }

    /// Corpus accuracy with the current rules, in percent.
    pub fn accuracy_before(&self) -> f64 {
        pct(self.correct_before, self.cases)
    }

    /// Corpus accuracy with the candidate rule, in percent.
    pub fn accuracy_after(&self) -> f64 {
        pct(self.correct_after, self.cases)
    }

    /// The candidate classifies fewer cases right than the current rules.
    pub fn lowers_accuracy(&self) -> bool {
        self.correct_after < self.correct_before
    }
}

fn pct(ok: usize, n: usize) -> f64 {
    if n == 0 {
        100.0
    } else {
        ok as f64 * 100.0 / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::spec::RuleSpec;
    use crate::rules::team_compile::{TeamEntry, builtin_file, compile_with_team};

    fn with_rule(pattern: &str, example: &str, category: Category) -> Ruleset {
        with_rule_at(pattern, example, category, 99)
    }

    fn with_rule_at(pattern: &str, example: &str, category: Category, specificity: u8) -> Ruleset {
        let spec = RuleSpec {
            id: "team.x".into(),
            category,
            title: "X".into(),
            source: String::new(),
            pattern: pattern.into(),
            specificity,
            consequence: false,
            kind: None,
            advice: vec![],
            examples: vec![example.into()],
            counter_examples: vec![],
        };
        let entry = TeamEntry {
            id: spec.id.clone(),
            spec: Some(spec),
            enabled: true,
        };
        compile_with_team(&builtin_file().expect("builtin"), &[entry]).expect("compiles")
    }

    fn alone(pattern: &str, category: Category) -> Ruleset {
        Ruleset::compile(crate::rules::spec::RuleFile {
            rule: vec![RuleSpec {
                id: "team.x".into(),
                category,
                title: "X".into(),
                source: String::new(),
                pattern: pattern.into(),
                specificity: 99,
                consequence: false,
                kind: None,
                advice: vec![],
                examples: vec![],
                counter_examples: vec![],
            }],
            ..crate::rules::spec::RuleFile::default()
        })
        .expect("compiles")
    }

    #[test]
    fn a_pattern_that_more_specific_rules_outrank_counts_as_shadowed() {
        let before = Ruleset::builtin().expect("builtin");
        let after = with_rule_at("illegal memory", "an illegal memory", Category::Unknown, 1);
        let only = alone("illegal memory", Category::Unknown);
        let candidate = Candidate {
            before: &before,
            after: &after,
            alone: &only,
            rule_id: "team.x",
        };
        let mut reports = ReportsDryRun::default();
        let log = b"RuntimeError: CUDA error: an illegal memory access was encountered\n";
        let c = candidate.compare(log);
        reports.add(1, &c);
        assert!(c.text_hit && !c.hit_after, "{c:?}");
        assert_eq!((reports.matched, reports.shadowed), (0, 1));
        reports.add(2, &candidate.compare(b"nothing here\n"));
        assert_eq!((reports.matched, reports.shadowed), (0, 1));
    }

    #[test]
    fn tallies_count_new_matches_category_changes_and_precision() {
        let before = Ruleset::builtin().expect("builtin");
        let after = with_rule("FancyOp blew up", "FancyOp blew up", Category::NcclError);
        let only = alone("FancyOp blew up", Category::NcclError);
        let candidate = Candidate {
            before: &before,
            after: &after,
            alone: &only,
            rule_id: "team.x",
        };
        // (log, label)
        let logs: [(&[u8], Category); 4] = [
            (b"ok\nFancyOp blew up\n", Category::NcclError),
            (b"FancyOp blew up\n", Category::OutOfMemory),
            (
                b"RuntimeError: CUDA error: an illegal memory access was encountered\n",
                Category::IllegalMemoryAccess,
            ),
            (b"nothing here\n", Category::Unknown),
        ];
        let mut reports = ReportsDryRun {
            stored: 10,
            ..ReportsDryRun::default()
        };
        let mut corpus = CorpusDryRun::default();
        for (i, (log, label)) in logs.iter().enumerate() {
            let c = candidate.compare(log);
            reports.add(i as i64 + 1, &c);
            corpus.add(*label, Category::NcclError, &c);
        }
        assert_eq!(reports.scanned, 4);
        assert_eq!(reports.newly_matched, 2);
        assert_eq!(reports.category_changed, 2);
        assert_eq!(
            reports.changed,
            vec![
                (1, Category::Unknown, Category::NcclError),
                (2, Category::Unknown, Category::NcclError)
            ]
        );
        assert!(reports.capped());
        assert_eq!(corpus.cases, 4);
        assert_eq!(corpus.correct_before, 2);
        assert_eq!(corpus.correct_after, 3);
        assert_eq!(corpus.rule_root, 2);
        assert_eq!(corpus.precision(), Some(50.0));
        assert!(!corpus.lowers_accuracy());
    }

    #[test]
    fn a_rule_that_steals_the_root_cause_lowers_accuracy() {
        let before = Ruleset::builtin().expect("builtin");
        let log = b"RuntimeError: CUDA error: an illegal memory access was encountered\n";
        let after = with_rule(
            "illegal memory access",
            "an illegal memory access",
            Category::OutOfMemory,
        );
        let only = alone("illegal memory access", Category::OutOfMemory);
        let c = Candidate {
            before: &before,
            after: &after,
            alone: &only,
            rule_id: "team.x",
        }
        .compare(log);
        let mut corpus = CorpusDryRun::default();
        corpus.add(Category::IllegalMemoryAccess, Category::OutOfMemory, &c);
        assert!(corpus.lowers_accuracy());
        assert_eq!(corpus.precision(), Some(0.0));
    }

    #[test]
    fn disabling_a_rule_counts_the_reports_it_stops_matching() {
        let before = Ruleset::builtin().expect("builtin");
        let entry = TeamEntry {
            id: "cuda.illegal_address".into(),
            spec: None,
            enabled: false,
        };
        let after =
            compile_with_team(&builtin_file().expect("builtin"), &[entry]).expect("compiles");
        let nothing = Ruleset::compile(crate::rules::spec::RuleFile::default()).expect("empty");
        let candidate = Candidate {
            before: &before,
            after: &after,
            alone: &nothing,
            rule_id: "cuda.illegal_address",
        };
        let mut reports = ReportsDryRun::default();
        let log = b"RuntimeError: CUDA error: an illegal memory access was encountered\n";
        reports.add(1, &candidate.compare(log));
        reports.add(2, &candidate.compare(b"nothing here\n"));
        assert_eq!(
            (reports.no_longer_matched, reports.matched, reports.shadowed),
            (1, 0, 0)
        );
        // The line is still an illegal memory access to the learned fallback, which knows the
        // family from the other rules' examples: the category stays, as `likely`.
        assert_eq!(reports.category_changed, 0);
        let c = after.classify_bytes("-", log);
        assert_eq!(c.category, Category::IllegalMemoryAccess);
        assert_eq!(c.confidence, crate::rules::Confidence::Likely);
    }

    #[test]
    fn batches_keep_order_and_stay_within_the_budget() {
        let items = [(9, 40), (8, 50), (7, 20), (6, 500), (5, 1), (4, 99), (3, 1)];
        assert_eq!(
            batches_by_size(&items, 100),
            vec![vec![9, 8], vec![7], vec![6], vec![5, 4], vec![3]]
        );
        assert!(batches_by_size(&[], 100).is_empty());
    }
}
