//! Load limits of the HTTP layer (SECURITY.md items 1, 9 and 24): a token bucket per budget
//! (429 with `Retry-After` when it runs dry), a global cap on requests in flight that sheds
//! load with 503 instead of queueing without bound, each budget's share of those slots (so one
//! member's slow uploads can never hold the whole server), a few slots kept back for admins
//! managing people and tokens (so an admin can always stop an abuser), a minimum body rate,
//! and gzip request bodies decoded as a stream so that every cap downstream counts decoded
//! bytes.
//!
//! A budget belongs to whoever holds the capacity: a person (all their tokens and portal
//! sessions together, however many tokens they make) or a service token (its own); see
//! `TokenRecord::budget_key`.
//!
//! Requests with no verified token or session take their slot from a pool of their own
//! ([`super::anonymous`]), so anonymous clients can never take the slots token holders need.
//!
//! A request's slots are held by an [`InFlight`] from the moment it is admitted until its
//! response body has been sent (or dropped), including blocking work it handed off: the cap
//! bounds the work, not just the time spent extracting the request.
//!
//! These are the mechanisms; which of them a request goes through is decided by its verified
//! credentials in [`super::admission`], so this module needs nothing from `auth`.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flate2::write::GzDecoder;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::Semaphore;

use super::anonymous::{AnonymousPool, AnonymousSlot, ClientKey};
use super::error::{AppError, PageError};
use super::live::{Ended, Holders, LiveRequests, Registration};

/// Settings of [`RateLimiter`] and [`Shed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadLimits {
    /// Requests per minute one budget (a person, or a service token) may make on average; 0
    /// turns the limit off.
    pub per_token_per_minute: u32,
    /// Requests one budget may make in a burst above that rate.
    pub burst: u32,
    /// Requests the server works on at once; beyond it, 503. 0 turns the cap off.
    pub max_in_flight: usize,
    /// Of those, how many one budget may hold: a person's tokens and sessions together, or one
    /// service token; beyond it, 429. 0 turns the share off.
    pub max_in_flight_per_token: usize,
    /// Slots beside `max_in_flight` that only admins managing people and tokens may take once
    /// every other slot is held, so an abuser can always be stopped. 0 keeps none back.
    pub admin_reserved: usize,
    /// Requests without a verified token or session the server works on at once, apart from
    /// `max_in_flight`; beyond it, 503. 0 turns the cap off.
    pub max_in_flight_anonymous: usize,
    /// Of those, how many one client address (an IPv6 /64) may hold; beyond it, 429
    /// `client_busy`. 0 turns the share off.
    pub max_in_flight_per_address: usize,
}

impl Default for LoadLimits {
    fn default() -> Self {
        LoadLimits {
            per_token_per_minute: 1200,
            burst: 100,
            max_in_flight: 128,
            max_in_flight_per_token: 32,
            admin_reserved: 4,
            max_in_flight_anonymous: 32,
            max_in_flight_per_address: 8,
        }
    }
}

