//! From candidate lines to a classification: which rules hit which lines, the root cause of the
//! cascade, typed facts, advice and the fingerprint.

use std::collections::HashMap;
use std::io::Read;

use regex::Captures;
use sha2::{Digest, Sha256};

use super::compile::{CompiledRule, PatternId};
use super::scan::{self, Candidate};
use super::spec::FALLBACK_SPECIFICITY;
use super::{
    Category, Classification, Confidence, Facts, Finding, Role, RootCause, Ruleset, Stats,
};
use crate::ingest::normalize::{clean_line, rank_prefix};
use crate::ingest::prefix::{Level, is_summary, level};

/// Most findings kept per rule (repeats per thread or rank add nothing after a few).
const MAX_PER_RULE: usize = 8;
/// Most findings kept in all.
const MAX_FINDINGS: usize = 200;
/// Most next steps printed.
const MAX_STEPS: usize = 8;
/// Longest finding text kept.
const MAX_TEXT: usize = 600;
/// Stack frames kept from the start of a log, and again from its end.
const MAX_FRAMES: usize = 2048;
/// How far before the root cause a frame still belongs to its stack.
const FRAME_REACH: usize = 400;
/// User frames in a signature, innermost last.
const SIGNATURE_FRAMES: usize = 6;
/// Longest signature text kept from the root cause or last line.
const SIGNATURE_TEXT: usize = 300;

/// A rule hit on one line, before ranking.
#[derive(Debug)]
struct Hit {
    rule: usize,
    line: usize,
    text: String,
    /// Named captures, in line order: (name, value).
    captures: Vec<(String, String)>,
    rank_prefix: Option<u32>,
    /// The line announces info or warning level (see `ingest::prefix::level`).
    quiet: bool,
    /// The line only summarises a failure printed elsewhere (see `ingest::prefix::is_summary`).
    summary: bool,
    /// The cleaned lines after it: the learned fallback's and the framework's context.
    following: Vec<String>,
}

/// Everything the streaming pass collects.
#[derive(Default)]
struct Collector {
    hits: Vec<Hit>,
    per_rule: HashMap<usize, usize>,
    facts: Facts,
    async_hint: bool,
    context_advice: Vec<String>,
    /// For each context (by its index), whether another match could no longer change anything
    /// (see `context_settled`).
    settled: Vec<bool>,
    /// The line of the first Python traceback header, when the log has one.
    first_traceback: Option<usize>,
    /// Python stack frames (line, file, function): the first [`MAX_FRAMES`], then the last
    /// [`MAX_FRAMES`] after them (a log no rule matched is signed by how it ends).
    frames: Vec<FrameHit>,
    tail_frames: std::collections::VecDeque<FrameHit>,
}

/// A Python stack frame line.
#[derive(Debug, Clone)]
struct FrameHit {
    line: usize,
    file: String,
    function: String,
}

impl Ruleset {
    /// Classifies a whole log held in memory.
    pub fn classify_bytes(&self, source: &str, bytes: &[u8]) -> Classification {
        match self.classify_reader(source, bytes) {
            Ok(c) => c,
            // Reading from a slice cannot fail.
            Err(_) => unreachable_classification(source),
        }
    }

    /// Streams a log from `reader` and classifies it in bounded memory.
    pub fn classify_reader<R: Read>(
        &self,
        source: &str,
        reader: R,
    ) -> std::io::Result<Classification> {
        let mut col = Collector::default();
        let mut notes = Vec::new();
        let scanned = scan::scan(
            &self.candidates,
            reader,
            |first| {
                if crate::ingest::looks_binary(&first[..first.len().min(8192)]) {
                    notes.push(
                        "the input looks binary, not a text log; it was not classified".into(),
                    );
                    false
                } else {
                    true
                }
            },
            |cand| self.evaluate(cand, &mut col),
        )?;
        if scanned.bytes == 0 {
            notes.push("the input is empty".to_owned());
        }
        Ok(self.finish(source, col, notes, scanned))
    }

