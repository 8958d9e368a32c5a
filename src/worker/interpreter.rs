//! What the worker's interpreter is: Python's and torch's versions and torch's CUDA/HIP build,
//! asked once, before the first job, by running a few lines in the sandbox as a job runs, so every
//! result can say what it ran on (issue 17). An interpreter that is not Python, or has no
//! torch, says so; nothing here fails the worker.

use std::time::Duration;

use super::run::{self, RunLimits};
use super::sandbox::{Launch, SandboxLauncher};
use crate::api_types::RunEnvironment;

/// Prints one JSON line of facts; never raises.
const ASK: &str = r#"import json, platform
facts = {"python": platform.python_version()}
try:
    import torch
    facts.update(torch=torch.__version__, cuda_build=torch.version.cuda,
                 hip_build=getattr(torch.version, "hip", None))
except Exception:
    pass
print("gpu-triage-env " + json.dumps(facts))
"#;

/// The interpreter's facts (without the device), or `None` when it could not tell.
pub fn facts(sandbox: &SandboxLauncher) -> Option<RunEnvironment> {
    let prepared = sandbox
        .prepare("env.py", ASK, Launch::Script)
        .inspect_err(|e| tracing::warn!("cannot ask the interpreter for its versions: {e}"))
        .ok()?;
    let limits = RunLimits {
        timeout: Duration::from_secs(120),
        output_cap: 64 << 10,
        stderr_extra: 128,
    };
    let out = run::run(prepared.command, limits, &|| false, prepared.gate)
        .inspect_err(|e| tracing::warn!("cannot ask the interpreter for its versions: {e}"))
        .ok()?;
    let facts = parse(&out.stdout.text);
    match &facts {
        Some(f) => tracing::info!("interpreter: {}", f.line()),
        None => tracing::warn!("the interpreter did not say its versions (is it Python?)"),
    }
    facts
}

fn parse(stdout: &str) -> Option<RunEnvironment> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("gpu-triage-env "))?;
    let facts: RunEnvironment = serde_json::from_str(line).ok()?;
    facts.is_sane().then_some(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_facts_line_is_read_and_anything_else_is_not() {
        let got = parse(
            "noise\ngpu-triage-env {\"python\": \"3.11.2\", \"torch\": \"2.15.0+cu132\", \
             \"cuda_build\": \"13.2\", \"hip_build\": null}\n",
        )
        .expect("facts");
        assert_eq!(got.torch.as_deref(), Some("2.15.0+cu132"));
        assert_eq!(got.line(), "Python 3.11.2 · torch 2.15.0+cu132 (CUDA 13.2)");
        assert_eq!(
            parse("gpu-triage-env {\"python\": \"3.11\"}").map(|f| f.line()),
            Some("Python 3.11 · no torch".into())
        );
        assert!(parse("Traceback ...\nSyntaxError\n").is_none());
        assert!(parse("gpu-triage-env {\"python\": \"3\\u0007\"}").is_none());
    }
}
