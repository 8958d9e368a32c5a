//! The wire contract of API v1 (DESIGN.md section 5) as plain serde types, written once and
//! shared by the server's handlers, the GPU worker's client and the `upload` command, so the
//! two sides of each request cannot drift apart. Each derives its OpenAPI schema (utoipa), so
//! `/api/v1/openapi.json` describes exactly these types. Pure: no I/O, no web or storage types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rules::outcome::Outcome;
use crate::rules::{Category, Classification};

pub mod filters;
mod groups;
pub use groups::{
    GroupAction, GroupDetail, GroupEvent, GroupList, GroupListItem, GroupPatch, GroupReport,
    GroupState, GroupTags, MergeRequest, TagCount,
};
pub mod people;
pub mod retention;
pub mod rules;
mod schemas;
pub mod search;
pub mod tokens;
pub mod webhooks;

/// The stable snake_case `code` of an error body (`{"error": {"code", "message"}}`), which
/// clients match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum ErrorCode {
    BadBody,
    BadDuration,
    BadFix,
    BadForm,
    BadGpu,
    BadIdempotencyKey,
    BadJson,
    BadMerge,
    BadMeta,
    BadMultipart,
    BadQuery,
    BadSandbox,
    BadScript,
    BadTriage,
    BadWorker,
    BodyTooSlow,
    Busy,
    ClientBusy,
    EmptyLog,
    Forbidden,
    Gone,
    GroupMerged,
    IdempotencyKeyReused,
    Internal,
    InvalidPerson,
    InvalidRetention,
    InvalidRule,
    InvalidToken,
    InvalidWebhook,
    JobPending,
    LeaseLost,
    LowersAccuracy,
    MethodNotAllowed,
    MissingLog,
    NoGpu,
    NotFound,
    Overloaded,
    RateLimited,
    RuleExists,
    TokenBusy,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnexpectedField,
    UnsupportedMediaType,
}

impl ErrorCode {
    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadBody => "bad_body",
            ErrorCode::BadDuration => "bad_duration",
            ErrorCode::BadFix => "bad_fix",
            ErrorCode::BadForm => "bad_form",
            ErrorCode::BadGpu => "bad_gpu",
            ErrorCode::BadIdempotencyKey => "bad_idempotency_key",
            ErrorCode::BadJson => "bad_json",
            ErrorCode::BadMerge => "bad_merge",
            ErrorCode::BadMeta => "bad_meta",
            ErrorCode::BadMultipart => "bad_multipart",
            ErrorCode::BadQuery => "bad_query",
            ErrorCode::BadSandbox => "bad_sandbox",
            ErrorCode::BadScript => "bad_script",
            ErrorCode::BadTriage => "bad_triage",
            ErrorCode::BadWorker => "bad_worker",
            ErrorCode::BodyTooSlow => "body_too_slow",
            ErrorCode::Busy => "busy",
            ErrorCode::ClientBusy => "client_busy",
            ErrorCode::EmptyLog => "empty_log",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Gone => "gone",
            ErrorCode::GroupMerged => "group_merged",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidPerson => "invalid_person",
            ErrorCode::InvalidRetention => "invalid_retention",
            ErrorCode::InvalidRule => "invalid_rule",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::InvalidWebhook => "invalid_webhook",
            ErrorCode::JobPending => "job_pending",
            ErrorCode::LeaseLost => "lease_lost",
            ErrorCode::LowersAccuracy => "lowers_accuracy",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::MissingLog => "missing_log",
            ErrorCode::NoGpu => "no_gpu",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::RuleExists => "rule_exists",
            ErrorCode::TokenBusy => "token_busy",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::UnexpectedField => "unexpected_field",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every JSON error body (DESIGN.md section 5): `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The `error` of an [`ErrorBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable; clients match on it.
    pub code: ErrorCode,
    /// For people; may change between releases.
    pub message: String,
}

/// How a worker isolates the scripts it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Sandbox {
    /// bubblewrap.
    Bwrap,
    /// `--unsafe-no-sandbox`: the script runs as the worker's user.
    None,
    /// Anything else a client sent; the server refuses it with 422 `bad_sandbox`.
    Other(String),
}

impl Sandbox {
    /// The wire spelling.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            Sandbox::Bwrap => "bwrap",
            Sandbox::None => "none",
            Sandbox::Other(s) => s,
        }
    }
}

impl From<String> for Sandbox {
    fn from(s: String) -> Self {
        match s.as_str() {
            "bwrap" => Sandbox::Bwrap,
            "none" => Sandbox::None,
            _ => Sandbox::Other(s),
        }
    }
}

