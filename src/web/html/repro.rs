//! The reproduction part of the report page: each job with its state, attempts and reason,
//! what a pending one is doing ([`super::repro_status`]), a re-queue button, and for a finished
//! run the originally reported traceback beside the synchronous one with the failing lines
//! marked in both, plus the sentence that says where the synchronous run moved the error (and
//! the true line for the header card). Also `POST /jobs/{id}/requeue`, the re-queue form.
//!
//! Who may re-queue: any signed-in portal user whose token has the `ingest` (or `admin`) scope,
//! the same people who may upload the report in the first place; the form carries the session's
//! CSRF token and must come from this site.

use std::collections::BTreeSet;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::repro_outcome::{self, OutcomeView};
use super::repro_status::{JobStatus, REFRESH_SECS, StatusContext, TrueLine};
use crate::api_types::ErrorCode;
use crate::api_types::{CategorySource, JobState, Sandbox};
use crate::app::reports::ReportedTrace;
use crate::app::reproduce::{self as repro, Requeue, UserFrame};
use crate::app::reproduce::{AttemptView, CategoryBasis, JobView, ReproductionView, RunRecord};
use crate::auth::Scope;
use crate::ingest::normalize::strip_ansi;
use crate::rules::Classification;
use crate::rules::outcome::{Decision, Outcome};
use crate::web::extract::{CsrfField, CsrfForm, JobId};
use crate::web::{AppError, AppState, PageError};

/// Most lines of a traceback shown (the innermost ones are kept).
const MAX_TRACE_LINES: usize = 60;
/// Longest line shown in a trace.
const MAX_LINE_CHARS: usize = 500;

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

fn root_line(classification: &Classification) -> Option<usize> {
    classification.root_cause.as_ref().map(|r| r.line)
}

