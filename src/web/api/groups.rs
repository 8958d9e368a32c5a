//! `GET /api/v1/search`, `GET /api/v1/groups/{id}`, `POST /api/v1/groups/{id}/fixes`: extract,
//! call one `app::triage` function, render. (The group list and triage changes are in
//! `group_triage`.)

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use crate::api_types::search::{
    MatchTier, SearchGroup, SearchHit, SearchHitKind, SearchResults, Snippet, SnippetSegment,
};
use crate::api_types::{ErrorBody, ErrorCode, Fix, GroupDetail, GroupReport};
use crate::app::group_triage;
use crate::app::search::{self, SearchRequest};
use crate::app::search::{Hit, HitKind, Tier, Total};
use crate::app::triage::{self, FixRequest};
use crate::web::error::AppError;
use crate::web::extract::{GroupId, JsonShape, QueryParams, ShapedJson};
use crate::web::scope::{IngestOrAdmin, Read, Scoped};
use crate::web::state::AppState;

/// `GET /api/v1/search?q=...&category=...&project=...&page=...&per_page=...`: the groups whose
/// reports, own root cause or fixes match, one result per group, ranked by its best match.
///
/// Each result describes that best match (`kind`, `id`, `title`, `matched`, `snippet`, ...,
/// as before results were collapsed) and the `group` it stands for: its report count, triage
/// `state` and `culprit` frame. `total` counts groups up to 1,000 (`total_exact: false` means
/// "at least `total`");
/// `corrected` names the words whose results these are when the words asked found nothing,
/// `suggestion` a spelling correction to offer otherwise. Each result says where it `matched`
/// (`root_cause`, `fix`, `symptom` or `log`, the order results are ranked in) and carries its
/// `snippet` as plain `text` and as `segments` (`{"text", "marked"}` in order; the marked ones
/// are the match).
#[utoipa::path(
    get,
    path = "/api/v1/search",
    tag = "search",
    params(SearchRequest),
    responses(
        (status = 200, description = "One page of results, one per group, ranked by the \
            group's best match: root cause > fix > symptom > log, newest first within each.",
            body = SearchResults),
        (status = 400, description = "`bad_query`: a missing or empty `q`, an unknown \
            parameter, category or page out of range.", body = ErrorBody),
    ),
    security(("bearer" = ["read"])),
)]
pub async fn search(
    State(state): State<AppState>,
    _: Scoped<Read>,
    QueryParams(params): QueryParams<SearchRequest>,
) -> Result<Json<SearchResults>, AppError> {
    let found = search::search(&state.db, &params).await?;
    let (total, total_exact) = match found.total {
        Total::Exact(n) => (n, true),
        Total::AtLeast(n) => (n, false),
    };
    let results = (found.hits.into_iter())
        .map(|h| search_hit(&state.public_url, h))
        .collect();
    Ok(Json(SearchResults {
        query: found.text,
        corrected: found.corrected,
        suggestion: found.suggestion,
        category: found.category,
        project: found.project,
        page: found.page,
        per_page: found.per_page,
        total,
        total_exact,
        next_page: found.next_page,
        prev_page: found.prev_page,
        results,
    }))
}

/// A hit as the API lists it, with its page's URL.
fn search_hit(public_url: &str, h: Hit) -> SearchHit {
    let (kind, url) = match h.kind {
        HitKind::Report => (
            SearchHitKind::Report,
            format!("{public_url}/reports/{}", h.id),
        ),
        HitKind::Group => (
            SearchHitKind::Group,
            format!("{public_url}/groups/{}", h.group_id),
        ),
        HitKind::Fix => (
            SearchHitKind::Fix,
            format!("{public_url}/groups/{}", h.group_id),
        ),
    };
    let matched = match h.tier {
        Tier::RootCause => MatchTier::RootCause,
        Tier::Fix => MatchTier::Fix,
        Tier::Symptom => MatchTier::Symptom,
        Tier::Log => MatchTier::Log,
    };
    let group = SearchGroup {
        culprit: h.group.culprit().map(str::to_owned),
        id: h.group.id,
        title: h.group.title,
        category: h.group.category,
        state: h.group.state,
        report_count: h.group.report_count,
        last_seen: h.group.last_seen,
        url: format!("{public_url}/groups/{}", h.group.id),
    };
    let text: String = h.snippet.iter().map(|s| s.text.as_str()).collect();
    let segments = (h.snippet.into_iter())
        .map(|s| SnippetSegment {
            text: s.text,
            marked: s.marked,
        })
        .collect();
    SearchHit {
        kind,
        id: h.id,
        group_id: h.group_id,
        title: h.title,
        category: h.category,
        project: h.project,
        created_at: h.created_at,
        url,
        matched,
        snippet: Snippet { text, segments },
        group,
    }
}

