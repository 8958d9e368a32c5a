//! Team rules in a running deployment, between the web/CLI layers and storage: the handle every
//! classification reads the current ruleset from, loading the stored team rules and swapping a
//! freshly compiled ruleset in atomically, the watcher that keeps replicas in step
//! (`LISTEN/NOTIFY` plus a periodic version check), and (in the child modules) edits with their
//! dry run, disabling with a look first, export/import, and reclassification of stored reports.

mod disable;
mod edit;
mod list;
pub mod reclassify;
mod views;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use crate::storage::rules::{HistoryEntry, RuleState};
pub use disable::{
    DisablePreview, ExampleImpact, LineVerdict, Toggled, preview_disable, set_enabled,
};
pub use edit::{Change, Preview, Saved, TeamFile, export, import, parse_team_file, preview, save};
pub use list::{Origin, RuleInfo, history, list, recent_runs, reports_naming};
pub use views::{
    FormAction, FormOutcome, RuleDetail, RulesFilter, RulesOverview, SavedRule, detail, overview,
    rule, save_listed, submit_form,
};

use crate::api_types::ErrorCode;
use crate::rules::spec::{RuleFile, RuleSpec};
use crate::rules::team_compile::{self, TeamEntry};
use crate::rules::{self, Ruleset};
use crate::storage::rules::{self as store, StoredRule};
use crate::storage::{Db, DbError};

/// How often a replica compares its ruleset version with the database's, in case a
/// notification was missed (listener reconnecting, database restart).
pub const VERSION_CHECK: Duration = Duration::from_secs(5);

/// Why a team-rule operation failed; each maps to one HTTP status or CLI message.
#[derive(Debug, thiserror::Error)]
pub enum TeamRulesError {
    /// The rule (or the ruleset with it) is refused: 422 with the reason.
    #[error(transparent)]
    Invalid(#[from] rules::Error),
    /// Input that is not a rule at all (missing fields, bad file): 422.
    #[error("{0}")]
    BadInput(String),
    /// No team entry with this id: 404.
    #[error("rule not found")]
    NotFound,
    /// A create for an id that already has an entry: 409.
    #[error("rule {0} exists; change it with PUT /api/v1/rules/{0}")]
    Exists(String),
    /// The rule lowers corpus accuracy and the save was not confirmed: 422.
    #[error(
        "this rule lowers accuracy on the labelled corpus from {before:.1}% to {after:.1}%; \
         save again with confirmation to store it anyway"
    )]
    LowersAccuracy {
        /// Accuracy with the current rules, percent.
        before: f64,
        /// Accuracy with the rule, percent.
        after: f64,
    },
    /// A reclassification is already running: 409.
    #[error("a reclassification is already running")]
    Busy,
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// A blocking task or file read failed.
    #[error("{0}")]
    Internal(String),
}

/// The same refusal as the rest of `app` says it (and the web layer renders it): 422
/// `invalid_rule` or `lowers_accuracy`, 404, 409 `busy` or `rule_exists`.
impl From<TeamRulesError> for super::Error {
    fn from(err: TeamRulesError) -> Self {
        use super::Error;
        match err {
            TeamRulesError::Invalid(e) => Error::Invalid(ErrorCode::InvalidRule, e.to_string()),
            TeamRulesError::BadInput(m) => Error::Invalid(ErrorCode::InvalidRule, m),
            TeamRulesError::NotFound => Error::NotFound("rule"),
            e @ TeamRulesError::LowersAccuracy { .. } => {
                Error::Invalid(ErrorCode::LowersAccuracy, e.to_string())
            }
            e @ TeamRulesError::Busy => Error::Conflict(ErrorCode::Busy, e.to_string()),
            e @ TeamRulesError::Exists(_) => Error::Conflict(ErrorCode::RuleExists, e.to_string()),
            TeamRulesError::Db(e) => Error::Db(e),
            TeamRulesError::Internal(m) => Error::Internal(anyhow::anyhow!(m)),
        }
    }
}

/// The ruleset in use and the version of the stored team rules it was built from.
#[derive(Debug)]
struct Loaded {
    ruleset: Arc<Ruleset>,
    /// `-1` until loaded from the database.
    version: i64,
}

/// The current ruleset, swapped atomically when team rules change. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct RulesetHandle {
    inner: Arc<RwLock<Loaded>>,
    /// Where the labelled corpus for dry runs lives (`GPU_TRIAGE_EVAL_CORPUS`), if anywhere.
    corpus: Arc<RwLock<Option<PathBuf>>>,
}

impl RulesetHandle {
    /// A handle on `ruleset`, not yet tied to a stored version.
    pub fn new(ruleset: Arc<Ruleset>) -> RulesetHandle {
        RulesetHandle {
            inner: Arc::new(RwLock::new(Loaded {
                ruleset,
                version: -1,
            })),
            corpus: Arc::default(),
        }
    }

