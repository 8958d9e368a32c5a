//! Portal pages for API tokens, for admins only (issue 30 item 7): `/tokens` lists every token
//! (scopes, who created it, last use, expiry, state) with a form to create one and a
//! confirmed revoke per active token; the new token's secret is shown once, on the page that
//! answers the form (never stored, never shown again). Every form post carries the session's
//! CSRF token. The CLI (`gpu-triage token`) and the API (`/api/v1/tokens`) do the same.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::api_types::tokens::{TokenInfo, TokenState};
use crate::app::{self, tokens};
use crate::auth::Scope;
use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, TokenId};
use crate::web::{AppError, AppState, PageError};

/// The creation form's values as shown (blank, or what was sent when it was refused).
#[derive(Debug, Default)]
pub struct TokenFormView {
    pub name: String,
    /// (scope, ticked)
    pub scopes: Vec<(Scope, bool)>,
    pub expires_in_days: String,
}

impl TokenFormView {
    fn blank() -> TokenFormView {
        TokenFormView {
            scopes: Scope::ALL.map(|s| (s, s == Scope::Read)).to_vec(),
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
}

impl TokensPage {
    fn is_active(t: &TokenInfo) -> bool {
        t.state == TokenState::Active
    }
}

async fn list_page(
    state: &AppState,
    user: &PortalUser,
    form: TokenFormView,
    error: Option<String>,
) -> Result<TokensPage, PageError> {
    let all = tokens::list(&state.db).await?;
    Ok(TokensPage {
        layout: Layout::for_user(Some(user)),
        tokens: all.iter().map(TokenInfo::from).collect(),
        form,
        error,
        own_id: user.0.token_id(),
    })
}

/// `GET /tokens`: admins only.
pub async fn list_tokens(
    State(state): State<AppState>,
    user: PortalUser,
) -> Result<TokensPage, PageError> {
    user.require(&[Scope::Admin])?;
    list_page(&state, &user, TokenFormView::blank(), None).await
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
/// the list again with the form as sent and why (422).
pub async fn create_token(
    State(state): State<AppState>,
    CsrfForm { user, form }: CsrfForm<TokenForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
    let scopes = form.scopes();
    let view = TokenFormView {
        name: form.name.clone(),
        scopes: scopes.clone(),
        expires_in_days: form.expires_in_days.trim().to_owned(),
    };
    let refused = |message: String| async {
        let page = list_page(&state, &user, view, Some(message)).await?;
        Ok::<_, PageError>((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
    };
    let expires_in_days = match form.expires_in_days.trim() {
        "" => None,
        days => match days.parse::<u32>() {
            Ok(days) => Some(days),
            Err(_) => {
                return refused(format!(
                    "expires in: a whole number of days from 1 to {}, or empty for never",
                    tokens::EXPIRY_MAX_DAYS
                ))
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
    };
    match tokens::create(&state.db, new).await {
        Ok((record, secret)) => Ok(CreatedPage {
            layout: Layout::for_user(Some(&user)),
            token: TokenInfo::from(&record),
            secret,
        }
        .into_response()),
        Err(e @ app::Error::Invalid(..)) => refused(e.to_string()).await,
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

/// `POST /tokens/{id}/revoke`: the token stops working at once, with its portal sessions.
pub async fn revoke_token(
    State(state): State<AppState>,
    TokenId(id): TokenId,
    CsrfForm { user, form: _ }: CsrfForm<RevokeForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
    tokens::revoke_by_id(&state.db, id).await?;
    // Revoking the token this session signed in with ends the session too.
    let to = if Some(id) == user.0.token_id() {
        "/login"
    } else {
        "/tokens"
    };
    Ok(Redirect::to(to).into_response())
}
