//! The reproduction part of the report page: each job with its state, attempts and reason,
//! what a pending one is doing ([`super::repro_status`]), a re-queue button, and for a finished
//! run the originally reported traceback beside the synchronous one with the failing lines
//! marked in both (`panel`, `trace`), plus the sentence that says where the synchronous run
//! moved the error (and the true line for the header card). Also `POST /jobs/{id}/requeue`,
//! the re-queue form (`requeue`).
//!
//! Who may re-queue: any signed-in portal user whose token has the `ingest` (or `admin`) scope,
//! the same people who may upload the report in the first place; the form carries the session's
//! CSRF token and must come from this site.

mod panel;
mod requeue;
mod trace;

pub use requeue::requeue_job;

use super::repro_outcome::{self, OutcomeView};
use super::repro_status::{JobStatus, REFRESH_SECS, StatusContext, TrueLine};
use crate::api_types::{CategorySource, JobState};
use crate::app::reports::ReportedTrace;
use crate::app::reproduce::UserFrame;
use crate::app::reproduce::reading::{JobReading, RunReading};
use crate::app::reproduce::{AttemptView, CategoryBasis, ReproductionView};
use panel::panel;

/// One line of a trace excerpt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceLine {
    /// 1-based line of the text (the log, or the run's stderr-then-stdout).
    pub number: usize,
    pub text: String,
    /// Lines were left out before this one.
    pub gap: bool,
    /// The user's last frame: where this trace says it failed.
    pub user: bool,
    /// A frame at the line the synchronous run says really failed.
    pub truth: bool,
    /// The rule engine's root-cause line.
    pub root: bool,
    /// What the marks on this line say (each mark once per trace, on the frame's last line).
    pub marks: Vec<&'static str>,
}

/// One column: a traceback excerpt and where it puts the failure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceView {
    /// Column heading.
    pub title: &'static str,
    /// CSS class of the column (`trace-reported`, `trace-sync`).
    pub class: &'static str,
    /// Label of the user-frame mark.
    pub user_label: &'static str,
    pub lines: Vec<TraceLine>,
    /// `train.py:57 loss.item()`.
    pub location: Option<String>,
}

/// A finished run as the page shows it.
#[derive(Clone, Debug)]
pub struct ReproPanel {
    /// `exited with code 1`, `killed by signal 9`, `timed out`.
    pub exit: String,
    /// The run reached the user's code (not stopped by the worker's environment): its
    /// classification is shown, and only then can it name a true failing line.
    pub informative: bool,
    pub duration: String,
    pub gpu_name: Option<String>,
    pub no_gpu: bool,
    /// The run had CUDA redirected to the CPU.
    pub cpu_translation: bool,
    pub unsandboxed: bool,
    pub truncated: bool,
    pub category: crate::rules::Category,
    pub title: String,
    /// "reported at ..., actually raised at ..." when the run moved the error.
    pub moved: Option<String>,
    /// Said when both name the same line.
    pub same: Option<String>,
    /// What a clean run on the CPU means for the reported failure.
    pub cpu_note: Option<String>,
    /// The follow-up run on the CPU in one line: "On the CPU: `IndexError: ...` at repro.py:13".
    pub cpu_line: Option<String>,
    /// With repeats: "fails 5/5 at repro.py:13", "flaky: fails 2/5"; else empty.
    pub verdict: String,
    /// "Python 3.11.2 · torch 2.15.0+cu132 (CUDA 13.2) · NVIDIA H100 80GB HBM3, sm 9.0".
    pub environment: Option<String>,
    /// The reported and the synchronous trace, in that order.
    pub traces: Vec<TraceView>,
    /// The user's frame where the synchronous run failed (the true failing line).
    pub truth: Option<UserFrame>,
    pub stdout: String,
    pub stderr: String,
}

/// A job as the page lists it.
#[derive(Clone, Debug)]
pub struct JobRow {
    pub id: i64,
    pub state: JobState,
    /// Queued again after a failed attempt (the page shows that attempt's error).
    pub retrying: bool,
    pub attempts: u32,
    pub max_attempts: u32,
    pub worker: String,
    pub last_error: String,
    pub dead_reason: String,
    pub requeued_from: Option<i64>,
    pub requeued_by: String,
    pub history: Vec<AttemptView>,
    pub can_requeue: bool,
    /// What the run showed, in words; none while pending.
    pub outcome: Option<OutcomeView>,
    pub repro: Option<ReproPanel>,
    /// What it is doing while queued or running.
    pub status: Option<JobStatus>,
}

