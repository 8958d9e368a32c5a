//! Triage of groups in SQL (issue 18 items 4 and 5): the state, assignee and history columns
//! of migration 0017, the filtered and sorted group list, the tag breakdowns of a group's
//! reports, and the facts the regression rule needs (is the group resolved, which build the new
//! report comes from, when a project first saw a commit). Policy lives in
//! `app::group_triage`; these statements only read and write.

use sqlx::{PgConnection, PgExecutor, Row};

use super::DbError;
use super::groups::{GROUP_COLUMNS, GROUP_STATS, Group};
use crate::actor::Actor;
use crate::api_types::{GroupAction, GroupEvent, GroupState, GroupTags, TagCount};
use crate::rules::Category;
use crate::time::Timestamp;

/// A group's triage columns.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Triage {
    pub state: GroupState,
    /// The commit or version a resolution names; empty when none.
    pub resolved_in: String,
    /// The assignee's name (a person's or a token's); empty for nobody.
    pub assignee: String,
    /// The assigned person, when the assignee is one (migration 0027).
    pub assignee_person_id: Option<i64>,
    /// An ignored group's reports still to come before it reopens (migration 0031); `None`:
    /// ignored for good, or not ignored.
    pub ignore_reports_left: Option<i32>,
    #[sqlx(rename = "state_changed")]
    pub state_changed_at: Timestamp,
}

const TRIAGE_COLUMNS: &str = concat!(
    "g.state, g.resolved_in, g.assignee, g.assignee_person_id, g.ignore_reports_left, ",
    "g.state_changed_at",
    " AS state_changed"
);

/// A line of the group list: the group, its triage, whether a fix is recorded, and what tells
/// it apart from look-alikes (read apart, by [`super::group_facets::facets`]).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ListedGroup {
    #[sqlx(flatten)]
    pub group: Group,
    #[sqlx(flatten)]
    pub triage: Triage,
    pub has_fix: bool,
    #[sqlx(skip)]
    pub facets: super::group_facets::Facets,
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

impl GroupSort {
    /// The `ORDER BY` key: chosen from this enum, never from request text (SECURITY.md item 6).
    fn key(self) -> &'static str {
        match self {
            GroupSort::LastSeen => "coalesce(s.last_seen, g.first_seen)",
            GroupSort::Count => "s.report_count",
            GroupSort::FirstSeen => "g.first_seen",
        }
    }
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

/// Merged groups are never listed: their reports, fixes and history are their targets'.
const FILTER: &str = "g.merged_into IS NULL AND ($1::text[] IS NULL OR g.state = ANY($1)) \
     AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM reports r \
          WHERE lower(r.project) = lower($2) AND r.group_id = g.id) \
          OR EXISTS (SELECT 1 FROM group_expired_reports e \
          WHERE lower(e.project) = lower($2) AND e.group_id = g.id)) \
     AND ($3::text IS NULL OR g.category = $3) \
     AND ($4::bool IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) = $4) \
     AND ($5::text IS NULL OR g.assignee = $5) \
     AND ($6::int8 IS NULL OR g.assignee_person_id = $6) \
     AND ($7::text IS NULL OR (g.assignee = $7 AND g.assignee_person_id IS NULL)) \
     AND ($8::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f \
          WHERE f.group_id = g.id AND f.author_person_id = $8)) \
     AND ($9::int8 IS NULL OR EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id \
          AND (f.author_token_id = $9 OR (f.author_kind IS NULL AND f.author = $10::text))))";

