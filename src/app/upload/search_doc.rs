//! A report's search document: what people remember of a failure, kept small. Search cannot
//! read every stored log (they can be hundreds of megabytes, gzip-compressed), so each report
//! keeps a bounded excerpt in sections that rank differently (migration 0016): the root cause,
//! the other findings, the names (traceback frames, file name, project, branch, commit, job
//! URL) and a few log lines (the head, the lines around every finding, the tail).
//!
//! Pure: the caller hands in the classification and the log's lines (all of them, or only the
//! ranges [`Plan::ranges`] asks for); nothing here touches the database.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead};
use std::ops::RangeInclusive;

use crate::ingest::{normalize, traceback};
use crate::rules::Classification;
use crate::storage::search::Document;

/// Non-blank lines kept from the start and from the end of the log.
const HEAD_LINES: usize = 6;
const TAIL_LINES: usize = 6;
/// Lines kept before and after each finding.
const CONTEXT: usize = 2;
/// Lines before a finding read for the traceback that usually precedes it.
const TRACEBACK_ZONE: usize = 60;
/// Findings whose surroundings are read (root cause first).
const MAX_FINDINGS: usize = 16;
/// Frames kept, in log order.
const MAX_FRAMES: usize = 32;
/// Characters kept of any one line.
const LINE_CHARS: usize = 240;
/// Bytes per section: the whole document stays under 16 KiB.
const ROOT_BYTES: usize = 1 << 10;
const SYMPTOM_BYTES: usize = 4 << 10;
const NAME_BYTES: usize = 4 << 10;
const EXCERPT_BYTES: usize = 6 << 10;

/// Where a report came from, as far as search cares.
#[derive(Clone, Debug, Default)]
pub struct Origin<'a> {
    pub filename: &'a str,
    pub project: &'a str,
    pub branch: &'a str,
    pub commit: &'a str,
    pub job_url: &'a str,
}

/// Collects the lines a document needs while the log is read once.
#[derive(Debug)]
pub struct Plan {
    /// Lines in the log.
    total: usize,
    /// 1-based lines of the findings read, root cause first.
    findings: Vec<usize>,
    /// Merged ranges of wanted lines, in order.
    ranges: Vec<RangeInclusive<usize>>,
    /// Wanted lines as read (ANSI and prefixes still there: the traceback parser peels them).
    lines: BTreeMap<usize, String>,
}

impl Plan {
    /// The lines `c` needs: the head, the tail, and around every finding (with the traceback
    /// zone before it).
    #[must_use]
    pub fn new(c: &Classification) -> Plan {
        let total = usize::try_from(c.stats.lines).unwrap_or(usize::MAX);
        let mut findings: Vec<usize> = Vec::new();
        for line in c
            .root_cause
            .iter()
            .map(|r| r.line)
            .chain(c.findings.iter().map(|f| f.line))
        {
            if line > 0 && !findings.contains(&line) && findings.len() < MAX_FINDINGS {
                findings.push(line);
            }
        }
        // Blank lines do not count towards the head and tail: read a few more.
        let mut wanted = vec![
            1..=HEAD_LINES * 2,
            total.saturating_sub(TAIL_LINES * 2)..=total,
        ];
        for &f in &findings {
            wanted.push(f.saturating_sub(TRACEBACK_ZONE).max(1)..=f + CONTEXT);
        }
        Plan {
            total,
            findings,
            ranges: merge(wanted),
            lines: BTreeMap::new(),
        }
    }

    /// The line ranges to read (1-based, inclusive, sorted, disjoint).
    #[must_use]
    pub fn ranges(&self) -> &[RangeInclusive<usize>] {
        &self.ranges
    }

    fn wants(&self, line: usize) -> bool {
        let at = self.ranges.partition_point(|r| *r.end() < line);
        self.ranges.get(at).is_some_and(|r| r.contains(&line))
    }

    /// Reads `text`, whose first line is line `first_line` of the log.
    pub fn read(&mut self, first_line: usize, text: &[u8]) {
        for (number, line) in (first_line..).zip(text.split(|&b| b == b'\n')) {
            if self.wants(number) {
                let keep = &line[..line.len().min(4 * LINE_CHARS)];
                self.lines
                    .insert(number, String::from_utf8_lossy(keep).into_owned());
            }
        }
    }

