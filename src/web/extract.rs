//! Extractors that carry their own rejections, so handlers never repeat error mapping:
//! - a query string ([`QueryParams`]: 400 `bad_query`; [`QueryHints`] for parameters that only
//!   adjust a page and are ignored when malformed);
//! - a JSON body ([`JsonBody`]: 413 over the route's cap, 400 `bad_body`/`bad_json` otherwise;
//!   [`ShapedJson`] for endpoints that also check `Content-Type` and answer a body of the wrong
//!   shape with their own 422 code);
//! - a raw log body ([`RawLog`]: 413 naming the classify cap, 400 `bad_body`);
//! - a multipart body ([`MultipartBody`] for the API, [`MultipartForm`] for the portal's start
//!   page: 415 when the body is not `multipart/form-data`) and the `Idempotency-Key` header
//!   ([`IdempotencyKey`]: 400 `bad_idempotency_key`);
//! - numeric ids from the path ([`ReportId`], [`JobId`], [`GroupId`], [`ChangeId`], [`WebhookId`]: anything
//!   but a positive integer is an unknown id, 404) and a project name ([`ProjectName`]);
//! - a portal form checked against the session's CSRF token and the request's origin
//!   ([`CsrfForm`]: 403).
//!
//! A rejection renders as the JSON error under `/api/` and as the HTML error page elsewhere.
//! This is the one module that reads axum's own `Query`, `Form`, `Json`, `Bytes` and
//! `Multipart` extractors and their rejection types: `clippy.toml` forbids them everywhere
//! else (`disallowed-types`), and the impls here allow them, each saying so.

use std::convert::Infallible;
use std::marker::PhantomData;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Multipart, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::auth::PortalUser;
use super::error::{AppError, PageError};
use super::scope::{ScopeSet, SignedIn};
use super::state::AppState;
use crate::api_types::ErrorCode;

/// An extractor's refusal, rendered for the surface the request came to.
#[derive(Debug)]
pub struct Rejection {
    error: AppError,
    page: bool,
}

impl Rejection {
    fn new(parts: &Parts, error: AppError) -> Rejection {
        Rejection::at(&parts.uri, error)
    }

    /// `error` for a request to `uri`: a page unless the path is under `/api/`.
    fn at(uri: &Uri, error: AppError) -> Rejection {
        Rejection {
            error,
            page: !uri.path().starts_with("/api/"),
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
        let UniqueKeys(value) = serde_json::from_slice(&bytes).map_err(|e| {
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

/// A JSON value whose objects name each key once. serde_json keeps the last of repeated keys,
/// so `{"scopes":["read"],"scopes":["admin"]}` would mean whatever the last one says while a
/// proxy, a log or an audit that reads the first saw another request; a body with a repeated
/// key is refused as malformed instead (400 `bad_json`, naming the key).
#[derive(Debug)]
pub(crate) struct UniqueKeys(pub serde_json::Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor).map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(items.into())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the key {key:?} appears more than once in one object"
                )));
            }
            let UniqueKeys(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(object.into())
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

/// A JSON request body that names its own refusals, read with [`ShapedJson`]: the 422 code
/// for JSON that parses but is not the documented object, and how a body sent without
/// `Content-Type: application/json` is answered.
pub trait JsonShape: DeserializeOwned {
    /// The code of the 422 for a body that is JSON but not this type's object.
    const SHAPE_ERROR: ErrorCode;
    /// `true`: a body without `Content-Type: application/json` is 415
    /// `unsupported_media_type`; `false`: it is refused like malformed JSON (400 `bad_json`).
    const MISSING_CONTENT_TYPE_IS_415: bool;
}

/// A JSON request body of type `T`, read by axum's JSON extractor (which checks the
/// `Content-Type`) under the route's body limit: 413 over the cap, 400 `bad_json` for a body
/// that is not JSON (415 instead for a missing `Content-Type` where `T` says so), and 422 with
/// `T`'s code for JSON that is not `T`'s object (see [`json_object`]).
#[derive(Debug)]
pub struct ShapedJson<T>(pub T);

// The wrapper itself: the one place that reads axum's `Json` extractor and its rejection.
#[allow(clippy::disallowed_types)]
impl<T: JsonShape, S: Send + Sync> FromRequest<S> for ShapedJson<T> {
    type Rejection = Rejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Rejection> {
        use axum::extract::rejection::JsonRejection;
        let uri = req.uri().clone();
        let axum::Json(UniqueKeys(value)) = axum::Json::<UniqueKeys>::from_request(req, state)
            .await
            .map_err(|e| {
                let error = match e {
                    JsonRejection::MissingJsonContentType(_) if T::MISSING_CONTENT_TYPE_IS_415 => {
                        AppError::UnsupportedMediaType(
                            "expected Content-Type: application/json".into(),
                        )
                    }
                    other => {
                        AppError::rejected(ErrorCode::BadJson, other.status(), other.body_text())
                    }
                };
                Rejection::at(&uri, error)
            })?;
        json_object(value)
            .map(ShapedJson)
            .map_err(|m| Rejection::at(&uri, AppError::Unprocessable(T::SHAPE_ERROR, m)))
    }
}

/// A query string read as `T`: 400 `bad_query` with the parser's message when it is not one.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

// The wrapper itself: the one place that reads axum's `Query` extractor.
#[allow(clippy::disallowed_types)]
impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Rejection> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(params)| QueryParams(params))
            .map_err(|e| {
                Rejection::new(
                    parts,
                    AppError::BadRequest(ErrorCode::BadQuery, e.body_text()),
                )
            })
    }
}

