//! The report page's use case (`GET /reports/{id}`): every read one view needs, in one call.
//! The report with what is shown beside it ([`super::detail`]), the log pane's lines (a page,
//! a find's first matches, or the lines that hold a finding), the excerpt of the log around
//! its root cause that a reproduction's traceback is set beside, the known fix, and the
//! workers seen while a job is pending. Only the lines shown are read from the stored log, so
//! a view costs the same for any size of log; a log retention removed is not read at all.

use serde::Deserialize;

use super::excerpt::ReportedTrace;
use super::log::{self, PickedLines};
use super::{ReportContext, detail};
use crate::api_types::ErrorCode;
use crate::app::logfind::FindCache;
use crate::app::reproduce::reading::{JobReading, read_jobs};
use crate::app::reproduce::workers::{self, Seen};
use crate::app::similar;
use crate::app::{Error, blocking};
use crate::rules::{Classification, Finding};
use crate::storage::Db;
use crate::storage::groups::Fix;
use crate::storage::reports::StoredScript;
use crate::time::Timestamp;

/// Lines per page of the log pane.
pub const PAGE_LINES: usize = 400;
/// Most lines a find shows.
const FIND_SHOWN: usize = 400;
/// Longest text a find looks for, in characters.
const FIND_MAX: usize = 200;
/// Bytes of a log line read for a view; the page shows fewer characters still, and the raw
/// download has the line whole.
const MAX_VIEW_LINE_BYTES: usize = 16 << 10;

/// The log pane's query as the page's URL carries it, unchecked ([`WindowRequest::check`]):
/// `?start=N`: the first line of the log window; `?line=N`: the page that holds line N (the
/// link then scrolls to `#LN`); `?grep=TEXT`: only the lines containing TEXT, `&hit=K` the
/// K-th of them current; `?view=findings`: only the lines that hold a finding.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WindowRequest {
    /// The first line of the window.
    pub start: Option<usize>,
    /// A line whose page to show (wins over `start`).
    pub line: Option<usize>,
    /// Text to find (trimmed; empty finds nothing).
    pub grep: Option<String>,
    /// Which shown match is current, from 1.
    pub hit: Option<usize>,
    /// `log` (the default) or `findings`.
    pub view: Option<String>,
}

/// What the log pane shows, as [`WindowRequest::check`] reads the query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogView {
    /// A page of consecutive lines: the page that holds `line`, else from `start`, else with
    /// the root-cause line near its top.
    Page {
        start: Option<usize>,
        line: Option<usize>,
    },
    /// The lines that contain `needle` (trimmed, never empty), the `hit`-th shown current.
    Find { needle: String, hit: Option<usize> },
    /// Only the lines that hold a finding.
    Findings,
}

impl WindowRequest {
    /// The pane the query asks for: 400 `bad_query` for a find longer than [`FIND_MAX`]
    /// characters or a view other than `log` and `findings`. A find wins over the view.
    pub fn check(&self) -> Result<LogView, Error> {
        let bad = |m: String| Error::Malformed(ErrorCode::BadQuery, m);
        let needle = self.grep.as_deref().map(str::trim).unwrap_or_default();
        if needle.chars().count() > FIND_MAX {
            return Err(bad(format!("grep: at most {FIND_MAX} characters")));
        }
        let view = match self.view.as_deref() {
            None | Some("" | "log") => LogView::Page {
                start: self.start,
                line: self.line,
            },
            Some("findings") => LogView::Findings,
            Some(other) => {
                return Err(bad(format!(
                    "view: expected log or findings, got {other:?}"
                )));
            }
        };
        if needle.is_empty() {
            return Ok(view);
        }
        Ok(LogView::Find {
            needle: needle.to_owned(),
            hit: self.hit,
        })
    }
}

/// The log lines one view read for its pane.
#[derive(Clone, Debug)]
pub enum PaneLines {
    /// Nothing to show: the log is empty, or retention removed it.
    Nothing,
    /// Lines `first..` of the log, each followed by `\n`.
    Page { first: usize, text: Vec<u8> },
    /// Lines picked out of the log (a find's first matches, the findings' lines), with how
    /// many matched in all.
    Picked(PickedLines),
}

/// The log pane of one view: what the query asked for and the lines read for it (each cut to
/// [`MAX_VIEW_LINE_BYTES`]).
#[derive(Clone, Debug)]
pub struct LogPane {
    /// What the query asked for.
    pub view: LogView,
    /// What was read for it.
    pub lines: PaneLines,
}

/// When and after how many days retention removed a report's log.
#[derive(Clone, Copy, Debug)]
pub struct LogRemoval {
    /// When the retention pass removed it.
    pub at: Timestamp,
    /// The retention in days that removed it.
    pub after_days: Option<i32>,
}

/// What fixed this failure before: its own group's newest fix (never a similar group's).
#[derive(Clone, Debug)]
pub struct KnownFix {
    /// The fix itself.
    pub fix: Fix,
}