    /// The ruleset to classify with now; keep the `Arc` for the whole classification.
    pub fn current(&self) -> Arc<Ruleset> {
        // A poisoned lock still holds a complete `Loaded` (only whole values are stored).
        match self.inner.read() {
            Ok(l) => l.ruleset.clone(),
            Err(p) => p.into_inner().ruleset.clone(),
        }
    }

    /// The stored version the current ruleset was built from (`-1`: built-in only, not loaded).
    pub fn version(&self) -> i64 {
        match self.inner.read() {
            Ok(l) => l.version,
            Err(p) => p.into_inner().version,
        }
    }

    /// Swaps in `ruleset` built from `version`, unless a newer one is already in use.
    pub fn install(&self, version: i64, ruleset: Arc<Ruleset>) -> bool {
        let mut l = match self.inner.write() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if version <= l.version {
            return false;
        }
        *l = Loaded { ruleset, version };
        true
    }

    /// Sets the labelled corpus used by dry runs (`None`: no corpus).
    pub fn set_corpus(&self, dir: Option<PathBuf>) {
        match self.corpus.write() {
            Ok(mut c) => *c = dir,
            Err(p) => *p.into_inner() = dir,
        }
    }

    /// The labelled corpus used by dry runs.
    pub fn corpus(&self) -> Option<PathBuf> {
        match self.corpus.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

/// Stored entries as the engine sees them.
pub(crate) fn entries(stored: &[StoredRule]) -> Result<Vec<TeamEntry>, TeamRulesError> {
    stored
        .iter()
        .map(|r| {
            let spec = r
                .spec
                .clone()
                .map(serde_json::from_value::<RuleSpec>)
                .transpose()
                .map_err(|e| {
                    TeamRulesError::Internal(format!(
                        "stored rule {} is unreadable: {e}",
                        r.rule_id
                    ))
                })?;
            Ok(TeamEntry {
                id: r.rule_id.clone(),
                spec,
                enabled: r.enabled,
            })
        })
        .collect()
}

/// Compiles built-in plus team entries on a blocking thread.
#[tracing::instrument(name = "team_rules::compile", skip_all, fields(entries = entries.len()))]
pub(crate) async fn compile(entries: Vec<TeamEntry>) -> Result<Ruleset, TeamRulesError> {
    tokio::task::spawn_blocking(move || {
        let builtin: RuleFile = team_compile::builtin_file()?;
        Ok(team_compile::compile_with_team(&builtin, &entries)?)
    })
    .await
    .map_err(|e| TeamRulesError::Internal(e.to_string()))?
}

/// Loads the stored team rules and installs the ruleset they make, when newer than the one in
/// use. Returns the version now in use.
#[tracing::instrument(name = "team_rules::reload", skip_all)]
pub async fn reload(db: &Db, handle: &RulesetHandle) -> Result<i64, TeamRulesError> {
    let (stored, version) = store::list_team_rules(db).await?;
    if version > handle.version() {
        let ruleset = compile(entries(&stored)?).await?;
        if handle.install(version, Arc::new(ruleset)) {
            tracing::info!(version, team_rules = stored.len(), "ruleset loaded");
        }
    }
    Ok(handle.version())
}

/// Keeps `handle` on the newest stored rules: reloads on every notification and, as a fallback,
/// whenever the stored version differs at a [`VERSION_CHECK`] tick. Runs until aborted.
pub fn watch(db: Db, handle: RulesetHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(watch_loop(db, handle))
}

/// The body of [`watch`], for callers that run it inside a task of their own.
#[tracing::instrument(name = "team_rules::watch", skip_all)]
pub async fn watch_loop(db: Db, handle: RulesetHandle) {
    {
        let mut listener = None;
        let mut tick = tokio::time::interval(VERSION_CHECK);
        loop {
            if listener.is_none() {
                listener = store::listen(&db)
                    .await
                    .inspect_err(|e| tracing::debug!(error = %e, "rules listener not connected"))
                    .ok();
            }
            let woke = match listener.as_mut() {
                Some(l) => tokio::select! {
                    n = l.recv() => n.map(|_| ()),
                    _ = tick.tick() => Ok(()),
                },
                None => {
                    tick.tick().await;
                    Ok(())
                }
            };
            if let Err(e) = woke {
                tracing::warn!(error = %e, "rules listener failed; reconnecting");
                listener = None;
            }
            let stale = match store::ruleset_version(db.pool()).await {
                Ok(v) => v != handle.version(),
                Err(_) => false,
            };
            if stale && let Err(e) = reload(&db, &handle).await {
                tracing::warn!(error = %e, "reloading team rules");
            }
        }
    }
}
