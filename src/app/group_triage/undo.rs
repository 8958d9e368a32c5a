//! Undoing a triage change (issue 39 item 4): after a bulk or one-click change the list offers
//! "Undo", which puts exactly the groups that change changed back as they were (state, fix,
//! assignee, ignore), each with history entries saying so. It is refused, changing nothing,
//! when any of them changed since (another change, an upload that reopened it, a merge): the
//! history says what happened, and a person decides. A change is undone at most once.

use super::bulk::BulkOutcome;
use super::change::{same, write};
use crate::actor::Actor;
use crate::api_types::ErrorCode;
use crate::app::Error;
use crate::storage::group_changes::{self as changes, ChangedGroup};
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::group_triage::{self as store, Triage};
use crate::storage::{Db, DbError};
use crate::time::Timestamp;

/// A recorded change as the list's notice names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeNotice {
    pub id: i64,
    pub at: Timestamp,
    /// Who made it (the name then).
    pub actor: String,
    /// What it did (`resolved`, `ignored until it happens again`).
    pub summary: String,
    /// How many groups it changed.
    pub groups: i64,
    /// Who undid it, once undone.
    pub undone_by: Option<String>,
}

/// Change `id` for the list's notice, or `None` when there is no such change.
#[tracing::instrument(name = "group_triage::notice", skip_all, fields(change_id = id))]
pub async fn notice(db: &Db, id: i64) -> Result<Option<ChangeNotice>, Error> {
    Ok(changes::get_change(db.pool(), id)
        .await?
        .map(|c| ChangeNotice {
            id: c.id,
            at: c.at,
            actor: c.actor,
            summary: c.summary,
            groups: c.groups,
            undone_by: c.undone_by,
        }))
}

/// Whether group `g` is as change left it: no newer history entry and the same triage (an
/// ignore's countdown may have moved: reports only count it down).
fn untouched(g: &ChangedGroup, now: &Triage, last_event: Option<i64>) -> bool {
    let counted = Triage {
        ignore_reports_left: g.after.ignore_reports_left,
        ..now.clone()
    };
    last_event == g.last_event_id && same(&counted, &g.after)
}

/// Undoes change `id` as `actor`: every group it changed gets its triage back, with history
/// entries saying which change they undo. 404 for an unknown change; 409 `already_undone` when
/// it was undone already; 409 `changed_since` (naming the groups) when any of its groups
/// changed since, and then nothing is changed.
#[tracing::instrument(name = "group_triage::undo", skip_all, fields(change_id = id, actor = actor.name()))]
pub async fn undo(db: &Db, id: i64, actor: &Actor) -> Result<BulkOutcome, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let change = changes::lock_change(&mut tx, id)
        .await?
        .ok_or(Error::NotFound("change"))?;
    if let Some(by) = change.undone_by {
        return Err(Error::Conflict(
            ErrorCode::AlreadyUndone,
            format!("change {id} was undone already (by {by})"),
        ));
    }
    let groups = changes::change_groups(&mut *tx, id).await?;
    let mut now = Vec::with_capacity(groups.len());
    let mut moved_on = Vec::new();
    // Ascending ids: the order bulk changes and merges lock groups in.
    for g in &groups {
        let current = store::lock_triage(&mut tx, g.group_id).await?;
        let merged = matches!(
            merges::standing(&mut *tx, g.group_id, Lock::None).await?,
            Some(Standing::Merged(_))
        );
        let last = store::latest_change_event(&mut *tx, g.group_id).await?;
        match current {
            Some(t) if !merged && untouched(g, &t, last) => now.push(t),
            _ => moved_on.push(g.group_id.to_string()),
        }
    }
    if !moved_on.is_empty() {
        return Err(Error::Conflict(
            ErrorCode::ChangedSince,
            format!(
                "change {id} cannot be undone: group {} changed since (its history says how); \
                 nothing was changed",
                moved_on.join(", ")
            ),
        ));
    }
    let note = format!("undoing change {id}");
    for (g, current) in groups.iter().zip(&now) {
        let back = Triage {
            state_changed_at: current.state_changed_at,
            ..g.before.clone()
        };
        write(&mut tx, g.group_id, current, &back, actor, &note).await?;
    }
    changes::mark_undone(&mut *tx, id, actor).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(BulkOutcome {
        change: Some(id),
        changed: groups.iter().map(|g| g.group_id).collect(),
        groups: groups.into_iter().map(|g| (g.group_id, g.before)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_types::GroupState;

    fn t(state: GroupState, left: Option<i32>) -> Triage {
        Triage {
            state,
            resolved_in: String::new(),
            assignee: String::new(),
            assignee_person_id: None,
            ignore_reports_left: left,
            state_changed_at: Timestamp::from_unix(0),
        }
    }

    #[test]
    fn a_group_counts_as_changed_on_a_newer_entry_or_another_triage() {
        let g = ChangedGroup {
            group_id: 1,
            before: t(GroupState::Open, None),
            after: t(GroupState::Ignored, Some(3)),
            last_event_id: Some(10),
        };
        assert!(untouched(&g, &t(GroupState::Ignored, Some(3)), Some(10)));
        // Reports counted the ignore down: still as the change left it.
        assert!(untouched(&g, &t(GroupState::Ignored, Some(1)), Some(10)));
        assert!(!untouched(&g, &t(GroupState::Ignored, Some(3)), Some(11)));
        assert!(!untouched(&g, &t(GroupState::Open, None), Some(10)));
    }
}
