//! A failed run is many files (issue 41): one log per rank or node, the launcher's output, the
//! scheduler's, the node's dmesg or journal. Each file is classified on its own; this module
//! tells the run's story across them: every file's role (the first failure, a consequence of it,
//! another failure, or clean), the failures in time order ([`story`]), the first failure's file,
//! line, rank, host and GPU, what to do with the job ([`action`]), and each attempt's failure in
//! a file that restarted ([`attempts`]). Pure: classifications and scans in, a [`RunStory`] out.

pub mod action;
pub mod attempts;
pub mod flight;
pub mod story;

use serde::{Deserialize, Serialize};

use super::Category;

/// The run's story: what the report of a run keeps and the API shows (`files`,
/// `first_failure`, `action`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStory {
    /// Every file of the run, in upload order.
    pub files: Vec<RunFile>,
    /// The failure the others follow from; null when no file shows a failure.
    #[schema(required)]
    pub first_failure: Option<FirstFailure>,
    /// What to do with the job, and why.
    pub action: RunAction,
    /// Members of an uploaded archive that were left out (not text, empty), with the reason.
    #[serde(default)]
    pub skipped: Vec<SkippedFile>,
    /// Where the ranks' flight-recorder dumps uploaded with the run part: the first
    /// collective some ranks never entered; null without dumps or when they agree.
    #[serde(default)]
    #[schema(required)]
    pub collectives: Option<flight::Divergence>,
}

/// One file of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunFile {
    /// The file's name (its path inside the uploaded directory or archive).
    pub name: String,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Lines.
    pub lines: u64,
    /// The 1-based line of the run's stored log where this file's first line is (the log
    /// holds every file in upload order, each after a `==> name <==` line).
    pub first_line: u64,
    /// The category of the file's own root cause.
    pub category: Category,
    /// The title of the file's own root cause.
    pub title: String,
    /// The file's root-cause line (1-based in the file), null for a file with no failure.
    #[schema(required)]
    pub root_cause: Option<FileRootCause>,
    /// How the file's failure stands in the run.
    pub role: FileRole,
    /// For a consequence: the name of the file whose failure it follows from.
    #[schema(required)]
    pub consequence_of: Option<String>,
    /// The rank the file's failure (or the file) belongs to.
    #[schema(required)]
    pub rank: Option<u32>,
    /// The host it ran on.
    #[schema(required)]
    pub host: Option<String>,
    /// The GPU (`cuda:N` or a PCI bus id).
    #[schema(required)]
    pub gpu: Option<String>,
    /// When the root-cause line was written (milliseconds since the epoch, read as UTC; a
    /// stamp without a year is placed in the run's year), when the file says.
    #[schema(required)]
    pub at_ms: Option<i64>,
    /// The failure's place in the run's time order (0 first), for failing files.
    #[schema(required)]
    pub order: Option<u32>,
    /// Each attempt's failure, for a file that restarted (empty otherwise).
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// The file's other findings (rule, line in the file, text), root cause first, at most 20.
    #[serde(default)]
    pub findings: Vec<FileFinding>,
}

/// A file's root-cause line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileRootCause {
    /// 1-based line in the file.
    pub line: u64,
    /// The line's cleaned text.
    pub text: String,
    /// The rule that named it.
    pub rule: String,
}

/// One finding of a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileFinding {
    pub rule: String,
    pub category: Category,
    /// 1-based line in the file.
    pub line: u64,
    pub text: String,
}

/// How a file's failure stands in the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileRole {
    /// The failure the others follow from.
    FirstFailure,
    /// A consequence of the first failure: another rank's NCCL timeout or abort, a lost peer,
    /// the launcher's `ChildFailedError` or kills, the scheduler's "task failed".
    Consequence,
    /// A failure of its own, after the first.
    Failure,
    /// No failure in this file.
    Clean,
}

impl FileRole {
    /// The snake_case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FileRole::FirstFailure => "first_failure",
            FileRole::Consequence => "consequence",
            FileRole::Failure => "failure",
            FileRole::Clean => "clean",
        }
    }
}

/// One attempt's failure in a file that restarted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1 for the first attempt.
    pub number: u32,
    /// The attempt's first line in the file.
    pub first_line: u64,
    /// The attempt's root cause, null when it shows none.
    #[schema(required)]
    pub root_cause: Option<FileRootCause>,
    /// Its category.
    pub category: Category,
    /// Its title.
    pub title: String,
}

/// The run's first failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FirstFailure {
    /// The file's name.
    pub file: String,
    /// 1-based line in that file.
    pub line: u64,
    #[schema(required)]
    pub rank: Option<u32>,
    #[schema(required)]
    pub host: Option<String>,
    #[schema(required)]
    pub gpu: Option<String>,
    pub category: Category,
    pub title: String,
    /// The line's cleaned text.
    pub text: String,
}

/// What to do with the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// A failure of the program: stop the job and fix the code.
    FixCode,
    /// The driver, toolkit, container or a library build: fix the environment.
    FixEnvironment,
    /// Transient (preemption, a peer lost, a timeout with no cause in any file): restart.
    Restart,
    /// Hardware (an Xid that means a faulty GPU, uncorrectable ECC, a GPU fallen off the bus):
    /// take the named nodes out of service.
    DrainNode,
}

impl ActionKind {
    /// The snake_case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::FixCode => "fix_code",
            ActionKind::FixEnvironment => "fix_environment",
            ActionKind::Restart => "restart",
            ActionKind::DrainNode => "drain_node",
        }
    }

    /// In plain words, for people.
    #[must_use]
    pub fn words(self) -> &'static str {
        match self {
            ActionKind::FixCode => "Fix the code",
            ActionKind::FixEnvironment => "Fix the environment",
            ActionKind::Restart => "Restart the job",
            ActionKind::DrainNode => "Drain the node",
        }
    }
}

/// The action with its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunAction {
    pub kind: ActionKind,
    /// Why, in a sentence that names the evidence.
    pub reason: String,
    /// For `drain_node`: the nodes the evidence points at (no others).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// For `drain_node`: the GPUs named (`PCI:0000:3b:00`, `cuda:3`).
    #[serde(default)]
    pub gpus: Vec<String>,
}

/// A member of an archive left out of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SkippedFile {
    pub name: String,
    /// Why (`not text`, `empty`, ...).
    pub reason: String,
}
