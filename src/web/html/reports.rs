//! Portal pages for reports: the start page (paste or upload a log, recent reports), the form
//! post that stores one, the report page (log window with the root-cause line highlighted,
//! findings, facts, next steps, group and fixes) and the raw download.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Layout;
use super::logview::{self, LogWindow};
use super::repro::{self, ReproSection};
use super::repro_status::{JobStatus, StatusContext};
use crate::api_types::ErrorCode;
use crate::app::reports::ReportSummary;
use crate::app::similar::SimilarGroup;
use crate::app::triage::Fix;
use crate::app::upload::{self, Meta, Uploader};
use crate::app::{self, reports};
use crate::auth::Scope;
use crate::rules::{Category, Confidence, Facts, Role};
use crate::web::auth::{OptionalUser, PortalUser};
use crate::web::extract::{MultipartForm, QueryParams, ReportId};
use crate::web::scope::{Read, ScopedUser};
use crate::web::uploads::{file_name, multipart_error, read_small, spool, store_upload};
use crate::web::{AppError, AppState, PageError};

/// `GET /`: paste or upload a log; the newest reports. After a refused submission the same
/// page comes back with what was typed and the reason next to the form.
#[derive(Template, WebTemplate)]
#[template(path = "home.html")]
pub struct HomePage {
    layout: Layout,
    recent: Vec<ReportSummary>,
    form: NewReportForm,
    /// Why the last submission was refused.
    error: Option<String>,
}

/// What the new-report form holds: empty on the start page, the submitted values when a
/// submission is refused.
#[derive(Debug, Default)]
pub struct NewReportForm {
    project: String,
    /// The pasted log, when it was small enough to send back ([`KEEP_PASTE`]).
    log_text: String,
    /// A log was chosen as a file (browsers cannot fill file inputs again).
    log_was_file: bool,
    /// A pasted log too long to send back.
    log_dropped: bool,
    script_text: String,
    repeats: String,
}

impl NewReportForm {
    /// The runs field's value: what was typed, else 1.
    #[must_use]
    pub fn repeats_value(&self) -> &str {
        if self.repeats.is_empty() {
            "1"
        } else {
            &self.repeats
        }
    }
}

/// The longest pasted log sent back into the form after a refusal.
const KEEP_PASTE: u64 = 256 * 1024;

/// `GET /`
pub async fn home(
    State(state): State<AppState>,
    OptionalUser(user): OptionalUser,
) -> Result<HomePage, PageError> {
    home_page(&state, user.as_ref(), NewReportForm::default(), None).await
}

async fn home_page(
    state: &AppState,
    user: Option<&PortalUser>,
    form: NewReportForm,
    error: Option<String>,
) -> Result<HomePage, PageError> {
    let recent = match user {
        Some(u) if u.require(&[Scope::Read]).is_ok() => reports::recent(&state.db, 20).await?,
        _ => Vec::new(),
    };
    Ok(HomePage {
        layout: Layout::for_user(user),
        recent,
        form,
        error,
    })
}

/// `GET /reports`
#[derive(Template, WebTemplate)]
#[template(path = "reports.html")]
pub struct ReportListPage {
    layout: Layout,
    list: reports::ReportList,
    categories: &'static [Category],
    /// The filters as a query string, for the page links.
    query: String,
}

/// `GET /reports?category=&project=&page=&per_page=`: every report, newest first.
pub async fn list_reports(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    QueryParams(params): QueryParams<reports::ListRequest>,
) -> Result<ReportListPage, PageError> {
    let list = reports::list(&state.db, &params).await?;
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(c) = list.category {
        pairs.push(("category", c.as_str().to_owned()));
    }
    if !list.project.is_empty() {
        pairs.push(("project", list.project.clone()));
    }
    if params.per_page.is_some() {
        pairs.push(("per_page", list.per_page.to_string()));
    }
    Ok(ReportListPage {
        layout: Layout::for_user(Some(&user)),
        query: serde_urlencoded::to_string(&pairs).unwrap_or_default(),
        categories: &Category::ALL,
        list,
    })
}

