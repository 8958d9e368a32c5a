//! Rules: lines in, findings out. Pure (no database, no network, no global state).
//!
//! A ruleset ([`Ruleset`]) is compiled from data ([`spec::RuleFile`], shipped as
//! `builtin.toml`); [`Ruleset::classify_reader`] streams a log once, finds candidate lines with
//! one combined regex, runs per-rule captures only on those lines, ranks the findings (root cause
//! versus symptoms), types the facts and writes the advice. The output is the contract of
//! DESIGN.md section 3.

mod classify;
mod compile;
pub mod corpus;
pub mod facts;
pub mod fallback;
pub mod framework;
pub mod likeness;
mod literals;
pub mod locator;
pub mod origin;
pub mod outcome;
pub mod preview;
mod refine;
pub mod run;
mod scan;
pub mod spec;
pub mod team_compile;

use serde::{Deserialize, Serialize};

pub use classify::culprit;
pub use compile::{CheckFailure, Ruleset};
pub use facts::Facts;

/// How fingerprints group failures; raised whenever a change to the engine regroups stored
/// reports (`serve` then regroups them once). 1: category, rule and failure line; 2: a
/// program's failure also by its own frames, an environment's by its facts (issue 39); 3:
/// Rich-traceback frames and C++ raise sites count as frames, cuDNN/cuBLAS run-time statuses
/// are the program's, and the index of a dimension stays in the failure line; 4: a log no rule
/// matched by the line the locator found in it (issue 40); 5: a program's failure whose whole
/// log is the library's sentence alone by that log's own text, a matrix product's mismatch by
/// the layer's sizes, an environment's failure whose fix depends on a GPU architecture the log
/// does not name by the code that met it, a library's by the source site it printed from.
pub const GROUPING_SCHEME: i32 = 5;

/// The shipped ruleset, embedded in the binary: the PyTorch/CUDA/NCCL core, the failures outside
/// the GPU taxonomy, contexts and category advice in `builtin.toml`, then one file per further
/// library family under `builtin/` (TOML arrays of tables concatenate).
pub const BUILTIN_RULES: &str = concat!(
    include_str!("builtin.toml"),
    "\n",
    include_str!("builtin/pytorch.toml"),
    "\n",
    include_str!("builtin/cuda.toml"),
    "\n",
    include_str!("builtin/tensorflow.toml"),
    "\n",
    include_str!("builtin/xla.toml"),
    "\n",
    include_str!("builtin/rocm.toml"),
    "\n",
    include_str!("builtin/distributed.toml"),
    "\n",
    include_str!("builtin/runtimes.toml"),
    "\n",
    include_str!("builtin/operations.toml"),
    "\n",
    include_str!("builtin/process.toml"),
    "\n",
    include_str!("builtin/families.toml"),
);

