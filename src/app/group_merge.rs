//! Merging groups (issue 30 item 3), as Sentry's users merge issues: two groups that are one
//! failure (worded differently, matched by another rule) become one. The merged group's
//! reports, fixes, counts of reports retention deleted and history move to the group it is
//! merged into, which records who merged what and when; the merged group's row stays, pointing
//! at its target, so its fingerprint routes later uploads there and its URL answers with the
//! target. The API and the portal's form call [`merge`], so both refuse the same things with the
//! same words.
//!
//! Both group rows are locked in id order (so two merges of the same pair cannot deadlock), the
//! merged one so strongly that uploads, fixes and triage changes of it wait for the merge and
//! then follow it (see `storage::group_merge`). Several groups merge into one in one
//! transaction ([`merge_many`]), all or nothing.
//! A wrong merge is reversible: see `group_unmerge`.

pub use crate::storage::group_merge::MergedGroup;

use sqlx::PgConnection;

use super::Error;
use super::group_triage::{self as view, GroupView, bulk};
use crate::actor::Actor;
use crate::api_types::{BulkMerge, ErrorCode, GroupAction, MergeRequest};
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::group_triage::{self as store, NewEvent};
use crate::storage::groups;
use crate::storage::{Db, DbError};

/// Tries before giving up on a merge whose target kept being merged elsewhere, or that a
/// deadlock with a concurrent writer (retention, reclassification) cancelled.
pub(super) const ATTEMPTS: usize = 4;

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::BadMerge, message.into())
}

/// The refusal to merge group `group` again: it was merged into `into` already.
fn already_merged(group: i64, into: i64) -> Error {
    Error::Conflict(
        ErrorCode::GroupMerged,
        format!("group {group} was already merged into group {into}; merge group {into} instead"),
    )
}

/// Merges group `source` into the group `request.into` names (or, when that one was merged,
/// the group it was merged into), as `actor` (a person or a token), and returns the target as it is
/// then. 422 `bad_merge` for a group merged into itself (directly or through a chain) or an
/// `into` that is no id; 404 for an unknown group on either side; 409 `group_merged` for a
/// group that was merged already.
#[tracing::instrument(name = "group_merge::merge", skip_all, fields(group_id = source, into = request.into, actor = actor.name()))]
pub async fn merge(
    db: &Db,
    source: i64,
    request: &MergeRequest,
    actor: &Actor,
) -> Result<GroupView, Error> {
    let into = request.into;
    if into < 1 {
        return Err(invalid(format!(
            "into must be the id of a group (a positive integer), got {into}"
        )));
    }
    if into == source {
        return Err(invalid(format!(
            "group {source} cannot be merged into itself: name another group"
        )));
    }
    retried(db, &[source], into, actor).await
}

/// Merges every group of `request.ids` into one (`POST /api/v1/groups/merge`, the list's bulk
/// merge), as `actor`, in one transaction: all or nothing. The target is `request.into` (it may
/// be one of the ids, and a merged group stands for where it went) or, without it, the group of
/// the ids with the most reports (on a tie, the oldest). 422 `bad_bulk` for ids that are not
/// 1-100 distinct positive ids or name no group; 422 `bad_merge` for fewer than two groups
/// without `into`, nothing left to merge, or a group merged into itself; 404 for an unknown
/// `into`; 409 `group_merged` for a group of the ids that was merged already.
#[tracing::instrument(name = "group_merge::merge_many", skip_all, fields(groups = request.ids.len(), into = ?request.into, actor = actor.name()))]
pub async fn merge_many(db: &Db, request: &BulkMerge, actor: &Actor) -> Result<GroupView, Error> {
    let ids = bulk::checked_ids(&request.ids)?;
    let missing = store::missing_groups(db.pool(), &ids).await?;
    if !missing.is_empty() {
        return Err(bulk::unknown(&missing));
    }
    let into = match request.into {
        Some(into) if into < 1 => {
            return Err(invalid(format!(
                "into must be the id of a group (a positive integer), got {into}"
            )));
        }
        Some(into) => into,
        None if ids.len() < 2 => {
            return Err(invalid(
                "name at least two groups to merge, or the group to merge them into",
            ));
        }
        None => largest(db, &ids).await?,
    };
    let sources: Vec<i64> = ids.into_iter().filter(|id| *id != into).collect();
    if sources.is_empty() {
        return Err(invalid(format!(
            "nothing to merge: ids names only group {into}, the group to merge into"
        )));
    }
    retried(db, &sources, into, actor).await
}

/// Of `ids`, the group with the most reports (on a tie, the lowest id: the oldest).
async fn largest(db: &Db, ids: &[i64]) -> Result<i64, Error> {
    let mut best: Option<(i64, i64)> = None;
    for &id in ids {
        let count = groups::get_group(db.pool(), id)
            .await?
            .map_or(0, |g| g.report_count);
        if best.is_none_or(|(_, n)| count > n) {
            best = Some((id, count));
        }
    }
    best.map(|(id, _)| id).ok_or(Error::NotFound("group"))
}

