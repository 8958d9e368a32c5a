//! Portal pages for groups of recurring failures (list with counts and a per-day trend, one
//! group with its reports and fixes, the fix form).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{Layout, trend};
use crate::app::triage;
use crate::auth::Scope;
use crate::storage::groups::{Fix, Group};
use crate::storage::reports::ReportSummary;
use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, GroupId};
use crate::web::{AppState, PageError};

/// Days shown in trends.
const TREND_DAYS: usize = 30;

/// A group in the list, with its trend.
pub struct GroupRow {
    pub group: Group,
    /// Inline SVG built from numbers only (see `trend`), safe to embed.
    pub trend: String,
}

/// `GET /groups`
#[derive(Template, WebTemplate)]
#[template(path = "groups.html")]
pub struct GroupsPage {
    layout: Layout,
    rows: Vec<GroupRow>,
}

/// `GET /groups`
pub async fn list_groups(
    State(state): State<AppState>,
    user: PortalUser,
) -> Result<GroupsPage, PageError> {
    user.require(&[Scope::Read])?;
    let list = triage::recent_groups(&state.db, 100).await?;
    let ids: Vec<i64> = list.iter().map(|g| g.id).collect();
    let (per_day, today) = triage::trends(&state.db, &ids, TREND_DAYS as i32).await?;
    let rows = list
        .into_iter()
        .map(|g| {
            let days: Vec<(String, i64)> = per_day
                .iter()
                .filter(|(id, _, _)| *id == g.id)
                .map(|(_, d, n)| (d.clone(), *n))
                .collect();
            GroupRow {
                trend: trend::trend_svg(&days, TREND_DAYS, &today),
                group: g,
            }
        })
        .collect();
    Ok(GroupsPage {
        layout: Layout::for_user(Some(&user)),
        rows,
    })
}

/// `GET /groups/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "group.html")]
pub struct GroupPage {
    layout: Layout,
    group: Group,
    trend: String,
    reports: Vec<ReportSummary>,
    fixes: Vec<Fix>,
    can_record: bool,
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
    Ok(GroupPage {
        layout: Layout::for_user(Some(&user)),
        trend: trend::trend_svg(&days, TREND_DAYS, &today),
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
