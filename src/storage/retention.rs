//! Retention in SQL (migration 0020): the per-project settings, the projects stored reports
//! name, the batches a pass locks and removes (whole reports, or only their logs) with what must
//! outlive them written in the same transaction (group counts per project and day, commits'
//! first sightings), and the record of passes and of what was removed. Which project keeps what
//! for how long is decided in `app::retention`; these statements only find, lock and delete.

use sqlx::{PgConnection, PgExecutor};

use super::DbError;
use crate::actor::Actor;
use crate::time::Timestamp;

/// A project's own settings (`None`: the instance default; `Some(0)`: keep forever).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// The project, lowercase.
    pub project: String,
    pub log_days: Option<i32>,
    pub report_days: Option<i32>,
    pub updated_by: String,
    pub updated_at: Timestamp,
}

/// Every project's own settings, by project.
pub async fn overrides(ex: impl PgExecutor<'_>) -> Result<Vec<Override>, DbError> {
    Ok(sqlx::query_as!(
        Override,
        r#"SELECT project, log_days, report_days, updated_by,
             updated_at AS "updated_at: Timestamp"
         FROM project_retention
         ORDER BY project"#
    )
    .fetch_all(ex)
    .await?)
}

/// Sets `project`'s own settings (lowercase), replacing any.
pub async fn put_override(
    ex: impl PgExecutor<'_>,
    project: &str,
    log_days: Option<i32>,
    report_days: Option<i32>,
    actor: &Actor,
) -> Result<Override, DbError> {
    Ok(sqlx::query_as!(
        Override,
        r#"INSERT INTO project_retention (project, log_days, report_days, updated_by,
             updated_by_kind, updated_by_person_id, updated_by_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (project) DO UPDATE SET log_days = excluded.log_days,
             report_days = excluded.report_days, updated_by = excluded.updated_by,
             updated_by_kind = excluded.updated_by_kind,
             updated_by_person_id = excluded.updated_by_person_id,
             updated_by_token_id = excluded.updated_by_token_id, updated_at = now()
         RETURNING project, log_days, report_days, updated_by,
             updated_at AS "updated_at: Timestamp""#,
        project,
        log_days,
        report_days,
        actor.name(),
        actor.kind().as_str(),
        actor.person_id(),
        actor.token_id(),
    )
    .fetch_one(ex)
    .await?)
}

