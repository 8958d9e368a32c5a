//! `gpu-triage upload`: push failed-run artifacts from CI to the server (placeholder: being
//! written).

use std::path::PathBuf;

/// `gpu-triage upload`
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// Server base URL.
    #[arg(long, env = "GPU_TRIAGE_URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// API token with the `ingest` scope.
    #[arg(long, env = "GPU_TRIAGE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Project the reports belong to.
    #[arg(long)]
    pub project: Option<String>,
    /// A minimal Python script that reproduces the failure (queued for a GPU worker).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Metadata as key=value (job_url, commit, branch, environment); repeatable.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Log files to upload.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
}

/// Runs the command.
pub fn run(_args: UploadArgs) -> anyhow::Result<()> {
    anyhow::bail!("upload is not available yet")
}
