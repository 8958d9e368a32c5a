//! What a reproduction attempt leaves behind, shared by the queue's statements
//! ([`super::jobs`], which writes attempts and results) and the reads for the report page and
//! API ([`super::reproductions`], which reads them back). The two types live here, below both,
//! so neither of those modules imports the other; each re-exports the one its callers name
//! (`jobs::AttemptOutcome`, `reproductions::RunRecord`).

use crate::api_types::Sandbox;
use crate::rules::Classification;
use crate::rules::outcome::Decision;

/// How an attempt ended, as `job_attempts.outcome` stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The worker posted a result.
    Result,
    /// The worker reported that the run could not happen.
    Error,
    /// The lease expired.
    Expired,
}

impl AttemptOutcome {
    /// The column's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Result => "result",
            AttemptOutcome::Error => "error",
            AttemptOutcome::Expired => "expired",
        }
    }

    /// The outcome spelled `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<AttemptOutcome> {
        [
            AttemptOutcome::Result,
            AttemptOutcome::Error,
            AttemptOutcome::Expired,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one run of a script gave, as stored: written from a worker's result, read back for
/// the report page and API.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub gpu: Option<serde_json::Value>,
    pub no_gpu: bool,
    /// The run had CUDA redirected to the CPU.
    pub cpu_translation: bool,
    /// The follow-up run on the CPU after a GPU run, with its classification.
    pub cpu: Option<crate::api_types::CpuRun>,
    /// With repeats: every run's outcome.
    pub runs: Vec<crate::api_types::RunOutcome>,
    /// With repeats: "fails 5/5 at repro.py:13", "flaky: fails 2/5"; else empty.
    pub verdict: String,
    /// What the run ran on.
    pub environment: Option<crate::api_types::RunEnvironment>,
    pub sandbox: Sandbox,
    pub worker: String,
    /// DESIGN.md section 3, of the combined output.
    pub classification: Classification,
    /// What the run showed; `None` only for a row stored before outcomes were (the app derives
    /// it when read).
    pub outcome: Option<Decision>,
}
