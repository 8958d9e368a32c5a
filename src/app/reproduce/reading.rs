//! A reproduction's runs read once for the report page (issue 43 item 3): each run's output as
//! one text, its main traceback, the user's frame in it and its outcome are computed here, so
//! the page's renderer only draws them (it used to parse a CPU run's traceback twice and
//! decide its outcome twice). CPU work proportional to the outputs: call from a blocking
//! thread.

use crate::api_types::CpuRun;
use crate::ingest::traceback::Traceback;
use crate::rules::outcome::{Decision, Outcome};
use crate::storage::reproductions::{JobView, RunRecord};

use super::outcome::{of_cpu_run, of_job};
use super::traces::{UserFrame, combined_output, location, main_traceback};

/// Runs whose output and traces the page shows in full: the newest. A report re-queued many
/// times would otherwise read and draw every run's megabytes of output.
pub const FULL_PANELS: usize = 3;

/// One run (the reproduction's, or its follow-up on the CPU) as the page shows it.
#[derive(Clone, Debug)]
pub struct RunReading {
    /// stderr then stdout: the text the run's classification and traceback lines number.
    pub output: String,
    /// The traceback a person would read as the error, if any.
    pub traceback: Option<Traceback>,
    /// The user's last frame in it.
    pub at: Option<UserFrame>,
    /// What the run showed.
    pub decided: Decision,
}

impl RunReading {
    /// The reproduction's own run, with its stored outcome.
    #[must_use]
    pub fn of_run(run: &RunRecord, decided: Decision) -> RunReading {
        RunReading::read(combined_output(&run.stderr, &run.stdout), decided)
    }

    /// The follow-up run on the CPU. Its stored outcome has no reason or fix, so its decision
    /// is made from its output, once.
    #[must_use]
    pub fn of_cpu(cpu: &CpuRun) -> RunReading {
        RunReading::read(combined_output(&cpu.stderr, &cpu.stdout), of_cpu_run(cpu))
    }

    fn read(output: String, decided: Decision) -> RunReading {
        let traceback = main_traceback(&output);
        let at = traceback.as_ref().and_then(location);
        RunReading {
            output,
            traceback,
            at,
            decided,
        }
    }

    /// Whether the run says something about the failure (the worker's environment did not
    /// stop it).
    #[must_use]
    pub fn informative(&self) -> bool {
        self.decided.outcome.is_informative()
    }

    /// The true failing line: where a run that reproduced the failure raised it in the user's
    /// code.
    #[must_use]
    pub fn true_line(&self) -> Option<&UserFrame> {
        self.at
            .as_ref()
            .filter(|_| self.decided.outcome == Outcome::Reproduced)
    }
}

/// A reproduction job as the page shows it.
#[derive(Clone, Debug)]
pub struct JobReading {
    pub job: JobView,
    /// What it showed: its run's outcome, or its worker's last error's for a job that died
    /// without a run; `None` while pending.
    pub decided: Option<Decision>,
    /// Its run, read in full for the [`FULL_PANELS`] newest runs only.
    pub run: Option<RunReading>,
    /// Its follow-up run on the CPU, likewise.
    pub cpu: Option<RunReading>,
}

/// The report's jobs (oldest first, every run's outcome stored or derived) as the page shows
/// them.
#[must_use]
pub fn read_jobs(jobs: Vec<JobView>) -> Vec<JobReading> {
    let mut newest: Vec<i64> = jobs
        .iter()
        .filter(|j| j.reproduction.is_some())
        .map(|j| j.id)
        .collect();
    newest.sort_unstable_by(|a, b| b.cmp(a));
    newest.truncate(FULL_PANELS);
    jobs.into_iter()
        .map(|job| {
            let decided = of_job(&job);
            let full = newest.contains(&job.id);
            let run = job
                .reproduction
                .as_ref()
                .zip(decided.clone())
                .filter(|_| full)
                .map(|(r, d)| RunReading::of_run(&r.run, d));
            let cpu = job
                .reproduction
                .as_ref()
                .and_then(|r| r.run.cpu.as_ref())
                .filter(|_| full)
                .map(RunReading::of_cpu);
            JobReading {
                job,
                decided,
                run,
                cpu,
            }
        })
        .collect()
}
