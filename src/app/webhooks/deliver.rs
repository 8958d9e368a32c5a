//! The delivery task `serve` runs: it claims due rows of the outbox (`FOR UPDATE SKIP LOCKED`,
//! under a lease), posts each one's body signed with its endpoint's secret, and records the
//! attempt: delivered on a 2xx, else due again after the next backoff wait, or dead after the
//! last. It wakes on the outbox's NOTIFY (any replica's enqueue), when the next retry falls due,
//! and at least every poll interval; rows live in PostgreSQL, so a restart loses nothing and a
//! sender that dies mid-post leaves its row due again when the lease runs out (at-least-once:
//! receivers dedupe on `X-GpuTriage-Delivery`).

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tracing::Instrument;
use ureq::Agent;
use ureq::unversioned::transport::DefaultConnector;

use super::WebhookSettings;
use super::guard::GuardedResolver;
use super::payload::{self, Envelope};
use crate::api_types::webhooks::{DeliveryState, EventKind};
use crate::storage::webhooks::{self as store, AttemptRecord, ClaimedDelivery};
use crate::storage::{Db, DbError};

/// How much of a response body is read (for the delivery log's error text); the rest is dropped.
const MAX_RESPONSE_BYTES: u64 = 4096;
/// How much of it the log keeps.
const MAX_ERROR_CHARS: usize = 300;
/// How often finished deliveries older than [`RETENTION_DAYS`] are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// How long delivered and dead deliveries stay in the log.
pub const RETENTION_DAYS: i32 = 30;

/// What the delivery decides after an attempt: the delivery's state, and the wait before the
/// next attempt when it stays pending.
#[must_use]
pub fn next_step(
    settings: &WebhookSettings,
    attempt: u32,
    delivered: bool,
) -> (DeliveryState, Duration) {
    if delivered {
        return (DeliveryState::Delivered, Duration::ZERO);
    }
    match settings.backoff.get(attempt.saturating_sub(1) as usize) {
        Some(wait) if attempt < settings.max_attempts() => (DeliveryState::Pending, *wait),
        _ => (DeliveryState::Dead, Duration::ZERO),
    }
}

/// Starts the delivery task; it runs until the handle is aborted.
pub fn spawn(db: Db, settings: WebhookSettings, public_url: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(db, settings, public_url))
}

/// The task's loop (see the module doc).
#[tracing::instrument(name = "webhooks::deliver", skip_all)]
pub async fn run(db: Db, settings: WebhookSettings, public_url: String) {
    let sender = Sender::new(&settings);
    let (settings, public_url) = (Arc::new(settings), Arc::<str>::from(public_url));
    let mut listener = None;
    let mut pruned: Option<Instant> = None;
    // `serve` migrates in the background: the outbox exists once the database is ready.
    while db.ping().await.is_err() {
        tokio::time::sleep(settings.poll.min(Duration::from_secs(1))).await;
    }
    loop {
        if listener.is_none() {
            listener = store::listen(&db)
                .await
                .inspect_err(|e| tracing::debug!(error = %e, "webhook listener not connected"))
                .ok();
        }
        if let Err(e) = deliver_due(&db, &settings, &sender, &public_url).await {
            log_db_error(&e, "delivering webhooks");
        }
        if pruned.is_none_or(|at| at.elapsed() >= PRUNE_EVERY) {
            match store::prune_finished(db.pool(), RETENTION_DAYS).await {
                Ok(n) if n > 0 => tracing::info!(deleted = n, "old webhook deliveries pruned"),
                Ok(_) => {}
                Err(e) => log_db_error(&e, "pruning webhook deliveries"),
            }
            pruned = Some(Instant::now());
        }
        let wait = match store::next_due_in(db.pool()).await {
            Ok(Some(secs)) => Duration::from_secs_f64(secs.max(0.0)).min(settings.poll),
            _ => settings.poll,
        };
        let woke = match listener.as_mut() {
            Some(l) => tokio::select! {
                r = l.recv() => r,
                () = tokio::time::sleep(wait) => Ok(()),
            },
            None => {
                tokio::time::sleep(wait).await;
                Ok(())
            }
        };
        if let Err(e) = woke {
            tracing::debug!(error = %e, "webhook listener failed; reconnecting");
            listener = None;
        }
    }
}

fn log_db_error(e: &DbError, what: &str) {
    match e {
        DbError::Unavailable(_) => tracing::debug!(error = %e, "{what}: database down"),
        _ => tracing::warn!(error = %e, "{what} failed"),
    }
}

/// Posts every due delivery, a batch at a time, until none is due.
async fn deliver_due(
    db: &Db,
    settings: &Arc<WebhookSettings>,
    sender: &Sender,
    public_url: &Arc<str>,
) -> Result<(), DbError> {
    let lease = (settings.timeout + Duration::from_secs(5)).as_secs_f64();
    let batch = i64::try_from(settings.batch.max(1)).unwrap_or(8);
    loop {
        let claimed = store::claim_due(db.pool(), batch, lease).await?;
        if claimed.is_empty() {
            return Ok(());
        }
        let mut set = JoinSet::new();
        for c in claimed {
            let (db, settings, sender, url) = (
                db.clone(),
                settings.clone(),
                sender.clone(),
                public_url.clone(),
            );
            set.spawn(
                async move { attempt(&db, &settings, &sender, &url, c).await }.in_current_span(),
            );
        }
        while let Some(done) = set.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log_db_error(&e, "recording a webhook attempt"),
                Err(e) => tracing::error!(error = %e, "a webhook attempt panicked"),
            }
        }
    }
}

