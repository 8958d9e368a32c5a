//! The portal's rule editor: `GET /rules/new[?edit=ID]` (a new rule, or an existing one to
//! change or override) and `POST /rules`, whose "Preview" button renders the dry run under the
//! form and whose "Save" button stores the rule, then shows its page. A form that cannot be a
//! rule, or a rule that is refused, comes back with what was typed and the reason (422). The
//! post checks the session's CSRF token; both need the admin scope.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::app::team_rules::{self, FormAction, FormOutcome, Preview};
use crate::rules::Category;
use crate::rules::facts::FactKind;
use crate::rules::spec::RuleSpec;
use crate::rules::team_compile::Captured;
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm, QueryParams};
use crate::web::scope::{Admin, ScopedUser};
use crate::web::state::AppState;

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
    /// The button pressed: `preview`, else Save with the boxes as ticked.
    fn submitted(&self) -> FormAction {
        if self.action == "preview" {
            FormAction::Preview
        } else {
            FormAction::Save {
                enabled: self.enabled.is_some(),
                confirm: self.confirm.is_some(),
            }
        }
    }

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
            kind: None,
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
    let form = match p.edit {
        Some(id) => {
            let info = team_rules::rule(&state.db, &id, false)
                .await
                .map_err(AppError::from)?;
            RuleForm::from_spec(&info.spec, info.enabled)
        }
        None => RuleForm {
            enabled: Some("on".into()),
            specificity: "80".into(),
            ..RuleForm::default()
        },
    };
    Ok(form_page(&user, form))
}

/// `POST /rules`: Preview (render the dry run) or Save (store, then the rule's page).
pub async fn save_rule(
    State(state): State<AppState>,
    CsrfForm { user, form, .. }: CsrfForm<RuleForm, Admin>,
) -> Result<Response, PageError> {
    let spec = match form.spec() {
        Ok(s) => s,
        Err(e) => return Ok(refused(&user, form, e)),
    };
    let id = spec.id.clone();
    let action = form.submitted();
    match team_rules::submit_form(&state.db, &state.ruleset, spec, action, &user.actor()).await {
        Ok(FormOutcome::Previewed(p)) => {
            let mut page = form_page(&user, form);
            page.preview = Some(PreviewView::from(&p));
            Ok(page.into_response())
        }
        Ok(FormOutcome::Saved(_)) => Ok(Redirect::to(&format!("/rules/{id}")).into_response()),
        // A preview shows whatever stopped it by the form; a save, only a refusal.
        Err(e) => match (action, AppError::from(e)) {
            (FormAction::Preview, e) | (_, e @ AppError::Unprocessable(..)) => {
                Ok(refused(&user, form, e.to_string()))
            }
            (_, other) => Err(other.into()),
        },
    }
}

/// The form again, with why it was refused (422).
fn refused(user: &PortalUser, form: RuleForm, message: String) -> Response {
    let mut page = form_page(user, form);
    page.error = Some(message);
    (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
}