impl From<Sandbox> for String {
    fn from(s: Sandbox) -> Self {
        s.as_str().to_owned()
    }
}

impl std::fmt::Display for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reproduction job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for a worker.
    Queued,
    /// Leased to a worker.
    Running,
    /// A result was recorded.
    Done,
    /// Gave up after `max_attempts` (or re-queued by hand into a new job).
    Dead,
}

impl JobState {
    /// The spelling on the wire and in the `jobs.state` column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Dead => "dead",
        }
    }

    /// The state spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<JobState> {
        [
            JobState::Queued,
            JobState::Running,
            JobState::Done,
            JobState::Dead,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }

    /// Whether the job is over (done or dead).
    #[must_use]
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Dead)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest a claim waits for a job, in seconds (`?wait=`).
pub const MAX_CLAIM_WAIT_SECS: u64 = 30;

/// `POST /api/v1/jobs/claim` query: how long to wait for a job. A request parameter rather
/// than a body field so that a client (and the OpenAPI document) sees the wait, and its
/// maximum, next to the request it slows down.
#[derive(Clone, Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClaimWait {
    /// Seconds to wait for a job before answering 204 (0-30). Absent: the body's
    /// `wait_secs`, or no wait.
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<u64>,
}

/// `POST /api/v1/jobs/claim` request.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClaimRequest {
    /// Free text shown in the portal: 1-200 characters, not blank, no control characters.
    #[schema(
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub worker: String,
    /// Long-poll seconds, capped at 30; the `wait` query parameter takes precedence. Kept for
    /// workers that predate it.
    #[serde(default)]
    #[schema(deprecated, maximum = 30)]
    pub wait_secs: u64,
    /// The GPU jobs run on (a JSON object); `null` with `no_gpu`.
    #[serde(default)]
    pub gpu: Option<Value>,
    /// The worker has no GPU (`--no-gpu`).
    #[serde(default)]
    pub no_gpu: bool,
    /// `bwrap` or `none`.
    pub sandbox: Sandbox,
}

/// `POST /api/v1/jobs/claim` 200 response: a leased job.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClaimedJob {
    /// Job id (path of heartbeat and result).
    pub job_id: i64,
    /// The report it reproduces.
    pub report_id: i64,
    /// 1-based attempt.
    pub attempt: u32,
    /// Attempts before the job is dead.
    pub max_attempts: u32,
    /// Proves the worker holds the job.
    pub lease_token: String,
    /// Seconds the lease lasts without a heartbeat.
    pub lease_secs: u32,
    /// The script's text.
    pub script: String,
    /// The script's file name.
    pub script_name: String,
    /// The server's wall-clock limit for the run.
    pub timeout_secs: u32,
    /// Runs asked for (1-5): the worker runs the script this many times and reports each.
    #[serde(default = "one_run")]
    #[schema(required)]
    pub repeats: u8,
}

fn one_run() -> u8 {
    1
}

/// `POST /api/v1/jobs/{id}/heartbeat` request.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseRequest {
    /// The lease the job was claimed with.
    pub lease_token: String,
}

/// `POST /api/v1/jobs/{id}/heartbeat` 200 response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeartbeatReply {
    /// The lease's new length.
    pub lease_secs: u32,
}

/// `POST /api/v1/jobs/{id}/result` request: one attempt's outcome.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobResult {
    /// The lease the job was claimed with.
    pub lease_token: String,
    /// `None` when killed by a signal or timeout, or never started.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Killed at the wall-clock limit.
    #[serde(default)]
    pub timed_out: bool,
    /// Run time in milliseconds.
    pub duration_ms: u64,
    /// Captured stdout (capped).
    #[serde(default)]
    pub stdout: String,
    /// Captured stderr (capped).
    #[serde(default)]
    pub stderr: String,
    /// Either stream was cut.
    #[serde(default)]
    pub truncated: bool,
    /// The GPU probed with this result (a JSON object).
    #[serde(default)]
    pub gpu: Option<Value>,
    /// The worker has no GPU.
    #[serde(default)]
    pub no_gpu: bool,
    /// The script ran under CPU translation: unchanged, with CUDA redirected to the CPU (a
    /// worker without a GPU does this, so index errors are checked synchronously and named).
    #[serde(default)]
    pub cpu_translation: bool,
    /// After a GPU run that ended in a device-side assert or an illegal memory access: the same
    /// script again under CPU translation, where PyTorch names the bad value at the true line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuRun>,
    /// With `repeats` > 1: every run's outcome, in order (the output sent is the first failing
    /// run's, else the last run's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 5)]
    pub runs: Vec<RunOutcome>,
    /// What the run ran on (interpreter versions and build, device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<RunEnvironment>,
    /// `bwrap` or `none`.
    pub sandbox: Sandbox,
    /// A worker-side failure (the sandbox could not start, ...): a failed attempt.
    #[serde(default)]
    pub error: Option<String>,
    /// Not in the contract: the worker's name, when it sends one (else the claiming worker's):
    /// 1-200 characters, not blank, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub worker: Option<String>,
}

