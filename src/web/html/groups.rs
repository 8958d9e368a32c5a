//! Portal pages for one group of recurring failures (its reports, fixes, chart and triage; the
//! fix form). The group list and the state form are in `group_triage`; search is in `search`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use super::group_triage::{TREND_DAYS, TriageView, triage_view};
use super::trend::{self, ChartSize};
use crate::app::triage;
use crate::auth::Scope;
use crate::storage::groups::{Fix, Group};
use crate::storage::reports::ReportSummary;
use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, GroupId};
use crate::web::{AppState, PageError};

/// `GET /groups/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "group.html")]
pub struct GroupPage {
    layout: Layout,
    group: Group,
    reports: Vec<ReportSummary>,
    fixes: Vec<Fix>,
    can_record: bool,
    /// State, its form, history, tag breakdowns and the chart.
    triage: TriageView,
}

/// `GET /groups/{id}`
pub async fn show_group(
    State(state): State<AppState>,
    user: PortalUser,
    GroupId(id): GroupId,
) -> Result<GroupPage, PageError> {
    user.require(&[Scope::Read])?;
    let detail = triage::group(&state.db, id).await?;
    let (per_day, today) = triage::trends(&state.db, &[id], TREND_DAYS as i32).await?;
    let days: Vec<(String, i64)> = per_day.into_iter().map(|(_, d, n)| (d, n)).collect();
    let chart = trend::chart_svg(&days, TREND_DAYS, &today, ChartSize::Full);
    let count = detail.group.report_count;
    Ok(GroupPage {
        layout: Layout::for_user(Some(&user)),
        triage: triage_view(&state, &user, detail.triage, count, chart).await?,
        reports: detail.reports,
        fixes: detail.fixes,
        can_record: user.require(&[Scope::Ingest, Scope::Admin]).is_ok(),
        group: detail.group,
    })
}

/// The fix form.
#[derive(Debug, Deserialize)]
pub struct FixForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    summary: String,
    #[serde(default)]
    details: String,
    #[serde(default)]
    link: String,
}

impl CsrfField for FixForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /groups/{id}/fixes`
pub async fn create_fix(
    State(state): State<AppState>,
    GroupId(id): GroupId,
    CsrfForm { user, form }: CsrfForm<FixForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Ingest, Scope::Admin])?;
    let request = triage::FixRequest {
        summary: form.summary,
        details: form.details,
        link: form.link,
    };
    triage::record_fix(&state.db, id, request, &user.0.token.name).await?;
    Ok(Redirect::to(&format!("/groups/{id}#fixes")).into_response())
}
