//! The log's own traceback around its root cause, as the report page sets it beside a
//! reproduction's traceback: parsed once per view from a bounded excerpt of the stored log
//! (a log may be hundreds of megabytes; the excerpt is at most [`ReportedTrace::BEFORE`] +
//! [`ReportedTrace::AFTER`] lines).

use crate::app::reproduce;
use crate::ingest::traceback::Traceback;
use crate::rules::{Category, Classification};

/// The log's traceback and root-cause line, from an excerpt of the log around its root cause.
#[derive(Clone, Debug, Default)]
pub struct ReportedTrace {
    /// The excerpt's lines; line numbers below count from the excerpt's first line.
    pub lines: Vec<String>,
    /// Lines of the log before the excerpt.
    pub base: usize,
    /// The excerpt's main traceback.
    pub tb: Option<Traceback>,
    /// The root-cause line, counted from the excerpt's first line (none when outside it).
    pub root_line: Option<usize>,
    /// The log's own category.
    pub category: Option<Category>,
}

impl ReportedTrace {
    /// Lines of the log before and after the root-cause line that [`ReportedTrace::from_excerpt`]
    /// wants (without a root cause: the last `BEFORE + AFTER` lines).
    pub const BEFORE: usize = 300;
    pub const AFTER: usize = 100;

    /// Parses an excerpt of the stored log that starts at line `first`. CPU work: call from a
    /// blocking thread.
    #[must_use]
    pub fn from_excerpt(
        excerpt: &str,
        first: usize,
        classification: &Classification,
    ) -> ReportedTrace {
        let base = first.saturating_sub(1);
        ReportedTrace {
            lines: excerpt.lines().map(str::to_owned).collect(),
            base,
            tb: reproduce::main_traceback(excerpt),
            root_line: (classification.root_cause.as_ref().map(|r| r.line))
                .and_then(|n| n.checked_sub(base))
                .filter(|&n| n >= 1),
            category: Some(classification.category),
        }
    }

    /// The lines of a log of `total` lines that [`ReportedTrace::from_excerpt`] wants.
    #[must_use]
    pub fn excerpt_range(total: usize, root: Option<usize>) -> (usize, usize) {
        match root {
            Some(r) => (
                r.saturating_sub(Self::BEFORE).max(1),
                (r + Self::AFTER).min(total.max(1)),
            ),
            None => (
                total.saturating_sub(Self::BEFORE + Self::AFTER - 1).max(1),
                total.max(1),
            ),
        }
    }
}
