//! The run section of a report page (issue 41 item 5): for a report uploaded as a run of files,
//! what to do with the job and why, the first failure with its file, line, rank, host and GPU,
//! the timeline of the failures across files and ranks (the first failure marked, the
//! consequences folded under it), and every file with its findings and a link into the log
//! viewer at its first line. The log pane below holds every file (each after its
//! `==> name <==` line), so its find searches across all of them; [`RunPane`] tells the pane
//! which file each shown line is in (a heading where a file starts), links every file, and
//! lists a find's matches per file. Drawing reads nothing.

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
    /// What the ranks' flight-recorder dumps say, in a sentence; empty without.
    pub collectives: String,
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
            collectives: story
                .collectives
                .as_ref()
                .map(collectives)
                .unwrap_or_default(),
        }
    }
}

/// `Collective 5 of group 0 (gloo:all_reduce): ranks 0, 1, 3 entered it; rank 2 never did.`
fn collectives(d: &crate::rules::run::flight::Divergence) -> String {
    let ranks = |r: &[u32]| {
        let list: Vec<String> = r.iter().map(ToString::to_string).collect();
        format!(
            "rank{} {}",
            if r.len() == 1 { "" } else { "s" },
            list.join(", ")
        )
    };
    let mut out = format!(
        "Collective {} of group {} ({}): {} entered it",
        d.seq,
        d.group,
        d.op,
        ranks(&d.entered)
    );
    if !d.missing.is_empty() {
        out.push_str(&format!("; {} never did", ranks(&d.missing)));
    }
    for m in &d.mismatched {
        out.push_str(&format!("; rank {} ran {} instead", m.rank, m.op));
    }
    out.push('.');
    out
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

/// What the log pane of a run adds to the log viewer: each shown line's file, every file to
/// open the viewer at, and a find's matches per file.
#[derive(Debug, Default)]
pub struct RunPane {
    /// For each shown line, in order: the file it is in, its heading drawn above the line
    /// where the file starts or the pane does.
    pub heads: Vec<FileHead>,
    /// Every file, with the stored log's line of its `==> name <==` header (upload order).
    pub files: Vec<(String, u64)>,
    /// A find's matches per file, among those shown, in log order; empty outside a find.
    pub hits: Vec<FileHits>,
}

/// The file a shown line is in.
#[derive(Debug, Default)]
pub struct FileHead {
    /// Whether the heading is drawn above this line.
    pub show: bool,
    pub name: String,
    /// `rank 2 · node-1 · cuda:2`, or empty.
    pub place: String,
    /// `a.log line 3`: where the line is in its file (empty for the file's `==> name <==`
    /// line and outside any file).
    pub title: String,
}

/// A find's matches in one file.
#[derive(Debug)]
pub struct FileHits {
    pub name: String,
    pub count: usize,
    /// The first of them, as the find's navigation links it.
    pub href: String,
}

impl RunPane {
    /// The pane of report `id`, a run told by `story`, showing the stored log's lines
    /// `shown`; `needle` when they are a find's matches.
    #[must_use]
    pub fn new(id: i64, story: &RunStory, shown: &[usize], needle: Option<&str>) -> RunPane {
        let mut files: Vec<&RunFile> = story.files.iter().collect();
        files.sort_by_key(|f| f.first_line);
        // The file holding stored line `n` (its header line included).
        let file_of = |n: u64| {
            let k = files.partition_point(|f| f.first_line.saturating_sub(1) <= n);
            k.checked_sub(1)
                .map(|k| files[k])
                .filter(|f| n < f.first_line + f.lines)
        };
        let grep = needle.map(|n| serde_urlencoded::to_string([("grep", n)]).unwrap_or_default());
        let mut heads = Vec::with_capacity(shown.len());
        let mut hits: Vec<FileHits> = Vec::new();
        let mut last: Option<&str> = None;
        for (k, &n) in shown.iter().enumerate() {
            let n = n as u64;
            let Some(f) = file_of(n) else {
                heads.push(FileHead::default());
                last = None;
                continue;
            };
            let starts = last != Some(f.name.as_str());
            last = Some(f.name.as_str());
            let line = (n + 1).saturating_sub(f.first_line);
            heads.push(FileHead {
                show: starts,
                name: f.name.clone(),
                place: place(f),
                title: if line > 0 {
                    format!("{} line {line}", f.name)
                } else {
                    String::new()
                },
            });
            if let Some(grep) = &grep {
                match hits.last_mut() {
                    Some(h) if !starts => h.count += 1,
                    _ => hits.push(FileHits {
                        name: f.name.clone(),
                        count: 1,
                        href: format!("/reports/{id}?{grep}&hit={}#L{n}", k + 1),
                    }),
                }
            }
        }
        RunPane {
            heads,
            files: story
                .files
                .iter()
                .map(|f| (f.name.clone(), f.first_line.saturating_sub(1)))
                .collect(),
            hits,
        }
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

    fn file(name: &str, first_line: u64, lines: u64) -> RunFile {
        RunFile {
            name: name.into(),
            bytes: 10,
            lines,
            first_line,
            category: Category::Unknown,
            title: String::new(),
            root_cause: None,
            role: FileRole::Clean,
            consequence_of: None,
            rank: Some(u32::try_from(first_line).unwrap_or(0)),
            host: None,
            gpu: None,
            at_ms: None,
            order: None,
            attempts: Vec::new(),
            findings: Vec::new(),
        }
    }

    #[test]
    fn the_pane_heads_each_files_lines_and_counts_a_finds_matches_per_file() {
        // a.log: header line 1, lines 2-4; b.log: header 5, lines 6-7.
        let story = RunStory {
            files: vec![file("a.log", 2, 3), file("b.log", 6, 2)],
            first_failure: None,
            action: crate::rules::run::RunAction {
                kind: crate::rules::run::ActionKind::Restart,
                reason: String::new(),
                nodes: Vec::new(),
                gpus: Vec::new(),
            },
            skipped: Vec::new(),
            collectives: None,
        };
        let page = RunPane::new(7, &story, &[3, 4, 5, 6, 7], None);
        let heads: Vec<(bool, &str, &str)> = page
            .heads
            .iter()
            .map(|h| (h.show, h.name.as_str(), h.title.as_str()))
            .collect();
        assert_eq!(
            heads,
            [
                (true, "a.log", "a.log line 2"),
                (false, "a.log", "a.log line 3"),
                (true, "b.log", ""),
                (false, "b.log", "b.log line 1"),
                (false, "b.log", "b.log line 2")
            ]
        );
        assert!(page.hits.is_empty());
        assert_eq!(page.files, [("a.log".into(), 1), ("b.log".into(), 5)]);
        assert_eq!(page.heads[0].place, "rank 2");

        let find = RunPane::new(7, &story, &[2, 4, 7, 9], Some("x y"));
        let hits: Vec<(&str, usize, &str)> = find
            .hits
            .iter()
            .map(|h| (h.name.as_str(), h.count, h.href.as_str()))
            .collect();
        assert_eq!(
            hits,
            [
                ("a.log", 2, "/reports/7?grep=x+y&hit=1#L2"),
                ("b.log", 1, "/reports/7?grep=x+y&hit=3#L7")
            ]
        );
        assert!(
            !find.heads[3].show && find.heads[3].name.is_empty(),
            "past the last file"
        );
    }

    #[test]
    fn times_read_as_a_clock() {
        assert_eq!(clock(1_719_323_196_560), "13:46:36.560 UTC");
        assert_eq!(clock(0), "00:00:00.000 UTC");
    }
}