/// A query string of hints read as `T`, or `T::default()` when it does not read as one: for
/// parameters that only adjust a page (a group page's `?merged_from=`), where a wrong one
/// changes nothing rather than refusing the page. Never refuses a request.
#[derive(Debug)]
pub struct QueryHints<T>(pub T);

// The wrapper itself: the one place that reads axum's `Query` extractor.
#[allow(clippy::disallowed_types)]
impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequestParts<S> for QueryHints<T> {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(QueryHints(
            axum::extract::Query::<T>::try_from_uri(&parts.uri)
                .map(|axum::extract::Query(hints)| hints)
                .unwrap_or_default(),
        ))
    }
}

/// A log sent as the whole request body (`POST /api/v1/classify`), read under the route's
/// cap: 413 naming `--max-classify-bytes`' value, 400 `bad_body` when it cannot be read.
#[derive(Debug)]
pub struct RawLog(pub Bytes);

// The wrapper itself: the one place that maps axum's `Bytes` rejection for a log.
#[allow(clippy::disallowed_types)]
impl FromRequest<AppState> for RawLog {
    type Rejection = Rejection;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Rejection> {
        let uri = req.uri().clone();
        Bytes::from_request(req, state)
            .await
            .map(RawLog)
            .map_err(|e| {
                let error = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    AppError::TooLarge(format!(
                        "the log is larger than the {}-byte limit",
                        state.limits.max_classify_bytes
                    ))
                } else {
                    AppError::BadRequest(ErrorCode::BadBody, e.body_text())
                };
                Rejection::at(&uri, error)
            })
    }
}

/// A `multipart/form-data` API body, its parts read one by one by the handler as they stream
/// in: 415 `unsupported_media_type` when the request is not one.
#[derive(Debug)]
pub struct MultipartBody(pub Multipart);

// The wrapper itself: the one place that maps axum's `Multipart` rejection for the API.
#[allow(clippy::disallowed_types)]
impl<S: Send + Sync> FromRequest<S> for MultipartBody {
    type Rejection = Rejection;

    async fn from_request(req: Request, state: &S) -> Result<Self, Rejection> {
        let uri = req.uri().clone();
        Multipart::from_request(req, state)
            .await
            .map(MultipartBody)
            .map_err(|e| {
                Rejection::at(
                    &uri,
                    AppError::UnsupportedMediaType(format!(
                        "expected a multipart/form-data body: {}",
                        e.body_text()
                    )),
                )
            })
    }
}

/// The portal start page's `multipart/form-data` form. Unlike the other extractors it does not
/// refuse the request itself: the page answers a user without the ingest scope with 403 and
/// what they typed (read from this form when it is one), so the 415 for a body that is not
/// multipart waits until the handler asks for the [`fields`](MultipartForm::fields).
#[derive(Debug)]
pub struct MultipartForm(Result<Multipart, AppError>);

