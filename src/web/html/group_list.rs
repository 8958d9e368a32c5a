//! The group list (`GET /groups`, issue 18 item 5 and issue 39 item 4): triage like an issue
//! tracker. It shows the unresolved groups (open or regressed) unless the filter, which lives
//! in the URL, asks for another state or any; each row says what tells it apart from
//! look-alikes (the program's own frame it fails in, the projects, framework, environments and
//! ranks of its reports) with its root-cause line whole; one-click forms change a row.
//! Values stay typed up to these view structs; the template only loops and branches.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::Layout;
use super::group_triage::{Choice, choices};
use super::trend::{self, ChartSize};
use crate::api_types::GroupState;
use crate::app::group_triage::{
    self, ANY_STATE, Assignable, ChangeNotice, GroupListRequest, Listing, MAX_IGNORE_REPORTS,
    TrendedGroup, TrendedPage, Triage,
};
use crate::app::triage::{Group, TREND_DAYS};
use crate::auth::Scope;
use crate::storage::group_facets::Facets;
use crate::web::error::PageError;
use crate::web::extract::QueryParams;
use crate::web::scope::{Read, ScopedUser};
use crate::web::state::AppState;

/// The longest root-cause line a row shows whole; a longer one ends in an ellipsis (the whole
/// line on hover and on the group page).
const ROOT_LINE_SHOWN: usize = 300;

/// `text` cut to [`ROOT_LINE_SHOWN`] characters, with an ellipsis when cut.
fn shown(text: &str) -> String {
    match text.char_indices().nth(ROOT_LINE_SHOWN) {
        Some((at, _)) => format!("{}\u{2026}", &text[..at]),
        None => text.to_owned(),
    }
}

/// Up to `values` and, when more exist, how many more (`a, b +3`).
fn some_of(values: &[String], total: i64) -> String {
    let more = total - values.len() as i64;
    let mut out = values.join(", ");
    if more > 0 {
        out.push_str(&format!(" +{more}"));
    }
    out
}

