//! Reports: insert (with duplicate detection, grouping by fingerprint, idempotency keys and the
//! reproduction job for an attached script, all in one transaction) and read back.

use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor, Row};

use super::DbError;
use crate::api_types::{JobState, QueuedJob};
use crate::rules::{Category, Classification, Confidence};

/// A report ready to store: the classification already made, the log already scrubbed and
/// compressed.
#[derive(Clone, Debug)]
pub struct NewReport {
    /// The token that uploaded it.
    pub token_id: Option<i64>,
    /// Metadata from the uploader (CI): project, job URL, commit, branch, environment text.
    pub project: String,
    pub job_url: String,
    pub commit_sha: String,
    pub branch: String,
    pub environment: String,
    /// The version of the build the log comes from (checked as a version), or empty.
    pub version: String,
    /// The uploaded file's name.
    pub filename: String,
    /// The classification's headline fields, as columns for listing, filtering and grouping.
    pub headline: Headline,
    /// The whole classification (DESIGN.md section 3).
    pub classification: Classification,
    /// SHA-256 of the uploaded bytes, for duplicate detection.
    pub log_sha256: Vec<u8>,
    pub log_bytes: i64,
    pub log_lines: i64,
    /// The scrubbed log, in independently compressed chunks of whole lines.
    pub log: Vec<LogChunk>,
    /// The attached minimal reproduction script, if any (queues a job).
    pub script: Option<String>,
    /// Runs the job asks for (1-5).
    pub repeats: u8,
    /// What the job needs to run.
    pub needs: crate::api_types::Needs,
    /// The search document (migration 0016).
    pub search: super::search::Document,
    /// Its vocabulary words, sorted (see `app::upload::search_doc::words`).
    pub search_words: Vec<String>,
}

/// A classification's headline as a report row keeps it in columns, for listing, filtering
/// and grouping: written on upload and on reclassification from the same mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    pub category: Category,
    pub title: String,
    pub confidence: Confidence,
    pub root_cause_line: Option<i32>,
    pub root_cause_text: String,
    pub fingerprint: String,
    /// The failure's shape, for similar failures (`Classification::signature`).
    pub signature: String,
    pub async_hint: bool,
}

impl Headline {
    /// The headline of `c`.
    #[must_use]
    pub fn of(c: &Classification) -> Headline {
        let root = c.root_cause.as_ref();
        Headline {
            category: c.category,
            title: c.title.clone(),
            confidence: c.confidence,
            root_cause_line: root.and_then(|r| i32::try_from(r.line).ok()),
            root_cause_text: root.map(|r| r.text.clone()).unwrap_or_default(),
            fingerprint: c.fingerprint.clone(),
            signature: c.signature.clone(),
            async_hint: c.async_hint,
        }
    }
}

/// An upload's `Idempotency-Key` as `idempotency_keys` records it: with the token that sent it
/// and the hash of the body it came with.
#[derive(Clone, Debug)]
pub struct IdempotencyRecord {
    /// The token that sent it (keys are per token).
    pub token_id: i64,
    /// The header's value.
    pub key: String,
    /// SHA-256 of the request body, to tell a retry from a different request reusing the key.
    pub request_sha256: Vec<u8>,
}

/// What an insert did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Stored (`duplicate: false`), or found identical bytes already stored for the project
    /// (`duplicate: true`), or replayed the first answer to this idempotency key.
    Stored(Stored),
    /// The idempotency key was used before with a different body.
    KeyReused,
}

/// The report an upload resulted in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub report_id: i64,
    pub group_id: i64,
    pub duplicate: bool,
    /// The answer replayed for a repeated idempotency key (nothing new was stored).
    pub replayed: bool,
    /// This insert created the report's group (its failure was never seen before).
    pub new_group: bool,
    /// The reproduction job queued for its script, with its state.
    pub job: Option<QueuedJob>,
}