/// [`try_merge`] until it is not overtaken by another merge of the target (or a deadlock with
/// a concurrent writer), at most [`ATTEMPTS`] times.
async fn retried(db: &Db, sources: &[i64], into: i64, actor: &Actor) -> Result<GroupView, Error> {
    for attempt in 1..=ATTEMPTS {
        match try_merge(db, sources, into, actor).await {
            Ok(Some(detail)) => return Ok(detail),
            Ok(None) if attempt < ATTEMPTS => {}
            Err(Error::Db(e)) if e.is_retryable() && attempt < ATTEMPTS => {}
            Ok(None) => break,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict(
        ErrorCode::Busy,
        format!("group {into} kept being merged elsewhere while this merge waited; try again"),
    ))
}

/// One try: the merged target as it is after the merge, or `None` when the target was merged
/// elsewhere while this one waited for its lock (the caller tries again with where it went).
async fn try_merge(
    db: &Db,
    sources: &[i64],
    into: i64,
    actor: &Actor,
) -> Result<Option<GroupView>, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    // Unlocked first: the refusals that need no lock, and the group `into` stands for now.
    for &source in sources {
        match merges::standing(&mut *tx, source, Lock::None).await? {
            None => return Err(Error::NotFound("group")),
            Some(Standing::Merged(to)) => return Err(already_merged(source, to)),
            Some(Standing::Live) => {}
        }
    }
    let target = merges::final_group(&mut tx, into)
        .await?
        .ok_or(Error::NotFound("group to merge into"))?;
    if let Some(source) = sources.iter().find(|s| **s == target) {
        return Err(invalid(format!(
            "group {into} was merged into group {source}: a group cannot be merged into itself"
        )));
    }
    // The groups merged into the sources are re-pointed: they are locked with them.
    let mut followers = Vec::new();
    for &source in sources {
        followers.extend(merges::merged_into(&mut *tx, source).await?);
    }
    // Every row, lower id first (the order unmerges and bulk changes lock in too). Each answer
    // is read again under its lock: a merge that committed while this one waited is seen.
    let mut ids = sources.to_vec();
    ids.push(target);
    ids.extend(&followers);
    ids.sort_unstable();
    for id in ids {
        let lock = if id == target {
            Lock::NoKeyUpdate
        } else {
            Lock::Update
        };
        let standing = merges::standing(&mut *tx, id, lock).await?;
        if !sources.contains(&id) && id != target {
            continue;
        }
        match (standing, id == target) {
            (None, false) => return Err(Error::NotFound("group")),
            (None, true) => return Err(Error::NotFound("group to merge into")),
            (Some(Standing::Merged(to)), false) => return Err(already_merged(id, to)),
            (Some(Standing::Merged(_)), true) => return Ok(None),
            (Some(Standing::Live), _) => {}
        }
    }
    // A group merged into a source while this one waited is not locked: try again.
    let mut now = Vec::new();
    for &source in sources {
        now.extend(merges::merged_into(&mut *tx, source).await?);
    }
    if now != followers {
        return Ok(None);
    }
    for &source in sources {
        merge_one(&mut tx, source, target, actor).await?;
    }
    let answer = view::detail_in(&mut tx, target).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(Some(answer))
}

/// Moves group `source` into `target` (both locked) with the history entry that says so.
async fn merge_one(
    tx: &mut PgConnection,
    source: i64,
    target: i64,
    actor: &Actor,
) -> Result<(), Error> {
    let merged = groups::get_group(&mut *tx, source)
        .await?
        .ok_or(Error::NotFound("group"))?;
    let moved = merges::move_into(&mut *tx, source, target).await?;
    // Dated after the moved entries, so the merge reads as the latest change.
    let at = store::change_moment(&mut *tx, target).await?;
    let detail = merge_detail(&merged.title, moved);
    store::insert_event(
        &mut *tx,
        &NewEvent {
            group_id: target,
            at,
            actor,
            action: GroupAction::Merge,
            from: &source.to_string(),
            to: &target.to_string(),
            detail: &detail,
            report_id: None,
        },
    )
    .await?;
    Ok(())
}

/// What the history says moved: the merged group's title and its counts.
pub(super) fn merge_detail(title: &str, moved: merges::Moved) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let reports = moved.reports + u64::try_from(moved.removed_reports).unwrap_or(0);
    let title: String = title.chars().take(200).collect();
    format!(
        "\u{201c}{title}\u{201d}: {}, {}",
        plural(reports, "report", "reports"),
        plural(moved.fixes, "fix", "fixes")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_names_what_moved() {
        let moved = merges::Moved {
            reports: 2,
            removed_reports: 1,
            fixes: 1,
            events: 4,
        };
        assert_eq!(
            merge_detail("CUDA out of memory", moved),
            "\u{201c}CUDA out of memory\u{201d}: 3 reports, 1 fix"
        );
        let one = merges::Moved {
            reports: 1,
            ..merges::Moved::default()
        };
        assert_eq!(
            merge_detail("x", one),
            "\u{201c}x\u{201d}: 1 report, 0 fixes"
        );
    }
}
