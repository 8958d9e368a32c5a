//! Triage of groups (issue 18 items 4 and 5), the workflow people expect from Sentry or
//! GlitchTip: a state (open, resolved "in" a commit or version, ignored, regressed), an
//! assignee, the history of who changed what, a filtered, sorted and paged group list, and the
//! tag breakdowns of a group's reports. The API and the portal's forms call the same functions,
//! so both refuse the same things with the same words. The regression rule itself is pure and
//! lives in [`regression`]; [`after_upload`] applies it inside the upload's transaction. The
//! portal's group pages and forms read and post through `portal`, one call each.

pub(crate) mod bulk;
mod change;
mod portal;
pub mod regression;
mod undo;
mod view;

pub use crate::storage::group_triage::Triage;
pub use bulk::{BulkOutcome, bulk_change};
pub use change::{KEEP_ASSIGNEE, MAX_IGNORE_REPORTS, change, form_patch, form_patch_until};
pub use portal::{
    BulkFields, BulkResult, Days, FixOutcome, GroupListView, GroupPageView, Listing, StateFields,
    TrendedGroup, TrendedPage, change_by_form, list_page, page, submit_bulk, submit_fix,
};
pub use undo::{ChangeNotice, notice, undo};
pub(crate) use view::detail_in;
pub use view::{Assignable, GroupView, TriageDetail, assignable, group};

use serde::Deserialize;
use sqlx::PgConnection;

use super::Error;
use crate::actor::Actor;
use crate::api_types::{ErrorCode, GroupAction, GroupState};
use crate::rules::Category;
use crate::storage::group_list::{self as list_store, GroupFilter, GroupSort, ListedGroup};
use crate::storage::group_triage::Watched;
use crate::storage::group_triage::{self as store, NewEvent};
use crate::storage::{Db, DbError};
use regression::{FirstSeen, FixedIn, IgnoreStep, Incoming, Resolution, Step, Verdict, Version};

/// The actor named in the history for changes the service makes itself (a regression found on
/// upload).
pub const SERVICE_ACTOR: &str = crate::actor::SERVICE_NAME;

/// A group list as asked (`GET /api/v1/groups`, the portal's filter form). Empty values leave
/// a filter out, so a form's "any" choice is an empty field.
#[derive(Clone, Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GroupListRequest {
    /// `unresolved` (open or regressed: the default), `open`, `resolved`, `ignored`,
    /// `regressed`, or `any`.
    #[param(schema_with = crate::api_types::filters::group_state)]
    pub state: Option<String>,
    /// Groups with a report of this project (any letter case).
    #[param(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub project: Option<String>,
    /// A category of the taxonomy.
    #[param(schema_with = crate::api_types::filters::group_category)]
    pub category: Option<String>,
    /// `true` or `false`.
    #[param(schema_with = crate::api_types::filters::has_fix)]
    pub has_fix: Option<String>,
    /// Assigned under this name (a person's or a token's).
    #[param(max_length = 200, pattern = r"^[^\u0000]*$")]
    pub assignee: Option<String>,
    /// Assigned to the person with this id.
    #[param(schema_with = crate::api_types::filters::person_id)]
    pub assignee_id: Option<String>,
    /// `assigned`: the groups assigned to the caller (the signed-in person, or the token by its
    /// name); `recorded`: the groups with a fix the caller recorded.
    #[param(schema_with = crate::api_types::filters::mine)]
    pub mine: Option<String>,
    /// `last_seen` (default), `count` or `first_seen`, newest or largest first.
    #[param(schema_with = crate::api_types::filters::group_sort)]
    pub sort: Option<String>,
    /// 1-based page (1-1000).
    #[param(minimum = 1, maximum = 1000)]
    pub page: Option<u32>,
    /// Groups per page (1-100, default 50).
    #[param(minimum = 1, maximum = 100)]
    pub per_page: Option<u32>,
}

/// One page of the group list.
#[derive(Clone, Debug)]
pub struct FilteredGroups {
    pub groups: Vec<ListedGroup>,
    pub page: u32,
    pub per_page: u32,
    /// Groups that pass the filters, on all pages.
    pub total: i64,
    /// Another page follows.
    pub more: bool,
}

