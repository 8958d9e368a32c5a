//! `gpu-triage eval DIR`: measure the ruleset on a labelled corpus (`labels.csv`, `cases/*.log`,
//! optional `evidence.csv`): per-label accuracy, confusion pairs, root-cause-line and facts hit
//! rates, ending with `accuracy: N/M = P%` (DESIGN.md section 3). It fails only when the corpus
//! cannot be read, never because of the score.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod fallback;

use super::BadInput;
pub use crate::rules::corpus::Case;
use crate::rules::corpus::parse_corpus;
use crate::rules::facts::{bytes_agree, normalize_shape};
use crate::rules::{Category, Classification, Ruleset};

/// `gpu-triage eval`
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// Corpus directory with labels.csv, cases/*.log and optionally evidence.csv.
    pub dir: std::path::PathBuf,
    /// Use this TOML ruleset instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<std::path::PathBuf>,
    /// List every miss.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Scores of one evaluation run.
#[derive(Debug, Default, Clone)]
pub struct Score {
    /// Cases classified.
    pub total: usize,
    /// Cases whose category matched.
    pub correct: usize,
    /// (hits, cases with cause lines).
    pub lines: (usize, usize),
    /// (hits, cases with facts).
    pub facts: (usize, usize),
    /// (hits, cases with an async label).
    pub async_hint: (usize, usize),
    /// (hits, cases with cause lines) of the locator alone, as if no rule matched any log.
    pub located: (usize, usize),
    /// Cases with cause lines that got no root-cause line.
    pub no_line: usize,
    /// The printed report.
    pub report: String,
}

/// Runs the command and prints the report.
pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let ruleset = super::classify::load_ruleset(args.rules.as_deref())?;
    let cases = load_corpus(&args.dir)?;
    let score = evaluate(&ruleset, &args.dir, &cases, args.verbose)?;
    print!("{}", score.report);
    Ok(())
}

/// Reads `labels.csv` and, when present, `evidence.csv`.
pub fn load_corpus(dir: &Path) -> Result<Vec<Case>, BadInput> {
    let labels_path = dir.join("labels.csv");
    let labels = std::fs::read_to_string(&labels_path)
        .map_err(|e| BadInput(format!("{}: cannot read: {e}", labels_path.display())))?;
    let evidence_path = dir.join("evidence.csv");
    let evidence = if evidence_path.exists() {
        Some(
            std::fs::read_to_string(&evidence_path)
                .map_err(|e| BadInput(format!("{}: cannot read: {e}", evidence_path.display())))?,
        )
    } else {
        None
    };
    parse_corpus(&labels, evidence.as_deref())
        .map_err(|e| BadInput(format!("{}: {e}", labels_path.display())))
}

