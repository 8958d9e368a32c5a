//! `POST /api/v1/classify`, `POST /api/v1/reports`, `GET /api/v1/reports/{id}`.

use axum::Json;
use axum::extract::{Extension, Multipart, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;

use crate::api_types::{self as wire, CategorySource, ErrorBody, ErrorCode, ReportCreated};
use crate::app::reproduce::JobView;
use crate::app::upload::{self, Meta, ReceivedParts, Uploader};
use crate::app::{self, reports};
use crate::rules::Classification;
use crate::web::error::AppError;
use crate::web::extract::{IdempotencyKey, MultipartBody, RawLog, ReportId};
use crate::web::limits::InFlight;
use crate::web::scope::{Ingest, IngestOrRead, Read, Scoped};
use crate::web::state::AppState;
use crate::web::uploads::{file_name, multipart_error, read_small, spool, store_upload};

/// `POST /api/v1/classify`: classify the body, store nothing.
#[utoipa::path(
    post,
    path = "/api/v1/classify",
    tag = "reports",
    request_body(
        content = String,
        content_type = "text/plain",
        description = "The log as raw text (16 MiB at most by default). Nothing is stored.",
    ),
    responses(
        (status = 200, description = "The classification (DESIGN.md section 3); `source` is `-`.",
            body = Classification),
        (status = 400, description = "`bad_body`: the body could not be read.", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the log looks binary.",
            body = ErrorBody),
        (status = 422, description = "`empty_log`: the body is empty or blank.", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"]), ("bearer" = ["read"])),
)]
pub async fn classify_log(
    State(state): State<AppState>,
    _: Scoped<IngestOrRead>,
    RawLog(body): RawLog,
) -> Result<Json<Classification>, AppError> {
    Ok(Json(
        upload::classify_only(state.ruleset.current(), body).await?,
    ))
}

/// The multipart body of `POST /api/v1/reports`. A schema only: the handler reads the parts
/// one by one as they stream in (`read_upload`), under their own caps.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)] // Other parts are refused: 400 `unexpected_field`.
#[allow(dead_code)] // Never built: it describes the parts `read_upload` accepts.
struct ReportUpload {
    /// The log file (128 MiB at most by default, streamed; 413 over the cap). Repeat the part
    /// (each with its file name: its path in the run, such as `node-7/rank3.log`) to upload a
    /// failed run's files as one run: one report with every file's role, the first failure
    /// and the action (`files`, `first_failure`, `action` in the answer); the cap holds for
    /// the files together.
    #[schema(value_type = String, format = Binary)]
    log: Vec<u8>,
    /// Instead of `log` parts: a run's files as one `.tar.gz`, `.tgz` or `.zip` (at most 4,096
    /// files and the log cap decoded; bombs, links, devices and absolute or `..` names are
    /// refused, members that are not text are listed under `skipped`).
    #[schema(value_type = String, format = Binary, required = false)]
    archive: Vec<u8>,
    /// A minimal reproduction script (Python, 64 KiB at most by default); queues a
    /// reproduction job. A script that contains a secret is refused with 422 `bad_script`.
    #[schema(value_type = String, format = Binary, required = false)]
    script: Vec<u8>,
    /// Where the log comes from, as JSON.
    #[schema(required = false)]
    meta: Meta,
}

/// `POST /api/v1/reports`: store a log (multipart `log`, optional `script` and `meta`), or a
/// run of files (several `log` parts or one `archive` part).
#[utoipa::path(
    post,
    path = "/api/v1/reports",
    tag = "reports",
    request_body(content = ReportUpload, content_type = "multipart/form-data"),
    params(
        ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1,
            max_length = 200, pattern = "^[!-~]+$", description = "1-200 printable ASCII characters: a retry with the same key and \
                body gets the first answer; the same key with another body is 422."),
    ),
    responses(
        (status = 201, description = "The stored report (or, for identical bytes of the same \
            project, the existing one with `duplicate: true`).", body = ReportCreated),
        (status = 400, description = "`bad_multipart`, `missing_log`, `unexpected_field` or \
            `bad_idempotency_key`.", body = ErrorBody),
        (status = 413, description = "`too_large`: a log or a run's files over the log cap, an \
            archive over 4,096 files, its decoded size over the cap, or a compression bomb.",
            body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: not a multipart/form-data \
            body, the log looks binary, or the archive is not a readable .tar.gz or .zip.",
            body = ErrorBody),
        (status = 422, description = "`empty_log`, `bad_meta`, `bad_script`, \
            `idempotency_key_reused`, or `bad_archive` (an absolute or `..` name, a link, a \
            device, a repeated name, `log` parts with an `archive` part).", body = ErrorBody),
    ),
    security(("bearer" = ["ingest"])),
)]
pub async fn create_report(
    State(state): State<AppState>,
    token: Scoped<Ingest>,
    held: Option<Extension<InFlight>>,
    IdempotencyKey(idempotency_key): IdempotencyKey,
    MultipartBody(multipart): MultipartBody,
) -> Result<impl IntoResponse, AppError> {
    let uploader = Uploader {
        token_id: Some(token.id),
        person_id: token.owner.as_ref().map(|o| o.person_id),
        idempotency_key,
    };
    let parts = read_parts(&state, multipart).await?;
    let uploaded = store_upload(&state, uploader, parts, held.map(|e| e.0)).await?;
    let body = ReportCreated {
        id: uploaded.report_id,
        url: format!("{}/reports/{}", state.public_url, uploaded.report_id),
        group_id: uploaded.group_id,
        duplicate: uploaded.duplicate,
        classification: uploaded.classification,
        repro: uploaded.job,
        known_fix: uploaded.known_fix,
        group_state: uploaded.group_state.map(standing),
        similar: similar_failures(&state.public_url, uploaded.similar),
        run: uploaded.run.into(),
    };
    Ok((StatusCode::CREATED, Json(body)))
}