/// The sort orders by name, as the API and the form spell them.
pub const SORTS: [(&str, GroupSort); 3] = [
    ("last_seen", GroupSort::LastSeen),
    ("count", GroupSort::Count),
    ("first_seen", GroupSort::FirstSeen),
];

/// A query parameter's value, trimmed; `None` when missing or empty ("any").
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// The "mine" filters of the group list, as links and forms spell them.
pub const MINE: [(&str, Mine); 2] = [("assigned", Mine::Assigned), ("recorded", Mine::Recorded)];

/// Which of the caller's own groups a list asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mine {
    /// Assigned to the caller.
    Assigned,
    /// With a fix the caller recorded.
    Recorded,
}

/// Narrows `filter` to the groups `mine` names for `me`: a person by their id, a token by its
/// name (assignees) or its id (fixes; older fixes by its name).
fn narrow_to(filter: &mut GroupFilter, mine: Mine, me: &Actor) -> Result<(), Error> {
    match (mine, me) {
        (Mine::Assigned, Actor::Person { id, .. }) => filter.assignee_person = Some(*id),
        (Mine::Assigned, Actor::Token { name, .. }) => filter.assignee_token = Some(name.clone()),
        (Mine::Recorded, Actor::Person { id, .. }) => filter.fixed_by_person = Some(*id),
        (Mine::Recorded, Actor::Token { id, name }) => {
            filter.fixed_by_token = Some((*id, name.clone()));
        }
        (_, Actor::Service(_)) => {
            return Err(Error::Malformed(
                ErrorCode::BadQuery,
                "mine needs a signed-in person or a token".into(),
            ));
        }
    }
    Ok(())
}

/// The state filter's word for the groups someone should look at, open or regressed: what the
/// list shows when no state is asked for.
pub const UNRESOLVED: &str = "unresolved";
/// The state filter's word for every state.
pub const ANY_STATE: &str = "any";

/// The states a list's `state` filter asks for (empty: any): none given is [`UNRESOLVED`].
fn state_filter(given: Option<&str>) -> Result<Vec<GroupState>, String> {
    match given {
        None | Some(UNRESOLVED) => Ok(vec![GroupState::Open, GroupState::Regressed]),
        Some(ANY_STATE) => Ok(Vec::new()),
        Some(s) => GroupState::parse(s).map(|s| vec![s]).ok_or_else(|| {
            format!(
                "unknown state {:?}: expected unresolved (the default: open or regressed), \
                 open, resolved, ignored, regressed or any",
                s.chars().take(40).collect::<String>()
            )
        }),
    }
}

/// A person's id as a query string spells it: a positive integer of at most 18 digits, without
/// a sign or leading zeros (exactly what the OpenAPI document's pattern allows).
fn person_id(text: &str) -> Option<i64> {
    let digits = text.len() <= 18
        && !text.starts_with('0')
        && !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// A validated list request: filters, order, page and page size.
fn list_query(
    r: &GroupListRequest,
    me: &Actor,
) -> Result<(GroupFilter, GroupSort, u32, u32), Error> {
    let bad = |m: String| Error::Malformed(ErrorCode::BadQuery, m);
    let states = state_filter(given(&r.state)).map_err(bad)?;
    let category = match given(&r.category) {
        Some(c) => Some(c.parse::<Category>().map_err(bad)?),
        None => None,
    };
    let has_fix = match given(&r.has_fix) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => return Err(bad(format!("has_fix must be true or false, got {other:?}"))),
        None => None,
    };
    let sort = match given(&r.sort) {
        Some(s) => SORTS
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                bad(format!(
                    "unknown sort {s:?}: expected last_seen, count or first_seen"
                ))
            })?,
        None => GroupSort::default(),
    };
    let project = given(&r.project).map(str::to_owned);
    if let Some(p) = &project {
        super::project::check_name(p).map_err(bad)?;
    }
    let assignee = given(&r.assignee).map(str::to_owned);
    if assignee
        .as_ref()
        .is_some_and(|s| s.chars().count() > 200 || s.contains('\0'))
    {
        return Err(bad(
            "assignee must be at most 200 characters without NUL".into()
        ));
    }
    let assignee_person = match given(&r.assignee_id) {
        Some(id) => Some(person_id(id).ok_or_else(|| {
            bad(format!(
                "assignee_id must be a person's id (a positive integer), got {:?}",
                id.chars().take(40).collect::<String>()
            ))
        })?),
        None => None,
    };
    let mine = match given(&r.mine) {
        Some(m) => Some(
            MINE.iter()
                .find(|(name, _)| *name == m)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    bad(format!(
                        "unknown mine {:?}: expected assigned or recorded",
                        m.chars().take(40).collect::<String>()
                    ))
                })?,
        ),
        None => None,
    };
    let page = r.page.unwrap_or(1);
    let per_page = r.per_page.unwrap_or(50);
    if !(1..=1000).contains(&page) || !(1..=100).contains(&per_page) {
        return Err(bad("page must be 1-1000 and per_page 1-100".into()));
    }
    let mut filter = GroupFilter {
        states,
        project,
        category,
        has_fix,
        assignee,
        assignee_person,
        ..GroupFilter::default()
    };
    if let Some(mine) = mine {
        narrow_to(&mut filter, mine, me)?;
    }
    Ok((filter, sort, page, per_page))
}

