//! `GET/POST /api/v1/rules`, `PUT/DELETE /api/v1/rules/{id}`, `POST /api/v1/rules/preview`:
//! team rules as JSON (read scope to list, admin to write or dry-run). A rule that is refused
//! (pattern over the limits, failing examples, too many rules) gets 422 with the reason; a rule
//! that lowers accuracy on the configured corpus gets 422 `lowers_accuracy` unless the body says
//! `"confirm": true`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use crate::api_types::rules::{
    ChangedReport, CorpusEffect, ExampleCheck, ReportsEffect, RuleDeleted, RuleList, RuleListing,
    RulePreview, RuleSaved,
};
use crate::api_types::{ErrorBody, ErrorCode};
use crate::app::team_rules::{self, Change, Preview, RuleInfo, SavedRule, TeamRulesError};
use crate::rules::Category;
use crate::rules::preview::{CorpusDryRun, ReportsDryRun};
use crate::rules::spec::RuleSpec;
use crate::web::error::AppError;
use crate::web::extract::{JsonShape, ShapedJson};
use crate::web::scope::{Admin, Read, Scoped};
use crate::web::state::AppState;

/// A team-rule refusal as `app` says it (`app::Error`'s mapping of [`TeamRulesError`]).
impl From<TeamRulesError> for AppError {
    fn from(err: TeamRulesError) -> Self {
        crate::app::Error::from(err).into()
    }
}

/// A rule as written by a client: the fields of `builtin.toml`, plus `enabled` and `confirm`.
/// Without any rule field, the body only turns the rule on or off (`enabled`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    pub id: Option<String>,
    pub category: Option<Category>,
    pub title: Option<String>,
    /// Where the message comes from (library and source file); optional.
    pub source: Option<String>,
    pub pattern: Option<String>,
    pub specificity: Option<u8>,
    /// The message usually follows another process's failure (see `RuleSpec::consequence`).
    pub consequence: Option<bool>,
    pub advice: Option<Vec<String>>,
    pub examples: Option<Vec<String>>,
    pub counter_examples: Option<Vec<String>>,
    pub enabled: Option<bool>,
    /// Store a rule even though it lowers corpus accuracy.
    #[serde(default)]
    pub confirm: bool,
}

impl RuleBody {
    fn has_spec(&self) -> bool {
        self.category.is_some()
            || self.title.is_some()
            || self.source.is_some()
            || self.pattern.is_some()
            || self.specificity.is_some()
            || self.consequence.is_some()
            || self.advice.is_some()
            || self.examples.is_some()
            || self.counter_examples.is_some()
    }

    /// The rule, when the body carries one (category, title and pattern are then required).
    pub fn spec(&self, id: &str) -> Result<Option<RuleSpec>, AppError> {
        if !self.has_spec() {
            return Ok(None);
        }
        let missing =
            |f: &str| AppError::Unprocessable(ErrorCode::InvalidRule, format!("{f} is required"));
        Ok(Some(RuleSpec {
            id: id.to_owned(),
            category: self.category.ok_or_else(|| missing("category"))?,
            title: self.title.clone().ok_or_else(|| missing("title"))?,
            source: self.source.clone().unwrap_or_default(),
            pattern: self.pattern.clone().ok_or_else(|| missing("pattern"))?,
            specificity: self.specificity.unwrap_or(50),
            consequence: self.consequence.unwrap_or(false),
            kind: None,
            advice: self.advice.clone().unwrap_or_default(),
            examples: self.examples.clone().unwrap_or_default(),
            counter_examples: self.counter_examples.clone().unwrap_or_default(),
        }))
    }

    /// The change this body asks for on rule `id`.
    pub fn change(&self, id: &str) -> Result<Change, AppError> {
        match self.spec(id)? {
            Some(spec) => Ok(Change::Put {
                id: id.to_owned(),
                spec: Some(spec),
                enabled: self.enabled.unwrap_or(true),
                create: false,
            }),
            None => match self.enabled {
                Some(enabled) => Ok(Change::SetEnabled {
                    id: id.to_owned(),
                    enabled,
                }),
                None => Err(AppError::Unprocessable(
                    ErrorCode::InvalidRule,
                    "nothing to change: give the rule's fields, or enabled".into(),
                )),
            },
        }
    }
}