/// `POST /api/v1/jobs/{id}/result` 200 response.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResultReply {
    /// The stored reproduction; `None` for a failed attempt.
    #[schema(required)]
    pub reproduction_id: Option<i64>,
    /// The job's state after the result.
    pub state: JobState,
    /// The classification of the run's output; `None` for a failed attempt.
    #[schema(required)]
    pub classification: Option<Classification>,
}

/// The reproduction job an upload queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuedJob {
    /// The job's id.
    pub job_id: i64,
    /// Its state now.
    pub state: JobState,
}

/// `POST /api/v1/reports` 201/200 response.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportCreated {
    /// The report's id.
    pub id: i64,
    /// The report page.
    pub url: String,
    /// The group of recurring failures it joined.
    pub group_id: i64,
    /// The same bytes were already stored for the project: this is that report.
    #[serde(default)]
    #[schema(required)]
    pub duplicate: bool,
    /// The stored report's classification.
    pub classification: Classification,
    /// The reproduction queued for an attached script.
    #[schema(required)]
    pub repro: Option<QueuedJob>,
    /// What fixed this failure before: the newest fix of its group, else of the most similar
    /// group at least 50% alike (its `group_id` then differs from the report's).
    #[serde(default)]
    #[schema(required)]
    pub known_fix: Option<Fix>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    #[serde(default)]
    #[schema(required)]
    pub similar: Vec<SimilarFailure>,
}

/// A group of failures shaped like a report's (its root cause with numbers taken out, and the
/// user's stack frames), as report responses list it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SimilarFailure {
    pub group_id: i64,
    /// The group page.
    pub url: String,
    pub category: Category,
    pub title: String,
    /// The group's root-cause line, as first seen.
    pub root_cause: String,
    pub report_count: i64,
    /// Trigram similarity of the two failures' signatures, 0 to 1.
    pub similarity: f32,
    /// Its fixes, newest first (at most three).
    pub fixes: Vec<Fix>,
}

/// A fix recorded for a group, as `GET /api/v1/groups/{id}` and `GET /api/v1/reports/{id}`
/// list it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Fix {
    pub id: i64,
    pub group_id: i64,
    /// What fixed it, in a line.
    pub summary: String,
    pub details: String,
    /// A link to the change (commit, pull request); empty when none.
    pub link: String,
    /// Who recorded it: a person's name, a token's name, or (for fixes recorded before people
    /// were told apart from tokens) the name as it was stored.
    pub author: String,
    /// `person`, `token` or `service`; `null` for a fix recorded before actors were typed.
    #[serde(default)]
    #[schema(required)]
    pub author_kind: Option<crate::actor::ActorKind>,
    /// The person who recorded it, when a person did (and still exists).
    #[serde(default)]
    #[schema(required)]
    pub author_person_id: Option<i64>,
    /// When (RFC 3339 on the wire).
    pub created_at: crate::time::Timestamp,
}

/// One reproduction job of a report, as `GET /api/v1/reports/{id}` lists it under
/// `reproductions`: the result's fields are null until a result is recorded.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reproduction {
    pub job_id: i64,
    pub state: JobState,
    pub attempt: u32,
    pub max_attempts: u32,
    #[schema(required)]
    pub exit_code: Option<i32>,
    #[schema(required)]
    pub signal: Option<i32>,
    pub timed_out: bool,
    #[schema(required)]
    pub duration_ms: Option<u64>,
    #[schema(required)]
    pub gpu: Option<Value>,
    #[schema(required)]
    pub stdout: Option<String>,
    #[schema(required)]
    pub stderr: Option<String>,
    pub truncated: bool,
    #[schema(required)]
    pub classification: Option<Classification>,
    #[schema(required)]
    pub no_gpu: Option<bool>,
    #[schema(required)]
    pub cpu_translation: Option<bool>,
    /// The follow-up run on the CPU, when there was one.
    #[schema(required)]
    pub cpu_run: Option<CpuRun>,
    /// With repeats: every run's outcome.
    pub runs: Vec<RunOutcome>,
    /// With repeats: "fails 5/5 at repro.py:13", "flaky: fails 2/5"; else empty.
    pub verdict: String,
    /// What the run showed (for a job that died of its worker's errors without a run,
    /// `sandbox_error`, or `environment_error` when the interpreter was missing); null while the
    /// job is pending, and for a job whose leases all expired without a result.
    #[schema(required)]
    pub outcome: Option<Outcome>,
    /// For `environment_error` and `sandbox_error`: what went wrong ("the worker's Python has
    /// no module named 'torch' ..."); else null.
    #[schema(required)]
    pub outcome_reason: Option<String>,
    /// For `environment_error` and `sandbox_error`: how to fix the worker (or the script)
    /// before re-queueing the job; else null.
    #[schema(required)]
    pub outcome_fix: Option<String>,
    /// What the run ran on.
    #[schema(required)]
    pub environment: Option<RunEnvironment>,
    #[schema(required)]
    pub sandbox: Option<Sandbox>,
    #[schema(required)]
    pub worker: Option<String>,
    #[schema(required)]
    pub reproduction_id: Option<i64>,
    #[schema(required)]
    pub dead_reason: Option<String>,
    #[schema(required)]
    pub error: Option<String>,
    #[schema(required)]
    pub requeued_from: Option<i64>,
}

