//! Admission: which of the in-flight slots of [`super::limits`] a request takes, decided by the
//! credentials it carries ([`super::auth::verify`]). It lives apart from both so that the
//! dependencies run one way: admission uses `auth` and `limits`, `auth` uses `limits` (a signed-in
//! request counts against its token's share), and `limits` knows nothing of who is calling.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::anonymous::{ClientAddr, ClientKey};
use super::limits::{self, InFlight};
use super::{AppError, AppState, PageError, auth};

/// Middleware: admits a request under the in-flight caps or refuses it at once. Credentials
/// are checked first ([`auth::verify`]): a request with a valid token or session takes a global
/// slot and its token's share (503 / 429 `token_busy` when none is free); any other request
/// takes a slot of the anonymous pool (503 / 429 `client_busy`). The request's [`InFlight`] is
/// held until its response body ends, and what was verified rides along so the handler's
/// extractors do not ask the database again.
pub async fn shed_load(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if limits::exempt(req.uri().path()) {
        return next.run(req).await;
    }
    let verified = auth::verify(&state, req.headers()).await;
    let admitted = match verified.as_ref().and_then(auth::Verified::token_id) {
        Some(token_id) => state.shed.admit_verified(token_id),
        None => {
            let peer = req.extensions().get::<ClientAddr>().map(|a| a.0.ip());
            state.shed.admit_anonymous(ClientKey::of(peer))
        }
    };
    let held = match admitted {
        Ok(held) => held,
        Err(err) => {
            if matches!(err, AppError::Overloaded) {
                state.metrics.request_shed();
            } else {
                state.metrics.request_rate_limited();
            }
            return if req.uri().path().starts_with("/api/") {
                err.into_response()
            } else {
                PageError(err).into_response()
            };
        }
    };
    let mut req = req;
    req.extensions_mut().insert(held.clone());
    if let Some(verified) = verified {
        req.extensions_mut().insert(verified);
    }
    let res = next.run(req).await;
    res.map(|body| {
        Body::new(Holding {
            inner: body,
            _held: held,
        })
    })
}

/// A response body that keeps its request's slots until it has been sent or dropped, so a
/// streamed download counts for as long as it streams.
struct Holding {
    inner: Body,
    _held: InFlight,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
