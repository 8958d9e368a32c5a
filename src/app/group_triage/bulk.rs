//! One triage change of many groups (issue 39 item 4): the list's bulk form, its one-click row
//! buttons and `POST /api/v1/groups/bulk` resolve, ignore, reopen or assign up to
//! [`MAX_BULK`] groups at once. All or nothing: the groups are locked in id order (the order
//! merges lock them in, so the two cannot deadlock) and each is changed as
//! `PATCH /api/v1/groups/{id}` would change it; the first refusal, named with its group,
//! refuses the whole call and nothing is written. What changed is recorded as one step that
//! [`super::undo`] can take back.

use sqlx::PgConnection;

use super::change::{self, Applied, same};
use crate::actor::Actor;
use crate::api_types::{ErrorCode, GroupPatch, MAX_BULK};
use crate::app::Error;
use crate::storage::group_changes::{self as changes, ChangedGroup};
use crate::storage::group_triage::{self as store, Triage};
use crate::storage::{Db, DbError};

/// What a bulk change (or its undo) came to.
#[derive(Clone, Debug)]
pub struct BulkOutcome {
    /// The recorded change (the one undone, for an undo); `None` when no group changed.
    pub change: Option<i64>,
    /// The groups changed (restored, for an undo), ascending.
    pub changed: Vec<i64>,
    /// Every group named, ascending, with its triage as the change left it.
    pub groups: Vec<(i64, Triage)>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::BadBulk, message.into())
}

/// `ids` checked (1 to [`MAX_BULK`], positive, distinct) and sorted ascending: the order the
/// groups' rows are locked in.
pub(crate) fn checked_ids(ids: &[i64]) -> Result<Vec<i64>, Error> {
    if ids.is_empty() {
        return Err(bad("ids names no group: give 1 to 100 group ids"));
    }
    if ids.len() > MAX_BULK {
        return Err(bad(format!(
            "ids names {} groups: at most {MAX_BULK} in one call",
            ids.len()
        )));
    }
    if let Some(bad_id) = ids.iter().find(|id| **id < 1) {
        return Err(bad(format!(
            "ids must be group ids (positive integers), got {bad_id}"
        )));
    }
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    if let Some(twice) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("ids names group {} twice", twice[0])));
    }
    Ok(sorted)
}

/// The refusal of ids that name no group.
pub(crate) fn unknown(missing: &[i64]) -> Error {
    let list: Vec<String> = missing.iter().map(i64::to_string).collect();
    let noun = if missing.len() == 1 {
        "group"
    } else {
        "groups"
    };
    bad(format!(
        "no {noun} {}: nothing was changed; name existing groups",
        list.join(", ")
    ))
}

/// `e`, a refusal for group `id`, saying which group it was about (a bulk call names many).
pub(crate) fn about(id: i64, e: Error) -> Error {
    match e {
        Error::Invalid(code, m) => Error::Invalid(code, format!("group {id}: {m}")),
        Error::Conflict(code, m) if !m.starts_with("group ") => {
            Error::Conflict(code, format!("group {id}: {m}"))
        }
        other => other,
    }
}

/// Applies `patch` to every group of `ids` as `actor`, all or nothing (see the module), and
/// records what changed as one undoable step. 422 `bad_bulk` for no ids, more than
/// [`MAX_BULK`], a repeated or non-positive id or ids that name no group; otherwise what
/// `PATCH /api/v1/groups/{id}` refuses (422 `bad_triage`, 409 `group_merged`), naming the group.
#[tracing::instrument(name = "group_triage::bulk_change", skip_all, fields(groups = ids.len(), actor = actor.name()))]
pub async fn bulk_change(
    db: &Db,
    ids: &[i64],
    patch: GroupPatch,
    actor: &Actor,
) -> Result<BulkOutcome, Error> {
    let ids = checked_ids(ids)?;
    let change = change::validate(patch)?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let missing = store::missing_groups(&mut *tx, &ids).await?;
    if !missing.is_empty() {
        return Err(unknown(&missing));
    }
    let mut applied = Vec::with_capacity(ids.len());
    for &id in &ids {
        let a = change::apply(&mut tx, id, &change, actor)
            .await
            .map_err(|e| about(id, e))?;
        applied.push((id, a));
    }
    let changed: Vec<&(i64, Applied)> = (applied.iter())
        .filter(|(_, a)| !same(&a.before, &a.after))
        .collect();
    let recorded = match changed.first() {
        None => None,
        Some((_, first)) => {
            let summary = change.summary(&first.after.assignee);
            Some(record(&mut tx, &summary, &changed, actor).await?)
        }
    };
    tx.commit().await.map_err(DbError::from)?;
    Ok(BulkOutcome {
        change: recorded,
        changed: changed.iter().map(|(id, _)| *id).collect(),
        groups: applied.into_iter().map(|(id, a)| (id, a.after)).collect(),
    })
}

/// Records the change of the groups `changed` as one step, with each group's newest history
/// entry (written by this change).
async fn record(
    tx: &mut PgConnection,
    summary: &str,
    changed: &[&(i64, Applied)],
    actor: &Actor,
) -> Result<i64, Error> {
    let id = changes::insert_change(&mut *tx, summary, actor).await?;
    for (group_id, a) in changed {
        let last_event_id = store::latest_change_event(&mut *tx, *group_id).await?;
        let g = ChangedGroup {
            group_id: *group_id,
            before: a.before.clone(),
            after: a.after.clone(),
            last_event_id,
        };
        changes::insert_group(&mut *tx, id, &g).await?;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_ids_are_one_to_a_hundred_distinct_positive_ids() {
        assert_eq!(checked_ids(&[5, 2, 9]).ok(), Some(vec![2, 5, 9]));
        let many: Vec<i64> = (1..=101).collect();
        for (ids, why) in [
            (vec![], "names no group"),
            (many, "at most 100"),
            (vec![3, 0], "positive"),
            (vec![4, 7, 4], "group 4 twice"),
        ] {
            let err = checked_ids(&ids)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(why), "{ids:?}: {err}");
        }
        assert!(unknown(&[4, 9]).to_string().contains("no groups 4, 9"));
        assert!(unknown(&[4]).to_string().contains("no group 4:"));
    }

    #[test]
    fn a_refusal_in_a_bulk_call_names_its_group() {
        let e = about(7, Error::Invalid(ErrorCode::BadTriage, "no".into()));
        assert_eq!(e.to_string(), "group 7: no");
        let merged = about(
            7,
            Error::Conflict(ErrorCode::GroupMerged, "group 7 was merged".into()),
        );
        assert_eq!(merged.to_string(), "group 7 was merged");
    }
}
