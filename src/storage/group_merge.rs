//! Merging and unmerging groups in SQL (issue 30 item 3, migration 0023; issue 39 item 5,
//! migration 0032): where a group stands (its own, or merged into another), the row locks a
//! merge and the writers that meet it take, following a merged group to the group that holds
//! its failure now, and the statements that move one group's reports, fixes, deleted-report
//! counts and history to another and take them back. Policy (what may be merged or unmerged,
//! the lock order, the history entries) lives in `app::group_merge`.
//!
//! The locks: a merge holds its source row `FOR UPDATE`, which waits for every transaction that
//! holds it `FOR KEY SHARE` (an upload adding a report to it, a fix, the foreign-key check of
//! any row written for it) and makes new ones wait until the merge commits; they then read the
//! row again and see where it went. Its target is held `FOR NO KEY UPDATE`, like a triage
//! change, so uploads into it go on while it is merged into. The groups merged into the source
//! are re-pointed by the merge: they are locked like the source.
//!
//! An unmerge holds the group it splits out, and every group that goes back with it, `FOR
//! UPDATE` (uploads that a merged group's fingerprint routes wait, then follow where it went),
//! and the group that holds them `FOR NO KEY UPDATE`. Both take their rows in ascending id
//! order, so a merge and an unmerge of overlapping groups cannot deadlock each other.

use sqlx::{PgConnection, PgExecutor};

use super::DbError;

/// Where a group stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It holds its own reports.
    Live,
    /// It was merged into this group, which holds its reports now (chains are one step long).
    Merged(i64),
}

impl Standing {
    fn of(merged_into: Option<i64>) -> Standing {
        merged_into.map_or(Standing::Live, Standing::Merged)
    }
}

/// How a statement locks a group row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// None: a plain read.
    None,
    /// `FOR KEY SHARE`: writes for the group (a report, a fix) wait for a merge of it.
    KeyShare,
    /// `FOR NO KEY UPDATE`: the group is being changed (merged into); uploads go on.
    NoKeyUpdate,
    /// `FOR UPDATE`: the group is being merged away; every writer for it waits.
    Update,
}

/// Where group `id` stands, its row locked as `lock` says until the transaction ends; `None`
/// for an unknown group. A locking read that waited for a merge sees the merge. One statement
/// per lock: the locking clause is chosen from the enum, never from request text.
pub async fn standing(
    ex: impl PgExecutor<'_>,
    id: i64,
    lock: Lock,
) -> Result<Option<Standing>, DbError> {
    let row = match lock {
        Lock::None => {
            sqlx::query_scalar!("SELECT merged_into FROM groups WHERE id = $1", id)
                .fetch_optional(ex)
                .await?
        }
        Lock::KeyShare => {
            sqlx::query_scalar!(
                "SELECT merged_into FROM groups WHERE id = $1 FOR KEY SHARE",
                id
            )
            .fetch_optional(ex)
            .await?
        }
        Lock::NoKeyUpdate => {
            sqlx::query_scalar!(
                "SELECT merged_into FROM groups WHERE id = $1 FOR NO KEY UPDATE",
                id
            )
            .fetch_optional(ex)
            .await?
        }
        Lock::Update => {
            sqlx::query_scalar!(
                "SELECT merged_into FROM groups WHERE id = $1 FOR UPDATE",
                id
            )
            .fetch_optional(ex)
            .await?
        }
    };
    Ok(row.map(Standing::of))
}

/// Most steps [`live_group`] follows: chains are one step long, so more means a cycle that the
/// schema's checks and the merge's own checks should have made impossible.
const MAX_STEPS: usize = 16;

/// The group that holds group `id`'s failure now: `id` itself, or the group it was merged
/// into. Each row on the way is held `FOR KEY SHARE` until the transaction ends, so the group
/// returned is not merged away before the caller's writes for it commit. `None` for an unknown
/// group.
pub async fn live_group(tx: &mut PgConnection, id: i64) -> Result<Option<i64>, DbError> {
    let mut at = id;
    for _ in 0..MAX_STEPS {
        match standing(&mut *tx, at, Lock::KeyShare).await? {
            None => return Ok(None),
            Some(Standing::Live) => return Ok(Some(at)),
            Some(Standing::Merged(next)) => at = next,
        }
    }
    Err(DbError::Corrupt(format!(
        "group {id} is merged in a chain longer than {MAX_STEPS} steps"
    )))
}

