//! `GET /reports/{id}`: the report page. The handler extracts, makes one call to
//! `app::reports::page` (every read the view needs) and draws its answer here, on a blocking
//! thread: the headline, the log pane (`pane`) with the root-cause line highlighted, findings
//! and facts (`findings`), the known fix, group, similar failures and fixes, and the
//! reproduction section (`html::repro`). Drawing reads nothing.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;

use super::super::Layout;
use super::super::logview::LogWindow;
use super::super::repro::{self, ReproSection};
use super::super::repro_status::{JobStatus, StatusContext};
use super::findings::{FindingGroup, fact_rows, fold_findings, steps_beside_warning};
use super::pane::{self, LogMode};
use super::run::{RunPane, RunSection};
use crate::app::reports::{self, KnownFix, LogRemoval, ReportContext, ReportView, WindowRequest};
use crate::app::similar::SimilarGroup;
use crate::app::triage::Fix;
use crate::auth::Scope;
use crate::rules::{Category, Confidence, Role};
use crate::web::auth::PortalUser;
use crate::web::error::PageError;
use crate::web::extract::{QueryParams, ReportId};
use crate::web::scope::{Read, ScopedUser};
use crate::web::state::AppState;

/// `GET /reports/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "report.html")]
pub struct ReportPage {
    layout: Layout,
    id: i64,
    title: String,
    category: Category,
    confidence: Confidence,
    /// With confidence `likely`: the words that decided the learned fallback's category.
    basis: Vec<String>,
    /// The framework or runtime the log comes from, when recognised.
    framework: Option<String>,
    created_at: crate::time::Timestamp,
    project: String,
    branch: String,
    commit: String,
    job_url: String,
    filename: String,
    root_line: Option<usize>,
    root_text: String,
    findings: Vec<FindingGroup>,
    finding_count: usize,
    log_mode: LogMode,
    /// The current find match's line (0: none).
    find_line: usize,
    /// The pane shows lines picked out of the log: line numbers link to them in context.
    picked: bool,
    facts: Vec<(String, String)>,
    next_steps: Vec<String>,
    async_hint: bool,
    group_id: i64,
    group_count: i64,
    fixes: Vec<Fix>,
    /// The known fix, shown right under the root cause.
    fixed_before: Option<FixedBefore>,
    /// Where the group stands (open, resolved in X, regressed, ignored; assignee): a
    /// regression is a banner above any fix.
    group_state: Option<crate::storage::group_triage::Triage>,
    /// Other groups whose failure has nearly the same shape.
    similar: Vec<SimilarGroup>,
    /// Each similar group offers to merge it into this report's group (the session may).
    can_merge: bool,
    /// The log has no failure line a rule names: its group is "logs that end the same way".
    unmatched: bool,
    log: LogWindow,
    log_lines: i64,
    /// Set when retention removed the log: the page says so instead of showing it.
    log_removed: Option<LogRemoval>,
    script: Option<String>,
    repro: ReproSection,
    /// For a run of files: the action, first failure, timeline and files.
    run: Option<RunSection>,
    /// For a run of files: the file of each line the log pane shows, and a find's matches per
    /// file (empty otherwise).
    run_pane: RunPane,
}

/// The "Fixed before" banner: the report's own group's fix and its link text naming the
/// target.
#[derive(Debug)]
struct FixedBefore {
    fix: Fix,
    target: String,
}

impl FixedBefore {
    fn new(known: KnownFix) -> FixedBefore {
        FixedBefore {
            target: link_text(&known.fix.link),
            fix: known.fix,
        }
    }
}

/// `GET /reports/{id}`: `?start=`, `?line=`, `?grep=&hit=` and `?view=` choose what the log
/// pane shows ([`WindowRequest`]).
pub async fn show_report(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    ReportId(id): ReportId,
    QueryParams(window): QueryParams<WindowRequest>,
) -> Result<ReportPage, PageError> {
    let view = reports::page(&state.db, &state.finds, id, &window).await?;
    let server_url = state.public_url.clone();
    // A page of log lines and a run's output can be megabytes of text to decode, which the
    // async threads should not.
    let page = crate::app::blocking(move || ReportPage::new(view, &user, &server_url)).await?;
    Ok(page)
}

