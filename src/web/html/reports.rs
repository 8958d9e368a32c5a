//! Portal pages for reports: the start page (paste or upload a log, recent reports), the form
//! post that stores one, the report page (log window with the root-cause line highlighted,
//! findings, facts, next steps, group and fixes) and the raw download.

use std::io::Read;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::Layout;
use super::logview::{self, LogWindow};
use super::repro::{self, ReproSection};
use crate::auth::Scope;
use crate::report::{self, Meta};
use crate::storage::groups::{self, Fix};
use crate::storage::reports::{self as store, ReportSummary};
use crate::storage::reproductions as jobs;
use crate::web::api::{parse_id, reports as api};
use crate::web::auth::{ApiToken, OptionalUser, PortalUser};
use crate::web::{AppError, AppState, PageError};

/// `GET /`: paste or upload a log; the newest reports.
#[derive(Template, WebTemplate)]
#[template(path = "home.html")]
pub struct HomePage {
    layout: Layout,
    recent: Vec<ReportSummary>,
}

/// `GET /`
pub async fn home(
    State(state): State<AppState>,
    OptionalUser(user): OptionalUser,
) -> Result<HomePage, PageError> {
    let recent = match &user {
        Some(u) if u.require(&[Scope::Read]).is_ok() => {
            store::recent_reports(&state.db, 20).await?
        }
        _ => Vec::new(),
    };
    Ok(HomePage {
        layout: Layout::for_user(user.as_ref()),
        recent,
    })
}

/// `POST /reports`: the start page's form (multipart: csrf, project, log file or pasted text,
/// optional script file or text).
pub async fn create_report(
    State(state): State<AppState>,
    user: PortalUser,
    held: Option<axum::extract::Extension<crate::web::limits::InFlight>>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Ingest])?;
    let mut multipart = multipart.map_err(|e| AppError::UnsupportedMediaType(e.body_text()))?;
    let limits = state.limits;
    let mut csrf = String::new();
    let mut project = String::new();
    let mut log: Option<(tokio::fs::File, String)> = None;
    let mut script: Option<Vec<u8>> = None;
    while let Some(field) = multipart.next_field().await.map_err(api::multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "csrf" => {
                csrf = String::from_utf8_lossy(&api::read_small(field, 200, "csrf").await?)
                    .into_owned()
            }
            "project" => {
                project = String::from_utf8_lossy(&api::read_small(field, 200, "project").await?)
                    .trim()
                    .to_owned()
            }
            "log_file" | "log_text" => {
                // Check the CSRF token before spooling anything large.
                user.check_form(&headers, &csrf)?;
                let filename = field
                    .file_name()
                    .unwrap_or("pasted.log")
                    .chars()
                    .take(255)
                    .collect::<String>();
                let file = api::spool(field, limits.max_log_bytes).await?;
                let len = file.metadata().await.map(|m| m.len()).unwrap_or(0);
                if len > 0 && log.is_none() {
                    log = Some((file, filename));
                }
            }
            "script_file" | "script_text" => {
                let bytes = api::read_small(field, limits.max_script_bytes, "script").await?;
                if !bytes.iter().all(u8::is_ascii_whitespace) && script.is_none() {
                    script = Some(bytes);
                }
            }
            _ => {}
        }
    }
    user.check_form(&headers, &csrf)?;
    let (log, filename) = log.ok_or_else(|| {
        AppError::Unprocessable("empty_log", "paste a log or choose a file to upload".into())
    })?;
    let script = script
        .map(|b| report::check_script(&b, &limits))
        .transpose()
        .map_err(api::upload_error)?;
    let meta_raw = serde_json::json!({ "project": project })
        .to_string()
        .into_bytes();
    let meta = Meta::parse(&meta_raw).map_err(api::upload_error)?;
    let upload = api::Upload {
        log,
        filename,
        script,
        meta,
        meta_raw,
    };
    let token = ApiToken(user.0.token.clone());
    let created = api::store_upload(&state, &token, upload, None, held.map(|e| e.0)).await?;
    Ok(Redirect::to(&format!("/reports/{}", created.report_id)).into_response())
}

/// A finding as the report page lists it.
pub struct FindingView {
    pub root: bool,
    pub line: u64,
    pub text: String,
    pub rule: String,
    pub category: String,
}

/// `GET /reports/{id}`
#[derive(Template, WebTemplate)]
#[template(path = "report.html")]
pub struct ReportPage {
    layout: Layout,
    id: i64,
    title: String,
    category: String,
    confidence: String,
    created_at: String,
    project: String,
    branch: String,
    commit: String,
    job_url: String,
    filename: String,
    root_line: Option<u64>,
    root_text: String,
    findings: Vec<FindingView>,
    facts: Vec<(String, String)>,
    next_steps: Vec<String>,
    async_hint: bool,
    group_id: i64,
    group_count: i64,
    fixes: Vec<Fix>,
    log: LogWindow,
    log_lines: i64,
    script: Option<String>,
    repro: ReproSection,
}

