//! `GET /api/v1/groups` (the filtered, sorted, paged group list) and `PATCH /api/v1/groups/{id}`
//! (state, `resolved_in`, assignee): extract, call one `app::group_triage` function, render.
//! Triage changes take the `ingest` scope, like recording a fix: the people and tools that
//! report and fix failures also triage them; a read-only token gets 403.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};

use crate::api_types::{ErrorCode, GroupDetail, GroupList, GroupListItem, GroupPatch};
use crate::app::group_triage::{self, ListRequest};
use crate::auth::Scope;
use crate::web::auth::ApiToken;
use crate::web::extract::{GroupId, JsonBody};
use crate::web::{AppError, AppState};

/// `GET /api/v1/groups?state=&project=&category=&has_fix=&assignee=&sort=&page=&per_page=`
pub async fn list_groups(
    State(state): State<AppState>,
    token: ApiToken,
    params: Result<Query<ListRequest>, QueryRejection>,
) -> Result<Json<GroupList>, AppError> {
    token.require(&[Scope::Read])?;
    let Query(params) =
        params.map_err(|e| AppError::BadRequest(ErrorCode::BadQuery, e.body_text()))?;
    let found = group_triage::list(&state.db, &params).await?;
    Ok(Json(GroupList {
        groups: (found.groups.into_iter())
            .map(|l| GroupListItem {
                id: l.group.id,
                url: format!("{}/groups/{}", state.public_url, l.group.id),
                category: l.group.category,
                title: l.group.title,
                root_cause_text: l.group.root_cause_text,
                count: l.group.report_count,
                first_seen: l.group.first_seen,
                last_seen: l.group.last_seen,
                state: l.triage.state,
                resolved_in: l.triage.resolved_in,
                assignee: l.triage.assignee,
                has_fix: l.has_fix,
            })
            .collect(),
        page: found.page,
        per_page: found.per_page,
        total: found.total,
        next_page: found.more.then_some(found.page + 1),
    }))
}

/// `PATCH /api/v1/groups/{id}` with `{"state", "resolved_in", "assignee"}` (each optional):
/// 200 + the group as `GET` shows it, with its history.
pub async fn update_group(
    State(state): State<AppState>,
    token: ApiToken,
    GroupId(id): GroupId,
    JsonBody(patch): JsonBody<GroupPatch>,
) -> Result<Json<GroupDetail>, AppError> {
    token.require(&[Scope::Ingest, Scope::Admin])?;
    let d = group_triage::change(&state.db, id, patch, &token.0.name).await?;
    Ok(Json(super::groups::group_detail(&state, d)))
}
