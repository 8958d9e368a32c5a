//! Read reports: a report with everything its page and `GET /api/v1/reports/{id}` show (the
//! report, its group's size and fixes, its reproduction jobs, where its headline comes from),
//! read in one transaction so the parts agree (with each run's outcome, derived for rows stored
//! before outcomes were); the report page's view ([`page`]), its stored log, the
//! lists of reports, and a report submitted through the start page's form ([`submit`]).

mod excerpt;
mod log;
mod submit;
mod view;

pub use crate::storage::reports::ReportSummary;
pub use excerpt::ReportedTrace;
pub use log::{PickedLines, log_stream};
pub use submit::{FormReport, Submitted, submit};
pub use view::{
    KnownFix, LogPane, LogRemoval, LogView, PAGE_LINES, PaneLines, ReportView, WindowRequest, page,
    page_range,
};

use super::reproduce;
use super::similar::{self, SimilarGroup};
use super::{Error, blocking};
use crate::storage::groups::{self, Group};
use crate::storage::reports::{self as store, Report};
use crate::storage::reproductions::{self as reads, CategoryBasis, JobView};
use crate::storage::{Db, DbError};

/// A report with what is shown beside it.
#[derive(Clone, Debug)]
pub struct ReportContext {
    pub report: Report,
    /// Its group (`None` only if the group vanished meanwhile).
    pub group: Option<Group>,
    pub fixes: Vec<groups::Fix>,
    /// Its reproduction jobs, oldest first.
    pub jobs: Vec<JobView>,
    pub basis: Option<CategoryBasis>,
    /// Other groups whose failure has nearly the same shape, most alike first.
    pub similar: Vec<SimilarGroup>,
    /// Its group's triage (state, the build it was resolved in, assignee), shown wherever the
    /// report is (issue 39 item 3); `None` only if the group vanished meanwhile.
    pub triage: Option<crate::storage::group_triage::Triage>,
    /// The run's story, for a report uploaded as a run of files (issue 41).
    pub run: Option<crate::rules::run::RunStory>,
}

impl ReportContext {
    /// What fixed this failure before: its own group's newest fix (never a similar group's).
    #[must_use]
    pub fn known_fix(&self) -> Option<&groups::Fix> {
        similar::known_fix(&self.fixes)
    }
}

/// The report with id `id`, or 404.
#[tracing::instrument(name = "reports::detail", skip_all, fields(report_id = id))]
pub async fn detail(db: &Db, id: i64) -> Result<ReportContext, Error> {
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    let report = store::get_report(&mut *tx, id)
        .await?
        .ok_or(Error::NotFound("report"))?;
    let group = groups::get_group(&mut *tx, report.group_id).await?;
    let fixes = groups::group_fixes(&mut *tx, report.group_id).await?;
    let jobs = reads::report_jobs(&mut tx, id).await?;
    let basis = reads::category_basis(&mut *tx, id, false).await?;
    let similar = similar::of_signature(
        &mut tx,
        db.nearest_memo(),
        &report.signature,
        report.group_id,
    )
    .await?;
    let triage = crate::storage::group_triage::get_triage(&mut *tx, report.group_id).await?;
    let run = crate::storage::job_runs::get_story(&mut *tx, id).await?;
    tx.rollback().await.map_err(DbError::from)?;
    let jobs = with_outcomes(jobs).await?;
    Ok(ReportContext {
        report,
        group,
        fixes,
        jobs,
        basis,
        similar,
        triage,
        run,
    })
}

/// The jobs with every run's outcome: rows stored before outcomes were get theirs derived
/// from their exit and output (on a blocking thread: the outputs may be megabytes).
async fn with_outcomes(mut jobs: Vec<JobView>) -> Result<Vec<JobView>, Error> {
    let old = |j: &JobView| {
        j.reproduction
            .as_ref()
            .is_some_and(|r| reproduce::outcome::incomplete(&r.run))
    };
    if !jobs.iter().any(old) {
        return Ok(jobs);
    }
    blocking(move || {
        for r in jobs.iter_mut().filter_map(|j| j.reproduction.as_mut()) {
            reproduce::outcome::complete(&mut r.run);
        }
        jobs
    })
    .await
}

/// A list of reports as asked (`GET /reports`): filters and a page.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportListRequest {
    pub category: Option<String>,
    pub project: Option<String>,
    pub page: Option<u32>,
    pub per_page: Option<u32>,
}

/// One page of reports, newest first.
#[derive(Clone, Debug)]
pub struct ReportList {
    pub category: Option<crate::rules::Category>,
    pub project: String,
    pub page: u32,
    pub per_page: u32,
    pub reports: Vec<store::ReportSummary>,
    /// Another page follows.
    pub more: bool,
}

/// Most pages a list goes to (deep offsets cost a scan; search or filter instead).
const MAX_PAGE: u32 = 1000;

/// Reports newest first, filtered by category and project (any letter case), a page at a time.
#[tracing::instrument(name = "reports::list", skip_all, fields(category = ?req.category, project = ?req.project, page = ?req.page))]
pub async fn list(db: &Db, req: &ReportListRequest) -> Result<ReportList, Error> {
    use crate::api_types::ErrorCode;
    let bad = |m: String| Error::Malformed(ErrorCode::BadQuery, m);
    let category = match req.category.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(c) => Some(
            c.parse::<crate::rules::Category>()
                .map_err(|_| bad(format!("category: unknown category {c:?}")))?,
        ),
    };
    let project = req.project.as_deref().map(str::trim).unwrap_or_default();
    let page = req.page.unwrap_or(1);
    if !(1..=MAX_PAGE).contains(&page) {
        return Err(bad(format!("page: expected 1 to {MAX_PAGE}")));
    }
    let per_page = req.per_page.unwrap_or(50);
    if !(1..=200).contains(&per_page) {
        return Err(bad("per_page: expected 1 to 200".into()));
    }
    let mut reports = store::list_reports(
        db.pool(),
        category,
        (!project.is_empty()).then_some(project),
        i64::from(per_page) + 1,
        i64::from(page - 1) * i64::from(per_page),
    )
    .await?;
    let more = reports.len() > per_page as usize;
    reports.truncate(per_page as usize);
    Ok(ReportList {
        category,
        project: project.to_owned(),
        page,
        per_page,
        reports,
        more,
    })
}

/// Reports the start page lists.
const START_LIST: i64 = 20;

/// The newest reports as the start page lists them; none for a person who may not read
/// reports (`may_read` false), without reading anything.
#[tracing::instrument(name = "reports::start_list", skip_all, fields(may_read = may_read))]
pub async fn start_list(db: &Db, may_read: bool) -> Result<Vec<store::ReportSummary>, Error> {
    if !may_read {
        return Ok(Vec::new());
    }
    Ok(store::recent_reports(db.pool(), START_LIST).await?)
}
