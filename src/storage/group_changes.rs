//! Triage changes of one or more groups as one undoable step (migration 0031): the change (who,
//! what in words, whether it was undone) and each group's triage before and after it, with the
//! newest history entry it left. Policy (what may be undone, when a group counts as changed
//! since) lives in `app::group_triage::undo`.

use sqlx::{PgConnection, PgExecutor, Row};

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
    Ok(sqlx::query_scalar(
        "INSERT INTO group_changes (summary, actor, actor_kind, actor_person_id, actor_token_id) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(summary)
    .bind(actor.name())
    .bind(actor.kind())
    .bind(actor.person_id())
    .bind(actor.token_id())
    .fetch_one(ex)
    .await?)
}

/// Records one group of change `change_id`.
pub async fn insert_group(
    ex: impl PgExecutor<'_>,
    change_id: i64,
    g: &ChangedGroup,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO group_change_groups (change_id, group_id, before_state, \
             before_resolved_in, before_assignee, before_assignee_person_id, \
             before_ignore_reports_left, after_state, after_resolved_in, after_assignee, \
             after_assignee_person_id, after_ignore_reports_left, last_event_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(change_id)
    .bind(g.group_id)
    .bind(g.before.state)
    .bind(&g.before.resolved_in)
    .bind(&g.before.assignee)
    .bind(g.before.assignee_person_id)
    .bind(g.before.ignore_reports_left)
    .bind(g.after.state)
    .bind(&g.after.resolved_in)
    .bind(&g.after.assignee)
    .bind(g.after.assignee_person_id)
    .bind(g.after.ignore_reports_left)
    .bind(g.last_event_id)
    .execute(ex)
    .await?;
    Ok(())
}

const CHANGE_COLUMNS: &str = concat!(
    "c.id, ",
    "c.at",
    " AS at_s, c.summary, c.actor, c.undone_by, \
     (SELECT count(*) FROM group_change_groups i WHERE i.change_id = c.id) AS groups"
);

fn change_of(r: &sqlx::postgres::PgRow) -> Result<Change, DbError> {
    Ok(Change {
        id: r.try_get("id")?,
        at: r.try_get("at_s")?,
        summary: r.try_get("summary")?,
        actor: r.try_get("actor")?,
        undone_by: r.try_get("undone_by")?,
        groups: r.try_get("groups")?,
    })
}

/// Change `id`, or `None`.
pub async fn get_change(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Change>, DbError> {
    let sql = format!("SELECT {CHANGE_COLUMNS} FROM group_changes c WHERE c.id = $1");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(ex)
        .await?;
    row.as_ref().map(change_of).transpose()
}

/// Change `id`, its row locked until the transaction ends (two undos of it queue), or `None`.
pub async fn lock_change(tx: &mut PgConnection, id: i64) -> Result<Option<Change>, DbError> {
    let sql = format!("SELECT {CHANGE_COLUMNS} FROM group_changes c WHERE c.id = $1 FOR UPDATE");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(tx)
        .await?;
    row.as_ref().map(change_of).transpose()
}

/// The groups of change `id`, by group id ascending (the order their rows are locked in).
pub async fn change_groups(ex: impl PgExecutor<'_>, id: i64) -> Result<Vec<ChangedGroup>, DbError> {
    let rows = sqlx::query(
        "SELECT group_id, before_state, before_resolved_in, before_assignee, \
             before_assignee_person_id, before_ignore_reports_left, after_state, \
             after_resolved_in, after_assignee, after_assignee_person_id, \
             after_ignore_reports_left, last_event_id \
         FROM group_change_groups WHERE change_id = $1 ORDER BY group_id",
    )
    .bind(id)
    .fetch_all(ex)
    .await?;
    let triage = |r: &sqlx::postgres::PgRow, side: &str| -> Result<Triage, DbError> {
        let state: GroupState = r.try_get(format!("{side}_state").as_str())?;
        Ok(Triage {
            state,
            resolved_in: r.try_get(format!("{side}_resolved_in").as_str())?,
            assignee: r.try_get(format!("{side}_assignee").as_str())?,
            assignee_person_id: r.try_get(format!("{side}_assignee_person_id").as_str())?,
            ignore_reports_left: r.try_get(format!("{side}_ignore_reports_left").as_str())?,
            // Not recorded: a change is undone as of now.
            state_changed_at: Timestamp::from_unix(0),
        })
    };
    rows.iter()
        .map(|r| {
            Ok(ChangedGroup {
                group_id: r.try_get("group_id")?,
                before: triage(r, "before")?,
                after: triage(r, "after")?,
                last_event_id: r.try_get("last_event_id")?,
            })
        })
        .collect()
}

/// Marks change `id` undone by `actor`.
pub async fn mark_undone(ex: impl PgExecutor<'_>, id: i64, actor: &Actor) -> Result<(), DbError> {
    sqlx::query("UPDATE group_changes SET undone_at = now(), undone_by = $2 WHERE id = $1")
        .bind(id)
        .bind(actor.name())
        .execute(ex)
        .await?;
    Ok(())
}
