//! The reproduction queue's statements (DESIGN.md section 7, SECURITY.md item 11): claim with
//! `FOR UPDATE SKIP LOCKED`, leases with a random token and an expiry that heartbeats extend,
//! the reaper's requeue of expired leases, and the rows a result, a failed attempt or a manual
//! re-queue writes. What a result means (stale lease, replay, dead after `max_attempts`) is
//! decided in `app::reproduce`, which composes these in one transaction. Reads for the report
//! page and API are in [`super::reproductions`].
//!
//! Every finished attempt (result, worker error, expired lease) is a `job_attempts` row keyed by
//! its lease token, so a worker retrying a result post after a lost response is answered from
//! that row instead of applying the result twice.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};

pub use super::attempts::AttemptOutcome;
use super::attempts::RunRecord;
use super::{Db, DbError};
use crate::api_types::JobState;
use crate::rules::Classification;
use crate::storage::reports::StoredScript;

/// The channel a committed job row in state `queued` notifies (migration 0046).
pub const QUEUED_CHANNEL: &str = "gpu_triage_jobs";

/// A dedicated connection listening on [`QUEUED_CHANNEL`].
pub struct QueuedListener(sqlx::postgres::PgListener);

/// Opens the listener (its own connection, reconnected by sqlx after a drop).
pub async fn listen_queued(db: &Db) -> Result<QueuedListener, DbError> {
    let mut l = sqlx::postgres::PgListener::connect_with(db.pool()).await?;
    l.listen(QUEUED_CHANNEL).await?;
    Ok(QueuedListener(l))
}

impl QueuedListener {
    /// Waits for the next notification.
    pub async fn recv(&mut self) -> Result<(), DbError> {
        self.0.recv().await?;
        Ok(())
    }
}

/// A job handed to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasedJob {
    pub job_id: i64,
    pub report_id: i64,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub max_attempts: u32,
    /// The lease's secret: heartbeats and the result must carry it.
    pub lease_token: String,
    /// The report's minimal reproduction script, or where the object store keeps it.
    pub script: crate::storage::reports::StoredScript,
    /// Runs asked for.
    pub repeats: u8,
}

/// A job whose lease the reaper took back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reaped {
    pub job_id: i64,
    /// `Queued` (another attempt) or `Dead` (out of attempts).
    pub state: JobState,
}

/// Requeues every job whose lease has expired, or marks it `dead` with its reason when it has
/// used all its attempts; each expired lease is recorded as a finished attempt. Jobs another
/// transaction is touching are left for the next pass. One statement, so it needs no
/// transaction of its caller's.
pub async fn reap_expired(ex: impl PgExecutor<'_>) -> Result<Vec<Reaped>, DbError> {
    Ok(sqlx::query_as!(
        Reaped,
        r#"WITH expired AS (
             SELECT id, attempts, max_attempts, lease_token, worker FROM jobs
             WHERE state = 'running' AND lease_expires_at <= now()
             ORDER BY id FOR UPDATE SKIP LOCKED),
         recorded AS (
             INSERT INTO job_attempts (job_id, attempt, lease_token, outcome, error, worker)
             SELECT id, attempts, lease_token, 'expired',
                 'the lease expired: worker ' || worker || ' stopped heartbeating', worker
             FROM expired ON CONFLICT (lease_token) DO NOTHING)
         UPDATE jobs j SET
             state = CASE WHEN e.attempts >= e.max_attempts THEN 'dead' ELSE 'queued' END,
             last_error = 'the lease expired: worker ' || e.worker || ' stopped heartbeating',
             dead_reason = CASE WHEN e.attempts >= e.max_attempts THEN
                 format('gave up after %s of %s attempts; the last one: the lease expired (worker %s stopped heartbeating)',
                        e.attempts, e.max_attempts, e.worker)
                 ELSE '' END,
             lease_token = NULL, lease_expires_at = NULL, updated_at = now()
         FROM expired e WHERE j.id = e.id
         RETURNING j.id AS job_id, j.state AS "state: JobState""#
    )
    .fetch_all(ex)
    .await?)
}

