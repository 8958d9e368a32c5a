//! Team rules (migration 0004): the stored entries (a rule spec as jsonb, enabled or not), their
//! edit history, the ruleset version replicas compare, and the NOTIFY that tells them to reload.
//! Storage knows nothing of the rule engine's types: specs travel as JSON values. Edits run in
//! one transaction that holds the version row's lock, so the caller can validate the whole
//! merged ruleset against exactly what it is about to write.

use sqlx::types::Json;
use sqlx::{Acquire, PgExecutor, Postgres, Transaction};

use super::reports::ReportSummary;
use super::{Db, DbError};
use crate::actor::{Actor, ActorKind, RecordedActor};
use crate::rules::Category;
use crate::time::Timestamp;

/// The channel a committed edit notifies, with the new version as payload.
pub const CHANNEL: &str = "gpu_triage_rules";

/// One stored team entry.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRule {
    pub rule_id: String,
    /// The rule (fields of `builtin.toml`); `None` for a built-in rule disabled as is.
    pub spec: Option<serde_json::Value>,
    pub enabled: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Name of the token that last changed it.
    pub updated_by: String,
}

/// An entry's stored state as its history records it (the `old`/`new` jsonb columns of
/// `rule_history`), decoded here so no caller reads it by key. The spec stays JSON: storage
/// knows nothing of the rule engine's types.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RuleState {
    /// The rule (fields of `builtin.toml`); `None` for a built-in rule disabled as is.
    pub spec: Option<serde_json::Value>,
    pub enabled: bool,
}

/// One recorded change.
#[derive(Clone, Debug)]
pub struct HistoryEntry {
    pub id: i64,
    pub rule_id: String,
    pub action: String,
    /// Who made the change.
    pub actor: RecordedActor,
    pub at: Timestamp,
    /// The state before and after; `None` when the entry did not exist.
    pub old: Option<RuleState>,
    pub new: Option<RuleState>,
}

/// An entry an edit changed: its id, the history's action, and its stored state before and
/// after (`None`: it did not exist / was deleted).
#[derive(Clone, Debug)]
pub struct Written {
    pub rule_id: String,
    pub action: String,
    pub old: Option<RuleState>,
    pub new: Option<RuleState>,
}

/// A change to write.
#[derive(Clone, Debug)]
pub enum RuleWrite {
    /// Create or replace an entry.
    Put {
        rule_id: String,
        spec: Option<serde_json::Value>,
        enabled: bool,
    },
    /// Remove an entry (a removed override restores the built-in rule).
    Delete { rule_id: String },
}

async fn load(conn: &mut sqlx::PgConnection) -> Result<Vec<StoredRule>, DbError> {
    Ok(sqlx::query_as!(
        StoredRule,
        r#"SELECT rule_id, spec, enabled, created_at AS "created_at: Timestamp",
             updated_at AS "updated_at: Timestamp", updated_by
         FROM team_rules ORDER BY created_at, rule_id"#
    )
    .fetch_all(conn)
    .await?)
}

/// Every team entry, oldest first, and the ruleset version they make up (one snapshot).
pub async fn list_team_rules(db: &Db) -> Result<(Vec<StoredRule>, i64), DbError> {
    let mut tx = db.pool().begin().await?;
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    let version = sqlx::query_scalar!("SELECT version FROM ruleset_version")
        .fetch_one(&mut *tx)
        .await?;
    let rules = load(&mut tx).await?;
    tx.commit().await?;
    Ok((rules, version))
}

/// The current ruleset version (bumped by every committed edit).
pub async fn ruleset_version(ex: impl PgExecutor<'_>) -> Result<i64, DbError> {
    Ok(sqlx::query_scalar!("SELECT version FROM ruleset_version")
        .fetch_one(ex)
        .await?)
}

/// An edit in progress: the version row is locked, so no other edit interleaves.
pub struct Edit {
    tx: Transaction<'static, Postgres>,
    /// The entries as they are now.
    pub rules: Vec<StoredRule>,
}

/// Starts an edit: locks the version row and reads the current entries.
pub async fn begin_edit(db: &Db) -> Result<Edit, DbError> {
    let mut tx = db.pool().begin().await?;
    // Only the lock matters: the version is read again when the edit writes.
    sqlx::query_scalar!("SELECT version FROM ruleset_version FOR UPDATE")
        .fetch_optional(&mut *tx)
        .await?;
    let rules = load(&mut tx).await?;
    Ok(Edit { tx, rules })
}

impl Edit {
    /// Ends the edit without writing, releasing the version row's lock at once.
    pub async fn rollback(self) -> Result<(), DbError> {
        self.tx.rollback().await?;
        Ok(())
    }

