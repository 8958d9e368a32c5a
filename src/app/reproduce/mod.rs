//! Reproduce a report on a GPU worker: claim a job (long-poll), keep its lease, record what the
//! run gave (secrets scrubbed, output classified by the same rule engine as uploads, the
//! report's headline following a more specific root cause, the `reproduction_finished` webhook
//! event queued with it), re-queue a finished job, and reap expired leases. Each use case owns
//! its transaction; the queue's statements are in `storage::jobs`. Every claim poll, heartbeat
//! and result also notes that its worker was in touch ([`workers`]).

pub mod follow;
pub mod outcome;
pub mod traces;
pub mod verdict;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

pub use follow::should_follow;
pub use traces::{UserFrame, combined_output, location, main_traceback, moved_sentence};

use super::{Error, blocking};
use crate::api_types::{
    ClaimRequest, ClaimedJob, CpuRun, ErrorCode, JobResult, JobState, ResultReply, Sandbox,
};
use crate::ingest::scrub;
use crate::rules::outcome::Outcome;
use crate::rules::{Category, Classification, Ruleset};
use crate::storage::jobs::{
    self as store, AttemptOutcome, LockedJob, NewAttempt, NewReproduction, Reaped,
};
use crate::storage::reproductions::RunRecord;
use crate::storage::workers::Contact;
use crate::storage::{Db, DbError};

/// Queue settings of the server (flags / `GPU_TRIAGE_JOB_*`).
#[derive(Clone, Copy, Debug)]
pub struct JobSettings {
    /// How long a lease lasts without a heartbeat.
    pub lease_secs: u32,
    /// How long the worker lets a script run (sent with each job).
    pub timeout_secs: u32,
    /// Largest stdout, and largest stderr, a result may carry (bytes).
    pub max_output_bytes: usize,
    /// Longest long-poll a claim may ask for.
    pub max_wait_secs: u64,
    /// How often a waiting claim looks at the queue again (a report queued on this server
    /// wakes it at once; this bounds the delay for reports queued on another replica).
    pub poll: Duration,
    /// How often the background reaper runs.
    pub reaper_interval: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            lease_secs: 90,
            timeout_secs: 600,
            max_output_bytes: 2 << 20,
            max_wait_secs: crate::api_types::MAX_CLAIM_WAIT_SECS,
            poll: Duration::from_secs(1),
            reaper_interval: Duration::from_secs(15),
        }
    }
}

/// What the queue needs: the database, its settings, and the signal that wakes waiting claims
/// when this server queues a job.
#[derive(Clone, Debug)]
pub struct Queue {
    pub db: Db,
    pub settings: JobSettings,
    pub wake: Arc<Notify>,
}

/// Longest GPU description accepted (serialized JSON).
const MAX_GPU_JSON: usize = 4096;
/// Longest worker-reported error kept.
const MAX_ERROR_CHARS: usize = 4000;

/// A result's outputs scrubbed of secrets, and their classification.
#[derive(Debug)]
pub struct Scrubbed {
    pub stdout: String,
    pub stderr: String,
    pub classification: Classification,
}

/// Scrubs both outputs (before storage and before classification, so no finding quotes a
/// secret) and classifies them. CPU work: call from a blocking thread.
#[must_use]
pub fn scrub_and_classify(ruleset: &Ruleset, stdout: &str, stderr: &str) -> Scrubbed {
    let stdout = scrub::scrub(&crate::ingest::neutralize_controls(stdout))
        .text
        .into_owned();
    let stderr = scrub::scrub(&crate::ingest::neutralize_controls(stderr))
        .text
        .into_owned();
    let combined = combined_output(&stderr, &stdout);
    let classification = ruleset.classify_bytes("reproduction", combined.as_bytes());
    Scrubbed {
        stdout,
        stderr,
        classification,
    }
}

fn check_runs(runs: &[crate::api_types::RunOutcome]) -> Result<(), Error> {
    let bad_line = |l: &String| l.chars().count() > 300 || l.chars().any(char::is_control);
    if runs.len() > usize::from(crate::api_types::MAX_REPEATS)
        || runs
            .iter()
            .any(|r| r.failing_line.as_ref().is_some_and(bad_line))
    {
        return Err(Error::Invalid(
            ErrorCode::BadBody,
            format!(
                "runs: at most {} entries, each failing_line up to 300 characters without \
                 control characters",
                crate::api_types::MAX_REPEATS
            ),
        ));
    }
    Ok(())
}

