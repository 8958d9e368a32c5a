//! Portal pages for rules: `/rules` (built-in and team rules with hit counts, edit history,
//! reclassification runs), a rule's page (its recent matching reports and history), and the
//! small forms that turn a rule on or off, delete it or start a reclassification (the editor is
//! `rules_form`; the look before a disable, `rules_disable`). Every form post checks the
//! session's CSRF token; writes need the admin scope.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::Layout;
use crate::app::reports::ReportSummary;
use crate::app::team_rules::reclassify::ReclassifyRun;
use crate::app::team_rules::{self, Change, Origin, RuleInfo, RulesFilter, Toggled, reclassify};
use crate::app::team_rules::{HistoryEntry, RuleState};
use crate::auth::Scope;
use crate::rules::Category;
use crate::rules::spec::RuleSpec;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, QueryParams};
use crate::web::scope::{Admin, Read, ScopedUser};
use crate::web::state::AppState;

/// A rule in the list.
pub struct RuleRow {
    pub id: String,
    pub origin: &'static str,
    /// Shipped, not written by the team.
    pub builtin: bool,
    pub category: crate::rules::Category,
    pub title: String,
    pub enabled: bool,
    pub overridden: bool,
    pub hits: i64,
}

impl From<&RuleInfo> for RuleRow {
    fn from(r: &RuleInfo) -> Self {
        RuleRow {
            id: r.spec.id.clone(),
            origin: match r.origin {
                Origin::Builtin => "built-in",
                Origin::Team => "team",
            },
            builtin: r.origin == Origin::Builtin,
            category: r.spec.category,
            title: r.spec.title.clone(),
            enabled: r.enabled,
            overridden: r.overridden,
            hits: r.hits,
        }
    }
}

/// A history line: who changed what, when.
pub struct HistoryRow {
    pub at: crate::time::Timestamp,
    /// Who made the change (the name then), and what kind of actor (none for old entries).
    pub actor: String,
    pub actor_kind: Option<crate::actor::ActorKind>,
    pub action: String,
    pub rule_id: String,
    /// `field: old → new` for each field that changed.
    pub changes: Vec<String>,
}

impl From<HistoryEntry> for HistoryRow {
    fn from(h: HistoryEntry) -> Self {
        HistoryRow {
            changes: changes(h.old.as_ref(), h.new.as_ref()),
            at: h.at,
            actor: h.actor.name,
            actor_kind: h.actor.kind,
            action: h.action,
            rule_id: h.rule_id,
        }
    }
}

/// The fields that differ between two stored states.
fn changes(old: Option<&RuleState>, new: Option<&RuleState>) -> Vec<String> {
    let flat = |v: Option<&RuleState>| -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(v) = v {
            out.push(("enabled".to_owned(), v.enabled.to_string()));
            if let Some(spec) = v.spec.as_ref().and_then(Value::as_object) {
                for (k, val) in spec {
                    out.push((k.clone(), val.to_string()));
                }
            }
        }
        out
    };
    let (a, b) = (flat(old), flat(new));
    let get = |list: &[(String, String)], k: &str| {
        list.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| clip(v))
            .unwrap_or_else(|| "—".to_owned())
    };
    let mut keys: Vec<&String> = a.iter().chain(&b).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| get(&a, k) != get(&b, k))
        .map(|k| format!("{k}: {} → {}", get(&a, k), get(&b, k)))
        .collect()
}

fn clip(s: &str) -> String {
    if s.len() <= 160 {
        return s.to_owned();
    }
    format!("{}…", &s[..s.floor_char_boundary(160)])
}

/// A reclassification run with its progress.
pub struct RunRow {
    pub run: ReclassifyRun,
    pub percent: String,
}

impl From<ReclassifyRun> for RunRow {
    fn from(run: ReclassifyRun) -> Self {
        let percent = if run.total > 0 {
            format!("{:.0}%", run.done as f64 * 100.0 / run.total as f64)
        } else {
            "100%".to_owned()
        };
        RunRow { run, percent }
    }
}

/// `GET /rules`
#[derive(Template, WebTemplate)]
#[template(path = "rules.html")]
pub struct RulesPage {
    layout: Layout,
    builtin: Vec<RuleRow>,
    team: Vec<RuleRow>,
    /// Rules before the filter (built-in and team).
    total: usize,
    /// The filter as typed, and the category picked ("" any).
    q: String,
    category: String,
    categories: &'static [Category],
    version: i64,
    history: Vec<HistoryRow>,
    runs: Vec<RunRow>,
    can_edit: bool,
}

