//! One id per request, in the logs and on the answer (issue 32 item 5), so that one request can
//! be followed from the client through every log line it caused.
//!
//! The outermost layer takes the client's `X-Request-Id` when it is sane (1 to 128 characters
//! of a safe alphabet: letters, digits and `-_.:/#@+`, nothing that could end a log field, fake
//! another or fool a terminal) and makes one up otherwise (128 random bits in hex). The id is
//! written quoted in the span, like every string the log holds (`crate::telemetry`). Everything under it (the load limits, the
//! credential checks, the handler, the use case and its SQL) runs inside the span
//! `request{id=.. method=.. path=.. actor=..}`, so each log line they write names the request
//! and, once its credentials are checked, who sent it; the answer carries the id back in
//! `X-Request-Id`, refusals and error pages included. The query string is left out of the
//! span: a search can hold anything the user typed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

/// The header that carries the id in and out.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest id taken from a client.
pub const MAX_LEN: usize = 128;

/// The most request headers the server reads. hyper's own ceiling (`server::HARD_MAX_HEADERS`)
/// is higher, so a request between the two is still parsed and gets a 431 that carries its id.
pub const MAX_HEADERS: usize = 100;
/// The most header bytes (names and values) the server reads; hyper's buffer is larger for
/// the same reason.
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// Runs the request inside its `request` span and answers with its id; a request with more
/// headers than [`MAX_HEADERS`] or [`MAX_HEADER_BYTES`] is answered 431 here, id included.
pub async fn tag_request(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&HEADER)
        .filter(|v| is_sane(v.as_bytes()))
        .cloned()
        .unwrap_or_else(generate);
    // Checked or made of hex digits above: printable ASCII either way.
    let shown = id.to_str().unwrap_or_default().to_owned();
    // Handlers that read the header see the id the logs show.
    req.headers_mut().insert(HEADER, id.clone());
    let span = tracing::info_span!(
        "request",
        id = shown.as_str(),
        method = %req.method(),
        path = req.uri().path(),
        actor = tracing::field::Empty,
    );
    let started = Instant::now();
    let mut res = match oversized_headers(&req) {
        Some(err) => span.in_scope(|| {
            if req.uri().path().starts_with("/api/") {
                err.into_response()
            } else {
                super::error::PageError(err).into_response()
            }
        }),
        None => next.run(req).instrument(span.clone()).await,
    };
    span.in_scope(|| {
        tracing::debug!(
            status = res.status().as_u16(),
            ms = started.elapsed().as_millis(),
            "answered"
        );
    });
    res.headers_mut().insert(HEADER, id);
    res
}

/// Why `req`'s headers are more than the server reads, if they are.
fn oversized_headers(req: &Request) -> Option<super::error::AppError> {
    let headers = req.headers();
    if headers.len() > MAX_HEADERS {
        return Some(super::error::AppError::HeadersTooLarge(format!(
            "the request has {} headers; at most {MAX_HEADERS} are read",
            headers.len()
        )));
    }
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    (bytes > MAX_HEADER_BYTES).then(|| {
        super::error::AppError::HeadersTooLarge(format!(
            "the request's headers hold {bytes} bytes; at most {MAX_HEADER_BYTES} are read"
        ))
    })
}

/// Names who acts in the request's span (`actor`: the bearer token's name, else the portal
/// session's person or token), once the load shedder has checked the credentials
/// ([`super::auth::Verified`]); it runs just inside that layer. Requests without valid
/// credentials leave the field out.
pub async fn name_actor(req: Request, next: Next) -> Response {
    if let Some(super::auth::Checked::Verified(verified)) = req.extensions().get() {
        let name = match (&verified.token, &verified.session) {
            (Some(token), _) => Some(token.name.as_str()),
            (None, Some(session)) => Some(session.name()),
            (None, None) => None,
        };
        if let Some(name) = name {
            tracing::Span::current().record("actor", name);
        }
    }
    next.run(req).await
}

/// Whether a client's id may be used as it is: 1 to [`MAX_LEN`] bytes, each an ASCII letter or
/// digit or one of `-_.:/#@+` (no quotes, `=`, commas or spaces: an id can never read as
/// another log field).
#[must_use]
pub fn is_sane(id: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/#@+".contains(b))
}

/// A new id: 128 random bits as 32 hex digits. Should the OS refuse randomness, a process-wide
/// counter beside the clock still tells requests apart (an id is for reading logs, not a
/// secret).
fn generate() -> HeaderValue {
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    let id = match getrandom::fill(&mut bytes) {
        Ok(()) => hex::encode(bytes),
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let n = FALLBACK.fetch_add(1, Ordering::Relaxed);
            format!("{nanos:x}-{n:x}")
        }
    };
    HeaderValue::try_from(id).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_ids_without_spaces_are_taken() {
        assert!(is_sane(b"a"));
        assert!(is_sane(b"ci-1234/step.7:retry#2"));
        assert!(is_sane(&[b'x'; MAX_LEN]));
        for bad in [
            &b""[..],
            &[b'x'; MAX_LEN + 1],
            b"two words",
            b"tab\there",
            b"line\nbreak",
            b"esc\x1b[31m",
            b"nul\0",
            b"del\x7f",
            b"\"x\"=y,actor=\"initial-admin\"",
            b"a=b",
            b"{\"quoted\"}",
            "caf\u{e9}".as_bytes(),
        ] {
            assert!(!is_sane(bad), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn made_up_ids_are_sane_and_differ() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.len(), 32);
        assert!(is_sane(a.as_bytes()), "{a:?}");
        assert_ne!(a, b);
    }
}
