//! A run's files made into one report: each file scrubbed, hashed, compressed and classified
//! as a single log is, scanned for its stamps, places and restarts, then the run's story told
//! ([`crate::rules::run::story`]) and the files joined into one stored log, each after a
//! `==> name <==` line, whose headline is the first failure's (its lines moved to where the
//! file sits in the joined log) with the other files' distinct failures as further findings.
//! Blocking CPU and file work, no database.

use std::io::{self, BufReader, Read};

use sha2::{Digest, Sha256};

use super::RunError;
use crate::app::logstore::{self, ChunkWriter};
use crate::app::upload::{Meta, Needs, search_doc};
use crate::ingest::stream::{Blocks, Scrubber};
use crate::ingest::{self, Reject, file_scan};
use crate::rules::run::story::{self, FileInput};
use crate::rules::run::{RunStory, SkippedFile, attempts, flight};
use crate::rules::{Classification, Finding, Role, Ruleset};
use crate::storage::reports::{Headline, LogChunk, NewReport};

/// Largest file kept in memory for classification and the scan; a larger one is read back
/// from its compressed chunks.
const KEEP_IN_MEMORY: usize = 8 << 20;

/// Findings of other files added to the run's classification, at most.
const MAX_RUN_FINDINGS: usize = 64;

/// One file of the run as prepared.
struct Prepared {
    input: FileInput,
    /// Its header line and its text, compressed (line numbers from 1 in the file).
    header: Vec<LogChunk>,
    chunks: Vec<LogChunk>,
    sha: Vec<u8>,
}

/// Collects a run's files, in order.
pub(super) struct Assembly<'a> {
    ruleset: &'a Ruleset,
    files: Vec<Prepared>,
    skipped: Vec<SkippedFile>,
    /// Flight-recorder dumps among the files, by rank.
    dumps: Vec<(u32, flight::Dump)>,
    /// Lines of the joined log so far.
    lines: u64,
}

impl<'a> Assembly<'a> {
    pub(super) fn new(ruleset: &'a Ruleset) -> Self {
        Assembly {
            ruleset,
            files: Vec::new(),
            skipped: Vec::new(),
            dumps: Vec::new(),
            lines: 0,
        }
    }

