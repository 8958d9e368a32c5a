//! Tokens and portal sessions: create, list and revoke API tokens (the CLI, admins in the
//! portal and the API, and members for themselves in the portal), authenticate a bearer token
//! (the API), and open, find and end a portal session signed in with a token. Secrets are only
//! ever stored as hashes (SECURITY.md items 6-7); a new token's secret is returned once, to its
//! creator.
//!
//! Tokens belong to someone (issue 31 item 4): a token a person creates in the portal is
//! theirs, acts with no more than their role allows now, and stops with them (disabling the
//! person revokes it, see `app::people`; a token whose owner is disabled authenticates nothing
//! even before that). Admins also create service tokens, owned by nobody, for CI and workers.

pub use crate::storage::sessions::{Holder, Session};
pub use crate::storage::tokens::{TokenRecord, TokenSelector};

use super::Error;
use crate::api_types::ErrorCode;
use crate::api_types::tokens::{TokenInfo, TokenRequest, TokenState};
use crate::auth::{self, Scope};
use crate::roles::PersonRole;
use crate::storage::Db;
use crate::storage::people as people_store;
use crate::storage::sessions;
use crate::storage::tokens::{self as store, NewToken};

/// The longest token name.
pub const NAME_MAX_CHARS: usize = 200;
/// The most tokens one person may hold at once (SECURITY.md item 24): their tokens share one
/// rate budget and in-flight share anyway, and a cap keeps a member from minting credentials
/// without end. Service tokens, which admins create, are not counted.
pub const TOKENS_PER_PERSON_MAX: i64 = 20;
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
    /// The person it belongs to (`None`: a service token).
    pub owner_person_id: Option<i64>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::InvalidToken, message.into())
}

/// Creates a token; returns its record and the secret, which is shown once and never stored.
/// 422 `invalid_token` for an empty or over-long name (or one with control characters), no
/// scope, or an expiry outside 1 to [`EXPIRY_MAX_DAYS`] days. A token for a person is created
/// only while they are enabled (403 otherwise) and hold fewer than [`TOKENS_PER_PERSON_MAX`]
/// active tokens (409 `too_many_tokens`), in a transaction that holds disabling them back
/// until it is stored.
#[tracing::instrument(name = "tokens::create", skip_all, fields(token = new.name.as_str(), created_by = new.created_by.as_str(), owner_person_id = ?new.owner_person_id, token_id = tracing::field::Empty))]
pub async fn create(db: &Db, new: CreateToken) -> Result<(TokenRecord, String), Error> {
    let (name, scopes) = checked(&new)?;
    let secret = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let mut tx = db.pool().begin().await?;
    if let Some(owner) = new.owner_person_id {
        if people_store::lock_enabled_alone(&mut tx, owner)
            .await?
            .is_none()
        {
            return Err(Error::Forbidden(
                "this account is disabled: it cannot hold tokens".into(),
            ));
        }
        // Counted under the person's lock: concurrent creations cannot both pass the cap.
        if store::count_active_owned(&mut *tx, owner).await? >= TOKENS_PER_PERSON_MAX {
            return Err(Error::Conflict(
                ErrorCode::TooManyTokens,
                format!(
                    "you already hold {TOKENS_PER_PERSON_MAX} active tokens, the most one \
                     person may; revoke one you no longer use first"
                ),
            ));
        }
    }
    let record = store::insert_token(
        &mut *tx,
        NewToken {
            name,
            scopes: &scopes,
            prefix: &secret.prefix,
            hash: &secret.hash,
            expires_in_days: new.expires_in_days,
            created_by: &new.created_by,
            owner_person_id: new.owner_person_id,
        },
    )
    .await?;
    tx.commit().await?;
    tracing::Span::current().record("token_id", record.id);
    Ok((record, secret.token))
}

/// The token's trimmed name and its scopes without repeats, or why they are refused.
fn checked(new: &CreateToken) -> Result<(&str, Vec<Scope>), Error> {
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
    for s in &new.scopes {
        if !scopes.contains(s) {
            scopes.push(*s);
        }
    }
    Ok((name, scopes))
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
            owner_person_id: t.owner.as_ref().map(|o| o.person_id),
            owner_name: t.owner.as_ref().map(|o| o.name.clone()),
        }
    }
}

/// Creates a token from an API request: the scopes by name (422 naming an unknown one).
#[tracing::instrument(name = "tokens::create_from_request", skip_all, fields(token = req.name.as_str(), created_by = created_by))]
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
            owner_person_id: None,
        },
    )
    .await
}