/// `POST /reports`: the start page's form (multipart: csrf, project, log file or pasted text,
/// optional script file or text). A submission refused for what it holds (nothing to classify,
/// a binary file, over a cap, a secret in the script) gets the start page again, the typed
/// values kept and the reason beside the form, with the refusal's status.
pub async fn create_report(
    State(state): State<AppState>,
    user: PortalUser,
    held: Option<axum::extract::Extension<crate::web::limits::InFlight>>,
    headers: HeaderMap,
    multipart: MultipartForm,
) -> Result<Response, PageError> {
    if let Err(refused) = user.require(&[Scope::Ingest]) {
        // 403 whatever the body; what was typed comes back (nothing is stored) with the scope
        // it needs.
        let mut form = NewReportForm::default();
        if let Some(mut multipart) = multipart.readable() {
            // A body that stops parsing keeps the fields read before it.
            let _ = read_back(&mut multipart, &mut form).await;
        }
        let reason = format!(
            "{refused}: submitting a report needs the ingest scope. What you typed is below; \
             ask an admin for a token with that scope."
        );
        let page = home_page(&state, Some(&user), form, Some(reason)).await?;
        return Ok((axum::http::StatusCode::FORBIDDEN, page).into_response());
    }
    let mut multipart = multipart.fields()?;
    let mut form = NewReportForm::default();
    let outcome = store_form(&state, &user, held, &headers, &mut multipart, &mut form).await;
    match outcome {
        Ok(report_id) => Ok(Redirect::to(&format!("/reports/{report_id}")).into_response()),
        Err(
            err @ (AppError::Unprocessable(..)
            | AppError::UnsupportedMediaType(_)
            | AppError::TooLarge(_)),
        ) => {
            let (status, _) = err.status_and_code();
            let page = home_page(&state, Some(&user), form, Some(err.to_string())).await?;
            Ok((status, page).into_response())
        }
        Err(err) => Err(err.into()),
    }
}

/// Reads the form into `form` as it streams in (so a refusal can show it again) and stores the
/// report; the new report's id.
async fn store_form(
    state: &AppState,
    user: &PortalUser,
    held: Option<axum::extract::Extension<crate::web::limits::InFlight>>,
    headers: &HeaderMap,
    multipart: &mut Multipart,
    form: &mut NewReportForm,
) -> Result<i64, AppError> {
    let limits = state.limits;
    let mut csrf = String::new();
    let mut log: Option<(std::fs::File, String)> = None;
    let mut script: Option<Vec<u8>> = None;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "csrf" => {
                csrf = String::from_utf8_lossy(&read_small(field, 200, "csrf").await?).into_owned()
            }
            "project" => {
                form.project = String::from_utf8_lossy(&read_small(field, 200, "project").await?)
                    .trim()
                    .to_owned()
            }
            "repeats" => {
                form.repeats = String::from_utf8_lossy(&read_small(field, 20, "repeats").await?)
                    .trim()
                    .to_owned()
            }
            "log_file" | "log_text" => {
                // Check the CSRF token before spooling anything large.
                user.check_form(headers, &csrf)?;
                let filename = file_name(&field, "pasted.log");
                let mut file = spool(field, limits.max_log_bytes).await?;
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len > 0 && log.is_none() {
                    if name == "log_text" {
                        keep_paste(&mut file, len, form);
                    } else {
                        form.log_was_file = true;
                    }
                    log = Some((file, filename));
                }
            }
            "script_file" | "script_text" => {
                let bytes = read_small(field, limits.max_script_bytes, "script").await?;
                if !bytes.iter().all(u8::is_ascii_whitespace) && script.is_none() {
                    if name == "script_text" {
                        form.script_text = String::from_utf8_lossy(&bytes).into_owned();
                    }
                    script = Some(bytes);
                }
            }
            _ => {}
        }
    }
    user.check_form(headers, &csrf)?;
    let (log, filename) = log.ok_or_else(|| {
        AppError::Unprocessable(
            ErrorCode::EmptyLog,
            "paste a log or choose a file to upload".into(),
        )
    })?;
    let script = script
        .map(|b| upload::check_script(&b, &limits))
        .transpose()
        .map_err(app::Error::from)?;
    let repeats: u8 = match form.repeats.as_str() {
        "" => 1,
        n => n.parse().map_err(|_| {
            AppError::Unprocessable(
                ErrorCode::BadMeta,
                format!("runs must be a number from 1 to {}", upload::MAX_REPEATS),
            )
        })?,
    };
    let meta_raw = serde_json::json!({ "project": form.project, "repeats": repeats })
        .to_string()
        .into_bytes();
    let meta = Meta::parse(&meta_raw).map_err(app::Error::from)?;
    let upload = upload::Upload {
        log,
        filename,
        script,
        meta,
        meta_raw,
    };
    let uploader = Uploader {
        token_id: user.0.token_id(),
        idempotency_key: None,
    };
    let uploaded = store_upload(state, uploader, upload, held.map(|e| e.0)).await?;
    Ok(uploaded.report_id)
}

