//! `POST /jobs/{id}/requeue`: the report page's re-queue button (a portal user with the
//! `ingest` or `admin` scope, the form carrying the session's CSRF token).

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::api_types::ErrorCode;
use crate::app::reproduce::{self as repro, Requeue};
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, JobId};
use crate::web::scope::IngestOrAdmin;
use crate::web::state::AppState;

/// The re-queue form.
#[derive(Debug, Deserialize)]
pub struct RequeueForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
}

impl CsrfField for RequeueForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /jobs/{id}/requeue`: queues a new run of a `done` or `dead` job's report.
pub async fn requeue_job(
    State(state): State<AppState>,
    JobId(id): JobId,
    CsrfForm { user, .. }: CsrfForm<RequeueForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    match repro::requeue(&state.queue, id, user.name()).await? {
        Requeue::Queued { job_id, report_id } => {
            tracing::info!(job = id, new_job = job_id, by = ?user.name(), "job re-queued");
            Ok(Redirect::to(&format!("/reports/{report_id}#job-{job_id}")).into_response())
        }
        Requeue::NotFinished { .. } => Err(AppError::Conflict(
            ErrorCode::JobPending,
            format!(
                "job {id} is still queued or running; only a done or dead job can be re-queued"
            ),
        )
        .into()),
        Requeue::AlreadyQueued { job_id, .. } => Err(AppError::Conflict(
            ErrorCode::JobPending,
            format!("job {job_id} of this report is already queued or running"),
        )
        .into()),
    }
}