    /// Reads the whole log from `log`, line by line.
    pub fn read_stream(&mut self, mut log: impl BufRead) -> io::Result<()> {
        let mut line = Vec::new();
        let mut number = 1;
        loop {
            line.clear();
            if log.read_until(b'\n', &mut line)? == 0 {
                return Ok(());
            }
            if self.wants(number) {
                self.read(number, line.strip_suffix(b"\n").unwrap_or(&line));
            }
            number += 1;
        }
    }

    /// The document of `c`, from the lines read.
    #[must_use]
    pub fn finish(self, c: &Classification, origin: &Origin<'_>) -> Document {
        let root = root_section(c);
        let mut known: BTreeSet<String> = BTreeSet::new();
        if let Some(r) = &c.root_cause {
            known.insert(clean(&r.text));
        }
        let mut symptoms = Section::new(SYMPTOM_BYTES);
        for f in c.findings.iter().take(4 * MAX_FINDINGS) {
            let text = clean(&f.text);
            if !text.is_empty() && known.insert(text.clone()) {
                symptoms.push(&text);
            }
        }
        let (frames, frame_lines) = self.frames();
        let mut names = Section::new(NAME_BYTES);
        for line in frames {
            names.push(&line);
        }
        push_origin(&mut names, origin);
        Document {
            root,
            symptoms: symptoms.text,
            names: names.text,
            excerpt: self.excerpt(&known, &frame_lines),
        }
    }

    /// Every traceback frame in the zones before the findings, as search lines:
    /// `path:NN basename function` then the code line; and the log lines they came from.
    fn frames(&self) -> (Vec<String>, BTreeSet<usize>) {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut used = BTreeSet::new();
        for run in runs(&self.lines) {
            let first = *run.first().map(|(n, _)| n).unwrap_or(&1);
            let text: Vec<&str> = run.iter().map(|(_, l)| l.as_str()).collect();
            for tb in traceback::parse(&text.join("\n")) {
                for f in &tb.frames {
                    let at = first + f.log_line - 1;
                    used.insert(at);
                    if f.code.is_some() {
                        used.insert(at + 1);
                    }
                    if out.len() >= 2 * MAX_FRAMES
                        || !seen.insert((f.file.clone(), f.line, f.function.clone()))
                    {
                        continue;
                    }
                    let base = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
                    out.push(clean(&format!(
                        "{}:{} {} {}",
                        f.file, f.line, base, f.function
                    )));
                    if let Some(code) = &f.code {
                        out.push(clean(code));
                    }
                }
            }
        }
        (out, used)
    }

    /// The head, the lines around each finding and the tail, without the findings themselves
    /// (their own sections hold them) or frames (the names hold them), each line once.
    fn excerpt(&self, known: &BTreeSet<String>, frame_lines: &BTreeSet<usize>) -> String {
        let mut keep: BTreeSet<usize> = BTreeSet::new();
        let nonblank = |n: &&usize| self.lines.get(n).is_some_and(|l| !l.trim().is_empty());
        keep.extend(self.lines.keys().filter(nonblank).take(HEAD_LINES));
        keep.extend(self.lines.keys().rev().filter(nonblank).take(TAIL_LINES));
        for &f in &self.findings {
            keep.extend(f.saturating_sub(CONTEXT)..=f + CONTEXT);
        }
        let mut seen: BTreeSet<String> = known.clone();
        let mut excerpt = Section::new(EXCERPT_BYTES);
        for n in keep.into_iter().filter(|&n| n <= self.total.max(1)) {
            if frame_lines.contains(&n) {
                continue;
            }
            let Some(raw) = self.lines.get(&n) else {
                continue;
            };
            let line = clean(raw);
            if !line.is_empty() && seen.insert(line.clone()) {
                excerpt.push(&line);
            }
        }
        excerpt.text
    }
}

/// The names section of a report whose log retention removed: its metadata only, since the
/// frames were read from the log (the root-cause and symptom sections come from the
/// classification, which stays).
#[must_use]
pub fn names_without_log(origin: &Origin<'_>) -> String {
    let mut names = Section::new(NAME_BYTES);
    push_origin(&mut names, origin);
    names.text
}

fn push_origin(names: &mut Section, origin: &Origin<'_>) {
    for value in [
        origin.filename,
        origin.project,
        origin.branch,
        origin.commit,
        origin.job_url,
    ] {
        names.push(&clean(value));
    }
}