/// The groups that pass the request's filters (the unresolved ones unless a state is asked
/// for), one page in its order with what tells each apart from look-alikes, for `me` (whose
/// groups `mine` asks for); 400 `bad_query` for an unknown filter value, sort or a page out of
/// bounds. The page, its facets and the total are read in one snapshot, so they agree.
#[tracing::instrument(name = "group_triage::list", skip_all, fields(actor = me.name(), state = ?request.state, project = ?request.project))]
pub async fn list(
    db: &Db,
    request: &GroupListRequest,
    me: &Actor,
) -> Result<FilteredGroups, Error> {
    let (filter, sort, page, per_page) = list_query(request, me)?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    store::read_only_snapshot(&mut tx).await?;
    let total = list_store::count_groups(&mut *tx, &filter).await?;
    let offset = i64::from(page - 1) * i64::from(per_page);
    let mut groups =
        list_store::list_groups(&mut *tx, &filter, sort, i64::from(per_page) + 1, offset).await?;
    let more = groups.len() > per_page as usize;
    groups.truncate(per_page as usize);
    let ids: Vec<i64> = groups.iter().map(|l| l.group.id).collect();
    let mut facets = crate::storage::group_facets::facets(&mut *tx, &ids).await?;
    tx.rollback().await.map_err(DbError::from)?;
    for listed in &mut groups {
        listed.facets = facets.remove(&listed.group.id).unwrap_or_default();
    }
    Ok(FilteredGroups {
        groups,
        page,
        per_page,
        total,
        more,
    })
}

