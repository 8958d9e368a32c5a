//! The reproduction jobs' wire types: how a worker claims a job (`POST /api/v1/jobs/claim`:
//! its wait, its `Sandbox`, the leased `ClaimedJob`), keeps its lease (heartbeat) and reports
//! one attempt (`JobResult`, answered by `ResultReply`); a job's `JobState`, and what a job
//! `Needs` to run. Shared by the server's handlers and the worker's client.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CpuRun, RunEnvironment, RunOutcome};
use crate::rules::{Category, Classification};

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
    fn job_states_round_trip_through_their_spelling() {
        for s in ["queued", "running", "done", "dead"] {
            assert_eq!(JobState::parse(s).map(JobState::as_str), Some(s));
        }
        assert_eq!(JobState::parse("Queued"), None);
    }
}
