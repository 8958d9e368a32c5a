//! The HTTP/1 accept loop (SECURITY.md item 12). `axum::serve` gives no way to time out a
//! connection that never finishes its headers, so half-open or idle clients could hold sockets
//! (and file descriptors) forever. Here every connection is served by hyper with its timer set:
//! a request's headers must arrive within the header-read timeout, which also bounds how long a
//! kept-alive connection may sit idle before its next request. Shutdown stops accepting, lets
//! requests in progress finish (bounded by [`DRAIN`]), and closes idle connections.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::anonymous::ClientAddr;

/// The most headers hyper parses before answering 431 itself (bare: it never reaches the
/// router, so the answer has no request id). Above `request_id::MAX_HEADERS`, so the usual
/// oversized request is parsed and refused by the router, with its id.
pub const HARD_MAX_HEADERS: usize = 256;
/// hyper's read buffer, which bounds a request's head likewise (above
/// `request_id::MAX_HEADER_BYTES`).
const HARD_MAX_HEAD_BYTES: usize = 512 << 10;

/// How long shutdown waits for requests in progress.
const DRAIN: Duration = Duration::from_secs(30);

/// Connection-level limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Time allowed for a request's headers, and for an idle kept-alive connection's next one.
    pub header_read_timeout: Duration,
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Each request knows its connection's peer: requests without a token are counted per
        // client address (`web::anonymous`).
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ClientAddr(peer));
                req
            },
        ));
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(HARD_MAX_HEADERS)
            .max_buf_size(HARD_MAX_HEAD_BYTES)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {DRAIN:?}; stopping anyway");
    }
}
