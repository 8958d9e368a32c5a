//! People signed in through the identity provider, their portal sessions, and the sign-ins
//! under way (state, nonce and PKCE verifier kept until the provider sends the browser back).

use sqlx::PgExecutor;

use super::DbError;
use crate::roles::PersonRole;
use crate::time::Timestamp;

/// A stored person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    pub id: i64,
    /// The provider's issuer URL and its subject for this person: who they are.
    pub issuer: String,
    pub subject: String,
    /// From the ID token at the last sign-in (may be empty).
    pub email: String,
    /// Shown in the header and on what they record.
    pub name: String,
    /// The role their groups mapped to at their last sign-in.
    pub role: PersonRole,
    /// Whether an admin disabled them (no sessions, no sign-in).
    pub disabled: bool,
    pub created_at: Timestamp,
    pub last_sign_in_at: Timestamp,
}

/// Who signed in: what the verified ID token says, and the role their groups give.
#[derive(Clone, Copy, Debug)]
pub struct SignedIn<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    pub email: &'a str,
    pub name: &'a str,
    pub role: PersonRole,
}

/// Creates the person on first sign-in, or updates their email, name, role and sign-in time;
/// returns them (a disabled person is returned disabled and unchanged but for nothing).
pub async fn upsert_signed_in(
    ex: impl PgExecutor<'_>,
    who: SignedIn<'_>,
) -> Result<Person, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"INSERT INTO people AS p (issuer, subject, email, name, role) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (issuer, subject) DO UPDATE SET
           email = CASE WHEN p.disabled_at IS NULL THEN EXCLUDED.email ELSE p.email END,
           name = CASE WHEN p.disabled_at IS NULL THEN EXCLUDED.name ELSE p.name END,
           role = CASE WHEN p.disabled_at IS NULL THEN EXCLUDED.role ELSE p.role END,
           last_sign_in_at = CASE WHEN p.disabled_at IS NULL THEN now() ELSE p.last_sign_in_at END
         RETURNING p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp""#,
        who.issuer,
        who.subject,
        who.email,
        who.name,
        who.role.as_str(),
    )
    .fetch_one(ex)
    .await?)
}

/// The person with this id, if not disabled.
pub async fn get_enabled(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp" FROM people p WHERE p.id = $1 AND p.disabled_at IS NULL"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// The person with this id, disabled or not.
pub async fn get(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp" FROM people p WHERE p.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// The person with this id if not disabled, locked against being disabled until the
/// transaction ends (what they create in it is theirs while they are enabled).
pub async fn lock_enabled(
    conn: &mut sqlx::PgConnection,
    id: i64,
) -> Result<Option<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp" FROM people p WHERE p.id = $1 AND p.disabled_at IS NULL FOR SHARE"#,
        id
    )
    .fetch_optional(conn)
    .await?)
}

/// As [`lock_enabled`], but exclusive among those who take this lock: two transactions that
/// each count what the person holds and add one more (a token under the per-person cap) run
/// one after the other, so neither counts before the other's row is in.
pub async fn lock_enabled_alone(
    conn: &mut sqlx::PgConnection,
    id: i64,
) -> Result<Option<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp" FROM people p WHERE p.id = $1 AND p.disabled_at IS NULL
         FOR NO KEY UPDATE"#,
        id
    )
    .fetch_optional(conn)
    .await?)
}

/// The ids of the enabled people with the admin role, locked in id order until the
/// transaction ends: two transactions that each disable an admin see each other's change, so
/// no interleaving leaves the service without one (SECURITY.md item 28).
pub async fn lock_enabled_admins(conn: &mut sqlx::PgConnection) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT p.id FROM people p WHERE p.role = $1 AND p.disabled_at IS NULL \
         ORDER BY p.id FOR UPDATE",
        PersonRole::Admin.as_str()
    )
    .fetch_all(conn)
    .await?)
}

