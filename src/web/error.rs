//! `AppError`, the web layer's one error type. For `/api` it renders as the JSON shape of
//! DESIGN.md section 5 (`{"error": {"code", "message"}}`); wrapped in [`PageError`] it renders as
//! an HTML page (`error_page.rs`, which knows the portal's frame; this module knows no page).
//! Either way 5xx bodies carry no internal detail: the cause is logged at `error`, 4xx at
//! `debug`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::api_types::{ErrorBody, ErrorCode, ErrorDetail};
use crate::app;

/// An error a handler returns; it becomes a status code plus an error body.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// 400: malformed input (query, JSON, form).
    #[error("{1}")]
    BadRequest(ErrorCode, String),
    /// 401: no valid credentials.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// 401 for the API; a portal page sends the person to sign in and, when `next` is set (a
    /// relative path checked by `auth::return_path`), back there afterwards.
    #[error("sign in first")]
    SignInFirst { next: Option<String> },
    /// 403: valid credentials without the needed scope, or a failed CSRF/origin check.
    #[error("{0}")]
    Forbidden(String),
    /// 404.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 410: the thing existed and was removed on purpose (a log retention removed).
    #[error("{0}")]
    Gone(String),
    /// 405: the path exists, the method does not.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// 408: the request body arrived too slowly (SECURITY.md item 12).
    #[error("{0}")]
    BodyTooSlow(String),
    /// 409: a conflict with the current state (a lost lease).
    #[error("{1}")]
    Conflict(ErrorCode, String),
    /// 308 (API) or 303 (pages) to group `into`: group `group` was merged into it.
    #[error(
        "group {group} was merged into group {into}: its reports, fixes and history are there now"
    )]
    Merged { group: i64, into: i64 },
    /// 413: over a size cap.
    #[error("{0}")]
    TooLarge(String),
    /// 431: more request headers, or more header bytes, than the server reads.
    #[error("{0}")]
    HeadersTooLarge(String),
    /// 415: a body of the wrong media type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: well-formed but unacceptable input (empty log, secret in a script, ...).
    #[error("{1}")]
    Unprocessable(ErrorCode, String),
    /// 429: over the rate limit; the value is the `Retry-After` seconds.
    #[error("rate limit exceeded; retry in {0} s")]
    RateLimited(u64),
    /// 429: the token already has its share of the in-flight slots (the value).
    #[error("this token already has {0} requests in flight; retry when one of them ends")]
    TokenBusy(usize),
    /// 429: a client without a token already has its share of the anonymous slots (the value).
    #[error(
        "this address already has {0} requests without a token in flight; retry when one of them ends"
    )]
    ClientBusy(usize),
    /// 503: the database is down or restarting.
    #[error("the service is temporarily unavailable; retry shortly")]
    Unavailable,
    /// 503: too many requests in flight; the server sheds load.
    #[error("the server is busy; retry in a second")]
    Overloaded,
    /// 500: an unexpected failure, detail only in the server log.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// The 401 of a request whose token was revoked (or whose person was disabled) while it was
/// in flight: it was ended, and nothing it sent was stored.
pub const REVOKED_IN_FLIGHT: &str =
    "the credentials of this request were revoked while it was in flight; nothing was stored";

impl From<app::Error> for AppError {
    fn from(err: app::Error) -> Self {
        match err {
            app::Error::NotFound(what) => AppError::NotFound(what),
            app::Error::Gone(message) => AppError::Gone(message),
            app::Error::Malformed(code, message) => AppError::BadRequest(code, message),
            app::Error::Invalid(code, message) => AppError::Unprocessable(code, message),
            app::Error::Forbidden(message) => AppError::Forbidden(message),
            app::Error::TooLarge(message) => AppError::TooLarge(message),
            app::Error::Unsupported(message) => AppError::UnsupportedMediaType(message),
            app::Error::Conflict(code, message) => AppError::Conflict(code, message),
            app::Error::Merged { group, into } => AppError::Merged { group, into },
            app::Error::Revoked => AppError::Unauthorized(REVOKED_IN_FLIGHT),
            app::Error::Db(e) if e.is_unavailable() => AppError::Unavailable,
            app::Error::Db(e) => AppError::Internal(e.into()),
            app::Error::Internal(e) => AppError::Internal(e),
        }
    }
}

impl AppError {
    /// A body extractor's rejection: 413 when the body was over its cap (SECURITY.md item 1),
    /// else 400 with `code`.
    pub fn rejected(code: ErrorCode, status: StatusCode, text: String) -> AppError {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::TooLarge(text)
        } else {
            AppError::BadRequest(code, text)
        }
    }

    /// The status and the stable snake_case code clients can match on.
    pub fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            AppError::BadRequest(code, _) => (StatusCode::BAD_REQUEST, *code),
            AppError::Unauthorized(_) | AppError::SignInFirst { .. } => {
                (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized)
            }
            AppError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            AppError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            AppError::Gone(_) => (StatusCode::GONE, ErrorCode::Gone),
            AppError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed)
            }
            AppError::BodyTooSlow(_) => (StatusCode::REQUEST_TIMEOUT, ErrorCode::BodyTooSlow),
            AppError::Conflict(code, _) => (StatusCode::CONFLICT, *code),
            AppError::Merged { .. } => (StatusCode::PERMANENT_REDIRECT, ErrorCode::GroupMerged),
            AppError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::TooLarge),
            AppError::HeadersTooLarge(_) => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                ErrorCode::HeadersTooLarge,
            ),
            AppError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
            ),
            AppError::Unprocessable(code, _) => (StatusCode::UNPROCESSABLE_ENTITY, *code),
            AppError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited),
            AppError::TokenBusy(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::TokenBusy),
            AppError::ClientBusy(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::ClientBusy),
            AppError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable),
            AppError::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Overloaded),
            AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }

    pub(super) fn log(&self) {
        match self {
            AppError::Internal(cause) => tracing::error!(error = ?cause, "request failed"),
            AppError::Unavailable => tracing::warn!("request failed: service unavailable"),
            _ => tracing::debug!(error = %self, "request rejected"),
        }
    }

    pub(super) fn add_headers(&self, res: &mut Response) {
        let retry = match self {
            AppError::Unavailable => Some(5),
            AppError::Overloaded | AppError::TokenBusy(_) | AppError::ClientBusy(_) => Some(1),
            AppError::RateLimited(secs) => Some(*secs),
            _ => None,
        };
        if let Some(secs) = retry
            && let Ok(value) = HeaderValue::from_str(&secs.to_string())
        {
            res.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if let AppError::Merged { into, .. } = self
            && let Ok(value) = HeaderValue::from_str(&format!("/api/v1/groups/{into}"))
        {
            res.headers_mut().insert(header::LOCATION, value);
        }
        if matches!(
            self,
            AppError::Unauthorized(_) | AppError::SignInFirst { .. }
        ) {
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"gpu-triage\""),
            );
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.log();
        let (status, code) = self.status_and_code();
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.to_string(),
            },
        };
        let mut res = (status, Json(body)).into_response();
        self.add_headers(&mut res);
        res
    }
}

/// An [`AppError`] on a portal page: the same status, rendered as HTML.
#[derive(Debug)]
pub struct PageError(pub AppError);

impl<E: Into<AppError>> From<E> for PageError {
    fn from(err: E) -> Self {
        PageError(err.into())
    }
}
