//! Reads of reproductions for the report API and page (a report's jobs with their attempt
//! history and result), and the report's category following a more specific reproduction.
//! The queue itself (claim, lease, results) is in [`super::jobs`].

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};

use super::DbError;
use super::attempts::AttemptOutcome;
pub use super::attempts::{GpuFacts, RunRecord};
use super::reports::Headline;
use crate::api_types::{CategorySource, JobState, Sandbox};
use crate::rules::outcome::{Decision, Outcome};
use crate::rules::{Category, Classification};
use crate::time::Timestamp;

/// A stored reproduction.
#[derive(Clone, Debug, PartialEq)]
pub struct ReproductionView {
    pub id: i64,
    pub run: RunRecord,
    pub created_at: crate::time::Timestamp,
}

/// A finished attempt, for the job's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptView {
    pub attempt: u32,
    pub outcome: AttemptOutcome,
    pub error: String,
    pub worker: String,
    pub finished_at: crate::time::Timestamp,
}

/// A reproduction job of a report and, once run, its result.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub id: i64,
    pub state: JobState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_error: String,
    pub dead_reason: String,
    pub worker: String,
    pub created_at: crate::time::Timestamp,
    /// The job's last change of state (for a queued job: when it entered the queue) or, while
    /// it runs, its last heartbeat.
    pub updated_at: crate::time::Timestamp,
    /// When the current (or last) attempt was claimed.
    pub claimed_at: Option<crate::time::Timestamp>,
    /// The running attempt's last heartbeat (none before the first).
    pub heartbeat_at: Option<crate::time::Timestamp>,
    /// Whether it needs a worker with a GPU.
    pub needs: crate::api_types::Needs,
    /// The job this one re-queued, and who asked.
    pub requeued_from: Option<i64>,
    pub requeued_by: String,
    /// Finished attempts, oldest first.
    pub history: Vec<AttemptView>,
    pub reproduction: Option<ReproductionView>,
}

/// A job row of [`report_jobs`] with its reproduction, if any (the columns of the outer-joined
/// reproduction are `None` when there is none).
struct JobRow {
    id: i64,
    state: JobState,
    attempts: i32,
    max_attempts: i32,
    last_error: String,
    dead_reason: String,
    worker: String,
    requeued_from: Option<i64>,
    requeued_by: String,
    needs: String,
    created: Timestamp,
    updated: Timestamp,
    claimed: Option<Timestamp>,
    heartbeat: Option<Timestamp>,
    r_id: Option<i64>,
    r_attempt: Option<i32>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    timed_out: Option<bool>,
    duration_ms: Option<i64>,
    stdout: Option<String>,
    stderr: Option<String>,
    truncated: Option<bool>,
    gpu: Option<serde_json::Value>,
    no_gpu: Option<bool>,
    cpu_translation: Option<bool>,
    cpu_run: Option<Json<crate::api_types::CpuRun>>,
    runs: Option<Json<Vec<crate::api_types::RunOutcome>>>,
    verdict: Option<String>,
    environment: Option<Json<crate::api_types::RunEnvironment>>,
    sandbox: Option<String>,
    outcome: Option<String>,
    outcome_reason: Option<String>,
    outcome_fix: Option<String>,
    r_worker: Option<String>,
    classification: Option<Json<Classification>>,
    r_created: Option<Timestamp>,
}

/// A `NOT NULL` column of a joined reproduction that is there (its id is): one missing is
/// [`DbError::Corrupt`].
fn present<T>(value: Option<T>, column: &str, id: i64) -> Result<T, DbError> {
    value.ok_or_else(|| DbError::Corrupt(format!("reproduction {id} has no {column}")))
}

impl JobRow {
    /// The reproduction of the row, if it has one.
    fn reproduction(&mut self) -> Result<Option<ReproductionView>, DbError> {
        let Some(id) = self.r_id else {
            return Ok(None);
        };
        Ok(Some(ReproductionView {
            id,
            run: RunRecord {
                attempt: count(present(self.r_attempt, "attempt", id)?),
                exit_code: self.exit_code,
                signal: self.signal,
                timed_out: present(self.timed_out, "timed_out", id)?,
                duration_ms: u64::try_from(present(self.duration_ms, "duration_ms", id)?)
                    .unwrap_or(0),
                stdout: present(self.stdout.take(), "stdout", id)?,
                stderr: present(self.stderr.take(), "stderr", id)?,
                truncated: present(self.truncated, "truncated", id)?,
                gpu: self.gpu.take().and_then(GpuFacts::from_json),
                no_gpu: present(self.no_gpu, "no_gpu", id)?,
                cpu_translation: present(self.cpu_translation, "cpu_translation", id)?,
                cpu: self.cpu_run.take().map(|j| j.0),
                runs: self.runs.take().map(|j| j.0).unwrap_or_default(),
                verdict: present(self.verdict.take(), "verdict", id)?,
                environment: self.environment.take().map(|j| j.0),
                sandbox: Sandbox::from(present(self.sandbox.take(), "sandbox", id)?),
                worker: present(self.r_worker.take(), "worker", id)?,
                classification: present(self.classification.take(), "classification", id)?.0,
                outcome: self.decision(id)?,
            },
            created_at: present(self.r_created, "created_at", id)?,
        }))
    }