/// Stores `report` (see [`InsertOutcome`]) in the caller's transaction. Concurrent uploads of
/// the same bytes, or with the same idempotency key, serialise on transaction-scoped advisory
/// locks and yield one report; the caller ends its transaction at once either way (rolling
/// back what stored nothing), so those locks are not held longer than needed.
pub async fn insert_report(
    tx: &mut PgConnection,
    report: &NewReport,
    idempotency: Option<&IdempotencyRecord>,
) -> Result<InsertOutcome, DbError> {
    if let Some(idem) = idempotency {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2::text, 1))")
            .bind(&idem.key)
            .bind(idem.token_id)
            .execute(&mut *tx)
            .await?;
        let first = sqlx::query(
            "SELECT request_sha256, response FROM idempotency_keys WHERE token_id = $1 AND key = $2",
        )
        .bind(idem.token_id)
        .bind(&idem.key)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = first {
            let sha: Vec<u8> = row.try_get("request_sha256")?;
            if sha != idem.request_sha256 {
                return Ok(InsertOutcome::KeyReused);
            }
            // A row this version cannot read is passed over, and the upload stored anew.
            let replay: Option<Json<Replay>> = row.try_get("response").ok();
            if let Some(Json(replay)) = replay {
                let mut stored = replay.stored();
                let job = job_for_report(&mut *tx, stored.report_id).await?;
                // The group may have been merged since: the answer names where it went.
                if let Some(now) =
                    super::group_merge::final_group(&mut *tx, stored.group_id).await?
                {
                    stored.group_id = now;
                }
                return Ok(InsertOutcome::Stored(Stored {
                    job,
                    replayed: true,
                    new_group: false,
                    ..stored
                }));
            }
        }
    }
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || encode($2, 'hex'), 2))",
    )
    .bind(&report.project)
    .bind(&report.log_sha256)
    .execute(&mut *tx)
    .await?;
    let existing =
        sqlx::query("SELECT id, group_id FROM reports WHERE project = $1 AND log_sha256 = $2")
            .bind(&report.project)
            .bind(&report.log_sha256)
            .fetch_optional(&mut *tx)
            .await?;
    let stored = match existing {
        Some(row) => {
            let report_id: i64 = row.try_get("id")?;
            Stored {
                report_id,
                group_id: row.try_get("group_id")?,
                duplicate: true,
                replayed: false,
                new_group: false,
                job: job_for_report(&mut *tx, report_id).await?,
            }
        }
        None => insert_new(&mut *tx, report).await?,
    };
    if let Some(idem) = idempotency {
        sqlx::query(
            "INSERT INTO idempotency_keys (token_id, key, request_sha256, status, response) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(idem.token_id)
        .bind(&idem.key)
        .bind(&idem.request_sha256)
        .bind(if stored.duplicate { 200i16 } else { 201i16 })
        .bind(Json(Replay {
            report_id: stored.report_id,
            group_id: stored.group_id,
            duplicate: stored.duplicate,
        }))
        .execute(&mut *tx)
        .await?;
    }
    Ok(InsertOutcome::Stored(stored))
}

/// What an idempotency key remembers of the first answer (the `response` column): enough to
/// give the same answer again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Replay {
    report_id: i64,
    group_id: i64,
    duplicate: bool,
}

impl Replay {
    fn stored(self) -> Stored {
        Stored {
            report_id: self.report_id,
            group_id: self.group_id,
            duplicate: self.duplicate,
            replayed: false,
            new_group: false,
            job: None,
        }
    }
}

async fn job_for_report(
    ex: impl PgExecutor<'_>,
    report_id: i64,
) -> Result<Option<QueuedJob>, DbError> {
    let row =
        sqlx::query("SELECT id, state FROM jobs WHERE report_id = $1 ORDER BY id DESC LIMIT 1")
            .bind(report_id)
            .fetch_optional(ex)
            .await?;
    row.map(|r| {
        Ok(QueuedJob {
            job_id: r.try_get("id")?,
            state: r.try_get("state")?,
        })
    })
    .transpose()
}

