//! The reproduction queue (DESIGN.md section 7, SECURITY.md item 11): claim with
//! `FOR UPDATE SKIP LOCKED`, leases with a random token and an expiry that heartbeats extend, a
//! reaper that requeues expired leases and buries a job after `max_attempts`, results recorded
//! exactly once per lease, and manual re-queue. Reads for the report page and API are in
//! [`super::reproductions`].
//!
//! Every finished attempt (result, worker error, expired lease) is a `job_attempts` row keyed by
//! its lease token, so a worker retrying a result post after a lost response is answered from
//! that row instead of applying the result twice.

use sqlx::Row;

use super::{Db, DbError};

/// A job handed to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    pub job_id: i64,
    pub report_id: i64,
    /// 1 for the first attempt.
    pub attempt: i32,
    pub max_attempts: i32,
    /// The lease's secret: heartbeats and the result must carry it.
    pub lease_token: String,
    /// The report's minimal reproduction script.
    pub script: String,
}

/// A job whose lease the reaper took back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reaped {
    pub job_id: i64,
    /// `queued` (another attempt) or `dead` (out of attempts).
    pub state: String,
}

/// Requeues every job whose lease has expired, or marks it `dead` with its reason when it has
/// used all its attempts; each expired lease is recorded as a finished attempt. Jobs another
/// transaction is touching are left for the next pass.
pub async fn reap_expired(db: &Db) -> Result<Vec<Reaped>, DbError> {
    let rows = sqlx::query(
        "WITH expired AS ( \
             SELECT id, attempts, max_attempts, lease_token, worker FROM jobs \
             WHERE state = 'running' AND lease_expires_at <= now() \
             ORDER BY id FOR UPDATE SKIP LOCKED), \
         recorded AS ( \
             INSERT INTO job_attempts (job_id, attempt, lease_token, outcome, error, worker) \
             SELECT id, attempts, lease_token, 'expired', \
                 'the lease expired: worker ' || worker || ' stopped heartbeating', worker \
             FROM expired ON CONFLICT (lease_token) DO NOTHING) \
         UPDATE jobs j SET \
             state = CASE WHEN e.attempts >= e.max_attempts THEN 'dead' ELSE 'queued' END, \
             last_error = 'the lease expired: worker ' || e.worker || ' stopped heartbeating', \
             dead_reason = CASE WHEN e.attempts >= e.max_attempts THEN \
                 format('gave up after %s of %s attempts; the last one: the lease expired (worker %s stopped heartbeating)', \
                        e.attempts, e.max_attempts, e.worker) \
                 ELSE '' END, \
             lease_token = NULL, lease_expires_at = NULL, updated_at = now() \
         FROM expired e WHERE j.id = e.id \
         RETURNING j.id, j.state",
    )
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(Reaped {
                job_id: r.try_get("id")?,
                state: r.try_get("state")?,
            })
        })
        .collect()
}

/// Claims the oldest queued job for `worker` with a fresh lease of `lease_secs`, or `None` when
/// nothing is queued. Concurrent claimers skip each other's locked rows, so each job goes to
/// exactly one of them.
pub async fn claim(db: &Db, worker: &str, lease_secs: u32) -> Result<Option<Claimed>, DbError> {
    let row = sqlx::query(
        "WITH next AS ( \
             SELECT j.id FROM jobs j \
             WHERE j.state = 'queued' \
             ORDER BY j.created_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED) \
         UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, \
             lease_token = gen_random_uuid(), \
             lease_expires_at = now() + make_interval(secs => $2), \
             worker = $1, claimed_at = now(), updated_at = now() \
         FROM next WHERE j.id = next.id AND j.state = 'queued' \
         RETURNING j.id, j.report_id, j.attempts, j.max_attempts, j.lease_token::text AS token, \
             (SELECT r.script FROM reports r WHERE r.id = j.report_id) AS script",
    )
    .bind(worker)
    .bind(f64::from(lease_secs))
    .fetch_optional(db.pool())
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Claimed {
        job_id: row.try_get("id")?,
        report_id: row.try_get("report_id")?,
        attempt: row.try_get("attempts")?,
        max_attempts: row.try_get("max_attempts")?,
        lease_token: row.try_get("token")?,
        script: row
            .try_get::<Option<String>, _>("script")?
            .unwrap_or_default(),
    }))
}