/// Reads a refused submission's fields back into `form`, storing nothing: each field's first
/// [`KEEP_PASTE`] bytes are kept, the rest read and dropped (the route's body limit bounds it).
async fn read_back(multipart: &mut Multipart, form: &mut NewReportForm) -> Result<(), AppError> {
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        let mut kept = Vec::new();
        let mut over = false;
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            if kept.len() + chunk.len() <= KEEP_PASTE as usize {
                kept.extend_from_slice(&chunk);
            } else {
                over = true;
            }
        }
        let text = |max: usize| {
            String::from_utf8_lossy(&kept)
                .trim()
                .chars()
                .take(max)
                .collect::<String>()
        };
        match name.as_str() {
            "project" => form.project = text(200),
            "repeats" => form.repeats = text(20),
            "log_text" if over => form.log_dropped = true,
            "log_text" => form.log_text = String::from_utf8_lossy(&kept).into_owned(),
            "log_file" if over || !kept.is_empty() => form.log_was_file = true,
            "script_text" => form.script_text = String::from_utf8_lossy(&kept).into_owned(),
            _ => {}
        }
    }
    Ok(())
}

/// Copies a pasted log of at most [`KEEP_PASTE`] bytes into the form (the spooled file is
/// rewound by the upload, so reading it here costs nothing else).
fn keep_paste(file: &mut std::fs::File, len: u64, form: &mut NewReportForm) {
    use std::io::{Read, Seek};
    if len > KEEP_PASTE {
        form.log_dropped = true;
        return;
    }
    let mut bytes = Vec::new();
    if file
        .rewind()
        .and_then(|()| file.read_to_end(&mut bytes))
        .is_ok()
    {
        form.log_text = String::from_utf8_lossy(&bytes).into_owned();
    }
}

/// The findings of one rule as the report page lists them: folded, the first one's text, every
/// line it hit (the root cause's rule first, its root-cause line first).
pub struct FindingGroup {
    pub root: bool,
    pub rule: String,
    pub category: Category,
    pub text: String,
    pub lines: Vec<usize>,
}

impl FindingGroup {
    /// The lines after the first.
    #[must_use]
    pub fn more(&self) -> &[usize] {
        self.lines.get(1..).unwrap_or_default()
    }
}

/// Findings folded by rule, in the order of their first finding (the root cause first).
fn fold_findings(findings: &[crate::rules::Finding]) -> Vec<FindingGroup> {
    let mut groups: Vec<FindingGroup> = Vec::new();
    for f in findings {
        match groups.iter_mut().find(|g| g.rule == f.rule) {
            Some(g) => g.lines.push(f.line),
            None => groups.push(FindingGroup {
                root: f.role == Role::RootCause,
                rule: f.rule.clone(),
                category: f.category,
                text: f.text.clone(),
                lines: vec![f.line],
            }),
        }
    }
    groups
}

/// What the log pane shows.
#[derive(Debug)]
enum LogMode {
    /// A page of consecutive lines.
    Page,
    /// The lines that contain `needle`: `matched` in all, the first ones shown, one of them
    /// the current match.
    Find {
        needle: String,
        matched: usize,
        nav: FindNav,
    },
    /// Only the lines that hold a finding.
    Findings,
}

/// Where a find is among its shown matches, kept in the URL (`?grep=TEXT&hit=K#LN`) so a
/// link or a reload opens the same match.
#[derive(Debug, Default)]
struct FindNav {
    /// 1-based position of the current match among those shown (0: none shown).
    current: usize,
    /// Matches shown.
    shown: usize,
    /// The current match's line number (0: none).
    line: usize,
    prev: Option<String>,
    next: Option<String>,
}