    /// Lists `name` as left out.
    pub(super) fn skip(&mut self, name: &str, reason: &str) {
        self.skipped.push(SkippedFile {
            name: name.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// Gives the file just added as `name` its uploaded size `bytes` (a stored run classified
    /// again reads its files back scrubbed).
    pub(super) fn keep_bytes(&mut self, name: &str, bytes: u64) {
        if let Some(last) = self.files.last_mut()
            && last.input.name == name
        {
            last.input.bytes = bytes;
        }
    }

    /// Adds file `name`: scrubbed, compressed, classified, scanned. An empty, blank or binary
    /// file is listed as skipped.
    pub(super) fn file(&mut self, name: &str, mut data: impl Read) -> Result<(), RunError> {
        let name = ingest::scrub::scrub(name).text.into_owned();
        let mut head = Vec::with_capacity(2);
        (&mut data).take(2).read_to_end(&mut head)?;
        if ingest::pickle::looks_like(&head) {
            // A flight-recorder dump (a pickle) is read for the collectives, not shown as text.
            let mut whole = head;
            let cap = ingest::pickle::MAX_BYTES as u64 + 1;
            data.take(cap).read_to_end(&mut whole)?;
            let dump = flight::Dump::read(&whole);
            let reason = match (dump, flight::rank_of(&name)) {
                (Ok(dump), Some(rank)) => {
                    self.dumps.push((rank, dump));
                    "flight-recorder dump, read for the collectives"
                }
                (Ok(_), None) => "flight-recorder dump without a rank in its name",
                (Err(_), _) => "not text",
            };
            self.skip(&name, reason);
            return Ok(());
        }
        let mut blocks = Blocks::new(std::io::Cursor::new(head).chain(data));
        let mut scrubber = Scrubber::default();
        let mut sha = Sha256::new();
        let mut gz = ChunkWriter::default();
        let mut kept: Option<Vec<u8>> = Some(Vec::new());
        let mut ends_nl = true;
        let mut failed: Option<Reject> = None;
        while let Some(block) = blocks.next_block()? {
            sha.update(block);
            let res = scrubber.block(block, |out: &[u8]| -> Result<(), RunError> {
                gz.write_all(out)?;
                ends_nl = out.last().map_or(ends_nl, |&b| b == b'\n');
                if let Some(text) = &mut kept {
                    if text.len() + out.len() > KEEP_IN_MEMORY {
                        kept = None;
                    } else {
                        text.extend_from_slice(out);
                    }
                }
                Ok(())
            });
            match res {
                Err(RunError::Reject(r)) => {
                    failed = Some(r);
                    break;
                }
                other => other?,
            }
        }
        let total = match failed.map_or_else(|| scrubber.finish(), Err) {
            Ok(total) => total,
            Err(r) => {
                let reason = match r {
                    Reject::Binary => "not text",
                    Reject::Empty | Reject::Blank => "empty",
                    Reject::TooLarge { .. } => "too large",
                };
                self.skip(&name, reason);
                return Ok(());
            }
        };
        // Every file ends its lines, so the next file's header starts a line of its own.
        if !ends_nl {
            gz.write_all(b"\n")?;
            if let Some(text) = &mut kept {
                text.push(b'\n');
            }
        }
        let chunks = gz.finish()?;
        let classification = match &kept {
            Some(text) => self.ruleset.classify_bytes(&name, text),
            None => self
                .ruleset
                .classify_reader(&name, logstore::reader(&chunks))?,
        };
        let wanted: Vec<usize> = classification.root_cause.iter().map(|r| r.line).collect();
        let scan = match &kept {
            Some(text) => file_scan::scan(&text[..], &wanted)?,
            None => file_scan::scan(BufReader::new(logstore::reader(&chunks)), &wanted)?,
        };
        let attempts = match &kept {
            Some(text) => attempts::split(self.ruleset, &name, text, &scan.restarts),
            None => Vec::new(),
        };
        let mut header = ChunkWriter::default();
        header.write_all(format!("==> {} <==\n", ingest::neutralize_controls(&name)).as_bytes())?;
        let lines: u64 = chunks.iter().map(|c| c.lines as u64).sum();
        let first_line = self.lines + 2;
        self.lines += 1 + lines;
        self.files.push(Prepared {
            input: FileInput {
                name,
                bytes: total,
                lines,
                first_line,
                classification,
                scan,
                attempts,
            },
            header: header.finish()?,
            chunks,
            sha: sha.finalize().to_vec(),
        });
        Ok(())
    }

    /// Tells the story and builds the run's report, named `run_name`.
    pub(super) fn finish(
        self,
        run_name: &str,
        meta: Meta,
        script: Option<String>,
    ) -> Result<(NewReport, RunStory), RunError> {
        if self.files.is_empty() {
            return Err(RunError::NoText(self.skipped.len()));
        }
        let mut inputs = Vec::with_capacity(self.files.len());
        let mut parts = Vec::with_capacity(self.files.len());
        for p in self.files {
            inputs.push(p.input);
            parts.push((p.header, p.chunks, p.sha));
        }
        let classifications: Vec<(String, u64, Classification)> = inputs
            .iter()
            .map(|f| (f.name.clone(), f.first_line, f.classification.clone()))
            .collect();
        let mut story = story::tell(inputs, self.skipped);
        story.collectives = flight::diverged(&self.dumps);
        let first = story
            .files
            .iter()
            .position(|f| f.role == crate::rules::run::FileRole::FirstFailure);
        let meta = meta.scrubbed();
        let lead = &parts[first.unwrap_or(0)].1;
        let search = search_document(&classifications, first, lead, &story, &meta, run_name)?;
        let mut sha = Sha256::new();
        let mut log: Vec<LogChunk> = Vec::new();
        for ((header, chunks, file_sha), f) in parts.into_iter().zip(&story.files) {
            sha.update(f.name.as_bytes());
            sha.update([0]);
            sha.update(&file_sha);
            // Chunks stay whole: only their place in the joined log moves.
            log.extend(header);
            log.extend(chunks);
        }
        renumber(&mut log);
        let total_bytes: u64 = story.files.iter().map(|f| f.bytes).sum();
        let classification = run_classification(run_name, &classifications, first, &story);
        let search_words = search_doc::words(&search);
        let log_lines: u64 = log.iter().map(|c| c.lines as u64).sum();
        let new = NewReport {
            token_id: None,
            project: meta.project,
            job_url: meta.job_url,
            commit_sha: meta.commit,
            branch: meta.branch,
            environment: meta.environment,
            version: meta.version,
            repeats: meta.repeats,
            needs: meta
                .needs
                .unwrap_or_else(|| Needs::for_category(classification.category)),
            filename: ingest::scrub::scrub(run_name).text.into_owned(),
            headline: Headline::of(&classification),
            log_sha256: sha.finalize().to_vec(),
            log_bytes: i64::try_from(total_bytes).unwrap_or(i64::MAX),
            log_lines: i64::try_from(log_lines).unwrap_or(i64::MAX),
            log,
            // Placed in the object store (when one is configured) by `upload::store`.
            log_place: crate::storage::reports::LogPlace::Database,
            script_place: crate::storage::reports::ScriptPlace::Database,
            script,
            search,
            search_words,
            classification,
        };
        Ok((new, story))
    }
}

/// Numbers the joined log's chunks in order, each starting where the one before it ends.
fn renumber(log: &mut [LogChunk]) {
    let mut line = 1;
    for (seq, chunk) in log.iter_mut().enumerate() {
        chunk.seq = i32::try_from(seq).unwrap_or(i32::MAX);
        chunk.first_line = line;
        line += chunk.lines;
    }
}

/// The run's classification: the first failure's (or, with none, the first file's), its lines
/// moved to the joined log, the other files' distinct root causes added as symptoms.
fn run_classification(
    run_name: &str,
    files: &[(String, u64, Classification)],
    first: Option<usize>,
    story: &RunStory,
) -> Classification {
    let lead = first.unwrap_or(0);
    let (_, offset, c) = &files[lead];
    let shift = |line: usize| line + usize::try_from(*offset).unwrap_or(0) - 1;
    let mut out = c.clone();
    out.source = run_name.to_owned();
    if first.is_none() {
        out.root_cause = None;
    }
    if let Some(rc) = &mut out.root_cause {
        rc.line = shift(rc.line);
    }
    for f in &mut out.findings {
        f.line = shift(f.line);
    }
    let mut seen: Vec<(String, String)> = out
        .findings
        .iter()
        .map(|f| (f.rule.clone(), f.text.clone()))
        .collect();
    for (i, (_, offset, other)) in files.iter().enumerate() {
        if i == lead || out.findings.len() >= MAX_RUN_FINDINGS {
            continue;
        }
        let Some(rc) = &other.root_cause else {
            continue;
        };
        let key = (rc.rule.clone(), rc.text.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        out.findings.push(Finding {
            rule: rc.rule.clone(),
            category: other.category,
            role: Role::Symptom,
            line: rc.line + usize::try_from(*offset).unwrap_or(0) - 1,
            text: rc.text.clone(),
        });
    }
    out.stats.bytes = story.files.iter().map(|f| f.bytes).sum();
    out.stats.lines = story.files.iter().map(|f| f.lines + 1).sum();
    out
}

/// The run's search document: the first failure's file's, with the other files' failures in
/// its symptoms and every file's name in its names.
fn search_document(
    files: &[(String, u64, Classification)],
    first: Option<usize>,
    lead_log: &[LogChunk],
    story: &RunStory,
    meta: &Meta,
    run_name: &str,
) -> io::Result<crate::storage::search::Document> {
    let lead = first.unwrap_or(0);
    let c = &files[lead].2;
    let mut plan = search_doc::Plan::new(c);
    plan.read_stream(BufReader::new(logstore::reader(lead_log)))?;
    let mut doc = plan.finish(c, &meta.origin(run_name));
    for f in &story.files {
        if let Some(rc) = &f.root_cause
            && f.role != crate::rules::run::FileRole::FirstFailure
            && doc.symptoms.len() + rc.text.len() < 8 << 10
            && !doc.symptoms.contains(&rc.text)
        {
            doc.symptoms.push('\n');
            doc.symptoms.push_str(&rc.text);
        }
        if doc.names.len() + f.name.len() < 8 << 10 {
            doc.names.push(' ');
            doc.names.push_str(&f.name);
        }
    }
    Ok(doc)
}
