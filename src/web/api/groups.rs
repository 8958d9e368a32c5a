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
use crate::app::triage::{self, FixRequest, SearchRequest};
use crate::auth::Scope;
use crate::web::auth::ApiToken;
use crate::web::extract::GroupId;
use crate::web::{AppError, AppState};

/// `GET /api/v1/search?q=...&category=...&project=...&page=...&per_page=...`
pub async fn search(
    State(state): State<AppState>,
    token: ApiToken,
    params: Result<Query<SearchRequest>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let Query(params) =
        params.map_err(|e| AppError::BadRequest(ErrorCode::BadQuery, e.body_text()))?;
    let found = triage::search(&state.db, &params).await?;
    let results: Vec<Value> = found
        .hits
        .iter()
        .map(|h| {
            let url = match h.kind.as_str() {
                "report" => format!("{}/reports/{}", state.public_url, h.id),
                _ => format!("{}/groups/{}", state.public_url, h.group_id),
            };
            json!({
                "kind": h.kind, "id": h.id, "group_id": h.group_id, "title": h.title,
                "category": h.category, "project": h.project, "text": h.text,
                "created_at": h.created_at, "url": url,
            })
        })
        .collect();
    Ok(Json(json!({
        "query": found.text, "page": found.page, "per_page": found.per_page,
        "next_page": if found.more { Some(found.page + 1) } else { None },
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