/// Classifies every case and scores it.
pub fn evaluate(
    ruleset: &Ruleset,
    dir: &Path,
    cases: &[Case],
    verbose: bool,
) -> Result<Score, BadInput> {
    let mut score = Score::default();
    let mut per_label: BTreeMap<Category, (usize, usize)> = BTreeMap::new();
    let mut confusion: BTreeMap<(Category, Category), Vec<String>> = BTreeMap::new();
    let mut misses = String::new();
    let mut fallback = fallback::FallbackScore::default();
    for case in cases {
        let path: PathBuf = dir.join("cases").join(format!("{}.log", case.id));
        let bytes = std::fs::read(&path)
            .map_err(|e| BadInput(format!("{}: cannot read: {e}", path.display())))?;
        let c = ruleset.classify_bytes(&path.display().to_string(), &bytes);
        score.total += 1;
        fallback.add(ruleset, case, &c, &bytes);
        let entry = per_label.entry(case.label).or_default();
        entry.0 += 1;
        if c.category == case.label {
            score.correct += 1;
            entry.1 += 1;
        } else {
            confusion
                .entry((case.label, c.category))
                .or_default()
                .push(case.id.clone());
        }
        let line = c.root_cause.as_ref().map(|r| r.line);
        if !case.cause_lines.is_empty() {
            score.lines.1 += 1;
            score.located.1 += 1;
            score.no_line += usize::from(line.is_none());
            let alone = ruleset.locate_alone(&bytes).map(|(l, _, _)| l);
            if alone.is_some_and(|l| case.cause_lines.contains(&l)) {
                score.located.0 += 1;
            } else if verbose {
                let _ = writeln!(
                    misses,
                    "  {} locator alone: got {alone:?}, want {:?}",
                    case.id, case.cause_lines
                );
            }
            if line.is_some_and(|l| case.cause_lines.contains(&l)) {
                score.lines.0 += 1;
            } else if verbose {
                let _ = writeln!(
                    misses,
                    "  {} line: got {:?}, want {:?}",
                    case.id, line, case.cause_lines
                );
            }
        }
        if !case.facts.is_empty() {
            score.facts.1 += 1;
            let wrong: Vec<&(String, String)> =
                case.facts.iter().filter(|f| !fact_matches(&c, f)).collect();
            if wrong.is_empty() {
                score.facts.0 += 1;
            } else if verbose {
                let got = serde_json::to_string(&c.facts).unwrap_or_default();
                let _ = writeln!(misses, "  {} facts: want {wrong:?}, got {got}", case.id);
            }
        }
        if let Some(want) = case.async_hint {
            score.async_hint.1 += 1;
            if c.async_hint == want {
                score.async_hint.0 += 1;
            } else if verbose {
                let _ = writeln!(
                    misses,
                    "  {} async_hint: got {}, want {want}",
                    case.id, c.async_hint
                );
            }
        }
        if verbose && c.category != case.label {
            let _ = writeln!(
                misses,
                "  {} category: got {} ({:?}), want {}",
                case.id,
                c.category,
                c.root_cause.as_ref().map(|r| &r.rule),
                case.label
            );
        }
    }
    let mut r = String::new();
    let _ = writeln!(
        r,
        "{:<24} {:>6} {:>8} {:>9}",
        "label", "cases", "correct", "accuracy"
    );
    for (label, (n, ok)) in &per_label {
        let _ = writeln!(
            r,
            "{:<24} {:>6} {:>8} {:>8.1}%",
            label.as_str(),
            n,
            ok,
            pct(*ok, *n)
        );
    }
    let _ = writeln!(r, "\nconfusion (expected -> got):");
    if confusion.is_empty() {
        let _ = writeln!(r, "  none");
    }
    for ((want, got), ids) in &confusion {
        let _ = writeln!(r, "  {want} -> {got}: {} ({})", ids.len(), ids.join(", "));
    }
    if !misses.is_empty() {
        let _ = writeln!(r, "\nmisses:\n{misses}");
    }
    let _ = writeln!(r);
    let rate = |(ok, n): (usize, usize)| format!("{ok}/{n} = {:.1}%", pct(ok, n));
    let _ = writeln!(r, "root-cause line: {}", rate(score.lines));
    let _ = writeln!(
        r,
        "no root-cause line: {}",
        rate((score.no_line, score.lines.1))
    );
    let _ = writeln!(
        r,
        "locator alone (as if no rule matched): {}",
        rate(score.located)
    );
    let _ = writeln!(r, "facts: {}", rate(score.facts));
    let _ = writeln!(r, "async hint: {}", rate(score.async_hint));
    fallback.write(&mut r);
    if verbose {
        for (id, p, answered, got) in &fallback.located_scores {
            let _ = writeln!(
                r,
                "  located {id}: fallback {got} p={p:.3}{}",
                if *answered { " (answers)" } else { "" }
            );
        }
    }
    let _ = writeln!(r, "accuracy: {}", rate((score.correct, score.total)));
    score.report = r;
    Ok(score)
}

fn pct(ok: usize, n: usize) -> f64 {
    if n == 0 {
        100.0
    } else {
        ok as f64 * 100.0 / n as f64
    }
}

/// Whether one evidence fact (`tried_to_allocate=86.00 MiB`, `devices=cuda,cpu`, ...) is in the
/// classification's facts.
fn fact_matches(c: &Classification, (key, value): &(String, String)) -> bool {
    let list = |v: &str| {
        v.split(',')
            .map(|s| s.trim().to_owned())
            .collect::<Vec<_>>()
    };
    let m = &c.facts.memory;
    match key.as_str() {
        "tried_to_allocate" => m.requested_bytes.is_some_and(|b| bytes_agree(b, value)),
        "total" => m.total_bytes.is_some_and(|b| bytes_agree(b, value)),
        "free" => m.free_bytes.is_some_and(|b| bytes_agree(b, value)),
        "devices" => c.facts.devices == list(value),
        "failing_rank" => c
            .facts
            .failing_rank
            .is_some_and(|r| r.to_string() == *value),
        "failing_host" => c.facts.failing_host.as_deref() == Some(value.as_str()),
        "failing_gpu" => c.facts.failing_gpu.as_deref() == Some(value.as_str()),
        "dtypes" => c.facts.dtypes == list(value),
        "shapes" => {
            let want: Vec<String> = list(value)
                .iter()
                .filter_map(|s| normalize_shape(s))
                .collect();
            c.facts.shapes == want
        }
        _ => false,
    }
}