    /// The stored outcome of reproduction `id` (`None` for rows from before migration 22).
    fn decision(&mut self, id: i64) -> Result<Option<Decision>, DbError> {
        let Some(spelled) = self.outcome.take() else {
            return Ok(None);
        };
        let outcome = Outcome::parse(&spelled)
            .ok_or_else(|| DbError::Corrupt(format!("unknown reproduction outcome {spelled:?}")))?;
        Ok(Some(Decision {
            outcome,
            reason: present(self.outcome_reason.take(), "outcome_reason", id)?,
            fix: present(self.outcome_fix.take(), "outcome_fix", id)?,
        }))
    }
}

/// A finished attempt of [`report_jobs`], with its job; the outcome as stored.
struct AttemptRow {
    job_id: i64,
    attempt: i32,
    outcome: String,
    error: String,
    worker: String,
    finished: Timestamp,
}

impl TryFrom<AttemptRow> for (i64, AttemptView) {
    type Error = DbError;

    fn try_from(a: AttemptRow) -> Result<Self, DbError> {
        let outcome = AttemptOutcome::parse(&a.outcome)
            .ok_or_else(|| DbError::Corrupt(format!("unknown attempt outcome {:?}", a.outcome)))?;
        Ok((
            a.job_id,
            AttemptView {
                attempt: count(a.attempt),
                outcome,
                error: a.error,
                worker: a.worker,
                finished_at: a.finished,
            },
        ))
    }
}

/// The jobs of a report, oldest first, with their history and reproduction.
pub async fn report_jobs(conn: &mut PgConnection, report_id: i64) -> Result<Vec<JobView>, DbError> {
    let rows = sqlx::query_as!(
        JobRow,
        r#"SELECT j.id, j.state AS "state: JobState", j.attempts, j.max_attempts, j.last_error,
             j.dead_reason, j.worker, j.requeued_from, j.requeued_by, j.needs,
             j.created_at AS "created: Timestamp",
             j.updated_at AS "updated: Timestamp",
             j.claimed_at AS "claimed: Timestamp",
             j.heartbeat_at AS "heartbeat: Timestamp",
             r.id AS "r_id?", r.attempt AS "r_attempt?", r.exit_code AS "exit_code?",
             r.signal AS "signal?", r.timed_out AS "timed_out?", r.duration_ms AS "duration_ms?",
             r.stdout AS "stdout?", r.stderr AS "stderr?", r.truncated AS "truncated?",
             r.gpu AS "gpu?", r.no_gpu AS "no_gpu?", r.cpu_translation AS "cpu_translation?",
             r.cpu_run AS "cpu_run?: Json<crate::api_types::CpuRun>",
             r.runs AS "runs?: Json<Vec<crate::api_types::RunOutcome>>",
             r.verdict AS "verdict?",
             r.environment AS "environment?: Json<crate::api_types::RunEnvironment>",
             r.sandbox AS "sandbox?", r.outcome AS "outcome?",
             r.outcome_reason AS "outcome_reason?", r.outcome_fix AS "outcome_fix?",
             r.worker AS "r_worker?",
             r.classification AS "classification?: Json<Classification>",
             r.created_at AS "r_created?: Timestamp"
         FROM jobs j LEFT JOIN reproductions r ON r.job_id = j.id
         WHERE j.report_id = $1 ORDER BY j.id"#,
        report_id
    )
    .fetch_all(&mut *conn)
    .await?;
    let history = sqlx::query_as!(
        AttemptRow,
        r#"SELECT a.job_id, a.attempt, a.outcome, a.error, a.worker,
             a.finished_at AS "finished: Timestamp"
         FROM job_attempts a JOIN jobs j ON j.id = a.job_id
         WHERE j.report_id = $1 ORDER BY a.job_id, a.attempt, a.id"#,
        report_id
    )
    .fetch_all(&mut *conn)
    .await?;
    let attempts = history
        .into_iter()
        .map(<(i64, AttemptView)>::try_from)
        .collect::<Result<Vec<_>, DbError>>()?;
    rows.into_iter()
        .map(|mut r| {
            let reproduction = r.reproduction()?;
            Ok(JobView {
                id: r.id,
                state: r.state,
                attempts: count(r.attempts),
                max_attempts: count(r.max_attempts),
                last_error: r.last_error,
                dead_reason: r.dead_reason,
                worker: r.worker,
                created_at: r.created,
                updated_at: r.updated,
                claimed_at: r.claimed,
                heartbeat_at: r.heartbeat,
                needs: match r.needs.as_str() {
                    "gpu" => crate::api_types::Needs::Gpu,
                    _ => crate::api_types::Needs::Any,
                },
                requeued_from: r.requeued_from,
                requeued_by: r.requeued_by,
                history: attempts
                    .iter()
                    .filter(|(job, _)| *job == r.id)
                    .map(|(_, a)| a.clone())
                    .collect(),
                reproduction,
            })
        })
        .collect()
}