    /// Runs the per-line set and captures on one candidate line.
    fn evaluate(&self, cand: Candidate, col: &mut Collector) {
        // The cleaned line is a part of the raw one, so only these patterns can match it. A
        // line that only settled contexts could match (a `torch==` requirement on every pip
        // line) changes nothing: skip it before decoding and cleaning.
        let possible = self.candidates.patterns_for(&cand.raw);
        let settled = |id: &PatternId| matches!(*id, PatternId::Context(c) if col.settled.get(c) == Some(&true));
        if possible.iter().all(settled) {
            return;
        }
        let decoded = String::from_utf8_lossy(&cand.raw);
        // Progress bars join many redraws with '\r': look at each segment, keep the first that
        // a rule matches.
        let segments: Vec<&str> = decoded.split('\r').collect();
        let Some((cleaned, matched)) = segments
            .iter()
            .map(|seg| clean_line(seg.as_bytes()))
            .map(|c| {
                let m = self.matching(&c);
                (c, m)
            })
            .find(|(_, m)| !m.is_empty())
        else {
            return;
        };
        // Finding texts and captures are stored: no NUL or other control characters in them.
        let cleaned = crate::ingest::neutralize_controls(&cleaned).into_owned();
        let following: Vec<String> = cand
            .following
            .iter()
            .map(|l| crate::ingest::neutralize_controls(&clean_line(l)).into_owned())
            .collect();
        let rank = rank_prefix(&decoded);
        let quiet = level(&cleaned) == Level::Quiet;
        let summary = is_summary(&cleaned);
        for id in matched {
            let ri = match id {
                PatternId::Rule(ri) => ri,
                PatternId::Context(ci) => {
                    self.apply_context(ci, &cleaned, cand.line, col);
                    continue;
                }
            };
            let count = col.per_rule.entry(ri).or_default();
            *count += 1;
            if *count > MAX_PER_RULE || col.hits.len() >= MAX_FINDINGS {
                continue;
            }
            let rule = &self.rules[ri];
            let captures =
                super::facts::expand_type_trees(captures_with_wrap(rule, &cleaned, &following));
            col.hits.push(Hit {
                rule: ri,
                line: cand.line,
                text: truncate(&cleaned, MAX_TEXT),
                captures,
                rank_prefix: rank,
                quiet,
                summary,
                following: following.clone(),
            });
        }
    }

    /// What context extractor `ci`, matching the cleaned `line` numbered `number`, tells the
    /// classification: the async hint, the first traceback, advice and facts.
    fn apply_context(&self, ci: usize, line: &str, number: usize, col: &mut Collector) {
        let ctx = &self.contexts[ci];
        if ctx.spec.frame {
            if let Some(caps) = ctx.m.regex().captures(line) {
                let get = |n: &str| caps.name(n).map_or("", |m| m.as_str()).to_owned();
                col.push_frame(FrameHit {
                    line: number,
                    file: get("file"),
                    function: get("function"),
                });
            }
            return;
        }
        if ctx.spec.async_hint {
            col.async_hint = true;
        }
        if ctx.spec.traceback && col.first_traceback.is_none() {
            col.first_traceback = Some(number);
        }
        for a in &ctx.spec.advice {
            if !col.context_advice.contains(a) {
                col.context_advice.push(a.clone());
            }
        }
        if let Some(caps) = ctx.m.regex().captures(line) {
            for (name, value) in named(ctx.m.regex(), &caps) {
                col.facts.record(&name, &value);
            }
        }
        if col.settled.len() <= ci {
            col.settled.resize(ci + 1, false);
        }
        col.settled[ci] = context_settled(ctx.m.regex(), &col.facts);
    }

