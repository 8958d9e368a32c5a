//! Re-running the current rules over stored reports (the portal's "Reclassify"): the run's
//! progress row, the reports read in id order, and the per-report update that moves a report to
//! the group of its new fingerprint while keeping every group's count equal to its reports.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};

use super::reports::Headline;
use super::{Db, DbError};
use crate::actor::{Actor, ActorKind};
use crate::rules::Classification;
use crate::time::Timestamp;

/// A running run whose row was not touched for this long is taken as interrupted (its server
/// stopped), so a new run may start.
const STALE_SECS: i32 = 120;

/// Where a reclassification run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Running,
    Done,
    Failed,
    /// Its server stopped before it finished.
    Interrupted,
}

impl RunState {
    /// The `reclassify_runs.state` spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Failed => "failed",
            RunState::Interrupted => "interrupted",
        }
    }

    /// The state spelled `s`.
    #[must_use]
    pub fn parse(s: &str) -> Option<RunState> {
        [
            RunState::Running,
            RunState::Done,
            RunState::Failed,
            RunState::Interrupted,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }

    /// Whether the run is still going.
    #[must_use]
    pub fn is_running(self) -> bool {
        self == RunState::Running
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reclassification run.
#[derive(Clone, Debug)]
pub struct ReclassifyRun {
    pub id: i64,
    pub state: RunState,
    pub ruleset_version: i64,
    pub total: i64,
    pub done: i64,
    pub changed: i64,
    pub regrouped: i64,
    /// Who started it (its name then).
    pub started_by: String,
    /// `person`, `token` or `service`; `None` for runs started before actors were typed.
    pub started_by_kind: Option<ActorKind>,
    pub error: String,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
}

/// A report's new classification, as columns (see `reports::NewReport`).
#[derive(Clone, Debug)]
pub struct Reclassified {
    pub headline: Headline,
    pub classification: Classification,
    /// The new search document and its vocabulary words (sorted).
    pub search: super::search::Document,
    pub search_words: Vec<String>,
    /// For a report uploaded as a run: the run's story told again over its files (its first
    /// failure is the headline above), stored in place of the old one.
    pub story: Option<crate::rules::run::RunStory>,
}

/// What updating one report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The report is gone (deleted meanwhile).
    Missing,
    /// Same classification as stored.
    Unchanged,
    /// Classification changed, same group.
    Changed,
    /// Classification and fingerprint changed: moved to another group.
    Regrouped,
}

/// Starts a run over `total` reports in the caller's transaction, unless one is already running
/// (then `None`: the caller rolls back). A running run that stopped reporting progress is marked
/// interrupted first. Concurrent starts serialise on a transaction-scoped advisory lock.
pub async fn start_run(
    tx: &mut PgConnection,
    ruleset_version: i64,
    actor: &Actor,
) -> Result<Option<ReclassifyRun>, DbError> {
    sqlx::query!(
        r#"SELECT pg_advisory_xact_lock(hashtextextended('gpu_triage_reclassify', 4))
             AS "locked: ()""#
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE reclassify_runs SET state = 'interrupted', finished_at = now(), \
             error = 'the server running it stopped' \
         WHERE state = 'running' AND updated_at < now() - make_interval(secs => $1::int4)",
        STALE_SECS
    )
    .execute(&mut *tx)
    .await?;
    let busy = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM reclassify_runs WHERE state = 'running') AS "busy!""#
    )
    .fetch_one(&mut *tx)
    .await?;
    if busy {
        return Ok(None);
    }
    let id = sqlx::query_scalar!(
        "INSERT INTO reclassify_runs (ruleset_version, total, started_by, started_by_kind, \
             started_by_person_id, started_by_token_id) \
         SELECT $1, count(*), $2, $3, $4, $5 FROM reports WHERE log_removed_at IS NULL \
         RETURNING id",
        ruleset_version,
        actor.name(),
        actor.kind().as_str(),
        actor.person_id(),
        actor.token_id()
    )
    .fetch_one(&mut *tx)
    .await?;
    get_run(&mut *tx, id).await
}

/// One run.
pub async fn get_run(ex: impl PgExecutor<'_>, id: i64) -> Result<Option<ReclassifyRun>, DbError> {
    Ok(sqlx::query_as!(
        ReclassifyRun,
        r#"SELECT id, state AS "state: RunState", ruleset_version, total, done, changed, regrouped,
             started_by, started_by_kind AS "started_by_kind: ActorKind", error,
             started_at AS "started_at: Timestamp", finished_at AS "finished_at: Timestamp"
         FROM reclassify_runs WHERE id = $1"#,
        id
    )
    .fetch_optional(ex)
    .await?)
}

