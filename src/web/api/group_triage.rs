//! `GET /api/v1/groups` (the filtered, sorted, paged group list), `PATCH /api/v1/groups/{id}`
//! (state, `resolved_in`, assignee), `POST /api/v1/groups/{id}/merge` and
//! `POST /api/v1/groups/{id}/unmerge`: extract, call one
//! `app::group_triage` or `app::group_merge` function, render. Triage changes and merges take
//! the `ingest` scope, like recording a fix: the people and tools that report and fix failures
//! also triage them; a read-only token gets 403.

use axum::Json;
use axum::extract::State;

use crate::api_types::{
    ErrorBody, GroupDetail, GroupList, GroupListItem, GroupPatch, MergeRequest,
};
use crate::app::group_merge;
use crate::app::group_triage::{self, GroupListRequest};
use crate::web::error::AppError;
use crate::web::extract::{GroupId, JsonBody, QueryParams};
use crate::web::scope::{IngestOrAdmin, Read, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/groups?state=&project=&category=&has_fix=&assignee=&assignee_id=&mine=&sort=`
/// `&page=&per_page=`: one page of groups, filtered and sorted; `mine` asks for the token's own
/// (assigned to its name, or with a fix it recorded).
#[utoipa::path(
    get,
    path = "/api/v1/groups",
    tag = "groups",
    params(GroupListRequest),
    responses(
        (status = 200, description = "One page of the groups that pass every given filter.",
            body = GroupList),
        (status = 400, description = "`bad_query`: an unknown filter value, sort or parameter.",
            body = ErrorBody),
    ),
    security(("bearer" = ["read"])),
)]
pub async fn list_groups(
    State(state): State<AppState>,
    token: Scoped<Read>,
    QueryParams(params): QueryParams<GroupListRequest>,
) -> Result<Json<GroupList>, AppError> {
    let found = group_triage::list(&state.db, &params, &token.actor()).await?;
    Ok(Json(GroupList {
        groups: (found.groups.into_iter())
            .map(|l| GroupListItem {
                culprit: l.group.culprit().map(str::to_owned),
                id: l.group.id,
                url: format!("{}/groups/{}", state.public_url, l.group.id),
                category: l.group.category,
                title: l.group.title,
                root_cause_text: l.group.root_cause_text,
                count: l.group.report_count,
                removed_by_retention: l.group.removed_count,
                first_seen: l.group.first_seen,
                last_seen: l.group.last_seen,
                state: l.triage.state,
                resolved_in: l.triage.resolved_in,
                assignee: l.triage.assignee,
                assignee_id: l.triage.assignee_person_id,
                ignore_reports_left: l.triage.ignore_reports_left.map(i64::from),
                has_fix: l.has_fix,
                projects: l.facets.projects,
                frameworks: l.facets.frameworks,
                environments: l.facets.environments,
                ranks: l.facets.ranks,
                hosts: l.facets.hosts,
            })
            .collect(),
        page: found.page,
        per_page: found.per_page,
        total: found.total,
        next_page: found.more.then_some(found.page + 1),
    }))
}

/// `PATCH /api/v1/groups/{id}` with `{"state", "resolved_in", "assignee", "assignee_id"}` (each
/// optional): 200 + the group as `GET` shows it, with its history.
#[utoipa::path(
    patch,
    path = "/api/v1/groups/{id}",
    tag = "groups",
    params(("id" = i64, Path, description = "The group's id.")),
    request_body(content = GroupPatch, content_type = "application/json"),
    responses(
        (status = 200, description = "The group as `GET` answers it, the change in its history.",
            body = GroupDetail),
        (status = 400, description = "`bad_json`: malformed JSON or an unknown field.",
            body = ErrorBody),
        (status = 404, description = "`not_found`: no such group.", body = ErrorBody),
        (status = 409, description = "`group_merged`: the group was merged into another (the \
            message names it); triage that one.", body = ErrorBody),
        (status = 422, description = "`bad_triage`: an unknown or hand-set `regressed` state, \
            `resolved_in` without `resolved` or neither a commit nor a version, an assignee \
            that is no active token's name, an `assignee_id` that is no enabled person's id (the \
            message names it), both `assignee` and `assignee_id`, or nothing to change.",
            body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn update_group(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    GroupId(id): GroupId,
    JsonBody(patch): JsonBody<GroupPatch>,
) -> Result<Json<GroupDetail>, AppError> {
    let d = group_triage::change(&state.db, id, patch, &token.actor()).await?;
    Ok(Json(super::groups::group_detail(&state, d)))
}

/// `POST /api/v1/groups/{id}/merge` with `{"into": N}`: group `id`'s reports, fixes, counts and
/// history move to group N, whose history names the token that merged them; group `id`'s
/// fingerprint sends later uploads to N and its URL answers `308` to N. 200 + group N as `GET`
/// answers it.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{id}/merge",
    tag = "groups",
    params(("id" = i64, Path, description = "The group to merge into another.")),
    request_body(content = MergeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The group merged into, as `GET` answers it: the merged \
            group's reports, fixes and history are its own now, `merged_groups` lists it, and \
            its history's newest entry is the merge (`action` `merge`, `from` the merged \
            group's id, `to` its own, `actor` the token's name).", body = GroupDetail),
        (status = 400, description = "`bad_json`: malformed JSON, a missing `into` or an \
            unknown field.", body = ErrorBody),
        (status = 404, description = "`not_found`: no group `id`, or no group `into`.",
            body = ErrorBody),
        (status = 409, description = "`group_merged`: group `id` was already merged (the \
            message names where); `busy`: the target kept being merged elsewhere meanwhile.",
            body = ErrorBody),
        (status = 422, description = "`bad_merge`: `into` is `id` itself, or a group that was \
            merged into `id`, or not a positive id.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn merge_group(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    GroupId(id): GroupId,
    JsonBody(request): JsonBody<MergeRequest>,
) -> Result<Json<GroupDetail>, AppError> {
    let d = group_merge::merge(&state.db, id, &request, &token.actor()).await?;
    Ok(Json(super::groups::group_detail(&state, d)))
}

/// `POST /api/v1/groups/{id}/unmerge`: group `id`, merged into another, is split back out with
/// everything that belongs to it. 200 + group `id` as `GET` answers it.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{id}/unmerge",
    tag = "groups",
    params(("id" = i64, Path, description = "The merged group to split back out.",
        minimum = 1)),
    responses(
        (status = 200, description = "The group split out, as `GET` answers it: its reports, \
            fixes, counts of deleted reports and history are its own again, with those of the \
            groups merged into it before its own merge (they are merged into it again, as \
            `merged_groups` says) and the reports later uploads of their failures brought; \
            its history's newest entry and the former holder's are the unmerge (`action` \
            `unmerge`, `from` the holder's id, `to` this group's).", body = GroupDetail),
        (status = 404, description = "`not_found`: no such group.", body = ErrorBody),
        (status = 409, description = "`not_merged`: the group is not merged (never merged, or \
            unmerged already); `busy`: merges kept changing it meanwhile.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn unmerge_group(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    GroupId(id): GroupId,
) -> Result<Json<GroupDetail>, AppError> {
    let d = crate::app::group_unmerge::unmerge(&state.db, id, &token.actor()).await?;
    Ok(Json(super::groups::group_detail(&state, d)))
}
