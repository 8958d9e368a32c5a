//! Liveness and readiness probes for load balancers and orchestrators: `/healthz` answers while
//! the process runs; `/readyz` answers 200 only while the database is migrated and reachable
//! and, in `serve`, once the stored team rules are in use.

use axum::extract::State;
use axum::response::IntoResponse;

use super::error::AppError;
use super::state::AppState;
use crate::api_types::ErrorBody;

/// `GET /healthz`: the process is alive.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses((status = 200, description = "`ok`: the process runs.", content_type = "text/plain",
        body = String)),
)]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 while the database answers, 503 with `Retry-After` otherwise.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "`ready`: the database answers and, in `serve`, the stored \
            team rules are in use.", content_type = "text/plain", body = String),
        (status = 503, description = "`unavailable`: not ready yet, or the database is \
            unreachable.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Result<impl IntoResponse, AppError> {
    state.db.ping().await.map_err(|e| {
        tracing::debug!(error = %e, "not ready");
        AppError::Unavailable
    })?;
    if state.await_team_rules && state.ruleset.version() < 0 {
        tracing::debug!("not ready: team rules not loaded yet");
        return Err(AppError::Unavailable);
    }
    Ok("ready\n")
}
