//! Turning a rule off with a look first. Disabling a built-in rule changes how every future log
//! is classified, so the portal shows what it would do (the stored reports the rule would stop
//! naming and those whose category would change, what each of the rule's example lines would
//! be classified as without it, the labelled corpus's accuracy) before an admin confirms, and a
//! disable of a built-in rule that was not confirmed is not applied. The dry run reuses the
//! editor's machinery (`rules::preview`); the API keeps its one-step `PUT`.

use std::sync::Arc;

use super::edit::{Change, Saved, apply, corpus_dry_run, save, scan_reports};
use super::{RulesetHandle, TeamRulesError, compile, entries};
use crate::actor::Actor;
use crate::rules::preview::{CorpusDryRun, ReportsDryRun};
use crate::rules::spec::{RuleFile, RuleSpec};
use crate::rules::{Category, Ruleset, team_compile};
use crate::storage::Db;
use crate::storage::rules as store;

/// Which rule names a line's root cause, and its category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineVerdict {
    /// The root cause's rule; `None` when no rule matches (the line is `unknown`).
    pub rule: Option<String>,
    pub category: Category,
}

/// One of the rule's example lines, classified with the rule and without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleImpact {
    pub line: String,
    pub now: LineVerdict,
    pub after: LineVerdict,
}

impl ExampleImpact {
    /// The rule names this line's root cause now, and will not once disabled.
    #[must_use]
    pub fn lost(&self, rule_id: &str) -> bool {
        self.now.rule.as_deref() == Some(rule_id) && self.after.rule.as_deref() != Some(rule_id)
    }
}

/// What disabling a rule would do.
#[derive(Debug, Clone)]
pub struct DisablePreview {
    /// The rule in effect (an override's spec when overridden).
    pub spec: RuleSpec,
    /// Shipped with gpu-triage (disabling it needs confirmation).
    pub builtin: bool,
    /// Whether it is enabled now.
    pub enabled: bool,
    /// Over the newest stored reports: `no_longer_matched` and the category changes.
    pub reports: ReportsDryRun,
    /// Each example line of the rule, with and without it.
    pub examples: Vec<ExampleImpact>,
    /// Over the labelled corpus, when configured.
    pub corpus: Option<CorpusDryRun>,
}

/// Dry-runs disabling rule `id` (404 when there is no such rule).
#[tracing::instrument(name = "team_rules::preview_disable", skip_all, fields(rule_id = id))]
pub async fn preview_disable(
    db: &Db,
    handle: &RulesetHandle,
    id: &str,
) -> Result<DisablePreview, TeamRulesError> {
    let (rules, _) = super::list(db, false).await?;
    let info = rules
        .into_iter()
        .find(|r| r.spec.id == id)
        .ok_or(TeamRulesError::NotFound)?;
    let (stored, _) = store::list_team_rules(db).await?;
    let current = entries(&stored)?;
    let next = apply(
        &current,
        &Change::SetEnabled {
            id: id.to_owned(),
            enabled: false,
        },
    )?;
    let before = Arc::new(compile(current).await?);
    let after = Arc::new(compile(next).await?);
    // Nothing stands for the rule's pattern once it is off: no report counts as "shadowed".
    let nothing = Arc::new(
        tokio::task::spawn_blocking(|| Ruleset::compile(RuleFile::default()))
            .await
            .map_err(|e| TeamRulesError::Internal(e.to_string()))??,
    );
    let sets = [before.clone(), after.clone(), nothing];
    let reports = scan_reports(db, sets.clone(), id).await?;
    let corpus = match handle.corpus() {
        Some(dir) => Some(corpus_dry_run(dir, sets, id.to_owned(), info.spec.category).await?),
        None => None,
    };
    let lines = info.spec.examples.clone();
    let examples = tokio::task::spawn_blocking(move || {
        lines
            .into_iter()
            .map(|line| ExampleImpact {
                now: verdict(&before, &line),
                after: verdict(&after, &line),
                line,
            })
            .collect()
    })
    .await
    .map_err(|e| TeamRulesError::Internal(e.to_string()))?;
    Ok(DisablePreview {
        builtin: info.origin == super::Origin::Builtin,
        enabled: info.enabled,
        spec: info.spec,
        reports,
        examples,
        corpus,
    })
}

fn verdict(ruleset: &Ruleset, line: &str) -> LineVerdict {
    let c = ruleset.classify_bytes("-", line.as_bytes());
    LineVerdict {
        rule: c.root_cause.map(|r| r.rule),
        category: c.category,
    }
}

/// What a request to turn a rule on or off did.
#[derive(Debug, Clone)]
pub enum Toggled {
    /// Stored and in use.
    Saved(Saved),
    /// Disabling a built-in rule needs a confirmed request, after its preview: nothing changed.
    NeedsConfirmation,
}

/// Turns rule `id` on or off for `actor`. Turning a built-in rule off takes `confirmed` (the
/// portal's confirm step); without it nothing is written.
#[tracing::instrument(name = "team_rules::set_enabled", skip_all, fields(rule_id = id, enabled = enabled, actor = actor.name(), confirmed = confirmed))]
pub async fn set_enabled(
    db: &Db,
    handle: &RulesetHandle,
    id: &str,
    enabled: bool,
    actor: &Actor,
    confirmed: bool,
) -> Result<Toggled, TeamRulesError> {
    let builtin = team_compile::builtin_file()?
        .rule
        .iter()
        .any(|r| r.id == id);
    if builtin && !enabled && !confirmed {
        return Ok(Toggled::NeedsConfirmation);
    }
    let change = Change::SetEnabled {
        id: id.to_owned(),
        enabled,
    };
    Ok(Toggled::Saved(
        save(db, handle, change, actor, false).await?,
    ))
}
