//! The worker endpoints of the reproduction queue (the wire contract of issue 6):
//! `POST /api/v1/jobs/claim` (long-poll, 204 when idle), `/jobs/{id}/heartbeat` and
//! `/jobs/{id}/result`, for `worker`-scoped tokens (admin also accepted). Each extracts, calls
//! one `app::reproduce` function and renders; the queue's policy lives there.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api_types::{
    ClaimRequest, ClaimWait, ClaimedJob, ErrorBody, ErrorCode, HeartbeatReply, JobResult, JobState,
    LeaseRequest, MAX_CLAIM_WAIT_SECS, ResultReply,
};
use crate::app::reproduce;
use crate::web::error::AppError;
use crate::web::extract::{JobId, JsonBody, QueryParams};
use crate::web::metrics::JobEvent;
use crate::web::scope::{Scoped, Worker};
use crate::web::state::AppState;

/// The largest result body read: both outputs at their cap, JSON-escaped (control bytes become
/// six characters), plus room for the other fields. Outputs over their cap are refused after
/// parsing; bodies over this one while reading. Either way 413.
pub(crate) fn result_body_cap(state: &AppState) -> usize {
    state.queue.settings.max_output_bytes.saturating_mul(12) + (64 << 10)
}

/// `POST /api/v1/jobs/claim`: the oldest queued job with a fresh lease, waiting up to `?wait=`
/// seconds (or the body's older `wait_secs`) for one; 204 when none came.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/claim",
    tag = "jobs",
    params(ClaimWait),
    request_body(content = ClaimRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "A leased job.", body = ClaimedJob),
        (status = 204, description = "No job came within the wait (`wait`, at most 30 s)."),
        (status = 400, description = "`bad_json`: malformed JSON; `bad_query`: a `wait` that \
            is not 0-30.", body = ErrorBody),
        (status = 422, description = "`bad_worker`, `bad_gpu`, `bad_sandbox`, `no_gpu` (a \
            worker with neither a GPU nor `no_gpu`) or `bad_body` (`wait_secs` over 30).",
            body = ErrorBody),
    ),
    security(("bearer" = ["worker"])),
)]
pub async fn claim_job(
    State(state): State<AppState>,
    _: Scoped<Worker>,
    QueryParams(wait): QueryParams<ClaimWait>,
    JsonBody(mut req): JsonBody<ClaimRequest>,
) -> Result<Response, AppError> {
    if req.wait_secs > MAX_CLAIM_WAIT_SECS {
        return Err(AppError::Unprocessable(
            ErrorCode::BadBody,
            format!("wait_secs must be 0-{MAX_CLAIM_WAIT_SECS}"),
        ));
    }
    if let Some(secs) = wait.wait {
        if secs > MAX_CLAIM_WAIT_SECS {
            return Err(AppError::BadRequest(
                ErrorCode::BadQuery,
                format!("wait must be 0-{MAX_CLAIM_WAIT_SECS} seconds"),
            ));
        }
        req.wait_secs = secs;
    }
    let claim = reproduce::claim(&state.queue, req).await?;
    for r in &claim.reaped {
        state.metrics.job_event(JobEvent::reaped(r.state));
    }
    Ok(match claim.job {
        Some(job) => {
            state.metrics.job_event(JobEvent::Claimed);
            Json(job).into_response()
        }
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /api/v1/jobs/{id}/heartbeat`: extends the lease; 409 when it is lost.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/heartbeat",
    tag = "jobs",
    params(("id" = i64, Path, description = "The job's id.")),
    request_body(content = LeaseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The lease was extended.", body = HeartbeatReply),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job.", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the lease expired or went to another \
            worker; stop working on the job.", body = ErrorBody),
    ),
    security(("bearer" = ["worker"])),
)]
pub async fn heartbeat_job(
    State(state): State<AppState>,
    _: Scoped<Worker>,
    JobId(id): JobId,
    JsonBody(req): JsonBody<LeaseRequest>,
) -> Result<Json<HeartbeatReply>, AppError> {
    let lease_secs = reproduce::heartbeat(&state.queue, id, &req.lease_token).await?;
    Ok(Json(HeartbeatReply { lease_secs }))
}

/// `POST /api/v1/jobs/{id}/result`: records the attempt's result exactly once; 409 on a stale
/// lease.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/result",
    tag = "jobs",
    params(("id" = i64, Path, description = "The job's id.")),
    request_body(content = JobResult, content_type = "application/json"),
    responses(
        (status = 200, description = "The result was recorded (a retried post gets the stored \
            answer).", body = ResultReply),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job.", body = ErrorBody),
        (status = 409, description = "`lease_lost`: a stale lease; the result is ignored.",
            body = ErrorBody),
        (status = 422, description = "`bad_body`, `bad_gpu` or `bad_sandbox`: a field out of \
            bounds.", body = ErrorBody),
    ),
    security(("bearer" = ["worker"])),
)]
pub async fn post_result(
    State(state): State<AppState>,
    _: Scoped<Worker>,
    JobId(id): JobId,
    JsonBody(req): JsonBody<JobResult>,
) -> Result<Json<ResultReply>, AppError> {
    let recorded = reproduce::record_result(&state.queue, state.ruleset.current(), id, req).await?;
    if recorded.new {
        if recorded.failed {
            state.metrics.job_event(JobEvent::Failed);
            if recorded.reply.state == JobState::Dead {
                state.metrics.job_event(JobEvent::Dead);
            }
        } else {
            state.metrics.job_event(JobEvent::Completed);
        }
    }
    Ok(Json(recorded.reply))
}
