//! Tokens and portal sessions: create, list and revoke API tokens (the CLI), authenticate a
//! bearer token (the API), and open, find and end a portal session signed in with a token.
//! Secrets are only ever stored as hashes (SECURITY.md items 6-7).

use super::Error;
use crate::auth::{self, Scope};
use crate::storage::Db;
use crate::storage::tokens::{self as store, Session, TokenRecord};

/// Creates a token; returns its record and the secret, which is shown once and never stored.
pub async fn create(db: &Db, name: &str, scopes: &[Scope]) -> Result<(TokenRecord, String), Error> {
    let secret = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let record =
        store::insert_token(db.pool(), name.trim(), scopes, &secret.prefix, &secret.hash).await?;
    Ok((record, secret.token))
}

/// Every token, revoked ones included.
pub async fn list(db: &Db) -> Result<Vec<TokenRecord>, Error> {
    Ok(store::list_tokens(db.pool()).await?)
}

/// Revokes the active tokens with this id, prefix or name; returns them.
pub async fn revoke(db: &Db, which: &str) -> Result<Vec<TokenRecord>, Error> {
    Ok(store::revoke_token(db.pool(), which).await?)
}

/// The live token a presented secret belongs to; `None` for anything else (malformed, unknown,
/// revoked).
pub async fn authenticate(db: &Db, secret: &str) -> Result<Option<TokenRecord>, Error> {
    if !auth::looks_like_token(secret) {
        return Ok(None);
    }
    Ok(store::authenticate(db.pool(), &auth::hash(secret)).await?)
}

/// A new portal session: the cookie's secret and the session's CSRF token.
#[derive(Debug)]
pub struct NewSession {
    pub cookie: String,
    pub csrf: String,
}

/// Opens a session of `days` days for the holder of `token`.
pub async fn open_session(db: &Db, token: &TokenRecord, days: i32) -> Result<NewSession, Error> {
    let session = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let csrf = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let csrf = csrf.token[4..].to_owned();
    store::create_session(db.pool(), &session.hash, token.id, &csrf, days).await?;
    Ok(NewSession {
        cookie: session.token,
        csrf,
    })
}

/// The live session a cookie names.
pub async fn find_session(db: &Db, cookie: &str) -> Result<Option<Session>, Error> {
    Ok(store::find_session(db.pool(), &auth::hash(cookie)).await?)
}

/// Ends the session a cookie names.
pub async fn end_session(db: &Db, cookie: &str) -> Result<(), Error> {
    Ok(store::delete_session(db.pool(), &auth::hash(cookie)).await?)
}
