//! API tokens: stored as SHA-256 hashes with scopes, revocable, with a last-used time. The
//! portal sessions signed in with them are in [`super::sessions`].

use super::{Db, DbError};
use crate::auth::Scope;
use crate::roles::PersonRole;
use crate::time::Timestamp;
use sqlx::{Acquire, PgExecutor, Postgres};

/// A stored token (never the secret itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    /// Row id.
    pub id: i64,
    /// The name given at creation (who or what uses it).
    pub name: String,
    /// The token's first characters, for listings.
    pub prefix: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// RFC 3339 creation time.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339 time of last use, if ever used.
    pub last_used_at: Option<crate::time::Timestamp>,
    /// Whether it has been revoked.
    pub revoked: bool,
    /// When it stops authenticating (`None`: never).
    pub expires_at: Option<crate::time::Timestamp>,
    /// Whether it has expired.
    pub expired: bool,
    /// Who created it: the creating token's name (portal, API), or empty (the CLI, first start).
    pub created_by: String,
    /// The person it belongs to (created in the portal by a signed-in person); `None` for
    /// service tokens (CI, workers), the first admin token and tokens from the CLI.
    pub owner: Option<TokenOwner>,
}

impl TokenRecord {
    /// The key of the token's rate budget and in-flight share (SECURITY.md item 24): a
    /// person's token spends its person's budget (the negated person id, shared by all their
    /// tokens and sessions), a service token its own (its id), so the two id spaces never meet.
    #[must_use]
    pub fn budget_key(&self) -> i64 {
        match &self.owner {
            Some(owner) => -owner.person_id,
            None => self.id,
        }
    }
}

/// The person a token belongs to, as they stand now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenOwner {
    pub person_id: i64,
    pub name: String,
    /// Their role at their last sign-in.
    pub role: PersonRole,
    /// Whether an admin disabled them.
    pub disabled: bool,
}

/// A token row as the statements below read it from the table named `t`: the token's columns,
/// its last use (its own table, migration 0047) and its owner as they stand now. Every
/// statement that returns a token spells out the same column list.
pub(super) struct TokenRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) scopes: Vec<String>,
    pub(super) created: Timestamp,
    pub(super) last_used: Option<Timestamp>,
    pub(super) revoked: bool,
    pub(super) expires: Option<Timestamp>,
    pub(super) expired: bool,
    pub(super) created_by: String,
    pub(super) owner_person_id: Option<i64>,
    pub(super) owner_name: Option<String>,
    pub(super) owner_role: Option<PersonRole>,
    pub(super) owner_disabled: Option<bool>,
}

impl TryFrom<TokenRow> for TokenRecord {
    type Error = DbError;

    fn try_from(r: TokenRow) -> Result<Self, DbError> {
        let owner = match r.owner_person_id {
            Some(person_id) => Some(TokenOwner {
                person_id,
                name: owner_part(r.owner_name, "name")?,
                role: owner_part(r.owner_role, "role")?,
                disabled: owner_part(r.owner_disabled, "disabled")?,
            }),
            None => None,
        };
        Ok(TokenRecord {
            id: r.id,
            name: r.name,
            prefix: r.prefix,
            scopes: r.scopes.iter().filter_map(|s| s.parse().ok()).collect(),
            created_at: r.created,
            last_used_at: r.last_used,
            revoked: r.revoked,
            expires_at: r.expires,
            expired: r.expired,
            created_by: r.created_by,
            owner,
        })
    }
}

/// A token row with whether its last use is older than a minute ([`authenticate`]).
struct StaleTokenRow {
    id: i64,
    name: String,
    prefix: String,
    scopes: Vec<String>,
    created: Timestamp,
    last_used: Option<Timestamp>,
    revoked: bool,
    expires: Option<Timestamp>,
    expired: bool,
    created_by: String,
    owner_person_id: Option<i64>,
    owner_name: Option<String>,
    owner_role: Option<PersonRole>,
    owner_disabled: Option<bool>,
    stale: bool,
}

