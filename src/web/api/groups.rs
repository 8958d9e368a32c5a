//! `GET /api/v1/search`, `GET /api/v1/groups/{id}`, `POST /api/v1/groups/{id}/fixes`: extract,
//! call one `app::triage` function, render. (The group list and triage changes are in
//! `group_triage`.)

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::api_types::{ErrorCode, Fix};
use crate::app::search::{self, SearchRequest};
use crate::app::triage::{self, FixRequest};
use crate::auth::Scope;
use crate::storage::search::{HitKind, Total};
use crate::web::auth::ApiToken;
use crate::web::extract::GroupId;
use crate::web::{AppError, AppState};

/// `GET /api/v1/search?q=...&category=...&project=...&page=...&per_page=...`
///
/// `total` counts every hit up to 1,000 (`total_exact: false` means "at least `total`");
/// `corrected` names the words whose results these are when the words asked found nothing,
/// `suggestion` a spelling correction to offer otherwise. Each result says where it `matched`
/// (`root_cause`, `fix`, `symptom` or `log`, the order results are ranked in) and carries its
/// `snippet` as plain `text` and as `segments` (`{"text", "marked"}` in order; the marked ones
/// are the match).
pub async fn search(
    State(state): State<AppState>,
    token: ApiToken,
    params: Result<Query<SearchRequest>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let Query(params) =
        params.map_err(|e| AppError::BadRequest(ErrorCode::BadQuery, e.body_text()))?;
    let found = search::search(&state.db, &params).await?;
    let results: Vec<Value> = found
        .hits
        .iter()
        .map(|h| {
            let url = match h.kind {
                HitKind::Report => format!("{}/reports/{}", state.public_url, h.id),
                HitKind::Group | HitKind::Fix => {
                    format!("{}/groups/{}", state.public_url, h.group_id)
                }
            };
            let text: String = h.snippet.iter().map(|s| s.text.as_str()).collect();
            let segments: Vec<Value> = h
                .snippet
                .iter()
                .map(|s| json!({"text": s.text, "marked": s.marked}))
                .collect();
            json!({
                "kind": h.kind.as_str(), "id": h.id, "group_id": h.group_id, "title": h.title,
                "category": h.category, "project": h.project, "created_at": h.created_at,
                "url": url, "matched": h.tier.as_str(),
                "snippet": {"text": text, "segments": segments},
            })
        })
        .collect();
    let (total, exact) = match found.total {
        Total::Exact(n) => (n, true),
        Total::AtLeast(n) => (n, false),
    };
    Ok(Json(json!({
        "query": found.text, "corrected": found.corrected, "suggestion": found.suggestion,
        "category": found.category, "project": found.project,
        "page": found.page, "per_page": found.per_page,
        "total": total, "total_exact": exact,
        "next_page": found.next_page, "prev_page": found.prev_page,
        "results": results,
    })))
}

/// `GET /api/v1/groups/{id}`
pub async fn show_group(
    State(state): State<AppState>,
    token: ApiToken,
    GroupId(id): GroupId,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let d = triage::group(&state.db, id).await?;
    Ok(Json(group_json(&state, d)))
}

/// A group as `GET` and `PATCH /api/v1/groups/{id}` answer it.
pub(super) fn group_json(state: &AppState, d: triage::GroupDetail) -> Value {
    let g = d.group;
    let t = d.triage;
    json!({
        "id": g.id, "fingerprint": g.fingerprint, "category": g.category, "title": g.title,
        "root_cause_text": g.root_cause_text, "count": g.report_count,
        "first_seen": g.first_seen, "last_seen": g.last_seen, "verdict": g.verdict,
        "url": format!("{}/groups/{}", state.public_url, g.id),
        "state": t.triage.state, "resolved_in": t.triage.resolved_in,
        "state_changed_at": t.triage.state_changed_at, "assignee": t.triage.assignee,
        "history": t.history, "tags": t.tags,
        "reports": d.reports.iter().map(|r| json!({
            "id": r.id, "created_at": r.created_at, "project": r.project, "category": r.category,
            "title": r.title, "root_cause_text": r.root_cause_text,
            "url": format!("{}/reports/{}", state.public_url, r.id),
        })).collect::<Vec<_>>(),
        "fixes": d.fixes,
    })
}

/// `POST /api/v1/groups/{id}/fixes`
pub async fn create_fix(
    State(state): State<AppState>,
    token: ApiToken,
    GroupId(id): GroupId,
    body: Result<Json<FixRequest>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    token.require(&[Scope::Ingest, Scope::Admin])?;
    let Json(body) = body.map_err(|e| match e {
        JsonRejection::MissingJsonContentType(_) => {
            AppError::UnsupportedMediaType("expected Content-Type: application/json".into())
        }
        JsonRejection::JsonDataError(e) => {
            AppError::Unprocessable(ErrorCode::BadFix, e.body_text())
        }
        other => AppError::rejected(ErrorCode::BadJson, other.status(), other.body_text()),
    })?;
    let stored: Fix = triage::record_fix(&state.db, id, body, &token.0.name).await?;
    Ok((StatusCode::CREATED, Json(stored)))
}
