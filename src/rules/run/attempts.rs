//! Restarts inside one file (issue 41 item 4): a log that holds several attempts (an elastic
//! agent restarting its workers, a Slurm requeue, `Cycle: N` markers) has each attempt
//! classified on its own, so each attempt's failure is listed; the file's headline stays the
//! first attempt's root cause, and a later attempt that failed differently is said
//! ([`differs`]).

use super::{Attempt, FileRootCause};
use crate::rules::Ruleset;

/// Each attempt of `text` (a file's whole text) that the restart lines (1-based, ascending,
/// each the first line of a new attempt) cut it into, classified on its own; empty when the
/// file did not restart.
#[must_use]
pub fn split(ruleset: &Ruleset, name: &str, text: &[u8], restarts: &[usize]) -> Vec<Attempt> {
    if restarts.is_empty() {
        return Vec::new();
    }
    // Byte offset of each attempt's first line.
    let mut starts = vec![(1usize, 0usize)];
    let mut line = 1;
    let mut want = restarts.iter().copied().peekable();
    for (i, _) in text.iter().enumerate().filter(|(_, b)| **b == b'\n') {
        line += 1;
        while want.peek().is_some_and(|&w| w <= line) {
            if want.next() == Some(line) {
                starts.push((line, i + 1));
            }
        }
    }
    let mut out = Vec::new();
    for (k, &(first_line, from)) in starts.iter().enumerate() {
        let to = starts.get(k + 1).map_or(text.len(), |&(_, b)| b);
        let c = ruleset.classify_bytes(name, &text[from..to]);
        out.push(Attempt {
            number: u32::try_from(k + 1).unwrap_or(u32::MAX),
            first_line: first_line as u64,
            root_cause: c.root_cause.as_ref().map(|r| FileRootCause {
                line: (r.line + first_line - 1) as u64,
                text: r.text.clone(),
                rule: r.rule.clone(),
            }),
            category: c.category,
            title: c.title,
        });
    }
    out
}

/// The first later attempt whose failure differs from the first attempt's (another rule), if
/// any.
#[must_use]
pub fn differs(attempts: &[Attempt]) -> Option<&Attempt> {
    let first = attempts.first()?;
    let rule = |a: &Attempt| a.root_cause.as_ref().map(|r| r.rule.clone());
    attempts[1..]
        .iter()
        .find(|a| a.root_cause.is_some() && rule(a) != rule(first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Category;

    #[test]
    fn each_attempt_is_classified_on_its_own() {
        let rs = Ruleset::builtin().expect("builtin");
        let log = "\
step 1
RuntimeError: CUDA error: out of memory
[default] Worker group FAILED. 2/3 attempts left; will restart worker group
step 1
RuntimeError: CUDA error: an illegal memory access was encountered
[default] Worker group FAILED. 1/3 attempts left; will restart worker group
step 1
RuntimeError: CUDA error: out of memory
";
        let attempts = split(&rs, "rank0.log", log.as_bytes(), &[3, 6]);
        let got: Vec<_> = attempts
            .iter()
            .map(|a| {
                (
                    a.number,
                    a.first_line,
                    a.category,
                    a.root_cause.as_ref().map(|r| r.line),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 1, Category::OutOfMemory, Some(2)),
                (2, 3, Category::IllegalMemoryAccess, Some(5)),
                (3, 6, Category::OutOfMemory, Some(8)),
            ]
        );
        assert_eq!(differs(&attempts).map(|a| a.number), Some(2));
        assert!(split(&rs, "x", log.as_bytes(), &[]).is_empty());
    }
}
