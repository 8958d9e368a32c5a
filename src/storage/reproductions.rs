//! Reads of reproductions for the report API and page (a report's jobs with their attempt
//! history and result), and the report's category following a more specific reproduction.
//! The queue itself (claim, lease, results) is in [`super::jobs`].

use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, Row};

use super::DbError;
use super::attempts::AttemptOutcome;
pub use super::attempts::{GpuFacts, RunRecord};
use super::reports::Headline;
use crate::api_types::{CategorySource, JobState, Sandbox};
use crate::rules::outcome::{Decision, Outcome};
use crate::rules::{Category, Classification};

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

fn reproduction_from_row(r: &PgRow) -> Result<Option<ReproductionView>, DbError> {
    let Some(id) = r.try_get::<Option<i64>, _>("r_id")? else {
        return Ok(None);
    };
    Ok(Some(ReproductionView {
        id,
        run: RunRecord {
            attempt: count(r.try_get("r_attempt")?),
            exit_code: r.try_get("exit_code")?,
            signal: r.try_get("signal")?,
            timed_out: r.try_get("timed_out")?,
            duration_ms: u64::try_from(r.try_get::<i64, _>("duration_ms")?).unwrap_or(0),
            stdout: r.try_get("stdout")?,
            stderr: r.try_get("stderr")?,
            truncated: r.try_get("truncated")?,
            gpu: r
                .try_get::<Option<serde_json::Value>, _>("gpu")?
                .and_then(GpuFacts::from_json),
            no_gpu: r.try_get("no_gpu")?,
            cpu_translation: r.try_get("cpu_translation")?,
            cpu: r
                .try_get::<Option<Json<crate::api_types::CpuRun>>, _>("cpu_run")?
                .map(|j| j.0),
            runs: r
                .try_get::<Option<Json<Vec<crate::api_types::RunOutcome>>>, _>("runs")?
                .map(|j| j.0)
                .unwrap_or_default(),
            verdict: r.try_get("verdict")?,
            environment: r
                .try_get::<Option<Json<crate::api_types::RunEnvironment>>, _>("environment")?
                .map(|j| j.0),
            sandbox: Sandbox::from(r.try_get::<String, _>("sandbox")?),
            worker: r.try_get("r_worker")?,
            classification: r.try_get::<Json<Classification>, _>("classification")?.0,
            outcome: outcome_from_row(r)?,
        },
        created_at: r.try_get("r_created")?,
    }))
}

/// The stored outcome of a reproduction row (`None` for rows from before migration 22).
fn outcome_from_row(r: &PgRow) -> Result<Option<Decision>, DbError> {
    let Some(spelled) = r.try_get::<Option<String>, _>("outcome")? else {
        return Ok(None);
    };
    let outcome = Outcome::parse(&spelled)
        .ok_or_else(|| DbError::Corrupt(format!("unknown reproduction outcome {spelled:?}")))?;
    Ok(Some(Decision {
        outcome,
        reason: r.try_get("outcome_reason")?,
        fix: r.try_get("outcome_fix")?,
    }))
}

