//! `POST /api/v1/classify`, `POST /api/v1/reports`, `GET /api/v1/reports/{id}`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::{Field, MultipartRejection};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Multipart, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::parse_id;
use crate::auth::Scope;
use crate::ingest::Reject;
use crate::report::{self, Meta, UploadError};
use crate::storage::reports::{IdempotencyKey, InsertOutcome};
use crate::storage::{groups, reports as store, reproductions};
use crate::web::auth::ApiToken;
use crate::web::limits::InFlight;
use crate::web::{AppError, AppState};

/// `POST /api/v1/classify`: classify the body, store nothing.
pub async fn classify_log(
    State(state): State<AppState>,
    token: ApiToken,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Ingest, Scope::Read])?;
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::TooLarge(format!(
                "the log is larger than the {}-byte limit",
                state.limits.max_classify_bytes
            ))
        } else {
            AppError::BadRequest("bad_body", e.body_text())
        }
    })?;
    if body.is_empty() {
        return Err(upload_error(Reject::Empty.into()));
    }
    if crate::ingest::looks_binary(&body[..body.len().min(8192)]) {
        return Err(upload_error(Reject::Binary.into()));
    }
    let ruleset = state.ruleset.current();
    let c = tokio::task::spawn_blocking(move || ruleset.classify_bytes("-", &body))
        .await
        .map_err(|e| AppError::Internal(e.into()))?;
    Ok(Json(
        serde_json::to_value(c).map_err(|e| AppError::Internal(e.into()))?,
    ))
}

/// The parts of an upload, read from the multipart stream (API or portal form).
pub(crate) struct Upload {
    pub log: tokio::fs::File,
    pub filename: String,
    pub script: Option<String>,
    pub meta: Meta,
    pub meta_raw: Vec<u8>,
}

/// What storing an upload gave: the response body of `POST /api/v1/reports`.
pub(crate) struct Created {
    pub report_id: i64,
    pub body: Value,
}

/// `POST /api/v1/reports`: store a log (multipart `log`, optional `script` and `meta`).
pub async fn create_report(
    State(state): State<AppState>,
    token: ApiToken,
    held: Option<Extension<InFlight>>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<impl IntoResponse, AppError> {
    token.require(&[Scope::Ingest])?;
    let key = idempotency_key(&headers)?;
    let multipart = multipart.map_err(|e| {
        AppError::UnsupportedMediaType(format!(
            "expected a multipart/form-data body: {}",
            e.body_text()
        ))
    })?;
    let upload = read_upload(&state, multipart).await?;
    let created = store_upload(&state, &token, upload, key, held.map(|e| e.0)).await?;
    Ok((StatusCode::CREATED, Json(created.body)))
}

/// Runs the report pipeline on a spooled upload and stores the result (shared by the API and
/// the portal's form).
pub(crate) async fn store_upload(
    state: &AppState,
    token: &ApiToken,
    upload: Upload,
    key: Option<String>,
    held: Option<InFlight>,
) -> Result<Created, AppError> {
    let log = upload.log.into_std().await;
    let ruleset = state.ruleset.current();
    let filename = upload.filename.clone();
    let script = upload.script.clone();
    let meta = upload.meta.clone();
    let prepared = tokio::task::spawn_blocking(move || {
        use std::io::Seek;
        let _held = held;
        let mut log = log;
        log.rewind()?;
        report::prepare(&ruleset, log, &filename, meta, script)
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))?
    .map_err(upload_error)?;
    let mut new = prepared.report;
    new.token_id = Some(token.0.id);
    let idem = key.map(|key| {
        let mut h = Sha256::new();
        h.update(&new.log_sha256);
        h.update([0]);
        h.update(upload.script.as_deref().unwrap_or("").as_bytes());
        h.update([0]);
        h.update(&upload.meta_raw);
        // The file name is part of the request too: a retry resends it unchanged.
        h.update([0]);
        h.update(new.filename.as_bytes());
        IdempotencyKey {
            token_id: token.0.id,
            key,
            request_sha256: h.finalize().to_vec(),
        }
    });
    let stored = match store::insert_report(&state.db, &new, idem.as_ref()).await? {
        InsertOutcome::Stored(s) => s,
        InsertOutcome::KeyReused => {
            return Err(AppError::Unprocessable(
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request".into(),
            ));
        }
    };
    // A replayed idempotent answer was counted when it was first given.
    if !stored.replayed {
        state
            .metrics
            .report_ingested(prepared.classification.category, stored.duplicate);
    }
    if stored.job.as_ref().is_some_and(|(_, st)| st == "queued") {
        // Long-polling workers on this server claim it now rather than at their next poll.
        state.job_wake.notify_waiters();
    }
    let classification = if stored.duplicate || idem.is_some() {
        // The stored report's own classification (the first upload's), not this request's.
        store::get_report(&state.db, stored.report_id)
            .await?
            .map(|r| r.classification)
            .unwrap_or(new.classification)
    } else {
        new.classification
    };
    let body = json!({
        "id": stored.report_id,
        "url": format!("{}/reports/{}", state.public_url, stored.report_id),
        "group_id": stored.group_id,
        "duplicate": stored.duplicate,
        "classification": classification,
        "repro": stored.job.map(|(id, st)| json!({"job_id": id, "state": st})),
    });
    Ok(Created {
        report_id: stored.report_id,
        body,
    })
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, AppError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= 200 && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            AppError::BadRequest(
                "bad_idempotency_key",
                "Idempotency-Key must be 1-200 printable ASCII characters".into(),
            )
        })?;
    Ok(Some(key.to_owned()))
}

