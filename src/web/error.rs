//! `AppError`, the web layer's one error type. It renders as the JSON shape of DESIGN.md
//! section 5 (`{"error": {"code", "message"}}`) and keeps internal detail out of 5xx bodies:
//! the cause is logged, the client gets a generic message.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::storage::DbError;

/// An error a handler returns; it becomes a status code plus a JSON error body.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The database is down or restarting: 503 with `Retry-After`.
    #[error("the database is unavailable")]
    Unavailable,
    /// Something that is not found: 404.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// An unexpected failure: 500, detail only in the server log.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<DbError> for AppError {
    fn from(err: DbError) -> Self {
        match err {
            DbError::Unavailable(_) => AppError::Unavailable,
            other => AppError::Internal(other.into()),
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: String,
}

impl AppError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            AppError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        match &self {
            AppError::Internal(cause) => tracing::error!(error = ?cause, "request failed"),
            AppError::Unavailable => tracing::warn!("request failed: database unavailable"),
            _ => tracing::debug!(error = %self, "request rejected"),
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
            },
        };
        let mut res = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        res
    }
}
