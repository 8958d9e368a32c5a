//! Triage of groups in SQL (issue 18 items 4 and 5): the state, assignee and history columns
//! of migration 0017 (the filtered and sorted group list is in [`super::group_list`]), the tag
//! breakdowns of a group's
//! reports, and the facts the regression rule needs (is the group resolved, which build the new
//! report comes from, when a project first saw a commit). Policy lives in
//! `app::group_triage`; these statements only read and write.

use sqlx::{PgConnection, PgExecutor};

use super::DbError;
use crate::actor::{Actor, ActorKind};
use crate::api_types::{GroupAction, GroupEvent, GroupState, GroupTags, TagCount};
use crate::time::Timestamp;

/// A group's triage columns.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    pub state_changed_at: Timestamp,
}

/// Group `id`'s triage columns.
pub async fn get_triage(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<Triage>, DbError> {
    Ok(sqlx::query_as!(
        Triage,
        r#"SELECT g.state AS "state: GroupState", g.resolved_in, g.assignee, g.assignee_person_id,
             g.ignore_reports_left, g.state_changed_at AS "state_changed_at: Timestamp"
         FROM groups g WHERE g.id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// Group `id`'s triage columns, its row locked until the transaction ends (a change is read,
/// decided and written without another change or a regression in between).
pub async fn lock_triage(tx: &mut PgConnection, id: i64) -> Result<Option<Triage>, DbError> {
    Ok(sqlx::query_as!(
        Triage,
        r#"SELECT g.state AS "state: GroupState", g.resolved_in, g.assignee, g.assignee_person_id,
             g.ignore_reports_left, g.state_changed_at AS "state_changed_at: Timestamp"
         FROM groups g WHERE g.id = $1 FOR NO KEY UPDATE"#,
        id
    )
    .fetch_optional(tx)
    .await?)
}

/// Makes the transaction `tx` has just begun a read-only snapshot (repeatable read): its
/// statements all see the database as it was at the first of them, so a page of groups, its
/// facets and the total agree. Before any other statement of the transaction.
pub async fn read_only_snapshot(tx: &mut PgConnection) -> Result<(), DbError> {
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(tx)
        .await?;
    Ok(())
}

/// The moment of a change to a group, to the microsecond: what its history entries and the
/// group's state change time record. Read with [`change_moment`] once the row is locked.
///
/// A statement writes a bound moment `$n` as the `timestamptz`
/// `('epoch'::timestamptz + $n::int8 * interval '1 microsecond')`. Exact: the microseconds are
/// below 2^53, so the multiplication's `float8` holds them whole (a float of seconds would not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(i64);

/// The moment of a change to group `id`, to read after its row is locked: the clock now, or the
/// moment of the group's newest history entry when the clock reads earlier (set back). Not
/// `now()`, which is when the transaction began: a change that began first but waited for the
/// lock would be dated before the change it waited for. So the history's order (moment, then
/// id, both drawn under the lock) is the order in which changes took the lock: a chain.
pub async fn change_moment(tx: &mut PgConnection, id: i64) -> Result<Moment, DbError> {
    let micros = sqlx::query_scalar!(
        r#"SELECT (extract(epoch FROM greatest(clock_timestamp(),
             (SELECT max(at) FROM group_events WHERE group_id = $1))) * 1000000)::int8 AS "micros!""#,
        id
    )
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
    sqlx::query!(
        "UPDATE groups SET state = $2, resolved_in = $3, assignee = $4,
             assignee_person_id = $6, ignore_reports_left = $7,
             state_changed_at = coalesce(('epoch'::timestamptz + $5::int8 * interval '1 microsecond'),
                 state_changed_at)
         WHERE id = $1",
        id,
        triage.state.as_str(),
        triage.resolved_in,
        triage.assignee,
        state_changed.map(|m| m.0),
        triage.assignee_person_id,
        triage.ignore_reports_left,
    )
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
    sqlx::query!(
        "UPDATE groups SET state = $2,
             state_changed_at = ('epoch'::timestamptz + $3::int8 * interval '1 microsecond')
         WHERE id = $1",
        id,
        state.as_str(),
        at.0,
    )
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
    sqlx::query!(
        "INSERT INTO group_events (group_id, actor, action, from_value, to_value, detail,
             report_id, at, actor_kind, actor_person_id, actor_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7,
             ('epoch'::timestamptz + $8::int8 * interval '1 microsecond'), $9, $10, $11)",
        e.group_id,
        e.actor.name(),
        e.action.as_str(),
        e.from,
        e.to,
        e.detail,
        e.report_id,
        e.at.0,
        e.actor.kind().as_str(),
        e.actor.person_id(),
        e.actor.token_id(),
    )
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
    Ok(sqlx::query_as!(
        GroupEvent,
        r#"SELECT id, at AS "at: Timestamp", actor, actor_kind AS "actor_kind: ActorKind",
             actor_person_id, action AS "action: GroupAction", from_value AS "from",
             to_value AS "to", detail, report_id, merged_from
         FROM group_events WHERE group_id = $1 ORDER BY at DESC, id DESC LIMIT $2"#,
        id,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Group `id`'s reports counted by project, branch, environment, GPU, driver, CUDA and torch
/// version: the ten most frequent values of each, most frequent first. The environment counts
/// only as a short single-line label (`staging`, `ci-a100`). GPU and versions are the failing
/// upload's (issue 39 item 7): the log's facts, else the `collect_env` output the upload was
/// sent with, never the worker that reproduced it (a CPU worker's "cpu" and its own torch say
/// nothing about where the failure happens). Reports retention deleted still count by project
/// (migration 0020 keeps their number per project); their other tags went with them.
pub async fn group_tags(ex: impl PgExecutor<'_>, id: i64) -> Result<GroupTags, DbError> {
    let rows = sqlx::query!(
        r#"WITH r AS (
             SELECT r.project, r.branch,
                 CASE WHEN length(btrim(r.environment)) <= 100
                       AND strpos(btrim(r.environment), E'\n') = 0
                      THEN btrim(r.environment) END AS environment,
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'gpu'), ''),
                     nullif(btrim(substring(r.environment
                         FROM 'GPU models and configuration: (?:GPU 0: )?([^\n(]{1,100})')), ''),
                     nullif(btrim(substring(r.environment FROM 'GPU 0: ([^\n(]{1,100})')), ''))
                     AS gpu,
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'driver_version'), ''),
                     substring(r.environment FROM '(?:Nvidia|NVIDIA) driver version: (\S{1,60})'),
                     substring(r.environment FROM 'Driver Version: (\S{1,60})'))
                     AS driver_version,
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'cuda_version'), ''),
                     substring(r.environment FROM 'CUDA used to build PyTorch: ([0-9]\S{0,59})'))
                     AS cuda_version,
                 coalesce(nullif(btrim(r.classification -> 'facts' ->> 'torch_version'), ''),
                     substring(r.environment FROM 'PyTorch version: (\S{1,60})'))
                     AS torch_version,
                 1::int8 AS n
             FROM reports r
             WHERE r.group_id = $1
             UNION ALL
             SELECT e.project, NULL, NULL, NULL, NULL, NULL, NULL, e.reports
             FROM group_expired_reports e WHERE e.group_id = $1),
         counted AS (
             SELECT v.tag, left(v.value, 200) AS value, sum(r.n)::int8 AS n,
                 row_number() OVER (PARTITION BY v.tag
                     ORDER BY sum(r.n) DESC, left(v.value, 200)) AS rank
             FROM r CROSS JOIN LATERAL (VALUES ('project', r.project), ('branch', r.branch),
                 ('environment', r.environment), ('gpu', r.gpu),
                 ('driver_version', r.driver_version), ('cuda_version', r.cuda_version),
                 ('torch_version', r.torch_version)) v(tag, value)
             WHERE btrim(v.value) <> ''
             GROUP BY v.tag, left(v.value, 200))
         SELECT tag AS "tag!", value AS "value!", n AS "n!" FROM counted WHERE rank <= 10
         ORDER BY tag, rank"#,
        id
    )
    .fetch_all(ex)
    .await?;
    let mut tags = GroupTags::default();
    for row in rows {
        if let Some(slot) = tags.slot(&row.tag) {
            slot.push(TagCount {
                value: row.value,
                count: row.n,
            });
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
    let row = sqlx::query!(
        r#"SELECT state, resolved_in, ignore_reports_left,
             (extract(epoch FROM state_changed_at) * 1000000)::int8 AS "at!"
         FROM groups WHERE id = $1
           AND (state = 'resolved' OR (state = 'ignored' AND ignore_reports_left IS NOT NULL))
         FOR NO KEY UPDATE"#,
        id
    )
    .fetch_optional(tx)
    .await?;
    let Some(r) = row else {
        return Ok(None);
    };
    Ok(Some(match r.ignore_reports_left {
        Some(n) => Watched::IgnoredFor(n),
        None => Watched::Resolved(Resolved {
            resolved_in: r.resolved_in,
            resolved_at_us: r.at,
        }),
    }))
}

/// Counts down an ignored group's reports to come: `left` is the new number (at least 1).
pub async fn set_ignore_left(ex: impl PgExecutor<'_>, id: i64, left: i32) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE groups SET ignore_reports_left = $2 WHERE id = $1",
        id,
        left
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Reopens an ignored group (its last awaited report arrived), changed at `at`.
pub async fn reopen_ignored(ex: impl PgExecutor<'_>, id: i64, at: Moment) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE groups SET state = 'open', ignore_reports_left = NULL,
             state_changed_at = ('epoch'::timestamptz + $2::int8 * interval '1 microsecond')
         WHERE id = $1",
        id,
        at.0
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// The newest entry of group `id`'s history that records a change of it (a report from an
/// older build is none), or `None`.
pub async fn latest_change_event(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT max(id) AS "max?" FROM group_events
         WHERE group_id = $1 AND action <> 'older_build'"#,
        id
    )
    .fetch_one(ex)
    .await?)
}

/// Of `ids`, those that name no group, ascending.
pub async fn missing_groups(ex: impl PgExecutor<'_>, ids: &[i64]) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT i AS "i!" FROM unnest($1::int8[]) i
         WHERE NOT EXISTS (SELECT 1 FROM groups g WHERE g.id = i)
         ORDER BY i"#,
        ids
    )
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
    Ok(sqlx::query_as!(
        ReportBuild,
        r#"SELECT project, commit_sha AS commit, version,
             (extract(epoch FROM created_at) * 1000000)::int8 AS "created_at_us!"
         FROM reports WHERE id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
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
    Ok(sqlx::query_scalar!(
        r#"SELECT (extract(epoch FROM min(at)) * 1000000)::int8 AS "first_seen?" FROM (
             (SELECT created_at AS at FROM reports
              WHERE project = $1 AND commit_sha <> '' AND id <> $3
                AND (starts_with(lower(btrim(commit_sha)), $2)
                     OR (length(btrim(commit_sha)) >= 7
                         AND starts_with($2, lower(btrim(commit_sha)))))
              ORDER BY created_at LIMIT 1)
             UNION ALL
             SELECT min(first_seen) FROM expired_commits
             WHERE project = $1
               AND (starts_with(commit_sha, $2)
                    OR (length(commit_sha) >= 7 AND starts_with($2, commit_sha)))) s"#,
        project,
        commit,
        except
    )
    .fetch_one(ex)
    .await?)
}
