//! Would "Fixed before" show the right fix? Measured on `tests/kb-judged/pairs.csv`: pairs of
//! real crash logs judged `same_fix` (the fix recorded for one fixes the other) or
//! `different_fix` (look-alikes: the same generic error from different programs). A group's
//! fix is shown for a new log exactly when both logs get the same fingerprint, so precision is
//! the share of shown pairs that were `same_fix` and coverage the share of `same_fix` pairs
//! that were shown. Issue 39 is why: most suggestions it sampled were look-alikes.

use super::corpus::parse_csv;
use super::*;

/// One compiled ruleset for the module: its regexes compile lazily, once.
static RULES: std::sync::LazyLock<Ruleset> =
    std::sync::LazyLock::new(|| Ruleset::builtin().expect("builtin ruleset compiles"));

const HEADER: [&str; 7] = [
    "a",
    "b",
    "judgement",
    "kind",
    "reason",
    "source_a",
    "source_b",
];

/// The lowest precision the engine must keep on the set, once the fingerprint reaches it; `None`
/// while it does not (the test then only reports the figures).
const PRECISION_FLOOR: Option<f64> = Some(0.9);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Judgement {
    SameFix,
    DifferentFix,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Program,
    Environment,
}

struct Pair {
    a: String,
    b: String,
    judgement: Judgement,
    kind: Kind,
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The judged pairs, each checked: known judgement and kind, a reason, both sources, both logs
/// on disk and readable.
fn pairs() -> Vec<Pair> {
    let path = root().join("tests/kb-judged/pairs.csv");
    let text = std::fs::read_to_string(&path).expect("tests/kb-judged/pairs.csv is readable");
    let rows = parse_csv(&text);
    let (header, rows) = rows.split_first().expect("pairs.csv has a header");
    assert_eq!(header.as_slice(), HEADER, "pairs.csv columns");
    let mut out = Vec::new();
    for (n, row) in rows.iter().enumerate() {
        let line = n + 2;
        assert_eq!(row.len(), HEADER.len(), "pairs.csv line {line}: {row:?}");
        let judgement = match row[2].as_str() {
            "same_fix" => Judgement::SameFix,
            "different_fix" => Judgement::DifferentFix,
            other => panic!("pairs.csv line {line}: judgement {other:?}"),
        };
        let kind = match row[3].as_str() {
            "program" => Kind::Program,
            "environment" => Kind::Environment,
            other => panic!("pairs.csv line {line}: kind {other:?}"),
        };
        assert!(
            !row[4].trim().is_empty(),
            "pairs.csv line {line}: no reason"
        );
        assert!(
            !row[5].trim().is_empty() && !row[6].trim().is_empty(),
            "pairs.csv line {line}: a source is missing"
        );
        assert_ne!(
            row[0], row[1],
            "pairs.csv line {line}: a log paired with itself"
        );
        for log in [&row[0], &row[1]] {
            assert!(
                root().join(log).is_file(),
                "pairs.csv line {line}: no log at {log}"
            );
        }
        out.push(Pair {
            a: row[0].clone(),
            b: row[1].clone(),
            judgement,
            kind,
        });
    }
    out
}

fn fingerprint(log: &str) -> String {
    let bytes = std::fs::read(root().join(log)).expect("a judged log is readable");
    RULES.classify_bytes(log, &bytes).fingerprint
}

/// Shown / not shown counts for one judgement and kind.
#[derive(Default, Clone, Copy)]
struct Cell {
    shown: usize,
    hidden: usize,
}

fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

#[test]
fn the_judged_pairs_parse_and_name_logs_on_disk() {
    let pairs = pairs();
    assert!(!pairs.is_empty(), "pairs.csv has no pairs");
    let both = |j| pairs.iter().any(|p: &Pair| p.judgement == j);
    assert!(both(Judgement::SameFix) && both(Judgement::DifferentFix));
}

#[test]
fn fixed_before_precision_and_coverage_on_judged_pairs() {
    let pairs = pairs();
    // [judgement][kind]: same_fix/different_fix x program/environment.
    let mut cells = [[Cell::default(); 2]; 2];
    let mut wrong_shown = Vec::new();
    let mut missed = Vec::new();
    for p in &pairs {
        let shown = fingerprint(&p.a) == fingerprint(&p.b);
        let j = usize::from(p.judgement == Judgement::DifferentFix);
        let k = usize::from(p.kind == Kind::Environment);
        let cell = &mut cells[j][k];
        if shown {
            cell.shown += 1;
        } else {
            cell.hidden += 1;
        }
        match (p.judgement, shown) {
            (Judgement::DifferentFix, true) => wrong_shown.push(format!("{} ~ {}", p.a, p.b)),
            (Judgement::SameFix, false) => missed.push(format!("{} ~ {}", p.a, p.b)),
            _ => {}
        }
    }
    println!(
        "\"Fixed before\" on {} judged pairs (shown = same fingerprint)",
        pairs.len()
    );
    println!(
        "{:<14} {:<12} {:>6} {:>10}",
        "judgement", "kind", "shown", "not shown"
    );
    for (j, judgement) in ["same_fix", "different_fix"].iter().enumerate() {
        for (k, kind) in ["program", "environment"].iter().enumerate() {
            let c = cells[j][k];
            println!("{judgement:<14} {kind:<12} {:>6} {:>10}", c.shown, c.hidden);
        }
    }
    let same: Cell = sum(&cells[0]);
    let diff: Cell = sum(&cells[1]);
    let shown = same.shown + diff.shown;
    let precision = ratio(same.shown, shown);
    let coverage = ratio(same.shown, same.shown + same.hidden);
    println!(
        "precision = same_fix among shown = {}/{shown} = {precision:.2}",
        same.shown
    );
    println!(
        "coverage = shown among same_fix = {}/{} = {coverage:.2}",
        same.shown,
        same.shown + same.hidden
    );
    for pair in &wrong_shown {
        println!("shown but different_fix: {pair}");
    }
    for pair in &missed {
        println!("same_fix not shown: {pair}");
    }
    if let Some(floor) = PRECISION_FLOOR {
        assert!(
            precision >= floor,
            "precision {precision:.2} under the floor {floor:.2}"
        );
    }
}

fn sum(cells: &[Cell; 2]) -> Cell {
    Cell {
        shown: cells[0].shown + cells[1].shown,
        hidden: cells[0].hidden + cells[1].hidden,
    }
}
