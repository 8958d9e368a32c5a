//! `GET /api/v1/search`, `GET /api/v1/groups/{id}`, `POST /api/v1/groups/{id}/fixes`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse_id;
use crate::api_types::ErrorCode;
use crate::auth::Scope;
use crate::rules::Category;
use crate::storage::{groups, reports as store, search as find};
use crate::web::auth::ApiToken;
use crate::web::{AppError, AppState};

/// Query parameters of `GET /api/v1/search`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    q: String,
    category: Option<String>,
    project: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
}

impl SearchParams {
    /// Parameters for the first page (the portal's search form).
    pub(crate) fn new(q: String, category: Option<String>, project: Option<String>) -> Self {
        SearchParams {
            q,
            category,
            project,
            page: None,
            per_page: None,
        }
    }
}

/// A validated search request, shared with the portal's search page.
pub(crate) fn search_query(p: &SearchParams) -> Result<(find::Query, u32, u32), AppError> {
    let bad = |m: &str| AppError::BadRequest(ErrorCode::BadQuery, m.to_owned());
    let text = p.q.trim();
    if text.is_empty() || text.len() > 500 || text.contains('\0') {
        return Err(bad("q must be 1-500 characters without NUL"));
    }
    let category = match p.category.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => Some(
            c.parse::<Category>()
                .map_err(|e| bad(&e))?
                .as_str()
                .to_owned(),
        ),
        None => None,
    };
    let project = p.project.clone().filter(|s| !s.is_empty());
    if project
        .as_ref()
        .is_some_and(|s| s.len() > 200 || s.contains('\0'))
    {
        return Err(bad("project must be at most 200 characters without NUL"));
    }
    let page = p.page.unwrap_or(1);
    let per_page = p.per_page.unwrap_or(20);
    if !(1..=1000).contains(&page) || !(1..=100).contains(&per_page) {
        return Err(bad("page must be 1-1000 and per_page 1-100"));
    }
    Ok((
        find::Query {
            text: text.to_owned(),
            category,
            project,
            limit: i64::from(per_page) + 1,
            offset: i64::from(page - 1) * i64::from(per_page),
        },
        page,
        per_page,
    ))
}

/// `GET /api/v1/search?q=...&category=...&project=...&page=...&per_page=...`
pub async fn search(
    State(state): State<AppState>,
    token: ApiToken,
    params: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let Query(params) =
        params.map_err(|e| AppError::BadRequest(ErrorCode::BadQuery, e.body_text()))?;
    let (query, page, per_page) = search_query(&params)?;
    let mut hits = find::search(state.db.pool(), &query).await?;
    let more = hits.len() > per_page as usize;
    hits.truncate(per_page as usize);
    let results: Vec<Value> = hits
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
        "query": query.text, "page": page, "per_page": per_page,
        "next_page": if more { Some(page + 1) } else { None },
        "results": results,
    })))
}

/// `GET /api/v1/groups/{id}`
pub async fn show_group(
    State(state): State<AppState>,
    token: ApiToken,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let id = parse_id(&id, "group")?;
    let g = groups::get_group(state.db.pool(), id)
        .await?
        .ok_or(AppError::NotFound("group"))?;
    let reports = store::group_reports(state.db.pool(), id, 50).await?;
    let fixes = groups::group_fixes(state.db.pool(), id).await?;
    Ok(Json(json!({
        "id": g.id, "fingerprint": g.fingerprint, "category": g.category, "title": g.title,
        "root_cause_text": g.root_cause_text, "count": g.report_count,
        "first_seen": g.first_seen, "last_seen": g.last_seen,
        "url": format!("{}/groups/{}", state.public_url, g.id),
        "reports": reports.iter().map(|r| json!({
            "id": r.id, "created_at": r.created_at, "project": r.project, "category": r.category,
            "title": r.title, "root_cause_text": r.root_cause_text,
            "url": format!("{}/reports/{}", state.public_url, r.id),
        })).collect::<Vec<_>>(),
        "fixes": fixes.iter().map(fix_json).collect::<Vec<_>>(),
    })))
}

pub(crate) fn fix_json(f: &groups::Fix) -> Value {
    json!({
        "id": f.id, "group_id": f.group_id, "summary": f.summary, "details": f.details,
        "link": f.link, "author": f.author, "created_at": f.created_at,
    })
}

/// Body of `POST /api/v1/groups/{id}/fixes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixBody {
    summary: String,
    #[serde(default)]
    details: String,
    #[serde(default)]
    link: String,
}

impl FixBody {
    /// A fix from the portal's form.
    pub(crate) fn new(summary: String, details: String, link: String) -> Self {
        FixBody {
            summary,
            details,
            link,
        }
    }
}

/// Validates a fix (shared with the portal's fix form).
pub(crate) fn validate_fix(body: FixBody, author: &str) -> Result<groups::NewFix, AppError> {
    let bad = |m: &str| AppError::Unprocessable(ErrorCode::BadFix, m.to_owned());
    let summary = body.summary.trim().to_owned();
    if summary.is_empty() || summary.len() > 500 {
        return Err(bad("summary must be 1-500 characters"));
    }
    if body.details.len() > 20_000 {
        return Err(bad("details must be at most 20000 characters"));
    }
    let link = body.link.trim().to_owned();
    let link_ok = link.is_empty()
        || ((link.starts_with("https://") || link.starts_with("http://"))
            && link.len() <= 2000
            && !link.chars().any(|c| c.is_whitespace() || c.is_control()));
    if !link_ok {
        return Err(bad("link must be an http(s) URL"));
    }
    if [&summary, &body.details, &link]
        .iter()
        .any(|s| s.contains('\0'))
    {
        return Err(bad("fields must not contain NUL"));
    }
    // A fix is searchable and shown to everyone: a token pasted into it is scrubbed like one
    // in a log (SECURITY.md item 3).
    let scrub = |s: &str| crate::ingest::scrub::scrub(s).text.into_owned();
    Ok(groups::NewFix {
        summary: scrub(&summary),
        details: scrub(&body.details),
        link: scrub(&link),
        author: author.to_owned(),
    })
}

/// `POST /api/v1/groups/{id}/fixes`
pub async fn create_fix(
    State(state): State<AppState>,
    token: ApiToken,
    Path(id): Path<String>,
    body: Result<Json<FixBody>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    token.require(&[Scope::Ingest, Scope::Admin])?;
    let id = parse_id(&id, "group")?;
    let Json(body) = body.map_err(|e| match e {
        JsonRejection::MissingJsonContentType(_) => {
            AppError::UnsupportedMediaType("expected Content-Type: application/json".into())
        }
        JsonRejection::JsonDataError(e) => {
            AppError::Unprocessable(ErrorCode::BadFix, e.body_text())
        }
        other => AppError::rejected(ErrorCode::BadJson, other.status(), other.body_text()),
    })?;
    let fix = validate_fix(body, &token.0.name)?;
    let stored = groups::insert_fix(state.db.pool(), id, &fix)
        .await?
        .ok_or(AppError::NotFound("group"))?;
    Ok((StatusCode::CREATED, Json(fix_json(&stored))))
}