/// The newest runs.
pub async fn recent_runs(
    ex: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<ReclassifyRun>, DbError> {
    Ok(sqlx::query_as!(
        ReclassifyRun,
        r#"SELECT id, state AS "state: RunState", ruleset_version, total, done, changed, regrouped,
             started_by, started_by_kind AS "started_by_kind: ActorKind", error,
             started_at AS "started_at: Timestamp", finished_at AS "finished_at: Timestamp"
         FROM reclassify_runs ORDER BY id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// Records progress (totals so far).
pub async fn record_progress(
    ex: impl PgExecutor<'_>,
    run: &ReclassifyRun,
    done: i64,
    changed: i64,
    regrouped: i64,
) -> Result<(), DbError> {
    sqlx::query!(
        "UPDATE reclassify_runs SET done = $2, changed = $3, regrouped = $4, \
             total = GREATEST(total, $2), updated_at = now() WHERE id = $1",
        run.id,
        done,
        changed,
        regrouped
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// Ends a run as `done` or `failed` (with the reason).
pub async fn finish_run(
    ex: impl PgExecutor<'_>,
    run: &ReclassifyRun,
    failed: Option<&str>,
) -> Result<(), DbError> {
    let state = if failed.is_some() {
        RunState::Failed
    } else {
        RunState::Done
    };
    sqlx::query!(
        "UPDATE reclassify_runs SET state = $2, error = $3, finished_at = now(), \
             updated_at = now() WHERE id = $1",
        run.id,
        state.as_str(),
        failed.unwrap_or("")
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// A stored report as reclassification reads it.
#[derive(Clone, Debug)]
pub struct StoredLog {
    pub id: i64,
    pub filename: String,
    pub project: String,
    pub branch: String,
    pub commit_sha: String,
    pub job_url: String,
    /// The scrubbed log, gzip-compressed (several members: decode with `MultiGzDecoder`).
    pub log_gz: Vec<u8>,
    /// For a report uploaded as a run (migration 0043): its story as stored, which says where
    /// each file lies in the joined log.
    pub story: Option<Json<serde_json::Value>>,
}

/// The next reports after `after_id` that still have their log, in id order (a report whose log
/// retention removed keeps the classification it has: there is nothing to read again).
pub async fn next_reports(db: &Db, after_id: i64, limit: i64) -> Result<Vec<StoredLog>, DbError> {
    // The log column: the report's chunk rows as one gzip stream (see `reports::logs_from_store`).
    let mut logs = sqlx::query_as!(
        StoredLog,
        r#"SELECT id, filename, project, branch, commit_sha, job_url,
             coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq)
                       FROM report_log_chunks c WHERE c.report_id = reports.id), ''::bytea)
                 AS "log_gz!",
             (SELECT j.story FROM job_runs j WHERE j.report_id = reports.id)
                 AS "story?: Json<serde_json::Value>"
         FROM reports WHERE id > $1 AND log_removed_at IS NULL ORDER BY id LIMIT $2"#,
        after_id,
        limit
    )
    .fetch_all(db.pool())
    .await?;
    let empty: Vec<i64> = logs
        .iter()
        .filter(|r| r.log_gz.is_empty())
        .map(|r| r.id)
        .collect();
    let mut stored = super::reports::logs_from_store(db, &empty).await?;
    for r in &mut logs {
        if let Some(log) = stored.remove(&r.id) {
            r.log_gz = log;
        }
    }
    Ok(logs)
}

/// The transaction-id horizon now: every transaction that may still commit a report whose id
/// an id-order scan already passed has an id below it.
pub async fn xid_horizon(ex: impl PgExecutor<'_>) -> Result<String, DbError> {
    Ok(
        sqlx::query_scalar!(
            r#"SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS "horizon!""#
        )
        .fetch_one(ex)
        .await?,
    )
}

/// Whether every transaction below `horizon` has ended (committed or not).
pub async fn settled(ex: impl PgExecutor<'_>, horizon: &str) -> Result<bool, DbError> {
    // The horizon travels as text, as [`xid_horizon`] read it.
    Ok(sqlx::query_scalar!(
        r#"SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8 AS "settled!""#,
        horizon
    )
    .fetch_one(ex)
    .await?)
}

/// The ids of the stored reports with ids at most `upto` that still have their log, in order.
pub async fn ids_upto(ex: impl PgExecutor<'_>, upto: i64) -> Result<Vec<i64>, DbError> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM reports WHERE id <= $1 AND log_removed_at IS NULL ORDER BY id",
        upto
    )
    .fetch_all(ex)
    .await?)
}

/// The reports with these ids (those still stored with their log), in id order.
pub async fn reports_by_id(db: &Db, ids: &[i64]) -> Result<Vec<StoredLog>, DbError> {
    // The log column: the report's chunk rows as one gzip stream (see `reports::logs_from_store`).
    let mut logs = sqlx::query_as!(
        StoredLog,
        r#"SELECT id, filename, project, branch, commit_sha, job_url,
             coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq)
                       FROM report_log_chunks c WHERE c.report_id = reports.id), ''::bytea)
                 AS "log_gz!",
             (SELECT j.story FROM job_runs j WHERE j.report_id = reports.id)
                 AS "story?: Json<serde_json::Value>"
         FROM reports WHERE id = ANY($1) AND log_removed_at IS NULL ORDER BY id"#,
        ids
    )
    .fetch_all(db.pool())
    .await?;
    let empty: Vec<i64> = logs
        .iter()
        .filter(|r| r.log_gz.is_empty())
        .map(|r| r.id)
        .collect();
    let mut stored = super::reports::logs_from_store(db, &empty).await?;
    for r in &mut logs {
        if let Some(log) = stored.remove(&r.id) {
            r.log_gz = log;
        }
    }
    Ok(logs)
}