/// Claims the oldest queued job for `worker` with a fresh lease of `lease_secs`, or `None` when
/// nothing is queued. Concurrent claimers skip each other's locked rows, so each job goes to
/// exactly one of them.
pub async fn claim(
    ex: impl PgExecutor<'_>,
    worker: &str,
    lease_secs: u32,
    has_gpu: bool,
) -> Result<Option<LeasedJob>, DbError> {
    let row = sqlx::query!(
        r#"WITH next AS (
             SELECT j.id FROM jobs j
             WHERE j.state = 'queued' AND ($3 OR j.needs = 'any')
             ORDER BY j.created_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED)
         UPDATE jobs j SET state = 'running', attempts = j.attempts + 1,
             lease_token = gen_random_uuid(),
             lease_expires_at = now() + make_interval(secs => $2),
             worker = $1, claimed_at = now(), heartbeat_at = NULL, updated_at = now()
         FROM next, reports r WHERE j.id = next.id AND j.state = 'queued'
             AND r.id = j.report_id
         RETURNING j.id, j.report_id, j.attempts, j.max_attempts,
             j.lease_token::text AS "token!",
             j.repeats,
             r.script, r.script_prefix, r.script_sha256"#,
        worker,
        f64::from(lease_secs),
        has_gpu
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|row| LeasedJob {
        job_id: row.id,
        report_id: row.report_id,
        attempt: count(row.attempts),
        max_attempts: count(row.max_attempts),
        lease_token: row.token,
        script: StoredScript::from_columns(row.script, row.script_prefix, row.script_sha256)
            .unwrap_or(StoredScript::Row(String::new())),
        repeats: u8::try_from(row.repeats).unwrap_or(1),
    }))
}

/// Puts a job claimed by `lease_token` back in the queue as if the claim had not happened
/// (its attempt not counted): the claim could not be answered (its script is in an object
/// store that failed). `false`: the lease is no longer this one.
pub async fn unclaim(
    ex: impl PgExecutor<'_>,
    job_id: i64,
    lease_token: &str,
) -> Result<bool, DbError> {
    // `$2::text::uuid`: the token arrives as text and is cast to `uuid`, as before.
    let done = sqlx::query!(
        "UPDATE jobs SET state = 'queued', attempts = attempts - 1, lease_token = NULL,
             lease_expires_at = NULL, worker = '', claimed_at = NULL, updated_at = now()
         WHERE id = $1 AND state = 'running' AND lease_token = $2::text::uuid",
        job_id,
        lease_token
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// An attempt counter from its `int4` column (never negative: a CHECK keeps it so).
fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// Extends a live lease by `lease_secs` from now (and notes the heartbeat); returns the name of
/// the worker holding it, or `None` when the lease is not this token's (expired, even before
/// the reaper took it back, reassigned, or never was) or the job is unknown.
pub async fn extend_lease(
    ex: impl PgExecutor<'_>,
    job_id: i64,
    lease_token: &str,
    lease_secs: u32,
) -> Result<Option<String>, DbError> {
    Ok(sqlx::query_scalar!(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3),
             heartbeat_at = now(), updated_at = now()
         WHERE id = $1 AND state = 'running' AND lease_token::text = $2
             AND lease_expires_at > now()
         RETURNING worker",
        job_id,
        lease_token,
        f64::from(lease_secs)
    )
    .fetch_optional(ex)
    .await?)
}

/// Whether job `job_id` exists.
pub async fn job_exists(ex: impl PgExecutor<'_>, job_id: i64) -> Result<bool, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1) AS "exists!""#,
        job_id
    )
    .fetch_one(ex)
    .await?)
}

/// The job row as a result post sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockedJob {
    pub report_id: i64,
    pub state: JobState,
    pub attempts: u32,
    pub max_attempts: u32,
    /// The lease token while the lease is live.
    pub live_token: Option<String>,
    /// The worker that claimed the job.
    pub worker: String,
}