impl FindNav {
    /// The position `hit` (1-based, clamped) among `lines`, the lines shown for `needle`.
    fn new(id: i64, needle: &str, hit: Option<usize>, lines: &[logview::LogLine]) -> FindNav {
        if lines.is_empty() {
            return FindNav::default();
        }
        let current = hit.unwrap_or(1).clamp(1, lines.len());
        let grep = serde_urlencoded::to_string([("grep", needle)]).unwrap_or_default();
        let link = |k: usize| {
            let line = lines[k - 1].number;
            format!("/reports/{id}?{grep}&hit={k}#L{line}")
        };
        FindNav {
            current,
            shown: lines.len(),
            line: lines[current - 1].number,
            prev: (current > 1).then(|| link(current - 1)),
            next: (current < lines.len()).then(|| link(current + 1)),
        }
    }
}

/// Most lines a find shows.
const FIND_SHOWN: usize = 400;
/// Longest text a find looks for.
const FIND_MAX: usize = 200;

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
    /// Other groups whose failure has nearly the same shape.
    similar: Vec<SimilarGroup>,
    /// Each similar group offers to merge it into this report's group (the session may).
    can_merge: bool,
    /// The log has no failure line a rule names: its group is "logs that end the same way".
    unmatched: bool,
    log: LogWindow,
    log_lines: i64,
    /// Set when retention removed the log: the page says so instead of showing it.
    log_removed: Option<LogRemoved>,
    script: Option<String>,
    repro: ReproSection,
}

/// When and after how many days retention removed a report's log.
#[derive(Debug)]
struct LogRemoved {
    at: crate::time::Timestamp,
    after_days: Option<i32>,
}

/// The "Fixed before" banner: the fix, its link text naming the target, and, when the fix
/// was recorded for a similar group rather than the report's own, that group and how alike.
#[derive(Debug)]
struct FixedBefore {
    fix: Fix,
    target: String,
    similar: Option<(i64, u32)>,
}

/// `?start=N`: the first line of the log window; `?line=N`: the page that holds line N (the
/// link then scrolls to `#LN`); `?grep=TEXT`: only the lines containing TEXT, `&hit=K` the
/// K-th of them current; `?view=findings`: only the lines that hold a finding.
#[derive(Debug, Deserialize)]
pub struct WindowParams {
    start: Option<usize>,
    line: Option<usize>,
    grep: Option<String>,
    hit: Option<usize>,
    view: Option<String>,
}

