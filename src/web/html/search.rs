//! The portal's search page: the form, the result count, "did you mean" (or "showing results
//! for" when the corrected words were searched instead), one row per group (its title, state,
//! culprit and report count, then its best match with the matches marked), and links to the
//! previous and next pages. Everything shown is typed or escaped text: matches are
//! segments the template wraps in `<mark>`.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::Layout;
use crate::app::search::{Hit, HitKind, Tier, Total};
use crate::app::{self, search};
use crate::web::error::PageError;
use crate::web::extract::QueryParams;
use crate::web::scope::{Read, ScopedUser};
use crate::web::state::AppState;

/// A row as the page shows it: the group, then its best hit.
pub struct HitView {
    pub hit: Hit,
    pub url: String,
    /// Where it matched, in words.
    pub matched: &'static str,
    /// The group's culprit frame, if its signature names one.
    pub culprit: Option<String>,
    /// "1 report", "12 reports".
    pub reports: String,
    /// The hit is the group itself (its title and link are the row's already).
    pub is_group: bool,
}

/// `GET /search`
#[derive(Template, WebTemplate)]
#[template(path = "search.html")]
pub struct SearchPage {
    layout: Layout,
    q: String,
    category: String,
    project: String,
    categories: &'static [crate::rules::Category],
    searched: bool,
    error: Option<String>,
    /// "3 results", "1,000+ results", "No results".
    count: String,
    /// There are results, but none on this page.
    past_end: bool,
    hits: Vec<HitView>,
    /// The words searched instead of the words asked (which found nothing).
    corrected: Option<Link>,
    /// The words asked.
    asked: String,
    /// A correction of `q` to offer.
    suggestion: Option<Link>,
    prev: Option<String>,
    next: Option<String>,
}

/// Words and the search page for them.
pub struct Link {
    pub text: String,
    pub url: String,
}

/// Query parameters of the search page (all optional: an empty form is just the page).
#[derive(Debug, Deserialize)]
pub struct PageSearch {
    q: Option<String>,
    category: Option<String>,
    project: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
}

/// A search page's address.
#[derive(Serialize)]
struct Address<'a> {
    q: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    category: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    project: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_page: Option<u32>,
}

impl Address<'_> {
    fn url(&self) -> String {
        // Only strings and numbers: encoding cannot fail.
        format!(
            "/search?{}",
            serde_urlencoded::to_string(self).unwrap_or_default()
        )
    }
}

