//! Authorisation before parsing (SECURITY.md item 21): an API handler names the scope it needs
//! in its signature, as the extractor [`Scoped<S>`], instead of checking the token inside its
//! body. axum runs a handler's extractors in argument order and every handler takes `Scoped`
//! before its path, query and body extractors, so a token without the scope gets 403 whatever
//! it sends; only an authorised request learns that its path, query or body is malformed.
//!
//! Portal pages do the same with [`ScopedUser<S>`]: the signed-in user, refused with the 403
//! page before the page's query is read; forms with `CsrfForm<T, S>` (`extract.rs`), refused
//! before the form is read.
//!
//! The scope sets are types (`Scoped<Worker>`, `Scoped<IngestOrAdmin>`) rather than a runtime
//! argument so the requirement is fixed where the handler is declared, next to its
//! `#[utoipa::path(security(...))]`, and cannot be forgotten on a later code path.

use std::marker::PhantomData;
use std::ops::Deref;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::auth::{ApiToken, PortalUser, token_actor};
use super::error::{AppError, PageError};
use super::state::AppState;
use crate::actor::Actor;
use crate::app::tokens::TokenRecord;
use crate::auth::Scope;

/// A set of scopes, any one of which (or `admin`) lets a token call an operation.
pub trait ScopeSet: Send + Sync + 'static {
    /// The scopes accepted.
    const SCOPES: &'static [Scope];

    /// Whether the signed-in `user` may go on: 403 unless they hold one of [`Self::SCOPES`].
    fn admit(user: &PortalUser) -> Result<(), AppError> {
        user.require(Self::SCOPES)
    }
}

/// Any signed-in person or token, whatever their scopes: forms about one's own account (a
/// token of one's own, signing out), whose handler decides.
#[derive(Debug)]
pub struct SignedIn;

impl ScopeSet for SignedIn {
    const SCOPES: &'static [Scope] = &[];

    fn admit(_: &PortalUser) -> Result<(), AppError> {
        Ok(())
    }
}

/// Reading reports, groups, search and rules.
#[derive(Debug)]
pub struct Read;
/// Uploading logs.
#[derive(Debug)]
pub struct Ingest;
/// Claiming and completing reproduction jobs.
#[derive(Debug)]
pub struct Worker;
/// Managing rules, webhooks and retention.
#[derive(Debug)]
pub struct Admin;
/// Classifying a log without storing it: uploaders and readers alike.
#[derive(Debug)]
pub struct IngestOrRead;
/// Triage (state, assignee, fixes).
#[derive(Debug)]
pub struct IngestOrAdmin;

impl ScopeSet for Read {
    const SCOPES: &'static [Scope] = &[Scope::Read];
}
impl ScopeSet for Ingest {
    const SCOPES: &'static [Scope] = &[Scope::Ingest];
}
impl ScopeSet for Worker {
    const SCOPES: &'static [Scope] = &[Scope::Worker];
}
impl ScopeSet for Admin {
    const SCOPES: &'static [Scope] = &[Scope::Admin];
}
impl ScopeSet for IngestOrRead {
    const SCOPES: &'static [Scope] = &[Scope::Ingest, Scope::Read];
}
impl ScopeSet for IngestOrAdmin {
    const SCOPES: &'static [Scope] = &[Scope::Ingest, Scope::Admin];
}

/// An API token that holds one of `S`'s scopes: 401 without a valid token, 403 without the
/// scope, both before anything else of the request is read.
#[derive(Debug)]
pub struct Scoped<S> {
    token: TokenRecord,
    scopes: PhantomData<S>,
}

impl<S> Deref for Scoped<S> {
    type Target = TokenRecord;

    fn deref(&self) -> &TokenRecord {
        &self.token
    }
}

impl<S> Scoped<S> {
    /// The token as the actor of what the request does.
    #[must_use]
    pub fn actor(&self) -> Actor {
        token_actor(&self.token)
    }
}

impl<S: ScopeSet> FromRequestParts<AppState> for Scoped<S> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let token = ApiToken::from_request_parts(parts, state).await?;
        token.require(S::SCOPES)?;
        Ok(Scoped {
            token: token.0,
            scopes: PhantomData,
        })
    }
}

/// A signed-in portal user whose session (its token, or its person's role) holds one of `S`'s
/// scopes: the sign-in page without a session, the 403 page without the scope, both before
/// the page's query is read. A page that shows more to some users (an edit button for admins)
/// still asks [`PortalUser::require`] for that part.
#[derive(Debug)]
pub struct ScopedUser<S> {
    pub user: PortalUser,
    /// Private, so a `ScopedUser` exists only where the scope was checked.
    scopes: PhantomData<S>,
}

impl<S: ScopeSet> FromRequestParts<AppState> for ScopedUser<S> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        let user = PortalUser::from_request_parts(parts, state).await?;
        S::admit(&user)?;
        Ok(ScopedUser {
            user,
            scopes: PhantomData,
        })
    }
}
