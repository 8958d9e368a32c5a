//! Changing team rules: save (validate the whole merged ruleset against exactly what is about to
//! be written, gate on corpus accuracy, commit with a `rule_saved` webhook event per changed
//! entry, swap), the dry run shown before saving, and the TOML export/import that lets rules
//! live in a repository.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{RulesetHandle, TeamRulesError, compile, entries};
use crate::actor::Actor;
use crate::rules::preview::{Candidate, CorpusDryRun, ReportsDryRun, batches_by_size};
use crate::rules::spec::RuleSpec;
use crate::rules::team_compile::{self, RuleCheck, TeamEntry};
use crate::rules::{Ruleset, corpus};
use crate::storage::Db;
use crate::storage::rules::{self as store, RuleWrite};

/// Stored reports a dry run classifies at most (newest first).
pub const PREVIEW_REPORTS: i64 = 500;
/// Decompressed bytes of one stored log a dry run reads at most.
const PREVIEW_LOG_BYTES: u64 = 32 << 20;
/// Compressed bytes of stored logs a dry run holds in memory at once (one batch).
const PREVIEW_BATCH_BYTES: i64 = 16 << 20;

/// One change to the team rules.
#[derive(Debug, Clone)]
pub enum Change {
    /// Create or replace an entry. `spec: None` is only for built-in ids (enable/disable the
    /// built-in rule as shipped). With `create`, an existing entry for the id is refused
    /// ([`TeamRulesError::Exists`]), checked under the edit lock so two creates cannot both win.
    Put {
        id: String,
        spec: Option<RuleSpec>,
        enabled: bool,
        create: bool,
    },
    /// Turn an entry on or off, keeping its rule (for a built-in id without an entry, the
    /// built-in rule as shipped).
    SetEnabled { id: String, enabled: bool },
    /// Remove a team rule or an override (restoring the built-in rule).
    Delete { id: String },
}

impl Change {
    /// The rule id the change is about.
    pub fn id(&self) -> &str {
        match self {
            Change::Put { id, .. } | Change::SetEnabled { id, .. } | Change::Delete { id } => id,
        }
    }
}

/// What a save did.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The ruleset version now stored and in use here.
    pub version: i64,
    /// The corpus dry run, when a corpus is configured and the change adds or edits a rule.
    pub corpus: Option<CorpusDryRun>,
}

/// Applies `change` to `current`, checking it makes sense for the id.
pub(super) fn apply(
    current: &[TeamEntry],
    change: &Change,
) -> Result<Vec<TeamEntry>, TeamRulesError> {
    let builtin = team_compile::builtin_file()?;
    let is_builtin = builtin.rule.iter().any(|r| r.id == change.id());
    let is_context = builtin.context.iter().any(|c| c.id == change.id());
    if is_context {
        return Err(TeamRulesError::BadInput(format!(
            "{} is a built-in context extractor, not a rule; pick another id",
            change.id()
        )));
    }
    let mut next: Vec<TeamEntry> = current.to_vec();
    let at = next.iter().position(|e| e.id == change.id());
    match change {
        Change::Put {
            id,
            spec,
            enabled,
            create,
        } => {
            if *create && at.is_some() {
                return Err(TeamRulesError::Exists(id.clone()));
            }
            if spec.is_none() && !is_builtin {
                return Err(TeamRulesError::BadInput(
                    "a team rule needs category, title and pattern".into(),
                ));
            }
            let entry = TeamEntry {
                id: id.clone(),
                spec: spec.clone(),
                enabled: *enabled,
            };
            match at {
                Some(i) => next[i] = entry,
                None => next.push(entry),
            }
        }
        Change::SetEnabled { id, enabled } => match at {
            Some(i) => next[i].enabled = *enabled,
            None if is_builtin => next.push(TeamEntry {
                id: id.clone(),
                spec: None,
                enabled: *enabled,
            }),
            None => return Err(TeamRulesError::NotFound),
        },
        Change::Delete { .. } => match at {
            Some(i) => {
                next.remove(i);
            }
            None if is_builtin => {
                return Err(TeamRulesError::BadInput(
                    "built-in rules cannot be deleted; disable or override them".into(),
                ));
            }
            None => return Err(TeamRulesError::NotFound),
        },
    }
    Ok(next)
}

