//! Read a report: everything its page and `GET /api/v1/reports/{id}` show (the report, its
//! group's size and fixes, its reproduction jobs, where its headline comes from), read in one
//! transaction so the parts agree, and its stored log decompressed.

use std::io::Read;

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
    tx.rollback().await.map_err(DbError::from)?;
    Ok(ReportDetail {
        report,
        group,
        fixes,
        jobs,
        basis,
    })
}

/// The report's stored (scrubbed) log, decompressed, or 404.
pub async fn log(db: &Db, id: i64) -> Result<Vec<u8>, Error> {
    let gz = store::report_log_gz(db.pool(), id)
        .await?
        .ok_or(Error::NotFound("report"))?;
    blocking(move || {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .map(|_| out)
    })
    .await?
    .map_err(|e| Error::Internal(e.into()))
}

/// The newest reports.
pub async fn recent(db: &Db, limit: i64) -> Result<Vec<store::ReportSummary>, Error> {
    Ok(store::recent_reports(db.pool(), limit).await?)
}
