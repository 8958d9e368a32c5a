//! The wire types of changing many groups in one call (issue 39 items 4 and 5): a triage change
//! of up to [`MAX_BULK`] groups (`POST /api/v1/groups/bulk`), a merge of several groups into
//! one (`POST /api/v1/groups/merge`), and the answer a bulk change and its undo
//! (`POST /api/v1/groups/changes/{id}/undo`) give. Both are all-or-nothing: one refused group
//! refuses the call, and nothing changes.

use serde::{Deserialize, Serialize};

use super::GroupPatch;
use super::groups::GroupState;

/// The most groups one bulk call names.
pub const MAX_BULK: usize = 100;

/// `POST /api/v1/groups/bulk`: apply one triage change to every group of `ids`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkChange {
    /// The groups to change: 1-100 distinct ids.
    #[schema(min_items = 1, max_items = 100)]
    pub ids: Vec<i64>,
    /// The change, as `PATCH /api/v1/groups/{id}` takes it.
    pub change: GroupPatch,
}

/// `POST /api/v1/groups/merge`: merge every group of `ids` into one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkMerge {
    /// The groups to merge: 1-100 distinct ids (at least two without `into`).
    #[schema(min_items = 1, max_items = 100)]
    pub ids: Vec<i64>,
    /// The group they go into; it may be one of `ids`. Without it, the group of `ids` with the
    /// most reports (on a tie, the oldest).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub into: Option<i64>,
}

/// A group's triage after a bulk change or an undo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GroupTriageItem {
    pub id: i64,
    pub url: String,
    pub state: GroupState,
    pub resolved_in: String,
    /// The assignee's name (a person's, or a token's); empty for nobody.
    pub assignee: String,
    /// The assigned person, when the assignee is one.
    #[serde(default)]
    #[schema(required)]
    pub assignee_id: Option<i64>,
    /// An ignored group's reports still to come before it reopens, or `null`.
    #[serde(default)]
    #[schema(required)]
    pub ignore_reports_left: Option<i64>,
}

/// The answer of a bulk change and of its undo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkAnswer {
    /// The change's id, for `POST /api/v1/groups/changes/{id}/undo`; `null` when no group
    /// changed (every group was as asked already).
    #[schema(required)]
    pub change_id: Option<i64>,
    /// The groups it changed (or, for an undo, restored), ascending.
    pub changed: Vec<i64>,
    /// Every group named, ascending, as it is now.
    pub groups: Vec<GroupTriageItem>,
}
