//! The worker endpoints of the reproduction queue (the wire contract of issue 6):
//! `POST /api/v1/jobs/claim` (long-poll, 204 when idle), `/jobs/{id}/heartbeat` and
//! `/jobs/{id}/result`, for `worker`-scoped tokens (admin also accepted).

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::parse_id;
use crate::auth::Scope;
use crate::repro;
use crate::storage::jobs::{self as store, FailedAttempt, Heartbeat, NewReproduction, Outcome};
use crate::web::auth::ApiToken;
use crate::web::metrics::JobEvent;
use crate::web::{AppError, AppState};

/// Longest GPU description accepted (serialized JSON).
const MAX_GPU_JSON: usize = 4096;
/// Longest worker-reported error kept.
const MAX_ERROR_CHARS: usize = 4000;

/// The largest result body read: both outputs at their cap, JSON-escaped (control bytes become
/// six characters), plus room for the other fields. Outputs over their cap are refused after
/// parsing; bodies over this one while reading. Either way 413.
pub(crate) fn result_body_cap(state: &AppState) -> usize {
    state.jobs.max_output_bytes.saturating_mul(12) + (64 << 10)
}

/// `POST /api/v1/jobs/claim` body.
#[derive(Debug, Deserialize)]
pub struct ClaimBody {
    worker: String,
    #[serde(default)]
    wait_secs: u64,
    #[serde(default)]
    gpu: Option<Value>,
    #[serde(default)]
    no_gpu: bool,
    sandbox: String,
}

/// `POST /api/v1/jobs/claim` 200 body.
#[derive(Debug, Serialize)]
struct ClaimedJob {
    job_id: i64,
    report_id: i64,
    attempt: i32,
    max_attempts: i32,
    lease_token: String,
    lease_secs: u32,
    script: String,
    script_name: &'static str,
    timeout_secs: u32,
}

fn parse_json<T: DeserializeOwned>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, AppError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::TooLarge(format!(
                "the body is larger than the {}-byte limit",
                result_body_cap(state)
            ))
        } else {
            AppError::BadRequest("bad_body", e.body_text())
        }
    })?;
    serde_json::from_slice(&body).map_err(|e| AppError::BadRequest("bad_json", e.to_string()))
}

fn check_worker(worker: &str) -> Result<(), AppError> {
    if worker.trim().is_empty()
        || worker.chars().count() > 200
        || worker.chars().any(char::is_control)
    {
        return Err(AppError::Unprocessable(
            "bad_worker",
            "worker must be 1-200 characters without control characters".into(),
        ));
    }
    Ok(())
}

fn check_sandbox(sandbox: &str) -> Result<(), AppError> {
    if sandbox != "bwrap" && sandbox != "none" {
        return Err(AppError::Unprocessable(
            "bad_sandbox",
            "sandbox must be \"bwrap\" or \"none\"".into(),
        ));
    }
    Ok(())
}

fn check_gpu(gpu: Option<&Value>) -> Result<(), AppError> {
    match gpu {
        None | Some(Value::Null) => Ok(()),
        Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_GPU_JSON => Ok(()),
        Some(_) => Err(AppError::Unprocessable(
            "bad_gpu",
            format!("gpu must be null or a JSON object of at most {MAX_GPU_JSON} bytes"),
        )),
    }
}

