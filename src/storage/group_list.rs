//! The group list in SQL (issue 18 item 4): groups filtered by state, category, project,
//! assignee and text, sorted by last seen, first seen or report count, a page at a time, each
//! with its triage columns and whether it has a fix; and how many match. Apart from
//! [`super::group_triage`], which reads and writes one group's triage.

use sqlx::PgExecutor;

use super::DbError;
use super::group_triage::Triage;
use super::groups::Group;
use crate::api_types::GroupState;
use crate::rules::Category;
use crate::time::Timestamp;

/// A line of the group list: the group, its triage, whether a fix is recorded, and what tells
/// it apart from look-alikes (read apart, by [`super::group_facets::facets`]).
#[derive(Clone, Debug)]
pub struct ListedGroup {
    pub group: Group,
    pub triage: Triage,
    pub has_fix: bool,
    pub facets: super::group_facets::Facets,
}

/// A line of the group list as [`list_groups`] reads it: the group's columns (as
/// `storage::groups` reads a group), its triage columns, and whether a fix is recorded.
struct ListedRow {
    id: i64,
    fingerprint: String,
    category: Category,
    title: String,
    root_cause_text: String,
    verdict: String,
    signature: String,
    report_count: i64,
    removed_count: i64,
    first_seen: Timestamp,
    last_seen: Timestamp,
    state: GroupState,
    resolved_in: String,
    assignee: String,
    assignee_person_id: Option<i64>,
    ignore_reports_left: Option<i32>,
    state_changed_at: Timestamp,
    has_fix: bool,
}

impl From<ListedRow> for ListedGroup {
    fn from(r: ListedRow) -> Self {
        ListedGroup {
            group: Group {
                id: r.id,
                fingerprint: r.fingerprint,
                category: r.category,
                title: r.title,
                root_cause_text: r.root_cause_text,
                verdict: r.verdict,
                report_count: r.report_count,
                removed_count: r.removed_count,
                first_seen: r.first_seen,
                last_seen: r.last_seen,
                signature: r.signature,
            },
            triage: Triage {
                state: r.state,
                resolved_in: r.resolved_in,
                assignee: r.assignee,
                assignee_person_id: r.assignee_person_id,
                ignore_reports_left: r.ignore_reports_left,
                state_changed_at: r.state_changed_at,
            },
            has_fix: r.has_fix,
            facets: super::group_facets::Facets::default(),
        }
    }
}

/// The order of the group list, newest or largest first (ties: the newer group first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupSort {
    /// The latest report first.
    #[default]
    LastSeen,
    /// The most reports first.
    Count,
    /// The group that appeared most recently first.
    FirstSeen,
}

/// Which groups the list shows; `None` leaves a filter out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupFilter {
    /// Groups in any of these states; empty: any state.
    pub states: Vec<GroupState>,
    /// Groups with at least one report of this project (any letter case).
    pub project: Option<String>,
    pub category: Option<Category>,
    pub has_fix: Option<bool>,
    /// Assigned under this name (a person's or a token's).
    pub assignee: Option<String>,
    /// Assigned to this person.
    pub assignee_person: Option<i64>,
    /// Assigned under this name and to no person: a token's "assigned to me".
    pub assignee_token: Option<String>,
    /// With a fix this person recorded.
    pub fixed_by_person: Option<i64>,
    /// With a fix this token recorded: by its id, or for fixes recorded before actors were
    /// typed, by its name.
    pub fixed_by_token: Option<(i64, String)>,
}

impl GroupFilter {
    /// The filter's `$1`: the states' spellings, or `NULL` for any state.
    fn state_names(&self) -> Option<Vec<String>> {
        (!self.states.is_empty())
            .then(|| self.states.iter().map(|s| s.as_str().to_owned()).collect())
    }
}