/// The rule body: malformed JSON is 400 `bad_json` (a body without `Content-Type:
/// application/json` too) and 413 over the cap; JSON that is not the documented object is 422
/// `invalid_rule`.
impl JsonShape for RuleBody {
    const SHAPE_ERROR: ErrorCode = ErrorCode::InvalidRule;
    const MISSING_CONTENT_TYPE_IS_415: bool = false;
}

/// A listed rule as the API shows it.
pub fn rule_listing(r: &RuleInfo) -> RuleListing {
    RuleListing {
        id: r.spec.id.clone(),
        origin: r.origin,
        enabled: r.enabled,
        overridden: r.overridden,
        category: r.spec.category,
        title: r.spec.title.clone(),
        pattern: r.spec.pattern.clone(),
        specificity: r.spec.specificity,
        advice: r.spec.advice.clone(),
        examples: r.spec.examples.clone(),
        counter_examples: r.spec.counter_examples.clone(),
        updated_at: r.updated_at,
        updated_by: r.updated_by.clone(),
        hits: r.hits,
    }
}

/// `GET /api/v1/rules`: every rule (built-in, then team) with hit counts.
#[utoipa::path(
    get,
    path = "/api/v1/rules",
    tag = "rules",
    responses(
        (status = 200, description = "Every rule, built-in then team, with hit counts.",
            body = RuleList),
    ),
    security(("bearer" = ["read"])),
)]
pub async fn list_rules(
    State(state): State<AppState>,
    _: Scoped<Read>,
) -> Result<Json<RuleList>, AppError> {
    let (rules, version) = team_rules::list(&state.db, true).await?;
    Ok(Json(RuleList {
        version,
        rules: rules.iter().map(rule_listing).collect(),
    }))
}

/// A save as the API answers it, with the rule as listed now.
fn rule_saved(s: &SavedRule) -> RuleSaved {
    RuleSaved {
        rule: s.rule.as_ref().map(rule_listing),
        version: s.saved.version,
        corpus: s.saved.corpus.as_ref().map(corpus_effect),
    }
}

