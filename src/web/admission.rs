//! Admission: which of the in-flight slots of [`super::limits`] a request takes, decided by the
//! credentials it carries ([`super::auth::verify`]). It lives apart from both so that the
//! dependencies run one way: admission uses `auth` and `limits`, `auth` uses `limits` (a signed-in
//! request counts against its token's share), and `limits` knows nothing of who is calling.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::anonymous::{ClientAddr, ClientKey};
use super::auth;
use super::error::{AppError, PageError};
use super::limits::{self, InFlight};
use super::live::{EndRequests, Ended};
use super::state::AppState;

/// Middleware: admits a request under the in-flight caps or refuses it at once. Credentials
/// are checked first and only here ([`auth::verify`], SECURITY.md item 24 and issue 38 item 7):
/// a request with a valid token or session takes a global slot (an admin managing people or
/// tokens may take a reserved one) and its budget's share (503 / 429 `token_busy` when none is
/// free); any other request takes a slot of the anonymous pool (503 / 429 `client_busy`). The
/// request's [`InFlight`] is held until its response body ends; what was checked rides along
/// so the handler's extractors never ask the database again (during an outage they answer 503
/// at once instead of waiting a second time), and revoking the request's token or disabling
/// its person ends it.
pub async fn shed_load(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if limits::exempt(req.uri().path()) {
        return next.run(req).await;
    }
    let api = req.uri().path().starts_with("/api/");
    let refuse = |err: AppError| {
        if api {
            err.into_response()
        } else {
            PageError(err).into_response()
        }
    };
    let checked = auth::verify(&state, req.headers()).await;
    let verified = match &checked {
        auth::Checked::Verified(v) => Some(v),
        auth::Checked::Unavailable => None,
    };
    let budget = verified.and_then(|v| v.budget_key().map(|key| (v, key)));
    let admitted = match budget {
        Some((verified, key)) => {
            let admin = verified.is_admin() && manages_people_or_tokens(req.uri().path());
            state.shed.admit_verified(key, verified.holders(), admin)
        }
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
            return refuse(err);
        }
    };
    let ended = held.ended();
    let mut req = req;
    req.extensions_mut().insert(held.clone());
    req.extensions_mut().insert(checked);
    // A request whose credentials are revoked while it runs ends at once: dropping the
    // handler drops its body stream and rolls back any transaction it has open.
    let res = match &ended {
        None => next.run(req).await,
        Some(ended) => tokio::select! {
            biased;
            () = ended.wait() => {
                tracing::info!("request ended: its credentials were revoked");
                return refuse(AppError::Unauthorized(super::error::REVOKED_IN_FLIGHT));
            }
            res = next.run(req) => res,
        },
    };
    let mut res = res;
    if let Some(EndRequests(revoked)) = res.extensions_mut().remove::<EndRequests>() {
        let ended = state.shed.end_requests(&revoked, &held);
        tracing::info!(ended, "ended the requests in flight of revoked credentials");
    }
    res.map(|body| {
        Body::new(Holding {
            inner: body,
            ended,
            _held: held,
        })
    })
}

/// Whether `path` is where admins manage people and tokens (the pages and the API): the
/// requests that may take a reserved slot, so an admin can disable an abuser however full the
/// server is.
fn manages_people_or_tokens(path: &str) -> bool {
    ["/people", "/tokens", "/api/v1/people", "/api/v1/tokens"]
        .iter()
        .any(|area| {
            path.strip_prefix(area)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// A response body that keeps its request's slots until it has been sent or dropped, so a
/// streamed download counts for as long as it streams; it stops when the request's
/// credentials are revoked.
struct Holding {
    inner: Body,
    ended: Option<Arc<Ended>>,
    _held: InFlight,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.ended.as_ref().is_some_and(|e| e.is_set()) {
            return Poll::Ready(Some(Err(axum::Error::new(super::error::REVOKED_IN_FLIGHT))));
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
