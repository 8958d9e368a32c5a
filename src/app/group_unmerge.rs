//! Unmerging groups (issue 39 item 5): a wrong merge must be reversible. [`unmerge`] splits a
//! merged group back out, exactly what belongs to it going back with it (migration 0032 records
//! where each moved row belongs), after chained merges and after uploads its fingerprint sent
//! to the group that held it. It locks like a merge, in the same ascending id order (see
//! `storage::group_merge`), so uploads of its failure that meet it wait and then land in it.
//! The API and the portal's button call [`unmerge`], so both refuse the same things.

use super::Error;
use super::group_merge::{ATTEMPTS, merge_detail};
use super::group_triage::{self as view, GroupView};
use crate::actor::Actor;
use crate::api_types::{ErrorCode, GroupAction};
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::group_triage::{self as store, NewEvent};
use crate::storage::groups;
use crate::storage::{Db, DbError};

/// The refusal to unmerge a group that is not merged.
fn not_merged(group: i64) -> Error {
    Error::Conflict(
        ErrorCode::NotMerged,
        format!(
            "group {group} is not merged into another group (never merged, or unmerged \
             already): nothing to split out"
        ),
    )
}

/// Splits merged group `id` back out of the group that holds it, as `actor` (a person or a
/// token): its reports, fixes, counts of deleted reports and history entries go back to it,
/// with those of the groups merged into it before its own merge (they point at it again), and
/// so do the reports later uploads of any of their failures brought. Both groups' histories
/// record the unmerge. Returns group `id` as it is then. 404 for an unknown group; 409
/// `not_merged` for a group that is not merged; 409 `busy` when merges kept changing what it
/// holds meanwhile.
#[tracing::instrument(name = "group_merge::unmerge", skip_all, fields(group_id = id, actor = actor.name()))]
pub async fn unmerge(db: &Db, id: i64, actor: &Actor) -> Result<GroupView, Error> {
    for attempt in 1..=ATTEMPTS {
        match try_unmerge(db, id, actor).await {
            Ok(Some(view)) => return Ok(view),
            Ok(None) if attempt < ATTEMPTS => {}
            Err(Error::Db(e)) if e.is_retryable() && attempt < ATTEMPTS => {}
            Ok(None) => break,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(
        ErrorCode::Busy,
        format!("group {id} kept being merged while this unmerge waited; try again"),
    ))
}

/// One try: group `id` split out, or `None` when what it stands in changed while this one
/// waited for the locks (the caller tries again).
async fn try_unmerge(db: &Db, id: i64, actor: &Actor) -> Result<Option<GroupView>, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let holder = match merges::standing(&mut *tx, id, Lock::None).await? {
        None => return Err(Error::NotFound("group")),
        Some(Standing::Live) => return Err(not_merged(id)),
        Some(Standing::Merged(holder)) => holder,
    };
    let members = merges::subtree(&mut *tx, id).await?;
    let mut ids = members.clone();
    ids.push(holder);
    ids.sort_unstable();
    // Lower id first, as merges lock; each answer read again under its lock.
    for at in ids {
        let lock = if at == holder {
            Lock::NoKeyUpdate
        } else {
            Lock::Update
        };
        let standing = merges::standing(&mut *tx, at, lock).await?;
        let expected = if at == holder {
            Standing::Live
        } else {
            Standing::Merged(holder)
        };
        if standing != Some(expected) {
            return Ok(None);
        }
    }
    if merges::subtree(&mut *tx, id).await? != members {
        return Ok(None);
    }
    let parent = merges::merge_parent(&mut *tx, id).await?.unwrap_or(holder);
    let moved = merges::split_out(&mut tx, id, holder, &members).await?;
    let title = groups::get_group(&mut *tx, id)
        .await?
        .map(|g| g.title)
        .unwrap_or_default();
    let mut detail = merge_detail(&title, moved);
    if parent != holder {
        detail.push_str(&format!(" (it had been merged into group {parent})"));
    }
    // The holder's entry first, then the group's own: each dated under its group's lock.
    for group_id in [holder, id] {
        let at = store::change_moment(&mut tx, group_id).await?;
        store::insert_event(
            &mut *tx,
            &NewEvent {
                group_id,
                at,
                actor,
                action: GroupAction::Unmerge,
                from: &holder.to_string(),
                to: &id.to_string(),
                detail: &detail,
                report_id: None,
            },
        )
        .await?;
    }
    let answer = view::detail_in(&mut tx, id).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(Some(answer))
}
