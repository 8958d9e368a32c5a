//! The worker endpoints of the reproduction queue (the wire contract of issue 6):
//! `POST /api/v1/jobs/claim` (long-poll, 204 when idle), `/jobs/{id}/heartbeat` and
//! `/jobs/{id}/result`, for `worker`-scoped tokens (admin also accepted). Each extracts, calls
//! one `app::reproduce` function and renders; the queue's policy lives there.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api_types::{
    ClaimRequest, HeartbeatReply, JobResult, JobState, LeaseRequest, ResultReply,
};
use crate::app::reproduce;
use crate::auth::Scope;
use crate::web::auth::ApiToken;
use crate::web::extract::{JobId, JsonBody};
use crate::web::metrics::JobEvent;
use crate::web::{AppError, AppState};

/// The largest result body read: both outputs at their cap, JSON-escaped (control bytes become
/// six characters), plus room for the other fields. Outputs over their cap are refused after
/// parsing; bodies over this one while reading. Either way 413.
pub(crate) fn result_body_cap(state: &AppState) -> usize {
    state.queue.settings.max_output_bytes.saturating_mul(12) + (64 << 10)
}

/// `POST /api/v1/jobs/claim`: the oldest queued job with a fresh lease, waiting up to
/// `wait_secs` for one; 204 when none came.
pub async fn claim_job(
    State(state): State<AppState>,
    token: ApiToken,
    JsonBody(req): JsonBody<ClaimRequest>,
) -> Result<Response, AppError> {
    token.require(&[Scope::Worker])?;
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
pub async fn heartbeat_job(
    State(state): State<AppState>,
    token: ApiToken,
    JobId(id): JobId,
    JsonBody(req): JsonBody<LeaseRequest>,
) -> Result<Json<HeartbeatReply>, AppError> {
    token.require(&[Scope::Worker])?;
    let lease_secs = reproduce::heartbeat(&state.queue, id, &req.lease_token).await?;
    Ok(Json(HeartbeatReply { lease_secs }))
}

/// `POST /api/v1/jobs/{id}/result`: records the attempt's result exactly once; 409 on a stale
/// lease.
pub async fn post_result(
    State(state): State<AppState>,
    token: ApiToken,
    JobId(id): JobId,
    JsonBody(req): JsonBody<JobResult>,
) -> Result<Json<ResultReply>, AppError> {
    token.require(&[Scope::Worker])?;
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
