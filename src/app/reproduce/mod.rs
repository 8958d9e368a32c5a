//! Reproduce a report on a GPU worker: claim a job (long-poll), keep its lease, record what the
//! run gave (secrets scrubbed, output classified by the same rule engine as uploads, the
//! report's headline following a more specific root cause, the `reproduction_finished` webhook
//! event queued with it), re-queue a finished job, and reap expired leases. Each use case owns
//! its transaction; the queue's statements are in `storage::jobs`. Every claim poll, heartbeat
//! and result also notes that its worker was in touch ([`workers`]).

mod checks;
mod claim;
pub mod follow;
mod heartbeat;
pub mod outcome;
pub mod reading;
mod reaper;
mod record_result;
mod requeue;
mod scrub;
pub mod traces;
pub mod verdict;
pub mod workers;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

pub use crate::storage::reproductions::{
    AttemptView, CategoryBasis, JobView, ReproductionView, RunRecord,
};
pub use claim::{Claim, claim};
pub use follow::should_follow;
pub use heartbeat::heartbeat;
pub use reaper::run_reaper;
pub use record_result::{Recorded, record_result};
pub use requeue::{Requeue, requeue};
pub use scrub::{ScrubbedOutputs, scrub_and_classify};
pub use traces::{UserFrame, combined_output, location, main_traceback, moved_sentence};

use crate::storage::Db;

/// Wakes this server's waiting claims whenever a job is queued on any replica (the database's
/// notification, migration 0046), for as long as the server runs. While the listener cannot
/// connect (the database is down or still starting), claims fall back to looking every
/// [`JobSettings::poll`], and it retries at that pace.
pub async fn relay_queued_jobs(db: Db, wake: Arc<Notify>, retry: Duration) {
    loop {
        match crate::storage::jobs::listen_queued(&db).await {
            Ok(listener) => relay(listener, &wake).await,
            Err(e) => tracing::debug!(error = %e, "job listener not connected"),
        }
        tokio::time::sleep(retry).await;
    }
}

/// Wakes `wake`'s waiters on every notification `listener` receives, until it fails.
pub async fn relay(mut listener: crate::storage::jobs::QueuedListener, wake: &Notify) {
    loop {
        if let Err(e) = listener.recv().await {
            tracing::debug!(error = %e, "job listener failed; reconnecting");
            return;
        }
        // Missed notifications during a reconnect are covered by the claims' own polling.
        wake.notify_waiters();
    }
}

/// Queue settings of the server (flags / `GPU_TRIAGE_JOB_*`).
#[derive(Clone, Copy, Debug)]
pub struct JobSettings {
    /// How long a lease lasts without a heartbeat.
    pub lease_secs: u32,
    /// How long the worker lets a script run (sent with each job).
    pub timeout_secs: u32,
    /// Largest stdout, and largest stderr, a result may carry (bytes).
    pub max_output_bytes: usize,
    /// Longest long-poll a claim may ask for.
    pub max_wait_secs: u64,
    /// How often a waiting claim looks at the queue again (a job queued on any replica wakes
    /// it at once through [`relay_queued_jobs`]; this bounds the delay while that listener is
    /// not connected).
    pub poll: Duration,
    /// How often the background reaper runs.
    pub reaper_interval: Duration,
}

impl Default for JobSettings {
    fn default() -> Self {
        JobSettings {
            lease_secs: 90,
            timeout_secs: 600,
            max_output_bytes: 2 << 20,
            max_wait_secs: crate::api_types::MAX_CLAIM_WAIT_SECS,
            poll: Duration::from_secs(1),
            reaper_interval: Duration::from_secs(15),
        }
    }
}

/// What the queue needs: the database, its settings, and the signal that wakes waiting claims
/// when this server queues a job.
#[derive(Clone, Debug)]
pub struct Queue {
    pub db: Db,
    pub settings: JobSettings,
    pub wake: Arc<Notify>,
}
