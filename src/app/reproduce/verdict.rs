//! Deterministic or flaky: what a job's repeated runs say in a few words, as the report and its
//! group show it ("fails 5/5 at repro.py:13", "flaky: 2/5"). Pure.

use crate::api_types::RunOutcome;
use crate::rules::outcome::Outcome;

/// Whether a run that says something about the failure failed: its outcome when it has one,
/// else its exit.
fn failed(r: &RunOutcome) -> bool {
    match r.outcome {
        Some(Outcome::Reproduced | Outcome::TimedOut) => true,
        Some(_) => false,
        None => r.failed(),
    }
}

/// The verdict of `runs` (empty for fewer than two runs: one run says nothing about flakiness).
/// Runs stopped by the worker's environment (`environment_error`, `sandbox_error`) say
/// nothing about the failure: they are counted apart, never as failures.
#[must_use]
pub fn verdict(runs: &[RunOutcome]) -> String {
    let n = runs.len();
    if n < 2 {
        return String::new();
    }
    let told: Vec<&RunOutcome> = runs
        .iter()
        .filter(|r| r.outcome.is_none_or(Outcome::is_informative))
        .collect();
    let stopped = n - told.len();
    if told.is_empty() {
        return format!("environment error {n}/{n}: no run reached the failure");
    }
    let said = of_told(&told);
    if stopped == 0 {
        said
    } else {
        format!("{said}; {stopped}/{n} stopped by an environment error")
    }
}

fn of_told(runs: &[&RunOutcome]) -> String {
    let n = runs.len();
    let failed: Vec<&&RunOutcome> = runs.iter().filter(|r| failed(r)).collect();
    let k = failed.len();
    if k == 0 {
        return format!("passes {n}/{n}: did not fail");
    }
    if k < n {
        return format!("flaky: fails {k}/{n}");
    }
    let first = failed[0].failing_line.as_deref();
    match first {
        Some(line)
            if failed
                .iter()
                .all(|r| r.failing_line.as_deref() == Some(line)) =>
        {
            format!("fails {n}/{n} at {line}")
        }
        Some(_) => format!("fails {n}/{n}, at different lines"),
        None => format!("fails {n}/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit: i32, line: Option<&str>) -> RunOutcome {
        RunOutcome {
            exit_code: Some(exit),
            failing_line: line.map(str::to_owned),
            ..RunOutcome::default()
        }
    }

    #[test]
    fn repeated_runs_read_as_deterministic_or_flaky() {
        let at13 = || run(1, Some("repro.py:13"));
        assert_eq!(verdict(&[at13()]), "");
        assert_eq!(
            verdict(&[at13(), at13(), at13()]),
            "fails 3/3 at repro.py:13"
        );
        assert_eq!(
            verdict(&[at13(), run(1, Some("repro.py:20"))]),
            "fails 2/2, at different lines"
        );
        assert_eq!(
            verdict(&[run(0, None), at13(), run(0, None), at13(), run(0, None)]),
            "flaky: fails 2/5"
        );
        assert_eq!(
            verdict(&[run(0, None), run(0, None)]),
            "passes 2/2: did not fail"
        );
        let timed_out = RunOutcome {
            timed_out: true,
            ..RunOutcome::default()
        };
        assert_eq!(verdict(&[timed_out.clone(), timed_out]), "fails 2/2");
    }

    #[test]
    fn runs_stopped_by_the_environment_are_never_counted_as_failures() {
        let env = || RunOutcome {
            outcome: Some(Outcome::EnvironmentError),
            ..run(1, Some("repro.py:1"))
        };
        let at7 = || RunOutcome {
            outcome: Some(Outcome::Reproduced),
            ..run(1, Some("repro.py:7"))
        };
        assert_eq!(
            verdict(&[env(), env(), env()]),
            "environment error 3/3: no run reached the failure"
        );
        assert_eq!(
            verdict(&[at7(), env(), at7()]),
            "fails 2/2 at repro.py:7; 1/3 stopped by an environment error"
        );
        let passed = RunOutcome {
            outcome: Some(Outcome::DidNotFail),
            ..run(0, None)
        };
        assert_eq!(verdict(&[passed, at7()]), "flaky: fails 1/2");
    }
}