/// `GET /api/v1/groups/{id}`: a group with its newest reports, fixes and triage. A group that
/// was merged into another answers `308 Permanent Redirect` with `Location` naming the other
/// (`/api/v1/groups/{into}`), so a client that follows redirects gets the group that holds its
/// reports now.
#[utoipa::path(
    get,
    path = "/api/v1/groups/{id}",
    tag = "groups",
    params(("id" = i64, Path, description = "The group's id.")),
    responses(
        (status = 200, description = "The group, its newest reports, fixes and triage.",
            body = GroupDetail),
        (status = 308, description = "`group_merged`: the group was merged into another;             `Location` is that group's URL (`/api/v1/groups/{into}`), the message names it.",
            body = ErrorBody,
            headers(("Location" = String, description = "The group it was merged into."))),
        (status = 404, description = "`not_found`: no such group.", body = ErrorBody),
    ),
    security(("bearer" = ["read"])),
)]
pub async fn show_group(
    State(state): State<AppState>,
    _: Scoped<Read>,
    GroupId(id): GroupId,
) -> Result<Json<GroupDetail>, AppError> {
    let d = group_triage::group(&state.db, id).await?;
    Ok(Json(group_detail(&state, d)))
}

/// A group as `GET` and `PATCH /api/v1/groups/{id}` answer it.
pub(super) fn group_detail(state: &AppState, d: group_triage::GroupView) -> GroupDetail {
    let g = d.group;
    let t = d.triage;
    let reports = (d.reports.into_iter())
        .map(|r| GroupReport {
            url: format!("{}/reports/{}", state.public_url, r.id),
            id: r.id,
            created_at: r.created_at,
            project: r.project,
            category: r.category,
            title: r.title,
            root_cause_text: r.root_cause_text,
        })
        .collect();
    GroupDetail {
        url: format!("{}/groups/{}", state.public_url, g.id),
        id: g.id,
        fingerprint: g.fingerprint,
        category: g.category,
        title: g.title,
        root_cause_text: g.root_cause_text,
        count: g.report_count,
        removed_by_retention: g.removed_count,
        first_seen: g.first_seen,
        last_seen: g.last_seen,
        verdict: g.verdict,
        state: t.triage.state,
        resolved_in: t.triage.resolved_in,
        state_changed_at: t.triage.state_changed_at,
        assignee: t.triage.assignee,
        assignee_id: t.triage.assignee_person_id,
        ignore_reports_left: t.triage.ignore_reports_left.map(i64::from),
        history: t.history,
        tags: t.tags,
        reports,
        fixes: d.fixes.into_iter().map(Into::into).collect(),
        merged_groups: d.merged.iter().map(|m| m.id).collect(),
    }
}

/// A fix as recorded through the API: 415 without `Content-Type: application/json`, 422
/// `bad_fix` for JSON that is not the documented object.
impl JsonShape for FixRequest {
    const SHAPE_ERROR: ErrorCode = ErrorCode::BadFix;
    const MISSING_CONTENT_TYPE_IS_415: bool = true;
}

/// `POST /api/v1/groups/{id}/fixes`: record what fixed a group's failure.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{id}/fixes",
    tag = "groups",
    params(("id" = i64, Path, description = "The group's id.")),
    request_body(content = FixRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The recorded fix (secrets in it scrubbed).", body = Fix),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such group.", body = ErrorBody),
        (status = 409, description = "`group_merged`: the group was merged into another (the \
            message names it); record the fix there.", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: not `application/json`.",
            body = ErrorBody),
        (status = 422, description = "`bad_fix`: a missing, empty or too long summary, or an \
            unknown field.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["admin"])),
)]
pub async fn create_fix(
    State(state): State<AppState>,
    token: Scoped<IngestOrAdmin>,
    GroupId(id): GroupId,
    ShapedJson(body): ShapedJson<FixRequest>,
) -> Result<impl IntoResponse, AppError> {
    let stored: Fix = triage::record_fix(&state.db, id, body, &token.actor())
        .await?
        .into();
    Ok((StatusCode::CREATED, Json(stored)))
}
