//! Portal pages for rules: `/rules` (built-in and team rules with hit counts, edit history,
//! reclassification runs), a rule's page (its recent matching reports and history), and the
//! new/edit form whose "Preview" button renders the dry run and whose "Save" button stores the
//! rule. Every form post checks the session's CSRF token; writes need the admin scope.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::Layout;
use crate::api_types::ErrorCode;
use crate::app::reports::ReportSummary;
use crate::app::team_rules::reclassify::ReclassifyRun;
use crate::app::team_rules::{self, Change, Origin, Preview, RuleInfo, Toggled, reclassify};
use crate::app::team_rules::{HistoryEntry, RuleState};
use crate::auth::Scope;
use crate::rules::Category;
use crate::rules::facts::FactKind;
use crate::rules::spec::RuleSpec;
use crate::rules::team_compile::Captured;

use crate::web::auth::PortalUser;
use crate::web::extract::{CsrfField, CsrfForm, QueryParams};
use crate::web::scope::{Admin, Read, ScopedUser};
use crate::web::{AppError, AppState, PageError};

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

/// `GET /rules?q=&category=`: the rules whose id or title holds `q` (any letter case) and of
/// that category.
#[derive(Debug, Default, Deserialize)]
pub struct RulesQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    category: String,
}

impl RulesQuery {
    fn keeps(&self, r: &RuleInfo) -> bool {
        let q = self.q.trim().to_lowercase();
        let text = q.is_empty()
            || r.spec.id.to_lowercase().contains(&q)
            || r.spec.title.to_lowercase().contains(&q);
        let category = self.category.is_empty() || r.spec.category.as_str() == self.category;
        text && category
    }
}

/// `GET /rules`
pub async fn list_rules(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(query): QueryParams<RulesQuery>,
) -> Result<RulesPage, PageError> {
    if query.q.chars().count() > 200 {
        return Err(
            AppError::BadRequest(ErrorCode::BadQuery, "q: at most 200 characters".into()).into(),
        );
    }
    let (rules, version) = team_rules::list(&state.db, true).await?;
    let total = rules.len();
    let (builtin, team) = (rules.iter())
        .filter(|r| query.keeps(r))
        .partition(|r| r.origin == Origin::Builtin);
    let rows = |list: Vec<&RuleInfo>| list.into_iter().map(RuleRow::from).collect();
    Ok(RulesPage {
        layout: Layout::for_user(Some(&user)),
        builtin: rows(builtin),
        team: rows(team),
        total,
        q: query.q.trim().to_owned(),
        category: query.category,
        categories: &Category::ALL,
        version,
        history: history(&state, None).await?,
        runs: team_rules::recent_runs(&state.db, 5)
            .await?
            .into_iter()
            .map(RunRow::from)
            .collect(),
        can_edit: user.require(&[Scope::Admin]).is_ok(),
    })
}

async fn history(state: &AppState, rule_id: Option<&str>) -> Result<Vec<HistoryRow>, AppError> {
    Ok(team_rules::history(&state.db, rule_id, 30)
        .await?
        .into_iter()
        .map(HistoryRow::from)
        .collect())
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
    user: PortalUser,
    Path(id): Path<String>,
) -> Result<RulePage, PageError> {
    user.require(&[Scope::Read])?;
    let (rules, _) = team_rules::list(&state.db, true).await?;
    let info = rules
        .into_iter()
        .find(|r| r.spec.id == id)
        .ok_or(AppError::NotFound("rule"))?;
    Ok(RulePage {
        layout: Layout::for_user(Some(&user)),
        rule: RuleRow::from(&info),
        reports: team_rules::reports_naming(&state.db, &id, 20).await?,
        history: history(&state, Some(&id)).await?,
        can_edit: user.require(&[Scope::Admin]).is_ok(),
        has_entry: info.updated_at.is_some(),
        shipped: info.shipped.clone(),
        spec: info.spec,
    })
}

/// The form's fields, as typed (lists one per line).
#[derive(Debug, Default, Deserialize)]
pub struct RuleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    category: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    pattern: String,
    #[serde(default)]
    specificity: String,
    #[serde(default)]
    advice: String,
    #[serde(default)]
    examples: String,
    #[serde(default)]
    counter_examples: String,
    /// Present when the "enabled" box is ticked.
    enabled: Option<String>,
    /// Present when "save even though it lowers corpus accuracy" is ticked.
    confirm: Option<String>,
    /// `preview` or `save` (which submit button).
    #[serde(default)]
    action: String,
    /// Set when editing an existing rule (the id cannot change).
    #[serde(default)]
    editing: String,
}

