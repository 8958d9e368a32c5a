//! The learned fallback for the category (DESIGN.md section 4, layer 3): when no rule names the
//! root-cause line, a small linear model over its words proposes a category, and says which
//! words decided it.
//!
//! Why naive Bayes: the training set is small (a few examples per rule) and must be learned at
//! every ruleset compile (a team's rules teach it too) in a millisecond, deterministically, with
//! no downloaded weights. Multinomial naive Bayes over word unigrams and bigrams does that in one
//! counting pass, and its per-word log-likelihood ratios are the explanation people are shown.
//!
//! How sure it is: raw naive-Bayes posteriors grow overconfident with line length (every word
//! counts as independent evidence), so the evidence is scaled to at most [`EVIDENCE_WORDS`]
//! words before the softmax. The answer is given only when the top category is not `unknown`,
//! at least [`MIN_KNOWN_WORDS`] of the line's words are in the vocabulary, and its probability
//! reaches [`THRESHOLD`], calibrated on the development corpora (docs/src/engine.md).

mod words;

use std::collections::HashMap;

use serde::Deserialize;

use super::Category;
use super::spec::RuleSpec;

/// Probability the top category needs before the fallback answers. Chosen as the lowest value
/// whose precision on the dev2 + dev3 corpora is at least 90% where it answers, rounded up to
/// leave a margin (docs/src/engine.md says how it was measured).
pub const THRESHOLD: f64 = 0.80;

/// Probability the top category needs before the fallback answers on a line the locator found
/// (no rule, not even a catch-all, matched it: the line is a guess itself). Calibrated by
/// `examples/train_locator.rs` leaving one split out of `tests/tune`, `tests/gpu-logs`,
/// `tests/locate`, `tests/holdout2` and `tests/holdout3`: the lowest value at which the answers
/// on the located lines are right at least 90% of the time in each split is 0.84 on all five,
/// 0.89 with the margin it adds, rounded up here (docs/src/engine.md gives each left-out split's
/// precision and coverage at the threshold fitted on the others with that margin, and the
/// development corpora's, which it was not fitted on).
pub const LOCATED_THRESHOLD: f64 = 0.90;

/// Most words of evidence counted (see the module doc): a long line is not surer than a short
/// one.
const EVIDENCE_WORDS: f64 = 6.0;

/// Fewest distinct vocabulary words of the root-cause line for any answer: one shared word
/// (`error`, `memory`) is not evidence of a family.
const MIN_KNOWN_WORDS: usize = 2;

/// Weight of the lines around the root-cause line against the line itself.
const NEIGHBOUR_WEIGHT: f64 = 0.5;

/// Additive smoothing of the word counts.
const ALPHA: f64 = 0.5;

/// Words shown as the basis of an answer.
const BASIS_WORDS: usize = 3;

/// The hand-written vocabulary: library messages from their catalogs (see the file's header).
const VOCABULARY: &str = include_str!("fallback/vocabulary.toml");

/// The category the fallback proposes for a line no rule names.
#[derive(Debug, Clone, PartialEq)]
pub struct Likely {
    /// The proposed category (never `unknown`).
    pub category: Category,
    /// The model's probability for it, 0-1.
    pub probability: f64,
    /// The words of the line that decided it, most decisive first.
    pub basis: Vec<String>,
}

/// What the model thinks of a line, answer or not (for measuring it: `gpu-triage eval`).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The most probable category (may be `unknown`).
    pub category: Category,
    /// Its probability, 0-1.
    pub probability: f64,
    /// Distinct words of the root-cause line the model knows.
    pub known_words: usize,
    /// The words that decided it.
    pub basis: Vec<String>,
}

impl Scored {
    /// The answer this score gives: `None` below the threshold, for `unknown`, or on too few
    /// known words.
    #[must_use]
    pub fn answer(&self) -> Option<Likely> {
        self.answer_at(THRESHOLD)
    }

    /// The answer for a line the locator found: as [`Scored::answer`], at
    /// [`LOCATED_THRESHOLD`].
    #[must_use]
    pub fn answer_located(&self) -> Option<Likely> {
        self.answer_at(LOCATED_THRESHOLD)
    }

    /// The answer at `threshold` (how `train_locator` calibrates [`LOCATED_THRESHOLD`] leaving
    /// one split out).
    #[must_use]
    pub fn answer_at(&self, threshold: f64) -> Option<Likely> {
        (self.category != Category::Unknown
            && self.known_words >= MIN_KNOWN_WORDS
            && self.probability >= threshold)
            .then(|| Likely {
                category: self.category,
                probability: self.probability,
                basis: self.basis.clone(),
            })
    }
}

