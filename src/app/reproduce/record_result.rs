//! The result use case: one attempt's outcome recorded exactly once per lease, in one
//! transaction. A result is scrubbed, classified and stored as the report's reproduction (the
//! report's headline following a more specific root cause, the `reproduction_finished` webhook
//! event queued with it); a worker-reported error is a failed attempt; a retry of the same body
//! is answered from what was stored.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::checks::{
    check_gpu, check_runs, check_sandbox, check_worker, lease_lost, plausible_lease,
};
use super::scrub::{scrub_and_classify, scrub_error};
use super::{Queue, follow, outcome, verdict, workers};
use crate::api_types::{CpuRun, ErrorCode, JobResult, JobState, ResultReply};
use crate::app::{Error, blocking};
use crate::rules::outcome::Outcome;
use crate::rules::{Category, Classification, Ruleset};
use crate::storage::DbError;
use crate::storage::jobs::{self as store, AttemptOutcome, LockedJob, NewAttempt, NewReproduction};
use crate::storage::reproductions::{GpuFacts, RunRecord};
use crate::storage::workers::Contact;

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
#[tracing::instrument(name = "reproduce::record_result", skip_all, fields(job_id, exit_code = ?result.exit_code))]
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
                    gpu: result.gpu.and_then(GpuFacts::from_json),
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
