//! What the report page says of a log's classification beyond its headline: the findings
//! folded by rule, the typed facts as readable rows (also on a team rule's test results), and
//! the next steps beside the asynchronous-error warning.

use crate::rules::{Category, Facts, Finding, Role};

/// The findings of one rule as the report page lists them: folded, the first one's text, every
/// line it hit (the root cause's rule first, its root-cause line first).
pub struct FindingGroup {
    pub root: bool,
    pub rule: String,
    pub category: Category,
    pub text: String,
    pub lines: Vec<usize>,
}

impl FindingGroup {
    /// The lines after the first.
    #[must_use]
    pub fn more(&self) -> &[usize] {
        self.lines.get(1..).unwrap_or_default()
    }
}

/// Findings folded by rule, in the order of their first finding (the root cause first).
pub(super) fn fold_findings(findings: &[Finding]) -> Vec<FindingGroup> {
    let mut groups: Vec<FindingGroup> = Vec::new();
    for f in findings {
        match groups.iter_mut().find(|g| g.rule == f.rule) {
            Some(g) => g.lines.push(f.line),
            None => groups.push(FindingGroup {
                root: f.role == Role::RootCause,
                rule: f.rule.clone(),
                category: f.category,
                text: f.text.clone(),
                lines: vec![f.line],
            }),
        }
    }
    groups
}

/// The next steps as the page lists them: when the asynchronous-error warning is shown above,
/// the step that says the same (the async context's advice: "CUDA reports kernel errors
/// asynchronously ...") is not repeated below it.
pub(super) fn steps_beside_warning(steps: Vec<String>, warning_shown: bool) -> Vec<String> {
    if !warning_shown {
        return steps;
    }
    steps
        .into_iter()
        .filter(|s| !s.contains("asynchronously"))
        .collect()
}

/// Typed facts as label/value rows, sizes in human units with exact bytes; the other facts in
/// the order of their names.
pub(in crate::web::html) fn fact_rows(facts: &Facts) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mem = &facts.memory;
    for (value, label) in [
        (mem.requested_bytes, "requested"),
        (mem.free_bytes, "free"),
        (mem.total_bytes, "total"),
        (mem.allocated_bytes, "allocated by PyTorch"),
        (mem.reserved_bytes, "reserved by PyTorch"),
    ] {
        if let Some(b) = value {
            rows.push((
                format!("memory {label}"),
                format!("{} ({b} bytes)", human_bytes(b)),
            ));
        }
    }
    let list = |items: &[String]| (!items.is_empty()).then(|| items.join(", "));
    let ranks = (!facts.ranks.is_empty()).then(|| {
        let ranks: Vec<String> = facts.ranks.iter().map(u32::to_string).collect();
        ranks.join(", ")
    });
    let named = [
        ("arch", facts.arch.clone()),
        ("cuda version", facts.cuda_version.clone()),
        ("devices", list(&facts.devices)),
        ("driver version", facts.driver_version.clone()),
        ("dtypes", list(&facts.dtypes)),
        ("failing gpu", facts.failing_gpu.clone()),
        ("failing host", facts.failing_host.clone()),
        ("failing rank", facts.failing_rank.map(|r| r.to_string())),
        ("gpu", facts.gpu.clone()),
        ("nccl version", facts.nccl_version.clone()),
        ("ranks", ranks),
        ("shapes", list(&facts.shapes)),
        ("torch version", facts.torch_version.clone()),
    ];
    for (label, value) in named {
        if let Some(text) = value {
            rows.push((label.to_owned(), text));
        }
    }
    rows
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_become_readable_rows() {
        let facts: Facts = serde_json::from_value(serde_json::json!({
            "memory": {"requested_bytes": 2147483648u64, "free_bytes": 512},
            "devices": ["cuda:0", "cpu"], "gpu": "NVIDIA A100"
        }))
        .expect("facts");
        let rows = fact_rows(&facts);
        assert_eq!(
            rows[0],
            (
                "memory requested".into(),
                "2.00 GiB (2147483648 bytes)".into()
            )
        );
        assert_eq!(rows[1], ("memory free".into(), "512 B (512 bytes)".into()));
        assert!(rows.contains(&("devices".into(), "cuda:0, cpu".into())));
        assert!(rows.contains(&("gpu".into(), "NVIDIA A100".into())));
    }
}