/// What a heartbeat did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease now runs `lease_secs` from now.
    Extended,
    /// The lease is not this token's any more (expired, reaped, reassigned, or never was).
    Lost,
    /// No such job.
    UnknownJob,
}

/// Extends a live lease by `lease_secs` from now. An expired lease is lost even before the
/// reaper has taken it back: the worker must stop.
pub async fn heartbeat(
    db: &Db,
    job_id: i64,
    lease_token: &str,
    lease_secs: u32,
) -> Result<Heartbeat, DbError> {
    let row = sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now() \
         WHERE id = $1 AND state = 'running' AND lease_token::text = $2 \
             AND lease_expires_at > now() \
         RETURNING id",
    )
    .bind(job_id)
    .bind(lease_token)
    .bind(f64::from(lease_secs))
    .fetch_optional(db.pool())
    .await?;
    if row.is_some() {
        return Ok(Heartbeat::Extended);
    }
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)")
        .bind(job_id)
        .fetch_one(db.pool())
        .await?;
    Ok(if exists {
        Heartbeat::Lost
    } else {
        Heartbeat::UnknownJob
    })
}

/// A worker's result, secrets already scrubbed and the output classified.
#[derive(Clone, Debug)]
pub struct NewReproduction {
    pub job_id: i64,
    pub lease_token: String,
    /// SHA-256 of the result as received, to tell a retry from a different result.
    pub request_sha256: Vec<u8>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: i64,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
    pub gpu: Option<serde_json::Value>,
    pub no_gpu: bool,
    /// `bwrap` or `none`.
    pub sandbox: String,
    /// The worker's name; empty for the one that claimed the job.
    pub worker: String,
    /// DESIGN.md section 3, of the combined output.
    pub classification: serde_json::Value,
}

/// A worker's report that the attempt could not run (sandbox failed to start, ...).
#[derive(Clone, Debug)]
pub struct FailedAttempt {
    pub job_id: i64,
    pub lease_token: String,
    pub request_sha256: Vec<u8>,
    pub error: String,
    /// The worker's name; empty for the one that claimed the job.
    pub worker: String,
}

/// The recorded outcome of one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub job_id: i64,
    pub report_id: i64,
    /// The reproduction row, for a result (`None` for a worker-reported error).
    pub reproduction_id: Option<i64>,
    /// The job's state now: `done` after a result; `queued` or `dead` after an error.
    pub state: String,
    /// The reproduction's classification, for a result.
    pub classification: Option<serde_json::Value>,
}

/// What posting a result (or an error) did.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Recorded now.
    Recorded(Recorded),
    /// This lease's attempt was already recorded with the same body: the stored outcome.
    Replayed(Recorded),
    /// The lease is stale (expired, reaped, reassigned, wrong token) or this lease already
    /// recorded a different outcome; the text says which.
    Stale(String),
    /// No such job.
    UnknownJob,
}

/// The job row as a result post sees it, locked.
struct Locked {
    report_id: i64,
    state: String,
    attempts: i32,
    max_attempts: i32,
    live_token: Option<String>,
    /// The worker that claimed the job (used when the post does not name one).
    worker: String,
}