/// Consecutive runs of the lines read.
fn runs(lines: &BTreeMap<usize, String>) -> Vec<Vec<(usize, &String)>> {
    let mut out: Vec<Vec<(usize, &String)>> = Vec::new();
    for (&n, l) in lines {
        match out.last_mut() {
            Some(run) if run.last().is_some_and(|(m, _)| m + 1 == n) => run.push((n, l)),
            _ => out.push(vec![(n, l)]),
        }
    }
    out
}

fn merge(mut ranges: Vec<RangeInclusive<usize>>) -> Vec<RangeInclusive<usize>> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_by_key(|r| *r.start());
    let mut out: Vec<RangeInclusive<usize>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if *r.start() <= last.end().saturating_add(1) => {
                *last = *last.start()..=(*last.end()).max(*r.end());
            }
            _ => out.push(r),
        }
    }
    out
}

/// The title and the root-cause line.
fn root_section(c: &Classification) -> String {
    let mut root = Section::new(ROOT_BYTES);
    root.push(&clean(&c.title));
    if let Some(r) = &c.root_cause {
        root.push(&clean(&r.text));
    }
    root.text
}

/// One line as search keeps it: decoded, without ANSI and log prefixes, control characters as
/// spaces (snippets mark matches with control characters), at most [`LINE_CHARS`] characters.
fn clean(raw: &str) -> String {
    let line = normalize::clean_line(raw.as_bytes());
    let line: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(LINE_CHARS)
        .collect();
    line.trim().to_owned()
}

/// Lines joined by newlines, up to a byte budget (a line that does not fit is left out).
struct Section {
    text: String,
    budget: usize,
}

impl Section {
    fn new(budget: usize) -> Section {
        Section {
            text: String::new(),
            budget,
        }
    }

    fn push(&mut self, line: &str) {
        if line.is_empty() || self.text.len() + line.len() + 1 > self.budget {
            return;
        }
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(line);
    }
}

/// The words of a document that "did you mean" may suggest: lowercase ASCII letters and
/// digits, 3-32 long, starting with a letter, with at most two digits (so hashes, addresses
/// and ids stay out). Sorted and distinct. Migration 0016 applies the same rule in SQL.
#[must_use]
pub fn words(doc: &Document) -> Vec<String> {
    let mut out = BTreeSet::new();
    for section in [&doc.root, &doc.symptoms, &doc.names, &doc.excerpt] {
        out.extend(vocabulary_words(section));
    }
    out.into_iter().collect()
}

/// The vocabulary words of `text` (see [`words`]), in order, repeats included.
pub fn vocabulary_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| is_vocabulary_word(w))
        .map(str::to_ascii_lowercase)
}

