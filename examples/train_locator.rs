//! Trains the failure-line locator from the repository's labelled logs and writes its weights:
//!
//! ```sh
//! cargo run --release --example train_locator -- --out src/rules/locator/weights.toml \
//!     tests/tune tests/gpu-logs tests/locate
//! ```
//!
//! Each DIR is a labelled split (`labels.csv`, `evidence.csv` with cause lines, `cases/*.log`).
//! It prints, for each split, how a locator trained on the other splits does on it (leave one
//! split out: the figure to quote), then trains on all of them and writes the weights with a
//! header saying what they were trained on. Deterministic: the same splits give the same file.
//! Never give it the shared development corpora (they stay for measuring) or a held-out split.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, bail};
use gpu_triage::commands::eval::load_corpus;
use gpu_triage::rules::locator::train::{Example, leave_one_split_out, measure, train};

fn main() -> anyhow::Result<()> {
    let mut out: Option<PathBuf> = None;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut verbose = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = Some(args.next().context("--out needs a file")?.into()),
            "-v" | "--verbose" => verbose = true,
            _ if a.starts_with('-') => bail!("unknown option {a}"),
            _ => dirs.push(a.into()),
        }
    }
    if dirs.is_empty() {
        bail!("usage: train_locator [--out FILE] [-v] DIR...");
    }
    let mut splits: Vec<(String, Vec<Example>)> = Vec::new();
    for dir in &dirs {
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        let cases = load_corpus(dir).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut examples = Vec::new();
        for case in cases.iter().filter(|c| !c.cause_lines.is_empty()) {
            let path = dir.join("cases").join(format!("{}.log", case.id));
            let log = std::fs::read(&path).with_context(|| path.display().to_string())?;
            examples.push(Example::new(
                &format!("{name}/{}", case.id),
                &log,
                &case.cause_lines,
            ));
        }
        splits.push((name, examples));
    }
    let mut report = String::new();
    let (mut hits, mut logs, mut silent) = (0, 0, 0);
    for (name, m) in leave_one_split_out(&splits) {
        let _ = writeln!(
            report,
            "leave-one-split-out {name}: {}/{} = {:.1}% of labelled lines named, {} logs silent",
            m.hits,
            m.logs,
            pct(m.hits, m.logs),
            m.silent
        );
        if verbose {
            for (case, got, want) in &m.misses {
                let _ = writeln!(report, "  {case}: named {got:?}, labelled {want:?}");
            }
        }
        (hits, logs, silent) = (hits + m.hits, logs + m.logs, silent + m.silent);
    }
    let _ = writeln!(
        report,
        "leave-one-split-out, all splits: {hits}/{logs} = {:.1}%, {silent} silent",
        pct(hits, logs)
    );
    let all: Vec<Example> = splits.iter().flat_map(|(_, e)| e.iter().cloned()).collect();
    let model = train(&all);
    let fitted = measure(&model, &all);
    let _ = writeln!(
        report,
        "trained on all ({} logs): {}/{} = {:.1}% on its own training logs",
        all.len(),
        fitted.hits,
        fitted.logs,
        pct(fitted.hits, fitted.logs)
    );
    print!("{report}");
    if let Some(out) = out {
        let names: Vec<&str> = splits.iter().map(|(n, _)| n.as_str()).collect();
        let header = format!(
            "Weights of the failure-line locator (src/rules/locator.rs), one per feature of\n\
             src/rules/locator/features.rs. Written by\n\
             `cargo run --release --example train_locator -- --out src/rules/locator/weights.toml {}`\n\
             from the labelled logs of {} (never the shared development corpora or a held-out\n\
             split). Do not edit by hand: change the data or the features and train again.\n\n{}",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            names.join(", "),
            report.trim_end()
        );
        std::fs::write(&out, model.to_toml(&header)).with_context(|| out.display().to_string())?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

fn pct(n: usize, d: usize) -> f64 {
    if d == 0 {
        100.0
    } else {
        100.0 * n as f64 / d as f64
    }
}
