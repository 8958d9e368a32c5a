//! The last step of a classification, after the rules ranked their hits: the learned fallback's
//! category for a root-cause line no rule names (layer 3 of DESIGN.md section 4), the framework
//! the log comes from, and next steps fitted to it.
//!
//! Kept apart from `classify.rs` so the rule engine's ranking and this refinement change
//! independently: the classifier hands over what it saw ([`Observed`]) and its headline (a
//! [`HeadlineDraft`]), and takes back the refined one.

use super::framework::{Evidence, source_library};
use super::spec::{FALLBACK_SPECIFICITY, RuleSpec};
use super::{Category, Confidence, Ruleset};

/// One line the classifier holds: a rule hit and the lines printed after it.
pub(super) struct ObservedLine<'a> {
    /// 1-based line number.
    pub line: usize,
    /// The cleaned line.
    pub text: &'a str,
    /// The cleaned lines after it (a few).
    pub following: &'a [String],
    /// The rule that hit it; `None` for the line the locator found.
    pub rule: Option<&'a RuleSpec>,
}

/// What the classifier saw, for the fallback and the framework.
pub(super) struct Observed<'a> {
    /// The root-cause hit.
    pub root: Option<ObservedLine<'a>>,
    /// The other hits.
    pub others: Vec<ObservedLine<'a>>,
    /// Python frame file paths.
    pub frame_files: Vec<&'a str>,
    /// The last line of the log.
    pub last_line: Option<&'a str>,
    /// The log states a torch version.
    pub torch_version: bool,
}

/// The headline of a classification: what the rules said, or what refinement made of it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HeadlineDraft {
    pub category: Category,
    pub title: String,
    pub confidence: Confidence,
    pub next_steps: Vec<String>,
    /// The words that decided a `likely` category.
    pub basis: Vec<String>,
    /// The framework recognised.
    pub framework: Option<String>,
}

/// Whether a rule's hit names the failure's category: every rule but the catch-alls (any
/// exception, a signal, a launcher's exit code) that only say where the failure is.
pub(super) fn names_category(rule: &RuleSpec) -> bool {
    !(rule.category == Category::Unknown && rule.specificity <= FALLBACK_SPECIFICITY)
}

impl Ruleset {
    /// Refines the rules' headline with the fallback and the framework; at most `max_steps`
    /// next steps.
    pub(super) fn refine(
        &self,
        seen: &Observed<'_>,
        mut head: HeadlineDraft,
        max_steps: usize,
    ) -> HeadlineDraft {
        head.framework = self.frameworks.recognise(&evidence(seen));
        if let Some(root) = &seen.root
            && !root.rule.is_some_and(names_category)
        {
            // The lines after the root cause are its context, unless a rule named them: another
            // rank's timeout after this rank's own exception says nothing about the exception.
            let named = |n: usize| seen.others.iter().any(|o| o.line == n);
            let neighbours: Vec<&str> = (root.following.iter().enumerate())
                .filter(|(i, _)| !named(root.line + 1 + i))
                .map(|(_, l)| l.as_str())
                .collect();
            let likely = match root.rule {
                Some(_) => self.fallback().propose(root.text, &neighbours),
                None => self.fallback().propose_located(root.text, &neighbours),
            };
            if let Some(likely) = likely {
                head.title = likely_title(likely.category, &likely.basis);
                head.category = likely.category;
                head.confidence = Confidence::Likely;
                head.basis = likely.basis;
                // The category's general advice first; what was said for the unmatched line
                // (its catch-all rule's advice, searching the knowledge base) after it.
                let mut steps: Vec<String> =
                    self.advice.get(&head.category).cloned().unwrap_or_default();
                for s in std::mem::take(&mut head.next_steps) {
                    if !steps.contains(&s) {
                        steps.push(s);
                    }
                }
                head.next_steps = steps;
            }
        }
        let general = self
            .advice
            .get(&head.category)
            .map_or(&[][..], Vec::as_slice);
        head.next_steps = self.frameworks.fit_steps(
            head.framework.as_deref(),
            head.category,
            std::mem::take(&mut head.next_steps),
            general,
            max_steps,
        );
        head
    }