/// Binds [`FILTER`]'s `$1`-`$10`.
macro_rules! bind_filter {
    ($query:expr, $f:expr) => {
        $query
            .bind(
                (!$f.states.is_empty())
                    .then(|| $f.states.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
            )
            .bind(&$f.project)
            .bind($f.category.map(Category::as_str))
            .bind($f.has_fix)
            .bind(&$f.assignee)
            .bind($f.assignee_person)
            .bind(&$f.assignee_token)
            .bind($f.fixed_by_person)
            .bind($f.fixed_by_token.as_ref().map(|(id, _)| *id))
            .bind($f.fixed_by_token.as_ref().map(|(_, name)| name.as_str()))
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
    let sql = format!(
        "SELECT {GROUP_COLUMNS}, {TRIAGE_COLUMNS}, \
             EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) AS has_fix \
         FROM groups g {GROUP_STATS} WHERE {FILTER} \
         ORDER BY {} DESC, g.id DESC LIMIT $11 OFFSET $12",
        sort.key()
    );
    let rows = bind_filter!(sqlx::query(sqlx::AssertSqlSafe(sql)), filter)
        .bind(limit)
        .bind(offset)
        .fetch_all(ex)
        .await?;
    rows.iter()
        .map(|row| Ok(sqlx::FromRow::from_row(row)?))
        .collect()
}

/// How many groups pass `filter`.
pub async fn count_groups(ex: impl PgExecutor<'_>, filter: &GroupFilter) -> Result<i64, DbError> {
    let sql = format!("SELECT count(*) FROM groups g WHERE {FILTER}");
    Ok(
        bind_filter!(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)), filter)
            .fetch_one(ex)
            .await?,
    )
}

/// Group `id`'s triage columns.
pub async fn get_triage(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Triage>, DbError> {
    let sql = format!("SELECT {TRIAGE_COLUMNS} FROM groups g WHERE g.id = $1");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(ex)
        .await?)
}

/// Group `id`'s triage columns, its row locked until the transaction ends (a change is read,
/// decided and written without another change or a regression in between).
pub async fn lock_triage(tx: &mut PgConnection, id: i64) -> Result<Option<Triage>, DbError> {
    let sql = format!("SELECT {TRIAGE_COLUMNS} FROM groups g WHERE g.id = $1 FOR NO KEY UPDATE");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(tx)
        .await?)
}

/// The moment of a change to a group, to the microsecond: what its history entries and the
/// group's state change time record. Read with [`change_moment`] once the row is locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(i64);

/// SQL for a bound [`Moment`] as a `timestamptz`. Exact: the microseconds are below 2^53, so
/// the multiplication's `float8` holds them whole (a float of seconds would not).
macro_rules! moment_sql {
    ($param:literal) => {
        concat!(
            "('epoch'::timestamptz + ",
            $param,
            " * interval '1 microsecond')"
        )
    };
}

/// The moment of a change to group `id`, to read after its row is locked: the clock now, or the
/// moment of the group's newest history entry when the clock reads earlier (set back). Not
/// `now()`, which is when the transaction began: a change that began first but waited for the
/// lock would be dated before the change it waited for. So the history's order (moment, then
/// id, both drawn under the lock) is the order in which changes took the lock: a chain.
pub async fn change_moment(tx: &mut PgConnection, id: i64) -> Result<Moment, DbError> {
    let micros: i64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM greatest(clock_timestamp(), \
             (SELECT max(at) FROM group_events WHERE group_id = $1))) * 1000000)::int8",
    )
    .bind(id)
    .fetch_one(tx)
    .await?;
    Ok(Moment(micros))
}

/// Writes group `id`'s triage columns; a `state_changed` moment stamps the state's change time.
pub async fn set_triage(
    ex: impl PgExecutor<'_>,
    id: i64,
    triage: &Triage,
    state_changed: Option<Moment>,
) -> Result<(), DbError> {
    sqlx::query(concat!(
        "UPDATE groups SET state = $2, resolved_in = $3, assignee = $4, \
             assignee_person_id = $6, ignore_reports_left = $7, state_changed_at = coalesce(",
        moment_sql!("$5"),
        ", state_changed_at) WHERE id = $1"
    ))
    .bind(id)
    .bind(triage.state)
    .bind(&triage.resolved_in)
    .bind(&triage.assignee)
    .bind(state_changed.map(|m| m.0))
    .bind(triage.assignee_person_id)
    .bind(triage.ignore_reports_left)
    .execute(ex)
    .await?;
    Ok(())
}