/// Locks job `job_id` (`FOR UPDATE`) until the caller's transaction ends.
pub async fn lock_job(conn: &mut PgConnection, job_id: i64) -> Result<Option<LockedJob>, DbError> {
    let row = sqlx::query!(
        r#"SELECT report_id, state AS "state: JobState", attempts, max_attempts, worker,
             CASE WHEN lease_expires_at > now() THEN lease_token::text END AS "live_token?"
         FROM jobs WHERE id = $1 FOR UPDATE"#,
        job_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|job| LockedJob {
        report_id: job.report_id,
        state: job.state,
        attempts: count(job.attempts),
        max_attempts: count(job.max_attempts),
        live_token: job.live_token,
        worker: job.worker,
    }))
}

/// An attempt already recorded under a lease token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EarlierAttempt {
    pub outcome: AttemptOutcome,
    /// Digest of the request that recorded it (none for an expired lease).
    pub request_sha256: Option<Vec<u8>>,
}

/// The attempt recorded for `lease_token` of job `job_id`, if any.
pub async fn attempt_of_lease(
    ex: impl PgExecutor<'_>,
    job_id: i64,
    lease_token: &str,
) -> Result<Option<EarlierAttempt>, DbError> {
    let row = sqlx::query!(
        "SELECT outcome, request_sha256 FROM job_attempts
         WHERE job_id = $1 AND lease_token::text = $2",
        job_id,
        lease_token
    )
    .fetch_optional(ex)
    .await?;
    row.map(|r| {
        Ok(EarlierAttempt {
            outcome: AttemptOutcome::parse(&r.outcome).ok_or_else(|| {
                DbError::Corrupt(format!("unknown attempt outcome {:?}", r.outcome))
            })?,
            request_sha256: r.request_sha256,
        })
    })
    .transpose()
}

/// The reproduction stored for job `job_id`: its id and classification.
pub async fn reproduction_of_job(
    ex: impl PgExecutor<'_>,
    job_id: i64,
) -> Result<Option<(i64, Classification)>, DbError> {
    let row = sqlx::query!(
        r#"SELECT id, classification AS "classification: Json<Classification>"
         FROM reproductions WHERE job_id = $1"#,
        job_id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|r| (r.id, r.classification.0)))
}

/// A finished attempt to record.
#[derive(Clone, Debug)]
pub struct NewAttempt<'a> {
    pub job_id: i64,
    pub attempt: u32,
    pub lease_token: &'a str,
    pub outcome: AttemptOutcome,
    /// The worker's error, for `Error`.
    pub error: &'a str,
    pub worker: &'a str,
    pub request_sha256: &'a [u8],
}

