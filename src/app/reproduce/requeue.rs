//! The re-queue use case: a finished (`done` or `dead`) job queued again as a new job of the
//! same report, at most one pending job per report, waking waiting claims.

use super::Queue;
use crate::app::Error;
use crate::storage::DbError;
use crate::storage::jobs as store;

/// What a manual re-queue did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// A new job for the same report, queued.
    Queued { job_id: i64, report_id: i64 },
    /// The job is still queued or running: nothing to re-queue.
    NotFinished { report_id: i64 },
    /// Another job of the report is already queued or running.
    AlreadyQueued { report_id: i64, job_id: i64 },
}

/// Re-queues a `done` or `dead` job as a new job of the same report (the old one keeps its
/// attempts, reason and reproduction as history). One pending job per report at most: two
/// clicks give one new job. Wakes waiting claims on this server.
#[tracing::instrument(name = "reproduce::requeue", skip_all, fields(job_id, by))]
pub async fn requeue(queue: &Queue, job_id: i64, by: &str) -> Result<Requeue, Error> {
    let mut tx = queue.db.pool().begin().await.map_err(DbError::from)?;
    let outcome = requeue_in(&mut tx, job_id, by).await;
    match &outcome {
        Ok(Requeue::Queued { .. }) => tx.commit().await.map_err(DbError::from)?,
        _ => tx.rollback().await.map_err(DbError::from)?,
    }
    if let Ok(Requeue::Queued { .. }) = outcome {
        queue.wake.notify_waiters();
    }
    outcome
}

async fn requeue_in(tx: &mut sqlx::PgConnection, job_id: i64, by: &str) -> Result<Requeue, Error> {
    let (report_id, state) = store::job_report_and_state(&mut *tx, job_id)
        .await?
        .ok_or(Error::NotFound("job"))?;
    if !state.is_finished() {
        return Ok(Requeue::NotFinished { report_id });
    }
    // Serialises re-queues of one report.
    store::lock_report(&mut *tx, report_id).await?;
    if let Some(job_id) = store::pending_job(&mut *tx, report_id).await? {
        return Ok(Requeue::AlreadyQueued { report_id, job_id });
    }
    let job_id = store::insert_requeued(&mut *tx, job_id, by).await?;
    Ok(Requeue::Queued { job_id, report_id })
}