/// Locks the job, answers replays and stale leases; `Ok(Err(outcome))` ends the post there.
async fn lock_for_result(
    tx: &mut sqlx::PgConnection,
    job_id: i64,
    lease_token: &str,
    request_sha256: &[u8],
) -> Result<Result<Locked, Outcome>, DbError> {
    let Some(job) = sqlx::query(
        "SELECT report_id, state, attempts, max_attempts, worker, \
             CASE WHEN lease_expires_at > now() THEN lease_token::text END AS live_token \
         FROM jobs WHERE id = $1 FOR UPDATE",
    )
    .bind(job_id)
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(Err(Outcome::UnknownJob));
    };
    let locked = Locked {
        report_id: job.try_get("report_id")?,
        state: job.try_get("state")?,
        attempts: job.try_get("attempts")?,
        max_attempts: job.try_get("max_attempts")?,
        live_token: job.try_get("live_token")?,
        worker: job.try_get("worker")?,
    };
    let earlier = sqlx::query(
        "SELECT outcome, request_sha256 FROM job_attempts \
         WHERE job_id = $1 AND lease_token::text = $2",
    )
    .bind(job_id)
    .bind(lease_token)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(earlier) = earlier {
        let outcome: String = earlier.try_get("outcome")?;
        let sha: Option<Vec<u8>> = earlier.try_get("request_sha256")?;
        if outcome == "expired" {
            return Ok(Err(Outcome::Stale(
                "the lease expired before the result arrived; the job was requeued".into(),
            )));
        }
        if sha.as_deref() != Some(request_sha256) {
            return Ok(Err(Outcome::Stale(
                "a different result was already recorded for this lease".into(),
            )));
        }
        let repro = sqlx::query("SELECT id, classification FROM reproductions WHERE job_id = $1")
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?;
        let (reproduction_id, classification) = match (&repro, outcome.as_str()) {
            (Some(r), "result") => (Some(r.try_get("id")?), Some(r.try_get("classification")?)),
            _ => (None, None),
        };
        let state = if outcome == "result" {
            "done".to_owned()
        } else {
            locked.state.clone()
        };
        return Ok(Err(Outcome::Replayed(Recorded {
            job_id,
            report_id: locked.report_id,
            reproduction_id,
            state,
            classification,
        })));
    }
    if locked.state != "running" || locked.live_token.as_deref() != Some(lease_token) {
        return Ok(Err(Outcome::Stale(
            "this lease is no longer valid (expired, reassigned, or a wrong token)".into(),
        )));
    }
    Ok(Ok(locked))
}

/// Records a result: the reproduction row, the finished attempt, the job `done`, in one
/// transaction. Exactly once per job: a replay of the same lease is answered from storage.
pub async fn record_result(db: &Db, r: &NewReproduction) -> Result<Outcome, DbError> {
    let mut tx = db.pool().begin().await?;
    let locked = match lock_for_result(&mut tx, r.job_id, &r.lease_token, &r.request_sha256).await?
    {
        Ok(l) => l,
        Err(outcome) => {
            // Release the job's row lock now, not when the pool gets round to it.
            tx.rollback().await?;
            return Ok(outcome);
        }
    };
    let worker = if r.worker.is_empty() {
        &locked.worker
    } else {
        &r.worker
    };
    sqlx::query(
        "INSERT INTO job_attempts (job_id, attempt, lease_token, outcome, worker, request_sha256) \
         VALUES ($1, $2, $3::uuid, 'result', $4, $5)",
    )
    .bind(r.job_id)
    .bind(locked.attempts)
    .bind(&r.lease_token)
    .bind(worker)
    .bind(&r.request_sha256)
    .execute(&mut *tx)
    .await?;
    let reproduction_id: i64 = sqlx::query_scalar(
        "INSERT INTO reproductions (job_id, report_id, attempt, exit_code, signal, timed_out, \
             duration_ms, stdout, stderr, truncated, gpu, no_gpu, sandbox, worker, classification) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING id",
    )
    .bind(r.job_id)
    .bind(locked.report_id)
    .bind(locked.attempts)
    .bind(r.exit_code)
    .bind(r.signal)
    .bind(r.timed_out)
    .bind(r.duration_ms)
    .bind(&r.stdout)
    .bind(&r.stderr)
    .bind(r.truncated)
    .bind(&r.gpu)
    .bind(r.no_gpu)
    .bind(&r.sandbox)
    .bind(worker)
    .bind(&r.classification)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE jobs SET state = 'done', lease_token = NULL, lease_expires_at = NULL, \
             last_error = '', updated_at = now() WHERE id = $1",
    )
    .bind(r.job_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Outcome::Recorded(Recorded {
        job_id: r.job_id,
        report_id: locked.report_id,
        reproduction_id: Some(reproduction_id),
        state: "done".into(),
        classification: Some(r.classification.clone()),
    }))
}