/// A trained model: per category, the smoothed log-probability of each feature.
#[derive(Debug, Clone, Default)]
pub struct Model {
    classes: Vec<Category>,
    features: HashMap<String, usize>,
    /// `log_prob[class][feature]`.
    log_prob: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Vocabulary {
    phrases: Vec<Phrases>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Phrases {
    category: Category,
    #[allow(dead_code)]
    source: String,
    lines: Vec<String>,
}

/// The built-in vocabulary as (category, line) pairs; empty if it does not parse (a test
/// guards that it does).
fn vocabulary() -> Vec<(Category, String)> {
    match toml::from_str::<Vocabulary>(VOCABULARY) {
        Ok(v) => v
            .phrases
            .into_iter()
            .flat_map(|p| p.lines.into_iter().map(move |l| (p.category, l)))
            .collect(),
        Err(e) => {
            tracing::error!("fallback vocabulary does not parse: {e}");
            Vec::new()
        }
    }
}

/// One training example, already turned into features.
#[derive(Debug, Clone)]
struct Doc {
    /// The index of the rule it is an example of; `None` for the vocabulary.
    rule: Option<usize>,
    category: Category,
    features: Vec<String>,
    weight: f64,
}

/// The training examples of a ruleset, tokenized once: [`TrainingSet::model`] learns from all
/// of them, [`TrainingSet::model_without`] leaves some rules out (how `gpu-triage eval`
/// measures wordings no rule knows).
#[derive(Debug, Clone)]
pub struct TrainingSet {
    docs: Vec<Doc>,
}

impl TrainingSet {
    /// The examples of `rules` (every rule, built-in or a team's, teaches its category) and the
    /// built-in vocabulary.
    #[must_use]
    pub fn of<'a>(rules: impl IntoIterator<Item = &'a RuleSpec>) -> TrainingSet {
        let mut docs = Vec::new();
        for (ri, rule) in rules.into_iter().enumerate() {
            // A rule with many examples should not outweigh the families with one: each rule
            // carries about the weight of one example per its square root.
            let n = rule.examples.len();
            let weight = 1.0 / (n.max(1) as f64).sqrt();
            docs.extend(rule.examples.iter().map(|e| Doc {
                rule: Some(ri),
                category: rule.category,
                features: features_of(e),
                weight,
            }));
        }
        docs.extend(vocabulary().into_iter().map(|(category, l)| Doc {
            rule: None,
            category,
            features: features_of(&l),
            weight: 1.0,
        }));
        TrainingSet { docs }
    }

    /// The model of every example.
    #[must_use]
    pub fn model(&self) -> Model {
        Model::from_docs(self.docs.iter())
    }

    /// The model without the examples of the rules (by index) `leave_out` says.
    #[must_use]
    pub fn model_without(&self, leave_out: impl Fn(usize) -> bool) -> Model {
        Model::from_docs(self.docs.iter().filter(|d| !d.rule.is_some_and(&leave_out)))
    }
}

impl Model {
    /// Learns from the examples of `rules` and the built-in vocabulary (see [`TrainingSet`]).
    /// Deterministic: the same rules give the same model.
    #[must_use]
    pub fn train<'a>(rules: impl IntoIterator<Item = &'a RuleSpec>) -> Model {
        TrainingSet::of(rules).model()
    }