    /// Writes `changes`, records each in the history as `action` (`None`: create, update or
    /// delete as it turns out) by `actor`, bumps the version, notifies replicas and commits.
    /// Returns the new version. Writes that change nothing are skipped.
    pub async fn commit(
        mut self,
        changes: &[RuleWrite],
        action: Option<&str>,
        actor: &Actor,
    ) -> Result<i64, DbError> {
        let (version, _) = self.write(changes, action, actor).await?;
        self.finish().await?;
        Ok(version)
    }

    /// [`Edit::commit`] without the commit: the caller adds its own statements in the same
    /// transaction (through [`Edit::conn`]) and then calls [`Edit::finish`]. Returns the new
    /// version and the entries that changed.
    pub async fn write(
        &mut self,
        changes: &[RuleWrite],
        action: Option<&str>,
        actor: &Actor,
    ) -> Result<(i64, Vec<Written>), DbError> {
        let mut written = Vec::new();
        for change in changes {
            let id = match change {
                RuleWrite::Put { rule_id, .. } | RuleWrite::Delete { rule_id } => rule_id,
            };
            let old = self.rules.iter().find(|r| &r.rule_id == id);
            let old_state = old.map(|r| RuleState {
                spec: r.spec.clone(),
                enabled: r.enabled,
            });
            let (new_state, kind) = match change {
                RuleWrite::Put { spec, enabled, .. } => (
                    Some(RuleState {
                        spec: spec.clone(),
                        enabled: *enabled,
                    }),
                    if old.is_some() { "update" } else { "create" },
                ),
                RuleWrite::Delete { .. } => (None, "delete"),
            };
            if old_state == new_state {
                continue;
            }
            match change {
                RuleWrite::Put { spec, enabled, .. } => {
                    sqlx::query!(
                        "INSERT INTO team_rules (rule_id, spec, enabled, updated_by) \
                         VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (rule_id) DO UPDATE SET spec = $2, enabled = $3, \
                             updated_by = $4, updated_at = now()",
                        id,
                        spec.as_ref(),
                        *enabled,
                        actor.name()
                    )
                    .execute(&mut *self.tx)
                    .await?;
                }
                RuleWrite::Delete { .. } => {
                    sqlx::query!("DELETE FROM team_rules WHERE rule_id = $1", id)
                        .execute(&mut *self.tx)
                        .await?;
                }
            }
            let action = action.unwrap_or(kind);
            sqlx::query!(
                "INSERT INTO rule_history (rule_id, action, actor, old, new, actor_kind, \
                     actor_person_id, actor_token_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                id,
                action,
                actor.name(),
                old_state.clone().map(Json) as _,
                new_state.clone().map(Json) as _,
                actor.kind().as_str(),
                actor.person_id(),
                actor.token_id()
            )
            .execute(&mut *self.tx)
            .await?;
            written.push(Written {
                rule_id: id.clone(),
                action: action.to_owned(),
                old: old_state,
                new: new_state,
            });
        }
        let version = sqlx::query_scalar!(
            "UPDATE ruleset_version SET version = version + 1 RETURNING version"
        )
        .fetch_one(&mut *self.tx)
        .await?;
        // Delivered on commit, to every replica listening.
        sqlx::query!(
            r#"SELECT pg_notify($1, $2) AS "notified: ()""#,
            CHANNEL,
            version.to_string()
        )
        .fetch_one(&mut *self.tx)
        .await?;
        Ok((version, written))
    }

    /// The edit's connection, for statements that must commit with it.
    pub fn conn(&mut self) -> &mut sqlx::PgConnection {
        &mut self.tx
    }

    /// Commits what [`Edit::write`] wrote.
    pub async fn finish(self) -> Result<(), DbError> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// The recorded changes, newest first (of one rule when `rule_id` is given).
pub async fn history(
    ex: impl PgExecutor<'_>,
    rule_id: Option<&str>,
    limit: i64,
) -> Result<Vec<HistoryEntry>, DbError> {
    let rows = sqlx::query!(
        r#"SELECT id, rule_id, action, actor, actor_kind AS "actor_kind: ActorKind",
             actor_person_id, at AS "at: Timestamp", old AS "old: Json<RuleState>",
             new AS "new: Json<RuleState>"
         FROM rule_history
         WHERE $1::text IS NULL OR rule_id = $1 ORDER BY id DESC LIMIT $2"#,
        rule_id,
        limit
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| HistoryEntry {
            id: r.id,
            rule_id: r.rule_id,
            action: r.action,
            actor: RecordedActor {
                name: r.actor,
                kind: r.actor_kind,
                person_id: r.actor_person_id,
            },
            at: r.at,
            old: r.old.map(|j| j.0),
            new: r.new.map(|j| j.0),
        })
        .collect())
}