fn write_of(e: &TeamEntry) -> Result<RuleWrite, TeamRulesError> {
    Ok(RuleWrite::Put {
        rule_id: e.id.clone(),
        spec: e
            .spec
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|err| TeamRulesError::Internal(err.to_string()))?,
        enabled: e.enabled,
    })
}

/// Saves one change by `actor`: validates the merged ruleset, refuses a rule that lowers corpus
/// accuracy unless `confirm`, commits (history, version, notify) and swaps the ruleset in.
#[tracing::instrument(name = "team_rules::save", skip_all, fields(rule_id = change.id(), actor = actor.name(), confirm = confirm, version = tracing::field::Empty))]
pub async fn save(
    db: &Db,
    handle: &RulesetHandle,
    change: Change,
    actor: &Actor,
    confirm: bool,
) -> Result<Saved, TeamRulesError> {
    let mut edit = store::begin_edit(db).await?;
    let (ruleset, corpus, write) = match checked_write(&edit, handle, &change, confirm).await {
        Ok(checked) => checked,
        Err(e) => {
            // Release the lock other edits wait on now, not when the pool gets round to it.
            edit.rollback().await?;
            return Err(e);
        }
    };
    let version = write_announced(&mut edit, &[write], None, actor).await?;
    tracing::Span::current().record("version", version);
    edit.finish().await?;
    handle.install(version, ruleset);
    Ok(Saved { version, corpus })
}

/// Everything [`save`] checks under the edit lock: the merged ruleset, the corpus gate, and the
/// write to make.
async fn checked_write(
    edit: &store::Edit,
    handle: &RulesetHandle,
    change: &Change,
    confirm: bool,
) -> Result<(Arc<Ruleset>, Option<CorpusDryRun>, RuleWrite), TeamRulesError> {
    let current = entries(&edit.rules)?;
    let next = apply(&current, change)?;
    // A rule written disabled meets the same checks as an enabled one: it is exported,
    // imported and turned on later.
    if let Change::Put {
        spec: Some(spec), ..
    } = change
    {
        team_compile::validate_rule(spec)?;
    }
    let ruleset = Arc::new(compile(next.clone()).await?);
    let mut corpus_run = None;
    if let (
        Change::Put {
            id,
            spec: Some(spec),
            enabled: true,
            ..
        },
        Some(dir),
    ) = (change, handle.corpus())
    {
        let before = Arc::new(compile(current).await?);
        let sets = [before, ruleset.clone(), alone(spec).await?];
        let run = corpus_dry_run(dir, sets, id.clone(), spec.category).await?;
        if run.lowers_accuracy() && !confirm {
            return Err(TeamRulesError::LowersAccuracy {
                before: run.accuracy_before(),
                after: run.accuracy_after(),
            });
        }
        corpus_run = Some(run);
    }
    let write = match change {
        Change::Delete { id } => RuleWrite::Delete {
            rule_id: id.clone(),
        },
        Change::Put { id, .. } | Change::SetEnabled { id, .. } => {
            let entry = next.iter().find(|e| &e.id == id);
            write_of(entry.ok_or(TeamRulesError::NotFound)?)?
        }
    };
    Ok((ruleset, corpus_run, write))
}

/// Writes `writes` in the edit's transaction with a `rule_saved` webhook event for each entry
/// that changed (they commit together); returns the new version.
async fn write_announced(
    edit: &mut store::Edit,
    writes: &[RuleWrite],
    action: Option<&str>,
    actor: &Actor,
) -> Result<i64, TeamRulesError> {
    let (version, written) = edit.write(writes, action, actor).await?;
    let builtin = team_compile::builtin_file()?;
    let events: Vec<_> = written
        .iter()
        .map(|w| crate::app::webhooks::event::rule_event(rule_facts(w, actor.name(), &builtin)))
        .collect();
    crate::app::webhooks::enqueue(edit.conn(), &events).await?;
    Ok(version)
}