async fn read_upload(state: &AppState, mut multipart: Multipart) -> Result<Upload, AppError> {
    let limits = state.limits;
    let mut log: Option<(tokio::fs::File, String)> = None;
    let mut script = None;
    let mut meta_raw: Vec<u8> = Vec::new();
    while let Some(field) = multipart.next_field().await.map_err(multipart_error)? {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "log" if log.is_none() => {
                let filename = field
                    .file_name()
                    .unwrap_or("log")
                    .chars()
                    .take(255)
                    .collect();
                log = Some((spool(field, limits.max_log_bytes).await?, filename));
            }
            "script" if script.is_none() => {
                let bytes = read_small(field, limits.max_script_bytes, "script").await?;
                script = Some(report::check_script(&bytes, &limits).map_err(upload_error)?);
            }
            "meta" if meta_raw.is_empty() => {
                meta_raw = read_small(field, limits.max_meta_bytes, "meta").await?;
            }
            other => {
                return Err(AppError::BadRequest(
                    "unexpected_field",
                    format!(
                        "unexpected or repeated multipart field {other:?}; expected log, script, meta"
                    ),
                ));
            }
        }
    }
    let (log, filename) = log.ok_or_else(|| {
        AppError::BadRequest(
            "missing_log",
            "the multipart field `log` (the log file) is required".into(),
        )
    })?;
    let meta = if meta_raw.is_empty() {
        Meta::default()
    } else {
        Meta::parse(&meta_raw).map_err(upload_error)?
    };
    Ok(Upload {
        log,
        filename,
        script,
        meta,
        meta_raw,
    })
}

/// Streams a field into an anonymous temporary file (gone when dropped, even on a crash),
/// refusing it with 413 as soon as it passes the cap.
pub(crate) async fn spool(mut field: Field<'_>, cap: u64) -> Result<tokio::fs::File, AppError> {
    let file = tempfile::tempfile().map_err(|e| AppError::Internal(e.into()))?;
    let mut file = tokio::fs::File::from_std(file);
    let mut total: u64 = 0;
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        total += chunk.len() as u64;
        if total > cap {
            return Err(AppError::TooLarge(format!(
                "the log is larger than the {cap}-byte limit"
            )));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
    }
    file.flush()
        .await
        .map_err(|e| AppError::Internal(e.into()))?;
    Ok(file)
}

pub(crate) async fn read_small(
    mut field: Field<'_>,
    cap: usize,
    what: &str,
) -> Result<Vec<u8>, AppError> {
    let mut out = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if out.len() + chunk.len() > cap {
            return Err(AppError::TooLarge(format!(
                "the {what} is larger than the {cap}-byte limit"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

pub(crate) fn multipart_error(e: axum::extract::multipart::MultipartError) -> AppError {
    if let Some(slow) = crate::web::limits::BodyTooSlow::find(&e) {
        return AppError::BodyTooSlow(slow.to_string());
    }
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::TooLarge(e.body_text())
    } else {
        AppError::BadRequest("bad_multipart", e.body_text())
    }
}

/// Maps the pipeline's refusals to statuses: empty 422, oversize 413, binary 415, bad meta or
/// script 422.
pub(crate) fn upload_error(e: UploadError) -> AppError {
    match e {
        UploadError::Log(Reject::Empty) => {
            AppError::Unprocessable("empty_log", "the log is empty".into())
        }
        UploadError::Log(r @ Reject::TooLarge { .. }) => AppError::TooLarge(r.to_string()),
        UploadError::Log(Reject::Binary) => {
            AppError::UnsupportedMediaType("the log looks binary, not text".into())
        }
        UploadError::Meta(m) => AppError::Unprocessable("bad_meta", format!("meta: {m}")),
        UploadError::Script(m) => AppError::Unprocessable("bad_script", format!("script: {m}")),
        UploadError::Io(e) => AppError::Internal(e.into()),
    }
}

/// `GET /api/v1/reports/{id}`
pub async fn show_report(
    State(state): State<AppState>,
    token: ApiToken,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    token.require(&[Scope::Read])?;
    let id = parse_id(&id, "report")?;
    let r = store::get_report(&state.db, id)
        .await?
        .ok_or(AppError::NotFound("report"))?;
    let fixes = groups::group_fixes(&state.db, r.group_id).await?;
    let reproductions =
        super::jobs::reproductions_json(&reproductions::report_jobs(&state.db, id).await?);
    let basis = reproductions::category_basis(&state.db, id).await?;
    Ok(Json(json!({
        "id": r.id,
        "url": format!("{}/reports/{}", state.public_url, r.id),
        "created_at": r.created_at,
        "project": r.project,
        "job_url": r.job_url,
        "commit": r.commit_sha,
        "branch": r.branch,
        "environment": r.environment,
        "filename": r.filename,
        "log_bytes": r.log_bytes,
        "log_lines": r.log_lines,
        "has_script": r.script.is_some(),
        "group_id": r.group_id,
        "classification": r.classification,
        "fixes": fixes.iter().map(super::groups::fix_json).collect::<Vec<_>>(),
        "reproductions": reproductions,
        "category": r.category,
        "title": r.title,
        "category_source": basis.as_ref().map_or("log", |b| b.source.as_str()),
        "original_category": basis.as_ref().and_then(|b| b.original_category.as_deref()),
    })))
}
