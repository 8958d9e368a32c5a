//! Portal pages for one group of recurring failures (its reports, fixes, chart and triage; the
//! fix form) and search. The group list and the state form are in `group_triage`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use super::group_triage::{TREND_DAYS, TriageView, triage_view};
use super::trend::{self, ChartSize};
use crate::api_types::ErrorCode;
use crate::app::{self, triage};
use crate::auth::Scope;
use crate::storage::groups::{Fix, Group};
use crate::storage::reports::ReportSummary;
use crate::storage::search::Hit;
use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, GroupId};
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
    let chart = trend::chart_svg(&days, TREND_DAYS, &today, ChartSize::Full);
    let count = detail.group.report_count;
    Ok(GroupPage {
        layout: Layout::for_user(Some(&user)),
        triage: triage_view(&state, &user, detail.triage, count, chart).await?,
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

/// A piece of a search hit's text; `hit` pieces are shown marked.
pub struct Piece {
    pub text: String,
    pub hit: bool,
}

/// A search hit as the page shows it.
pub struct HitView {
    pub hit: Hit,
    pub url: String,
    pub title: Vec<Piece>,
    pub text: Vec<Piece>,
}

/// `GET /search`
#[derive(Template, WebTemplate)]
#[template(path = "search.html")]
pub struct SearchPage {
    layout: Layout,
    q: String,
    category: String,
    project: String,
    categories: Vec<&'static str>,
    hits: Vec<HitView>,
    searched: bool,
    error: Option<String>,
}

/// `GET /search?q=...&category=...&project=...`
pub async fn search(
    State(state): State<AppState>,
    user: PortalUser,
    params: Result<Query<PageSearch>, QueryRejection>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Read])?;
    let Query(p) = params.map_err(|e| AppError::BadRequest(ErrorCode::BadQuery, e.body_text()))?;
    let mut page = SearchPage {
        layout: Layout::for_user(Some(&user)),
        q: p.q.clone().unwrap_or_default(),
        category: p.category.clone().unwrap_or_default(),
        project: p.project.clone().unwrap_or_default(),
        categories: crate::rules::Category::ALL
            .iter()
            .map(|c| c.as_str())
            .collect(),
        hits: Vec::new(),
        searched: false,
        error: None,
    };
    if page.q.trim().is_empty() {
        return Ok(page.into_response());
    }
    let request = triage::SearchRequest {
        q: page.q.clone(),
        category: p.category,
        project: p.project,
        ..triage::SearchRequest::default()
    };
    let found = match triage::search(&state.db, &request).await {
        Ok(found) => found,
        Err(e @ app::Error::Malformed(..)) => {
            // The form again with the reason, as a 400 like the API's `bad_query`.
            page.error = Some(e.to_string());
            return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
        }
        Err(e) => return Err(e.into()),
    };
    let words: Vec<String> = found
        .text
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| c == '"' || c == '-')
                .to_lowercase()
        })
        .filter(|w| w.len() >= 2 && w != "or")
        .collect();
    page.hits = found
        .hits
        .into_iter()
        .map(|h| HitView {
            url: if h.kind == "report" {
                format!("/reports/{}", h.id)
            } else {
                format!("/groups/{}", h.group_id)
            },
            title: highlight(&h.title, &words),
            text: highlight(&h.text, &words),
            hit: h,
        })
        .collect();
    page.searched = true;
    Ok(page.into_response())
}

/// Query parameters of the search page (all optional: an empty form is just the page).
#[derive(Debug, Deserialize)]
pub struct PageSearch {
    q: Option<String>,
    category: Option<String>,
    project: Option<String>,
}

/// Splits `text` into pieces, marking case-insensitive occurrences of any of `words`.
pub fn highlight(text: &str, words: &[String]) -> Vec<Piece> {
    let lower = text.to_lowercase();
    // Lowercasing can change byte lengths outside ASCII; fall back to no marks then.
    if lower.len() != text.len() || words.is_empty() {
        return vec![Piece {
            text: text.to_owned(),
            hit: false,
        }];
    }
    let mut marks = vec![false; text.len()];
    for w in words {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(w.as_str()) {
            let at = from + pos;
            marks[at..at + w.len()].iter_mut().for_each(|m| *m = true);
            from = at + w.len();
        }
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut start = 0;
    for i in 1..=text.len() {
        if i == text.len() || (marks[i] != marks[start] && text.is_char_boundary(i)) {
            pieces.push(Piece {
                text: text[start..i].to_owned(),
                hit: marks[start],
            });
            start = i;
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_are_marked_case_insensitively() {
        let p = highlight("CUDA out of memory; cuda again", &["cuda".to_owned()]);
        let marked: Vec<(&str, bool)> = p.iter().map(|x| (x.text.as_str(), x.hit)).collect();
        assert_eq!(
            marked,
            vec![
                ("CUDA", true),
                (" out of memory; ", false),
                ("cuda", true),
                (" again", false)
            ]
        );
        assert_eq!(highlight("", &["x".to_owned()]).len(), 0);
    }
}