/// A changed entry as a webhook tells it: its category and title from the rule written, else
/// the one it replaced, else the built-in rule of that id.
fn rule_facts(
    w: &store::Written,
    actor: &str,
    builtin: &crate::rules::spec::RuleFile,
) -> crate::api_types::webhooks::RuleFacts {
    let spec_of = |state: &Option<store::RuleState>| {
        state
            .as_ref()
            .and_then(|s| s.spec.clone())
            .filter(|s| !s.is_null())
            .and_then(|s| serde_json::from_value::<RuleSpec>(s).ok())
    };
    let spec = spec_of(&w.new)
        .or_else(|| spec_of(&w.old))
        .or_else(|| builtin.rule.iter().find(|r| r.id == w.rule_id).cloned());
    let enabled = w.new.as_ref().is_some_and(|n| n.enabled);
    crate::api_types::webhooks::RuleFacts {
        id: w.rule_id.clone(),
        action: w.action.clone(),
        actor: actor.to_owned(),
        category: spec.as_ref().map(|s| s.category),
        title: spec.map(|s| s.title),
        enabled,
    }
}

/// The dry run of a candidate rule, shown before saving.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    /// Examples and counter-examples, and what `rules check` finds wrong.
    #[serde(skip)]
    pub check: RuleCheck,
    /// Over the newest stored reports.
    pub reports: ReportsDryRun,
    /// Over the labelled corpus, when configured.
    pub corpus: Option<CorpusDryRun>,
}

impl Preview {
    /// Human warnings about a dry run (the API and the portal show the same).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        let p = self;
        let mut out = Vec::new();
        if p.reports.capped() {
            out.push(format!(
                "only the newest {} of {} stored reports were scanned",
                p.reports.scanned, p.reports.stored
            ));
        }
        if p.reports.shadowed > 0 {
            out.push(format!(
                "the pattern matches lines in {} stored reports that more specific rules already \
                 name, so it changes nothing there; raise its specificity to take them over",
                p.reports.shadowed
            ));
        }
        if let Some(c) = &p.corpus
            && c.lowers_accuracy()
        {
            out.push(format!(
                "this rule lowers corpus accuracy from {:.1}% to {:.1}%; saving it needs confirmation",
                c.accuracy_before(),
                c.accuracy_after()
            ));
        }
        out
    }
}

/// Dry-runs `spec` (as a new rule, or replacing the entry with its id): its own checks, then
/// the newest stored reports and the labelled corpus classified with and without it. A pattern
/// that does not compile within the limits is an error.
#[tracing::instrument(name = "team_rules::preview", skip_all, fields(rule_id = spec.id.as_str()))]
pub async fn preview(
    db: &Db,
    handle: &RulesetHandle,
    spec: RuleSpec,
) -> Result<Preview, TeamRulesError> {
    let check = team_compile::check_rule(&spec)?;
    let (stored, _) = store::list_team_rules(db).await?;
    let current = entries(&stored)?;
    let change = Change::Put {
        id: spec.id.clone(),
        spec: Some(spec.clone()),
        enabled: true,
        create: false,
    };
    let next = apply(&current, &change)?;
    // The candidate set compiled even when the rule's examples fail, to show its effect.
    let after = Arc::new(
        tokio::task::spawn_blocking(move || {
            let builtin = team_compile::builtin_file()?;
            team_compile::compile_unchecked(&builtin, &next)
        })
        .await
        .map_err(|e| TeamRulesError::Internal(e.to_string()))??,
    );
    let before = Arc::new(compile(current).await?);
    let alone = alone(&spec).await?;
    let reports =
        scan_reports(db, [before.clone(), after.clone(), alone.clone()], &spec.id).await?;
    let corpus = match handle.corpus() {
        Some(dir) => {
            Some(corpus_dry_run(dir, [before, after, alone], spec.id.clone(), spec.category).await?)
        }
        None => None,
    };
    Ok(Preview {
        check,
        reports,
        corpus,
    })
}