/// Hosts and ranks as a row names them: `hosts node-7, node-3 · ranks 0, 3` (`+N` more).
fn ranks_of(facets: &Facets) -> String {
    let named = |values: &[String], total: i64, one: &str, many: &str| {
        if values.is_empty() {
            return None;
        }
        let word = if total == 1 { one } else { many };
        Some(format!("{word} {}", some_of(values, total)))
    };
    let ranks: Vec<String> = facets.ranks.iter().map(u32::to_string).collect();
    let parts: Vec<String> = [
        named(&facets.hosts, facets.hosts_total, "host", "hosts"),
        named(&ranks, facets.ranks_total, "rank", "ranks"),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.join(" · ")
}

/// A group in the list.
pub struct GroupRow {
    pub group: Group,
    pub triage: Triage,
    pub has_fix: bool,
    /// The program's own innermost frame (`train.py:forward`), if the signature names one.
    pub culprit: Option<String>,
    /// The root-cause line as the row shows it (whole up to 300 characters), or empty.
    pub root_line: String,
    /// Where its reports come from: projects, frameworks, environments, hosts and ranks (each
    /// empty when its reports name none).
    pub projects: String,
    pub frameworks: String,
    pub environments: String,
    pub ranks: String,
    /// Resolve and ignore buttons are offered (the user may triage and the group is not in
    /// that state already); reopen for a resolved or ignored group.
    pub can_resolve: bool,
    pub can_ignore: bool,
    pub can_reopen: bool,
    /// Inline SVG built from numbers only (see `trend`), safe to embed.
    pub trend: String,
}

impl GroupRow {
    fn of(l: crate::storage::group_list::ListedGroup, trend: String, can_triage: bool) -> Self {
        let state = l.triage.state;
        let f = &l.facets;
        GroupRow {
            culprit: l.group.culprit().map(str::to_owned),
            root_line: shown(&l.group.root_cause_text),
            projects: some_of(&f.projects, f.projects_total),
            frameworks: f.frameworks.join(", "),
            environments: some_of(&f.environments, f.environments_total),
            ranks: ranks_of(f),
            can_resolve: can_triage && state != GroupState::Resolved,
            can_ignore: can_triage && state != GroupState::Ignored,
            can_reopen: can_triage && matches!(state, GroupState::Resolved | GroupState::Ignored),
            trend,
            group: l.group,
            triage: l.triage,
            has_fix: l.has_fix,
        }
    }
}

/// The state filter's choices: unresolved (the default, an empty field), each state, any.
fn state_filter(current: &str) -> Vec<Choice> {
    let current = if current == group_triage::UNRESOLVED {
        ""
    } else {
        current
    };
    let mut options: Vec<(&str, &str)> = GroupState::ALL.map(|s| (s.as_str(), s.as_str())).to_vec();
    options.push((ANY_STATE, "any state"));
    choices(current, "unresolved (open or regressed)", options)
}

/// The filters as the form shows them and the page links repeat them (empty: the default).
#[derive(Clone, Debug, Default, Serialize)]
struct Filters {
    #[serde(skip_serializing_if = "String::is_empty")]
    state: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    project: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    category: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    has_fix: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    assignee: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    assignee_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    mine: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    sort: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_page: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    page: Option<u32>,
}

impl Filters {
    fn of(r: &GroupListRequest) -> Filters {
        let text = |v: &Option<String>| v.as_deref().unwrap_or_default().trim().to_owned();
        Filters {
            state: text(&r.state),
            project: text(&r.project),
            category: text(&r.category),
            has_fix: text(&r.has_fix),
            assignee: text(&r.assignee),
            assignee_id: text(&r.assignee_id),
            mine: text(&r.mine),
            sort: text(&r.sort),
            per_page: r.per_page,
            page: None,
        }
    }

    /// `/groups?...&page=N` with these filters.
    fn page_link(&self, page: u32) -> String {
        let with_page = Filters {
            page: Some(page),
            ..self.clone()
        };
        // Plain strings and numbers always encode.
        let query = serde_urlencoded::to_string(&with_page).unwrap_or_default();
        format!("/groups?{query}")
    }
}

/// `GET /groups`
#[derive(Template, WebTemplate)]
#[template(path = "groups.html")]
pub struct GroupsPage {
    layout: Layout,
    rows: Vec<GroupRow>,
    project: String,
    states: Vec<Choice>,
    categories: Vec<Choice>,
    has_fix: Vec<Choice>,
    /// The assignee filter: people by id where people sign in, else token names.
    assignees: Vec<Choice>,
    /// The assignee filter's field: `assignee_id` (people) or `assignee` (token names).
    assignee_field: &'static str,
    mine: Vec<Choice>,
    sorts: Vec<Choice>,
    /// Groups that pass the filters, on all pages.
    total: i64,
    page: u32,
    pages: i64,
    /// This page's own address, where the one-click forms come back to.
    here: String,
    prev: Option<String>,
    next: Option<String>,
    error: Option<String>,
    /// The notice of the change the list was reached from.
    notice: Option<NoticeView>,
    /// The bulk form is shown (the user may triage).
    can_triage: bool,
    /// The bulk form's assignee picker: people by id where people sign in, else token names.
    bulk_assignees: Vec<Choice>,
    bulk_assignee_field: &'static str,
    /// The most reports an ignore may wait for.
    max_ignore: i64,
}

/// The assignee filter's field and choices: people by id where people sign in, else token
/// names (as before people).
fn assignee_filter(filters: &Filters, assignable: &Assignable) -> (&'static str, Vec<Choice>) {
    const ANY: &str = "anyone or nobody";
    match assignable {
        Assignable::People(people) => {
            let ids: Vec<(String, &str)> = (people.iter())
                .map(|p| (p.id.to_string(), p.name.as_str()))
                .collect();
            let options = ids.iter().map(|(id, name)| (id.as_str(), *name));
            ("assignee_id", choices(&filters.assignee_id, ANY, options))
        }
        Assignable::Tokens(names) => {
            let options = names.iter().map(|n| (n.as_str(), n.as_str()));
            ("assignee", choices(&filters.assignee, ANY, options))
        }
    }
}

/// The list's query: the filters of `GET /api/v1/groups`, and the change the list was reached
/// from (`change=N`: its notice and undo button; never repeated in the page's links).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    project: Option<String>,
    category: Option<String>,
    has_fix: Option<String>,
    assignee: Option<String>,
    assignee_id: Option<String>,
    mine: Option<String>,
    sort: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
    change: Option<String>,
}

