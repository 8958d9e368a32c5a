//! Training and measuring the locator on labelled logs (in memory: reading the corpora is the
//! caller's business, `examples/train_locator.rs`).
//!
//! Each log is one choice among its lines that say something failed: the model is fitted so
//! that its labelled failure line(s) get the probability (a softmax of the linear scores over
//! those lines), by full-batch gradient descent from zero weights with a small L2 penalty. The
//! same data always gives the same weights: no randomness, a fixed number of steps, a fixed
//! order of summation.

use super::features::{FEATURES, Vector, WindowLine, is_cue, vectors};
use super::{LINE_CAP, Locator, WINDOW};

/// Gradient steps.
const STEPS: usize = 3000;
/// Step size.
const RATE: f64 = 0.5;
/// L2 penalty per weight (keeps rare features' weights small on a few hundred logs).
const L2: f64 = 0.003;

/// One labelled log.
#[derive(Debug, Clone)]
pub struct Example {
    /// Where it comes from (`split/id`), for reports.
    pub name: String,
    /// Its window, as the classifier would see it.
    pub window: Vec<WindowLine>,
    /// Its labelled failure lines (1-based input lines).
    pub causes: Vec<usize>,
}

impl Example {
    /// The example of a whole log and its labelled lines.
    #[must_use]
    pub fn new(name: &str, log: &[u8], causes: &[usize]) -> Example {
        Example {
            name: name.to_owned(),
            window: window_of(log),
            causes: causes.to_vec(),
        }
    }
}

/// The last [`WINDOW`] lines of a whole log, numbered and capped as the streaming pass does.
#[must_use]
pub fn window_of(log: &[u8]) -> Vec<WindowLine> {
    let mut lines: Vec<&[u8]> = log.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(WINDOW);
    (lines.iter().enumerate().skip(skip))
        .map(|(i, l)| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            WindowLine::new(i + 1, &l[..l.len().min(LINE_CAP)])
        })
        .collect()
}

/// A log as the trainer uses it: the vectors of its candidate lines and which are labelled.
struct Prepared {
    vectors: Vec<Vector>,
    positive: Vec<bool>,
}

fn prepare(e: &Example) -> Option<Prepared> {
    let vs = vectors(&e.window);
    let mut vectors = Vec::new();
    let mut positive = Vec::new();
    for (w, v) in e.window.iter().zip(vs) {
        if is_cue(&v) {
            positive.push(e.causes.contains(&w.line));
            vectors.push(v);
        }
    }
    // A log whose labelled line says nothing of a failure cannot be learned from: the
    // locator never names such a line.
    positive
        .iter()
        .any(|&p| p)
        .then_some(Prepared { vectors, positive })
}

/// Fits a locator to `examples` (see the module doc).
#[must_use]
pub fn train(examples: &[Example]) -> Locator {
    let data: Vec<Prepared> = examples.iter().filter_map(prepare).collect();
    let mut w = [0.0; FEATURES];
    if data.is_empty() {
        return Locator::new(w);
    }
    let n = data.len() as f64;
    for _ in 0..STEPS {
        let mut grad: Vector = std::array::from_fn(|i| L2 * w[i]);
        for d in &data {
            let scores: Vec<f64> = (d.vectors.iter())
                .map(|v| v.iter().zip(&w).map(|(x, wi)| x * wi).sum())
                .collect();
            let p = softmax(&scores, |_| true);
            let q = softmax(&scores, |i| d.positive[i]);
            for (i, v) in d.vectors.iter().enumerate() {
                let diff = (p[i] - q[i]) / n;
                if diff != 0.0 {
                    for (g, x) in grad.iter_mut().zip(v) {
                        *g += diff * x;
                    }
                }
            }
        }
        for (wi, g) in w.iter_mut().zip(grad) {
            *wi -= RATE * g;
        }
    }
    Locator::new(w)
}

/// The softmax of `scores` over the indices `keep` admits (0 elsewhere).
fn softmax(scores: &[f64], keep: impl Fn(usize) -> bool) -> Vec<f64> {
    let max = (0..scores.len())
        .filter(|&i| keep(i))
        .map(|i| scores[i])
        .fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = (0..scores.len())
        .map(|i| {
            if keep(i) {
                (scores[i] - max).exp()
            } else {
                0.0
            }
        })
        .collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

/// How a locator does on labelled logs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// Logs with labelled lines.
    pub logs: usize,
    /// Of those, how many it named a labelled line of.
    pub hits: usize,
    /// Of those, how many it named no line in.
    pub silent: usize,
    /// The logs it missed: name, the line it named, the lines wanted.
    pub misses: Vec<(String, Option<usize>, Vec<usize>)>,
}

/// Measures `locator` on `examples` (those with labelled lines).
#[must_use]
pub fn measure(locator: &Locator, examples: &[Example]) -> Measured {
    let mut m = Measured::default();
    for e in examples.iter().filter(|e| !e.causes.is_empty()) {
        m.logs += 1;
        let got = locator.locate(&e.window).map(|l| l.line);
        match got {
            Some(line) if e.causes.contains(&line) => m.hits += 1,
            None => m.silent += 1,
            _ => {}
        }
        if !got.is_some_and(|l| e.causes.contains(&l)) {
            m.misses.push((e.name.clone(), got, e.causes.clone()));
        }
    }
    m
}

/// Leave one split out: for each split, a locator trained on the others, measured on it.
#[must_use]
pub fn leave_one_split_out(splits: &[(String, Vec<Example>)]) -> Vec<(String, Measured)> {
    (0..splits.len())
        .map(|held| {
            let training: Vec<Example> = (splits.iter().enumerate())
                .filter(|(i, _)| *i != held)
                .flat_map(|(_, (_, e))| e.iter().cloned())
                .collect();
            let model = train(&training);
            (splits[held].0.clone(), measure(&model, &splits[held].1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_learns_which_line_fails_and_is_deterministic() {
        // A retried warning-like error comes first; the labelled failure is the fatal line
        // after it. Untrained (every weight 0) the locator names the earliest line that says
        // something failed; trained, the fatal one.
        let logs: Vec<Example> = (0..6)
            .map(|i| {
                let log = format!(
                    "step {i}\nerror: retrying download {i}\nfatal: cannot open shard {i}\nbye\n"
                );
                Example::new(&format!("t/{i}"), log.as_bytes(), &[3])
            })
            .collect();
        let untrained = measure(&Locator::new([0.0; FEATURES]), &logs);
        assert_eq!((untrained.logs, untrained.hits), (6, 0), "{untrained:?}");
        let a = train(&logs);
        assert_eq!(a, train(&logs), "the same data gives the same weights");
        let m = measure(&a, &logs);
        assert_eq!((m.hits, m.silent), (6, 0), "{m:?}");
    }

    #[test]
    fn the_window_is_the_logs_tail_numbered_as_given() {
        let mut log = String::new();
        for i in 1..=WINDOW + 5 {
            log.push_str(&format!("line {i}\r\n"));
        }
        let w = window_of(log.as_bytes());
        assert_eq!(w.len(), WINDOW);
        assert_eq!(w[0].line, 6);
        assert_eq!(w[WINDOW - 1].cleaned, format!("line {}", WINDOW + 5));
    }
}