impl CsrfField for RuleForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

impl RuleForm {
    fn from_spec(spec: &RuleSpec, enabled: bool) -> RuleForm {
        RuleForm {
            id: spec.id.clone(),
            category: spec.category.to_string(),
            title: spec.title.clone(),
            pattern: spec.pattern.clone(),
            specificity: spec.specificity.to_string(),
            advice: spec.advice.join("\n"),
            examples: spec.examples.join("\n"),
            counter_examples: spec.counter_examples.join("\n"),
            enabled: enabled.then(|| "on".to_owned()),
            editing: "1".into(),
            ..RuleForm::default()
        }
    }

    fn spec(&self) -> Result<RuleSpec, String> {
        let category: Category = self.category.parse()?;
        let specificity = match self.specificity.trim() {
            "" => 50,
            s => s
                .parse()
                .map_err(|_| "specificity must be a number from 0 to 100".to_owned())?,
        };
        let required = |v: &str, name: &str| {
            if v.trim().is_empty() {
                Err(format!("{name} is required"))
            } else {
                Ok(v.trim().to_owned())
            }
        };
        Ok(RuleSpec {
            id: required(&self.id, "id")?,
            category,
            title: required(&self.title, "title")?,
            source: String::new(),
            pattern: required(&self.pattern, "pattern")?,
            specificity,
            consequence: false,
            advice: lines(&self.advice),
            examples: lines(&self.examples),
            counter_examples: lines(&self.counter_examples),
        })
    }
}

/// One example's result, for the preview table.
pub struct ExampleRow {
    pub line: String,
    pub kind: &'static str,
    pub ok: bool,
    pub matched: bool,
    /// The rule's named captures on the line, each with the fact it feeds.
    pub captures: Vec<Captured>,
    /// The typed facts the line gives, as the report page shows them (label, value).
    pub facts: Vec<(String, String)>,
}

/// The dry run as the form shows it.
pub struct PreviewView {
    pub ok: bool,
    pub problems: Vec<String>,
    pub examples: Vec<ExampleRow>,
    /// The pattern's named groups and the fact each feeds (none: advice only).
    pub groups: Vec<(String, Option<FactKind>)>,
    pub scanned: usize,
    pub stored: i64,
    pub newly_matched: usize,
    pub matched: usize,
    pub no_longer_matched: usize,
    pub shadowed: usize,
    pub category_changed: usize,
    pub changed: Vec<(i64, String, String)>,
    /// (cases, accuracy before, after, precision, lowers)
    pub corpus: Option<(usize, String, String, String, bool)>,
    pub warnings: Vec<String>,
}

impl From<&Preview> for PreviewView {
    fn from(p: &Preview) -> Self {
        PreviewView {
            ok: p.check.problems.is_empty(),
            problems: p.check.problems.clone(),
            examples: p
                .check
                .examples
                .iter()
                .map(|e| ExampleRow {
                    line: e.line.clone(),
                    kind: if e.should_match {
                        "example"
                    } else {
                        "counter-example"
                    },
                    ok: e.ok(),
                    matched: e.matched,
                    captures: e.captures.clone(),
                    facts: super::reports::fact_rows(&e.facts),
                })
                .collect(),
            groups: p.check.groups.clone(),
            scanned: p.reports.scanned,
            stored: p.reports.stored,
            newly_matched: p.reports.newly_matched,
            matched: p.reports.matched,
            no_longer_matched: p.reports.no_longer_matched,
            shadowed: p.reports.shadowed,
            category_changed: p.reports.category_changed,
            changed: p
                .reports
                .changed
                .iter()
                .map(|(id, b, a)| (*id, b.to_string(), a.to_string()))
                .collect(),
            corpus: p.corpus.as_ref().map(|c| {
                (
                    c.cases,
                    format!("{:.1}%", c.accuracy_before()),
                    format!("{:.1}%", c.accuracy_after()),
                    c.precision()
                        .map_or("n/a (never the root cause)".to_owned(), |v| {
                            format!("{v:.1}% of {} case(s)", c.rule_root)
                        }),
                    c.lowers_accuracy(),
                )
            }),
            warnings: p.warnings(),
        }
    }
}

