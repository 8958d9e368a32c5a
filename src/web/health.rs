//! Liveness and readiness probes for load balancers and orchestrators: `/healthz` answers while
//! the process runs; `/readyz` answers 200 only while the database is migrated and reachable
//! and, in `serve`, once the stored team rules are in use.

use axum::extract::State;
use axum::response::IntoResponse;

use super::{AppError, AppState};

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 while the database answers, 503 with `Retry-After` otherwise.
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