/// `GET /search?q=...&category=...&project=...&page=...&per_page=...`
pub async fn search(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(p): QueryParams<PageSearch>,
) -> Result<Response, PageError> {
    let mut page = SearchPage::form(Layout::for_user(Some(&user)), &p);
    if page.q.trim().is_empty() {
        return Ok(page.into_response());
    }
    let request = search::SearchRequest {
        q: page.q.clone(),
        category: p.category,
        project: p.project,
        page: p.page,
        per_page: p.per_page,
    };
    match search::search(&state.db, &request).await {
        Ok(found) => {
            page.show(found, p.per_page);
            Ok(page.into_response())
        }
        Err(e @ app::Error::Malformed(..)) => {
            // The form again with the reason, as a 400 like the API's `bad_query`.
            page.error = Some(e.to_string());
            Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

impl SearchPage {
    /// The form as `p` fills it, without results.
    fn form(layout: Layout, p: &PageSearch) -> SearchPage {
        SearchPage {
            layout,
            q: p.q.clone().unwrap_or_default(),
            category: p.category.clone().unwrap_or_default(),
            project: p.project.clone().unwrap_or_default(),
            categories: &crate::rules::Category::ALL,
            searched: false,
            error: None,
            count: String::new(),
            past_end: false,
            hits: Vec::new(),
            corrected: None,
            asked: String::new(),
            suggestion: None,
            prev: None,
            next: None,
        }
    }

    /// Shows the results of `found`, its links keeping the filters (in the spelling the
    /// results used) and `per_page`.
    fn show(&mut self, found: search::HitPage, per_page: Option<u32>) {
        self.category = found
            .category
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default();
        self.project = found.project.clone().unwrap_or_default();
        let at = |q: &str, page_no: Option<u32>| {
            Address {
                q,
                category: &self.category,
                project: &self.project,
                page: page_no,
                per_page,
            }
            .url()
        };
        let link = |text: &String| Link {
            text: text.clone(),
            url: at(text, None),
        };
        self.corrected = found.corrected.as_ref().map(link);
        self.suggestion = found.suggestion.as_ref().map(link);
        let shown = found.corrected.as_deref().unwrap_or(&found.text);
        self.prev = found.prev_page.map(|n| at(shown, Some(n)));
        self.next = found.next_page.map(|n| at(shown, Some(n)));
        self.count = count_text(found.total);
        self.past_end = found.hits.is_empty() && found.total != Total::Exact(0);
        self.asked.clone_from(&found.text);
        if let Some(c) = &found.corrected {
            self.q.clone_from(c);
        }
        self.hits = (found.hits.into_iter()).map(HitView::of).collect();
        self.searched = true;
    }
}

impl HitView {
    fn of(hit: Hit) -> HitView {
        let n = hit.group.report_count;
        HitView {
            url: hit_url(&hit),
            culprit: hit.group.culprit().map(str::to_owned),
            reports: format!("{n} report{}", if n == 1 { "" } else { "s" }),
            is_group: hit.kind == HitKind::Group,
            matched: match hit.tier {
                Tier::RootCause => "in the root cause",
                Tier::Fix => "in a fix",
                Tier::Symptom => "in a symptom",
                Tier::Log => "in the log",
            },
            hit,
        }
    }
}

/// Where a hit leads: a report's page opens on what matched (the root cause is where its page
/// opens anyway; a symptom, the findings-only view; a log line, the find view of the first
/// marked words, each line linking into its page); a group or fix, the group.
fn hit_url(hit: &Hit) -> String {
    match hit.kind {
        HitKind::Group | HitKind::Fix => format!("/groups/{}", hit.group_id),
        HitKind::Report => match hit.tier {
            Tier::Symptom => format!("/reports/{}?view=findings#log", hit.id),
            Tier::Log => match hit
                .snippet
                .iter()
                .find(|s| s.marked && !s.text.trim().is_empty())
            {
                Some(m) => format!(
                    "/reports/{}?{}#log",
                    hit.id,
                    serde_urlencoded::to_string([("grep", m.text.trim())]).unwrap_or_default()
                ),
                None => format!("/reports/{}", hit.id),
            },
            Tier::RootCause | Tier::Fix => format!("/reports/{}", hit.id),
        },
    }
}

/// "No results", "1 result", "1,234 results", "1,000+ results" (a result is a group).
fn count_text(total: Total) -> String {
    let (n, plus) = match total {
        Total::Exact(n) => (n, ""),
        Total::AtLeast(n) => (n, "+"),
    };
    if n == 0 {
        return "No results".to_owned();
    }
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(d);
    }
    let noun = if n == 1 && plus.is_empty() {
        "result"
    } else {
        "results"
    };
    format!("{grouped}{plus} {noun}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_as_people_write_them() {
        assert_eq!(count_text(Total::Exact(0)), "No results");
        assert_eq!(count_text(Total::Exact(1)), "1 result");
        assert_eq!(count_text(Total::Exact(1234)), "1,234 results");
        assert_eq!(count_text(Total::AtLeast(1000)), "1,000+ results");
    }

    #[test]
    fn addresses_encode_every_value() {
        let a = Address {
            q: "a&b c",
            category: "",
            project: "x/y",
            page: Some(2),
            per_page: None,
        };
        assert_eq!(a.url(), "/search?q=a%26b+c&project=x%2Fy&page=2");
    }
}