/// Makes one attempt at a claimed delivery and records it.
#[tracing::instrument(name = "webhooks::attempt", skip_all, fields(delivery_id = c.id, endpoint_id = c.endpoint_id, attempt = c.attempts + 1))]
async fn attempt(
    db: &Db,
    settings: &WebhookSettings,
    sender: &Sender,
    public_url: &str,
    c: ClaimedDelivery,
) -> Result<(), DbError> {
    let envelope = Envelope {
        delivery_id: c.id,
        occurred_at: c.created_at,
        public_url,
    };
    let body = payload::render(&c.event, envelope, c.format);
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let request = Request {
        signature: payload::signature(&c.secret, timestamp, &body),
        url: c.url.clone(),
        event: c.event.event,
        delivery_id: c.id,
        timestamp,
        body,
    };
    let sender = sender.clone();
    let span = tracing::Span::current();
    let outcome = tokio::task::spawn_blocking(move || span.in_scope(|| sender.post(&request)))
        .await
        .unwrap_or_else(|e| PostOutcome {
            status: None,
            error: format!("the sending thread failed: {e}"),
            duration: Duration::ZERO,
        });
    let number = c.attempts + 1;
    let delivered = outcome.status.is_some_and(|s| (200..300).contains(&s));
    let (state, wait) = next_step(settings, number, delivered);
    match state {
        DeliveryState::Delivered => {
            tracing::debug!(
                delivery = c.id,
                endpoint = c.endpoint_id,
                attempt = number,
                "webhook delivered"
            );
        }
        DeliveryState::Pending => {
            tracing::info!(delivery = c.id, endpoint = c.endpoint_id, attempt = number,
                status = ?outcome.status, error = %outcome.error, retry_in = ?wait, "webhook attempt failed");
        }
        DeliveryState::Dead => {
            tracing::warn!(delivery = c.id, endpoint = c.endpoint_id, attempt = number,
                status = ?outcome.status, error = %outcome.error, "webhook delivery gave up");
        }
    }
    let record = AttemptRecord {
        delivery_id: c.id,
        attempt: number,
        status: outcome.status,
        error: &outcome.error,
        duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        state,
        retry_in_secs: wait.as_secs_f64(),
    };
    store::record_attempt(db, &record).await
}

/// One POST to make.
struct Request {
    url: String,
    event: EventKind,
    delivery_id: i64,
    timestamp: i64,
    signature: String,
    body: Vec<u8>,
}

/// What one POST came to.
struct PostOutcome {
    /// The response's status; `None` when none came.
    status: Option<u16>,
    /// Empty on a 2xx; else why it failed (the start of the response body for an HTTP error).
    error: String,
    duration: Duration,
}

/// The HTTP client for deliveries: no proxy from the environment, no redirects followed, one
/// timeout for the whole exchange, and the SSRF-guarding resolver.
#[derive(Clone)]
struct Sender {
    agent: Agent,
}

impl Sender {
    fn new(settings: &WebhookSettings) -> Sender {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .timeout_global(Some(settings.timeout))
            .user_agent(concat!("gpu-triage-webhooks/", env!("CARGO_PKG_VERSION")))
            .build();
        let resolver = GuardedResolver::new(settings.allow_private);
        Sender {
            agent: Agent::with_parts(config, DefaultConnector::new(), resolver),
        }
    }

    /// Posts `r` (blocking: run on a blocking thread).
    fn post(&self, r: &Request) -> PostOutcome {
        let started = Instant::now();
        let sent = self
            .agent
            .post(&r.url)
            .header("Content-Type", "application/json")
            .header("X-GpuTriage-Event", r.event.as_str())
            .header("X-GpuTriage-Delivery", r.delivery_id.to_string())
            .header("X-GpuTriage-Timestamp", r.timestamp.to_string())
            .header("X-GpuTriage-Signature", &r.signature)
            .send(&r.body[..]);
        let (status, error) = match sent {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let mut text = Vec::new();
                // What does not fit is dropped: a receiver cannot make the server buffer much.
                let _ = response
                    .body_mut()
                    .as_reader()
                    .take(MAX_RESPONSE_BYTES)
                    .read_to_end(&mut text);
                let error = if (200..300).contains(&status) {
                    String::new()
                } else {
                    let said = String::from_utf8_lossy(&text);
                    let said = crate::ingest::neutralize_controls(said.trim());
                    let cut: String = said.chars().take(MAX_ERROR_CHARS).collect();
                    format!(
                        "HTTP {status}{}{cut}",
                        if cut.is_empty() { "" } else { ": " }
                    )
                };
                (Some(status), error)
            }
            Err(e) => (None, e.to_string()),
        };
        PostOutcome {
            status,
            error,
            duration: started.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_in_order_then_give_up() {
        let s = WebhookSettings::default();
        let secs = Duration::from_secs;
        let cases = [
            (1, false, DeliveryState::Pending, secs(10)),
            (2, false, DeliveryState::Pending, secs(30)),
            (3, false, DeliveryState::Pending, secs(120)),
            (4, false, DeliveryState::Pending, secs(600)),
            (5, false, DeliveryState::Pending, secs(3600)),
            (6, false, DeliveryState::Dead, Duration::ZERO),
            (3, true, DeliveryState::Delivered, Duration::ZERO),
        ];
        for (attempt, delivered, state, wait) in cases {
            assert_eq!(
                next_step(&s, attempt, delivered),
                (state, wait),
                "{attempt}"
            );
        }
        let none = WebhookSettings {
            backoff: Vec::new(),
            ..WebhookSettings::default()
        };
        assert_eq!(next_step(&none, 1, false).0, DeliveryState::Dead);
    }
}