/// The id of the group for `r`'s fingerprint, created when new (then `true` with it). An existing group is held with
/// `FOR KEY SHARE` until the transaction ends: that does not queue uploads of one failure behind
/// each other (they all take the shared lock), but it keeps a reclassification from deleting the
/// group it just emptied before this report lands in it. When such a delete won the race, the
/// group is created again. A group that was merged stands for the group it was merged into
/// (held the same way, so it is not merged away before this report lands); a merge of the
/// fingerprint's group that is under way is waited for (migration 0023).
async fn group_for(tx: &mut sqlx::PgConnection, r: &NewReport) -> Result<(i64, bool), DbError> {
    loop {
        // When another transaction inserted the group first, this statement waits for it, and
        // the next statement's snapshot sees its row.
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO groups (fingerprint, category, title, root_cause_text, signature) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (fingerprint) DO NOTHING \
             RETURNING id",
        )
        .bind(&r.headline.fingerprint)
        .bind(r.headline.category)
        .bind(&r.headline.title)
        .bind(&r.headline.root_cause_text)
        .bind(&r.headline.signature)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = inserted {
            return Ok((id, true));
        }
        let existing: Option<(i64, Option<i64>)> = sqlx::query_as(
            "SELECT id, merged_into FROM groups WHERE fingerprint = $1 FOR KEY SHARE",
        )
        .bind(&r.headline.fingerprint)
        .fetch_optional(&mut *tx)
        .await?;
        match existing {
            Some((id, None)) => return Ok((id, false)),
            Some((_, Some(into))) => {
                if let Some(id) = super::group_merge::live_group(&mut *tx, into).await? {
                    return Ok((id, false));
                }
            }
            None => {}
        }
    }
}

async fn insert_new(tx: &mut sqlx::PgConnection, r: &NewReport) -> Result<Stored, DbError> {
    let (group_id, new_group) = group_for(tx, r).await?;
    // Once in a while, not per upload: see migration 0007.
    sqlx::query(
        "UPDATE groups SET last_seen = now() \
         WHERE id = $1 AND last_seen < now() - interval '30 seconds'",
    )
    .bind(group_id)
    .execute(&mut *tx)
    .await?;
    let report_id: i64 = sqlx::query_scalar(
        "INSERT INTO reports (token_id, project, job_url, commit_sha, branch, environment, \
             filename, group_id, category, title, confidence, root_cause_line, root_cause_text, \
             fingerprint, async_hint, classification, log_sha256, log_bytes, log_lines, \
             script, finding_rules, signature, version) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
             $18, $19, $20, jsonb_path_query_array($16, '$.findings[*].rule'), $21, $22) \
         RETURNING id",
    )
    .bind(r.token_id)
    .bind(&r.project)
    .bind(&r.job_url)
    .bind(&r.commit_sha)
    .bind(&r.branch)
    .bind(&r.environment)
    .bind(&r.filename)
    .bind(group_id)
    .bind(r.headline.category)
    .bind(&r.headline.title)
    .bind(r.headline.confidence)
    .bind(r.headline.root_cause_line)
    .bind(&r.headline.root_cause_text)
    .bind(&r.headline.fingerprint)
    .bind(r.headline.async_hint)
    .bind(Json(&r.classification))
    .bind(&r.log_sha256)
    .bind(r.log_bytes)
    .bind(r.log_lines)
    .bind(&r.script)
    .bind(&r.headline.signature)
    .bind(&r.version)
    .fetch_one(&mut *tx)
    .await?;
    insert_log(&mut *tx, report_id, &r.log).await?;
    super::search::insert_document(&mut *tx, report_id, &r.search, &r.search_words).await?;
    let job = match &r.script {
        Some(_) => {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO jobs (report_id, repeats, needs) VALUES ($1, $2, $3) RETURNING id",
            )
            .bind(report_id)
            .bind(i16::from(r.repeats))
            .bind(r.needs.as_str())
            .fetch_one(&mut *tx)
            .await?;
            Some(QueuedJob {
                job_id: id,
                state: JobState::Queued,
            })
        }
        None => None,
    };
    Ok(Stored {
        report_id,
        group_id,
        duplicate: false,
        replayed: false,
        new_group,
        job,
    })
}

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
    pub script: Option<String>,
    /// When retention removed the log (the row and its classification stay), if it did.
    #[sqlx(rename = "log_removed")]
    pub log_removed_at: Option<crate::time::Timestamp>,
    /// The retention in days that removed it.
    pub log_removed_after_days: Option<i32>,
}

/// A timestamptz column as whole seconds since the Unix epoch, which decode into
/// [`crate::time::Timestamp`] (shared by storage modules).
macro_rules! rfc3339 {
    ($col:literal) => {
        concat!("floor(extract(epoch FROM ", $col, "))::int8")
    };
}
pub(crate) use rfc3339;