/// Sets group `id`'s state alone, changed at `at`.
pub async fn set_state(
    ex: impl PgExecutor<'_>,
    id: i64,
    state: GroupState,
    at: Moment,
) -> Result<(), DbError> {
    sqlx::query(concat!(
        "UPDATE groups SET state = $2, state_changed_at = ",
        moment_sql!("$3"),
        " WHERE id = $1"
    ))
    .bind(id)
    .bind(state)
    .bind(at.0)
    .execute(ex)
    .await?;
    Ok(())
}

/// An entry to add to a group's history.
#[derive(Clone, Debug)]
pub struct NewEvent<'a> {
    pub group_id: i64,
    /// The change's moment, shared by the entries it writes.
    pub at: Moment,
    pub actor: &'a Actor,
    pub action: GroupAction,
    pub from: &'a str,
    pub to: &'a str,
    pub detail: &'a str,
    pub report_id: Option<i64>,
}

/// Adds an entry to a group's history.
pub async fn insert_event(ex: impl PgExecutor<'_>, e: &NewEvent<'_>) -> Result<(), DbError> {
    sqlx::query(concat!(
        "INSERT INTO group_events (group_id, actor, action, from_value, to_value, detail, \
             report_id, at, actor_kind, actor_person_id, actor_token_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, ",
        moment_sql!("$8"),
        ", $9, $10, $11)"
    ))
    .bind(e.group_id)
    .bind(e.actor.name())
    .bind(e.action)
    .bind(e.from)
    .bind(e.to)
    .bind(e.detail)
    .bind(e.report_id)
    .bind(e.at.0)
    .bind(e.actor.kind())
    .bind(e.actor.person_id())
    .bind(e.actor.token_id())
    .execute(ex)
    .await?;
    Ok(())
}

/// Group `id`'s newest `limit` history entries, newest first: by moment, then in the order
/// written (see [`change_moment`]).
pub async fn group_events(
    ex: impl PgExecutor<'_>,
    id: i64,
    limit: i64,
) -> Result<Vec<GroupEvent>, DbError> {
    let rows = sqlx::query(concat!(
        "SELECT id, ",
        "at",
        " AS at_s, actor, actor_kind, actor_person_id, action, from_value, to_value, detail, \
             report_id, merged_from \
         FROM group_events WHERE group_id = $1 ORDER BY at DESC, id DESC LIMIT $2"
    ))
    .bind(id)
    .bind(limit)
    .fetch_all(ex)
    .await?;
    rows.iter()
        .map(|r| {
            let actor = super::types::recorded(r, "actor")?;
            Ok(GroupEvent {
                id: r.try_get("id")?,
                at: r.try_get("at_s")?,
                actor: actor.name,
                actor_kind: actor.kind,
                actor_person_id: actor.person_id,
                action: r.try_get("action")?,
                from: r.try_get("from_value")?,
                to: r.try_get("to_value")?,
                detail: r.try_get("detail")?,
                report_id: r.try_get("report_id")?,
                merged_from: r.try_get("merged_from")?,
            })
        })
        .collect()
}

