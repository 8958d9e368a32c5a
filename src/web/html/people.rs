//! The `/people` admin page (issue 31): everyone who signs in through the identity provider,
//! with their email, role, issuer, first and last sign-in, live sessions and tokens, and
//! whether they are disabled; admins disable a person (signed out everywhere, their tokens
//! revoked, their sign-in refused), enable them again, or end their sessions without
//! disabling them. Every action is a CSRF-checked form; others than admins get 403.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::api_types::people::PersonInfo;
use crate::app::tokens::Holder;
use crate::app::{self, people};
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, PersonId};
use crate::web::live::EndRequests;
use crate::web::scope::{Admin, ScopedUser};
use crate::web::state::AppState;

/// `GET /people`
#[derive(Template, WebTemplate)]
#[template(path = "people.html")]
pub struct PeoplePage {
    layout: Layout,
    people: Vec<PersonInfo>,
    /// The person this session is (their row says so and offers no disable).
    me: Option<i64>,
    /// Whether sign-in through a provider is configured (else the page says how).
    provider: Option<String>,
    /// Why the last action was refused.
    error: Option<String>,
}

/// The signed-in person, when the session is one.
fn me(user: &PortalUser) -> Option<i64> {
    match &user.0.holder {
        Holder::Person(p) => Some(p.id),
        Holder::Token(_) => None,
    }
}

async fn page(
    state: &AppState,
    user: &PortalUser,
    error: Option<String>,
) -> Result<PeoplePage, PageError> {
    let listed = people::list(&state.db).await?;
    Ok(PeoplePage {
        layout: Layout::for_user(Some(user)),
        people: listed.iter().map(PersonInfo::from).collect(),
        me: me(user),
        provider: state.oidc.as_ref().map(|o| o.provider_name.clone()),
        error,
    })
}

/// `GET /people`: admins only.
pub async fn list_people(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
) -> Result<PeoplePage, PageError> {
    page(&state, &user, None).await
}

/// Every action's form: only the CSRF token (the confirmation is the second button).
#[derive(Debug, Deserialize)]
pub struct ActionForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
}

impl CsrfField for ActionForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Back to the person's row, or the page again with why the action was refused (422).
async fn answer<T>(
    state: &AppState,
    user: &PortalUser,
    id: i64,
    done: Result<T, app::Error>,
) -> Result<Response, PageError> {
    match done {
        Ok(_) => Ok(Redirect::to(&format!("/people#person-{id}")).into_response()),
        Err(e @ app::Error::Invalid(..)) => {
            let page = page(state, user, Some(e.to_string())).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(AppError::from(e).into()),
    }
}

/// `POST /people/{id}/disable`: signs them out everywhere, revokes their tokens and refuses
/// their sign-in until enabled again.
pub async fn disable_person(
    State(state): State<AppState>,
    PersonId(id): PersonId,
    CsrfForm { user, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let done = people::disable(&state.db, id, me(&user)).await;
    if let Ok(d) = &done {
        tracing::info!(
            person = d.person.person.name.as_str(),
            by = user.name(),
            sessions = d.sessions_ended,
            tokens = d.tokens_revoked,
            "person disabled"
        );
    }
    let disabled = done.is_ok();
    let page = answer(&state, &user, id, done).await?;
    Ok(if disabled {
        (EndRequests::of_person(id), page).into_response()
    } else {
        page
    })
}

/// `POST /people/{id}/enable`: they may sign in again.
pub async fn enable_person(
    State(state): State<AppState>,
    PersonId(id): PersonId,
    CsrfForm { user, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let done = people::enable(&state.db, id).await;
    answer(&state, &user, id, done).await
}

/// `POST /people/{id}/sessions/revoke`: ends their sessions; they may sign in again. Ending
/// one's own signs this session out too.
pub async fn end_sessions(
    State(state): State<AppState>,
    PersonId(id): PersonId,
    CsrfForm { user, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let done = people::end_sessions(&state.db, id).await;
    if done.is_ok() && me(&user) == Some(id) {
        return Ok(Redirect::to("/login").into_response());
    }
    answer(&state, &user, id, done).await
}