/// A token bucket per API token, in this process (each replica limits on its own).
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    buckets: Mutex<HashMap<i64, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// A limiter with `limits`' rate and burst.
    pub fn new(limits: &LoadLimits) -> RateLimiter {
        RateLimiter {
            per_sec: f64::from(limits.per_token_per_minute) / 60.0,
            burst: f64::from(limits.burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from budget `key`'s bucket; `Err(seconds)` until one is back.
    pub fn check(&self, key: i64) -> Result<(), u64> {
        if self.per_sec <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let refill = now.duration_since(bucket.at).as_secs_f64() * self.per_sec;
        bucket.tokens = (bucket.tokens + refill).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / self.per_sec;
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

/// The global in-flight cap, each budget's share of it, the admins' reserve and the anonymous
/// pool beside them, and the verified requests in flight by whose credentials they carry.
#[derive(Debug)]
pub struct Shed {
    permits: Option<Arc<Semaphore>>,
    /// Slots only admin requests to the people and token pages and API may take.
    reserve: Option<Arc<Semaphore>>,
    per_token: usize,
    /// One semaphore per budget that has had a request in flight (people and service tokens
    /// are few: tokens per person are capped, service tokens are made by admins).
    shares: Mutex<HashMap<i64, Arc<Semaphore>>>,
    /// Verified requests in flight, so revocation can end them.
    live: Arc<LiveRequests>,
    /// The slots of requests that carry no verified token or session.
    anonymous: AnonymousPool,
}

impl Shed {
    /// A cap of `limits.max_in_flight` requests (none when 0), of which one token may hold
    /// `limits.max_in_flight_per_token` (no share when 0).
    pub fn new(limits: &LoadLimits) -> Shed {
        Shed {
            permits: (limits.max_in_flight > 0)
                .then(|| Arc::new(Semaphore::new(limits.max_in_flight))),
            reserve: (limits.admin_reserved > 0)
                .then(|| Arc::new(Semaphore::new(limits.admin_reserved))),
            per_token: limits.max_in_flight_per_token,
            shares: Mutex::new(HashMap::new()),
            live: Arc::default(),
            anonymous: AnonymousPool::new(
                limits.max_in_flight_anonymous,
                limits.max_in_flight_per_address,
            ),
        }
    }

    /// Admits a verified request spending budget `key` and carrying `holders`: a global
    /// slot (for an admin managing people or tokens, a reserved one when none is free) and the
    /// budget's share. The request is registered so revoking its credentials ends it.
    pub(super) fn admit_verified(
        &self,
        key: i64,
        holders: Holders,
        admin_request: bool,
    ) -> Result<InFlight, AppError> {
        let global = match &self.permits {
            None => None,
            Some(permits) => {
                let reserve = self.reserve.as_ref().filter(|_| admin_request);
                let slot = permits
                    .clone()
                    .try_acquire_owned()
                    .or_else(|e| match reserve {
                        Some(reserve) => reserve.clone().try_acquire_owned(),
                        None => Err(e),
                    });
                Some(slot.map_err(|_| AppError::Overloaded)?)
            }
        };
        let held = InFlight(Arc::new(Mutex::new(Slots {
            global,
            live: Some(self.live.register(holders)),
            ..Slots::default()
        })));
        self.take_token_share(&held, key)?;
        Ok(held)
    }

    /// Ends the requests in flight that carry what `revoked` names, except the one holding
    /// `revoking` (which did it); returns how many.
    pub(super) fn end_requests(&self, revoked: &Holders, revoking: &InFlight) -> usize {
        let except = revoking.lock().live.as_ref().map(Registration::id);
        self.live.end(revoked, except)
    }

    /// Admits a request with no verified credentials from `client`: a slot of the anonymous
    /// pool, never one of the global slots.
    pub(super) fn admit_anonymous(&self, client: ClientKey) -> Result<InFlight, AppError> {
        let slot = self.anonymous.admit(client)?;
        Ok(InFlight(Arc::new(Mutex::new(Slots {
            anonymous: Some(slot),
            ..Slots::default()
        }))))
    }

    /// Counts the request holding `held` against budget `key`'s share: 429 when the budget
    /// already has its share in flight. Taking it twice for one request is a no-op (a handler
    /// may authenticate through more than one extractor).
    pub fn take_token_share(&self, held: &InFlight, key: i64) -> Result<(), AppError> {
        if self.per_token == 0 {
            return Ok(());
        }
        let mut slots = held.lock();
        if slots.token.is_some() {
            return Ok(());
        }
        let share = self
            .shares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_token)))
            .clone();
        let permit = share
            .try_acquire_owned()
            .map_err(|_| AppError::TokenBusy(self.per_token))?;
        slots.token = Some(permit);
        Ok(())
    }
}

/// A request's slots under the in-flight cap: the global one and, once the request is
/// authenticated, its token's share. The middleware keeps one handle until the response body
/// is done; handlers that hand CPU work to a blocking thread move a clone into it, because
/// when the client goes away the request future is dropped at once, but the slots must stay
/// taken until that work ends, so abandoned uploads cannot pile up work beyond the cap.
#[derive(Clone, Debug, Default)]
pub struct InFlight(Arc<Mutex<Slots>>);

#[derive(Debug, Default)]
struct Slots {
    #[allow(dead_code)] // Held for its drop.
    global: Option<tokio::sync::OwnedSemaphorePermit>,
    token: Option<tokio::sync::OwnedSemaphorePermit>,
    #[allow(dead_code)] // Held for its drop.
    anonymous: Option<AnonymousSlot>,
    /// The request's place among the verified requests in flight.
    live: Option<Registration>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The signal that the request's credentials were revoked (verified requests only).
    pub(super) fn ended(&self) -> Option<Arc<Ended>> {
        self.lock().live.as_ref().map(Registration::ended)
    }
}

/// Paths the cap leaves alone: probes and metrics must answer under load, and a worker's
/// long-poll claim waits by design.
pub(crate) fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics") || path == "/api/v1/jobs/claim"
}