impl ListQuery {
    /// The list request, and the change named (anything but an id names none: it is a hint).
    fn split(self) -> (GroupListRequest, Option<i64>) {
        let change = self.change.and_then(|c| crate::ids::parse(c.trim()));
        let request = GroupListRequest {
            state: self.state,
            project: self.project,
            category: self.category,
            has_fix: self.has_fix,
            assignee: self.assignee,
            assignee_id: self.assignee_id,
            mine: self.mine,
            sort: self.sort,
            page: self.page,
            per_page: self.per_page,
        };
        (request, change)
    }
}

/// The notice of the change the list was reached from.
pub struct NoticeView {
    pub id: i64,
    /// "alice resolved 3 groups".
    pub text: String,
    /// Who undid it, once undone.
    pub undone_by: Option<String>,
    /// The undo button is offered (the user may triage and it was not undone).
    pub can_undo: bool,
}

impl NoticeView {
    fn of(n: ChangeNotice, can_triage: bool) -> NoticeView {
        let groups = if n.groups == 1 { "group" } else { "groups" };
        NoticeView {
            id: n.id,
            text: format!("{} {} {} {groups}", n.actor, n.summary, n.groups),
            can_undo: can_triage && n.undone_by.is_none(),
            undone_by: n.undone_by,
        }
    }
}

/// The bulk form's assignee picker: "nobody", then people by id (or token names).
fn bulk_assignee(assignable: &Assignable) -> (&'static str, Vec<Choice>) {
    match assignable {
        Assignable::People(people) => {
            let ids: Vec<(String, &str)> = (people.iter())
                .map(|p| (p.id.to_string(), p.name.as_str()))
                .collect();
            let options = ids.iter().map(|(id, name)| (id.as_str(), *name));
            ("assignee_id", choices("", "nobody", options))
        }
        Assignable::Tokens(names) => {
            let options = names.iter().map(|n| (n.as_str(), n.as_str()));
            ("assignee", choices("", "nobody", options))
        }
    }
}