/// An attempt counter from its `int4` column (never negative).
fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// Where a report's category comes from, and what it was compared against.
#[derive(Clone, Debug, PartialEq)]
pub struct CategoryBasis {
    /// The headline category.
    pub category: Category,
    /// The uploaded log's classification.
    pub log_classification: Classification,
    pub source: CategorySource,
    /// What the log alone gave, once the category followed a reproduction.
    pub original_category: Option<Category>,
    pub original_title: Option<String>,
    /// The reproduction the category follows, with its job and classification.
    pub reproduction_id: Option<i64>,
    pub reproduction_job_id: Option<i64>,
    pub reproduction_classification: Option<Classification>,
}

impl CategoryBasis {
    /// The classification the category currently rests on: the followed reproduction's, else
    /// the log's.
    #[must_use]
    pub fn current(&self) -> &Classification {
        self.reproduction_classification
            .as_ref()
            .unwrap_or(&self.log_classification)
    }
}

/// A report row as [`category_basis`] reads it, with the followed reproduction's job and
/// classification.
struct BasisRow {
    category: Category,
    classification: Json<Classification>,
    category_source: String,
    original_category: Option<Category>,
    original_title: Option<String>,
    category_reproduction_id: Option<i64>,
    job_id: Option<i64>,
    repro_classification: Option<Json<Classification>>,
}

impl From<BasisRow> for CategoryBasis {
    fn from(r: BasisRow) -> Self {
        CategoryBasis {
            category: r.category,
            log_classification: r.classification.0,
            source: match r.category_source.as_str() {
                "reproduction" => CategorySource::Reproduction,
                _ => CategorySource::Log,
            },
            original_category: r.original_category,
            original_title: r.original_title,
            reproduction_id: r.category_reproduction_id,
            reproduction_job_id: r.job_id,
            reproduction_classification: r.repro_classification.map(|j| j.0),
        }
    }
}

/// The report's category and where it comes from, or `None` for an unknown report. With
/// `lock`, the report's row stays locked until the caller's transaction ends, so a decision
/// taken on it (follow a reproduction) cannot race another.
pub async fn category_basis(
    ex: impl PgExecutor<'_>,
    report_id: i64,
    lock: bool,
) -> Result<Option<CategoryBasis>, DbError> {
    let row = if lock {
        sqlx::query_as!(
            BasisRow,
            r#"SELECT r.category AS "category: Category",
                 r.classification AS "classification: Json<Classification>",
                 r.category_source, r.original_category AS "original_category: Category",
                 r.original_title, r.category_reproduction_id, p.job_id AS "job_id?",
                 p.classification AS "repro_classification?: Json<Classification>"
             FROM reports r LEFT JOIN reproductions p ON p.id = r.category_reproduction_id
             WHERE r.id = $1
             FOR UPDATE OF r"#,
            report_id
        )
        .fetch_optional(ex)
        .await?
    } else {
        sqlx::query_as!(
            BasisRow,
            r#"SELECT r.category AS "category: Category",
                 r.classification AS "classification: Json<Classification>",
                 r.category_source, r.original_category AS "original_category: Category",
                 r.original_title, r.category_reproduction_id, p.job_id AS "job_id?",
                 p.classification AS "repro_classification?: Json<Classification>"
             FROM reports r LEFT JOIN reproductions p ON p.id = r.category_reproduction_id
             WHERE r.id = $1"#,
            report_id
        )
        .fetch_optional(ex)
        .await?
    };
    Ok(row.map(CategoryBasis::from))
}

/// The headline a report takes from a more specific reproduction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    pub reproduction_id: i64,
    /// The reproduction's headline: category, title and confidence replace the report's, and
    /// its root-cause line is added to the report's search text.
    pub headline: Headline,
}

/// Makes the report's category follow a reproduction, remembering what the log alone said; the
/// reproduction's root-cause line becomes searchable as a root cause. The group (keyed by the
/// log's fingerprint) is unchanged.
pub async fn follow_reproduction(
    tx: &mut PgConnection,
    report_id: i64,
    f: &Followed,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE reports SET category = $2, title = $3, confidence = $4,
             category_source = 'reproduction',
             original_category = COALESCE(original_category, category),
             original_title = COALESCE(original_title, title),
             category_reproduction_id = $5
         WHERE id = $1",
        report_id,
        f.headline.category.as_str(),
        f.headline.title,
        f.headline.confidence.as_str(),
        f.reproduction_id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        r#"UPDATE report_search SET category = $2,
             root = left(root || E'\n' || translate($3, E'\x01\x02', '  '), 4096)
         WHERE report_id = $1"#,
        report_id,
        f.headline.category.as_str(),
        f.headline.root_cause_text
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