    fn finish(
        &self,
        source: &str,
        col: Collector,
        notes: Vec<String>,
        scanned: scan::Scanned,
    ) -> Classification {
        let Collector {
            hits,
            mut facts,
            async_hint,
            context_advice,
            first_traceback,
            frames,
            tail_frames,
            ..
        } = col;
        // One finding per line: the most specific rule that hit it.
        let mut best: Vec<&Hit> = Vec::new();
        for hit in &hits {
            match best.last_mut() {
                Some(prev) if prev.line == hit.line => {
                    if self.spec_of(hit) > self.spec_of(prev) {
                        *prev = hit;
                    }
                }
                _ => best.push(hit),
            }
        }
        // Root cause: the most specific hit; among equals, the earliest (first failure of a
        // cascade). Fallback hits (any exception, a signal) inside the first traceback come
        // before the same kind printed earlier: that is the failing process's own exception.
        let in_first_traceback = |h: &Hit| {
            self.spec_of(h) <= FALLBACK_SPECIFICITY && first_traceback.is_some_and(|t| h.line > t)
        };
        // A consequence (another rank's collective timeout, a closed peer) after a process's
        // own exception is that exception's symptom, however specific its wording.
        let own_exception = best
            .iter()
            .filter(|h| in_first_traceback(h))
            .map(|h| h.line)
            .min();
        let may_be_root = |h: &Hit| {
            !(self.rules[h.rule].spec.consequence && own_exception.is_some_and(|l| l < h.line))
        };
        // An info or warning line is context while the log holds a failure of another kind at
        // a higher level (TensorFlow logs an allocation it then retries while another process
        // is what died); of the same kind, it competes as usual (TensorFlow's warning-level
        // "ran out of memory" states the request an error line only alludes to). A launcher's
        // or CI runner's summary is context whatever the rest holds.
        let rank = |h: &Hit| {
            (
                self.spec_of(h),
                in_first_traceback(h),
                std::cmp::Reverse(h.line),
            )
        };
        let loud = best
            .iter()
            .copied()
            .filter(|h| may_be_root(h) && !h.quiet && !h.summary)
            .max_by_key(|h| rank(h))
            .map(|h| self.rules[h.rule].spec.category);
        let demoted = |h: &Hit| {
            h.summary || (h.quiet && loud.is_some_and(|c| c != self.rules[h.rule].spec.category))
        };
        let root = best
            .iter()
            .copied()
            .filter(|h| may_be_root(h))
            .max_by(|a, b| demoted(b).cmp(&demoted(a)).then(rank(a).cmp(&rank(b))));
        let mut findings = Vec::with_capacity(best.len());
        if let Some(r) = root {
            findings.push(self.finding(r, Role::RootCause));
        }
        for h in &best {
            if root.is_some_and(|r| std::ptr::eq(*h, r)) {
                continue;
            }
            findings.push(self.finding(h, Role::Symptom));
        }
        // Facts: the root cause's first, then the same category's other findings for what the
        // root cause's message does not say, then every rank.
        let mut ordered: Vec<&Hit> = root.into_iter().collect();
        if let Some(r) = root {
            let cat = self.rules[r.rule].spec.category;
            ordered.extend(
                best.iter()
                    .copied()
                    .filter(|h| !std::ptr::eq(*h, r) && self.rules[h.rule].spec.category == cat),
            );
        }
        for (i, h) in ordered.iter().enumerate() {
            let mut lists_done = [false; 3];
            for (slot, name) in ["device", "dtype", "shape"].iter().enumerate() {
                lists_done[slot] = i > 0 && facts.has_list(name);
            }
            for (name, value) in &h.captures {
                let canon = super::facts::canonical_name(name);
                let skip = match canon {
                    "device" => lists_done[0],
                    "dtype" => lists_done[1],
                    "shape" => lists_done[2],
                    _ => false,
                };
                if !skip {
                    facts.record(name, value);
                }
            }
        }
        for h in &best {
            if let Some(r) = h.rank_prefix {
                facts.add_rank(r);
            }
            for (name, value) in &h.captures {
                if super::facts::canonical_name(name) == "rank"
                    && let Ok(r) = value.parse()
                {
                    facts.add_rank(r);
                }
            }
        }
        let (category, title, confidence, root_cause, fingerprint) = match root {
            Some(r) => {
                let rule = &self.rules[r.rule].spec;
                let confidence = match rule.specificity {
                    80.. => Confidence::High,
                    40..=79 => Confidence::Medium,
                    _ => Confidence::Low,
                };
                (
                    rule.category,
                    rule.title.clone(),
                    confidence,
                    Some(RootCause {
                        line: r.line,
                        text: r.text.clone(),
                        rule: rule.id.clone(),
                    }),
                    fingerprint(rule.category, &rule.id, &r.text),
                )
            }
            // No rule names a failure: the log is grouped by how it ends (its last line and
            // the user's frames before it), not thrown in with every other unmatched log.
            None => (
                Category::Unknown,
                "No known failure pattern found".to_owned(),
                Confidence::Low,
                None,
                String::new(),
            ),
        };
        let (anchor, anchor_text) = match (root, &scanned.last_line) {
            (Some(r), _) => (r.line, r.text.clone()),
            (None, Some((line, text))) => (
                line + 1,
                crate::ingest::neutralize_controls(&clean_line(text)).into_owned(),
            ),
            (None, None) => (0, String::new()),
        };
        let signature = signature(&anchor_text, frames.iter().chain(&tail_frames), anchor);
        let fingerprint = if root.is_some() {
            fingerprint
        } else if anchor_text.is_empty() {
            self::fingerprint(Category::Unknown, "", "")
        } else {
            self::fingerprint(Category::Unknown, UNMATCHED, &signature)
        };
        let next_steps = self.next_steps(root, category, async_hint, context_advice);
        // Layer 3 and the framework (refine.rs): a likely category for a line no rule names,
        // and next steps fitted to the log's framework.
        let last_text = scanned
            .last_line
            .as_ref()
            .map(|(_, t)| crate::ingest::neutralize_controls(&clean_line(t)).into_owned());
        let seen = super::refine::Seen {
            root: root.map(|h| self.seen_line(h)),
            others: (best.iter())
                .filter(|h| !root.is_some_and(|r| std::ptr::eq(**h, r)))
                .map(|h| self.seen_line(h))
                .collect(),
            frame_files: frames
                .iter()
                .chain(&tail_frames)
                .map(|f| f.file.as_str())
                .collect(),
            last_line: last_text.as_deref(),
            torch_version: facts.torch_version.is_some(),
        };
        let head = self.refine(
            &seen,
            super::refine::Headline {
                category,
                title,
                confidence,
                next_steps,
                basis: Vec::new(),
                framework: None,
            },
            MAX_STEPS,
        );
        Classification {
            source: source.to_owned(),
            category: head.category,
            title: head.title,
            confidence: head.confidence,
            root_cause,
            findings,
            facts,
            async_hint,
            next_steps: head.next_steps,
            fingerprint,
            basis: head.basis,
            framework: head.framework,
            signature,
            notes,
            stats: Stats {
                bytes: scanned.bytes,
                lines: scanned.lines,
            },
        }
    }

