//! Read a report: everything its page and `GET /api/v1/reports/{id}` show (the report, its
//! group's size and fixes, its reproduction jobs, where its headline comes from), read in one
//! transaction so the parts agree, and its stored log: a range of lines for a page (only the
//! chunks that hold them are read), or the whole log as a stream for a download.

use super::logstore;
use super::similar::{self, SimilarFailure};
use super::{Error, blocking};
use crate::storage::groups::{self, Group};
use crate::storage::reports::{self as store, Report};
use crate::storage::reproductions::{self as reads, CategoryBasis, JobView};
use crate::storage::{Db, DbError};

/// A report with what is shown beside it.
#[derive(Clone, Debug)]
pub struct ReportDetail {
    pub report: Report,
    /// Its group (`None` only if the group vanished meanwhile).
    pub group: Option<Group>,
    pub fixes: Vec<groups::Fix>,
    /// Its reproduction jobs, oldest first.
    pub jobs: Vec<JobView>,
    pub basis: Option<CategoryBasis>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    pub similar: Vec<SimilarFailure>,
}

impl ReportDetail {
    /// What fixed this failure before: its group's newest fix, else a close similar group's.
    #[must_use]
    pub fn known_fix(&self) -> Option<&groups::Fix> {
        similar::known_fix(&self.fixes, &self.similar)
    }
}

/// The report with id `id`, or 404.
pub async fn detail(db: &Db, id: i64) -> Result<ReportDetail, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let report = store::get_report(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("report"))?;
    let group = groups::get_group(&mut *tx, report.group_id).await?;
    let fixes = groups::group_fixes(&mut *tx, report.group_id).await?;
    let jobs = reads::report_jobs(&mut tx, id).await?;
    let basis = reads::category_basis(&mut *tx, id, false).await?;
    let similar = similar::of_signature(&mut tx, &report.signature, report.group_id).await?;
    tx.rollback().await.map_err(DbError::from)?;
    Ok(ReportDetail {
        report,
        group,
        fixes,
        jobs,
        basis,
        similar,
    })
}

/// Lines `first..=last` (1-based) of the report's stored (scrubbed) log, each followed by `\n`
/// and cut to its first `max_line_bytes` bytes: fewer past the end, 404 for an unknown report.
/// Reads and decompresses only the chunks that hold them.
pub async fn log_lines(
    db: &Db,
    id: i64,
    first: usize,
    last: usize,
    max_line_bytes: usize,
) -> Result<Vec<u8>, Error> {
    let (first, last) = (first.max(1), last.max(first.max(1)));
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let chunks = store::log_chunks_for_lines(db.pool(), id, as_i64(first), as_i64(last)).await?;
    if chunks.is_empty() && store::log_chunk_count(db.pool(), id).await? == 0 {
        return Err(Error::NotFound("report"));
    }
    blocking(move || logstore::lines(&chunks, first, last, max_line_bytes))
        .await?
        .map_err(|e| Error::Internal(e.into()))
}

/// The report's whole stored log, decompressed a chunk at a time as the receiver takes it
/// (at most two chunks in memory per download), or 404.
pub async fn log_stream(
    db: &Db,
    id: i64,
) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, Error>>, Error> {
    let count = store::log_chunk_count(db.pool(), id).await?;
    if count == 0 {
        return Err(Error::NotFound("report"));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let db = db.clone();
    tokio::spawn(async move {
        for seq in 0..count {
            let next = match store::log_chunk(db.pool(), id, seq).await {
                // A report deleted meanwhile ends its download early.
                Ok(None) => break,
                Ok(Some(chunk)) => blocking(move || logstore::decompress(&chunk))
                    .await
                    .and_then(|r| r.map_err(|e| Error::Internal(e.into()))),
                Err(e) => Err(e.into()),
            };
            let failed = next.is_err();
            // The receiver is gone when the client went away: stop reading.
            if tx.send(next).await.is_err() || failed {
                break;
            }
        }
    });
    Ok(rx)
}

/// The newest reports.
pub async fn recent(db: &Db, limit: i64) -> Result<Vec<store::ReportSummary>, Error> {
    Ok(store::recent_reports(db.pool(), limit).await?)
}
