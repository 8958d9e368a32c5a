//! Reading reports back: one report without its log, the lists of them (newest, filtered,
//! a group's) and the counts by category.

use sqlx::{FromRow, PgExecutor};

use crate::rules::{Category, Classification};
use crate::storage::DbError;

/// A stored report, without its log.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Report {
    pub id: i64,
    #[sqlx(rename = "created")]
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
    #[sqlx(json)]
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
    #[sqlx(rename = "log_removed")]
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

/// The report with this id.
pub async fn get_report(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Report>, DbError> {
    let row = sqlx::query(concat!(
        "SELECT id, ",
        "created_at",
        " AS created, project, job_url, commit_sha, branch, \
         environment, version, filename, group_id, category, title, root_cause_line, \
         root_cause_text, fingerprint, signature, classification, log_bytes, log_lines, script, \
         script_prefix, script_sha256, ",
        "log_removed_at",
        " AS log_removed, log_removed_after_days FROM reports WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?;
    Ok(row.as_ref().map(Report::from_row).transpose()?)
}

/// A line in a list of reports.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ReportSummary {
    pub id: i64,
    #[sqlx(rename = "created")]
    pub created_at: crate::time::Timestamp,
    pub project: String,
    pub category: Category,
    pub title: String,
    pub root_cause_text: String,
    pub group_id: i64,
}

pub(crate) fn summary_from_row(row: &sqlx::postgres::PgRow) -> Result<ReportSummary, DbError> {
    Ok(ReportSummary::from_row(row)?)
}

pub(crate) const SUMMARY_COLUMNS: &str = concat!(
    "r.id, ",
    "r.created_at",
    " AS created, r.project, r.category, r.title, r.root_cause_text, r.group_id"
);

/// The newest reports.
pub async fn recent_reports(
    ex: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SUMMARY_COLUMNS} FROM reports r ORDER BY r.created_at DESC, r.id DESC LIMIT $1"
    )))
    .bind(limit)
    .fetch_all(ex)
    .await?;
    rows.iter().map(summary_from_row).collect()
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
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SUMMARY_COLUMNS} FROM reports r \
         WHERE ($1::text IS NULL OR r.category = $1) \
           AND ($2::text IS NULL OR lower(r.project) = lower($2)) \
         ORDER BY r.created_at DESC, r.id DESC LIMIT $3 OFFSET $4"
    )))
    .bind(category)
    .bind(project)
    .bind(limit)
    .bind(offset)
    .fetch_all(ex)
    .await?;
    rows.iter().map(summary_from_row).collect()
}

/// The newest reports of a group.
pub async fn group_reports(
    ex: impl PgExecutor<'_>,
    group_id: i64,
    limit: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {SUMMARY_COLUMNS} FROM reports r WHERE r.group_id = $1 \
         ORDER BY r.created_at DESC, r.id DESC LIMIT $2"
    )))
    .bind(group_id)
    .bind(limit)
    .fetch_all(ex)
    .await?;
    rows.iter().map(summary_from_row).collect()
}

/// How many reports of each category are stored (for `/metrics`).
pub async fn counts_by_category(ex: impl PgExecutor<'_>) -> Result<Vec<(String, i64)>, DbError> {
    Ok(
        sqlx::query_as(
            "SELECT category, count(*) FROM reports GROUP BY category ORDER BY category",
        )
        .fetch_all(ex)
        .await?,
    )
}