/// `GET /rules?q=&category=`
pub async fn list_rules(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(filter): QueryParams<RulesFilter>,
) -> Result<RulesPage, PageError> {
    let o = team_rules::overview(&state.db, &filter).await?;
    let rows = |list: Vec<RuleInfo>| list.iter().map(RuleRow::from).collect();
    Ok(RulesPage {
        layout: Layout::for_user(Some(&user)),
        builtin: rows(o.builtin),
        team: rows(o.team),
        total: o.total,
        q: filter.q.trim().to_owned(),
        category: filter.category,
        categories: &Category::ALL,
        version: o.version,
        history: o.history.into_iter().map(HistoryRow::from).collect(),
        runs: o.runs.into_iter().map(RunRow::from).collect(),
        can_edit: user.require(&[Scope::Admin]).is_ok(),
    })
}

/// `GET /rules/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "rule.html")]
pub struct RulePage {
    layout: Layout,
    rule: RuleRow,
    spec: RuleSpec,
    shipped: Option<RuleSpec>,
    reports: Vec<ReportSummary>,
    history: Vec<HistoryRow>,
    can_edit: bool,
    /// A team entry exists (so it can be deleted / the override removed).
    has_entry: bool,
}

/// `GET /rules/{id}`
pub async fn show_rule(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    Path(id): Path<String>,
) -> Result<RulePage, PageError> {
    let d = team_rules::detail(&state.db, &id).await?;
    Ok(RulePage {
        layout: Layout::for_user(Some(&user)),
        rule: RuleRow::from(&d.info),
        reports: d.reports,
        history: d.history.into_iter().map(HistoryRow::from).collect(),
        can_edit: user.require(&[Scope::Admin]).is_ok(),
        has_entry: d.info.updated_at.is_some(),
        shipped: d.info.shipped,
        spec: d.info.spec,
    })
}

/// The small forms (enable/disable, delete, reclassify).
#[derive(Debug, Deserialize)]
pub struct ActionForm {
    csrf: String,
    #[serde(default)]
    enabled: String,
    /// Sent by the disable page's confirm button.
    #[serde(default)]
    confirm: String,
}

impl CsrfField for ActionForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /rules/{id}/enabled`: turn a rule on (`enabled=true`) or off. Turning a built-in rule
/// off takes `confirm=yes` from the disable page; without it the answer is that page
/// (`GET /rules/{id}/disable`), and nothing changes.
pub async fn set_enabled(
    State(state): State<AppState>,
    Path(id): Path<String>,
    CsrfForm { user, form, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let toggled = team_rules::set_enabled(
        &state.db,
        &state.ruleset,
        &id,
        form.enabled == "true",
        &user.actor(),
        form.confirm == "yes",
    )
    .await
    .map_err(AppError::from)?;
    let next = match toggled {
        Toggled::Saved(_) => format!("/rules/{}", path_segment(&id)),
        Toggled::NeedsConfirmation => format!("/rules/{}/disable", path_segment(&id)),
    };
    Ok(Redirect::to(&next).into_response())
}

/// A rule id as one path segment (ids are `[a-z0-9_.-]` in practice; anything else is
/// percent-encoded so a redirect cannot leave the rule's pages).
pub(super) fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `POST /rules/{id}/delete`: remove a team rule, or an override (restoring the built-in rule).
pub async fn delete_rule(
    State(state): State<AppState>,
    Path(id): Path<String>,
    CsrfForm { user, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    let change = Change::Delete { id };
    team_rules::save(&state.db, &state.ruleset, change, &user.actor(), false)
        .await
        .map_err(AppError::from)?;
    Ok(Redirect::to("/rules").into_response())
}

/// `POST /rules/reclassify`: re-run the current rules over stored reports in the background.
pub async fn start_reclassify(
    State(state): State<AppState>,
    CsrfForm { user, .. }: CsrfForm<ActionForm, Admin>,
) -> Result<Response, PageError> {
    reclassify::start(&state.db, &state.ruleset, &user.actor())
        .await
        .map_err(AppError::from)?;
    Ok(Redirect::to("/rules#reclassify").into_response())
}
