//! The heartbeat use case: a running job's worker extends its lease, or learns that it lost it
//! and must stop the run.

use super::checks::{lease_lost, plausible_lease};
use super::{Queue, workers};
use crate::app::Error;
use crate::storage::jobs as store;
use crate::storage::workers::Contact;

/// Extends a live lease; returns the lease's new length. A lease that is not this token's any
/// more (expired, reaped, reassigned) is a conflict: the worker must stop.
#[tracing::instrument(name = "reproduce::heartbeat", skip_all, fields(job_id))]
pub async fn heartbeat(queue: &Queue, job_id: i64, lease_token: &str) -> Result<u32, Error> {
    let lease_secs = queue.settings.lease_secs;
    let pool = queue.db.pool();
    if plausible_lease(lease_token)
        && let Some(worker) = store::extend_lease(pool, job_id, lease_token, lease_secs).await?
    {
        workers::note_contact(&queue.db, &worker, Contact::Heartbeat).await;
        return Ok(lease_secs);
    }
    if store::job_exists(pool, job_id).await? {
        Err(lease_lost(
            "the lease is lost (expired, reassigned, or a wrong token); stop the run",
        ))
    } else {
        Err(Error::NotFound("job"))
    }
}