    /// The patterns that match a cleaned line, rules first.
    fn matching(&self, line: &str) -> Vec<PatternId> {
        let mut found = self.candidates.patterns_for(line.as_bytes());
        found.retain(|&id| self.matcher(id).regex().is_match(line));
        found
    }

    fn seen_line<'a>(&'a self, hit: &'a Hit) -> super::refine::SeenLine<'a> {
        super::refine::SeenLine {
            line: hit.line,
            text: &hit.text,
            following: &hit.following,
            rule: &self.rules[hit.rule].spec,
        }
    }

    fn spec_of(&self, hit: &Hit) -> u8 {
        self.rules[hit.rule].spec.specificity
    }

    fn finding(&self, hit: &Hit, role: Role) -> Finding {
        let rule = &self.rules[hit.rule].spec;
        Finding {
            rule: rule.id.clone(),
            category: rule.category,
            role,
            line: hit.line,
            text: hit.text.clone(),
        }
    }

    fn next_steps(
        &self,
        root: Option<&Hit>,
        category: Category,
        async_hint: bool,
        context_advice: Vec<String>,
    ) -> Vec<String> {
        let mut steps: Vec<String> = Vec::new();
        // The rule's own advice comes before its category's general advice, so of two steps
        // that say the same thing the more specific one is kept.
        let mut push = |s: String| {
            if !steps.iter().any(|kept| same_advice(kept, &s)) {
                steps.push(s);
            }
        };
        if async_hint {
            context_advice.into_iter().for_each(&mut push);
        }
        if let Some(r) = root {
            // Exact names first, then canonical names (`total_2` also fills `{total}`).
            let mut vars: HashMap<&str, &str> = HashMap::new();
            for (k, v) in &r.captures {
                vars.entry(k.as_str()).or_insert(v.as_str());
            }
            for (k, v) in &r.captures {
                vars.entry(super::facts::canonical_name(k))
                    .or_insert(v.as_str());
            }
            for template in &self.rules[r.rule].spec.advice {
                if let Some(s) = fill(template, &vars) {
                    push(s);
                }
            }
        }
        if let Some(general) = self.advice.get(&category) {
            general.iter().cloned().for_each(&mut push);
        }
        steps.truncate(MAX_STEPS);
        steps
    }
}