    fn from_docs<'a>(docs: impl Iterator<Item = &'a Doc> + Clone) -> Model {
        let mut classes: Vec<Category> = docs.clone().map(|d| d.category).collect();
        classes.sort();
        classes.dedup();
        let mut features: HashMap<String, usize> = HashMap::new();
        let mut counts: Vec<Vec<f64>> = vec![Vec::new(); classes.len()];
        let mut totals = vec![0.0; classes.len()];
        for doc in docs {
            let Ok(ci) = classes.binary_search(&doc.category) else {
                continue;
            };
            let weight = doc.weight;
            for f in &doc.features {
                let next = features.len();
                let fi = *features.entry(f.clone()).or_insert(next);
                for row in &mut counts {
                    if row.len() <= fi {
                        row.resize(fi + 1, 0.0);
                    }
                }
                counts[ci][fi] += weight;
                totals[ci] += weight;
            }
        }
        let v = features.len() as f64;
        let log_prob = counts
            .iter()
            .zip(&totals)
            .map(|(row, total)| {
                let denom = (total + ALPHA * v).ln();
                let mut lp: Vec<f64> = row.iter().map(|c| (c + ALPHA).ln() - denom).collect();
                lp.resize(features.len(), ALPHA.ln() - denom);
                lp
            })
            .collect();
        Model {
            classes,
            features,
            log_prob,
        }
    }

    /// Number of distinct features (words and word pairs) the model knows.
    #[must_use]
    pub fn vocabulary_size(&self) -> usize {
        self.features.len()
    }

    /// Scores the root-cause `line` with the lines around it; `None` when the model has no
    /// categories or knows none of the line's words.
    #[must_use]
    pub fn score(&self, line: &str, neighbours: &[&str]) -> Option<Scored> {
        if self.classes.len() < 2 {
            return None;
        }
        let own = words::words(&without_asserted_code(line));
        let mut weighted: Vec<(usize, f64)> = Vec::new();
        for f in features_from(&own) {
            if let Some(&fi) = self.features.get(&f) {
                weighted.push((fi, 1.0));
            }
        }
        let known: Vec<&words::Word> = own
            .iter()
            .filter(|w| self.features.contains_key(&w.stem))
            .collect();
        let mut distinct: Vec<&str> = known.iter().map(|w| w.stem.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.is_empty() {
            return None;
        }
        let mut context: Vec<words::Word> = Vec::new();
        for n in neighbours {
            let ws = words::words(n);
            for f in features_from(&ws) {
                if let Some(&fi) = self.features.get(&f) {
                    weighted.push((fi, NEIGHBOUR_WEIGHT));
                }
            }
            context.extend(
                ws.into_iter()
                    .filter(|w| self.features.contains_key(&w.stem)),
            );
        }
        let mass: f64 = weighted.iter().map(|(_, w)| w).sum();
        let scale = (EVIDENCE_WORDS / mass).min(1.0);
        let scores: Vec<f64> = self
            .log_prob
            .iter()
            .map(|lp| scale * weighted.iter().map(|&(fi, w)| w * lp[fi]).sum::<f64>())
            .collect();
        let probs = softmax(&scores);
        let mut order: Vec<usize> = (0..probs.len()).collect();
        // Ties break by taxonomy order, so the answer never depends on anything but the data.
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        let (top, second) = (order[0], order[1]);
        let basis = self.basis(&known, &context, top, second);
        Some(Scored {
            category: self.classes[top],
            probability: probs[top],
            known_words: distinct.len(),
            basis,
        })
    }

    /// The words that favour `top` over `second` most, as the lines spell them: the root-cause
    /// line's, then (at their lower weight) those of the lines after it, which can decide too
    /// (`terminate called after throwing` / `what(): NCCL error ...`).
    fn basis(
        &self,
        known: &[&words::Word],
        context: &[words::Word],
        top: usize,
        second: usize,
    ) -> Vec<String> {
        let mut gain: Vec<(f64, usize, &str, &str)> = Vec::new();
        let weighted =
            (known.iter().map(|w| (*w, 1.0))).chain(context.iter().map(|w| (w, NEIGHBOUR_WEIGHT)));
        for (pos, (w, weight)) in weighted.enumerate() {
            let Some(&fi) = self.features.get(&w.stem) else {
                continue;
            };
            let d = weight * (self.log_prob[top][fi] - self.log_prob[second][fi]);
            match gain.iter_mut().find(|g| g.2 == w.stem) {
                Some(g) => g.0 += d,
                None => gain.push((d, pos, &w.stem, &w.surface)),
            }
        }
        gain.retain(|g| g.0 > 0.0);
        gain.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        gain.into_iter()
            .take(BASIS_WORDS)
            .map(|g| g.3.to_owned())
            .collect()
    }

    /// The answer for a root-cause `line` no rule names, with the lines around it: `None`
    /// unless the model is sure enough (see [`Scored::answer`]).
    #[must_use]
    pub fn propose(&self, line: &str, neighbours: &[&str]) -> Option<Likely> {
        self.score(line, neighbours)?.answer()
    }

    /// The answer for a line the locator found (see [`Scored::answer_located`]).
    #[must_use]
    pub fn propose_located(&self, line: &str, neighbours: &[&str]) -> Option<Likely> {
        self.score(line, neighbours)?.answer_located()
    }
}

/// Unigram stems and bigrams of consecutive stems.
fn features_from(ws: &[words::Word]) -> Vec<String> {
    let mut out: Vec<String> = ws.iter().map(|w| w.stem.clone()).collect();
    out.extend(
        ws.windows(2)
            .map(|p| format!("{} {}", p[0].stem, p[1].stem)),
    );
    out
}

fn features_of(text: &str) -> Vec<String> {
    features_from(&words::words(&without_asserted_code(text)))
}

/// The line without the code an assertion prints (`GGML_ASSERT(addr + size <= end) failed`,
/// glibc's ``Assertion `i < n' failed``): its identifiers (`alloc_size`, `index`, `ne01`) are
/// the program's variable names, not words about the failure, and read as an out-of-memory or
/// an index error they are not.
fn without_asserted_code(text: &str) -> std::borrow::Cow<'_, str> {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let ggml = rest
            .find("GGML_ASSERT(")
            .map(|i| (i + "GGML_ASSERT(".len(), b'('));
        let glibc = rest
            .find("Assertion `")
            .map(|i| (i + "Assertion `".len(), b'`'));
        let Some((start, open)) = [ggml, glibc].into_iter().flatten().min_by_key(|s| s.0) else {
            break;
        };
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = if open == b'`' {
            tail.find('\'').unwrap_or(tail.len())
        } else {
            let mut depth = 1usize;
            let mut end = tail.len();
            for (i, b) in tail.bytes().enumerate() {
                match b {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        rest = &tail[end..];
    }
    if out.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

fn softmax(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests;
