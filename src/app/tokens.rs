//! Tokens and portal sessions: create, list and revoke API tokens (the CLI, and admins in the
//! portal and the API), authenticate a bearer token (the API), and open, find and end a portal
//! session signed in with a token. Secrets are only ever stored as hashes (SECURITY.md items
//! 6-7); a new token's secret is returned once, to its creator.

use super::Error;
use crate::api_types::ErrorCode;
use crate::api_types::tokens::{TokenInfo, TokenRequest, TokenState};
use crate::auth::{self, Scope};
use crate::storage::Db;
use crate::storage::tokens::{self as store, NewToken, Session, TokenRecord};

/// The longest token name.
pub const NAME_MAX_CHARS: usize = 200;
/// The longest life a token can be given, in days (ten years).
pub const EXPIRY_MAX_DAYS: u32 = 3650;

/// A token to create.
#[derive(Clone, Debug, Default)]
pub struct CreateToken {
    /// Who or what uses it (listings, recorded fixes, assignees).
    pub name: String,
    pub scopes: Vec<Scope>,
    /// Days until it expires (`None`: never).
    pub expires_in_days: Option<u32>,
    /// The creating token's name (empty for the CLI).
    pub created_by: String,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::InvalidToken, message.into())
}

/// Creates a token; returns its record and the secret, which is shown once and never stored.
/// 422 `invalid_token` for an empty or over-long name (or one with control characters), no
/// scope, or an expiry outside 1 to [`EXPIRY_MAX_DAYS`] days.
pub async fn create(db: &Db, new: CreateToken) -> Result<(TokenRecord, String), Error> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
        return Err(invalid(format!(
            "name must be 1 to {NAME_MAX_CHARS} characters"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("name must not contain control characters"));
    }
    if new.scopes.is_empty() {
        return Err(invalid(
            "give at least one scope: read, ingest, worker or admin",
        ));
    }
    if let Some(days) = new.expires_in_days
        && !(1..=EXPIRY_MAX_DAYS).contains(&days)
    {
        return Err(invalid(format!(
            "expires_in_days must be 1 to {EXPIRY_MAX_DAYS}"
        )));
    }
    let mut scopes: Vec<Scope> = Vec::new();
    for s in new.scopes {
        if !scopes.contains(&s) {
            scopes.push(s);
        }
    }
    let secret = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let record = store::insert_token(
        db.pool(),
        NewToken {
            name,
            scopes: &scopes,
            prefix: &secret.prefix,
            hash: &secret.hash,
            expires_in_days: new.expires_in_days,
            created_by: &new.created_by,
        },
    )
    .await?;
    Ok((record, secret.token))
}

/// A token as the API and the portal list it.
impl From<&TokenRecord> for TokenInfo {
    fn from(t: &TokenRecord) -> Self {
        TokenInfo {
            id: t.id,
            name: t.name.clone(),
            prefix: t.prefix.clone(),
            scopes: t.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            state: if t.revoked {
                TokenState::Revoked
            } else if t.expired {
                TokenState::Expired
            } else {
                TokenState::Active
            },
            created_at: t.created_at,
            created_by: t.created_by.clone(),
            last_used_at: t.last_used_at,
            expires_at: t.expires_at,
        }
    }
}

/// Creates a token from an API request: the scopes by name (422 naming an unknown one).
pub async fn create_from_request(
    db: &Db,
    req: TokenRequest,
    created_by: &str,
) -> Result<(TokenRecord, String), Error> {
    let scopes = (req.scopes.iter())
        .map(|s| s.parse::<Scope>().map_err(invalid))
        .collect::<Result<Vec<_>, _>>()?;
    create(
        db,
        CreateToken {
            name: req.name,
            scopes,
            expires_in_days: req.expires_in_days,
            created_by: created_by.to_owned(),
        },
    )
    .await
}

/// Revokes the token with this id (and ends its sessions); 404 when no such token is active.
pub async fn revoke_by_id(db: &Db, id: i64) -> Result<TokenRecord, Error> {
    match store::get_token(db.pool(), id).await? {
        Some(t) if !t.revoked => {}
        _ => return Err(Error::NotFound("active token")),
    }
    store::revoke_token(db.pool(), &id.to_string())
        .await?
        .into_iter()
        .find(|t| t.id == id)
        .ok_or(Error::NotFound("active token"))
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