/// Classifies the newest stored reports (at most [`PREVIEW_REPORTS`]) with each of `sets` (the
/// ruleset in use, the changed one, the candidate alone) and tallies what changes for rule `id`.
/// One batch of compressed logs is in memory at a time, however large the stored logs are.
#[tracing::instrument(name = "team_rules::scan_reports", skip_all, fields(rule_id = id))]
pub(super) async fn scan_reports(
    db: &Db,
    sets: [Arc<Ruleset>; 3],
    id: &str,
) -> Result<ReportsDryRun, TeamRulesError> {
    let (sizes, stored_count) = store::recent_log_sizes(db.pool(), PREVIEW_REPORTS).await?;
    let mut reports = ReportsDryRun {
        stored: stored_count,
        ..ReportsDryRun::default()
    };
    for ids in batches_by_size(&sizes, PREVIEW_BATCH_BYTES) {
        let logs = store::logs_by_id(db, &ids).await?;
        let (sets, id) = (sets.clone(), id.to_owned());
        reports = tokio::task::spawn_blocking(move || {
            let [before, after, alone] = &sets;
            let candidate = Candidate {
                before,
                after,
                alone,
                rule_id: &id,
            };
            let mut run = reports;
            for (report_id, gz) in logs {
                let mut log = Vec::new();
                let mut rd = flate2::read::MultiGzDecoder::new(&gz[..]).take(PREVIEW_LOG_BYTES);
                if rd.read_to_end(&mut log).is_ok() {
                    run.add(report_id, &candidate.compare(&log));
                }
            }
            run
        })
        .await
        .map_err(|e| TeamRulesError::Internal(e.to_string()))?;
    }
    Ok(reports)
}

/// The candidate alone: where its pattern matches even when other rules outrank it.
async fn alone(spec: &RuleSpec) -> Result<Arc<Ruleset>, TeamRulesError> {
    let spec = spec.clone();
    let ruleset = tokio::task::spawn_blocking(move || {
        Ruleset::compile(crate::rules::spec::RuleFile {
            rule: vec![spec],
            ..crate::rules::spec::RuleFile::default()
        })
    })
    .await
    .map_err(|e| TeamRulesError::Internal(e.to_string()))??;
    Ok(Arc::new(ruleset))
}

/// `sets`: the ruleset in use, with the candidate, and the candidate alone.
#[tracing::instrument(name = "team_rules::corpus_dry_run", skip_all, fields(rule_id = id.as_str()))]
pub(super) async fn corpus_dry_run(
    dir: std::path::PathBuf,
    sets: [Arc<Ruleset>; 3],
    id: String,
    category: crate::rules::Category,
) -> Result<CorpusDryRun, TeamRulesError> {
    tokio::task::spawn_blocking(move || {
        let read = |p: &Path| {
            std::fs::read(p)
                .map_err(|e| TeamRulesError::Internal(format!("eval corpus {}: {e}", p.display())))
        };
        let labels = String::from_utf8_lossy(&read(&dir.join("labels.csv"))?).into_owned();
        let evidence_path = dir.join("evidence.csv");
        let evidence = evidence_path
            .exists()
            .then(|| read(&evidence_path))
            .transpose()?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let cases = corpus::parse_corpus(&labels, evidence.as_deref())
            .map_err(|e| TeamRulesError::Internal(format!("eval corpus labels.csv: {e}")))?;
        let [before, after, alone] = &sets;
        let candidate = Candidate {
            before,
            after,
            alone,
            rule_id: &id,
        };
        let mut run = CorpusDryRun::default();
        for case in cases {
            let log = read(&dir.join("cases").join(format!("{}.log", case.id)))?;
            run.add(case.label, category, &candidate.compare(&log));
        }
        Ok(run)
    })
    .await
    .map_err(|e| TeamRulesError::Internal(e.to_string()))?
}