impl MultipartForm {
    /// The form's parts, to store the report: 415 `unsupported_media_type` when the body is
    /// not `multipart/form-data`.
    pub fn fields(self) -> Result<Multipart, AppError> {
        self.0
    }

    /// The form's parts when the body is a multipart form, to show back what was typed.
    #[must_use]
    pub fn readable(self) -> Option<Multipart> {
        self.0.ok()
    }
}

// The wrapper itself: the one place that maps axum's `Multipart` rejection for the portal.
#[allow(clippy::disallowed_types)]
impl<S: Send + Sync> FromRequest<S> for MultipartForm {
    type Rejection = Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Infallible> {
        Ok(MultipartForm(
            Multipart::from_request(req, state)
                .await
                .map_err(|e| AppError::UnsupportedMediaType(e.body_text())),
        ))
    }
}

/// The `Idempotency-Key` header of an upload, when sent: 400 `bad_idempotency_key` unless it
/// is 1-200 printable ASCII characters (spaces around it are dropped).
#[derive(Debug)]
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Rejection> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(IdempotencyKey(None));
        };
        let key = value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|k| !k.is_empty() && k.len() <= 200 && k.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                Rejection::new(
                    parts,
                    AppError::BadRequest(
                        ErrorCode::BadIdempotencyKey,
                        "Idempotency-Key must be 1-200 printable ASCII characters".into(),
                    ),
                )
            })?;
        Ok(IdempotencyKey(Some(key.to_owned())))
    }
}

/// A positive id from a path segment, spelled canonically ([`crate::ids::parse`]: `01` is not
/// id 1); anything else is an unknown id (404).
pub(crate) fn parse_id(raw: &str, what: &'static str) -> Result<i64, AppError> {
    crate::ids::parse(raw).ok_or(AppError::NotFound(what))
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
    /// `{id}` of `/groups/changes/{id}/undo` and `/api/v1/groups/changes/{id}/undo`.
    ChangeId,
    "change"
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

/// A form of type `T` posted by the signed-in user who holds one of `S`'s scopes, from this
/// site, with their session's CSRF token: the user and the form. A user without the scope gets
/// the 403 page before the form is read, as an API token without it does.
#[derive(Debug)]
pub struct CsrfForm<T, S = SignedIn> {
    pub user: PortalUser,
    pub form: T,
    /// Private, so a `CsrfForm` exists only where the scope was checked.
    scopes: PhantomData<S>,
}

// The wrapper itself: the one place that reads axum's `Form` extractor.
#[allow(clippy::disallowed_types)]
impl<T: DeserializeOwned + CsrfField + Send, S: ScopeSet> FromRequest<AppState> for CsrfForm<T, S> {
    type Rejection = PageError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, PageError> {
        let (mut parts, body) = req.into_parts();
        let user = PortalUser::from_request_parts(&mut parts, state).await?;
        S::admit(&user)?;
        let headers = parts.headers.clone();
        let req = Request::from_parts(parts, body);
        let axum::extract::Form(form) = axum::extract::Form::<T>::from_request(req, state)
            .await
            .map_err(|e| AppError::rejected(ErrorCode::BadForm, e.status(), e.body_text()))?;
        user.check_form(&headers, form.csrf())?;
        Ok(CsrfForm {
            user,
            form,
            scopes: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::UniqueKeys;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_and_everything_else_reads_as_serde_json_does() {
        for body in [
            r#"{"scopes":["read"],"scopes":["admin"]}"#,
            r#"{"a":{"b":1,"b":2}}"#,
            r#"[{"x":1},{"x":2,"x":3}]"#,
        ] {
            let err = serde_json::from_str::<UniqueKeys>(body).expect_err(body);
            assert!(err.to_string().contains("more than once"), "{err}");
        }
        for body in [
            r#"{"a":[1,2.5,-3,"x",null,true,{"a":1}],"b":{}}"#,
            "[]",
            "7",
            "\"s\"",
        ] {
            let UniqueKeys(value) = serde_json::from_str(body).expect(body);
            let plain: serde_json::Value = serde_json::from_str(body).expect(body);
            assert_eq!(value, plain, "{body}");
        }
    }
}
