//! Triage of groups (issue 18 items 4 and 5), the workflow people expect from Sentry or
//! GlitchTip: a state (open, resolved "in" a commit or version, ignored, regressed), an
//! assignee, the history of who changed what, a filtered, sorted and paged group list, and the
//! tag breakdowns of a group's reports. The API and the portal's forms call the same functions,
//! so both refuse the same things with the same words. The regression rule itself is pure and
//! lives in [`regression`]; [`after_upload`] applies it inside the upload's transaction. The
//! portal's group pages and forms read and post through `portal`, one call each.

mod portal;
pub mod regression;
mod view;

pub use crate::storage::group_triage::Triage;
pub use portal::{
    Days, FixOutcome, GroupListView, GroupPageView, Listing, StateFields, TrendedGroup,
    TrendedPage, change_by_form, list_page, page, submit_fix,
};
pub(crate) use view::detail_in;
pub use view::{Assignable, GroupView, TriageDetail, assignable, group};

use serde::Deserialize;
use sqlx::PgConnection;

use super::Error;
use super::triage;
use crate::actor::Actor;
use crate::api_types::{ErrorCode, GroupAction, GroupPatch, GroupState};
use crate::rules::Category;
use crate::storage::group_merge::{self as merges, Lock, Standing};
use crate::storage::group_triage::{self as store, GroupFilter, GroupSort, ListedGroup, NewEvent};
use crate::storage::people;
use crate::storage::{Db, DbError, tokens};
use regression::{FirstSeen, FixedIn, Incoming, Resolution, Step, Verdict, Version};

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
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let total = store::count_groups(&mut *tx, &filter).await?;
    let offset = i64::from(page - 1) * i64::from(per_page);
    let mut groups =
        store::list_groups(&mut *tx, &filter, sort, i64::from(per_page) + 1, offset).await?;
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

/// The value of the people picker's choice that keeps an assignee who is no person (a token
/// name assigned before people signed in): posting the form unchanged leaves them assigned.
pub const KEEP_ASSIGNEE: &str = "keep";

/// The patch a portal form posts: the group page's form posts every field (the current values
/// when unchanged), its assignee as a token name (`assignee`) or, where people sign in, as a
/// person's id (`assignee_id`: empty for nobody, [`KEEP_ASSIGNEE`] to leave it); the list's
/// one-click resolve and ignore post no assignee (left as it is). The fix's commit or version
/// counts only with the resolved state (the field keeps its old value when another state is
/// picked). A person's id that is no number is refused like an unknown one.
pub fn form_patch(
    state: String,
    resolved_in: String,
    assignee: Option<String>,
    assignee_id: Option<String>,
) -> Result<GroupPatch, Error> {
    let resolving = state.trim() == GroupState::Resolved.as_str();
    let (assignee, assignee_id) = match assignee_id.as_deref().map(str::trim) {
        None | Some(KEEP_ASSIGNEE) => (assignee, None),
        Some("") => (Some(String::new()), None),
        Some(id) => (
            assignee,
            Some(crate::ids::parse(id).ok_or_else(|| {
                invalid(format!(
                    "assignee_id must be a person's id, got {:?}",
                    id.chars().take(40).collect::<String>()
                ))
            })?),
        ),
    };
    Ok(GroupPatch {
        state: Some(state),
        resolved_in: resolving.then_some(resolved_in),
        assignee,
        assignee_id,
    })
}

/// A change as validated, before it meets the group's current triage.
struct Change {
    state: Option<GroupState>,
    resolved_in: Option<String>,
    /// The new assignee's name (empty: nobody); for a person, their name is filled in from
    /// `assignee_person` once the person is found.
    assignee: Option<String>,
    assignee_person: Option<i64>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(ErrorCode::BadTriage, message.into())
}