/// `POST /api/v1/jobs/claim`: the oldest queued job with a fresh lease, waiting up to
/// `wait_secs` (at most 30) for one; 204 when none came. The wait holds no database connection:
/// it retries the claim when this server queues a job, and at least every `poll`.
pub async fn claim_job(
    State(state): State<AppState>,
    token: ApiToken,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AppError> {
    token.require(&[Scope::Worker])?;
    let mut req: ClaimBody = parse_json(&state, body)?;
    if let Some(gpu) = req.gpu.as_mut() {
        crate::ingest::neutralize_json(gpu);
    }
    check_worker(&req.worker)?;
    check_sandbox(&req.sandbox)?;
    check_gpu(req.gpu.as_ref())?;
    if req.gpu.as_ref().is_none_or(Value::is_null) && !req.no_gpu {
        return Err(AppError::Unprocessable(
            "no_gpu",
            "a worker without a GPU must say so with \"no_gpu\": true; it may not claim GPU jobs"
                .into(),
        ));
    }
    let wait = Duration::from_secs(req.wait_secs.min(state.jobs.max_wait_secs));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Registered before looking, so a job queued between the look and the wait wakes it.
        let woken = state.job_wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        for r in store::reap_expired(&state.db).await? {
            state.metrics.job_event(reaped_event(&r.state));
        }
        if let Some(job) = store::claim(&state.db, &req.worker, state.jobs.lease_secs).await? {
            state.metrics.job_event(JobEvent::Claimed);
            tracing::info!(job = job.job_id, worker = %req.worker, attempt = job.attempt, "job claimed");
            let body = ClaimedJob {
                job_id: job.job_id,
                report_id: job.report_id,
                attempt: job.attempt,
                max_attempts: job.max_attempts,
                lease_token: job.lease_token,
                lease_secs: state.jobs.lease_secs,
                script: job.script,
                script_name: "repro.py",
                timeout_secs: state.jobs.timeout_secs,
            };
            return Ok(Json(body).into_response());
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        let nap = (deadline - now).min(state.jobs.poll);
        tokio::select! {
            () = &mut woken => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}

fn reaped_event(state: &str) -> JobEvent {
    if state == "dead" {
        JobEvent::Dead
    } else {
        JobEvent::Requeued
    }
}

/// `POST /api/v1/jobs/{id}/heartbeat` body: the lease token.
#[derive(Debug, Deserialize)]
pub struct LeaseBody {
    lease_token: String,
}

/// `POST /api/v1/jobs/{id}/heartbeat`: extends the lease; 409 when it is lost.
pub async fn heartbeat_job(
    State(state): State<AppState>,
    token: ApiToken,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Worker])?;
    let id = parse_id(&id, "job")?;
    let req: LeaseBody = parse_json(&state, body)?;
    match store::heartbeat(&state.db, id, &req.lease_token, state.jobs.lease_secs).await? {
        Heartbeat::Extended => Ok(Json(json!({ "lease_secs": state.jobs.lease_secs }))),
        Heartbeat::Lost => Err(lease_lost(
            "the lease is lost (expired, reassigned, or a wrong token); stop the run".into(),
        )),
        Heartbeat::UnknownJob => Err(AppError::NotFound("job")),
    }
}

fn lease_lost(message: String) -> AppError {
    AppError::Conflict("lease_lost", message)
}

/// `POST /api/v1/jobs/{id}/result` body.
#[derive(Debug, Deserialize, Serialize)]
pub struct ResultBody {
    lease_token: String,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
    #[serde(default)]
    timed_out: bool,
    duration_ms: i64,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    gpu: Option<Value>,
    #[serde(default)]
    no_gpu: bool,
    sandbox: String,
    #[serde(default)]
    error: Option<String>,
    /// Not in the contract: the worker's name, when it sends one (else the claiming worker's).
    #[serde(default)]
    worker: Option<String>,
}

impl ResultBody {
    fn validate(&self, cap: usize) -> Result<(), AppError> {
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if text.len() > cap {
                return Err(AppError::TooLarge(format!(
                    "{name} is larger than the {cap}-byte limit; cut it and set truncated"
                )));
            }
        }
        if self.duration_ms < 0 {
            return Err(AppError::Unprocessable(
                "bad_duration",
                "duration_ms must not be negative".into(),
            ));
        }
        check_sandbox(&self.sandbox)?;
        check_gpu(self.gpu.as_ref())?;
        if let Some(w) = &self.worker {
            check_worker(w)?;
        }
        Ok(())
    }

    /// SHA-256 of the result as parsed (field order fixed), so a retry of the same result is
    /// recognised whatever its whitespace.
    fn digest(&self) -> Result<Vec<u8>, AppError> {
        let bytes = serde_json::to_vec(self).map_err(|e| AppError::Internal(e.into()))?;
        Ok(Sha256::digest(bytes).to_vec())
    }
}

/// `POST /api/v1/jobs/{id}/result`: records the attempt's result exactly once; 409 on a stale
/// lease. A worker-reported `error` is a failed attempt (requeued, or dead after
/// `max_attempts`); a result is scrubbed, classified and stored as the report's reproduction.
pub async fn post_result(
    State(state): State<AppState>,
    token: ApiToken,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Worker])?;
    let id = parse_id(&id, "job")?;
    let mut req: ResultBody = parse_json(&state, body)?;
    // Worker output is untrusted text: a NUL in it must not lose the result.
    if let Some(gpu) = req.gpu.as_mut() {
        crate::ingest::neutralize_json(gpu);
    }
    req.validate(state.jobs.max_output_bytes)?;
    let sha = req.digest()?;
    let worker = req.worker.clone().unwrap_or_default();
    let outcome = match &req.error {
        Some(error) => {
            let failed = FailedAttempt {
                job_id: id,
                lease_token: req.lease_token.clone(),
                request_sha256: sha,
                error: scrub_error(error),
                worker,
            };
            let outcome = store::record_failure(&state.db, &failed).await?;
            if let Outcome::Recorded(r) = &outcome {
                state.metrics.job_event(JobEvent::Failed);
                if r.state == "dead" {
                    state.metrics.job_event(JobEvent::Dead);
                }
            }
            outcome
        }
        None => record_reproduction(&state, id, req, sha, worker).await?,
    };
    match outcome {
        Outcome::Recorded(r) | Outcome::Replayed(r) => Ok(Json(json!({
            "reproduction_id": r.reproduction_id,
            "state": r.state,
            "classification": r.classification,
        }))),
        Outcome::Stale(message) => Err(lease_lost(message)),
        Outcome::UnknownJob => Err(AppError::NotFound("job")),
    }
}