/// Where a report's headline category comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CategorySource {
    /// The uploaded log's classification.
    Log,
    /// A reproduction that named a more specific root cause.
    Reproduction,
}

/// `GET /api/v1/reports/{id}` response.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportDetail {
    pub id: i64,
    pub url: String,
    pub created_at: crate::time::Timestamp,
    pub project: String,
    pub job_url: String,
    pub commit: String,
    pub branch: String,
    pub environment: String,
    /// The version of the build the log comes from (`meta.version`), or empty.
    #[serde(default)]
    #[schema(required)]
    pub version: String,
    pub filename: String,
    pub log_bytes: i64,
    pub log_lines: i64,
    pub has_script: bool,
    pub group_id: i64,
    /// The log's classification (DESIGN.md section 3).
    pub classification: Classification,
    pub fixes: Vec<Fix>,
    /// What fixed this failure before: the newest of `fixes`, else the newest fix of the most
    /// similar group at least 45% alike.
    #[schema(required)]
    pub known_fix: Option<Fix>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    pub similar: Vec<SimilarFailure>,
    pub reproductions: Vec<Reproduction>,
    /// The headline: the log's, or a more specific reproduction's.
    pub category: Category,
    pub title: String,
    pub category_source: CategorySource,
    /// The log's category when the headline follows a reproduction.
    #[schema(required)]
    pub original_category: Option<Category>,
    /// Set when retention removed the raw log (the report and its classification stay).
    #[serde(default)]
    #[schema(required)]
    pub log_removed: Option<retention::LogRemoved>,
}

/// What a run ran on: the interpreter's versions and build, and the device. Facts a worker
/// reports (at most a few short strings each).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunEnvironment {
    /// Python's version (`3.11.2`).
    #[serde(default)]
    #[schema(
        required,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub python: Option<String>,
    /// `torch.__version__`, when torch imports.
    #[serde(default)]
    #[schema(
        required,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub torch: Option<String>,
    /// `torch.version.cuda`: the CUDA version torch was built with.
    #[serde(default)]
    #[schema(
        required,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub cuda_build: Option<String>,
    /// `torch.version.hip`: the HIP version of a ROCm build.
    #[serde(default)]
    #[schema(
        required,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub hip_build: Option<String>,
    /// The GPU's name and compute capability (`NVIDIA H100 80GB HBM3, sm 9.0`), or `cpu`.
    #[serde(default)]
    #[schema(
        required,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub device: String,
}

impl RunEnvironment {
    /// One line for the page: "Python 3.11.2 · torch 2.15.0+cu132 (CUDA 13.2) · cpu".
    #[must_use]
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.python {
            parts.push(format!("Python {p}"));
        }
        match (&self.torch, &self.cuda_build, &self.hip_build) {
            (Some(t), Some(c), _) => parts.push(format!("torch {t} (CUDA {c})")),
            (Some(t), None, Some(h)) => parts.push(format!("torch {t} (HIP {h})")),
            (Some(t), None, None) => parts.push(format!("torch {t} (CPU build)")),
            (None, ..) => parts.push("no torch".into()),
        }
        if !self.device.is_empty() {
            parts.push(self.device.clone());
        }
        parts.join(" · ")
    }

    /// Whether every field is short printable text.
    #[must_use]
    pub fn is_sane(&self) -> bool {
        let ok = |s: &str| s.chars().count() <= 200 && !s.chars().any(char::is_control);
        [&self.python, &self.torch, &self.cuda_build, &self.hip_build]
            .into_iter()
            .flatten()
            .all(|s| ok(s))
            && ok(&self.device)
    }
}

