//! The retention page, for admins only: `/retention` shows the instance defaults, the retention
//! in force for every project (its own setting or the default) with what was removed from it,
//! and the latest passes; its forms set a project's days (`POST /retention`) or return it to the
//! defaults (`POST /retention/reset`). Every form post carries the session's CSRF token; a
//! refused value shows the page again with why (422).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use crate::api_types::retention::{Days, MAX_DAYS, ProjectRetention, RetentionRun};
use crate::app::{self, retention};
use crate::time::Timestamp;
use crate::web::auth::PortalUser;
use crate::web::error::{AppError, PageError};
use crate::web::extract::{CsrfField, CsrfForm};
use crate::web::scope::{Admin, ScopedUser};
use crate::web::state::AppState;

/// A project's line in the table, with its days in words.
pub struct ProjectRow {
    /// The project as shown (`(no project)` for reports without one).
    pub name: String,
    /// The key the forms post (empty for reports without a project: not settable).
    pub project: String,
    pub logs_kept: String,
    pub reports_kept: String,
    /// Whether the days come from the project's own setting.
    pub own: bool,
    /// The form's current values: the project's own days, empty for "the default".
    pub log_field: String,
    pub report_field: String,
    pub removed: String,
    /// When retention last removed something from it.
    pub last_removed: Option<Timestamp>,
}

impl From<ProjectRetention> for ProjectRow {
    fn from(p: ProjectRetention) -> Self {
        let field = |d: Option<u32>| d.map(|d| d.to_string()).unwrap_or_default();
        let r = p.removed;
        ProjectRow {
            name: if p.project.is_empty() {
                "(no project)".to_owned()
            } else {
                p.project.clone()
            },
            logs_kept: kept(p.days.log_days),
            reports_kept: kept(p.days.report_days),
            own: p.set.log_days.is_some() || p.set.report_days.is_some(),
            log_field: field(p.set.log_days),
            report_field: field(p.set.report_days),
            removed: format!("{} reports, {} logs, {}", r.reports, r.logs, bytes(r.bytes)),
            last_removed: p.last_removed_at,
            project: p.project,
        }
    }
}

/// A pass in the list.
pub struct RunRow {
    pub started: Timestamp,
    /// `None` while it runs, or when its server stopped mid-pass.
    pub finished: Option<Timestamp>,
    pub removed: String,
    pub error: String,
}

impl From<RetentionRun> for RunRow {
    fn from(r: RetentionRun) -> Self {
        RunRow {
            started: r.started_at,
            finished: r.finished_at,
            removed: format!(
                "{} reports, {} logs, {}",
                r.removed.reports,
                r.removed.logs,
                bytes(r.removed.bytes)
            ),
            error: r.error,
        }
    }
}

fn kept(days: u32) -> String {
    match days {
        0 => "forever".to_owned(),
        1 => "1 day".to_owned(),
        n => format!("{n} days"),
    }
}

fn bytes(b: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} bytes");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The set form's fields as shown again after a refusal.
#[derive(Default)]
pub struct FormView {
    pub project: String,
    pub log_days: String,
    pub report_days: String,
}

/// `GET /retention`
#[derive(Template, WebTemplate)]
#[template(path = "retention.html")]
pub struct RetentionPage {
    layout: Layout,
    logs_default: String,
    reports_default: String,
    interval: String,
    batch: u32,
    max_days: u32,
    projects: Vec<ProjectRow>,
    runs: Vec<RunRow>,
    form: FormView,
    error: Option<String>,
}

async fn page(
    state: &AppState,
    user: &PortalUser,
    form: FormView,
    error: Option<String>,
) -> Result<RetentionPage, AppError> {
    let o = retention::overview(&state.db, &state.retention).await?;
    let Days {
        log_days,
        report_days,
    } = o.defaults;
    Ok(RetentionPage {
        layout: Layout::for_user(Some(user)),
        logs_default: kept(log_days),
        reports_default: kept(report_days),
        interval: match o.interval_secs {
            s if s % 3600 == 0 => format!("{} h", s / 3600),
            s if s % 60 == 0 => format!("{} min", s / 60),
            s => format!("{s} s"),
        },
        batch: o.batch,
        max_days: MAX_DAYS,
        projects: o.projects.into_iter().map(ProjectRow::from).collect(),
        runs: o.runs.into_iter().map(RunRow::from).collect(),
        form,
        error,
    })
}

/// `GET /retention`
pub async fn show_retention(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Admin>,
) -> Result<RetentionPage, PageError> {
    Ok(page(&state, &user, FormView::default(), None).await?)
}

/// The set form: a project and its two fields (blank: the default; 0: forever).
#[derive(Debug, Deserialize)]
pub struct SetForm {
    // Missing is refused by the CSRF check (403), not by the form parser (400).
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    log_days: String,
    #[serde(default)]
    report_days: String,
}

impl CsrfField for SetForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /retention`: set a project's days; the page again with why (422) when refused.
pub async fn set_retention(
    State(state): State<AppState>,
    CsrfForm { user, form, .. }: CsrfForm<SetForm, Admin>,
) -> Result<Response, PageError> {
    let request = retention::request_from_text(&form.log_days, &form.report_days);
    let actor = user.actor();
    match retention::set(&state.db, &state.retention, &form.project, &request, &actor).await {
        Ok(_) => Ok(Redirect::to("/retention").into_response()),
        Err(app::Error::Invalid(_, message)) => {
            let shown = FormView {
                project: form.project,
                log_days: form.log_days,
                report_days: form.report_days,
            };
            let page = page(&state, &user, shown, Some(message)).await?;
            Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// The reset form.
#[derive(Debug, Deserialize)]
pub struct ResetForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    project: String,
}

impl CsrfField for ResetForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /retention/reset`: the project follows the instance defaults again.
pub async fn reset_retention(
    State(state): State<AppState>,
    CsrfForm { form, .. }: CsrfForm<ResetForm, Admin>,
) -> Result<Response, PageError> {
    retention::reset(&state.db, &state.retention, &form.project).await?;
    Ok(Redirect::to("/retention").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_bytes_read_as_words() {
        assert_eq!(kept(0), "forever");
        assert_eq!(kept(1), "1 day");
        assert_eq!(kept(90), "90 days");
        assert_eq!(bytes(0), "0 bytes");
        assert_eq!(bytes(1023), "1023 bytes");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