/// The report with this id.
pub async fn get_report(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Report>, DbError> {
    let row = sqlx::query(concat!(
        "SELECT id, ",
        rfc3339!("created_at"),
        " AS created, project, job_url, commit_sha, branch, \
         environment, version, filename, group_id, category, title, root_cause_line, \
         root_cause_text, fingerprint, signature, classification, log_bytes, log_lines, script, ",
        rfc3339!("log_removed_at"),
        " AS log_removed, log_removed_after_days FROM reports WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?;
    Ok(row.as_ref().map(Report::from_row).transpose()?)
}

/// One stored piece of a report's log: whole lines, gzip-compressed on their own (migration
/// 0010). Chunks concatenated in `seq` order are a multi-member gzip stream of the whole log.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct LogChunk {
    /// 0-based position in the log.
    pub seq: i32,
    /// 1-based number of the chunk's first line in the whole log.
    pub first_line: i64,
    /// Lines in the chunk (a final line without a newline counts).
    pub lines: i64,
    /// The chunk's bytes, gzip-compressed.
    pub data: Vec<u8>,
}

async fn insert_log(
    tx: &mut sqlx::PgConnection,
    report_id: i64,
    chunks: &[LogChunk],
) -> Result<(), DbError> {
    // A batch of chunks per statement: one round trip for most logs, and a bounded parameter
    // size for the largest.
    for batch in chunks.chunks(32) {
        let seq: Vec<i32> = batch.iter().map(|c| c.seq).collect();
        let first: Vec<i64> = batch.iter().map(|c| c.first_line).collect();
        let lines: Vec<i64> = batch.iter().map(|c| c.lines).collect();
        let data: Vec<&[u8]> = batch.iter().map(|c| &c.data[..]).collect();
        sqlx::query(
            "INSERT INTO report_log_chunks (report_id, seq, first_line, lines, data) \
             SELECT $1, * FROM UNNEST($2::int4[], $3::int8[], $4::int8[], $5::bytea[])",
        )
        .bind(report_id)
        .bind(seq)
        .bind(first)
        .bind(lines)
        .bind(data)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// The chunks of report `id`'s log that hold lines `first..=last` (1-based), in order; empty
/// when the report does not exist.
pub async fn log_chunks_for_lines(
    ex: impl PgExecutor<'_>,
    id: i64,
    first: i64,
    last: i64,
) -> Result<Vec<LogChunk>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines, data FROM report_log_chunks \
         WHERE report_id = $1 AND first_line <= $3 AND first_line + lines > $2 \
         ORDER BY seq",
    )
    .bind(id)
    .bind(first)
    .bind(last)
    .fetch_all(ex)
    .await?)
}

/// Chunk `seq` of report `id`'s log, if there is one.
pub async fn log_chunk(
    ex: impl PgExecutor<'_>,
    id: i64,
    seq: i32,
) -> Result<Option<LogChunk>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines, data FROM report_log_chunks \
         WHERE report_id = $1 AND seq = $2",
    )
    .bind(id)
    .bind(seq)
    .fetch_optional(ex)
    .await?)
}

/// Where each chunk of report `id`'s log starts and how many lines it holds, in order, as
/// (seq, first line, lines), without their data; empty when the report does not exist.
pub async fn log_chunk_index(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Vec<(i32, i64, i64)>, DbError> {
    Ok(sqlx::query_as(
        "SELECT seq, first_line, lines FROM report_log_chunks WHERE report_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(ex)
    .await?)
}

/// Whether report `id` exists and, when it does, when retention removed its log (`None` inside:
/// the log is stored).
pub async fn log_removed_at(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Option<Option<crate::time::Timestamp>>, DbError> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT ",
        rfc3339!("log_removed_at"),
        " FROM reports WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(ex)
    .await?)
}

/// How many chunks report `id`'s log has (0: no such report, or its log was removed).
pub async fn log_chunk_count(ex: impl PgExecutor<'_>, id: i64) -> Result<i32, DbError> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM report_log_chunks WHERE report_id = $1")
        .bind(id)
        .fetch_one(ex)
        .await?;
    Ok(i32::try_from(n).unwrap_or(i32::MAX))
}

/// A column expression: a report's whole log as one multi-member gzip stream, for the few
/// readers that need every line (reclassification, rule previews). `reports` must be in scope.
macro_rules! whole_log_gz {
    () => {
        "coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq) \
                   FROM report_log_chunks c WHERE c.report_id = reports.id), ''::bytea)"
    };
}
pub(crate) use whole_log_gz;

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
    rfc3339!("r.created_at"),
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
