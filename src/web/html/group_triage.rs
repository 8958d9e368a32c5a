//! Portal pages for triaging groups (issue 18 items 4 and 5): the state form of a group page
//! (`POST /groups/{id}/state`, CSRF-checked like every portal form), and the views of a group's
//! triage, history and tag breakdowns that its page shows. Values stay typed up to these view
//! structs; the templates only loop and branch.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::actor::ActorKind;
use crate::api_types::{GroupAction, GroupState, GroupTags, TagCount};
use crate::app::group_triage::{
    self, Assignable, KEEP_ASSIGNEE, SERVICE_ACTOR, StateFields, Triage, TriageDetail,
};
use crate::time::Timestamp;
use crate::web::error::PageError;
use crate::web::extract::{CsrfField, CsrfForm, GroupId};
use crate::web::scope::IngestOrAdmin;
use crate::web::state::AppState;

/// An option of a `<select>`.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

pub(super) fn choices<'a>(
    current: &str,
    any: &str,
    options: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<Choice> {
    let mut out = vec![Choice {
        value: String::new(),
        label: any.to_owned(),
        selected: current.is_empty(),
    }];
    out.extend(options.into_iter().map(|(value, label)| Choice {
        value: value.to_owned(),
        label: label.to_owned(),
        selected: value == current,
    }));
    out
}

/// The state form of a group page: every field is posted (the current values when unchanged).
#[derive(Debug, Deserialize)]
pub struct StateForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    state: String,
    #[serde(default)]
    resolved_in: String,
    /// Absent from the list's one-click forms: the assignee stays as it is.
    #[serde(default)]
    assignee: Option<String>,
    /// The people picker (where people sign in): a person's id, empty for nobody, or
    /// [`KEEP_ASSIGNEE`].
    #[serde(default)]
    assignee_id: Option<String>,
    /// With the ignored state: empty to ignore for good, N until N more reports.
    #[serde(default)]
    ignore_until: Option<String>,
    /// Where to go afterwards (the list the one-click forms were on); else the group page.
    #[serde(default)]
    return_to: Option<String>,
}