/// Captures of a rule on a cleaned line; when a named group is missing and the message looks
/// console-wrapped, retries on the line joined with what follows.
fn captures_with_wrap(
    rule: &CompiledRule,
    line: &str,
    following: &[String],
) -> Vec<(String, String)> {
    let re = rule.m.regex();
    let Some(caps) = re.captures(line) else {
        return Vec::new();
    };
    let mut got = named(re, &caps);
    let wanted = re.capture_names().flatten().count();
    if rule.m.has_names() && got.len() < wanted && !following.is_empty() {
        let mut joined = line.to_owned();
        for next in following {
            if next.is_empty() {
                break;
            }
            // dmesg repeats the driver's tag on each line of a wrapped NVRM message.
            let next = match next.strip_prefix("NVRM: ") {
                Some(rest) if line.contains("NVRM: ") => rest,
                _ => next.as_str(),
            };
            // A hard wrap cuts words ("capty" / "of"); a soft one ends a sentence.
            if !joined.ends_with([' ', '.', ';', ',', ':']) && joined.len() >= 60 {
                joined.push_str(next);
            } else {
                joined.push(' ');
                joined.push_str(next);
            }
            if let Some(caps) = re.captures(&joined)
                && caps.get(0).is_some_and(|m| m.start() < line.len())
            {
                let more = named(re, &caps);
                if more.len() > got.len() {
                    got = more;
                }
            }
        }
    }
    got
}

impl Ruleset {
    /// The named captures rule `rule_id` takes from one log line, cleaned and ordered as a
    /// classification records them (what a rule's preview shows for its examples); `None` when
    /// the ruleset has no such rule or it does not match the line.
    #[must_use]
    pub fn line_captures(&self, rule_id: &str, line: &str) -> Option<Vec<(String, String)>> {
        let rule = self.rules.iter().find(|r| r.spec.id == rule_id)?;
        let cleaned = crate::ingest::neutralize_controls(&clean_line(line.as_bytes())).into_owned();
        rule.m
            .regex()
            .is_match(&cleaned)
            .then(|| super::facts::expand_type_trees(captures_with_wrap(rule, &cleaned, &[])))
    }
}

/// Whether a context whose hint and advice were applied once can change nothing more: every
/// capture names a single-valued fact that is already set (`Facts::record` keeps the first
/// value). Lists, ranks and names `Facts` does not know are never settled.
fn context_settled(re: &regex::Regex, facts: &Facts) -> bool {
    let m = &facts.memory;
    re.capture_names()
        .flatten()
        .all(|name| match super::facts::canonical_name(name) {
            "requested" => m.requested_bytes.is_some(),
            "total" => m.total_bytes.is_some(),
            "free" => m.free_bytes.is_some(),
            "allocated" => m.allocated_bytes.is_some(),
            "reserved" => m.reserved_bytes.is_some(),
            "gpu" => facts.gpu.is_some(),
            "arch" => facts.arch.is_some(),
            "torch_version" => facts.torch_version.is_some(),
            "cuda_version" => facts.cuda_version.is_some(),
            "driver_version" => facts.driver_version.is_some(),
            "nccl_version" => facts.nccl_version.is_some(),
            _ => false,
        })
}

