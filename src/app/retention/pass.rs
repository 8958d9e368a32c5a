//! One retention pass, and the background task `serve` runs it in. A pass reads the policy, then
//! for each project that stored reports name deletes the reports past their time and then the
//! raw logs past theirs, oldest first, a batch per transaction (`FOR UPDATE SKIP LOCKED`): no
//! lock is held longer than one batch, and replicas running passes at once share the work
//! instead of waiting on each other. Each batch writes what must outlive it (group counts,
//! commits' first sightings, the per-project totals) in its own transaction. A pass takes its
//! "now" as an argument, so that an operator's `gpu-triage retention run` and the tests run one
//! at once without waiting for the timer.

use std::time::Duration;

use super::{Error, Policy, RetentionSettings, cutoff};
use crate::app::upload::search_doc::{self, Origin};
use crate::storage::retention::{self as store, Removed};
use crate::storage::{Db, DbError};
use crate::time::Timestamp;

/// Passes remembered (for the settings page), in days.
const RUNS_KEPT_DAYS: i32 = 30;

/// What one pass removed, in all and per project (lowercase) it removed something from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassSummary {
    pub removed: Removed,
    pub projects: Vec<(String, Removed)>,
}

/// Runs one pass as of `now` (see the module doc) and records it.
#[tracing::instrument(name = "retention::run_pass", skip_all, fields(run_id = tracing::field::Empty))]
pub async fn run_pass(
    db: &Db,
    settings: &RetentionSettings,
    now: Timestamp,
) -> Result<PassSummary, Error> {
    let run = {
        let mut tx = db.pool().begin().await.map_err(DbError::from)?;
        let id = store::start_run(&mut tx, RUNS_KEPT_DAYS).await?;
        tx.commit().await.map_err(DbError::from)?;
        id
    };
    tracing::Span::current().record("run_id", run);
    let mut summary = PassSummary::default();
    let outcome = apply(db, settings, now, &mut summary).await;
    let error = outcome.as_ref().err().map(ToString::to_string);
    store::finish_run(
        db.pool(),
        run,
        summary.removed,
        error.as_deref().unwrap_or(""),
    )
    .await?;
    outcome.map(|()| summary)
}

async fn apply(
    db: &Db,
    settings: &RetentionSettings,
    now: Timestamp,
    summary: &mut PassSummary,
) -> Result<(), Error> {
    let overrides = store::overrides(db.pool()).await?;
    let policy = Policy::new(settings.defaults, &overrides);
    let batch = i64::from(settings.batch.max(1));
    for project in store::report_projects(db.pool(), i64::MAX).await? {
        let days = policy.days(&project);
        let mut removed = Removed::default();
        if let Some(before) = cutoff(now, days.report_days) {
            removed += delete_reports(db, &project, before, batch).await?;
        }
        if let Some(before) = cutoff(now, days.log_days) {
            let after_days = i32::try_from(days.log_days).unwrap_or(i32::MAX);
            removed += remove_logs(db, &project, before, after_days, batch).await?;
        }
        if removed != Removed::default() {
            tracing::info!(
                project = %project,
                reports = removed.reports,
                logs = removed.logs,
                bytes = removed.bytes,
                report_days = days.report_days,
                log_days = days.log_days,
                "retention removed expired data"
            );
            summary.removed += removed;
            summary.projects.push((project, removed));
        }
    }
    Ok(())
}

/// Deletes `project`'s reports uploaded before `before`, a batch per transaction, until none is
/// left that this pass may take.
async fn delete_reports(
    db: &Db,
    project: &str,
    before: Timestamp,
    batch: i64,
) -> Result<Removed, Error> {
    let mut total = Removed::default();
    loop {
        let mut tx = db.pool().begin().await.map_err(DbError::from)?;
        let ids = store::lock_due_reports(&mut tx, project, before, batch).await?;
        if ids.is_empty() {
            tx.rollback().await.map_err(DbError::from)?;
            return Ok(total);
        }
        let bytes = store::delete_reports(&mut tx, &ids).await?;
        let removed = Removed {
            logs: 0,
            reports: len(&ids),
            bytes,
        };
        store::add_removed(&mut *tx, project, removed).await?;
        tx.commit().await.map_err(DbError::from)?;
        total += removed;
        // Fewer than a batch: the rest is held elsewhere (another replica's pass takes it, or
        // the next pass does).
        if len(&ids) < batch {
            return Ok(total);
        }
    }
}

/// Removes the raw logs of `project`'s reports uploaded before `before`, keeping the reports;
/// their search documents keep what is still stored (the classification and the metadata).
async fn remove_logs(
    db: &Db,
    project: &str,
    before: Timestamp,
    after_days: i32,
    batch: i64,
) -> Result<Removed, Error> {
    let mut total = Removed::default();
    loop {
        let mut tx = db.pool().begin().await.map_err(DbError::from)?;
        let due = store::lock_due_logs(&mut tx, project, before, batch).await?;
        if due.is_empty() {
            tx.rollback().await.map_err(DbError::from)?;
            return Ok(total);
        }
        let ids: Vec<i64> = due.iter().map(|d| d.id).collect();
        let names: Vec<String> = due
            .iter()
            .map(|d| {
                search_doc::names_without_log(&Origin {
                    filename: &d.filename,
                    project: &d.project,
                    branch: &d.branch,
                    commit: &d.commit_sha,
                    job_url: &d.job_url,
                })
            })
            .collect();
        let bytes = store::remove_logs(&mut tx, &ids, &names, after_days).await?;
        let removed = Removed {
            logs: len(&ids),
            reports: 0,
            bytes,
        };
        store::add_removed(&mut *tx, project, removed).await?;
        tx.commit().await.map_err(DbError::from)?;
        total += removed;
        if len(&ids) < batch {
            return Ok(total);
        }
    }
}

fn len<T>(items: &[T]) -> i64 {
    i64::try_from(items.len()).unwrap_or(i64::MAX)
}

/// The current time, to the second.
#[must_use]
pub fn now() -> Timestamp {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Timestamp::from_unix(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// Starts the background task: once the database is migrated, a pass at once and then one
/// every `settings.interval`, until the handle is aborted. A failed pass is logged and the next
/// one tries again.
pub fn spawn(db: Db, settings: RetentionSettings) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // `serve` migrates in the background: the tables exist once the database is ready.
        while db.ping().await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        loop {
            match run_pass(&db, &settings, now()).await {
                Ok(summary) => tracing::debug!(
                    reports = summary.removed.reports,
                    logs = summary.removed.logs,
                    bytes = summary.removed.bytes,
                    "retention pass done"
                ),
                Err(Error::Db(e @ DbError::Unavailable(_))) => {
                    tracing::debug!(error = %e, "retention pass: database down");
                }
                Err(e) => tracing::warn!(error = %e, "retention pass failed"),
            }
            tokio::time::sleep(settings.interval).await;
        }
    })
}