/// Group `id`'s reports counted by project, branch, environment, GPU, driver, CUDA and torch
/// version: the ten most frequent values of each, most frequent first. The environment counts
/// only as a short single-line label (`staging`, `ci-a100`). GPU and versions are the failing
/// upload's (issue 39 item 7): the log's facts, else the `collect_env` output the upload was
/// sent with, never the worker that reproduced it (a CPU worker's "cpu" and its own torch say
/// nothing about where the failure happens). Reports retention deleted still count by project
/// (migration 0020 keeps their number per project); their other tags went with them.
pub async fn group_tags(ex: impl PgExecutor<'_>, id: i64) -> Result<GroupTags, DbError> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "WITH r AS ( \
             SELECT r.project, r.branch, \
                 CASE WHEN length(btrim(r.environment)) <= 100 \
                       AND strpos(btrim(r.environment), E'\\n') = 0 \
                      THEN btrim(r.environment) END AS environment, \
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'gpu'), ''), \
                     nullif(btrim(substring(r.environment \
                         FROM 'GPU models and configuration: (?:GPU 0: )?([^\\n(]{1,100})')), ''), \
                     nullif(btrim(substring(r.environment FROM 'GPU 0: ([^\\n(]{1,100})')), '')) \
                     AS gpu, \
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'driver_version'), ''), \
                     substring(r.environment FROM '(?:Nvidia|NVIDIA) driver version: (\\S{1,60})'), \
                     substring(r.environment FROM 'Driver Version: (\\S{1,60})')) \
                     AS driver_version, \
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'cuda_version'), ''), \
                     substring(r.environment FROM 'CUDA used to build PyTorch: ([0-9]\\S{0,59})')) \
                     AS cuda_version, \
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'torch_version'), ''), \
                     substring(r.environment FROM 'PyTorch version: (\\S{1,60})')) \
                     AS torch_version, \
                 1::int8 AS n \
             FROM reports r \
             WHERE r.group_id = $1 \
             UNION ALL \
             SELECT e.project, NULL, NULL, NULL, NULL, NULL, NULL, e.reports \
             FROM group_expired_reports e WHERE e.group_id = $1), \
         counted AS ( \
             SELECT v.tag, left(v.value, 200) AS value, sum(r.n)::int8 AS n, \
                 row_number() OVER (PARTITION BY v.tag \
                     ORDER BY sum(r.n) DESC, left(v.value, 200)) AS rank \
             FROM r CROSS JOIN LATERAL (VALUES ('project', r.project), ('branch', r.branch), \
                 ('environment', r.environment), ('gpu', r.gpu), \
                 ('driver_version', r.driver_version), ('cuda_version', r.cuda_version), \
                 ('torch_version', r.torch_version)) v(tag, value) \
             WHERE btrim(v.value) <> '' \
             GROUP BY v.tag, left(v.value, 200)) \
         SELECT tag, value, n FROM counted WHERE rank <= 10 ORDER BY tag, rank",
    )
    .bind(id)
    .fetch_all(ex)
    .await?;
    let mut tags = GroupTags::default();
    for (tag, value, count) in rows {
        if let Some(slot) = tags.slot(&tag) {
            slot.push(TagCount { value, count });
        }
    }
    Ok(tags)
}

/// A resolved group, as the regression rule reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub resolved_in: String,
    /// When it was resolved, in microseconds since the epoch.
    pub resolved_at_us: i64,
}

/// A group that a new report may change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// Resolved: the report may be a regression.
    Resolved(Resolved),
    /// Ignored until this many more reports arrive (at least 1).
    IgnoredFor(i32),
}

/// Group `id` when a new report may change it (resolved, or ignored until more reports), its
/// row then locked until the transaction ends (so that two uploads do not both reopen it or
/// count the same report, and a triage change waits); `None`, locking nothing, in any other
/// state.
pub async fn lock_if_watched(tx: &mut PgConnection, id: i64) -> Result<Option<Watched>, DbError> {
    let row = sqlx::query(
        "SELECT state, resolved_in, ignore_reports_left, \
             (extract(epoch FROM state_changed_at) * 1000000)::int8 AS at \
         FROM groups WHERE id = $1 \
           AND (state = 'resolved' OR (state = 'ignored' AND ignore_reports_left IS NOT NULL)) \
         FOR NO KEY UPDATE",
    )
    .bind(id)
    .fetch_optional(tx)
    .await?;
    let Some(r) = row else {
        return Ok(None);
    };
    let left: Option<i32> = r.try_get("ignore_reports_left")?;
    Ok(Some(match left {
        Some(n) => Watched::IgnoredFor(n),
        None => Watched::Resolved(Resolved {
            resolved_in: r.try_get("resolved_in")?,
            resolved_at_us: r.try_get("at")?,
        }),
    }))
}