/// Middleware: a `Content-Encoding: gzip` request body is decoded on the way in (so size caps
/// count decoded bytes and a decompression bomb stops at the first cap); any other encoding
/// but `identity` gets 415.
pub async fn decode_request_body(req: Request, next: Next) -> Response {
    let encoding = match req.headers().get(header::CONTENT_ENCODING) {
        None => return next.run(req).await,
        Some(v) => v.to_str().unwrap_or("?").trim().to_ascii_lowercase(),
    };
    match encoding.as_str() {
        "identity" => next.run(req).await,
        "gzip" | "x-gzip" => {
            let (mut parts, body) = req.into_parts();
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.remove(header::CONTENT_LENGTH);
            let body = Body::new(GzipBody::new(body));
            next.run(Request::from_parts(parts, body)).await
        }
        other => {
            let err = AppError::UnsupportedMediaType(format!(
                "Content-Encoding {other:?} is not supported; send gzip or no encoding"
            ));
            if req.uri().path().starts_with("/api/") {
                err.into_response()
            } else {
                PageError(err).into_response()
            }
        }
    }
}

/// The least a request body must deliver (SECURITY.md item 12): at least `min_bytes_per_sec`
/// on average over every `window`, so an upload that stalls or drips a byte at a time gives its
/// in-flight slot back after one window instead of holding it for as long as the client likes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRate {
    /// The span over which the rate is measured; a body silent for this long fails.
    pub window: std::time::Duration,
    /// Bytes per second the body must average over each window (0 turns the check off).
    pub min_bytes_per_sec: u64,
}

impl Default for BodyRate {
    fn default() -> Self {
        BodyRate {
            window: std::time::Duration::from_secs(30),
            min_bytes_per_sec: 1024,
        }
    }
}

/// The error a too-slow body ends with; handlers find it in their body error's source chain.
#[derive(Debug, thiserror::Error)]
#[error("the request body arrived too slowly: {got} bytes in {window:?}, at least {need} needed")]
pub struct BodyTooSlow {
    got: u64,
    need: u64,
    window: std::time::Duration,
}

impl BodyTooSlow {
    /// Whether `err` (or anything in its source chain) is a [`BodyTooSlow`].
    pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTooSlow> {
        find_source(err)
    }
}

/// The first `T` in `err`'s source chain, `err` included: how a handler tells a body wrapper's
/// own error (a slow body, a multipart cap) from the client's connection or a malformed body.
pub fn find_source<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cur = e.source();
    }
    None
}