/// `?start=N`: the first line of the log window.
#[derive(Debug, Deserialize)]
pub struct WindowParams {
    start: Option<usize>,
}

/// `GET /reports/{id}`
pub async fn show_report(
    State(state): State<AppState>,
    user: PortalUser,
    Path(id): Path<String>,
    params: Result<Query<WindowParams>, axum::extract::rejection::QueryRejection>,
) -> Result<ReportPage, PageError> {
    user.require(&[Scope::Read])?;
    let Query(params) = params.map_err(|e| AppError::BadRequest("bad_query", e.body_text()))?;
    let id = parse_id(&id, "report")?;
    let r = store::get_report(&state.db, id)
        .await?
        .ok_or(AppError::NotFound("report"))?;
    let gz = store::report_log_gz(&state.db, id)
        .await?
        .unwrap_or_default();
    let c = &r.classification;
    let findings: Vec<FindingView> = c["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| FindingView {
                    root: f["role"] == "root_cause",
                    line: f["line"].as_u64().unwrap_or(0),
                    text: f["text"].as_str().unwrap_or_default().to_owned(),
                    rule: f["rule"].as_str().unwrap_or_default().to_owned(),
                    category: f["category"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    let root_line = c["root_cause"]["line"].as_u64();
    let root_text = c["root_cause"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The root cause and identical repeats of it are highlighted.
    let highlight: Vec<usize> = findings
        .iter()
        .filter(|f| f.root || (!root_text.is_empty() && f.text == root_text))
        .map(|f| f.line as usize)
        .collect();
    let start = params.start;
    let focus = root_line.map(|l| l as usize);
    let jobs = jobs::report_jobs(&state.db, id).await?;
    // The reported traceback is only needed beside a reproduction.
    let compare = jobs.iter().any(|j| j.reproduction.is_some());
    let classification = r.classification.clone();
    let (log, reported) = tokio::task::spawn_blocking(move || {
        let mut text = Vec::new();
        let _ = flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut text);
        let reported = if compare {
            repro::Reported::from_log(&String::from_utf8_lossy(&text), &classification)
        } else {
            repro::Reported::default()
        };
        (logview::window(&text, start, focus, &highlight), reported)
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))?;
    let group = groups::get_group(&state.db, r.group_id).await?;
    let fixes = groups::group_fixes(&state.db, r.group_id).await?;
    let basis = jobs::category_basis(&state.db, id).await?;
    let can_write = user.require(&[Scope::Ingest, Scope::Admin]).is_ok();
    let repro = repro::section(jobs, basis.as_ref(), &reported, can_write);
    Ok(ReportPage {
        layout: Layout::for_user(Some(&user)),
        id,
        title: r.title,
        category: r.category,
        confidence: c["confidence"].as_str().unwrap_or_default().to_owned(),
        created_at: r.created_at,
        project: r.project,
        branch: r.branch,
        commit: r.commit_sha,
        job_url: r.job_url,
        filename: r.filename,
        root_line,
        root_text,
        findings,
        facts: fact_rows(&c["facts"]),
        next_steps: c["next_steps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        async_hint: c["async_hint"].as_bool().unwrap_or(false),
        group_id: r.group_id,
        group_count: group.map_or(1, |g| g.report_count),
        fixes,
        log,
        log_lines: r.log_lines,
        script: r.script,
        repro,
    })
}

/// Typed facts as label/value rows, sizes in human units with exact bytes.
fn fact_rows(facts: &Value) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let Some(obj) = facts.as_object() else {
        return rows;
    };
    if let Some(mem) = obj.get("memory").and_then(Value::as_object) {
        for (key, label) in [
            ("requested_bytes", "requested"),
            ("free_bytes", "free"),
            ("total_bytes", "total"),
            ("allocated_bytes", "allocated by PyTorch"),
            ("reserved_bytes", "reserved by PyTorch"),
        ] {
            if let Some(b) = mem.get(key).and_then(Value::as_u64) {
                rows.push((
                    format!("memory {label}"),
                    format!("{} ({b} bytes)", human_bytes(b)),
                ));
            }
        }
    }
    for (key, value) in obj {
        if key == "memory" {
            continue;
        }
        let text = match value {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", "),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        rows.push((key.replace('_', " "), text));
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
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    user.require(&[Scope::Read])?;
    let id = parse_id(&id, "report")?;
    let gz = store::report_log_gz(&state.db, id)
        .await?
        .ok_or(AppError::NotFound("report"))?;
    let text = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut out)
            .map(|_| out)
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))?
    .map_err(|e| AppError::Internal(e.into()))?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"report-{id}.log\""),
            ),
        ],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_become_readable_rows() {
        let rows = fact_rows(&serde_json::json!({
            "memory": {"requested_bytes": 2147483648u64, "free_bytes": 512},
            "devices": ["cuda:0", "cpu"], "gpu": "NVIDIA A100"
        }));
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