/// A person with what they hold now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersonStanding {
    pub person: Person,
    /// Their portal sessions that have not expired.
    pub live_sessions: i64,
    /// The tokens they own that are neither revoked nor expired.
    pub active_tokens: i64,
}

/// A person row with their standing, as one query reads it.
struct StandingRow {
    id: i64,
    issuer: String,
    subject: String,
    email: String,
    name: String,
    role: PersonRole,
    disabled: bool,
    created_at: Timestamp,
    last_sign_in_at: Timestamp,
    live_sessions: i64,
    active_tokens: i64,
}

impl From<StandingRow> for PersonStanding {
    fn from(r: StandingRow) -> Self {
        PersonStanding {
            person: Person {
                id: r.id,
                issuer: r.issuer,
                subject: r.subject,
                email: r.email,
                name: r.name,
                role: r.role,
                disabled: r.disabled,
                created_at: r.created_at,
                last_sign_in_at: r.last_sign_in_at,
            },
            live_sessions: r.live_sessions,
            active_tokens: r.active_tokens,
        }
    }
}

/// Every person with their standing, by name.
pub async fn list(ex: impl PgExecutor<'_>) -> Result<Vec<PersonStanding>, DbError> {
    let rows = sqlx::query_as!(
        StandingRow,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp",
         (SELECT count(*) FROM sessions s
             WHERE s.person_id = p.id AND s.expires_at > now()) AS "live_sessions!",
         (SELECT count(*) FROM tokens t WHERE t.owner_person_id = p.id AND t.revoked_at IS NULL
             AND (t.expires_at IS NULL OR t.expires_at > now())) AS "active_tokens!"
         FROM people p ORDER BY lower(p.name), p.id"#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(PersonStanding::from).collect())
}

/// The person with this id and their standing.
pub async fn standing(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<PersonStanding>, DbError> {
    let row = sqlx::query_as!(
        StandingRow,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp",
         (SELECT count(*) FROM sessions s
             WHERE s.person_id = p.id AND s.expires_at > now()) AS "live_sessions!",
         (SELECT count(*) FROM tokens t WHERE t.owner_person_id = p.id AND t.revoked_at IS NULL
             AND (t.expires_at IS NULL OR t.expires_at > now())) AS "active_tokens!"
         FROM people p WHERE p.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(PersonStanding::from))
}

/// Disables (`true`) or enables (`false`) the person, waiting for any transaction that holds
/// them locked ([`lock_enabled`]); a person already in that state keeps their time of being
/// disabled. Returns them, or `None` when there is no such person.
pub async fn set_disabled(
    ex: impl PgExecutor<'_>,
    id: i64,
    disabled: bool,
) -> Result<Option<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"UPDATE people AS p SET disabled_at =
           CASE WHEN $2 THEN coalesce(p.disabled_at, now()) ELSE NULL END
         WHERE p.id = $1 RETURNING p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp""#,
        id,
        disabled
    )
    .fetch_optional(ex)
    .await?)
}

/// Ends every portal session of person `person_id` (they are signed out everywhere); returns
/// how many were live.
pub async fn delete_sessions(ex: impl PgExecutor<'_>, person_id: i64) -> Result<u64, DbError> {
    let ended = sqlx::query_scalar!(
        r#"WITH gone AS (DELETE FROM sessions WHERE person_id = $1 RETURNING expires_at)
         SELECT count(*) AS "ended!" FROM gone WHERE expires_at > now()"#,
        person_id
    )
    .fetch_one(ex)
    .await?;
    Ok(u64::try_from(ended).unwrap_or(0))
}

