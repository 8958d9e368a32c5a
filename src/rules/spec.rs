//! The rule file format (DESIGN.md section 4): rules are data, written in TOML, shipped as
//! `builtin.toml` and stored by teams in PostgreSQL with the same fields.

use serde::{Deserialize, Serialize};

use super::Category;

/// A whole ruleset file: failure rules, context extractors and per-category advice.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    /// Failure rules: each hit is a finding with a category.
    #[serde(default)]
    pub rule: Vec<RuleSpec>,
    /// Context extractors: lines that state facts (GPU name, versions) or the async hint, but are
    /// not failures themselves.
    #[serde(default)]
    pub context: Vec<ContextSpec>,
    /// Next steps that apply to every failure of a category, after the rule's own advice.
    #[serde(default)]
    pub advice: Vec<CategoryAdvice>,
}

/// One failure rule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// Stable dotted id, e.g. `cuda.assert.index`.
    pub id: String,
    /// The taxonomy class a hit names.
    pub category: Category,
    /// One-line human title.
    pub title: String,
    /// Where the message comes from: the library and the source file that prints it
    /// (`pytorch: aten/src/ATen/native/cuda/Indexing.cu`), so a reader can check the wording
    /// and its variants. Every built-in rule has one; team rules may leave it empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Rust `regex` syntax, matched against one cleaned line; named captures become facts.
    pub pattern: String,
    /// How strongly a hit names a root cause (0-100). Generic re-raises rank low, precise
    /// messages high; the root cause is the highest, earliest hit.
    #[serde(default = "default_specificity")]
    pub specificity: u8,
    /// The message is usually the result of another process failing (a collective or
    /// heartbeat timeout, a peer or store closing, an abort). Such a hit is not the root cause
    /// when a process's own exception ended the first traceback earlier in the log: in a
    /// multi-rank run that is the first failing rank's error, and the others' timeouts follow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub consequence: bool,
    /// What the failure's group is keyed by: the program's own code (its frames) or the
    /// environment (the message and the environment facts). Unset, the category decides
    /// ([`FailureKind::of_category`]); a rule sets it where its category's default is wrong
    /// (an NCCL socket or InfiniBand setup failure is the environment, a collective timeout the
    /// program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// Next steps; `{name}` is replaced by the capture of that name.
    #[serde(default)]
    pub advice: Vec<String>,
    /// Lines that must match.
    #[serde(default)]
    pub examples: Vec<String>,
    /// Lines that must not match.
    #[serde(default)]
    pub counter_examples: Vec<String>,
}

/// Whether a failure is the program's own or its environment's (issue 39 item 1): what its
/// reports are grouped by, and whether another group's fix can apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A failure of the program itself (an index out of range, a mismatch, an illegal access,
    /// out of memory, a collective that timed out, anything unknown): two programs hitting the
    /// same error sentence are different bugs, so its group is keyed by the program's own frames
    /// as well as the failure line.
    Program,
    /// A failure of the environment (driver, toolkit, GPU architecture, container runtime,
    /// library builds, network setup): whatever code ran, one remedy fixes it, so its group is
    /// keyed by the message and the environment facts that decide the fix.
    Environment,
}

impl FailureKind {
    /// The kind of a category's failures when the rule does not say.
    #[must_use]
    pub fn of_category(category: Category) -> FailureKind {
        match category {
            Category::DriverIssue | Category::LibraryError => FailureKind::Environment,
            _ => FailureKind::Program,
        }
    }

    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Program => "program",
            FailureKind::Environment => "environment",
        }
    }
}

impl RuleSpec {
    /// The rule's failure kind: its own, else its category's.
    #[must_use]
    pub fn failure_kind(&self) -> FailureKind {
        self.kind
            .unwrap_or_else(|| FailureKind::of_category(self.category))
    }
}

/// Rules at or below this specificity are fallbacks (any Python exception, a fatal signal, a
/// test failure): they name a root cause only when no GPU rule hit, and among themselves prefer
/// lines inside the first traceback.
pub const FALLBACK_SPECIFICITY: u8 = 10;

fn default_specificity() -> u8 {
    50
}

/// A context extractor: its named captures become facts, and `async_hint` marks the sentence
/// that says the stack trace may be wrong.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ContextSpec {
    /// Stable id, e.g. `context.gpu_name`.
    pub id: String,
    /// Where the text comes from (library and source file), as for rules.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// Rust `regex` syntax.
    pub pattern: String,
    /// A hit means the log says errors may be reported asynchronously.
    #[serde(default)]
    pub async_hint: bool,
    /// A hit marks the header of a Python traceback. The generic fallback rules (specificity
    /// up to [`FALLBACK_SPECIFICITY`]) then prefer the exception that ends the first traceback
    /// over stray `Error:` lines printed before it: the failing process's own exception.
    #[serde(default)]
    pub traceback: bool,
    /// A hit is a Python stack frame: its `file` and `function` captures become part of the
    /// failure's signature (the user's frames next to the root cause), not facts.
    #[serde(default)]
    pub frame: bool,
    /// Next steps that apply whenever this context is present (e.g. the async re-run advice).
    #[serde(default)]
    pub advice: Vec<String>,
    /// Lines that must match.
    #[serde(default)]
    pub examples: Vec<String>,
    /// Lines that must not match.
    #[serde(default)]
    pub counter_examples: Vec<String>,
}

/// Category-wide next steps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CategoryAdvice {
    /// The category these steps apply to.
    pub category: Category,
    /// The steps, most useful first.
    pub steps: Vec<String>,
}
