//! Signing in to the portal with an API token (exchanged for an HttpOnly session cookie) and
//! signing out.

use askama::Template;
use askama_web::WebTemplate;
use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;

use crate::app::tokens;
use crate::web::auth::{OptionalUser, PortalUser, SESSION_COOKIE, check_origin, cookie_value};
use crate::web::{AppError, AppState, PageError};

/// How long a portal session lasts.
const SESSION_DAYS: i32 = 14;

/// The sign-in form.
#[derive(Template, WebTemplate)]
#[template(path = "login.html")]
pub struct LoginPage {
    layout: Layout,
    error: Option<String>,
}

/// `GET /login`.
pub async fn show_login(OptionalUser(user): OptionalUser) -> Response {
    if user.is_some() {
        return Redirect::to("/").into_response();
    }
    LoginPage {
        layout: Layout::for_user(None),
        error: None,
    }
    .into_response()
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /login`: a valid token starts a session; anything else re-shows the form with 401.
pub async fn create_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    // No session yet, so no CSRF token: a cross-site sign-in (into the attacker's account) is
    // refused by its Origin.
    check_origin(&headers)?;
    let record = tokens::authenticate(&state.db, form.token.trim()).await?;
    let Some(record) = record else {
        let page = LoginPage {
            layout: Layout::for_user(None),
            error: Some("That token is not valid (mistyped, or revoked).".into()),
        };
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    };
    let session = tokens::open_session(&state.db, &record, SESSION_DAYS).await?;
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        session.cookie,
        SESSION_DAYS * 86_400
    );
    let mut res = Redirect::to("/").into_response();
    res.headers_mut().insert(
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

/// `POST /logout`: ends the session and clears the cookie.
pub async fn delete_session(
    State(state): State<AppState>,
    user: PortalUser,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Result<Response, PageError> {
    user.check_form(&headers, &form.csrf)?;
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