/// Why a ruleset cannot be used; always names the rule.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The TOML itself does not parse.
    #[error("ruleset does not parse: {0}")]
    Parse(String),
    /// A pattern is refused (too long, anchored, or does not compile within the size limits).
    #[error("rule {id}: {reason}")]
    Pattern {
        /// The rule id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// Two rules share an id, or an id is empty.
    #[error("rule {id}: {reason}")]
    Id {
        /// The rule id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A rule's own checks fail (an example does not match, a field is out of its limits).
    #[error("rule {id}: {reason}")]
    Check {
        /// The rule id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// More rules than the engine accepts.
    #[error("ruleset has {count} rules; at most {limit} are allowed")]
    TooMany {
        /// How many were given.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

/// The taxonomy (DESIGN.md section 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    OutOfBounds,
    DeviceMismatch,
    DtypeMismatch,
    ShapeMismatch,
    OutOfMemory,
    IllegalMemoryAccess,
    DriverIssue,
    NcclError,
    LibraryError,
    Unknown,
}

impl Category {
    /// Every category, in taxonomy order.
    pub const ALL: [Category; 10] = [
        Category::OutOfBounds,
        Category::DeviceMismatch,
        Category::DtypeMismatch,
        Category::ShapeMismatch,
        Category::OutOfMemory,
        Category::IllegalMemoryAccess,
        Category::DriverIssue,
        Category::NcclError,
        Category::LibraryError,
        Category::Unknown,
    ];

    /// The snake_case name used in JSON, URLs and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::OutOfBounds => "out_of_bounds",
            Category::DeviceMismatch => "device_mismatch",
            Category::DtypeMismatch => "dtype_mismatch",
            Category::ShapeMismatch => "shape_mismatch",
            Category::OutOfMemory => "out_of_memory",
            Category::IllegalMemoryAccess => "illegal_memory_access",
            Category::DriverIssue => "driver_issue",
            Category::NcclError => "nccl_error",
            Category::LibraryError => "library_error",
            Category::Unknown => "unknown",
        }
    }

    /// The category in plain words, for people (CI summaries, chat messages).
    pub fn words(self) -> &'static str {
        match self {
            Category::OutOfBounds => "Out of bounds",
            Category::DeviceMismatch => "Device mismatch",
            Category::DtypeMismatch => "Dtype mismatch",
            Category::ShapeMismatch => "Shape mismatch",
            Category::OutOfMemory => "Out of memory",
            Category::IllegalMemoryAccess => "Illegal memory access",
            Category::DriverIssue => "Driver issue",
            Category::NcclError => "NCCL error",
            Category::LibraryError => "Library error",
            Category::Unknown => "Unknown failure",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Category {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown category {s:?}"))
    }
}

/// How sure the engine is about the root cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    High,
    Medium,
    Low,
    /// No rule names the root-cause line; the learned fallback proposed the category from its
    /// words (`Classification::basis` says which).
    Likely,
}

impl Confidence {
    /// Every confidence, surest first.
    pub const ALL: [Confidence; 4] = [
        Confidence::High,
        Confidence::Medium,
        Confidence::Likely,
        Confidence::Low,
    ];

    /// The snake_case name used in JSON and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
            Confidence::Likely => "likely",
        }
    }
}

impl std::fmt::Display for Confidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Confidence {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Confidence::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown confidence {s:?}"))
    }
}

/// Whether a finding is the root cause or a consequence of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    RootCause,
    Symptom,
}

/// The root-cause line of a classification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootCause {
    /// 1-based line of the input as given.
    pub line: usize,
    /// The cleaned text of that line.
    pub text: String,
    /// The rule that named it.
    pub rule: String,
}

/// One rule hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule id.
    pub rule: String,
    /// The rule's category.
    pub category: Category,
    /// Root cause or symptom.
    pub role: Role,
    /// 1-based line of the input as given.
    pub line: usize,
    /// The cleaned text of that line.
    pub text: String,
}

/// The classification of one log (DESIGN.md section 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    /// Path of the input, or `-` for stdin.
    pub source: String,
    /// The root cause's category.
    pub category: Category,
    /// Human title of the root cause.
    pub title: String,
    /// How sure the engine is.
    pub confidence: Confidence,
    /// The root-cause line, or null when no rule matched.
    pub root_cause: Option<RootCause>,
    /// Every rule hit, root cause first.
    pub findings: Vec<Finding>,
    /// Typed facts the log states.
    pub facts: Facts,
    /// The log says errors may be reported asynchronously (or recommends CUDA_LAUNCH_BLOCKING=1).
    pub async_hint: bool,
    /// What to do next.
    pub next_steps: Vec<String>,
    /// Groups recurring failures: sha256 hex of the normalized root-cause signature.
    pub fingerprint: String,
    /// With confidence `likely`: the words of the root-cause line that decided the learned
    /// fallback's category, most decisive first; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub basis: Vec<String>,
    /// The framework or runtime the log comes from (`pytorch`, `tensorflow`, `llama.cpp`,
    /// `kubernetes`, ...), when the log shows it; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// The failure's shape, for finding similar failures by trigram similarity: the root
    /// cause's normalized text (for a log no rule matched, its last line's) and the user's
    /// stack frames next to it (`train.py:step model.py:forward`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
    /// Remarks about the input itself (empty, binary, truncated).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Bytes and lines read.
    #[serde(default)]
    pub stats: Stats,
}

/// Size of the input that was classified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Bytes read.
    pub bytes: u64,
    /// Lines read.
    pub lines: u64,
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_frameworks;
#[cfg(test)]
mod tests_judged;
#[cfg(test)]
mod tests_located;
#[cfg(test)]
mod tests_operations;
#[cfg(test)]
mod tests_outside;
#[cfg(test)]
mod tests_variants;
