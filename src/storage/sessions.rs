//! Portal sessions: the cookie's hash, the CSRF token forms echo, and who signed in (an API
//! token, joined only while it still authenticates, or a person through the identity
//! provider).

use sqlx::{Acquire, PgExecutor, Postgres};

use super::DbError;
use super::tokens::{TokenRecord, TokenRow};
use crate::auth::Scope;
use crate::roles::PersonRole;
use crate::time::Timestamp;

/// Who a portal session belongs to.
#[derive(Clone, Debug)]
pub enum Holder {
    /// Signed in with an API token.
    Token(TokenRecord),
    /// Signed in through the identity provider.
    Person(super::people::Person),
}

/// A portal session, resolved from its cookie.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who signed in.
    pub holder: Holder,
    /// The CSRF token forms must echo.
    pub csrf: String,
}

impl Session {
    /// The name shown in the header and recorded on what the session does.
    #[must_use]
    pub fn name(&self) -> &str {
        match &self.holder {
            Holder::Token(t) => &t.name,
            Holder::Person(p) => &p.name,
        }
    }

    /// The scopes the session acts with: its token's, or its person's role's.
    #[must_use]
    pub fn scopes(&self) -> &[Scope] {
        match &self.holder {
            Holder::Token(t) => &t.scopes,
            Holder::Person(p) => p.role.scopes(),
        }
    }

    /// The token signed in with, if any.
    #[must_use]
    pub fn token_id(&self) -> Option<i64> {
        match &self.holder {
            Holder::Token(t) => Some(t.id),
            Holder::Person(_) => None,
        }
    }

    /// The key of the session's rate budget and in-flight share: its token's
    /// ([`TokenRecord::budget_key`], shared with the token's API calls), or for a person the
    /// negated person id, which their own tokens share too.
    #[must_use]
    pub fn budget_key(&self) -> i64 {
        match &self.holder {
            Holder::Token(t) => t.budget_key(),
            Holder::Person(p) => -p.id,
        }
    }

    /// The person the session acts for: its person, or its token's owner.
    #[must_use]
    pub fn person_id(&self) -> Option<i64> {
        match &self.holder {
            Holder::Token(t) => t.owner.as_ref().map(|o| o.person_id),
            Holder::Person(p) => Some(p.id),
        }
    }
}

/// Creates a session for `token_id`, valid for `days`.
pub async fn create_session(
    ex: impl PgExecutor<'_>,
    id_hash: &[u8],
    token_id: i64,
    csrf: &str,
    days: i32,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO sessions (id_hash, token_id, csrf, expires_at) \
         VALUES ($1, $2, $3, now() + make_interval(days => $4))",
        id_hash,
        token_id,
        csrf,
        days
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A session row with its token's columns, null (the two flags false) when its token no
/// longer authenticates (the token is joined only while live) or when a person signed in.
struct SessionRow {
    person_id: Option<i64>,
    csrf: String,
    id: Option<i64>,
    name: Option<String>,
    prefix: Option<String>,
    scopes: Option<Vec<String>>,
    created: Option<Timestamp>,
    last_used: Option<Timestamp>,
    revoked: Option<bool>,
    expires: Option<Timestamp>,
    expired: Option<bool>,
    created_by: Option<String>,
    owner_person_id: Option<i64>,
    owner_name: Option<String>,
    owner_role: Option<PersonRole>,
    owner_disabled: Option<bool>,
}

impl SessionRow {
    /// The session's token, `None` when no live token was joined.
    fn token(self) -> Result<Option<TokenRow>, DbError> {
        let Some(id) = self.id else { return Ok(None) };
        Ok(Some(TokenRow {
            id,
            name: token_part(self.name, "name")?,
            prefix: token_part(self.prefix, "prefix")?,
            scopes: token_part(self.scopes, "scopes")?,
            created: token_part(self.created, "created_at")?,
            last_used: self.last_used,
            revoked: token_part(self.revoked, "revoked_at")?,
            expires: self.expires,
            expired: token_part(self.expired, "expires_at")?,
            created_by: token_part(self.created_by, "created_by")?,
            owner_person_id: self.owner_person_id,
            owner_name: self.owner_name,
            owner_role: self.owner_role,
            owner_disabled: self.owner_disabled,
        }))
    }
}

/// A NOT NULL column of a joined token (null only when no token was joined).
fn token_part<T>(value: Option<T>, column: &str) -> Result<T, DbError> {
    value.ok_or_else(|| DbError::Corrupt(format!("joined token without a {column}")))
}

/// The live session with this cookie hash, if its token is still valid (or its person is not
/// disabled).
pub async fn find_session(
    conn: impl Acquire<'_, Database = Postgres>,
    id_hash: &[u8],
) -> Result<Option<Session>, DbError> {
    let mut conn = conn.acquire().await?;
    let row = sqlx::query_as!(
        SessionRow,
        r#"SELECT s.person_id, s.csrf,
             t.id AS "id?", t.name AS "name?", t.prefix AS "prefix?", t.scopes AS "scopes?",
             t.created_at AS "created?: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked?",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired?",
             t.created_by AS "created_by?", t.owner_person_id AS "owner_person_id?",
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?"
         FROM sessions s
         LEFT JOIN tokens t
             ON t.id = s.token_id
             AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
         WHERE s.id_hash = $1 AND s.expires_at > now()"#,
        id_hash
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let csrf = row.csrf.clone();
    let holder = match row.person_id {
        Some(person) => match super::people::get_enabled(&mut *conn, person).await? {
            Some(p) => Holder::Person(p),
            None => return Ok(None),
        },
        None => match row.token()? {
            Some(token) => Holder::Token(token.try_into()?),
            None => return Ok(None), // Its token was revoked or has expired.
        },
    };
    Ok(Some(Session { holder, csrf }))
}

/// Ends a session (sign-out) and drops expired ones.
pub async fn delete_session(ex: impl PgExecutor<'_>, id_hash: &[u8]) -> Result<(), DbError> {
    sqlx::query!(
        "DELETE FROM sessions WHERE id_hash = $1 OR expires_at < now()",
        id_hash
    )
    .execute(ex)
    .await?;
    Ok(())
}