/// The group that holds group `id`'s failure now, read without locks (for pages and answers
/// that only name it).
pub async fn final_group(tx: &mut PgConnection, id: i64) -> Result<Option<i64>, DbError> {
    let mut at = id;
    for _ in 0..MAX_STEPS {
        match standing(&mut *tx, at, Lock::None).await? {
            None => return Ok(None),
            Some(Standing::Live) => return Ok(Some(at)),
            Some(Standing::Merged(next)) => at = next,
        }
    }
    Err(DbError::Corrupt(format!(
        "group {id} is merged in a chain longer than {MAX_STEPS} steps"
    )))
}

/// What a merge moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Stored reports.
    pub reports: u64,
    /// Reports retention deleted (their counts per project and day).
    pub removed_reports: i64,
    pub fixes: u64,
    /// History entries.
    pub events: u64,
}

/// Moves everything of group `source` to group `target` (both locked by the caller: `source`
/// with [`Lock::Update`], `target` with [`Lock::NoKeyUpdate`]) and marks `source` merged into
/// `target` (its `merge_parent`), re-pointing the groups that were merged into `source`. Each
/// moved report, fix, count of deleted reports and history entry keeps the group it belongs to
/// (`merged_from`, migration 0032: `source`, or the group merged into `source` it came with),
/// so [`split_out`] can take it back. The target keeps its own title, signature and triage; its
/// first and last sightings widen to cover the source's, and it takes the source's reproduction
/// verdict when that one is newer. Reports keep their own fingerprints.
pub async fn move_into(tx: &mut PgConnection, source: i64, target: i64) -> Result<Moved, DbError> {
    let reports = sqlx::query!(
        "UPDATE reports SET group_id = $2, merged_from = coalesce(merged_from, $1)
         WHERE group_id = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let fixes = sqlx::query!(
        "UPDATE fixes SET group_id = $2, merged_from = coalesce(merged_from, $1)
         WHERE group_id = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    // Kept per group they belong to (0: the holder's own), so they never collide with the
    // target's own rows.
    let removed_reports = sqlx::query_scalar!(
        r#"WITH moved AS (
             UPDATE group_expired_reports SET group_id = $2,
                 merged_from = CASE WHEN merged_from = 0 THEN $1 ELSE merged_from END
             WHERE group_id = $1 RETURNING reports)
         SELECT coalesce(sum(reports), 0)::int8 AS "reports!" FROM moved"#,
        source,
        target
    )
    .fetch_one(&mut *tx)
    .await?;
    let events = sqlx::query!(
        "UPDATE group_events SET group_id = $2, merged_from = coalesce(merged_from, $1)
         WHERE group_id = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!(
        "UPDATE groups t SET first_seen = LEAST(t.first_seen, s.first_seen),
             last_seen = GREATEST(t.last_seen, s.last_seen),
             verdict = CASE WHEN s.verdict_at IS NOT NULL
                 AND (t.verdict_at IS NULL OR s.verdict_at > t.verdict_at)
                 THEN s.verdict ELSE t.verdict END,
             verdict_at = GREATEST(t.verdict_at, s.verdict_at)
         FROM groups s WHERE t.id = $2 AND s.id = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE groups SET merged_into = $2 WHERE merged_into = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE groups SET merged_into = $2, merge_parent = $2 WHERE id = $1",
        source,
        target
    )
    .execute(&mut *tx)
    .await?;
    Ok(Moved {
        reports,
        removed_reports,
        fixes,
        events,
    })
}

/// The groups merged into group `id` (one step: each is merged into `id` itself), ascending:
/// the rows a merge of `id` re-points.
pub async fn merged_into(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM groups WHERE merged_into = $1 ORDER BY id",
        id
    )
    .fetch_all(ex)
    .await?)
}

