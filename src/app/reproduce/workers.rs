//! Workers seen recently: the queue notes each worker's contact (claim poll, heartbeat, result)
//! so a report whose job waits can say whether any worker is there to take it. Noting is
//! bookkeeping: it never fails the claim, heartbeat or result it rides on (a failure is logged),
//! and it is throttled so an idle fleet's long-polls cost a read, not a write, most of the time.

pub use crate::storage::workers::{Seen, SeenWorker};

use crate::api_types::ClaimRequest;
use crate::storage::workers::{self as store, Contact, SelfReport};
use crate::storage::{Db, DbError};

/// What "recently" means on the report page: workers in touch within this many seconds.
pub const SEEN_WINDOW_SECS: u32 = 300;
/// A worker's row is rewritten at most this often (unless its self-description changes); well
/// under [`SEEN_WINDOW_SECS`], so a worker polling or heartbeating stays "seen".
pub const CONTACT_THROTTLE_SECS: u32 = 30;
/// Workers not seen for this long are forgotten (their rows deleted by the reaper).
pub const FORGET_AFTER_SECS: u32 = 7 * 24 * 3600;
/// Most workers the report page names.
pub const NAMED: i64 = 5;

/// Notes a claim poll and what the worker says about itself.
pub(super) async fn note_claim(db: &Db, req: &ClaimRequest) {
    let gpu = req.gpu.as_ref().filter(|g| !g.is_null());
    let report = SelfReport {
        name: &req.worker,
        gpu,
        no_gpu: req.no_gpu || gpu.is_none(),
        sandbox: &req.sandbox,
    };
    let noted = store::record_claim(db.pool(), &report, CONTACT_THROTTLE_SECS).await;
    log_failure(noted, &req.worker);
}

/// Notes a heartbeat or result of worker `name`.
pub(super) async fn note_contact(db: &Db, name: &str, contact: Contact) {
    let noted = store::record_contact(db.pool(), name, contact, CONTACT_THROTTLE_SECS).await;
    log_failure(noted, name);
}

fn log_failure(noted: Result<(), DbError>, worker: &str) {
    match noted {
        Ok(()) => {}
        Err(DbError::Unavailable(e)) => {
            tracing::debug!(worker, error = %e, "worker contact not noted: database down")
        }
        Err(e) => tracing::warn!(worker, error = %e, "worker contact not noted"),
    }
}

/// The workers seen within [`SEEN_WINDOW_SECS`], the [`NAMED`] most recent named.
#[tracing::instrument(name = "reproduce::seen_recently", skip_all)]
pub async fn seen_recently(db: &Db) -> Result<Seen, crate::app::Error> {
    Ok(store::seen_within(db.pool(), SEEN_WINDOW_SECS, NAMED).await?)
}

/// Forgets workers not seen for [`FORGET_AFTER_SECS`] (a reaper chore).
pub(super) async fn forget_stale(db: &Db) -> Result<u64, DbError> {
    store::forget_stale(db.pool(), FORGET_AFTER_SECS).await
}
