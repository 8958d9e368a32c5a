//! Signing in to the portal with an API token (exchanged for an HttpOnly session cookie) and
//! signing out.

use askama::Template;
use askama_web::WebTemplate;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;

use crate::api_types::ErrorCode;
use crate::app::tokens;
use crate::web::auth::{OptionalUser, SESSION_COOKIE, check_origin, cookie_value, return_path};
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, QueryParams};
use crate::web::limits;
use crate::web::state::AppState;

/// How long a portal session lasts.
pub const SESSION_DAYS: i32 = 14;

/// The sign-in form.
#[derive(Template, WebTemplate)]
#[template(path = "login.html")]
pub struct LoginPage {
    layout: Layout,
    error: Option<String>,
    /// Where to go after signing in (a checked relative path).
    next: Option<String>,
    /// The identity provider's name, when sign-in through it is configured.
    oidc: Option<String>,
}

impl LoginPage {
    /// The sign-in page with `error` shown (`None`: none), returning to `next` afterwards.
    #[must_use]
    pub fn new(state: &AppState, error: Option<String>, next: Option<String>) -> LoginPage {
        LoginPage {
            layout: Layout::for_user(None),
            error,
            next,
            oidc: state.oidc.as_ref().map(|o| o.provider_name.clone()),
        }
    }
}

/// `GET /login`'s query.
#[derive(Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    next: Option<String>,
}

/// `GET /login[?next=/path]`: the form, or straight to `next` (else home) when signed in.
pub async fn show_login(
    State(state): State<AppState>,
    OptionalUser(user): OptionalUser,
    QueryParams(query): QueryParams<LoginQuery>,
) -> Response {
    let next = query
        .next
        .as_deref()
        .and_then(return_path)
        .map(str::to_owned);
    if user.is_some() {
        return Redirect::to(next.as_deref().unwrap_or("/")).into_response();
    }
    LoginPage::new(&state, None, next).into_response()
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    /// Where to go afterwards (checked by [`return_path`]).
    #[serde(default)]
    next: Option<String>,
}

/// The largest sign-in body: the form holds one token (`token=gtr_` and 64 hex digits) and a
/// return path of at most [`RETURN_PATH_MAX_BYTES`](crate::web::auth::RETURN_PATH_MAX_BYTES) (percent-encoded: up to three bytes each),
/// so anything larger is not a sign-in (SECURITY.md item 18).
pub const SIGN_IN_MAX_BYTES: usize = 4096;

/// Reads the sign-in form: refused at once when its declared length is over
/// [`SIGN_IN_MAX_BYTES`], cut off there when it does not declare one, and refused with 408
/// when it has not arrived within `deadline` (`--sign-in-deadline-secs`): a client that sends
/// its headers and then stalls gives its anonymous slot back then, not after the general
/// body-rate window.
async fn read_sign_in(
    headers: &HeaderMap,
    body: Body,
    deadline: Duration,
) -> Result<LoginForm, AppError> {
    let too_large = || {
        AppError::TooLarge(format!(
            "a sign-in form is at most {SIGN_IN_MAX_BYTES} bytes"
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > SIGN_IN_MAX_BYTES as u64) {
        return Err(too_large());
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .starts_with("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(AppError::UnsupportedMediaType(
            "sign in with the form (application/x-www-form-urlencoded)".into(),
        ));
    }
    let bytes = tokio::time::timeout(deadline, axum::body::to_bytes(body, SIGN_IN_MAX_BYTES))
        .await
        .map_err(|_| {
            AppError::BodyTooSlow(format!(
                "the sign-in form did not arrive within {} s",
                deadline.as_secs()
            ))
        })?
        .map_err(|e| {
            if limits::find_source::<http_body_util::LengthLimitError>(&e).is_some() {
                too_large()
            } else if let Some(slow) = limits::BodyTooSlow::find(&e) {
                AppError::BodyTooSlow(slow.to_string())
            } else {
                AppError::BadRequest(
                    ErrorCode::BadForm,
                    "the sign-in form could not be read".into(),
                )
            }
        })?;
    serde_urlencoded::from_bytes(&bytes).map_err(|e| {
        AppError::BadRequest(ErrorCode::BadForm, format!("a malformed sign-in form: {e}"))
    })
}

/// `POST /login`: a valid token starts a session; anything else re-shows the form with 401.
pub async fn create_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PageError> {
    // No session yet, so no CSRF token: a cross-site sign-in (into the attacker's account) is
    // refused by its Origin, before any of the body is read.
    check_origin(&headers)?;
    let form = read_sign_in(&headers, body, state.limits.sign_in_deadline).await?;
    let next = form
        .next
        .as_deref()
        .and_then(return_path)
        .map(str::to_owned);
    let record = tokens::authenticate(&state.db, form.token.trim()).await?;
    let Some(record) = record else {
        let page = LoginPage::new(
            &state,
            Some("That token is not valid (mistyped, or revoked).".into()),
            next,
        );
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    };
    let session = tokens::open_session(&state.db, &record, SESSION_DAYS).await?;
    signed_in(&state, &session.cookie, next.as_deref())
}

/// The answer to a finished sign-in (token or provider): the session cookie set, and a
/// redirect to `next` (a checked return path), else home.
pub fn signed_in(
    state: &AppState,
    cookie: &str,
    next: Option<&str>,
) -> Result<Response, PageError> {
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        SESSION_DAYS * 86_400
    );
    let mut res = Redirect::to(next.unwrap_or("/")).into_response();
    res.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| AppError::Internal(e.into()))?,
    );
    Ok(res)
}

/// The sign-out form's fields.
#[derive(Deserialize)]
pub struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

impl CsrfField for LogoutForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /logout`: ends the session and clears the cookie.
pub async fn delete_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    _: CsrfForm<LogoutForm>,
) -> Result<Response, PageError> {
    if let Some(cookie) = cookie_value(&headers, SESSION_COOKIE) {
        tokens::end_session(&state.db, cookie).await?;
    }
    let mut res = Redirect::to("/login").into_response();
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("gt_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"),
    );
    Ok(res)
}