/// Revokes the token with exactly this id (and ends its sessions); 404 when no such token is
/// active. Names and prefixes are never read as ids.
#[tracing::instrument(name = "tokens::revoke_by_id", skip_all, fields(token_id = id))]
pub async fn revoke_by_id(db: &Db, id: i64) -> Result<TokenRecord, Error> {
    store::revoke_tokens(db.pool(), TokenSelector::Id(id))
        .await?
        .into_iter()
        .next()
        .ok_or(Error::NotFound("active token"))
}

/// Every token, revoked ones included.
#[tracing::instrument(name = "tokens::list", skip_all)]
pub async fn list(db: &Db) -> Result<Vec<TokenRecord>, Error> {
    Ok(store::list_tokens(db.pool()).await?)
}

/// Revokes the active tokens `which` selects (one id, one prefix, or every token of one
/// name); returns them.
#[tracing::instrument(name = "tokens::revoke", skip_all, fields(which = ?which))]
pub async fn revoke(db: &Db, which: TokenSelector<'_>) -> Result<Vec<TokenRecord>, Error> {
    Ok(store::revoke_tokens(db.pool(), which).await?)
}

/// The live token a presented secret belongs to, with the scopes it acts with; `None` for
/// anything else (malformed, unknown, revoked, expired, or its owner disabled).
#[tracing::instrument(name = "tokens::authenticate", skip_all, fields(token_id = tracing::field::Empty))]
pub async fn authenticate(db: &Db, secret: &str) -> Result<Option<TokenRecord>, Error> {
    if !auth::looks_like_token(secret) {
        return Ok(None);
    }
    let token = store::authenticate(db.pool(), &auth::hash(secret))
        .await?
        .and_then(in_force);
    if let Some(t) = &token {
        tracing::Span::current().record("token_id", t.id);
    }
    Ok(token)
}

/// A token as it acts now: a person's token with no more scopes than the person's role (at
/// their last sign-in) has, and none at all once the person is disabled.
fn in_force(mut token: TokenRecord) -> Option<TokenRecord> {
    if let Some(owner) = &token.owner {
        if owner.disabled {
            return None;
        }
        token.scopes = owner.role.clamp(&token.scopes);
    }
    Some(token)
}

/// A new portal session: the cookie's secret and the session's CSRF token.
#[derive(Debug)]
pub struct NewSession {
    pub cookie: String,
    pub csrf: String,
}

/// Opens a session of `days` days for the holder of `token`.
#[tracing::instrument(name = "tokens::open_session", skip_all, fields(token_id = token.id, token = token.name.as_str(), days = days))]
pub async fn open_session(db: &Db, token: &TokenRecord, days: i32) -> Result<NewSession, Error> {
    let session = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let csrf = auth::generate().map_err(|e| Error::Internal(e.into()))?;
    let csrf = csrf.token[4..].to_owned();
    sessions::create_session(db.pool(), &session.hash, token.id, &csrf, days).await?;
    Ok(NewSession {
        cookie: session.token,
        csrf,
    })
}

/// The live session a cookie names (one signed in with a token acts as the token does now).
#[tracing::instrument(name = "tokens::find_session", skip_all)]
pub async fn find_session(db: &Db, cookie: &str) -> Result<Option<Session>, Error> {
    let Some(session) = sessions::find_session(db.pool(), &auth::hash(cookie)).await? else {
        return Ok(None);
    };
    Ok(match session.holder {
        Holder::Token(token) => in_force(token).map(|token| Session {
            holder: Holder::Token(token),
            csrf: session.csrf,
        }),
        Holder::Person(_) => Some(session),
    })
}

/// Who manages tokens in the portal: which tokens they see and revoke, which scopes they may
/// give, and whose a new token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manager {
    /// An admin (a person with the admin role, or a session signed in with an admin token):
    /// every token, any scope, service tokens (no owner) and, when a person, their own.
    Admin { person_id: Option<i64> },
    /// A member: their own tokens, with the scopes their role has.
    Owner { person_id: i64, role: PersonRole },
}