/// Everything the report page shows, read for one view.
#[derive(Clone, Debug)]
pub struct ReportView {
    /// The report, its group, fixes and similar failures (its jobs are in [`Self::jobs`]).
    pub detail: ReportContext,
    /// Its reproduction jobs, oldest first, their newest runs read for the page (moved out
    /// of `detail.jobs`, which is left empty).
    pub jobs: Vec<JobReading>,
    /// The log pane: what it shows and the lines read for it.
    pub pane: LogPane,
    /// Lines in the stored log (as classified).
    pub total_lines: usize,
    /// Set when retention removed the log: the page says so instead of showing it.
    pub log_removed: Option<LogRemoval>,
    /// The log's traceback around its root cause, read only when a reproduction has run
    /// (empty otherwise).
    pub reported: ReportedTrace,
    /// What fixed this failure before, shown right under the root cause.
    pub known_fix: Option<KnownFix>,
    /// Who could take a pending job: read only while one is queued or running.
    pub workers_seen: Option<Seen>,
}

/// The report page of report `id` with its log pane as `window` asks: 404 for an unknown
/// report, then 400 `bad_query` for a bad window (in that order), 410 when a log read finds
/// the log removed meanwhile.
#[tracing::instrument(name = "reports::page", skip_all, fields(report_id = id))]
pub async fn page(
    db: &Db,
    finds: &FindCache,
    id: i64,
    window: &WindowRequest,
) -> Result<ReportView, Error> {
    let mut detail = detail(db, id).await?;
    // The page shows the script: one the object store keeps (migration 0050) is read from
    // there (the API's report only says whether there is one, and reads nothing more).
    if let Some(script @ StoredScript::Object { .. }) = detail.report.stored_script() {
        detail.report.script = Some(crate::app::log_objects::read_script(db, script).await?);
    }
    let view = window.check()?;
    let report = &detail.report;
    let classification = &report.classification;
    let root_line = classification.root_cause.as_ref().map(|r| r.line);
    let total_lines = usize::try_from(report.log_lines).unwrap_or(0);
    let log_removed = report.log_removed_at.map(|at| LogRemoval {
        at,
        after_days: report.log_removed_after_days,
    });
    let lines = if log_removed.is_some() {
        PaneLines::Nothing
    } else {
        let findings = &classification.findings;
        pane_lines(db, finds, id, &view, total_lines, root_line, findings).await?
    };
    let ran = detail.jobs.iter().any(|j| j.reproduction.is_some());
    let reported = if log_removed.is_none() && ran {
        reported_trace(db, id, total_lines, classification.clone()).await?
    } else {
        ReportedTrace::default()
    };
    let known_fix = similar::known_fix(&detail.fixes).map(|f| KnownFix { fix: f.clone() });
    let workers_seen = if detail.jobs.iter().any(|j| !j.state.is_finished()) {
        Some(workers::seen_recently(db).await?)
    } else {
        None
    };
    let jobs = std::mem::take(&mut detail.jobs);
    let jobs = blocking(move || read_jobs(jobs)).await?;
    Ok(ReportView {
        detail,
        jobs,
        pane: LogPane { view, lines },
        total_lines,
        log_removed,
        reported,
        known_fix,
        workers_seen,
    })
}

/// The lines the pane shows, of a log of `total` lines whose root cause is at `root_line`.
async fn pane_lines(
    db: &Db,
    finds: &FindCache,
    id: i64,
    view: &LogView,
    total: usize,
    root_line: Option<usize>,
    findings: &[Finding],
) -> Result<PaneLines, Error> {
    Ok(match view {
        LogView::Page { start, line } => {
            let (start, focus) = match line {
                Some(line) => (None, Some(*line)),
                None => (*start, root_line),
            };
            match page_range(total, start, focus) {
                Some((first, last)) => PaneLines::Page {
                    first,
                    text: log::log_lines(db, id, first, last, MAX_VIEW_LINE_BYTES).await?,
                },
                None => PaneLines::Nothing,
            }
        }
        LogView::Find { needle, .. } => PaneLines::Picked(
            log::grep(db, finds, id, needle, FIND_SHOWN, MAX_VIEW_LINE_BYTES).await?,
        ),
        LogView::Findings => {
            let wanted = findings.iter().map(|f| f.line).collect();
            PaneLines::Picked(log::lines_at(db, id, wanted, MAX_VIEW_LINE_BYTES).await?)
        }
    })
}

/// The log's traceback around its root cause, from an excerpt of a log of `total` lines
/// (parsed on a blocking thread).
async fn reported_trace(
    db: &Db,
    id: i64,
    total: usize,
    classification: Classification,
) -> Result<ReportedTrace, Error> {
    let root_line = classification.root_cause.as_ref().map(|r| r.line);
    let (first, last) = ReportedTrace::excerpt_range(total, root_line);
    let text = log::log_lines(db, id, first, last, MAX_VIEW_LINE_BYTES).await?;
    blocking(move || {
        ReportedTrace::from_excerpt(&String::from_utf8_lossy(&text), first, &classification)
    })
    .await
}

/// The lines of a log of `total` lines to show: from `start` if given, else with `focus` (the
/// root-cause line) about a quarter page down, else from line 1. `None` for an empty log.
#[must_use]
pub fn page_range(
    total: usize,
    start: Option<usize>,
    focus: Option<usize>,
) -> Option<(usize, usize)> {
    if total == 0 {
        return None;
    }
    // The last full page, where a start past the end or a focus near it lands.
    let last_page = total.saturating_sub(PAGE_LINES - 1).max(1);
    let first = match (start, focus) {
        (Some(s), _) if s > total => last_page,
        (Some(s), _) => s.max(1),
        (None, Some(f)) => f.saturating_sub(PAGE_LINES / 4).clamp(1, last_page),
        (None, None) => 1,
    };
    Some((first, (first + PAGE_LINES - 1).min(total)))
}
