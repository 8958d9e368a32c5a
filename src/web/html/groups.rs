//! Portal pages for one group of recurring failures (its reports, fixes, chart and triage; the
//! fix form; the merge form that "Similar failures" and the group page offer; the unmerge
//! button beside each group merged into it). The group list and the state form
//! are in `group_triage`; search is in `search`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use super::group_triage::{TriageView, triage_view};
use super::trend::{self, ChartSize};
use crate::api_types::{ErrorCode, MergeRequest};
use crate::app::group_merge::MergedGroup;
use crate::app::group_triage::{FixOutcome, GroupPageView};
use crate::app::reports::ReportSummary;
use crate::app::triage::{Fix, FixRequest, Group, TREND_DAYS};
use crate::app::{group_merge, group_triage};
use crate::auth::Scope;
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, GroupId, QueryHints};
use crate::web::scope::{IngestOrAdmin, Read, ScopedUser};
use crate::web::state::AppState;

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
    ScopedUser { user, .. }: ScopedUser<Read>,
    GroupId(id): GroupId,
    QueryHints(params): QueryHints<GroupParams>,
) -> Result<GroupPage, PageError> {
    // Anything but a known merged group's id is no notice (the parameter is only a hint).
    let from = params.merged_from.and_then(|s| crate::ids::parse(s.trim()));
    let view = group_triage::page(&state.db, id, can_triage(&user)).await?;
    let mut page = GroupPage::new(&user, view, FixFields::default(), None);
    page.arrived_from = page.merged.iter().find(|m| Some(m.id) == from).cloned();
    Ok(page)
}

/// The user may triage groups and record fixes.
fn can_triage(user: &PortalUser) -> bool {
    user.require(&[Scope::Ingest, Scope::Admin]).is_ok()
}

impl GroupPage {
    /// The page of `view` for `user`, the fix form holding `fix_form` and the reason it was
    /// refused, if it was.
    fn new(
        user: &PortalUser,
        view: GroupPageView,
        fix_form: FixFields,
        fix_error: Option<String>,
    ) -> GroupPage {
        let chart = trend::chart_svg(&view.days, TREND_DAYS, &view.today, ChartSize::Full);
        let detail = view.view;
        let count = detail.group.report_count;
        GroupPage {
            layout: Layout::for_user(Some(user)),
            triage: triage_view(detail.triage, view.assignable, count, chart),
            reports: detail.reports,
            fixes: detail.fixes,
            can_record: can_triage(user),
            group: detail.group,
            fix_form,
            fix_error,
            merged: detail.merged,
            arrived_from: None,
        }
    }
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
    CsrfForm { user, form, .. }: CsrfForm<FixForm>,
) -> Result<Response, PageError> {
    let fields = FixFields {
        summary: form.summary,
        details: form.details,
        link: form.link,
    };
    if let Err(refused) = user.require(&[Scope::Ingest, Scope::Admin]) {
        // What was typed comes back with the scope it needs (nothing is stored).
        let reason = format!("{refused}: recording a fix needs the ingest or admin scope");
        user.require(&[Scope::Read])?;
        let view = group_triage::page(&state.db, id, false).await?;
        let page = GroupPage::new(&user, view, fields, Some(reason));
        return Ok((StatusCode::FORBIDDEN, page).into_response());
    }
    let request = FixRequest {
        summary: fields.summary.clone(),
        details: fields.details.clone(),
        link: fields.link.clone(),
    };
    let reader = user.require(&[Scope::Read]);
    let outcome =
        group_triage::submit_fix(&state.db, id, request, &user.actor(), reader.is_ok()).await?;
    match outcome {
        FixOutcome::Recorded(_) => Ok(Redirect::to(&format!("/groups/{id}#fixes")).into_response()),
        FixOutcome::Refused { error, page } => {
            // The page was read only for a reader: anyone else gets its 403, as when asking.
            reader?;
            let page = page.ok_or_else(|| {
                AppError::Internal(anyhow::anyhow!("a refused fix came without its page"))
            })?;
            let error = AppError::from(error);
            let (status, _) = error.status_and_code();
            let page = GroupPage::new(&user, *page, fields, Some(error.to_string()));
            Ok((status, page).into_response())
        }
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
    CsrfForm { user, form, .. }: CsrfForm<MergeForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    let into = crate::ids::parse(form.into.trim()).ok_or_else(|| {
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

/// The unmerge button beside a merged group on the page of the group holding it.
#[derive(Debug, Deserialize)]
pub struct UnmergeForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
}

impl CsrfField for UnmergeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /groups/{id}/unmerge`: splits merged group `id` back out (`ingest` or `admin` scope,
/// CSRF-checked), then shows it, its history naming the unmerge.
pub async fn unmerge_group(
    State(state): State<AppState>,
    GroupId(id): GroupId,
    CsrfForm { user, .. }: CsrfForm<UnmergeForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    let view = crate::app::group_unmerge::unmerge(&state.db, id, &user.actor()).await?;
    Ok(Redirect::to(&format!("/groups/{}#history", view.group.id)).into_response())
}
