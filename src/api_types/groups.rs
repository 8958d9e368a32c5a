//! The wire types of group triage (issue 18 items 4 and 5): a group's state, the change a
//! client asks for (`PATCH /api/v1/groups/{id}`), the activity history, the tag breakdowns,
//! a page of the group list (`GET /api/v1/groups`) and one group with its reports, fixes and
//! triage (`GET`/`PATCH /api/v1/groups/{id}`). Declared once here, used by the handlers,
//! the storage layer (the same shapes are read back) and any client.

use serde::{Deserialize, Serialize};

use crate::rules::Category;
use crate::time::Timestamp;

/// Where a group stands in triage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupState {
    /// New or reopened by hand: someone should look at it.
    Open,
    /// Fixed, optionally in a named commit or version.
    Resolved,
    /// Known and not worth acting on; new reports leave it ignored.
    Ignored,
    /// Was resolved, and a report came from a build that should contain the fix.
    Regressed,
}

impl GroupState {
    /// Every state, in the order forms list them.
    pub const ALL: [GroupState; 4] = [
        GroupState::Open,
        GroupState::Resolved,
        GroupState::Ignored,
        GroupState::Regressed,
    ];

    /// The spelling on the wire and in the `groups.state` column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Open => "open",
            GroupState::Resolved => "resolved",
            GroupState::Ignored => "ignored",
            GroupState::Regressed => "regressed",
        }
    }

    /// The state spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<GroupState> {
        GroupState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
    }
}

impl std::fmt::Display for GroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an entry of a group's history records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupAction {
    /// The state changed (`from` → `to`; `detail` names the fix's commit or version, or why an
    /// upload reopened it).
    State,
    /// The assignee changed (`from` → `to`, empty for nobody).
    Assignee,
    /// A report arrived in a resolved group from a build older than the fix: recorded, and the
    /// group stays resolved (`detail` says why).
    OlderBuild,
    /// Another group was merged into this one (`from` its id, `to` this group's id, `detail`
    /// its title and what moved); its reports, fixes and history are this group's now.
    Merge,
    /// A group merged into this one was split back out (`from` this group's id, `to` the
    /// group split out, `detail` its title and what went back with it); written in both
    /// groups' histories.
    Unmerge,
}

impl GroupAction {
    /// The spelling on the wire and in the `group_events.action` column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            GroupAction::State => "state",
            GroupAction::Assignee => "assignee",
            GroupAction::OlderBuild => "older_build",
            GroupAction::Merge => "merge",
            GroupAction::Unmerge => "unmerge",
        }
    }

    /// The action spelled `s`, if it is one.
    #[must_use]
    pub fn parse(s: &str) -> Option<GroupAction> {
        [
            GroupAction::State,
            GroupAction::Assignee,
            GroupAction::OlderBuild,
            GroupAction::Merge,
            GroupAction::Unmerge,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

/// One entry of a group's activity history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupEvent {
    pub id: i64,
    pub at: Timestamp,
    /// Who made the change: a person's name, a token's name, or `gpu-triage` for changes made
    /// on upload (the name as it was then).
    pub actor: String,
    /// `person`, `token` or `service`; `null` for entries written before actors were typed.
    #[serde(default)]
    #[schema(required)]
    pub actor_kind: Option<crate::actor::ActorKind>,
    /// The person who made the change, when a person did (and still exists).
    #[serde(default)]
    #[schema(required)]
    pub actor_person_id: Option<i64>,
    pub action: GroupAction,
    pub from: String,
    pub to: String,
    pub detail: String,
    /// The report whose upload caused the entry, if one did.
    #[schema(required)]
    pub report_id: Option<i64>,
    /// The group the entry was written for when that group was later merged into this one;
    /// `null` for the group's own entries.
    #[schema(required)]
    #[serde(default)]
    pub merged_from: Option<i64>,
}

/// `PATCH /api/v1/groups/{id}` (and the portal's state form): every field optional, at least
/// one given. `assignee: ""` unassigns; `resolved_in` goes only with the `resolved` state;
/// `assignee` and `assignee_id` are not given together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupPatch {
    /// `open`, `resolved` or `ignored` (`regressed` is set by uploads, not by hand).
    #[serde(default)]
    pub state: Option<String>,
    /// The commit (7-40 hex digits) or version (`2.1`, `v2.1.0`) that fixed it.
    #[serde(default)]
    pub resolved_in: Option<String>,
    /// The name of an active token, or empty for nobody.
    #[serde(default)]
    pub assignee: Option<String>,
    /// The id of an enabled person to assign (someone who signed in through the identity
    /// provider); an unknown or disabled person is refused with 422 `bad_triage`.
    #[serde(default)]
    pub assignee_id: Option<i64>,
    /// With `"state": "ignored"`: the group reopens (as open) when this many more reports
    /// arrive; 1 is "until it happens again". Without it an ignored group stays ignored.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    pub ignore_until_reports: Option<i64>,
}

