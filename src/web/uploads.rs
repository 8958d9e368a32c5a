//! Uploads as both `POST /api/v1/reports` and the portal's form take them: reading multipart
//! parts under their caps (a large part streams into an anonymous temporary file, 413 as soon
//! as it passes its cap; a small one into memory; every multipart failure maps to one status),
//! and storing the upload through `app::upload` with this server's counters and queue signal.

use axum::extract::multipart::{Field, MultipartError};
use axum::http::StatusCode;
use tokio::io::AsyncWriteExt;

use super::error::AppError;
use super::limits::InFlight;
use super::state::AppState;
use crate::api_types::ErrorCode;
use crate::app::upload::{self, Uploaded, Uploader};

/// Streams a field into an anonymous temporary file (gone when dropped, even on a crash),
/// refusing it with 413 as soon as it passes the cap.
pub(crate) async fn spool(mut field: Field<'_>, cap: u64) -> Result<std::fs::File, AppError> {
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
    Ok(file.into_std().await)
}

/// Reads a small field whole, refusing it with 413 past `cap` bytes.
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

/// A multipart failure: 408 for a body arriving too slowly, 413 over a cap (a preamble, part
/// header or part count over `multipart_guard`'s, or a field over its own), else 400.
pub(crate) fn multipart_error(e: MultipartError) -> AppError {
    if let Some(slow) = crate::web::limits::BodyTooSlow::find(&e) {
        return AppError::BodyTooSlow(slow.to_string());
    }
    if let Some(cap) = crate::web::multipart_guard::MultipartTooLarge::find(&e) {
        return AppError::TooLarge(cap.to_string());
    }
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::TooLarge(e.body_text())
    } else {
        AppError::BadRequest(ErrorCode::BadMultipart, e.body_text())
    }
}

/// The file name of an uploaded part, cut to 255 characters.
pub(crate) fn file_name(field: &Field<'_>, default: &str) -> String {
    field
        .file_name()
        .unwrap_or(default)
        .chars()
        .take(255)
        .collect()
}

/// Runs the upload use case and counts it (the API's; the portal's form goes through
/// `app::reports::submit` and counts with [`counted`]).
pub(crate) async fn store_upload(
    state: &AppState,
    uploader: Uploader,
    parts: upload::ReceivedParts,
    held: Option<InFlight>,
) -> Result<Uploaded, AppError> {
    let uploaded = upload::upload_parts(
        &state.db,
        state.ruleset.current(),
        &state.limits,
        uploader,
        parts,
        held,
    )
    .await?;
    counted(state, &uploaded);
    Ok(uploaded)
}

/// Counts a stored upload in this server's metrics and wakes the workers waiting here when it
/// queued a job.
pub(crate) fn counted(state: &AppState, uploaded: &Uploaded) {
    // A replayed idempotent answer was counted when it was first given.
    if !uploaded.replayed {
        state
            .metrics
            .report_ingested(uploaded.classification.category, uploaded.duplicate);
    }
    if upload::queued_a_job(uploaded) {
        // Long-polling workers on this server claim it now rather than at their next poll.
        state.queue.wake.notify_waiters();
    }
}