/// Named captures that participated, ordered by position in the line.
fn named(re: &regex::Regex, caps: &Captures<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(usize, String, String)> = re
        .capture_names()
        .flatten()
        .filter_map(|name| {
            caps.name(name)
                .map(|m| (m.start(), name.to_owned(), m.as_str().to_owned()))
        })
        .collect();
    // A `_N` suffix orders values of one kind ([expected, actual]); otherwise line order.
    out.sort_by_key(|(start, name, _)| (suffix_number(name), *start));
    out.into_iter().map(|(_, n, v)| (n, v)).collect()
}

fn suffix_number(name: &str) -> u32 {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().unwrap_or(0)
}

/// Whether two steps give the same advice: the same text, or nearly all the words of the
/// shorter one (3 letters or more, case folded) in the longer, as when a rule's advice and its
/// category's general advice both say "re-run with CUDA_LAUNCH_BLOCKING=1: cuBLAS errors are
/// often the side effect of an earlier failure".
fn same_advice(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let words = |s: &str| -> std::collections::HashSet<String> {
        s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.chars().count() >= 3)
            .map(str::to_lowercase)
            .collect()
    };
    let (wa, wb) = (words(a), words(b));
    let smaller = wa.len().min(wb.len());
    if smaller < 6 {
        return false;
    }
    let shared = wa.intersection(&wb).count();
    shared * 4 >= smaller * 3
}

/// Replaces `{name}` with captures; `None` when a placeholder has no value (the step is then
/// left out rather than printed with a hole).
fn fill(template: &str, vars: &HashMap<&str, &str>) -> Option<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        let key = &after[..close];
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            out.push('{');
            rest = after;
            continue;
        }
        out.push_str(vars.get(key)?);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The signature of a root cause with everything that varies between runs removed: numbers,
/// addresses, paths (kept to their file name), so the same failure in the same place groups.
pub fn normalize_signature(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for token in text.split_inclusive([' ', '\t']) {
        let (word, sep) = match token.strip_suffix([' ', '\t']) {
            Some(w) => (w, &token[w.len()..]),
            None => (token, ""),
        };
        // Units of byte counts vary with the count (512.00 MiB vs 2.00 GiB).
        let unit = word.trim_end_matches(['.', ',', ';', ')']);
        if matches!(
            unit,
            "B" | "KiB" | "MiB" | "GiB" | "TiB" | "KB" | "MB" | "GB" | "TB" | "bytes"
        ) {
            out.push('B');
            out.push_str(&word[unit.len()..]);
            out.push_str(sep);
            continue;
        }
        let word = if word.contains('/') || word.contains('\\') {
            let trimmed = word.trim_start_matches(['(', '\'', '"', '`', '[']);
            trimmed.rsplit(['/', '\\']).next().unwrap_or(trimmed)
        } else {
            word
        };
        let mut prev_digit = false;
        let mut chars = word.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '0' && chars.peek() == Some(&'x') {
                chars.next();
                while chars.peek().is_some_and(char::is_ascii_hexdigit) {
                    chars.next();
                }
                out.push_str("0x#");
                prev_digit = false;
                continue;
            }
            if c.is_ascii_digit() {
                if !prev_digit {
                    out.push('#');
                }
                prev_digit = true;
                continue;
            }
            prev_digit = false;
            out.push(c);
        }
        out.push_str(sep);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The rule part of the fingerprint of a log no rule matched (no rule id looks like it).
const UNMATCHED: &str = "<unmatched>";

impl Collector {
    fn push_frame(&mut self, frame: FrameHit) {
        if self.frames.len() < MAX_FRAMES {
            self.frames.push(frame);
        } else {
            if self.tail_frames.len() == MAX_FRAMES {
                self.tail_frames.pop_front();
            }
            self.tail_frames.push_back(frame);
        }
    }
}

/// The failure's shape: `text` normalized as for the fingerprint (cut to
/// [`SIGNATURE_TEXT`]), then the user's own frames (not library code) among those within
/// [`FRAME_REACH`] lines before `anchor`, as `file.py:function`, innermost last.
fn signature<'f>(text: &str, frames: impl Iterator<Item = &'f FrameHit>, anchor: usize) -> String {
    let mut out = normalize_signature(text);
    out.truncate(out.floor_char_boundary(SIGNATURE_TEXT));
    let mut user: Vec<String> = Vec::new();
    for f in frames.filter(|f| f.line < anchor && f.line + FRAME_REACH >= anchor) {
        if crate::ingest::traceback::is_library(&f.file) {
            continue;
        }
        let base = f.file.rsplit(['/', '\\']).next().unwrap_or(&f.file);
        let name = format!("{base}:{}", f.function);
        // A frame repeated (recursion, every rank's copy of the stack) counts once, at its
        // innermost place.
        user.retain(|n| *n != name);
        user.push(name);
    }
    let skip = user.len().saturating_sub(SIGNATURE_FRAMES);
    for name in &user[skip..] {
        out.push(' ');
        out.push_str(name);
    }
    out
}