/// Merged group `id` and the groups merged into it before it was merged itself (their merges'
/// parents lead to it), ascending: what an unmerge of `id` takes back. Empty for a group that
/// is not merged.
pub async fn subtree(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE sub(id) AS (
             SELECT id FROM groups WHERE id = $1 AND merged_into IS NOT NULL
             UNION
             SELECT g.id FROM groups g JOIN sub ON g.merge_parent = sub.id
             WHERE g.merged_into IS NOT NULL)
         SELECT id AS "id!" FROM sub ORDER BY id LIMIT 10000"#,
        id
    )
    .fetch_all(ex)
    .await?)
}

/// The group merged group `id`'s own merge put it into (not where chains lead), or `None`.
pub async fn merge_parent(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<i64>, DbError> {
    Ok(
        sqlx::query_scalar!("SELECT merge_parent FROM groups WHERE id = $1", id)
            .fetch_optional(ex)
            .await?
            .flatten(),
    )
}

/// Takes group `group` back out of group `holder` (locked by the caller: `holder` with
/// [`Lock::NoKeyUpdate`], every group of `members` with [`Lock::Update`]; `members` is
/// [`subtree`] of `group`): the reports, fixes, counts of deleted reports and history entries
/// that belong to a group of `members` move to `group` (those of `group` itself become its own
/// again), `group` is live again and the other members are merged into it, as before its merge.
/// `holder`'s first sighting narrows to what it still holds.
pub async fn split_out(
    tx: &mut PgConnection,
    group: i64,
    holder: i64,
    members: &[i64],
) -> Result<Moved, DbError> {
    // Reports, fixes and history entries go back the same way.
    let reports = sqlx::query!(
        "UPDATE reports SET group_id = $1, merged_from = NULLIF(merged_from, $1)
         WHERE group_id = $2 AND merged_from = ANY($3)",
        group,
        holder,
        members
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let fixes = sqlx::query!(
        "UPDATE fixes SET group_id = $1, merged_from = NULLIF(merged_from, $1)
         WHERE group_id = $2 AND merged_from = ANY($3)",
        group,
        holder,
        members
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let events = sqlx::query!(
        "UPDATE group_events SET group_id = $1, merged_from = NULLIF(merged_from, $1)
         WHERE group_id = $2 AND merged_from = ANY($3)",
        group,
        holder,
        members
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let removed_reports = sqlx::query_scalar!(
        r#"WITH moved AS (
             UPDATE group_expired_reports SET group_id = $1,
                 merged_from = CASE WHEN merged_from = $1 THEN 0 ELSE merged_from END
             WHERE group_id = $2 AND merged_from = ANY($3) RETURNING reports)
         SELECT coalesce(sum(reports), 0)::int8 AS "reports!" FROM moved"#,
        group,
        holder,
        members
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE groups SET merged_into = $1 WHERE id = ANY($2) AND id <> $1",
        group,
        members
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE groups SET merged_into = NULL, merge_parent = NULL WHERE id = $1",
        group
    )
    .execute(&mut *tx)
    .await?;
    // The merge widened it; what it still holds says how far back it goes (a deleted report's
    // day counts from its midnight).
    sqlx::query!(
        "UPDATE groups t SET first_seen = coalesce(LEAST(
             (SELECT min(created_at) FROM reports WHERE group_id = t.id),
             (SELECT min(day)::timestamptz FROM group_expired_reports WHERE group_id = t.id)),
             t.first_seen)
         WHERE t.id = $1",
        holder
    )
    .execute(&mut *tx)
    .await?;
    Ok(Moved {
        reports,
        removed_reports,
        fixes,
        events,
    })
}

/// A group merged into another, as the other's page names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedGroup {
    pub id: i64,
    pub title: String,
}

/// The groups merged into group `id` (directly or through a chain), newest group first.
pub async fn merged_groups(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<MergedGroup>, DbError> {
    Ok(sqlx::query_as!(
        MergedGroup,
        "SELECT id, title FROM groups WHERE merged_into = $1 ORDER BY id DESC LIMIT 1000",
        id
    )
    .fetch_all(ex)
    .await?)
}