/// How often one value of a tag occurs among a group's reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TagCount {
    pub value: String,
    pub count: i64,
}

/// A group's reports counted by where they come from: the ten most frequent values of each
/// tag, most frequent first. A tag with no data is an empty list. GPU, driver, CUDA and torch
/// versions are the failing upload's own (its log, else the environment text it was sent
/// with), never those of a worker that reproduced it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupTags {
    pub project: Vec<TagCount>,
    pub branch: Vec<TagCount>,
    pub environment: Vec<TagCount>,
    pub gpu: Vec<TagCount>,
    /// The NVIDIA driver version.
    #[serde(default)]
    pub driver_version: Vec<TagCount>,
    /// The CUDA version (of the log, else the one PyTorch was built with).
    #[serde(default)]
    pub cuda_version: Vec<TagCount>,
    pub torch_version: Vec<TagCount>,
}

impl GroupTags {
    /// The tags with their wire names, in the order pages show them.
    #[must_use]
    pub fn named(&self) -> [(&'static str, &[TagCount]); 7] {
        [
            ("project", &self.project),
            ("branch", &self.branch),
            ("environment", &self.environment),
            ("gpu", &self.gpu),
            ("driver_version", &self.driver_version),
            ("cuda_version", &self.cuda_version),
            ("torch_version", &self.torch_version),
        ]
    }

    /// The list for tag `name`, to fill from storage rows; `None` for an unknown tag.
    pub fn slot(&mut self, name: &str) -> Option<&mut Vec<TagCount>> {
        match name {
            "project" => Some(&mut self.project),
            "branch" => Some(&mut self.branch),
            "environment" => Some(&mut self.environment),
            "gpu" => Some(&mut self.gpu),
            "driver_version" => Some(&mut self.driver_version),
            "cuda_version" => Some(&mut self.cuda_version),
            "torch_version" => Some(&mut self.torch_version),
            _ => None,
        }
    }
}

/// A group in `GET /api/v1/groups`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupListItem {
    pub id: i64,
    pub url: String,
    pub category: Category,
    pub title: String,
    pub root_cause_text: String,
    /// Reports in the group, those retention deleted included.
    pub count: i64,
    /// Of `count`, the reports retention deleted.
    #[serde(default)]
    pub removed_by_retention: i64,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    pub state: GroupState,
    pub resolved_in: String,
    /// The assignee's name (a person's, or a token's); empty for nobody.
    pub assignee: String,
    /// The assigned person, when the assignee is one.
    #[serde(default)]
    #[schema(required)]
    pub assignee_id: Option<i64>,
    pub has_fix: bool,
    /// An ignored group's reports still to come before it reopens; `null` when it is not
    /// counting (ignored for good, or not ignored).
    #[serde(default)]
    #[schema(required)]
    pub ignore_reports_left: Option<i64>,
    /// The program's own innermost frame the failure is raised in (`train.py:forward`), when
    /// the group's signature names one: what tells apart groups of one error sentence raised
    /// by different code.
    #[serde(default)]
    #[schema(required)]
    pub culprit: Option<String>,
    /// The projects of its newest reports (up to 200), most frequent first, at most eight.
    #[serde(default)]
    pub projects: Vec<String>,
    /// The frameworks their logs come from (`pytorch`, `llama.cpp`), most frequent first.
    #[serde(default)]
    pub frameworks: Vec<String>,
    /// Where they ran: the short environment labels they were uploaded with (`ci-a100`),
    /// most frequent first, at most eight.
    #[serde(default)]
    pub environments: Vec<String>,
    /// The distributed ranks their logs name, ascending, at most eight.
    #[serde(default)]
    pub ranks: Vec<u32>,
    /// The hosts their root-cause lines come from (the `failing_host` fact: `node-7`), most
    /// frequent first, at most eight.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// `GET /api/v1/groups` response: one page of groups and where the next begins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupList {
    pub groups: Vec<GroupListItem>,
    pub page: u32,
    pub per_page: u32,
    /// Groups matching the filters, on all pages.
    pub total: i64,
    /// The next page's number, `null` on the last page.
    #[schema(required)]
    pub next_page: Option<u32>,
}

