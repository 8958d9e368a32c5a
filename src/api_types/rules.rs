//! The wire shapes of `/api/v1/rules`: a listed rule, the list, the answer to a save or a
//! delete, and a rule's dry run (its examples, its effect on stored reports and on the labelled
//! corpus). Declared here, as typed structs, so the handlers and the OpenAPI document read the
//! same fields.

use serde::{Deserialize, Serialize};

use crate::rules::Category;
use crate::time::Timestamp;

/// Where a rule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleOrigin {
    /// Shipped in `builtin.toml`.
    Builtin,
    /// Written by the team.
    Team,
}

/// One rule as `GET /api/v1/rules` lists it: the rule in effect (a team override's fields
/// when it overrides a built-in rule).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuleListing {
    pub id: String,
    pub origin: RuleOrigin,
    /// Whether it takes part in matching.
    pub enabled: bool,
    /// A built-in rule replaced by a team rule of the same id.
    pub overridden: bool,
    pub category: Category,
    pub title: String,
    /// The regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// How strongly a hit names a root cause (0-100).
    pub specificity: u8,
    pub advice: Vec<String>,
    pub examples: Vec<String>,
    pub counter_examples: Vec<String>,
    /// The team entry's last change; null for a built-in rule without one.
    #[schema(required)]
    pub updated_at: Option<Timestamp>,
    #[schema(required)]
    pub updated_by: Option<String>,
    /// Stored reports whose classification names this rule (0 in save answers).
    pub hits: i64,
}

/// `GET /api/v1/rules` response: built-in rules (file order), then team rules (oldest first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuleList {
    /// The stored ruleset version.
    pub version: i64,
    pub rules: Vec<RuleListing>,
}

/// `POST /api/v1/rules` (201) and `PUT /api/v1/rules/{id}` (200) response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuleSaved {
    /// The rule as saved; null when the change left no rule of that id.
    #[schema(required)]
    pub rule: Option<RuleListing>,
    /// The ruleset version now stored and in use.
    pub version: i64,
    /// The corpus dry run, when a corpus is configured and the change adds or edits a rule.
    #[schema(required)]
    pub corpus: Option<CorpusEffect>,
}

/// `DELETE /api/v1/rules/{id}` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RuleDeleted {
    /// The id removed.
    pub deleted: String,
    pub version: i64,
}

/// How one example or counter-example fared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExampleCheck {
    pub line: String,
    /// An example (true) or a counter-example (false).
    pub should_match: bool,
    /// Whether the rule, run through the whole engine, found it.
    pub matched: bool,
    /// The line behaved as declared.
    pub ok: bool,
}

/// A stored report whose category the rule would change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChangedReport {
    pub report_id: i64,
    pub before: Category,
    pub after: Category,
}

/// A rule's effect on the newest stored reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportsEffect {
    /// Reports classified (the newest, up to the scan cap).
    pub scanned: usize,
    /// Reports stored in all.
    pub stored: i64,
    /// Not every stored report was scanned.
    pub capped: bool,
    /// Reports the rule matches.
    pub matched: usize,
    /// Reports the rule matches and did not before.
    pub newly_matched: usize,
    /// Reports where more specific rules already name the matching line.
    pub shadowed: usize,
    /// Reports whose category would change.
    pub category_changed: usize,
    /// Up to 20 of them.
    pub changed: Vec<ChangedReport>,
}

/// A rule's effect on the labelled corpus (accuracies in percent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CorpusEffect {
    pub cases: usize,
    pub correct_before: usize,
    pub correct_after: usize,
    pub accuracy_before: f64,
    pub accuracy_after: f64,
    /// Cases the rule matches anywhere.
    pub rule_matched: usize,
    /// Cases where it names the root cause.
    pub rule_root: usize,
    /// Of those, the share labelled with the rule's category; null when it never is the root
    /// cause.
    #[schema(required)]
    pub precision: Option<f64>,
    pub lowers_accuracy: bool,
}

/// `POST /api/v1/rules/preview` response: the dry run of a rule, nothing stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RulePreview {
    /// The rule may be saved (`problems` is empty).
    pub ok: bool,
    /// What `rules check` finds wrong.
    pub problems: Vec<String>,
    /// Examples, then counter-examples.
    pub examples: Vec<ExampleCheck>,
    pub reports: ReportsEffect,
    /// Null when no corpus is configured.
    #[schema(required)]
    pub corpus: Option<CorpusEffect>,
    pub warnings: Vec<String>,
}
