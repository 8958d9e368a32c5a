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
    pub gpu: Option<GpuFacts>,
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

/// What a worker said of the GPU a run used, as its probe reports it (`worker::probe`): the
/// fields the portal shows, read leniently (a field of another type is absent), and the object
/// as the worker sent it, which the API passes on unchanged and the `gpu` column keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuFacts {
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub name: Option<String>,
    /// The driver's CUDA version (`12.4`).
    pub driver_version: Option<String>,
    pub total_memory_bytes: Option<u64>,
    /// `9.0`.
    pub compute_capability: Option<String>,
    /// The object as sent.
    pub raw: serde_json::Value,
}

impl GpuFacts {
    /// The facts of a worker's `gpu` object; `None` for a JSON null (no GPU stated).
    #[must_use]
    pub fn from_json(raw: serde_json::Value) -> Option<GpuFacts> {
        if raw.is_null() {
            return None;
        }
        let text = |k: &str| {
            raw.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        Some(GpuFacts {
            name: text("name"),
            driver_version: text("driver_version"),
            total_memory_bytes: raw
                .get("total_memory_bytes")
                .and_then(serde_json::Value::as_u64),
            compute_capability: text("compute_capability"),
            raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::GpuFacts;

    #[test]
    fn gpu_facts_are_read_from_what_the_probe_sends_and_the_object_is_kept() {
        let sent = serde_json::json!({"index": 0, "name": "NVIDIA H100 80GB HBM3",
            "driver_version": "12.4", "total_memory_bytes": 85_045_231_616u64,
            "compute_capability": "9.0", "mig": true});
        let g = GpuFacts::from_json(sent.clone()).expect("an object");
        assert_eq!(g.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(g.driver_version.as_deref(), Some("12.4"));
        assert_eq!(g.total_memory_bytes, Some(85_045_231_616));
        assert_eq!(g.compute_capability.as_deref(), Some("9.0"));
        assert_eq!(g.raw, sent);
        let odd = GpuFacts::from_json(serde_json::json!({"name": 7})).expect("an object");
        assert_eq!(odd.name, None);
        assert_eq!(GpuFacts::from_json(serde_json::Value::Null), None);
    }
}
