//! The story of a report uploaded as a run (migration 0043): written with the report, in its
//! transaction, and read back with it.

use sqlx::PgExecutor;
use sqlx::types::Json;

use crate::rules::run::RunStory;
use crate::storage::DbError;

/// Records `story` as report `report_id`'s run.
pub async fn insert_story(
    ex: impl PgExecutor<'_>,
    report_id: i64,
    story: &RunStory,
) -> Result<(), DbError> {
    sqlx::query!(
        "INSERT INTO job_runs (report_id, action, files, story) VALUES ($1, $2, $3, $4)",
        report_id,
        story.action.kind.as_str(),
        i32::try_from(story.files.len()).unwrap_or(i32::MAX),
        Json(story) as _
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// The run's story of report `report_id`, `None` when the report is not a run (or a story
/// this version cannot read, which is passed over as no story).
pub async fn get_story(
    ex: impl PgExecutor<'_>,
    report_id: i64,
) -> Result<Option<RunStory>, DbError> {
    // Read as any JSON first: a story this version cannot read is no story, not an error.
    let row = sqlx::query_scalar!("SELECT story FROM job_runs WHERE report_id = $1", report_id)
        .fetch_optional(ex)
        .await?;
    Ok(row.and_then(|v| serde_json::from_value(v).ok()))
}

/// Replaces report `report_id`'s run story (a reclassification told it again).
pub async fn update_story(
    ex: impl PgExecutor<'_>,
    report_id: i64,
    story: &RunStory,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE job_runs SET action = $2, files = $3, story = $4 WHERE report_id = $1",
        report_id,
        story.action.kind.as_str(),
        i32::try_from(story.files.len()).unwrap_or(i32::MAX),
        Json(story) as _
    )
    .execute(ex)
    .await?;
    Ok(())
}