/// The rules on upload (docs/src/triage.md), in the upload's transaction: a new report in a
/// resolved group from a build that should contain the fix makes the group regressed; one from
/// an older build is recorded in its history and leaves it resolved; a group ignored until more
/// reports counts this one, and the last of them reopens it (as open). Open, regressed and
/// other ignored groups are left as they are. Says what changed, for the upload's events.
#[tracing::instrument(name = "group_triage::after_upload", skip_all, fields(report_id = report_id, group_id = group_id))]
pub(crate) async fn after_upload(
    tx: &mut PgConnection,
    report_id: i64,
    group_id: i64,
) -> Result<AfterUpload, Error> {
    // Only a group that can change here is locked (uploads of an open group do not queue
    // behind each other). A change that is resolving the group but has not committed is not
    // waited for: this upload then comes before it, as if it had committed first, and the
    // history stays a chain either way.
    let resolved = match store::lock_if_watched(tx, group_id).await? {
        None => return Ok(AfterUpload::default()),
        Some(Watched::Resolved(resolved)) => resolved,
        Some(Watched::IgnoredFor(left)) => {
            let reopened = after_ignored_upload(tx, report_id, group_id, left).await?;
            return Ok(AfterUpload {
                regressed: false,
                reopened,
            });
        }
    };
    let Some(build) = store::report_build(&mut *tx, report_id).await? else {
        return Ok(AfterUpload::default());
    };
    // A stored `resolved_in` was checked when it was set; one this build cannot read names
    // nothing it can compare.
    let resolution = Resolution {
        fixed_in: FixedIn::parse(&resolved.resolved_in).unwrap_or(FixedIn::Unnamed),
        resolved_at: resolved.resolved_at_us,
    };
    let incoming = Incoming {
        version: Version::parse(&build.version),
        commit: regression::commit_of(&build.commit),
        created_at: build.created_at_us,
    };
    let verdict = match regression::first_step(&resolution, &incoming) {
        Step::Decided(verdict) => verdict,
        Step::CommitOrder { fix, report } => {
            let seen = FirstSeen {
                fix: store::commit_first_seen(&mut *tx, &build.project, &fix, report_id).await?,
                report: store::commit_first_seen(&mut *tx, &build.project, &report, report_id)
                    .await?,
            };
            regression::by_commit_order(&fix, &report, seen, &resolution, &incoming)
        }
    };
    let at = store::change_moment(&mut *tx, group_id).await?;
    let (action, to, detail) = match &verdict {
        Verdict::Regressed(why) => {
            store::set_state(&mut *tx, group_id, GroupState::Regressed, at).await?;
            (GroupAction::State, GroupState::Regressed.as_str(), why)
        }
        Verdict::OlderBuild(why) => (GroupAction::OlderBuild, "", why),
    };
    let from = if action == GroupAction::State {
        GroupState::Resolved.as_str()
    } else {
        ""
    };
    store::insert_event(
        &mut *tx,
        &NewEvent {
            group_id,
            at,
            actor: &Actor::SERVICE,
            action,
            from,
            to,
            detail,
            report_id: Some(report_id),
        },
    )
    .await?;
    Ok(AfterUpload {
        regressed: matches!(verdict, Verdict::Regressed(_)),
        reopened: false,
    })
}

/// What the triage rules did with an upload's group ([`after_upload`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AfterUpload {
    /// The resolved group became regressed.
    pub regressed: bool,
    /// The upload was the last report an ignore waited for: the group reopened by itself.
    pub reopened: bool,
}