impl Manager {
    /// The manager a portal session is; 403 (saying why) for a viewer and for a session
    /// signed in with a token that lacks the admin scope.
    pub fn of(session: &Session) -> Result<Manager, Error> {
        match &session.holder {
            Holder::Token(t) if auth::allows(&t.scopes, &[Scope::Admin]) => {
                Ok(Manager::Admin { person_id: None })
            }
            Holder::Token(_) => Err(Error::Forbidden(
                "this token lacks the admin scope: only admins and people signed in through \
                 the identity provider manage tokens"
                    .into(),
            )),
            Holder::Person(p) => match p.role {
                PersonRole::Admin => Ok(Manager::Admin {
                    person_id: Some(p.id),
                }),
                role if role.may_own_tokens() => Ok(Manager::Owner {
                    person_id: p.id,
                    role,
                }),
                role => Err(Error::Forbidden(format!(
                    "your role ({role}) cannot hold API tokens: members and admins can; ask an \
                     admin for one if you need the API"
                ))),
            },
        }
    }

    /// The scopes a token this manager creates may have.
    #[must_use]
    pub fn grantable(self) -> Vec<Scope> {
        match self {
            Manager::Admin { .. } => Scope::ALL.to_vec(),
            Manager::Owner { role, .. } => role.grantable_scopes(),
        }
    }

    /// The person managing, if a person.
    #[must_use]
    pub fn person_id(self) -> Option<i64> {
        match self {
            Manager::Admin { person_id } => person_id,
            Manager::Owner { person_id, .. } => Some(person_id),
        }
    }

    /// Whether this manager creates service tokens (owned by nobody).
    #[must_use]
    pub fn may_create_service_tokens(self) -> bool {
        matches!(self, Manager::Admin { .. })
    }
}

/// The tokens `manager` sees: every one for an admin, their own for a member.
#[tracing::instrument(name = "tokens::list_for", skip_all, fields(manager = ?manager))]
pub async fn list_for(db: &Db, manager: Manager) -> Result<Vec<TokenRecord>, Error> {
    Ok(match manager {
        Manager::Admin { .. } => store::list_tokens(db.pool()).await?,
        Manager::Owner { person_id, .. } => store::list_owned(db.pool(), person_id).await?,
    })
}

/// Creates a token in the portal as `manager`: a member's is theirs, with no scope their role
/// lacks (403 naming the scopes they may give); an admin's is a service token unless
/// `for_self` (an admin person's own). Otherwise as [`create`].
#[tracing::instrument(name = "tokens::create_for", skip_all, fields(manager = ?manager, token = new.name.as_str(), for_self = for_self))]
pub async fn create_for(
    db: &Db,
    manager: Manager,
    mut new: CreateToken,
    for_self: bool,
) -> Result<(TokenRecord, String), Error> {
    let grantable = manager.grantable();
    let refused: Vec<&str> = (new.scopes.iter())
        .filter(|s| !grantable.contains(s))
        .map(|s| s.as_str())
        .collect();
    if !refused.is_empty() {
        let role = match manager {
            Manager::Owner { role, .. } => role,
            Manager::Admin { .. } => PersonRole::Admin,
        };
        let may: Vec<&str> = grantable.iter().map(|s| s.as_str()).collect();
        return Err(Error::Forbidden(format!(
            "your role ({role}) cannot give a token the {} scope; it may give {}",
            refused.join(" or "),
            may.join(" or ")
        )));
    }
    new.owner_person_id = match manager {
        Manager::Owner { person_id, .. } => Some(person_id),
        Manager::Admin { person_id } => person_id.filter(|_| for_self),
    };
    create(db, new).await
}

/// Revokes token `id` as `manager` (and ends its sessions): any token for an admin, their own
/// for a member; 404 when there is no such active token they may revoke.
#[tracing::instrument(name = "tokens::revoke_for", skip_all, fields(manager = ?manager, token_id = id))]
pub async fn revoke_for(db: &Db, manager: Manager, id: i64) -> Result<TokenRecord, Error> {
    if let Manager::Owner { person_id, .. } = manager {
        let theirs = store::get_token(db.pool(), id)
            .await?
            .is_some_and(|t| t.owner.is_some_and(|o| o.person_id == person_id));
        if !theirs {
            return Err(Error::NotFound("active token"));
        }
    }
    revoke_by_id(db, id).await
}

/// Ends the session a cookie names.
#[tracing::instrument(name = "tokens::end_session", skip_all)]
pub async fn end_session(db: &Db, cookie: &str) -> Result<(), Error> {
    Ok(sessions::delete_session(db.pool(), &auth::hash(cookie)).await?)
}