/// `GET /reports/{id}`
pub async fn show_report(
    State(state): State<AppState>,
    ScopedUser { user, .. }: ScopedUser<Read>,
    ReportId(id): ReportId,
    QueryParams(params): QueryParams<WindowParams>,
) -> Result<ReportPage, PageError> {
    let d = reports::detail(&state.db, id).await?;
    let r = d.report;
    let c = r.classification;
    let findings = fold_findings(&c.findings);
    let root_line = c.root_cause.as_ref().map(|r| r.line);
    let root_text = c
        .root_cause
        .as_ref()
        .map(|r| r.text.clone())
        .unwrap_or_default();
    // The root cause and identical repeats of it are highlighted.
    let highlight: Vec<usize> = c
        .findings
        .iter()
        .filter(|f| f.role == Role::RootCause || (!root_text.is_empty() && f.text == root_text))
        .map(|f| f.line)
        .collect();
    let needle = params.grep.as_deref().map(str::trim).unwrap_or_default();
    if needle.chars().count() > FIND_MAX {
        return Err(AppError::BadRequest(
            ErrorCode::BadQuery,
            format!("grep: at most {FIND_MAX} characters"),
        )
        .into());
    }
    let mut log_mode = match params.view.as_deref() {
        None | Some("" | "log") => LogMode::Page,
        Some("findings") => LogMode::Findings,
        Some(other) => {
            return Err(AppError::BadRequest(
                ErrorCode::BadQuery,
                format!("view: expected log or findings, got {other:?}"),
            )
            .into());
        }
    };
    if !needle.is_empty() {
        log_mode = LogMode::Find {
            needle: needle.to_owned(),
            matched: 0,
            nav: FindNav::default(),
        };
    }
    // Only the page's lines (and, beside a reproduction, an excerpt around the root cause)
    // are read from the stored log, so a view costs the same for any size of log. A log
    // retention removed is not read at all.
    let log_removed = r.log_removed_at.map(|at| LogRemoved {
        at,
        after_days: r.log_removed_after_days,
    });
    let total = usize::try_from(r.log_lines).unwrap_or(0);
    let page = match &mut log_mode {
        _ if log_removed.is_some() => Pane::Page(0, Vec::new()),
        LogMode::Page => {
            let (start, focus) = match params.line {
                Some(line) => (None, Some(line)),
                None => (params.start, root_line),
            };
            match logview::page_range(total, start, focus) {
                Some((first, last)) => Pane::Page(
                    first,
                    reports::log_lines(&state.db, id, first, last, MAX_VIEW_LINE_BYTES).await?,
                ),
                None => Pane::Page(0, Vec::new()),
            }
        }
        LogMode::Find {
            needle, matched, ..
        } => {
            let found = reports::grep(
                &state.db,
                &state.finds,
                id,
                needle,
                FIND_SHOWN,
                MAX_VIEW_LINE_BYTES,
            )
            .await?;
            *matched = found.matched;
            Pane::Picked(found.lines)
        }
        LogMode::Findings => {
            let lines = c.findings.iter().map(|f| f.line).collect();
            Pane::Picked(
                reports::lines_at(&state.db, id, lines, MAX_VIEW_LINE_BYTES)
                    .await?
                    .lines,
            )
        }
    };
    let excerpt = if log_removed.is_none() && d.jobs.iter().any(|j| j.reproduction.is_some()) {
        let (first, last) = repro::Reported::excerpt_range(total, root_line);
        let bytes = reports::log_lines(&state.db, id, first, last, MAX_VIEW_LINE_BYTES).await?;
        Some((first, bytes))
    } else {
        None
    };
    let classification = c.clone();
    let (log, reported) = app::blocking(move || {
        let reported = match excerpt {
            Some((first, bytes)) => repro::Reported::from_excerpt(
                &String::from_utf8_lossy(&bytes),
                first,
                &classification,
            ),
            None => repro::Reported::default(),
        };
        let log = match page {
            Pane::Page(0, _) => logview::LogWindow::default(),
            Pane::Page(first, bytes) => logview::render(&bytes, first, total, &highlight),
            Pane::Picked(lines) => logview::render_picked(&lines, total, &highlight),
        };
        (log, reported)
    })
    .await?;
    let mut log = log;
    if let LogMode::Find { needle, nav, .. } = &mut log_mode {
        *nav = FindNav::new(id, needle, params.hit, &log.lines);
        logview::mark_matches(&mut log.lines, needle);
    }
    let fixed_before = app::similar::known_fix(&d.fixes, &d.similar).map(|f| FixedBefore {
        target: link_text(&f.link),
        similar: d
            .similar
            .iter()
            .find(|s| s.group.id == f.group_id)
            .map(|s| (s.group.id, s.percent())),
        fix: f.clone(),
    });
    let can_write = user.require(&[Scope::Ingest, Scope::Admin]).is_ok();
    // Who could take a pending job: read only while one is queued or running.
    let seen = if d.jobs.iter().any(|j| !j.state.is_finished()) {
        Some(app::reproduce::workers::seen_recently(&state.db).await?)
    } else {
        None
    };
    let layout = Layout::for_user(Some(&user));
    let status = seen.as_ref().map(|seen| StatusContext {
        seen,
        server_url: &state.public_url,
        now: layout.now,
    });
    let repro = repro::section(
        d.jobs,
        d.basis.as_ref(),
        &reported,
        can_write,
        status.as_ref(),
    );
    Ok(ReportPage {
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
        next_steps: steps_beside_warning(c.next_steps, c.async_hint),
        async_hint: c.async_hint,
        group_id: r.group_id,
        group_count: d.group.map_or(1, |g| g.report_count),
        fixed_before,
        unmatched: c.root_cause.is_none(),
        similar: d.similar,
        can_merge: can_write,
        fixes: d.fixes,
        log,
        log_lines: r.log_lines,
        log_removed,
        script: r.script,
        repro,
    })
}

