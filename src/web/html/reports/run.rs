//! The run section of a report page (issue 41 item 5): for a report uploaded as a run of files,
//! what to do with the job and why, the first failure with its file, line, rank, host and GPU,
//! the timeline of the failures across files and ranks (the first failure marked, the
//! consequences folded under it), and every file with its findings and a link into the log
//! viewer at its first line. The log pane below holds every file (each after its
//! `==> name <==` line), so its find searches across all of them. Drawing reads nothing.

use crate::rules::Category;
use crate::rules::run::{FileRole, RunFile, RunStory, SkippedFile};

/// The section, ready to draw.
#[derive(Debug)]
pub struct RunSection {
    /// `fix_code`, `fix_environment`, `restart`, `drain_node`.
    pub action_kind: &'static str,
    /// The action in plain words.
    pub action_words: &'static str,
    pub reason: String,
    /// Nodes and GPUs a drain names, joined.
    pub nodes: String,
    pub gpus: String,
    /// The first failure, when there is one.
    pub first: Option<Event>,
    /// Failures in time order that are not consequences, the first one first.
    pub timeline: Vec<Event>,
    /// Consequences of the first failure, in time order (folded under it).
    pub consequences: Vec<Event>,
    /// Every file, in upload order.
    pub files: Vec<FileRow>,
    pub skipped: Vec<SkippedFile>,
}

/// One failure on the timeline.
#[derive(Debug)]
pub struct Event {
    pub file: String,
    /// `rank 2 · node-1 · cuda:2`, or empty.
    pub place: String,
    /// `13:46:36.560 UTC` when the file says, else empty.
    pub at: String,
    pub category: Category,
    pub text: String,
    /// The line in the file, and where it is in the stored log.
    pub line: u64,
    pub log_line: u64,
    /// Attempts that failed differently, said in words.
    pub attempts_note: String,
}

/// One file of the run.
#[derive(Debug)]
pub struct FileRow {
    pub name: String,
    /// `first failure`, `consequence`, `failure`, `clean`.
    pub role: &'static str,
    pub role_class: &'static str,
    pub lines: u64,
    /// Where the file starts in the stored log.
    pub first_line: u64,
    pub place: String,
    pub category: Category,
    pub findings: Vec<(u64, u64, String, String)>,
}

impl RunSection {
    /// The section of `story`.
    #[must_use]
    pub fn new(story: RunStory) -> RunSection {
        let mut failing: Vec<&RunFile> = story.files.iter().filter(|f| f.order.is_some()).collect();
        failing.sort_by_key(|f| f.order);
        let timeline: Vec<Event> = failing
            .iter()
            .filter(|f| f.role != FileRole::Consequence)
            .filter_map(|f| event(f))
            .collect();
        let consequences = failing
            .iter()
            .filter(|f| f.role == FileRole::Consequence)
            .filter_map(|f| event(f))
            .collect();
        let first = story
            .files
            .iter()
            .find(|f| f.role == FileRole::FirstFailure)
            .and_then(event);
        let files = story.files.iter().map(file_row).collect();
        RunSection {
            action_kind: story.action.kind.as_str(),
            action_words: story.action.kind.words(),
            reason: story.action.reason,
            nodes: story.action.nodes.join(", "),
            gpus: story.action.gpus.join(", "),
            first,
            timeline,
            consequences,
            files,
            skipped: story.skipped,
        }
    }
}

fn place(f: &RunFile) -> String {
    [
        f.rank.map(|r| format!("rank {r}")),
        f.host.clone(),
        f.gpu.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" · ")
}

fn event(f: &RunFile) -> Option<Event> {
    let rc = f.root_cause.as_ref()?;
    let attempts_note = crate::rules::run::attempts::differs(&f.attempts)
        .map(|a| {
            format!(
                "{} attempts; attempt {} failed differently: {}",
                f.attempts.len(),
                a.number,
                a.root_cause.as_ref().map_or("", |r| r.text.as_str())
            )
        })
        .unwrap_or_default();
    Some(Event {
        file: f.name.clone(),
        place: place(f),
        at: f.at_ms.map(clock).unwrap_or_default(),
        category: f.category,
        text: rc.text.clone(),
        line: rc.line,
        log_line: f.first_line + rc.line - 1,
        attempts_note,
    })
}

fn file_row(f: &RunFile) -> FileRow {
    let (role, role_class) = match f.role {
        FileRole::FirstFailure => ("first failure", "first"),
        FileRole::Consequence => ("consequence", "consequence"),
        FileRole::Failure => ("failure", "failure"),
        FileRole::Clean => ("no failure", "clean"),
    };
    FileRow {
        name: f.name.clone(),
        role,
        role_class,
        lines: f.lines,
        first_line: f.first_line,
        place: place(f),
        category: f.category,
        findings: f
            .findings
            .iter()
            .map(|x| {
                (
                    x.line,
                    f.first_line + x.line - 1,
                    x.rule.clone(),
                    x.text.clone(),
                )
            })
            .collect(),
    }
}

/// `13:46:36.560 UTC` of milliseconds since the epoch (the date is the run's, so left out).
fn clock(ms: i64) -> String {
    let day = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_a_clock() {
        assert_eq!(clock(1_719_323_196_560), "13:46:36.560 UTC");
        assert_eq!(clock(0), "00:00:00.000 UTC");
    }
}
