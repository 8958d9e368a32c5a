//! Signing in through the team's OpenID Connect provider: `/login/oidc` sends the browser to
//! the provider, `/login/oidc/callback` takes it back and opens a session for the person.
//! Failures are pages, never loops: a provider that is down is 503 and a person without a
//! mapped group 403, both on the sign-in page with token sign-in still offered. Starts are
//! rate limited per address and in total ([`crate::web::sign_in_rate`]): 429 or 503 with
//! `Retry-After`, on the same page.
//!
//! What the provider and the browser send is untrusted: every such value is logged with
//! `Debug` formatting (`?value`: quoted, newlines and escapes escaped), so it cannot forge a
//! log line.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::login::{LoginPage, SESSION_DAYS, signed_in};
use crate::app::oidc::claims::{GroupsSource, NoDefault};
use crate::app::oidc::{self, OidcError, OidcSettings, Refusal};
use crate::roles::PersonRole;
use crate::web::anonymous::ClientAddr;
use crate::web::auth::{cookie_value, return_path};
use crate::web::error::{AppError, PageError};
use crate::web::extract::QueryParams;
use crate::web::sign_in_rate::Refused;
use crate::web::state::AppState;

/// The cookie that ties a provider's answer to the browser that started the sign-in.
const PENDING_COOKIE: &str = "gt_oidc";

/// `GET /login/oidc`'s query.
#[derive(Deserialize)]
pub struct StartQuery {
    #[serde(default)]
    next: Option<String>,
}

/// `GET /login/oidc[?next=/path]`: to the provider's authorization endpoint, unless this
/// address (or everyone) started too many sign-ins lately.
pub async fn start_sign_in(
    State(state): State<AppState>,
    client: Option<Extension<ClientAddr>>,
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
    if let Err(refused) = state.sign_in_rate.take(client.map(|c| c.0.0.ip())) {
        return Ok(rate_limited_page(&state, &settings, refused, next));
    }
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
    // Only an answer that reached the comparison of `state` may end the browser's sign-in
    // under way: a forged callback (a provider error or a wrong state sent to the victim's
    // browser) must leave the cookie for the real one.
    let mut compared = false;
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
                let done =
                    oidc::finish(&state.db, settings.clone(), cookie, code, &st, SESSION_DAYS)
                        .await;
                compared = !matches!(done, Err(OidcError::StateDiffers));
                done
            }
        }
        _ => Err(OidcError::Refused(
            "the provider's answer lacks its code or state: start again".into(),
        )),
    };
    let mut res = match outcome {
        Ok(done) => {
            tracing::info!(person = ?done.name, role = %done.role, "signed in through the provider");
            signed_in(&state, &done.session.cookie, done.next_path.as_deref())?
        }
        Err(e) => failure_page(&state, &settings, e, None)?,
    };
    if compared {
        set_pending_cookie(&state, &mut res, "", 0)?;
    }
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
            tracing::warn!(issuer = %settings.issuer, ?reason, "identity provider unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "Sign-in with {provider} is unavailable right now ({reason}). \
                     Try again shortly, or sign in with an API token below."
                ),
            )
        }
        OidcError::Refused(reason) => {
            tracing::debug!(?reason, "sign-in through the provider refused");
            (
                StatusCode::BAD_REQUEST,
                format!("Sign-in refused: {reason}."),
            )
        }
        OidcError::StateDiffers => {
            tracing::debug!("sign-in through the provider refused: state differs");
            (
                StatusCode::BAD_REQUEST,
                format!("Sign-in refused: {}.", OidcError::StateDiffers),
            )
        }
        OidcError::Full => {
            tracing::debug!("sign-in refused: the pending sign-ins are full");
            let mut res = (
                StatusCode::SERVICE_UNAVAILABLE,
                LoginPage::new(state, Some(full_message(settings)), next),
            )
                .into_response();
            set_retry_after(&mut res, oidc::FULL_RETRY_SECS);
            return Ok(res);
        }
        OidcError::NoRole(refusal) => (StatusCode::FORBIDDEN, no_role_message(settings, &refusal)),
        OidcError::Disabled => (
            StatusCode::FORBIDDEN,
            "Your account is disabled in this portal. Ask an admin to enable it.".to_owned(),
        ),
        OidcError::Db(e) => return Err(AppError::from(crate::app::Error::Db(e)).into()),
        OidcError::Internal(e) => return Err(AppError::Internal(e).into()),
    };
    Ok((status, LoginPage::new(state, Some(message), next)).into_response())
}