async fn read_parts(state: &AppState, mut multipart: Multipart) -> Result<ReceivedParts, AppError> {
    let limits = state.limits;
    let mut parts = ReceivedParts::default();
    // The per-log cap holds for a run's files together.
    let mut room = limits.max_log_bytes;
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "log" | "archive" => {
                let filename = file_name(&field, &name);
                let file = spool(field, room).await?;
                let size = file
                    .metadata()
                    .map_err(|e| AppError::Internal(e.into()))?
                    .len();
                room = room.saturating_sub(size);
                if name == "archive" {
                    if parts.archive.is_some() {
                        return Err(repeated(&name));
                    }
                    parts.archive = Some((file, filename));
                } else if parts.log.is_none() {
                    parts.log = Some((file, filename));
                } else {
                    parts.more_logs.push((file, filename));
                }
            }
            "script" if parts.script.is_none() => {
                parts.script = Some(read_small(field, limits.max_script_bytes, "script").await?);
            }
            "meta" if parts.meta_raw.is_empty() => {
                parts.meta_raw = read_small(field, limits.max_meta_bytes, "meta").await?;
            }
            other => return Err(repeated(other)),
        }
    }
    Ok(parts)
}

/// 400 `unexpected_field` for a part that is unknown or came twice.
fn repeated(name: &str) -> AppError {
    AppError::BadRequest(
        ErrorCode::UnexpectedField,
        format!(
            "unexpected or repeated multipart field {name:?}; expected log (one or more), archive, script, meta"
        ),
    )
}