/// A report of a group, as `GET /api/v1/groups/{id}` lists it (the 50 newest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupReport {
    pub id: i64,
    pub created_at: Timestamp,
    pub project: String,
    pub category: Category,
    pub title: String,
    pub root_cause_text: String,
    /// The report page.
    pub url: String,
}

/// `GET` and `PATCH /api/v1/groups/{id}` response: a group of recurring failures, its newest
/// reports, its fixes and its triage.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupDetail {
    pub id: i64,
    /// The normalized root-cause signature's hash the group is keyed by.
    pub fingerprint: String,
    pub category: Category,
    pub title: String,
    pub root_cause_text: String,
    /// Reports in the group, those retention deleted included.
    pub count: i64,
    /// Of `count`, the reports retention deleted.
    #[serde(default)]
    pub removed_by_retention: i64,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    /// The latest reproduction verdict with repeats ("flaky: fails 2/5"), or empty.
    pub verdict: String,
    /// The group page.
    pub url: String,
    pub state: GroupState,
    /// The commit or version a resolution names; empty when none.
    pub resolved_in: String,
    pub state_changed_at: Timestamp,
    /// The assignee's name (a person's, or a token's); empty for nobody.
    pub assignee: String,
    /// The assigned person, when the assignee is one.
    #[serde(default)]
    #[schema(required)]
    pub assignee_id: Option<i64>,
    /// An ignored group's reports still to come before it reopens; `null` when it is not
    /// counting (ignored for good, or not ignored).
    #[serde(default)]
    #[schema(required)]
    pub ignore_reports_left: Option<i64>,
    /// Newest first.
    pub history: Vec<GroupEvent>,
    pub tags: GroupTags,
    /// The newest reports, newest first.
    pub reports: Vec<GroupReport>,
    /// Newest first.
    pub fixes: Vec<super::Fix>,
    /// The groups merged into this one, newest merge first: their URLs answer with this
    /// group (`308`), and uploads of their failures land here.
    #[serde(default)]
    pub merged_groups: Vec<i64>,
}

/// `POST /api/v1/groups/{id}/merge`: the group to merge group `id` into. A group that was
/// itself merged stands for the group it was merged into.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    /// The id of the group that takes over group `id`'s reports, fixes and history.
    #[schema(minimum = 1)]
    pub into: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_actions_round_trip_through_their_spelling() {
        for s in ["open", "resolved", "ignored", "regressed"] {
            assert_eq!(GroupState::parse(s).map(GroupState::as_str), Some(s));
            let json = serde_json::to_value(GroupState::parse(s)).unwrap_or_default();
            assert_eq!(json.as_str(), Some(s));
        }
        assert_eq!(GroupState::parse("Open"), None);
        for a in ["state", "assignee", "older_build", "merge", "unmerge"] {
            assert_eq!(GroupAction::parse(a).map(GroupAction::as_str), Some(a));
        }
    }

    #[test]
    fn a_patch_refuses_unknown_fields() {
        let ok: Result<GroupPatch, _> = serde_json::from_str(r#"{"state":"resolved"}"#);
        assert_eq!(ok.ok().and_then(|p| p.state).as_deref(), Some("resolved"));
        let bad: Result<GroupPatch, _> = serde_json::from_str(r#"{"status":"resolved"}"#);
        assert!(bad.is_err());
    }
}