/// The reproduction section of the report page.
#[derive(Clone, Debug, Default)]
pub struct ReproSection {
    pub jobs: Vec<JobRow>,
    /// Set when the report's category followed a reproduction: says so, and what the log
    /// alone gave.
    pub category_note: Option<String>,
    /// A job is queued or running: the page refreshes itself every `refresh_secs`.
    pub pending: bool,
    pub refresh_secs: u32,
    /// The pending job's status in one sentence, for the header card.
    pub headline: Option<String>,
    /// The true failing line the newest run found, for the header card.
    pub true_line: Option<TrueLine>,
    /// The newest finished run's outcome when the worker's environment stopped it, for the
    /// header card.
    pub outcome_head: Option<OutcomeView>,
}

/// Builds the section from the report's jobs as `app` read them (the newest runs in full);
/// `status` (the workers seen, the server's URL) is needed only while a job is pending.
pub fn section(
    jobs: Vec<JobReading>,
    basis: Option<&CategoryBasis>,
    reported: &ReportedTrace,
    can_write: bool,
    status: Option<&StatusContext<'_>>,
) -> ReproSection {
    let pending = jobs.iter().any(|j| !j.job.state.is_finished());
    let reported_loc = reported
        .tb
        .as_ref()
        .and_then(crate::app::reproduce::location);
    let jobs: Vec<JobRow> = jobs
        .into_iter()
        .map(|j| {
            job_row(j, can_write && !pending, status, |r, run, cpu| {
                panel(r, run, cpu, reported, reported_loc.as_ref())
            })
        })
        .collect();
    // The newest run that names a failing line in the user's code.
    let true_line = jobs.iter().rev().find_map(|j| {
        let r = j.repro.as_ref()?;
        let frame = r.truth.as_ref()?;
        Some(TrueLine::new(
            j.id,
            frame,
            r.cpu_translation,
            r.moved.is_some(),
        ))
    });
    ReproSection {
        headline: jobs
            .iter()
            .find_map(|j| j.status.as_ref())
            .map(JobStatus::headline),
        true_line,
        outcome_head: repro_outcome::head(jobs.iter().rev().filter_map(|j| j.outcome.as_ref())),
        pending,
        refresh_secs: REFRESH_SECS,
        jobs,
        category_note: basis.and_then(category_note),
    }
}

/// One job's row with its outcome; `panel` draws its run when `app` read it in full (the
/// newest runs only).
fn job_row(
    reading: JobReading,
    may_requeue: bool,
    status: Option<&StatusContext<'_>>,
    panel: impl Fn(&ReproductionView, &RunReading, Option<&RunReading>) -> ReproPanel,
) -> JobRow {
    let JobReading {
        job: j,
        decided,
        run,
        cpu,
    } = reading;
    let cpu_translation = j
        .reproduction
        .as_ref()
        .is_some_and(|r| r.run.cpu_translation);
    JobRow {
        status: status.and_then(|ctx| JobStatus::of(&j, ctx)),
        can_requeue: may_requeue && j.state.is_finished(),
        retrying: j.state == JobState::Queued && !j.last_error.is_empty(),
        repro: j
            .reproduction
            .as_ref()
            .zip(run.as_ref())
            .map(|(r, run)| panel(r, run, cpu.as_ref())),
        outcome: decided
            .as_ref()
            .map(|d| OutcomeView::new(j.id, d, cpu_translation)),
        id: j.id,
        state: j.state,
        attempts: j.attempts,
        max_attempts: j.max_attempts,
        worker: j.worker,
        last_error: j.last_error,
        dead_reason: j.dead_reason,
        requeued_from: j.requeued_from,
        requeued_by: j.requeued_by,
        history: j.history,
    }
}

