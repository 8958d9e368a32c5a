//! What the rule pages and answers show, one call each (issue 32 item 1): the rules page (the
//! rules a filter keeps, with the latest edits and reclassification runs), a rule's page (its
//! newest matching reports and its history), the editor's Preview or Save, and a save answered
//! with the rule as it is then listed. Handlers render these and read nothing else.

use serde::Deserialize;

use super::reclassify::ReclassifyRun;
use super::{
    Change, HistoryEntry, Origin, Preview, RuleInfo, RulesetHandle, Saved, TeamRulesError, history,
    list, preview, recent_runs, reports_naming, save,
};
use crate::actor::Actor;
use crate::api_types::ErrorCode;
use crate::app::Error;
use crate::rules::spec::RuleSpec;
use crate::storage::Db;
use crate::storage::reports::ReportSummary;

/// History entries a rules page shows.
const HISTORY_SHOWN: i64 = 30;
/// Reclassification runs the rules page shows.
const RUNS_SHOWN: i64 = 5;
/// Matching reports a rule's page shows.
const REPORTS_SHOWN: i64 = 20;

/// `GET /rules?q=&category=`: the rules whose id or title holds `q` (any letter case) and of
/// that category (empty: any).
#[derive(Debug, Default, Deserialize)]
pub struct RulesFilter {
    /// Words of the id or title, as typed.
    #[serde(default)]
    pub q: String,
    /// A category's name.
    #[serde(default)]
    pub category: String,
}

impl RulesFilter {
    fn keeps(&self, r: &RuleInfo) -> bool {
        let q = self.q.trim().to_lowercase();
        let text = q.is_empty()
            || r.spec.id.to_lowercase().contains(&q)
            || r.spec.title.to_lowercase().contains(&q);
        let category = self.category.is_empty() || r.spec.category.as_str() == self.category;
        text && category
    }
}

/// The rules page: the rules a filter keeps, with what changed lately.
#[derive(Clone, Debug)]
pub struct RulesOverview {
    /// Kept built-in rules, in file order.
    pub builtin: Vec<RuleInfo>,
    /// Kept team rules, oldest first.
    pub team: Vec<RuleInfo>,
    /// Rules before the filter (built-in and team).
    pub total: usize,
    /// The stored ruleset version.
    pub version: i64,
    /// The newest edits of any rule, newest first.
    pub history: Vec<HistoryEntry>,
    /// The newest reclassification runs.
    pub runs: Vec<ReclassifyRun>,
}

/// The rules `filter` keeps, with hit counts, the newest edits and runs; 400 `bad_query` for a
/// `q` over 200 characters.
#[tracing::instrument(name = "team_rules::overview", skip_all, fields(q_chars = filter.q.chars().count(), category = filter.category.as_str()))]
pub async fn overview(db: &Db, filter: &RulesFilter) -> Result<RulesOverview, Error> {
    if filter.q.chars().count() > 200 {
        return Err(Error::Malformed(
            ErrorCode::BadQuery,
            "q: at most 200 characters".into(),
        ));
    }
    let (rules, version) = list(db, true).await?;
    let total = rules.len();
    let (builtin, team) = (rules.into_iter())
        .filter(|r| filter.keeps(r))
        .partition(|r| r.origin == Origin::Builtin);
    Ok(RulesOverview {
        builtin,
        team,
        total,
        version,
        history: history(db, None, HISTORY_SHOWN).await?,
        runs: recent_runs(db, RUNS_SHOWN).await?,
    })
}

/// Rule `id` as listed (with its hit count when `with_hits`); [`TeamRulesError::NotFound`]
/// when there is no such rule.
#[tracing::instrument(name = "team_rules::rule", skip_all, fields(rule_id = id, with_hits = with_hits))]
pub async fn rule(db: &Db, id: &str, with_hits: bool) -> Result<RuleInfo, TeamRulesError> {
    let (rules, _) = list(db, with_hits).await?;
    rules
        .into_iter()
        .find(|r| r.spec.id == id)
        .ok_or(TeamRulesError::NotFound)
}

/// A rule's page: the rule, its newest matching reports and its history.
#[derive(Clone, Debug)]
pub struct RuleDetail {
    /// The rule as listed, with its hit count.
    pub info: RuleInfo,
    /// The newest stored reports it names.
    pub reports: Vec<ReportSummary>,
    /// Its newest edits, newest first.
    pub history: Vec<HistoryEntry>,
}

/// Rule `id`'s page; 404 when there is no such rule.
#[tracing::instrument(name = "team_rules::detail", skip_all, fields(rule_id = id))]
pub async fn detail(db: &Db, id: &str) -> Result<RuleDetail, Error> {
    let info = rule(db, id, true).await?;
    Ok(RuleDetail {
        info,
        reports: reports_naming(db, id, REPORTS_SHOWN).await?,
        history: history(db, Some(id), HISTORY_SHOWN).await?,
    })
}

/// Which button of the rule editor was pressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormAction {
    /// Preview: the dry run, nothing stored.
    Preview,
    /// Save, the rule on or off; `confirm`: even though it lowers corpus accuracy.
    Save { enabled: bool, confirm: bool },
}

/// What the rule editor's button did.
#[derive(Debug, Clone)]
pub enum FormOutcome {
    /// The dry run, for the form shown again.
    Previewed(Preview),
    /// Stored and in use.
    Saved(Saved),
}

/// The rule editor's Preview or Save of `spec` by `actor` (a save creates or replaces the
/// rule, or overrides a built-in one). A refusal is the error, for the form shown again.
#[tracing::instrument(name = "team_rules::submit_form", skip_all, fields(rule_id = spec.id.as_str(), action = ?action, actor = actor.name()))]
pub async fn submit_form(
    db: &Db,
    handle: &RulesetHandle,
    spec: RuleSpec,
    action: FormAction,
    actor: &Actor,
) -> Result<FormOutcome, TeamRulesError> {
    match action {
        FormAction::Preview => Ok(FormOutcome::Previewed(preview(db, handle, spec).await?)),
        FormAction::Save { enabled, confirm } => {
            let change = Change::Put {
                id: spec.id.clone(),
                spec: Some(spec),
                enabled,
                create: false,
            };
            Ok(FormOutcome::Saved(
                save(db, handle, change, actor, confirm).await?,
            ))
        }
    }
}

/// A save, and the rule as listed once it is in use (`None` when it is gone).
#[derive(Debug, Clone)]
pub struct SavedRule {
    /// What the save did.
    pub saved: Saved,
    /// The rule as listed now (without hit counts).
    pub rule: Option<RuleInfo>,
}

/// Saves `change` as [`save`] does, then reads the rule as it is listed now (without hit
/// counts), for an answer that shows it.
#[tracing::instrument(name = "team_rules::save_listed", skip_all, fields(rule_id = change.id(), actor = actor.name(), confirm = confirm))]
pub async fn save_listed(
    db: &Db,
    handle: &RulesetHandle,
    change: Change,
    actor: &Actor,
    confirm: bool,
) -> Result<SavedRule, TeamRulesError> {
    let id = change.id().to_owned();
    let saved = save(db, handle, change, actor, confirm).await?;
    let (rules, _) = list(db, false).await?;
    Ok(SavedRule {
        saved,
        rule: rules.into_iter().find(|r| r.spec.id == id),
    })
}
