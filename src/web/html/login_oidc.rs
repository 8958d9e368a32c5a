//! Signing in through the team's OpenID Connect provider: `/login/oidc` sends the browser to
//! the provider, `/login/oidc/callback` takes it back and opens a session for the person.
//! Failures are pages, never loops: a provider that is down is 503 and a person without a
//! mapped group 403, both on the sign-in page with token sign-in still offered.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::login::{LoginPage, SESSION_DAYS, signed_in};
use crate::app::oidc::{self, OidcError, OidcSettings};
use crate::roles::PersonRole;
use crate::web::auth::{cookie_value, return_path};
use crate::web::extract::QueryParams;
use crate::web::{AppError, AppState, PageError};

/// The cookie that ties a provider's answer to the browser that started the sign-in.
const PENDING_COOKIE: &str = "gt_oidc";

/// `GET /login/oidc`'s query.
#[derive(Deserialize)]
pub struct StartQuery {
    #[serde(default)]
    next: Option<String>,
}

/// `GET /login/oidc[?next=/path]`: to the provider's authorization endpoint.
pub async fn start_sign_in(
    State(state): State<AppState>,
    QueryParams(query): QueryParams<StartQuery>,
) -> Result<Response, PageError> {
    let settings = state
        .oidc
        .clone()
        .ok_or(AppError::NotFound("identity provider"))?;
    let next = query
        .next
        .as_deref()
        .and_then(return_path)
        .map(str::to_owned);
    match oidc::begin(&state.db, settings.clone(), next.clone()).await {
        Ok(started) => {
            let mut res = Redirect::to(&started.authorize_url).into_response();
            set_pending_cookie(
                &state,
                &mut res,
                &started.cookie,
                oidc::PENDING_MINUTES * 60,
            )?;
            Ok(res)
        }
        Err(e) => failure_page(&state, &settings, e, next),
    }
}

/// `GET /login/oidc/callback`'s query: the code and state, or the provider's error.
#[derive(Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    state: Option<String>,
    /// The issuer that answered (RFC 9207), when the provider says.
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

/// `GET /login/oidc/callback`: finishes the sign-in and lands on the page asked for (or home).
pub async fn finish_sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<CallbackQuery>,
) -> Result<Response, PageError> {
    let settings = state
        .oidc
        .clone()
        .ok_or(AppError::NotFound("identity provider"))?;
    let cookie = cookie_value(&headers, PENDING_COOKIE);
    let outcome = match (&query.error, query.code, query.state) {
        (Some(error), _, _) => Err(OidcError::Refused(format!(
            "the identity provider did not sign you in ({error}{})",
            query
                .error_description
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        ))),
        (None, Some(code), Some(st)) => {
            if query
                .iss
                .as_deref()
                .is_some_and(|iss| iss != settings.issuer)
            {
                Err(OidcError::Refused(
                    "the answer comes from another issuer than this portal's provider".into(),
                ))
            } else {
                oidc::finish(&state.db, settings.clone(), cookie, code, &st, SESSION_DAYS).await
            }
        }
        _ => Err(OidcError::Refused(
            "the provider's answer lacks its code or state: start again".into(),
        )),
    };
    let mut res = match outcome {
        Ok(done) => {
            tracing::info!(person = %done.name, role = %done.role, "signed in through the provider");
            signed_in(&state, &done.session.cookie, done.next_path.as_deref())?
        }
        Err(e) => failure_page(&state, &settings, e, None)?,
    };
    set_pending_cookie(&state, &mut res, "", 0)?;
    Ok(res)
}

/// Sets (or with `max_age` 0, clears) the pending sign-in cookie, scoped to `/login/oidc`.
fn set_pending_cookie(
    state: &AppState,
    res: &mut Response,
    value: &str,
    max_age: i32,
) -> Result<(), PageError> {
    let secure = if state.secure_cookies { "; Secure" } else { "" };
    // Lax, not Strict: the provider's redirect back is a cross-site top-level navigation.
    let cookie = format!(
        "{PENDING_COOKIE}={value}; Path=/login/oidc; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}"
    );
    res.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| AppError::Internal(e.into()))?,
    );
    Ok(())
}

/// The sign-in page with what went wrong and the status that says it.
fn failure_page(
    state: &AppState,
    settings: &OidcSettings,
    error: OidcError,
    next: Option<String>,
) -> Result<Response, PageError> {
    let provider = &settings.provider_name;
    let (status, message) = match error {
        OidcError::Unavailable(reason) => {
            tracing::warn!(issuer = %settings.issuer, %reason, "identity provider unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "Sign-in with {provider} is unavailable right now ({reason}). \
                     Try again shortly, or sign in with an API token below."
                ),
            )
        }
        OidcError::Refused(reason) => {
            tracing::debug!(%reason, "sign-in through the provider refused");
            (
                StatusCode::BAD_REQUEST,
                format!("Sign-in refused: {reason}."),
            )
        }
        OidcError::NoRole => (StatusCode::FORBIDDEN, no_role_message(settings)),
        OidcError::Disabled => (
            StatusCode::FORBIDDEN,
            "Your account is disabled in this portal. Ask an admin to enable it.".to_owned(),
        ),
        OidcError::Db(e) => return Err(AppError::from(crate::app::Error::Db(e)).into()),
        OidcError::Internal(e) => return Err(AppError::Internal(e).into()),
    };
    Ok((status, LoginPage::new(state, Some(message), next)).into_response())
}

/// Names the role missing and the groups that would give each.
fn no_role_message(settings: &OidcSettings) -> String {
    let roles: Vec<String> = PersonRole::ALL
        .into_iter()
        .rev()
        .filter_map(|role| {
            let groups = settings.roles.groups_for(role);
            (!groups.is_empty()).then(|| format!("{role} (group {})", groups.join(" or ")))
        })
        .collect();
    if roles.is_empty() {
        return "You need a role in this portal, and none is given through the identity provider \
                yet: ask an admin to set the --oidc-*-groups settings."
            .to_owned();
    }
    format!(
        "You need a role in this portal: your account at {} is in none of the groups that give \
         one. Roles: {}. Ask to be added to one (the viewer role is enough to read).",
        settings.provider_name,
        roles.join(", ")
    )
}