/// What a reproduction job needs to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Needs {
    /// A worker with a GPU.
    Gpu,
    /// Any worker: one without a GPU runs it under CPU translation.
    Any,
}

impl Needs {
    /// The wire and column spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::Gpu => "gpu",
            Needs::Any => "any",
        }
    }

    /// What a report of `category` needs when its uploader did not say: failures PyTorch raises
    /// on the CPU as well (indices, devices, dtypes, shapes) and unknown ones may run anywhere;
    /// memory, illegal accesses, drivers, NCCL and CUDA libraries need a GPU.
    #[must_use]
    pub fn for_category(category: Category) -> Needs {
        match category {
            Category::OutOfBounds
            | Category::DeviceMismatch
            | Category::DtypeMismatch
            | Category::ShapeMismatch
            | Category::Unknown => Needs::Any,
            Category::OutOfMemory
            | Category::IllegalMemoryAccess
            | Category::DriverIssue
            | Category::NcclError
            | Category::LibraryError => Needs::Gpu,
        }
    }
}

/// The most runs a job may ask for (`meta.repeats`).
pub const MAX_REPEATS: u8 = 5;

/// One of a job's repeated runs: how it ended and where it failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunOutcome {
    #[serde(default)]
    #[schema(required)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    #[schema(required)]
    pub signal: Option<i32>,
    #[serde(default)]
    #[schema(required)]
    pub timed_out: bool,
    #[serde(default)]
    #[schema(required)]
    pub duration_ms: u64,
    /// The user's failing line (`repro.py:13`), when the run raised: at most 300 characters,
    /// no control characters.
    #[serde(default)]
    #[schema(
        required,
        max_length = 300,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub failing_line: Option<String>,
    /// What the run showed (a worker decides it from the run's output; the server fills it in
    /// from the exit when a worker did not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub outcome: Option<Outcome>,
}

impl RunOutcome {
    /// Whether the run failed (non-zero exit, a signal, or the timeout).
    #[must_use]
    pub fn failed(&self) -> bool {
        self.exit_code != Some(0) || self.signal.is_some() || self.timed_out
    }
}

/// A follow-up run of a script under CPU translation (`JobResult::cpu`), and as stored and shown
/// with its classification.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CpuRun {
    #[serde(default)]
    #[schema(required)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    #[schema(required)]
    pub signal: Option<i32>,
    #[serde(default)]
    #[schema(required)]
    pub timed_out: bool,
    #[serde(default)]
    #[schema(required)]
    pub duration_ms: u64,
    #[serde(default)]
    #[schema(required)]
    pub stdout: String,
    #[serde(default)]
    #[schema(required)]
    pub stderr: String,
    #[serde(default)]
    #[schema(required)]
    pub truncated: bool,
    /// The server's classification of its output (a worker's own is ignored); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub classification: Option<Classification>,
    /// What the CPU run showed, decided by the server (a worker's own is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub outcome: Option<Outcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_request_has_the_contract_fields() {
        let request = ClaimRequest {
            worker: "host-1".into(),
            wait_secs: 20,
            gpu: None,
            no_gpu: true,
            sandbox: Sandbox::None,
        };
        let json = serde_json::to_value(&request).unwrap_or_default();
        let want = serde_json::json!({"worker":"host-1","wait_secs":20,"gpu":null,"no_gpu":true,
            "sandbox":"none"});
        assert_eq!(json, want);
    }

    #[test]
    fn an_unknown_sandbox_is_kept_for_the_server_to_refuse() {
        let s: Sandbox = serde_json::from_str("\"docker\"").expect("a string");
        assert_eq!(s, Sandbox::Other("docker".into()));
        let s: Sandbox = serde_json::from_str("\"bwrap\"").expect("a string");
        assert_eq!(s, Sandbox::Bwrap);
        assert_eq!(
            serde_json::to_string(&Sandbox::None).ok().as_deref(),
            Some("\"none\"")
        );
    }

    #[test]
    fn error_codes_serialize_as_their_spelling() {
        for code in [
            ErrorCode::BadJson,
            ErrorCode::IdempotencyKeyReused,
            ErrorCode::LeaseLost,
        ] {
            let json = serde_json::to_value(code).unwrap_or_default();
            assert_eq!(json.as_str(), Some(code.as_str()));
        }
    }

    #[test]
    fn job_states_round_trip_through_their_spelling() {
        for s in ["queued", "running", "done", "dead"] {
            assert_eq!(JobState::parse(s).map(JobState::as_str), Some(s));
        }
        assert_eq!(JobState::parse("Queued"), None);
    }
}
