//! The report page's log pane as it is drawn from the lines `app::reports::page` read: a page
//! of the log, a find's matches (marked, with links to the previous and next match), or the
//! lines that hold a finding.

use super::super::logview::{self, LogLine, LogWindow};
use crate::app::reports::{LogPane, LogView, PaneLines};

/// What the log pane shows.
#[derive(Debug)]
pub(super) enum LogMode {
    /// A page of consecutive lines.
    Page,
    /// The lines that contain `needle`: `matched` in all, the first ones shown, one of them
    /// the current match.
    Find {
        needle: String,
        matched: usize,
        nav: FindNav,
    },
    /// Only the lines that hold a finding.
    Findings,
}

/// Where a find is among its shown matches, kept in the URL (`?grep=TEXT&hit=K#LN`) so a
/// link or a reload opens the same match.
#[derive(Debug, Default)]
pub(super) struct FindNav {
    /// 1-based position of the current match among those shown (0: none shown).
    pub current: usize,
    /// Matches shown.
    pub shown: usize,
    /// The current match's line number (0: none).
    pub line: usize,
    pub prev: Option<String>,
    pub next: Option<String>,
}

impl FindNav {
    /// The position `hit` (1-based, clamped) among `lines`, the lines shown for `needle`.
    fn new(id: i64, needle: &str, hit: Option<usize>, lines: &[LogLine]) -> FindNav {
        if lines.is_empty() {
            return FindNav::default();
        }
        let current = hit.unwrap_or(1).clamp(1, lines.len());
        let grep = serde_urlencoded::to_string([("grep", needle)]).unwrap_or_default();
        let link = |k: usize| {
            let line = lines[k - 1].number;
            format!("/reports/{id}?{grep}&hit={k}#L{line}")
        };
        FindNav {
            current,
            shown: lines.len(),
            line: lines[current - 1].number,
            prev: (current > 1).then(|| link(current - 1)),
            next: (current < lines.len()).then(|| link(current + 1)),
        }
    }
}

/// The pane of report `id`, a log of `total` lines, with the lines in `highlight` marked: what
/// it shows and its lines as drawn. CPU work (a page can be megabytes of escape-coded text):
/// call from a blocking thread.
pub(super) fn draw(
    id: i64,
    pane: LogPane,
    total: usize,
    highlight: &[usize],
) -> (LogMode, LogWindow) {
    let matched = match &pane.lines {
        PaneLines::Picked(picked) => picked.matched,
        PaneLines::Nothing | PaneLines::Page { .. } => 0,
    };
    let mut log = match pane.lines {
        PaneLines::Nothing => LogWindow::default(),
        PaneLines::Page { first, text } => logview::render(&text, first, total, highlight),
        PaneLines::Picked(picked) => logview::render_picked(&picked.lines, total, highlight),
    };
    let mode = match pane.view {
        LogView::Page { .. } => LogMode::Page,
        LogView::Findings => LogMode::Findings,
        LogView::Find { needle, hit } => {
            let nav = FindNav::new(id, &needle, hit, &log.lines);
            logview::mark_matches(&mut log.lines, &needle);
            LogMode::Find {
                needle,
                matched,
                nav,
            }
        }
    };
    (mode, log)
}