/// The next steps as the page lists them: when the asynchronous-error warning is shown above,
/// the step that says the same (the async context's advice: "CUDA reports kernel errors
/// asynchronously ...") is not repeated below it.
fn steps_beside_warning(steps: Vec<String>, warning_shown: bool) -> Vec<String> {
    if !warning_shown {
        return steps;
    }
    steps
        .into_iter()
        .filter(|s| !s.contains("asynchronously"))
        .collect()
}

/// The log lines a page view read: a page from its first line, or lines picked out.
enum Pane {
    Page(usize, Vec<u8>),
    Picked(Vec<(usize, Vec<u8>)>),
}

/// Typed facts as label/value rows, sizes in human units with exact bytes; the other facts in
/// the order of their names.
pub(super) fn fact_rows(facts: &Facts) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mem = &facts.memory;
    for (value, label) in [
        (mem.requested_bytes, "requested"),
        (mem.free_bytes, "free"),
        (mem.total_bytes, "total"),
        (mem.allocated_bytes, "allocated by PyTorch"),
        (mem.reserved_bytes, "reserved by PyTorch"),
    ] {
        if let Some(b) = value {
            rows.push((
                format!("memory {label}"),
                format!("{} ({b} bytes)", human_bytes(b)),
            ));
        }
    }
    let list = |items: &[String]| (!items.is_empty()).then(|| items.join(", "));
    let ranks = (!facts.ranks.is_empty()).then(|| {
        let ranks: Vec<String> = facts.ranks.iter().map(u32::to_string).collect();
        ranks.join(", ")
    });
    let named = [
        ("arch", facts.arch.clone()),
        ("cuda version", facts.cuda_version.clone()),
        ("devices", list(&facts.devices)),
        ("driver version", facts.driver_version.clone()),
        ("dtypes", list(&facts.dtypes)),
        ("gpu", facts.gpu.clone()),
        ("nccl version", facts.nccl_version.clone()),
        ("ranks", ranks),
        ("shapes", list(&facts.shapes)),
        ("torch version", facts.torch_version.clone()),
    ];
    for (label, value) in named {
        if let Some(text) = value {
            rows.push((label.to_owned(), text));
        }
    }
    rows
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// `GET /reports/{id}/raw`: the stored (scrubbed) log as a plain-text attachment.
pub async fn raw_log(
    State(state): State<AppState>,
    user: PortalUser,
    ReportId(id): ReportId,
) -> Result<Response, PageError> {
    user.require(&[Scope::Read])?;
    let chunks = reports::log_stream(&state.db, id).await?;
    // Streamed a chunk at a time; the request's in-flight slot is held until the body ends.
    let body = axum::body::Body::new(LogBody(chunks));
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"report-{id}.log\""),
            ),
        ],
        body,
    )
        .into_response())
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

/// A download body fed by [`reports::log_stream`]'s chunks.
struct LogBody(tokio::sync::mpsc::Receiver<Result<Vec<u8>, app::Error>>);

impl http_body::Body for LogBody {
    type Data = axum::body::Bytes;
    type Error = app::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, app::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|chunk| chunk.map(|bytes| http_body::Frame::data(bytes.into()))))
    }
}

/// Bytes of a log line read for a page; the page shows the first
/// [`logview::MAX_LINE_CHARS`] characters of a line, and the raw download has it whole.
const MAX_VIEW_LINE_BYTES: usize = 16 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_become_readable_rows() {
        let facts: Facts = serde_json::from_value(serde_json::json!({
            "memory": {"requested_bytes": 2147483648u64, "free_bytes": 512},
            "devices": ["cuda:0", "cpu"], "gpu": "NVIDIA A100"
        }))
        .expect("facts");
        let rows = fact_rows(&facts);
        assert_eq!(
            rows[0],
            (
                "memory requested".into(),
                "2.00 GiB (2147483648 bytes)".into()
            )
        );
        assert_eq!(rows[1], ("memory free".into(), "512 B (512 bytes)".into()));
        assert!(rows.contains(&("devices".into(), "cuda:0, cpu".into())));
        assert!(rows.contains(&("gpu".into(), "NVIDIA A100".into())));
    }
}
