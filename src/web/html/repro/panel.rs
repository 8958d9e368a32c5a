//! A finished run as the report page shows it: how it ended, where the synchronous run (or
//! the run on the CPU) put the failure against where the log did, the traces side by side
//! ([`super::trace`]), what a clean run on the CPU means, and the run's output.

use super::trace::trace_view;
use super::{ReproPanel, TraceView};
use crate::api_types::Sandbox;
use crate::app::reports::ReportedTrace;
use crate::app::reproduce::reading::RunReading;
use crate::app::reproduce::{self as repro, ReproductionView, RunRecord, UserFrame};
use crate::ingest::normalize::strip_ansi;
use crate::rules::Classification;
use crate::rules::outcome::Outcome;

/// Most of a stream the page shows: its end, where the traceback is (the API has it whole).
const SHOWN_OUTPUT: usize = 256 << 10;

/// The panel of a finished run `view`, read by `app` as `run` (and its CPU follow-up as
/// `cpu`), beside the log's own trace `reported` (whose user frame is `reported_loc`).
pub(super) fn panel(
    view: &ReproductionView,
    run: &RunReading,
    cpu: Option<&RunReading>,
    reported: &ReportedTrace,
    reported_loc: Option<&UserFrame>,
) -> ReproPanel {
    let r = &view.run;
    let stopped = !run.informative();
    // Only a run that failed in the user's code names a true failing line.
    let sync_loc = run.true_line().cloned();
    let sync_lines: Vec<String> = run.output.lines().map(str::to_owned).collect();
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
            user_label: if run.decided.outcome == Outcome::Reproduced {
                "true failing line"
            } else {
                "where the run stopped"
            },
            ..TraceView::default()
        },
        &sync_lines,
        run.traceback.as_ref(),
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
        cpu_line: r
            .cpu
            .as_ref()
            .zip(cpu)
            .and_then(|(c, read)| cpu_line(c, read)),
        verdict: r.verdict.clone(),
        environment: r
            .environment
            .as_ref()
            .map(crate::api_types::RunEnvironment::line),
        traces: [
            Some(reported_view),
            Some(sync_view),
            r.cpu.as_ref().zip(cpu).map(|(c, read)| cpu_view(c, read)),
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
fn cpu_view(cpu: &crate::api_types::CpuRun, read: &RunReading) -> TraceView {
    let lines: Vec<String> = read.output.lines().map(str::to_owned).collect();
    let root = cpu.classification.as_ref().and_then(root_line);
    trace_view(
        TraceView {
            title: "On the CPU (CUDA redirected to the CPU)",
            class: "trace-cpu",
            user_label: if read.informative() {
                "failing line on the CPU"
            } else {
                "where the CPU run stopped"
            },
            ..TraceView::default()
        },
        &lines,
        read.traceback.as_ref(),
        root,
        None,
    )
}

/// "On the CPU: `IndexError: index out of range in self` at repro.py:13", or what the CPU run
/// did when it raised nothing.
fn cpu_line(cpu: &crate::api_types::CpuRun, read: &RunReading) -> Option<String> {
    let decided = &read.decided;
    if !read.informative() {
        return Some(format!(
            "On the CPU the run was stopped by the worker's environment ({}), so it says \
             nothing about the failure. {}",
            decided.reason.trim_end_matches('.'),
            decided.fix
        ));
    }
    let exception = read.traceback.as_ref().and_then(|t| t.exception.clone());
    Some(match (exception, read.at.as_ref(), cpu.exit_code) {
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

fn root_line(classification: &Classification) -> Option<usize> {
    classification.root_cause.as_ref().map(|r| r.line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::html::repro::tests::record;

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
