//! Retention (issue 20 item 4): how long raw logs and whole reports are kept, per project with an
//! instance default (0: forever), and what was removed. The settings and their checks live here,
//! shared by the API and the portal so both refuse the same input with the same words; the pass
//! that applies them, in batches, and the background task that runs it are in [`pass`].
//!
//! Two levels: a project's raw logs go after `log_days` (the report stays, with its
//! classification, and says when its log was removed), its reports after `report_days` (the whole
//! report goes; its group keeps counting it, see migration 0020).

pub mod pass;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::{Error, project};
use crate::actor::Actor;
use crate::api_types::ErrorCode;
use crate::api_types::retention::{
    Days, MAX_DAYS, ProjectRetention, ProjectSetting, RemovedCounts, RetentionOverview,
    RetentionRequest, RetentionRun,
};
use crate::storage::Db;
use crate::storage::retention::{self as store, Override, ProjectRemoved, Removed};
use crate::time::Timestamp;

pub use pass::{PassSummary, now, run_pass, spawn};

/// The instance's retention settings (`serve` flags, `gpu-triage retention run`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Days to keep raw logs and reports for projects without their own setting; 0: forever.
    pub defaults: Days,
    /// Time between passes of the background task.
    pub interval: Duration,
    /// Reports per batch: each batch is one short transaction.
    pub batch: u32,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            defaults: Days::default(),
            interval: Duration::from_secs(3600),
            batch: 500,
        }
    }
}

/// Which project keeps what: the instance defaults and the projects' own settings.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    defaults: Days,
    own: HashMap<String, ProjectSetting>,
}

impl Policy {
    /// The policy of `defaults` with these per-project settings.
    #[must_use]
    pub fn new(defaults: Days, overrides: &[Override]) -> Policy {
        let own = overrides
            .iter()
            .map(|o| (o.project.clone(), setting_of(o)))
            .collect();
        Policy { defaults, own }
    }

    /// The days in force for `project` (lowercase): each of its own settings, else the default.
    #[must_use]
    pub fn days(&self, project: &str) -> Days {
        let own = self.own.get(project).copied().unwrap_or_default();
        Days {
            log_days: own.log_days.unwrap_or(self.defaults.log_days),
            report_days: own.report_days.unwrap_or(self.defaults.report_days),
        }
    }

    /// The projects with settings of their own.
    pub fn projects(&self) -> impl Iterator<Item = &str> {
        self.own.keys().map(String::as_str)
    }
}

fn setting_of(o: &Override) -> ProjectSetting {
    let days = |d: Option<i32>| d.and_then(|d| u32::try_from(d).ok());
    ProjectSetting {
        log_days: days(o.log_days),
        report_days: days(o.report_days),
    }
}

/// The moment before which something kept `days` days is due at `now`; `None` for 0 (kept
/// forever). Whole days of 86,400 seconds, so "30 days" means the same at any hour.
#[must_use]
pub fn cutoff(now: Timestamp, days: u32) -> Option<Timestamp> {
    (days > 0).then(|| Timestamp::from_unix(now.unix() - i64::from(days) * 86_400))
}

/// A project name as settings key it: trimmed, not empty (reports without a project have no
/// setting of their own), a name an upload takes ([`project::check_name`]: the same rule as
/// every route that names a project), then lowercase (settings match any letter case).
pub fn project_key(raw: &str) -> Result<String, Error> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(invalid(format!(
            "project must be named (1-{} characters)",
            project::MAX_CHARS
        )));
    }
    // The name as sent counts too, as the OpenAPI document states its length.
    project::check_name(raw).map_err(invalid)?;
    Ok(name.to_lowercase())
}

fn invalid(message: String) -> Error {
    Error::Invalid(ErrorCode::InvalidRetention, message)
}