/// Stores a report's new classification in the caller's transaction (which holds the report's
/// row lock until it ends: roll back on `Missing`/`Unchanged`, commit otherwise). When the
/// fingerprint changed, the report moves to the group of the new fingerprint (created or counted
/// up, as an upload would; a merged group's fingerprint leads to the group it was merged into)
/// and its old group is removed when it has no report and no fix left.
pub async fn apply(
    tx: &mut PgConnection,
    report_id: i64,
    new: &Reclassified,
) -> Result<Applied, DbError> {
    let Some(row) = sqlx::query!(
        r#"SELECT group_id, fingerprint, classification, merged_from,
             (SELECT j.story FROM job_runs j WHERE j.report_id = reports.id) AS "story?"
         FROM reports WHERE id = $1 FOR UPDATE"#,
        report_id
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(Applied::Missing);
    };
    let old_group = row.group_id;
    let old_fp = row.fingerprint;
    // Compared as stored JSON: a row written by an older build may not decode, and is then
    // simply different.
    let old_c: serde_json::Value = row.classification;
    let new_c = serde_json::to_value(&new.classification)
        .map_err(|e| DbError::Corrupt(format!("classification does not encode: {e}")))?;
    let old_story: Option<serde_json::Value> = row.story;
    let new_story = (new.story.as_ref())
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| DbError::Corrupt(format!("run story does not encode: {e}")))?;
    let same_story = new_story.is_none() || new_story == old_story;
    if old_c == new_c && old_fp == new.headline.fingerprint && same_story {
        return Ok(Applied::Unchanged);
    }
    let mut group_id = old_group;
    // The group the report belongs to when another holds it (migration 0032); kept while the
    // fingerprint is.
    let mut merged_from: Option<i64> = row.merged_from;
    if old_fp != new.headline.fingerprint {
        group_id = sqlx::query_scalar!(
            "INSERT INTO groups (fingerprint, category, title, root_cause_text, first_seen, \
                 last_seen, signature) \
             SELECT $1, $2, $3, $4, created_at, created_at, $6 FROM reports WHERE id = $5 \
             ON CONFLICT (fingerprint) DO UPDATE SET \
                 first_seen = LEAST(groups.first_seen, excluded.first_seen), \
                 last_seen = GREATEST(groups.last_seen, excluded.last_seen) \
             RETURNING id",
            new.headline.fingerprint,
            new.headline.category.as_str(),
            new.headline.title,
            new.headline.root_cause_text,
            report_id,
            new.headline.signature
        )
        .fetch_one(&mut *tx)
        .await?;
        super::groups::insert_band_keys(&mut *tx, group_id, &new.headline.signature).await?;
        // The fingerprint of a merged group stands for the group it was merged into, as on
        // upload (migration 0023).
        let own = group_id;
        if let Some(live) = super::group_merge::live_group(&mut *tx, group_id).await? {
            group_id = live;
        }
        merged_from = (group_id != own).then_some(own);
    }
    // A report whose headline follows a reproduction (the synchronous run was more specific)
    // keeps that headline: the new log classification becomes what "the log alone said", and
    // the reproduction's root-cause line stays searchable.
    sqlx::query!(
        "UPDATE reports r SET group_id = $2, \
             category = CASE WHEN r.category_source = 'reproduction' THEN r.category ELSE $3 END, \
             title = CASE WHEN r.category_source = 'reproduction' THEN r.title ELSE $4 END, \
             confidence = CASE WHEN r.category_source = 'reproduction' \
                 THEN r.confidence ELSE $5 END, \
             original_category = CASE WHEN r.category_source = 'reproduction' \
                 THEN $3 ELSE r.original_category END, \
             original_title = CASE WHEN r.category_source = 'reproduction' \
                 THEN $4 ELSE r.original_title END, \
             root_cause_line = $6, root_cause_text = $7, fingerprint = $8, async_hint = $9, \
             signature = $11, merged_from = $12, \
             classification = $10, \
             finding_rules = jsonb_path_query_array($10, '$.findings[*].rule') \
         WHERE r.id = $1",
        report_id,
        group_id,
        new.headline.category.as_str(),
        new.headline.title,
        new.headline.confidence.as_str(),
        new.headline.root_cause_line,
        new.headline.root_cause_text,
        new.headline.fingerprint,
        new.headline.async_hint,
        Json(&new.classification) as _,
        new.headline.signature,
        merged_from
    )
    .execute(&mut *tx)
    .await?;
    // The search document follows; a headline kept from a reproduction keeps its root-cause
    // line searchable as a root cause.
    sqlx::query!(
        "UPDATE report_search s SET category = r.category, \
             root = CASE WHEN r.category_source = 'reproduction' \
                 THEN left($2 || E'\\n' || coalesce((SELECT p.classification -> 'root_cause' ->> 'text' \
                     FROM reproductions p WHERE p.id = r.category_reproduction_id), ''), 4096) \
                 ELSE $2 END, \
             symptoms = $3, names = $4, excerpt = $5 \
         FROM reports r WHERE r.id = s.report_id AND s.report_id = $1",
        report_id,
        new.search.root,
        new.search.symptoms,
        new.search.names,
        new.search.excerpt
    )
    .execute(&mut *tx)
    .await?;
    super::search::add_words(&mut *tx, &new.search_words).await?;
    if let Some(story) = &new.story
        && !same_story
    {
        super::job_runs::update_story(&mut *tx, report_id, story).await?;
    }
    if group_id != old_group {
        // Counts are read from reports; a group left with no report, no fix and no report
        // retention deleted goes (a merged group stays: its URL names its target). An upload, a fix or a retention pass landing in it meanwhile
        // makes the delete fail on the foreign key (none cascades, migrations 0009 and 0020):
        // then the group stays, and only this savepoint is rolled back.
        let mut sp = sqlx::Connection::begin(&mut *tx).await?;
        let deleted = sqlx::query!(
            "DELETE FROM groups g WHERE g.id = $1 AND g.merged_into IS NULL \
             AND NOT EXISTS (SELECT 1 FROM fixes f WHERE f.group_id = g.id) \
             AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.group_id = g.id) \
             AND NOT EXISTS (SELECT 1 FROM group_expired_reports e WHERE e.group_id = g.id)",
            old_group
        )
        .execute(&mut *sp)
        .await;
        match deleted {
            Ok(_) => sp.commit().await?,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23503") => {
                sp.rollback().await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(if group_id == old_group {
        Applied::Changed
    } else {
        Applied::Regrouped
    })
}

/// How the stored reports are grouped (`instance.grouping_scheme`, migration 0030).
pub async fn grouping_scheme(ex: impl PgExecutor<'_>) -> Result<i32, DbError> {
    Ok(sqlx::query_scalar!("SELECT grouping_scheme FROM instance")
        .fetch_one(ex)
        .await?)
}

/// Records that the stored reports are grouped by `scheme`.
pub async fn set_grouping_scheme(ex: impl PgExecutor<'_>, scheme: i32) -> Result<(), DbError> {
    sqlx::query!("UPDATE instance SET grouping_scheme = $1", scheme)
        .execute(ex)
        .await?;
    Ok(())
}
