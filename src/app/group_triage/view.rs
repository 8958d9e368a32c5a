//! A group as its page and its API show it: the group, its newest reports, fixes, triage (state,
//! assignee, history, tag breakdowns) and the groups merged into it, read in one transaction; and
//! who its forms offer as assignees.
//! The read side of triage, below the changes (`group_triage`, `group_merge`) that answer with it,
//! so none of them imports another in a circle.

use sqlx::PgConnection;

use crate::api_types::GroupEvent;
use crate::api_types::GroupTags;
use crate::app::Error;
use crate::storage::group_merge::{self as merges, Lock, MergedGroup, Standing};
use crate::storage::group_triage::{self as store, Triage};
use crate::storage::groups::{self, Fix, Group};
use crate::storage::people::{self, Person};
use crate::storage::reports::{self as reports, ReportSummary};
use crate::storage::{Db, DbError, tokens};

/// History entries shown with a group (newest first).
const HISTORY_SHOWN: i64 = 100;

/// A group's triage, history and tag breakdowns: what its page and its API answer add to the
/// group itself.
#[derive(Clone, Debug)]
pub struct TriageDetail {
    pub triage: Triage,
    /// Newest first, the latest [`HISTORY_SHOWN`].
    pub history: Vec<GroupEvent>,
    pub tags: GroupTags,
}

/// Group `id`'s triage detail, read in the caller's transaction; `None` for an unknown group.
#[tracing::instrument(name = "group_triage::detail", skip_all, fields(group_id = id))]
pub(crate) async fn detail(tx: &mut PgConnection, id: i64) -> Result<Option<TriageDetail>, Error> {
    let Some(triage) = store::get_triage(&mut *tx, id).await? else {
        return Ok(None);
    };
    Ok(Some(TriageDetail {
        triage,
        history: store::group_events(&mut *tx, id, HISTORY_SHOWN).await?,
        tags: store::group_tags(&mut *tx, id).await?,
    }))
}

/// A group with its newest reports, its fixes, and its triage (state, assignee, history, tag
/// breakdowns).
#[derive(Clone, Debug)]
pub struct GroupView {
    pub group: Group,
    pub reports: Vec<ReportSummary>,
    pub fixes: Vec<Fix>,
    pub triage: TriageDetail,
    /// The groups merged into this one, newest first.
    pub merged: Vec<MergedGroup>,
}

/// The group with id `id` (its 50 newest reports), or 404; read in one transaction. A group
/// that was merged is [`Error::Merged`], naming the group that holds its reports now.
#[tracing::instrument(name = "group_triage::group", skip_all, fields(group_id = id))]
pub async fn group(db: &Db, id: i64) -> Result<GroupView, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    if let Some(Standing::Merged(_)) = merges::standing(&mut *tx, id, Lock::None).await? {
        let into = merges::final_group(&mut tx, id)
            .await?
            .ok_or(Error::NotFound("group"))?;
        return Err(Error::Merged { group: id, into });
    }
    let detail = detail_in(&mut tx, id).await?;
    tx.rollback().await.map_err(DbError::from)?;
    Ok(detail)
}

/// Group `id` with its 50 newest reports, fixes, triage and merged groups, read in the
/// caller's transaction (a change answers with the group as its own transaction left it).
#[tracing::instrument(name = "group_triage::detail_in", skip_all, fields(group_id = id))]
pub(crate) async fn detail_in(tx: &mut PgConnection, id: i64) -> Result<GroupView, Error> {
    let group = groups::get_group(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("group"))?;
    let reports = reports::group_reports(&mut *tx, id, 50).await?;
    let fixes = groups::group_fixes(&mut *tx, id).await?;
    let triage = detail(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("group"))?;
    let merged = merges::merged_groups(&mut *tx, id).await?;
    Ok(GroupView {
        group,
        reports,
        fixes,
        triage,
        merged,
    })
}

/// Most names the portal's assignee lists offer.
const ASSIGNABLE_SHOWN: i64 = 500;

/// Who the portal's forms offer as assignees.
#[derive(Clone, Debug)]
pub enum Assignable {
    /// People sign in here: the enabled ones, by name.
    People(Vec<Person>),
    /// Nobody has signed in through an identity provider (or everyone who did is disabled):
    /// the active tokens' names, as before people.
    Tokens(Vec<String>),
}

/// Who a group can be assigned to, for the portal's forms: people where people exist, else
/// token names.
#[tracing::instrument(name = "group_triage::assignable", skip_all)]
pub async fn assignable(db: &Db) -> Result<Assignable, Error> {
    let people = people::list_enabled(db.pool(), ASSIGNABLE_SHOWN).await?;
    if people.is_empty() {
        Ok(Assignable::Tokens(
            tokens::active_names(db.pool(), ASSIGNABLE_SHOWN).await?,
        ))
    } else {
        Ok(Assignable::People(people))
    }
}