/// [`list_groups`]'s statement in one order, `$key` being the `ORDER BY` key: a literal from
/// the match on [`GroupSort`], never request text (SECURITY.md item 6). The filter (`$1`-`$10`)
/// is [`count_groups`]'s; merged groups are never listed: their reports, fixes and history are
/// their targets'.
macro_rules! list_groups_by {
    ($key:literal, $ex:expr, $f:expr, $states:expr, $limit:expr, $offset:expr) => {
        sqlx::query_as!(
            ListedRow,
            r#"SELECT g.id, g.fingerprint, g.category AS "category: Category", g.title,
                 g.root_cause_text, g.verdict, g.signature,
                 s.report_count AS "report_count!", s.removed_count AS "removed_count!",
                 g.first_seen AS "first_seen: Timestamp",
                 coalesce(s.last_seen, g.first_seen) AS "last_seen!: Timestamp",
                 g.state AS "state: GroupState", g.resolved_in, g.assignee, g.assignee_person_id,
                 g.ignore_reports_left, g.state_changed_at AS "state_changed_at: Timestamp",
                 EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) AS "has_fix!"
             FROM groups g
             CROSS JOIN LATERAL (SELECT sum(e.reports)::int8 AS reports,
                 max(e.last_seen) AS last_seen FROM group_expired_reports e WHERE e.group_id = g.id) x
             CROSS JOIN LATERAL (SELECT count(*) + coalesce(x.reports, 0) AS report_count,
                 coalesce(x.reports, 0) AS removed_count,
                 GREATEST(max(r.created_at), x.last_seen) AS last_seen
                 FROM reports r WHERE r.group_id = g.id) s
             WHERE g.merged_into IS NULL AND ($1::text[] IS NULL OR g.state = ANY($1))
             AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM reports r
                  WHERE lower(r.project) = lower($2) AND r.group_id = g.id)
                  OR EXISTS (SELECT 1 FROM group_expired_reports e
                  WHERE lower(e.project) = lower($2) AND e.group_id = g.id))
             AND ($3::text IS NULL OR g.category = $3)
             AND ($4::bool IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) = $4)
             AND ($5::text IS NULL OR g.assignee = $5)
             AND ($6::int8 IS NULL OR g.assignee_person_id = $6)
             AND ($7::text IS NULL OR (g.assignee = $7 AND g.assignee_person_id IS NULL))
             AND ($8::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f
                  WHERE f.group_id = g.id AND f.author_person_id = $8))
             AND ($9::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id
                  AND (f.author_token_id = $9 OR (f.author_kind IS NULL AND f.author = $10::text))))
             ORDER BY "#
                + $key
                + r#" DESC, g.id DESC LIMIT $11 OFFSET $12"#,
            $states,
            $f.project.as_deref(),
            $f.category.map(Category::as_str),
            $f.has_fix,
            $f.assignee.as_deref(),
            $f.assignee_person,
            $f.assignee_token.as_deref(),
            $f.fixed_by_person,
            $f.fixed_by_token.as_ref().map(|(id, _)| *id),
            $f.fixed_by_token.as_ref().map(|(_, name)| name.as_str()),
            $limit,
            $offset,
        )
        .fetch_all($ex)
        .await?
    };
}

/// One page of the groups that pass `filter`, in `sort` order.
pub async fn list_groups(
    ex: impl PgExecutor<'_>,
    filter: &GroupFilter,
    sort: GroupSort,
    limit: i64,
    offset: i64,
) -> Result<Vec<ListedGroup>, DbError> {
    let states = filter.state_names();
    let states = states.as_deref();
    let rows = match sort {
        GroupSort::LastSeen => list_groups_by!(
            "coalesce(s.last_seen, g.first_seen)",
            ex,
            filter,
            states,
            limit,
            offset
        ),
        GroupSort::Count => list_groups_by!("s.report_count", ex, filter, states, limit, offset),
        GroupSort::FirstSeen => {
            list_groups_by!("g.first_seen", ex, filter, states, limit, offset)
        }
    };
    Ok(rows.into_iter().map(ListedGroup::from).collect())
}

/// How many groups pass `filter` (the filter of [`list_groups`]: merged groups are never
/// listed).
pub async fn count_groups(ex: impl PgExecutor<'_>, filter: &GroupFilter) -> Result<i64, DbError> {
    let states = filter.state_names();
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM groups g
         WHERE g.merged_into IS NULL AND ($1::text[] IS NULL OR g.state = ANY($1))
         AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM reports r
              WHERE lower(r.project) = lower($2) AND r.group_id = g.id)
              OR EXISTS (SELECT 1 FROM group_expired_reports e
              WHERE lower(e.project) = lower($2) AND e.group_id = g.id))
         AND ($3::text IS NULL OR g.category = $3)
         AND ($4::bool IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) = $4)
         AND ($5::text IS NULL OR g.assignee = $5)
         AND ($6::int8 IS NULL OR g.assignee_person_id = $6)
         AND ($7::text IS NULL OR (g.assignee = $7 AND g.assignee_person_id IS NULL))
         AND ($8::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f
              WHERE f.group_id = g.id AND f.author_person_id = $8))
         AND ($9::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id
              AND (f.author_token_id = $9 OR (f.author_kind IS NULL AND f.author = $10::text))))"#,
        states.as_deref(),
        filter.project.as_deref(),
        filter.category.map(Category::as_str),
        filter.has_fix,
        filter.assignee.as_deref(),
        filter.assignee_person,
        filter.assignee_token.as_deref(),
        filter.fixed_by_person,
        filter.fixed_by_token.as_ref().map(|(id, _)| *id),
        filter
            .fixed_by_token
            .as_ref()
            .map(|(_, name)| name.as_str()),
    )
    .fetch_one(ex)
    .await?)
}
