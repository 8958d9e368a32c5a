//! The next steps of a classification: the root rule's own advice with its captures filled
//! in, then its category's general advice, with steps that say the same thing kept once.

use std::collections::HashMap;

use super::MAX_STEPS;
use super::collect::RuleHit;
use crate::rules::{Category, Ruleset};

impl Ruleset {
    pub(super) fn next_steps(
        &self,
        root: Option<&RuleHit>,
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
                vars.entry(crate::rules::facts::canonical_name(k))
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

/// Whether two steps give the same advice: the same text, or nearly all the words of the
/// shorter one (3 letters or more, case folded) in the longer, as when a rule's advice and its
/// category's general advice both say "re-run with CUDA_LAUNCH_BLOCKING=1: cuBLAS errors are
/// often the side effect of an earlier failure".
pub(super) fn same_advice(a: &str, b: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::same_advice;

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
