//! The outcome of each reproduction, its repeated runs and its CPU follow-up, as the API and the
//! report page show it (issue 30 item 1). The decision itself is pure and lives with the
//! engine ([`crate::rules::outcome`]); here it is applied to what a worker posted (before it
//! is stored) and to what was stored before outcomes were (rows from before migration 22 get
//! theirs derived when read), and a job without a run gets one from its worker's error.

use crate::api_types::{CpuRun, JobState, RunOutcome};
use crate::rules::outcome::{self, Decision, Outcome};
use crate::storage::jobs::AttemptOutcome;
use crate::storage::reproductions::{JobView, RunRecord};

use super::traces::combined_output;

/// What a run with this exit and output showed. CPU work proportional to the output.
#[must_use]
pub fn of_run(
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    stderr: &str,
    stdout: &str,
) -> Decision {
    let output = combined_output(stderr, stdout);
    outcome::of_output(exit_code, signal, timed_out, &output)
}

/// What a CPU follow-up run showed.
#[must_use]
pub fn of_cpu_run(cpu: &CpuRun) -> Decision {
    of_run(
        cpu.exit_code,
        cpu.signal,
        cpu.timed_out,
        &cpu.stderr,
        &cpu.stdout,
    )
}

/// Gives each repeated run that has no outcome (a worker that did not send one, a row stored
/// before outcomes) the one its exit says: `timed_out`, `did_not_fail`, and for a failed run
/// the outcome of the run whose output was kept (the first failing one) when that was the
/// worker's environment, else `reproduced`.
pub fn fill_runs(runs: &mut [RunOutcome], kept: Outcome) {
    for run in runs.iter_mut().filter(|r| r.outcome.is_none()) {
        run.outcome = Some(if run.timed_out {
            Outcome::TimedOut
        } else if !run.failed() {
            Outcome::DidNotFail
        } else if kept == Outcome::EnvironmentError {
            Outcome::EnvironmentError
        } else {
            Outcome::Reproduced
        });
    }
}

/// Whether a stored run lacks an outcome somewhere (a row from before migration 22).
#[must_use]
pub fn incomplete(run: &RunRecord) -> bool {
    run.outcome.is_none()
        || run.cpu.as_ref().is_some_and(|c| c.outcome.is_none())
        || run.runs.iter().any(|r| r.outcome.is_none())
}

/// Derives what a stored run lacks: its outcome, its CPU run's and its repeated runs'. CPU work
/// proportional to the output: call from a blocking thread.
pub fn complete(run: &mut RunRecord) {
    let decision = match run.outcome.take() {
        Some(d) => d,
        None => of_run(
            run.exit_code,
            run.signal,
            run.timed_out,
            &run.stderr,
            &run.stdout,
        ),
    };
    if let Some(cpu) = run.cpu.as_mut()
        && cpu.outcome.is_none()
    {
        cpu.outcome = Some(of_cpu_run(cpu).outcome);
    }
    fill_runs(&mut run.runs, decision.outcome);
    run.outcome = Some(decision);
}

/// What job `j` showed: its run's outcome, or for a job that died of its worker's errors
/// without a run, the last error's (`sandbox_error`, or `environment_error` when the
/// interpreter is missing); `None` while it is pending or when it died of expired leases.
#[must_use]
pub fn of_job(j: &JobView) -> Option<Decision> {
    if let Some(r) = &j.reproduction {
        return Some(r.run.outcome.clone().unwrap_or_else(|| {
            of_run(
                r.run.exit_code,
                r.run.signal,
                r.run.timed_out,
                &r.run.stderr,
                &r.run.stdout,
            )
        }));
    }
    if j.state != JobState::Dead {
        return None;
    }
    let last = j.history.last()?;
    (last.outcome == AttemptOutcome::Error).then(|| {
        outcome::decide(&outcome::Run {
            worker_error: Some(&last.error),
            ..outcome::Run::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit: Option<i32>, timed_out: bool) -> RunOutcome {
        RunOutcome {
            exit_code: exit,
            timed_out,
            ..RunOutcome::default()
        }
    }

    #[test]
    fn runs_without_an_outcome_get_the_one_their_exit_says() {
        let mut runs = vec![
            run(Some(0), false),
            run(Some(1), false),
            run(None, true),
            RunOutcome {
                outcome: Some(Outcome::Reproduced),
                ..run(Some(1), false)
            },
        ];
        fill_runs(&mut runs, Outcome::EnvironmentError);
        let got: Vec<Option<Outcome>> = runs.iter().map(|r| r.outcome).collect();
        assert_eq!(
            got,
            [
                Some(Outcome::DidNotFail),
                Some(Outcome::EnvironmentError),
                Some(Outcome::TimedOut),
                // A worker's own decision is kept.
                Some(Outcome::Reproduced),
            ]
        );
        let mut failed = vec![run(Some(1), false)];
        fill_runs(&mut failed, Outcome::Reproduced);
        assert_eq!(failed[0].outcome, Some(Outcome::Reproduced));
    }

    #[test]
    fn a_cpu_run_missing_torch_is_an_environment_error() {
        let cpu = CpuRun {
            exit_code: Some(1),
            stderr: "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n".into(),
            ..CpuRun::default()
        };
        assert_eq!(of_cpu_run(&cpu).outcome, Outcome::EnvironmentError);
    }
}
