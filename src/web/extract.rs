//! Extractors that carry their own rejections, so handlers never repeat error mapping: a JSON
//! body ([`JsonBody`]: 413 over the route's cap, 400 `bad_body`/`bad_json` otherwise), numeric
//! ids from the path ([`ReportId`], [`JobId`], [`GroupId`], [`WebhookId`]: anything but a
//! positive integer is an unknown id, 404), a project name from the path ([`ProjectName`]), and
//! a portal form checked against the session's CSRF token and the request's origin
//! ([`CsrfForm`]: 403). A rejection renders as the JSON error under `/api/` and as the HTML
//! error page elsewhere.

use axum::body::Bytes;
use axum::extract::{Form, FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::auth::PortalUser;
use super::{AppError, AppState, PageError};
use crate::api_types::ErrorCode;

/// An extractor's refusal, rendered for the surface the request came to.
#[derive(Debug)]
pub struct Rejection {
    error: AppError,
    page: bool,
}

impl Rejection {
    fn new(parts: &Parts, error: AppError) -> Rejection {
        Rejection {
            error,
            page: !parts.uri.path().starts_with("/api/"),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        if self.page {
            PageError(self.error).into_response()
        } else {
            self.error.into_response()
        }
    }
}

/// A JSON object request body of type `T`, read under the route's body limit.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = Rejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Rejection> {
        let (parts, body) = req.into_parts();
        let req = Request::from_parts(parts.clone(), body);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let error = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                AppError::TooLarge("the body is larger than this endpoint's limit".into())
            } else {
                AppError::BadRequest(ErrorCode::BadBody, e.body_text())
            };
            Rejection::new(&parts, error)
        })?;
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            Rejection::new(
                &parts,
                AppError::BadRequest(ErrorCode::BadJson, e.to_string()),
            )
        })?;
        json_object(value).map(JsonBody).map_err(|message| {
            Rejection::new(&parts, AppError::BadRequest(ErrorCode::BadJson, message))
        })
    }
}

/// Reads a parsed JSON body as `T`, the way its OpenAPI schema describes it: the body must be
/// an object (serde would read a struct from an array too, fields by position), and a number
/// with a zero fraction (`7486.0`) is the integer it equals, as JSON Schema counts it (serde
/// would refuse it for an integer field). The error is the message for the client.
pub(crate) fn json_object<T: DeserializeOwned>(mut value: serde_json::Value) -> Result<T, String> {
    if !value.is_object() {
        return Err("the body must be a JSON object".into());
    }
    integral_floats_as_integers(&mut value);
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Rewrites every float with a zero fraction that an `i64` holds exactly as that integer.
fn integral_floats_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    /// Below 2^53 every integer is exactly a float, so the float names one integer.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < EXACT) {
                // The bound above makes the cast exact.
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// A positive id from a path segment; anything else is an unknown id (404).
pub(crate) fn parse_id(raw: &str, what: &'static str) -> Result<i64, AppError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(AppError::NotFound(what))
}

/// Declares a path extractor for the numeric id of one kind of thing.
macro_rules! id_extractor {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub i64);

        impl<S: Send + Sync> FromRequestParts<S> for $name {
            type Rejection = Rejection;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Rejection> {
                let raw = Path::<String>::from_request_parts(parts, state)
                    .await
                    .map_err(|_| Rejection::new(parts, AppError::NotFound($what)))?;
                parse_id(&raw.0, $what)
                    .map($name)
                    .map_err(|e| Rejection::new(parts, e))
            }
        }
    };
}

id_extractor!(
    /// `{id}` of `/reports/{id}` and `/api/v1/reports/{id}`.
    ReportId,
    "report"
);
id_extractor!(
    /// `{id}` of `/jobs/{id}/...` and `/api/v1/jobs/{id}/...`.
    JobId,
    "job"
);
id_extractor!(
    /// `{id}` of `/groups/{id}` and `/api/v1/groups/{id}`.
    GroupId,
    "group"
);

id_extractor!(
    /// `{id}` of `/webhooks/{id}` and `/api/v1/webhooks/{id}`.
    WebhookId,
    "webhook"
);

id_extractor!(
    /// `{id}` of `/tokens/{id}` and `/api/v1/tokens/{id}`.
    TokenId,
    "token"
);
id_extractor!(
    /// `{id}` of `/people/{id}/...` and `/api/v1/people/{id}/...`.
    PersonId,
    "person"
);

/// `{project}` of `/api/v1/projects/{project}/...`: one path segment, percent-decoded (so a
/// project named `team/vision` is `team%2Fvision`); a segment that does not decode is an
/// unknown project (404).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectName(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ProjectName {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|p| ProjectName(p.0))
            .map_err(|_| Rejection::new(parts, AppError::NotFound("project")))
    }
}

/// A portal form that carries the session's CSRF token.
pub trait CsrfField {
    /// The `csrf` field as posted (empty when missing: refused with 403, not 400).
    fn csrf(&self) -> &str;
}

/// A form of type `T` posted by the signed-in user, from this site, with their session's CSRF
/// token: the user and the form.
#[derive(Debug)]
pub struct CsrfForm<T> {
    pub user: PortalUser,
    pub form: T,
}

impl<T: DeserializeOwned + CsrfField + Send> FromRequest<AppState> for CsrfForm<T> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, PageError> {
        let (mut parts, body) = req.into_parts();
        let user = PortalUser::from_request_parts(&mut parts, state).await?;
        let headers = parts.headers.clone();
        let req = Request::from_parts(parts, body);
        let Form(form) = Form::<T>::from_request(req, state)
            .await
            .map_err(|e| AppError::rejected(ErrorCode::BadForm, e.status(), e.body_text()))?;
        user.check_form(&headers, form.csrf())?;
        Ok(CsrfForm { user, form })
    }
}
