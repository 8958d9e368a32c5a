//! The claim use case: a worker long-polls for the oldest queued job it may run and gets it
//! with a fresh lease; leases that expired meanwhile are reaped on the way.

use std::time::Duration;

use super::checks::{check_gpu, check_sandbox, check_worker};
use super::{Queue, workers};
use crate::api_types::{ClaimRequest, ClaimedJob, ErrorCode};
use crate::app::Error;
use crate::storage::jobs::{self as store, Reaped};

/// What a claim gave: the job (none when the wait ended idle) and the leases reaped meanwhile.
#[derive(Debug, Default)]
pub struct Claim {
    pub job: Option<ClaimedJob>,
    pub reaped: Vec<Reaped>,
}

/// Claims the oldest queued job for a worker with a fresh lease, waiting up to `wait_secs`
/// (at most `max_wait_secs`) for one. The wait holds no database connection: it retries the
/// claim when this server queues a job, and at least every `poll`.
#[tracing::instrument(name = "reproduce::claim", skip_all, fields(worker = %req.worker, job_id = tracing::field::Empty))]
pub async fn claim(queue: &Queue, mut req: ClaimRequest) -> Result<Claim, Error> {
    check_worker(&req.worker)?;
    check_sandbox(&req.sandbox)?;
    check_gpu(&mut req.gpu)?;
    if req.gpu.as_ref().is_none_or(serde_json::Value::is_null) && !req.no_gpu {
        return Err(Error::Invalid(
            ErrorCode::NoGpu,
            "a worker without a GPU must say so with \"no_gpu\": true; it may not claim GPU jobs"
                .into(),
        ));
    }
    workers::note_claim(&queue.db, &req).await;
    let settings = &queue.settings;
    let wait = Duration::from_secs(req.wait_secs.min(settings.max_wait_secs));
    let deadline = tokio::time::Instant::now() + wait;
    let mut claim = Claim::default();
    loop {
        // Registered before looking, so a job queued between the look and the wait wakes it.
        let woken = queue.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        claim
            .reaped
            .extend(store::reap_expired(queue.db.pool()).await?);
        let has_gpu = req.gpu.as_ref().is_some_and(|g| !g.is_null()) && !req.no_gpu;
        if let Some(job) =
            store::claim(queue.db.pool(), &req.worker, settings.lease_secs, has_gpu).await?
        {
            // A script the object store keeps is read now; a store that fails puts the job
            // back, its attempt not counted, and the worker gets the error (503: try again).
            let script = match crate::app::log_objects::read_script(&queue.db, job.script).await {
                Ok(script) => script,
                Err(e) => {
                    if let Err(undo) =
                        store::unclaim(queue.db.pool(), job.job_id, &job.lease_token).await
                    {
                        tracing::warn!(error = %undo, job = job.job_id, "putting a job back after its script could not be read");
                    }
                    return Err(e);
                }
            };
            tracing::Span::current().record("job_id", job.job_id);
            tracing::info!(job = job.job_id, worker = %req.worker, attempt = job.attempt, "job claimed");
            claim.job = Some(ClaimedJob {
                job_id: job.job_id,
                report_id: job.report_id,
                attempt: job.attempt,
                max_attempts: job.max_attempts,
                lease_token: job.lease_token,
                lease_secs: settings.lease_secs,
                script,
                script_name: "repro.py".into(),
                timeout_secs: settings.timeout_secs,
                repeats: job.repeats,
            });
            return Ok(claim);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(claim);
        }
        let nap = (deadline - now).min(settings.poll);
        tokio::select! {
            () = &mut woken => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}
