//! Portal pages for API tokens (issue 30 item 7, issue 31 item 4): `/tokens` lists the tokens
//! the session manages (an admin every token with its owner, a member their own) with a form
//! to create one and a confirmed revoke per active token; the new token's secret is shown
//! once, on the page that answers the form (never stored, never shown again). A member gives
//! only the scopes their role has; an admin person chooses between a token of their own and a
//! service token for CI or workers. Viewers get 403. Every form post carries the session's
//! CSRF token. The CLI (`gpu-triage token`) and the API (`/api/v1/tokens`) do the same for
//! admins.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::api_types::tokens::{TokenInfo, TokenState};
use crate::app::tokens::Manager;
use crate::app::{self, tokens};
use crate::auth::Scope;
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, TokenId};
use crate::web::live::EndRequests;
use crate::web::state::AppState;

/// The creation form's values as shown (blank, or what was sent when it was refused).
#[derive(Debug, Default)]
pub struct TokenFormView {
    pub name: String,
    /// (scope, ticked)
    pub scopes: Vec<(Scope, bool)>,
    pub expires_in_days: String,
    /// The new token is the admin person's own (else a service token).
    pub own: bool,
}

impl TokenFormView {
    /// The blank form: `read` ticked among the scopes `manager` may give; an admin person's
    /// token their own.
    fn blank(manager: Manager) -> TokenFormView {
        TokenFormView {
            scopes: (manager.grantable().into_iter())
                .map(|s| (s, s == Scope::Read))
                .collect(),
            own: true,
            ..TokenFormView::default()
        }
    }
}

/// `GET /tokens`
#[derive(Template, WebTemplate)]
#[template(path = "tokens.html")]
pub struct TokensPage {
    layout: Layout,
    tokens: Vec<TokenInfo>,
    form: TokenFormView,
    /// Why the last creation was refused.
    error: Option<String>,
    /// The token this session is signed in with (its revoke says so).
    own_id: Option<i64>,
    /// Every token is listed, with its owner (an admin); else the person's own.
    all: bool,
    /// The form offers "mine" or "service token" (an admin person).
    choose_owner: bool,
}

impl TokensPage {
    fn is_active(t: &TokenInfo) -> bool {
        t.state == TokenState::Active
    }
}

async fn list_page(
    state: &AppState,
    user: &PortalUser,
    manager: Manager,
    form: TokenFormView,
    error: Option<String>,
) -> Result<TokensPage, PageError> {
    let listed = tokens::list_for(&state.db, manager).await?;
    Ok(TokensPage {
        layout: Layout::for_user(Some(user)),
        tokens: listed.iter().map(TokenInfo::from).collect(),
        form,
        error,
        own_id: user.0.token_id(),
        all: manager.may_create_service_tokens(),
        choose_owner: manager.may_create_service_tokens() && manager.person_id().is_some(),
    })
}

/// `GET /tokens`: admins and members (their own); 403 for others.
pub async fn list_tokens(
    State(state): State<AppState>,
    user: PortalUser,
) -> Result<TokensPage, PageError> {
    let manager = Manager::of(&user.0).map_err(AppError::from)?;
    list_page(&state, &user, manager, TokenFormView::blank(manager), None).await
}

/// The creation form (checkboxes post `on` when ticked).
#[derive(Debug, Deserialize)]
pub struct TokenForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    scope_read: Option<String>,
    #[serde(default)]
    scope_ingest: Option<String>,
    #[serde(default)]
    scope_worker: Option<String>,
    #[serde(default)]
    scope_admin: Option<String>,
    #[serde(default)]
    expires_in_days: String,
    /// `service` for a service token; anything else (or absent) the admin person's own.
    #[serde(default)]
    owner: String,
}

impl CsrfField for TokenForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl TokenForm {
    fn scopes(&self) -> Vec<(Scope, bool)> {
        [
            (Scope::Ingest, &self.scope_ingest),
            (Scope::Read, &self.scope_read),
            (Scope::Worker, &self.scope_worker),
            (Scope::Admin, &self.scope_admin),
        ]
        .map(|(s, v)| (s, v.is_some()))
        .to_vec()
    }
}

/// The answer to a created token: its secret, this once.
#[derive(Template, WebTemplate)]
#[template(path = "token_created.html")]
pub struct CreatedPage {
    layout: Layout,
    token: TokenInfo,
    secret: String,
}

/// `POST /tokens`: 200 with the secret (not a redirect: it is shown on this answer only), or
/// the list again with the form as sent and why (422; 403 for a scope the role cannot give).
pub async fn create_token(
    State(state): State<AppState>,
    CsrfForm { user, form, .. }: CsrfForm<TokenForm>,
) -> Result<Response, PageError> {
    let manager = Manager::of(&user.0).map_err(AppError::from)?;
    let scopes = form.scopes();
    let grantable = manager.grantable();
    let own = form.owner != "service";
    let view = TokenFormView {
        name: form.name.clone(),
        // The form shows the scopes the manager may give, ticked as sent.
        scopes: (grantable.iter())
            .map(|g| (*g, scopes.iter().any(|(s, on)| s == g && *on)))
            .collect(),
        expires_in_days: form.expires_in_days.trim().to_owned(),
        own,
    };
    let (state_ref, user_ref) = (&state, &user);
    let refused = move |status: StatusCode, message: String| async move {
        let page = list_page(state_ref, user_ref, manager, view, Some(message)).await?;
        Ok::<_, PageError>((status, page).into_response())
    };
    let expires_in_days = match form.expires_in_days.trim() {
        "" => None,
        days => match days.parse::<u32>() {
            Ok(days) => Some(days),
            Err(_) => {
                return refused(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "expires in: a whole number of days from 1 to {}, or empty for never",
                        tokens::EXPIRY_MAX_DAYS
                    ),
                )
                .await;
            }
        },
    };
    let new = tokens::CreateToken {
        name: form.name,
        scopes: scopes
            .iter()
            .filter(|(_, on)| *on)
            .map(|(s, _)| *s)
            .collect(),
        expires_in_days,
        created_by: user.name().to_owned(),
        owner_person_id: None,
    };
    let layout = Layout::for_user(Some(&user));
    match tokens::create_for(&state.db, manager, new, own).await {
        Ok((record, secret)) => Ok(CreatedPage {
            layout,
            token: TokenInfo::from(&record),
            secret,
        }
        .into_response()),
        Err(e @ app::Error::Invalid(..)) => {
            refused(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).await
        }
        Err(e @ app::Error::Forbidden(..)) => refused(StatusCode::FORBIDDEN, e.to_string()).await,
        Err(e @ app::Error::Conflict(..)) => refused(StatusCode::CONFLICT, e.to_string()).await,
        Err(e) => Err(AppError::from(e).into()),
    }
}

/// The revoke form: only the CSRF token (the confirmation is the second button).
#[derive(Debug, Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    csrf: String,
}

impl CsrfField for RevokeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /tokens/{id}/revoke`: the token stops working at once, with its portal sessions. An
/// admin revokes any token, a member their own (404 for another's).
pub async fn revoke_token(
    State(state): State<AppState>,
    TokenId(id): TokenId,
    CsrfForm { user, .. }: CsrfForm<RevokeForm>,
) -> Result<Response, PageError> {
    let manager = Manager::of(&user.0).map_err(AppError::from)?;
    tokens::revoke_for(&state.db, manager, id).await?;
    // Revoking the token this session signed in with ends the session too.
    let to = if Some(id) == user.0.token_id() {
        "/login"
    } else {
        "/tokens"
    };
    Ok((EndRequests::of_token(id), Redirect::to(to)).into_response())
}