/// `GET /groups?state=&project=&category=&has_fix=&assignee=&assignee_id=&mine=&sort=&page=`
/// `&per_page=&change=`; `mine=assigned` and `mine=recorded` are the user's own groups
/// (assigned to them, or with a fix they recorded).
pub async fn list_groups(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Response, PageError> {
    let (request, change) = query.split();
    let view = group_triage::list_page(&state.db, &request, &user.actor(), change).await?;
    let can_triage = user.require(&[Scope::Ingest, Scope::Admin]).is_ok();
    let filters = Filters::of(&request);
    let mut page = GroupsPage::form(Layout::for_user(Some(&user)), &filters, &view.assignable);
    page.notice = view.notice.map(|n| NoticeView::of(n, can_triage));
    page.can_triage = can_triage;
    match view.listing {
        // The form again with the reason, as a 400 like the API's `bad_query`.
        Listing::Refused(reason) => {
            page.error = Some(reason);
            Ok((StatusCode::BAD_REQUEST, page).into_response())
        }
        Listing::Found(found) => {
            page.show(&filters, found, can_triage);
            Ok(page.into_response())
        }
    }
}

impl GroupsPage {
    /// The filter form, as `filters` set it, without rows.
    fn form(layout: Layout, filters: &Filters, assignable: &Assignable) -> GroupsPage {
        let categories = crate::rules::Category::ALL.map(|c| (c.as_str(), c.as_str()));
        let (assignee_field, assignees) = assignee_filter(filters, assignable);
        let (bulk_assignee_field, bulk_assignees) = bulk_assignee(assignable);
        GroupsPage {
            notice: None,
            can_triage: false,
            bulk_assignees,
            bulk_assignee_field,
            max_ignore: MAX_IGNORE_REPORTS,
            layout,
            rows: Vec::new(),
            states: state_filter(&filters.state),
            categories: choices(&filters.category, "any category", categories),
            has_fix: choices(
                &filters.has_fix,
                "with or without a fix",
                [("true", "has a fix"), ("false", "no fix yet")],
            ),
            assignees,
            assignee_field,
            mine: choices(
                &filters.mine,
                "anyone's",
                [
                    ("assigned", "assigned to me"),
                    ("recorded", "with a fix I recorded"),
                ],
            ),
            sorts: choices(
                &filters.sort,
                "last seen",
                [("count", "report count"), ("first_seen", "first seen")],
            ),
            project: filters.project.clone(),
            total: 0,
            page: 1,
            pages: 1,
            here: filters.page_link(1),
            prev: None,
            next: None,
            error: None,
        }
    }

    /// Fills in the rows and the page links of `found`; the one-click forms are offered when
    /// the user `can_triage`.
    fn show(&mut self, filters: &Filters, found: TrendedPage, can_triage: bool) {
        let today = &found.today;
        self.rows = (found.rows.into_iter())
            .map(|TrendedGroup { listed, days }| {
                let trend = trend::chart_svg(&days, TREND_DAYS, today, ChartSize::Compact);
                GroupRow::of(listed, trend, can_triage)
            })
            .collect();
        self.total = found.total;
        self.page = found.page;
        self.here = filters.page_link(found.page);
        let per_page = i64::from(found.per_page);
        self.pages = ((found.total + per_page - 1) / per_page).max(1);
        self.prev = (found.page > 1).then(|| filters.page_link(found.page - 1));
        self.next = found.more.then(|| filters.page_link(found.page + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_links_keep_the_filters_and_encode_them() {
        let filters = Filters {
            state: "resolved".into(),
            project: "a&b c".into(),
            ..Filters::default()
        };
        assert_eq!(
            filters.page_link(2),
            "/groups?state=resolved&project=a%26b+c&page=2"
        );
        assert_eq!(Filters::default().page_link(1), "/groups?page=1");
    }

    #[test]
    fn a_long_root_cause_line_is_shown_to_300_characters() {
        assert_eq!(shown("short"), "short");
        let long = "é".repeat(301);
        let cut = shown(&long);
        assert_eq!(cut.chars().count(), 301);
        assert!(cut.ends_with('\u{2026}'));
        assert_eq!(shown(&"x".repeat(300)), "x".repeat(300));
    }

    #[test]
    fn facets_read_as_short_lists() {
        let f = Facets {
            ranks: vec![0, 3],
            ranks_total: 5,
            ..Facets::default()
        };
        assert_eq!(ranks_of(&f), "ranks 0, 3 +3");
        let one = Facets {
            ranks: vec![7],
            ranks_total: 1,
            ..Facets::default()
        };
        assert_eq!(ranks_of(&one), "rank 7");
        let hosts = Facets {
            hosts: vec!["node-7".into(), "node-3".into()],
            hosts_total: 2,
            ..one
        };
        assert_eq!(ranks_of(&hosts), "hosts node-7, node-3 · rank 7");
        assert_eq!(ranks_of(&Facets::default()), "");
        assert_eq!(some_of(&["a".into(), "b".into()], 2), "a, b");
    }

    #[test]
    fn the_state_filter_offers_unresolved_first_and_any_last() {
        let c = state_filter("");
        assert_eq!(c[0].value, "");
        assert!(c[0].selected && c[0].label.starts_with("unresolved"));
        assert_eq!(c.last().map(|c| c.value.as_str()), Some("any"));
        assert!(state_filter("unresolved")[0].selected);
        assert!(state_filter("any").last().is_some_and(|c| c.selected));
    }
}