/// The jobs of a report, oldest first, with their history and reproduction.
pub async fn report_jobs(conn: &mut PgConnection, report_id: i64) -> Result<Vec<JobView>, DbError> {
    let rows = sqlx::query(concat!(
        "SELECT j.id, j.state, j.attempts, j.max_attempts, j.last_error, j.dead_reason, \
             j.worker, j.requeued_from, j.requeued_by, j.needs, ",
        "j.created_at",
        " AS created, ",
        "j.updated_at",
        " AS updated, ",
        "j.claimed_at",
        " AS claimed, ",
        "j.heartbeat_at",
        " AS heartbeat, r.id AS r_id, r.attempt AS r_attempt, r.exit_code, r.signal, r.timed_out, \
             r.duration_ms, r.stdout, r.stderr, r.truncated, r.gpu, r.no_gpu, r.cpu_translation, r.cpu_run, r.runs, r.verdict, r.environment, \
             r.sandbox, r.outcome, r.outcome_reason, r.outcome_fix, \
             r.worker AS r_worker, r.classification, ",
        "r.created_at",
        " AS r_created \
         FROM jobs j LEFT JOIN reproductions r ON r.job_id = j.id \
         WHERE j.report_id = $1 ORDER BY j.id"
    ))
    .bind(report_id)
    .fetch_all(&mut *conn)
    .await?;
    let history = sqlx::query(concat!(
        "SELECT a.job_id, a.attempt, a.outcome, a.error, a.worker, ",
        "a.finished_at",
        " AS finished FROM job_attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE j.report_id = $1 ORDER BY a.job_id, a.attempt, a.id"
    ))
    .bind(report_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut attempts: Vec<(i64, AttemptView)> = Vec::with_capacity(history.len());
    for a in &history {
        attempts.push((
            a.try_get("job_id")?,
            AttemptView {
                attempt: count(a.try_get("attempt")?),
                outcome: {
                    let o: String = a.try_get("outcome")?;
                    AttemptOutcome::parse(&o)
                        .ok_or_else(|| DbError::Corrupt(format!("unknown attempt outcome {o:?}")))?
                },
                error: a.try_get("error")?,
                worker: a.try_get("worker")?,
                finished_at: a.try_get("finished")?,
            },
        ));
    }
    rows.iter()
        .map(|r| {
            let id: i64 = r.try_get("id")?;
            Ok(JobView {
                id,
                state: r.try_get("state")?,
                attempts: count(r.try_get("attempts")?),
                max_attempts: count(r.try_get("max_attempts")?),
                last_error: r.try_get("last_error")?,
                dead_reason: r.try_get("dead_reason")?,
                worker: r.try_get("worker")?,
                created_at: r.try_get("created")?,
                updated_at: r.try_get("updated")?,
                claimed_at: r.try_get("claimed")?,
                heartbeat_at: r.try_get("heartbeat")?,
                needs: match r.try_get::<String, _>("needs")?.as_str() {
                    "gpu" => crate::api_types::Needs::Gpu,
                    _ => crate::api_types::Needs::Any,
                },
                requeued_from: r.try_get("requeued_from")?,
                requeued_by: r.try_get("requeued_by")?,
                history: attempts
                    .iter()
                    .filter(|(job, _)| *job == id)
                    .map(|(_, a)| a.clone())
                    .collect(),
                reproduction: reproduction_from_row(r)?,
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

/// The SELECT of [`category_basis`].
macro_rules! basis_select {
    () => {
        "SELECT r.category, r.classification, r.category_source, r.original_category, \
             r.original_title, r.category_reproduction_id, p.job_id, \
             p.classification AS repro_classification \
         FROM reports r LEFT JOIN reproductions p ON p.id = r.category_reproduction_id \
         WHERE r.id = $1"
    };
}

/// The report's category and where it comes from, or `None` for an unknown report. With
/// `lock`, the report's row stays locked until the caller's transaction ends, so a decision
/// taken on it (follow a reproduction) cannot race another.
pub async fn category_basis(
    ex: impl PgExecutor<'_>,
    report_id: i64,
    lock: bool,
) -> Result<Option<CategoryBasis>, DbError> {
    let sql = if lock {
        concat!(basis_select!(), " FOR UPDATE OF r")
    } else {
        basis_select!()
    };
    let row = sqlx::query(sql).bind(report_id).fetch_optional(ex).await?;
    row.map(|r| {
        let source: String = r.try_get("category_source")?;
        Ok(CategoryBasis {
            category: r.try_get("category")?,
            log_classification: r.try_get::<Json<Classification>, _>("classification")?.0,
            source: match source.as_str() {
                "reproduction" => CategorySource::Reproduction,
                _ => CategorySource::Log,
            },
            original_category: r.try_get("original_category")?,
            original_title: r.try_get("original_title")?,
            reproduction_id: r.try_get("category_reproduction_id")?,
            reproduction_job_id: r.try_get("job_id")?,
            reproduction_classification: r
                .try_get::<Option<Json<Classification>>, _>("repro_classification")?
                .map(|j| j.0),
        })
    })
    .transpose()
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
    sqlx::query(
        "UPDATE reports SET category = $2, title = $3, confidence = $4, \
             category_source = 'reproduction', \
             original_category = COALESCE(original_category, category), \
             original_title = COALESCE(original_title, title), \
             category_reproduction_id = $5 \
         WHERE id = $1",
    )
    .bind(report_id)
    .bind(f.headline.category)
    .bind(&f.headline.title)
    .bind(f.headline.confidence)
    .bind(f.reproduction_id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE report_search SET category = $2, \
             root = left(root || E'\\n' || translate($3, E'\\x01\\x02', '  '), 4096) \
         WHERE report_id = $1",
    )
    .bind(report_id)
    .bind(f.headline.category)
    .bind(&f.headline.root_cause_text)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