/// Removes `project`'s own settings (it then follows the instance defaults); whether it had any.
pub async fn delete_override(ex: impl PgExecutor<'_>, project: &str) -> Result<bool, DbError> {
    let done = sqlx::query!("DELETE FROM project_retention WHERE project = $1", project)
        .execute(ex)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// The projects stored reports name, lowercase and distinct, in order ('' for reports without
/// one), at most `limit`. A loose index scan: one index probe per project, however many
/// reports each has.
pub async fn report_projects(ex: impl PgExecutor<'_>, limit: i64) -> Result<Vec<String>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"WITH RECURSIVE p(project) AS (
             (SELECT lower(project) FROM reports ORDER BY lower(project) LIMIT 1)
             UNION ALL
             SELECT (SELECT lower(r.project) FROM reports r WHERE lower(r.project) > p.project
                     ORDER BY lower(r.project) LIMIT 1)
             FROM p WHERE p.project IS NOT NULL)
         SELECT project AS "project!" FROM p WHERE project IS NOT NULL LIMIT $1"#,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Locks up to `limit` reports of `project` (lowercase) uploaded before `cutoff`, oldest
/// first, and returns their ids. Rows another transaction holds are skipped (another replica's
/// pass, a reclassification), and so are reports a worker is running a job for: the next pass
/// takes them.
pub async fn lock_due_reports(
    tx: &mut PgConnection,
    project: &str,
    cutoff: Timestamp,
    limit: i64,
) -> Result<Vec<i64>, DbError> {
    // The cutoff goes as whole seconds since the epoch, an int8 as it always was bound.
    Ok(sqlx::query_scalar!(
        "SELECT r.id FROM reports r \
         WHERE lower(r.project) = $1 AND r.created_at < to_timestamp($2::int8) \
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.report_id = r.id AND j.state = 'running') \
         ORDER BY lower(r.project), r.created_at, r.id LIMIT $3 \
         FOR UPDATE OF r SKIP LOCKED",
        project,
        cutoff.unix(),
        limit
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Deletes the reports `ids` (locked by [`lock_due_reports`]) with everything that belongs only
/// to them (log chunks, search document, jobs and their attempts, reproductions, idempotency
/// keys; history entries lose their link), after adding them to their groups' expired counts
/// (kept per group they belong to when a merge put them in another, migration 0032) and
/// their commits to the first sightings. Returns the compressed log bytes deleted.
pub async fn delete_reports(tx: &mut PgConnection, ids: &[i64]) -> Result<i64, DbError> {
    // Keys in one order, so that two passes adding to the same rows cannot deadlock.
    sqlx::query!(
        "INSERT INTO group_expired_reports AS e \
             (group_id, merged_from, project, day, reports, last_seen) \
         SELECT group_id, coalesce(merged_from, 0), project, \
                (created_at AT TIME ZONE 'UTC')::date, count(*), max(created_at) \
         FROM reports WHERE id = ANY($1) GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 4, 3 \
         ON CONFLICT (group_id, merged_from, day, project) DO UPDATE SET \
             reports = e.reports + excluded.reports, \
             last_seen = GREATEST(e.last_seen, excluded.last_seen)",
        ids
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO expired_commits AS c (project, commit_sha, first_seen) \
         SELECT project, lower(btrim(commit_sha)), min(created_at) \
         FROM reports WHERE id = ANY($1) AND btrim(commit_sha) <> '' \
         GROUP BY 1, 2 ORDER BY 1, 2 \
         ON CONFLICT (project, commit_sha) DO UPDATE SET \
             first_seen = LEAST(c.first_seen, excluded.first_seen)",
        ids
    )
    .execute(&mut *tx)
    .await?;
    let bytes = chunk_bytes(&mut *tx, ids).await?;
    sqlx::query!(
        "DELETE FROM idempotency_keys WHERE (response ->> 'report_id')::bigint = ANY($1)",
        ids
    )
    .execute(&mut *tx)
    .await?;
    // Chunks, search rows, jobs (with attempts and reproductions) cascade; history entries keep
    // their text and lose the link (migrations 0002, 0003, 0010, 0016, 0017).
    sqlx::query!("DELETE FROM reports WHERE id = ANY($1)", ids)
        .execute(&mut *tx)
        .await?;
    Ok(bytes)
}

/// Compressed bytes of the stored log chunks of `ids` (read from the values' headers).
async fn chunk_bytes(tx: &mut PgConnection, ids: &[i64]) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT coalesce(sum(coalesce(octet_length(data), stored_bytes)), 0)::int8 AS "bytes!"
         FROM report_log_chunks
         WHERE report_id = ANY($1)"#,
        ids
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// Where a report whose log is due came from: what its search document keeps of it.
#[derive(Clone, Debug)]
pub struct DueLog {
    pub id: i64,
    pub filename: String,
    pub project: String,
    pub branch: String,
    pub commit_sha: String,
    pub job_url: String,
}

/// Locks up to `limit` reports of `project` (lowercase) uploaded before `cutoff` that still
/// have their log, oldest first (rows held elsewhere are skipped).
pub async fn lock_due_logs(
    tx: &mut PgConnection,
    project: &str,
    cutoff: Timestamp,
    limit: i64,
) -> Result<Vec<DueLog>, DbError> {
    Ok(sqlx::query_as!(
        DueLog,
        "SELECT id, filename, project, branch, commit_sha, job_url FROM reports \
         WHERE lower(project) = $1 AND created_at < to_timestamp($2::int8) \
           AND log_removed_at IS NULL \
         ORDER BY lower(project), created_at, id LIMIT $3 \
         FOR UPDATE SKIP LOCKED",
        project,
        cutoff.unix(),
        limit
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Deletes the logs of the reports `ids` (locked by [`lock_due_logs`]), replaces the names
/// section of their search documents with `names` (same order) and empties the log excerpt,
/// and marks them removed after `after_days`. Returns the compressed bytes deleted.
pub async fn remove_logs(
    tx: &mut PgConnection,
    ids: &[i64],
    names: &[String],
    after_days: i32,
) -> Result<i64, DbError> {
    let bytes = chunk_bytes(&mut *tx, ids).await?;
    sqlx::query!(
        "DELETE FROM report_log_chunks WHERE report_id = ANY($1)",
        ids
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE report_search s SET names = d.names, excerpt = '' \
         FROM unnest($1::int8[], $2::text[]) AS d(id, names) WHERE s.report_id = d.id",
        ids,
        names
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE reports SET log_removed_at = now(), log_removed_after_days = $2 \
         WHERE id = ANY($1)",
        ids,
        after_days
    )
    .execute(&mut *tx)
    .await?;
    Ok(bytes)
}

/// What retention removed, counted up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub logs: i64,
    pub reports: i64,
    /// Compressed log bytes.
    pub bytes: i64,
}

impl std::ops::AddAssign for Removed {
    fn add_assign(&mut self, other: Removed) {
        self.logs += other.logs;
        self.reports += other.reports;
        self.bytes += other.bytes;
    }
}

/// Adds `removed` to `project`'s totals (lowercase).
pub async fn add_removed(
    ex: impl PgExecutor<'_>,
    project: &str,
    removed: Removed,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO retention_removed AS t (project, logs_removed, reports_removed, \
             bytes_removed) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (project) DO UPDATE SET logs_removed = t.logs_removed + excluded.logs_removed, \
             reports_removed = t.reports_removed + excluded.reports_removed, \
             bytes_removed = t.bytes_removed + excluded.bytes_removed, last_removed_at = now()",
        project,
        removed.logs,
        removed.reports,
        removed.bytes
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// What retention removed from one project in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRemoved {
    /// Lowercase; '' for reports without a project.
    pub project: String,
    pub removed: Removed,
    pub last_removed_at: Timestamp,
}

/// Every project's totals, by project.
pub async fn removed_totals(ex: impl PgExecutor<'_>) -> Result<Vec<ProjectRemoved>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT project, logs_removed, reports_removed, bytes_removed,
             last_removed_at AS "last: Timestamp"
         FROM retention_removed
         ORDER BY project"#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ProjectRemoved {
            project: r.project,
            removed: Removed {
                logs: r.logs_removed,
                reports: r.reports_removed,
                bytes: r.bytes_removed,
            },
            last_removed_at: r.last,
        })
        .collect())
}

/// One pass, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassRecord {
    pub id: i64,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub removed: Removed,
    /// Why it stopped early; empty when it finished.
    pub error: String,
}

/// Records the start of a pass; its id. Passes older than `keep_days` are forgotten.
pub async fn start_run(tx: &mut PgConnection, keep_days: i32) -> Result<i64, DbError> {
    sqlx::query!(
        "DELETE FROM retention_runs WHERE started_at < now() - make_interval(days => $1)",
        keep_days
    )
    .execute(&mut *tx)
    .await?;
    Ok(
        sqlx::query_scalar!("INSERT INTO retention_runs DEFAULT VALUES RETURNING id")
            .fetch_one(&mut *tx)
            .await?,
    )
}

/// Records the end of pass `id`: what it removed, and why it stopped when it failed.
pub async fn finish_run(
    ex: impl PgExecutor<'_>,
    id: i64,
    removed: Removed,
    error: &str,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE retention_runs SET finished_at = now(), logs_removed = $2, \
             reports_removed = $3, bytes_removed = $4, error = $5 WHERE id = $1",
        id,
        removed.logs,
        removed.reports,
        removed.bytes,
        error
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// The newest passes, newest first.
pub async fn recent_runs(ex: impl PgExecutor<'_>, limit: i64) -> Result<Vec<PassRecord>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT id, started_at AS "started: Timestamp", finished_at AS "finished: Timestamp",
             logs_removed, reports_removed, bytes_removed, error
         FROM retention_runs
         ORDER BY started_at DESC, id DESC
         LIMIT $1"#,
        limit
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| PassRecord {
            id: r.id,
            started_at: r.started,
            finished_at: r.finished,
            removed: Removed {
                logs: r.logs_removed,
                reports: r.reports_removed,
                bytes: r.bytes_removed,
            },
            error: r.error,
        })
        .collect())
}
