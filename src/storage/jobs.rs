//! Reproduction jobs as the report API shows them (the queue itself arrives with the worker).

use sqlx::Row;

use super::{Db, DbError};

/// A reproduction job of a report and, once run, its result.
#[derive(Clone, Debug)]
pub struct JobView {
    pub id: i64,
    pub state: String,
    pub attempts: i32,
    pub last_error: String,
}

/// The jobs of a report, oldest first.
pub async fn report_jobs(db: &Db, report_id: i64) -> Result<Vec<JobView>, DbError> {
    let rows = sqlx::query(
        "SELECT id, state, attempts, last_error FROM jobs WHERE report_id = $1 ORDER BY id",
    )
    .bind(report_id)
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(JobView {
                id: r.try_get("id")?,
                state: r.try_get("state")?,
                attempts: r.try_get("attempts")?,
                last_error: r.try_get("last_error")?,
            })
        })
        .collect()
}