/// The innermost of the user's own frames that a [`signature`] ends with (`train.py:forward`),
/// if it names one.
#[must_use]
pub fn culprit(signature: &str) -> Option<&str> {
    let last = signature.rsplit(' ').next()?;
    let (file, function) = last.split_once(':')?;
    let (stem, ext) = file.rsplit_once('.')?;
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || "_-<>.".contains(c))
    };
    (word(stem) && word(ext) && ext.chars().all(char::is_alphanumeric) && word(function))
        .then_some(last)
}

fn fingerprint(category: Category, rule: &str, text: &str) -> String {
    let mut h = Sha256::new();
    h.update(category.as_str());
    h.update([0]);
    h.update(rule);
    h.update([0]);
    h.update(normalize_signature(text));
    hex::encode(h.finalize())
}

fn unreachable_classification(source: &str) -> Classification {
    Classification {
        source: source.to_owned(),
        category: Category::Unknown,
        title: "No known failure pattern found".to_owned(),
        confidence: Confidence::Low,
        root_cause: None,
        findings: Vec::new(),
        facts: Facts::default(),
        async_hint: false,
        next_steps: Vec::new(),
        fingerprint: fingerprint(Category::Unknown, "", ""),
        basis: Vec::new(),
        framework: None,
        signature: String::new(),
        notes: vec!["the input could not be read".to_owned()],
        stats: Stats::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::{culprit, same_advice};

    #[test]
    fn the_culprit_is_the_innermost_user_frame_a_signature_ends_with() {
        assert_eq!(
            culprit(
                "runtimeerror: cuda error: device-side assert triggered train.py:main model.py:forward"
            ),
            Some("model.py:forward")
        );
        assert_eq!(culprit("x repro.py:<module>"), Some("repro.py:<module>"));
        assert_eq!(culprit("runtimeerror: cuda error: out of memory"), None);
        assert_eq!(culprit("error at line #: foo"), None);
        assert_eq!(culprit(""), None);
        assert_eq!(culprit("see https://x.org:443"), None);
    }

    #[test]
    fn advice_saying_the_same_thing_in_other_words_is_one_step() {
        let rule = "cuBLAS errors are often the side effect of an earlier failure (an out-of-range index, NaNs or an exotic shape/dtype): re-run with CUDA_LAUNCH_BLOCKING=1, and try CUBLAS_WORKSPACE_CONFIG=:4096:8 or another PyTorch/CUDA build if it persists.";
        let general = "Re-run with CUDA_LAUNCH_BLOCKING=1: cuBLAS/cuDNN errors are often the side effect of an earlier failure (an out-of-range index or out-of-memory).";
        assert!(same_advice(rule, general));
        assert!(same_advice(general, general));
        let other = "Check that cuDNN/cuBLAS match the PyTorch build (torch.backends.cudnn.version(), torch.version.cuda) and reinstall a matching build.";
        assert!(!same_advice(rule, other));
        assert!(!same_advice(general, other));
        // Short steps are compared whole: "Check code 77." is not "Check code 78.".
        assert!(!same_advice("Check code 77.", "Check code 78."));
    }
}