fn scrub_error(error: &str) -> String {
    let cut: String = error.chars().take(MAX_ERROR_CHARS).collect();
    let cut = crate::ingest::neutralize_controls(&cut);
    crate::ingest::scrub::scrub(&cut).text.into_owned()
}

async fn record_reproduction(
    state: &AppState,
    job_id: i64,
    req: ResultBody,
    sha: Vec<u8>,
    worker: String,
) -> Result<Outcome, AppError> {
    let ruleset = state.ruleset.current();
    let (stdout, stderr) = (req.stdout, req.stderr);
    let scrubbed =
        tokio::task::spawn_blocking(move || repro::scrub_and_classify(&ruleset, &stdout, &stderr))
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
    let classification =
        serde_json::to_value(&scrubbed.classification).map_err(|e| AppError::Internal(e.into()))?;
    let new = NewReproduction {
        job_id,
        lease_token: req.lease_token,
        request_sha256: sha,
        exit_code: req.exit_code,
        signal: req.signal,
        timed_out: req.timed_out,
        duration_ms: req.duration_ms,
        stdout: scrubbed.stdout,
        stderr: scrubbed.stderr,
        truncated: req.truncated,
        gpu: req.gpu.filter(|g| !g.is_null()),
        no_gpu: req.no_gpu,
        sandbox: req.sandbox,
        worker,
        classification,
    };
    let outcome = store::record_result(&state.db, &new).await?;
    let recorded = match &outcome {
        Outcome::Recorded(r) => {
            state.metrics.job_event(JobEvent::Completed);
            r
        }
        // A replay may follow a response lost before the category was updated: do it again
        // (idempotent).
        Outcome::Replayed(r) => r,
        _ => return Ok(outcome),
    };
    if let (Some(repro_id), Some(value)) = (recorded.reproduction_id, &recorded.classification)
        && let Ok(c) = serde_json::from_value::<crate::rules::Classification>(value.clone())
        && repro::follow_if_more_specific(
            &state.db,
            &state.ruleset.current(),
            recorded.report_id,
            repro_id,
            &c,
            new.no_gpu,
        )
        .await?
    {
        tracing::info!(report = recorded.report_id, category = %c.category, "report category follows its reproduction");
    }
    Ok(outcome)
}

/// A report's jobs as `GET /api/v1/reports/{id}` lists them under `reproductions` (DESIGN.md
/// section 5): one entry per job, with the result's fields null until a result is recorded.
pub(crate) fn reproductions_json(jobs: &[crate::storage::reproductions::JobView]) -> Vec<Value> {
    jobs.iter()
        .map(|j| {
            let r = j.reproduction.as_ref();
            json!({
                "job_id": j.id,
                "state": j.state,
                "attempt": r.map_or(j.attempts, |r| r.attempt),
                "max_attempts": j.max_attempts,
                "exit_code": r.and_then(|r| r.exit_code),
                "signal": r.and_then(|r| r.signal),
                "timed_out": r.is_some_and(|r| r.timed_out),
                "duration_ms": r.map(|r| r.duration_ms),
                "gpu": r.and_then(|r| r.gpu.clone()),
                "stdout": r.map(|r| r.stdout.as_str()),
                "stderr": r.map(|r| r.stderr.as_str()),
                "truncated": r.is_some_and(|r| r.truncated),
                "classification": r.map(|r| &r.classification),
                "no_gpu": r.map(|r| r.no_gpu),
                "sandbox": r.map(|r| r.sandbox.as_str()),
                "worker": if j.worker.is_empty() { None } else { Some(j.worker.as_str()) },
                "reproduction_id": r.map(|r| r.id),
                "dead_reason": if j.dead_reason.is_empty() { None } else { Some(j.dead_reason.as_str()) },
                "error": if j.last_error.is_empty() { None } else { Some(j.last_error.as_str()) },
                "requeued_from": j.requeued_from,
            })
        })
        .collect()
}