/// Checks a patch on its own: at least one field, a known state, a well-formed `resolved_in`
/// and assignee.
fn validate(patch: GroupPatch) -> Result<Change, Error> {
    if patch == GroupPatch::default() {
        return Err(invalid(
            "nothing to change: give state, resolved_in or assignee",
        ));
    }
    let state = match patch.state.as_deref().map(str::trim) {
        Some(s) => Some(GroupState::parse(s).ok_or_else(|| {
            invalid(format!(
                "unknown state {:?}: expected open, resolved or ignored",
                s.chars().take(40).collect::<String>()
            ))
        })?),
        None => None,
    };
    let resolved_in = patch.resolved_in.map(|r| r.trim().to_owned());
    if let Some(r) = &resolved_in {
        // Named first: a NUL or an escape sequence is the reason, whatever the length.
        if let Some(at) = control_character(r) {
            return Err(invalid(format!(
                "resolved_in must not contain a control character ({at}): give a commit \
                 (7-40 hex digits) or a version such as 2.1"
            )));
        }
        if r.len() > regression::MAX_VERSION_LEN {
            return Err(invalid("resolved_in must be at most 100 characters"));
        }
        FixedIn::parse(r).map_err(invalid)?;
    }
    let assignee = patch.assignee.map(|a| a.trim().to_owned());
    if let Some(at) = assignee.as_deref().and_then(control_character) {
        return Err(invalid(format!(
            "assignee must not contain a control character ({at}): give a token name"
        )));
    }
    if assignee.as_ref().is_some_and(|a| a.len() > 200) {
        return Err(invalid(
            "assignee must be a token name (at most 200 characters)",
        ));
    }
    if assignee.is_some() && patch.assignee_id.is_some() {
        return Err(invalid(
            "give assignee (a token name, or \"\" for nobody) or assignee_id (a person's id), \
             not both",
        ));
    }
    if let Some(id) = patch.assignee_id.filter(|id| *id < 1) {
        return Err(unknown_person(id));
    }
    Ok(Change {
        state,
        resolved_in,
        // Named once the person is found.
        assignee: patch.assignee_id.map_or(assignee, |_| Some(String::new())),
        assignee_person: patch.assignee_id,
    })
}

/// The refusal of an assignee id that names no enabled person.
fn unknown_person(id: i64) -> Error {
    invalid(format!(
        "no enabled person has id {id}: assign someone who signed in (the group page lists \
         them), or give \"assignee\": \"\" for nobody"
    ))
}

/// The first control character of `text` as a reader can find it (`U+0000 at character 4`),
/// so a refusal names the real reason rather than a length or format it does not break.
fn control_character(text: &str) -> Option<String> {
    text.chars()
        .enumerate()
        .find(|(_, c)| c.is_control())
        .map(|(at, c)| format!("U+{:04X} at character {}", u32::from(c), at + 1))
}

/// The triage after `change`, or why it cannot apply to the current one: `regressed` is not
/// set by hand (only kept), and `resolved_in` goes only with the resolved state.
fn next_triage(current: &Triage, change: &Change) -> Result<Triage, Error> {
    let state = change.state.unwrap_or(current.state);
    if state == GroupState::Regressed && current.state != GroupState::Regressed {
        return Err(invalid(
            "regressed is set by gpu-triage when a resolved failure comes back; \
             set open, resolved or ignored",
        ));
    }
    let resolved_in = match (&change.resolved_in, state) {
        (Some(r), GroupState::Resolved) => r.clone(),
        (Some(r), _) if !r.is_empty() => {
            return Err(invalid(format!(
                "resolved_in goes only with the resolved state (this change leaves it {state})"
            )));
        }
        // The same state keeps its fix (a regressed group keeps the one that did not hold).
        _ if state == current.state => current.resolved_in.clone(),
        _ => String::new(),
    };
    let (assignee, assignee_person_id) = match &change.assignee {
        Some(name) => (name.clone(), change.assignee_person),
        None => (current.assignee.clone(), current.assignee_person_id),
    };
    Ok(Triage {
        state,
        resolved_in,
        assignee,
        assignee_person_id,
        state_changed_at: current.state_changed_at,
    })
}

