//! The wire shape of `GET /api/v1/search`: one page of ranked results, one per group (its best
//! match with where it matched and its snippet as marked segments, and the group's report count,
//! state and culprit), the count of groups (exact up to the cap, else a lower bound) and the
//! spelling help. Declared here, as typed structs, so the handler and the OpenAPI document read
//! the same fields.

use serde::{Deserialize, Serialize};

use super::GroupState;
use crate::rules::Category;
use crate::time::Timestamp;

/// What a search result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchHitKind {
    Report,
    Group,
    Fix,
}

/// Where a result matched, in rank order: root cause, then fix, symptom, log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchTier {
    /// A report's title and root-cause line, a group's.
    RootCause,
    /// A recorded fix.
    Fix,
    /// Another finding of the report.
    Symptom,
    /// The log lines, frames, file name or metadata.
    Log,
}

/// A piece of a snippet; `marked` pieces are what matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnippetSegment {
    pub text: String,
    pub marked: bool,
}

/// The text around a match: whole (`text`) and in pieces with the match marked (`segments`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Snippet {
    pub text: String,
    pub segments: Vec<SnippetSegment>,
}

/// The group a search result stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchGroup {
    pub id: i64,
    pub title: String,
    pub category: Category,
    pub state: GroupState,
    /// The program's innermost frame in the failure (`train.py:forward`), when the group's
    /// signature names one; null for environment failures and logs without frames.
    #[schema(required)]
    pub culprit: Option<String>,
    /// Its reports (those retention deleted included).
    pub report_count: i64,
    pub last_seen: Timestamp,
    /// The group page.
    pub url: String,
}

/// One search result: a group, through its best match (the report, the group itself or a fix
/// whose match ranks first among the group's). The fields before `group` describe that match,
/// as they did when results were hits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchHit {
    pub kind: SearchHitKind,
    /// The report's, group's or fix's id.
    pub id: i64,
    /// The report's or fix's group; a group's own id.
    pub group_id: i64,
    /// A report's or group's title, a fix's summary.
    pub title: String,
    pub category: Category,
    /// A report's project (empty for groups and fixes).
    pub project: String,
    /// When the report or fix was stored, when the group was last seen.
    pub created_at: Timestamp,
    /// The report page, or the group page for groups and fixes.
    pub url: String,
    pub matched: MatchTier,
    pub snippet: Snippet,
    /// The group this result stands for.
    pub group: SearchGroup,
}

/// `GET /api/v1/search` response: one page of results.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchResults {
    /// The words asked, trimmed.
    pub query: String,
    /// When the words asked found nothing and their spelling correction did: the corrected
    /// words, whose results these are.
    #[schema(required)]
    pub corrected: Option<String>,
    /// When some words are unknown and the words asked found something: the same search with
    /// those words corrected.
    #[schema(required)]
    pub suggestion: Option<String>,
    #[schema(required)]
    pub category: Option<Category>,
    #[schema(required)]
    pub project: Option<String>,
    pub page: u32,
    pub per_page: u32,
    /// Results (groups) in all, counted up to 1,000; with `total_exact: false`, at least this
    /// many.
    pub total: i64,
    pub total_exact: bool,
    #[schema(required)]
    pub next_page: Option<u32>,
    #[schema(required)]
    pub prev_page: Option<u32>,
    /// One per group, best match first.
    pub results: Vec<SearchHit>,
}
