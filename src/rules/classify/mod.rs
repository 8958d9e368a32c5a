//! From candidate lines to a classification: which rules hit which lines, the root cause of the
//! cascade and typed facts; the captures a rule takes from a line (`captures`), the next steps
//! (`advice`) and the failure's signature and fingerprint (`signature`) are its parts.

mod advice;
mod captures;
mod collect;
mod located;
mod signature;

use std::io::Read;

pub use signature::culprit;

use captures::{captures_with_wrap, context_settled, named};
use collect::{Collector, FrameHit, RuleHit};
use located::LOCATED_TITLE;
use signature::{
    environment_fingerprint, fingerprint, log_identity, names_nothing_else, signature,
    undecided_environment,
};

use super::compile::PatternId;
use super::locator::LOCATOR_RULE;
use super::origin::Origin;
use super::scan::{self, CandidateLine};
use super::spec::{FALLBACK_SPECIFICITY, FailureKind};
use super::{
    Category, Classification, Confidence, Facts, Finding, Role, RootCause, Ruleset, Stats,
};
use crate::ingest::normalize::clean_line;
use crate::ingest::prefix::{Level, is_summary, level};

/// Most findings kept per rule (repeats per thread or rank add nothing after a few).
const MAX_PER_RULE: usize = 8;
/// Most findings kept in all.
const MAX_FINDINGS: usize = 200;
/// Most next steps printed.
const MAX_STEPS: usize = 8;
/// Longest finding text kept.
const MAX_TEXT: usize = 600;
/// How far before the root cause a frame still belongs to its stack.
const FRAME_REACH: usize = 400;
/// User frames in a signature, innermost last.
const SIGNATURE_FRAMES: usize = 6;
/// Longest signature text kept from the root cause or last line.
const SIGNATURE_TEXT: usize = 300;

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
    fn evaluate(&self, cand: CandidateLine, col: &mut Collector) {
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
        let rank = super::origin::prefix_rank(&decoded);
        let origin = super::origin::of_line(&decoded, &cleaned);
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
            col.hits.push(RuleHit {
                rule: ri,
                line: cand.line,
                text: truncate(&cleaned, MAX_TEXT),
                captures,
                rank_prefix: rank,
                quiet,
                summary,
                following: following.clone(),
                origin: origin.clone(),
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
        let mut best: Vec<&RuleHit> = Vec::new();
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
        let in_first_traceback = |h: &RuleHit| {
            self.spec_of(h) <= FALLBACK_SPECIFICITY && first_traceback.is_some_and(|t| h.line > t)
        };
        // A consequence (another rank's collective timeout, a closed peer) after a process's
        // own exception is that exception's symptom, however specific its wording.
        let own_exception = best
            .iter()
            .filter(|h| in_first_traceback(h))
            .map(|h| h.line)
            .min();
        let may_be_root = |h: &RuleHit| {
            !(self.rules[h.rule].spec.consequence && own_exception.is_some_and(|l| l < h.line))
        };
        // An info or warning line is context while the log holds a failure of another kind at
        // a higher level (TensorFlow logs an allocation it then retries while another process
        // is what died); of the same kind, it competes as usual (TensorFlow's warning-level
        // "ran out of memory" states the request an error line only alludes to). A launcher's
        // or CI runner's summary is context whatever the rest holds.
        let rank = |h: &RuleHit| {
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
        let demoted = |h: &RuleHit| {
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
        let mut ordered: Vec<&RuleHit> = root.into_iter().collect();
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
        // No rule names a failure: the locator reads the log's last lines for the first line
        // that says something failed (its category stays unknown unless the fallback, below,
        // is sure of one).
        let located = match root {
            Some(_) => None,
            None => self.locate(&scanned.tail),
        };
        // Where the root cause happened: its own line's rank, host and GPU.
        let origin = match (root, &located) {
            (Some(r), _) => r.origin.clone(),
            (None, Some(l)) => l.origin.clone(),
            (None, None) => Origin::default(),
        };
        facts.set_origin(origin);
        if let Some(l) = &located {
            findings.push(Finding {
                rule: LOCATOR_RULE.to_owned(),
                category: Category::Unknown,
                role: Role::RootCause,
                line: l.line,
                text: l.text.clone(),
            });
        }
        let (category, title, confidence, root_cause) = match (root, &located) {
            (Some(r), _) => {
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
                )
            }
            (None, Some(l)) => (
                Category::Unknown,
                LOCATED_TITLE.to_owned(),
                Confidence::Low,
                Some(RootCause {
                    line: l.line,
                    text: l.text.clone(),
                    rule: LOCATOR_RULE.to_owned(),
                }),
            ),
            // No line says something failed: the log is grouped by how it ends (its last line
            // and the user's frames before it), not thrown in with every other unmatched log.
            (None, None) => (
                Category::Unknown,
                "No known failure pattern found".to_owned(),
                Confidence::Low,
                None,
            ),
        };
        let (anchor, anchor_text) = match (root, &located, &scanned.last_line) {
            (Some(r), _, _) => (r.line, r.text.clone()),
            (None, Some(l), _) => (l.line, l.text.clone()),
            (None, None, Some((line, text))) => (
                line + 1,
                crate::ingest::neutralize_controls(&clean_line(text)).into_owned(),
            ),
            (None, None, None) => (0, String::new()),
        };
        let (signature, framed) =
            signature(&anchor_text, frames.iter().chain(&tail_frames), anchor);
        // What keys the failure in the code: its signature, and where the signature is the
        // library's sentence alone because the whole log says nothing else (no frame, no code
        // line, no file, no output of the program's), the log's own text: a generic sentence
        // is no evidence that two programs failed alike (issue 39).
        let tail: Vec<(usize, std::borrow::Cow<'_, str>)> = (scanned.tail.iter())
            .map(|(n, t)| (*n, String::from_utf8_lossy(t)))
            .collect();
        let whole_log = tail.first().is_none_or(|(n, _)| *n == 1);
        let matched: Vec<usize> = hits.iter().map(|h| h.line).collect();
        let bare = !framed
            && root.is_some()
            && whole_log
            && names_nothing_else(
                tail.iter().map(|(n, t)| (*n, t.as_ref())),
                &matched,
                &anchor_text,
            );
        let code_key = if bare {
            let own = log_identity(tail.iter().map(|(_, t)| t.as_ref()));
            format!("{signature}\0log {own}")
        } else {
            signature.clone()
        };
        let fingerprint = if let Some(r) = root {
            let rule = &self.rules[r.rule].spec;
            match rule.failure_kind() {
                FailureKind::Program => fingerprint(rule.category, &rule.id, &code_key),
                // The environment fact that decides the fix is not in the log (a missing
                // kernel image on an unnamed GPU): whose fix applies is unknown, and unknown
                // is no reason to join, so the failure is keyed by the code that met it.
                FailureKind::Environment
                    if undecided_environment(&r.text, facts.arch.as_deref()) =>
                {
                    fingerprint(rule.category, &rule.id, &code_key)
                }
                FailureKind::Environment => {
                    let regex = self.rules[r.rule].m.regex();
                    // The sentence the rule's message starts: what the library said, without
                    // the prefix a logger or a re-raise put before it, or the advice after it.
                    let message = regex.find(&r.text).map_or(r.text.as_str(), |m| {
                        let end = r.text[m.end()..]
                            .find(". ")
                            .map_or(r.text.len(), |at| m.end() + at);
                        &r.text[m.start()..end]
                    });
                    let message = message.trim_end_matches(['.', '`', '\'', '"', ' ']);
                    environment_fingerprint(
                        rule.category,
                        &rule.id,
                        message,
                        &r.text,
                        facts.arch.as_deref(),
                    )
                }
            }
        } else if located.is_some() {
            self::fingerprint(Category::Unknown, LOCATOR_RULE, &signature)
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
        let seen = super::refine::Observed {
            root: root.map(|h| self.observed_line(h)).or_else(|| {
                located.as_ref().map(|l| super::refine::ObservedLine {
                    line: l.line,
                    text: &l.text,
                    following: &l.following,
                    rule: None,
                })
            }),
            others: (best.iter())
                .filter(|h| !root.is_some_and(|r| std::ptr::eq(**h, r)))
                .map(|h| self.observed_line(h))
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
            super::refine::HeadlineDraft {
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

    fn observed_line<'a>(&'a self, hit: &'a RuleHit) -> super::refine::ObservedLine<'a> {
        super::refine::ObservedLine {
            line: hit.line,
            text: &hit.text,
            following: &hit.following,
            rule: Some(&self.rules[hit.rule].spec),
        }
    }

    fn spec_of(&self, hit: &RuleHit) -> u8 {
        self.rules[hit.rule].spec.specificity
    }

    fn finding(&self, hit: &RuleHit, role: Role) -> Finding {
        let rule = &self.rules[hit.rule].spec;
        Finding {
            rule: rule.id.clone(),
            category: rule.category,
            role,
            line: hit.line,
            text: hit.text.clone(),
        }
    }
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

/// The rule part of the fingerprint of a log no rule matched (no rule id looks like it).
const UNMATCHED: &str = "<unmatched>";

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