/// Changes group `id`'s state, `resolved_in` or assignee as `actor` (a person or a token),
/// writing one history entry per change in the same transaction, and returns the group as it
/// is then. 404 for an unknown group; 422 `bad_triage` for an unknown state, `regressed` set by
/// hand, `resolved_in` without the resolved state or not a commit or version, an assignee that
/// is no active token's name or no enabled person's id, or an empty patch; 409 `group_merged`
/// for a group merged into another.
#[tracing::instrument(name = "group_triage::change", skip_all, fields(group_id = id, actor = actor.name()))]
pub async fn change(
    db: &Db,
    id: i64,
    patch: GroupPatch,
    actor: &Actor,
) -> Result<GroupView, Error> {
    let mut change = validate(patch)?;
    let mut tx = db.pool().begin().await.map_err(DbError::from)?;
    // The row stays locked until commit, so the change is decided on the triage as it is and
    // no other change or regression comes in between (SECURITY.md item 19).
    let current = store::lock_triage(&mut tx, id)
        .await?
        .ok_or(Error::NotFound("group"))?;
    // Read once the row is held: a merge of it either committed before (seen here) or waits.
    if let Some(Standing::Merged(into)) = merges::standing(&mut *tx, id, Lock::None).await? {
        return Err(triage::merged_away(id, into));
    }
    if let Some(person) = change.assignee_person {
        // A person assigned before they were disabled stays assigned; anyone else must be
        // enabled now.
        let name = if current.assignee_person_id == Some(person) {
            current.assignee.clone()
        } else {
            people::get_enabled(&mut *tx, person)
                .await?
                .ok_or_else(|| unknown_person(person))?
                .name
        };
        change.assignee = Some(name);
    }
    let next = next_triage(&current, &change)?;
    let reassigned = (&next.assignee, next.assignee_person_id)
        != (&current.assignee, current.assignee_person_id);
    if reassigned
        && next.assignee_person_id.is_none()
        && !next.assignee.is_empty()
        && !tokens::is_active_name(&mut *tx, &next.assignee).await?
    {
        return Err(invalid(format!(
            "no active token is named {:?}: assign a name that `gpu-triage token list` shows, \
             or \"\" for nobody",
            next.assignee
        )));
    }
    let state_changed = next.state != current.state;
    let fix_changed = next.state == GroupState::Resolved && next.resolved_in != current.resolved_in;
    let at = store::change_moment(&mut tx, id).await?;
    if state_changed || fix_changed {
        let detail = match next.state {
            GroupState::Resolved if !next.resolved_in.is_empty() => {
                format!("in {}", next.resolved_in)
            }
            _ => String::new(),
        };
        store::insert_event(
            &mut *tx,
            &NewEvent {
                group_id: id,
                at,
                actor,
                action: GroupAction::State,
                from: current.state.as_str(),
                to: next.state.as_str(),
                detail: &detail,
                report_id: None,
            },
        )
        .await?;
    }
    if reassigned {
        store::insert_event(
            &mut *tx,
            &NewEvent {
                group_id: id,
                at,
                actor,
                action: GroupAction::Assignee,
                from: &current.assignee,
                to: &next.assignee,
                detail: "",
                report_id: None,
            },
        )
        .await?;
    }
    if next != current {
        store::set_triage(&mut *tx, id, &next, state_changed.then_some(at)).await?;
    }
    tx.commit().await.map_err(DbError::from)?;
    group(db, id).await
}