/// A report in a group ignored until `left` more reports (its row locked): one fewer to come,
/// or with the last of them the group reopens, recorded in its history as the service's change.
/// Returns whether it reopened.
async fn after_ignored_upload(
    tx: &mut PgConnection,
    report_id: i64,
    group_id: i64,
    left: i32,
) -> Result<bool, Error> {
    match regression::after_ignore(left) {
        IgnoreStep::Wait(left) => {
            store::set_ignore_left(&mut *tx, group_id, left).await?;
            Ok(false)
        }
        IgnoreStep::Reopen(why) => {
            let at = store::change_moment(&mut *tx, group_id).await?;
            store::reopen_ignored(&mut *tx, group_id, at).await?;
            store::insert_event(
                &mut *tx,
                &NewEvent {
                    group_id,
                    at,
                    actor: &Actor::SERVICE,
                    action: GroupAction::State,
                    from: GroupState::Ignored.as_str(),
                    to: GroupState::Open.as_str(),
                    detail: &why,
                    report_id: Some(report_id),
                },
            )
            .await?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mine_asks_for_a_person_by_id_and_a_token_by_its_name_or_id() {
        let ana = Actor::Person {
            id: 7,
            name: "Ana".into(),
        };
        let ci = Actor::Token {
            id: 3,
            name: "ci".into(),
        };
        let ask = |mine: &str, me: &Actor| {
            let r = GroupListRequest {
                mine: Some(mine.into()),
                ..GroupListRequest::default()
            };
            list_query(&r, me).map(|(f, ..)| f)
        };
        let f = ask("assigned", &ana).expect("valid");
        assert_eq!((f.assignee_person, f.assignee_token), (Some(7), None));
        let f = ask(" assigned ", &ci).expect("valid");
        assert_eq!(
            (f.assignee_person, f.assignee_token.as_deref()),
            (None, Some("ci"))
        );
        let f = ask("recorded", &ana).expect("valid");
        assert_eq!((f.fixed_by_person, f.fixed_by_token), (Some(7), None));
        let f = ask("recorded", &ci).expect("valid");
        assert_eq!(f.fixed_by_token, Some((3, "ci".to_owned())));
        assert_eq!(
            ask("", &ci).expect("any"),
            GroupFilter {
                states: vec![GroupState::Open, GroupState::Regressed],
                ..GroupFilter::default()
            }
        );
        for refused in [ask("theirs", &ci), ask("assigned", &Actor::SERVICE)] {
            assert!(
                matches!(refused, Err(Error::Malformed(ErrorCode::BadQuery, _))),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn an_assignee_id_filter_is_a_positive_integer_as_the_document_spells_it() {
        let me = Actor::SERVICE;
        for (given, want) in [
            ("12", Some(Some(12))),
            (" 12 ", Some(Some(12))),
            ("", Some(None)),
        ] {
            let r = GroupListRequest {
                assignee_id: Some(given.into()),
                ..GroupListRequest::default()
            };
            let got = list_query(&r, &me).ok().map(|(f, ..)| f.assignee_person);
            assert_eq!(got, want, "{given:?}");
        }
        for bad in ["0", "012", "+12", "-1", "x", "1234567890123456789"] {
            let r = GroupListRequest {
                assignee_id: Some(bad.into()),
                ..GroupListRequest::default()
            };
            assert!(list_query(&r, &me).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_list_shows_unresolved_groups_unless_another_state_or_any_is_asked_for() {
        use GroupState::{Ignored, Open, Regressed};
        let cases: [(Option<&str>, Option<Vec<GroupState>>); 7] = [
            (None, Some(vec![Open, Regressed])),
            (Some(""), Some(vec![Open, Regressed])),
            (Some(" unresolved "), Some(vec![Open, Regressed])),
            (Some("any"), Some(vec![])),
            (Some("ignored"), Some(vec![Ignored])),
            (Some("all"), None),
            (Some("Open"), None),
        ];
        for (state, want) in cases {
            let r = GroupListRequest {
                state: state.map(str::to_owned),
                ..GroupListRequest::default()
            };
            let got = list_query(&r, &Actor::SERVICE).ok().map(|(f, ..)| f.states);
            assert_eq!(got, want, "{state:?}");
        }
    }

    #[test]
    fn list_requests_are_checked_and_empty_filters_left_out() {
        let ok = GroupListRequest {
            state: Some("regressed".into()),
            project: Some(" Vision ".into()),
            category: Some("".into()),
            has_fix: Some("false".into()),
            sort: Some("count".into()),
            ..GroupListRequest::default()
        };
        let me = Actor::Token {
            id: 1,
            name: "ci".into(),
        };
        let (filter, sort, page, per_page) = list_query(&ok, &me).expect("valid");
        assert_eq!(filter.states, [GroupState::Regressed]);
        assert_eq!(filter.project.as_deref(), Some("Vision"));
        assert_eq!((filter.category, filter.has_fix), (None, Some(false)));
        assert_eq!((sort, page, per_page), (GroupSort::Count, 1, 50));
        let bad = [
            GroupListRequest {
                state: Some("closed".into()),
                ..GroupListRequest::default()
            },
            GroupListRequest {
                category: Some("oom".into()),
                ..GroupListRequest::default()
            },
            GroupListRequest {
                has_fix: Some("yes".into()),
                ..GroupListRequest::default()
            },
            GroupListRequest {
                sort: Some("title".into()),
                ..GroupListRequest::default()
            },
            GroupListRequest {
                page: Some(0),
                ..GroupListRequest::default()
            },
            GroupListRequest {
                per_page: Some(101),
                ..GroupListRequest::default()
            },
        ];
        for r in bad {
            assert!(
                matches!(
                    list_query(&r, &me),
                    Err(Error::Malformed(ErrorCode::BadQuery, _))
                ),
                "{r:?}"
            );
        }
    }
}