/// Counts down an ignored group's reports to come: `left` is the new number (at least 1).
pub async fn set_ignore_left(ex: impl PgExecutor<'_>, id: i64, left: i32) -> Result<(), DbError> {
    sqlx::query("UPDATE groups SET ignore_reports_left = $2 WHERE id = $1")
        .bind(id)
        .bind(left)
        .execute(ex)
        .await?;
    Ok(())
}

/// Reopens an ignored group (its last awaited report arrived), changed at `at`.
pub async fn reopen_ignored(ex: impl PgExecutor<'_>, id: i64, at: Moment) -> Result<(), DbError> {
    sqlx::query(concat!(
        "UPDATE groups SET state = 'open', ignore_reports_left = NULL, state_changed_at = ",
        moment_sql!("$2"),
        " WHERE id = $1"
    ))
    .bind(id)
    .bind(at.0)
    .execute(ex)
    .await?;
    Ok(())
}

/// The newest entry of group `id`'s history that records a change of it (a report from an
/// older build is none), or `None`.
pub async fn latest_change_event(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT max(id) FROM group_events WHERE group_id = $1 AND action <> 'older_build'",
    )
    .bind(id)
    .fetch_one(ex)
    .await?)
}

/// Of `ids`, those that name no group, ascending.
pub async fn missing_groups(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT i FROM unnest($1::int8[]) i WHERE NOT EXISTS (SELECT 1 FROM groups g WHERE g.id = i) \
         ORDER BY i",
    )
    .bind(ids)
    .fetch_all(ex)
    .await?)
}

/// Which build a stored report comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportBuild {
    pub project: String,
    pub commit: String,
    pub version: String,
    /// When it was stored, in microseconds since the epoch.
    pub created_at_us: i64,
}

/// The build of report `id`.
pub async fn report_build(
    ex: impl PgExecutor<'_>,
    id: i64,
) -> Result<Option<ReportBuild>, DbError> {
    let row = sqlx::query(
        "SELECT project, commit_sha, version, \
             (extract(epoch FROM created_at) * 1000000)::int8 AS at \
         FROM reports WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(ex)
    .await?;
    row.map(|r| {
        Ok(ReportBuild {
            project: r.try_get("project")?,
            commit: r.try_get("commit_sha")?,
            version: r.try_get("version")?,
            created_at_us: r.try_get("at")?,
        })
    })
    .transpose()
}

/// When `project` first saw `commit` (lowercase hex; a stored commit matches when one is a
/// prefix of the other, abbreviated hashes included), in microseconds since the epoch, not
/// counting report `except`; `None` when it never did. The commits of reports retention deleted
/// count with the time they were first seen (migration 0020).
pub async fn commit_first_seen(
    ex: impl PgExecutor<'_>,
    project: &str,
    commit: &str,
    except: i64,
) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar(
        "SELECT (extract(epoch FROM min(at)) * 1000000)::int8 FROM ( \
             (SELECT created_at AS at FROM reports \
              WHERE project = $1 AND commit_sha <> '' AND id <> $3 \
                AND (starts_with(lower(btrim(commit_sha)), $2) \
                     OR (length(btrim(commit_sha)) >= 7 \
                         AND starts_with($2, lower(btrim(commit_sha))))) \
              ORDER BY created_at LIMIT 1) \
             UNION ALL \
             SELECT min(first_seen) FROM expired_commits \
             WHERE project = $1 \
               AND (starts_with(commit_sha, $2) \
                    OR (length(commit_sha) >= 7 AND starts_with($2, commit_sha)))) s",
    )
    .bind(project)
    .bind(commit)
    .bind(except)
    .fetch_one(ex)
    .await?)
}
