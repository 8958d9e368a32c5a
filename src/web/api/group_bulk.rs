//! `POST /api/v1/groups/bulk` (one triage change of many groups), `POST /api/v1/groups/merge`
//! (several groups into one) and `POST /api/v1/groups/changes/{id}/undo`: extract, call one
//! `app::group_triage` or `app::group_merge` function, render. Like the single-group changes
//! they take the `ingest` scope (or `admin`); a read-only token gets 403 before the body is
//! read.

use axum::Json;
use axum::extract::State;

use crate::api_types::{
    BulkAnswer, BulkChange, BulkMerge, ErrorBody, GroupDetail, GroupTriageItem,
};
use crate::app::group_merge;
use crate::app::group_triage::{self, BulkOutcome};
use crate::web::error::AppError;
use crate::web::extract::{ChangeId, JsonBody};
use crate::web::scope::{IngestOrAdmin, Scoped};
use crate::web::state::AppState;

/// The answer of a bulk change or an undo.
fn answer(state: &AppState, outcome: BulkOutcome) -> BulkAnswer {
    BulkAnswer {
        change_id: outcome.change,
        changed: outcome.changed,
        groups: (outcome.groups.into_iter())
            .map(|(id, t)| GroupTriageItem {
                id,
                url: format!("{}/groups/{id}", state.public_url),
                state: t.state,
                resolved_in: t.resolved_in,
                assignee: t.assignee,
                assignee_id: t.assignee_person_id,
                ignore_reports_left: t.ignore_reports_left.map(i64::from),
            })
            .collect(),
    }
}

/// `POST /api/v1/groups/bulk` with `{"ids": [...], "change": {...}}`: the change of
/// `PATCH /api/v1/groups/{id}` applied to every group, all or nothing.
#[utoipa::path(
    post,
    path = "/api/v1/groups/bulk",
    tag = "groups",
    request_body(content = BulkChange, content_type = "application/json"),
    responses(
        (status = 200, description = "Every group changed (each with its history entries), \
            recorded as one change that `POST /api/v1/groups/changes/{change_id}/undo` takes \
            back; `change_id` is `null` when every group was as asked already.",
            body = BulkAnswer),
        (status = 400, description = "`bad_json`: malformed JSON, a missing field or an \
            unknown one.", body = ErrorBody),
        (status = 409, description = "`group_merged`: a group was merged into another (the \
            message names both); nothing changed.", body = ErrorBody),
        (status = 422, description = "`bad_bulk`: no ids, more than 100, a repeated or \
            non-positive id, or ids that name no group (the message lists them); \
            `bad_triage`: the change is refused for a group, as `PATCH` refuses it (the \
            message names the group). Nothing changed.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn bulk_change(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    JsonBody(request): JsonBody<BulkChange>,
) -> Result<Json<BulkAnswer>, AppError> {
    let outcome =
        group_triage::bulk_change(&state.db, &request.ids, request.change, &token.actor()).await?;
    Ok(Json(answer(&state, outcome)))
}

/// `POST /api/v1/groups/merge` with `{"ids": [...], "into": N}`: every group of `ids` merged
/// into N (or into the one with the most reports), all or nothing.
#[utoipa::path(
    post,
    path = "/api/v1/groups/merge",
    tag = "groups",
    request_body(content = BulkMerge, content_type = "application/json"),
    responses(
        (status = 200, description = "The group merged into, as `GET` answers it: a `merge` \
            entry in its history for each group merged, and each in `merged_groups`.",
            body = GroupDetail),
        (status = 400, description = "`bad_json`: malformed JSON, a missing field or an \
            unknown one.", body = ErrorBody),
        (status = 404, description = "`not_found`: no group `into`.", body = ErrorBody),
        (status = 409, description = "`group_merged`: a group of `ids` was merged already \
            (the message names where); `busy`: the target kept being merged elsewhere.",
            body = ErrorBody),
        (status = 422, description = "`bad_bulk`: no ids, more than 100, a repeated or \
            non-positive id, or ids that name no group; `bad_merge`: one group without \
            `into`, `ids` naming only `into`, a group merged into itself, or `into` not a \
            positive id. Nothing changed.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn merge_groups(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    JsonBody(request): JsonBody<BulkMerge>,
) -> Result<Json<GroupDetail>, AppError> {
    let d = group_merge::merge_many(&state.db, &request, &token.actor()).await?;
    Ok(Json(super::groups::group_detail(&state, d)))
}

/// `POST /api/v1/groups/changes/{id}/undo`: puts the groups of bulk change `id` back as they
/// were.
#[utoipa::path(
    post,
    path = "/api/v1/groups/changes/{id}/undo",
    tag = "groups",
    params(("id" = i64, Path, description = "The change's id (`change_id` of its answer).",
        minimum = 1)),
    responses(
        (status = 200, description = "Every group of the change as it was before it, each \
            with history entries saying which change they undo; `changed` lists them.",
            body = BulkAnswer),
        (status = 404, description = "`not_found`: no such change.", body = ErrorBody),
        (status = 409, description = "`already_undone`: the change was undone already; \
            `changed_since`: a group of it changed since (the message names it: another \
            change, an upload that reopened it, a merge), and nothing changed.",
            body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn undo_change(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    ChangeId(id): ChangeId,
) -> Result<Json<BulkAnswer>, AppError> {
    let outcome = group_triage::undo(&state.db, id, &token.actor()).await?;
    Ok(Json(answer(&state, outcome)))
}