/// Middleware: request bodies must keep up [`BodyRate`] (only requests that have a body).
pub async fn pace_request_body(State(rate): State<BodyRate>, req: Request, next: Next) -> Response {
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if rate.min_bytes_per_sec == 0 || !has_body {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let body = Body::new(PacedBody {
        inner: body,
        need: rate
            .min_bytes_per_sec
            .saturating_mul(rate.window.as_secs().max(1)),
        window: rate.window,
        got: 0,
        timer: Box::pin(tokio::time::sleep(rate.window)),
    });
    next.run(Request::from_parts(parts, body)).await
}

/// A request body that fails with [`BodyTooSlow`] when a window passes with too few bytes.
struct PacedBody {
    inner: Body,
    need: u64,
    window: std::time::Duration,
    /// Bytes received in the current window.
    got: u64,
    /// The end of the current window.
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl HttpBody for PacedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        this.got += data.len() as u64;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(other) => return Poll::Ready(other.map(|r| r.map_err(Into::into))),
                Poll::Pending => {}
            }
            // Nothing to hand on: judge the window when it ends, then start the next one.
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if this.got < this.need {
                let err = BodyTooSlow {
                    got: this.got,
                    need: this.need,
                    window: this.window,
                };
                return Poll::Ready(Some(Err(Box::new(err))));
            }
            this.got = 0;
            let next = tokio::time::Instant::now() + this.window;
            this.timer.as_mut().reset(next);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Decoded output is handed on in pieces of about this size, however well the input packs.
const OUT_PIECE: usize = 64 << 10;
/// Compressed input is fed in slices this small, so one slice decodes to at most ~1 MiB.
const IN_SLICE: usize = 1 << 10;

/// A request body, gzip-decoded as it streams.
struct GzipBody {
    inner: Body,
    decoder: Option<GzDecoder<Vec<u8>>>,
    /// Compressed bytes not yet fed to the decoder.
    input: Bytes,
    /// gzip members decoded whole so far (a body may hold several, RFC 1952).
    members: usize,
    /// Whether the current member has been fed nothing yet.
    fresh: bool,
}

impl GzipBody {
    fn new(inner: Body) -> GzipBody {
        GzipBody {
            inner,
            decoder: Some(GzDecoder::new(Vec::new())),
            input: Bytes::new(),
            members: 0,
            fresh: true,
        }
    }
}

/// The body's error: a malformed gzip stream or the client's connection.
pub(super) type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl HttpBody for GzipBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            let Some(decoder) = this.decoder.as_mut() else {
                return Poll::Ready(None);
            };
            // Feed what is buffered, a slice at a time, until a piece of output is ready.
            while !this.input.is_empty() && decoder.get_ref().len() < OUT_PIECE {
                let n = this.input.len().min(IN_SLICE);
                let fed = match decoder.write(&this.input[..n]) {
                    // The member ended; what follows must be another one, decoded into the
                    // same output buffer.
                    Ok(0) if !this.fresh => std::mem::replace(decoder, GzDecoder::new(Vec::new()))
                        .finish()
                        .map(|out| {
                            *decoder = GzDecoder::new(out);
                            this.members += 1;
                            this.fresh = true;
                            0
                        }),
                    Ok(0) => Err(std::io::Error::other("no gzip data")),
                    Ok(k) => {
                        this.fresh = false;
                        Ok(k)
                    }
                    Err(e) => Err(e),
                };
                match fed {
                    Ok(k) => drop(this.input.split_to(k)),
                    Err(e) => {
                        this.decoder = None;
                        return Poll::Ready(Some(Err(format!("bad gzip body: {e}").into())));
                    }
                }
            }
            let ready = decoder.get_ref().len();
            if ready >= OUT_PIECE || (ready > 0 && this.input.is_empty()) {
                let out = std::mem::take(decoder.get_mut());
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.input = data;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.decoder = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(None) => {
                    let Some(mut decoder) = this.decoder.take() else {
                        return Poll::Ready(None);
                    };
                    let last = if this.fresh && this.members > 0 {
                        // The body ended right after a whole member.
                        Ok(std::mem::take(decoder.get_mut()))
                    } else {
                        decoder.finish()
                    };
                    return match last {
                        Ok(rest) if rest.is_empty() => Poll::Ready(None),
                        Ok(rest) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest))))),
                        Err(e) => Poll::Ready(Some(Err(format!("bad gzip body: {e}").into()))),
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_says_when_to_retry() {
        let limiter = RateLimiter::new(&LoadLimits {
            per_token_per_minute: 60,
            burst: 3,
            ..LoadLimits::default()
        });
        for _ in 0..3 {
            assert_eq!(limiter.check(1), Ok(()));
        }
        assert_eq!(limiter.check(1), Err(1));
        // Another token has its own bucket.
        assert_eq!(limiter.check(2), Ok(()));
    }

    #[test]
    fn a_zero_rate_is_no_limit() {
        let limiter = RateLimiter::new(&LoadLimits {
            per_token_per_minute: 0,
            burst: 1,
            ..LoadLimits::default()
        });
        for _ in 0..1000 {
            assert_eq!(limiter.check(7), Ok(()));
        }
    }
}