/// Whether `w` (one run of ASCII letters and digits) is a vocabulary word.
#[must_use]
pub fn is_vocabulary_word(w: &str) -> bool {
    (3..=32).contains(&w.len())
        && w.starts_with(|c: char| c.is_ascii_alphabetic())
        && w.chars().all(|c| c.is_ascii_alphanumeric())
        && w.chars().filter(char::is_ascii_digit).count() <= 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Ruleset;

    const LOG: &str = "\
2026-07-30T03:36:29.1Z INFO starting run 7 model=resnet50 batch_size=64
epoch 1 step 10 loss=2.31
epoch 1 step 20 loss=2.10
Traceback (most recent call last):
  File \"/srv/vision/train.py\", line 57, in <module>
    loss.item()
  File \"/srv/vision/model.py\", line 23, in forward
    x = self.emb(idx)
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
wandb: run finished with errors
ERROR: exit code 1
";

    fn doc_of(log: &str) -> Document {
        let rs = Ruleset::builtin().expect("builtin");
        let c = rs.classify_bytes("job.log", log.as_bytes());
        let mut plan = Plan::new(&c);
        plan.read(1, log.as_bytes());
        plan.finish(
            &c,
            &Origin {
                filename: "job.log",
                project: "Vision",
                branch: "fix/oom",
                commit: "0123456789abcdef0123456789abcdef01234567",
                job_url: "https://ci.example.com/vision/-/jobs/42",
            },
        )
    }

    #[test]
    fn sections_hold_root_cause_findings_frames_metadata_and_log_lines() {
        let d = doc_of(LOG);
        assert!(d.root.contains("illegal memory access"), "{}", d.root);
        assert!(
            d.names
                .contains("/srv/vision/train.py:57 train.py <module>"),
            "{}",
            d.names
        );
        assert!(d.names.contains("model.py:23 model.py forward"));
        assert!(d.names.contains("loss.item()"));
        assert!(d.names.contains("x = self.emb(idx)"));
        for meta in [
            "job.log",
            "Vision",
            "fix/oom",
            "0123456789abcdef",
            "https://ci.example.com/vision/-/jobs/42",
        ] {
            assert!(d.names.contains(meta), "{meta}: {}", d.names);
        }
        assert!(d.excerpt.contains("model=resnet50"), "{}", d.excerpt);
        // The runner's exit line is a finding now (a launcher summary, never the root cause),
        // so it is searchable among the symptoms rather than the excerpt.
        assert!(d.symptoms.contains("ERROR: exit code 1"), "{}", d.symptoms);
        assert!(!d.excerpt.contains("ERROR: exit code 1"), "{}", d.excerpt);
        // Each line once, in one section only.
        assert!(!d.excerpt.contains("File \""), "{}", d.excerpt);
        assert!(
            !d.excerpt.contains("illegal memory access"),
            "{}",
            d.excerpt
        );
        assert!(!d.excerpt.contains("loss.item()"), "{}", d.excerpt);
    }

    #[test]
    fn a_huge_log_keeps_a_bounded_document_from_the_lines_it_asks_for() {
        let mut log = String::new();
        for i in 0..40_000 {
            log.push_str(&format!("step {i} loss=0.{i} {}\n", "x".repeat(300)));
        }
        log.push_str(LOG);
        let rs = Ruleset::builtin().expect("builtin");
        let c = rs.classify_bytes("big.log", log.as_bytes());
        let mut plan = Plan::new(&c);
        let wanted: usize = plan.ranges().iter().map(|r| r.end() - r.start() + 1).sum();
        assert!(wanted < 400, "{:?}", plan.ranges());
        plan.read_stream(log.as_bytes()).expect("in memory");
        let d = plan.finish(&c, &Origin::default());
        let size = d.root.len() + d.symptoms.len() + d.names.len() + d.excerpt.len();
        assert!(size < 16 << 10, "{size}");
        assert!(d.names.contains("train.py:57"), "{}", d.names);
        assert!(d.excerpt.contains("step 0 loss"), "the head");
        assert!(
            d.excerpt.contains("ERROR: exit code 1") || d.symptoms.contains("ERROR: exit code 1"),
            "the tail"
        );
        assert!(d.excerpt.lines().all(|l| l.chars().count() <= LINE_CHARS));
    }

    #[test]
    fn control_characters_never_reach_the_document() {
        let d = doc_of(&format!("{LOG}odd \u{1}marker\u{2} line\n"));
        for s in [&d.root, &d.symptoms, &d.names, &d.excerpt] {
            assert!(!s.chars().any(|c| c.is_control() && c != '\n'), "{s:?}");
        }
    }

    #[test]
    fn vocabulary_words_leave_out_ids_hashes_and_short_words() {
        let d = Document {
            root: "CUDA error: an illegal memory access".into(),
            symptoms: "resnet50 cu121 0x7f3a deadbeef12345 ab".into(),
            names: "train.py:57 train.py indexSelectSmallIndex".into(),
            excerpt: String::new(),
        };
        assert_eq!(
            words(&d),
            [
                "access",
                "cuda",
                "error",
                "illegal",
                "indexselectsmallindex",
                "memory",
                "resnet50",
                "train"
            ]
            .map(String::from)
        );
    }

    #[test]
    fn without_its_log_a_report_keeps_only_its_metadata_as_names() {
        let origin = Origin {
            filename: "job.log",
            project: "Vision",
            branch: "fix/oom",
            commit: "0123456789abcdef0123456789abcdef01234567",
            job_url: "https://ci.example.com/vision/-/jobs/42",
        };
        let names = names_without_log(&origin);
        assert_eq!(
            names,
            "job.log\nVision\nfix/oom\n0123456789abcdef0123456789abcdef01234567\n\
             https://ci.example.com/vision/-/jobs/42"
        );
        let full = doc_of(LOG).names;
        assert!(full.ends_with(&names), "{full}");
        assert!(!names.contains("train.py"));
    }

    #[test]
    fn ranges_are_merged_and_bounded() {
        assert_eq!(
            merge(vec![5..=9, 1..=3, 4..=4, 20..=22]),
            vec![1..=9, 20..=22]
        );
    }
}
