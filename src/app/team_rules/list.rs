//! The rules a deployment runs, as the portal and `GET /api/v1/rules` list them: built-in rules
//! (with their override or disabled state) then team rules, each with its hit count over stored
//! reports.

use std::collections::HashMap;

use super::{TeamRulesError, entries};
use crate::app::Error;
use crate::rules::spec::RuleSpec;
use crate::rules::team_compile;
use crate::storage::Db;
use crate::storage::rules::{self as store, StoredRule};

/// Where a rule comes from (a wire type: the API lists it as it is).
pub use crate::api_types::rules::RuleOrigin as Origin;

/// One rule as listed.
#[derive(Debug, Clone)]
pub struct RuleInfo {
    /// The rule in effect (the override's when overridden).
    pub spec: RuleSpec,
    /// Built-in or team.
    pub origin: Origin,
    /// Whether it takes part in matching.
    pub enabled: bool,
    /// A built-in rule replaced by a team spec.
    pub overridden: bool,
    /// The shipped rule, for an overridden built-in.
    pub shipped: Option<RuleSpec>,
    /// The team entry's last change, when there is an entry.
    pub updated_at: Option<crate::time::Timestamp>,
    pub updated_by: Option<String>,
    /// Stored reports whose classification names this rule.
    pub hits: i64,
}

/// Every rule, built-in first (file order), then team rules (oldest first), and the stored
/// ruleset version.
#[tracing::instrument(name = "team_rules::list", skip_all, fields(with_hits = with_hits))]
pub async fn list(db: &Db, with_hits: bool) -> Result<(Vec<RuleInfo>, i64), TeamRulesError> {
    let (stored, version) = store::list_team_rules(db).await?;
    let hits: HashMap<String, i64> = if with_hits {
        store::rule_hit_counts(db.pool())
            .await?
            .into_iter()
            .collect()
    } else {
        HashMap::new()
    };
    let team_entries = entries(&stored)?;
    let builtin = team_compile::builtin_file()?;
    let row = |id: &str| stored.iter().find(|r| r.rule_id == id);
    let info = |spec: RuleSpec, origin, shipped: Option<RuleSpec>, r: Option<&StoredRule>| {
        let entry = r.and_then(|r| team_entries.iter().find(|e| e.id == r.rule_id));
        RuleInfo {
            hits: hits.get(&spec.id).copied().unwrap_or(0),
            enabled: entry.is_none_or(|e| e.enabled),
            overridden: shipped.is_some(),
            shipped,
            origin,
            updated_at: r.map(|r| r.updated_at),
            updated_by: r.map(|r| r.updated_by.clone()),
            spec,
        }
    };
    let mut out = Vec::new();
    for rule in &builtin.rule {
        let r = row(&rule.id);
        let entry = r.and_then(|r| team_entries.iter().find(|e| e.id == r.rule_id));
        match entry.and_then(|e| e.spec.clone()) {
            Some(spec) => out.push(info(
                RuleSpec {
                    id: rule.id.clone(),
                    ..spec
                },
                Origin::Builtin,
                Some(rule.clone()),
                r,
            )),
            None => out.push(info(rule.clone(), Origin::Builtin, None, r)),
        }
    }
    let ids = team_compile::builtin_ids(&builtin);
    for e in &team_entries {
        if let (false, Some(spec)) = (ids.contains(e.id.as_str()), &e.spec) {
            out.push(info(spec.clone(), Origin::Team, None, row(&e.id)));
        }
    }
    Ok((out, version))
}

/// The newest changes to team rules (of one rule, or of all), newest first.
#[tracing::instrument(name = "team_rules::history", skip_all, fields(rule_id = ?rule_id, limit = limit))]
pub async fn history(
    db: &Db,
    rule_id: Option<&str>,
    limit: i64,
) -> Result<Vec<crate::storage::rules::HistoryEntry>, Error> {
    Ok(store::history(db.pool(), rule_id, limit).await?)
}

/// The newest stored reports with a finding of rule `id`.
#[tracing::instrument(name = "team_rules::reports_naming", skip_all, fields(rule_id = id, limit = limit))]
pub async fn reports_naming(
    db: &Db,
    id: &str,
    limit: i64,
) -> Result<Vec<crate::storage::reports::ReportSummary>, Error> {
    Ok(store::reports_naming_rule(db.pool(), id, limit).await?)
}

/// The newest reclassification runs.
#[tracing::instrument(name = "team_rules::recent_runs", skip_all, fields(limit = limit))]
pub async fn recent_runs(
    db: &Db,
    limit: i64,
) -> Result<Vec<crate::storage::reclassify_runs::ReclassifyRun>, Error> {
    Ok(crate::storage::reclassify_runs::recent_runs(db.pool(), limit).await?)
}