/// The most received groups named on the refusal page.
const GROUPS_SHOWN: usize = 20;

/// Says what the provider sent (the groups and where from, the email where the default role
/// needs one), the groups each role needs, and what to ask for.
fn no_role_message(settings: &OidcSettings, refusal: &Refusal) -> String {
    let roles: Vec<String> = PersonRole::ALL
        .into_iter()
        .rev()
        .filter_map(|role| {
            let groups = settings.roles.groups_for(role);
            (!groups.is_empty()).then(|| format!("{role} (group {})", groups.join(" or ")))
        })
        .collect();
    let provider = &settings.provider_name;
    let received = match refusal.groups_source {
        GroupsSource::Absent => format!(
            "{provider} sent no groups claim (neither in the ID token nor at its userinfo \
             endpoint)"
        ),
        source => {
            let from = if source == GroupsSource::IdToken {
                "the ID token"
            } else {
                "the userinfo answer"
            };
            if refusal.groups.is_empty() {
                format!("{provider} sent an empty groups claim (in {from})")
            } else {
                let mut shown: Vec<String> = refusal
                    .groups
                    .iter()
                    .take(GROUPS_SHOWN)
                    .map(|g| format!("\u{201c}{g}\u{201d}"))
                    .collect();
                if refusal.groups.len() > GROUPS_SHOWN {
                    shown.push(format!("and {} more", refusal.groups.len() - GROUPS_SHOWN));
                }
                format!(
                    "{provider} says your groups are {} (in {from})",
                    shown.join(", ")
                )
            }
        }
    };
    let needed = if roles.is_empty() {
        "No group gives a role here yet: ask an admin to set the --oidc-*-groups settings."
            .to_owned()
    } else {
        format!(
            "Roles: {}. Ask to be added to one (the viewer role is enough to read).",
            roles.join(", ")
        )
    };
    let default = match (&settings.default_role.role, &refusal.no_default) {
        (Some(role), NoDefault::NoEmail) => format!(
            " People with a verified email at {} get the {role} role; {provider} sent no email.",
            settings.default_role.allowed_domains.join(" or ")
        ),
        (Some(role), NoDefault::Unverified) => format!(
            " People with a verified email at {} get the {role} role; {provider} does not say \
             your email {} is verified.",
            settings.default_role.allowed_domains.join(" or "),
            refusal.email
        ),
        (Some(role), NoDefault::OtherDomain) => format!(
            " People with a verified email at {} get the {role} role; yours is {}.",
            settings.default_role.allowed_domains.join(" or "),
            refusal.email
        ),
        _ => String::new(),
    };
    format!(
        "You need a role in this portal: {received}, and none of them gives one. {needed}{default}"
    )
}

/// The sign-in page saying the start was refused for its rate, with `Retry-After`.
fn rate_limited_page(
    state: &AppState,
    settings: &OidcSettings,
    refused: Refused,
    next: Option<String>,
) -> Response {
    let provider = &settings.provider_name;
    let (status, secs, message) = match refused {
        Refused::Address { retry_after_secs } => {
            tracing::debug!(
                retry_after_secs,
                "sign-in start refused: address over its rate"
            );
            (
                StatusCode::TOO_MANY_REQUESTS,
                retry_after_secs,
                format!(
                    "Too many sign-ins with {provider} were started from your address: retry \
                     in {retry_after_secs} s, or sign in with an API token below."
                ),
            )
        }
        Refused::Total { retry_after_secs } => {
            tracing::debug!(retry_after_secs, "sign-in start refused: total rate spent");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                retry_after_secs,
                format!(
                    "Too many sign-ins with {provider} are being started right now: retry in \
                     {retry_after_secs} s, or sign in with an API token below."
                ),
            )
        }
    };
    let mut res = (status, LoginPage::new(state, Some(message), next)).into_response();
    set_retry_after(&mut res, secs);
    res
}

fn full_message(settings: &OidcSettings) -> String {
    format!(
        "Too many sign-ins with {} are under way right now: retry in {} s, or sign in with an \
         API token below.",
        settings.provider_name,
        oidc::FULL_RETRY_SECS
    )
}

fn set_retry_after(res: &mut Response, secs: u64) {
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
}
