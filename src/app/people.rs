//! Offboarding and the people admins manage (issue 31): the people who sign in through the
//! identity provider, listed with what they hold (live sessions, active tokens); disabling one
//! signs them out everywhere at once (every session ended, every token they own revoked, their
//! sign-in refused until an admin enables them again); enabling restores sign-in only (revoked
//! tokens stay revoked: a secret that may have been copied somewhere does not come back to
//! life); and ending a person's sessions without disabling them (a lost laptop). Each change
//! is one transaction, so nobody sees a person disabled with a session or a token left.

use super::Error;
use crate::api_types::ErrorCode;
use crate::api_types::people::PersonInfo;
use crate::storage::Db;
use crate::storage::people::{self as store, PersonStanding};
use crate::storage::tokens as token_store;

/// Everyone who has signed in, by name, with what they hold now.
#[tracing::instrument(name = "people::list", skip_all)]
pub async fn list(db: &Db) -> Result<Vec<PersonStanding>, Error> {
    Ok(store::list(db.pool()).await?)
}

/// What disabling a person did.
#[derive(Clone, Debug)]
pub struct Disabled {
    /// The person as they stand now (disabled, no sessions, no active token).
    pub person: PersonStanding,
    /// How many live sessions ended.
    pub sessions_ended: u64,
    /// How many active tokens of theirs were revoked.
    pub tokens_revoked: usize,
}

/// Disables person `id`: their sessions end and the tokens they own are revoked, in one
/// transaction; their next request and their next sign-in are refused. Disabling a disabled
/// person changes nothing more. 404 for an unknown person; 422 `invalid_person` when
/// `acting_person` (the admin doing it, when a person) is `id`: an admin cannot lock
/// themselves out; 409 `last_admin` when `id` is the last enabled admin, whatever else runs
/// at the same time.
#[tracing::instrument(name = "people::disable", skip_all, fields(person_id = id, acting_person = ?acting_person))]
pub async fn disable(db: &Db, id: i64, acting_person: Option<i64>) -> Result<Disabled, Error> {
    if acting_person == Some(id) {
        return Err(Error::Invalid(
            ErrorCode::InvalidPerson,
            "you cannot disable yourself; ask another admin".into(),
        ));
    }
    let mut tx = db.pool().begin().await?;
    // Every enabled admin is locked before anything changes, so two admins disabling each
    // other run one after the other and the second sees that it would leave none.
    let admins = store::lock_enabled_admins(&mut tx).await?;
    if admins == [id] {
        return Err(Error::Conflict(
            ErrorCode::LastAdmin,
            "this is the last enabled admin: make someone else an admin first, or the \
             service would have no admin person left"
                .into(),
        ));
    }
    store::set_disabled(&mut *tx, id, true)
        .await?
        .ok_or(Error::NotFound("person"))?;
    let sessions_ended = store::delete_sessions(&mut *tx, id).await?;
    let tokens_revoked = token_store::revoke_owned(&mut tx, id).await?.len();
    let person = store::standing(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("person"))?;
    tx.commit().await?;
    Ok(Disabled {
        person,
        sessions_ended,
        tokens_revoked,
    })
}

/// Enables person `id` again: they may sign in (with the role their groups give then). Their
/// revoked tokens stay revoked. 404 for an unknown person.
#[tracing::instrument(name = "people::enable", skip_all, fields(person_id = id))]
pub async fn enable(db: &Db, id: i64) -> Result<PersonStanding, Error> {
    let mut tx = db.pool().begin().await?;
    store::set_disabled(&mut *tx, id, false)
        .await?
        .ok_or(Error::NotFound("person"))?;
    let person = store::standing(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("person"))?;
    tx.commit().await?;
    Ok(person)
}

/// Ends every session of person `id` without disabling them (they may sign in again); returns
/// them and how many live sessions ended. 404 for an unknown person.
#[tracing::instrument(name = "people::end_sessions", skip_all, fields(person_id = id))]
pub async fn end_sessions(db: &Db, id: i64) -> Result<(PersonStanding, u64), Error> {
    let mut tx = db.pool().begin().await?;
    store::get(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("person"))?;
    let ended = store::delete_sessions(&mut *tx, id).await?;
    let person = store::standing(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("person"))?;
    tx.commit().await?;
    Ok((person, ended))
}

/// A person as the API and the portal list them.
impl From<&PersonStanding> for PersonInfo {
    fn from(s: &PersonStanding) -> Self {
        let p = &s.person;
        PersonInfo {
            id: p.id,
            name: p.name.clone(),
            email: p.email.clone(),
            role: p.role,
            issuer: p.issuer.clone(),
            subject: p.subject.clone(),
            disabled: p.disabled,
            created_at: p.created_at,
            last_sign_in_at: p.last_sign_in_at,
            live_sessions: s.live_sessions,
            active_tokens: s.active_tokens,
        }
    }
}