fn check_worker(worker: &str) -> Result<(), Error> {
    if worker.trim().is_empty()
        || worker.chars().count() > 200
        || worker.chars().any(char::is_control)
    {
        return Err(Error::Invalid(
            ErrorCode::BadWorker,
            "worker must be 1-200 characters without control characters".into(),
        ));
    }
    Ok(())
}

fn check_sandbox(sandbox: &Sandbox) -> Result<(), Error> {
    if let Sandbox::Other(_) = sandbox {
        return Err(Error::Invalid(
            ErrorCode::BadSandbox,
            "sandbox must be \"bwrap\" or \"none\"".into(),
        ));
    }
    Ok(())
}

/// A worker's GPU description: null or a small JSON object, NUL bytes neutralised (worker
/// output is untrusted text: a NUL in it must not lose the result).
fn check_gpu(gpu: &mut Option<serde_json::Value>) -> Result<(), Error> {
    use serde_json::Value;
    if let Some(g) = gpu.as_mut() {
        crate::ingest::neutralize_json(g);
    }
    match gpu {
        None | Some(Value::Null) => Ok(()),
        Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_GPU_JSON => Ok(()),
        Some(_) => Err(Error::Invalid(
            ErrorCode::BadGpu,
            format!("gpu must be null or a JSON object of at most {MAX_GPU_JSON} bytes"),
        )),
    }
}

/// What a claim gave: the job (none when the wait ended idle) and the leases reaped meanwhile.
#[derive(Debug, Default)]
pub struct Claim {
    pub job: Option<ClaimedJob>,
    pub reaped: Vec<Reaped>,
}