/// Builds the section from the report's jobs; `status` (the workers seen, the server's URL) is
/// needed only while a job is pending.
pub fn section(
    jobs: Vec<JobView>,
    basis: Option<&CategoryBasis>,
    reported: &ReportedTrace,
    can_write: bool,
    status: Option<&StatusContext<'_>>,
) -> ReproSection {
    let pending = jobs.iter().any(|j| !j.state.is_finished());
    let reported_loc = reported.tb.as_ref().and_then(repro::location);
    // Full panels (both traces, outputs) for the newest runs only: a report re-queued many
    // times would otherwise render every run's megabytes of output.
    let mut with_output: Vec<i64> = jobs
        .iter()
        .filter(|j| j.reproduction.is_some())
        .map(|j| j.id)
        .collect();
    with_output.sort_unstable_by(|a, b| b.cmp(a));
    with_output.truncate(FULL_PANELS);
    let jobs: Vec<JobRow> = jobs
        .into_iter()
        .map(|j| {
            let full = with_output.contains(&j.id);
            job_row(j, can_write && !pending, status, |r, d| {
                full.then(|| panel(r, reported, reported_loc.as_ref(), d))
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

/// One job's row with its outcome; `panel` draws its run given that outcome (or not: only
/// the newest runs get one).
fn job_row(
    j: JobView,
    may_requeue: bool,
    status: Option<&StatusContext<'_>>,
    panel: impl Fn(&ReproductionView, &Decision) -> Option<ReproPanel>,
) -> JobRow {
    let decided = repro::outcome::of_job(&j);
    let cpu = j
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
            .zip(decided.as_ref())
            .and_then(|(r, d)| panel(r, d)),
        outcome: decided.as_ref().map(|d| OutcomeView::new(j.id, d, cpu)),
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

fn panel(
    view: &ReproductionView,
    reported: &ReportedTrace,
    reported_loc: Option<&UserFrame>,
    decided: &Decision,
) -> ReproPanel {
    let r = &view.run;
    let combined = repro::combined_output(&r.stderr, &r.stdout);
    let sync_tb = repro::main_traceback(&combined);
    let stopped = !decided.outcome.is_informative();
    // Only a run that failed in the user's code names a true failing line.
    let sync_loc = sync_tb
        .as_ref()
        .and_then(repro::location)
        .filter(|_| decided.outcome == Outcome::Reproduced);
    let sync_lines: Vec<String> = combined.lines().map(str::to_owned).collect();
    let (moved, same) = match (reported_loc, &sync_loc) {
        (Some(a), Some(b)) => match repro::moved_sentence(a, b) {
            Some(m) => (Some(m), None),
            None => (
                None,
                Some(format!(
                    "The synchronous run failed at the same line as the report: {b}."
                )),
            ),
        },
        _ => (None, None),
    };
    let mut reported_view = trace_view(
        TraceView {
            title: "Reported (asynchronous)",
            class: "trace-reported",
            user_label: "reported here",
            ..TraceView::default()
        },
        &reported.lines,
        reported.tb.as_ref(),
        reported.root_line,
        sync_loc.as_ref(),
    );
    // Numbered as in the whole log, not the excerpt.
    for line in &mut reported_view.lines {
        line.number += reported.base;
    }
    let sync_view = trace_view(
        TraceView {
            title: match (stopped, r.cpu_translation) {
                (true, _) => "The run (stopped by the worker's environment)",
                (false, true) => "On the CPU (CUDA redirected to the CPU)",
                (false, false) => "Synchronous (CUDA_LAUNCH_BLOCKING=1)",
            },
            class: "trace-sync",
            user_label: if decided.outcome == Outcome::Reproduced {
                "true failing line"
            } else {
                "where the run stopped"
            },
            ..TraceView::default()
        },
        &sync_lines,
        sync_tb.as_ref(),
        root_line(&r.classification),
        sync_loc.as_ref(),
    );
    ReproPanel {
        exit: exit(r),
        informative: !stopped,
        duration: format!("{:.1} s", r.duration_ms as f64 / 1000.0),
        gpu_name: r.gpu.as_ref().and_then(|g| g.name.clone()),
        no_gpu: r.no_gpu,
        cpu_translation: r.cpu_translation,
        unsandboxed: r.sandbox == Sandbox::None,
        truncated: r.truncated,
        category: r.classification.category,
        title: r.classification.title.clone(),
        moved,
        same,
        cpu_note: cpu_note(r, reported.category),
        cpu_line: r.cpu.as_ref().and_then(cpu_line),
        verdict: r.verdict.clone(),
        environment: r
            .environment
            .as_ref()
            .map(crate::api_types::RunEnvironment::line),
        traces: [
            Some(reported_view),
            Some(sync_view),
            r.cpu.as_ref().map(cpu_view),
        ]
        .into_iter()
        .flatten()
        .collect(),
        stdout: shown_output(&r.stdout),
        stderr: shown_output(&r.stderr),
        truth: sync_loc,
    }
}

/// A run's output as the page shows it (SECURITY.md items 2 and 4), like the log pane:
/// escape sequences dropped (an OSC 8 hyperlink keeps only its visible text, never its
/// target), other control characters but newline, tab and carriage return shown as U+FFFD.
/// Runs shown with their traces and outputs; older ones show their state and attempts.
const FULL_PANELS: usize = 3;

/// Most of a stream the page shows: its end, where the traceback is (the API has it whole).
const SHOWN_OUTPUT: usize = 256 << 10;

fn shown_output(text: &str) -> String {
    let cut = text.len().saturating_sub(SHOWN_OUTPUT);
    let cut = text.ceil_char_boundary(cut);
    let note = if cut > 0 {
        format!(
            "[{cut} earlier bytes not shown; GET /api/v1/reports/{{id}} has the whole output]\n"
        )
    } else {
        String::new()
    };
    let shown: String = strip_ansi(&text[cut..])
        .chars()
        .map(|c| match c {
            '\n' | '\t' | '\r' => c,
            c if c.is_control() => char::REPLACEMENT_CHARACTER,
            c => c,
        })
        .collect();
    note + &shown
}

/// The follow-up CPU run's traceback, as a third column.
fn cpu_view(cpu: &crate::api_types::CpuRun) -> TraceView {
    let combined = repro::combined_output(&cpu.stderr, &cpu.stdout);
    let tb = repro::main_traceback(&combined);
    let lines: Vec<String> = combined.lines().map(str::to_owned).collect();
    let root = cpu.classification.as_ref().and_then(root_line);
    let stopped = !repro::outcome::of_cpu_run(cpu).outcome.is_informative();
    trace_view(
        TraceView {
            title: "On the CPU (CUDA redirected to the CPU)",
            class: "trace-cpu",
            user_label: if stopped {
                "where the CPU run stopped"
            } else {
                "failing line on the CPU"
            },
            ..TraceView::default()
        },
        &lines,
        tb.as_ref(),
        root,
        None,
    )
}

/// "On the CPU: `IndexError: index out of range in self` at repro.py:13", or what the CPU run
/// did when it raised nothing.
fn cpu_line(cpu: &crate::api_types::CpuRun) -> Option<String> {
    let decided = repro::outcome::of_cpu_run(cpu);
    if !decided.outcome.is_informative() {
        return Some(format!(
            "On the CPU the run was stopped by the worker's environment ({}), so it says \
             nothing about the failure. {}",
            decided.reason.trim_end_matches('.'),
            decided.fix
        ));
    }
    let combined = repro::combined_output(&cpu.stderr, &cpu.stdout);
    let tb = repro::main_traceback(&combined);
    let at = tb.as_ref().and_then(repro::location);
    let exception = tb.as_ref().and_then(|t| t.exception.clone());
    Some(match (exception, at, cpu.exit_code) {
        (Some(e), Some(at), _) => format!("On the CPU: {} at {}", e.trim(), at),
        (Some(e), None, _) => format!("On the CPU: {}", e.trim()),
        (None, _, Some(0)) => "On the CPU the script ran to the end: the failure needs the GPU \
            (a kernel, driver or hardware fault the CPU does not share)."
            .into(),
        _ if cpu.timed_out => "On the CPU the script timed out.".into(),
        _ => return None,
    })
}

/// What it means when the script ran to the end on the CPU: the failure needs the GPU.
fn cpu_note(r: &RunRecord, reported: Option<crate::rules::Category>) -> Option<String> {
    use crate::rules::Category;
    if !r.cpu_translation || r.exit_code != Some(0) || r.timed_out {
        return None;
    }
    Some(match reported {
        Some(Category::DeviceMismatch) => "With every tensor moved to the CPU the script ran to \
            the end: the reported failure is one of placement (a tensor or module left on \
            another device), not of values."
            .into(),
        Some(Category::IllegalMemoryAccess) => "The script ran to the end on the CPU: the \
            illegal access is in a CUDA kernel or the driver (a custom kernel, a library bug, \
            a faulty GPU), which the CPU does not share. Run it on a GPU worker."
            .into(),
        _ => "The script ran to the end on the CPU: the reported failure needs the GPU (or \
            did not reproduce); run it on a GPU worker."
            .into(),
    })
}

fn exit(r: &RunRecord) -> String {
    if r.timed_out {
        return "timed out".into();
    }
    match (r.exit_code, r.signal) {
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(0), None) => "exited with code 0: the failure did not reproduce".into(),
        (Some(code), None) => format!("exited with code {code}"),
        (None, None) => "did not report an exit code".into(),
    }
}

/// The excerpt of `lines` around a traceback: its header to its exception (the innermost
/// lines when long), plus the root-cause line; the user frame, frames at `truth`, and the
/// root-cause line marked. Without either, the last lines of the text.
fn trace_view(
    mut view: TraceView,
    lines: &[String],
    tb: Option<&crate::ingest::traceback::Traceback>,
    root: Option<usize>,
    truth: Option<&UserFrame>,
) -> TraceView {
    let total = lines.len();
    let mut wanted: BTreeSet<usize> = BTreeSet::new();
    let mut user: BTreeSet<usize> = BTreeSet::new();
    let mut truth_lines: BTreeSet<usize> = BTreeSet::new();
    if let Some(tb) = tb {
        let first = tb.frames.first().map_or(1, |f| f.log_line);
        let header = first.saturating_sub(1).max(1);
        let start = if lines
            .get(header - 1)
            .is_some_and(|l| l.contains("Traceback"))
        {
            header
        } else {
            first
        };
        let end = tb
            .exception_line
            .or_else(|| tb.frames.last().map(|f| f.log_line + 1))
            .unwrap_or(start)
            .min(total);
        let start = start.max(end.saturating_sub(MAX_TRACE_LINES - 1)).max(1);
        wanted.extend(start..=end);
        if let Some(loc) = repro::location(tb) {
            user.extend(frame_lines(lines, loc.log_line));
            view.location = Some(loc.to_string());
        }
        if let Some(t) = truth {
            for f in &tb.frames {
                let name = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
                if name == t.file && f.line == t.line {
                    truth_lines.extend(frame_lines(lines, f.log_line));
                }
            }
        }
    }
    if let Some(r) = root.filter(|r| (1..=total).contains(r)) {
        wanted.insert(r);
    }
    wanted.extend(user.iter().copied());
    if wanted.is_empty() {
        wanted.extend(total.saturating_sub(19).max(1)..=total);
    }
    let mut prev = 0;
    for n in wanted.into_iter().filter(|n| (1..=total).contains(n)) {
        let text = strip_ansi(&lines[n - 1])
            .chars()
            .take(MAX_LINE_CHARS)
            .collect();
        let mut marks = Vec::new();
        if user.last() == Some(&n) {
            marks.push(view.user_label);
        }
        if truth_lines.last() == Some(&n) && !marks.contains(&"true failing line") {
            marks.push("true failing line");
        }
        if root == Some(n) {
            marks.push("root cause");
        }
        view.lines.push(TraceLine {
            number: n,
            text,
            gap: prev != 0 && n != prev + 1,
            user: user.contains(&n),
            truth: truth_lines.contains(&n),
            root: root == Some(n),
            marks,
        });
        prev = n;
    }
    view
}

/// A frame's `File ...` line and the code line under it.
fn frame_lines(lines: &[String], log_line: usize) -> Vec<usize> {
    let mut out = vec![log_line];
    if lines
        .get(log_line)
        .is_some_and(|l| !l.trim().is_empty() && !l.contains("File \""))
    {
        out.push(log_line + 1);
    }
    out
}

/// The re-queue form.
#[derive(Debug, Deserialize)]
pub struct RequeueForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
}

impl CsrfField for RequeueForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /jobs/{id}/requeue`: queues a new run of a `done` or `dead` job's report.
pub async fn requeue_job(
    State(state): State<AppState>,
    JobId(id): JobId,
    CsrfForm { user, .. }: CsrfForm<RequeueForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Ingest, Scope::Admin])?;
    match repro::requeue(&state.queue, id, user.name()).await? {
        Requeue::Queued { job_id, report_id } => {
            tracing::info!(job = id, new_job = job_id, by = %user.name(), "job re-queued");
            Ok(Redirect::to(&format!("/reports/{report_id}#job-{job_id}")).into_response())
        }
        Requeue::NotFinished { .. } => Err(AppError::Conflict(
            ErrorCode::JobPending,
            format!(
                "job {id} is still queued or running; only a done or dead job can be re-queued"
            ),
        )
        .into()),
        Requeue::AlreadyQueued { job_id, .. } => Err(AppError::Conflict(
            ErrorCode::JobPending,
            format!("job {job_id} of this report is already queued or running"),
        )
        .into()),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_huge_output_shows_its_end_with_a_note() {
        let text = format!(
            "{}Traceback (most recent call last):\nRuntimeError: boom\n",
            "é".repeat(300 << 10)
        );
        let shown = shown_output(&text);
        assert!(shown.len() < SHOWN_OUTPUT + 200, "{}", shown.len());
        assert!(shown.starts_with('['), "{}", &shown[..80]);
        assert!(shown.ends_with("RuntimeError: boom\n"));
        assert_eq!(shown_output("short\n"), "short\n");
    }

    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn the_excerpt_marks_the_user_frame_the_truth_and_the_root_cause() {
        let log = "noise\n/x/Indexing.cu:1: k: block: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nmore noise\nTraceback (most recent call last):\n  File \"/w/train.py\", line 41, in <module>\n    out = emb(idx)\n  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1532, in _call\n    return f()\nRuntimeError: CUDA error: device-side assert triggered\n";
        let tb = repro::main_traceback(log);
        let truth = UserFrame {
            file: "train.py".into(),
            line: 41,
            code: None,
            log_line: 0,
        };
        let v = trace_view(
            TraceView::default(),
            &lines(log),
            tb.as_ref(),
            Some(2),
            Some(&truth),
        );
        let numbers: Vec<usize> = v.lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, vec![2, 4, 5, 6, 7, 8, 9]);
        assert!(v.lines[0].root && !v.lines[0].gap);
        assert!(v.lines[1].gap, "line 3 left out");
        let user: Vec<usize> = v
            .lines
            .iter()
            .filter(|l| l.user)
            .map(|l| l.number)
            .collect();
        assert_eq!(user, vec![5, 6]);
        let truth: Vec<usize> = v
            .lines
            .iter()
            .filter(|l| l.truth)
            .map(|l| l.number)
            .collect();
        assert_eq!(truth, vec![5, 6]);
        assert_eq!(v.location.as_deref(), Some("train.py:41 out = emb(idx)"));
    }

    #[test]
    fn output_without_a_traceback_shows_its_tail() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let v = trace_view(TraceView::default(), &lines(&text), None, None, None);
        assert_eq!(v.lines.first().map(|l| l.number), Some(11));
        assert_eq!(v.lines.last().map(|l| l.number), Some(30));
    }

    /// A stored run of `stderr` that exited with `exit_code`.
    fn record(cpu_translation: bool, exit_code: i32, stderr: &str) -> RunRecord {
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
            vec![job_of(record(true, 1, NO_TORCH))],
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
            vec![job_of(record(true, 1, stderr))],
            None,
            reported,
            true,
            None,
        )
    }

    #[test]
    fn a_clean_run_on_the_cpu_says_what_it_means_for_the_reported_failure() {
        use crate::rules::Category;
        let run = |cpu_translation: bool, exit_code: i32| record(cpu_translation, exit_code, "");
        let placement = cpu_note(&run(true, 0), Some(Category::DeviceMismatch));
        assert!(placement.is_some_and(|n| n.contains("placement")));
        let kernel = cpu_note(&run(true, 0), Some(Category::IllegalMemoryAccess));
        assert!(kernel.is_some_and(|n| n.contains("kernel or the driver")));
        assert_eq!(
            cpu_note(&run(true, 1), Some(Category::DeviceMismatch)),
            None
        );
        assert_eq!(
            cpu_note(&run(false, 0), Some(Category::DeviceMismatch)),
            None
        );
    }
}