/// Records a finished attempt.
pub async fn insert_attempt(ex: impl PgExecutor<'_>, a: &NewAttempt<'_>) -> Result<(), DbError> {
    // The attempt is sent as `int8` and the token as text, cast to the columns' types as before.
    sqlx::query!(
        "INSERT INTO job_attempts (job_id, attempt, lease_token, outcome, error, worker,
             request_sha256) VALUES ($1, $2::int8, $3::text::uuid, $4, $5, $6, $7)",
        a.job_id,
        i64::from(a.attempt),
        a.lease_token,
        a.outcome.as_str(),
        a.error,
        a.worker,
        a.request_sha256
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A worker's result, secrets already scrubbed and the output classified.
#[derive(Clone, Debug)]
pub struct NewReproduction {
    pub job_id: i64,
    pub report_id: i64,
    pub run: RunRecord,
}

/// Stores a reproduction; returns its id.
pub async fn insert_reproduction(
    ex: impl PgExecutor<'_>,
    r: &NewReproduction,
) -> Result<i64, DbError> {
    // The attempt is sent as `int8` and cast to the column's type, as before. The `jsonb`
    // arguments are `Json` (serialised by sqlx), which the macro cannot match with
    // `serde_json::Value`: `as _` takes them as they are.
    Ok(sqlx::query_scalar!(
        "INSERT INTO reproductions (job_id, report_id, attempt, exit_code, signal, timed_out,
             duration_ms, stdout, stderr, truncated, gpu, no_gpu, sandbox, worker, classification,
             cpu_translation, cpu_run, runs, verdict, environment, outcome, outcome_reason,
             outcome_fix)
         VALUES ($1, $2, $3::int8, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
             $17, $18, $19, $20, $21, $22, $23)
         RETURNING id",
        r.job_id,
        r.report_id,
        i64::from(r.run.attempt),
        r.run.exit_code,
        r.run.signal,
        r.run.timed_out,
        i64::try_from(r.run.duration_ms).unwrap_or(i64::MAX),
        r.run.stdout,
        r.run.stderr,
        r.run.truncated,
        r.run.gpu.as_ref().map(|g| &g.raw),
        r.run.no_gpu,
        r.run.sandbox.as_str(),
        r.run.worker,
        Json(&r.run.classification) as _,
        r.run.cpu_translation,
        r.run.cpu.as_ref().map(Json) as _,
        (!r.run.runs.is_empty()).then_some(Json(&r.run.runs)) as _,
        r.run.verdict,
        r.run.environment.as_ref().map(Json) as _,
        r.run.outcome.as_ref().map(|d| d.outcome.as_str()),
        r.run.outcome.as_ref().map_or("", |d| d.reason.as_str()),
        r.run.outcome.as_ref().map_or("", |d| d.fix.as_str())
    )
    .fetch_one(ex)
    .await?)
}

/// Records `verdict` as the latest of report `report_id`'s group.
pub async fn set_group_verdict(
    ex: impl PgExecutor<'_>,
    report_id: i64,
    verdict: &str,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE groups SET verdict = $2, verdict_at = now()
         WHERE id = (SELECT group_id FROM reports WHERE id = $1)",
        report_id,
        verdict
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Ends the job's lease and sets its state, its last error and (for `Dead`) its reason.
pub async fn finish_job(
    ex: impl PgExecutor<'_>,
    job_id: i64,
    state: JobState,
    last_error: &str,
    dead_reason: &str,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE jobs SET state = $2, lease_token = NULL, lease_expires_at = NULL,
             last_error = $3, dead_reason = $4, updated_at = now() WHERE id = $1",
        job_id,
        state.as_str(),
        last_error,
        dead_reason
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// The report and state of job `job_id`.
pub async fn job_report_and_state(
    ex: impl PgExecutor<'_>,
    job_id: i64,
) -> Result<Option<(i64, JobState)>, DbError> {
    let row = sqlx::query!(
        r#"SELECT report_id, state AS "state: JobState" FROM jobs WHERE id = $1"#,
        job_id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(|r| (r.report_id, r.state)))
}

/// Locks report `report_id`'s row until the caller's transaction ends (serialises re-queues and
/// category changes of one report).
pub async fn lock_report(conn: &mut PgConnection, report_id: i64) -> Result<(), DbError> {
    // The row is read only to take its lock.
    sqlx::query_scalar!("SELECT id FROM reports WHERE id = $1 FOR UPDATE", report_id)
        .fetch_optional(conn)
        .await?;
    Ok(())
}

/// A queued or running job of report `report_id`, if any.
pub async fn pending_job(ex: impl PgExecutor<'_>, report_id: i64) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM jobs WHERE report_id = $1 AND state IN ('queued', 'running') LIMIT 1",
        report_id
    )
    .fetch_optional(ex)
    .await?)
}

/// Queues a new job for job `job_id`'s report, remembering the job it re-queues and who asked;
/// returns the new job's id.
pub async fn insert_requeued(
    ex: impl PgExecutor<'_>,
    job_id: i64,
    by: &str,
) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!(
        "INSERT INTO jobs (report_id, max_attempts, requeued_from, requeued_by, needs, repeats)
         SELECT report_id, max_attempts, id, $2, needs, repeats FROM jobs WHERE id = $1
         RETURNING id",
        job_id,
        by
    )
    .fetch_one(ex)
    .await?)
}