    /// The learned fallback's view of one line: what `gpu-triage eval` measures it by.
    #[must_use]
    pub fn fallback_score(
        &self,
        line: &str,
        neighbours: &[&str],
    ) -> Option<super::fallback::Scored> {
        self.fallback().score(line, neighbours)
    }

    /// The fallback's view of a line as if no rule of this ruleset knew it: the model is
    /// trained without the examples of every rule that matches the line. How `gpu-triage eval`
    /// measures how it generalises to wordings no rule anticipated.
    #[must_use]
    pub fn fallback_score_unseen(
        &self,
        training: &super::fallback::TrainingSet,
        line: &str,
        neighbours: &[&str],
    ) -> Option<super::fallback::Scored> {
        let model = training.model_without(|ri| {
            self.rules
                .get(ri)
                .is_some_and(|r| r.m.regex().is_match(line))
        });
        model.score(line, neighbours)
    }

    /// This ruleset's fallback training examples, tokenized (for
    /// [`Ruleset::fallback_score_unseen`]).
    #[must_use]
    pub fn fallback_training(&self) -> super::fallback::TrainingSet {
        super::fallback::TrainingSet::of(self.rules.iter().map(|r| &r.spec))
    }

    /// Whether the rule with this id names a category (see `names_category`); `false` for an
    /// id the ruleset does not have.
    #[must_use]
    pub fn rule_names_category(&self, rule_id: &str) -> bool {
        self.rules
            .iter()
            .find(|r| r.spec.id == rule_id)
            .is_some_and(|r| names_category(&r.spec))
    }

    /// The frameworks this ruleset recognises.
    #[must_use]
    pub fn framework_names(&self) -> Vec<&str> {
        self.frameworks.names()
    }
}

/// "Likely out of memory: allocation, memory, failed".
fn likely_title(category: Category, basis: &[String]) -> String {
    let words = category.words();
    // "Out of memory" reads "out of memory" mid-sentence; "NCCL error" keeps its acronym.
    let mut chars = words.chars();
    let lowered = match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if !second.is_uppercase() => {
            format!("{}{}", first.to_lowercase(), &words[first.len_utf8()..])
        }
        _ => words.to_owned(),
    };
    if basis.is_empty() {
        format!("Likely {lowered}")
    } else {
        format!("Likely {lowered}: {}", basis.join(", "))
    }
}

fn evidence<'a>(seen: &'a Observed<'a>) -> Evidence<'a> {
    let mut texts: Vec<&str> = Vec::new();
    if let Some(root) = &seen.root {
        texts.extend(root.following.iter().map(String::as_str));
    }
    for o in &seen.others {
        texts.push(o.text);
        texts.extend(o.following.iter().map(String::as_str));
    }
    texts.extend(seen.last_line);
    Evidence {
        root_text: seen.root.as_ref().map(|r| r.text),
        root_source: (seen.root.as_ref())
            .and_then(|r| r.rule)
            .map(|rule| source_library(&rule.source)),
        texts,
        sources: (seen.others.iter())
            .filter_map(|o| o.rule)
            .map(|rule| source_library(&rule.source))
            .collect(),
        frame_files: seen.frame_files.clone(),
        torch_version: seen.torch_version,
    }
}

#[cfg(test)]
mod tests {
    use super::likely_title;
    use crate::rules::Category;

    #[test]
    fn a_likely_title_names_the_category_and_the_deciding_words() {
        let basis = ["allocation".to_owned(), "memory".to_owned()];
        assert_eq!(
            likely_title(Category::OutOfMemory, &basis),
            "Likely out of memory: allocation, memory"
        );
        assert_eq!(likely_title(Category::NcclError, &[]), "Likely NCCL error");
    }
}