/// The export format: `builtin.toml`'s `[[rule]]` tables (so `rules check` reads it), plus the
/// ids of entries stored disabled when there are any.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TeamFile {
    /// Ids stored disabled: team rules kept off, or built-in rules turned off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<String>,
    /// Team rules and overrides of built-in rules (by id).
    #[serde(default)]
    pub rule: Vec<RuleSpec>,
}

/// Parses an exported file.
pub fn parse_team_file(text: &str) -> Result<TeamFile, TeamRulesError> {
    toml::from_str(text).map_err(|e| TeamRulesError::BadInput(format!("not a rules file: {e}")))
}

fn file_entries(file: &TeamFile) -> Result<Vec<TeamEntry>, TeamRulesError> {
    let mut out: Vec<TeamEntry> = file
        .rule
        .iter()
        .map(|s| TeamEntry {
            id: s.id.clone(),
            enabled: !file.disabled.contains(&s.id),
            spec: Some(s.clone()),
        })
        .collect();
    for id in &file.disabled {
        if !out.iter().any(|e| &e.id == id) {
            out.push(TeamEntry {
                id: id.clone(),
                spec: None,
                enabled: false,
            });
        }
    }
    let builtin = team_compile::builtin_file()?;
    let ids = team_compile::builtin_ids(&builtin);
    let mut seen = std::collections::HashSet::new();
    for e in &out {
        if !seen.insert(e.id.as_str()) {
            return Err(TeamRulesError::BadInput(format!(
                "rule {}: duplicate id",
                e.id
            )));
        }
        if e.spec.is_none() && !ids.contains(e.id.as_str()) {
            return Err(TeamRulesError::BadInput(format!(
                "rule {}: listed as disabled but neither built-in nor defined in the file",
                e.id
            )));
        }
        if let Some(spec) = &e.spec {
            team_compile::validate_rule(spec)?;
        }
    }
    Ok(out)
}

/// The stored team entries as an export file.
#[tracing::instrument(name = "team_rules::export", skip_all)]
pub async fn export(db: &Db) -> Result<TeamFile, TeamRulesError> {
    let (stored, _) = store::list_team_rules(db).await?;
    let entries = entries(&stored)?;
    Ok(TeamFile {
        disabled: entries
            .iter()
            .filter(|e| !e.enabled)
            .map(|e| e.id.clone())
            .collect(),
        rule: entries.into_iter().filter_map(|e| e.spec).collect(),
    })
}

/// Replaces the stored team entries with the file's, after validating all of them (and the
/// merged ruleset); nothing is written when anything is wrong. Returns (version, entries).
#[tracing::instrument(name = "team_rules::import", skip_all, fields(actor = actor.name(), rules = file.rule.len(), disabled = file.disabled.len(), version = tracing::field::Empty))]
pub async fn import(
    db: &Db,
    handle: &RulesetHandle,
    file: &TeamFile,
    actor: &Actor,
) -> Result<(i64, usize), TeamRulesError> {
    let wanted = file_entries(file)?;
    let ruleset = Arc::new(compile(wanted.clone()).await?);
    let mut edit = store::begin_edit(db).await?;
    let mut writes: Vec<RuleWrite> = edit
        .rules
        .iter()
        .filter(|r| !wanted.iter().any(|e| e.id == r.rule_id))
        .map(|r| RuleWrite::Delete {
            rule_id: r.rule_id.clone(),
        })
        .collect();
    for e in &wanted {
        writes.push(write_of(e)?);
    }
    let version = write_announced(&mut edit, &writes, Some("import"), actor).await?;
    tracing::Span::current().record("version", version);
    edit.finish().await?;
    handle.install(version, ruleset);
    Ok((version, wanted.len()))
}