/// Records a worker-reported failure as a failed attempt: the job is requeued, or `dead` with
/// its reason when it has used all its attempts.
pub async fn record_failure(db: &Db, f: &FailedAttempt) -> Result<Outcome, DbError> {
    let mut tx = db.pool().begin().await?;
    let locked = match lock_for_result(&mut tx, f.job_id, &f.lease_token, &f.request_sha256).await?
    {
        Ok(l) => l,
        Err(outcome) => {
            // Release the job's row lock now, not when the pool gets round to it.
            tx.rollback().await?;
            return Ok(outcome);
        }
    };
    let worker = if f.worker.is_empty() {
        &locked.worker
    } else {
        &f.worker
    };
    sqlx::query(
        "INSERT INTO job_attempts (job_id, attempt, lease_token, outcome, error, worker, \
             request_sha256) VALUES ($1, $2, $3::uuid, 'error', $4, $5, $6)",
    )
    .bind(f.job_id)
    .bind(locked.attempts)
    .bind(&f.lease_token)
    .bind(&f.error)
    .bind(worker)
    .bind(&f.request_sha256)
    .execute(&mut *tx)
    .await?;
    let dead = locked.attempts >= locked.max_attempts;
    let dead_reason = if dead {
        format!(
            "gave up after {} of {} attempts; the last one failed on worker {}: {}",
            locked.attempts, locked.max_attempts, worker, f.error
        )
    } else {
        String::new()
    };
    let state: String = sqlx::query_scalar(
        "UPDATE jobs SET state = CASE WHEN $2 THEN 'dead' ELSE 'queued' END, \
             lease_token = NULL, lease_expires_at = NULL, last_error = $3, dead_reason = $4, \
             updated_at = now() \
         WHERE id = $1 RETURNING state",
    )
    .bind(f.job_id)
    .bind(dead)
    .bind(format!("worker {worker}: {}", f.error))
    .bind(&dead_reason)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Outcome::Recorded(Recorded {
        job_id: f.job_id,
        report_id: locked.report_id,
        reproduction_id: None,
        state,
        classification: None,
    }))
}

/// What a manual re-queue did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// A new job for the same report, queued.
    Queued { job_id: i64, report_id: i64 },
    /// The job is still queued or running: nothing to re-queue.
    NotFinished { report_id: i64 },
    /// Another job of the report is already queued or running.
    AlreadyQueued { report_id: i64, job_id: i64 },
    /// No such job.
    UnknownJob,
}

/// Re-queues a `done` or `dead` job as a new job of the same report (the old one keeps its
/// attempts, reason and reproduction as history). One pending job per report at most.
pub async fn requeue(db: &Db, job_id: i64, by: &str) -> Result<Requeue, DbError> {
    let mut tx = db.pool().begin().await?;
    let Some(job) = sqlx::query("SELECT report_id, state FROM jobs WHERE id = $1")
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?
    else {
        tx.rollback().await?;
        return Ok(Requeue::UnknownJob);
    };
    let report_id: i64 = job.try_get("report_id")?;
    let state: String = job.try_get("state")?;
    if state == "queued" || state == "running" {
        tx.rollback().await?;
        return Ok(Requeue::NotFinished { report_id });
    }
    // Serialises re-queues of one report, so two clicks give one new job.
    sqlx::query("SELECT id FROM reports WHERE id = $1 FOR UPDATE")
        .bind(report_id)
        .execute(&mut *tx)
        .await?;
    let pending: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM jobs WHERE report_id = $1 AND state IN ('queued', 'running') LIMIT 1",
    )
    .bind(report_id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(job_id) = pending {
        tx.rollback().await?;
        return Ok(Requeue::AlreadyQueued { report_id, job_id });
    }
    let new_id: i64 = sqlx::query_scalar(
        "INSERT INTO jobs (report_id, max_attempts, requeued_from, requeued_by) \
         SELECT report_id, max_attempts, id, $2 FROM jobs WHERE id = $1 RETURNING id",
    )
    .bind(job_id)
    .bind(by)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Requeue::Queued {
        job_id: new_id,
        report_id,
    })
}