/// Claims the oldest queued job for a worker with a fresh lease, waiting up to `wait_secs`
/// (at most `max_wait_secs`) for one. The wait holds no database connection: it retries the
/// claim when this server queues a job, and at least every `poll`.
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
            tracing::info!(job = job.job_id, worker = %req.worker, attempt = job.attempt, "job claimed");
            claim.job = Some(ClaimedJob {
                job_id: job.job_id,
                report_id: job.report_id,
                attempt: job.attempt,
                max_attempts: job.max_attempts,
                lease_token: job.lease_token,
                lease_secs: settings.lease_secs,
                script: job.script,
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

/// Whether `token` can be a lease at all (they are UUIDs): anything else, a NUL or other control
/// byte included, matches no lease and never reaches a query.
fn plausible_lease(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 64
        && token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn lease_lost(message: &str) -> Error {
    Error::Conflict(ErrorCode::LeaseLost, message.to_owned())
}

/// Extends a live lease; returns the lease's new length. A lease that is not this token's any
/// more (expired, reaped, reassigned) is a conflict: the worker must stop.
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

/// What recording a result did, for the caller's counters and log.
#[derive(Debug)]
pub struct Recorded {
    /// The answer to the worker.
    pub reply: ResultReply,
    /// False when this was a replay of a result already recorded.
    pub new: bool,
    /// The attempt failed on the worker's side (no reproduction).
    pub failed: bool,
    /// The report's headline now follows this reproduction.
    pub followed: Option<Category>,
}

/// Records one attempt's outcome exactly once per lease: a worker-reported `error` is a failed
/// attempt (re-queued, or dead after `max_attempts`); a result is scrubbed, classified and
/// stored as the report's reproduction, and the report's headline follows it when it is more
/// specific, all in one transaction. A retry of the same body is answered from what was stored.
pub async fn record_result(
    queue: &Queue,
    ruleset: Arc<Ruleset>,
    job_id: i64,
    mut result: JobResult,
) -> Result<Recorded, Error> {
    validate(&mut result, queue.settings.max_output_bytes)?;
    let sha = digest(&result)?;
    let classified = match result.error {
        Some(_) => None,
        None => {
            let (stdout, stderr) = (
                std::mem::take(&mut result.stdout),
                std::mem::take(&mut result.stderr),
            );
            let cpu = result.cpu.take();
            let (exit_code, signal, timed_out) =
                (result.exit_code, result.signal, result.timed_out);
            let ruleset = Arc::clone(&ruleset);
            Some(
                blocking(move || {
                    let cpu = cpu.map(|c| {
                        let s = scrub_and_classify(&ruleset, &c.stdout, &c.stderr);
                        let cpu = CpuRun {
                            stdout: s.stdout,
                            stderr: s.stderr,
                            classification: Some(s.classification),
                            ..c
                        };
                        CpuRun {
                            outcome: Some(outcome::of_cpu_run(&cpu).outcome),
                            ..cpu
                        }
                    });
                    let run = scrub_and_classify(&ruleset, &stdout, &stderr);
                    let decided =
                        outcome::of_run(exit_code, signal, timed_out, &run.stderr, &run.stdout);
                    (run, cpu, decided)
                })
                .await?,
            )
        }
    };
    let mut tx = queue.db.pool().begin().await.map_err(DbError::from)?;
    let job = match lock_for_result(&mut tx, job_id, &result.lease_token, &sha).await {
        Ok(Ok(job)) => job,
        early => {
            // Release the job's row lock now, not when the pool gets round to it.
            tx.rollback().await.map_err(DbError::from)?;
            return early.and_then(|replay| replay.err().ok_or(Error::NotFound("job")));
        }
    };
    let worker = match result.worker.as_deref() {
        Some(w) if !w.is_empty() => w.to_owned(),
        _ => job.worker.clone(),
    };
    let attempt = NewAttempt {
        job_id,
        attempt: job.attempts,
        lease_token: &result.lease_token,
        outcome: AttemptOutcome::Result,
        error: "",
        worker: &worker,
        request_sha256: &sha,
    };
    let recorded = match (classified, &result.error) {
        (Some((run, cpu, decided)), _) => {
            store::insert_attempt(&mut *tx, &attempt).await?;
            let mut runs = std::mem::take(&mut result.runs);
            outcome::fill_runs(&mut runs, decided.outcome);
            let new = NewReproduction {
                job_id,
                report_id: job.report_id,
                run: RunRecord {
                    attempt: job.attempts,
                    exit_code: result.exit_code,
                    signal: result.signal,
                    timed_out: result.timed_out,
                    duration_ms: result.duration_ms,
                    stdout: run.stdout,
                    stderr: run.stderr,
                    truncated: result.truncated,
                    gpu: result.gpu.filter(|g| !g.is_null()),
                    no_gpu: result.no_gpu,
                    cpu_translation: result.cpu_translation,
                    cpu,
                    verdict: verdict::verdict(&runs),
                    environment: result.environment,
                    runs,
                    sandbox: result.sandbox,
                    worker: worker.clone(),
                    classification: run.classification,
                    outcome: Some(decided.clone()),
                },
            };
            let id = store::insert_reproduction(&mut *tx, &new).await?;
            // A run the worker's environment stopped says nothing about the group's failure.
            if !new.run.verdict.is_empty() && decided.outcome.is_informative() {
                store::set_group_verdict(&mut *tx, job.report_id, &new.run.verdict).await?;
            }
            store::finish_job(&mut *tx, job_id, JobState::Done, "", "").await?;
            // Only a run that failed in the user's code may name the report's category.
            let followed = if decided.outcome == Outcome::Reproduced {
                follow::follow_if_more_specific(
                    &mut tx,
                    &ruleset,
                    job.report_id,
                    id,
                    &new.run.classification,
                    new.run.no_gpu,
                )
                .await?
                .then_some(new.run.classification.category)
            } else {
                None
            };
            if decided.outcome == Outcome::EnvironmentError {
                tracing::info!(
                    job = job_id,
                    worker = %worker,
                    reason = %decided.reason,
                    "reproduction stopped by the worker's environment"
                );
            }
            let run = (
                &new.run.classification,
                new.run.exit_code,
                new.run.verdict.as_str(),
            );
            announce(
                &mut tx,
                job.report_id,
                job_id,
                JobState::Done,
                Some(run),
                Some(&decided),
                "",
            )
            .await?;
            Recorded {
                reply: ResultReply {
                    reproduction_id: Some(id),
                    state: JobState::Done,
                    classification: Some(new.run.classification),
                },
                new: true,
                failed: false,
                followed,
            }
        }
        (None, error) => {
            let error = scrub_error(error.as_deref().unwrap_or_default());
            let attempt = NewAttempt {
                outcome: AttemptOutcome::Error,
                error: &error,
                ..attempt
            };
            store::insert_attempt(&mut *tx, &attempt).await?;
            let state = fail_attempt(&mut tx, job_id, &job, &worker, &error).await?;
            if state == JobState::Dead {
                announce(&mut tx, job.report_id, job_id, state, None, None, &error).await?;
            }
            Recorded {
                reply: ResultReply {
                    reproduction_id: None,
                    state,
                    classification: None,
                },
                new: true,
                failed: true,
                followed: None,
            }
        }
    };
    tx.commit().await.map_err(DbError::from)?;
    workers::note_contact(&queue.db, &worker, Contact::Result).await;
    if let Some(category) = recorded.followed {
        tracing::info!(report = job.report_id, %category, "report category follows its reproduction");
    }
    Ok(recorded)
}

/// Queues the `reproduction_finished` webhook event in the result's transaction, with the
/// report's headline as it stands after the result.
async fn announce(
    tx: &mut sqlx::PgConnection,
    report_id: i64,
    job_id: i64,
    state: JobState,
    run: Option<(&Classification, Option<i32>, &str)>,
    decided: Option<&crate::rules::outcome::Decision>,
    error: &str,
) -> Result<(), Error> {
    let Some(report) = crate::storage::reports::get_report(&mut *tx, report_id).await? else {
        return Ok(());
    };
    let event = crate::app::webhooks::event::reproduction_event(
        &report, job_id, state, run, decided, error,
    );
    crate::app::webhooks::enqueue(tx, &[event]).await?;
    Ok(())
}

/// Re-queues the failed attempt's job, or buries it with its reason when it has used all its
/// attempts; returns the job's new state.
async fn fail_attempt(
    tx: &mut sqlx::PgConnection,
    job_id: i64,
    job: &LockedJob,
    worker: &str,
    error: &str,
) -> Result<JobState, Error> {
    let dead = job.attempts >= job.max_attempts;
    let (state, dead_reason) = if dead {
        (
            JobState::Dead,
            format!(
                "gave up after {} of {} attempts; the last one failed on worker {worker}: {error}",
                job.attempts, job.max_attempts
            ),
        )
    } else {
        (JobState::Queued, String::new())
    };
    let last_error = format!("worker {worker}: {error}");
    store::finish_job(&mut *tx, job_id, state, &last_error, &dead_reason).await?;
    Ok(state)
}

/// Locks the job and sorts out what ends the post early: an unknown job (404), a stale lease
/// (409), or a replay of a result already recorded under this lease (`Ok(Err(answer))`, taken
/// from storage).
async fn lock_for_result(
    tx: &mut sqlx::PgConnection,
    job_id: i64,
    lease_token: &str,
    sha: &[u8],
) -> Result<Result<LockedJob, Recorded>, Error> {
    let job = store::lock_job(&mut *tx, job_id)
        .await?
        .ok_or(Error::NotFound("job"))?;
    if !plausible_lease(lease_token) {
        return Err(lease_lost(
            "the lease token is not one this server hands out",
        ));
    }
    if let Some(earlier) = store::attempt_of_lease(&mut *tx, job_id, lease_token).await? {
        if earlier.outcome == AttemptOutcome::Expired {
            return Err(lease_lost(
                "the lease expired before the result arrived; the job was requeued",
            ));
        }
        if earlier.request_sha256.as_deref() != Some(sha) {
            return Err(lease_lost(
                "a different result was already recorded for this lease",
            ));
        }
        let reply = if earlier.outcome == AttemptOutcome::Result {
            let stored = store::reproduction_of_job(&mut *tx, job_id).await?;
            ResultReply {
                reproduction_id: stored.as_ref().map(|(id, _)| *id),
                state: JobState::Done,
                classification: stored.map(|(_, c)| c),
            }
        } else {
            ResultReply {
                reproduction_id: None,
                state: job.state,
                classification: None,
            }
        };
        return Ok(Err(Recorded {
            reply,
            new: false,
            failed: false,
            followed: None,
        }));
    }
    if job.state != JobState::Running || job.live_token.as_deref() != Some(lease_token) {
        return Err(lease_lost(
            "this lease is no longer valid (expired, reassigned, or a wrong token)",
        ));
    }
    Ok(Ok(job))
}

fn validate(result: &mut JobResult, cap: usize) -> Result<(), Error> {
    let cpu = result.cpu.as_ref();
    for (name, text) in [
        ("stdout", Some(&result.stdout)),
        ("stderr", Some(&result.stderr)),
        ("cpu.stdout", cpu.map(|c| &c.stdout)),
        ("cpu.stderr", cpu.map(|c| &c.stderr)),
    ] {
        let Some(text) = text else { continue };
        if text.len() > cap {
            return Err(Error::TooLarge(format!(
                "{name} is larger than the {cap}-byte limit; cut it and set truncated"
            )));
        }
    }
    check_runs(&result.runs)?;
    if result.environment.as_ref().is_some_and(|e| !e.is_sane()) {
        return Err(Error::Invalid(
            ErrorCode::BadBody,
            "environment: each fact is up to 200 characters without control characters".into(),
        ));
    }
    check_sandbox(&result.sandbox)?;
    check_gpu(&mut result.gpu)?;
    if let Some(w) = &result.worker {
        check_worker(w)?;
    }
    Ok(())
}

/// SHA-256 of the result as parsed (field order fixed), so a retry of the same result is
/// recognised whatever its whitespace.
fn digest(result: &JobResult) -> Result<Vec<u8>, Error> {
    let bytes = serde_json::to_vec(result).map_err(|e| Error::Internal(e.into()))?;
    Ok(Sha256::digest(bytes).to_vec())
}

fn scrub_error(error: &str) -> String {
    let cut: String = error.chars().take(MAX_ERROR_CHARS).collect();
    let cut = crate::ingest::neutralize_controls(&cut);
    scrub::scrub(&cut).text.into_owned()
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
}

/// Re-queues a `done` or `dead` job as a new job of the same report (the old one keeps its
/// attempts, reason and reproduction as history). One pending job per report at most: two
/// clicks give one new job. Wakes waiting claims on this server.
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

/// Runs the reaper every `interval` until the task is dropped; `on_reaped` counts what it did.
/// Each pass also forgets workers long out of touch.
pub async fn run_reaper(db: Db, interval: Duration, on_reaped: impl Fn(&[Reaped])) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match store::reap_expired(db.pool()).await {
            Ok(reaped) if !reaped.is_empty() => {
                for r in &reaped {
                    tracing::info!(job = r.job_id, state = %r.state, "lease expired");
                }
                on_reaped(&reaped);
            }
            Ok(_) => {}
            Err(DbError::Unavailable(e)) => tracing::debug!(error = %e, "reaper: database down"),
            Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
        }
        match workers::forget_stale(&db).await {
            Ok(0) | Err(DbError::Unavailable(_)) => {}
            Ok(n) => tracing::info!(workers = n, "forgot workers not seen for a week"),
            Err(e) => tracing::warn!(error = %e, "forgetting stale workers failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC_ERR: &str = "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1231: indexSelectSmallIndex: block: [3,0,0], thread: [1,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\nTraceback (most recent call last):\n  File \"/tmp/job/train.py\", line 41, in <module>\n    out = emb(idx)\nRuntimeError: CUDA error: device-side assert triggered\n";

    #[test]
    fn outputs_are_scrubbed_before_classification_and_storage() {
        let rs = Ruleset::builtin().expect("builtin");
        let s = scrub_and_classify(
            &rs,
            "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567\n",
            SYNC_ERR,
        );
        assert!(!s.stdout.contains("hf_AbCdEf"), "{}", s.stdout);
        assert!(s.stdout.contains("[REDACTED:"), "{}", s.stdout);
        assert_eq!(s.classification.category, Category::OutOfBounds);
        let root = s.classification.root_cause.expect("root cause");
        assert_eq!((root.line, root.rule.as_str()), (1, "cuda.assert.index"));
    }
}