fn category_note(b: &CategoryBasis) -> Option<String> {
    if b.source != CategorySource::Reproduction {
        return None;
    }
    let title = b
        .reproduction_classification
        .as_ref()
        .map_or("", |c| c.title.as_str());
    let job = b
        .reproduction_job_id
        .map_or_else(String::new, |j| format!(" (job {j})"));
    Some(format!(
        "The category follows the synchronous reproduction{job}: {} ({title}). The uploaded log alone said {} ({}).",
        b.category,
        b.original_category
            .map_or("unknown", crate::rules::Category::as_str),
        b.original_title.as_deref().unwrap_or(""),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_types::Sandbox;
    use crate::app::reproduce::reading::read_jobs;
    use crate::app::reproduce::{JobView, RunRecord};

    /// A stored run of `stderr` that exited with `exit_code`.
    pub(super) fn record(cpu_translation: bool, exit_code: i32, stderr: &str) -> RunRecord {
        RunRecord {
            attempt: 1,
            exit_code: Some(exit_code),
            signal: None,
            timed_out: false,
            duration_ms: 10,
            stdout: String::new(),
            stderr: stderr.into(),
            truncated: false,
            gpu: None,
            no_gpu: true,
            cpu_translation,
            cpu: None,
            runs: Vec::new(),
            verdict: String::new(),
            environment: None,
            sandbox: Sandbox::Bwrap,
            worker: "w".into(),
            classification: crate::rules::Ruleset::builtin()
                .expect("builtin")
                .classify_bytes("run", stderr.as_bytes()),
            outcome: None,
        }
    }

    const ASYNC_LOG: &str = "epoch 3\nTraceback (most recent call last):\n  File \"/w/repro.py\", line 7, in <module>\n    print(loss.item())\nRuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n";
    const NO_TORCH: &str = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 1, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'\n";

    fn job_of(run: RunRecord) -> JobView {
        let at = crate::time::Timestamp::from_unix(1_800_000_000);
        JobView {
            id: 3,
            state: JobState::Done,
            attempts: 1,
            max_attempts: 3,
            last_error: String::new(),
            dead_reason: String::new(),
            worker: "w".into(),
            created_at: at,
            updated_at: at,
            claimed_at: None,
            heartbeat_at: None,
            needs: crate::api_types::Needs::Any,
            requeued_from: None,
            requeued_by: String::new(),
            history: Vec::new(),
            reproduction: Some(ReproductionView {
                id: 9,
                run,
                created_at: at,
            }),
        }
    }

    #[test]
    fn a_run_stopped_by_a_missing_module_names_no_true_line() {
        let rs = crate::rules::Ruleset::builtin().expect("builtin");
        let log = rs.classify_bytes("log", ASYNC_LOG.as_bytes());
        let reported = ReportedTrace::from_excerpt(ASYNC_LOG, 1, &log);
        let section = section(
            read_jobs(vec![job_of(record(true, 1, NO_TORCH))]),
            None,
            &reported,
            true,
            None,
        );
        assert!(section.true_line.is_none(), "no header claim");
        let head = section.outcome_head.expect("the header says why");
        assert_eq!(head.kind, "environment_error");
        assert!(
            head.reason.contains("no module named 'torch'"),
            "{}",
            head.reason
        );
        let job = &section.jobs[0];
        assert!(job.can_requeue);
        let panel = job.repro.as_ref().expect("a panel");
        assert!(!panel.informative);
        assert!(panel.truth.is_none() && panel.moved.is_none() && panel.same.is_none());
        let marks: Vec<&str> = panel
            .traces
            .iter()
            .flat_map(|t| t.lines.iter().flat_map(|l| l.marks.iter().copied()))
            .collect();
        assert!(!marks.contains(&"true failing line"), "{marks:?}");
        assert!(marks.contains(&"where the run stopped"), "{marks:?}");
        // The same page for a run that failed in the user's code names its line.
        let failed = "Traceback (most recent call last):\n  File \"/tmp/repro.py\", line 4, in <module>\n    out = emb(idx)\nIndexError: index out of range in self\n";
        let section = section_of(failed, &reported);
        let t = section.true_line.expect("a true line");
        assert_eq!(t.at, "repro.py:4");
        assert!(section.outcome_head.is_none());
    }

    fn section_of(stderr: &str, reported: &ReportedTrace) -> ReproSection {
        section(
            read_jobs(vec![job_of(record(true, 1, stderr))]),
            None,
            reported,
            true,
            None,
        )
    }
}
