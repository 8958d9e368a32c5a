//! Which framework or runtime a log comes from, and next steps that fit it (DESIGN.md section
//! 4: "Advice fits the framework or runtime the log comes from").
//!
//! Why: a category's general advice was written for PyTorch, and a TensorFlow, JAX, ONNX Runtime
//! or llama.cpp user told to set `PYTORCH_CUDA_ALLOC_CONF` is worse off than told nothing. The
//! evidence is cheap and bounded: only what the classifier already holds (the root-cause line,
//! the other findings and the lines after them, Python frame paths, the last line, the libraries
//! the hit rules' messages come from); no extra pass over the log. The catalog of frameworks,
//! their markers and their advice is data (`builtin/advice.toml`).

use std::collections::HashMap;

use serde::Deserialize;

use super::Category;

/// The shipped catalog.
const BUILTIN_ADVICE: &str = include_str!("builtin/advice.toml");

/// Most texts looked at (findings and their following lines): bounded work per log.
const MAX_TEXTS: usize = 256;
/// Most frame paths counted for one framework: a deep stack is not more evidence than a few
/// frames.
const MAX_FRAMES_COUNTED: f64 = 8.0;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    pytorch_only: Vec<String>,
    framework: Vec<FrameworkSpec>,
    advice: Vec<AdviceSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrameworkSpec {
    name: String,
    markers: Vec<String>,
    sources: Vec<String>,
    pytorch_steps: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdviceSpec {
    framework: String,
    category: Category,
    #[allow(dead_code)]
    source: String,
    steps: Vec<String>,
}

/// What the classifier saw that can name a framework.
#[derive(Debug, Default)]
pub(crate) struct Evidence<'a> {
    /// The root-cause line.
    pub root_text: Option<&'a str>,
    /// The library part of the root rule's `source` (`tensorflow` of `tensorflow: core/...`).
    pub root_source: Option<&'a str>,
    /// Other lines: findings, the lines after them, the last line.
    pub texts: Vec<&'a str>,
    /// The library parts of the other hit rules' sources.
    pub sources: Vec<&'a str>,
    /// Python frame file paths.
    pub frame_files: Vec<&'a str>,
    /// The log states a torch version.
    pub torch_version: bool,
}

/// The frameworks the engine recognises and their advice.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pytorch_only: Vec<String>,
    frameworks: Vec<FrameworkSpec>,
    advice: HashMap<(String, Category), Vec<String>>,
}

impl Catalog {
    /// The shipped catalog; empty (nothing recognised, advice unchanged) if it does not parse,
    /// which a test guards against.
    #[must_use]
    pub fn builtin() -> Catalog {
        match toml::from_str::<CatalogFile>(BUILTIN_ADVICE) {
            Ok(file) => Catalog::from_file(file),
            Err(e) => {
                tracing::error!("framework advice does not parse: {e}");
                Catalog::default()
            }
        }
    }

    fn from_file(file: CatalogFile) -> Catalog {
        let mut advice: HashMap<(String, Category), Vec<String>> = HashMap::new();
        for a in file.advice {
            advice
                .entry((a.framework, a.category))
                .or_default()
                .extend(a.steps);
        }
        let lower = |v: Vec<String>| v.into_iter().map(|m| m.to_lowercase()).collect();
        Catalog {
            pytorch_only: lower(file.pytorch_only),
            frameworks: file
                .framework
                .into_iter()
                .map(|f| FrameworkSpec {
                    markers: lower(f.markers),
                    ..f
                })
                .collect(),
            advice,
        }
    }

    /// The names of every framework the catalog recognises, in its order.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.frameworks.iter().map(|f| f.name.as_str()).collect()
    }

    /// The framework the evidence points to most: the root-cause line and its rule's library
    /// count most, then frame paths, other findings and their libraries. `None` when nothing
    /// names one. Ties go to the catalog's order (specific runtimes before PyTorch and the
    /// platforms).
    pub(crate) fn recognise(&self, ev: &Evidence<'_>) -> Option<String> {
        let root = ev.root_text.map(str::to_lowercase);
        let texts: Vec<String> = (ev.texts.iter().take(MAX_TEXTS))
            .map(|t| t.to_lowercase())
            .collect();
        let frames: Vec<String> = ev.frame_files.iter().map(|f| f.to_lowercase()).collect();
        let mut best: Option<(f64, &FrameworkSpec)> = None;
        for fw in &self.frameworks {
            let has = |t: &str| fw.markers.iter().any(|m| t.contains(m.as_str()));
            let from = |s: &str| fw.sources.iter().any(|x| x == s);
            let mut score = 0.0;
            if root.as_deref().is_some_and(has) {
                score += 3.0;
            }
            if ev.root_source.is_some_and(from) {
                score += 2.0;
            }
            score += texts.iter().filter(|t| has(t)).count() as f64;
            score += ev.sources.iter().filter(|s| from(s)).count() as f64 * 0.5;
            let frame_hits = frames.iter().filter(|f| has(f)).count() as f64;
            score += frame_hits.min(MAX_FRAMES_COUNTED);
            if fw.name == "pytorch" && ev.torch_version {
                score += 2.0;
            }
            if score > 0.0 && best.is_none_or(|(b, _)| score > b) {
                best = Some((score, fw));
            }
        }
        best.map(|(_, fw)| fw.name.clone())
    }

    /// Fits `steps` (the rule's advice, then `general`, the category's) to `framework`: a
    /// framework that is not PyTorch loses the PyTorch-only steps, and its own steps for the
    /// category come before the general ones. At most `max` steps.
    #[must_use]
    pub fn fit_steps(
        &self,
        framework: Option<&str>,
        category: Category,
        steps: Vec<String>,
        general: &[String],
        max: usize,
    ) -> Vec<String> {
        let Some(fw) = framework.and_then(|n| self.frameworks.iter().find(|f| f.name == n)) else {
            return steps;
        };
        let mut kept: Vec<String> = if fw.pytorch_steps {
            steps
        } else {
            steps
                .into_iter()
                .filter(|s| !self.is_pytorch_only(s))
                .collect()
        };
        if let Some(own) = self.advice.get(&(fw.name.clone(), category)) {
            let at = kept
                .iter()
                .position(|s| general.contains(s))
                .unwrap_or(kept.len());
            let fresh: Vec<String> = own.iter().filter(|s| !kept.contains(s)).cloned().collect();
            kept.splice(at..at, fresh);
        }
        kept.truncate(max);
        kept
    }

    /// Whether a step only makes sense for PyTorch code.
    #[must_use]
    pub fn is_pytorch_only(&self, step: &str) -> bool {
        let lower = step.to_lowercase();
        self.pytorch_only.iter().any(|m| lower.contains(m.as_str()))
    }
}

/// The library part of a rule's `source` (`pytorch` of `pytorch: c10/cuda/...`).
pub(crate) fn source_library(source: &str) -> &str {
    source.split(':').next().unwrap_or("").trim()
}

#[cfg(test)]
mod tests;
