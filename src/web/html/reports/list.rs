//! `GET /reports`: every report, newest first, filtered by category and project, a page at a
//! time.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;

use super::super::Layout;
use crate::app::reports;
use crate::rules::Category;
use crate::web::error::PageError;
use crate::web::extract::QueryParams;
use crate::web::scope::{Read, ScopedUser};
use crate::web::state::AppState;

/// `GET /reports`
#[derive(Template, WebTemplate)]
#[template(path = "reports.html")]
pub struct ReportListPage {
    layout: Layout,
    list: reports::ReportList,
    categories: &'static [Category],
    /// The filters as a query string, for the page links.
    query: String,
}

/// `GET /reports?category=&project=&page=&per_page=`: every report, newest first.
pub async fn list_reports(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(params): QueryParams<reports::ReportListRequest>,
) -> Result<ReportListPage, PageError> {
    let list = reports::list(&state.db, &params).await?;
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(c) = list.category {
        pairs.push(("category", c.as_str().to_owned()));
    }
    if !list.project.is_empty() {
        pairs.push(("project", list.project.clone()));
    }
    if params.per_page.is_some() {
        pairs.push(("per_page", list.per_page.to_string()));
    }
    Ok(ReportListPage {
        layout: Layout::for_user(Some(&user)),
        query: serde_urlencoded::to_string(&pairs).unwrap_or_default(),
        categories: &Category::ALL,
        list,
    })
}