impl CsrfField for StateForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /groups/{id}/state`
pub async fn update_state(
    State(state): State<AppState>,
    GroupId(id): GroupId,
    CsrfForm { user, form, .. }: CsrfForm<StateForm, IngestOrAdmin>,
) -> Result<Response, PageError> {
    let fields = StateFields {
        state: form.state,
        resolved_in: form.resolved_in,
        assignee: form.assignee,
        assignee_id: form.assignee_id,
        ignore_until: form.ignore_until,
    };
    group_triage::change_by_form(&state.db, id, fields, &user.actor()).await?;
    let back = (form.return_to.as_deref())
        .and_then(crate::web::auth::return_path)
        .filter(|p| *p == "/groups" || p.starts_with("/groups?"))
        .map_or_else(
            || format!("/groups/{id}#triage"),
            |p| format!("{p}#group-{id}"),
        );
    Ok(Redirect::to(&back).into_response())
}

/// An entry of the history as the page says it.
pub struct HistoryLine {
    pub at: Timestamp,
    /// Who made the change (the name then), and what kind of actor (none for old entries).
    pub actor: String,
    pub actor_kind: Option<ActorKind>,
    pub text: String,
    pub report_id: Option<i64>,
    /// The group the entry was written for, when that group was merged into this one.
    pub merged_from: Option<i64>,
}

/// One tag's most frequent values, with the group's report count for the meters.
pub struct TagView {
    pub label: &'static str,
    pub values: Vec<TagCount>,
    pub of: i64,
}

/// The triage part of a group page.
pub struct TriageView {
    pub triage: Triage,
    /// The state form is shown (the user may triage).
    pub can_edit: bool,
    /// A one-click Reopen is offered (the user may triage a resolved or ignored group).
    pub can_reopen: bool,
    pub states: Vec<Choice>,
    pub assignees: Vec<Choice>,
    /// The assignee picker's field: `assignee_id` (people) or `assignee` (token names).
    pub assignee_field: &'static str,
    pub history: Vec<HistoryLine>,
    /// Tags with at least one value.
    pub tags: Vec<TagView>,
    /// The full-size chart: inline SVG built from numbers only, safe to embed.
    pub chart: String,
}

/// What a history entry says, in a sentence after its actor's name.
fn history_text(e: &crate::api_types::GroupEvent) -> String {
    let with = |detail: &str| {
        if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        }
    };
    match e.action {
        GroupAction::State if by_the_service(e) && e.to == "regressed" => {
            format!("reopened it as regressed{}", with(&e.detail))
        }
        GroupAction::State if e.detail.is_empty() => {
            format!("set the state to {} (was {})", e.to, e.from)
        }
        GroupAction::State => format!("set the state to {} {} (was {})", e.to, e.detail, e.from),
        GroupAction::Assignee if e.from.is_empty() => format!("assigned {}", e.to),
        GroupAction::Assignee if e.to.is_empty() => format!("unassigned {}", e.from),
        GroupAction::Assignee => format!("reassigned from {} to {}", e.from, e.to),
        GroupAction::OlderBuild => format!("kept it resolved{}", with(&e.detail)),
        GroupAction::Merge => format!(
            "merged group {} into group {}{}",
            e.from,
            e.to,
            with(&e.detail)
        ),
        GroupAction::Unmerge => format!(
            "split group {} back out of group {}{}",
            e.to,
            e.from,
            with(&e.detail)
        ),
    }
}

/// Whether the service itself made a history entry (entries written before actors were typed
/// say so by its name alone).
fn by_the_service(e: &crate::api_types::GroupEvent) -> bool {
    match e.actor_kind {
        Some(kind) => kind == ActorKind::Service,
        None => e.actor == SERVICE_ACTOR,
    }
}

/// The group page's assignee picker for `t`: enabled people by name (value: their id) where
/// people sign in, else active token names; the current assignee is always among the choices,
/// and one who is no person (a token name assigned before people signed in) is kept by
/// [`KEEP_ASSIGNEE`] until someone picks another.
fn assignee_picker(t: &Triage, assignable: Assignable) -> (&'static str, Vec<Choice>) {
    match assignable {
        Assignable::People(people) => {
            let current = t.assignee_person_id.map(|id| id.to_string());
            let mut options: Vec<(String, String)> = (people.into_iter())
                .map(|p| (p.id.to_string(), p.name))
                .collect();
            match &current {
                Some(id) if !options.iter().any(|(v, _)| v == id) => {
                    options.push((id.clone(), t.assignee.clone()));
                }
                None if !t.assignee.is_empty() => {
                    options.push((KEEP_ASSIGNEE.to_owned(), format!("{} (token)", t.assignee)));
                }
                _ => {}
            }
            let selected = match &current {
                Some(id) => id.clone(),
                None if !t.assignee.is_empty() => KEEP_ASSIGNEE.to_owned(),
                None => String::new(),
            };
            let choices = choices(
                &selected,
                "nobody",
                options.iter().map(|(v, l)| (v.as_str(), l.as_str())),
            );
            ("assignee_id", choices)
        }
        Assignable::Tokens(mut names) => {
            if !t.assignee.is_empty() && !names.contains(&t.assignee) {
                names.push(t.assignee.clone());
            }
            let choices = choices(
                &t.assignee,
                "nobody",
                names.iter().map(|n| (n.as_str(), n.as_str())),
            );
            ("assignee", choices)
        }
    }
}

/// The triage view of a group of `report_count` reports: the state form's choices (enabled
/// people, or active token names, for the assignee) only when `assignable` is given (the user
/// may triage).
pub fn triage_view(
    detail: TriageDetail,
    assignable: Option<Assignable>,
    report_count: i64,
    chart: String,
) -> TriageView {
    let t = detail.triage;
    let can_edit = assignable.is_some();
    let (states, (assignee_field, assignees)) = match assignable {
        Some(assignable) => (state_choices(&t), assignee_picker(&t, assignable)),
        None => (Vec::new(), ("assignee", Vec::new())),
    };
    let history = (detail.history.iter())
        .map(|e| HistoryLine {
            at: e.at,
            actor: e.actor.clone(),
            actor_kind: e.actor_kind,
            text: history_text(e),
            report_id: e.report_id,
            merged_from: e.merged_from,
        })
        .collect();
    TriageView {
        can_reopen: can_edit && matches!(t.state, GroupState::Resolved | GroupState::Ignored),
        triage: t,
        can_edit,
        states,
        assignees,
        assignee_field,
        history,
        tags: tag_views(&detail.tags, report_count),
        chart,
    }
}

/// The state form's choices for `t`: `regressed` is offered only to keep it (it is not set by
/// hand).
fn state_choices(t: &Triage) -> Vec<Choice> {
    (GroupState::ALL.into_iter())
        .filter(|s| *s != GroupState::Regressed || t.state == GroupState::Regressed)
        .map(|s| Choice {
            value: s.as_str().to_owned(),
            label: s.as_str().to_owned(),
            selected: s == t.state,
        })
        .collect()
}

/// The tags with at least one value, labelled as the page says them, against a group of
/// `report_count` reports.
fn tag_views(tags: &GroupTags, report_count: i64) -> Vec<TagView> {
    let labels = [
        ("project", "Project"),
        ("branch", "Branch"),
        ("environment", "Environment"),
        ("gpu", "GPU"),
        ("driver_version", "Driver"),
        ("cuda_version", "CUDA"),
        ("torch_version", "torch"),
    ];
    (tags.named().into_iter())
        .filter(|(_, values)| !values.is_empty())
        .map(|(name, values)| TagView {
            label: labels
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(name, |(_, l)| *l),
            values: values.to_vec(),
            of: report_count.max(1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_types::GroupEvent;

    fn event(actor: &str, action: GroupAction, from: &str, to: &str, detail: &str) -> GroupEvent {
        GroupEvent {
            id: 1,
            at: Timestamp::from_unix(0),
            actor: actor.into(),
            actor_kind: None,
            actor_person_id: None,
            action,
            from: from.into(),
            to: to.into(),
            detail: detail.into(),
            report_id: None,
            merged_from: None,
        }
    }

    #[test]
    fn history_entries_read_as_sentences() {
        use GroupAction::{Assignee, Merge, OlderBuild, State};
        let cases = [
            (
                event("alice", State, "open", "resolved", "in 2.0"),
                "set the state to resolved in 2.0 (was open)",
            ),
            (
                event("alice", State, "resolved", "open", ""),
                "set the state to open (was resolved)",
            ),
            (
                event(
                    SERVICE_ACTOR,
                    State,
                    "resolved",
                    "regressed",
                    "version 2.1 is not older than the fix (2.0)",
                ),
                "reopened it as regressed: version 2.1 is not older than the fix (2.0)",
            ),
            (event("alice", Assignee, "", "bob", ""), "assigned bob"),
            (event("alice", Assignee, "bob", "", ""), "unassigned bob"),
            (
                event("alice", Assignee, "bob", "carol", ""),
                "reassigned from bob to carol",
            ),
            (
                event(
                    SERVICE_ACTOR,
                    OlderBuild,
                    "",
                    "",
                    "version 1.9 is older than the fix (2.0)",
                ),
                "kept it resolved: version 1.9 is older than the fix (2.0)",
            ),
            (
                event(
                    "alice",
                    Merge,
                    "5",
                    "7",
                    "\u{201c}OOM\u{201d}: 2 reports, 0 fixes",
                ),
                "merged group 5 into group 7: \u{201c}OOM\u{201d}: 2 reports, 0 fixes",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(history_text(&e), want);
        }
    }
}
