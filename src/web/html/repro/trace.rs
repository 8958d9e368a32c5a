//! A traceback excerpt as a column of the reproduction panel: its header to its exception (the
//! innermost lines when long) and the root-cause line, with the user's frame, the true failing
//! line and the root cause marked.

use std::collections::BTreeSet;

use super::{TraceLine, TraceView};
use crate::app::reproduce::{self as repro, UserFrame};
use crate::ingest::normalize::strip_ansi;

/// Most lines of a traceback shown (the innermost ones are kept).
const MAX_TRACE_LINES: usize = 60;
/// Longest line shown in a trace.
const MAX_LINE_CHARS: usize = 500;

/// The excerpt of `lines` around a traceback: its header to its exception (the innermost
/// lines when long), plus the root-cause line; the user frame, frames at `truth`, and the
/// root-cause line marked. Without either, the last lines of the text.
pub(super) fn trace_view(
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

#[cfg(test)]
mod tests {
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
}