/// One setting as sent: `null` follows the default; otherwise a whole number of days from 0
/// (forever) to [`MAX_DAYS`].
pub fn days_of(field: &str, value: &Value) -> Result<Option<u32>, Error> {
    let bad = || {
        invalid(format!(
            "{field} must be a whole number of days from 0 (keep forever) to {MAX_DAYS}, or \
             empty to use the instance default"
        ))
    };
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(d) if d <= u64::from(MAX_DAYS) => Ok(u32::try_from(d).ok()),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// The request a portal form makes of its two text fields: blank follows the default, a number
/// is a number (checked by [`days_of`] like the API's), anything else is kept as text to be
/// refused with the field named.
#[must_use]
pub fn request_from_text(log_days: &str, report_days: &str) -> RetentionRequest {
    let value = |text: &str| {
        let text = text.trim();
        if text.is_empty() {
            Value::Null
        } else if let Ok(n) = text.parse::<i64>() {
            Value::from(n)
        } else {
            Value::from(text)
        }
    };
    RetentionRequest {
        log_days: value(log_days),
        report_days: value(report_days),
    }
}

/// Sets `project`'s own retention (by `actor`); the retention then in force.
#[tracing::instrument(name = "retention::set", skip_all, fields(project = project, actor = actor.name()))]
pub async fn set(
    db: &Db,
    settings: &RetentionSettings,
    project: &str,
    request: &RetentionRequest,
    actor: &Actor,
) -> Result<ProjectRetention, Error> {
    let project = project_key(project)?;
    let log_days = days_of("log_days", &request.log_days)?;
    let report_days = days_of("report_days", &request.report_days)?;
    let as_i32 = |d: Option<u32>| d.and_then(|d| i32::try_from(d).ok());
    store::put_override(
        db.pool(),
        &project,
        as_i32(log_days),
        as_i32(report_days),
        actor,
    )
    .await?;
    get(db, settings, &project).await
}

/// Removes `project`'s own retention (it follows the defaults again); 404 when it had none.
#[tracing::instrument(name = "retention::reset", skip_all, fields(project = project))]
pub async fn reset(
    db: &Db,
    settings: &RetentionSettings,
    project: &str,
) -> Result<ProjectRetention, Error> {
    let project = project_key(project)?;
    if !store::delete_override(db.pool(), &project).await? {
        return Err(Error::NotFound("retention setting"));
    }
    get(db, settings, &project).await
}

/// The retention in force for `project` and what was removed from it.
#[tracing::instrument(name = "retention::get", skip_all, fields(project = project))]
pub async fn get(
    db: &Db,
    settings: &RetentionSettings,
    project: &str,
) -> Result<ProjectRetention, Error> {
    let project = project_key(project)?;
    let overrides = store::overrides(db.pool()).await?;
    let removed = store::removed_totals(db.pool()).await?;
    let policy = Policy::new(settings.defaults, &overrides);
    Ok(project_view(&policy, &overrides, &removed, &project))
}

/// Most projects an overview lists.
const MAX_PROJECTS: i64 = 1000;
/// Passes an overview lists.
const RUNS_SHOWN: i64 = 10;

/// The instance defaults, every project's retention (projects with reports, with settings of
/// their own, or with something removed), and the latest passes.
#[tracing::instrument(name = "retention::overview", skip_all)]
pub async fn overview(db: &Db, settings: &RetentionSettings) -> Result<RetentionOverview, Error> {
    let overrides = store::overrides(db.pool()).await?;
    let removed = store::removed_totals(db.pool()).await?;
    let mut names = store::report_projects(db.pool(), MAX_PROJECTS).await?;
    names.extend(overrides.iter().map(|o| o.project.clone()));
    names.extend(removed.iter().map(|r| r.project.clone()));
    names.sort();
    names.dedup();
    let policy = Policy::new(settings.defaults, &overrides);
    let runs = store::recent_runs(db.pool(), RUNS_SHOWN).await?;
    Ok(RetentionOverview {
        defaults: settings.defaults,
        interval_secs: settings.interval.as_secs(),
        batch: settings.batch,
        projects: names
            .iter()
            .map(|p| project_view(&policy, &overrides, &removed, p))
            .collect(),
        runs: runs
            .into_iter()
            .map(|r| RetentionRun {
                id: r.id,
                started_at: r.started_at,
                finished_at: r.finished_at,
                removed: counts(r.removed),
                error: r.error,
            })
            .collect(),
    })
}

fn project_view(
    policy: &Policy,
    overrides: &[Override],
    removed: &[ProjectRemoved],
    project: &str,
) -> ProjectRetention {
    let done = removed.iter().find(|r| r.project == project);
    ProjectRetention {
        project: project.to_owned(),
        days: policy.days(project),
        set: overrides
            .iter()
            .find(|o| o.project == project)
            .map(setting_of)
            .unwrap_or_default(),
        removed: done.map(|r| counts(r.removed)).unwrap_or_default(),
        last_removed_at: done.map(|r| r.last_removed_at),
    }
}

fn counts(r: Removed) -> RemovedCounts {
    RemovedCounts {
        logs: r.logs,
        reports: r.reports,
        bytes: r.bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(project: &str, log: Option<i32>, report: Option<i32>) -> Override {
        Override {
            project: project.into(),
            log_days: log,
            report_days: report,
            updated_by: "alice".into(),
            updated_at: Timestamp::from_unix(0),
        }
    }

    #[test]
    fn the_cutoff_is_whole_days_before_now_and_zero_keeps_forever() {
        let now = Timestamp::parse("2026-03-31T12:00:00Z").expect("valid");
        let cases = [
            (1, Some("2026-03-30T12:00:00Z")),
            (30, Some("2026-03-01T12:00:00Z")),
            (365, Some("2025-03-31T12:00:00Z")),
            (0, None),
        ];
        for (days, want) in cases {
            assert_eq!(
                cutoff(now, days).map(|t| t.to_string()).as_deref(),
                want,
                "{days} days"
            );
        }
    }

    #[test]
    fn a_project_setting_wins_field_by_field_over_the_default() {
        let defaults = Days {
            log_days: 30,
            report_days: 365,
        };
        let policy = Policy::new(
            defaults,
            &[
                over("vision", Some(7), None),
                over("nlp", None, Some(0)),
                over("audio", Some(0), Some(0)),
            ],
        );
        let days = |p: &str| {
            let d = policy.days(p);
            (d.log_days, d.report_days)
        };
        assert_eq!(days("vision"), (7, 365));
        assert_eq!(days("nlp"), (30, 0));
        assert_eq!(days("audio"), (0, 0));
        assert_eq!(days("other"), (30, 365));
        assert_eq!(days(""), (30, 365));
        let mut own: Vec<&str> = policy.projects().collect();
        own.sort_unstable();
        assert_eq!(own, ["audio", "nlp", "vision"]);
    }

    #[test]
    fn days_are_whole_numbers_in_range_or_null() {
        use serde_json::json;
        assert_eq!(days_of("log_days", &json!(null)).ok(), Some(None));
        assert_eq!(days_of("log_days", &json!(0)).ok(), Some(Some(0)));
        assert_eq!(days_of("log_days", &json!(30)).ok(), Some(Some(30)));
        assert_eq!(days_of("log_days", &json!(36500)).ok(), Some(Some(36500)));
        for bad in [
            json!(-1),
            json!(36501),
            json!(1e12),
            json!(1.5),
            json!("30"),
            json!(true),
            json!([30]),
        ] {
            let err = days_of("report_days", &bad).expect_err("refused");
            assert!(
                matches!(&err, Error::Invalid(ErrorCode::InvalidRetention, m)
                    if m.starts_with("report_days must be a whole number")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn form_text_becomes_the_request_the_api_would_get() {
        use serde_json::json;
        let r = request_from_text(" 30 ", "");
        assert_eq!((r.log_days, r.report_days), (json!(30), json!(null)));
        let r = request_from_text("-4", "ten");
        assert_eq!((r.log_days, r.report_days), (json!(-4), json!("ten")));
    }

    #[test]
    fn project_keys_are_trimmed_lowercase_and_bounded() {
        assert_eq!(project_key("  Vision ").ok().as_deref(), Some("vision"));
        assert!(project_key("   ").is_err());
        assert!(project_key(&"p".repeat(201)).is_err());
        assert!(project_key("a\u{0}b").is_err());
        // Counted as an upload counts it: in characters, as sent, before lowercasing.
        assert!(project_key(&"é".repeat(201)).is_err());
        assert!(project_key(&format!(" {} ", "p".repeat(199))).is_err());
        assert_eq!(project_key(&"É".repeat(200)).ok(), Some("é".repeat(200)));
    }
}
