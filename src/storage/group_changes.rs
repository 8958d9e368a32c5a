//! Triage changes of one or more groups as one undoable step (migration 0031): the change (who,
//! what in words, whether it was undone) and each group's triage before and after it, with the
//! newest history entry it left. Policy (what may be undone, when a group counts as changed
//! since) lives in `app::group_triage::undo`.

use sqlx::{PgConnection, PgExecutor};

use super::DbError;
use super::group_triage::Triage;
use crate::actor::Actor;
use crate::api_types::GroupState;
use crate::time::Timestamp;

/// A recorded change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub id: i64,
    pub at: Timestamp,
    /// What it did, as a verb phrase (`resolved`, `ignored until it happens again`).
    pub summary: String,
    /// Who made it (the name then).
    pub actor: String,
    /// Who undid it, when it was undone.
    pub undone_by: Option<String>,
    /// The groups it changed.
    pub groups: i64,
}

/// One group of a change: its triage before and after, and the newest history entry of the
/// group once the change was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedGroup {
    pub group_id: i64,
    pub before: Triage,
    pub after: Triage,
    pub last_event_id: Option<i64>,
}

/// Records a change by `actor` and returns its id.
pub async fn insert_change(
    ex: impl PgExecutor<'_>,
    summary: &str,
    actor: &Actor,
) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO group_changes (summary, actor, actor_kind, actor_person_id, actor_token_id)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
        summary,
        actor.name(),
        actor.kind().as_str(),
        actor.person_id(),
        actor.token_id(),
    )
    .fetch_one(ex)
    .await?)
}

/// Records one group of change `change_id`.
pub async fn insert_group(
    ex: impl PgExecutor<'_>,
    change_id: i64,
    g: &ChangedGroup,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO group_change_groups (change_id, group_id, before_state,
             before_resolved_in, before_assignee, before_assignee_person_id,
             before_ignore_reports_left, after_state, after_resolved_in, after_assignee,
             after_assignee_person_id, after_ignore_reports_left, last_event_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        change_id,
        g.group_id,
        g.before.state.as_str(),
        g.before.resolved_in,
        g.before.assignee,
        g.before.assignee_person_id,
        g.before.ignore_reports_left,
        g.after.state.as_str(),
        g.after.resolved_in,
        g.after.assignee,
        g.after.assignee_person_id,
        g.after.ignore_reports_left,
        g.last_event_id,
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Change `id`, or `None`.
pub async fn get_change(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Change>, DbError> {
    Ok(sqlx::query_as!(
        Change,
        r#"SELECT c.id, c.at AS "at: Timestamp", c.summary, c.actor, c.undone_by,
             (SELECT count(*) FROM group_change_groups i WHERE i.change_id = c.id) AS "groups!"
         FROM group_changes c WHERE c.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// Change `id`, its row locked until the transaction ends (two undos of it queue), or `None`.
pub async fn lock_change(tx: &mut PgConnection, id: i64) -> Result<Option<Change>, DbError> {
    Ok(sqlx::query_as!(
        Change,
        r#"SELECT c.id, c.at AS "at: Timestamp", c.summary, c.actor, c.undone_by,
             (SELECT count(*) FROM group_change_groups i WHERE i.change_id = c.id) AS "groups!"
         FROM group_changes c WHERE c.id = $1 FOR UPDATE"#,
        id
    )
    .fetch_optional(tx)
    .await?)
}

/// The groups of change `id`, by group id ascending (the order their rows are locked in).
pub async fn change_groups(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<ChangedGroup>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT group_id, before_state AS "before_state: GroupState", before_resolved_in,
             before_assignee, before_assignee_person_id, before_ignore_reports_left,
             after_state AS "after_state: GroupState", after_resolved_in, after_assignee,
             after_assignee_person_id, after_ignore_reports_left, last_event_id
         FROM group_change_groups WHERE change_id = $1 ORDER BY group_id"#,
        id
    )
    .fetch_all(ex)
    .await?;
    // Not recorded: a change is undone as of now.
    let unrecorded = Timestamp::from_unix(0);
    Ok(rows
        .into_iter()
        .map(|r| ChangedGroup {
            group_id: r.group_id,
            before: Triage {
                state: r.before_state,
                resolved_in: r.before_resolved_in,
                assignee: r.before_assignee,
                assignee_person_id: r.before_assignee_person_id,
                ignore_reports_left: r.before_ignore_reports_left,
                state_changed_at: unrecorded,
            },
            after: Triage {
                state: r.after_state,
                resolved_in: r.after_resolved_in,
                assignee: r.after_assignee,
                assignee_person_id: r.after_assignee_person_id,
                ignore_reports_left: r.after_ignore_reports_left,
                state_changed_at: unrecorded,
            },
            last_event_id: r.last_event_id,
        })
        .collect())
}

/// Marks change `id` undone by `actor`.
pub async fn mark_undone(ex: impl PgExecutor<'_>, id: i64, actor: &Actor) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE group_changes SET undone_at = now(), undone_by = $2 WHERE id = $1",
        id,
        actor.name()
    )
    .execute(ex)
    .await?;
    Ok(())
}