impl ReportPage {
    /// The page of `view` for `user`; `server_url` is where workers reach this server (said
    /// when a pending job has no worker to take it).
    fn new(view: ReportView, user: &PortalUser, server_url: &str) -> ReportPage {
        let ReportView {
            detail,
            pane,
            total_lines,
            log_removed,
            reported,
            known_fix,
            workers_seen,
            jobs,
        } = view;
        let ReportContext {
            report: r,
            group,
            fixes,
            jobs: _,
            basis,
            similar,
            triage,
            run,
        } = detail;
        let id = r.id;
        let c = r.classification;
        let findings = fold_findings(&c.findings);
        let root_line = c.root_cause.as_ref().map(|r| r.line);
        let root_text = (c.root_cause.as_ref())
            .map(|r| r.text.clone())
            .unwrap_or_default();
        // The root cause and identical repeats of it are highlighted.
        let highlight: Vec<usize> = (c.findings.iter())
            .filter(|f| f.role == Role::RootCause || (!root_text.is_empty() && f.text == root_text))
            .map(|f| f.line)
            .collect();
        let (log_mode, log) = pane::draw(id, pane, total_lines, &highlight);
        let run_pane = run.as_ref().map_or_else(RunPane::default, |story| {
            let shown: Vec<usize> = log.lines.iter().map(|l| l.number).collect();
            let needle = match &log_mode {
                LogMode::Find { needle, .. } => Some(needle.as_str()),
                LogMode::Page | LogMode::Findings => None,
            };
            RunPane::new(id, story, &shown, needle)
        });
        let can_write = user.require(&[Scope::Ingest, Scope::Admin]).is_ok();
        let layout = Layout::for_user(Some(user));
        let status = workers_seen.as_ref().map(|seen| StatusContext {
            seen,
            server_url,
            now: layout.now,
        });
        // Once a reproduction has named the true line, "re-run with CUDA_LAUNCH_BLOCKING=1"
        // is done: the synchronous trace is on this page (issue 39 item 7).
        let reproduced = jobs.iter().any(|j| {
            j.job.reproduction.is_some()
                && (j.decided.as_ref())
                    .is_some_and(|d| d.outcome == crate::rules::outcome::Outcome::Reproduced)
        });
        let async_hint = c.async_hint && !reproduced;
        let next_steps: Vec<String> = if reproduced {
            (c.next_steps.into_iter())
                .filter(|s| !s.contains("CUDA_LAUNCH_BLOCKING"))
                .collect()
        } else {
            c.next_steps
        };
        let repro = repro::section(jobs, basis.as_ref(), &reported, can_write, status.as_ref());
        ReportPage {
            layout,
            id,
            title: r.title,
            category: r.category,
            confidence: c.confidence,
            basis: c.basis.clone(),
            framework: c.framework.clone(),
            created_at: r.created_at,
            project: r.project,
            branch: r.branch,
            commit: r.commit_sha,
            job_url: r.job_url,
            filename: r.filename,
            root_line,
            root_text,
            finding_count: c.findings.len(),
            findings,
            picked: !matches!(log_mode, LogMode::Page),
            find_line: match &log_mode {
                LogMode::Find { nav, .. } => nav.line,
                _ => 0,
            },
            log_mode,
            facts: fact_rows(&c.facts),
            next_steps: steps_beside_warning(next_steps, async_hint),
            async_hint,
            group_id: r.group_id,
            group_count: group.map_or(1, |g| g.report_count),
            fixed_before: known_fix.map(FixedBefore::new),
            group_state: triage,
            unmatched: c.root_cause.is_none(),
            similar,
            can_merge: can_write,
            fixes,
            log,
            log_lines: r.log_lines,
            log_removed,
            script: r.script,
            repro,
            run: run.map(RunSection::new),
            run_pane,
        }
    }
}

/// What a fix's link points at, as link text: `github.com/org/repo/pull/12` rather than "link".
fn link_text(link: &str) -> String {
    let target = link
        .split_once("://")
        .map_or(link, |(_, rest)| rest)
        .trim_end_matches('/');
    let target = target.strip_prefix("www.").unwrap_or(target);
    if target.chars().count() > 80 {
        let cut: String = target.chars().take(79).collect();
        format!("{cut}…")
    } else {
        target.to_owned()
    }
}
