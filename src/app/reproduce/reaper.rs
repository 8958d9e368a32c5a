//! The reaper: a background task that takes back expired leases (re-queued, or dead after
//! their last attempt) and forgets workers long out of touch.

use std::time::Duration;

use tracing::Instrument;

use super::workers;
use crate::storage::jobs::{self as store, Reaped};
use crate::storage::{Db, DbError};

/// Runs the reaper every `interval` until the task is dropped; `on_reaped` counts what it did.
/// Each pass also forgets workers long out of touch.
pub async fn run_reaper(db: Db, interval: Duration, on_reaped: impl Fn(&[Reaped])) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // Each pass in a span of its own, so its lines can be told from a request's.
        async {
            match store::reap_expired(db.pool()).await {
                Ok(reaped) if !reaped.is_empty() => {
                    for r in &reaped {
                        tracing::info!(job = r.job_id, state = %r.state, "lease expired");
                    }
                    on_reaped(&reaped);
                }
                Ok(_) => {}
                Err(DbError::Unavailable(e)) => {
                    tracing::debug!(error = %e, "reaper: database down")
                }
                Err(e) => tracing::warn!(error = %e, "reaper pass failed"),
            }
            match workers::forget_stale(&db).await {
                Ok(0) | Err(DbError::Unavailable(_)) => {}
                Ok(n) => tracing::info!(workers = n, "forgot workers not seen for a week"),
                Err(e) => tracing::warn!(error = %e, "forgetting stale workers failed"),
            }
        }
        .instrument(tracing::info_span!("reproduce::reap"))
        .await;
    }
}