impl From<StaleTokenRow> for TokenRow {
    fn from(r: StaleTokenRow) -> Self {
        TokenRow {
            id: r.id,
            name: r.name,
            prefix: r.prefix,
            scopes: r.scopes,
            created: r.created,
            last_used: r.last_used,
            revoked: r.revoked,
            expires: r.expires,
            expired: r.expired,
            created_by: r.created_by,
            owner_person_id: r.owner_person_id,
            owner_name: r.owner_name,
            owner_role: r.owner_role,
            owner_disabled: r.owner_disabled,
        }
    }
}

/// A column of a token's owner, read through its owner's id (a foreign key: the person is
/// there whenever the id is).
fn owner_part<T>(value: Option<T>, column: &str) -> Result<T, DbError> {
    value.ok_or_else(|| DbError::Corrupt(format!("token owner without a {column}")))
}

fn records(rows: Vec<TokenRow>) -> Result<Vec<TokenRecord>, DbError> {
    rows.into_iter().map(TokenRecord::try_from).collect()
}

fn scope_names(scopes: &[Scope]) -> Vec<String> {
    scopes.iter().map(|s| s.as_str().to_string()).collect()
}

/// A token to store: its hash and what it may do.
#[derive(Clone, Copy, Debug)]
pub struct NewToken<'a> {
    pub name: &'a str,
    pub scopes: &'a [Scope],
    pub prefix: &'a str,
    pub hash: &'a [u8],
    /// Days until it expires (`None`: never).
    pub expires_in_days: Option<u32>,
    pub created_by: &'a str,
    /// The person it belongs to (`None`: a service token).
    pub owner_person_id: Option<i64>,
}

/// Stores a new token's hash.
pub async fn insert_token(
    ex: impl PgExecutor<'_>,
    new: NewToken<'_>,
) -> Result<TokenRecord, DbError> {
    let scopes = scope_names(new.scopes);
    let row = sqlx::query_as!(
        TokenRow,
        r#"INSERT INTO tokens AS t (name, scopes, prefix, hash, expires_at, created_by,
             owner_person_id)
         VALUES ($1, $2, $3, $4, now() + make_interval(days => $5), $6, $7)
         RETURNING t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?""#,
        new.name,
        &scopes[..],
        new.prefix,
        new.hash,
        new.expires_in_days
            .map(|d| i32::try_from(d).unwrap_or(i32::MAX)),
        new.created_by,
        new.owner_person_id,
    )
    .fetch_one(ex)
    .await?;
    row.try_into()
}

/// Stores `hash` as an admin token named `name` only if no token exists at all (first start).
/// Returns whether it was stored. Safe against several replicas starting at once.
pub async fn insert_first_admin(
    db: &Db,
    name: &str,
    prefix: &str,
    hash: &[u8],
) -> Result<bool, DbError> {
    let mut tx = db.pool().begin().await?;
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('gpu-triage:first-admin'))")
        .execute(&mut *tx)
        .await?;
    let inserted = sqlx::query!(
        "INSERT INTO tokens (name, scopes, prefix, hash) \
         SELECT $1, ARRAY['admin'], $2, $3 WHERE NOT EXISTS (SELECT 1 FROM tokens)",
        name,
        prefix,
        hash
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(inserted == 1)
}

