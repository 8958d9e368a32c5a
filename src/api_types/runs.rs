//! What a reproduction run ran on and how it ended, as a worker reports it and a report shows
//! it: the interpreter and device (`RunEnvironment`), each of a job's repeated runs
//! (`RunOutcome`), and the follow-up run under CPU translation (`CpuRun`).

use serde::{Deserialize, Serialize};

use crate::rules::Classification;
use crate::rules::outcome::Outcome;

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