/// `GET /api/v1/reports/{id}`: a report with its classification, fixes, similar failures and
/// reproductions.
#[utoipa::path(
    get,
    path = "/api/v1/reports/{id}",
    tag = "reports",
    params(("id" = i64, Path, description = "The report's id.")),
    responses(
        (status = 200, description = "The report, its classification, fixes, similar failures \
            and reproductions.", body = wire::ReportDetail),
        (status = 404, description = "`not_found`: no such report.", body = ErrorBody),
    ),
    security(("bearer" = ["read"])),
)]
pub async fn show_report(
    State(state): State<AppState>,
    _: Scoped<Read>,
    ReportId(id): ReportId,
) -> Result<Json<wire::ReportDetail>, AppError> {
    let d = reports::detail(&state.db, id).await?;
    let known_fix = d.known_fix().cloned().map(Into::into);
    let group_state = d.triage.map_or(
        wire::GroupStanding {
            state: crate::api_types::GroupState::Open,
            resolved_in: String::new(),
            assignee: String::new(),
        },
        standing,
    );
    let r = d.report;
    let has_script = r.script.is_some() || r.script_prefix.is_some();
    let run = d.run.into();
    Ok(Json(wire::ReportDetail {
        run,
        id: r.id,
        url: format!("{}/reports/{}", state.public_url, r.id),
        created_at: r.created_at,
        project: r.project,
        job_url: r.job_url,
        commit: r.commit_sha,
        branch: r.branch,
        environment: r.environment,
        version: r.version,
        filename: r.filename,
        log_bytes: r.log_bytes,
        log_lines: r.log_lines,
        has_script,
        group_id: r.group_id,
        group_state,
        classification: r.classification,
        fixes: d.fixes.into_iter().map(Into::into).collect(),
        known_fix,
        similar: similar_failures(&state.public_url, d.similar),
        reproductions: d.jobs.iter().map(reproduction).collect(),
        category: r.category,
        title: r.title,
        category_source: d.basis.as_ref().map_or(CategorySource::Log, |b| b.source),
        original_category: d.basis.and_then(|b| b.original_category),
        log_removed: r
            .log_removed_at
            .map(|at| crate::api_types::retention::LogRemoved {
                at,
                after_days: r.log_removed_after_days.and_then(|d| u32::try_from(d).ok()),
            }),
    }))
}

/// Similar groups as report responses list them.
fn similar_failures(
    public_url: &str,
    similar: Vec<app::similar::SimilarGroup>,
) -> Vec<wire::SimilarFailure> {
    similar
        .into_iter()
        .map(|s| wire::SimilarFailure {
            group_id: s.group.id,
            url: format!("{public_url}/groups/{}", s.group.id),
            category: s.group.category,
            title: s.group.title,
            root_cause: s.group.root_cause_text,
            report_count: s.group.report_count,
            similarity: s.similarity,
            fixes: s.fixes.into_iter().map(Into::into).collect(),
        })
        .collect()
}

/// A job as `GET /api/v1/reports/{id}` lists it under `reproductions` (DESIGN.md section 5):
/// the result's fields are null until a result is recorded.
fn reproduction(j: &JobView) -> wire::Reproduction {
    let r = j.reproduction.as_ref().map(|r| &r.run);
    let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let outcome = app::reproduce::outcome::of_job(j);
    wire::Reproduction {
        job_id: j.id,
        state: j.state,
        attempt: r.map_or(j.attempts, |r| r.attempt),
        max_attempts: j.max_attempts,
        exit_code: r.and_then(|r| r.exit_code),
        signal: r.and_then(|r| r.signal),
        timed_out: r.is_some_and(|r| r.timed_out),
        duration_ms: r.map(|r| r.duration_ms),
        gpu: r.and_then(|r| r.gpu.as_ref().map(|g| g.raw.clone())),
        stdout: r.map(|r| r.stdout.clone()),
        stderr: r.map(|r| r.stderr.clone()),
        truncated: r.is_some_and(|r| r.truncated),
        classification: r.map(|r| r.classification.clone()),
        no_gpu: r.map(|r| r.no_gpu),
        cpu_translation: r.map(|r| r.cpu_translation),
        cpu_run: r.and_then(|r| r.cpu.clone()),
        runs: r.map(|r| r.runs.clone()).unwrap_or_default(),
        verdict: r.map(|r| r.verdict.clone()).unwrap_or_default(),
        outcome_reason: outcome.as_ref().and_then(|d| text(&d.reason)),
        outcome_fix: outcome.as_ref().and_then(|d| text(&d.fix)),
        outcome: outcome.map(|d| d.outcome),
        environment: r.and_then(|r| r.environment.clone()),
        sandbox: r.map(|r| r.sandbox.clone()),
        worker: text(&j.worker),
        reproduction_id: j.reproduction.as_ref().map(|r| r.id),
        dead_reason: text(&j.dead_reason),
        error: text(&j.last_error),
        requeued_from: j.requeued_from,
    }
}

/// A group's triage as report answers show it.
fn standing(t: crate::storage::group_triage::Triage) -> wire::GroupStanding {
    wire::GroupStanding {
        state: t.state,
        resolved_in: t.resolved_in,
        assignee: t.assignee,
    }
}
