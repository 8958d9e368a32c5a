//! Reading reports back: one report without its log, the lists of them (newest, filtered,
//! a group's) and the counts by category.

use sqlx::PgExecutor;
use sqlx::types::Json;

use crate::rules::{Category, Classification};
use crate::storage::DbError;
use crate::time::Timestamp;

/// A stored report, without its log.
#[derive(Clone, Debug)]
pub struct Report {
    pub id: i64,
    pub created_at: crate::time::Timestamp,
    pub project: String,
    pub job_url: String,
    pub commit_sha: String,
    pub branch: String,
    pub environment: String,
    /// The build's version (`meta.version`), or empty.
    pub version: String,
    pub filename: String,
    pub group_id: i64,
    /// The headline category: the log's, or a more specific reproduction's.
    pub category: Category,
    pub title: String,
    pub root_cause_line: Option<i32>,
    pub root_cause_text: String,
    pub fingerprint: String,
    /// The failure's shape, for similar failures.
    pub signature: String,
    /// The log's classification.
    pub classification: Classification,
    pub log_bytes: i64,
    pub log_lines: i64,
    /// The reproduction script's text: read from the row, or from the object store by the
    /// use case that shows it (`app::reports::detail`).
    pub script: Option<String>,
    /// Where the object store keeps the script when the row does not ([`Report::stored_script`]).
    pub script_prefix: Option<String>,
    pub script_sha256: Option<Vec<u8>>,
    /// When retention removed the log (the row and its classification stay), if it did.
    pub log_removed_at: Option<crate::time::Timestamp>,
    /// The retention in days that removed it.
    pub log_removed_after_days: Option<i32>,
}

impl Report {
    /// Where its script is, if it has one.
    #[must_use]
    pub fn stored_script(&self) -> Option<super::StoredScript> {
        super::StoredScript::from_columns(
            self.script.clone(),
            self.script_prefix.clone(),
            self.script_sha256.clone(),
        )
    }
}

/// A report row as [`get_report`] reads it: the classification still in its JSON wrapper.
struct ReportRow {
    id: i64,
    created_at: Timestamp,
    project: String,
    job_url: String,
    commit_sha: String,
    branch: String,
    environment: String,
    version: String,
    filename: String,
    group_id: i64,
    category: Category,
    title: String,
    root_cause_line: Option<i32>,
    root_cause_text: String,
    fingerprint: String,
    signature: String,
    classification: Json<Classification>,
    log_bytes: i64,
    log_lines: i64,
    script: Option<String>,
    script_prefix: Option<String>,
    script_sha256: Option<Vec<u8>>,
    log_removed_at: Option<Timestamp>,
    log_removed_after_days: Option<i32>,
}

impl From<ReportRow> for Report {
    fn from(r: ReportRow) -> Self {
        Report {
            id: r.id,
            created_at: r.created_at,
            project: r.project,
            job_url: r.job_url,
            commit_sha: r.commit_sha,
            branch: r.branch,
            environment: r.environment,
            version: r.version,
            filename: r.filename,
            group_id: r.group_id,
            category: r.category,
            title: r.title,
            root_cause_line: r.root_cause_line,
            root_cause_text: r.root_cause_text,
            fingerprint: r.fingerprint,
            signature: r.signature,
            classification: r.classification.0,
            log_bytes: r.log_bytes,
            log_lines: r.log_lines,
            script: r.script,
            script_prefix: r.script_prefix,
            script_sha256: r.script_sha256,
            log_removed_at: r.log_removed_at,
            log_removed_after_days: r.log_removed_after_days,
        }
    }
}

/// The report with this id.
pub async fn get_report(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Report>, DbError> {
    let row = sqlx::query_as!(
        ReportRow,
        r#"SELECT id, created_at AS "created_at: Timestamp", project, job_url, commit_sha, branch,
             environment, version, filename, group_id, category AS "category: Category", title,
             root_cause_line, root_cause_text, fingerprint, signature,
             classification AS "classification: Json<Classification>", log_bytes, log_lines,
             script, script_prefix, script_sha256,
             log_removed_at AS "log_removed_at: Timestamp", log_removed_after_days
         FROM reports WHERE id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?;
    Ok(row.map(Report::from))
}

/// A line in a list of reports.
#[derive(Clone, Debug)]
pub struct ReportSummary {
    pub id: i64,
    pub created_at: crate::time::Timestamp,
    pub project: String,
    pub category: Category,
    pub title: String,
    pub root_cause_text: String,
    pub group_id: i64,
}

/// The newest reports.
pub async fn recent_reports(
    ex: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    Ok(sqlx::query_as!(
        ReportSummary,
        r#"SELECT r.id, r.created_at AS "created_at: Timestamp", r.project,
             r.category AS "category: Category", r.title, r.root_cause_text, r.group_id
         FROM reports r ORDER BY r.created_at DESC, r.id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Reports newest first, optionally of one category and of one project (in any letter case),
/// `limit` of them after skipping `offset`.
pub async fn list_reports(
    ex: impl PgExecutor<'_>,
    category: Option<Category>,
    project: Option<&str>,
    limit: i64,
    offset: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    Ok(sqlx::query_as!(
        ReportSummary,
        r#"SELECT r.id, r.created_at AS "created_at: Timestamp", r.project,
             r.category AS "category: Category", r.title, r.root_cause_text, r.group_id
         FROM reports r
         WHERE ($1::text IS NULL OR r.category = $1)
           AND ($2::text IS NULL OR lower(r.project) = lower($2))
         ORDER BY r.created_at DESC, r.id DESC LIMIT $3 OFFSET $4"#,
        category.map(Category::as_str),
        project,
        limit,
        offset
    )
    .fetch_all(ex)
    .await?)
}

/// The newest reports of a group.
pub async fn group_reports(
    ex: impl PgExecutor<'_>,
    group_id: i64,
    limit: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    Ok(sqlx::query_as!(
        ReportSummary,
        r#"SELECT r.id, r.created_at AS "created_at: Timestamp", r.project,
             r.category AS "category: Category", r.title, r.root_cause_text, r.group_id
         FROM reports r WHERE r.group_id = $1
         ORDER BY r.created_at DESC, r.id DESC LIMIT $2"#,
        group_id,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// How many reports of each category are stored (for `/metrics`).
pub async fn counts_by_category(ex: impl PgExecutor<'_>) -> Result<Vec<(String, i64)>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT category, count(*) AS "count!"
         FROM reports GROUP BY category ORDER BY category"#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(|r| (r.category, r.count)).collect())
}
