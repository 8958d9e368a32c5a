//! What each reproduction showed, in words on the report page (issue 30 item 1): a line per
//! job ("Environment error: the worker's Python has no module named 'torch' ..."), how to fix
//! the worker when the run stopped for a reason of its own, and the header card's note when the
//! newest run was stopped that way, so nobody reads a missing module as the failing line. Pure:
//! built from the app's [`Decision`]s.

use crate::rules::outcome::{Decision, Outcome};

/// A job's outcome as the page says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeView {
    pub job_id: i64,
    /// The wire spelling, for the CSS class (`outcome-environment_error`).
    pub kind: &'static str,
    /// "Environment error".
    pub words: &'static str,
    /// The rest of the line: what the run showed.
    pub sentence: String,
    /// For the worker's own problems: what went wrong, in one clause.
    pub reason: String,
    /// For the worker's own problems: how to fix the worker before re-queueing.
    pub fix: String,
    /// The run says something about the reported failure (not the worker's own problem).
    pub informative: bool,
}

impl OutcomeView {
    /// Job `job_id`'s outcome; `cpu` when the run had CUDA redirected to the CPU.
    #[must_use]
    pub fn new(job_id: i64, d: &Decision, cpu: bool) -> OutcomeView {
        let reason = d.reason.trim_end_matches('.').to_owned();
        let sentence = match d.outcome {
            Outcome::Reproduced if cpu => "the script failed on the CPU (CUDA redirected there); \
                its traceback below is the synchronous account of the failure."
                .to_owned(),
            Outcome::Reproduced => "the script failed with CUDA_LAUNCH_BLOCKING=1; its traceback \
                below is the synchronous account of the failure."
                .to_owned(),
            Outcome::DidNotFail => "the script ran to the end: the failure did not recur on \
                this worker."
                .to_owned(),
            Outcome::TimedOut => "the run was stopped at the worker's time limit before the \
                script ended."
                .to_owned(),
            Outcome::EnvironmentError => format!(
                "{reason}. The run never reached the failing code, so it says nothing about \
                 the reported failure: the report keeps the log's classification."
            ),
            Outcome::SandboxError => format!(
                "{reason}. The script did not run, so the report keeps the log's classification."
            ),
        };
        OutcomeView {
            job_id,
            kind: d.outcome.as_str(),
            words: d.outcome.words(),
            sentence,
            reason,
            fix: d.fix.clone(),
            informative: d.outcome.is_informative(),
        }
    }
}

/// The header card's note: the newest finished job's outcome when the worker's environment
/// stopped it (a newer run that reached the failure speaks for itself).
#[must_use]
pub fn head<'a>(newest_first: impl IntoIterator<Item = &'a OutcomeView>) -> Option<OutcomeView> {
    newest_first
        .into_iter()
        .next()
        .filter(|o| !o.informative)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(outcome: Outcome, reason: &str, fix: &str) -> Decision {
        Decision {
            outcome,
            reason: reason.into(),
            fix: fix.into(),
        }
    }

    #[test]
    fn an_environment_error_says_what_was_missing_and_that_the_classification_stays() {
        let d = decision(
            Outcome::EnvironmentError,
            "the worker's Python has no module named 'torch'",
            "Start the worker with --python ...",
        );
        let v = OutcomeView::new(4, &d, true);
        assert_eq!(
            (v.kind, v.words),
            ("environment_error", "Environment error")
        );
        assert!(
            v.sentence
                .starts_with("the worker's Python has no module named 'torch'. ")
        );
        assert!(v.sentence.contains("keeps the log's classification"));
        assert!(!v.informative);
        assert_eq!(head([&v]), Some(v.clone()));
        // A newer run that failed in the user's code speaks for itself.
        let newer = OutcomeView::new(5, &decision(Outcome::Reproduced, "", ""), false);
        assert!(newer.sentence.contains("CUDA_LAUNCH_BLOCKING=1"));
        assert_eq!(head([&newer, &v]), None);
    }

    #[test]
    fn every_outcome_reads_in_words() {
        for o in Outcome::ALL {
            let v = OutcomeView::new(
                1,
                &decision(o, "the worker could not run the script", ""),
                false,
            );
            assert!(!v.sentence.is_empty() && !v.words.is_empty(), "{o}");
            assert_eq!(v.informative, o.is_informative());
        }
    }
}