/// The active (not revoked) token with this hash, marking it used. The last-used time is
/// written at most once a minute per token, so busy CI tokens do not cost a write per request.
pub async fn authenticate(
    conn: impl Acquire<'_, Database = Postgres>,
    hash: &[u8],
) -> Result<Option<TokenRecord>, DbError> {
    let mut conn = conn.acquire().await?;
    let row = sqlx::query_as!(
        StaleTokenRow,
        r#"SELECT t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?",
             NOT EXISTS (SELECT 1 FROM token_usage u WHERE u.token_id = t.id
                 AND u.last_used_at >= now() - interval '60 seconds') AS "stale!"
         FROM tokens t
         WHERE t.hash = $1 AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())"#,
        hash
    )
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let stale = row.stale;
    let token = TokenRecord::try_from(TokenRow::from(row))?;
    if stale {
        // Its own row (migration 0047): the token's row is share-locked by uploads in flight.
        sqlx::query!(
            "INSERT INTO token_usage (token_id, last_used_at) VALUES ($1, now()) \
             ON CONFLICT (token_id) DO UPDATE SET last_used_at = excluded.last_used_at",
            token.id
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(Some(token))
}

/// The token with this id (revoked and expired ones too).
pub async fn get_token(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<TokenRecord>, DbError> {
    let row = sqlx::query_as!(
        TokenRow,
        r#"SELECT t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?"
         FROM tokens t
         WHERE t.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?;
    row.map(TokenRecord::try_from).transpose()
}

/// Every token, newest first.
pub async fn list_tokens(ex: impl PgExecutor<'_>) -> Result<Vec<TokenRecord>, DbError> {
    let rows = sqlx::query_as!(
        TokenRow,
        r#"SELECT t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?"
         FROM tokens t
         ORDER BY t.id DESC"#
    )
    .fetch_all(ex)
    .await?;
    records(rows)
}

/// The tokens person `person_id` owns, newest first (revoked and expired ones too).
pub async fn list_owned(
    ex: impl PgExecutor<'_>,
    person_id: i64,
) -> Result<Vec<TokenRecord>, DbError> {
    let rows = sqlx::query_as!(
        TokenRow,
        r#"SELECT t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?"
         FROM tokens t
         WHERE t.owner_person_id = $1
         ORDER BY t.id DESC"#,
        person_id
    )
    .fetch_all(ex)
    .await?;
    records(rows)
}

/// Revokes every active token person `person_id` owns and ends the portal sessions signed in
/// with them; returns the tokens revoked.
pub async fn revoke_owned(
    conn: &mut sqlx::PgConnection,
    person_id: i64,
) -> Result<Vec<TokenRecord>, DbError> {
    let rows = sqlx::query_as!(
        TokenRow,
        r#"UPDATE tokens AS t SET revoked_at = now()
         WHERE t.owner_person_id = $1 AND t.revoked_at IS NULL
         RETURNING t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
             (SELECT u.last_used_at FROM token_usage u
                 WHERE u.token_id = t.id) AS "last_used?: Timestamp",
             t.revoked_at IS NOT NULL AS "revoked!",
             t.expires_at AS "expires?: Timestamp",
             coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
             (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
             (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
             (SELECT o.disabled_at IS NOT NULL FROM people o
                 WHERE o.id = t.owner_person_id) AS "owner_disabled?""#,
        person_id
    )
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query!(
        "DELETE FROM sessions WHERE token_id IN \
         (SELECT id FROM tokens WHERE owner_person_id = $1 AND revoked_at IS NOT NULL)",
        person_id
    )
    .execute(&mut *conn)
    .await?;
    records(rows)
}

/// How many tokens person `person_id` owns that still authenticate (neither revoked nor
/// expired).
pub async fn count_active_owned(ex: impl PgExecutor<'_>, person_id: i64) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!"
         FROM tokens t
         WHERE t.owner_person_id = $1
           AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())"#,
        person_id
    )
    .fetch_one(ex)
    .await?)
}

/// Whether token `id` still authenticates (not revoked, not expired, its owner not disabled),
/// holding its row against revocation until the transaction ends: what the transaction stores
/// in the token's name commits before a revocation or not at all.
pub async fn lock_live(conn: &mut sqlx::PgConnection, id: i64) -> Result<bool, DbError> {
    let row = sqlx::query_scalar!(
        "SELECT t.id FROM tokens t \
         WHERE t.id = $1 \
           AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now()) \
           AND NOT EXISTS (SELECT 1 FROM people o \
               WHERE o.id = t.owner_person_id AND o.disabled_at IS NOT NULL) \
         FOR SHARE OF t",
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// The distinct names of the active (not revoked) tokens, in name order, at most `limit`: who
/// a group can be assigned to.
pub async fn active_names(ex: impl PgExecutor<'_>, limit: i64) -> Result<Vec<String>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT DISTINCT name FROM tokens t WHERE t.revoked_at IS NULL \
         AND (t.expires_at IS NULL OR t.expires_at > now()) ORDER BY name LIMIT $1",
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Whether an active (not revoked) token is named `name`.
pub async fn is_active_name(ex: impl PgExecutor<'_>, name: &str) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM tokens t WHERE t.name = $1 AND t.revoked_at IS NULL
         AND (t.expires_at IS NULL OR t.expires_at > now())) AS "exists!""#,
        name
    )
    .fetch_one(ex)
    .await?)
}

/// Which tokens a revocation means. Each is exact: an id is only ever compared with ids, so a
/// token named "14" is never token 14 (SECURITY.md item 25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenSelector<'a> {
    /// The one token with this id.
    Id(i64),
    /// The one token with this prefix (`gtr_` and its first characters, as listings show).
    Prefix(&'a str),
    /// Every active token with exactly this name.
    Name(&'a str),
}

/// Revokes the active tokens `which` selects and ends the portal sessions signed in with them;
/// returns the revoked tokens (none when nothing matched).
pub async fn revoke_tokens(
    conn: impl Acquire<'_, Database = Postgres>,
    which: TokenSelector<'_>,
) -> Result<Vec<TokenRecord>, DbError> {
    let mut conn = conn.acquire().await?;
    // One statement per selector, each comparing one column with the value of its type.
    let rows = match which {
        TokenSelector::Id(id) => {
            sqlx::query_as!(
                TokenRow,
                r#"UPDATE tokens AS t SET revoked_at = now()
                 WHERE t.revoked_at IS NULL AND t.id = $1
                 RETURNING t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
                     (SELECT u.last_used_at FROM token_usage u
                         WHERE u.token_id = t.id) AS "last_used?: Timestamp",
                     t.revoked_at IS NOT NULL AS "revoked!",
                     t.expires_at AS "expires?: Timestamp",
                     coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
                     (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
                     (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
                     (SELECT o.disabled_at IS NOT NULL FROM people o
                         WHERE o.id = t.owner_person_id) AS "owner_disabled?""#,
                id
            )
            .fetch_all(&mut *conn)
            .await?
        }
        TokenSelector::Prefix(prefix) => {
            sqlx::query_as!(
                TokenRow,
                r#"UPDATE tokens AS t SET revoked_at = now()
                 WHERE t.revoked_at IS NULL AND t.prefix = $1
                 RETURNING t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
                     (SELECT u.last_used_at FROM token_usage u
                         WHERE u.token_id = t.id) AS "last_used?: Timestamp",
                     t.revoked_at IS NOT NULL AS "revoked!",
                     t.expires_at AS "expires?: Timestamp",
                     coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
                     (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
                     (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
                     (SELECT o.disabled_at IS NOT NULL FROM people o
                         WHERE o.id = t.owner_person_id) AS "owner_disabled?""#,
                prefix
            )
            .fetch_all(&mut *conn)
            .await?
        }
        TokenSelector::Name(name) => {
            sqlx::query_as!(
                TokenRow,
                r#"UPDATE tokens AS t SET revoked_at = now()
                 WHERE t.revoked_at IS NULL AND t.name = $1
                 RETURNING t.id, t.name, t.prefix, t.scopes, t.created_at AS "created: Timestamp",
                     (SELECT u.last_used_at FROM token_usage u
                         WHERE u.token_id = t.id) AS "last_used?: Timestamp",
                     t.revoked_at IS NOT NULL AS "revoked!",
                     t.expires_at AS "expires?: Timestamp",
                     coalesce(t.expires_at <= now(), false) AS "expired!", t.created_by, t.owner_person_id,
                     (SELECT o.name FROM people o WHERE o.id = t.owner_person_id) AS "owner_name?",
                     (SELECT o.role FROM people o WHERE o.id = t.owner_person_id) AS "owner_role?: PersonRole",
                     (SELECT o.disabled_at IS NOT NULL FROM people o
                         WHERE o.id = t.owner_person_id) AS "owner_disabled?""#,
                name
            )
            .fetch_all(&mut *conn)
            .await?
        }
    };
    let revoked = records(rows)?;
    // Sessions signed in with a revoked token end with it.
    let ids: Vec<i64> = revoked.iter().map(|t| t.id).collect();
    sqlx::query!("DELETE FROM sessions WHERE token_id = ANY($1)", &ids[..])
        .execute(&mut *conn)
        .await?;
    Ok(revoked)
}
