//! The failure-line locator: in a log no rule matched, which line is the first failure of the
//! run (layer 2 of DESIGN.md section 4 for wordings no rule lists).
//!
//! Rules name the lines they know; the next wording is always one no rule lists (a Go server's
//! crash, a CI runner's annotation, a scheduler killing a worker, a library's raw status line).
//! The locator scores every line of the log's tail window by a linear model over the features
//! of `features` (severity words and level letters, exception and status shapes, the words of
//! dying processes, the place before or after a stack dump, at the end, repeated, first of its
//! kind) and names the best one among the lines that say something failed. Lines that say
//! nothing of a failure are never named: a log without one keeps no root-cause line.
//!
//! Why a conditional logit model: the question is "which line of this log", so the model is
//! trained to put the probability of each log's labelled line above its other lines (a softmax
//! over the log's lines), by plain gradient descent from zero, deterministic. Its weights are
//! [`WEIGHTS`], a reviewed file written by `cargo run --release --example train_locator` from
//! the repository's labelled logs (docs/src/engine.md says which and how it is measured).

pub mod features;
mod shapes;
pub mod train;

use std::collections::BTreeMap;

use features::{FEATURES, NAMES, Vector, WindowLine, is_cue, vectors};

/// The shipped weights (see the module doc).
pub const WEIGHTS: &str = include_str!("locator/weights.toml");

/// The rule id a located root cause carries: no rule is named so (ids have no `<`).
pub const LOCATOR_RULE: &str = "<locator>";

/// Lines at the end of a log the locator reads (the streaming pass keeps them).
pub const WINDOW: usize = 200;

/// Longest line of the window kept, in bytes (a giant line is read by its start).
pub const LINE_CAP: usize = 2048;

/// The model: one weight per feature.
#[derive(Debug, Clone, PartialEq)]
pub struct Locator {
    weights: Vector,
}

/// The line the locator names.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    /// Its index in the window.
    pub index: usize,
    /// Its 1-based line number in the input.
    pub line: usize,
    /// The model's probability that it is the failure line, among the window's lines that say
    /// something failed.
    pub probability: f64,
}

#[derive(serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct WeightsFile {
    weights: BTreeMap<String, f64>,
}

/// Why a weights file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("locator weights: {0}")]
pub struct WeightsError(String);

impl Locator {
    /// The shipped locator; a weights file that does not parse (a test guards that it does)
    /// leaves every weight at zero, which names the first line that says something failed.
    #[must_use]
    pub fn builtin() -> Locator {
        Locator::from_toml(WEIGHTS).unwrap_or_else(|e| {
            tracing::error!("{e}");
            Locator::new([0.0; FEATURES])
        })
    }

    /// A locator with these weights.
    #[must_use]
    pub fn new(weights: Vector) -> Locator {
        Locator { weights }
    }

    /// Reads a weights file: a `[weights]` table of feature names (see `features::NAMES`); a
    /// feature it does not name weighs 0, a name that is no feature is an error.
    pub fn from_toml(text: &str) -> Result<Locator, WeightsError> {
        let file: WeightsFile = toml::from_str(text).map_err(|e| WeightsError(e.to_string()))?;
        let mut weights = [0.0; FEATURES];
        for (name, w) in file.weights {
            let i = NAMES
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| WeightsError(format!("{name:?} is no feature")))?;
            weights[i] = w;
        }
        Ok(Locator { weights })
    }

    /// The weights file of this locator, after `header` (comment lines).
    #[must_use]
    pub fn to_toml(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("\n[weights]\n");
        for (name, w) in NAMES.iter().zip(self.weights) {
            // Four decimals: enough for the model, stable across platforms' float printing.
            out.push_str(&format!("{name} = {w:.4}\n"));
        }
        out
    }

    /// The weights, in feature order.
    #[must_use]
    pub fn weights(&self) -> &Vector {
        &self.weights
    }

    fn score(&self, v: &Vector) -> f64 {
        self.weights.iter().zip(v).map(|(w, x)| w * x).sum()
    }

    /// The failure line of `window` (a log's last lines, in order), or `None` when no line
    /// says something failed. Ties go to the earliest line.
    #[must_use]
    pub fn locate(&self, window: &[WindowLine]) -> Option<Located> {
        let vs = vectors(window);
        let scored: Vec<(usize, f64)> = (vs.iter().enumerate())
            .filter(|(_, v)| is_cue(v))
            .map(|(i, v)| (i, self.score(v)))
            .collect();
        let &(best, top) = scored
            .iter()
            .fold(None, |acc: Option<&(usize, f64)>, s| match acc {
                Some(a) if a.1 >= s.1 => Some(a),
                _ => Some(s),
            })?;
        let sum: f64 = scored.iter().map(|(_, s)| (s - top).exp()).sum();
        Some(Located {
            index: best,
            line: window[best].line,
            probability: 1.0 / sum,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(lines: &[&str]) -> Vec<WindowLine> {
        (lines.iter().enumerate())
            .map(|(i, l)| WindowLine::new(i + 1, l.as_bytes()))
            .collect()
    }

    #[test]
    fn the_shipped_weights_parse_and_name_every_feature() {
        let l = Locator::from_toml(WEIGHTS).expect("the shipped weights parse");
        let text = l.to_toml("x");
        assert_eq!(Locator::from_toml(&text).expect("round trip"), l);
        for name in NAMES {
            assert!(
                WEIGHTS.contains(&format!("\n{name} = ")),
                "{name} has no weight"
            );
        }
        assert!(Locator::from_toml("[weights]\nnope = 1.0\n").is_err());
    }

    #[test]
    fn a_log_without_a_failure_has_no_located_line() {
        let l = Locator::builtin();
        assert_eq!(
            l.locate(&window(&["epoch 1 loss 0.3", "saved", "done"])),
            None
        );
        let warn = window(&["WARNING: low disk space, 2 GiB left", "epoch 2"]);
        assert_eq!(l.locate(&warn), None);
        assert_eq!(l.locate(&[]), None);
    }

    #[test]
    fn failures_outside_python_tracebacks_are_located() {
        let l = Locator::builtin();
        let cases: [(&[&str], usize); 4] = [
            (
                &[
                    "time=2025-01-02 level=INFO msg=\"loading model\"",
                    "SIGSEGV: segmentation violation",
                    "PC=0x7f3a m=5 sigcode=1",
                    "signal arrived during cgo execution",
                    "",
                    "goroutine 7 [syscall]:",
                    "runtime.cgocall(0x55, 0xc0)",
                    "\t/usr/local/go/src/runtime/cgocall.go:157 +0x4b",
                ],
                2,
            ),
            (
                &[
                    "Step 3/9 : RUN make",
                    "/tmp/x/kernel.cu(12): error: identifier \"foo\" is undefined",
                    "1 error detected in the compilation of \"kernel.cu\".",
                    "make: *** [Makefile:4: kernel.o] Error 2",
                ],
                2,
            ),
            (
                &[
                    "2025-03-01 12:00:00,123 - INFO - starting",
                    "2025-03-01 12:00:09,456 - ERROR - Worker 3 exceeded memory budget 95%, killing",
                    "2025-03-01 12:00:09,470 - INFO - restarting worker",
                ],
                2,
            ),
            (
                &[
                    "##[group]Run pytest",
                    "pytest -x tests/",
                    "E   AssertionError: 3 != 4",
                    "##[error]Process completed with exit code 1.",
                ],
                3,
            ),
        ];
        for (lines, want) in cases {
            let got = l.locate(&window(lines)).map(|x| x.line);
            assert_eq!(got, Some(want), "{lines:?}");
        }
    }
}
