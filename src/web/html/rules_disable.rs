//! `GET /rules/{id}/disable`: the look before a rule is turned off. It shows what the dry run
//! found (stored reports the rule would stop naming and those whose category would change, each
//! example line classified with and without the rule, the labelled corpus's accuracy) and a
//! confirm button that posts `confirm=yes` to `POST /rules/{id}/enabled`; a built-in rule is not
//! disabled without it. Admins only, like every rule change (the dry run reads stored logs).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};

use super::Layout;
use super::rules::path_segment;
use crate::app::team_rules::{self, DisablePreview, ExampleImpact};
use crate::rules::Category;
use crate::web::error::{AppError, PageError};
use crate::web::scope::{Admin, ScopedUser};
use crate::web::state::AppState;

/// One example line, now and without the rule.
pub struct ExampleRow {
    pub line: String,
    /// "cuda.assert.index (out_of_bounds)", or "no rule (unknown)".
    pub now: String,
    pub after: String,
    /// The rule names this line now and would not after.
    pub lost: bool,
}

impl ExampleRow {
    fn new(e: &ExampleImpact, rule_id: &str) -> ExampleRow {
        let name = |v: &team_rules::LineVerdict| match &v.rule {
            Some(rule) => format!("{rule} ({})", v.category.words()),
            None => format!("no rule ({})", v.category.words()),
        };
        ExampleRow {
            line: e.line.clone(),
            now: name(&e.now),
            after: name(&e.after),
            lost: e.lost(rule_id),
        }
    }
}

/// `GET /rules/{id}/disable`
#[derive(Template, WebTemplate)]
#[template(path = "rule_disable.html")]
pub struct DisablePage {
    layout: Layout,
    id: String,
    /// The id as a path segment, for links and the form's action.
    path: String,
    title: String,
    category: Category,
    builtin: bool,
    enabled: bool,
    scanned: usize,
    stored: i64,
    capped: bool,
    /// Stored reports the rule names now and would not after.
    no_longer_matched: usize,
    category_changed: usize,
    /// (report id, category now, category after), the first few.
    changed: Vec<(i64, Category, Category)>,
    examples: Vec<ExampleRow>,
    /// Examples the rule would stop naming.
    examples_lost: usize,
    /// (cases, accuracy now, after, lower)
    corpus: Option<(usize, String, String, bool)>,
}

impl DisablePage {
    fn new(layout: Layout, id: &str, p: DisablePreview) -> DisablePage {
        let examples: Vec<ExampleRow> = p.examples.iter().map(|e| ExampleRow::new(e, id)).collect();
        DisablePage {
            layout,
            id: id.to_owned(),
            path: path_segment(id),
            title: p.spec.title,
            category: p.spec.category,
            builtin: p.builtin,
            enabled: p.enabled,
            scanned: p.reports.scanned,
            stored: p.reports.stored,
            capped: p.reports.capped(),
            no_longer_matched: p.reports.no_longer_matched,
            category_changed: p.reports.category_changed,
            changed: p.reports.changed,
            examples_lost: examples.iter().filter(|e| e.lost).count(),
            examples,
            corpus: p.corpus.map(|c| {
                (
                    c.cases,
                    format!("{:.1}%", c.accuracy_before()),
                    format!("{:.1}%", c.accuracy_after()),
                    c.lowers_accuracy(),
                )
            }),
        }
    }
}

/// `GET /rules/{id}/disable`: what turning the rule off would do, and the confirm button.
pub async fn show_disable(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
    Path(id): Path<String>,
) -> Result<DisablePage, PageError> {
    let preview = team_rules::preview_disable(&state.db, &state.ruleset, &id)
        .await
        .map_err(AppError::from)?;
    Ok(DisablePage::new(
        Layout::for_user(Some(&user)),
        &id,
        preview,
    ))
}
