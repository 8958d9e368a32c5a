//! What a worker sends is untrusted: the checks its claims, heartbeats and results go through
//! before anything reaches a query, shared by those use cases, and the conflict a lost lease
//! answers.

use crate::api_types::{ErrorCode, Sandbox};
use crate::app::Error;

/// Longest GPU description accepted (serialized JSON).
const MAX_GPU_JSON: usize = 4096;

pub(super) fn check_runs(runs: &[crate::api_types::RunOutcome]) -> Result<(), Error> {
    let bad_line = |l: &String| l.chars().count() > 300 || l.chars().any(char::is_control);
    if runs.len() > usize::from(crate::api_types::MAX_REPEATS)
        || runs
            .iter()
            .any(|r| r.failing_line.as_ref().is_some_and(bad_line))
    {
        return Err(Error::Invalid(
            ErrorCode::BadBody,
            format!(
                "runs: at most {} entries, each failing_line up to 300 characters without \
                 control characters",
                crate::api_types::MAX_REPEATS
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_worker(worker: &str) -> Result<(), Error> {
    if worker.trim().is_empty()
        || worker.chars().count() > 200
        || worker.chars().any(char::is_control)
    {
        return Err(Error::Invalid(
            ErrorCode::BadWorker,
            "worker must be 1-200 characters without control characters".into(),
        ));
    }
    Ok(())
}

pub(super) fn check_sandbox(sandbox: &Sandbox) -> Result<(), Error> {
    if let Sandbox::Other(_) = sandbox {
        return Err(Error::Invalid(
            ErrorCode::BadSandbox,
            "sandbox must be \"bwrap\" or \"none\"".into(),
        ));
    }
    Ok(())
}

/// A worker's GPU description: null or a small JSON object, NUL bytes neutralised (worker
/// output is untrusted text: a NUL in it must not lose the result).
pub(super) fn check_gpu(gpu: &mut Option<serde_json::Value>) -> Result<(), Error> {
    use serde_json::Value;
    if let Some(g) = gpu.as_mut() {
        crate::ingest::neutralize_json(g);
    }
    match gpu {
        None | Some(Value::Null) => Ok(()),
        Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_GPU_JSON => Ok(()),
        Some(_) => Err(Error::Invalid(
            ErrorCode::BadGpu,
            format!("gpu must be null or a JSON object of at most {MAX_GPU_JSON} bytes"),
        )),
    }
}

/// Whether `token` can be a lease at all (they are UUIDs): anything else, a NUL or other control
/// byte included, matches no lease and never reaches a query.
pub(super) fn plausible_lease(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 64
        && token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

pub(super) fn lease_lost(message: &str) -> Error {
    Error::Conflict(ErrorCode::LeaseLost, message.to_owned())
}