/// Stored reports per rule id named in their classification's findings.
pub async fn rule_hit_counts(ex: impl PgExecutor<'_>) -> Result<Vec<(String, i64)>, DbError> {
    // `finding_rules` (migration 0008) is the findings' rule ids, small and stored inline.
    // (`jsonb_array_elements_text` of a NULL, a row written before the column, yields nothing.)
    let rows = sqlx::query!(
        r#"SELECT f.rule AS "rule!", count(*) AS "reports!" FROM reports r,
             LATERAL (SELECT DISTINCT jsonb_array_elements_text(r.finding_rules) AS rule) f
         GROUP BY 1"#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(|r| (r.rule, r.reports)).collect())
}

/// The newest reports whose classification names `rule_id` among its findings.
pub async fn reports_naming_rule(
    ex: impl PgExecutor<'_>,
    rule_id: &str,
    limit: i64,
) -> Result<Vec<ReportSummary>, DbError> {
    // The columns of a `ReportSummary`, as `reports::recent_reports` reads them.
    Ok(sqlx::query_as!(
        ReportSummary,
        r#"SELECT r.id, r.created_at AS "created_at: Timestamp", r.project,
             r.category AS "category: Category", r.title, r.root_cause_text, r.group_id
         FROM reports r
         WHERE r.classification -> 'findings' @> jsonb_build_array(jsonb_build_object('rule', $1::text))
         ORDER BY r.created_at DESC, r.id DESC LIMIT $2"#,
        rule_id,
        limit
    )
    .fetch_all(ex)
    .await?)
}

/// The newest stored reports that still have their log as (id, compressed log size in bytes),
/// for a dry run to read in batches; and how many such reports are stored. The sizes come from
/// the stored values' headers, without reading the logs.
pub async fn recent_log_sizes(
    conn: impl Acquire<'_, Database = Postgres>,
    limit: i64,
) -> Result<(Vec<(i64, i64)>, i64), DbError> {
    let mut conn = conn.acquire().await?;
    let sizes = sqlx::query!(
        r#"SELECT id, (SELECT sum(coalesce(octet_length(c.data), c.stored_bytes))
                     FROM report_log_chunks c
                     WHERE c.report_id = reports.id)::bigint AS "bytes!" FROM reports
         WHERE log_removed_at IS NULL ORDER BY created_at DESC, id DESC LIMIT $1"#,
        limit
    )
    .fetch_all(&mut *conn)
    .await?;
    let total = sqlx::query_scalar!(
        r#"SELECT count(*) AS "reports!" FROM reports WHERE log_removed_at IS NULL"#
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok((sizes.into_iter().map(|r| (r.id, r.bytes)).collect(), total))
}

/// The gzip-compressed logs of `ids` (those still stored), in the order given.
pub async fn logs_by_id(db: &Db, ids: &[i64]) -> Result<Vec<(i64, Vec<u8>)>, DbError> {
    // The log column: the report's chunk rows as one gzip stream (see `reports::logs_from_store`).
    let rows = sqlx::query!(
        r#"SELECT id,
             coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq)
                       FROM report_log_chunks c WHERE c.report_id = reports.id), ''::bytea)
                 AS "log_gz!"
         FROM reports WHERE id = ANY($1) ORDER BY array_position($1, id)"#,
        ids
    )
    .fetch_all(db.pool())
    .await?;
    let mut logs: Vec<(i64, Vec<u8>)> = rows.into_iter().map(|r| (r.id, r.log_gz)).collect();
    let empty: Vec<i64> = logs
        .iter()
        .filter(|r| r.1.is_empty())
        .map(|r| r.0)
        .collect();
    let mut stored = super::reports::logs_from_store(db, &empty).await?;
    for r in &mut logs {
        if let Some(log) = stored.remove(&r.0) {
            r.1 = log;
        }
    }
    Ok(logs)
}

/// A dedicated connection listening on [`CHANNEL`]: wakes replicas when an edit commits.
pub struct RuleListener(sqlx::postgres::PgListener);

/// Opens the listener (its own connection, reconnected by sqlx after a drop).
pub async fn listen(db: &Db) -> Result<RuleListener, DbError> {
    let mut l = sqlx::postgres::PgListener::connect_with(db.pool()).await?;
    l.listen(CHANNEL).await?;
    Ok(RuleListener(l))
}

impl RuleListener {
    /// Waits for the next notification; its payload is the new version (`None` if unreadable,
    /// or after a reconnect, when notifications may have been missed).
    pub async fn recv(&mut self) -> Result<Option<i64>, DbError> {
        let n = self.0.recv().await?;
        Ok(n.payload().parse().ok())
    }
}
