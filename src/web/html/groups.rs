//! Portal pages for one group of recurring failures (its reports, fixes, chart and triage; the
//! fix form; the merge form that "Similar failures" offers). The group list and the state form
//! are in `group_triage`; search is in `search`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use super::group_triage::{TREND_DAYS, TriageView, triage_view};
use super::trend::{self, ChartSize};
use crate::api_types::{ErrorCode, MergeRequest};
use crate::app::group_merge::MergedGroup;
use crate::app::reports::ReportSummary;
use crate::app::triage::{Fix, Group};
use crate::app::{self, group_merge, group_triage, triage};
use crate::auth::Scope;
use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, GroupId, QueryHints};
use crate::web::{AppError, AppState, PageError};

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
    /// The fix form's values: empty, or what was sent when it was refused.
    fix_form: FixFields,
    /// Why the fix was not recorded.
    fix_error: Option<String>,
    /// The groups merged into this one, newest first.
    merged: Vec<MergedGroup>,
    /// The merged group whose link led here (`?merged_from=N`, when N is one of `merged`).
    arrived_from: Option<MergedGroup>,
}

/// `?merged_from=N`: the group page was reached through the link of group N, merged here.
#[derive(Debug, Default, Deserialize)]
pub struct GroupParams {
    merged_from: Option<String>,
}

/// The fix form's fields.
#[derive(Debug, Default)]
pub struct FixFields {
    summary: String,
    details: String,
    link: String,
}

/// `GET /groups/{id}`
pub async fn show_group(
    State(state): State<AppState>,
    user: PortalUser,
    GroupId(id): GroupId,
    QueryHints(params): QueryHints<GroupParams>,
) -> Result<GroupPage, PageError> {
    // Anything but a known merged group's id is no notice (the parameter is only a hint).
    let from = params
        .merged_from
        .and_then(|s| s.trim().parse::<i64>().ok());
    let mut page = group_page(&state, &user, id, FixFields::default(), None).await?;
    page.arrived_from = page.merged.iter().find(|m| Some(m.id) == from).cloned();
    Ok(page)
}

async fn group_page(
    state: &AppState,
    user: &PortalUser,
    id: i64,
    fix_form: FixFields,
    fix_error: Option<String>,
) -> Result<GroupPage, PageError> {
    user.require(&[Scope::Read])?;
    let detail = group_triage::group(&state.db, id).await?;
    let (per_day, today) = triage::trends(&state.db, &[id], TREND_DAYS as i32).await?;
    let days: Vec<(String, i64)> = per_day.into_iter().map(|(_, d, n)| (d, n)).collect();
    let chart = trend::chart_svg(&days, TREND_DAYS, &today, ChartSize::Full);
    let count = detail.group.report_count;
    Ok(GroupPage {
        layout: Layout::for_user(Some(user)),
        triage: triage_view(state, user, detail.triage, count, chart).await?,
        reports: detail.reports,
        fixes: detail.fixes,
        can_record: user.require(&[Scope::Ingest, Scope::Admin]).is_ok(),
        group: detail.group,
        fix_form,
        fix_error,
        merged: detail.merged,
        arrived_from: None,
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

/// `POST /groups/{id}/fixes`; a fix refused for what it says (no summary, a bad link) gets
/// the group page again with the typed values and the reason by the form.
pub async fn create_fix(
    State(state): State<AppState>,
    GroupId(id): GroupId,
    CsrfForm { user, form }: CsrfForm<FixForm>,
) -> Result<Response, PageError> {
    if let Err(refused) = user.require(&[Scope::Ingest, Scope::Admin]) {
        // What was typed comes back with the scope it needs (nothing is stored).
        let fields = FixFields {
            summary: form.summary,
            details: form.details,
            link: form.link,
        };
        let reason = format!("{refused}: recording a fix needs the ingest or admin scope");
        let page = group_page(&state, &user, id, fields, Some(reason)).await?;
        return Ok((axum::http::StatusCode::FORBIDDEN, page).into_response());
    }
    let request = triage::FixRequest {
        summary: form.summary.clone(),
        details: form.details.clone(),
        link: form.link.clone(),
    };
    match triage::record_fix(&state.db, id, request, &user.actor()).await {
        Ok(_) => Ok(Redirect::to(&format!("/groups/{id}#fixes")).into_response()),
        Err(err @ (app::Error::Invalid(..) | app::Error::Malformed(..))) => {
            let error = AppError::from(err);
            let (status, _) = error.status_and_code();
            let fields = FixFields {
                summary: form.summary,
                details: form.details,
                link: form.link,
            };
            let page = group_page(&state, &user, id, fields, Some(error.to_string())).await?;
            Ok((status, page).into_response())
        }
        Err(err) => Err(err.into()),
    }
}

/// The merge form ("Similar failures" on a report page): merge the group of the path into
/// group `into`.
#[derive(Debug, Deserialize)]
pub struct MergeForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    into: String,
}

impl CsrfField for MergeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /groups/{id}/merge`: merges group `id` into the form's `into` (`ingest` or `admin`
/// scope, CSRF-checked), then shows the group merged into, its history naming the merge.
pub async fn merge_group(
    State(state): State<AppState>,
    GroupId(id): GroupId,
    CsrfForm { user, form }: CsrfForm<MergeForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Ingest, Scope::Admin])?;
    let into = form.into.trim().parse::<i64>().map_err(|_| {
        AppError::Unprocessable(
            ErrorCode::BadMerge,
            format!(
                "into must be the id of a group, got {:?}",
                form.into.chars().take(40).collect::<String>()
            ),
        )
    })?;
    let merged = group_merge::merge(&state.db, id, &MergeRequest { into }, &user.actor()).await?;
    Ok(Redirect::to(&format!("/groups/{}#history", merged.group.id)).into_response())
}