/// `GET /rules/new` and the form re-rendered after Preview or a refused Save.
#[derive(Template, WebTemplate)]
#[template(path = "rule_form.html")]
pub struct RuleFormPage {
    layout: Layout,
    form: RuleForm,
    /// (name, selected)
    categories: Vec<(&'static str, bool)>,
    error: Option<String>,
    preview: Option<PreviewView>,
    /// Capture names that become typed facts, for the pattern's help text.
    fact_names: Vec<&'static str>,
}

fn form_page(user: &PortalUser, form: RuleForm) -> RuleFormPage {
    RuleFormPage {
        fact_names: FactKind::ALL.iter().map(|k| k.capture_name()).collect(),
        layout: Layout::for_user(Some(user)),
        categories: Category::ALL
            .iter()
            .map(|c| (c.as_str(), c.as_str() == form.category))
            .collect(),
        form,
        error: None,
        preview: None,
    }
}

/// `?edit=ID`: start from an existing rule (an override, for a built-in one).
#[derive(Debug, Deserialize)]
pub struct NewParams {
    edit: Option<String>,
}

/// `GET /rules/new[?edit=ID]`
pub async fn new_rule(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
    QueryParams(p): QueryParams<NewParams>,
) -> Result<RuleFormPage, PageError> {
    let mut form = RuleForm {
        enabled: Some("on".into()),
        specificity: "80".into(),
        ..RuleForm::default()
    };
    if let Some(id) = p.edit {
        let (rules, _) = team_rules::list(&state.db, false).await?;
        let info = rules
            .into_iter()
            .find(|r| r.spec.id == id)
            .ok_or(AppError::NotFound("rule"))?;
        form = RuleForm::from_spec(&info.spec, info.enabled);
    }
    Ok(form_page(&user, form))
}

/// `POST /rules`: Preview (render the dry run) or Save (store, then the rule's page).
pub async fn save_rule(
    State(state): State<AppState>,
    CsrfForm { user, form }: CsrfForm<RuleForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
    let spec = match form.spec() {
        Ok(s) => s,
        Err(e) => return Ok(refused(&user, form, e)),
    };
    if form.action == "preview" {
        return Ok(
            match team_rules::preview(&state.db, &state.ruleset, spec).await {
                Ok(p) => {
                    let mut page = form_page(&user, form);
                    page.preview = Some(PreviewView::from(&p));
                    page.into_response()
                }
                Err(e) => refused(&user, form, AppError::from(e).to_string()),
            },
        );
    }
    let id = spec.id.clone();
    let change = Change::Put {
        id: id.clone(),
        spec: Some(spec),
        enabled: form.enabled.is_some(),
        create: false,
    };
    let confirm = form.confirm.is_some();
    match team_rules::save(&state.db, &state.ruleset, change, &user.actor(), confirm).await {
        Ok(_) => Ok(Redirect::to(&format!("/rules/{id}")).into_response()),
        Err(e) => match AppError::from(e) {
            e @ AppError::Unprocessable(..) => Ok(refused(&user, form, e.to_string())),
            other => Err(other.into()),
        },
    }
}

/// The form again, with why it was refused (422).
fn refused(user: &PortalUser, form: RuleForm, message: String) -> Response {
    let mut page = form_page(user, form);
    page.error = Some(message);
    (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
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
    CsrfForm { user, form }: CsrfForm<ActionForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
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
    CsrfForm { user, form: _ }: CsrfForm<ActionForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
    let change = Change::Delete { id };
    team_rules::save(&state.db, &state.ruleset, change, &user.actor(), false)
        .await
        .map_err(AppError::from)?;
    Ok(Redirect::to("/rules").into_response())
}

/// `POST /rules/reclassify`: re-run the current rules over stored reports in the background.
pub async fn start_reclassify(
    State(state): State<AppState>,
    CsrfForm { user, form: _ }: CsrfForm<ActionForm>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Admin])?;
    reclassify::start(&state.db, &state.ruleset, &user.actor())
        .await
        .map_err(AppError::from)?;
    Ok(Redirect::to("/rules#reclassify").into_response())
}
