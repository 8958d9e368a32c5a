//! `GET /reports/{id}/raw`: the stored (scrubbed) log as a plain-text attachment, streamed a
//! chunk at a time as `app::reports::log_stream` decompresses it.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::app::{self, reports};
use crate::web::error::PageError;
use crate::web::extract::ReportId;
use crate::web::scope::{Read, ScopedUser};
use crate::web::state::AppState;

/// `GET /reports/{id}/raw`: the stored (scrubbed) log as a plain-text attachment.
pub async fn raw_log(
    State(state): State<AppState>,
    _: ScopedUser<Read>,
    ReportId(id): ReportId,
) -> Result<Response, PageError> {
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
