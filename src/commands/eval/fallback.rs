//! How the learned fallback does on a labelled corpus, two ways: where it really runs (logs
//! whose root-cause line no rule names), and on every labelled root-cause line as if no rule
//! knew it, the harder test of how it generalises (the rules' own examples are its training
//! set, so a line a rule knows flatters it less here than one would think: the answer must
//! still clear the threshold from the words alone).

use std::fmt::Write as _;

use crate::ingest::normalize::clean_line;
use crate::rules::corpus::Case;
use crate::rules::{Category, Classification, Confidence, Ruleset};

/// Lines after a labelled root-cause line given to the model, as the classifier does.
const FOLLOWING: usize = 3;

/// Answers and correct answers, in both settings.
#[derive(Debug, Default)]
pub struct FallbackScore {
    /// The ruleset's training examples, tokenized once for the leave-rules-out models.
    training: Option<crate::rules::fallback::TrainingSet>,
    /// Logs whose root-cause line no rule names (where the fallback runs).
    pub eligible: usize,
    /// Of those, how many it answered.
    pub answered: usize,
    /// Of its answers, how many match the label.
    pub correct: usize,
    /// Labelled root-cause lines tried as if no rule knew them.
    pub lines: usize,
    /// Of those, how many it answered.
    pub lines_answered: usize,
    /// Of those answers, how many match the label.
    pub lines_correct: usize,
    /// Logs whose labelled line the locator alone names (as if no rule matched the log).
    pub located: usize,
    /// Of those, how many the fallback answered on the located line, as if no rule knew it.
    pub located_answered: usize,
    /// Of those answers, how many match the label.
    pub located_correct: usize,
    /// Each located line's fallback score, for `-v`: case, probability, answered, category.
    pub located_scores: Vec<(String, f64, bool, Category)>,
}

impl FallbackScore {
    /// Counts one classified case: `c` is its classification, `log` its bytes.
    pub fn add(&mut self, ruleset: &Ruleset, case: &Case, c: &Classification, log: &[u8]) {
        self.add_located(ruleset, case, log);
        let unnamed = c
            .root_cause
            .as_ref()
            .is_some_and(|r| !ruleset.rule_names_category(&r.rule));
        if c.confidence == Confidence::Likely || (unnamed && c.category == Category::Unknown) {
            self.eligible += 1;
        }
        if c.confidence == Confidence::Likely {
            self.answered += 1;
            self.correct += usize::from(c.category == case.label);
        }
        let Some(&first) = case.cause_lines.first() else {
            return;
        };
        let lines: Vec<String> = log
            .split(|&b| b == b'\n')
            .skip(first.saturating_sub(1))
            .take(1 + FOLLOWING)
            .map(clean_line)
            .collect();
        let Some((line, following)) = lines.split_first() else {
            return;
        };
        let neighbours: Vec<&str> = following.iter().map(String::as_str).collect();
        self.lines += 1;
        let training = self
            .training
            .get_or_insert_with(|| ruleset.fallback_training());
        if let Some(likely) = ruleset
            .fallback_score_unseen(training, line, &neighbours)
            .and_then(|s| s.answer())
        {
            self.lines_answered += 1;
            self.lines_correct += usize::from(likely.category == case.label);
        }
    }

    /// The fallback on the line the locator names in the log as if no rule matched it, itself
    /// scored as if no rule knew that line: how the engine does on a log of a family it has
    /// never seen, when the locator names the labelled line.
    fn add_located(&mut self, ruleset: &Ruleset, case: &Case, log: &[u8]) {
        let Some((line, text, following)) = ruleset.locate_alone(log) else {
            return;
        };
        if !case.cause_lines.contains(&line) {
            return;
        }
        self.located += 1;
        let neighbours: Vec<&str> = following.iter().map(String::as_str).collect();
        let training = self
            .training
            .get_or_insert_with(|| ruleset.fallback_training());
        let Some(score) = ruleset.fallback_score_unseen(training, &text, &neighbours) else {
            return;
        };
        let answer = score.answer_located();
        self.located_scores.push((
            case.id.clone(),
            score.probability,
            answer.is_some(),
            score.category,
        ));
        if let Some(likely) = answer {
            self.located_answered += 1;
            self.located_correct += usize::from(likely.category == case.label);
        }
    }

    /// The report's lines.
    pub fn write(&self, out: &mut String) {
        let pct = |n: usize, d: usize| {
            if d == 0 {
                100.0
            } else {
                100.0 * n as f64 / d as f64
            }
        };
        let _ = writeln!(
            out,
            "fallback where no rule names the line: answered {}/{} = {:.1}%, precision {}/{} = {:.1}%",
            self.answered,
            self.eligible,
            pct(self.answered, self.eligible),
            self.correct,
            self.answered,
            pct(self.correct, self.answered),
        );
        let _ = writeln!(
            out,
            "fallback on every labelled root-cause line, as if no rule knew it (trained without the rules that match it): answered {}/{} = {:.1}%, precision {}/{} = {:.1}%",
            self.lines_answered,
            self.lines,
            pct(self.lines_answered, self.lines),
            self.lines_correct,
            self.lines_answered,
            pct(self.lines_correct, self.lines_answered),
        );
        let _ = writeln!(
            out,
            "fallback on the locator's line where it is the labelled one, as if no rule knew the log: answered {}/{} = {:.1}%, precision {}/{} = {:.1}%",
            self.located_answered,
            self.located,
            pct(self.located_answered, self.located),
            self.located_correct,
            self.located_answered,
            pct(self.located_correct, self.located_answered),
        );
    }
}
