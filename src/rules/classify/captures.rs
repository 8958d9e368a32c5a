//! The named captures of a rule on a line: in the order a classification records them
//! (`_N` suffixes order values of one kind), and for a message a console or dmesg wrapped over
//! several lines, read from the line joined with those that follow.

use regex::Captures;

use crate::ingest::normalize::clean_line;
use crate::rules::compile::CompiledRule;
use crate::rules::{Facts, Ruleset};

/// Captures of a rule on a cleaned line; when a named group is missing and the message looks
/// console-wrapped, retries on the line joined with what follows.
pub(super) fn captures_with_wrap(
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
            // A hard wrap cuts words ("capty" / "of"); a soft one, as rich and other consoles
            // wrap at a space they drop ("devices, cpu" / "and cuda:0!"), ends a word or a
            // sentence. Both joins are tried after a long line that ends mid-word; the one whose
            // match names more is kept (the hard one on a tie).
            let hard = !joined.ends_with([' ', '.', ';', ',', ':']) && joined.len() >= 60;
            let mut joins = vec![format!("{joined} {next}")];
            if hard {
                joins.insert(0, format!("{joined}{next}"));
            }
            let mut best: Option<(Vec<(String, String)>, String)> = None;
            for candidate in joins {
                let more = re
                    .captures(&candidate)
                    .filter(|caps| caps.get(0).is_some_and(|m| m.start() < line.len()))
                    .map(|caps| named(re, &caps))
                    .unwrap_or_default();
                if best.as_ref().is_none_or(|(b, _)| more.len() > b.len()) {
                    best = Some((more, candidate));
                }
            }
            if let Some((more, candidate)) = best {
                if more.len() > got.len() {
                    got = more;
                }
                joined = candidate;
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
        rule.m.regex().is_match(&cleaned).then(|| {
            crate::rules::facts::expand_type_trees(captures_with_wrap(rule, &cleaned, &[]))
        })
    }
}

/// Whether a context whose hint and advice were applied once can change nothing more: every
/// capture names a single-valued fact that is already set (`Facts::record` keeps the first
/// value). Lists, ranks and names `Facts` does not know are never settled.
pub(super) fn context_settled(re: &regex::Regex, facts: &Facts) -> bool {
    let m = &facts.memory;
    re.capture_names()
        .flatten()
        .all(|name| match crate::rules::facts::canonical_name(name) {
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
pub(super) fn named(re: &regex::Regex, caps: &Captures<'_>) -> Vec<(String, String)> {
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