/// The people who are not disabled, by name, at most `limit`: who a group can be assigned to.
pub async fn list_enabled(ex: impl PgExecutor<'_>, limit: i64) -> Result<Vec<Person>, DbError> {
    Ok(sqlx::query_as!(
        Person,
        r#"SELECT p.id, p.issuer, p.subject, p.email, p.name, p.role AS "role: PersonRole", 
         p.disabled_at IS NOT NULL AS "disabled!", p.created_at AS "created_at: Timestamp", 
         p.last_sign_in_at AS "last_sign_in_at: Timestamp" FROM people p WHERE p.disabled_at IS NULL
         ORDER BY lower(p.name), p.id LIMIT $1"#,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Creates a session for person `person_id`, valid for `days`.
pub async fn create_session(
    ex: impl PgExecutor<'_>,
    id_hash: &[u8],
    person_id: i64,
    csrf: &str,
    days: i32,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO sessions (id_hash, person_id, csrf, expires_at) \
         VALUES ($1, $2, $3, now() + make_interval(days => $4))",
        id_hash,
        person_id,
        csrf,
        days
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A sign-in under way, as the callback needs it.
#[derive(Clone, Debug)]
pub struct PendingLogin {
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
    /// Where to go afterwards (already checked as a return path).
    pub next_path: Option<String>,
}

/// Locks the sign-ins under way against other starts until the transaction ends, so a count
/// taken under the lock stays true until the insert that follows it (a cap holds under
/// concurrent starts). Callbacks taking a row wait for the lock too; it is held for a few
/// statements.
pub async fn lock_pending(conn: &mut sqlx::PgConnection) -> Result<(), DbError> {
    sqlx::query!("LOCK TABLE oidc_logins IN SHARE ROW EXCLUSIVE MODE")
        .execute(conn)
        .await?;
    Ok(())
}

/// Removes the sign-ins under way that have expired; returns how many.
pub async fn delete_expired_pending(ex: impl PgExecutor<'_>) -> Result<u64, DbError> {
    let done = sqlx::query!("DELETE FROM oidc_logins WHERE expires_at <= now()")
        .execute(ex)
        .await?;
    Ok(done.rows_affected())
}

/// How many sign-ins under way have not expired.
pub async fn count_live_pending(ex: impl PgExecutor<'_>) -> Result<i64, DbError> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM oidc_logins WHERE expires_at > now()"#)
            .fetch_one(ex)
            .await?,
    )
}

/// Stores a sign-in under way for `minutes`, under the hash of its browser cookie.
pub async fn insert_pending(
    ex: impl PgExecutor<'_>,
    id_hash: &[u8],
    login: &PendingLogin,
    minutes: i32,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO oidc_logins (id_hash, state, nonce, pkce_verifier, next_path, expires_at) \
         VALUES ($1, $2, $3, $4, $5, now() + make_interval(mins => $6))",
        id_hash,
        login.state,
        login.nonce,
        login.pkce_verifier,
        login.next_path.as_deref(),
        minutes
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A stored sign-in under way, and whether it is still live (not expired).
#[derive(Clone, Debug)]
pub struct FoundPending {
    pub login: PendingLogin,
    pub live: bool,
}

/// Reads (without changing it) the sign-in under way with this cookie hash, expired or not:
/// the callback compares `state` with it before anything is changed.
pub async fn find_pending(
    ex: impl PgExecutor<'_>,
    id_hash: &[u8],
) -> Result<Option<FoundPending>, DbError> {
    let row = sqlx::query!(
        r#"SELECT state, nonce, pkce_verifier, next_path, expires_at > now() AS "live!"
         FROM oidc_logins WHERE id_hash = $1"#,
        id_hash
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|row| FoundPending {
        login: PendingLogin {
            state: row.state,
            nonce: row.nonce,
            pkce_verifier: row.pkce_verifier,
            next_path: row.next_path,
        },
        live: row.live,
    }))
}

/// Deletes the sign-in under way with this cookie hash; returns whether it was there and live
/// (each can be finished once: of two callbacks racing, one gets `true`).
pub async fn take_pending(ex: impl PgExecutor<'_>, id_hash: &[u8]) -> Result<bool, DbError> {
    let live = sqlx::query_scalar!(
        r#"DELETE FROM oidc_logins WHERE id_hash = $1 RETURNING expires_at > now() AS "live!""#,
        id_hash
    )
    .fetch_optional(ex)
    .await?;
    Ok(live == Some(true))
}