/// `POST /api/v1/rules`: create a team rule (or an override, with a built-in id).
#[utoipa::path(
    post,
    path = "/api/v1/rules",
    tag = "rules",
    request_body(content = RuleBody, content_type = "application/json"),
    responses(
        (status = 201, description = "The rule was saved and is in use.", body = RuleSaved),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 409, description = "`rule_exists`: a rule of that id exists (change it with \
            PUT); `busy`: another rule change is being saved.", body = ErrorBody),
        (status = 422, description = "`invalid_rule`: a missing field, a pattern over the \
            limits, failing examples, too many rules; `lowers_accuracy`: the rule lowers corpus \
            accuracy (send `confirm: true` to save it anyway).", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn create_rule(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    ShapedJson(b): ShapedJson<RuleBody>,
) -> Result<(StatusCode, Json<RuleSaved>), AppError> {
    let id = b
        .id
        .clone()
        .ok_or_else(|| AppError::Unprocessable(ErrorCode::InvalidRule, "id is required".into()))?;
    let spec = b.spec(&id)?;
    if spec.is_none() && b.enabled.is_none() {
        return Err(AppError::Unprocessable(
            ErrorCode::InvalidRule,
            "nothing to create: give the rule's fields, or enabled for a built-in id".into(),
        ));
    }
    // Create-only: an existing entry is refused inside the save, under the edit lock.
    let change = Change::Put {
        id,
        spec,
        enabled: b.enabled.unwrap_or(true),
        create: true,
    };
    let saved =
        team_rules::save_listed(&state.db, &state.ruleset, change, &token.actor(), b.confirm)
            .await?;
    Ok((StatusCode::CREATED, Json(rule_saved(&saved))))
}

/// `PUT /api/v1/rules/{id}`: replace a rule, override a built-in one, or turn it on or off.
#[utoipa::path(
    put,
    path = "/api/v1/rules/{id}",
    tag = "rules",
    params(("id" = String, Path, description = "The rule's id.")),
    request_body(content = RuleBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The rule was saved and is in use.", body = RuleSaved),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 404, description = "`not_found`: no rule of that id (to turn on or off).",
            body = ErrorBody),
        (status = 409, description = "`busy`: another rule change is being saved.",
            body = ErrorBody),
        (status = 422, description = "`invalid_rule` (including a body id that differs from \
            the path's) or `lowers_accuracy`.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn update_rule(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    Path(id): Path<String>,
    ShapedJson(b): ShapedJson<RuleBody>,
) -> Result<Json<RuleSaved>, AppError> {
    if b.id.as_ref().is_some_and(|bid| bid != &id) {
        return Err(AppError::Unprocessable(
            ErrorCode::InvalidRule,
            "the body's id differs from the path's; ids cannot be renamed".into(),
        ));
    }
    let change = b.change(&id)?;
    let saved =
        team_rules::save_listed(&state.db, &state.ruleset, change, &token.actor(), b.confirm)
            .await?;
    Ok(Json(rule_saved(&saved)))
}

/// `DELETE /api/v1/rules/{id}`: remove a team rule or an override.
#[utoipa::path(
    delete,
    path = "/api/v1/rules/{id}",
    tag = "rules",
    params(("id" = String, Path, description = "The rule's id.")),
    responses(
        (status = 200, description = "The rule was removed (an override's built-in rule is \
            back).", body = RuleDeleted),
        (status = 404, description = "`not_found`: no team rule or override of that id.",
            body = ErrorBody),
        (status = 409, description = "`busy`: another rule change is being saved.",
            body = ErrorBody),
        (status = 422, description = "`invalid_rule`: the change is refused.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    token: Scoped<Admin>,
    Path(id): Path<String>,
) -> Result<Json<RuleDeleted>, AppError> {
    let change = Change::Delete { id: id.clone() };
    let saved = team_rules::save(&state.db, &state.ruleset, change, &token.actor(), false).await?;
    Ok(Json(RuleDeleted {
        deleted: id,
        version: saved.version,
    }))
}

/// `POST /api/v1/rules/preview`: the dry run of a rule, nothing stored.
#[utoipa::path(
    post,
    path = "/api/v1/rules/preview",
    tag = "rules",
    request_body(content = RuleBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The dry run: examples, effect on the newest stored \
            reports and on the corpus.", body = RulePreview),
        (status = 400, description = "`bad_json`: malformed JSON.", body = ErrorBody),
        (status = 409, description = "`busy`: another rule change is being saved.",
            body = ErrorBody),
        (status = 422, description = "`invalid_rule`: a missing field or a pattern that does \
            not compile within the limits.", body = ErrorBody),
    ),
    security(("bearer" = ["admin"])),
)]
pub async fn preview_rule(
    State(state): State<AppState>,
    _: Scoped<Admin>,
    ShapedJson(b): ShapedJson<RuleBody>,
) -> Result<Json<RulePreview>, AppError> {
    let id = b.id.clone().unwrap_or_else(|| "team.preview".into());
    let spec = b.spec(&id)?.ok_or_else(|| {
        AppError::Unprocessable(
            ErrorCode::InvalidRule,
            "category, title and pattern are required".into(),
        )
    })?;
    let p = team_rules::preview(&state.db, &state.ruleset, spec).await?;
    Ok(Json(rule_preview(&p)))
}

/// The dry run as the API shows it.
pub fn rule_preview(p: &Preview) -> RulePreview {
    RulePreview {
        ok: p.check.problems.is_empty(),
        problems: p.check.problems.clone(),
        examples: (p.check.examples.iter())
            .map(|e| ExampleCheck {
                line: e.line.clone(),
                should_match: e.should_match,
                matched: e.matched,
                ok: e.ok(),
            })
            .collect(),
        reports: reports_effect(&p.reports),
        corpus: p.corpus.as_ref().map(corpus_effect),
        warnings: p.warnings(),
    }
}

fn reports_effect(r: &ReportsDryRun) -> ReportsEffect {
    ReportsEffect {
        scanned: r.scanned,
        stored: r.stored,
        capped: r.capped(),
        matched: r.matched,
        newly_matched: r.newly_matched,
        shadowed: r.shadowed,
        category_changed: r.category_changed,
        changed: (r.changed.iter())
            .map(|&(report_id, before, after)| ChangedReport {
                report_id,
                before,
                after,
            })
            .collect(),
    }
}

fn corpus_effect(c: &CorpusDryRun) -> CorpusEffect {
    CorpusEffect {
        cases: c.cases,
        correct_before: c.correct_before,
        correct_after: c.correct_after,
        accuracy_before: c.accuracy_before(),
        accuracy_after: c.accuracy_after(),
        rule_matched: c.rule_matched,
        rule_root: c.rule_root,
        precision: c.precision(),
        lowers_accuracy: c.lowers_accuracy(),
    }
}