/// The regression rule on upload (README "Triage"), in the upload's transaction: a new report
/// in a resolved group from a build that should contain the fix makes the group regressed; one
/// from an older build is recorded in its history and leaves it resolved. Open, ignored and
/// regressed groups are left as they are. Returns whether the group became regressed.
#[tracing::instrument(name = "group_triage::after_upload", skip_all, fields(report_id = report_id, group_id = group_id))]
pub(crate) async fn after_upload(
    tx: &mut PgConnection,
    report_id: i64,
    group_id: i64,
) -> Result<bool, Error> {
    // Only a resolved group can change here, so only a resolved one is locked (uploads of an
    // open group do not queue behind each other). A change that is resolving the group but has
    // not committed is not waited for: this upload then comes before it, as if it had committed
    // first, and the history stays a chain either way.
    let Some(resolved) = store::lock_if_resolved(tx, group_id).await? else {
        return Ok(false);
    };
    let Some(build) = store::report_build(&mut *tx, report_id).await? else {
        return Ok(false);
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
    Ok(matches!(verdict, Verdict::Regressed(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn triage(state: GroupState, resolved_in: &str, assignee: &str) -> Triage {
        Triage {
            state,
            resolved_in: resolved_in.into(),
            assignee: assignee.into(),
            assignee_person_id: None,
            state_changed_at: Timestamp::from_unix(0),
        }
    }

    fn patch(state: Option<&str>, resolved_in: Option<&str>, assignee: Option<&str>) -> GroupPatch {
        GroupPatch {
            state: state.map(str::to_owned),
            resolved_in: resolved_in.map(str::to_owned),
            assignee: assignee.map(str::to_owned),
            assignee_id: None,
        }
    }

    #[test]
    fn changes_apply_to_the_current_triage_or_say_why_not() {
        use GroupState::{Ignored, Open, Regressed, Resolved};
        // (current, patch) -> Ok((state, resolved_in, assignee)) or Err(message part)
        type Case<'a> = (
            Triage,
            GroupPatch,
            Result<(GroupState, &'a str, &'a str), &'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                triage(Open, "", ""),
                patch(Some("resolved"), Some(" 2.0 "), None),
                Ok((Resolved, "2.0", "")),
            ),
            (
                triage(Resolved, "2.0", "bob"),
                patch(None, Some("abcdef1"), None),
                Ok((Resolved, "abcdef1", "bob")),
            ),
            (
                triage(Resolved, "2.0", ""),
                patch(Some("open"), None, None),
                Ok((Open, "", "")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(None, None, Some("alice")),
                Ok((Regressed, "2.0", "alice")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(Some("regressed"), Some(""), None),
                Ok((Regressed, "2.0", "")),
            ),
            (
                triage(Regressed, "2.0", ""),
                patch(Some("resolved"), None, None),
                Ok((Resolved, "", "")),
            ),
            (
                triage(Open, "", "alice"),
                patch(Some("ignored"), Some(""), Some("")),
                Ok((Ignored, "", "")),
            ),
            (
                triage(Open, "", ""),
                patch(Some("regressed"), None, None),
                Err("regressed is set by gpu-triage"),
            ),
            (
                triage(Open, "", ""),
                patch(None, Some("2.0"), None),
                Err("resolved_in goes only with the resolved state"),
            ),
            (
                triage(Resolved, "2.0", ""),
                patch(Some("ignored"), Some("2.0"), None),
                Err("resolved_in goes only with the resolved state"),
            ),
        ];
        for (current, p, want) in cases {
            let got = validate(p.clone())
                .and_then(|c| next_triage(&current, &c))
                .map_err(|e| e.to_string());
            match (got, want) {
                (Ok(t), Ok((state, resolved_in, assignee))) => assert_eq!(
                    (t.state, t.resolved_in.as_str(), t.assignee.as_str()),
                    (state, resolved_in, assignee),
                    "{p:?}"
                ),
                (Err(e), Err(part)) => assert!(e.contains(part), "{p:?}: {e}"),
                (got, want) => panic!("{p:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn malformed_patches_are_refused_before_reading_the_group() {
        let cases = [
            (patch(None, None, None), "nothing to change"),
            (
                patch(Some("closed"), None, None),
                "unknown state \"closed\"",
            ),
            (
                patch(Some("resolved"), Some("soon"), None),
                "resolved_in must be a commit",
            ),
            (
                patch(None, None, Some("a\u{7}b")),
                "assignee must not contain a control character (U+0007 at character 2)",
            ),
            (
                patch(None, None, Some(&"a".repeat(201))),
                "assignee must be a token name (at most 200 characters)",
            ),
            (
                patch(Some("resolved"), Some(&"1.".repeat(51)), None),
                "at most 100 characters",
            ),
            (
                patch(Some("resolved"), Some("2.0\u{0}"), None),
                "resolved_in must not contain a control character (U+0000 at character 4)",
            ),
        ];
        for (p, want) in cases {
            let err = validate(p.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(want), "{p:?}: {err}");
        }
    }

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
    fn the_people_picker_posts_an_id_nobody_or_keep() {
        let form = |id: Option<&str>| {
            form_patch("open".into(), String::new(), None, id.map(str::to_owned))
                .map(|p| (p.assignee, p.assignee_id))
                .map_err(|e| e.to_string())
        };
        assert_eq!(form(Some("7")), Ok((None, Some(7))));
        assert_eq!(form(Some("")), Ok((Some(String::new()), None)));
        assert_eq!(form(Some(KEEP_ASSIGNEE)), Ok((None, None)));
        assert_eq!(form(None), Ok((None, None)));
        assert!(form(Some("ana")).is_err_and(|e| e.contains("assignee_id")));
        let both = GroupPatch {
            assignee: Some("ci".into()),
            assignee_id: Some(7),
            ..GroupPatch::default()
        };
        assert!(validate(both).is_err_and(|e| e.to_string().contains("not both")));
        let zero = GroupPatch {
            assignee_id: Some(0),
            ..GroupPatch::default()
        };
        assert!(
            validate(zero).is_err_and(|e| e.to_string().contains("no enabled person has id 0"))
        );
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
